// ops26.c: see ops26.h. Plain loops written to be read are the specification (dwconv_*_cpu and
// attn26_*_ref); the attention's _cpu path does the same products as CBLAS GEMMs on strided views of
// the per-head q, k, v, as the CUDA twins in gpu/attn.cu do with cuBLAS. Loop sums run in float, in
// index order.
#include "core/spec/ops.h"
#include "core/spec/ops26.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "core/base/util.h"

// ---- depthwise convolution ---------------------------------------------------------------------
DwDims dw_dims(int N, int C, int H, int W, int k, int stride) {
    DwDims d = { N, C, H, W, k, stride, k / 2, 0, 0 };
    d.P = (H + 2 * d.pad - k) / stride + 1;
    d.Q = (W + 2 * d.pad - k) / stride + 1;
    return d;
}

static void dw_check(const DwDims *d, Map x, Map y, const char *who) {
    if (x.N != d->N || x.H != d->H || x.W != d->W || x.C != d->C || y.N != d->N || y.H != d->P ||
        y.W != d->Q || y.C != d->C || d->k < 1 || d->stride < 1)
        die("%s: maps %dx%dx%dx%d -> %dx%dx%dx%d do not fit k %d stride %d on %dx%dx%dx%d", who, x.N, x.H, x.W,
            x.C, y.N, y.H, y.W, y.C, d->k, d->stride, d->N, d->H, d->W, d->C);
}

void dwconv_forward_cpu(const DwDims *d, Map x, const float *w, const float *b, Map y) {
    dw_check(d, x, y, "dwconv_forward_cpu");
    int k = d->k;
    for (int n = 0; n < d->N; n++)
        for (int p = 0; p < d->P; p++)
            for (int q = 0; q < d->Q; q++) {
                float *out = map_at(y, n, p, q);
                for (int c = 0; c < d->C; c++) {
                    float s = b ? b[c] : 0.0f;
                    for (int r = 0; r < k; r++) {
                        int h = p * d->stride - d->pad + r;
                        if (h < 0 || h >= d->H) continue;
                        for (int t = 0; t < k; t++) {
                            int ww = q * d->stride - d->pad + t;
                            if (ww < 0 || ww >= d->W) continue;
                            s += map_at(x, n, h, ww)[c] * w[(c * k + r) * k + t];
                        }
                    }
                    out[c] = s;
                }
            }
}

void dwconv_backward_cpu(const DwDims *d, Map x, const float *w, Map dy, Map dx, float *dw, float *db) {
    dw_check(d, x, dy, "dwconv_backward_cpu");
    if (dx.data && dx.fresh) zero_map_cpu(dx);   // a first write: the sums land on zeros (tensor.h)
    int k = d->k;
    for (int n = 0; n < d->N; n++)
        for (int p = 0; p < d->P; p++)
            for (int q = 0; q < d->Q; q++) {
                const float *g = map_at(dy, n, p, q);
                for (int c = 0; c < d->C; c++) {
                    if (db) db[c] += g[c];
                    for (int r = 0; r < k; r++) {
                        int h = p * d->stride - d->pad + r;
                        if (h < 0 || h >= d->H) continue;
                        for (int t = 0; t < k; t++) {
                            int ww = q * d->stride - d->pad + t;
                            if (ww < 0 || ww >= d->W) continue;
                            if (dw) dw[(c * k + r) * k + t] += g[c] * map_at(x, n, h, ww)[c];
                            if (dx.data) map_at(dx, n, h, ww)[c] += g[c] * w[(c * k + r) * k + t];
                        }
                    }
                }
            }
}

// ---- attention core ----------------------------------------------------------------------------
AttnDims attn_dims(int N, int H, int W, int dim, int heads, double attn_ratio) {
    AttnDims d = { N, H, W, heads, 0, dim / heads, 0 };
    d.key_dim = (int)(d.head_dim * attn_ratio);
    d.scale = (float)pow(d.key_dim, -0.5);
    return d;
}

int attn_qkv_channels(const AttnDims *d) { return d->heads * (2 * d->key_dim + d->head_dim); }
size_t attn_probs_floats(const AttnDims *d) {
    size_t T = (size_t)d->H * d->W;
    return (size_t)d->N * d->heads * T * T;
}
size_t attn_workspace_floats(const AttnDims *d) {
    size_t T = (size_t)d->H * d->W;
    return T * T;   // dS of one head (the loops need T of it)
}

static void attn_check(const AttnDims *d, Map qkv, Map y, const char *who) {
    if (qkv.N != d->N || qkv.H != d->H || qkv.W != d->W || qkv.C != attn_qkv_channels(d) || y.N != d->N ||
        y.H != d->H || y.W != d->W || y.C != d->heads * d->head_dim || d->key_dim < 1)
        die("%s: qkv %dx%dx%dx%d, y %dx%dx%dx%d do not fit %d heads, key_dim %d, head_dim %d", who, qkv.N, qkv.H,
            qkv.W, qkv.C, y.N, y.H, y.W, y.C, d->heads, d->key_dim, d->head_dim);
}

