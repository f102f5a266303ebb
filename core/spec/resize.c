// resize.c: the bilinear resize of a batch that multi_scale training applies to its images, as
// yolov9's train.py and Ultralytics' trainer call it: F.interpolate(imgs, size=(P, Q), mode="bilinear",
// align_corners=False), no antialias, on the float images. PyTorch's upsample_bilinear2d formula
// (the CUDA kernel the references train with), in fp32 with each product and sum rounded on its own
// (no fused multiply-add: -std=c11 keeps gcc from contracting), which the GPU twin (gpu/resize.cu)
// repeats bit for bit with __fmul_rn / __fadd_rn.
// Legend: N batch, H,W in, P,Q out, C channels; NHWC maps.
#include "core/spec/ops.h"
#include "core/base/util.h"

// Source position of output index i: scale * (i + 0.5) - 0.5, clamped at 0 (area_pixel_compute_source_index),
// its lower tap, the step to the upper tap (0 at the last row or column) and the two weights.
void resize_taps(int in, int out, int i, int *lo, int *step, float *w_lo, float *w_hi) {
    float scale = (float)in / (float)out;          // area_pixel_compute_scale: in / out in fp32
    float src = scale * ((float)i + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    *lo = (int)src;
    *step = *lo < in - 1 ? 1 : 0;
    *w_hi = src - (float)*lo;
    *w_lo = 1.0f - *w_hi;
}

static void resize_check(Map x, Map y) {
    if (x.N != y.N || x.C != y.C || x.H < 1 || x.W < 1 || y.H < 1 || y.W < 1 || x.bf16 || y.bf16)
        die("resize_bilinear: %dx%dx%dx%d cannot be resized to %dx%dx%dx%d (fp32 maps of the same N and C)",
            x.N, x.H, x.W, x.C, y.N, y.H, y.W, y.C);
}

void resize_bilinear_cpu(Map x, Map y) {
    resize_check(x, y);
    for (int n = 0; n < y.N; n++)
        for (int p = 0; p < y.H; p++) {
            int h0, hs; float lh0, lh1;
            resize_taps(x.H, y.H, p, &h0, &hs, &lh0, &lh1);
            for (int q = 0; q < y.W; q++) {
                int w0, ws; float lw0, lw1;
                resize_taps(x.W, y.W, q, &w0, &ws, &lw0, &lw1);
                const float *a = x.data + ((size_t)(n * x.H + h0) * x.W + w0) * x.ld;
                const float *b = a + (size_t)hs * x.W * x.ld;   // the row below (or the same one)
                float *o = y.data + ((size_t)(n * y.H + p) * y.W + q) * y.ld;
                for (int c = 0; c < y.C; c++)   // h0lambda * (top row) + h1lambda * (bottom row)
                    o[c] = lh0 * (lw0 * a[c] + lw1 * a[ws * x.ld + c]) + lh1 * (lw0 * b[c] + lw1 * b[ws * x.ld + c]);
            }
        }
}
