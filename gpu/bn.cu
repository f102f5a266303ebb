// bn.cu: batch normalisation over the M = N*H*W pixels of each channel, the CUDA twin of
// core/spec/bn.c. Per-channel sums are a deterministic two-level reduction in double: a fixed grid of
// blocks (set by M alone, not by the GPU) writes partial sums, then a block per channel adds them
// in a fixed order. Forward writes u (=); backward writes dz (=) and adds dgamma, dbeta (+=).
// The forward reads z once for its statistics (shifted moments, below) and once to normalise; the
// fused SiLU backward recomputes du = dy·silu'(u) where it needs it instead of storing it.
// z, u and y may be bf16-stored (tensor.h; read as floats, written rounded); gradients are fp32.
// Legend: N batch, H,W size, C channels, M pixels, G partial-sum blocks along the pixels.
#include <cuda_bf16.h>
#include <math.h>

#include "gpu/kernel_util.h"

// What a partial-sum pass adds up for each channel c over pixels m (a = z, b = a gradient):
//   MOMENTS:   s0 = Σ (a - k), s1 = Σ (a - k)² with k = a at pixel 0. One pass; the shift keeps
//              var = s1/M - (s0/M)² free of cancellation (k lies within the data), in double.
//   GRAD:      s0 = Σ du, s1 = Σ du·xhat with du = b
//   SILU_GRAD: the same with du = b·silu'(u), u recomputed from a (b is the gradient at the SiLU)
enum SumKind { MOMENTS, GRAD, SILU_GRAD };

// The saved statistics and affine parameters a backward pass recomputes u from.
struct BnSaved { const float *gamma, *beta, *mean, *invstd; };

// What turns a channel's two sums into its results, in a launch after the partial sums (finish_kernel):
// MOMENTS: saved, running and affine statistics (stats_finish); the gradient kinds: dgamma, dbeta and
// the two means bn_dz_kernel subtracts (grad_finish).
struct BnFinish {
    double M;
    // MOMENTS (z is the pass's map a)
    const float *gamma;
    float eps, momentum;
    double unbias;
    float *running_mean, *running_var, *mean, *invstd, *shift, *scale;
    // GRAD, SILU_GRAD
    float *dgamma, *dbeta;
    double *mdu, *mdux;
};

// Per-channel double vectors in scratch: partials (C, G) twice, then per-channel results.
struct Sums {
    int G;
    double *part0, *part1;   // (C, G)
    double *mean, *var;      // (C)
    float *shift, *scale;    // (C): u = (z - shift) * scale + beta
};

static int lane_parts(size_t M);

static Sums sums_take(Device *dev, int C, size_t M) {
    Sums s;
    s.G = lane_parts(M);
    s.part0 = (double *)scratch_take(dev, sizeof(double) * s.G * C);
    s.part1 = (double *)scratch_take(dev, sizeof(double) * s.G * C);
    s.mean = (double *)scratch_take(dev, sizeof(double) * C);
    s.var = (double *)scratch_take(dev, sizeof(double) * C);
    s.shift = (float *)scratch_take(dev, sizeof(float) * C);
    s.scale = (float *)scratch_take(dev, sizeof(float) * C);
    return s;
}

// sums_take's scratch: its six takes, each aligned to at most 256 bytes
extern "C" size_t bn_workspace_bytes_gpu(Map z) {
    size_t C = z.C, G = lane_parts(map_pixels(z));
    return 2 * sizeof(double) * G * C + 2 * sizeof(double) * C + 2 * sizeof(float) * C + 6 * 256;
}

// u = (z - mean)·invstd·gamma + beta from saved statistics, each operation rounded alone in the
// order of the CPU's recompute loop (core/spec/model_run.c bn_recompute), so the result is the same.
__device__ static inline float bn_affine(float z, float mean, float invstd, float gamma,
                                        float beta) {
    return __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(z, mean), invstd), gamma), beta);
}

// The saved statistics of V channels, held in registers by a channel-launch thread.
template <int V> struct BnChannels { Vec<V> gamma, beta, mean, invstd; };
template <int V>
__device__ static inline BnChannels<V> bn_channels(BnSaved p, int c, bool beta) {
    BnChannels<V> b;
    b.gamma = vec_channels<V>(p.gamma, c);
    b.mean = vec_channels<V>(p.mean, c);
    b.invstd = vec_channels<V>(p.invstd, c);
    if (beta) b.beta = vec_channels<V>(p.beta, c);   // bn_backward_gpu has none
    return b;
}
template <int V>
__device__ static inline float bn_affine_at(float z, const BnChannels<V> &b, int k) {
    return bn_affine(z, b.mean.v[k], b.invstd.v[k], b.gamma.v[k], b.beta.v[k]);
}

// dy·silu'(u), the formula of silu_bwd_kernel (gpu/elementwise.cu)
__device__ static inline float silu_grad(float u, float dy) {
    float s = 1.0f / (1.0f + expf(-u));
    return dy * s * (1.0f + u * (1.0f - s));
}

// ---- kernels -------------------------------------------------------------------------------

// V consecutive channels at offset off of a map of either storage, as floats: V = 8 moves 16 bytes
// of bf16 (or two 16-byte runs of fp32), so a warp reads whole lines of a pixel's channels.
template <int V> __device__ static inline void load_channels(Map m, size_t off, float (&x)[V]) {
    if constexpr (V == 8) {
        if (m.bf16) {
            uint4 u = *(const uint4 *)((const __nv_bfloat16 *)m.data + off);
            unsigned w[4] = { u.x, u.y, u.z, u.w };
            for (int k = 0; k < 4; k++) x[2 * k] = bf16_lo(w[k]), x[2 * k + 1] = bf16_hi(w[k]);
        } else {
            Vec<4> lo = vec_load<4>(m.data + off), hi = vec_load<4>(m.data + off + 4);
            for (int k = 0; k < 4; k++) x[k] = lo.v[k], x[4 + k] = hi.v[k];
        }
    } else {
        Vec<V> v = map_vget<V>(m, off);
        for (int k = 0; k < V; k++) x[k] = v.v[k];
    }
}

