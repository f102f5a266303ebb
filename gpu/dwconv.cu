// dwconv.cu: depthwise k x k convolution on NHWC maps, the CUDA twin of dwconv_*_cpu (core/spec/ops26.c).
// Forward writes y (=): one thread per output element. Backward adds (+=): dx by gather (one thread per
// dx element sums the taps that read it, so no atomics and a fixed order); dw and db by per-block partial
// sums over a range of pixels, 32 channels a block, combined in order in double (deterministic). For k 3
// and 5 a block sums every tap and the bias, reading dy once (dwconv_dw_taps_kernel); other k one tap a
// block (dwconv_dw_partial_kernel). Element kernels index in 32 bits when the map allows it.
// x and y may be bf16-stored (tensor.h; read as floats, y written rounded); dy, dx are fp32.
// Legend: N batch, C channels, H,W in, P,Q out, k kernel, M = N*P*Q output pixels.
#include "gpu/kernel_util.h"
#include "gpu/ops26.h"

enum { DW_TILE_C = 32, DW_TILE_M = 8, DW_MAX_PARTS = 256, DW_PIXELS_PER_PART = 512 };

static int dw_parts(size_t M) {
    size_t g = (M + DW_PIXELS_PER_PART - 1) / DW_PIXELS_PER_PART;
    return g < 1 ? 1 : g > DW_MAX_PARTS ? DW_MAX_PARTS : (int)g;
}

static size_t dw_pixels(const DwDims *d) { return (size_t)d->N * d->P * d->Q; }

extern "C" size_t dwconv_workspace_bytes_gpu(const DwDims *d) {
    return sizeof(double) * dw_parts(dw_pixels(d)) * d->C * (d->k * d->k + 1) + 256 +
           sizeof(float) * d->C * d->k * d->k + 256;      // + the weights transposed (dw_transpose)
}

// Shapes are fixed when the model is built, so a mismatch is a bug in the caller.
static void dw_check_gpu(const DwDims *d, Map x, Map y, const char *who) {
    if (x.N != d->N || x.H != d->H || x.W != d->W || x.C != d->C || y.N != d->N || y.H != d->P ||
        y.W != d->Q || y.C != d->C || x.ld < x.C || y.ld < y.C || d->k < 1 || d->stride < 1)
        die("%s: maps %dx%dx%dx%d -> %dx%dx%dx%d do not fit k %d stride %d on %dx%dx%dx%d", who, x.N, x.H, x.W,
            x.C, y.N, y.H, y.W, y.C, d->k, d->stride, d->N, d->H, d->W, d->C);
}

// the offset of element (n, h, w, c) of m (pixel * ld + channel)
__device__ static inline size_t off_of(Map m, int n, int h, int w, int c) {
    return (((size_t)n * m.H + h) * m.W + w) * m.ld + c;
}

__device__ static inline float *at(Map m, int n, int h, int w, int c) {
    return m.data + (((size_t)n * m.H + h) * m.W + w) * m.ld + c;
}

// ---- kernels -------------------------------------------------------------------------------

// K, ST: the kernel size and stride when known at compile time (0: d.k, d.stride); I: the index type.
template <int K, int ST, typename I>
__global__ void dwconv_fwd_kernel(DwDims d, Map x, const float *w, const float *b, Map y) {
    pdl_entry();
    const int k = K ? K : d.k, stride = ST ? ST : d.stride;
    I total = (I)map_n(y);
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        int c = (int)(i % d.C);
        I px = i / d.C;
        int q = (int)(px % d.Q), p = (int)(px / d.Q % d.P), n = (int)(px / ((I)d.Q * d.P));
        float s = b ? b[c] : 0.0f;
#pragma unroll
        for (int r = 0; r < k; r++) {
            int h = p * stride - d.pad + r;
            if (h < 0 || h >= d.H) continue;
#pragma unroll
            for (int t = 0; t < k; t++) {
                int ww = q * stride - d.pad + t;
                if (ww < 0 || ww >= d.W) continue;
                s += map_get(x, off_of(x, n, h, ww, c)) * w[(c * k + r) * k + t];
            }
        }
        map_put(y, (size_t)px * y.ld + c, s);
    }
}

