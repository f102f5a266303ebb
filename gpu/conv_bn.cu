// conv_bn.cu: a 1x1 convolution that emits its BN statistics in its epilogue (issue 34, first stage), the GPU
// form of Backend.unit.conv_bn_silu_forward_train under bf16: z = x·W^T written bf16 (=), the per-channel count,
// mean and M2 of the stored z of each group of pixel tiles beside it, a finish that joins the groups in a fixed
// order into the saved and running statistics, then bn.cu's normalise + SiLU pass (=). No pass re-reads z for its
// statistics.
// Shapes it does not take (another kernel size, stride or groups, C or K not a multiple of 8, fp32 maps or
// precision) run the composition: conv_forward_gpu, then bn_silu_forward_train_gpu.
// Legend: N batch, C channels in, K channels out, P = N·H·W pixels (stride 1: the same in and out), T pixel
// tiles, G groups of TB tiles, ld pixel stride of a map (a channel slice of a concat buffer: ld > C).
#include <cuda_bf16.h>
#include <mma.h>

#include <stdio.h>

#include "core/base/switches.h"
#include "gpu/kernel_util.h"

typedef __nv_bfloat16 bf16;

// ---- the tiling ------------------------------------------------------------------------------------------
// In NHWC a 1x1 stride-1 conv is the GEMM Z[P, K] = X[P, C]·W[K, C]^T. A block of 4 warps makes tiles of
// BM = 64 pixels by BN = 64 output channels (grid: x the 64-channel slices of K, y the groups of TB consecutive
// pixel tiles; x varies fastest, so the blocks that read the same X tiles run together), stepping through C in
// slices of BK = 32 channels: each step brings the X slice (64 x 32 bf16, 4 KiB) and the W slice (64 x 32 bf16,
// 4 KiB) into shared memory with cp.async (16 bytes a copy, zero-filled past P, C or K), the next slice's copies
// in flight while this one multiplies (two buffers). Each warp multiplies a 32 x 32 quarter of the tile as 2 x 2
// WMMA bf16 16x16x16 fragments with fp32 accumulators, two k-steps a slice.
// Epilogue of a tile: the fp32 tile goes through shared memory; each value is rounded to bf16 once (as cuBLAS
// and cuDNN write a bf16 output) and stored to z; two threads a channel, each over half the tile's rows, take the
// mean and M2 = Σ (z - mean)² of the rounded values (fp32, 32 values) and join them into that thread's running
// count, mean and M2 (double, Chan's formula); after its TB tiles the block joins each channel's two halves (the
// first, then the second) and writes them to the partials (G, K). TB depends on P alone (at most
// MAX_GROUPS groups), so the partials, and the finish's order over them, are the same on every GPU; each
// operation is rounded alone (no FMA contraction) for the same reason.
// Per tile: reads 64·C·2 bytes of X and 64·C·2 of W (from L2 after the first tile), writes 64·64·2 of z;
// 2·64·64·C FLOPs; per group 64·16 bytes of partials. For K <= 64 every X tile is read once; a larger K reads
// it once per 64-channel slice (grid.x); the slices of a group run side by side, so all but the first mostly
// read it from L2.
enum { BM = 64, BN = 64, BK = 32, LDS = BK + 8, LDC = BN + 4, WARPS = 4, TILE_THREADS = 32 * WARPS };
enum { MAX_GROUPS = 4096, FINISH_THREADS = 128 };   // tile groups along P; a block per channel in the finish
// Blocks an SM holds at once: the most an sm_90 SM's 228 KiB of shared memory takes (37 KiB a block and 1 KiB the
// system keeps), so the registers are held to what six blocks leave; more would make ptxas spill
enum { TILE_BLOCKS_PER_SM = 6 };

// How P pixels are dealt: T tiles of BM, in G groups of TB consecutive tiles (the last may have fewer)
struct Tiling { int T, TB, G; };
static Tiling tiling_of(size_t P) {
    Tiling t;
    t.T = (int)((P + BM - 1) / BM);
    t.TB = (t.T + MAX_GROUPS - 1) / MAX_GROUPS;
    t.G = (t.T + t.TB - 1) / t.TB;
    return t;
}

