// musgd.c: see musgd.h. Ultralytics engine/trainer.py build_optimizer and optim/muon.py at 8.4.14,
// torch.optim.AdamW (_single_tensor_adamw).
// Elementwise updates follow ATen's fp32 kernels (add with alpha and lerp as fused multiply-adds);
// the Newton-Schulz GEMMs run through CBLAS, each result rounded to bf16 as PyTorch's bf16 matmul does.
#include "core/spec/musgd.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/util.h"

#define NS_STEPS 5
static const float NS_A = 3.4445f, NS_B = -4.7750f, NS_C = 2.0315f;

// ---- optimizer=auto and groups ---------------------------------------------------------------
MuAuto musgd_auto(long n_images, int batch, int epochs, int nc) {
    long per = batch > 64 ? batch : 64;   // max(batch, nbs)
    long iterations = (n_images + per - 1) / per * epochs;
    if (iterations > 10000) return (MuAuto){ "MuSGD", 0.01, 0.9, 0.0 };
    double lr_fit = nearbyint(0.002 * 5 / (4 + nc) * 1e6) / 1e6;   // round(x, 6)
    return (MuAuto){ "AdamW", lr_fit, 0.9, 0.0 };
}

int musgd_group(const char *name, int ndim, int is_norm, int use_muon) {
    int hi = (strstr(name, "23") && strstr(name, "cv3")) || strstr(name, "proto.semseg");
    int base = ndim >= 2 && use_muon ? MU_MUON_HI
             : strstr(name, "bias")  ? MU_BIAS_HI
             : is_norm               ? MU_BN_HI
                                     : MU_WEIGHT_HI;
    return base + !hi;
}

int musgd_group_decays(int group) { return group <= MU_WEIGHT || group >= MU_MUON_HI; }

double musgd_group_lr_scale(int group) { return group % 2 == 0 ? 3.0 : 1.0; }

MuParam musgd_param(float *w, float *g, const int *shape, int ndim, int group) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (size_t)shape[i];
    MuParam p = { w, g, n, group, 1, (int)n, 1.0 };
    if (ndim >= 2) {
        p.r = shape[0];
        p.c = (int)(n / (size_t)shape[0]);
        // muon_update: max(1, grad.size(-2) / grad.size(-1)) ** 0.5, on the original shape
        p.shape_scale = sqrt(fmax(1.0, (double)shape[ndim - 2] / shape[ndim - 1]));
    }
    return p;
}

// ---- Newton-Schulz ---------------------------------------------------------------------------
float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;   // NaN
    u += 0x7fffu + ((u >> 16) & 1u);                  // round to nearest, ties to even
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static inline float rnd(float x, int bf16) { return bf16 ? bf16_round(x) : x; }

size_t musgd_ns_workspace_floats(int r, int c) {
    size_t m = (size_t)(r < c ? r : c), n = (size_t)(r < c ? c : r);
    return 2 * m * n + 3 * m * m;
}

// y (rows, cols) = rnd(a (rows, k) @ b), b (k, cols) or, when bt, b^T with b stored (cols, k)
static void gemm_rounded(const float *a, const float *b, int bt, int rows, int cols, int k, int bf16, float *y) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, bt ? CblasTrans : CblasNoTrans, rows, cols, k, 1.0f, a, k, b,
                bt ? k : cols, 0.0f, y, cols);
    for (size_t i = 0; i < (size_t)rows * cols; i++) y[i] = rnd(y[i], bf16);
}

