// pool.c: max pool, average pool (count_include_pad, floor mode) and nearest upsampling on NHWC
// maps, forward and backward (backward accumulates into dx). PyTorch semantics throughout.
// Legend: N batch, C channels, H,W in, P,Q out, k kernel, f upsampling factor.
#include "core/spec/ops.h"
#include "core/base/util.h"

#include <math.h>
#include <string.h>

// The output size is fixed when the model is built, so a mismatch is a bug in the caller.
static void pool_check(Map x, int k, int stride, int pad, Map y, const char *who) {
    int P = (x.H + 2 * pad - k) / stride + 1, Q = (x.W + 2 * pad - k) / stride + 1;
    if (stride < 1 || k < 1 || pad < 0 || y.N != x.N || y.C != x.C || y.H != P || y.W != Q)
        die("%s: %dx%dx%dx%d, k %d stride %d pad %d cannot give %dx%dx%dx%d", who, x.N, x.H, x.W,
            x.C, k, stride, pad, y.N, y.H, y.W, y.C);
}

// PyTorch's rule: a NaN always takes over (max pooling propagates NaN); otherwise only a strictly
// larger value does, so the first maximum in scan order is kept.
static inline int beats(float v, float best) { return v > best || isnan(v); }

void maxpool_forward_cpu(Map x, int k, int stride, int pad, Map y) {
    pool_check(x, k, stride, pad, y, "maxpool_forward_cpu");
    for (int n = 0; n < y.N; n++)
        for (int p = 0; p < y.H; p++)
            for (int q = 0; q < y.W; q++) {
                float *o = map_at(y, n, p, q);
                for (int c = 0; c < y.C; c++) o[c] = -INFINITY;   // padding never wins
                for (int r = 0; r < k; r++) {
                    int h = p * stride - pad + r;
                    if (h < 0 || h >= x.H) continue;
                    for (int s = 0; s < k; s++) {
                        int w = q * stride - pad + s;
                        if (w < 0 || w >= x.W) continue;
                        const float *in = map_at(x, n, h, w);
                        for (int c = 0; c < y.C; c++)
                            if (beats(in[c], o[c])) o[c] = in[c];
                    }
                }
            }
}

// dy of output (n,p,q,c) goes to the first maximum of its window, found again by a scan.
static void maxpool_route(Map x, int k, int stride, int pad, int n, int p, int q, int c, float g,
                          Map dx) {
    float best = -INFINITY;
    float *arg = NULL;
    for (int r = 0; r < k; r++) {
        int h = p * stride - pad + r;
        if (h < 0 || h >= x.H) continue;
        for (int s = 0; s < k; s++) {
            int w = q * stride - pad + s;
            if (w < 0 || w >= x.W) continue;
            float v = map_at(x, n, h, w)[c];
            if (!arg || beats(v, best)) {
                best = v;
                arg = map_at(dx, n, h, w) + c;
            }
        }
    }
    if (arg) *arg += g;
}

void maxpool_backward_cpu(Map x, int k, int stride, int pad, Map dy, Map dx) {
    pool_check(x, k, stride, pad, dy, "maxpool_backward_cpu");
    if (!dx.data) return;
    for (int n = 0; n < dy.N; n++)
        for (int p = 0; p < dy.H; p++)
            for (int q = 0; q < dy.W; q++) {
                const float *g = map_at(dy, n, p, q);
                for (int c = 0; c < dy.C; c++)
                    maxpool_route(x, k, stride, pad, n, p, q, c, g[c], dx);
            }
}

// In floor mode every window ends inside the padded input, so count_include_pad divides by k*k.
void avgpool_forward_cpu(Map x, int k, int stride, int pad, Map y) {
    pool_check(x, k, stride, pad, y, "avgpool_forward_cpu");
    float area = (float)(k * k);
    for (int n = 0; n < y.N; n++)
        for (int p = 0; p < y.H; p++)
            for (int q = 0; q < y.W; q++) {
                float *o = map_at(y, n, p, q);
                memset(o, 0, sizeof(float) * y.C);
                for (int r = 0; r < k; r++) {
                    int h = p * stride - pad + r;
                    if (h < 0 || h >= x.H) continue;
                    for (int s = 0; s < k; s++) {
                        int w = q * stride - pad + s;
                        if (w < 0 || w >= x.W) continue;
                        const float *in = map_at(x, n, h, w);
                        for (int c = 0; c < y.C; c++) o[c] += in[c];
                    }
                }
                for (int c = 0; c < y.C; c++) o[c] /= area;
            }
}

void avgpool_backward_cpu(int k, int stride, int pad, Map dy, Map dx) {
    pool_check(dx, k, stride, pad, dy, "avgpool_backward_cpu");
    if (!dx.data) return;
    float area = (float)(k * k);
    for (int n = 0; n < dy.N; n++)
        for (int p = 0; p < dy.H; p++)
            for (int q = 0; q < dy.W; q++) {
                const float *g = map_at(dy, n, p, q);
                for (int r = 0; r < k; r++) {
                    int h = p * stride - pad + r;
                    if (h < 0 || h >= dx.H) continue;
                    for (int s = 0; s < k; s++) {
                        int w = q * stride - pad + s;
                        if (w < 0 || w >= dx.W) continue;
                        float *o = map_at(dx, n, h, w);
                        for (int c = 0; c < dy.C; c++) o[c] += g[c] / area;
                    }
                }
            }
}

static void upsample_check(Map x, int factor, Map y, const char *who) {
    if (factor < 1 || y.N != x.N || y.C != x.C || y.H != x.H * factor || y.W != x.W * factor)
        die("%s: %dx%dx%dx%d upsampled by %d cannot give %dx%dx%dx%d", who, x.N, x.H, x.W, x.C,
            factor, y.N, y.H, y.W, y.C);
}

// y(n, h, w) = x(n, h / f, w / f)
void upsample_forward_cpu(Map x, int factor, Map y) {
    upsample_check(x, factor, y, "upsample_forward_cpu");
    for (int n = 0; n < y.N; n++)
        for (int h = 0; h < y.H; h++)
            for (int w = 0; w < y.W; w++)
                memcpy(map_at(y, n, h, w), map_at(x, n, h / factor, w / factor),
                       sizeof(float) * y.C);
}

void upsample_backward_cpu(int factor, Map dy, Map dx) {
    upsample_check(dx, factor, dy, "upsample_backward_cpu");
    if (!dx.data) return;
    for (int n = 0; n < dy.N; n++)
        for (int h = 0; h < dy.H; h++)
            for (int w = 0; w < dy.W; w++) {
                const float *g = map_at(dy, n, h, w);
                float *o = map_at(dx, n, h / factor, w / factor);
                for (int c = 0; c < dy.C; c++) o[c] += g[c];
            }
}
