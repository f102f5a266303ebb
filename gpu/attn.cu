// attn.cu: the attention core of ultralytics Attention (C2PSA, PSABlock), the CUDA twin of attn26_*_cpu
// (core/spec/ops26.c). Per head, one strided-batched cuBLAS GEMM covers all images: head h's q, k, v are
// (T, kd|hd) row-major matrices at channel offset h*(2kd+hd) of qkv with row stride qkv.ld, and one
// image's follow the last's at H*W*ld floats. cuBLAS is column-major: a row-major (rows, cols) matrix with stride ld is
// its (cols, rows) transpose, and every product below is written for that view. Forward writes (=),
// backward adds (+=) through beta = 1. GEMMs in fp32 (CUBLAS_COMPUTE_32F, TF32 off).
// Legend: N batch, T = H*W tokens, nh heads, kd key_dim, hd head_dim, C = nh*hd, per = 2kd+hd.
#include "gpu/kernel_util.h"
#include "gpu/ops26.h"

enum { SOFTMAX_THREADS = 128 };

static int per_head(const AttnDims *d) { return 2 * d->key_dim + d->head_dim; }
static int tokens(const AttnDims *d) { return d->H * d->W; }

extern "C" size_t attn_workspace_bytes_gpu(const AttnDims *d) {
    return sizeof(float) * (size_t)d->N * d->heads * tokens(d) * tokens(d) + 256;   // dS of every image
}

static void attn_check_gpu(const AttnDims *d, Map qkv, Map y, const char *who) {
    if (qkv.N != d->N || qkv.H != d->H || qkv.W != d->W || qkv.C != d->heads * per_head(d) || y.N != d->N ||
        y.H != d->H || y.W != d->W || y.C != d->heads * d->head_dim || qkv.ld < qkv.C || y.ld < y.C)
        die("%s: qkv %dx%dx%dx%d, y %dx%dx%dx%d do not fit %d heads, key_dim %d, head_dim %d", who, qkv.N, qkv.H,
            qkv.W, qkv.C, y.N, y.H, y.W, y.C, d->heads, d->key_dim, d->head_dim);
    require_fp32(qkv, who);
    require_fp32(y, who);
}

// ---- kernels -------------------------------------------------------------------------------

// the block's reduction of v (max or sum), every thread gets the result
template <bool MAX>
__device__ static float block_reduce(float v, float *shared) {
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_down_sync(0xffffffffu, v, o);
        v = MAX ? fmaxf(v, u) : v + u;
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = shared[0];
        for (int i = 1; i < (int)blockDim.x / 32; i++) r = MAX ? fmaxf(r, shared[i]) : r + shared[i];
        shared[0] = r;
    }
    __syncthreads();
    float r = shared[0];
    __syncthreads();   // shared is reused by the next reduction
    return r;
}

// rows of length T in place: softmax over each row (one block a row)
__global__ void softmax_rows_kernel(float *p, int T, size_t rows) {
    pdl_entry();
    __shared__ float shared[SOFTMAX_THREADS / 32];
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        float *r = p + row * T, m = -INFINITY, s = 0.0f;
        for (int j = threadIdx.x; j < T; j += blockDim.x) m = fmaxf(m, r[j]);
        m = block_reduce<true>(m, shared);
        for (int j = threadIdx.x; j < T; j += blockDim.x) s += r[j] = expf(r[j] - m);
        s = block_reduce<false>(s, shared);
        for (int j = threadIdx.x; j < T; j += blockDim.x) r[j] /= s;
    }
}

// ds (holding dP) <- P (dP - sum_j P dP) * scale, row by row (one block a row)
__global__ void softmax_bwd_kernel(const float *p, float *ds, int T, size_t rows, float scale) {
    pdl_entry();
    __shared__ float shared[SOFTMAX_THREADS / 32];
    for (size_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const float *pr = p + row * T;
        float *g = ds + row * T, dot = 0.0f;
        for (int j = threadIdx.x; j < T; j += blockDim.x) dot += pr[j] * g[j];
        dot = block_reduce<false>(dot, shared);
        for (int j = threadIdx.x; j < T; j += blockDim.x) g[j] = pr[j] * (g[j] - dot) * scale;
    }
}

