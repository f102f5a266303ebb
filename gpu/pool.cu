// pool.cu: max pool, average pool (count_include_pad, floor mode) and nearest upsampling, the CUDA
// twins of core/spec/pool.c. Forward writes (=); backward adds (+=) and is a gather: one thread per dx
// element sums its windows in the CPU twin's scan order, so results are deterministic and equal
// to the CPU's. Forward maps may be bf16-stored (tensor.h); gradients are fp32. Legend: N batch, C channels, H,W in, P,Q out, k kernel, f upsampling factor.
#include <math.h>

#include "gpu/kernel_util.h"

struct Window { int k, stride, pad; };

// The output size is fixed when the model is built, so a mismatch is a bug in the caller.
static void pool_check(Map x, Window win, Map y, const char *who) {
    int P = (x.H + 2 * win.pad - win.k) / win.stride + 1;
    int Q = (x.W + 2 * win.pad - win.k) / win.stride + 1;
    if (win.stride < 1 || win.k < 1 || win.pad < 0 || y.N != x.N || y.C != x.C || y.H != P ||
        y.W != Q)
        die("%s: %dx%dx%dx%d, k %d stride %d pad %d cannot give %dx%dx%dx%d", who, x.N, x.H, x.W,
            x.C, win.k, win.stride, win.pad, y.N, y.H, y.W, y.C);
}

// (n, h, w, c) of element i of map m
struct Pos { int n, h, w, c; };
__device__ static Pos pos_of(Map m, size_t i) {
    Pos p;
    p.c = (int)(i % m.C);
    size_t px = i / m.C;
    p.w = (int)(px % m.W);
    p.h = (int)(px / m.W % m.H);
    p.n = (int)(px / ((size_t)m.W * m.H));
    return p;
}

// (n, h, w) of pixel p of map m in a channel launch (kernel_util.h); c is left 0
template <typename Pix> __device__ static Pos pixel_pos(Map m, Pix p) {
    Pos o;
    o.c = 0;
    o.w = (int)(p % (unsigned)m.W);
    Pix t = p / (unsigned)m.W;
    o.h = (int)(t % (unsigned)m.H);
    o.n = (int)(t / (unsigned)m.H);
    return o;
}

__device__ static inline size_t off_at(Map m, int n, int h, int w, int c) {
    return (((size_t)n * m.H + h) * m.W + w) * m.ld + c;
}
__device__ static inline float *at(Map m, int n, int h, int w, int c) { return m.data + off_at(m, n, h, w, c); }
__device__ static inline float get_at(Map m, int n, int h, int w, int c) { return map_get(m, off_at(m, n, h, w, c)); }

// Output rows p whose window (p*stride - pad .. + k-1) covers input row h: [*lo, *hi).
__device__ static void covering(int h, Window win, int P, int *lo, int *hi) {
    int a = h + win.pad - win.k + 1;
    *lo = a <= 0 ? 0 : (a + win.stride - 1) / win.stride;
    int b = (h + win.pad) / win.stride + 1;
    *hi = b < P ? b : P;
}

// PyTorch's rule, as the CPU twin: NaN takes over; otherwise only a strictly larger value does.
__device__ static inline bool beats(float v, float best) { return v > best || isnan(v); }

// ---- kernels -------------------------------------------------------------------------------

// The forward kernels are channel launches (kernel_util.h): a thread owns V channels of y's pixels.
template <int V, typename Pix>
__global__ void maxpool_fwd_kernel(size_t M, Map x, Window win, Map y) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= y.C) return;
    PIXEL_LOOP(Pix, p, M) {
        Pos o = pixel_pos(y, p);
        Vec<V> best;
        for (int j = 0; j < V; j++) best.v[j] = -INFINITY;   // padding never wins
        for (int r = 0; r < win.k; r++) {
            int h = o.h * win.stride - win.pad + r;
            if (h < 0 || h >= x.H) continue;
            for (int s = 0; s < win.k; s++) {
                int w = o.w * win.stride - win.pad + s;
                if (w < 0 || w >= x.W) continue;
                Vec<V> v = map_vget<V>(x, off_at(x, o.n, h, w, c));
                for (int j = 0; j < V; j++)
                    if (beats(v.v[j], best.v[j])) best.v[j] = v.v[j];
            }
        }
        map_vput<V>(y, pixel_off(y, p, c), best);
    }
}

