// kernel_util.h: what the gpu/*.cu files share (C++ only, not a public header): launch sizes,
// Map element addressing inside kernels, shape checks and the scratch stack discipline.
// Legend: N batch, H,W size, C channels, ld pixel stride, M = N*H*W pixels.
#pragma once
#include <cuda_bf16.h>

#include "gpu/ops.h"

enum { THREADS = 256 };
static const unsigned MAX_BLOCKS = 65535u * 8;   // grid-stride loops cover the rest

// blocks for n threads' worth of work (at least one; grid-stride loops do any remainder)
static inline unsigned blocks_for(size_t n) {
    size_t b = (n + THREADS - 1) / THREADS;
    return b < 1 ? 1u : b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned)b;
}

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

// elements of a map (tensor.h's map_floats is host-only)
__device__ static inline size_t map_n(Map m) { return (size_t)m.N * m.H * m.W * m.C; }

// element i of a map in (n, h, w, c) order (an fp32 map)
__device__ static inline float *map_elem(Map m, size_t i) {
    return m.data + (i / m.C) * m.ld + i % m.C;
}

// Maps of either storage (tensor.h: m.bf16): the element at offset `off` (pixel * ld + channel)
// read as a float, or written rounded to nearest even. The branch is the same for a whole launch.
__device__ static inline float map_get(Map m, size_t off) {
    return m.bf16 ? __bfloat162float(((const __nv_bfloat16 *)m.data)[off]) : m.data[off];
}
__device__ static inline void map_put(Map m, size_t off, float v) {
    if (m.bf16) ((__nv_bfloat16 *)m.data)[off] = __float2bfloat16(v);
    else m.data[off] = v;
}
// offset of element i in (n, h, w, c) order
__device__ static inline size_t map_off(Map m, size_t i) { return (i / m.C) * m.ld + i % m.C; }

// Ops without bf16 storage support refuse such maps: the storage plan (core/act_plan.c) is wrong.
static inline void require_fp32(Map m, const char *who) {
    if (m.bf16) die("%s: a bf16-stored map reached an op that reads fp32 only (core/act_plan.c)", who);
}

// Shapes are fixed when the model is built, so a mismatch is a bug in the caller.
static inline void same_shape_gpu(Map a, Map b, const char *who) {
    if (a.N != b.N || a.H != b.H || a.W != b.W || a.C != b.C || a.ld < a.C || b.ld < b.C)
        die("%s: maps %dx%dx%dx%d (ld %d) and %dx%dx%dx%d (ld %d) differ", who, a.N, a.H, a.W,
            a.C, a.ld, b.N, b.H, b.W, b.C, b.ld);
}

// Scratch is a stack: an op takes what it needs and gives it all back before returning. Stream
// order makes the reuse safe: the next op's kernels run after this op's kernels on dev->stream.
static inline void *scratch_take(Device *dev, size_t bytes) {
    return arena_take(&dev->scratch, bytes, 256);
}
