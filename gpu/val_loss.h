// val_loss.h: validation losses on a GPU (gpu/val_loss.c): the head maps of a batch, forwarded in
// chunks, gathered on the device, then gpu/loss.h's loss (DFL heads) or gpu/loss26.h's (YOLO26's
// one-to-one heads, end2end) without gradients. Includable from C.
#pragma once
#include "core/spec/loss.h"
#include "core/spec/loss26.h"
#include "gpu/device.h"

typedef struct ValLossGpu ValLossGpu;

// Work for batches of up to max_n images, max_targets target rows, nc classes, A anchors, of DFL heads
// (4 * 16 + nc channels) or, end2end, YOLO26's (4 + nc); NULL when the GPU lacks the memory.
ValLossGpu *val_loss_gpu_new(Device *dev, int max_n, int max_targets, int nc, int A, int end2end);
void        val_loss_gpu_free(ValLossGpu *v);
// Whether v holds work for those sizes (a kept one can be reused).
int         val_loss_gpu_fits(const ValLossGpu *v, int max_n, int max_targets, int nc, int A, int end2end);
// Copy the images of a chunk (head[l].N of them; device maps, fp32) to images n0.. of a batch of N.
void        val_loss_gpu_stage(Device *dev, ValLossGpu *v, const Map head[LOSS_LEVELS], int n0, int N);
// The loss items of the staged batch (b: classes, input size and targets; its maps are ignored).
int         val_loss_gpu_eval(Device *dev, ValLossGpu *v, const LossBatch *b, LossOut *out, Err *err);
// YOLO26: loss26_forward_backward's items over the staged batch, its maps in both branches (b: classes,
// input size and targets; its maps are ignored), weights wt.
int         val_loss_gpu_eval26(Device *dev, ValLossGpu *v, const Loss26Batch *b, const Loss26Weights *wt,
                                Loss26Out *out, Err *err);
