// bn_sync.cu: synchronised batch normalisation (SyncBatchNorm, --sync-bn over several devices), the CUDA twin
// of core/spec/bn.c's bn_forward_train_sync_cpu and bn_backward_sync_cpu, in the same steps: this device's
// per-channel sums in double on the GPU, copied to host memory, summed over the devices by BnSync (core/spec/
// ops.h: host doubles), and the whole batch's statistics or gradient means copied back.
// Forward: u (=), saved and running statistics; backward: dz (=), dgamma and dbeta (+=, this device's sums).
// Unlike the other ops of gpu/ops.h these wait on the host (twice forward, once backward), so they are never
// recorded in a CUDA graph. The sums are deterministic: a fixed-order two-level reduction (no atomics) whose
// chunks are set by M alone, so they do not depend on the GPU.
// z, u, du and dz may each be bf16-stored (read as floats, written rounded); dz may alias du.
// Legend: N batch, H,W size, K channels, M pixels of this device, G chunks of pixels, S sums per channel.
#include <cuda_bf16.h>
#include <math.h>

#include "gpu/kernel_util.h"

// A chunk of pixels is the rows of one block: ROWS lanes of a block row each take pixels l, l + ROWS·G, ...
// (l = chunk·ROWS + row), so a lane adds about CHUNK_PIXELS / ROWS pixels; at most MAX_CHUNKS chunks.
enum { CH = 32, ROWS = 8, CHUNK_PIXELS = 256, MAX_CHUNKS = 256 };

static int sync_chunks(size_t M) {
    size_t g = (M + CHUNK_PIXELS - 1) / CHUNK_PIXELS;
    return g < 1 ? 1 : g > MAX_CHUNKS ? MAX_CHUNKS : (int)g;
}

// What a sums pass adds per channel and pixel:
//   SUM_Z:  Σ z                                     (S = 1)
//   SUM_SQ: Σ (z - mu)², mu the whole batch's mean  (S = 1, in double as the CPU: (double)z - mu)
//   SUM_DU: Σ du and Σ du·xhat, xhat = (z - mean)·(double)invstd with z - mean rounded in float (S = 2)
enum SyncKind { SUM_Z, SUM_SQ, SUM_DU };

// The device buffers kept on the Device between calls (dev->kept[DEVICE_KEPT_BNSYNC]), grown when a BN of more
// channels comes (sync_work), and the page-locked host doubles BnSync sums.
struct SyncWork {
    double *part;   // (G, S·K) partial sums
    double *sums;   // (2K) backward: this device's sums, then the batch's means; forward: the mean, Σ(z - mu)²
    double *var;    // (K) the whole batch's variance (forward)
    size_t dev_cap; // doubles of the one device allocation the three above share
    double *host;   // (1 + 2K) [M, sums] (forward: [M, Σz, Σ(z - mu)²], the CPU's layout)
    size_t host_cap;
};

static void sync_work_free(void *p) {
    SyncWork *w = (SyncWork *)p;
    if (w->part) checkCuda(cudaFree(w->part));
    if (w->host) checkCuda(cudaFreeHost(w->host));
    free(w);
}

// dev's kept work with room for K channels of any map (MAX_CHUNKS chunks), so only a larger K than any before
// replaces it (after the stream's work, which may still read the old one, is done): a model's first step sees
// every K, and later steps allocate nothing whatever their image size
static SyncWork *sync_work(Device *dev, int K) {
    SyncWork *w = (SyncWork *)dev->kept[DEVICE_KEPT_BNSYNC];
    if (!w) {
        w = (SyncWork *)calloc(1, sizeof *w);
        if (!w) die("bn_sync: out of host memory");
        dev->kept[DEVICE_KEPT_BNSYNC] = w;
        dev->kept_free[DEVICE_KEPT_BNSYNC] = sync_work_free;
    }
    size_t k = (size_t)K, need = (size_t)MAX_CHUNKS * 2 * k + 3 * k, host_need = 2 * k + 1;
    if (need > w->dev_cap) {
        device_sync(dev);
        if (w->part) checkCuda(cudaFree(w->part));
        w->part = (double *)device_try_alloc(sizeof(double) * need);
        if (!w->part) die("out of GPU memory on GPU %d for SyncBatchNorm's sums (%zu bytes): lower batch", dev->id,
                          sizeof(double) * need);
        w->dev_cap = need;
    }
    if (host_need > w->host_cap) {
        device_sync(dev);
        if (w->host) checkCuda(cudaFreeHost(w->host));
        w->host = (double *)device_host_alloc(sizeof(double) * host_need);
        w->host_cap = host_need;
    }
    size_t parts = w->dev_cap - 3 * k;   // the partials first, then sums (2K) and var (K)
    w->sums = w->part + parts;
    w->var = w->sums + 2 * k;
    return w;
}

