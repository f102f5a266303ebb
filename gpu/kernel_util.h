// kernel_util.h: what the gpu/*.cu files share (C++ only, not a public header): launch sizes,
// Map element addressing inside kernels, shape checks and the scratch stack discipline.
// Legend: N batch, H,W size, C channels, ld pixel stride, M = N*H*W pixels.
#pragma once
#include <cuda_bf16.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/ops.h"
#include "gpu/pdl.cuh"

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

// ---- channel launches: per-element ops without index division (issue #5) ------------------
// A thread owns V = 4, 2 or 1 consecutive channels and strides over the M pixels: one vector
// load or store per map and pixel at offset p*ld + c, per-channel values read once per thread.
// Pix, the pixel index, is 32-bit unless M is too large for it (channel_grid decides).
template <int V> struct Vec { float v[V]; };

// V aligned fp32 values at p (p a multiple of V floats)
template <int V> __device__ static inline Vec<V> vec_load(const float *p) {
    Vec<V> x;
    if constexpr (V == 4) {
        float4 f = *(const float4 *)p;
        x.v[0] = f.x; x.v[1] = f.y; x.v[2] = f.z; x.v[3] = f.w;
    } else if constexpr (V == 2) {
        float2 f = *(const float2 *)p;
        x.v[0] = f.x; x.v[1] = f.y;
    } else {
        x.v[0] = *p;
    }
    return x;
}
template <int V> __device__ static inline void vec_store(float *p, Vec<V> x) {
    if constexpr (V == 4) *(float4 *)p = make_float4(x.v[0], x.v[1], x.v[2], x.v[3]);
    else if constexpr (V == 2) *(float2 *)p = make_float2(x.v[0], x.v[1]);
    else *p = x.v[0];
}

// bf16 bits widened exactly as __bfloat162float does: they are the float's top 16 bits
__device__ static inline float bf16_lo(unsigned two) { return __uint_as_float(two << 16); }
__device__ static inline float bf16_hi(unsigned two) { return __uint_as_float(two & 0xffff0000u); }
// two floats rounded to nearest even as __float2bfloat16 does, packed (a in the low half)
__device__ static inline unsigned bf16_pack(float a, float b) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
    return *(const unsigned *)&h;
}

template <int V> __device__ static inline Vec<V> vec_load_bf16(const __nv_bfloat16 *p) {
    Vec<V> x;
    if constexpr (V == 4) {
        uint2 u = *(const uint2 *)p;
        x.v[0] = bf16_lo(u.x); x.v[1] = bf16_hi(u.x);
        x.v[2] = bf16_lo(u.y); x.v[3] = bf16_hi(u.y);
    } else if constexpr (V == 2) {
        unsigned u = *(const unsigned *)p;
        x.v[0] = bf16_lo(u); x.v[1] = bf16_hi(u);
    } else {
        x.v[0] = __bfloat162float(*p);
    }
    return x;
}
template <int V> __device__ static inline void vec_store_bf16(__nv_bfloat16 *p, Vec<V> x) {
    if constexpr (V == 4)
        *(uint2 *)p = make_uint2(bf16_pack(x.v[0], x.v[1]), bf16_pack(x.v[2], x.v[3]));
    else if constexpr (V == 2) *(unsigned *)p = bf16_pack(x.v[0], x.v[1]);
    else *p = __float2bfloat16(x.v[0]);
}

// map_get / map_put for V channels at offset `off` (pixel * ld + channel) of either storage
template <int V> __device__ static inline Vec<V> map_vget(Map m, size_t off) {
    if (m.bf16) return vec_load_bf16<V>((const __nv_bfloat16 *)m.data + off);
    return vec_load<V>(m.data + off);
}
template <int V> __device__ static inline void map_vput(Map m, size_t off, Vec<V> x) {
    if (m.bf16) vec_store_bf16<V>((__nv_bfloat16 *)m.data + off, x);
    else vec_store<V>(m.data + off, x);
}

// per-channel values a[c .. c+V), read once per thread
template <int V> __device__ static inline Vec<V> vec_channels(const float *a, int c) {
    Vec<V> x;
    for (int k = 0; k < V; k++) x.v[k] = a[c + k];
    return x;
}

// first channel of this thread (>= C: the thread has none and leaves), and a pixel's offset
template <int V> __device__ static inline int vec_channel() {
    return (int)(blockIdx.x * blockDim.x + threadIdx.x) * V;
}
template <typename Pix> __device__ static inline size_t pixel_off(Map m, Pix p, int c) {
    return (size_t)p * (unsigned)m.ld + (unsigned)c;
}

// this thread's pixels p (type Pix) of M (a size_t: one kernel signature for both Pix), the block
// rows striding over them
#define PIXEL_LOOP(Pix, p, M) \
    for (Pix p = blockIdx.y * (Pix)blockDim.y + threadIdx.y, p##_end = (Pix)(M); p < p##_end; \
         p += (Pix)gridDim.y * blockDim.y)

