// test_gpu_jpeg.c: JPEG decoding on the GPU through nvJPEG (gpu/nvjpeg.h, issue 37) against the host's
// libjpeg-turbo, on coco128's photographs: the same sizes, and pixels within a few levels (nvJPEG's IDCT and
// chroma upsampling are its own, so the bytes are close, not equal); the same for those photographs re-encoded
// grey and progressive, as the loader hands them to the GPU too; a damaged file is refused or reported, never a
// crash; the decoder does not wait for other streams' work, running or queued. It prints each backend's decoding rate.
// Skips without CUDA, a GPU, nvJPEG or coco128.
// Legend: n images; d a pixel's absolute difference from the host's.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/dataset.h"
#include "io/image.h"
#include "test/test.h"

#define GPU_TESTS(X) X(test_coco128_close_to_host) X(test_grey_and_progressive) X(test_damaged_files) \
                     X(test_decode_beside_busy_gpu) X(test_decode_beside_queued_work)
#define GPU_ARENAS { 0 }
#include "test/gpu_harness.h"

#ifdef USE_CUDA
#include "gpu/nvjpeg.h"
#include "test/jpeg_encode.h"

enum { MAX_FILES = 256 };

typedef struct { uint8_t *bytes; size_t n; const char *name; } File;

static int read_file(const char *path, File *f) {   // image_read_file's bytes (freed with free)
    Err err;
    f->name = path;
    return image_read_file(path, &f->bytes, &f->n, &err);
}

// coco128's first JPEG files into f (at most max); their count.
static int coco_files(const Dataset *ds, File *f, int max) {
    int n = 0;
    for (int i = 0; i < ds->n && n < max; i++) {
        const char *p = ds->s[i].image;
        size_t L = strlen(p);
        if (L > 4 && !strcmp(p + L - 4, ".jpg") && read_file(p, &f[n]) == 0) n++;
    }
    return n;
}

// Decode files f[0..n) with j into host images (their sizes from nvjpeg_takes); the seconds the decoding took
// (reps passes, after one untimed), or -1 with the reason printed.
static double gpu_decode(NvJpeg *j, const File *f, int n, Image *host, int reps) {
    const uint8_t **data = xmalloc(sizeof *data * n);
    size_t *len = xmalloc(sizeof *len * n);
    Image *d = xcalloc(n, sizeof *d);
    double secs = -1;
    for (int k = 0; k < n; k++) {
        data[k] = f[k].bytes, len[k] = f[k].n;
        if (!nvjpeg_takes(j, f[k].bytes, f[k].n, 1L << 26, &d[k].w, &d[k].h)) { printf("  # not taken: %s\n", f[k].name); goto out; }
        if (cudaMalloc((void **)&d[k].px, (size_t)d[k].w * d[k].h * 3) != cudaSuccess) goto out;
    }
    char why[256];
    int bad = -1;
    for (int r = 0; r <= reps; r++) {
        double t0 = now_seconds();
        if (nvjpeg_decode(j, data, len, n, d, dev.stream, &bad, why, sizeof why)) {
            printf("  # %s: %s\n", bad >= 0 ? f[bad].name : "?", why);
            goto out;
        }
        if (cudaStreamSynchronize(dev.stream) != cudaSuccess) { printf("  # the decode failed on the GPU\n"); goto out; }
        if (r == 1) secs = 0;
        if (r >= 1) secs += now_seconds() - t0;
    }
    for (int k = 0; k < n; k++) {
        host[k] = image_new(d[k].w, d[k].h, 0);
        cudaMemcpy(host[k].px, d[k].px, (size_t)d[k].w * d[k].h * 3, cudaMemcpyDeviceToHost);
    }
    if (reps == 0) secs = 0;
out:
    for (int k = 0; k < n; k++) if (d[k].px) cudaFree(d[k].px);
    free(d), free(data), free(len);
    return secs;
}

