// input.cu: the model's input from a uint8 batch: the bytes go to the GPU (a quarter of the float
// bytes) and are divided by 255 there, as loader_batch_to_float does on the host. A share queued
// ahead by device_prefetch_u8 is only waited for, on the GPU; any other is copied here and waited
// for on the host (the caller may reuse its memory at once).
// Legend: n bytes = floats of the input (N,S,S,3).
#include "gpu/kernel_util.h"

__global__ void u8_to_float_kernel(const uint8_t *src, size_t n, float *dst) {
    pdl_entry();
    GRID_STRIDE(i, n) dst[i] = __fdiv_rn((float)src[i], 255.0f);   // correctly rounded, as the CPU's x / 255.0f
}

// dst = stage's bytes / 255 on dev->stream; then the stage is free for the prefetch after next
static void convert_stage(Device *dev, InputStage *s, float *dst, size_t n) {
    u8_to_float_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(s->buf, n, dst);
    checkLaunch(dev);
    checkCuda(cudaEventRecord(s->used, dev->stream));
    s->host = NULL;
}

// Not prefetched: copy now through the stage the next prefetch would fill (a stale copy into it may
// still run: wait for it on the GPU), or through scratch when the plan gave no input arena.
static void upload_now(Device *dev, float *dst, const uint8_t *src, size_t n) {
    InputStage *s = &dev->stage[dev->stage_next];
    if (s->buf && n <= s->cap) {
        checkCuda(cudaStreamWaitEvent(dev->stream, s->copied, 0));
        checkCuda(cudaMemcpyAsync(s->buf, src, n, cudaMemcpyHostToDevice, dev->stream));
        convert_stage(dev, s, dst, n);
    } else {
        size_t mark = dev->scratch.used;
        uint8_t *staged = (uint8_t *)scratch_take(dev, n ? n : 1);
        checkCuda(cudaMemcpyAsync(staged, src, n, cudaMemcpyHostToDevice, dev->stream));
        u8_to_float_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(staged, n, dst);
        checkLaunch(dev);
        dev->scratch.used = mark;
    }
    device_sync(dev);   // src may be reused by the caller at once
}

extern "C" void upload_u8_gpu(Device *dev, float *dst, const uint8_t *src, size_t n) {
    for (int k = 0; k < 2; k++) {
        InputStage *s = &dev->stage[k];
        if (!n || s->host != src || s->n != n) continue;
        checkCuda(cudaStreamWaitEvent(dev->stream, s->copied, 0));   // on the GPU: the host goes on
        convert_stage(dev, s, dst, n);
        return;
    }
    upload_now(dev, dst, src, n);
}