// The partial statistics in scratch: (G, K) doubles twice, then the normalising pass's shift and scale (K).
struct GroupStats { double *mean, *m2; float *shift, *scale; Tiling t; };

extern "C" size_t conv_bn_workspace_bytes_gpu(const ConvDims *d) {
    size_t P = (size_t)d->N * d->P * d->Q, G = (size_t)tiling_of(P).G, K = (size_t)d->K;
    return 2 * sizeof(double) * G * K + 2 * sizeof(float) * K + sizeof(bf16) * K * d->C + 4 * 256;
}

// A set of n values by its count, mean and M2 = Σ (v - mean)², joined by Chan's formula: robust where the
// mean is large against the spread (no Σv² - (Σv)²/n). Each operation rounded alone (no FMA contraction).
struct Moments { double n, mean, m2; };
__device__ static inline Moments moments_join(Moments a, Moments b) {
    if (b.n == 0.0) return a;
    if (a.n == 0.0) return b;
    double n = __dadd_rn(a.n, b.n), d = __dsub_rn(b.mean, a.mean), f = __ddiv_rn(b.n, n);
    Moments r = { n, __dadd_rn(a.mean, __dmul_rn(d, f)),
                  __dadd_rn(__dadd_rn(a.m2, b.m2), __dmul_rn(__dmul_rn(d, d), __dmul_rn(a.n, f))) };
    return r;
}

// Pixels of tile group g: from g·TB·BM to the next group's start or P
__host__ __device__ static inline size_t group_pixels(size_t P, int TB, int g) {
    size_t a = (size_t)g * TB * BM, b = a + (size_t)TB * BM;
    return (b < P ? b : P) - a;
}

// ---- kernels ---------------------------------------------------------------------------------------------

// 16 bytes global -> shared, asynchronous; with valid false the 16 bytes are zeros and nothing is read (src
// must still be a mapped address: the callers pass the tensor's base)
__device__ static inline void cp_async16(void *dst, const void *src, bool valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(n) : "memory");
}
__device__ static inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
__device__ static inline void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;\n" ::: "memory"); }

// The X and W slices of channels c0 .. c0+BK-1 into one buffer: BM (BN) rows of BK/8 16-byte runs each, two
// runs a thread for each. C, ld and the bases are multiples of 8 elements (the launcher checks), so a run is
// wholly inside or wholly past C.
__device__ static inline void load_slice(const bf16 *x, int ldx, const bf16 *w, int C, int K, size_t P, size_t p0,
                                         int k0, int c0, bf16 (*as)[LDS], bf16 (*bs)[LDS]) {
    for (int q = threadIdx.x; q < BM * BK / 8; q += TILE_THREADS) {
        int row = q / (BK / 8), c = c0 + q % (BK / 8) * 8;
        bool ok = p0 + row < P && c < C;
        cp_async16(&as[row][q % (BK / 8) * 8], ok ? x + (p0 + row) * ldx + c : x, ok);
    }
    for (int q = threadIdx.x; q < BN * BK / 8; q += TILE_THREADS) {
        int row = q / (BK / 8), c = c0 + q % (BK / 8) * 8;
        bool ok = k0 + row < K && c < C;
        cp_async16(&bs[row][q % (BK / 8) * 8], ok ? w + (size_t)(k0 + row) * C + c : w, ok);
    }
}