// got[0..n) against want, the host's decodes of files f: the host's sizes, mean |d| per image at most 3 levels
// and over the set at most 1.5, and under 2% of the values more than 16 levels off (a wrong layout or pitch is
// far past all); a line of figures headed `what`.
static void check_close(const char *what, const File *f, const Image *got, const Image *want, int n) {
    double sum = 0, worst = 0;
    size_t values = 0, far = 0;
    for (int k = 0; k < n; k++) {
        CHECK(got[k].w == want[k].w && got[k].h == want[k].h, "%s: %dx%d on the GPU, %dx%d on the host", f[k].name,
              got[k].w, got[k].h, want[k].w, want[k].h);
        if (got[k].w != want[k].w || got[k].h != want[k].h) continue;
        size_t m = (size_t)want[k].w * want[k].h * 3;
        double s = 0;
        for (size_t i = 0; i < m; i++) {
            int d = abs((int)got[k].px[i] - want[k].px[i]);
            s += d, far += d > 16;
        }
        sum += s, values += m;
        worst = fmax(worst, s / m);
        CHECK(s / m <= 3.0, "%s (%s): mean |d| %.2f levels from libjpeg-turbo", f[k].name, what, s / m);
    }
    if (!values) return;
    printf("  # %s: mean |d| %.3f levels (worst image %.3f), %.3f%% of values more than 16 off\n", what,
           sum / values, worst, 100.0 * far / values);
    CHECK(sum / values <= 1.5 && far <= values / 50, "%s: mean |d| %.3f, %zu values far off", what, sum / values, far);
}

// Every coco128 JPEG decoded by each backend, close to the host's decode (check_close).
static void test_coco128_close_to_host(void) {
    NEED_GPU();
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    static File f[MAX_FILES];
    int n = coco_files(&coco, f, MAX_FILES);
    CHECK(n > 100, "only %d JPEG files read from coco128", n);
    Image *want = xcalloc(n, sizeof *want), *got = xcalloc(n, sizeof *got);
    double t0 = now_seconds();
    for (int k = 0; k < n && !t_failed_now; k++)
        CHECK(image_decode_mem(f[k].bytes, f[k].n, f[k].name, &want[k], &err) == 0, "%s", err.msg);
    printf("  # host (libjpeg-turbo, one thread): %.0f images/s\n", n / (now_seconds() - t0));
    int opened = 0;
    for (int hw = 1; hw >= 0 && !t_failed_now; hw--) {
        NvJpeg *j;
        char why[256];
        if (nvjpeg_open(hw, &j, why, sizeof why)) { printf("  # %s\n", why); continue; }
        if (hw && strcmp(nvjpeg_backend(j), "hardware")) printf("  # no hardware decoder here\n");
        opened++;
        double secs = gpu_decode(j, f, n, got, 5);
        CHECK(secs >= 0, "%s: the decode failed", nvjpeg_backend(j));
        if (secs > 0) printf("  # nvJPEG %s: %.0f images/s (%d a call)\n", nvjpeg_backend(j), 5.0 * n / secs, n);
        if (secs >= 0) check_close(nvjpeg_backend(j), f, got, want, n);
        for (int k = 0; k < n; k++) image_free(&got[k]);
        nvjpeg_close(j);
    }
    if (!opened) printf("  # no nvJPEG: nothing compared\n");
    for (int k = 0; k < n; k++) image_free(&want[k]), free(f[k].bytes);
    free(want), free(got);
    dataset_free(&coco);
    if (!opened && !t_failed_now) SKIP("no nvJPEG on this machine");
}

enum { PHOTOS = 6 };                               // coco128 photographs test_grey_and_progressive re-encodes
enum { BASELINE, GREY, PROGRESSIVE, PROGRESSIVE_GREY, FORMS };
static const char *const form_names[FORMS] = { "baseline colour", "grey", "progressive colour", "progressive grey" };

// im re-encoded in memory at quality 90 in `form` (test/jpeg_encode.h); named after `from`.
static File encode(const Image *im, int form, const char *from) {
    size_t len;
    uint8_t *buf = jpeg_encode_mem(im, 90, form == GREY || form == PROGRESSIVE_GREY,
                                   form == PROGRESSIVE || form == PROGRESSIVE_GREY, &len);
    const char *base = strrchr(from, '/');
    char name[256];
    snprintf(name, sizeof name, "%s, %s", base ? base + 1 : from, form_names[form]);
    return (File){ buf, len, xstrdup(name) };
}

// Whether every pixel of im has R = G = B.
static int is_grey(const Image *im) {
    for (size_t i = 0; i < (size_t)im->w * im->h; i++)
        if (im->px[3 * i] != im->px[3 * i + 1] || im->px[3 * i] != im->px[3 * i + 2]) return 0;
    return 1;
}

