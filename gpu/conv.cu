// conv.cu: 2-D convolution on NHWC maps with PyTorch-layout weights, the CUDA twin of core/spec/conv.c.
// A 1x1 stride-1 unpadded conv is one GEMM over all pixels, reading x and writing y through their
// ld (so y may be a channel slice of a concat buffer); other convs im2col a chunk of output pixels
// into scratch and GEMM it, all groups in one strided-batched call. Forward writes y (=);
// backward adds into dx, dw, db (+=). dev->precision picks fp32, tf32 or bf16 GEMM operands. Under
// bf16, x may be bf16-stored (tensor.h: read as the GEMM operand without a conversion) and so may y
// (the GEMM writes it rounded); gradients are fp32.
// Legend: N batch, C channels in, K channels out, H,W in, P,Q out, R,S kernel, G groups,
// Cg = C/G, Kg = K/G, M = N*P*Q output pixels, CRS = C*R*S columns of an im2col row.
//
// Column order. An im2col row holds its columns as (g, r, s, cg), not PyTorch's (g, cg, r, s):
// in NHWC the Cg channels of one tap (r, s) are contiguous in x, so im2col and col2im move whole
// runs of channels with coalesced (and, where Cg allows, 16-byte) accesses. The weight is
// permuted to match once per call, (K, Cg, R, S) -> (K, R, S, Cg), and the weight gradient back.
#include <cuda_bf16.h>

#include "core/base/switches.h"
#include "gpu/cudnn_conv.h"
#include "gpu/kernel_util.h"

typedef __nv_bfloat16 bf16;

static bool is_pointwise(const ConvDims *d) {
    return d->R == 1 && d->S == 1 && d->stride == 1 && d->pad == 0;
}
static size_t crs_of(const ConvDims *d) { return (size_t)d->C * d->R * d->S; }
static size_t pixels_out(const ConvDims *d) { return (size_t)d->N * d->P * d->Q; }
// (g, r, s, cg) differs from (g, cg, r, s) only when a group has several channels and taps
static bool needs_permute(const ConvDims *d) { return d->R * d->S > 1 && d->C / d->groups > 1; }

// Output pixels per GEMM: all of them for a pointwise conv, else as many im2col rows as the
// device's cap allows (at least one).
static size_t chunk_rows(const Device *dev, const ConvDims *d) {
    size_t M = pixels_out(d);
    if (is_pointwise(d)) return M;
    size_t rows = dev->col_cap_floats / crs_of(d);
    if (rows < 1) rows = 1;
    return rows < M ? rows : M;
}

// Partial-sum blocks G of the bias gradient along its M pixels (see bias_partial_kernel).
enum { BIAS_TILE_C = 32, BIAS_TILE_M = 8, BIAS_MAX_PARTS = 256, BIAS_PIXELS_PER_PART = 512 };

static int bias_parts(size_t M) {
    size_t g = (M + BIAS_PIXELS_PER_PART - 1) / BIAS_PIXELS_PER_PART;
    return g < 1 ? 1 : g > BIAS_MAX_PARTS ? BIAS_MAX_PARTS : (int)g;
}

// A grouped 1x1 conv of a few groups of several channels each (the detection head's box branch: 64 -> 64 in 4
// groups) runs as the dense conv of its shape whose weight is zero outside each output channel's group: one
// GEMM where the groups' own are G thin ones (a pointwise weight gradient of 16 x 16 outputs a
// group over all the pixels ran on one block a group). The dense form does G times the products; the others
// add exact zeros. Its weight gradient is cut into slices of pixels (below). YT_GROUPED_DENSE=0: each group's
// own GEMMs. (The grouped 3x3 convs dense through cuDNN gained nothing: bench/lost/grouped_dense_3x3.patch.)
enum { DENSE_MAX_GROUPS = 4 };

static bool dense_grouped(const ConvDims *d) {
    return is_pointwise(d) && d->groups >= 2 && d->groups <= DENSE_MAX_GROUPS && d->C / d->groups >= 2 &&
           !switch_is(SW_GROUPED_DENSE, "0");
}

static ConvDims dense_dims(const ConvDims *d) {
    ConvDims e = *d;
    e.groups = 1;
    return e;
}

// The dense pointwise weight gradient (K x C outputs, an inner dimension of all the pixels) in slices of about
// WG_SLICE_ROWS pixels, each slice's product into scratch in one batched GEMM, then each weight's slices added
// in order (dense_wgrad_add_kernel): the slices depend on the shape alone, so the sums do too.
enum { WG_SLICE_ROWS = 2048, WG_MAX_SLICES = 256, WG_PART_FLOATS = 1 << 22 };

// Slices of `rows` pixels for a weight gradient of n outputs: at most WG_PART_FLOATS floats of partials
static int wgrad_slices(size_t rows, size_t n) {
    size_t s = rows / WG_SLICE_ROWS, cap = WG_PART_FLOATS / n;
    if (s > cap) s = cap;
    return s < 1 ? 1 : s > WG_MAX_SLICES ? WG_MAX_SLICES : (int)s;
}

extern "C" size_t conv_workspace_bytes_gpu(const Device *dev, const ConvDims *d) {
    if (dense_grouped(d)) {   // the dense conv's (its operands included), the fp32 dense weight and the slices
        ConvDims e = dense_dims(d);
        size_t nd = (size_t)d->K * d->C;
        return conv_workspace_bytes_gpu(dev, &e) + sizeof(float) * nd * (1 + wgrad_slices(pixels_out(d), nd)) + 2 * 256;
    }
    bool bf = dev->precision == GPU_BF16;
    size_t rows = chunk_rows(dev, d), crs = crs_of(d), nw = (size_t)d->K * crs / d->groups;
    size_t operand = bf ? sizeof(bf16) : sizeof(float), bytes = 8 * 256;
    if (bf || needs_permute(d)) bytes += operand * nw;                 // the GEMM's weight
    if (needs_permute(d)) bytes += sizeof(float) * nw;                 // permuted dW
    if (!is_pointwise(d)) bytes += operand * rows * crs;               // im2col rows
    if (!is_pointwise(d) && bf) bytes += sizeof(float) * rows * crs;   // fp32 dcol
    if (bf) bytes += sizeof(bf16) * rows * d->K;                       // dy
    if (bf && is_pointwise(d)) bytes += sizeof(bf16) * rows * crs;     // x
    // the bias gradient's partials are given back before anything else is taken
    size_t bias = sizeof(double) * bias_parts(pixels_out(d)) * d->K + 256;
    if (bias > bytes) bytes = bias;
    size_t stem = conv_stem_fits(d) ? conv_stem_workspace_bytes_gpu(d) : 0;   // gpu/conv_stem.cu
    return bytes > stem ? bytes : stem;
}

