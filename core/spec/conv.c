// conv.c: 2-D convolution on NHWC maps with PyTorch-layout weights: plain-loop references (the
// specification) and the im2col + CBLAS GEMM path used for training on the CPU.
// Legend: N batch, C channels in, K channels out, H,W in, P,Q out, R,S kernel, G groups,
// Cg = C/G, Kg = K/G, M = N*P*Q output pixels, CRS = C*R*S columns of an im2col row.
#include "core/spec/ops.h"
#include "core/base/util.h"

#include <cblas.h>
#include <string.h>

// im2col is done for a chunk of output pixels at a time, so the workspace stays bounded whatever
// the input size: at most COL_CAP floats (16 MiB), and never fewer than one pixel's row.
enum { COL_CAP = 1 << 22, BIAS_BLOCK = 64 };

ConvDims conv_dims(int N, int C, int H, int W, int K, int k, int stride, int pad, int groups) {
    if (groups < 1 || C % groups || K % groups || stride < 1 || pad < 0 || k < 1)
        die("conv_dims: bad conv C=%d K=%d k=%d stride=%d pad=%d groups=%d", C, K, k, stride, pad,
            groups);
    ConvDims d = { N, C, H, W, K, k, k, stride, pad, groups, 0, 0 };
    d.P = (H + 2 * pad - k) / stride + 1;
    d.Q = (W + 2 * pad - k) / stride + 1;
    return d;
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

// ---- plain-loop references ----------------------------------------------------------------

// weight (k, c, r, s) of the (K, Cg, R, S) tensor; c is the channel within k's group
static inline size_t widx(const ConvDims *d, int k, int c, int r, int s) {
    return (((size_t)k * (d->C / d->groups) + c) * d->R + r) * d->S + s;
}

void conv_forward_ref(const ConvDims *d, Map x, const float *w, const float *b, Map y) {
    conv_check(d, x, y, "conv_forward_ref");
    int Cg = d->C / d->groups, Kg = d->K / d->groups;
    for (int n = 0; n < d->N; n++)
        for (int p = 0; p < d->P; p++)
            for (int q = 0; q < d->Q; q++)
                for (int k = 0; k < d->K; k++) {
                    int c0 = (k / Kg) * Cg;   // first input channel of k's group
                    double acc = b ? b[k] : 0.0;
                    for (int c = 0; c < Cg; c++)
                        for (int r = 0; r < d->R; r++)
                            for (int s = 0; s < d->S; s++) {
                                int h = p * d->stride - d->pad + r, v = q * d->stride - d->pad + s;
                                if (h < 0 || h >= d->H || v < 0 || v >= d->W) continue;
                                acc += (double)map_at(x, n, h, v)[c0 + c] * w[widx(d, k, c, r, s)];
                            }
                    map_at(y, n, p, q)[k] = (float)acc;
                }
}

void conv_backward_ref(const ConvDims *d, Map x, const float *w, Map dy, Map dx, float *dw,
                       float *db) {
    conv_check(d, x, dy, "conv_backward_ref");
    conv_check(d, dx, dy, "conv_backward_ref");
    int Cg = d->C / d->groups, Kg = d->K / d->groups;
    for (int n = 0; n < d->N; n++)
        for (int p = 0; p < d->P; p++)
            for (int q = 0; q < d->Q; q++)
                for (int k = 0; k < d->K; k++) {
                    float g = map_at(dy, n, p, q)[k];
                    int c0 = (k / Kg) * Cg;
                    if (db) db[k] += g;
                    for (int c = 0; c < Cg; c++)
                        for (int r = 0; r < d->R; r++)
                            for (int s = 0; s < d->S; s++) {
                                int h = p * d->stride - d->pad + r, v = q * d->stride - d->pad + s;
                                if (h < 0 || h >= d->H || v < 0 || v >= d->W) continue;
                                size_t wi = widx(d, k, c, r, s);
                                if (dw) dw[wi] += g * map_at(x, n, h, v)[c0 + c];
                                if (dx.data) map_at(dx, n, h, v)[c0 + c] += g * w[wi];
                            }
                }
}

// ---- im2col + GEMM ------------------------------------------------------------------------

// A 1x1 stride-1 unpadded conv reads the input itself as the GEMM operand: no im2col.
static int conv_is_pointwise(const ConvDims *d) {
    return d->R == 1 && d->S == 1 && d->stride == 1 && d->pad == 0;
}

static size_t conv_crs(const ConvDims *d) { return (size_t)d->C * d->R * d->S; }

// output pixels per im2col chunk
static size_t conv_chunk_rows(const ConvDims *d) {
    size_t M = (size_t)d->N * d->P * d->Q, rows = COL_CAP / conv_crs(d);
    if (rows < 1) rows = 1;
    return rows < M ? rows : M;
}

// Floats of scratch for conv_forward_cpu/conv_backward_cpu: one chunk of im2col rows,
// min(N*P*Q, 2^22 / (C*R*S)) rows of C*R*S floats (at most 16 MiB unless one row is larger);
// 0 for a pointwise conv.
size_t conv_workspace_floats(const ConvDims *d) {
    return conv_is_pointwise(d) ? 0 : conv_chunk_rows(d) * conv_crs(d);
}

// col (rows, CRS) = im2col of output pixels m0..m0+rows-1; column order (c, r, s) matches the
// rows of the PyTorch weight, and group g owns columns [g*Cg*R*S, (g+1)*Cg*R*S).
static void im2col(const ConvDims *d, Map x, size_t m0, size_t rows, float *col) {
    int RS = d->R * d->S;
    size_t crs = conv_crs(d);
    for (size_t i = 0; i < rows; i++) {
        size_t m = m0 + i;
        int q = (int)(m % d->Q), p = (int)(m / d->Q % d->P), n = (int)(m / ((size_t)d->P * d->Q));
        float *row = col + i * crs;
        for (int r = 0; r < d->R; r++)
            for (int s = 0; s < d->S; s++) {
                int h = p * d->stride - d->pad + r, v = q * d->stride - d->pad + s;
                float *dst = row + r * d->S + s;
                if (h < 0 || h >= d->H || v < 0 || v >= d->W) {
                    for (int c = 0; c < d->C; c++) dst[(size_t)c * RS] = 0.0f;
                    continue;
                }
                const float *src = map_at(x, n, h, v);
                for (int c = 0; c < d->C; c++) dst[(size_t)c * RS] = src[c];
            }
    }
}

// dx += col2im(dcol): the adjoint of im2col (a padded position's gradient is dropped).
static void col2im_add(const ConvDims *d, const float *col, size_t m0, size_t rows, Map dx) {
    int RS = d->R * d->S;
    size_t crs = conv_crs(d);
    for (size_t i = 0; i < rows; i++) {
        size_t m = m0 + i;
        int q = (int)(m % d->Q), p = (int)(m / d->Q % d->P), n = (int)(m / ((size_t)d->P * d->Q));
        const float *row = col + i * crs;
        for (int r = 0; r < d->R; r++)
            for (int s = 0; s < d->S; s++) {
                int h = p * d->stride - d->pad + r, v = q * d->stride - d->pad + s;
                if (h < 0 || h >= d->H || v < 0 || v >= d->W) continue;
                const float *src = row + r * d->S + s;
                float *dst = map_at(dx, n, h, v);
                for (int c = 0; c < d->C; c++) dst[c] += src[(size_t)c * RS];
            }
    }
}

// The three GEMMs, per group g. a is the (rows, CRS) operand (im2col rows, or the input itself
// for a pointwise conv), lda its row stride; group g's part starts at column g*Cg*R*S.
// y (rows, K) += a · W^T
static void gemm_forward(const ConvDims *d, const float *a, int lda, int rows, const float *w,
                         float *y, int ldy) {
    int G = d->groups, Kg = d->K / G, cgrs = d->C / G * d->R * d->S;
    for (int g = 0; g < G; g++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, Kg, cgrs, 1.0f,
                    a + (size_t)g * cgrs, lda, w + (size_t)g * Kg * cgrs, cgrs, 1.0f,
                    y + g * Kg, ldy);
}

// dw (K, Cg*R*S) += dy^T · a
static void gemm_weight_grad(const ConvDims *d, const float *dy, int lddy, int rows, const float *a,
                             int lda, float *dw) {
    int G = d->groups, Kg = d->K / G, cgrs = d->C / G * d->R * d->S;
    for (int g = 0; g < G; g++)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, Kg, cgrs, rows, 1.0f, dy + g * Kg,
                    lddy, a + (size_t)g * cgrs, lda, 1.0f, dw + (size_t)g * Kg * cgrs, cgrs);
}

