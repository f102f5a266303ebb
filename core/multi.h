// multi.h: data parallelism over the devices of one process (DESIGN.md sections 1-2). A worker
// thread per device runs forward, assignment and backward on its micro-batch; the loss is
// normalised by the target-score sum of the whole batch; gradients are summed on device 0, which
// clips, steps SGD and updates the EMA; the new weights, and the BN running statistics averaged over
// the devices, go back to every replica. One device: not used (the trainer steps alone).
#pragma once
#include "core/train.h"

#define MULTI_MAX 16

typedef struct DeviceList { // the devices of a run
    int n;
    int gpu[MULTI_MAX];      // GPU ids, or -1 for CPU devices (device=cpu:N)
} DeviceList;

// Parse device=: "" (every GPU, else the CPU), "cpu", "cpu:N", "0", "0,1", "[0, 1]", "(0,1)".
// Unknown, repeated or absent ids are errors listing the GPUs found. n_gpus: GPUs visible.
int parse_devices(const char *spec, int n_gpus, DeviceList *out, Err *err);

// Micro-batch sizes for a batch of B images on n devices: "even" splits as torch.chunk (chunks of
// ceil(B/n), the last smaller, trailing devices may get none), "w0,w1,..." in proportion to the
// weights. Returns 0, or -1 with err for a split that leaves no image for device 0.
int split_batch(const char *split, int B, int n, int *sizes, Err *err);

typedef struct Multi Multi;

// Start replicas of `master` (already on devs->gpu[0] or the CPU) on the other devices, for
// micro-batches of up to `micro` images, and their worker threads; attaches to master->multi.
// Returns 0, or -1 with err.
int  multi_init(Trainer *master, const Config *cfg, const DeviceList *devs, int micro, Err *err);
void multi_free(Trainer *master);
// One iteration over the devices (trainer_step calls it when master->multi is set). The batch is
// in master->input (n images) with target rows (img, cls, cx, cy, w, h).
int  multi_step(Multi *mt, int n, int S, const float *targets, int nt, int epoch, int i, LossOut *out, Err *err);
// Its first half: every device's forward, loss and backward, the gradients summed into the master's
// (and the BN statistics averaged); no update, no broadcast. The equivalence test stops here.
int  multi_forward_backward(Multi *mt, int n, int S, const float *targets, int nt, LossOut *out, Err *err);
// Device k's trainer (0: the master).
const Trainer *multi_replica(const Multi *mt, int k);
// The micro-batch sizes of the last step, per device (for the start-up plan and logs).
const int *multi_sizes(const Multi *mt);