// Shapes are fixed when the model is built, so a mismatch is a bug in the caller. Kernels index
// pixels in 32 bits.
static void conv_check(const ConvDims *d, Map x, Map y, const char *who) {
    if (x.data && (x.N != d->N || x.H != d->H || x.W != d->W || x.C != d->C || x.ld < x.C))
        die("%s: input map %dx%dx%dx%d (ld %d) does not match conv N=%d H=%d W=%d C=%d", who, x.N,
            x.H, x.W, x.C, x.ld, d->N, d->H, d->W, d->C);
    if (y.data && (y.N != d->N || y.H != d->P || y.W != d->Q || y.C != d->K || y.ld < y.C))
        die("%s: output map %dx%dx%dx%d (ld %d) does not match conv N=%d P=%d Q=%d K=%d", who, y.N,
            y.H, y.W, y.C, y.ld, d->N, d->P, d->Q, d->K);
    if (pixels_out(d) >= (1u << 31) || (size_t)d->N * d->H >= (1u << 31))
        die("%s: %d images of %dx%d are more pixels than the kernels index", who, d->N, d->H, d->W);
}

// ---- kernels -------------------------------------------------------------------------------

// V consecutive floats: V = 4 moves 16 bytes (the caller checked the alignment), V = 1 one float.
template <int V> __device__ static inline void load_v(const float *p, float (&a)[V]) {
    if constexpr (V == 4) {
        float4 t = *(const float4 *)p;
        a[0] = t.x, a[1] = t.y, a[2] = t.z, a[3] = t.w;
    } else {
        a[0] = *p;
    }
}
template <int V> __device__ static inline void store_v(float *p, const float (&a)[V]) {
    if constexpr (V == 4) *(float4 *)p = make_float4(a[0], a[1], a[2], a[3]);
    else *p = a[0];
}
template <int V> __device__ static inline void store_v(bf16 *p, const float (&a)[V]) {
    if constexpr (V == 4) {   // round to nearest even, as __float2bfloat16
        __nv_bfloat162 t[2] = { __floats2bfloat162_rn(a[0], a[1]),
                                __floats2bfloat162_rn(a[2], a[3]) };
        *(uint2 *)p = *(const uint2 *)t;
    } else {
        *p = __float2bfloat16(a[0]);
    }
}

// Where one thread of a (columns x rows) launch starts and how far it strides: x walks the
// columns of a row (the contiguous index), y the rows, grid-striding past 65535 blocks.
#define ROW_LOOP(row, first, count) \
    for (unsigned row = (first) + blockIdx.y * blockDim.y + threadIdx.y; row < (count); \
         row += gridDim.y * blockDim.y)

