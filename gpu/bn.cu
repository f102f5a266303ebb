// bn.cu: batch normalisation over the M = N*H*W pixels of each channel, the CUDA twin of
// core/bn.c. Per-channel sums are a deterministic two-level reduction in double: a fixed grid of
// blocks (set by M alone, not by the GPU) writes partial sums, one thread per channel adds them in
// order. Forward writes u (=); backward writes dz (=) and adds dgamma, dbeta (+=).
// Legend: N batch, H,W size, C channels, M pixels, G partial-sum blocks along the pixels.
#include <math.h>

#include "gpu/kernel_util.h"

enum { TILE_C = 32, TILE_M = 8, MAX_PARTS = 256, PIXELS_PER_PART = 512 };

// What a partial-sum pass adds up for each channel c over pixels m (a = first map, b = second):
//   SUM: s0 = Σ a   SQDEV: s1 = Σ (a - mean)²   GRAD: s0 = Σ b, s1 = Σ b·(a - mean)·invstd
enum SumKind { SUM, SQDEV, GRAD };

static int parts_for(size_t M) {
    size_t g = (M + PIXELS_PER_PART - 1) / PIXELS_PER_PART;
    return g < 1 ? 1 : g > MAX_PARTS ? MAX_PARTS : (int)g;
}

// Per-channel double vectors in scratch: partials (G, C) twice, then per-channel results.
struct Sums {
    int G;
    double *part0, *part1;   // (G, C)
    double *mean, *var;      // (C)
    float *shift, *scale;    // (C): u = (z - shift) * scale + beta
};

static Sums sums_take(Device *dev, int C, size_t M) {
    Sums s;
    s.G = parts_for(M);
    s.part0 = (double *)scratch_take(dev, sizeof(double) * s.G * C);
    s.part1 = (double *)scratch_take(dev, sizeof(double) * s.G * C);
    s.mean = (double *)scratch_take(dev, sizeof(double) * C);
    s.var = (double *)scratch_take(dev, sizeof(double) * C);
    s.shift = (float *)scratch_take(dev, sizeof(float) * C);
    s.scale = (float *)scratch_take(dev, sizeof(float) * C);
    return s;
}

extern "C" size_t bn_workspace_bytes_gpu(Map z) {
    size_t C = z.C, G = parts_for(map_pixels(z));
    return 2 * sizeof(double) * G * C + 2 * sizeof(double) * C + 2 * sizeof(float) * C + 6 * 256;
}

// ---- kernels -------------------------------------------------------------------------------

// Block (TILE_C, TILE_M) covers TILE_C channels; block row blockIdx.y of G takes pixels
// blockIdx.y*TILE_M + threadIdx.y, stepping by G*TILE_M. Partial (blockIdx.y, c) is written.
template <SumKind KIND>
__global__ void partial_sums_kernel(Map a, Map b, const double *mean, const float *fmean,
                                    const float *invstd, double *part0, double *part1) {
    __shared__ double sh0[TILE_M][TILE_C], sh1[TILE_M][TILE_C];
    int c = blockIdx.x * TILE_C + threadIdx.x;
    size_t M = (size_t)a.N * a.H * a.W;
    double s0 = 0.0, s1 = 0.0;
    if (c < a.C) {
        for (size_t m = blockIdx.y * (size_t)TILE_M + threadIdx.y; m < M;
             m += (size_t)gridDim.y * TILE_M) {
            float v = a.data[m * a.ld + c];
            if (KIND == SUM) s0 += v;
            if (KIND == SQDEV) { double e = v - mean[c]; s1 += e * e; }
            if (KIND == GRAD) {
                float g = b.data[m * b.ld + c];
                s0 += g;
                s1 += (double)g * ((v - fmean[c]) * (double)invstd[c]);
            }
        }
    }
    sh0[threadIdx.y][threadIdx.x] = s0;
    sh1[threadIdx.y][threadIdx.x] = s1;
    __syncthreads();
    if (threadIdx.y != 0 || c >= a.C) return;
    for (int t = 1; t < TILE_M; t++) { s0 += sh0[t][threadIdx.x]; s1 += sh1[t][threadIdx.x]; }
    part0[(size_t)blockIdx.y * a.C + c] = s0;
    part1[(size_t)blockIdx.y * a.C + c] = s1;
}

// out[c] = Σ_g part[g][c] / divisor, in order g = 0..G-1
__global__ void combine_kernel(const double *part, int G, int C, double divisor, double *out) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = 0.0;
    for (int g = 0; g < G; g++) s += part[(size_t)g * C + c];
    out[c] = s / divisor;
}

// From mean and biased variance: saved stats, running stats (unbiased variance), and the
// affine form of the normalisation. `unbias` is M/(M-1), or 1 when M == 1 (as the CPU twin).
__global__ void train_stats_kernel(int C, const double *mu, const double *var, const float *gamma,
                                   float eps, float momentum, double unbias, float *running_mean,
                                   float *running_var, float *mean, float *invstd, float *shift,
                                   float *scale) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double is = 1.0 / sqrt(var[c] + eps), keep = 1.0 - momentum;
    shift[c] = (float)mu[c];
    scale[c] = (float)(gamma[c] * is);
    if (mean) mean[c] = (float)mu[c];
    if (invstd) invstd[c] = (float)is;
    if (running_mean) running_mean[c] = (float)(keep * running_mean[c] + momentum * mu[c]);
    if (running_var) running_var[c] = (float)(keep * running_var[c] + momentum * var[c] * unbias);
}