// The lane layout of the partial sums (the old kernel, a block row per strip of pixels adding each term
// in double, lost: bench/lost/bn_sums_old.patch). A channel's M pixels are dealt to G·LANES lanes: lane l
// takes pixels l, l + S, l + 2S, ... (S = G·LANES), in that order, and adds their terms RUN at a time
// in float before each addition to its double sums (a quarter of the double work and conversions).
// The gradient kinds take at most 4 channels a thread (their two maps and the statistics in registers),
// the moments 8.
// Block g holds lanes g·LANES .. +LANES-1 as its threadIdx.y and adds them in lane order into
// partial (c, g). G depends on M alone and a thread's channels never change the order of a channel's
// terms, so the sums do not depend on the GPU, on V, or on the map's storage.
// LANE_PIXELS: a lane's pixels (until G reaches LANE_MAX_PARTS). 16 was the best of 8-128 over gelan-s
// at batches 64 and 16 (bench/RESULTS.md): shorter lanes leave each thread too little work on the
// large maps, longer ones too few blocks on the small maps (the switch that set it, to measure, lost:
// bench/lost/bn_lane_pixels.patch).
enum { LANES = 32, RUN = 4, LANE_PIXELS = 16, LANE_MAX_PARTS = 2048, LANE_BX = 8 };

static int lane_parts(size_t M) {
    size_t per = (size_t)LANES * LANE_PIXELS, g = (M + per - 1) / per;
    return g < 1 ? 1 : g > LANE_MAX_PARTS ? LANE_MAX_PARTS : (int)g;
}

// One pixel's two terms for V channels: (z - k, (z - k)²) for MOMENTS; (du, du·xhat) otherwise.
template <SumKind KIND, int V> struct LaneTerms {
    float k[V], mean[V], invstd[V], gamma[V], beta[V];
    __device__ void init(Map a, BnSaved p, int c) {
        if constexpr (KIND == MOMENTS) {
            load_channels<V>(a, c, k);
        } else {
            for (int j = 0; j < V; j++) {
                mean[j] = p.mean[c + j], invstd[j] = p.invstd[c + j];
                if (KIND == SILU_GRAD) gamma[j] = p.gamma[c + j], beta[j] = p.beta[c + j];
            }
        }
    }
    __device__ void terms(const float (&v)[V], const float (&g)[V], float (&t0)[V], float (&t1)[V]) const {
        for (int j = 0; j < V; j++) {
            if (KIND == MOMENTS) {
                float e = __fsub_rn(v[j], k[j]);
                t0[j] = e, t1[j] = __fmul_rn(e, e);
            } else {
                float d = g[j], xhat = __fmul_rn(__fsub_rn(v[j], mean[j]), invstd[j]);
                if (KIND == SILU_GRAD)   // u = bn_affine(v): xhat·gamma + beta, rounded as there
                    d = silu_grad(__fadd_rn(__fmul_rn(xhat, gamma[j]), beta[j]), d);
                t0[j] = d, t1[j] = __fmul_rn(d, xhat);
            }
        }
    }
};

// One partial-sum pass's maps, statistics and partials (the lane and finish kernels take two: a RepConv's
// branches in one launch; the second's blocks come after the first's nx0 along x).
struct SumJob { Map a, b; BnSaved p; double *part0, *part1; };

template <SumKind KIND, int V>
__global__ void __launch_bounds__(LANE_BX * LANES, 3)
lane_sums_kernel(SumJob j0, SumJob j1, unsigned nx0) {
    pdl_entry();
    extern __shared__ double sh[];   // (2, LANES, blockDim.x·V)
    bool second = blockIdx.x >= nx0;
    Map a = second ? j1.a : j0.a, b = second ? j1.b : j0.b;
    BnSaved p = second ? j1.p : j0.p;
    double *part0 = second ? j1.part0 : j0.part0, *part1 = second ? j1.part1 : j0.part1;
    int bx = second ? blockIdx.x - nx0 : blockIdx.x;
    int width = blockDim.x * V, x = threadIdx.x * V, c = bx * width + x, lane = threadIdx.y;
    double *sh0 = sh + lane * width, *sh1 = sh + (LANES + lane) * width;
    size_t M = (size_t)a.N * a.H * a.W, S = (size_t)gridDim.y * LANES;
    double s0[V] = {}, s1[V] = {};
    if (c < a.C) {
        LaneTerms<KIND, V> t;
        t.init(a, p, c);
        size_t m = blockIdx.y * (size_t)LANES + lane;
        float v[RUN][V], g[RUN][V];
        for (; m + (RUN - 1) * S < M; m += RUN * S) {   // RUN pixels' loads in flight, then their terms
            for (int r = 0; r < RUN; r++) {
                load_channels<V>(a, (m + r * S) * a.ld + c, v[r]);
                if (KIND != MOMENTS) load_channels<V>(b, (m + r * S) * b.ld + c, g[r]);
            }
            float f0[V], f1[V];
            t.terms(v[0], g[0], f0, f1);
            for (int r = 1; r < RUN; r++) {
                float e0[V], e1[V];
                t.terms(v[r], g[r], e0, e1);
                for (int j = 0; j < V; j++) f0[j] = __fadd_rn(f0[j], e0[j]), f1[j] = __fadd_rn(f1[j], e1[j]);
            }
            for (int j = 0; j < V; j++) s0[j] += (double)f0[j], s1[j] += (double)f1[j];
        }
        for (; m < M; m += S) {   // the lane's last pixels, one at a time
            load_channels<V>(a, m * a.ld + c, v[0]);
            if (KIND != MOMENTS) load_channels<V>(b, m * b.ld + c, g[0]);
            float e0[V], e1[V];
            t.terms(v[0], g[0], e0, e1);
            for (int j = 0; j < V; j++) s0[j] += (double)e0[j], s1[j] += (double)e1[j];
        }
    }
    // The block's lanes added in lane order: each of the block's 2·width sums is a chain of LANES additions.
    // MOMENTS: every chain on a thread of its own, side by side; the gradient kinds: lane 0 adding all of
    // them (a five-step tree with every lane busy was slower: bench/RESULTS.md; their chains side by side
    // are in bench/lost/bn_backward_batches.patch, unmeasured)
    for (int j = 0; j < V; j++) sh0[x + j] = s0[j], sh1[x + j] = s1[j];
    __syncthreads();
    if constexpr (KIND == MOMENTS) {
        int cb = bx * width;   // the block's first channel
        for (int t = threadIdx.y * blockDim.x + threadIdx.x; t < 2 * width; t += blockDim.x * LANES) {
            int k = t % width;
            if (cb + k >= a.C) continue;
            const double *col = sh + (t < width ? 0 : LANES * width) + k;
            double acc = col[0];
            for (int l = 1; l < LANES; l++) acc += col[l * width];
            (t < width ? part0 : part1)[(size_t)(cb + k) * gridDim.y + blockIdx.y] = acc;
        }
    } else {
        if (lane != 0 || c >= a.C) return;
        for (int j = 0; j < V; j++) {
            for (int l = 1; l < LANES; l++) s0[j] += sh0[l * width + x + j], s1[j] += sh1[l * width + x + j];
            part0[(size_t)(c + j) * gridDim.y + blockIdx.y] = s0[j];
            part1[(size_t)(c + j) * gridDim.y + blockIdx.y] = s1[j];
        }
    }
}

