// test_gpu_nms.c: the CUDA decode + NMS (gpu/nms.cu, backend_gpu.nms_*) against the CPU reference
// (nms_decode + nms_run) detection for detection: count, order, boxes, scores and classes bit for bit,
// on random heads with 0, 1, few and > 30,000 candidates, ties, nc 1/3/80, max_det hit, best-class and
// agnostic modes, batches of several images; and its time on a 640 px, nc 80 batch of 8.
// Without CUDA, or without a GPU, every test skips. Legend: N images, A anchors, nc classes.
#include "core/spec/backend.h"
#include "core/spec/nms.h"
#include "test/nms_heads.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/device.h"
#include "gpu/model_gpu.h"
#endif

#define GPU_TESTS(X) X(test_counts) X(test_many) X(test_ties) X(test_modes) X(test_speed)

#include "test/gpu_harness.h"
#ifdef USE_CUDA

// Heads h on the GPU through backend_gpu, each image against the CPU reference. Returns the number of
// mismatching images (printing the first difference of each); *kept sums the detections.
static int compare(const Heads *h, const NmsOptions *o, const char *what, int *kept, double *seconds) {
    size_t floats = 0;
    for (int l = 0; l < 3; l++) floats += map_pixels(h->head[l]) * h->head[l].ld;
    float *d_buf;
    checkCuda(cudaMalloc((void **)&d_buf, floats * sizeof(float)));
    checkCuda(cudaMemcpy(d_buf, h->buf, floats * sizeof(float), cudaMemcpyHostToDevice));
    Map dh[3];
    for (int l = 0; l < 3; l++) dh[l] = h->head[l], dh[l].data = d_buf + (h->head[l].data - h->buf);
    int D = o->max_det, bad = 0;
    Det *got = xmalloc(sizeof(Det) * ((size_t)h->N * D + 1)), *want = xmalloc(sizeof(Det) * ((size_t)h->A * h->nc + D + 1));
    int *nd = xmalloc(sizeof(int) * h->N);
    void *prep = backend_gpu.val.nms_prepare(&dev, h->N, h->A, h->nc, o);
    if (!prep) { printf("    %s: nms_prepare refused\n", what); free(got); free(want); free(nd); cudaFree(d_buf); return h->N; }
    backend_gpu.val.nms_detect(&dev, prep, dh, h->strides, h->N, got, nd);   // warm-up, then timed
    double t0 = now_seconds();
    backend_gpu.val.nms_detect(&dev, prep, dh, h->strides, h->N, got, nd);
    if (seconds) *seconds = now_seconds() - t0;
    float *boxes = xmalloc(sizeof(float) * 4 * h->A), *scores = xmalloc(sizeof(float) * (size_t)h->A * h->nc);
    *kept = 0;
    for (int n = 0; n < h->N; n++) {
        nms_decode(h->head, h->strides, 3, n, h->nc, boxes, scores);
        int nw = nms_run(boxes, scores, h->A, h->nc, o, want);
        *kept += nw;
        bad += dets_differ(what, n, got + (size_t)n * D, nd[n], want, nw);
    }
    backend_gpu.val.nms_release(&dev, prep);
    free(got); free(want); free(nd); free(boxes); free(scores);
    checkCuda(cudaFree(d_buf));
    return bad;
}

static void check_case(int kind, int nc, int img_h, int img_w, int N, const NmsOptions *o, int min_kept, int max_kept) {
    Heads h;
    heads_make(&h, N, img_h, img_w, nc, kind, 23);
    char what[160];
    snprintf(what, sizeof what, "%s nc %d %dx%d N %d max_det %d multi %d agnostic %d", head_kind_name[kind], nc, img_w,
             img_h, N, o->max_det, o->multi_label, o->agnostic);
    int kept;
    CHECK(compare(&h, o, what, &kept, NULL) == 0, "%s: GPU and CPU differ", what);
    CHECK(kept >= min_kept && kept <= max_kept, "%s: %d kept, meant [%d, %d]", what, kept, min_kept, max_kept);
    heads_free(&h);
}

static void test_counts(void) {
    NEED_GPU();
    NmsOptions o = nms_val_options();
    for (int nc = 1; nc <= 80; nc = nc == 1 ? 3 : nc == 3 ? 80 : 81) {
        check_case(HEAD_NONE, nc, 96, 128, 2, &o, 0, 0);
        check_case(HEAD_ONE, nc, 96, 128, 3, &o, 3, 3);
        check_case(HEAD_FEW, nc, 160, 96, 2, &o, 4, 80);
    }
}

static void test_many(void) {      // > max_nms = 30,000 candidates per image, max_det 300 hit
    NEED_GPU();
    NmsOptions o = nms_val_options();
    check_case(HEAD_MANY, 80, 640, 640, 2, &o, 600, 600);
    check_case(HEAD_MANY, 80, 672, 480, 3, &o, 900, 900);   // a rect shape
    check_case(HEAD_MANY, 1, 640, 640, 1, &o, 1, 300);
    o.max_det = 7;
    check_case(HEAD_MANY, 3, 320, 256, 3, &o, 21, 21);
}

static void test_ties(void) {
    NEED_GPU();
    NmsOptions o = nms_val_options();
    for (int nc = 1; nc <= 80; nc = nc == 1 ? 3 : nc == 3 ? 80 : 81) check_case(HEAD_TIES, nc, 128, 96, 2, &o, 2, 600);
    o.iou_thres = 0.45f;
    check_case(HEAD_TIES, 3, 128, 96, 2, &o, 2, 600);
}

static void test_modes(void) {     // best class only (detect's options), agnostic, max_nms small
    NEED_GPU();
    NmsOptions o = nms_detect_options();
    check_case(HEAD_MANY, 80, 320, 256, 2, &o, 2, 2000);
    o.agnostic = 1;
    check_case(HEAD_MANY, 3, 320, 256, 2, &o, 2, 2000);
    o = nms_val_options();
    o.max_nms = 50;
    check_case(HEAD_MANY, 3, 320, 256, 2, &o, 2, 100);
}

static void test_speed(void) {     // printed; the pass condition is equality
    NEED_GPU();
    Heads h;
    heads_make(&h, 8, 640, 640, 80, HEAD_MANY, 5);
    NmsOptions o = nms_val_options();
    int kept;
    double s = 0;
    CHECK(compare(&h, &o, "speed batch", &kept, &s) == 0, "GPU and CPU differ");
    printf("    640 px, nc 80, 8 images: GPU decode + NMS %.2f ms per image (%d kept)\n", s * 1e3 / 8, kept);
    heads_free(&h);
}

GPU_MAIN()
#endif