// The loader defers every JPEG of 1 or 3 components to the GPU (io/loader.c deferrable; nvjpeg_takes is not
// asked), grey and progressive files too, so they must decode there as on the host. PHOTOS of coco128 re-encoded
// in each form (encode); per backend, each form in a call of its own, then all four forms in one call,
// baseline and progressive side by side, where the hardware handle sends what its decoder does not support
// (progressive at least) to the GPU-hybrid one (gpu/nvjpeg.c); each close to the host's decode of the same bytes
// (check_close). The host decodes a grey file to RGB with its grey value in all three channels (libjpeg's
// grey-to-RGB), and the GPU's decode is compared with that layout, so it must do the same.
static void test_grey_and_progressive(void) {
    NEED_GPU();
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    File src[PHOTOS], enc[FORMS * PHOTOS] = { { 0 } }, mix[FORMS * PHOTOS];   // enc[q * PHOTOS + p]: photo p, form q
    Image want[FORMS * PHOTOS] = { { 0 } }, got[FORMS * PHOTOS] = { { 0 } }, mix_want[FORMS * PHOTOS];
    int n = coco_files(&coco, src, PHOTOS);
    CHECK(n == PHOTOS, "only %d JPEG files read from coco128", n);
    for (int p = 0; p < n && !t_failed_now; p++) {
        Image im;
        CHECK(image_decode_mem(src[p].bytes, src[p].n, src[p].name, &im, &err) == 0, "%s", err.msg);
        if (t_failed_now) break;
        for (int q = 0; q < FORMS; q++) {
            File *e = &enc[q * PHOTOS + p];
            *e = encode(&im, q, src[p].name);
            CHECK(image_decode_mem(e->bytes, e->n, e->name, &want[q * PHOTOS + p], &err) == 0, "%s", err.msg);
            if (!t_failed_now && (q == GREY || q == PROGRESSIVE_GREY))
                CHECK(is_grey(&want[q * PHOTOS + p]), "%s: the host's decode is not R = G = B", e->name);
        }
        image_free(&im);
    }
    for (int k = 0; k < FORMS * PHOTOS; k++)        // interleaved: photo p's four forms side by side
        mix[k] = enc[k % FORMS * PHOTOS + k / FORMS], mix_want[k] = want[k % FORMS * PHOTOS + k / FORMS];
    int opened = 0;
    for (int hw = 1; hw >= 0 && !t_failed_now; hw--) {
        NvJpeg *j;
        char why[256], what[96];
        if (nvjpeg_open(hw, &j, why, sizeof why)) { printf("  # %s\n", why); continue; }
        if (hw && strcmp(nvjpeg_backend(j), "hardware")) printf("  # no hardware decoder here\n");
        opened++;
        for (int q = 0; q <= FORMS; q++) {            // q == FORMS: the four forms in one call
            const File *f = q < FORMS ? enc + q * PHOTOS : mix;
            const Image *w = q < FORMS ? want + q * PHOTOS : mix_want;
            int m = q < FORMS ? PHOTOS : FORMS * PHOTOS;
            snprintf(what, sizeof what, "%s, %s", nvjpeg_backend(j),
                     q < FORMS ? form_names[q] : "the four forms in one call");
            double secs = gpu_decode(j, f, m, got, 0);   // (a file nvjpeg_takes refuses fails here)
            CHECK(secs >= 0, "%s: the decode failed", what);
            if (secs >= 0) check_close(what, f, got, w, m);
            for (int k = 0; k < m; k++) image_free(&got[k]);
        }
        nvjpeg_close(j);
    }
    for (int k = 0; k < FORMS * PHOTOS; k++) free(enc[k].bytes), free((void *)enc[k].name), image_free(&want[k]);
    for (int p = 0; p < n; p++) free(src[p].bytes);
    dataset_free(&coco);
    if (!opened && !t_failed_now) SKIP("no nvJPEG on this machine");
}