// The sums over the G partials of channel c by a block of COMBINE_THREADS: thread t adds g = t,
// t + COMBINE_THREADS, ... in order, each warp a fixed shuffle tree, then thread 0 the warps' sums in warp
// order; thread 0 holds them, and the result does not vary run to run. (A warp per channel, which left each
// lane up to 64 dependent partials of a large map, lost: bench/lost/bn_combine_warp.patch.)
enum { COMBINE_THREADS = 128 };
__device__ static inline void block_channel_sums(const double *part0, const double *part1, int G, int c,
                                                 double *s0, double *s1) {
    __shared__ double w0[COMBINE_THREADS / 32], w1[COMBINE_THREADS / 32];
    int t = threadIdx.x;
    const double *p0 = part0 + (size_t)c * G, *p1 = part1 + (size_t)c * G;
    double a = 0.0, b = 0.0;
    for (int g = t; g < G; g += COMBINE_THREADS) a += p0[g], b += p1[g];
    for (int o = 16; o > 0; o /= 2) {
        a += __shfl_down_sync(0xffffffffu, a, o);
        b += __shfl_down_sync(0xffffffffu, b, o);
    }
    if (t % 32 == 0) w0[t / 32] = a, w1[t / 32] = b;
    __syncthreads();
    if (t != 0) return;
    for (int k = 1; k < COMBINE_THREADS / 32; k++) a += w0[k], b += w1[k];
    *s0 = a, *s1 = b;
}

// From the sums of the shifted moments, m1 = Σ(z - k)/M, m2 = Σ(z - k)²/M (k = z at pixel 0): saved
// stats, running stats (unbiased variance), and the affine form of the normalisation. `unbias` is
// M/(M-1), or 1 when M == 1 (as the CPU twin).
__device__ static inline void stats_finish(int c, double s0, double s1, Map z, const BnFinish &f) {
    double m1 = s0 / f.M, m2 = s1 / f.M;
    double mu = map_get(z, c) + m1, var = fmax(m2 - m1 * m1, 0.0);
    double is = 1.0 / sqrt(var + f.eps), keep = 1.0 - f.momentum;
    f.shift[c] = (float)mu;
    f.scale[c] = (float)(f.gamma[c] * is);
    if (f.mean) f.mean[c] = (float)mu;
    if (f.invstd) f.invstd[c] = (float)is;
    if (f.running_mean) f.running_mean[c] = (float)(keep * f.running_mean[c] + f.momentum * mu);
    if (f.running_var) f.running_var[c] = (float)(keep * f.running_var[c] + f.momentum * var * f.unbias);
}

// From Σ du and Σ du·xhat: dgamma += Σ du·xhat, dbeta += Σ du, and their means for bn_dz_kernel.
__device__ static inline void grad_finish(int c, double sdu, double sdux, const BnFinish &f) {
    if (f.dbeta) f.dbeta[c] += (float)sdu;
    if (f.dgamma) f.dgamma[c] += (float)sdux;
    f.mdu[c] = sdu / f.M;
    f.mdux[c] = sdux / f.M;
}

template <SumKind KIND>
__device__ static inline void finish(int c, double s0, double s1, Map z, const BnFinish &f) {
    if (KIND == MOMENTS) stats_finish(c, s0, s1, z, f);
    else grad_finish(c, s0, s1, f);
}

// The per-channel step after a partial-sum pass of kind KIND, as a launch of its own: a block per
// channel adds its G partials, then finishes them (stats_finish, grad_finish). Channels
// [0, C0) are j0's, [C0, C) j1's (two passes of the same G in one launch).
struct FinishJob { const double *part0, *part1; Map z; BnFinish f; };

template <SumKind KIND>
__global__ void finish_kernel(FinishJob j0, FinishJob j1, int C0, int C, int G) {
    pdl_entry();
    int c = blockIdx.x;
    bool second = c >= C0;
    const FinishJob &j = second ? j1 : j0;
    c -= second ? C0 : 0;
    double s0, s1;
    block_channel_sums(j.part0, j.part1, G, c, &s0, &s1);
    if (threadIdx.x == 0) finish<KIND>(c, s0, s1, j.z, j.f);
}