// Flat input position (h*W + w) of the first maximum of window (p, q), as maxpool_route scans.
__device__ static int window_argmax(Map x, Window win, int n, int p, int q, int c) {
    float best = -INFINITY;
    int arg = -1;
    for (int r = 0; r < win.k; r++) {
        int h = p * win.stride - win.pad + r;
        if (h < 0 || h >= x.H) continue;
        for (int s = 0; s < win.k; s++) {
            int w = q * win.stride - win.pad + s;
            if (w < 0 || w >= x.W) continue;
            float v = get_at(x, n, h, w, c);
            if (arg < 0 || beats(v, best)) { best = v; arg = h * x.W + w; }
        }
    }
    return arg;
}

// arg[i] = window_argmax of output element i (dy's (n, p, q, c) order, packed)
__global__ void maxpool_argmax_kernel(Map x, Window win, Map dy, int *arg) {
    pdl_entry();
    GRID_STRIDE(i, map_n(dy)) {
        Pos o = pos_of(dy, i);
        arg[i] = window_argmax(x, win, o.n, o.h, o.w, o.c);
    }
}

// dx(n,h,w,c) += dy of every window (in p, q order) whose first maximum is (h, w), read from the
// argmax of each window computed once (a window is scanned once, not once per element it covers)
__global__ void maxpool_bwd_kernel(Map x, Window win, Map dy, const int *arg, Map dx) {
    pdl_entry();
    GRID_STRIDE(i, map_n(dx)) {
        Pos e = pos_of(dx, i);
        int p0, p1, q0, q1;
        covering(e.h, win, dy.H, &p0, &p1);
        covering(e.w, win, dy.W, &q0, &q1);
        float acc = *map_elem(dx, i);
        int self = e.h * x.W + e.w;
        for (int p = p0; p < p1; p++)
            for (int q = q0; q < q1; q++)
                if (arg[(((size_t)e.n * dy.H + p) * dy.W + q) * dy.C + e.c] == self)
                    acc += *at(dy, e.n, p, q, e.c);
        *map_elem(dx, i) = acc;
    }
}

// ---- max pool by tiles ----------------------------------------------------------------------
// A block owns POOL_CC channels of one image and a band of rows: it copies the input rows its
// windows read into shared memory, folds each input row over a window's columns (s order), then
// folds those row results over the window's rows (r order). Folding a scan in consecutive parts and
// then folding the parts' results with the same rule gives the scan's own result (the first maximum,
// or the last NaN), so values and argmaxes equal the CPU twin's row-major scan; each input is read
// once from memory and each window's maximum costs 2k compares, not k².
enum { POOL_CC = 8, POOL_SMEM = 48 * 1024, POOL_NONE = 255 };   // POOL_CC: a uint2 of bytes, two float4s

// rows [h0, h0 + rows) of x, channels [c0, c0 + POOL_CC), into xs[row][w][POOL_CC] (absent channels 0);
// a thread's loads go out 4 at a time
template <int V>
__device__ static void pool_load_rows(Map x, int n, int c0, int h0, int rows, float *xs) {
    const int G = POOL_CC / V, B = 4;
    int items = rows * x.W * G;
    for (int i0 = threadIdx.x; i0 < items; i0 += B * blockDim.x) {
        Vec<V> v[B];
#pragma unroll
        for (int u = 0; u < B; u++) {
            int i = i0 + u * blockDim.x, g = i % G, t = i / G, c = c0 + g * V;
            if (i < items && c < x.C) v[u] = map_vget<V>(x, off_at(x, n, h0 + t / x.W, t % x.W, c));
            else
                for (int j = 0; j < V; j++) v[u].v[j] = 0.0f;
        }
#pragma unroll
        for (int u = 0; u < B; u++) {
            int i = i0 + u * blockDim.x, g = i % G, t = i / G;
            if (i < items)
                for (int j = 0; j < V; j++) xs[t * POOL_CC + g * V + j] = v[u].v[j];
        }
    }
}