void musgd_newton_schulz(const float *G, int r, int c, int bf16, float *X, float *ws) {
    int m = r <= c ? r : c, n = r <= c ? c : r;   // the wide orientation: Y (m, n), m <= n
    float *Y = ws, *Z = Y + (size_t)m * n, *A = Z + (size_t)m * n, *T = A + (size_t)m * m, *B = T + (size_t)m * m;
    double ss = 0;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            float v = rnd(G[(size_t)i * c + j], bf16);
            ss += (double)v * v;
            Y[r <= c ? (size_t)i * c + j : (size_t)j * r + i] = v;
        }
    float norm = rnd(rnd((float)sqrt(ss), bf16) + 1e-7f, bf16);   // X.norm() + eps, both bf16 tensors
    for (size_t k = 0; k < (size_t)m * n; k++) Y[k] = rnd(Y[k] / norm, bf16);
    for (int step = 0; step < NS_STEPS; step++) {
        gemm_rounded(Y, Y, 1, m, m, n, bf16, A);                                   // A = X X^T
        for (size_t k = 0; k < (size_t)m * m; k++) T[k] = rnd(NS_C * A[k], bf16);   // c*A @ A is (c*A) @ A
        gemm_rounded(T, A, 0, m, m, m, bf16, B);
        for (size_t k = 0; k < (size_t)m * m; k++) B[k] = rnd(rnd(NS_B * A[k], bf16) + B[k], bf16);
        gemm_rounded(B, Y, 0, m, n, m, bf16, Z);                                   // B @ X
        for (size_t k = 0; k < (size_t)m * n; k++) Y[k] = rnd(rnd(NS_A * Y[k], bf16) + Z[k], bf16);
    }
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) X[(size_t)i * c + j] = Y[r <= c ? (size_t)i * c + j : (size_t)j * r + i];
}

// ---- MuSGD -----------------------------------------------------------------------------------
void musgd_init(MuSgd *o, MuParam *p, int n_params, double muon, double sgd) {
    memset(o, 0, sizeof *o);
    o->p = p; o->n_params = n_params; o->muon = muon; o->sgd = sgd;
    size_t n_muon = 0, n_all = 0, ws = 0;
    for (int k = 0; k < n_params; k++) {
        if ((size_t)p[k].r * p[k].c != p[k].n || p[k].group < 0 || p[k].group >= MU_GROUPS)
            die("musgd_init: parameter %d: group %d, %d x %d view of %zu floats", k, p[k].group, p[k].r, p[k].c,
                p[k].n);
        n_all += p[k].n;
        if (p[k].group < MU_MUON_HI) continue;
        n_muon += p[k].n;
        size_t need = 2 * p[k].n + musgd_ns_workspace_floats(p[k].r, p[k].c);   // U, X, NS scratch
        if (need > ws) ws = need;
    }
    o->m = xcalloc(n_muon ? n_muon : 1, sizeof(float));   // torch.zeros_like at the first step
    o->s = xcalloc(n_all ? n_all : 1, sizeof(float));
    o->ws = xmalloc((ws ? ws : 1) * sizeof(float));
}

void musgd_free(MuSgd *o) {
    free(o->m); free(o->s); free(o->ws);
    memset(o, 0, sizeof *o);
}

// torch.lerp in fp32: self + w*(end - self) for |w| < 0.5, else end - (end - self)*(1 - w)
static inline float lerpf(float self, float end, float w) {
    return fabsf(w) < 0.5f ? fmaf(w, end - self, self) : fmaf(-(end - self), 1.0f - w, end);
}

// muon_update, then p -= lr*muon * update (the bf16 update promoted to fp32)
static void muon_apply(MuSgd *o, const MuParam *p, float *m, float beta, double lr) {
    float *U = o->ws, *X = U + p->n, *ws = X + p->n;
    float w1 = (float)(1 - (double)beta);
    for (size_t i = 0; i < p->n; i++) {
        m[i] = lerpf(m[i], p->g[i], w1);     // momentum.lerp_(grad, 1 - beta)
        U[i] = lerpf(p->g[i], m[i], beta);   // nesterov: grad.lerp(momentum, beta)
    }
    musgd_newton_schulz(U, p->r, p->c, 1, X, ws);
    float alpha = (float)-(lr * o->muon);
    for (size_t i = 0; i < p->n; i++) {
        float x = p->shape_scale == 1.0 ? X[i] : bf16_round(X[i] * (float)p->shape_scale);
        p->w[i] = fmaf(alpha, x, p->w[i]);
    }
}