// The saved statistics of a BN in evaluation mode inside training: its running ones (as the CPU twin)
__global__ void frozen_stats_kernel(int C, const float *running_mean, const float *running_var, float eps,
                                    float *mean, float *invstd) {
    pdl_entry();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    mean[c] = running_mean[c];
    invstd[c] = (float)(1.0 / sqrt((double)running_var[c] + eps));
}

__global__ void eval_stats_kernel(int C, const float *gamma, float eps, const float *running_mean,
                                  const float *running_var, float *shift, float *scale) {
    pdl_entry();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    shift[c] = running_mean[c];
    scale[c] = (float)(gamma[c] / sqrt((double)running_var[c] + eps));
}

// u = (z - shift) * scale + beta (u.data NULL: not stored); with y.data, also y = silu(u), and with a.data
// y = a + silu(u), silu(u) rounded to bf16 first when round_silu (a residual addition, as add_kernel adds
// the stored output of the SiLU)
template <int V, typename Pix>
__global__ void normalise_kernel(size_t M, Map z, const float *shift, const float *scale,
                                 const float *beta, Map u, Map y, Map a, int round_silu) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= z.C) return;
    Vec<V> sh = vec_channels<V>(shift, c), sc = vec_channels<V>(scale, c);
    Vec<V> be = vec_channels<V>(beta, c);
    Vec<V> zs[PIXEL_BATCH], as[PIXEL_BATCH];
    auto load = [&](Pix p, int i) {
        zs[i] = map_vget<V>(z, pixel_off(z, p, c));
        if (a.data) as[i] = map_vget<V>(a, pixel_off(a, p, c));
    };
    pixel_batches<PIXEL_BATCH, Pix>(M, load, [&](Pix p, int i) {
        Vec<V> v = zs[i];
        for (int k = 0; k < V; k++) v.v[k] = (v.v[k] - sh.v[k]) * sc.v[k] + be.v[k];
        if (u.data) map_vput<V>(u, pixel_off(u, p, c), v);
        if (y.data) {
            for (int k = 0; k < V; k++)   // as silu_fwd_kernel
                v.v[k] = v.v[k] / (1.0f + expf(-v.v[k]));
            if (a.data) {
                Vec<V> w = as[i];
                for (int k = 0; k < V; k++)
                    v.v[k] = __fadd_rn(w.v[k], round_silu ? __bfloat162float(__float2bfloat16(v.v[k])) : v.v[k]);
            }
            map_vput<V>(y, pixel_off(y, p, c), v);
        }
    });
}

// A RepConv's y = silu(u1 + u2), u_i = (z_i - shift_i) * scale_i + beta_i as normalise_kernel, added as
// accumulate_kernel adds them: bit for bit normalise, normalise, accumulate, silu_fwd, without storing u
template <int V, typename Pix>
__global__ void normalise_pair_kernel(size_t M, Map z1, const float *shift1, const float *scale1, const float *beta1,
                                      Map z2, const float *shift2, const float *scale2, const float *beta2, Map y) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= z1.C) return;
    Vec<V> sh1 = vec_channels<V>(shift1, c), sc1 = vec_channels<V>(scale1, c), be1 = vec_channels<V>(beta1, c);
    Vec<V> sh2 = vec_channels<V>(shift2, c), sc2 = vec_channels<V>(scale2, c), be2 = vec_channels<V>(beta2, c);
    Vec<V> v1s[PIXEL_BATCH], v2s[PIXEL_BATCH];
    auto load = [&](Pix p, int i) {
        v1s[i] = map_vget<V>(z1, pixel_off(z1, p, c)), v2s[i] = map_vget<V>(z2, pixel_off(z2, p, c));
    };
    pixel_batches<PIXEL_BATCH, Pix>(M, load, [&](Pix p, int i) {
        Vec<V> v = v1s[i], w = v2s[i];
        for (int k = 0; k < V; k++) {
            float a = (v.v[k] - sh1.v[k]) * sc1.v[k] + be1.v[k], b = (w.v[k] - sh2.v[k]) * sc2.v[k] + be2.v[k];
            float u = __fadd_rn(a, b);
            v.v[k] = u / (1.0f + expf(-u));   // as silu_fwd_kernel
        }
        map_vput<V>(y, pixel_off(y, p, c), v);
    });
}

// dz = gamma·invstd · (du - Σdu/M - xhat·Σ(du·xhat)/M), with du = g, or g·silu'(u) (SILU: g is
// the gradient at the SiLU, u recomputed); dz may alias g. With dz16 set, dz goes there instead,
// packed (M, C) and rounded to bf16: the operand the conv's backward GEMMs read.
// mdu, mdux: the two means, divided once per channel (the same doubles as dividing here).
// At most 64 registers (4 blocks of THREADS per SM): V = 4 with SILU needs 70 otherwise, and the
// lower occupancy would leave fewer loads in flight. Its pixels go one at a time: in batches
// (pixel_batches) V = 4 spills under that cap.
template <int V, typename Pix, bool SILU>
__global__ void __launch_bounds__(THREADS, 4)
bn_dz_kernel(size_t M, Map z, BnSaved p, const double *mdu, const double *mdux, Map g, Map dz,
             __nv_bfloat16 *dz16) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= z.C) return;
    BnChannels<V> b = bn_channels<V>(p, c, SILU);
    double k[V], m0[V], m1[V];
    for (int j = 0; j < V; j++) {
        k[j] = (double)b.gamma.v[j] * b.invstd.v[j];
        m0[j] = mdu[c + j];
        m1[j] = mdux[c + j];
    }
    PIXEL_LOOP(Pix, q, M) {
        Vec<V> v = map_vget<V>(z, pixel_off(z, q, c)), out;
        Vec<V> du = map_vget<V>(g, pixel_off(g, q, c));   // g: fp32, or a bf16-stored gradient
        for (int j = 0; j < V; j++) {
            if (SILU) du.v[j] = silu_grad(bn_affine_at<V>(v.v[j], b, j), du.v[j]);
            double xhat = (v.v[j] - b.mean.v[j]) * (double)b.invstd.v[j];
            out.v[j] = (float)(k[j] * (du.v[j] - m0[j] - xhat * m1[j]));
        }
        if (dz16) vec_store_bf16<V>(dz16 + (size_t)q * (unsigned)z.C + c, out);
        else vec_store<V>(dz.data + pixel_off(dz, q, c), out);
    }
}