// v (N,H,W,C) = the v channels of qkv in output order (ADD: dqkv's v channels += dv instead)
template <bool ADD>
__global__ void v_channels_kernel(Map qkv, Map v, int hd, int per, int kd) {
    pdl_entry();
    GRID_STRIDE(i, map_n(v)) {
        int ch = (int)(i % v.C), h = ch / hd, c = ch % hd;
        float *q = qkv.data + (i / v.C) * qkv.ld + h * per + 2 * kd + c;
        if (ADD) *q += *map_elem(v, i);
        else *map_elem(v, i) = *q;
    }
}

// ---- GEMMs ---------------------------------------------------------------------------------

// C_i = op(A_i) op(B_i) (+ beta C_i), i = 0..batch-1 (the images of one head), column-major, fp32
struct HeadGemm {
    cublasOperation_t ta, tb;
    int m, n, k;
    const float *a; int lda; long long sa;
    const float *b; int ldb; long long sb;
    float *c; int ldc; long long sc;
};

static void head_gemm(Device *dev, const HeadGemm *g, int batch, float alpha, float beta) {
    checkCublas(cublasGemmStridedBatchedEx(dev->blas, g->ta, g->tb, g->m, g->n, g->k, &alpha, g->a, CUDA_R_32F,
                                           g->lda, g->sa, g->b, CUDA_R_32F, g->ldb, g->sb, &beta, g->c,
                                           CUDA_R_32F, g->ldc, g->sc, batch, CUBLAS_COMPUTE_32F,
                                           CUBLAS_GEMM_DEFAULT));
}

// floats from one image of m to the next
static long long image_stride(Map m) { return (long long)m.H * m.W * m.ld; }

static void softmax_launch(Device *dev, float *p, int T, size_t rows) {
    unsigned blocks = rows < MAX_BLOCKS ? (unsigned)rows : MAX_BLOCKS;
    softmax_rows_kernel<<<blocks, SOFTMAX_THREADS, 0, dev->stream>>>(p, T, rows);
    checkLaunch(dev);
}

// ---- launchers -----------------------------------------------------------------------------

// S = q k^T (row-major T x T per head) is, column-major, S^T = K^T Q with K, Q viewed (kd, T);
// the scale multiplies after the product (alpha), then softmax; y_h = P v: y^T (hd, T) = V^T-view P^T-view.
// p: (N, nh, T, T). One GEMM per head over all images: 2nh + 1 launches, not the 2N + 1 of one per image
// over the heads (bench/RESULTS.md).
extern "C" void attn26_forward_gpu(Device *dev, const AttnDims *d, Map qkv, Map y, Map v, float *p) {
    attn_check_gpu(d, qkv, y, "attn26_forward_gpu");
    int T = tokens(d), kd = d->key_dim, hd = d->head_dim, per = per_head(d), nh = d->heads;
    long long TT = (long long)T * T, iq = image_stride(qkv), iy = image_stride(y), ip = nh * TT;
    for (int h = 0; h < nh; h++) {
        const float *x = qkv.data + (size_t)h * per;
        HeadGemm s = { CUBLAS_OP_T, CUBLAS_OP_N, T, T, kd, x + kd, qkv.ld, iq, x, qkv.ld, iq, p + h * TT, T, ip };
        head_gemm(dev, &s, d->N, d->scale, 0.0f);
    }
    softmax_launch(dev, p, T, (size_t)d->N * nh * T);
    for (int h = 0; h < nh; h++) {
        HeadGemm o = { CUBLAS_OP_N, CUBLAS_OP_N, hd, T, T, qkv.data + (size_t)h * per + 2 * kd, qkv.ld, iq,
                       p + h * TT, T, ip, y.data + (size_t)h * hd, y.ld, iy };
        head_gemm(dev, &o, d->N, 1.0f, 0.0f);
    }
    if (v.data) {
        same_shape_gpu(v, y, "attn26_forward_gpu (v)");
        v_channels_kernel<false><<<blocks_for(map_floats(v)), THREADS, 0, dev->stream>>>(qkv, v, hd, per, kd);
        checkLaunch(dev);
    }
}

