// elementwise.c: SiLU, add, copy, accumulate and zero over NHWC maps with a pixel stride (ld).
// Each loops over the pixels and, inside, over the C contiguous channels of a pixel.
// Legend: N batch, H,W size, C channels, ld pixel stride.
#include "core/spec/ops.h"
#include "core/base/util.h"

#include <math.h>
#include <string.h>

static void same_shape(Map a, Map b, const char *who) {
    if (a.N != b.N || a.H != b.H || a.W != b.W || a.C != b.C)
        die("%s: maps %dx%dx%dx%d and %dx%dx%dx%d differ", who, a.N, a.H, a.W, a.C, b.N, b.H, b.W,
            b.C);
}

static inline float *row(Map m, size_t pixel) { return m.data + pixel * m.ld; }

// y = u / (1 + exp(-u)), PyTorch's formula; large negative u gives exp = inf and y = -0, no NaN.
void silu_forward_cpu(Map u, Map y) {
    same_shape(u, y, "silu_forward_cpu");
    for (size_t i = 0; i < map_pixels(u); i++) {
        const float *a = row(u, i);
        float *o = row(y, i);
        for (int c = 0; c < u.C; c++) o[c] = a[c] / (1.0f + expf(-a[c]));
    }
}

// silu'(u) = s·(1 + u·(1 - s)) with s = sigmoid(u)
void silu_backward_cpu(Map u, Map dy, Map du) {
    same_shape(u, dy, "silu_backward_cpu");
    same_shape(u, du, "silu_backward_cpu");
    for (size_t i = 0; i < map_pixels(u); i++) {
        const float *a = row(u, i), *g = row(dy, i);
        float *o = row(du, i);
        for (int c = 0; c < u.C; c++) {
            float s = 1.0f / (1.0f + expf(-a[c]));
            o[c] = g[c] * s * (1.0f + a[c] * (1.0f - s));
        }
    }
}

void add_forward_cpu(Map a, Map b, Map y) {
    same_shape(a, b, "add_forward_cpu");
    same_shape(a, y, "add_forward_cpu");
    for (size_t i = 0; i < map_pixels(a); i++) {
        const float *x0 = row(a, i), *x1 = row(b, i);
        float *o = row(y, i);
        for (int c = 0; c < a.C; c++) o[c] = x0[c] + x1[c];
    }
}

void copy_map_cpu(Map src, Map dst) {
    same_shape(src, dst, "copy_map_cpu");
    for (size_t i = 0; i < map_pixels(src); i++)
        memmove(row(dst, i), row(src, i), sizeof(float) * src.C);
}

void accumulate_map_cpu(Map src, Map dst) {
    same_shape(src, dst, "accumulate_map_cpu");
    for (size_t i = 0; i < map_pixels(src); i++) {
        const float *s = row(src, i);
        float *o = row(dst, i);
        for (int c = 0; c < src.C; c++) o[c] += s[c];
    }
}

void zero_map_cpu(Map m) {
    for (size_t i = 0; i < map_pixels(m); i++) memset(row(m, i), 0, sizeof(float) * m.C);
}