// col (rows, CRS) of T = im2col of output pixels m0..m0+rows-1, columns in (g, r, s, cg) order;
// padding reads as 0. One thread per V columns, so a warp reads runs of a pixel's channels.
// V = 4 needs an fp32 x; V = 1 reads either storage.
template <typename T, int V>
__global__ void im2col_kernel(ConvDims d, Map x, unsigned m0, unsigned rows, T *col) {
    pdl_entry();
    int crs = d.C * d.R * d.S, Cg = d.C / d.groups, rscg = d.R * d.S * Cg;
    int j = (blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (j >= crs) return;
    int g = j / rscg, rs = (j - g * rscg) / Cg, cg = j - g * rscg - rs * Cg;
    int r = rs / d.S, s = rs - r * d.S;
    ROW_LOOP(row, 0, rows) {
        unsigned m = m0 + row, npix = m / d.Q, q = m - npix * d.Q, n = npix / d.P;
        int p = (int)(npix - n * d.P);
        int h = p * d.stride - d.pad + r, v = (int)q * d.stride - d.pad + s;
        float a[V] = {};
        if (h >= 0 && h < d.H && v >= 0 && v < d.W) {
            size_t off = (((size_t)n * d.H + h) * d.W + v) * x.ld + g * Cg + cg;
            if constexpr (V == 1) a[0] = map_get(x, off);
            else load_v<V>(x.data + off, a);
        }
        store_v<V>(col + (size_t)row * crs + j, a);
    }
}

// The same into bf16 rows with 8 columns (one 16-byte store) a thread and ROWS rows a thread in
// flight, their loads issued before any store: im2col is bound by memory latency, not arithmetic.
// Needs Cg % 8 == 0 and 16-byte aligned x runs (the caller checks). An fp32 x (S = float) is read
// as two float4 and rounded; a bf16-stored x (S = bf16) moves as one uint4, unchanged.
template <typename S, int ROWS>
__global__ void im2col8_kernel(ConvDims d, Map x, unsigned m0, unsigned rows, bf16 *col) {
    pdl_entry();
    int crs = d.C * d.R * d.S, Cg = d.C / d.groups, rscg = d.R * d.S * Cg;
    int j = (blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (j >= crs) return;
    int g = j / rscg, rs = (j - g * rscg) / Cg, cg = j - g * rscg - rs * Cg;
    int r = rs / d.S, s = rs - r * d.S;
    const S *xc = (const S *)x.data + g * Cg + cg;
    unsigned step = gridDim.y * blockDim.y * ROWS;
    for (unsigned row0 = (blockIdx.y * blockDim.y + threadIdx.y) * ROWS; row0 < rows; row0 += step) {
        uint4 a[ROWS][sizeof(S) / 2];   // 8 values: two uint4 of floats or one of bf16
#pragma unroll
        for (int k = 0; k < ROWS; k++) {
#pragma unroll
            for (int e = 0; e < (int)(sizeof(S) / 2); e++) a[k][e] = make_uint4(0, 0, 0, 0);
            unsigned m = m0 + row0 + k, npix = m / d.Q, q = m - npix * d.Q, n = npix / d.P;
            int p = (int)(npix - n * d.P);
            int h = p * d.stride - d.pad + r, v = (int)q * d.stride - d.pad + s;
            if (row0 + k < rows && h >= 0 && h < d.H && v >= 0 && v < d.W) {
                const uint4 *src = (const uint4 *)(xc + (((size_t)n * d.H + h) * d.W + v) * x.ld);
#pragma unroll
                for (int e = 0; e < (int)(sizeof(S) / 2); e++) a[k][e] = src[e];
            }
        }
#pragma unroll
        for (int k = 0; k < ROWS; k++) {
            if (row0 + k >= rows) break;
            uint4 out = a[k][0];
            if constexpr (sizeof(S) == sizeof(float)) {
                const float4 lo = *(const float4 *)&a[k][0], hi = *(const float4 *)&a[k][1];
                __nv_bfloat162 t[4] = { __floats2bfloat162_rn(lo.x, lo.y), __floats2bfloat162_rn(lo.z, lo.w),
                                        __floats2bfloat162_rn(hi.x, hi.y), __floats2bfloat162_rn(hi.z, hi.w) };
                out = *(const uint4 *)t;
            }
            *(uint4 *)(col + (size_t)(row0 + k) * crs + j) = out;
        }
    }
}

// dx(n,h,v,c) += every dcol entry that im2col read from it, for image rows nh0..nh1-1 (n*H + h)
// and pixel rows m0..m0+rows-1: a gather, so no atomics; terms are added in increasing output
// pixel as the CPU twin's col2im does. One thread per V channels of a pixel.
template <int V>
__global__ void col2im_kernel(ConvDims d, const float *dcol, unsigned m0, unsigned rows,
                              unsigned nh0, unsigned nh1, Map dx) {
    pdl_entry();
    int crs = d.C * d.R * d.S, Cg = d.C / d.groups, rscg = d.R * d.S * Cg;
    int e = (blockIdx.x * blockDim.x + threadIdx.x) * V;   // (v, c) within an image row
    if (e >= d.W * d.C) return;
    int v = e / d.C, c = e - v * d.C, g = c / Cg;
    const float *dc = dcol + g * rscg + (c - g * Cg);
    ROW_LOOP(nh, nh0, nh1) {
        int n = (int)(nh / d.H), h = (int)(nh - n * d.H);
        float *out = dx.data + ((size_t)nh * d.W + v) * dx.ld + c, acc[V], t[V];
        load_v<V>(out, acc);
        for (int r = d.R - 1; r >= 0; r--) {   // r descending = output row p ascending
            int hp = h + d.pad - r;
            if (hp < 0 || hp % d.stride || hp / d.stride >= d.P) continue;
            for (int s = d.S - 1; s >= 0; s--) {
                int vq = v + d.pad - s;
                if (vq < 0 || vq % d.stride || vq / d.stride >= d.Q) continue;
                unsigned m = ((unsigned)n * d.P + hp / d.stride) * d.Q + vq / d.stride;
                if (m < m0 || m - m0 >= rows) continue;
                load_v<V>(dc + (size_t)(m - m0) * crs + (r * d.S + s) * Cg, t);
                for (int i = 0; i < V; i++) acc[i] += t[i];
            }
        }
        store_v<V>(out, acc);
    }
}

// wc (K, Cg·R·S) of T = w (K, Cg, R, S) with each row's columns reordered to (r, s, cg) when
// `permute`, else copied; the GEMM's weight operand.
template <typename T>
__global__ void weight_to_cols_kernel(ConvDims d, const float *w, bool permute, T *wc) {
    pdl_entry();
    int Cg = d.C / d.groups, rs_n = d.R * d.S, cgrs = Cg * rs_n;
    GRID_STRIDE(i, (size_t)d.K * cgrs) {
        int j = (int)(i % cgrs), rs = j / Cg, cg = j - rs * Cg;
        size_t src = permute ? i - j + (size_t)cg * rs_n + rs : i;
        float a[1] = { w[src] };
        store_v<1>(wc + i, a);
    }
}

// dw (K, Cg, R, S) += dwc (K, R·S·Cg) of T: the permuted weight gradient back in PyTorch order
template <typename T>
__global__ void weight_grad_from_cols_kernel(ConvDims d, const T *dwc, float *dw) {
    pdl_entry();
    int Cg = d.C / d.groups, rs_n = d.R * d.S, cgrs = Cg * rs_n;
    GRID_STRIDE(i, (size_t)d.K * cgrs) {
        int j = (int)(i % cgrs), cg = j / rs_n, rs = j - cg * rs_n;
        dw[i] += (float)dwc[i - j + (size_t)rs * Cg + cg];
    }
}

// wd (K, C): grouped pointwise conv d's weight w (K, Cg) in each output channel's group block, zeros elsewhere
// (dense_grouped)
__global__ void dense_weight_kernel(ConvDims d, const float *w, float *wd) {
    pdl_entry();
    int Cg = d.C / d.groups, Kg = d.K / d.groups;
    GRID_STRIDE(i, (size_t)d.K * d.C) {
        int k = (int)(i / d.C), cg = (int)(i - (size_t)k * d.C) - k / Kg * Cg;
        wd[i] = cg >= 0 && cg < Cg ? w[(size_t)k * Cg + cg] : 0.0f;
    }
}

// dw (K, Cg) += the group blocks of Σ_s part[s], part (S, K, C) the slices of a dense pointwise weight
// gradient (wgrad_slices), added in slice order
__global__ void dense_wgrad_add_kernel(const float *part, int S, ConvDims d, float *dw) {
    pdl_entry();
    int Cg = d.C / d.groups, Kg = d.K / d.groups;
    GRID_STRIDE(i, (size_t)d.K * Cg) {
        int k = (int)(i / Cg), cg = (int)(i - (size_t)k * Cg);
        const float *p = part + (size_t)k * d.C + k / Kg * Cg + cg;
        float acc = p[0];
        for (int s = 1; s < S; s++) acc += p[(size_t)s * d.K * d.C];
        dw[i] += acc;
    }
}

// rows m0..m0+rows-1 of y = bias, so the GEMM can accumulate onto them (a row_launch grid: x the channels)
__global__ void fill_bias_kernel(Map y, size_t m0, size_t rows, const float *b) {
    pdl_entry();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= y.C) return;
    ROW_LOOP(r, 0, rows) y.data[(m0 + r) * y.ld + c] = b[c];
}

// db (K) += column sums of dy over its M pixels, in double, in two levels as BN's statistics:
// block row blockIdx.y of G takes pixel strips blockIdx.y, blockIdx.y + G, ... of BIAS_TILE_M
// pixels and writes a partial per channel; then one thread per channel adds the G partials in
// order. G depends on M alone, so the result does not depend on the GPU (deterministic).
__global__ void bias_partial_kernel(Map dy, double *part) {   // part (G, K)
    pdl_entry();
    __shared__ double sh[BIAS_TILE_M][BIAS_TILE_C];
    int k = blockIdx.x * BIAS_TILE_C + threadIdx.x;
    size_t M = (size_t)dy.N * dy.H * dy.W;
    double s = 0.0;
    if (k < dy.C)
        for (size_t m = blockIdx.y * (size_t)BIAS_TILE_M + threadIdx.y; m < M;
             m += (size_t)gridDim.y * BIAS_TILE_M)
            s += dy.data[m * dy.ld + k];
    sh[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y != 0 || k >= dy.C) return;
    for (int t = 1; t < BIAS_TILE_M; t++) s += sh[t][threadIdx.x];
    part[(size_t)blockIdx.y * dy.C + k] = s;
}

__global__ void bias_combine_kernel(const double *part, int G, int K, float *db) {
    pdl_entry();
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    double s = 0.0;
    for (int g = 0; g < G; g++) s += part[(size_t)g * K + k];
    db[k] += (float)s;
}

// dst (rows, cols) packed = bf16(src (rows, cols) with row stride ld), round to nearest even (a row_launch grid)
__global__ void to_bf16_kernel(const float *src, size_t rows, int cols, int ld, bf16 *dst) {
    pdl_entry();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    ROW_LOOP(r, 0, rows) dst[(size_t)r * cols + c] = __float2bfloat16(src[(size_t)r * ld + c]);
}

// ---- GEMM operands and the one GEMM call ---------------------------------------------------

static void row_launch(size_t cols, size_t rows, dim3 *grid, dim3 *block);

// A row-major GEMM operand: data with row stride ld, fp32 or (under GPU_BF16) a packed bf16 copy.
struct Operand { const void *p; int ld; };

// The operand for a row-major (rows, cols) fp32 matrix with row stride ld, as dev->precision
// wants it; a bf16 copy lives in scratch until the caller's op returns.
static Operand operand(Device *dev, const float *src, size_t rows, int cols, int ld) {
    if (dev->precision != GPU_BF16) return Operand{ src, ld };
    bf16 *dst = (bf16 *)scratch_take(dev, sizeof(bf16) * rows * cols);
    dim3 grid, block;
    row_launch(cols, rows, &grid, &block);
    to_bf16_kernel<<<grid, block, 0, dev->stream>>>(src, rows, cols, ld, dst);
    checkLaunch(dev);
    return Operand{ dst, cols };
}

// Rows m0.. of an input map as the operand: a bf16-stored map is one already (no copy).
static Operand x_operand(Device *dev, Map x, size_t m0, size_t rows, int cols) {
    if (!x.bf16) return operand(dev, x.data + m0 * x.ld, rows, cols, x.ld);
    if (dev->precision != GPU_BF16) die("conv: a bf16-stored input on a device without bf16 GEMMs");
    return Operand{ (const bf16 *)x.data + m0 * x.ld, x.ld };
}

// One GEMM per group in cuBLAS's column-major terms: C_g = op(A_g)·op(B_g) + beta·C_g, with
// A_g = A + g·sa, B_g = B + g·sb, C_g = C + g·sc (element offsets), g = 0..groups-1.
struct Gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    Operand a, b;
    long long sa, sb, sc;
};