// dV += P^T dy; dP = dy V^T (scratch, (N, nh, T, T) as p); dS = P (dP - rowsum(P dP)) scale; dQ += dS K;
// dK += dS^T Q. Each product one GEMM per head over all images.
extern "C" void attn26_backward_gpu(Device *dev, const AttnDims *d, Map qkv, const float *p, Map dy, Map dv,
                                    Map dqkv) {
    attn_check_gpu(d, qkv, dy, "attn26_backward_gpu");
    attn_check_gpu(d, dqkv, dy, "attn26_backward_gpu (dqkv)");
    int T = tokens(d), kd = d->key_dim, hd = d->head_dim, per = per_head(d), nh = d->heads;
    long long TT = (long long)T * T, iq = image_stride(qkv), ig = image_stride(dy), idx = image_stride(dqkv),
              ip = nh * TT;
    size_t mark = dev->scratch.used;
    float *ds = (float *)scratch_take(dev, sizeof(float) * d->N * nh * TT);
    for (int h = 0; h < nh; h++) {
        const float *x = qkv.data + (size_t)h * per, *g = dy.data + (size_t)h * hd, *ph = p + h * TT;
        float *dx = dqkv.data + (size_t)h * per;
        // dV^T (hd, T) += dY^T-view (hd, T) . P-view^T
        HeadGemm gv = { CUBLAS_OP_N, CUBLAS_OP_T, hd, T, T, g, dy.ld, ig, ph, T, ip, dx + 2 * kd, dqkv.ld, idx };
        head_gemm(dev, &gv, d->N, 1.0f, 1.0f);
        // dP^T (T, T) = V-view^T (T, hd) . dY-view (hd, T)
        HeadGemm gp = { CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd, x + 2 * kd, qkv.ld, iq, g, dy.ld, ig, ds + h * TT, T, ip };
        head_gemm(dev, &gp, d->N, 1.0f, 0.0f);
    }
    size_t rows = (size_t)d->N * nh * T;
    softmax_bwd_kernel<<<rows < MAX_BLOCKS ? (unsigned)rows : MAX_BLOCKS, SOFTMAX_THREADS, 0, dev->stream>>>(
        p, ds, T, rows, d->scale);
    checkLaunch(dev);
    for (int h = 0; h < nh; h++) {
        const float *x = qkv.data + (size_t)h * per, *dsh = ds + h * TT;
        float *dx = dqkv.data + (size_t)h * per;
        // dQ^T (kd, T) += K-view (kd, T) . dS-view (T, T)
        HeadGemm gq = { CUBLAS_OP_N, CUBLAS_OP_N, kd, T, T, x + kd, qkv.ld, iq, dsh, T, ip, dx, dqkv.ld, idx };
        head_gemm(dev, &gq, d->N, 1.0f, 1.0f);
        // dK^T (kd, T) += Q-view (kd, T) . dS-view^T
        HeadGemm gk = { CUBLAS_OP_N, CUBLAS_OP_T, kd, T, T, x, qkv.ld, iq, dsh, T, ip, dx + kd, dqkv.ld, idx };
        head_gemm(dev, &gk, d->N, 1.0f, 1.0f);
    }
    dev->scratch.used = mark;
    if (dv.data) {
        same_shape_gpu(dv, dy, "attn26_backward_gpu (dv)");
        v_channels_kernel<true><<<blocks_for(map_floats(dv)), THREADS, 0, dev->stream>>>(dqkv, dv, hd, per, kd);
        checkLaunch(dev);
    }
}
