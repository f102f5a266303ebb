// conv.cu: 2-D convolution on NHWC maps with PyTorch-layout weights, the CUDA twin of core/conv.c.
// A 1x1 stride-1 unpadded conv is one GEMM over all pixels, reading x and writing y through their
// ld (so y may be a channel slice of a concat buffer); other convs im2col a chunk of output pixels
// into scratch and GEMM it, all groups in one strided-batched call. Forward writes y (=);
// backward adds into dx, dw, db (+=). dev->precision picks fp32, tf32 or bf16 GEMM operands.
// Legend: N batch, C channels in, K channels out, H,W in, P,Q out, R,S kernel, G groups,
// Cg = C/G, Kg = K/G, M = N*P*Q output pixels, CRS = C*R*S columns of an im2col row.
#include <cuda_bf16.h>

#include "gpu/kernel_util.h"

static bool is_pointwise(const ConvDims *d) {
    return d->R == 1 && d->S == 1 && d->stride == 1 && d->pad == 0;
}
static size_t crs_of(const ConvDims *d) { return (size_t)d->C * d->R * d->S; }
static size_t pixels_out(const ConvDims *d) { return (size_t)d->N * d->P * d->Q; }

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

extern "C" size_t conv_workspace_bytes_gpu(const Device *dev, const ConvDims *d) {
    size_t rows = chunk_rows(dev, d), crs = crs_of(d), bytes = 4 * 256;
    if (!is_pointwise(d)) bytes += sizeof(float) * rows * crs;   // im2col rows, then dcol
    if (dev->precision == GPU_BF16)   // bf16 copies of col (or x), dy and w
        bytes += sizeof(__nv_bfloat16) * (rows * crs + rows * d->K + (size_t)d->K * crs / d->groups);
    // the bias gradient's partials are given back before anything else is taken
    size_t bias = sizeof(double) * bias_parts(pixels_out(d)) * d->K + 256;
    return bytes > bias ? bytes : bias;
}

// Shapes are fixed when the model is built, so a mismatch is a bug in the caller.
static void conv_check(const ConvDims *d, Map x, Map y, const char *who) {
    if (x.data && (x.N != d->N || x.H != d->H || x.W != d->W || x.C != d->C || x.ld < x.C))
        die("%s: input map %dx%dx%dx%d (ld %d) does not match conv N=%d H=%d W=%d C=%d", who, x.N,
            x.H, x.W, x.C, x.ld, d->N, d->H, d->W, d->C);
    if (y.data && (y.N != d->N || y.H != d->P || y.W != d->Q || y.C != d->K || y.ld < y.C))
        die("%s: output map %dx%dx%dx%d (ld %d) does not match conv N=%d P=%d Q=%d K=%d", who, y.N,
            y.H, y.W, y.C, y.ld, d->N, d->P, d->Q, d->K);
}

// ---- kernels -------------------------------------------------------------------------------

// col (rows, CRS) = im2col of output pixels m0..m0+rows-1; column (c, r, s) matches the rows of
// the PyTorch weight, so group g owns columns [g*Cg*R*S, (g+1)*Cg*R*S). Padding reads as 0.
__global__ void im2col_kernel(ConvDims d, Map x, size_t m0, size_t rows, float *col) {
    size_t crs = (size_t)d.C * d.R * d.S;
    GRID_STRIDE(i, rows * crs) {
        size_t m = m0 + i / crs;
        int j = (int)(i % crs), c = j / (d.R * d.S), r = j / d.S % d.R, s = j % d.S;
        int q = (int)(m % d.Q), p = (int)(m / d.Q % d.P), n = (int)(m / ((size_t)d.P * d.Q));
        int h = p * d.stride - d.pad + r, v = q * d.stride - d.pad + s;
        bool inside = h >= 0 && h < d.H && v >= 0 && v < d.W;
        col[i] = inside ? x.data[(((size_t)n * d.H + h) * d.W + v) * x.ld + c] : 0.0f;
    }
}

// dx(n,h,v,c) += every dcol entry that im2col read from it, for rows m0..m0+rows-1: a gather, so
// no atomics; terms are added in increasing output pixel as the CPU twin's col2im does.
__global__ void col2im_kernel(ConvDims d, const float *dcol, size_t m0, size_t rows, Map dx) {
    size_t crs = (size_t)d.C * d.R * d.S;
    GRID_STRIDE(i, (size_t)d.N * d.H * d.W * d.C) {
        int c = (int)(i % d.C), v = (int)(i / d.C % d.W), h = (int)(i / d.C / d.W % d.H);
        int n = (int)(i / ((size_t)d.C * d.W * d.H));
        float *out = dx.data + (((size_t)n * d.H + h) * d.W + v) * dx.ld + c;
        float acc = *out;
        for (int r = d.R - 1; r >= 0; r--) {   // r descending = output row p ascending
            int hp = h + d.pad - r;
            if (hp < 0 || hp % d.stride || hp / d.stride >= d.P) continue;
            for (int s = d.S - 1; s >= 0; s--) {
                int vq = v + d.pad - s;
                if (vq < 0 || vq % d.stride || vq / d.stride >= d.Q) continue;
                size_t m = ((size_t)n * d.P + hp / d.stride) * d.Q + vq / d.stride;
                if (m < m0 || m >= m0 + rows) continue;
                acc += dcol[(m - m0) * crs + ((size_t)c * d.R + r) * d.S + s];
            }
        }
        *out = acc;
    }
}