// ---- kernels -------------------------------------------------------------------------------

// Partial sums of kind KIND: block (CH, ROWS) over channels [blockIdx.x·CH, +CH) and chunk g = blockIdx.y;
// each lane adds its pixels in order in double, then row 0 adds the block's ROWS lanes in row order into
// part[g·S·K + s·K + c]. M is this device's pixel count; mu (SUM_SQ) the batch's means; p the saved
// statistics (SUM_DU).
template <SyncKind KIND>
__global__ void __launch_bounds__(CH *ROWS)
sync_sums_kernel(Map z, Map du, const double *mu, const float *mean, const float *invstd, double *part) {
    pdl_entry();
    __shared__ double sh[2][ROWS][CH];
    int K = z.C, c = blockIdx.x * CH + threadIdx.x, row = threadIdx.y, g = blockIdx.y;
    size_t M = (size_t)z.N * z.H * z.W, step = (size_t)gridDim.y * ROWS;
    double s0 = 0.0, s1 = 0.0;
    if (c < K) {
        double m = KIND == SUM_SQ ? mu[c] : 0.0;
        float fm = KIND == SUM_DU ? mean[c] : 0.0f, is = KIND == SUM_DU ? invstd[c] : 0.0f;
        for (size_t p = (size_t)g * ROWS + row; p < M; p += step) {
            float v = map_get(z, p * z.ld + c);
            if (KIND == SUM_Z) {
                s0 = __dadd_rn(s0, (double)v);
            } else if (KIND == SUM_SQ) {
                double e = __dsub_rn((double)v, m);
                s0 = __dadd_rn(s0, __dmul_rn(e, e));
            } else {
                float d = map_get(du, p * du.ld + c);
                double xhat = __dmul_rn((double)__fsub_rn(v, fm), (double)is);
                s0 = __dadd_rn(s0, (double)d);
                s1 = __dadd_rn(s1, __dmul_rn((double)d, xhat));
            }
        }
    }
    sh[0][row][threadIdx.x] = s0, sh[1][row][threadIdx.x] = s1;
    __syncthreads();
    if (row != 0 || c >= K) return;
    for (int r = 1; r < ROWS; r++) s0 = __dadd_rn(s0, sh[0][r][threadIdx.x]), s1 = __dadd_rn(s1, sh[1][r][threadIdx.x]);
    int S = KIND == SUM_DU ? 2 : 1;
    double *out = part + (size_t)g * S * K;
    out[c] = s0;
    if (KIND == SUM_DU) out[K + c] = s1;
}

// sums[j] = Σ_g part[g·n + j] for j < n, g in order; with dgamma/dbeta (n = 2K, the backward's sums):
// dbeta[j] += (float)Σdu, dgamma[j] += (float)Σdu·xhat, this device's own parameter gradients
__global__ void sync_chunks_kernel(const double *part, int G, int n, double *sums, float *dgamma, float *dbeta) {
    pdl_entry();
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    double s = part[j];
    for (int g = 1; g < G; g++) s = __dadd_rn(s, part[(size_t)g * n + j]);
    sums[j] = s;
    int K = n / 2;
    if (dbeta && j < K) dbeta[j] += (float)s;
    if (dgamma && j >= K) dgamma[j - K] += (float)s;
}