// The same pixels as PIXEL_LOOP, PIXEL_BATCH at a time: load(p, i) for each pixel of a batch (slot i),
// then body(p, i) for each, so a batch's loads are in flight together (the compiler, which must assume
// that a store may alias the next pixel's loads, issues one pixel's loads at a time otherwise). A pixel's
// arithmetic is unchanged; only the order in which a thread's pixels are visited within a batch differs.
enum { PIXEL_BATCH = 4 };
template <int PB, typename Pix, typename Load, typename Body>
__device__ static inline void pixel_batches(size_t M, Load load, Body body) {
    static_assert(PB >= 1 && PB <= PIXEL_BATCH, "channel_grid's pix32 allows PIXEL_BATCH strides");
    Pix step = (Pix)gridDim.y * blockDim.y, end = (Pix)M, p = blockIdx.y * (Pix)blockDim.y + threadIdx.y;
    for (; end > (PB - 1) * step && p < end - (PB - 1) * step; p += PB * step) {
#pragma unroll
        for (int i = 0; i < PB; i++) load(p + i * step, i);
#pragma unroll
        for (int i = 0; i < PB; i++) body(p + i * step, i);
    }
    for (; p < end; p += step) {
        load(p, 0);
        body(p, 0);
    }
}

// the widest V (4, 2, 1) a map allows: C, ld and its first element's address multiples of V
// elements (data NULL, an absent map: any)
static inline int map_vec_width(Map m) {
    size_t bytes = m.bf16 ? 2 : 4;
    for (int v = 4; v > 1; v /= 2)
        if (!m.data || (m.C % v == 0 && m.ld % v == 0 && (size_t)m.data % (v * bytes) == 0))
            return v;
    return 1;
}
static inline int min_int(int a, int b) { return a < b ? a : b; }

// Up to PIXELS_PER_THREAD pixels per thread share its per-channel loads, as long as the launch
// keeps FILL_BLOCKS blocks (a few per SM of a large GPU); grid.y is at most 65535.
enum { PIXELS_PER_THREAD = 8, FILL_BLOCKS = 2048 };

// A (channel groups, pixel blocks) grid over C channels of V and M pixels, THREADS per block.
struct ChannelGrid { dim3 grid, block; int V; bool pix32; size_t M; };
static inline ChannelGrid channel_grid(int C, size_t M, int V) {
    ChannelGrid g;
    unsigned groups = C > V ? (unsigned)(C / V) : 1, nx = (groups + THREADS - 1) / THREADS;
    unsigned bx = (groups + nx - 1) / nx, by = THREADS / bx;
    size_t one = (M + by - 1) / by;   // block rows at one pixel per thread
    size_t fill = one < FILL_BLOCKS / nx ? one : FILL_BLOCKS / nx;
    size_t rows = one / PIXELS_PER_THREAD > fill ? one / PIXELS_PER_THREAD : fill;
    g.block = dim3(bx, by);
    g.grid = dim3(nx, rows < 1 ? 1u : rows > 65535 ? 65535u : (unsigned)rows);
    g.V = V;
    g.M = M;
    g.pix32 = M + (size_t)PIXEL_BATCH * g.grid.y * by <= 0xffffffffu;   // p + a batch's strides never wrap
    return g;
}
// kernel<V, Pix, extra template arguments...> for grid g, as a pointer to launch with <<< >>>
#define CHANNEL_KERNEL(g, kernel, ...) \
    ((g).pix32 ? CHANNEL_KERNEL_V_(g, kernel, unsigned, ##__VA_ARGS__) \
               : CHANNEL_KERNEL_V_(g, kernel, size_t, ##__VA_ARGS__))
#define CHANNEL_KERNEL_V_(g, kernel, Pix, ...) \
    ((g).V == 4 ? kernel<4, Pix, ##__VA_ARGS__> \
     : (g).V == 2 ? kernel<2, Pix, ##__VA_ARGS__> : kernel<1, Pix, ##__VA_ARGS__>)

// Ops without bf16 storage support refuse such maps: the storage plan (core/spec/act_plan.c) is wrong.
static inline void require_fp32(Map m, const char *who) {
    if (m.bf16) die("%s: a bf16-stored map reached an op that reads fp32 only (core/spec/act_plan.c)", who);
}

// An fp32 output written in place of its input (du over dy) needs an fp32 input: a bf16-stored gradient
// (core/spec/grad_plan.c) has half the bytes, so the writes would run past it.
static inline void require_fp32_in_place(Map out, Map in, const char *who) {
    if (out.data == in.data && in.bf16) die("%s: an fp32 result cannot take a bf16-stored input's place", who);
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
