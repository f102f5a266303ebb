// test_gpu_topk26.c: YOLO26's NMS-free top-k on the GPU (gpu/topk26.cu through backend_gpu.topk_*) against
// the CPU reference (topk26_decode + topk26_select) detection for detection: count, order, boxes, scores and
// classes bit for bit, on random one-to-one heads with 0, 1, few and 30,000+ candidates, ties, nc 1/3/80,
// max_det below and above the anchor count, conf 0.001 and 0.25, agnostic; batches of several images. Also
// the CPU backend's topk_* entries against the same reference (no GPU needed), and that a second prepare
// after a release reuses the device's kept work (no allocation). Without CUDA or a GPU those tests skip.
// Legend: N images, A anchors, nc classes, C = 4 + nc channels, ld = C + 3.
#include "core/spec/backend.h"
#include "core/spec/topk26.h"
#include "test/nms_heads.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/device.h"
#include "gpu/model_gpu.h"
#endif

typedef struct {
    int    N, nc, img_h, A;
    float *buf;
    Map    head[3];
} Heads26;

// Box distances N(2, 1.5) cells (TIES: 0 or 3), class logits as nms_heads.h's kinds, 3 pad floats of -777.
static void heads26_make(Heads26 *h, int N, int img_h, int img_w, int nc, int kind, uint64_t seed) {
    int C = 4 + nc, ld = C + 3;
    size_t total = 0, off = 0;
    *h = (Heads26){ .N = N, .nc = nc, .img_h = img_h };
    for (int l = 0; l < 3; l++) total += (size_t)N * (img_h >> (3 + l)) * (img_w >> (3 + l)) * ld;
    h->buf = xmalloc(sizeof(float) * (total + 1));
    Rng r = rng_for(seed, kind, nc);
    for (int l = 0; l < 3; l++) {
        int H = img_h >> (3 + l), W = img_w >> (3 + l);
        h->head[l] = (Map){ h->buf + off, N, H, W, C, ld, 0, 0 };
        off += (size_t)N * H * W * ld;
        h->A += H * W;
    }
    for (int n = 0; n < N; n++) {
        int a = 0;
        for (int l = 0; l < 3; l++)
            for (int y = 0; y < h->head[l].H; y++)
                for (int x = 0; x < h->head[l].W; x++, a++) {
                    float *px = map_at(h->head[l], n, y, x);
                    for (int k = 0; k < 4; k++) px[k] = kind == HEAD_TIES ? 3.0f * rng_int(&r, 2) : (float)(2 + 1.5 * rng_normal(&r));
                    for (int c = 0; c < nc; c++) px[4 + c] = head_class_logit(&r, kind, a, c, nc);
                    for (int k = C; k < ld; k++) px[k] = -777.0f;   // pad: must not be read
                }
    }
}

// The reference's detections of image n as Det rows; returns their count.
static int reference(const Heads26 *h, int n, const Topk26Opts *o, Det *out) {
    Head26 hd;
    for (int l = 0; l < 3; l++) hd.box[l] = map_slice(h->head[l], 0, 4), hd.cls[l] = map_slice(h->head[l], 4, h->nc);
    float *boxes = xmalloc(sizeof(float) * 4 * h->A), *scores = xmalloc(sizeof(float) * (size_t)h->A * h->nc);
    Topk26Item *work = xmalloc(sizeof(Topk26Item) * topk26_work_items(h->A, h->nc, o->max_det));
    Det26 *d = xmalloc(sizeof(Det26) * (h->A + 1));
    topk26_decode(&hd, n, h->img_h, boxes, scores);
    int nd = topk26_select(boxes, scores, h->A, h->nc, o, work, d);
    for (int i = 0; i < nd; i++) out[i] = (Det){ d[i].box[0], d[i].box[1], d[i].box[2], d[i].box[3], d[i].score, d[i].cls };
    free(boxes); free(scores); free(work); free(d);
    return nd;
}