template <int V, typename Pix>
__global__ void bn_apply_kernel(size_t M, Map z, BnSaved p, Map u) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= z.C) return;
    BnChannels<V> b = bn_channels<V>(p, c, true);
    PIXEL_LOOP(Pix, q, M) {
        Vec<V> v = map_vget<V>(z, pixel_off(z, q, c));
        for (int j = 0; j < V; j++) v.v[j] = bn_affine_at<V>(v.v[j], b, j);
        map_vput<V>(u, pixel_off(u, q, c), v);
    }
}

// A RepConv's du = dy·silu'(u1 + u2), each branch's u recomputed as bn_apply_kernel and added as
// accumulate_kernel adds them (bit for bit bn_apply, bn_apply, accumulate, silu_bwd); du may alias an fp32 dy
template <int V, typename Pix>
__global__ void repconv_silu_bwd_kernel(size_t M, Map z1, BnSaved p1, Map z2, BnSaved p2, Map dy, Map du) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= z1.C) return;
    BnChannels<V> b1 = bn_channels<V>(p1, c, true), b2 = bn_channels<V>(p2, c, true);
    PIXEL_LOOP(Pix, q, M) {
        Vec<V> v1 = map_vget<V>(z1, pixel_off(z1, q, c)), v2 = map_vget<V>(z2, pixel_off(z2, q, c));
        Vec<V> d = map_vget<V>(dy, pixel_off(dy, q, c));
        for (int j = 0; j < V; j++)
            d.v[j] = silu_grad(__fadd_rn(bn_affine_at<V>(v1.v[j], b1, j), bn_affine_at<V>(v2.v[j], b2, j)), d.v[j]);
        vec_store<V>(du.data + pixel_off(du, q, c), d);
    }
}

// du = dy·silu'(u) with u recomputed; du may alias an fp32 dy (dy may be a bf16-stored gradient)
template <int V, typename Pix>
__global__ void bn_apply_silu_bwd_kernel(size_t M, Map z, BnSaved p, Map dy, Map du) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= z.C) return;
    BnChannels<V> b = bn_channels<V>(p, c, true);
    PIXEL_LOOP(Pix, q, M) {
        Vec<V> v = map_vget<V>(z, pixel_off(z, q, c));
        Vec<V> d = map_vget<V>(dy, pixel_off(dy, q, c));
        for (int j = 0; j < V; j++) d.v[j] = silu_grad(bn_affine_at<V>(v.v[j], b, j), d.v[j]);
        vec_store<V>(du.data + pixel_off(du, q, c), d);
    }
}

// ---- launchers -----------------------------------------------------------------------------

static void bn_check(Map a, Map b, const char *who) { same_shape_gpu(a, b, who); }

static unsigned channel_blocks(int C) { return (unsigned)((C + THREADS - 1) / THREADS); }

// Run one partial-sum pass of kind K over (a, b) and combine its two sums, each divided by
// `divisor`, into out0 and out1.
// The widest V (8, 4, 2, 1) of the channel loads every map allows: C, ld and the first element a
// multiple of V elements, and at least 16-byte (or V-element) aligned.
static int sums_width(Map a, Map b) {
    Map m[2] = { a, b };
    for (int v = 8; v > 1; v /= 2) {
        bool ok = true;
        for (int i = 0; i < 2; i++) {
            size_t bytes = m[i].bf16 ? 2 : 4, align = v * bytes < 16 ? v * bytes : 16;
            ok = ok && m[i].C % v == 0 && m[i].ld % v == 0 && (size_t)m[i].data % align == 0;
        }
        if (ok) return v;
    }
    return 1;
}

// One pass of partial sums over job j0 and, when j1 has maps (of the same channels and pixels), j1 too.
template <SumKind K, int V>
static void partial_sums(Device *dev, const SumJob &j0, const SumJob &j1, int G) {
    static_assert(K == MOMENTS || V <= 4, "the gradient kinds take at most 4 channels a thread");
    Map a = j0.a;
    int groups = (a.C + V - 1) / V, bx = groups < LANE_BX ? groups : LANE_BX;
    unsigned nx = (unsigned)((groups + bx - 1) / bx);
    dim3 grid(j1.a.data ? 2 * nx : nx, G), block(bx, LANES);
    size_t shared = 2 * sizeof(double) * LANES * bx * V;
    lane_sums_kernel<K, V><<<grid, block, shared, dev->stream>>>(j0, j1, nx);
    checkLaunch(dev);
}

// One partial-sum pass of kind K over (a, b) into s's partials, as wide as the maps allow, then a launch
// that finishes the channels by f; with a second set (a2.data), its pass and finish in the same two
// launches (a2, b2 of a's shape; s2 of a's G). (The pass's last block finishing the channels itself, one
// launch fewer, lost: bench/lost/bn_fold.patch.)
template <SumKind K>
static void channel_sums(Device *dev, Map a, Map b, BnSaved p, const Sums *s, const BnFinish &f, Map a2 = Map{},
                         Map b2 = Map{}, BnSaved p2 = BnSaved{}, const Sums *s2 = NULL, const BnFinish &f2 = BnFinish{}) {
    int v = sums_width(a, K == MOMENTS ? a : b);
    if (a2.data) v = min_int(v, sums_width(a2, K == MOMENTS ? a2 : b2));
    if (K != MOMENTS && v == 8) v = 4;
    SumJob j0 = { a, b, p, s->part0, s->part1 }, j1 = {};
    FinishJob f0 = { s->part0, s->part1, a, f }, f1 = {};
    if (a2.data) j1 = SumJob{ a2, b2, p2, s2->part0, s2->part1 }, f1 = FinishJob{ s2->part0, s2->part1, a2, f2 };
    if (v == 8) partial_sums<K, K == MOMENTS ? 8 : 4>(dev, j0, j1, s->G);
    else if (v == 4) partial_sums<K, 4>(dev, j0, j1, s->G);
    else if (v == 2) partial_sums<K, 2>(dev, j0, j1, s->G);
    else partial_sums<K, 1>(dev, j0, j1, s->G);
    int C = a2.data ? 2 * a.C : a.C;
    finish_kernel<K><<<C, COMBINE_THREADS, 0, dev->stream>>>(f0, f1, a.C, C, s->G);
    checkLaunch(dev);
}

