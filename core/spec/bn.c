// bn.c: batch normalisation over the M = N*H*W pixels of each channel (PyTorch BatchNorm2d).
// Statistics and gradient sums accumulate in double, over blocks of channels kept on the stack
// so nothing is allocated. Legend: N batch, H,W size, C channels, M pixels.
#include "core/spec/ops.h"
#include "core/base/util.h"

#include <math.h>
#include <stdlib.h>

enum { BLOCK = 64 };   // channels whose sums are accumulated in one pass over the pixels

static void bn_check(Map a, Map b, const char *who) {
    if (a.N != b.N || a.H != b.H || a.W != b.W || a.C != b.C)
        die("%s: maps %dx%dx%dx%d and %dx%dx%dx%d differ", who, a.N, a.H, a.W, a.C, b.N, b.H, b.W,
            b.C);
}

static int block_size(int C, int c0) { return C - c0 < BLOCK ? C - c0 : BLOCK; }

// mean and biased variance (two passes: no cancellation) of channels c0..c0+nc-1
static void channel_stats(Map z, int c0, int nc, double *mean, double *var) {
    size_t M = map_pixels(z);
    for (int c = 0; c < nc; c++) mean[c] = var[c] = 0.0;
    for (size_t m = 0; m < M; m++) {
        const float *row = z.data + m * z.ld + c0;
        for (int c = 0; c < nc; c++) mean[c] += row[c];
    }
    for (int c = 0; c < nc; c++) mean[c] /= (double)M;
    for (size_t m = 0; m < M; m++) {
        const float *row = z.data + m * z.ld + c0;
        for (int c = 0; c < nc; c++) {
            double e = row[c] - mean[c];
            var[c] += e * e;
        }
    }
    for (int c = 0; c < nc; c++) var[c] /= (double)M;
}

// u = (z - mean) * scale + beta for channels c0..c0+nc-1, scale = gamma * invstd
static void normalise(Map z, int c0, int nc, const double *mean, const double *scale,
                      const float *beta, Map u) {
    size_t M = map_pixels(z);
    for (size_t m = 0; m < M; m++) {
        const float *in = z.data + m * z.ld + c0;
        float *out = u.data + m * u.ld + c0;
        for (int c = 0; c < nc; c++) out[c] = (float)((in[c] - mean[c]) * scale[c] + beta[c0 + c]);
    }
}

void bn_forward_train_cpu(Map z, const float *gamma, const float *beta, float eps, float momentum,
                          float *running_mean, float *running_var, float *mean, float *invstd,
                          Map u) {
    bn_check(z, u, "bn_forward_train_cpu");
    size_t M = map_pixels(z);
    // PyTorch refuses M == 1 in training; the biased variance stands in for the unbiased there.
    double unbias = M > 1 ? (double)M / (double)(M - 1) : 1.0, keep = 1.0 - momentum;
    for (int c0 = 0; c0 < z.C; c0 += BLOCK) {
        int nc = block_size(z.C, c0);
        double mu[BLOCK], var[BLOCK], scale[BLOCK];
        channel_stats(z, c0, nc, mu, var);
        for (int c = 0; c < nc; c++) {
            int ch = c0 + c;
            double is = 1.0 / sqrt(var[c] + eps);
            scale[c] = gamma[ch] * is;
            if (mean) mean[ch] = (float)mu[c];
            if (invstd) invstd[ch] = (float)is;
            if (running_mean)
                running_mean[ch] = (float)(keep * running_mean[ch] + momentum * mu[c]);
            if (running_var)
                running_var[ch] = (float)(keep * running_var[ch] + momentum * var[c] * unbias);
        }
        normalise(z, c0, nc, mu, scale, beta, u);
    }
}

void bn_forward_eval_cpu(Map z, const float *gamma, const float *beta, float eps,
                         const float *running_mean, const float *running_var, Map u) {
    bn_check(z, u, "bn_forward_eval_cpu");
    for (int c0 = 0; c0 < z.C; c0 += BLOCK) {
        int nc = block_size(z.C, c0);
        double mu[BLOCK], scale[BLOCK];
        for (int c = 0; c < nc; c++) {
            mu[c] = running_mean[c0 + c];
            scale[c] = gamma[c0 + c] / sqrt((double)running_var[c0 + c] + eps);
        }
        normalise(z, c0, nc, mu, scale, beta, u);
    }
}