// Backend be's detections (head maps at dh: host or device memory) against the reference, image by image.
// Returns the number of mismatching images (printing the first difference of each); *kept sums them.
static int compare(const Backend *be, void *ctx, const Heads26 *h, const Map dh[3], const Topk26Opts *o, const char *what,
                   int *kept, double *seconds) {
    int D = o->max_det, bad = 0;
    *kept = 0;
    Det *got = xmalloc(sizeof(Det) * ((size_t)h->N * D + 1)), *want = xmalloc(sizeof(Det) * (h->A + 1));
    int *nd = xmalloc(sizeof(int) * h->N);
    void *prep = be->val.topk_prepare(ctx, h->N, h->A, h->nc, D);
    if (!prep) { printf("    %s: topk_prepare refused\n", what); free(got); free(want); free(nd); return h->N; }
    be->val.topk_detect(ctx, prep, dh, h->img_h, h->N, o, got, nd);   // warm-up, then timed
    double t0 = now_seconds();
    be->val.topk_detect(ctx, prep, dh, h->img_h, h->N, o, got, nd);
    if (seconds) *seconds = now_seconds() - t0;
    for (int n = 0; n < h->N; n++) {
        int nw = reference(h, n, o, want);
        *kept += nw;
        bad += dets_differ(what, n, got + (size_t)n * D, nd[n], want, nw);
    }
    be->val.topk_release(ctx, prep);
    free(got); free(want); free(nd);
    return bad;
}

typedef struct { int kind, nc, img_h, img_w, N; Topk26Opts o; int min_kept, max_kept; } Case;

static const Case CASES[] = {
    { HEAD_NONE, 3, 96, 128, 2, { 300, 0, 0.001f }, 0, 0 },
    { HEAD_ONE, 1, 96, 128, 3, { 300, 0, 0.001f }, 3, 3 },
    { HEAD_ONE, 80, 96, 128, 3, { 300, 0, 0.001f }, 3, 3 },
    { HEAD_FEW, 3, 160, 96, 2, { 300, 0, 0.001f }, 4, 20 },
    { HEAD_FEW, 80, 160, 96, 2, { 300, 0, 0.25f }, 2, 20 },
    { HEAD_MANY, 80, 640, 640, 2, { 300, 0, 0.001f }, 600, 600 },   // 8,400 anchors, 672,000 pairs each
    { HEAD_MANY, 80, 672, 480, 3, { 300, 0, 0.001f }, 900, 900 },   // a rect shape
    { HEAD_MANY, 3, 64, 64, 2, { 300, 0, 0.001f }, 2, 168 },        // max_det above A = 84
    { HEAD_MANY, 3, 320, 256, 3, { 7, 0, 0.001f }, 21, 21 },
    { HEAD_MANY, 80, 320, 256, 2, { 300, 1, 0.001f }, 600, 600 },   // agnostic
    { HEAD_MANY, 80, 320, 256, 2, { 300, 0, 0.25f }, 2, 600 },
    { HEAD_TIES, 1, 128, 96, 2, { 300, 0, 0.001f }, 2, 600 },
    { HEAD_TIES, 3, 128, 96, 2, { 300, 0, 0.001f }, 2, 600 },
    { HEAD_TIES, 80, 128, 96, 2, { 300, 1, 0.001f }, 2, 600 },
};
enum { N_CASES = sizeof CASES / sizeof CASES[0] };

static void case_name(const Case *c, char *s, size_t n) {
    snprintf(s, n, "%s nc %d %dx%d N %d max_det %d agnostic %d conf %g", head_kind_name[c->kind], c->nc, c->img_w, c->img_h,
             c->N, c->o.max_det, c->o.agnostic, c->o.conf);
}

static void test_cpu_backend(void) {   // the CPU twin of the entries: the reference, through the table
    for (int i = 0; i < N_CASES; i++) {
        const Case *c = &CASES[i];
        if (c->img_h * c->img_w > 320 * 320) continue;   // the large ones belong to the GPU test
        Heads26 h;
        heads26_make(&h, c->N, c->img_h, c->img_w, c->nc, c->kind, 26 + i);
        char what[160];
        case_name(c, what, sizeof what);
        int kept;
        CHECK(compare(&backend_cpu, NULL, &h, h.head, &c->o, what, &kept, NULL) == 0, "%s: backend_cpu differs", what);
        CHECK(kept >= c->min_kept && kept <= c->max_kept, "%s: %d kept, meant [%d, %d]", what, kept, c->min_kept, c->max_kept);
        free(h.buf);
    }
}