// POOL_CC floats of shared memory at p (16-byte aligned), read or written as float4s
struct Chans { float v[POOL_CC]; };
__device__ static inline Chans chans_load(const float *p) {
    Chans a;
#pragma unroll
    for (int j = 0; j < POOL_CC; j += 4) {
        float4 f = *(const float4 *)(p + j);
        a.v[j] = f.x, a.v[j + 1] = f.y, a.v[j + 2] = f.z, a.v[j + 3] = f.w;
    }
    return a;
}
__device__ static inline void chans_store(float *p, const Chans &a) {
#pragma unroll
    for (int j = 0; j < POOL_CC; j += 4) *(float4 *)(p + j) = make_float4(a.v[j], a.v[j + 1], a.v[j + 2], a.v[j + 3]);
}

// POOL_CC bytes packed in order (the first in the low byte)
__device__ static inline uint2 bytes_pack(const unsigned char *b) {
    uint2 u = make_uint2(0, 0);
#pragma unroll
    for (int j = 0; j < 4; j++) u.x |= (unsigned)b[j] << 8 * j, u.y |= (unsigned)b[j + 4] << 8 * j;
    return u;
}

// y rows [pa, pb) of image blockIdx.z, channels from blockIdx.x * POOL_CC; band output rows a block.
// After the copy a thread handles a pixel's POOL_CC channels; y is written VY channels at a time.
template <int V, int VY>
__global__ void maxpool_tile_fwd_kernel(Map x, Window win, Map y, int band) {
    pdl_entry();
    extern __shared__ __align__(16) float pool_smem[];
    int n = blockIdx.z, c0 = blockIdx.x * POOL_CC, Q = y.W;
    int pa = blockIdx.y * band, pb = min(pa + band, y.H);
    int ha = max(pa * win.stride - win.pad, 0), hb = min((pb - 1) * win.stride - win.pad + win.k, x.H);
    int rows = max(hb - ha, 0);
    float *xs = pool_smem, *hv = pool_smem + (size_t)rows * x.W * POOL_CC;   // [rows][W][CC], [rows][Q][CC]
    pool_load_rows<V>(x, n, c0, ha, rows, xs);
    __syncthreads();
    for (int t = threadIdx.x; t < rows * Q; t += blockDim.x) {
        int q = t % Q, r = t / Q;
        const float *row = xs + (size_t)r * x.W * POOL_CC;
        Chans best;
#pragma unroll
        for (int j = 0; j < POOL_CC; j++) best.v[j] = -INFINITY;   // padding never wins
        for (int s = 0; s < win.k; s++) {
            int w = q * win.stride - win.pad + s;
            if (w < 0 || w >= x.W) continue;
            Chans v = chans_load(row + w * POOL_CC);
#pragma unroll
            for (int j = 0; j < POOL_CC; j++)
                if (beats(v.v[j], best.v[j])) best.v[j] = v.v[j];
        }
        chans_store(hv + (size_t)t * POOL_CC, best);
    }
    __syncthreads();
    int nc = min(POOL_CC, y.C - c0);
    for (int t = threadIdx.x; t < (pb - pa) * Q; t += blockDim.x) {
        int q = t % Q, p = pa + t / Q;
        Chans best;
#pragma unroll
        for (int j = 0; j < POOL_CC; j++) best.v[j] = -INFINITY;
        for (int r = 0; r < win.k; r++) {
            int h = p * win.stride - win.pad + r;
            if (h < 0 || h >= x.H) continue;
            Chans v = chans_load(hv + ((size_t)(h - ha) * Q + q) * POOL_CC);
#pragma unroll
            for (int j = 0; j < POOL_CC; j++)
                if (beats(v.v[j], best.v[j])) best.v[j] = v.v[j];
        }
        size_t o = off_at(y, n, p, q, c0);
#pragma unroll
        for (int j = 0; j < POOL_CC; j += VY)
            if (j < nc) {
                Vec<VY> v;
#pragma unroll
                for (int i = 0; i < VY; i++) v.v[i] = best.v[j + i];
                map_vput<VY>(y, o + j, v);
            }
    }
}