// z (P, K) bf16 with pixel stride ldz = x (P, C) bf16 with pixel stride ldx, times w (K, C) bf16 transposed;
// each tile group's moments of each channel into part_mean, part_m2 (G, K).
__global__ void __launch_bounds__(TILE_THREADS, TILE_BLOCKS_PER_SM)
conv1x1_stats_kernel(const bf16 *x, int ldx, const bf16 *w, int C, int K, size_t P, Tiling tl, bf16 *z, int ldz,
                     double *part_mean, double *part_m2) {
    pdl_entry();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();   // bf16 WMMA and cp.async need sm_80; the launcher never sends older GPUs here
#else
    using namespace nvcuda;
    __shared__ __align__(128) bf16 as[2][BM][LDS];
    __shared__ __align__(128) bf16 bs[2][BN][LDS];
    __shared__ __align__(128) float cs[BM][LDC];
    int g = blockIdx.y, k0 = blockIdx.x * BN, warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    int col = threadIdx.x % BN, half = threadIdx.x / BN;   // the channel of the tile, and which half of its rows
    int slices = (C + BK - 1) / BK, first = g * tl.TB, last = min(first + tl.TB, tl.T);
    bool stats = k0 + col < K;   // the threads that keep a channel's moments
    Moments run = { 0.0, 0.0, 0.0 };   // of this thread's half of the rows of each tile
    static_assert(TILE_THREADS == 2 * BN, "two threads a channel, one per half of the tile's rows");
    for (int tile = first; tile < last; tile++) {
        size_t p0 = (size_t)tile * BM;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
        load_slice(x, ldx, w, C, K, P, p0, k0, 0, as[0], bs[0]);
        cp_async_commit();
        for (int s = 0; s < slices; s++) {
            int buf = s & 1;
            if (s + 1 < slices) load_slice(x, ldx, w, C, K, P, p0, k0, (s + 1) * BK, as[buf ^ 1], bs[buf ^ 1]);
            cp_async_commit();   // a group every step (maybe empty), so "all but the newest" is slice s
            cp_async_wait_one();
            __syncthreads();
            for (int kk = 0; kk < BK; kk += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b[2];   // W^T: (c, k) at bs[k][c]
                for (int i = 0; i < 2; i++) wmma::load_matrix_sync(a[i], &as[buf][wm * 32 + i * 16][kk], LDS);
                for (int j = 0; j < 2; j++) wmma::load_matrix_sync(b[j], &bs[buf][wn * 32 + j * 16][kk], LDS);
                for (int i = 0; i < 2; i++)
                    for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
            }
            __syncthreads();     // every warp is done with buf before step s + 1 copies into it
        }
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                wmma::store_matrix_sync(&cs[wm * 32 + i * 16][wn * 32 + j * 16], acc[i][j], LDC, wmma::mem_row_major);
        __syncthreads();
        // z: each value rounded once, 8 channels (16 bytes) a store; the tile keeps the rounded values
        for (int q = threadIdx.x; q < BM * BN / 8; q += TILE_THREADS) {
            int row = q / (BN / 8), c8 = q % (BN / 8) * 8;
            __align__(16) bf16 v[8];
            for (int e = 0; e < 8; e++) {
                v[e] = __float2bfloat16(cs[row][c8 + e]);
                cs[row][c8 + e] = __bfloat162float(v[e]);
            }
            if (p0 + row < P && k0 + c8 < K) *(uint4 *)(z + (p0 + row) * ldz + k0 + c8) = *(const uint4 *)v;
        }
        __syncthreads();
        int rows = P - p0 < (size_t)BM ? (int)(P - p0) : BM, r0 = half * (BM / 2), r1 = min(r0 + BM / 2, rows);
        if (stats && r0 < r1) {   // the half's mean, then M2 about it, joined into the half's running moments
            float sum = 0.0f;
            for (int r = r0; r < r1; r++) sum = __fadd_rn(sum, cs[r][col]);
            float mean = __fdiv_rn(sum, (float)(r1 - r0)), m2 = 0.0f;
            for (int r = r0; r < r1; r++) {
                float e = __fsub_rn(cs[r][col], mean);
                m2 = __fadd_rn(m2, __fmul_rn(e, e));
            }
            run = moments_join(run, Moments{ (double)(r1 - r0), (double)mean, (double)m2 });
        }
        __syncthreads();         // cs read before the next tile's fragments overwrite it
    }
    // The second half's moments through shared memory (cs is free after the last tile), joined after the first's
    Moments *second = (Moments *)&cs[0][0];
    static_assert(BN * sizeof(Moments) <= sizeof cs, "the halves' moments fit in cs");
    if (half == 1) second[col] = run;
    __syncthreads();
    if (half == 1 || !stats) return;
    run = moments_join(run, second[col]);
    part_mean[(size_t)g * K + k0 + col] = run.mean;
    part_m2[(size_t)g * K + k0 + col] = run.m2;
#endif
}

