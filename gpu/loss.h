// loss.h (gpu): the CUDA twin of core/spec/loss.h, the YOLOv9 detection loss. Same semantics in every
// respect (assigner, conflict rule, tie rule, normalisation, items); Map data are device memory,
// targets stay a host array (uploaded into the work's own buffer). Includable from C.
// Legend: N batch, A anchors (P3, P4, P5, each row-major), G targets, nc classes, R = 16 DFL bins.
#pragma once
#include "core/spec/loss.h"
#include "gpu/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef USE_CUDA
// GpuLossWork: the assignment on the device and every buffer the two phases use, sized once for
// at most max_n images, max_targets target rows and max_anchors anchors per image (8400 at 640),
// so a training step allocates nothing. nc is the class count the batches will have.
typedef struct GpuLossWork GpuLossWork;
// One device allocation (and pinned host staging). NULL when the GPU lacks the memory.
GpuLossWork *loss_work_new_gpu(Device *dev, int max_n, int max_targets, int nc, int max_anchors);
void         loss_work_free_gpu(GpuLossWork *w);

// loss_assign_gpu_async: loss_assign on the GPU, queued. The target rows are checked on the host
// first, with the CPU twin's messages; -1 also when the batch exceeds the sizes of loss_work_new_gpu.
// The local sum of target scores goes to *tss_dst (a double in dev's memory; NULL: nowhere), no wait.
int loss_assign_gpu_async(Device *dev, GpuLossWork *w, const LossBatch *b, double *tss_dst, Err *err);
// loss_assign_gpu: the same, and *tss_local on the host (one device-to-host wait).
int loss_assign_gpu(Device *dev, GpuLossWork *w, const LossBatch *b, double *tss_local, Err *err);

// loss_compute_gpu_async: loss_compute on the GPU for the last assignment, queued, normalised by
// *norm (a double in dev's memory: max(tss, 1) over every device's share). grad (device maps shaped
// as b->head, may be NULL) receives d total / d head (=), every channel. The sums behind the items
// are copied to pinned memory on the way: loss_items_gpu reads them once the stream passed the copy
// (after the step's one wait).
void loss_compute_gpu_async(Device *dev, GpuLossWork *w, const LossBatch *b, const double *norm,
                            double batch_mult, Map grad[LOSS_LEVELS]);
void loss_items_gpu(const GpuLossWork *w, double batch_mult, LossOut *out);
// loss_compute_gpu: the same with a host normaliser, waiting for the items (tests, loss_on=device0).
void loss_compute_gpu(Device *dev, GpuLossWork *w, const LossBatch *b, double tss_norm,
                      double batch_mult, Map grad[LOSS_LEVELS], LossOut *out);

// loss_forward_backward_gpu: loss_assign_gpu, then loss_compute_gpu with max(tss, 1) and N.
int loss_forward_backward_gpu(Device *dev, GpuLossWork *w, const LossBatch *b,
                              Map grad[LOSS_LEVELS], LossOut *out, Err *err);

// loss_targets_gpu: after loss_assign_gpu, for every (n, a) the target row (index into b->targets)
// or -1 (row, N*A ints) and the target score (score, N*A doubles, may be NULL), as loss_target
// reads them one by one. Waits for the device; for tests and inspection, not the step loop.
void loss_targets_gpu(Device *dev, const GpuLossWork *w, int *row, double *score);
#endif

#ifdef __cplusplus
}
#endif