// the first nc (<= POOL_CC) of POOL_CC fp32 values at p read into a, or written from it, VD at a time
// (p and nc multiples of VD)
template <int VD> __device__ static inline void vec_rw(float *p, float *a, int nc, bool store) {
#pragma unroll
    for (int j = 0; j < POOL_CC; j += VD)
        if (j < nc) {
            if (store) {
                Vec<VD> v;
#pragma unroll
                for (int i = 0; i < VD; i++) v.v[i] = a[j + i];
                vec_store<VD>(p + j, v);
            } else {
                Vec<VD> v = vec_load<VD>(p + j);
#pragma unroll
                for (int i = 0; i < VD; i++) a[j + i] = v.v[i];
            }
        }
}

// dx rows [h0, h1) of image blockIdx.z, channels from blockIdx.x * POOL_CC: the argmax of every window
// covering them (as maxpool_route scans: the first valid tap, then beats), kept as r·k + s in shared
// memory, then the gather of maxpool_bwd_kernel. A row's fold keeps only its s (its value is read back
// from the copied rows). Needs k² < POOL_NONE.
template <int V, int VD>
__global__ void maxpool_tile_bwd_kernel(Map x, Window win, Map dy, Map dx, int band) {
    pdl_entry();
    extern __shared__ __align__(16) float pool_smem[];
    int n = blockIdx.z, c0 = blockIdx.x * POOL_CC, Q = dy.W, k = win.k, st = win.stride;
    int h0 = blockIdx.y * band, h1 = min(h0 + band, x.H), plo, phi, unused;
    covering(h0, win, dy.H, &plo, &unused);
    covering(h1 - 1, win, dy.H, &unused, &phi);
    if (phi <= plo) return;   // no window covers these rows (the same for the whole block)
    int ha = max(plo * st - win.pad, 0), hb = min((phi - 1) * st - win.pad + k, x.H);
    int rows = max(hb - ha, 0), wins = phi - plo;
    float *xs = pool_smem;                                                    // [rows][W][CC]
    unsigned char *hs = (unsigned char *)(xs + (size_t)rows * x.W * POOL_CC);   // [rows][Q][CC]: a row's s
    unsigned char *am = hs + (size_t)rows * Q * POOL_CC;                      // [wins][Q][CC]: r·k + s
    pool_load_rows<V>(x, n, c0, ha, rows, xs);
    __syncthreads();
    for (int t = threadIdx.x; t < rows * Q; t += blockDim.x) {
        int q = t % Q, r = t / Q;
        const float *row = xs + (size_t)r * x.W * POOL_CC;
        Chans best;
        unsigned char arg[POOL_CC];
#pragma unroll
        for (int j = 0; j < POOL_CC; j++) best.v[j] = -INFINITY, arg[j] = POOL_NONE;
        for (int s = 0; s < k; s++) {
            int w = q * st - win.pad + s;
            if (w < 0 || w >= x.W) continue;
            Chans v = chans_load(row + w * POOL_CC);
#pragma unroll
            for (int j = 0; j < POOL_CC; j++)
                if (arg[j] == POOL_NONE || beats(v.v[j], best.v[j])) best.v[j] = v.v[j], arg[j] = (unsigned char)s;
        }
        *(uint2 *)(hs + (size_t)t * POOL_CC) = bytes_pack(arg);
    }
    __syncthreads();
    for (int t = threadIdx.x; t < wins * Q; t += blockDim.x) {
        int q = t % Q, p = plo + t / Q;
        Chans best;
        unsigned char arg[POOL_CC];
#pragma unroll
        for (int j = 0; j < POOL_CC; j++) best.v[j] = -INFINITY, arg[j] = POOL_NONE;
        for (int r = 0; r < k; r++) {
            int h = p * st - win.pad + r;
            if (h < 0 || h >= x.H) continue;
            uint2 sb = *(const uint2 *)(hs + ((size_t)(h - ha) * Q + q) * POOL_CC);
            const float *row = xs + (size_t)(h - ha) * x.W * POOL_CC;
            int w0 = q * st - win.pad;
#pragma unroll
            for (int j = 0; j < POOL_CC; j++) {
                unsigned sj = ((j < 4 ? sb.x : sb.y) >> 8 * (j & 3)) & 0xff;
                if (sj == POOL_NONE) continue;
                float v = row[(w0 + (int)sj) * POOL_CC + j];   // the row's maximum, read back at its column
                if (arg[j] == POOL_NONE || beats(v, best.v[j])) best.v[j] = v, arg[j] = (unsigned char)(r * k + sj);
            }
        }
        *(uint2 *)(am + (size_t)t * POOL_CC) = bytes_pack(arg);
    }
    __syncthreads();
    // a thread gathers a pixel's POOL_CC channels: the windows' argmax codes of all of them are compared
    // with the pixel's own code at once, and a window adds only to the channels whose argmax it is
    for (int t = threadIdx.x; t < (h1 - h0) * x.W; t += blockDim.x) {
        int w = t % x.W, h = h0 + t / x.W, p0, p1, q0, q1;
        covering(h, win, dy.H, &p0, &p1);
        covering(w, win, dy.W, &q0, &q1);
        int nc = min(POOL_CC, x.C - c0);
        float acc[POOL_CC];
        float *o = at(dx, n, h, w, c0);
        vec_rw<VD>(o, acc, nc, false);
        for (int p = p0; p < p1; p++)
            for (int q = q0; q < q1; q++) {
                unsigned self = (unsigned)((h - p * st + win.pad) * k + w - q * st + win.pad) * 0x01010101u;
                uint2 a = *(const uint2 *)(am + ((size_t)(p - plo) * Q + q) * POOL_CC);
                unsigned lo = __vcmpeq4(a.x, self), hi = __vcmpeq4(a.y, self);
                if (!(lo | hi)) continue;
                const float *g = at(dy, n, p, q, c0);
#pragma unroll
                for (int j = 0; j < POOL_CC; j++)
                    if (j < nc && ((j < 4 ? lo >> 8 * j : hi >> 8 * (j - 4)) & 1)) acc[j] += g[j];
            }
        vec_rw<VD>(o, acc, nc, true);
    }
}

