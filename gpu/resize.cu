// resize.cu: the GPU twin of core/spec/resize.c (multi_scale's bilinear resize of the images, PyTorch's
// upsample_bilinear2d with align_corners=False), rounding as the CPU twin does: every product and sum
// on its own (__fmul_rn, __fadd_rn), so the two agree bit for bit. Output = (not accumulated).
// Legend: N batch, H,W in, P,Q out, C channels; NHWC fp32 maps.
#include "gpu/kernel_util.h"

// kernels

__device__ static void taps(int in, int out, int i, int *lo, int *step, float *w_lo, float *w_hi) {
    float scale = __fdiv_rn((float)in, (float)out);
    float src = __fsub_rn(__fmul_rn(scale, __fadd_rn((float)i, 0.5f)), 0.5f);
    if (src < 0) src = 0;
    *lo = (int)src;
    *step = *lo < in - 1 ? 1 : 0;
    *w_hi = __fsub_rn(src, (float)*lo);
    *w_lo = __fsub_rn(1.0f, *w_hi);
}

__global__ void resize_bilinear_kernel(size_t M, Map x, Map y) {
    pdl_entry();
    GRID_STRIDE(i, M) {                            // one output element (n, p, q, c)
        int c = (int)(i % y.C);
        size_t pix = i / y.C;
        int q = (int)(pix % y.W), p = (int)(pix / y.W % y.H), n = (int)(pix / ((size_t)y.W * y.H));
        int h0, hs, w0, ws; float lh0, lh1, lw0, lw1;
        taps(x.H, y.H, p, &h0, &hs, &lh0, &lh1);
        taps(x.W, y.W, q, &w0, &ws, &lw0, &lw1);
        const float *a = x.data + ((size_t)(n * x.H + h0) * x.W + w0) * x.ld + c;
        const float *b = a + (size_t)hs * x.W * x.ld;
        float top = __fadd_rn(__fmul_rn(lw0, a[0]), __fmul_rn(lw1, a[ws * x.ld]));
        float bot = __fadd_rn(__fmul_rn(lw0, b[0]), __fmul_rn(lw1, b[ws * x.ld]));
        y.data[pix * y.ld + c] = __fadd_rn(__fmul_rn(lh0, top), __fmul_rn(lh1, bot));
    }
}

// launchers

extern "C" void resize_bilinear_gpu(Device *dev, Map x, Map y) {
    if (x.N != y.N || x.C != y.C || x.H < 1 || x.W < 1 || y.H < 1 || y.W < 1 || x.bf16 || y.bf16)
        die("resize_bilinear_gpu: %dx%dx%dx%d cannot be resized to %dx%dx%dx%d (fp32 maps of the same N and C)",
            x.N, x.H, x.W, x.C, y.N, y.H, y.W, y.C);
    size_t M = (size_t)y.N * y.H * y.W * y.C;
    if (!M) return;
    resize_bilinear_kernel<<<blocks_for(M), THREADS, 0, dev->stream>>>(M, x, y);
    checkLaunch(dev);
}