#define GPU_TESTS(X) X(test_cases) X(test_kept) X(test_speed)

#define CPU_TESTS(X) X(test_cpu_backend)
#include "test/gpu_harness.h"
#ifdef USE_CUDA

// h's maps copied to the device (free dh[0].data's block with cudaFree(*block)).
static void to_device(const Heads26 *h, Map dh[3], float **block) {
    size_t floats = 0;
    for (int l = 0; l < 3; l++) floats += map_pixels(h->head[l]) * h->head[l].ld;
    checkCuda(cudaMalloc((void **)block, floats * sizeof(float)));
    checkCuda(cudaMemcpy(*block, h->buf, floats * sizeof(float), cudaMemcpyHostToDevice));
    for (int l = 0; l < 3; l++) dh[l] = h->head[l], dh[l].data = *block + (h->head[l].data - h->buf);
}

static int gpu_case(const Case *c, uint64_t seed, int *kept, double *seconds) {
    Heads26 h;
    heads26_make(&h, c->N, c->img_h, c->img_w, c->nc, c->kind, seed);
    Map dh[3];
    float *block;
    to_device(&h, dh, &block);
    char what[160];
    case_name(c, what, sizeof what);
    int bad = compare(&backend_gpu, &dev, &h, dh, &c->o, what, kept, seconds);
    checkCuda(cudaFree(block));
    free(h.buf);
    return bad;
}

static void test_cases(void) {
    NEED_GPU();
    for (int i = 0; i < N_CASES; i++) {
        const Case *c = &CASES[i];
        char what[160];
        case_name(c, what, sizeof what);
        int kept;
        CHECK(gpu_case(c, 26 + i, &kept, NULL) == 0, "%s: GPU and CPU differ", what);
        CHECK(kept >= c->min_kept && kept <= c->max_kept, "%s: %d kept, meant [%d, %d]", what, kept, c->min_kept, c->max_kept);
    }
}

static void test_kept(void) {      // prepare, release, prepare again: the same work, no allocation
    NEED_GPU();
    void *a = backend_gpu.val.topk_prepare(&dev, 4, 8400, 80, 300);
    CHECK(a != NULL, "topk_prepare refused");
    backend_gpu.val.topk_release(&dev, a);
    size_t allocs = gpu_alloc_count();
    void *b = backend_gpu.val.topk_prepare(&dev, 3, 6000, 80, 100);   // smaller: fits what was kept
    CHECK(b == a && gpu_alloc_count() == allocs, "the second prepare allocated %zu times", gpu_alloc_count() - allocs);
    backend_gpu.val.topk_release(&dev, b);
    NmsOptions o = nms_val_options();
    void *n1 = backend_gpu.val.nms_prepare(&dev, 4, 8400, 80, &o);
    backend_gpu.val.nms_release(&dev, n1);
    allocs = gpu_alloc_count();
    void *n2 = backend_gpu.val.nms_prepare(&dev, 4, 8400, 80, &o);
    CHECK(n2 == n1 && gpu_alloc_count() == allocs, "NMS: the second prepare allocated %zu times", gpu_alloc_count() - allocs);
    backend_gpu.val.nms_release(&dev, n2);
}

static void test_speed(void) {     // printed; the pass condition is equality
    NEED_GPU();
    Case c = { HEAD_MANY, 80, 640, 640, 8, { 300, 0, 0.001f }, 2400, 2400 };
    int kept;
    double s = 0;
    CHECK(gpu_case(&c, 5, &kept, &s) == 0, "GPU and CPU differ");
    printf("    640 px, nc 80, 8 images: GPU top-k %.3f ms per image (%d kept)\n", s * 1e3 / 8, kept);
}

GPU_MAIN()
#endif
