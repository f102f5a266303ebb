// dwconv.cu: depthwise k x k convolution on NHWC maps, the CUDA twin of dwconv_*_cpu (core/ops26.c).
// Forward writes y (=): one thread per output element. Backward adds (+=): dx by gather (one thread per
// dx element sums the taps that read it, so no atomics and a fixed order); dw and db by per-block partial
// sums over a range of pixels, 32 channels a block, combined in order in double (deterministic).
// Legend: N batch, C channels, H,W in, P,Q out, k kernel, M = N*P*Q output pixels.
#include "gpu/kernel_util.h"
#include "gpu/ops26.h"

enum { DW_TILE_C = 32, DW_TILE_M = 8, DW_MAX_PARTS = 64, DW_PIXELS_PER_PART = 1024 };

static int dw_parts(size_t M) {
    size_t g = (M + DW_PIXELS_PER_PART - 1) / DW_PIXELS_PER_PART;
    return g < 1 ? 1 : g > DW_MAX_PARTS ? DW_MAX_PARTS : (int)g;
}

static size_t dw_pixels(const DwDims *d) { return (size_t)d->N * d->P * d->Q; }

extern "C" size_t dwconv_workspace_bytes_gpu(const DwDims *d) {
    return sizeof(double) * dw_parts(dw_pixels(d)) * d->C * (d->k * d->k + 1) + 256;
}

// Shapes are fixed when the model is built, so a mismatch is a bug in the caller.
static void dw_check_gpu(const DwDims *d, Map x, Map y, const char *who) {
    if (x.N != d->N || x.H != d->H || x.W != d->W || x.C != d->C || y.N != d->N || y.H != d->P ||
        y.W != d->Q || y.C != d->C || x.ld < x.C || y.ld < y.C || d->k < 1 || d->stride < 1)
        die("%s: maps %dx%dx%dx%d -> %dx%dx%dx%d do not fit k %d stride %d on %dx%dx%dx%d", who, x.N, x.H, x.W,
            x.C, y.N, y.H, y.W, y.C, d->k, d->stride, d->N, d->H, d->W, d->C);
    require_fp32(x, who);
    require_fp32(y, who);
}

__device__ static inline float *at(Map m, int n, int h, int w, int c) {
    return m.data + (((size_t)n * m.H + h) * m.W + w) * m.ld + c;
}

// ---- kernels -------------------------------------------------------------------------------

__global__ void dwconv_fwd_kernel(DwDims d, Map x, const float *w, const float *b, Map y) {
    GRID_STRIDE(i, map_n(y)) {
        int c = (int)(i % d.C);
        size_t px = i / d.C;
        int q = (int)(px % d.Q), p = (int)(px / d.Q % d.P), n = (int)(px / ((size_t)d.Q * d.P));
        float s = b ? b[c] : 0.0f;
        for (int r = 0; r < d.k; r++) {
            int h = p * d.stride - d.pad + r;
            if (h < 0 || h >= d.H) continue;
            for (int t = 0; t < d.k; t++) {
                int ww = q * d.stride - d.pad + t;
                if (ww < 0 || ww >= d.W) continue;
                s += *at(x, n, h, ww, c) * w[(c * d.k + r) * d.k + t];
            }
        }
        *map_elem(y, i) = s;
    }
}

// dx (n,h,w,c) += sum over taps (r,t) whose output (p,q) = ((h+pad-r)/stride, (w+pad-t)/stride) exists
__global__ void dwconv_dx_kernel(DwDims d, const float *w, Map dy, Map dx) {
    GRID_STRIDE(i, map_n(dx)) {
        int c = (int)(i % d.C);
        size_t px = i / d.C;
        int ww = (int)(px % d.W), h = (int)(px / d.W % d.H), n = (int)(px / ((size_t)d.W * d.H));
        float s = 0.0f;
        for (int r = 0; r < d.k; r++) {
            int ph = h + d.pad - r;
            if (ph < 0 || ph % d.stride) continue;
            int p = ph / d.stride;
            if (p >= d.P) continue;
            for (int t = 0; t < d.k; t++) {
                int qw = ww + d.pad - t;
                if (qw < 0 || qw % d.stride) continue;
                int q = qw / d.stride;
                if (q >= d.Q) continue;
                s += *at(dy, n, p, q, c) * w[(c * d.k + r) * d.k + t];
            }
        }
        *map_elem(dx, i) += s;
    }
}

