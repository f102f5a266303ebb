// multi.h: data parallelism over the devices of one process (core/README.md). A worker
// thread per device runs forward, assignment and backward on its micro-batch; the loss is
// normalised by the target-score sum of the whole batch. reduce=device0: gradients are summed on
// device 0, which clips, steps SGD and updates the EMA, and sends the new weights (and the BN running
// statistics averaged over the devices) back. reduce=sharded: each device sums, clips, steps and
// averages its own shard of the flat state, then every device gathers the others' shards.
// loss_on=device0: the head outputs go to device 0, which computes the loss of the whole batch.
// The devices order their work with events; a step's one host wait is at its end (with copies
// staged through host memory, each copy waits too). One device: not used (the trainer steps alone).
#pragma once
#include <stdio.h>

#include "cfg/devices.h"   // DeviceList, parse_devices
#include "core/devices/split.h"   // the split planning
#include "core/trainer/trainer.h"

typedef struct Multi Multi;

// Start replicas of `master` (already on devs->gpu[0] or the CPU) on the other devices, for
// micro-batches of up to `micro` images, and their worker threads; attaches to master->multi (and
// sets master->release to multi_free, so trainer_free(master) frees them first).
// Reads cfg's [parallel] keys (reduce, loss_on, split) and prints the plan (micro-batches,
// shards, peer access or host-staged copies). Returns 0, or -1 with err.
int  multi_init(Trainer *master, const Config *cfg, const DeviceList *devs, int micro, Err *err);
void multi_free(Trainer *master);
// One iteration over the devices (trainer_step_batch, core/train/step.c, calls it when master->multi is
// set) on n images: images_u8 bytes when set, else images floats (host memory; both NULL: each device's
// share is still where the last step put it, as benchmarks time it), with target rows (img, cls, cx, cy, w, h). i == 0
// zeroes every device's gradients first (train.py zeroes them at each epoch start). Returns 0, or -1
// with err naming the device that failed; every worker is then idle again (no thread is left waiting).
int  multi_step(Multi *mt, const float *images, const uint8_t *images_u8, int n, int S, const float *targets, int nt,
                int epoch, int i, LossOut *out, Err *err);
// Its first half on the master's batch (master->input_u8, else master->input): every device's
// forward, loss and backward, then the gradients summed: into the master's (reduce=device0, the BN
// statistics averaged too) or into each shard's owner (reduce=sharded: read them with
// multi_gather_state). No update, no broadcast.
int  multi_forward_backward(Multi *mt, int n, int S, const float *targets, int nt, LossOut *out, Err *err);

// reduce=sharded keeps gradients, momentum and EMA in shards. Before reading the master's
// m.grad, ema, sgd.buf or sgd.steps (validation, trainer_save, checkpoint_save) call
// multi_gather_state; after writing them (checkpoint_load) call multi_scatter_state, which also
// gives every replica the master's weights (in either mode). No-ops where nothing is sharded.
void multi_gather_state(Multi *mt);
void multi_scatter_state(Multi *mt);

// Copies between devices go through host memory from now on: the fallback multi_init takes when
// the peer-to-peer self-test fails (tests force it to check that path).
void multi_use_host_copies(Multi *mt);
int  multi_host_copies(const Multi *mt);   // 1 when they do (the fallback taken or forced)

// Start the upload of the next batch (n uint8 images of H x W x 3, page-locked: gpu_host_pin) while
// the current step computes: with several devices each GPU its share under the split the next step
// will use, on one GPU (t->multi NULL) the whole batch, on CPU devices nothing. The step that then
// runs with t->input_u8 == images waits for these copies on the GPUs, not on the host. The bytes
// must stay unchanged until that step has returned.
void multi_prefetch(Trainer *t, const uint8_t *images, int n, int H, int W);
// augment=gpu: the same for a batch of n samples made on the devices (io/loader.h's Batch.aug): each GPU
// queues the copy of its share's tiles from the loader's page-locked tile arena; unchanged until that step.
void multi_prefetch_aug(Trainer *t, const AugSample *s, int n);
// The shares of a batch of n images that the next step will scatter: share[k] is device k's trainer, its first
// image and its count (0: none). Returns how many devices (one device, t->multi NULL: t with all n), or 0 when no
// split fits (the step reports it). Call it on the thread that runs the steps, between them: split=auto changes the
// split at a step's end. train.c's Prefetcher hands each share to a thread of its device.
typedef struct { Trainer *dev; int first, count; } MultiShare;
int  multi_shares(Trainer *t, int n, MultiShare share[MULTI_MAX]);
// 1 when every device of t decodes JPEG files itself (Backend.dev.decodes_jpeg: a GPU with nvJPEG), else 0.
int  multi_decodes_jpeg(Trainer *t);

// Device k's trainer (0: the master).
const Trainer *multi_replica(const Multi *mt, int k);
Trainer *multi_replica_mut(Multi *mt, int k);
// reduce=device0 sends the gradients to device 0 in buckets of about `floats` (0: the default, 2M
// floats) as backward finishes them; between steps only. multi_bucket_count: how many (0 when sharded).
void multi_set_bucket_floats(Multi *mt, size_t floats);
int  multi_bucket_count(const Multi *mt);   // the same, to borrow the replica's model (validation)
// The micro-batch sizes of the last step, per device (for the start-up plan and logs).
const int *multi_sizes(const Multi *mt);
int multi_count(const Multi *mt);
// The floats of the flat state device k owns under reduce=sharded: [*lo, *hi). Whole state for
// reduce=device0 on device 0, empty on the others.
void multi_shard(const Multi *mt, int k, size_t *lo, size_t *hi);

// ---- per-device timing ------------------------------------------------------------------------
typedef struct {             // one device, summed over the steps since the last reset (seconds)
    double forward, loss, backward, gather, update, broadcast;   // busy
    double idle;             // waiting at a barrier for the other devices (or the host)
    double mem_bytes, peak_bytes;   // GPU memory in use (whole GPU, from the driver); -1 on the CPU
    int    steps, images;
} MultiDevStats;

const MultiDevStats *multi_stats(const Multi *mt, int k);
void multi_reset_stats(Multi *mt);
// One line per device on stdout (micro-batch, ms per step per phase, idle, memory) and, when csv is
// not NULL, one row per device appended to it (a header first when it is empty); then a reset.
// The trainer calls it at each epoch end with the run folder's devices.csv.
void multi_epoch_report(Multi *mt, FILE *csv, int epoch);

// ---- failure injection (tests) -------------------------------------------------------------------
// Called by every worker before each of its phases (phase: a short name such as "forward"); a
// non-zero return fails that device's phase as an error from the device would.
typedef int (*MultiFailHook)(int device, const char *phase, void *arg);
void multi_set_fail_hook(Multi *mt, MultiFailHook hook, void *arg);