// dx (n,h,w,c) += sum over taps (r,t) whose output (p,q) = ((h+pad-r)/stride, (w+pad-t)/stride) exists
template <int K, int ST, typename I> __global__ void dwconv_dx_kernel(DwDims d, const float *w, Map dy, Map dx) {
    pdl_entry();
    const int k = K ? K : d.k, stride = ST ? ST : d.stride;
    I total = (I)map_n(dx);
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        int c = (int)(i % d.C);
        I px = i / d.C;
        int ww = (int)(px % d.W), h = (int)(px / d.W % d.H), n = (int)(px / ((I)d.W * d.H));
        float s = 0.0f;
#pragma unroll
        for (int r = 0; r < k; r++) {
            int ph = h + d.pad - r;
            if (ph < 0 || ph % stride) continue;
            int p = ph / stride;
            if (p >= d.P) continue;
#pragma unroll
            for (int t = 0; t < k; t++) {
                int qw = ww + d.pad - t;
                if (qw < 0 || qw % stride) continue;
                int q = qw / stride;
                if (q >= d.Q) continue;
                s += *at(dy, n, p, q, c) * w[(c * k + r) * k + t];
            }
        }
        float *o = dx.data + (size_t)px * dx.ld + c;
        *o = dx.fresh ? s : *o + s;   // a first write (tensor.h): nothing to add to
    }
}

// ---- four channels a thread (C, ld a multiple of 4, maps 16-byte aligned) ------------------------
// The weights transposed to (k*k, C) so that a thread reads its four channels' tap with one load;
// each channel's sum runs over the taps in the order of the kernels above (the same bits).
__global__ void dw_transpose_kernel(const float *w, int C, int kk, float *wt) {
    pdl_entry();
    GRID_STRIDE(i, (size_t)C * kk) wt[(i % kk) * C + i / kk] = w[i];
}

__device__ static inline void fma4(float4 &s, float4 a, float4 b) {
    s.x += a.x * b.x; s.y += a.y * b.y; s.z += a.z * b.z; s.w += a.w * b.w;
}

template <int K, int ST>
__global__ void dwconv_fwd4_kernel(DwDims d, Map x, const float *wt, const float *b, Map y) {
    pdl_entry();
    unsigned C4 = d.C / 4, total = (unsigned)(d.N * d.P * d.Q) * C4;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        unsigned c = i % C4 * 4, px = i / C4;
        int q = (int)(px % d.Q), p = (int)(px / d.Q % d.P), n = (int)(px / ((unsigned)d.Q * d.P));
        float4 s = b ? make_float4(b[c], b[c + 1], b[c + 2], b[c + 3]) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int r = 0; r < K; r++) {
            int h = p * ST - d.pad + r;
            if (h < 0 || h >= d.H) continue;
#pragma unroll
            for (int t = 0; t < K; t++) {
                int ww = q * ST - d.pad + t;
                if (ww < 0 || ww >= d.W) continue;
                Vec<4> xv = map_vget<4>(x, (((size_t)n * d.H + h) * d.W + ww) * x.ld + c);
                fma4(s, make_float4(xv.v[0], xv.v[1], xv.v[2], xv.v[3]), *(const float4 *)(wt + (r * K + t) * d.C + c));
            }
        }
        Vec<4> out;
        out.v[0] = s.x, out.v[1] = s.y, out.v[2] = s.z, out.v[3] = s.w;
        map_vput<4>(y, (size_t)px * y.ld + c, out);
    }
}

