// loss26.h (gpu): the CUDA twin of core/spec/loss26.h, the YOLO26 end-to-end loss of both branches. Same
// semantics in every respect (both assigners, the small-object rule, tie rule, normalisation, items,
// ProgLoss weights from the caller); Map data are device memory, targets stay a host array (uploaded
// into the work's own buffer). Includable from C.
// Legend: N batch, A anchors (P3, P4, P5, each row-major), G targets, nc classes.
#pragma once
#include "gpu/device.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "core/spec/loss26.h"   // inside: the CPU twin (and core/base/util.h) keep C linkage in a .cu

#ifdef USE_CUDA
// GpuLoss26Work: both branches' assignments and every buffer the two phases use, sized once for at
// most max_n images, max_targets target rows, nc classes and max_anchors anchors per image (8400 at
// 640), so a training step allocates nothing (one cudaMalloc, pinned staging). NULL when the GPU lacks
// the memory.
typedef struct GpuLoss26Work GpuLoss26Work;
GpuLoss26Work *loss26_work_new_gpu(Device *dev, int max_n, int max_targets, int nc, int max_anchors);
void           loss26_work_free_gpu(GpuLoss26Work *w);

// loss26_assign on the GPU, queued: target rows checked on the host first with the CPU twin's
// messages (-1 also when the batch exceeds the work's sizes); branch b's sum of target scores goes to
// *tss_dst[b] (a double in dev's memory; tss_dst or an entry NULL: nowhere), no wait.
int loss26_assign_gpu_async(Device *dev, GpuLoss26Work *w, const Loss26Batch *b,
                            double *const tss_dst[L26_BRANCHES], Err *err);
// The same with tss_local[b] on the host (one device-to-host wait).
int loss26_assign_gpu(Device *dev, GpuLoss26Work *w, const Loss26Batch *b, double tss_local[L26_BRANCHES],
                      Err *err);

// loss26_compute on the GPU for the last assignment, queued, branch b normalised by *norm[b] (a double
// in dev's memory): grad[br] (device maps shaped as b->head[br]; NULL skips that branch's gradient;
// grad itself may be NULL) receives d total / d outputs (=), every element of channels [0, C), pads
// untouched. The sums behind the items go to pinned memory on the way: loss26_items_gpu reads them
// once the stream passed (after the step's wait), with the same weights and batch_mult. Dies if b is
// not the batch shape of the last assignment (a bug in the caller).
void loss26_compute_gpu_async(Device *dev, GpuLoss26Work *w, const Loss26Batch *b, const Loss26Weights *wt,
                              const double *const norm[L26_BRANCHES], double batch_mult,
                              const Head26 *grad[L26_BRANCHES]);
void loss26_items_gpu(const GpuLoss26Work *w, const Loss26Weights *wt, double batch_mult, Loss26Out *out);
// The same with host normalisers, waiting for the items (tests).
void loss26_compute_gpu(Device *dev, GpuLoss26Work *w, const Loss26Batch *b, const Loss26Weights *wt,
                        const double tss_norm[L26_BRANCHES], double batch_mult,
                        const Head26 *grad[L26_BRANCHES], Loss26Out *out);

// For tests: after loss26_assign_gpu, per (n, a) of branch br the target row or -1 and its score
// (score may be NULL), as loss26_target reads them. Waits for the device.
void loss26_targets_gpu(Device *dev, const GpuLoss26Work *w, int br, int *row, double *score);
#endif

#ifdef __cplusplus
}
#endif
