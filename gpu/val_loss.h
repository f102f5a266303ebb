// val_loss.h: validation losses on a GPU (gpu/val_loss.c): the head maps of a batch, forwarded in
// chunks, gathered on the device, then gpu/loss.h's loss without gradients. Includable from C.
#pragma once
#include "core/loss.h"
#include "gpu/device.h"

typedef struct ValLossGpu ValLossGpu;

// Work for batches of up to max_n images, max_targets target rows, nc classes, A anchors; NULL when
// the GPU lacks the memory.
ValLossGpu *val_loss_gpu_new(Device *dev, int max_n, int max_targets, int nc, int A);
void        val_loss_gpu_free(ValLossGpu *v);
// Whether v holds work for those sizes (a kept one can be reused).
int         val_loss_gpu_fits(const ValLossGpu *v, int max_n, int max_targets, int nc, int A);
// Copy the images of a chunk (head[l].N of them; device maps, fp32) to images n0.. of a batch of N.
void        val_loss_gpu_stage(Device *dev, ValLossGpu *v, const Map head[LOSS_LEVELS], int n0, int N);
// The loss items of the staged batch (b: classes, input size and targets; its maps are ignored).
int         val_loss_gpu_eval(Device *dev, ValLossGpu *v, const LossBatch *b, LossOut *out, Err *err);