// With xhat = (z - mean) * invstd and sums over the M pixels of a channel:
//   dbeta = Σ du,  dgamma = Σ du·xhat,  dz = gamma·invstd · (du - dbeta/M - xhat·dgamma/M).
void bn_backward_cpu(Map z, const float *gamma, const float *mean, const float *invstd, Map du,
                     Map dz, float *dgamma, float *dbeta) {
    bn_check(z, du, "bn_backward_cpu");
    if (dz.data) bn_check(z, dz, "bn_backward_cpu");
    size_t M = map_pixels(z);
    for (int c0 = 0; c0 < z.C; c0 += BLOCK) {
        int nc = block_size(z.C, c0);
        double sdu[BLOCK] = { 0 }, sdux[BLOCK] = { 0 };
        const float *mu = mean + c0, *is = invstd + c0;
        for (size_t m = 0; m < M; m++) {
            const float *zr = z.data + m * z.ld + c0, *g = du.data + m * du.ld + c0;
            for (int c = 0; c < nc; c++) {
                sdu[c] += g[c];
                sdux[c] += (double)g[c] * ((zr[c] - mu[c]) * (double)is[c]);
            }
        }
        for (int c = 0; c < nc; c++) {
            if (dbeta) dbeta[c0 + c] += (float)sdu[c];
            if (dgamma) dgamma[c0 + c] += (float)sdux[c];
        }
        if (!dz.data) continue;
        double k[BLOCK];   // gamma·invstd
        for (int c = 0; c < nc; c++) {
            k[c] = (double)gamma[c0 + c] * is[c];
            sdu[c] /= (double)M;
            sdux[c] /= (double)M;
        }
        for (size_t m = 0; m < M; m++) {   // dz may alias du: each element is read before written
            const float *zr = z.data + m * z.ld + c0, *g = du.data + m * du.ld + c0;
            float *out = dz.data + m * dz.ld + c0;
            for (int c = 0; c < nc; c++) {
                double xhat = (zr[c] - mu[c]) * (double)is[c];
                out[c] = (float)(k[c] * (g[c] - sdu[c] - xhat * sdux[c]));
            }
        }
    }
}

void bn_apply_cpu(Map z, const float *gamma, const float *beta, const float *mean, const float *invstd, Map u) {
    size_t np = map_pixels(z);
    for (size_t i = 0; i < np; i++) {
        const float *zi = z.data + i * z.ld;
        float *ui = u.data + i * u.ld;
        for (int k = 0; k < z.C; k++) ui[k] = (zi[k] - mean[k]) * invstd[k] * gamma[k] + beta[k];
    }
}

void bn_frozen_stats_cpu(int C, const float *running_mean, const float *running_var, float eps, float *mean,
                         float *invstd) {
    for (int c = 0; c < C; c++) {
        mean[c] = running_mean[c];
        invstd[c] = (float)(1.0 / sqrt((double)running_var[c] + eps));
    }
}

// dgamma and dbeta as bn_backward_cpu (its dz = NULL pass), then dz = gamma·invstd·du in double.
void bn_frozen_backward_cpu(Map z, const float *gamma, const float *mean, const float *invstd, Map du,
                            Map dz, float *dgamma, float *dbeta) {
    Map none = { 0 };
    bn_backward_cpu(z, gamma, mean, invstd, du, none, dgamma, dbeta);
    if (!dz.data) return;
    bn_check(z, dz, "bn_frozen_backward_cpu");
    size_t M = map_pixels(z);
    for (size_t m = 0; m < M; m++) {   // dz may alias du
        const float *g = du.data + m * du.ld;
        float *out = dz.data + m * dz.ld;
        for (int c = 0; c < z.C; c++) out[c] = (float)((double)gamma[c] * invstd[c] * g[c]);
    }
}

