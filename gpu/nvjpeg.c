// nvjpeg.c: gpu/nvjpeg.h through nvJPEG's C API, reached with dlopen/dlsym. The few declarations it needs
// are written here (nvjpeg.h's C ABI as NVIDIA documents it), so no header is needed to build.
// The hardware backend decodes only in batches (nvjpegDecodeBatched) of the size it was initialised for: one
// size (HW_BATCH), set once, the last batch of a call padded; images it does not support, and every image when
// it does not open, go to a GPU-hybrid handle one by one (nvjpegDecode). Both write interleaved RGB
// (NVJPEG_OUTPUT_RGBI) at a pitch of 3w.
// The hardware backend's buffers are allocated for the largest image seen in each slot of the batch; a larger
// one frees and allocates them again, and cudaFree waits for the whole device, a step running beside included
// (test_gpu_jpeg's busy-GPU case; the figures are in bench/RESULTS.md). So
// nvjpegDecodeBatchedPreAllocate sizes every slot for the largest image seen so far, for one batch size (the
// state is initialised once, for HW_BATCH: a pre-allocation is for the batch size it names),
// at least PRE_MIN x PRE_MIN (a growth is itself a reallocation), rounded up (PRE_ROUND), at most PRE_MAX_PIXELS:
// past that, or where the library lacks the call, larger images cost that wait, nothing else.
// The pre-allocation is outside the memory plan: HW_BATCH slots of PRE_MIN² 4:4:4 pictures (gpu/README.md).
#include "gpu/nvjpeg.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/util.h"

typedef int nvjpegStatus_t;                       // 0: NVJPEG_STATUS_SUCCESS
typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef struct nvjpegJpegStream *nvjpegJpegStream_t;
typedef struct { unsigned char *channel[4]; size_t pitch[4]; } nvjpegImage_t;
enum { NVJPEG_BACKEND_GPU_HYBRID = 2, NVJPEG_BACKEND_HARDWARE = 3 };
enum { NVJPEG_OUTPUT_RGBI = 5 };
enum { NVJPEG_CSS_444 = 0 };                      // the largest planes: every subsampling fits
enum { HW_BATCH = 64, PRE_MIN = 1024, PRE_ROUND = 256, PRE_MAX_PIXELS = 2048 * 2048 };

static struct {
    nvjpegStatus_t (*create_ex)(int backend, void *dev_alloc, void *pinned_alloc, unsigned flags, nvjpegHandle_t *h);
    nvjpegStatus_t (*destroy)(nvjpegHandle_t);
    nvjpegStatus_t (*state_create)(nvjpegHandle_t, nvjpegJpegState_t *);
    nvjpegStatus_t (*state_destroy)(nvjpegJpegState_t);
    nvjpegStatus_t (*image_info)(nvjpegHandle_t, const unsigned char *, size_t, int *n_comp, int *subsampling,
                                 int *widths, int *heights);
    nvjpegStatus_t (*decode)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *, size_t, int format,
                             nvjpegImage_t *, cudaStream_t);
    nvjpegStatus_t (*batched_init)(nvjpegHandle_t, nvjpegJpegState_t, int batch, int max_cpu_threads, int format);
    nvjpegStatus_t (*batched)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *const *, const size_t *,
                              nvjpegImage_t *, cudaStream_t);
    nvjpegStatus_t (*stream_create)(nvjpegHandle_t, nvjpegJpegStream_t *);
    nvjpegStatus_t (*stream_destroy)(nvjpegJpegStream_t);
    nvjpegStatus_t (*stream_parse)(nvjpegHandle_t, const unsigned char *, size_t, int save_metadata, int save_stream,
                                   nvjpegJpegStream_t);
    nvjpegStatus_t (*batched_supported)(nvjpegHandle_t, nvjpegJpegStream_t, int *is_supported);
    nvjpegStatus_t (*prealloc)(nvjpegHandle_t, nvjpegJpegState_t, int batch, int w, int h, int css, int format);
} fn;