// A block per channel k: thread t joins groups t, t + FINISH_THREADS, ... in order, then the threads' moments
// in a fixed tree (t with t + s, s = 64, 32, ..., 1); the order depends on P alone, so the result does not vary
// from run to run or GPU to GPU. Then, as bn.cu's stats_finish: the saved statistics (mean, invstd), the running
// ones (unbiased variance) and the normalising pass's shift and scale.
__global__ void __launch_bounds__(FINISH_THREADS)
conv_bn_finish_kernel(const double *part_mean, const double *part_m2, Tiling tl, int K, size_t P, BnTrain bn,
                      float eps, float momentum, float *shift, float *scale) {
    pdl_entry();
    __shared__ Moments sh[FINISH_THREADS];
    int k = blockIdx.x, t = threadIdx.x;
    Moments acc = { 0.0, 0.0, 0.0 };
    for (int i = t; i < tl.G; i += FINISH_THREADS) {
        Moments m = { (double)group_pixels(P, tl.TB, i), part_mean[(size_t)i * K + k], part_m2[(size_t)i * K + k] };
        acc = moments_join(acc, m);
    }
    sh[t] = acc;
    __syncthreads();
    for (int s = FINISH_THREADS / 2; s > 0; s /= 2) {
        if (t < s) sh[t] = moments_join(sh[t], sh[t + s]);
        __syncthreads();
    }
    if (t != 0) return;
    double mu = sh[0].mean, var = fmax(__ddiv_rn(sh[0].m2, (double)P), 0.0);
    double unbias = P > 1 ? __ddiv_rn((double)P, (double)(P - 1)) : 1.0;
    double is = __ddiv_rn(1.0, __dsqrt_rn(__dadd_rn(var, (double)eps))), keep = __dsub_rn(1.0, (double)momentum);
    shift[k] = (float)mu;
    scale[k] = (float)__dmul_rn((double)bn.gamma[k], is);
    if (bn.mean) bn.mean[k] = (float)mu;
    if (bn.invstd) bn.invstd[k] = (float)is;
    if (bn.running_mean)
        bn.running_mean[k] = (float)__dadd_rn(__dmul_rn(keep, (double)bn.running_mean[k]),
                                              __dmul_rn((double)momentum, mu));
    if (bn.running_var)
        bn.running_var[k] = (float)__dadd_rn(__dmul_rn(keep, (double)bn.running_var[k]),
                                             __dmul_rn(__dmul_rn((double)momentum, var), unbias));
}

// w (n floats) rounded to bf16 (as conv_prepare_weights_gpu rounds them)
__global__ void weights_bf16_kernel(const float *w, size_t n, bf16 *out) {
    pdl_entry();
    GRID_STRIDE(i, n) out[i] = __float2bfloat16(w[i]);
}

// ---- launchers -------------------------------------------------------------------------------------------

static bool aligned16(const void *p) { return (size_t)p % 16 == 0; }

// Why the kernel does not take conv d from x into z, or NULL when it does
static const char *refusal(const Device *dev, const ConvDims *d, Map x, Map z) {
    if (dev->precision != GPU_BF16) return "not bf16 precision";
    if (d->R != 1 || d->S != 1 || d->stride != 1 || d->pad != 0 || d->groups != 1)
        return "not a 1x1 stride-1 conv of groups 1";
    if (d->C % 8 || d->K % 8) return "C or K not a multiple of 8";
    if (!x.bf16 || !z.bf16) return "an fp32-stored x or z";
    if (x.ld % 8 || z.ld % 8 || !aligned16(x.data) || !aligned16(z.data)) return "x or z not 16-byte aligned";
    if ((size_t)d->N * d->P * d->Q >= ((size_t)1 << 31)) return "2^31 pixels or more";
    return NULL;
}

extern "C" int conv_bn_fits_gpu(const Device *dev, const ConvDims *d, Map x, Map z) { return !refusal(dev, d, x, z); }