// The saved and running statistics from the batch's mean mu and variance var (host doubles copied here),
// each operation rounded alone as the CPU's (no FMA)
__global__ void sync_stats_kernel(int K, const double *mu, const double *var, float eps, float momentum,
                                  double unbias, float *running_mean, float *running_var, float *mean, float *invstd) {
    pdl_entry();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= K) return;
    double keep = 1.0 - (double)momentum, mom = (double)momentum;
    mean[c] = (float)mu[c];
    invstd[c] = (float)__drcp_rn(__dsqrt_rn(__dadd_rn(var[c], (double)eps)));
    if (running_mean) running_mean[c] = (float)__dadd_rn(__dmul_rn(keep, (double)running_mean[c]), __dmul_rn(mom, mu[c]));
    if (running_var)
        running_var[c] = (float)__dadd_rn(__dmul_rn(keep, (double)running_var[c]), __dmul_rn(__dmul_rn(mom, var[c]), unbias));
}

// dz = k·(du - mdu - xhat·mdux), k = (double)gamma·invstd, from the batch's means mdu, mdux; dz may alias du
// (each element read before the same thread writes it)
__global__ void __launch_bounds__(CH *ROWS)
sync_dz_kernel(Map z, const float *gamma, const float *mean, const float *invstd, const double *mdu,
               const double *mdux, Map du, Map dz) {
    pdl_entry();
    int c = blockIdx.x * CH + threadIdx.x;
    if (c >= z.C) return;
    size_t M = (size_t)z.N * z.H * z.W, step = (size_t)gridDim.y * ROWS;
    float fm = mean[c], is = invstd[c];
    double k = __dmul_rn((double)gamma[c], (double)is), m0 = mdu[c], m1 = mdux[c];
    for (size_t p = (size_t)blockIdx.y * ROWS + threadIdx.y; p < M; p += step) {
        float v = map_get(z, p * z.ld + c), d = map_get(du, p * du.ld + c);
        double xhat = __dmul_rn((double)__fsub_rn(v, fm), (double)is);
        map_put(dz, p * dz.ld + c, (float)__dmul_rn(k, __dsub_rn(__dsub_rn((double)d, m0), __dmul_rn(xhat, m1))));
    }
}

// ---- launchers -----------------------------------------------------------------------------

static dim3 sums_grid(int K, int G) { return dim3((unsigned)((K + CH - 1) / CH), (unsigned)G); }

// part's G chunks of n sums added into sums (device; and the backward's dgamma, dbeta), then copied into
// host[0, n) and waited for
static void chunks_to_host(Device *dev, SyncWork *w, int G, int n, double *sums, double *host, float *dgamma,
                           float *dbeta) {
    sync_chunks_kernel<<<(unsigned)((n + THREADS - 1) / THREADS), THREADS, 0, dev->stream>>>(w->part, G, n, sums,
                                                                                            dgamma, dbeta);
    checkLaunch(dev);
    checkCuda(cudaMemcpyAsync(host, sums, sizeof(double) * n, cudaMemcpyDeviceToHost, dev->stream));
    device_sync(dev);
}

static void sync_check(Map a, Map b, const char *who) { same_shape_gpu(a, b, who); }