// The grid of a per-element BN launch over z and the other maps it touches.
static ChannelGrid bn_grid(Map z, Map a, Map b) {
    int v = min_int(map_vec_width(z), min_int(map_vec_width(a), map_vec_width(b)));
    return channel_grid(z.C, map_pixels(z), v);
}

static void normalise(Device *dev, Map z, const Sums *s, const float *beta, Map u, Map y, Map a = Map{},
                      int round_silu = 0) {
    ChannelGrid g = bn_grid(z, u, y);
    if (a.data) g = channel_grid(z.C, map_pixels(z), min_int(g.V, map_vec_width(a)));
    CHANNEL_KERNEL(g, normalise_kernel)<<<g.grid, g.block, 0, dev->stream>>>(
        g.M, z, s->shift, s->scale, beta, u, y, a, round_silu);
    checkLaunch(dev);
}

// What finish_kernel needs for the statistics of a training BN over z (M pixels) into s
static BnFinish train_finish(const BnTrain &t, float eps, float momentum, size_t M, const Sums &s) {
    BnFinish f = {};
    f.M = (double)M;
    f.gamma = t.gamma, f.eps = eps, f.momentum = momentum;
    f.unbias = M > 1 ? (double)M / (double)(M - 1) : 1.0;
    f.running_mean = t.running_mean, f.running_var = t.running_var, f.mean = t.mean, f.invstd = t.invstd;
    f.shift = s.shift, f.scale = s.scale;
    return f;
}

static void bn_train(Device *dev, Map z, const float *gamma, const float *beta, float eps,
                     float momentum, float *running_mean, float *running_var, float *mean,
                     float *invstd, Map u, Map y, Map a = Map{}, int round_silu = 0) {
    size_t mark = dev->scratch.used, M = map_pixels(z);
    Sums s = sums_take(dev, z.C, M);
    BnSaved none = { NULL, NULL, NULL, NULL };
    BnTrain t = { gamma, beta, running_mean, running_var, mean, invstd };
    channel_sums<MOMENTS>(dev, z, z, none, &s, train_finish(t, eps, momentum, M, s));   // shifted moments, stats
    normalise(dev, z, &s, beta, u, y, a, round_silu);
    dev->scratch.used = mark;
}

// A conv unit's SiLU(BN) output y added to a by the residual node after it, in the normalising pass:
// out = a + silu(BN_train(z)), silu rounded as y would store it; y itself is not written. Bit for bit
// bn_silu_forward_train_gpu into y, then add_forward_gpu(a, y, out).
extern "C" void bn_silu_add_forward_train_gpu(Device *dev, Map z, const BnTrain *b, float eps, float momentum, Map a,
                                              Map y, Map out) {
    bn_check(z, a, "bn_silu_add_forward_train_gpu");
    bn_check(z, y, "bn_silu_add_forward_train_gpu");
    bn_check(z, out, "bn_silu_add_forward_train_gpu");
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    bn_train(dev, z, b->gamma, b->beta, eps, momentum, b->running_mean, b->running_var, b->mean, b->invstd, none, out,
             a, y.bf16);
}

// A RepConv's forward after its two convs: both BNs' sums in one launch, their statistics in one, then
// y = silu(BN1(z1) + BN2(z2)) in one pass (7 launches and an fp32 u written and read before).
extern "C" void repconv_forward_train_gpu(Device *dev, Map z1, const BnTrain *b1, Map z2, const BnTrain *b2,
                                          float eps, float momentum, Map y) {
    bn_check(z1, z2, "repconv_forward_train_gpu");
    bn_check(z1, y, "repconv_forward_train_gpu");
    size_t mark = dev->scratch.used, M = map_pixels(z1);
    Sums s1 = sums_take(dev, z1.C, M), s2 = sums_take(dev, z2.C, M);
    BnSaved none = { NULL, NULL, NULL, NULL };
    channel_sums<MOMENTS>(dev, z1, z1, none, &s1, train_finish(*b1, eps, momentum, M, s1), z2, z2, none, &s2,
                          train_finish(*b2, eps, momentum, M, s2));
    ChannelGrid g = bn_grid(z1, z2, y);
    CHANNEL_KERNEL(g, normalise_pair_kernel)<<<g.grid, g.block, 0, dev->stream>>>(
        g.M, z1, s1.shift, s1.scale, b1->beta, z2, s2.shift, s2.scale, b2->beta, y);
    checkLaunch(dev);
    dev->scratch.used = mark;
}