// YT_CUDNN_VERBOSE: which path each call took (the first passes of a shape; recorded passes replay without a call)
static void say(const Device *dev, const ConvDims *d, Map x, Map z) {
    if (!switch_str(SW_CUDNN_VERBOSE)) return;
    const char *why = refusal(dev, d, x, z);
    fprintf(stderr, "conv_bn: %dx%dx%dx%d (ld %d) -> K %d: %s%s\n", d->N, d->H, d->W, d->C, x.ld, d->K,
            why ? "conv_forward_gpu + bn_silu_forward_train_gpu: " : "BN statistics in the convolution's epilogue",
            why ? why : "");
}

// The weight operand (K, C) bf16, 16-byte aligned: the pass's prepared copy where it holds w, else rounded here
// into scratch (the caller gives the scratch back).
static const bf16 *weights_bf16(Device *dev, const ConvDims *d, const float *w) {
    const bf16 *p = (const bf16 *)conv_prepared_weights_gpu(dev, d, w);
    if (p && aligned16(p)) return p;
    size_t n = (size_t)d->K * d->C;
    bf16 *out = (bf16 *)scratch_take(dev, sizeof(bf16) * n);
    weights_bf16_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(w, n, out);
    checkLaunch(dev);
    return out;
}

// The convolution and the groups' partials, then the finish: the statistics into bn, shift and scale into s.
static void conv_stats(Device *dev, const ConvDims *d, Map x, const float *w, Map z, const BnTrain *bn, float eps,
                       float momentum, const GroupStats &s) {
    size_t P = (size_t)d->N * d->P * d->Q;
    const bf16 *w16 = weights_bf16(dev, d, w);
    dim3 grid((unsigned)((d->K + BN - 1) / BN), (unsigned)s.t.G);   // G <= MAX_GROUPS, within grid.y's 65535
    conv1x1_stats_kernel<<<grid, TILE_THREADS, 0, dev->stream>>>((const bf16 *)x.data, x.ld, w16, d->C, d->K, P, s.t,
                                                                 (bf16 *)z.data, z.ld, s.mean, s.m2);
    checkLaunch(dev);
    conv_bn_finish_kernel<<<d->K, FINISH_THREADS, 0, dev->stream>>>(s.mean, s.m2, s.t, d->K, P, *bn, eps, momentum,
                                                                     s.shift, s.scale);
    checkLaunch(dev);
}

extern "C" void conv_bn_silu_forward_train_gpu(Device *dev, const ConvDims *d, Map x, const float *w, Map z,
                                               const BnTrain *bn, float eps, float momentum, Map y) {
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    say(dev, d, x, z);
    if (!conv_bn_fits_gpu(dev, d, x, z)) {   // the composition, as the executor runs it without this slot
        conv_forward_gpu(dev, d, x, w, NULL, z);
        bn_silu_forward_train_gpu(dev, z, bn->gamma, bn->beta, eps, momentum, bn->running_mean, bn->running_var,
                                  bn->mean, bn->invstd, none, y);
        return;
    }
    if (x.N != d->N || x.H != d->H || x.W != d->W || x.C != d->C || z.N != d->N || z.H != d->P || z.W != d->Q ||
        z.C != d->K)
        die("conv_bn_silu_forward_train_gpu: maps %dx%dx%dx%d -> %dx%dx%dx%d do not match conv N=%d H=%d W=%d "
            "C=%d K=%d", x.N, x.H, x.W, x.C, z.N, z.H, z.W, z.C, d->N, d->H, d->W, d->C, d->K);
    size_t mark = dev->scratch.used, P = (size_t)d->N * d->P * d->Q;
    GroupStats s;
    s.t = tiling_of(P);
    s.mean = (double *)scratch_take(dev, sizeof(double) * s.t.G * d->K);
    s.m2 = (double *)scratch_take(dev, sizeof(double) * s.t.G * d->K);
    s.shift = (float *)scratch_take(dev, sizeof(float) * d->K);
    s.scale = (float *)scratch_take(dev, sizeof(float) * d->K);
    conv_stats(dev, d, x, w, z, bn, eps, momentum, s);
    bn_silu_normalise_gpu(dev, z, s.shift, s.scale, bn->beta, y);
    dev->scratch.used = mark;
}