// c is fp32, or (c16) bf16: the output of a bf16 GEMM rounded once.
static void gemm(Device *dev, const Gemm *g, int groups, float beta, void *c, int ldc, bool c16 = false) {
    cudaDataType_t ab = dev->precision == GPU_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct =
        dev->precision == GPU_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    float alpha = 1.0f;
    checkCublas(cublasGemmStridedBatchedEx(dev->blas, g->ta, g->tb, g->m, g->n, g->k, &alpha,
                                           g->a.p, ab, g->a.ld, g->sa, g->b.p, ab, g->b.ld, g->sb,
                                           &beta, c, c16 ? CUDA_R_16BF : CUDA_R_32F, ldc, g->sc, groups, ct,
                                           CUBLAS_GEMM_DEFAULT));
}

// The three products, per group, in row-major words (a = im2col rows or x, rows × CRS; W is the
// weight operand, its columns in the order of a's):
//   forward      y  (rows, K)        = a · W^T      column-major: y^T  = W · a^T
//   weight grad  dW (K, Cg·R·S)     += dy^T · a     column-major: dW^T = a^T · dy
//   input grad   da (rows, CRS)      = dy · W       column-major: da^T = W^T · dy^T
// y: rows m0.. of the output map, either storage
static void gemm_forward(Device *dev, const ConvDims *d, Operand a, int rows, Operand w,
                         float beta, Map y, size_t m0) {
    int G = d->groups, Kg = d->K / G, cgrs = (int)(crs_of(d) / G);
    Gemm g = { CUBLAS_OP_T, CUBLAS_OP_N, Kg, rows, cgrs, w, a, (long long)Kg * cgrs, cgrs, Kg };
    void *c = y.bf16 ? (void *)((bf16 *)y.data + m0 * y.ld) : (void *)(y.data + m0 * y.ld);
    gemm(dev, &g, G, beta, c, y.ld, y.bf16);
}

static void gemm_weight_grad(Device *dev, const ConvDims *d, Operand dy, int rows, Operand a,
                             float beta, float *dw) {
    int G = d->groups, Kg = d->K / G, cgrs = (int)(crs_of(d) / G);
    Gemm g = { CUBLAS_OP_N, CUBLAS_OP_T, cgrs, Kg, rows, a, dy, cgrs, Kg, (long long)Kg * cgrs };
    gemm(dev, &g, G, beta, dw, cgrs);
}

static void gemm_input_grad(Device *dev, const ConvDims *d, Operand dy, int rows, Operand w,
                            float beta, float *da, int ldda) {
    int G = d->groups, Kg = d->K / G, cgrs = (int)(crs_of(d) / G);
    Gemm g = { CUBLAS_OP_N, CUBLAS_OP_N, cgrs, rows, Kg, w, dy, (long long)Kg * cgrs, Kg, cgrs };
    gemm(dev, &g, G, beta, da, ldda);
}

// ---- launchers -----------------------------------------------------------------------------

static bool aligned16(const void *p) { return (size_t)p % 16 == 0; }

// A (columns x rows) launch of about THREADS threads a block: x covers `cols` threads of a row
// in as few warps as fit, y the rows (grid-striding past the grid's limit).
static void row_launch(size_t cols, size_t rows, dim3 *grid, dim3 *block) {
    unsigned bx = (unsigned)((cols + THREADS - 1) / THREADS);
    unsigned tx = (unsigned)((cols + bx - 1) / bx + 31) / 32 * 32, ty = THREADS / tx;
    size_t by = (rows + ty - 1) / ty;
    *block = dim3(tx, ty);
    *grid = dim3(bx, by < 1 ? 1 : by > 65535 ? 65535 : (unsigned)by);
}

// 16-byte accesses when each group's channels, the pixel stride and the base allow them
static bool vec4_ok(const ConvDims *d, Map m) {
    return (d->C / d->groups) % 4 == 0 && m.ld % 4 == 0 && aligned16(m.data);
}

enum { IM2COL_ROWS = 4 };   // rows a thread of im2col8_kernel keeps in flight

// 8 columns a thread: bf16 rows, whole 16-byte runs of x (Cg, ld and the base at 8 elements)
static bool vec8_ok(const ConvDims *d, Map x) {
    return (d->C / d->groups) % 8 == 0 && x.ld % 8 == 0 && aligned16(x.data);
}

template <typename T>
static void im2col(Device *dev, const ConvDims *d, Map x, size_t m0, size_t rows, T *col) {
    dim3 grid, block;
    if (sizeof(T) == sizeof(bf16) && vec8_ok(d, x)) {
        row_launch(crs_of(d) / 8, (rows + IM2COL_ROWS - 1) / IM2COL_ROWS, &grid, &block);
        if (x.bf16)
            im2col8_kernel<bf16, IM2COL_ROWS><<<grid, block, 0, dev->stream>>>(*d, x, (unsigned)m0,
                                                                               (unsigned)rows, (bf16 *)col);
        else
            im2col8_kernel<float, IM2COL_ROWS><<<grid, block, 0, dev->stream>>>(*d, x, (unsigned)m0,
                                                                                (unsigned)rows, (bf16 *)col);
    } else if (!x.bf16 && vec4_ok(d, x)) {
        row_launch(crs_of(d) / 4, rows, &grid, &block);
        im2col_kernel<T, 4><<<grid, block, 0, dev->stream>>>(*d, x, (unsigned)m0, (unsigned)rows, col);
    } else {
        row_launch(crs_of(d), rows, &grid, &block);
        im2col_kernel<T, 1><<<grid, block, 0, dev->stream>>>(*d, x, (unsigned)m0, (unsigned)rows, col);
    }
    checkLaunch(dev);
}

