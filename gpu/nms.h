// nms.h: the DFL decode, candidate filter and NMS of core/spec/nms.h as CUDA kernels (gpu/nms.cu), for whole
// batches of head maps on the device: the detections are nms_decode + nms_run's, detection for
// detection, and only they (<= max_det per image) come back to the host. Legend: N images, A anchors,
// nc classes.
#pragma once
#include "core/spec/nms.h"
#include "gpu/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct NmsGpu NmsGpu;

// Work for up to max_n images of A anchors and nc classes under options o (device memory and pinned
// host buffers, allocated here, counted by gpu_alloc_count). NULL when the GPU lacks the memory or o cannot run on the
// device (max_nms above 48K, where the kernel's per-candidate flags would not fit in shared memory; more
// than 256 images or 2^24 pairs an image, what the sort keys hold): the caller decodes on the host.
NmsGpu *nms_gpu_new(Device *dev, int max_n, int A, int nc, const NmsOptions *o);
void    nms_gpu_free(NmsGpu *w);
// Whether w holds work for max_n images of A anchors, nc classes under o (a kept one can be reused, with
// o set by nms_gpu_set_options).
int     nms_gpu_fits(const NmsGpu *w, int max_n, int A, int nc, const NmsOptions *o);
void    nms_gpu_set_options(NmsGpu *w, const NmsOptions *o);
// Images 0..n-1 of the fp32 head maps head[0..2] (device memory, (N, H_l, W_l, 64 + nc) with a pixel
// stride; strides[l] pixels per cell): image i's detections into out[i * o->max_det ...] (host memory),
// best first, their count into nd[i]. Waits for the device.
void    nms_gpu_detect(Device *dev, NmsGpu *w, const Map head[3], const int strides[3], int n, Det *out, int *nd);

#ifdef __cplusplus
}
#endif