// ---- synchronised BN: the whole batch's sums through BnSync (ops.h) ---------------------------------

void bn_forward_train_sync_cpu(Map z, const float *gamma, const float *beta, float eps, float momentum,
                               float *running_mean, float *running_var, float *mean, float *invstd, Map u,
                               const BnSync *sync) {
    bn_check(z, u, "bn_forward_train_sync_cpu");
    if (!mean || !invstd) die("bn_forward_train_sync_cpu: the saved statistics are required (bn_apply reads them)");
    int K = z.C;
    size_t M = map_pixels(z);
    double *a = xmalloc(sizeof(double) * (2 * (size_t)K + 1)), *sq = a + K + 1;
    a[0] = (double)M;                              // [M, Σz], then Σ(z - mean)²: channel_stats' two passes
    for (int c = 0; c < K; c++) a[1 + c] = sq[c] = 0.0;
    for (size_t m = 0; m < M; m++) {
        const float *row = z.data + m * z.ld;
        for (int c = 0; c < K; c++) a[1 + c] += row[c];
    }
    sync->sum(sync->arg, a, K + 1);
    double Mt = a[0], *mu = a + 1;
    for (int c = 0; c < K; c++) mu[c] /= Mt;
    for (size_t m = 0; m < M; m++) {
        const float *row = z.data + m * z.ld;
        for (int c = 0; c < K; c++) {
            double e = row[c] - mu[c];
            sq[c] += e * e;
        }
    }
    sync->sum(sync->arg, sq, K);
    double unbias = Mt > 1 ? Mt / (Mt - 1) : 1.0, keep = 1.0 - momentum;
    for (int c = 0; c < K; c++) {
        double var = sq[c] / Mt;
        mean[c] = (float)mu[c];
        invstd[c] = (float)(1.0 / sqrt(var + eps));
        if (running_mean) running_mean[c] = (float)(keep * running_mean[c] + momentum * mu[c]);
        if (running_var) running_var[c] = (float)(keep * running_var[c] + momentum * var * unbias);
    }
    free(a);
    bn_apply_cpu(z, gamma, beta, mean, invstd, u);
}

void bn_backward_sync_cpu(Map z, const float *gamma, const float *mean, const float *invstd, Map du, Map dz,
                          float *dgamma, float *dbeta, const BnSync *sync) {
    bn_check(z, du, "bn_backward_sync_cpu");
    if (dz.data) bn_check(z, dz, "bn_backward_sync_cpu");
    int K = z.C;
    size_t M = map_pixels(z);
    double *a = xcalloc(2 * (size_t)K + 1, sizeof(double)), *sdu = a + 1, *sdux = a + 1 + K;
    a[0] = (double)M;
    for (size_t m = 0; m < M; m++) {               // bn_backward_cpu's sums, in its order
        const float *zr = z.data + m * z.ld, *g = du.data + m * du.ld;
        for (int c = 0; c < K; c++) {
            sdu[c] += g[c];
            sdux[c] += (double)g[c] * ((zr[c] - mean[c]) * (double)invstd[c]);
        }
    }
    for (int c = 0; c < K; c++) {                  // this device's own parameter gradients
        if (dbeta) dbeta[c] += (float)sdu[c];
        if (dgamma) dgamma[c] += (float)sdux[c];
    }
    sync->sum(sync->arg, a, 2 * K + 1);
    if (dz.data) {
        double Mt = a[0];
        for (int c = 0; c < K; c++) { sdu[c] /= Mt; sdux[c] /= Mt; }
        for (size_t m = 0; m < M; m++) {           // dz may alias du
            const float *zr = z.data + m * z.ld, *g = du.data + m * du.ld;
            float *out = dz.data + m * dz.ld;
            for (int c = 0; c < K; c++) {
                double k = (double)gamma[c] * invstd[c], xhat = (zr[c] - mean[c]) * (double)invstd[c];
                out[c] = (float)(k * (g[c] - sdu[c] - xhat * sdux[c]));
            }
        }
    }
    free(a);
}