// rows m0..m0+rows-1 of y = bias, so the GEMM can accumulate onto them
__global__ void fill_bias_kernel(Map y, size_t m0, size_t rows, const float *b) {
    GRID_STRIDE(i, rows * y.C) y.data[(m0 + i / y.C) * y.ld + i % y.C] = b[i % y.C];
}

// db (K) += column sums of dy over its M pixels, in double, in two levels as BN's statistics:
// block row blockIdx.y of G takes pixel strips blockIdx.y, blockIdx.y + G, ... of BIAS_TILE_M
// pixels and writes a partial per channel; then one thread per channel adds the G partials in
// order. G depends on M alone, so the result does not depend on the GPU (deterministic).
__global__ void bias_partial_kernel(Map dy, double *part) {   // part (G, K)
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
    int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= K) return;
    double s = 0.0;
    for (int g = 0; g < G; g++) s += part[(size_t)g * K + k];
    db[k] += (float)s;
}

// dst (rows, cols) packed = bf16(src (rows, cols) with row stride ld), round to nearest even
__global__ void to_bf16_kernel(const float *src, size_t rows, int cols, int ld,
                               __nv_bfloat16 *dst) {
    GRID_STRIDE(i, rows * cols) dst[i] = __float2bfloat16(src[(i / cols) * ld + i % cols]);
}

// ---- GEMM operands and the one GEMM call ---------------------------------------------------

// A row-major GEMM operand: data with row stride ld, fp32 or (under GPU_BF16) a packed bf16 copy.
struct Operand { const void *p; int ld; };

// The operand for a row-major (rows, cols) fp32 matrix with row stride ld, as dev->precision
// wants it; a bf16 copy lives in scratch until the caller's op returns.
static Operand operand(Device *dev, const float *src, size_t rows, int cols, int ld) {
    if (dev->precision != GPU_BF16) return Operand{ src, ld };
    __nv_bfloat16 *dst =
        (__nv_bfloat16 *)scratch_take(dev, sizeof(__nv_bfloat16) * rows * cols);
    to_bf16_kernel<<<blocks_for(rows * cols), THREADS, 0, dev->stream>>>(src, rows, cols, ld, dst);
    checkLaunch(dev);
    return Operand{ dst, cols };
}

// One GEMM per group in cuBLAS's column-major terms: C_g = op(A_g)·op(B_g) + beta·C_g, with
// A_g = A + g·sa, B_g = B + g·sb, C_g = C + g·sc (element offsets), g = 0..groups-1.
struct Gemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    Operand a, b;
    long long sa, sb, sc;
};

static void gemm(Device *dev, const Gemm *g, int groups, float beta, float *c, int ldc) {
    cudaDataType_t ab = dev->precision == GPU_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasComputeType_t ct =
        dev->precision == GPU_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    float alpha = 1.0f;
    checkCublas(cublasGemmStridedBatchedEx(dev->blas, g->ta, g->tb, g->m, g->n, g->k, &alpha,
                                           g->a.p, ab, g->a.ld, g->sa, g->b.p, ab, g->b.ld, g->sb,
                                           &beta, c, CUDA_R_32F, ldc, g->sc, groups, ct,
                                           CUBLAS_GEMM_DEFAULT));
}

// The three products, per group, in row-major words (a = im2col rows or x, rows × CRS):
//   forward      y  (rows, K)        = a · W^T      column-major: y^T  = W · a^T
//   weight grad  dW (K, Cg·R·S)     += dy^T · a     column-major: dW^T = a^T · dy
//   input grad   da (rows, CRS)      = dy · W       column-major: da^T = W^T · dy^T
static void gemm_forward(Device *dev, const ConvDims *d, Operand a, int rows, Operand w,
                         float beta, float *y, int ldy) {
    int G = d->groups, Kg = d->K / G, cgrs = (int)(crs_of(d) / G);
    Gemm g = { CUBLAS_OP_T, CUBLAS_OP_N, Kg, rows, cgrs, w, a, (long long)Kg * cgrs, cgrs, Kg };
    gemm(dev, &g, G, beta, y, ldy);
}