__global__ void eval_stats_kernel(int C, const float *gamma, float eps, const float *running_mean,
                                  const float *running_var, float *shift, float *scale) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    shift[c] = running_mean[c];
    scale[c] = (float)(gamma[c] / sqrt((double)running_var[c] + eps));
}

// u = (z - shift) * scale + beta (u.data NULL: not stored); with y.data, also y = silu(u)
__global__ void normalise_kernel(Map z, const float *shift, const float *scale,
                                 const float *beta, Map u, Map y) {
    GRID_STRIDE(i, map_n(z)) {
        int c = (int)(i % z.C);
        float v = (*map_elem(z, i) - shift[c]) * scale[c] + beta[c];
        if (u.data) *map_elem(u, i) = v;
        if (y.data) *map_elem(y, i) = v / (1.0f + expf(-v));   // as silu_fwd_kernel
    }
}

// dgamma += Σ du·xhat, dbeta += Σ du
__global__ void grad_params_kernel(int C, const double *sdu, const double *sdux, float *dgamma,
                                   float *dbeta) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    if (dbeta) dbeta[c] += (float)sdu[c];
    if (dgamma) dgamma[c] += (float)sdux[c];
}

// dz = gamma·invstd · (du - Σdu/M - xhat·Σ(du·xhat)/M); dz may alias du
__global__ void bn_dz_kernel(Map z, const float *gamma, const float *mean, const float *invstd,
                             const double *sdu, const double *sdux, double M, Map du, Map dz) {
    GRID_STRIDE(i, map_n(z)) {
        int c = (int)(i % z.C);
        double xhat = (*map_elem(z, i) - mean[c]) * (double)invstd[c];
        double k = (double)gamma[c] * invstd[c];
        *map_elem(dz, i) = (float)(k * (*map_elem(du, i) - sdu[c] / M - xhat * (sdux[c] / M)));
    }
}

// u = (z - mean)·invstd·gamma + beta from saved statistics, each operation rounded alone in the
// order of the CPU's recompute loop (core/model_cpu.c bn_recompute), so the result is the same.
__device__ static inline float bn_apply_one(Map z, size_t i, const float *gamma,
                                            const float *beta, const float *mean,
                                            const float *invstd) {
    int c = (int)(i % z.C);
    float v = __fmul_rn(__fmul_rn(__fsub_rn(*map_elem(z, i), mean[c]), invstd[c]), gamma[c]);
    return __fadd_rn(v, beta[c]);
}

__global__ void bn_apply_kernel(Map z, const float *gamma, const float *beta, const float *mean,
                                const float *invstd, Map u) {
    GRID_STRIDE(i, map_n(z)) *map_elem(u, i) = bn_apply_one(z, i, gamma, beta, mean, invstd);
}

// du = dy·silu'(u) with u recomputed, the formula of silu_bwd_kernel; du may alias dy
__global__ void bn_apply_silu_bwd_kernel(Map z, const float *gamma, const float *beta,
                                         const float *mean, const float *invstd, Map dy, Map du) {
    GRID_STRIDE(i, map_n(z)) {
        float a = bn_apply_one(z, i, gamma, beta, mean, invstd), s = 1.0f / (1.0f + expf(-a));
        *map_elem(du, i) = *map_elem(dy, i) * s * (1.0f + a * (1.0f - s));
    }
}

// ---- launchers -----------------------------------------------------------------------------

static void bn_check(Map a, Map b, const char *who) { same_shape_gpu(a, b, who); }

static unsigned channel_blocks(int C) { return (unsigned)((C + THREADS - 1) / THREADS); }

// Run one partial-sum pass of kind K over (a, b) and combine each of its two sums, divided by
// `divisor`, into out0/out1 (NULL: not needed).
template <SumKind K>
static void channel_sums(Device *dev, Map a, Map b, const double *mean, const float *fmean,
                         const float *invstd, Sums *s, double divisor, double *out0,
                         double *out1) {
    dim3 grid((a.C + TILE_C - 1) / TILE_C, s->G), block(TILE_C, TILE_M);
    partial_sums_kernel<K><<<grid, block, 0, dev->stream>>>(a, b, mean, fmean, invstd, s->part0,
                                                             s->part1);
    checkLaunch(dev);
    if (out0) {
        combine_kernel<<<channel_blocks(a.C), THREADS, 0, dev->stream>>>(s->part0, s->G, a.C,
                                                                         divisor, out0);
        checkLaunch(dev);
    }
    if (out1) {
        combine_kernel<<<channel_blocks(a.C), THREADS, 0, dev->stream>>>(s->part1, s->G, a.C,
                                                                         divisor, out1);
        checkLaunch(dev);
    }
}