// In floor mode every window ends inside the padded input, so count_include_pad divides by k*k.
// K > 0: the kernel size known at compile time (win.k == K), so a batch of pixels' taps are loaded
// before any is added (loads in flight together); K == 0: any k, one tap at a time. Both add a
// window's taps in (r, s) order from 0, skipping those in the padding.
template <int V, typename Pix, int K>
__global__ void avgpool_fwd_kernel(size_t M, Map x, Window win, Map y) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= y.C) return;
    if constexpr (K > 0) {
        constexpr int PB = K <= 2 ? 2 : 1;
        Vec<V> tap[PB][K * K];
        unsigned valid[PB];
        auto load = [&](Pix p, int i) {
            Pos o = pixel_pos(y, p);
            unsigned m = 0;
#pragma unroll
            for (int r = 0; r < K; r++)
#pragma unroll
                for (int s = 0; s < K; s++) {
                    int h = o.h * win.stride - win.pad + r, w = o.w * win.stride - win.pad + s;
                    if (h >= 0 && h < x.H && w >= 0 && w < x.W) {
                        tap[i][r * K + s] = map_vget<V>(x, off_at(x, o.n, h, w, c));
                        m |= 1u << (r * K + s);
                    } else {
                        for (int j = 0; j < V; j++) tap[i][r * K + s].v[j] = 0.0f;
                    }
                }
            valid[i] = m;
        };
        pixel_batches<PB, Pix>(M, load, [&](Pix p, int i) {
            Vec<V> sum;
            for (int j = 0; j < V; j++) sum.v[j] = 0.0f;
#pragma unroll
            for (int t = 0; t < K * K; t++)
                if (valid[i] >> t & 1)
                    for (int j = 0; j < V; j++) sum.v[j] += tap[i][t].v[j];
            for (int j = 0; j < V; j++) sum.v[j] = sum.v[j] / (float)(K * K);
            map_vput<V>(y, pixel_off(y, p, c), sum);
        });
    } else {
        PIXEL_LOOP(Pix, p, M) {
            Pos o = pixel_pos(y, p);
            Vec<V> sum;
            for (int j = 0; j < V; j++) sum.v[j] = 0.0f;
            for (int r = 0; r < win.k; r++) {
                int h = o.h * win.stride - win.pad + r;
                if (h < 0 || h >= x.H) continue;
                for (int s = 0; s < win.k; s++) {
                    int w = o.w * win.stride - win.pad + s;
                    if (w < 0 || w >= x.W) continue;
                    Vec<V> v = map_vget<V>(x, off_at(x, o.n, h, w, c));
                    for (int j = 0; j < V; j++) sum.v[j] += v.v[j];
                }
            }
            for (int j = 0; j < V; j++) sum.v[j] = sum.v[j] / (float)(win.k * win.k);
            map_vput<V>(y, pixel_off(y, p, c), sum);
        }
    }
}