static void gemm_weight_grad(Device *dev, const ConvDims *d, Operand dy, int rows, Operand a,
                             float *dw) {
    int G = d->groups, Kg = d->K / G, cgrs = (int)(crs_of(d) / G);
    Gemm g = { CUBLAS_OP_N, CUBLAS_OP_T, cgrs, Kg, rows, a, dy, cgrs, Kg, (long long)Kg * cgrs };
    gemm(dev, &g, G, 1.0f, dw, cgrs);
}

static void gemm_input_grad(Device *dev, const ConvDims *d, Operand dy, int rows, Operand w,
                            float beta, float *da, int ldda) {
    int G = d->groups, Kg = d->K / G, cgrs = (int)(crs_of(d) / G);
    Gemm g = { CUBLAS_OP_N, CUBLAS_OP_N, cgrs, rows, Kg, w, dy, (long long)Kg * cgrs, Kg, cgrs };
    gemm(dev, &g, G, beta, da, ldda);
}

// ---- launchers -----------------------------------------------------------------------------

static void im2col(Device *dev, const ConvDims *d, Map x, size_t m0, size_t rows, float *col) {
    im2col_kernel<<<blocks_for(rows * crs_of(d)), THREADS, 0, dev->stream>>>(*d, x, m0, rows, col);
    checkLaunch(dev);
}

// The weight operand (K, Cg·R·S), converted once per call under GPU_BF16.
static Operand weight_operand(Device *dev, const ConvDims *d, const float *w) {
    int cgrs = (int)(crs_of(d) / d->groups);
    return operand(dev, w, d->K, cgrs, cgrs);
}

extern "C" void conv_forward_gpu(Device *dev, const ConvDims *d, Map x, const float *w,
                                 const float *b, Map y) {
    conv_check(d, x, y, "conv_forward_gpu");
    size_t mark = dev->scratch.used, M = pixels_out(d), chunk = chunk_rows(dev, d);
    int crs = (int)crs_of(d);
    Operand wo = weight_operand(dev, d, w);
    float *col = is_pointwise(d) ? NULL : (float *)scratch_take(dev, sizeof(float) * chunk * crs);
    for (size_t m0 = 0; m0 < M; m0 += chunk) {
        size_t rows = M - m0 < chunk ? M - m0 : chunk, mark_chunk = dev->scratch.used;
        Operand a;
        if (col) {
            im2col(dev, d, x, m0, rows, col);
            a = operand(dev, col, rows, crs, crs);
        } else {
            a = operand(dev, x.data + m0 * x.ld, rows, crs, x.ld);
        }
        if (b) {
            fill_bias_kernel<<<blocks_for(rows * d->K), THREADS, 0, dev->stream>>>(y, m0, rows, b);
            checkLaunch(dev);
        }
        gemm_forward(dev, d, a, (int)rows, wo, b ? 1.0f : 0.0f, y.data + m0 * y.ld, y.ld);
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

extern "C" void conv_backward_gpu(Device *dev, const ConvDims *d, Map x, const float *w, Map dy,
                                  Map dx, float *dw, float *db) {
    conv_check(d, x, dy, "conv_backward_gpu");
    conv_check(d, dx, dy, "conv_backward_gpu");
    if (db) bias_grad(dev, dy, db);
    if (!dw && !dx.data) return;
    size_t mark = dev->scratch.used, M = pixels_out(d), chunk = chunk_rows(dev, d);
    int crs = (int)crs_of(d);
    Operand wo = weight_operand(dev, d, w);
    float *col = is_pointwise(d) ? NULL : (float *)scratch_take(dev, sizeof(float) * chunk * crs);
    for (size_t m0 = 0; m0 < M; m0 += chunk) {
        size_t rows = M - m0 < chunk ? M - m0 : chunk, mark_chunk = dev->scratch.used;
        Operand dyo = operand(dev, dy.data + m0 * dy.ld, rows, d->K, dy.ld);
        if (dw) {
            Operand a;
            if (col) {
                im2col(dev, d, x, m0, rows, col);
                a = operand(dev, col, rows, crs, crs);
            } else {
                a = operand(dev, x.data + m0 * x.ld, rows, crs, x.ld);
            }
            gemm_weight_grad(dev, d, dyo, (int)rows, a, dw);
        }
        if (dx.data && !col) {   // pointwise: dx += dy · W straight through dx's ld
            gemm_input_grad(dev, d, dyo, (int)rows, wo, 1.0f, dx.data, dx.ld);
        } else if (dx.data) {    // the im2col rows are spent: reuse them for dcol
            gemm_input_grad(dev, d, dyo, (int)rows, wo, 0.0f, col, crs);
            col2im_kernel<<<blocks_for(map_floats(dx)), THREADS, 0, dev->stream>>>(*d, col, m0,
                                                                                   rows, dx);
            checkLaunch(dev);
        }
        dev->scratch.used = mark_chunk;
    }
    dev->scratch.used = mark;
}