// token t of image n: its qkv pixel, its output pixel (row-major over H, W)
static float *tok(Map m, int n, int t) { return map_at(m, n, t / m.W, t % m.W); }

// softmax of r (T) in place
static void softmax_row(float *r, int T) {
    float m = -INFINITY, sum = 0;
    for (int j = 0; j < T; j++) m = fmaxf(m, r[j]);
    for (int j = 0; j < T; j++) sum += r[j] = expf(r[j] - m);
    for (int j = 0; j < T; j++) r[j] /= sum;
}

// ds (holding dP of a row) <- P (dP - sum_j P dP) * scale: the softmax's backward and the scale's
static void softmax_row_backward(const float *pr, float *ds, int T, float scale) {
    float dot = 0;
    for (int j = 0; j < T; j++) dot += pr[j] * ds[j];
    for (int j = 0; j < T; j++) ds[j] = pr[j] * (ds[j] - dot) * scale;
}

// softmax over keys of row i of head h, into pr (T)
static void attn_row(const AttnDims *d, Map qkv, int n, int h, int i, float *pr) {
    int T = d->H * d->W, kd = d->key_dim, off = h * (2 * kd + d->head_dim);
    const float *q = tok(qkv, n, i) + off;
    for (int j = 0; j < T; j++) {
        const float *kk = tok(qkv, n, j) + off + kd;
        float s = 0;
        for (int c = 0; c < kd; c++) s += q[c] * kk[c];
        pr[j] = s * d->scale;   // (q^T @ k) * scale: the product first, then the scale
    }
    softmax_row(pr, T);
}

// v (the pe conv's input) = the v channels of qkv in output order
static void gather_v(const AttnDims *d, Map qkv, Map v) {
    int T = d->H * d->W, kd = d->key_dim, hd = d->head_dim;
    for (int n = 0; n < d->N; n++)
        for (int i = 0; i < T; i++)
            for (int h = 0; h < d->heads; h++)
                memcpy(tok(v, n, i) + h * hd, tok(qkv, n, i) + h * (2 * kd + hd) + 2 * kd, (size_t)hd * sizeof(float));
}

// dqkv's v channels += dv (the pe path)
static void scatter_dv(const AttnDims *d, Map dv, Map dqkv) {
    int T = d->H * d->W, kd = d->key_dim, hd = d->head_dim;
    for (int n = 0; n < d->N; n++)
        for (int i = 0; i < T; i++)
            for (int h = 0; h < d->heads; h++) {
                const float *g = tok(dv, n, i) + h * hd;
                float *dst = tok(dqkv, n, i) + h * (2 * kd + hd) + 2 * kd;
                for (int c = 0; c < hd; c++) dst[c] += g[c];
            }
}

void attn26_forward_ref(const AttnDims *d, Map qkv, Map y, Map v, float *p) {
    attn_check(d, qkv, y, "attn26_forward_ref");
    int T = d->H * d->W, kd = d->key_dim, hd = d->head_dim;
    for (int n = 0; n < d->N; n++)
        for (int h = 0; h < d->heads; h++) {
            int voff = h * (2 * kd + hd) + 2 * kd;
            for (int i = 0; i < T; i++) {
                float *pr = p + (((size_t)n * d->heads + h) * T + i) * T, *out = tok(y, n, i) + h * hd;
                attn_row(d, qkv, n, h, i, pr);
                for (int c = 0; c < hd; c++) out[c] = 0;
                for (int j = 0; j < T; j++) {
                    const float *vj = tok(qkv, n, j) + voff;
                    for (int c = 0; c < hd; c++) out[c] += vj[c] * pr[j];
                }
            }
        }
    if (v.data) gather_v(d, qkv, v);
}

// one query row i of head h: dv_j += P_ij dy_i; dP_ij = dy_i . v_j; dS = P (dP - sum P dP);
// dq_i += scale sum_j dS_ij k_j; dk_j += scale dS_ij q_i
static void attn_row_backward(const AttnDims *d, Map qkv, const float *pr, const float *dyi, Map dqkv, int n,
                              int h, int i, float *ds) {
    int T = d->H * d->W, kd = d->key_dim, hd = d->head_dim, off = h * (2 * kd + hd);
    const float *q = tok(qkv, n, i) + off;
    float *dq = tok(dqkv, n, i) + off;
    for (int j = 0; j < T; j++) {
        const float *vj = tok(qkv, n, j) + off + 2 * kd;
        float *dvj = tok(dqkv, n, j) + off + 2 * kd, s = 0;
        for (int c = 0; c < hd; c++) {
            dvj[c] += pr[j] * dyi[c];
            s += dyi[c] * vj[c];
        }
        ds[j] = s;
    }
    softmax_row_backward(pr, ds, T, d->scale);
    for (int j = 0; j < T; j++) {
        float g = ds[j];
        const float *kj = tok(qkv, n, j) + off + kd;
        float *dkj = tok(dqkv, n, j) + off + kd;
        for (int c = 0; c < kd; c++) {
            dq[c] += g * kj[c];
            dkj[c] += g * q[c];
        }
    }
}