template <int K, int ST> __global__ void dwconv_dx4_kernel(DwDims d, const float *wt, Map dy, Map dx) {
    pdl_entry();
    unsigned C4 = d.C / 4, total = (unsigned)(d.N * d.H * d.W) * C4;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        unsigned c = i % C4 * 4, px = i / C4;
        int ww = (int)(px % d.W), h = (int)(px / d.W % d.H), n = (int)(px / ((unsigned)d.W * d.H));
        float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int r = 0; r < K; r++) {
            int ph = h + d.pad - r;
            if (ph < 0 || ph % ST) continue;
            int p = ph / ST;
            if (p >= d.P) continue;
#pragma unroll
            for (int t = 0; t < K; t++) {
                int qw = ww + d.pad - t;
                if (qw < 0 || qw % ST) continue;
                int q = qw / ST;
                if (q >= d.Q) continue;
                fma4(s, *(const float4 *)(dy.data + (((size_t)n * d.P + p) * d.Q + q) * dy.ld + c),
                     *(const float4 *)(wt + (r * K + t) * d.C + c));
            }
        }
        float4 *o = (float4 *)(dx.data + (size_t)px * dx.ld + c);
        if (dx.fresh) { *o = s; continue; }   // a first write (tensor.h): nothing to add to
        float4 a = *o;
        a.x += s.x; a.y += s.y; a.z += s.z; a.w += s.w;
        *o = a;
    }
}