// A truncated file and one with its entropy-coded data overwritten: refused by nvjpeg_takes, or the decode
// returns -1 (or writes some pixels); the process goes on and the decoder still decodes a good file after.
static void test_damaged_files(void) {
    NEED_GPU();
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    NvJpeg *j;
    char why[256];
    if (nvjpeg_open(1, &j, why, sizeof why)) { dataset_free(&coco); SKIP("%s", why); }
    File good;
    CHECK(read_file(coco.s[0].image, &good) == 0, "cannot read %s", coco.s[0].image);
    File cut = { xmalloc(good.n), good.n / 3, "truncated" }, junk = { xmalloc(good.n), good.n, "overwritten" };
    memcpy(cut.bytes, good.bytes, cut.n);
    memcpy(junk.bytes, good.bytes, good.n);
    for (size_t i = good.n / 2; i + 2 < good.n; i++) junk.bytes[i] = (uint8_t)(i * 7919u >> 3);
    const File *tries[2] = { &cut, &junk };
    for (int t = 0; t < 2; t++) {
        int w, h, bad;
        if (!nvjpeg_takes(j, tries[t]->bytes, tries[t]->n, 1L << 26, &w, &h)) { printf("  # %s: refused\n", tries[t]->name); continue; }
        uint8_t *px;
        CHECK(cudaMalloc((void **)&px, (size_t)w * h * 3) == cudaSuccess, "cudaMalloc");
        Image d = { w, h, px };
        const uint8_t *data = tries[t]->bytes;
        int rc = nvjpeg_decode(j, &data, &tries[t]->n, 1, &d, dev.stream, &bad, why, sizeof why);
        cudaError_t ce = cudaStreamSynchronize(dev.stream);
        printf("  # %s: taken, decode %s%s\n", tries[t]->name, rc ? "refused: " : "ran", rc ? why : "");
        CHECK(ce == cudaSuccess, "%s: the GPU failed: %s", tries[t]->name, cudaGetErrorString(ce));
        cudaFree(px);
    }
    Image got;
    CHECK(gpu_decode(j, &good, 1, &got, 0) >= 0, "the good file no longer decodes after the damaged ones");
    if (!t_failed_now) image_free(&got);
    free(good.bytes), free(cut.bytes), free(junk.bytes);
    nvjpeg_close(j);
    dataset_free(&coco);
}

// Releases device_inject_hang's kernel after `arg` seconds (device_set_wait_watch(NULL) sets its flag).
static void *release_after(void *arg) {
    struct timespec ts = { (time_t)*(const double *)arg, 0 };
    nanosleep(&ts, NULL);
    device_set_wait_watch(NULL);
    return NULL;
}

// Files f[0..n) ready to decode together: their bytes and lengths as nvjpeg_decode takes them, and device memory
// for each at the size nvjpeg_takes reads (a failed check when it refuses one or memory runs out).
typedef struct { int n; const uint8_t **data; size_t *len; Image *d; } Decodes;

static Decodes decodes_for(NvJpeg *j, const File *f, int n) {
    Decodes x = { n, xmalloc(sizeof *x.data * n), xmalloc(sizeof *x.len * n), xcalloc(n, sizeof *x.d) };
    for (int k = 0; k < n && !t_failed_now; k++) {
        x.data[k] = f[k].bytes, x.len[k] = f[k].n;
        CHECK(nvjpeg_takes(j, f[k].bytes, f[k].n, 1L << 26, &x.d[k].w, &x.d[k].h), "%s: not taken", f[k].name);
        CHECK(cudaMalloc((void **)&x.d[k].px, (size_t)x.d[k].w * x.d[k].h * 3) == cudaSuccess, "cudaMalloc");
    }
    return x;
}

static void decodes_free(Decodes *x) {
    for (int k = 0; k < x->n; k++) cudaFree(x->d[k].px);
    free(x->d), free(x->data), free(x->len);
}

// The hardware decoder beside a busy GPU: with one block spinning on another stream (as a step keeps the GPU
// busy), calls whose slots get other, larger files (the buffers nvJPEG sizes per slot) and another count each
// time return in their own time, not once the other stream's work ends. nvJPEG reallocating a slot's buffers
// calls cudaFree, which waits for the whole device (issue 37).
static void test_decode_beside_busy_gpu(void) {
    NEED_GPU();
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    NvJpeg *j;
    char why[256];
    if (nvjpeg_open(1, &j, why, sizeof why)) { dataset_free(&coco); SKIP("%s", why); }
    if (strcmp(nvjpeg_backend(j), "hardware")) { nvjpeg_close(j); dataset_free(&coco); SKIP("no hardware decoder here"); }
    static File f[MAX_FILES];
    int n = coco_files(&coco, f, MAX_FILES);
    CHECK(n > 100, "only %d JPEG files read from coco128", n);
    // sorted small to large, so each call below puts larger files into the slots than the call before
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && (long)f[b].n < (long)f[b - 1].n; b--) {
            File t = f[b]; f[b] = f[b - 1], f[b - 1] = t;
        }
    Decodes x = decodes_for(j, f, n);
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreateWithFlags");
    int bad;
    CHECK(nvjpeg_decode(j, x.data, x.len, n / 4, x.d, s, &bad, why, sizeof why) == 0, "%s", why);   // the smallest quarter
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "the first decode failed on the GPU");
    const double hold = 3.0;                       // the spinning block's seconds
    device_inject_hang(&dev);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, release_after, (void *)&hold) == 0, "pthread_create");
    double t0 = now_seconds(), took = 0;
    for (int c = 1; c <= 3 && !t_failed_now; c++) {   // larger files in every slot, and another count, each call
        int first = c * n / 4 - 8 * c, count = n - first < n / 2 - 3 * c ? n - first : n / 2 - 3 * c;
        CHECK(nvjpeg_decode(j, x.data + first, x.len + first, count, x.d + first, s, &bad, why, sizeof why) == 0, "%s",
              why);
        CHECK(cudaStreamSynchronize(s) == cudaSuccess, "the decode failed on the GPU");
    }
    took = now_seconds() - t0;
    pthread_join(th, NULL);
    CHECK(cudaStreamSynchronize(dev.stream) == cudaSuccess, "the spinning kernel failed");
    printf("  # three calls beside a spinning block: %.3f s (it spun %.1f s)\n", took, hold);
    CHECK(took < hold / 2, "the decodes took %.2f s: they waited for the other stream's kernel (%.1f s)", took, hold);
    cudaStreamDestroy(s);
    decodes_free(&x);
    for (int k = 0; k < n; k++) free(f[k].bytes);
    nvjpeg_close(j);
    dataset_free(&coco);
}

