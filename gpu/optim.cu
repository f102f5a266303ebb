// optim.cu: the CUDA twins of core/spec/optim.c's elementwise updates. Every op walks chunks of
// OPT_CHUNK floats of one slot, one block per chunk, so a whole model is one launch; a per-tensor
// call is the same kernel over one slot passed by value. Updates write w, buf, g, ema in place;
// fp32 ops use the explicitly rounded intrinsics, so nvcc cannot contract them differently from
// the CPU twin. Legend: n floats of a tensor, b chunk index, k slot index.
#include "gpu/kernel_util.h"
#include "gpu/optim.h"

static const size_t GRID_CAP = 4096;   // blocks of the chunk loops; more chunks loop in the grid

// Where a kernel finds its slots: the device array `arr`, or (arr NULL) the one slot `one`.
struct SlotSrc {
    const GpuSlot *arr;
    int n;
    size_t chunks;
    GpuSlot one;
};

// SGD scalars per group (lr[group], wd[group]); mu and first for all.
struct SgdHyper { float lr[3], wd[3], mu; int first; };

// One chunk's range [lo, hi) of slot t.
struct Chunk { GpuSlot t; size_t lo, hi; };

// ---- device helpers ------------------------------------------------------------------------

__device__ static size_t chunk0_of(const SlotSrc &s, int k) {
    return s.arr ? s.arr[k].chunk0 : s.one.chunk0;
}

// The slot of chunk b: the last k with chunk0 <= b (a slot without chunks shares its chunk0 with
// the next one, so it is never picked).
__device__ static Chunk chunk_at(const SlotSrc &s, size_t b) {
    int lo = 0, hi = s.n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (chunk0_of(s, mid) <= b) lo = mid; else hi = mid - 1;
    }
    Chunk c;
    c.t = s.arr ? s.arr[lo] : s.one;
    c.lo = (b - c.t.chunk0) * OPT_CHUNK;
    c.hi = c.lo + OPT_CHUNK < c.t.n ? c.lo + OPT_CHUNK : c.t.n;
    return c;
}

// sgd_apply_cpu's element, rounding for rounding: fmaf is __fmaf_rn, buf*mu + g two roundings.
__device__ static inline void sgd_elem(float *w, float *g, float *buf, float lr, float mu,
                                       float wd, int first) {
    float d = *g;
    if (wd != 0.0f) d = __fmaf_rn(wd, *w, d);   // skipped at wd 0 as on the CPU (-0, inf*0)
    float b = first ? d : __fadd_rn(__fmul_rn(*buf, mu), d);
    *buf = b;
    d = __fmaf_rn(mu, b, d);
    *w = __fmaf_rn(-lr, d, *w);
    *g = 0.0f;
}

// ---- kernels -------------------------------------------------------------------------------

__global__ void sgd_kernel(SlotSrc s, SgdHyper h) {
    pdl_entry();
    for (size_t b = blockIdx.x; b < s.chunks; b += gridDim.x) {
        Chunk c = chunk_at(s, b);
        float lr = h.lr[c.t.group], wd = h.wd[c.t.group];
        for (size_t i = c.lo + threadIdx.x; i < c.hi; i += blockDim.x)
            sgd_elem(c.t.w + i, c.t.g + i, c.t.buf + i, lr, h.mu, wd, h.first);
    }
}

// part[b] = Σ g² over chunk b: per thread in index order, then a fixed tree over the block.
__global__ void sumsq_partial_kernel(SlotSrc s, double *part) {
    pdl_entry();
    __shared__ double sh[THREADS];
    for (size_t b = blockIdx.x; b < s.chunks; b += gridDim.x) {
        Chunk c = chunk_at(s, b);
        double acc = 0.0;
        for (size_t i = c.lo + threadIdx.x; i < c.hi; i += blockDim.x) {
            double v = c.t.g[i];
            acc += v * v;   // exact product: contracting it into an fma changes nothing
        }
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (int w = THREADS / 2; w > 0; w /= 2) {
            if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
            __syncthreads();
        }
        if (threadIdx.x == 0) part[b] = sh[0];
        __syncthreads();   // sh is refilled by the next chunk
    }
}

