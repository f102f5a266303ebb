// input.cu: the model's input from a uint8 batch: the bytes are copied to the GPU (a quarter of the
// float bytes) and divided by 255 there, as loader_batch_to_float does on the host.
#include "gpu/kernel_util.h"

__global__ void u8_to_float_kernel(const uint8_t *src, size_t n, float *dst) {
    GRID_STRIDE(i, n) dst[i] = __fdiv_rn((float)src[i], 255.0f);   // correctly rounded, as the CPU's x / 255.0f
}

extern "C" void upload_u8_gpu(Device *dev, float *dst, const uint8_t *src, size_t n) {
    size_t mark = dev->scratch.used;
    uint8_t *staged = (uint8_t *)scratch_take(dev, n ? n : 1);
    checkCuda(cudaMemcpyAsync(staged, src, n, cudaMemcpyHostToDevice, dev->stream));
    u8_to_float_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(staged, n, dst);
    checkLaunch(dev);
    checkCuda(cudaStreamSynchronize(dev->stream));   // src may be reused by the caller at once
    dev->scratch.used = mark;
}