// The image rows n*H + h of dx that pixel rows m0..m0+rows-1 read: from the first row's window
// top to the last row's window bottom.
static void image_rows_of(const ConvDims *d, size_t m0, size_t rows, unsigned *nh0, unsigned *nh1) {
    size_t PQ = (size_t)d->P * d->Q, last = m0 + rows - 1;
    long top = (long)(m0 % PQ / d->Q) * d->stride - d->pad;
    long bottom = (long)(last % PQ / d->Q) * d->stride - d->pad + d->R - 1;
    top = top < 0 ? 0 : top >= d->H ? d->H - 1 : top;
    bottom = bottom < 0 ? 0 : bottom >= d->H ? d->H - 1 : bottom;
    *nh0 = (unsigned)(m0 / PQ * d->H + top);
    *nh1 = (unsigned)(last / PQ * d->H + bottom + 1);
}

static void col2im(Device *dev, const ConvDims *d, const float *dcol, size_t m0, size_t rows,
                   Map dx) {
    unsigned nh0, nh1;
    image_rows_of(d, m0, rows, &nh0, &nh1);
    if (nh1 <= nh0) return;
    dim3 grid, block;
    bool v4 = vec4_ok(d, dx);
    row_launch((size_t)d->W * d->C / (v4 ? 4 : 1), nh1 - nh0, &grid, &block);
    if (v4)
        col2im_kernel<4><<<grid, block, 0, dev->stream>>>(*d, dcol, (unsigned)m0, (unsigned)rows,
                                                          nh0, nh1, dx);
    else
        col2im_kernel<1><<<grid, block, 0, dev->stream>>>(*d, dcol, (unsigned)m0, (unsigned)rows,
                                                          nh0, nh1, dx);
    checkLaunch(dev);
}

// out = bf16(w) (as weight_to_cols_kernel rounds), each of the n_perm segments {start, end, Cg, R·S}
// (by start) in the columns' order (K, R, S, Cg) that weight_to_cols_kernel permutes to
__global__ void weights_to_bf16_kernel(const float *w, size_t n, const int4 *perm, int n_perm, bf16 *out) {
    pdl_entry();
    GRID_STRIDE(i, n) {
        int lo = 0, hi = n_perm;   // the first segment starting after i
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if ((size_t)__ldg(&perm[mid].x) <= i) lo = mid + 1;
            else hi = mid;
        }
        size_t src = i;
        if (lo > 0) {
            int4 s = __ldg(&perm[lo - 1]);
            if (i < (size_t)s.y) {
                int cgrs = s.z * s.w, j = (int)((i - s.x) % cgrs), rs = j / s.z, cg = j - rs * s.z;
                src = i - j + (size_t)cg * s.w + rs;
            }
        }
        out[i] = __float2bfloat16(w[src]);
    }
}

static bool weights_once_on() { return !switch_is(SW_WEIGHTS_ONCE, "0"); }

// YT_WEIGHTS_ONCE=unpermuted: the permuted weights rounded per call, as before (to measure)
static bool weights_permuted_once_on() { return !switch_is(SW_WEIGHTS_ONCE, "unpermuted"); }

// Whether the pass's bf16 copy holds the n weights at w, in the order the caller needs (permuted or not).
static bool weights_prepared(const Device *dev, const float *w, size_t n, bool permute) {
    if (!dev->wbf16_n || w < dev->wbf16_src || w + n > dev->wbf16_src + dev->wbf16_n) return false;
    int at = (int)(w - dev->wbf16_src), lo = 0, hi = weights_permuted_once_on() ? dev->wperm_n : 0;
    while (lo < hi) {   // a segment starting at w?
        int mid = (lo + hi) / 2, s = dev->wperm_host[4 * mid];
        if (s == at) return permute && dev->wperm_host[4 * mid + 1] == at + (int)n;
        if (s < at) lo = mid + 1;
        else hi = mid;
    }
    return !permute;
}

// One launch for every weight of a pass instead of one per conv call (about 320 a gelan-s step), the
// permuted ones (dev->wperm) in their columns' order (about 275 more launches a gelan-s step at batch 16).
extern "C" void conv_prepare_weights_gpu(Device *dev, const float *state, size_t n) {
    dev->wbf16_n = 0;
    if (dev->precision != GPU_BF16 || !dev->wbf16 || n > dev->wbf16_cap || !weights_once_on()) return;
    int n_perm = weights_permuted_once_on() ? dev->wperm_n : 0;
    weights_to_bf16_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(state, n, (const int4 *)dev->wperm, n_perm,
                                                                       (bf16 *)dev->wbf16);
    checkLaunch(dev);
    dev->wbf16_src = state;
    dev->wbf16_n = n;
}

// A pointwise conv's weights (K, C) in the pass's bf16 copy, or NULL where it does not hold them (gpu/conv_bn.cu)
extern "C" const void *conv_prepared_weights_gpu(const Device *dev, const ConvDims *d, const float *w) {
    size_t n = (size_t)d->K * crs_of(d) / d->groups;
    if (dev->precision != GPU_BF16 || needs_permute(d) || !weights_prepared(dev, w, n, false)) return NULL;
    return (const bf16 *)dev->wbf16 + (w - dev->wbf16_src);
}

// The weight operand (K, Cg·R·S) in the columns' order: the pass's bf16 copy when it holds w in that
// order (conv_prepare_weights_gpu), else made for this call when it is permuted or converted to bf16.
static Operand weight_operand(Device *dev, const ConvDims *d, const float *w) {
    int cgrs = (int)(crs_of(d) / d->groups);
    size_t n = (size_t)d->K * cgrs;
    bool permute = needs_permute(d);
    if (dev->precision == GPU_BF16 && weights_prepared(dev, w, n, permute))
        return Operand{ (const bf16 *)dev->wbf16 + (w - dev->wbf16_src), cgrs };
    if (dev->precision == GPU_BF16) {
        bf16 *wc = (bf16 *)scratch_take(dev, sizeof(bf16) * n);
        weight_to_cols_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(*d, w, permute, wc);
        checkLaunch(dev);
        return Operand{ wc, cgrs };
    }
    if (!permute) return Operand{ w, cgrs };
    float *wc = (float *)scratch_take(dev, sizeof(float) * n);
    weight_to_cols_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(*d, w, permute, wc);
    checkLaunch(dev);
    return Operand{ wc, cgrs };
}

// im2col rows m0..m0+rows-1 as a GEMM operand: written straight in bf16 under GPU_BF16
static Operand col_operand(Device *dev, const ConvDims *d, Map x, size_t m0, size_t rows,
                           void *col) {
    if (dev->precision == GPU_BF16) im2col(dev, d, x, m0, rows, (bf16 *)col);
    else im2col(dev, d, x, m0, rows, (float *)col);
    return Operand{ col, (int)crs_of(d) };
}

static size_t operand_bytes(const Device *dev) {
    return dev->precision == GPU_BF16 ? sizeof(bf16) : sizeof(float);
}

// The dense (K, C) fp32 weight of grouped pointwise conv d in scratch (dense_grouped)
static float *dense_weight(Device *dev, const ConvDims *d, const float *w) {
    size_t nd = (size_t)d->K * d->C;
    float *wd = (float *)scratch_take(dev, sizeof(float) * nd);
    dense_weight_kernel<<<blocks_for(nd), THREADS, 0, dev->stream>>>(*d, w, wd);
    checkLaunch(dev);
    return wd;
}

