// conv_pw_wgrad.cu: the weight gradient of a pointwise (1x1, stride 1, groups 1) conv with few outputs and many
// pixels under bf16: dW (K, C) = beta·dW + dy^T · x summed over the rows (pixels). cuBLAS runs that long thin
// GEMM (inner dimension the pixels) on a handful of blocks; here the rows are cut into slices, one block a
// slice computes the whole K x C product of its rows on the tensor cores (mma.sync m16n8k16, bf16 operands,
// fp32 sums: the products are exact, only the order of the sums is the tensor core's) into an fp32 partial, and
// a second kernel adds the partials in slice order onto dw (gpu/mma.cuh). The slices depend on the row count
// alone, so the result does too (no atomics: the same bits on every run and GPU).
// Legend: K channels out (dy's columns), C channels in (x's), M rows, S slices, TP rows a stage.
#include "gpu/mma.cuh"

// Shapes taken: K and C multiples of 8 (whole 16-byte runs of a row) up to PW_MAX, at least PW_MIN_ROWS rows.
// Slices of about M / PW_SLICES rows (a multiple of 32, at least PW_MIN_SLICE). A block's warps split the
// K x C output into 32 x 32 tiles (up to 16 warps); its rows pass through shared memory in PW_STAGES stages of
// TP rows each (32, or 16 for the widest shapes: 48 KB at most, no opt-in needed), loaded by cp.async
// PW_STAGES - 1 stages ahead of the mma. Shared rows are padded by 8 bf16 (16 bytes) so that ldmatrix's eight
// row addresses fall in distinct bank groups.
enum { PW_MAX = 128, PW_MIN_ROWS = 8192, PW_SLICES = 256, PW_MIN_SLICE = 256, PW_STAGES = 4, PW_PAD = 8,
       PW_THREADS = (PW_MAX / 32) * (PW_MAX / 32) * 32, PW_SMEM = 48 * 1024 };

extern "C" int conv_pw_wgrad_fits(const ConvDims *d) {
    return d->R == 1 && d->S == 1 && d->stride == 1 && d->pad == 0 && d->groups == 1 && d->K % 8 == 0 &&
           d->C % 8 == 0 && d->K <= PW_MAX && d->C <= PW_MAX && (size_t)d->N * d->P * d->Q >= PW_MIN_ROWS;
}

extern "C" size_t conv_pw_wgrad_workspace_bytes_gpu(const ConvDims *d) {
    return sizeof(float) * PW_SLICES * d->K * d->C + 256;   // the partials of at most PW_SLICES slices
}

// One stage: rows p0 .. p0+tp-1 (zeros past m1) of dy into ds (tp, DR) and of x into xs (tp, XR), a 16-byte
// copy a thread in turn: consecutive threads take consecutive runs of a row, then the next row.
__device__ static inline void pw_load(const bf16 *dy, int lddy, const bf16 *x, int ldx, int K, int C, unsigned p0,
                                      unsigned m1, int tp, bf16 *ds, int DR, bf16 *xs, int XR) {
    int kv = K / 8, cv = C / 8, nd = tp * kv, n = nd + tp * cv;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        bool is_dy = i < nd;
        int j = is_dy ? i : i - nd, v = is_dy ? kv : cv, p = j / v, e = (j - p * v) * 8;
        unsigned m = p0 + p;
        const bf16 *src = is_dy ? dy + (size_t)m * lddy + e : x + (size_t)m * ldx + e;
        bf16 *dst = is_dy ? ds + p * DR + e : xs + p * XR + e;
        cp_async16(dst, m < m1 ? src : dy, m < m1 ? 16 : 0);
    }
}