// The decode beside work queued on other streams, as a step replayed as a CUDA graph queues hundreds of launches:
// BUSY streams made before the decoder's and the decode's own, each with LAUNCHES kernels queued (a block an SM,
// spinning), take every hardware queue CUDA gives a process by default (8); the decode of every coco128 photograph
// must end long before that work does, as it does beside one spinning block. gpu/device.cu raises the queues to 32
// (CUDA_DEVICE_MAX_CONNECTIONS); with the variable set to 8 this test fails (issue 37).
static void test_decode_beside_queued_work(void) {
    NEED_GPU();
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    enum { BUSY = 8, LAUNCHES = 60 };
    cudaStream_t busy[BUSY], s;
    for (int k = 0; k < BUSY; k++)
        CHECK(cudaStreamCreateWithFlags(&busy[k], cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreateWithFlags");
    NvJpeg *j;                                     // nvJPEG's streams, and the decode's, made after the busy ones
    char why[256];
    if (nvjpeg_open(1, &j, why, sizeof why)) {
        for (int k = 0; k < BUSY; k++) cudaStreamDestroy(busy[k]);
        dataset_free(&coco);
        SKIP("%s", why);
    }
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreateWithFlags");
    static File f[MAX_FILES];
    int n = coco_files(&coco, f, MAX_FILES);
    CHECK(n > 100, "only %d JPEG files read from coco128", n);
    Decodes x = decodes_for(j, f, n);
    int bad, sms = 0;
    CHECK(nvjpeg_decode(j, x.data, x.len, n, x.d, s, &bad, why, sizeof why) == 0, "%s", why);   // sizes the decoder
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "the first decode failed on the GPU");
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev.id) == cudaSuccess, "the SM count");
    double t0 = now_seconds(), took = 0, busy_s = 0;
    for (int k = 0; k < BUSY && !t_failed_now; k++) device_queue_spins(&dev, busy[k], LAUNCHES, sms, 0.002);
    double t1 = now_seconds();
    if (!t_failed_now) {
        CHECK(nvjpeg_decode(j, x.data, x.len, n, x.d, s, &bad, why, sizeof why) == 0, "%s", why);
        CHECK(cudaStreamSynchronize(s) == cudaSuccess, "the decode failed on the GPU");
        took = now_seconds() - t1;
    }
    for (int k = 0; k < BUSY; k++) CHECK(cudaStreamSynchronize(busy[k]) == cudaSuccess, "the queued work failed");
    busy_s = now_seconds() - t0;
    const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    printf("  # %d files decoded beside %d streams of queued work: %.3f s (the work: %.3f s; CUDA_DEVICE_MAX_CONNECTIONS %s)\n",
           n, BUSY, took, busy_s, conn ? conn : "unset");
    CHECK(took < busy_s / 2, "the decode took %.3f s of the queued work's %.3f s: it waited behind it", took, busy_s);
    for (int k = 0; k < BUSY; k++) cudaStreamDestroy(busy[k]);
    cudaStreamDestroy(s);
    decodes_free(&x);
    for (int k = 0; k < n; k++) free(f[k].bytes);
    nvjpeg_close(j);
    dataset_free(&coco);
}

GPU_MAIN()
#endif