// da (rows, CRS) = beta·da + dy · W
static void gemm_input_grad(const ConvDims *d, const float *dy, int lddy, int rows, const float *w,
                            float beta, float *da, int ldda) {
    int G = d->groups, Kg = d->K / G, cgrs = d->C / G * d->R * d->S;
    for (int g = 0; g < G; g++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cgrs, Kg, 1.0f, dy + g * Kg,
                    lddy, w + (size_t)g * Kg * cgrs, cgrs, beta, da + (size_t)g * cgrs, ldda);
}

// y rows m0..m0+rows-1 = bias (or 0), so the GEMM can accumulate onto them
static void fill_bias(Map y, size_t m0, size_t rows, const float *b) {
    for (size_t m = m0; m < m0 + rows; m++) {
        float *row = y.data + m * y.ld;
        if (b) memcpy(row, b, sizeof(float) * y.C);
        else memset(row, 0, sizeof(float) * y.C);
    }
}

void conv_forward_cpu(const ConvDims *d, Map x, const float *w, const float *b, Map y, float *ws) {
    conv_check(d, x, y, "conv_forward_cpu");
    size_t M = map_pixels(y);
    if (conv_is_pointwise(d)) {
        fill_bias(y, 0, M, b);
        gemm_forward(d, x.data, x.ld, (int)M, w, y.data, y.ld);
        return;
    }
    size_t chunk = conv_chunk_rows(d);
    for (size_t m0 = 0; m0 < M; m0 += chunk) {
        size_t rows = M - m0 < chunk ? M - m0 : chunk;
        im2col(d, x, m0, rows, ws);
        fill_bias(y, m0, rows, b);
        gemm_forward(d, ws, (int)conv_crs(d), (int)rows, w, y.data + m0 * y.ld, y.ld);
    }
}

