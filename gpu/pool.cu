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

// In floor mode every window ends inside the padded input, so count_include_pad divides by k*k.
template <int V, typename Pix>
__global__ void avgpool_fwd_kernel(size_t M, Map x, Window win, Map y) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= y.C) return;
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

extern "C" size_t maxpool_workspace_bytes_gpu(Map y) { return sizeof(int) * map_floats(y) + 256; }

extern "C" void maxpool_forward_gpu(Device *dev, Map x, int k, int stride, int pad, Map y) {
    Window win = { k, stride, pad };
    pool_check(x, win, y, "maxpool_forward_gpu");
    ChannelGrid g = pool_grid(x, y);
    CHANNEL_KERNEL(g, maxpool_fwd_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, x, win, y);
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
    CHANNEL_KERNEL(g, avgpool_fwd_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, x, win, y);
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