extern "C" void bn_forward_train_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                                     float eps, float momentum, float *running_mean,
                                     float *running_var, float *mean, float *invstd, Map u) {
    bn_check(z, u, "bn_forward_train_gpu");
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
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

// y = silu((z - shift)·scale + beta) (=): bn_silu_forward_train_gpu's normalising pass from a shift and scale
// made elsewhere (gpu/conv_bn.cu's statistics from the convolution's epilogue)
extern "C" void bn_silu_normalise_gpu(Device *dev, Map z, const float *shift, const float *scale, const float *beta,
                                      Map y) {
    bn_check(z, y, "bn_silu_normalise_gpu");
    Sums s = {};
    s.shift = (float *)shift, s.scale = (float *)scale;
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    normalise(dev, z, &s, beta, none, y);
}

// Evaluation: u = BN(z) with the running statistics when u.data, and y = silu(u) when y.data.
static void bn_eval(Device *dev, Map z, const float *gamma, const float *beta, float eps, const float *running_mean,
                    const float *running_var, Map u, Map y) {
    size_t mark = dev->scratch.used;
    Sums s = sums_take(dev, z.C, map_pixels(z));
    eval_stats_kernel<<<channel_blocks(z.C), THREADS, 0, dev->stream>>>(
        z.C, gamma, eps, running_mean, running_var, s.shift, s.scale);
    checkLaunch(dev);
    normalise(dev, z, &s, beta, u, y);
    dev->scratch.used = mark;
}

extern "C" void bn_forward_eval_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                                    float eps, const float *running_mean, const float *running_var,
                                    Map u) {
    bn_check(z, u, "bn_forward_eval_gpu");
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    bn_eval(dev, z, gamma, beta, eps, running_mean, running_var, u, none);
}

extern "C" void bn_silu_forward_eval_gpu(Device *dev, Map z, const float *gamma, const float *beta, float eps,
                                         const float *running_mean, const float *running_var, Map y) {
    bn_check(z, y, "bn_silu_forward_eval_gpu");
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    bn_eval(dev, z, gamma, beta, eps, running_mean, running_var, none, y);
}

// The backward of BN (SILU false: g = du) or of SiLU(BN) (SILU true: g = dy at the SiLU output):
// Σ du and Σ du·xhat, dgamma/dbeta +=, then dz (=) unless dz.data is NULL. frozen: the statistics
// are constants (evaluation mode), so the two means bn_dz_kernel subtracts are zero: dz = k·du.
// dz (=) of a BN backward from its two means (or dz16: packed (M, C) bf16)
template <bool SILU>
static void bn_dz(Device *dev, Map z, BnSaved p, const double *mdu, const double *mdux, Map g, Map dz,
                  __nv_bfloat16 *dz16) {
    ChannelGrid gr = bn_grid(z, g, dz);
    if (dz16) {   // packed (M, C) bf16: aligned as a contiguous bf16 map there would be
        Map packed = { (float *)dz16, z.N, z.H, z.W, z.C, z.C, 1, 0 };
        gr = channel_grid(z.C, map_pixels(z), min_int(gr.V, map_vec_width(packed)));
    }
    CHANNEL_KERNEL(gr, bn_dz_kernel, SILU)<<<gr.grid, gr.block, 0, dev->stream>>>(gr.M, z, p, mdu, mdux, g, dz, dz16);
    checkLaunch(dev);
}

// What finish_kernel needs for a BN backward over M pixels: dgamma, dbeta (+=) and the two means into s
static BnFinish grad_finish_of(size_t M, float *dgamma, float *dbeta, const Sums &s) {
    BnFinish f = {};
    f.M = (double)M;
    f.dgamma = dgamma, f.dbeta = dbeta, f.mdu = s.mean, f.mdux = s.var;   // the means in the mean and var slots
    return f;
}

template <bool SILU>
static void bn_grad(Device *dev, Map z, BnSaved p, Map g, Map dz, __nv_bfloat16 *dz16,
                    float *dgamma, float *dbeta, bool frozen = false) {
    size_t mark = dev->scratch.used;
    Sums s = sums_take(dev, z.C, map_pixels(z));
    channel_sums<SILU ? SILU_GRAD : GRAD>(dev, z, g, p, &s, grad_finish_of(map_pixels(z), dgamma, dbeta, s));
    if (frozen) {
        checkCuda(cudaMemsetAsync(s.mean, 0, sizeof(double) * z.C, dev->stream));
        checkCuda(cudaMemsetAsync(s.var, 0, sizeof(double) * z.C, dev->stream));
    }
    if (dz.data || dz16) bn_dz<SILU>(dev, z, p, s.mean, s.var, g, dz, dz16);
    dev->scratch.used = mark;
}

// A RepConv's branches' backward from du under bf16: both BNs' sums in one launch and their parameters'
// gradients and means in one, then for each branch its dz (packed bf16 in dz16) and its conv's backward
// (conv_backward_bf16dy_gpu). Bit for bit bn_backward_bf16_gpu and conv_backward_bf16dy_gpu per branch.
extern "C" void repconv_bn_backward_bf16_gpu(Device *dev, const ConvBnBranch *b1, const ConvBnBranch *b2, Map x,
                                             Map du, void *dz16) {
    bn_check(b1->z, b2->z, "repconv_bn_backward_bf16_gpu");
    bn_check(b1->z, du, "repconv_bn_backward_bf16_gpu");
    require_fp32(du, "repconv_bn_backward_bf16_gpu");
    if (b1->z.ld != b1->z.C || b2->z.ld != b2->z.C) die("repconv_bn_backward_bf16_gpu: z must be contiguous");
    size_t mark = dev->scratch.used, M = map_pixels(b1->z);
    Sums s1 = sums_take(dev, b1->z.C, M), s2 = sums_take(dev, b2->z.C, M);
    BnSaved p1 = { b1->gamma, NULL, b1->mean, b1->invstd }, p2 = { b2->gamma, NULL, b2->mean, b2->invstd };
    channel_sums<GRAD>(dev, b1->z, du, p1, &s1, grad_finish_of(M, b1->dgamma, b1->dbeta, s1), b2->z, du, p2, &s2,
                       grad_finish_of(M, b2->dgamma, b2->dbeta, s2));
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    const ConvBnBranch *b[2] = { b1, b2 };
    const Sums *s[2] = { &s1, &s2 };
    BnSaved p[2] = { p1, p2 };
    for (int i = 0; i < 2; i++) {   // the sums stay below the convs' scratch until both are done
        bn_dz<false>(dev, b[i]->z, p[i], s[i]->mean, s[i]->var, du, none, (__nv_bfloat16 *)dz16);
        conv_backward_bf16dy_gpu(dev, b[i]->d, x, b[i]->w, dz16, b[i]->dx, b[i]->dw);
    }
    dev->scratch.used = mark;
}