// dx(n, h, w) += Σ dy(n, p, q) / k² over the windows covering (h, w), in the CPU twin's order;
// a channel launch over dx's pixels (V channels a thread, no 64-bit index division)
template <int V, typename Pix>
__global__ void avgpool_bwd_kernel(size_t M, Window win, Map dy, Map dx) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= dx.C) return;
    float area = (float)(win.k * win.k);
    PIXEL_LOOP(Pix, i, M) {
        Pos e = pixel_pos(dx, i);
        int p0, p1, q0, q1;
        covering(e.h, win, dy.H, &p0, &p1);
        covering(e.w, win, dy.W, &q0, &q1);
        size_t o = pixel_off(dx, i, c);
        Vec<V> acc = vec_load<V>(dx.data + o);
        for (int p = p0; p < p1; p++)
            for (int q = q0; q < q1; q++) {
                Vec<V> g = vec_load<V>(dy.data + off_at(dy, e.n, p, q, c));
                for (int j = 0; j < V; j++) acc.v[j] += g.v[j] / area;
            }
        vec_store<V>(dx.data + o, acc);
    }
}

// y(n, h, w) = x(n, h / f, w / f)
template <int V, typename Pix>
__global__ void upsample_fwd_kernel(size_t M, Map x, int f, Map y) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= y.C) return;
    PIXEL_LOOP(Pix, p, M) {
        Pos o = pixel_pos(y, p);
        map_vput<V>(y, pixel_off(y, p, c), map_vget<V>(x, off_at(x, o.n, o.h / f, o.w / f, c)));
    }
}

// dx(n, h, w) += Σ dy(n, h·f + a, w·f + b) over a, b < f, in the CPU twin's order; a channel
// launch over dx's pixels
template <int V, typename Pix>
__global__ void upsample_bwd_kernel(size_t M, int f, Map dy, Map dx) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= dx.C) return;
    PIXEL_LOOP(Pix, i, M) {
        Pos e = pixel_pos(dx, i);
        size_t o = pixel_off(dx, i, c);
        Vec<V> acc = vec_load<V>(dx.data + o);
        for (int a = 0; a < f; a++)
            for (int b = 0; b < f; b++) {
                Vec<V> g = vec_load<V>(dy.data + off_at(dy, e.n, e.h * f + a, e.w * f + b, c));
                for (int j = 0; j < V; j++) acc.v[j] += g.v[j];
            }
        vec_store<V>(dx.data + o, acc);
    }
}

// ---- launchers -----------------------------------------------------------------------------