// Partial dw (and, from tap 0's blocks, db) over pixel range blockIdx.z: block (32 channels, 8 pixel
// lanes), grid (C tiles, k*k taps, parts). part: (parts, C, k*k + 1), the last slot db.
__global__ void dwconv_dw_partial_kernel(DwDims d, Map x, Map dy, int parts, double *part) {
    __shared__ float sw[DW_TILE_M][DW_TILE_C], sb[DW_TILE_M][DW_TILE_C];
    int c = blockIdx.x * DW_TILE_C + threadIdx.x, tap = blockIdx.y, r = tap / d.k, t = tap % d.k;
    size_t M = (size_t)d.N * d.P * d.Q, per = (M + parts - 1) / parts;
    size_t m0 = blockIdx.z * per, m1 = m0 + per < M ? m0 + per : M;
    float aw = 0.0f, ab = 0.0f;
    if (c < d.C)
        for (size_t m = m0 + threadIdx.y; m < m1; m += DW_TILE_M) {
            int q = (int)(m % d.Q), p = (int)(m / d.Q % d.P), n = (int)(m / ((size_t)d.Q * d.P));
            float g = *at(dy, n, p, q, c);
            ab += g;
            int h = p * d.stride - d.pad + r, ww = q * d.stride - d.pad + t;
            if (h >= 0 && h < d.H && ww >= 0 && ww < d.W) aw += g * *at(x, n, h, ww, c);
        }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y || c >= d.C) return;
    double s = 0.0, sbias = 0.0;
    for (int j = 0; j < DW_TILE_M; j++) { s += sw[j][threadIdx.x]; sbias += sb[j][threadIdx.x]; }
    size_t slots = (size_t)d.k * d.k + 1, base = ((size_t)blockIdx.z * d.C + c) * slots;
    part[base + tap] = s;
    if (tap == 0) part[base + slots - 1] = sbias;
}

__global__ void dwconv_dw_combine_kernel(DwDims d, const double *part, int parts, float *dw, float *db) {
    int slots = d.k * d.k + 1;
    GRID_STRIDE(i, (size_t)d.C * slots) {
        int c = (int)(i / slots), tap = (int)(i % slots);
        double s = 0.0;
        for (int g = 0; g < parts; g++) s += part[((size_t)g * d.C + c) * slots + tap];
        if (tap < slots - 1) { if (dw) dw[(size_t)c * (slots - 1) + tap] += (float)s; }
        else if (db) db[c] += (float)s;
    }
}

// ---- launchers -----------------------------------------------------------------------------

extern "C" void dwconv_forward_gpu(Device *dev, const DwDims *d, Map x, const float *w, const float *b, Map y) {
    dw_check_gpu(d, x, y, "dwconv_forward_gpu");
    dwconv_fwd_kernel<<<blocks_for(map_floats(y)), THREADS, 0, dev->stream>>>(*d, x, w, b, y);
    checkLaunch(dev);
}

extern "C" void dwconv_backward_gpu(Device *dev, const DwDims *d, Map x, const float *w, Map dy, Map dx,
                                    float *dw, float *db) {
    dw_check_gpu(d, x, dy, "dwconv_backward_gpu");
    if (dx.data) {
        dw_check_gpu(d, dx, dy, "dwconv_backward_gpu (dx)");
        dwconv_dx_kernel<<<blocks_for(map_floats(dx)), THREADS, 0, dev->stream>>>(*d, w, dy, dx);
        checkLaunch(dev);
    }
    if (!dw && !db) return;
    size_t mark = dev->scratch.used;
    int parts = dw_parts(dw_pixels(d));
    double *part = (double *)scratch_take(dev, sizeof(double) * parts * d->C * (d->k * d->k + 1));
    dim3 grid((d->C + DW_TILE_C - 1) / DW_TILE_C, d->k * d->k, parts), block(DW_TILE_C, DW_TILE_M);
    dwconv_dw_partial_kernel<<<grid, block, 0, dev->stream>>>(*d, x, dy, parts, part);
    checkLaunch(dev);
    dwconv_dw_combine_kernel<<<blocks_for((size_t)d->C * (d->k * d->k + 1)), THREADS, 0, dev->stream>>>(
        *d, part, parts, dw, db);
    checkLaunch(dev);
    dev->scratch.used = mark;
}