extern "C" void bn_backward_gpu(Device *dev, Map z, const float *gamma, const float *mean,
                                const float *invstd, Map du, Map dz, float *dgamma, float *dbeta) {
    bn_check(z, du, "bn_backward_gpu");
    if (dz.data) bn_check(z, dz, "bn_backward_gpu");
    require_fp32(du, "bn_backward_gpu");
    require_fp32(dz, "bn_backward_gpu");
    BnSaved p = { gamma, NULL, mean, invstd };
    bn_grad<false>(dev, z, p, du, dz, NULL, dgamma, dbeta);
}

extern "C" void bn_backward_bf16_gpu(Device *dev, Map z, const float *gamma, const float *mean,
                                     const float *invstd, Map du, void *dz16, float *dgamma, float *dbeta) {
    bn_check(z, du, "bn_backward_bf16_gpu");
    require_fp32(du, "bn_backward_bf16_gpu");
    if (z.ld != z.C) die("bn_backward_bf16_gpu: z must be contiguous (ld %d, C %d)", z.ld, z.C);
    BnSaved p = { gamma, NULL, mean, invstd };
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    bn_grad<false>(dev, z, p, du, none, (__nv_bfloat16 *)dz16, dgamma, dbeta);
}

extern "C" void bn_silu_backward_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                                     const float *mean, const float *invstd, Map dy, Map dz,
                                     float *dgamma, float *dbeta) {
    bn_check(z, dy, "bn_silu_backward_gpu");
    if (dz.data) bn_check(z, dz, "bn_silu_backward_gpu");
    require_fp32(dz, "bn_silu_backward_gpu");
    require_fp32_in_place(dz, dy, "bn_silu_backward_gpu");
    BnSaved p = { gamma, beta, mean, invstd };
    bn_grad<true>(dev, z, p, dy, dz, NULL, dgamma, dbeta);
}

extern "C" void bn_silu_backward_bf16_gpu(Device *dev, Map z, const float *gamma,
                                          const float *beta, const float *mean,
                                          const float *invstd, Map dy, void *dz16, float *dgamma,
                                          float *dbeta) {
    bn_check(z, dy, "bn_silu_backward_bf16_gpu");
    if (z.ld != z.C) die("bn_silu_backward_bf16_gpu: z must be contiguous (ld %d, C %d)", z.ld, z.C);
    BnSaved p = { gamma, beta, mean, invstd };
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    bn_grad<true>(dev, z, p, dy, none, (__nv_bfloat16 *)dz16, dgamma, dbeta);
}

extern "C" void bn_apply_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                             const float *mean, const float *invstd, Map u) {
    bn_check(z, u, "bn_apply_gpu");
    BnSaved p = { gamma, beta, mean, invstd };
    ChannelGrid g = bn_grid(z, u, u);
    CHANNEL_KERNEL(g, bn_apply_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, z, p, u);
    checkLaunch(dev);
}

extern "C" void repconv_silu_backward_gpu(Device *dev, Map z1, const float *gamma1, const float *beta1,
                                          const float *mean1, const float *invstd1, Map z2, const float *gamma2,
                                          const float *beta2, const float *mean2, const float *invstd2, Map dy,
                                          Map du) {
    bn_check(z1, z2, "repconv_silu_backward_gpu");
    bn_check(z1, dy, "repconv_silu_backward_gpu");
    bn_check(z1, du, "repconv_silu_backward_gpu");
    require_fp32(du, "repconv_silu_backward_gpu");
    require_fp32_in_place(du, dy, "repconv_silu_backward_gpu");
    BnSaved p1 = { gamma1, beta1, mean1, invstd1 }, p2 = { gamma2, beta2, mean2, invstd2 };
    ChannelGrid g = bn_grid(z1, dy, du);
    g = channel_grid(z1.C, map_pixels(z1), min_int(g.V, map_vec_width(z2)));
    CHANNEL_KERNEL(g, repconv_silu_bwd_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, z1, p1, z2, p2, dy, du);
    checkLaunch(dev);
}

extern "C" void bn_apply_silu_backward_gpu(Device *dev, Map z, const float *gamma,
                                           const float *beta, const float *mean,
                                           const float *invstd, Map dy, Map du) {
    bn_check(z, dy, "bn_apply_silu_backward_gpu");
    bn_check(z, du, "bn_apply_silu_backward_gpu");
    require_fp32(du, "bn_apply_silu_backward_gpu");
    require_fp32_in_place(du, dy, "bn_apply_silu_backward_gpu");
    BnSaved p = { gamma, beta, mean, invstd };
    ChannelGrid g = bn_grid(z, dy, du);
    CHANNEL_KERNEL(g, bn_apply_silu_bwd_kernel)<<<g.grid, g.block, 0, dev->stream>>>(
        g.M, z, p, dy, du);
    checkLaunch(dev);
}

extern "C" void bn_frozen_stats_gpu(Device *dev, int C, const float *running_mean, const float *running_var,
                                    float eps, float *mean, float *invstd) {
    frozen_stats_kernel<<<channel_blocks(C), THREADS, 0, dev->stream>>>(C, running_mean, running_var, eps, mean,
                                                                        invstd);
    checkLaunch(dev);
}

extern "C" void bn_frozen_backward_gpu(Device *dev, Map z, const float *gamma, const float *mean,
                                       const float *invstd, Map du, Map dz, float *dgamma, float *dbeta) {
    bn_check(z, du, "bn_frozen_backward_gpu");
    if (dz.data) bn_check(z, dz, "bn_frozen_backward_gpu");
    require_fp32(du, "bn_frozen_backward_gpu");
    require_fp32(dz, "bn_frozen_backward_gpu");
    BnSaved p = { gamma, NULL, mean, invstd };
    bn_grad<false>(dev, z, p, du, dz, NULL, dgamma, dbeta, true);
}
