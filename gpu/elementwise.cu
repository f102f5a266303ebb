// elementwise.cu: SiLU, add, copy, accumulate and zero over NHWC maps with a pixel stride (ld),
// the CUDA twins of core/spec/elementwise.c. Outputs are written (=) except accumulate (+=).
// Maps may be bf16-stored (tensor.h); arithmetic is fp32. Legend: N batch, H,W size, C channels,
// ld pixel stride, M = N*H*W pixels, V channels per thread.
#include "gpu/kernel_util.h"

// ---- kernels -------------------------------------------------------------------------------
// Channel launches (kernel_util.h): a thread owns V consecutive channels and strides over pixels.

// PyTorch's formula, as the CPU twin: large negative u gives exp = inf and y = -0, no NaN.
template <int V, typename Pix>
__global__ void silu_fwd_kernel(size_t M, Map u, Map y) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= u.C) return;
    Vec<V> us[PIXEL_BATCH];
    pixel_batches<PIXEL_BATCH, Pix>(M, [&](Pix p, int i) { us[i] = map_vget<V>(u, pixel_off(u, p, c)); }, [&](Pix p, int i) {
        Vec<V> a = us[i];
        for (int k = 0; k < V; k++) a.v[k] = a.v[k] / (1.0f + expf(-a.v[k]));
        map_vput<V>(y, pixel_off(y, p, c), a);
    });
}

// silu'(u) = s·(1 + u·(1 - s)) with s = sigmoid(u)
template <int V, typename Pix>
__global__ void silu_bwd_kernel(size_t M, Map u, Map dy, Map du) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= u.C) return;
    PIXEL_LOOP(Pix, p, M) {
        Vec<V> a = map_vget<V>(u, pixel_off(u, p, c));
        Vec<V> d = map_vget<V>(dy, pixel_off(dy, p, c));   // dy: fp32, or a bf16-stored gradient
        for (int k = 0; k < V; k++) {
            float s = 1.0f / (1.0f + expf(-a.v[k]));
            d.v[k] = d.v[k] * s * (1.0f + a.v[k] * (1.0f - s));
        }
        vec_store<V>(du.data + pixel_off(du, p, c), d);
    }
}

template <int V, typename Pix>
__global__ void add_kernel(size_t M, Map a, Map b, Map y) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= a.C) return;
    Vec<V> xs[PIXEL_BATCH], zs[PIXEL_BATCH];
    auto load = [&](Pix p, int i) {
        xs[i] = map_vget<V>(a, pixel_off(a, p, c)), zs[i] = map_vget<V>(b, pixel_off(b, p, c));
    };
    pixel_batches<PIXEL_BATCH, Pix>(M, load, [&](Pix p, int i) {
        Vec<V> x = xs[i];
        for (int k = 0; k < V; k++) x.v[k] = x.v[k] + zs[i].v[k];
        map_vput<V>(y, pixel_off(y, p, c), x);
    });
}

template <int V, typename Pix>
__global__ void copy_kernel(size_t M, Map src, Map dst) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= src.C) return;
    PIXEL_LOOP(Pix, p, M)
        map_vput<V>(dst, pixel_off(dst, p, c), map_vget<V>(src, pixel_off(src, p, c)));
}

template <int V, typename Pix>
__global__ void accumulate_kernel(size_t M, Map src, Map dst) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= src.C) return;
    PIXEL_LOOP(Pix, p, M) {
        size_t o = pixel_off(dst, p, c);
        Vec<V> x = map_vget<V>(dst, o), s = map_vget<V>(src, pixel_off(src, p, c));
        for (int k = 0; k < V; k++) x.v[k] = x.v[k] + s.v[k];
        map_vput<V>(dst, o, x);
    }
}

template <int V, typename Pix>
__global__ void zero_kernel(size_t M, Map m) {
    pdl_entry();
    int c = vec_channel<V>();
    if (c >= m.C) return;
    Vec<V> zero;
    for (int k = 0; k < V; k++) zero.v[k] = 0.0f;
    PIXEL_LOOP(Pix, p, M) map_vput<V>(m, pixel_off(m, p, c), zero);
}

// ---- launchers -----------------------------------------------------------------------------

// The grid of a launch over the maps' shape (m[0]'s) with the widest V all of them allow.
static ChannelGrid ew_grid(const Map *m, int n) {
    int v = 4;
    for (int i = 0; i < n; i++) v = min_int(v, map_vec_width(m[i]));
    return channel_grid(m[0].C, map_pixels(m[0]), v);
}

extern "C" void silu_forward_gpu(Device *dev, Map u, Map y) {
    same_shape_gpu(u, y, "silu_forward_gpu");
    Map m[] = { u, y };
    ChannelGrid g = ew_grid(m, 2);
    CHANNEL_KERNEL(g, silu_fwd_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, u, y);
    checkLaunch(dev);
}

extern "C" void silu_backward_gpu(Device *dev, Map u, Map dy, Map du) {
    same_shape_gpu(u, dy, "silu_backward_gpu");
    same_shape_gpu(u, du, "silu_backward_gpu");
    require_fp32(du, "silu_backward_gpu");
    require_fp32_in_place(du, dy, "silu_backward_gpu");
    Map m[] = { u, dy, du };
    ChannelGrid g = ew_grid(m, 3);
    CHANNEL_KERNEL(g, silu_bwd_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, u, dy, du);
    checkLaunch(dev);
}

extern "C" void add_forward_gpu(Device *dev, Map a, Map b, Map y) {
    same_shape_gpu(a, b, "add_forward_gpu");
    same_shape_gpu(a, y, "add_forward_gpu");
    Map m[] = { a, b, y };
    ChannelGrid g = ew_grid(m, 3);
    CHANNEL_KERNEL(g, add_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, a, b, y);
    checkLaunch(dev);
}

extern "C" void copy_map_gpu(Device *dev, Map src, Map dst) {
    same_shape_gpu(src, dst, "copy_map_gpu");
    Map m[] = { src, dst };
    ChannelGrid g = ew_grid(m, 2);
    CHANNEL_KERNEL(g, copy_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, src, dst);
    checkLaunch(dev);
}

extern "C" void accumulate_map_gpu(Device *dev, Map src, Map dst) {
    same_shape_gpu(src, dst, "accumulate_map_gpu");
    Map m[] = { src, dst };
    ChannelGrid g = ew_grid(m, 2);
    CHANNEL_KERNEL(g, accumulate_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, src, dst);
    checkLaunch(dev);
}

extern "C" void zero_map_gpu(Device *dev, Map m) {
    ChannelGrid g = ew_grid(&m, 1);
    CHANNEL_KERNEL(g, zero_kernel)<<<g.grid, g.block, 0, dev->stream>>>(g.M, m);
    checkLaunch(dev);
}