// The grid of a forward kernel: over y's pixels, with the widest V both maps allow.
static ChannelGrid pool_grid(Map x, Map y) {
    return channel_grid(y.C, map_pixels(y), min_int(map_vec_width(x), map_vec_width(y)));
}

// Shared memory of a tile block (maxpool_tile_*_kernel) owning `band` rows: of y (forward: the rows
// copied, fp32, and their row folds) or of dx (backward: the rows copied, their folds' s and the
// windows' argmax codes, bytes; the windows then span at most (band + k - 2) / stride + 1 rows of y).
static size_t pool_tile_bytes(Map x, Window win, Map y, int backward, int band) {
    int wins = backward ? (band + win.k - 2) / win.stride + 1 : band;
    if (wins > y.H) wins = y.H;
    int rows = (wins - 1) * win.stride + win.k;
    if (rows > x.H) rows = x.H;
    size_t pix = (size_t)rows * x.W, hpix = (size_t)rows * y.W;
    if (backward) return POOL_CC * (sizeof(float) * pix + hpix + (size_t)wins * y.W);
    return POOL_CC * sizeof(float) * (pix + hpix);
}

// The rows a tile block owns: the most within POOL_SMEM, halved while the launch has fewer than
// FILL_BLOCKS / 2 blocks (small maps: more blocks, each reading a larger share of halo rows); 0 where
// the tile kernels do not apply (the per-element kernels then run): a window's argmax must fit r·k + s
// in a byte.
static int pool_band(Map x, Window win, Map y, int backward) {
    if (win.k * win.k >= POOL_NONE || win.pad >= win.k) return 0;
    int total = backward ? x.H : y.H, band = total;
    while (band > 0 && pool_tile_bytes(x, win, y, backward, band) > POOL_SMEM) band--;
    size_t tiles = (size_t)x.N * ((x.C + POOL_CC - 1) / POOL_CC);
    while (band > 1 && tiles * ((total + band - 1) / band) < FILL_BLOCKS / 2) band = (band + 1) / 2;
    return band;
}

// kernel<V, V2> of a tile kernel for the vector widths of its input (V) and of what it writes (V2)
#define TILE_KERNEL(kernel, V, V2) \
    ((V) == 4 ? TILE_KERNEL_(kernel, 4, V2) : (V) == 2 ? TILE_KERNEL_(kernel, 2, V2) : TILE_KERNEL_(kernel, 1, V2))
#define TILE_KERNEL_(kernel, V, V2) \
    ((V2) == 4 ? kernel<V, 4> : (V2) == 2 ? kernel<V, 2> : kernel<V, 1>)

extern "C" size_t maxpool_workspace_bytes_gpu(Map y) { return sizeof(int) * map_floats(y) + 256; }

extern "C" void maxpool_forward_gpu(Device *dev, Map x, int k, int stride, int pad, Map y) {
    Window win = { k, stride, pad };
    pool_check(x, win, y, "maxpool_forward_gpu");
    int band = pool_band(x, win, y, 0);
    if (band) {
        size_t smem = pool_tile_bytes(x, win, y, 0, band);
        dim3 grid((unsigned)((x.C + POOL_CC - 1) / POOL_CC), (unsigned)((y.H + band - 1) / band), (unsigned)x.N);
        TILE_KERNEL(maxpool_tile_fwd_kernel, map_vec_width(x), map_vec_width(y))
            <<<grid, THREADS, smem, dev->stream>>>(x, win, y, band);
    } else {
        ChannelGrid g = pool_grid(x, y);
        CHANNEL_KERNEL(g, maxpool_fwd_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, x, win, y);
    }
    checkLaunch(dev);
}