static void normalise(Device *dev, Map z, const Sums *s, const float *beta, Map u, Map y) {
    normalise_kernel<<<blocks_for(map_floats(z)), THREADS, 0, dev->stream>>>(
        z, s->shift, s->scale, beta, u, y);
    checkLaunch(dev);
}

static void bn_train(Device *dev, Map z, const float *gamma, const float *beta, float eps,
                     float momentum, float *running_mean, float *running_var, float *mean,
                     float *invstd, Map u, Map y) {
    size_t mark = dev->scratch.used, M = map_pixels(z);
    Sums s = sums_take(dev, z.C, M);
    // two passes, mean then squared deviations, as the CPU twin: no cancellation
    channel_sums<SUM>(dev, z, z, NULL, NULL, NULL, &s, (double)M, s.mean, NULL);
    channel_sums<SQDEV>(dev, z, z, s.mean, NULL, NULL, &s, (double)M, NULL, s.var);
    double unbias = M > 1 ? (double)M / (double)(M - 1) : 1.0;
    train_stats_kernel<<<channel_blocks(z.C), THREADS, 0, dev->stream>>>(
        z.C, s.mean, s.var, gamma, eps, momentum, unbias, running_mean, running_var, mean, invstd,
        s.shift, s.scale);
    checkLaunch(dev);
    normalise(dev, z, &s, beta, u, y);
    dev->scratch.used = mark;
}

extern "C" void bn_forward_train_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                                     float eps, float momentum, float *running_mean,
                                     float *running_var, float *mean, float *invstd, Map u) {
    bn_check(z, u, "bn_forward_train_gpu");
    Map none = { NULL, 0, 0, 0, 0, 0 };
    bn_train(dev, z, gamma, beta, eps, momentum, running_mean, running_var, mean, invstd, u, none);
}

extern "C" void bn_silu_forward_train_gpu(Device *dev, Map z, const float *gamma,
                                          const float *beta, float eps, float momentum,
                                          float *running_mean, float *running_var, float *mean,
                                          float *invstd, Map u, Map y) {
    if (u.data) bn_check(z, u, "bn_silu_forward_train_gpu");
    bn_check(z, y, "bn_silu_forward_train_gpu");
    bn_train(dev, z, gamma, beta, eps, momentum, running_mean, running_var, mean, invstd, u, y);
}

extern "C" void bn_forward_eval_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                                    float eps, const float *running_mean, const float *running_var,
                                    Map u) {
    bn_check(z, u, "bn_forward_eval_gpu");
    size_t mark = dev->scratch.used;
    Sums s = sums_take(dev, z.C, map_pixels(z));
    eval_stats_kernel<<<channel_blocks(z.C), THREADS, 0, dev->stream>>>(
        z.C, gamma, eps, running_mean, running_var, s.shift, s.scale);
    checkLaunch(dev);
    Map none = { NULL, 0, 0, 0, 0, 0 };
    normalise(dev, z, &s, beta, u, none);
    dev->scratch.used = mark;
}

extern "C" void bn_backward_gpu(Device *dev, Map z, const float *gamma, const float *mean,
                                const float *invstd, Map du, Map dz, float *dgamma, float *dbeta) {
    bn_check(z, du, "bn_backward_gpu");
    if (dz.data) bn_check(z, dz, "bn_backward_gpu");
    size_t mark = dev->scratch.used;
    Sums s = sums_take(dev, z.C, map_pixels(z));
    // the sums Σ du and Σ du·xhat, held in the mean and var slots
    double *sdu = s.mean, *sdux = s.var;
    channel_sums<GRAD>(dev, z, du, NULL, mean, invstd, &s, 1.0, sdu, sdux);
    grad_params_kernel<<<channel_blocks(z.C), THREADS, 0, dev->stream>>>(z.C, sdu, sdux, dgamma,
                                                                         dbeta);
    checkLaunch(dev);
    if (dz.data) {
        bn_dz_kernel<<<blocks_for(map_floats(z)), THREADS, 0, dev->stream>>>(
            z, gamma, mean, invstd, sdu, sdux, (double)map_pixels(z), du, dz);
        checkLaunch(dev);
    }
    dev->scratch.used = mark;
}

extern "C" void bn_apply_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                             const float *mean, const float *invstd, Map u) {
    bn_check(z, u, "bn_apply_gpu");
    bn_apply_kernel<<<blocks_for(map_floats(z)), THREADS, 0, dev->stream>>>(z, gamma, beta, mean,
                                                                            invstd, u);
    checkLaunch(dev);
}

extern "C" void bn_apply_silu_backward_gpu(Device *dev, Map z, const float *gamma,
                                           const float *beta, const float *mean,
                                           const float *invstd, Map dy, Map du) {
    bn_check(z, dy, "bn_apply_silu_backward_gpu");
    bn_check(z, du, "bn_apply_silu_backward_gpu");
    bn_apply_silu_bwd_kernel<<<blocks_for(map_floats(z)), THREADS, 0, dev->stream>>>(
        z, gamma, beta, mean, invstd, dy, du);
    checkLaunch(dev);
}
