// topk26.h: YOLO26's NMS-free top-k (core/spec/topk26.h: topk26_decode + topk26_select) as CUDA kernels
// (gpu/topk26.cu) for whole batches of one-to-one head maps on the device: the detections are the CPU
// reference's, detection for detection, and only they (<= max_det per image) come back to the host.
// Legend: N images, A anchors, nc classes, k = min(max_det, A).
#pragma once
#include "gpu/device.h"    // first: it declares core/base/util.h's functions extern "C"
#include "core/spec/nms.h"
#include "core/spec/topk26.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Topk26Gpu Topk26Gpu;

// Work for up to max_n images of up to A anchors, nc classes and max_det detections (device memory and
// pinned host buffers, allocated here, counted by gpu_alloc_count). NULL when the GPU has no room: the
// caller decodes on the host.
Topk26Gpu *topk26_gpu_new(Device *dev, int max_n, int A, int nc, int max_det);
void       topk26_gpu_free(Topk26Gpu *w);
// Whether w holds work for max_n images of A anchors, nc classes and max_det (a kept one can be reused).
int        topk26_gpu_fits(const Topk26Gpu *w, int max_n, int A, int nc, int max_det);
// Images 0..n-1 of the fp32 head maps head[0..2] (device memory, (N, H_l, W_l, 4 + nc) with a pixel
// stride: 4 box distances in cells, then nc class logits) of an input img_h pixels high: image i's
// detections into out[i * o->max_det ...] (host memory), best first, their count into nd[i]. Waits for
// the device.
void       topk26_gpu_detect(Device *dev, Topk26Gpu *w, const Map head[3], int img_h, int n, const Topk26Opts *o,
                             Det *out, int *nd);

#ifdef __cplusplus
}
#endif