extern "C" void maxpool_backward_gpu(Device *dev, Map x, int k, int stride, int pad, Map dy,
                                     Map dx) {
    Window win = { k, stride, pad };
    pool_check(x, win, dy, "maxpool_backward_gpu");
    if (!dx.data) return;
    require_fp32(dy, "maxpool_backward_gpu");
    require_fp32(dx, "maxpool_backward_gpu");
    same_shape_gpu(x, dx, "maxpool_backward_gpu");
    int band = pool_band(x, win, dy, 1);
    if (band) {
        size_t smem = pool_tile_bytes(x, win, dy, 1, band);
        dim3 grid((unsigned)((x.C + POOL_CC - 1) / POOL_CC), (unsigned)((x.H + band - 1) / band), (unsigned)x.N);
        TILE_KERNEL(maxpool_tile_bwd_kernel, map_vec_width(x), min_int(map_vec_width(dy), map_vec_width(dx)))
            <<<grid, THREADS, smem, dev->stream>>>(x, win, dy, dx, band);
        checkLaunch(dev);
        return;
    }
    size_t mark = dev->scratch.used;
    int *arg = (int *)scratch_take(dev, maxpool_workspace_bytes_gpu(dy));
    maxpool_argmax_kernel<<<blocks_for(map_floats(dy)), THREADS, 0, dev->stream>>>(x, win, dy, arg);
    checkLaunch(dev);
    maxpool_bwd_kernel<<<blocks_for(map_floats(dx)), THREADS, 0, dev->stream>>>(x, win, dy, arg, dx);
    checkLaunch(dev);
    dev->scratch.used = mark;
}

extern "C" void avgpool_forward_gpu(Device *dev, Map x, int k, int stride, int pad, Map y) {
    Window win = { k, stride, pad };
    pool_check(x, win, y, "avgpool_forward_gpu");
    ChannelGrid g = pool_grid(x, y);
    if (k == 2) CHANNEL_KERNEL(g, avgpool_fwd_kernel, 2)<<<g.grid, g.block, 0, dev->stream>>>(g.M, x, win, y);
    else if (k == 3) CHANNEL_KERNEL(g, avgpool_fwd_kernel, 3)<<<g.grid, g.block, 0, dev->stream>>>(g.M, x, win, y);
    else CHANNEL_KERNEL(g, avgpool_fwd_kernel, 0)<<<g.grid, g.block, 0, dev->stream>>>(g.M, x, win, y);
    checkLaunch(dev);
}

extern "C" void avgpool_backward_gpu(Device *dev, int k, int stride, int pad, Map dy, Map dx) {
    Window win = { k, stride, pad };
    pool_check(dx, win, dy, "avgpool_backward_gpu");
    if (!dx.data) return;
    require_fp32(dy, "avgpool_backward_gpu");
    require_fp32(dx, "avgpool_backward_gpu");
    ChannelGrid g = channel_grid(dx.C, map_pixels(dx), min_int(map_vec_width(dx), map_vec_width(dy)));
    CHANNEL_KERNEL(g, avgpool_bwd_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, win, dy, dx);
    checkLaunch(dev);
}

static void upsample_check(Map x, int factor, Map y, const char *who) {
    if (factor < 1 || y.N != x.N || y.C != x.C || y.H != x.H * factor || y.W != x.W * factor)
        die("%s: %dx%dx%dx%d upsampled by %d cannot give %dx%dx%dx%d", who, x.N, x.H, x.W, x.C,
            factor, y.N, y.H, y.W, y.C);
}

extern "C" void upsample_forward_gpu(Device *dev, Map x, int factor, Map y) {
    upsample_check(x, factor, y, "upsample_forward_gpu");
    ChannelGrid g = pool_grid(x, y);
    CHANNEL_KERNEL(g, upsample_fwd_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, x, factor, y);
    checkLaunch(dev);
}

extern "C" void upsample_backward_gpu(Device *dev, int factor, Map dy, Map dx) {
    upsample_check(dx, factor, dy, "upsample_backward_gpu");
    if (!dx.data) return;
    require_fp32(dy, "upsample_backward_gpu");
    require_fp32(dx, "upsample_backward_gpu");
    ChannelGrid g = channel_grid(dx.C, map_pixels(dx), min_int(map_vec_width(dx), map_vec_width(dy)));
    CHANNEL_KERNEL(g, upsample_bwd_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, factor, dy, dx);
    checkLaunch(dev);
}