// nesterov SGD with L2 as MuSGD writes it: g' = g + wd*p; s = beta*s + g'; p -= lr*(g' + beta*s)
static void sgd_apply(const MuParam *p, float *s, float beta, float wd, float alpha) {
    for (size_t i = 0; i < p->n; i++) {
        float d = wd != 0.0f ? fmaf(wd, p->w[i], p->g[i]) : p->g[i];
        float b = s[i] * beta;   // mul_ then add_: two roundings
        s[i] = b + d;
        p->w[i] = fmaf(alpha, fmaf(beta, s[i], d), p->w[i]);
        p->g[i] = 0.0f;
    }
}

void musgd_step(MuSgd *o, const MuStep *st) {
    float *m = o->m, *s = o->s, beta = (float)st->momentum;
    for (int k = 0; k < o->n_params; k++) {
        const MuParam *p = &o->p[k];
        double lr = st->lr[p->group];
        float wd = musgd_group_decays(p->group) ? (float)st->weight_decay : 0.0f;
        int muon = p->group >= MU_MUON_HI;
        if (muon) {
            muon_apply(o, p, m, beta, lr);
            m += p->n;
        }
        sgd_apply(p, s, beta, wd, (float)-(lr * (muon ? o->sgd : 1.0)));
        s += p->n;
    }
}

// ---- AdamW ---------------------------------------------------------------------------------------
void adamw_init(AdamW *o, MuParam *p, int n_params) {
    memset(o, 0, sizeof *o);
    o->p = p; o->n_params = n_params;
    size_t n = 0;
    for (int k = 0; k < n_params; k++) {
        if (p[k].group < 0 || p[k].group >= MU_GROUPS) die("adamw_init: parameter %d: group %d", k, p[k].group);
        n += p[k].n;
    }
    o->m = xcalloc(n ? n : 1, sizeof(float));
    o->v = xcalloc(n ? n : 1, sizeof(float));
}

void adamw_free(AdamW *o) {
    free(o->m); free(o->v);
    memset(o, 0, sizeof *o);
}

void adamw_step(AdamW *o, const MuStep *st) {
    const double beta1 = st->momentum, beta2 = 0.999, eps = 1e-8;
    long t = ++o->steps;
    double bc1 = 1 - pow(beta1, (double)t), bc2_sqrt = sqrt(1 - pow(beta2, (double)t));
    float *m = o->m, *v = o->v;
    for (int k = 0; k < o->n_params; k++) {
        const MuParam *p = &o->p[k];
        double lr = st->lr[p->group], wd = musgd_group_decays(p->group) ? st->weight_decay : 0;
        float decay = o->l2 ? 1.0f : (float)(1 - lr * wd), l2 = o->l2 ? (float)wd : 0.0f;
        float w1 = (float)(1 - beta1), b2 = (float)beta2, w2 = (float)(1 - beta2);
        float step = (float)-(lr / bc1), bc2s = (float)bc2_sqrt;
        for (size_t i = 0; i < p->n; i++) {
            float g = p->g[i];
            if (l2 != 0.0f) g = fmaf(l2, p->w[i], g);   // Adam: grad.add(param, alpha=wd)
            else p->w[i] *= decay;                    // AdamW: param.mul_(1 - lr*wd)
            m[i] = lerpf(m[i], g, w1);
            v[i] = fmaf(w2, g * g, v[i] * b2);   // mul_(beta2).addcmul_(g, g, value=1-beta2)
            float denom = sqrtf(v[i]) / bc2s + (float)eps;
            p->w[i] = fmaf(step, m[i] / denom, p->w[i]);
            p->g[i] = 0.0f;
        }
        m += p->n;
        v += p->n;
    }
}
