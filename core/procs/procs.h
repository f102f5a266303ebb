// procs.h: a run of several processes (core/procs/comm.h) at the level of the trainer: the processes agree
// on the configuration, the dataset and the seed; the global batch is split over every device of every
// process; the step's normaliser, the BN running statistics, the gradients (when the optimizer steps)
// and the logged loss items are summed across processes. The equivalence rule of core/devices/multi.h extends:
// P processes x M devices give the gradients of one device accumulating the same micro-batches, in every
// reduce mode. With one process (comm_size() == 1) nothing here is called.
#pragma once
#include <stdint.h>

#include "core/procs/comm.h"
#include "core/trainer/trainer.h"
#include "io/dataset.h"

int  procs_active(void);          // comm_size() > 1, or forced
// Tests: take the several-process path with this process alone (a communicator of one; on GPUs NCCL's),
// which must give one process's results bit for bit.
void procs_force(int on);
int  procs_writer(void);          // rank 0: the process that writes the run's files

// Agreement at start: rank 0's configuration (config_print's text) against this rank's, key by key
// (device= and workers= may differ per host); the dataset's image count and a hash of its list of
// file names; the number of devices of each process (kept for procs_share); the kind of devices
// (on_gpus: 1 GPUs, 0 CPU devices), the same in every process, as the gradient sums go through NCCL
// between GPUs and through MPI between CPUs (a mix would wait forever in different collectives).
// Every rank gets the same answer: 0, or -1 with err naming the ranks, hosts and keys that differ.
int  procs_agree(const Config *cfg, int n_images, uint64_t list_hash, int n_devices, int on_gpus, Err *err);
// FNV-1a of the names (the last path component) of the dataset's images, in order
uint64_t procs_hash_names(const Dataset *ds);
// The run's start (core/train/train.c): join the processes when a launcher started this one (comm_init),
// agree (procs_agree; on_gpus: this process trains on GPUs), say the plan. 0, or -1 with err.
int  procs_join(const Config *cfg, const Dataset *ds, int n_devices, int on_gpus, Err *err);
// Any rank's flag set: every rank's answer 1 (the run's stop requests, so every rank stops at the same step).
int  procs_any(int flag);
// A run folder's process count: RUN/processes.txt, written by rank 0 at the start of a run of several
// processes (procs_note_count);
// procs_check_count refuses a resume under another count (a missing file: one process).
void procs_note_count(const char *dir);
int  procs_check_count(const char *dir, Err *err);
// The total devices of every process, and this process's share of a batch of B images: the batch is
// split as torch.chunk over every device of every process, in rank order; a process gets its devices'.
int  procs_devices_total(void);
void procs_share(int B, int *first, int *n);
// LoaderConfig.share: this process's share of a batch of B images, as procs_share.
int  procs_loader_share(int B, int *first, void *arg);

// The step's normaliser: the local target-score sums (main head, auxiliary head) of n_local images
// into the sums over every process (rank order), returned in global; the function returns the batch's
// image count over every process (the loss's batch_mult).
int  procs_normaliser(const double local[2], int n_local, double global[2]);
// The same without a host wait, when t's backend carries doubles between the processes (Backend.comm.comm_sum_pairs:
// NCCL): the local sums are n_pairs pairs at `pairs` (t's memory, added in pair order), their sum over every
// process (rank order: procs_normaliser's doubles) is queued into dst (t's memory), and only the image
// counts go through the host. Returns the batch over every process, or -1 (nothing done) when the backend
// has no such transport: then procs_normaliser.
int  procs_normaliser_queued(Trainer *t, const double *pairs, int n_pairs, int n_local, double *dst);
// n floats of the memory of t's backend, summed over the processes in place (t's device bound; a
// blocking copy through host memory, or the backend's comm_sum).
void procs_sum(Trainer *t, float *p, size_t n);
// BN running statistics that hold the mean over `used` local devices: the mean over every process's
// devices that ran images.
void procs_mean_buffers(Trainer *t, float *p, size_t n, int used);
// The gradients' sums overlapped with the backward: 1 when every process's backend can begin a sum beside
// its queue's work (Backend.comm.comm_sum_begin: NCCL; the CPU keeps them for the backward's end) and none set
// YT_NCCL_OVERLAP=0 (asked of every process once, at the start of a step that sums, in each). Then each
// gradient bucket (core/procs/buckets.h) is summed over the processes as soon as the backward has finished it (one
// device: from its backward's hook; several: once device 0 has added the bucket of every device; not under
// reduce=sharded), each element's sum the same all-reduce of the same values as the whole arena's.
// procs_sum_begin queues one bucket's (dying if it cannot after procs_overlap said yes).
int  procs_overlap(const Trainer *t);
void procs_sum_begin(Trainer *t, float *p, size_t n);
// Tests: the buckets' size aimed at by one device's sums (0: BUCKET_FLOATS, as the multi-device driver's),
// and how many t's model is cut into.
void procs_set_bucket_floats(size_t floats);
int  procs_bucket_count(Trainer *t);
// Whether iteration i of `epoch` steps the optimizer (the gradients are summed across processes then).
int  procs_will_step(const Trainer *t, int epoch, int i);
// The logged loss items of each process's share, added up to the batch's.
void procs_sum_items(LossOut *out);
// One device in a process of several: forward, the normaliser over every process (in scal[SC_ALL], and
// in global when it went through the host, else NaN there), backward, the BN statistics' mean and
// (sum_grads) the gradients summed; returns the batch over every process. procs_items: the loss items of
// the step after its wait, added over the processes.
int  procs_forward_backward(Trainer *t, const float *images, const uint8_t *images_u8, int n, int S,
                            const float *targets, int nt, int sum_grads, double global[2], Err *err);
void procs_items(Trainer *t, int n, const double global[2], LossOut *out);
// sync_bn=1 over the processes (core/spec/ops.h BnSync): procs_bn_sum makes v[0, n) the sum over the processes
// with images this step (rank order, the same doubles on each), called by them in the same order; procs_bn_end
// closes a forward or backward phase's sums in every process (active: this one had images), so a process
// without images, which adds zeros to every sum the others make, knows when they are done. procs_bn_sync: a
// BnSync of procs_bn_sum (one device per process).
void procs_bn_sum(double *v, int n);
void procs_bn_end(int active);
extern const BnSync procs_bn_sync;
// trainer_step_batch (core/train/step.c) of one device in a process of several.
int  procs_step_one(Trainer *t, const float *images, const uint8_t *images_u8, int n, int S, const float *targets,
                    int nt, int epoch, int i, LossOut *out, Err *err);