// part (S, K, C): slice blockIdx.x's Σ over its rows m of dy(m, k) · x(m, c), as D (K, C) += dy^T (K, 16 rows) ·
// x (16 rows, C) per 16 rows; ldmatrix .trans turns the (row, channel) stages into the operands. Warp w owns
// k in [32(w / WC), +32) and c in [32(w % WC), +32): 2 m-tiles x 4 n-tiles. Shared columns past K or C are never
// written (stale values): they reach only the accumulators of k >= K or c >= C, which are not stored.
__global__ void __launch_bounds__(PW_THREADS)
pw_wgrad_kernel(const bf16 *dy, int lddy, const bf16 *x, int ldx, int K, int C, unsigned M, unsigned per_slice,
                int tp, float *part) {
    pdl_entry();
    extern __shared__ __align__(16) bf16 pw_smem[];   // PW_STAGES x (ds (tp, DR), xs (tp, XR))
    int WC = (C + 31) / 32, DR = (K + 31) / 32 * 32 + PW_PAD, XR = WC * 32 + PW_PAD, stage = tp * (DR + XR);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    int k0 = warp / WC * 32, c0 = warp % WC * 32;
    unsigned m0 = blockIdx.x * per_slice, m1 = min(m0 + per_slice, M);
    int tiles = (int)((m1 - m0 + tp - 1) / tp);
    float acc[2][4][4] = {};   // m-tile mt, n-tile nt: k = k0 + 16mt + g (+8), c = c0 + 8nt + 2t (+1)
    for (int s = 0; s < PW_STAGES - 1; s++) {
        bf16 *st = pw_smem + s * stage;
        if (s < tiles) pw_load(dy, lddy, x, ldx, K, C, m0 + s * tp, m1, tp, st, DR, st + tp * DR, XR);
        cp_async_commit();   // empty groups too: the wait below counts groups
    }
    for (int i = 0; i < tiles; i++) {
        cp_async_wait<PW_STAGES - 2>();   // this thread's copies of tile i have landed
        __syncthreads();                  // everyone's have, and tile i - 1's stage is free
        int next = i + PW_STAGES - 1;
        bf16 *st = pw_smem + next % PW_STAGES * stage;
        if (next < tiles) pw_load(dy, lddy, x, ldx, K, C, m0 + next * tp, m1, tp, st, DR, st + tp * DR, XR);
        cp_async_commit();
        const bf16 *ds = pw_smem + i % PW_STAGES * stage, *xs = ds + tp * DR;
        for (int p0 = 0; p0 < tp; p0 += 16) {   // 16 rows a step: the mma's reduction
            unsigned a[2][4], b[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
                ldsm_x4_trans(ds + (p0 + (lane & 7) + (lane >> 4 & 1) * 8) * DR + k0 + 16 * mt + (lane >> 3 & 1) * 8, a[mt]);
#pragma unroll
            for (int np = 0; np < 2; np++)   // n-tiles 2np and 2np + 1
                ldsm_x4_trans(xs + (p0 + (lane & 7) + (lane >> 3 & 1) * 8) * XR + c0 + 16 * np + (lane >> 4 & 1) * 8, b[np]);
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < 4; nt++) mma_bf16(acc[mt][nt], a[mt], b[nt / 2][nt % 2 * 2], b[nt / 2][nt % 2 * 2 + 1]);
        }
    }
    float *out = part + (size_t)blockIdx.x * K * C;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {   // c is even and C a multiple of 8: c + 1 < C where c < C
                int k = k0 + 16 * mt + g + 8 * h, c = c0 + 8 * nt + 2 * t;
                if (k < K && c < C)
                    *(float2 *)(out + (size_t)k * C + c) = make_float2(acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
            }
}

// Rows a slice: a multiple of 32 (whole stages), set by M alone
static unsigned slice_rows(size_t M) {
    size_t per = (M + PW_SLICES - 1) / PW_SLICES;
    per = (per + 31) / 32 * 32;
    return (unsigned)(per < PW_MIN_SLICE ? PW_MIN_SLICE : per);
}

// dw (K, C) = beta·dw + dy^T · x over M rows: dy (M, K) and x (M, C) bf16 with row strides lddy and ldx, their
// bases and strides whole 16-byte runs (the caller checked).
extern "C" void conv_pw_wgrad_gpu(Device *dev, const ConvDims *d, const void *dy, int lddy, const void *x, int ldx,
                                  size_t M, float beta, float *dw) {
    int K = d->K, C = d->C, WK = (K + 31) / 32, WC = (C + 31) / 32;
    int row_bytes = (int)sizeof(bf16) * (WK * 32 + WC * 32 + 2 * PW_PAD);
    int tp = PW_STAGES * 32 * row_bytes <= PW_SMEM ? 32 : 16;
    unsigned per = slice_rows(M);
    int S = (int)((M + per - 1) / per);
    size_t mark = dev->scratch.used;
    float *part = (float *)scratch_take(dev, sizeof(float) * S * K * C);
    pw_wgrad_kernel<<<S, WK * WC * 32, PW_STAGES * tp * row_bytes, dev->stream>>>(
        (const bf16 *)dy, lddy, (const bf16 *)x, ldx, K, C, (unsigned)M, per, tp, part);
    checkLaunch(dev);
    wgrad_combine(dev, part, S, K * C, beta, dw);   // gpu/mma.cuh
    dev->scratch.used = mark;
}