// Partial dw (and, from tap 0's blocks, db) over pixel range blockIdx.z: block (32 channels, 8 pixel
// lanes), grid (C tiles, k*k taps, parts). part: (parts, C, k*k + 1), the last slot db.
__global__ void dwconv_dw_partial_kernel(DwDims d, Map x, Map dy, int parts, double *part) {
    pdl_entry();
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
            if (h >= 0 && h < d.H && ww >= 0 && ww < d.W) aw += g * map_get(x, off_of(x, n, h, ww, c));
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

// Every tap's partial dw and the partial db over pixel range blockIdx.y in one block: (32 channels, 8
// pixel lanes), grid (C tiles, parts); dy read once per pixel, x's K*K neighbours from cache. Each lane
// walks its pixels (n, p, q) by increments; each sum (tap, lane) runs in pixel order and the lanes are
// added in lane order in double, as dwconv_dw_partial_kernel does. part: (parts, C, K*K + 1).
template <int K> __global__ void dwconv_dw_taps_kernel(DwDims d, Map x, Map dy, int parts, double *part) {
    pdl_entry();
    enum { T = K * K + 1 };
    __shared__ float sacc[T][DW_TILE_M][DW_TILE_C];
    int c = blockIdx.x * DW_TILE_C + threadIdx.x;
    size_t M = (size_t)d.N * d.P * d.Q, per = (M + parts - 1) / parts;
    size_t m0 = blockIdx.y * per, m1 = m0 + per < M ? m0 + per : M;
    float acc[T];
    for (int j = 0; j < T; j++) acc[j] = 0.0f;
    if (c < d.C && m0 + threadIdx.y < m1) {
        size_t m = m0 + threadIdx.y;
        int q = (int)(m % d.Q), p = (int)(m / d.Q % d.P), n = (int)(m / ((size_t)d.Q * d.P));
        for (; m < m1; m += DW_TILE_M) {
            const float *g_at = dy.data + (((size_t)n * dy.H + p) * dy.W + q) * dy.ld + c;
            float g = *g_at;
            acc[T - 1] += g;
            int h0 = p * d.stride - d.pad, w0 = q * d.stride - d.pad;
            size_t xn = (size_t)n * x.H * x.W * x.ld + c;
#pragma unroll
            for (int r = 0; r < K; r++) {
                int h = h0 + r;
                if (h < 0 || h >= d.H) continue;
#pragma unroll
                for (int t = 0; t < K; t++) {
                    int ww = w0 + t;
                    if (ww >= 0 && ww < d.W) acc[r * K + t] += g * map_get(x, xn + ((size_t)h * x.W + ww) * x.ld);
                }
            }
            q += DW_TILE_M;                     // next pixel of this lane: carry q into p into n
            while (q >= d.Q) { q -= d.Q; if (++p == d.P) { p = 0; n++; } }
        }
    }
#pragma unroll
    for (int j = 0; j < T; j++) sacc[j][threadIdx.y][threadIdx.x] = acc[j];
    __syncthreads();
    if (c >= d.C) return;
    for (int j = threadIdx.y; j < T; j += DW_TILE_M) {
        double s = 0.0;
        for (int l = 0; l < DW_TILE_M; l++) s += sacc[j][l][threadIdx.x];
        part[((size_t)blockIdx.y * d.C + c) * T + j] = s;
    }
}

__global__ void dwconv_dw_combine_kernel(DwDims d, const double *part, int parts, float *dw, float *db) {
    pdl_entry();
    int slots = d.k * d.k + 1;
    GRID_STRIDE(i, (size_t)d.C * slots) {
        int c = (int)(i / slots), tap = (int)(i % slots);
        double s = 0.0;
#pragma unroll 8
        for (int g = 0; g < parts; g++) s += part[((size_t)g * d.C + c) * slots + tap];   // loads batched
        if (tap < slots - 1) { if (dw) dw[(size_t)c * (slots - 1) + tap] += (float)s; }
        else if (db) db[c] += (float)s;
    }
}

// ---- launchers -----------------------------------------------------------------------------

// An element kernel's launch with k and stride fixed where they are 3 or 5 and 1 or 2 (the model's
// depthwise convs), else read from d; 32-bit indices when the map allows them.
#define DW_LAUNCH(kernel, n, ...)                                                                    \
    do {                                                                                             \
        unsigned blocks_ = blocks_for(n);                                                            \
        int small_ = (n) < (1u << 31), code_ = d->k * 10 + d->stride;                                \
        if (small_ && code_ == 31) kernel<3, 1, unsigned><<<blocks_, THREADS, 0, dev->stream>>>(__VA_ARGS__); \
        else if (small_ && code_ == 32) kernel<3, 2, unsigned><<<blocks_, THREADS, 0, dev->stream>>>(__VA_ARGS__); \
        else if (small_ && code_ == 51) kernel<5, 1, unsigned><<<blocks_, THREADS, 0, dev->stream>>>(__VA_ARGS__); \
        else if (small_ && code_ == 52) kernel<5, 2, unsigned><<<blocks_, THREADS, 0, dev->stream>>>(__VA_ARGS__); \
        else if (small_) kernel<0, 0, unsigned><<<blocks_, THREADS, 0, dev->stream>>>(__VA_ARGS__);  \
        else kernel<0, 0, size_t><<<blocks_, THREADS, 0, dev->stream>>>(__VA_ARGS__);                \
    } while (0)

// Four channels a thread where k is 3 or 5, stride 1 or 2, the channels and pixel strides multiples
// of 4 and the maps 16-byte aligned (every depthwise conv of YOLO26), fewer than 2^31 elements
// (four bf16 channels are 8 bytes, aligned by the same rules).
static bool dw_vec4(const DwDims *d, Map a, Map b) {
    bool ks = (d->k == 3 || d->k == 5) && (d->stride == 1 || d->stride == 2);
    return ks && d->C % 4 == 0 && a.ld % 4 == 0 && b.ld % 4 == 0 && (uintptr_t)a.data % 16 == 0 &&
           (uintptr_t)b.data % 16 == 0 && map_floats(a) < (1u << 31) && map_floats(b) < (1u << 31);
}

static const float *dw_transposed(Device *dev, const DwDims *d, const float *w) {
    float *wt = (float *)scratch_take(dev, sizeof(float) * d->C * d->k * d->k);
    dw_transpose_kernel<<<blocks_for((size_t)d->C * d->k * d->k), THREADS, 0, dev->stream>>>(w, d->C, d->k * d->k, wt);
    checkLaunch(dev);
    return wt;
}

#define DW_LAUNCH4(kernel, n, ...)                                                                   \
    do {                                                                                             \
        unsigned blocks_ = blocks_for((n) / 4);                                                      \
        switch (d->k * 10 + d->stride) {                                                             \
        case 31: kernel<3, 1><<<blocks_, THREADS, 0, dev->stream>>>(__VA_ARGS__); break;             \
        case 32: kernel<3, 2><<<blocks_, THREADS, 0, dev->stream>>>(__VA_ARGS__); break;             \
        case 51: kernel<5, 1><<<blocks_, THREADS, 0, dev->stream>>>(__VA_ARGS__); break;             \
        default: kernel<5, 2><<<blocks_, THREADS, 0, dev->stream>>>(__VA_ARGS__); break;             \
        }                                                                                            \
    } while (0)

extern "C" void dwconv_forward_gpu(Device *dev, const DwDims *d, Map x, const float *w, const float *b, Map y) {
    dw_check_gpu(d, x, y, "dwconv_forward_gpu");
    if (dw_vec4(d, x, y)) {
        size_t mark = dev->scratch.used;
        const float *wt = dw_transposed(dev, d, w);
        DW_LAUNCH4(dwconv_fwd4_kernel, map_floats(y), *d, x, wt, b, y);
        dev->scratch.used = mark;
    } else {
        DW_LAUNCH(dwconv_fwd_kernel, map_floats(y), *d, x, w, b, y);
    }
    checkLaunch(dev);
}

extern "C" void dwconv_backward_gpu(Device *dev, const DwDims *d, Map x, const float *w, Map dy, Map dx,
                                    float *dw, float *db) {
    dw_check_gpu(d, x, dy, "dwconv_backward_gpu");
    require_fp32(dy, "dwconv_backward_gpu (dy)");
    if (dx.data) {
        dw_check_gpu(d, dx, dy, "dwconv_backward_gpu (dx)");
        require_fp32(dx, "dwconv_backward_gpu (dx)");
        if (dw_vec4(d, dx, dy)) {
            size_t mark = dev->scratch.used;
            const float *wt = dw_transposed(dev, d, w);
            DW_LAUNCH4(dwconv_dx4_kernel, map_floats(dx), *d, wt, dy, dx);
            dev->scratch.used = mark;
        } else {
            DW_LAUNCH(dwconv_dx_kernel, map_floats(dx), *d, w, dy, dx);
        }
        checkLaunch(dev);
    }
    if (!dw && !db) return;
    size_t mark = dev->scratch.used;
    int parts = dw_parts(dw_pixels(d));
    double *part = (double *)scratch_take(dev, sizeof(double) * parts * d->C * (d->k * d->k + 1));
    unsigned ctiles = (d->C + DW_TILE_C - 1) / DW_TILE_C;
    dim3 block(DW_TILE_C, DW_TILE_M);
    if (d->k == 3)
        dwconv_dw_taps_kernel<3><<<dim3(ctiles, parts), block, 0, dev->stream>>>(*d, x, dy, parts, part);
    else if (d->k == 5)
        dwconv_dw_taps_kernel<5><<<dim3(ctiles, parts), block, 0, dev->stream>>>(*d, x, dy, parts, part);
    else
        dwconv_dw_partial_kernel<<<dim3(ctiles, d->k * d->k, parts), block, 0, dev->stream>>>(*d, x, dy, parts,
                                                                                              part);
    checkLaunch(dev);
    dwconv_dw_combine_kernel<<<blocks_for((size_t)d->C * (d->k * d->k + 1)), THREADS, 0, dev->stream>>>(
        *d, part, parts, dw, db);
    checkLaunch(dev);
    dev->scratch.used = mark;
}
