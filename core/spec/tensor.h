// tensor.h: Map, the one activation type. Dimension legend used across core/ and gpu/:
// N batch, H,W height/width in, C channels in, K channels out, P,Q height/width out, R,S kernel.
#pragma once
#include <stddef.h>

// Map: an NHWC feature map with a pixel stride. Element (n,h,w,c) is data[((n*H + h)*W + w)*ld + c].
// ld >= C; ld > C makes a channel slice of a wider buffer, so a concat is a set of slices that
// producers write into directly, and a channel split is a slice.
// bf16 = 1: the elements are bfloat16 (2 bytes each, same indexing) although `data` is typed float:
// a GPU's activation storage under precision=bf16 (core/spec/act_plan.c). Only the CUDA ops read or
// write such maps; the CPU ops and host code never see one.
// fresh = 1 (a gradient destination only, set by core/spec/model_run.c from its plan): the region holds no
// earlier sum and was not zeroed, so the backward op that adds into it writes its sum instead. Only
// the conv backward ops (dense and depthwise, both backends) read it; core/spec/grad_plan.c marks no
// write by another op (copies and residual additions are made copies by core/spec/model_run.c).
typedef struct { float *data; int N, H, W, C, ld; int bf16; int fresh; } Map;

static inline Map map_make(float *data, int N, int H, int W, int C) {
    Map m = { data, N, H, W, C, C, 0, 0 };
    return m;
}
static inline Map map_slice(Map m, int c0, int nc) {
    m.data = m.bf16 ? (float *)((unsigned short *)m.data + c0) : m.data + c0;
    m.C = nc;
    return m;
}
static inline size_t map_pixels(Map m) { return (size_t)m.N * m.H * m.W; }
static inline size_t map_floats(Map m) { return map_pixels(m) * m.C; }
static inline float *map_at(Map m, int n, int h, int w) {
    return m.data + (((size_t)n * m.H + h) * m.W + w) * m.ld;
}