// ---- the cuDNN path (gpu/cudnn_conv.c) -------------------------------------------------------
// Implicit-GEMM convolutions with no im2col or col2im. Under GPU_BF16 every operand is bf16 (maps
// stored bf16, the packed dz of the fused BN backward, the weight converted to bf16 KRSC): a forward
// into an fp32 map is tried and goes the GEMM path where cuDNN has no engine for it, and the weight
// and data gradients come out in bf16 and are added to the fp32 gradients. Under GPU_TF32 all is
// fp32. Whatever cuDNN refuses, or an fp32-stored input under GPU_BF16, goes the GEMM path. The
// weight is converted per call, as the GEMM path does.

enum { CUDNN_DX_TEMP_BYTES = 64 << 20 };   // bound on a bf16 dx staged before it is added

// precision=fp32 (TF32 off) keeps the GEMM path: cuDNN's engines without tensor cores are slower than
// im2col + cuBLAS there (bench/RESULTS.md), and fp32 is the precision that checks the others.
// A pointwise conv is one GEMM already (no im2col), and its backward adds into dx through the
// GEMM's beta: it stays there too (cuDNN was slower there as well: bench/RESULTS.md).
static bool cudnn_on(const Device *dev, const ConvDims *d) {
    return dev->cudnn != NULL && dev->precision != GPU_FP32 && !is_pointwise(d);
}

// Whether a conv's data gradient comes out rounded to bf16 under GPU_BF16 with cuDNN (core/spec/grad_plan.c stores
// such gradients as bf16): cuDNN's, for every conv but a pointwise one, whose one GEMM writes fp32
extern "C" int conv_dgrad_bf16_gpu(const ConvDims *d) { return !is_pointwise(d); }

static CudnnOperand map_operand(Map m) { return CudnnOperand{ m.data, m.ld, m.bf16 }; }

// The weight (K, Cg, R, S) fp32 as the filter operand (K, R, S, Cg) of the device's GEMM type:
// the original itself when no permutation or conversion is needed.
static CudnnOperand filter_operand(Device *dev, const ConvDims *d, const float *w) {
    Operand o = weight_operand(dev, d, w);
    return CudnnOperand{ (void *)o.p, 0, dev->precision == GPU_BF16 };
}

static int tensor_cores(const Device *dev) { return dev->precision != GPU_FP32; }

// The scratch left after what this call took: cuDNN's workspace, at the arena's current end.
static void *workspace(Device *dev, size_t *cap) {
    size_t at = (dev->scratch.used + 255) & ~(size_t)255;
    *cap = at < dev->scratch.size ? dev->scratch.size - at : 0;
    return dev->scratch.base + at;
}

static bool cudnn_forward(Device *dev, const ConvDims *d, Map x, const float *w, const float *b, Map y) {
    bool bf = dev->precision == GPU_BF16;
    if (!cudnn_on(dev, d) || (bf && !x.bf16) || (b && y.bf16)) return false;
    size_t mark = dev->scratch.used, cap;
    CudnnOperand wo = filter_operand(dev, d, w);
    if (b) {   // y = bias, then y = conv + 1 * y
        dim3 grid, block;
        row_launch(d->K, pixels_out(d), &grid, &block);
        fill_bias_kernel<<<grid, block, 0, dev->stream>>>(y, 0, pixels_out(d), b);
        checkLaunch(dev);
    }
    void *ws = workspace(dev, &cap);
    int rc = cudnn_conv_run(dev->cudnn, CUDNN_FWD, d, map_operand(x), wo, map_operand(y), b ? 1.0f : 0.0f,
                            tensor_cores(dev), ws, cap);
    dev->scratch.used = mark;
    return rc == 0;   // refused: the GEMM path overwrites the bias rows as it fills them
}

// dw (K, Cg, R, S) += the weight gradient. cuDNN writes (K, R, S, Cg): straight into dw (beta 1)
// when that is the same order and fp32, else into scratch, then added back in PyTorch's order.
// Under GPU_BF16 cuDNN has no engine for bf16 inputs and an fp32 filter gradient, so the sum over
// the batch is rounded to bf16 once before it is added (as PyTorch's autocast convolutions
// return their weight gradients); the GEMM path keeps it fp32.
static bool cudnn_wgrad(Device *dev, const ConvDims *d, Map x, Map dy, const bf16 *dy16, float *dw) {
    bool bf = dev->precision == GPU_BF16;
    if (!cudnn_on(dev, d) || (bf && (!x.bf16 || !dy16))) return false;
    CudnnOperand g = dy16 ? CudnnOperand{ (void *)dy16, d->K, 1 } : map_operand(dy);
    size_t mark = dev->scratch.used, cap, n = (size_t)d->K * crs_of(d) / d->groups;
    bool direct = !bf && !needs_permute(d);
    void *dwc = direct ? (void *)dw : scratch_take(dev, (bf ? sizeof(bf16) : sizeof(float)) * n);
    void *ws = workspace(dev, &cap);
    int rc = cudnn_conv_run(dev->cudnn, CUDNN_WGRAD, d, map_operand(x), CudnnOperand{ dwc, 0, bf }, g,
                            direct ? 1.0f : 0.0f, tensor_cores(dev), ws, cap);
    if (rc == 0 && !direct) {
        if (bf) weight_grad_from_cols_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(*d, (const bf16 *)dwc, dw);
        else weight_grad_from_cols_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(*d, (const float *)dwc, dw);
        checkLaunch(dev);
    }
    dev->scratch.used = mark;
    return rc == 0;
}

// dx += the input gradient: straight into the fp32 dx (beta 1) in tf32; under GPU_BF16, where
// cuDNN (9.19) has no engine for bf16 operands with an fp32 dx, computed in bf16 a few images at
// a time into scratch and added (the rounding PyTorch's autocast gives activation gradients).
// dx.fresh (a first write into an unzeroed buffer): beta 0, or the bf16 images copied, not added. A bf16 dx
// (a gradient the plan stores rounded, core/spec/grad_plan.c: always a fresh write of a whole buffer) takes the
// same calls' results straight, with nothing to copy.
static bool cudnn_dgrad(Device *dev, const ConvDims *d, const float *w, Map dy, const bf16 *dy16, Map dx) {
    bool bf = dev->precision == GPU_BF16;
    if (!cudnn_on(dev, d) || (bf && !dy16)) return false;
    CudnnOperand g = dy16 ? CudnnOperand{ (void *)dy16, d->K, 1 } : map_operand(dy);
    size_t mark = dev->scratch.used, cap;
    CudnnOperand wo = filter_operand(dev, d, w);
    void *ws = workspace(dev, &cap);
    int rc = bf ? -1 : cudnn_conv_run(dev->cudnn, CUDNN_DGRAD, d, map_operand(dx), wo, g, dx.fresh ? 0.0f : 1.0f,
                                      tensor_cores(dev), ws, cap);
    if (bf) {
        size_t per_image = sizeof(bf16) * d->H * d->W * d->C;
        int step = (int)(CUDNN_DX_TEMP_BYTES / per_image);
        step = step < 1 ? 1 : step > d->N ? d->N : step;
        bf16 *tmp = dx.bf16 ? NULL : (bf16 *)scratch_take(dev, per_image * step);
        ws = workspace(dev, &cap);
        rc = 0;
        int n0 = 0;
        for (; n0 < d->N && rc == 0; n0 += step) {
            ConvDims c = *d;
            c.N = d->N - n0 < step ? d->N - n0 : step;
            CudnnOperand gi = { (bf16 *)g.p + (size_t)n0 * d->P * d->Q * g.ld, g.ld, 1 };
            bf16 *out = dx.bf16 ? (bf16 *)dx.data + (size_t)n0 * d->H * d->W * dx.ld : tmp;
            rc = cudnn_conv_run(dev->cudnn, CUDNN_DGRAD, &c, CudnnOperand{ out, dx.bf16 ? dx.ld : d->C, 1 }, wo, gi,
                                0.0f, tensor_cores(dev), ws, cap);
            if (rc != 0) break;   // n0 images are in dx already
            if (dx.bf16) continue;
            Map src = { (float *)tmp, c.N, d->H, d->W, d->C, d->C, 1, 0 };
            Map dst = dx;
            dst.N = c.N;
            dst.data = dx.data + (size_t)n0 * d->H * d->W * dx.ld;
            if (dx.fresh) copy_map_gpu(dev, src, dst);
            else accumulate_map_gpu(dev, src, dst);
        }
        if (rc != 0 && n0 > 0) die("cudnn_dgrad: cuDNN took part of a convolution's images, not all");
    }
    dev->scratch.used = mark;
    return rc == 0;
}