static int loaded = -1;                           // -1: not tried; 1: opened; 0: absent
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void) {
    static const char *const names[] = { "libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so" };
    void *h = NULL;
    for (int i = 0; i < 3 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    loaded = 0;
    if (!h) return;
    *(void **)&fn.create_ex = dlsym(h, "nvjpegCreateEx");
    *(void **)&fn.destroy = dlsym(h, "nvjpegDestroy");
    *(void **)&fn.state_create = dlsym(h, "nvjpegJpegStateCreate");
    *(void **)&fn.state_destroy = dlsym(h, "nvjpegJpegStateDestroy");
    *(void **)&fn.image_info = dlsym(h, "nvjpegGetImageInfo");
    *(void **)&fn.decode = dlsym(h, "nvjpegDecode");
    *(void **)&fn.batched_init = dlsym(h, "nvjpegDecodeBatchedInitialize");
    *(void **)&fn.batched = dlsym(h, "nvjpegDecodeBatched");
    *(void **)&fn.stream_create = dlsym(h, "nvjpegJpegStreamCreate");
    *(void **)&fn.stream_destroy = dlsym(h, "nvjpegJpegStreamDestroy");
    *(void **)&fn.stream_parse = dlsym(h, "nvjpegJpegStreamParse");
    *(void **)&fn.batched_supported = dlsym(h, "nvjpegDecodeBatchedSupported");
    *(void **)&fn.prealloc = dlsym(h, "nvjpegDecodeBatchedPreAllocate");   // optional
    loaded = fn.create_ex && fn.destroy && fn.state_create && fn.state_destroy && fn.image_info && fn.decode &&
             fn.batched_init && fn.batched && fn.stream_create && fn.stream_destroy && fn.stream_parse &&
             fn.batched_supported;
}

struct NvJpeg {
    nvjpegHandle_t     hw, gpu;               // hardware (NULL when it did not open) and GPU-hybrid handles
    nvjpegJpegState_t  hw_state, gpu_state;
    nvjpegJpegStream_t probe;                 // parses a file for batched_supported
    int                hw_batch;              // the batch size hw_state was initialised for (0: none)
    int                pre_w, pre_h;          // the size every slot's buffers were allocated for (0: none)
    uint8_t           *pad;                   // device memory the padding images decode into
    size_t             pad_bytes;
    // per call: which images go to the hardware, their pointers and lengths, their destinations
    int               *to_hw;
    const uint8_t    **hw_data;
    size_t            *hw_len;
    Image             *hw_img;                // (their sizes)
    nvjpegImage_t     *hw_out;
    int                cap;
};

void nvjpeg_close(NvJpeg *j) {
    if (!j) return;
    if (j->probe) fn.stream_destroy(j->probe);
    if (j->hw_state) fn.state_destroy(j->hw_state);
    if (j->gpu_state) fn.state_destroy(j->gpu_state);
    if (j->hw) fn.destroy(j->hw);
    if (j->gpu) fn.destroy(j->gpu);
    if (j->pad) cudaFree(j->pad);
    free(j->to_hw), free(j->hw_data), free(j->hw_len), free(j->hw_out), free(j->hw_img);
    free(j);
}

int nvjpeg_open(int hardware, NvJpeg **out, char *why, size_t size) {
    pthread_once(&load_once, load);
    *out = NULL;
    if (!loaded) {
        snprintf(why, size, "nvJPEG (libnvjpeg.so.13 or .12) is not on the library path");
        return -1;
    }
    NvJpeg *j = xcalloc(1, sizeof *j);
    nvjpegStatus_t st;
    if (hardware && fn.create_ex(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &j->hw) == 0) {
        if (fn.state_create(j->hw, &j->hw_state) || fn.stream_create(j->hw, &j->probe)) {
            if (j->probe) fn.stream_destroy(j->probe);
            if (j->hw_state) fn.state_destroy(j->hw_state);
            fn.destroy(j->hw);
            j->hw = NULL, j->hw_state = NULL, j->probe = NULL;
        }
    } else {
        j->hw = NULL;
    }
    if ((st = fn.create_ex(NVJPEG_BACKEND_GPU_HYBRID, NULL, NULL, 0, &j->gpu)) || (st = fn.state_create(j->gpu, &j->gpu_state))) {
        snprintf(why, size, "nvJPEG's GPU-hybrid decoder did not open (status %d)", st);
        nvjpeg_close(j);
        return -1;
    }
    if (!j->probe && fn.stream_create(j->gpu, &j->probe)) j->probe = NULL;
    *out = j;
    return 0;
}

const char *nvjpeg_backend(const NvJpeg *j) { return j->hw ? "hardware" : "GPU-hybrid"; }

int nvjpeg_takes(NvJpeg *j, const uint8_t *data, size_t n, long max_pixels, int *w, int *h) {
    int comp = 0, sub = 0, ws[4] = { 0 }, hs[4] = { 0 };
    if (fn.image_info(j->gpu, data, n, &comp, &sub, ws, hs) || (comp != 1 && comp != 3)) return 0;
    if (ws[0] < 1 || hs[0] < 1 || (long)ws[0] * hs[0] > max_pixels) return 0;
    *w = ws[0], *h = hs[0];
    return 1;
}

// Whether the hardware decodes this file (0 from batched_supported means it does).
static int hw_supports(NvJpeg *j, const uint8_t *data, size_t n) {
    int unsupported = 1;
    if (!j->hw || fn.stream_parse(j->hw, data, n, 0, 0, j->probe)) return 0;
    return fn.batched_supported(j->hw, j->probe, &unsupported) == 0 && unsupported == 0;
}

static void grow(NvJpeg *j, int n) {
    if (n <= j->cap) return;
    j->cap = n;
    j->to_hw = xrealloc(j->to_hw, sizeof *j->to_hw * n);
    j->hw_data = xrealloc(j->hw_data, sizeof *j->hw_data * n);
    j->hw_len = xrealloc(j->hw_len, sizeof *j->hw_len * n);
    j->hw_out = xrealloc(j->hw_out, sizeof *j->hw_out * n);
    j->hw_img = xrealloc(j->hw_img, sizeof *j->hw_img * n);
}

static nvjpegImage_t dest(const Image *im) {
    nvjpegImage_t d;
    memset(&d, 0, sizeof d);
    d.channel[0] = im->px;
    d.pitch[0] = (size_t)im->w * 3;
    return d;
}

static int round_up(int v, int to) { return (v + to - 1) / to * to; }

// The hardware state ready for images up to w x h: initialised once at HW_BATCH, every slot allocated for the
// largest size seen (see the top of the file); 0, or an nvJPEG status.
static nvjpegStatus_t hw_ready(NvJpeg *j, int w, int h) {
    nvjpegStatus_t st;
    if (!j->hw_batch) {
        if ((st = fn.batched_init(j->hw, j->hw_state, HW_BATCH, 1, NVJPEG_OUTPUT_RGBI))) return st;
        j->hw_batch = HW_BATCH;
    }
    if (!fn.prealloc || (w <= j->pre_w && h <= j->pre_h)) return 0;
    int pw = w > j->pre_w ? w : j->pre_w, ph = h > j->pre_h ? h : j->pre_h;
    pw = round_up(pw > PRE_MIN ? pw : PRE_MIN, PRE_ROUND), ph = round_up(ph > PRE_MIN ? ph : PRE_MIN, PRE_ROUND);
    if ((long)pw * ph > PRE_MAX_PIXELS) return 0;  // that large: nvJPEG reallocates as it needs
    if (fn.prealloc(j->hw, j->hw_state, HW_BATCH, pw, ph, NVJPEG_CSS_444, NVJPEG_OUTPUT_RGBI) == 0)
        j->pre_w = pw, j->pre_h = ph;              // (refused: as without the call)
    return 0;
}

// Device memory for the padding of a batch: one image of `bytes` (the batch's smallest), grown as needed.
static uint8_t *pad_memory(NvJpeg *j, size_t bytes) {
    if (bytes <= j->pad_bytes) return j->pad;
    if (j->pad) cudaFree(j->pad);
    j->pad = NULL, j->pad_bytes = 0;
    size_t want = bytes > (size_t)j->pre_w * j->pre_h * 3 ? bytes : (size_t)j->pre_w * j->pre_h * 3;
    if (cudaMalloc((void **)&j->pad, want) != cudaSuccess) {
        cudaGetLastError();
        j->pad = NULL;
        return NULL;
    }
    j->pad_bytes = want;
    return j->pad;
}

int nvjpeg_decode(NvJpeg *j, const uint8_t *const *data, const size_t *len, int n, Image *out, void *stream,
                  int *bad, char *why, size_t size) {
    cudaStream_t s = (cudaStream_t)stream;
    nvjpegStatus_t st;
    int m = 0;
    grow(j, round_up(n, HW_BATCH));                // (room for the padding)
    int max_w = 0, max_h = 0;
    for (int k = 0; k < n; k++) {
        // nvJPEG writes the size it parses, whatever out[k] holds: a file it reads otherwise than the caller's
        // header parse (damaged, crafted) is refused here, before anything is written
        int comp = 0, sub = 0, ws[4] = { 0 }, hs[4] = { 0 };
        if (fn.image_info(j->gpu, data[k], len[k], &comp, &sub, ws, hs) || ws[0] != out[k].w || hs[0] != out[k].h) {
            *bad = k;
            snprintf(why, size, "nvJPEG reads its size as %dx%d, not %dx%d", ws[0], hs[0], out[k].w, out[k].h);
            return -1;
        }
        j->to_hw[k] = hw_supports(j, data[k], len[k]);
        if (!j->to_hw[k]) continue;
        j->hw_data[m] = data[k], j->hw_len[m] = len[k], j->hw_img[m] = out[k], j->hw_out[m] = dest(&out[k]);
        if (out[k].w > max_w) max_w = out[k].w;
        if (out[k].h > max_h) max_h = out[k].h;
        m++;
    }
    if (m && (st = hw_ready(j, max_w, max_h))) {
        *bad = 0;
        snprintf(why, size, "nvJPEG's hardware decoder refused a batch of %d (status %d)", HW_BATCH, st);
        return -1;
    }
    for (int q0 = 0; q0 < m; q0 += HW_BATCH) {    // batches of HW_BATCH, the last padded
        int cnt = m - q0 < HW_BATCH ? m - q0 : HW_BATCH;
        if (cnt < HW_BATCH) {
            int small = q0;                        // the batch's smallest image, decoded again into `pad`
            for (int q = q0; q < q0 + cnt; q++)
                if ((long)j->hw_img[q].w * j->hw_img[q].h < (long)j->hw_img[small].w * j->hw_img[small].h) small = q;
            int sw = j->hw_img[small].w, sh = j->hw_img[small].h;
            uint8_t *pad = pad_memory(j, (size_t)sw * sh * 3);
            if (!pad) {
                *bad = -1;
                snprintf(why, size, "no device memory for the hardware decoder's padding (%dx%d)", sw, sh);
                return -1;
            }
            for (int q = q0 + cnt; q < q0 + HW_BATCH; q++) {
                j->hw_data[q] = j->hw_data[small], j->hw_len[q] = j->hw_len[small], j->hw_img[q] = (Image){ sw, sh, pad };
                j->hw_out[q] = dest(&j->hw_img[q]);
            }
        }
        // the hardware backend has been seen to start writing before the stream's earlier work ended: wait for it
        if (cudaStreamSynchronize(s) != cudaSuccess) {
            *bad = 0;
            snprintf(why, size, "the GPU failed before the decode: %s", cudaGetErrorString(cudaGetLastError()));
            return -1;
        }
        if ((st = fn.batched(j->hw, j->hw_state, (const unsigned char *const *)j->hw_data + q0, j->hw_len + q0,
                             j->hw_out + q0, s))) {
            *bad = -1;                             // some file of the batch: nvJPEG does not say which
            snprintf(why, size, "nvJPEG's hardware decoder failed on a batch of %d files (status %d)", cnt, st);
            return -1;
        }
    }
    for (int k = 0; k < n; k++) {
        if (j->to_hw[k]) continue;
        nvjpegImage_t d = dest(&out[k]);
        if ((st = fn.decode(j->gpu, j->gpu_state, data[k], len[k], NVJPEG_OUTPUT_RGBI, &d, s))) {
            *bad = k;
            snprintf(why, size, "nvJPEG could not decode it (status %d)", st);
            return -1;
        }
    }
    return 0;
}