void attn26_backward_ref(const AttnDims *d, Map qkv, const float *p, Map dy, Map dv, Map dqkv, float *ws) {
    attn_check(d, qkv, dy, "attn26_backward_ref");
    attn_check(d, dqkv, dy, "attn26_backward_ref (dqkv)");
    int T = d->H * d->W, hd = d->head_dim;
    for (int n = 0; n < d->N; n++)
        for (int h = 0; h < d->heads; h++)
            for (int i = 0; i < T; i++) {
                const float *pr = p + (((size_t)n * d->heads + h) * T + i) * T;
                attn_row_backward(d, qkv, pr, tok(dy, n, i) + h * hd, dqkv, n, h, i, ws);
            }
    if (dv.data) scatter_dv(d, dv, dqkv);
}

// ---- the GEMM path: per (image, head), row-major views with the maps' pixel strides ---------------
// Head h of image n: Q, K (T, kd) and V (T, hd) start at channel h*(2kd+hd) of the image's first
// qkv pixel, rows qkv.ld apart; y and dy's (T, hd) block at channel h*hd; P (T, T) packed.
typedef struct { const float *q, *k, *v; float *dq, *dk, *dv; int ld, ldd; } HeadView;

static HeadView head_view(const AttnDims *d, Map qkv, Map dqkv, int n, int h) {
    size_t img = (size_t)n * d->H * d->W, off = (size_t)h * (2 * d->key_dim + d->head_dim);
    const float *x = qkv.data + img * qkv.ld + off;
    float *dx = dqkv.data ? dqkv.data + img * dqkv.ld + off : NULL;
    HeadView hv = { x, x + d->key_dim, x + 2 * d->key_dim, dx, dx ? dx + d->key_dim : NULL,
                    dx ? dx + 2 * d->key_dim : NULL, qkv.ld, dqkv.ld };
    return hv;
}

void attn26_forward_cpu(const AttnDims *d, Map qkv, Map y, Map v, float *p) {
    attn_check(d, qkv, y, "attn26_forward_cpu");
    int T = d->H * d->W, kd = d->key_dim, hd = d->head_dim;
    for (int n = 0; n < d->N; n++)
        for (int h = 0; h < d->heads; h++) {
            HeadView hv = head_view(d, qkv, (Map){ 0 }, n, h);
            float *pr = p + ((size_t)n * d->heads + h) * T * T;
            float *out = y.data + (size_t)n * T * y.ld + (size_t)h * hd;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, kd, d->scale, hv.q, hv.ld, hv.k, hv.ld,
                        0.0f, pr, T);                                                      // S = scale q k^T
            for (int i = 0; i < T; i++) softmax_row(pr + (size_t)i * T, T);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, pr, T, hv.v, hv.ld, 0.0f,
                        out, y.ld);                                                        // y = P v
        }
    if (v.data) gather_v(d, qkv, v);
}

void attn26_backward_cpu(const AttnDims *d, Map qkv, const float *p, Map dy, Map dv, Map dqkv, float *ws) {
    attn_check(d, qkv, dy, "attn26_backward_cpu");
    attn_check(d, dqkv, dy, "attn26_backward_cpu (dqkv)");
    int T = d->H * d->W, kd = d->key_dim, hd = d->head_dim;
    for (int n = 0; n < d->N; n++)
        for (int h = 0; h < d->heads; h++) {
            HeadView hv = head_view(d, qkv, dqkv, n, h);
            const float *pr = p + ((size_t)n * d->heads + h) * T * T;
            const float *g = dy.data + (size_t)n * T * dy.ld + (size_t)h * hd;
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, pr, T, g, dy.ld, 1.0f, hv.dv,
                        hv.ldd);                                                           // dv += P^T dy
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, g, dy.ld, hv.v, hv.ld, 0.0f,
                        ws, T);                                                            // dP = dy v^T
            for (int i = 0; i < T; i++) softmax_row_backward(pr + (size_t)i * T, ws + (size_t)i * T, T, d->scale);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, kd, T, 1.0f, ws, T, hv.k, hv.ld, 1.0f, hv.dq,
                        hv.ldd);                                                           // dq += dS k
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, kd, T, 1.0f, ws, T, hv.q, hv.ld, 1.0f, hv.dk,
                        hv.ldd);                                                           // dk += dS^T q
        }
    if (dv.data) scatter_dv(d, dv, dqkv);
}
