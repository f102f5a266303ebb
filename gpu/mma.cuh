// mma.cuh: the tensor-core pieces of our own kernels (gpu/conv_stem.cu): ldmatrix and mma.sync m16n8k16 (bf16
// operands, fp32 sums; sm_80 and later: only bf16 devices come here), and the sum of a weight gradient's
// per-strip partials in a fixed order (deterministic: the strips are set by the shape alone, and so is the
// order of every sum).
// Legend: n outputs of a weight gradient, strips the partials summed into each.
#pragma once
#include <cuda_bf16.h>

#include "gpu/kernel_util.h"

typedef __nv_bfloat16 bf16;

// ldmatrix .x4: lanes 8i .. 8i+7 give the addresses of the eight 16-byte rows of 8x8 matrix i; r[i] receives
// that matrix's two values at (row lane/4, columns 2(lane%4), +1), or with .trans at (rows 2(lane%4), +1,
// column lane/4).
__device__ static inline void ldsm_x4(const bf16 *row, unsigned r[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
#else
    __trap();
#endif
}
__device__ static inline void ldsm_x4_trans(const bf16 *row, unsigned r[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
#else
    __trap();
#endif
}

// c (16x8) += a (16x16) · b (16x8), bf16 operands, fp32 sums. With g = lane/4, t = lane%4: a holds
// (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); b0 (2t..2t+1, g), b1 (2t+8.., g); c (g, 2t), (g, 2t+1),
// (g+8, 2t), (g+8, 2t+1). In a register the lower-indexed value is the low half.
__device__ static inline void mma_bf16(float c[4], const unsigned a[4], unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}

// dw (n) = beta·dw + Σ_g part[g] (g = 0 .. strips-1, part (strips, n)), summed in double in a fixed order (beta 0:
// dw is written, not read). A block takes 32 outputs (one a lane); its COMBINE_RUNS rows of threads sum
// contiguous runs of strips, each in order, and its first row adds the runs in order. The runs depend on the
// strip count alone.
enum { COMBINE_RUNS = 32 };
static __global__ void wgrad_combine_kernel(const float *part, int strips, int n, float beta, float *dw) {
    pdl_entry();
    __shared__ double run[COMBINE_RUNS][32];
    int lane = threadIdx.x, r = threadIdx.y, o = blockIdx.x * 32 + lane;
    int per = (strips + COMBINE_RUNS - 1) / COMBINE_RUNS, g0 = r * per, g1 = min(g0 + per, strips);
    double s = 0.0;
    if (o < n) {
#pragma unroll 8
        for (int g = g0; g < g1; g++) s += part[(size_t)g * n + o];   // loads batched, sums in order
    }
    run[r][lane] = s;
    __syncthreads();
    if (r > 0 || o >= n) return;
    double total = 0.0;
    for (int i = 0; i < COMBINE_RUNS; i++) total += run[i][lane];
    float t = (float)total;
    dw[o] = beta == 0.0f ? t : beta * dw[o] + t;
}

static inline void wgrad_combine(Device *dev, const float *part, int strips, int n, float beta, float *dw) {
    wgrad_combine_kernel<<<(n + 31) / 32, dim3(32, COMBINE_RUNS), 0, dev->stream>>>(part, strips, n, beta, dw);
    checkLaunch(dev);
}