// Launches: Σz, its chunks, Σ(z - mu)², its chunks, the statistics, bn_apply_gpu (6); host waits: 2.
extern "C" void bn_forward_train_sync_gpu(Device *dev, Map z, const float *gamma, const float *beta, float eps,
                                          float momentum, float *running_mean, float *running_var, float *mean,
                                          float *invstd, Map u, const BnSync *sync) {
    sync_check(z, u, "bn_forward_train_sync_gpu");
    if (!mean || !invstd) die("bn_forward_train_sync_gpu: the saved statistics are required (bn_apply reads them)");
    int K = z.C;
    size_t M = map_pixels(z);
    int G = sync_chunks(M);
    SyncWork *w = sync_work(dev, K);
    double *a = w->host, *sq = a + K + 1;   // [M, Σz], then Σ(z - mean)²: the CPU's layout
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    sync_sums_kernel<SUM_Z><<<sums_grid(K, G), dim3(CH, ROWS), 0, dev->stream>>>(z, none, NULL, NULL, NULL, w->part);
    checkLaunch(dev);
    chunks_to_host(dev, w, G, K, w->sums, a + 1, NULL, NULL);
    a[0] = (double)M;
    sync->sum(sync->arg, a, K + 1);
    double Mt = a[0], *mu = a + 1;
    for (int c = 0; c < K; c++) mu[c] /= Mt;
    checkCuda(cudaMemcpyAsync(w->sums, mu, sizeof(double) * K, cudaMemcpyHostToDevice, dev->stream));
    sync_sums_kernel<SUM_SQ><<<sums_grid(K, G), dim3(CH, ROWS), 0, dev->stream>>>(z, none, w->sums, NULL, NULL,
                                                                                  w->part);
    checkLaunch(dev);
    chunks_to_host(dev, w, G, K, w->sums + K, sq, NULL, NULL);   // the mean stays in sums' first half
    sync->sum(sync->arg, sq, K);
    for (int c = 0; c < K; c++) sq[c] /= Mt;        // the variance
    checkCuda(cudaMemcpyAsync(w->var, sq, sizeof(double) * K, cudaMemcpyHostToDevice, dev->stream));
    double unbias = Mt > 1 ? Mt / (Mt - 1) : 1.0;
    sync_stats_kernel<<<(unsigned)((K + THREADS - 1) / THREADS), THREADS, 0, dev->stream>>>(
        K, w->sums, w->var, eps, momentum, unbias, running_mean, running_var, mean, invstd);
    checkLaunch(dev);
    bn_apply_gpu(dev, z, gamma, beta, mean, invstd, u);
}

// Launches: Σdu and Σdu·xhat, their chunks (dgamma, dbeta +=), dz (3; 2 without dz); host waits: 1.
extern "C" void bn_backward_sync_gpu(Device *dev, Map z, const float *gamma, const float *mean, const float *invstd,
                                     Map du, Map dz, float *dgamma, float *dbeta, const BnSync *sync) {
    sync_check(z, du, "bn_backward_sync_gpu");
    if (dz.data) sync_check(z, dz, "bn_backward_sync_gpu");
    if (dz.data == du.data && (dz.bf16 != du.bf16 || dz.ld != du.ld))
        die("bn_backward_sync_gpu: dz in place of du needs du's storage and layout");
    int K = z.C;
    size_t M = map_pixels(z);
    int G = sync_chunks(M);
    SyncWork *w = sync_work(dev, K);
    double *a = w->host;   // [M, Σdu, Σdu·xhat]
    sync_sums_kernel<SUM_DU><<<sums_grid(K, G), dim3(CH, ROWS), 0, dev->stream>>>(z, du, NULL, mean, invstd, w->part);
    checkLaunch(dev);
    chunks_to_host(dev, w, G, 2 * K, w->sums, a + 1, dgamma, dbeta);
    a[0] = (double)M;
    sync->sum(sync->arg, a, 2 * K + 1);
    if (!dz.data) return;
    double Mt = a[0];
    for (int j = 1; j <= 2 * K; j++) a[j] /= Mt;
    checkCuda(cudaMemcpyAsync(w->sums, a + 1, sizeof(double) * 2 * K, cudaMemcpyHostToDevice, dev->stream));
    unsigned rows = (unsigned)((M + ROWS - 1) / ROWS);
    dim3 grid((unsigned)((K + CH - 1) / CH), rows < 1 ? 1u : rows > 4096 ? 4096u : rows);
    sync_dz_kernel<<<grid, dim3(CH, ROWS), 0, dev->stream>>>(z, gamma, mean, invstd, w->sums, w->sums + K, du, dz);
    checkLaunch(dev);
}