// db (K) += column sums of dy over all pixels, in double for blocks of channels (no allocation)
static void bias_grad(Map dy, float *db) {
    size_t M = map_pixels(dy);
    for (int k0 = 0; k0 < dy.C; k0 += BIAS_BLOCK) {
        int nk = dy.C - k0 < BIAS_BLOCK ? dy.C - k0 : BIAS_BLOCK;
        double acc[BIAS_BLOCK] = { 0 };
        for (size_t m = 0; m < M; m++) {
            const float *row = dy.data + m * dy.ld + k0;
            for (int k = 0; k < nk; k++) acc[k] += row[k];
        }
        for (int k = 0; k < nk; k++) db[k0 + k] += (float)acc[k];
    }
}

void conv_backward_cpu(const ConvDims *d, Map x, const float *w, Map dy, Map dx, float *dw,
                       float *db, float *ws) {
    conv_check(d, x, dy, "conv_backward_cpu");
    conv_check(d, dx, dy, "conv_backward_cpu");
    if (dx.data && dx.fresh) zero_map_cpu(dx);   // a first write: the sum lands on zeros (tensor.h)
    if (db) bias_grad(dy, db);
    size_t M = map_pixels(dy);
    if (conv_is_pointwise(d)) {
        if (dw) gemm_weight_grad(d, dy.data, dy.ld, (int)M, x.data, x.ld, dw);
        if (dx.data) gemm_input_grad(d, dy.data, dy.ld, (int)M, w, 1.0f, dx.data, dx.ld);
        return;
    }
    size_t chunk = conv_chunk_rows(d);
    int crs = (int)conv_crs(d);
    for (size_t m0 = 0; m0 < M && (dw || dx.data); m0 += chunk) {
        size_t rows = M - m0 < chunk ? M - m0 : chunk;
        const float *dyc = dy.data + m0 * dy.ld;
        if (dw) {
            im2col(d, x, m0, rows, ws);
            gemm_weight_grad(d, dyc, dy.ld, (int)rows, ws, crs, dw);
        }
        if (dx.data) {   // the im2col rows are spent: reuse the workspace for dcol
            gemm_input_grad(d, dyc, dy.ld, (int)rows, w, 0.0f, ws, crs);
            col2im_add(d, ws, m0, rows, dx);
        }
    }
}
