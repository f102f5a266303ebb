// elementwise.cu: SiLU, add, copy, accumulate and zero over NHWC maps with a pixel stride (ld),
// the CUDA twins of core/elementwise.c. Outputs are written (=) except accumulate (+=).
// Maps may be bf16-stored (tensor.h); arithmetic is fp32. One thread per element; legend: N batch, H,W size, C channels, ld pixel stride.
#include "gpu/kernel_util.h"

// ---- kernels -------------------------------------------------------------------------------

// PyTorch's formula, as the CPU twin: large negative u gives exp = inf and y = -0, no NaN.
__global__ void silu_fwd_kernel(Map u, Map y) {
    GRID_STRIDE(i, map_n(u)) {
        float a = map_get(u, map_off(u, i));
        map_put(y, map_off(y, i), a / (1.0f + expf(-a)));
    }
}

// silu'(u) = s·(1 + u·(1 - s)) with s = sigmoid(u)
__global__ void silu_bwd_kernel(Map u, Map dy, Map du) {
    GRID_STRIDE(i, map_n(u)) {
        float a = map_get(u, map_off(u, i)), s = 1.0f / (1.0f + expf(-a));
        *map_elem(du, i) = *map_elem(dy, i) * s * (1.0f + a * (1.0f - s));
    }
}

__global__ void add_kernel(Map a, Map b, Map y) {
    GRID_STRIDE(i, map_n(a)) map_put(y, map_off(y, i), map_get(a, map_off(a, i)) + map_get(b, map_off(b, i)));
}

__global__ void copy_kernel(Map src, Map dst) {
    GRID_STRIDE(i, map_n(src)) map_put(dst, map_off(dst, i), map_get(src, map_off(src, i)));
}

__global__ void accumulate_kernel(Map src, Map dst) {
    GRID_STRIDE(i, map_n(src)) {
        size_t o = map_off(dst, i);
        map_put(dst, o, map_get(dst, o) + map_get(src, map_off(src, i)));
    }
}

__global__ void zero_kernel(Map m) {
    GRID_STRIDE(i, map_n(m)) map_put(m, map_off(m, i), 0.0f);
}

// ---- launchers -----------------------------------------------------------------------------

extern "C" void silu_forward_gpu(Device *dev, Map u, Map y) {
    same_shape_gpu(u, y, "silu_forward_gpu");
    silu_fwd_kernel<<<blocks_for(map_floats(u)), THREADS, 0, dev->stream>>>(u, y);
    checkLaunch(dev);
}

extern "C" void silu_backward_gpu(Device *dev, Map u, Map dy, Map du) {
    same_shape_gpu(u, dy, "silu_backward_gpu");
    same_shape_gpu(u, du, "silu_backward_gpu");
    require_fp32(dy, "silu_backward_gpu");
    require_fp32(du, "silu_backward_gpu");
    silu_bwd_kernel<<<blocks_for(map_floats(u)), THREADS, 0, dev->stream>>>(u, dy, du);
    checkLaunch(dev);
}

extern "C" void add_forward_gpu(Device *dev, Map a, Map b, Map y) {
    same_shape_gpu(a, b, "add_forward_gpu");
    same_shape_gpu(a, y, "add_forward_gpu");
    add_kernel<<<blocks_for(map_floats(a)), THREADS, 0, dev->stream>>>(a, b, y);
    checkLaunch(dev);
}

extern "C" void copy_map_gpu(Device *dev, Map src, Map dst) {
    same_shape_gpu(src, dst, "copy_map_gpu");
    copy_kernel<<<blocks_for(map_floats(src)), THREADS, 0, dev->stream>>>(src, dst);
    checkLaunch(dev);
}

extern "C" void accumulate_map_gpu(Device *dev, Map src, Map dst) {
    same_shape_gpu(src, dst, "accumulate_map_gpu");
    accumulate_kernel<<<blocks_for(map_floats(src)), THREADS, 0, dev->stream>>>(src, dst);
    checkLaunch(dev);
}

extern "C" void zero_map_gpu(Device *dev, Map m) {
    zero_kernel<<<blocks_for(map_floats(m)), THREADS, 0, dev->stream>>>(m);
    checkLaunch(dev);
}