// One block: per_slot[k] = Σ part over slot k's chunks in order, then *total = Σ per_slot[k] in
// slot order, so a one-slot call and its slot in a many-slot call add the same terms alike.
__global__ void sumsq_final_kernel(SlotSrc s, const double *part, double *per_slot,
                                   double *total) {
    pdl_entry();
    for (int k = threadIdx.x; k < s.n; k += blockDim.x) {
        size_t end = k + 1 < s.n ? chunk0_of(s, k + 1) : s.chunks;
        double acc = 0.0;
        for (size_t b = chunk0_of(s, k); b < end; b++) acc += part[b];
        per_slot[k] = acc;
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    double acc = 0.0;
    for (int k = 0; k < s.n; k++) acc += per_slot[k];
    *total = acc;
}

__global__ void scale_kernel(SlotSrc s, float scale) {
    pdl_entry();
    for (size_t b = blockIdx.x; b < s.chunks; b += gridDim.x) {
        Chunk c = chunk_at(s, b);
        for (size_t i = c.lo + threadIdx.x; i < c.hi; i += blockDim.x)
            c.t.g[i] = __fmul_rn(c.t.g[i], scale);
    }
}

// clip_grad_norm on the device: total = sqrt(Σ sumsq[k], k < n, in order) as the host's double sum,
// coef = 1 / (total + 1e-6) * max_norm in fp32, then g *= coef where coef < 1 (every block computes
// the same coef; scaling by 1 would change nothing, so it returns).
__global__ void clip_kernel(SlotSrc s, const double *sumsq, int n, float max_norm) {
    pdl_entry();
    __shared__ float coef_sh;
    if (threadIdx.x == 0) {
        double acc = 0.0;
        for (int k = 0; k < n; k++) acc += sumsq[k];
        float total = (float)sqrt(acc);
        coef_sh = __fmul_rn(__fdiv_rn(1.0f, __fadd_rn(total, 1e-6f)), max_norm);
    }
    __syncthreads();
    float coef = coef_sh;
    if (coef >= 1.0f) return;
    for (size_t b = blockIdx.x; b < s.chunks; b += gridDim.x) {
        Chunk c = chunk_at(s, b);
        for (size_t i = c.lo + threadIdx.x; i < c.hi; i += blockDim.x)
            c.t.g[i] = __fmul_rn(c.t.g[i], coef);
    }
}

// dst[h] = max(Σ_k src[2k + h], 1), h = 0, 1, summed in k order as the host did
__global__ void loss_norm_kernel(const double *src, int n, double *dst) {
    pdl_entry();
    int h = threadIdx.x;
    if (h >= 2) return;
    double acc = 0.0;
    for (int k = 0; k < n; k++) acc += src[2 * k + h];
    dst[h] = acc > 1 ? acc : 1;
}

// dst[h] = src[h] + src[2 + h] + ... over n pairs, h = 0, 1, added in pair order (n = 0: 0): the local sum of
// devices' target-score pairs, or the processes' local sums in rank order, as the host adds them
__global__ void pair_sum_kernel(const double *src, int n, double *dst) {
    pdl_entry();
    int h = threadIdx.x;
    if (h >= 2) return;
    double acc = n ? src[h] : 0.0;
    for (int k = 1; k < n; k++) acc += src[2 * k + h];
    dst[h] = acc;
}

// ema = ema*keep, then + take*x (its own rounded product), as ema_update_cpu
__global__ void ema_kernel(float *ema, const float *x, size_t n, float keep, float take) {
    pdl_entry();
    GRID_STRIDE(i, n) ema[i] = __fadd_rn(__fmul_rn(ema[i], keep), __fmul_rn(take, x[i]));
}

// ---- launchers -----------------------------------------------------------------------------

static size_t chunks_of(size_t n) { return (n + OPT_CHUNK - 1) / OPT_CHUNK; }

static unsigned chunk_grid(size_t chunks) {
    return chunks < 1 ? 1u : chunks > GRID_CAP ? (unsigned)GRID_CAP : (unsigned)chunks;
}

static SlotSrc src_of(GpuSlots s) {
    SlotSrc src = { s.slots, s.n_slots, s.chunks, {} };
    return src;
}

// One trainable tensor (group 1) as a slot passed by value.
static SlotSrc src_one(float *w, float *g, float *buf, size_t n) {
    GpuSlot t = { w, g, buf, n, 1, 0 };
    SlotSrc src = { NULL, 1, chunks_of(n), t };
    return src;
}

extern "C" GpuSlots optim_slots_upload(Device *dev, Arena *a, GpuSlot *slots, int n_slots) {
    size_t chunks = 0;
    for (int k = 0; k < n_slots; k++) {
        if (slots[k].group < -1 || slots[k].group > 2)
            die("optim_slots_upload: slot %d has group %d (want -1..2)", k, slots[k].group);
        slots[k].chunk0 = chunks;
        if (slots[k].group >= 0) chunks += chunks_of(slots[k].n);
    }
    GpuSlot *d = (GpuSlot *)arena_take(a, sizeof(GpuSlot) * (n_slots > 0 ? n_slots : 1), 256);
    checkCuda(cudaMemcpyAsync(d, slots, sizeof(GpuSlot) * n_slots, cudaMemcpyHostToDevice,
                              dev->stream));
    device_sync(dev);   // `slots` may be a caller's temporary
    GpuSlots s = { d, n_slots, chunks };
    return s;
}

extern "C" size_t optim_workspace_bytes_gpu(size_t n, int n_slots) {
    size_t parts = n / OPT_CHUNK + (size_t)n_slots + 1;   // a partly filled chunk per slot
    return sizeof(double) * (parts + (size_t)n_slots + 2) + 3 * 256;
}

static void sgd_launch(Device *dev, SlotSrc src, SgdHyper h) {
    sgd_kernel<<<chunk_grid(src.chunks), THREADS, 0, dev->stream>>>(src, h);
    checkLaunch(dev);
}

extern "C" void sgd_apply_gpu(Device *dev, float *w, float *g, float *buf, size_t n, float lr,
                              float mu, float wd, int first) {
    SgdHyper h = { { lr, lr, lr }, { wd, wd, wd }, mu, first };
    sgd_launch(dev, src_one(w, g, buf, n), h);
}

extern "C" void sgd_apply_slots_gpu(Device *dev, GpuSlots s, const float lr[3], float mu,
                                    float wd, int first) {
    SgdHyper h = { { lr[0], lr[1], lr[2] }, { 0.0f, wd, 0.0f }, mu, first };   // as sgd_step
    sgd_launch(dev, src_of(s), h);
}

// Σ g² into dst (device memory), queued
static void sumsq_launch(Device *dev, SlotSrc src, double *dst) {
    size_t mark = dev->scratch.used;
    double *part = (double *)scratch_take(dev, sizeof(double) * (src.chunks ? src.chunks : 1));
    double *per_slot = (double *)scratch_take(dev, sizeof(double) * (src.n ? src.n : 1));
    sumsq_partial_kernel<<<chunk_grid(src.chunks), THREADS, 0, dev->stream>>>(src, part);
    checkLaunch(dev);
    sumsq_final_kernel<<<1, THREADS, 0, dev->stream>>>(src, part, per_slot, dst);
    checkLaunch(dev);
    dev->scratch.used = mark;                      // later work on the stream runs after these kernels
}

static double sumsq_read(Device *dev, SlotSrc src) {
    size_t mark = dev->scratch.used;
    double *total = (double *)scratch_take(dev, sizeof(double)), out = 0.0;
    sumsq_launch(dev, src, total);
    checkCuda(cudaMemcpyAsync(&out, total, sizeof out, cudaMemcpyDeviceToHost, dev->stream));
    device_sync(dev);
    dev->scratch.used = mark;
    return out;
}

extern "C" double grad_sumsq_gpu(Device *dev, const float *g, size_t n) {
    return sumsq_read(dev, src_one(NULL, (float *)g, NULL, n));   // read only
}

extern "C" double grad_sumsq_slots_gpu(Device *dev, GpuSlots s) {
    return sumsq_read(dev, src_of(s));
}

extern "C" void grad_sumsq_slots_to_gpu(Device *dev, GpuSlots s, double *dst) { sumsq_launch(dev, src_of(s), dst); }

extern "C" void grad_clip_slots_gpu(Device *dev, GpuSlots s, const double *sumsq, int n, float max_norm) {
    SlotSrc src = src_of(s);
    clip_kernel<<<chunk_grid(src.chunks), THREADS, 0, dev->stream>>>(src, sumsq, n, max_norm);
    checkLaunch(dev);
}

extern "C" void loss_norm_gpu(Device *dev, const double *src, int n, double *dst) {
    loss_norm_kernel<<<1, 32, 0, dev->stream>>>(src, n, dst);
    checkLaunch(dev);
}

extern "C" void pair_sum_gpu(Device *dev, const double *src, int n, double *dst) {
    pair_sum_kernel<<<1, 32, 0, dev->stream>>>(src, n, dst);
    checkLaunch(dev);
}

static void scale_launch(Device *dev, SlotSrc src, float scale) {
    scale_kernel<<<chunk_grid(src.chunks), THREADS, 0, dev->stream>>>(src, scale);
    checkLaunch(dev);
}

extern "C" void grad_scale_gpu(Device *dev, float *g, size_t n, float s) {
    scale_launch(dev, src_one(NULL, g, NULL, n), s);
}

extern "C" void grad_scale_slots_gpu(Device *dev, GpuSlots s, float scale) {
    scale_launch(dev, src_of(s), scale);
}

extern "C" void ema_update_gpu(Device *dev, float *ema, const float *x, size_t n, double d) {
    float keep = (float)d, take = (float)(1.0 - d);   // as ema_update_cpu
    ema_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(ema, x, n, keep, take);
    checkLaunch(dev);
}