extern "C" void conv_forward_gpu(Device *dev, const ConvDims *d, Map x, const float *w,
                                 const float *b, Map y) {
    conv_check(d, x, y, "conv_forward_gpu");
    if (b) require_fp32(y, "conv_forward_gpu (with a bias)");
    if (y.bf16 && dev->precision != GPU_BF16) die("conv_forward_gpu: a bf16 output without bf16 GEMMs");
    if (dense_grouped(d)) {   // the dense conv with the group-block weight
        size_t mark = dev->scratch.used;
        ConvDims e = dense_dims(d);
        conv_forward_gpu(dev, &e, x, dense_weight(dev, d, w), b, y);
        dev->scratch.used = mark;
        return;
    }
    if (conv_stem_fits(d)) { conv_stem_forward_gpu(dev, d, x, w, b, y); return; }
    if (cudnn_forward(dev, d, x, w, b, y)) return;
    size_t mark = dev->scratch.used, M = pixels_out(d), chunk = chunk_rows(dev, d);
    int crs = (int)crs_of(d);
    Operand wo = weight_operand(dev, d, w);
    void *col = is_pointwise(d) ? NULL : scratch_take(dev, operand_bytes(dev) * chunk * crs);
    for (size_t m0 = 0; m0 < M; m0 += chunk) {
        size_t rows = M - m0 < chunk ? M - m0 : chunk, mark_chunk = dev->scratch.used;
        Operand a = col ? col_operand(dev, d, x, m0, rows, col) : x_operand(dev, x, m0, rows, crs);
        if (b) {
            dim3 grid, block;
            row_launch(d->K, rows, &grid, &block);
            fill_bias_kernel<<<grid, block, 0, dev->stream>>>(y, m0, rows, b);
            checkLaunch(dev);
        }
        gemm_forward(dev, d, a, (int)rows, wo, b ? 1.0f : 0.0f, y, m0);
        dev->scratch.used = mark_chunk;
    }
    dev->scratch.used = mark;
}

// db += column sums of dy; its partials live in scratch only while it runs
static void bias_grad(Device *dev, Map dy, float *db) {
    size_t mark = dev->scratch.used;
    int G = bias_parts(map_pixels(dy));
    double *part = (double *)scratch_take(dev, sizeof(double) * G * dy.C);
    dim3 grid((dy.C + BIAS_TILE_C - 1) / BIAS_TILE_C, G), block(BIAS_TILE_C, BIAS_TILE_M);
    bias_partial_kernel<<<grid, block, 0, dev->stream>>>(dy, part);
    checkLaunch(dev);
    bias_combine_kernel<<<(dy.C + THREADS - 1) / THREADS, THREADS, 0, dev->stream>>>(part, G, dy.C,
                                                                                    db);
    checkLaunch(dev);
    dev->scratch.used = mark;
}

// Scratch of one backward call: the permuted dW accumulates over chunks (NULL when dW goes
// straight into dw), col holds im2col rows, dcol the input-gradient rows (col itself unless the
// rows are bf16).
struct BackwardScratch { float *dwc; void *col; float *dcol; };

static BackwardScratch backward_scratch(Device *dev, const ConvDims *d, bool want_dw, bool want_dx) {
    BackwardScratch s = { NULL, NULL, NULL };
    size_t chunk = chunk_rows(dev, d), crs = crs_of(d);
    if (want_dw && needs_permute(d))
        s.dwc = (float *)scratch_take(dev, sizeof(float) * d->K * crs / d->groups);
    if (is_pointwise(d)) return s;
    s.col = scratch_take(dev, operand_bytes(dev) * chunk * crs);
    s.dcol = (float *)s.col;
    if (want_dx && dev->precision == GPU_BF16)
        s.dcol = (float *)scratch_take(dev, sizeof(float) * chunk * crs);
    return s;
}

// Images n0 .. n0 + n of map m (either storage)
static Map images_of(Map m, int n0, int n) {
    size_t off = (size_t)n0 * m.H * m.W * m.ld;
    m.data = m.bf16 ? (float *)((bf16 *)m.data + off) : m.data + off;
    m.N = n;
    return m;
}

static void conv_backward(Device *dev, const ConvDims *d, Map x, const float *w, Map dy,
                          const bf16 *dy16, Map dx, float *dw);

// A bf16 dx that cuDNN did not write: the GEMM path's fp32 result a few images at a time in scratch, rounded
// into dx (the rounding cuDNN's bf16 data gradient has)
static void dgrad_into_bf16(Device *dev, const ConvDims *d, Map x, const float *w, Map dy, const bf16 *dy16,
                            Map dx) {
    size_t per_image = sizeof(float) * d->H * d->W * d->C, mark = dev->scratch.used;
    int step = (int)(CUDNN_DX_TEMP_BYTES / per_image);
    step = step < 1 ? 1 : step > d->N ? d->N : step;
    float *tmp = (float *)scratch_take(dev, per_image * step);
    for (int n0 = 0; n0 < d->N; n0 += step) {
        ConvDims c = *d;
        c.N = d->N - n0 < step ? d->N - n0 : step;
        Map part = { tmp, c.N, d->H, d->W, d->C, d->C, 0, 1 };   // fresh
        Map g = dy.data ? images_of(dy, n0, c.N) : dy;
        conv_backward(dev, &c, images_of(x, n0, c.N), w, g, dy16 ? dy16 + (size_t)n0 * d->P * d->Q * d->K : NULL,
                      part, NULL);
        copy_map_gpu(dev, part, images_of(dx, n0, c.N));
    }
    dev->scratch.used = mark;
}

// dx, dw += of a grouped pointwise conv through its dense form (dense_grouped): the weight gradient in slices of
// pixels straight into dw's group blocks, the input gradient by the dense weight.
static void dense_backward(Device *dev, const ConvDims *d, Map x, const float *w, Map dy, const bf16 *dy16, Map dx,
                           float *dw) {
    ConvDims e = dense_dims(d);
    size_t mark = dev->scratch.used, nd = (size_t)d->K * d->C, nw = nd / d->groups, M = pixels_out(d);
    if (dx.data && dx.bf16) die("conv_backward: a pointwise conv's input gradient is fp32 (conv_dgrad_bf16_gpu)");
    Operand dyo = dy16 ? Operand{ dy16, d->K } : operand(dev, dy.data, M, d->K, dy.ld);
    if (dw) {
        Operand a = x_operand(dev, x, 0, M, d->C);
        int S = wgrad_slices(M, nd), per = (int)(M / S), n = (int)nd;
        float *part = (float *)scratch_take(dev, sizeof(float) * S * nd);
        Gemm g = { CUBLAS_OP_N, CUBLAS_OP_T, d->C, d->K, per, a, dyo, (long long)per * a.ld, (long long)per * dyo.ld, n };
        gemm(dev, &g, S, 0.0f, part, d->C);
        size_t m0 = (size_t)S * per, eb = operand_bytes(dev);
        if (M > m0) {   // the rows left over, onto the last slice
            Operand ar = { (const char *)a.p + m0 * a.ld * eb, a.ld }, dr = { (const char *)dyo.p + m0 * dyo.ld * eb, dyo.ld };
            Gemm r = { CUBLAS_OP_N, CUBLAS_OP_T, d->C, d->K, (int)(M - m0), ar, dr, 0, 0, 0 };
            gemm(dev, &r, 1, 1.0f, part + (size_t)(S - 1) * nd, d->C);
        }
        dense_wgrad_add_kernel<<<blocks_for(nw), THREADS, 0, dev->stream>>>(part, S, *d, dw);
        checkLaunch(dev);
    }
    if (dx.data)   // a first write (tensor.h): every row written once, beta 0
        gemm_input_grad(dev, &e, dyo, (int)M, weight_operand(dev, &e, dense_weight(dev, d, w)), dx.fresh ? 0.0f : 1.0f,
                        dx.data, dx.ld);
    dev->scratch.used = mark;
}

// dx, dw += from dy: the fp32 map, or (dy16 set) its packed bf16 copy. A bf16 dx is written (it must be fresh).
static void conv_backward(Device *dev, const ConvDims *d, Map x, const float *w, Map dy,
                          const bf16 *dy16, Map dx, float *dw) {
    if (!dw && !dx.data) return;
    if (dx.data && dx.bf16 && !dx.fresh) die("conv_backward: a bf16 input gradient must be a fresh write");
    if (dense_grouped(d)) {
        dense_backward(dev, d, x, w, dy, dy16, dx, dw);
        return;
    }
    if (!conv_stem_fits(d)) {   // cuDNN takes what it can; the GEMM path below does the rest
        if (dw && cudnn_wgrad(dev, d, x, dy, dy16, dw)) dw = NULL;
        if (dx.data && cudnn_dgrad(dev, d, w, dy, dy16, dx)) dx.data = NULL;
        if (!dw && !dx.data) return;
    }
    if (dx.data && dx.bf16) {
        dgrad_into_bf16(dev, d, x, w, dy, dy16, dx);
        dx.data = NULL;
        if (!dw) return;
    }
    if (conv_stem_fits(d)) {   // the weight gradient directly; dx (never needed for the images) by GEMM
        Map g = dy16 ? Map{ (float *)dy16, d->N, d->P, d->Q, d->K, d->K, 1, 0 } : dy;
        if (dw) conv_stem_wgrad_gpu(dev, d, x, g, dw);
        if (!dx.data) return;
        dw = NULL;
    }
    size_t mark = dev->scratch.used, M = pixels_out(d), chunk = chunk_rows(dev, d);
    int crs = (int)crs_of(d);
    Operand wo = weight_operand(dev, d, w);
    BackwardScratch s = backward_scratch(dev, d, dw != NULL, dx.data != NULL);
    // a first write (tensor.h): a pointwise conv's GEMM writes each dx row once (beta 0); col2im adds
    // the overlapping windows of every chunk, so it adds onto zeros
    float dx_beta = dx.fresh && is_pointwise(d) ? 0.0f : 1.0f;
    if (dx.data && dx.fresh && !is_pointwise(d)) zero_map_gpu(dev, dx);
    for (size_t m0 = 0; m0 < M; m0 += chunk) {
        size_t rows = M - m0 < chunk ? M - m0 : chunk, mark_chunk = dev->scratch.used;
        Operand dyo = dy16 ? Operand{ dy16 + m0 * d->K, d->K }
                           : operand(dev, dy.data + m0 * dy.ld, rows, d->K, dy.ld);
        if (dw) {
            Operand a = s.col ? col_operand(dev, d, x, m0, rows, s.col) : x_operand(dev, x, m0, rows, crs);
            float beta = s.dwc && m0 == 0 ? 0.0f : 1.0f;
            gemm_weight_grad(dev, d, dyo, (int)rows, a, beta, s.dwc ? s.dwc : dw);
        }
        if (dx.data && !s.col) {   // pointwise: dx += dy · W straight through dx's ld
            gemm_input_grad(dev, d, dyo, (int)rows, wo, dx_beta, dx.data, dx.ld);
        } else if (dx.data) {      // fp32 im2col rows are spent by now: dcol may reuse them
            gemm_input_grad(dev, d, dyo, (int)rows, wo, 0.0f, s.dcol, crs);
            col2im(dev, d, s.dcol, m0, rows, dx);
        }
        dev->scratch.used = mark_chunk;
    }
    if (s.dwc) {
        size_t n = (size_t)d->K * crs / d->groups;
        weight_grad_from_cols_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(*d, (const float *)s.dwc, dw);
        checkLaunch(dev);
    }
    dev->scratch.used = mark;
}

extern "C" void conv_backward_gpu(Device *dev, const ConvDims *d, Map x, const float *w, Map dy,
                                  Map dx, float *dw, float *db) {
    conv_check(d, x, dy, "conv_backward_gpu");
    conv_check(d, dx, dy, "conv_backward_gpu");
    require_fp32(dy, "conv_backward_gpu");
    if (db) bias_grad(dev, dy, db);
    conv_backward(dev, d, x, w, dy, NULL, dx, dw);
}

extern "C" void conv_backward_bf16dy_gpu(Device *dev, const ConvDims *d, Map x, const float *w,
                                         const void *dy16, Map dx, float *dw) {
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    conv_check(d, x, none, "conv_backward_bf16dy_gpu");
    if (dx.data) conv_check(d, dx, none, "conv_backward_bf16dy_gpu");
    if (dev->precision != GPU_BF16) die("conv_backward_bf16dy_gpu: the device is not in bf16");
    conv_backward(dev, d, x, w, none, (const bf16 *)dy16, dx, dw);
}
