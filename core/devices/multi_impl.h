// multi_impl.h: what the multi-device driver's files share (core/devices/multi.c: the scheduler, its phases,
// threads and step; core/devices/multi_reduce.c: the reduce modes, reduce=device0's buckets, loss_on=device0 and
// reduce=sharded), internal to them: the driver's state and the helpers each side calls in the other.
// Legend as core/devices/multi.c.
#pragma once
#include <pthread.h>

#include "core/procs/buckets.h"
#include "core/devices/multi.h"

enum { PH_FORWARD, PH_FORWARD_ONLY, PH_BACKWARD, PH_BACKWARD_D0, PH_REDUCE, PH_UPDATE, PH_ALLGATHER, PH_QUIT };

enum { AUTO_WARMUP = 2, AUTO_MEASURE = 4 };   // split=auto: steps skipped, then steps measured

typedef struct {             // one device's share of the step
    Trainer *t;
    const float *images;     // floats, or
    const uint8_t *images_u8; // the loader's bytes
    float   *targets;        // (nt, 6), image index local to the micro-batch
    int      tcap, n, first, nt, rc;
    double   compute;        // seconds of forward + loss + backward in the last step
    Err      err;
    float   *stage;          // host staging for copies when peer access is off
    int      bystander;      // sync_bn: stopped because another device left its BN sums (rc set too)
} Job;

// What a device's queue has done, for the others to wait on (recorded each step, after the work):
// its assignment (or, loss_on=device0, its forward), its backward, its shard's reduce, its update,
// its all-gather, its copy of the master's weights; device 0's loss under loss_on=device0; device 0's
// normaliser over every process (several processes, summed on the devices).
enum { EV_ASSIGNED, EV_DONE, EV_REDUCED, EV_UPDATED, EV_GATHERED, EV_PULLED, EV_LOSS, EV_NORM, EV_COUNT };

typedef struct {             // reduce=sharded: what device k owns
    size_t     lo, hi;       // state[lo, hi)
    ParamSlot *slots;        // the trainable parts of the master's slots inside [lo, hi), in k's memory
    int        n_slots, has_sgd;
    Sgd        sgd;          // momentum: the master's buffer in place (k = 0), else k's own
    size_t     mom_at;       // where its momentum sits in the master's packed buffer
    float     *ema, *recv;   // (hi - lo) each; device 0: the master's EMA and receive buffer in place
    float     *host_block;   // CPU devices: the memory of mom, ema, recv
} Shard;

typedef struct {             // loss_on=device0: the whole batch's head maps on device 0
    float      *out[LOSS_LEVELS], *dout[LOSS_LEVELS];   // (B, H_l, W_l, C) each
    void       *loss;        // the loss work on device 0's backend (Backend.loss.loss_new)
    int         max_B;
} LossAtZero;

typedef struct { int steps, done, use; double busy[MULTI_MAX], imgs[MULTI_MAX], rate[MULTI_MAX]; } AutoSplit;

// reduce=device0's gradient exchange in buckets while backward runs: after node `node`'s backward,
// grad[lo, hi) is final on every device (parameters are laid out in node order), so device 0 pulls
// that range from each replica (queued behind the replica's event, no host wait on the GPUs) and adds
// it, in device order as the whole-array gather did: the same sums, bit for bit (core/procs/buckets.h: the
// plan, BUCKET_FLOATS by default, multi_set_bucket_floats).
typedef struct {
    Bucket          b[MAX_BUCKETS];
    int             n;
    size_t          floats;                       // the size aimed at
    void           *ev[MULTI_MAX][MAX_BUCKETS];   // replica k's "bucket b is computed" (GPU events)
    int             posted[MULTI_MAX];            // buckets replica k has marked this step (under mu)
    int             next[MULTI_MAX];              // the next bucket device k's backward reaches
    int             pulled;                       // buckets device 0 has gathered this step
    pthread_mutex_t mu;
    pthread_cond_t  cv;
} Buckets;
typedef struct { struct Multi *mt; int k; } HookArg;

// sync_bn=1: the devices of a step meet in every training BN's sums (core/spec/ops.h BnSync). Each device
// with images this step calls the sum in the same order; the last to arrive adds the vectors in device
// order (then over the processes, core/procs/procs.h procs_bn_sum) and gives every one the result. A device that leaves the phase while another waits (it failed, so
// its sums will not come) breaks the meeting: the waiting ones go on with their own sums and the step fails
// with that device's error.
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    int             n, arrived, left, broken;   // devices with images this step; at the current sum; gone
    long            round;                      // sums completed this phase
    double         *v[MULTI_MAX], *acc;         // each waiting device's vector; the sum (cap doubles)
    int             len, cap;
} BnMeet;

struct Multi {
    int              n, n_reps, sizes[MULTI_MAX], cap[MULTI_MAX], last_B;   // n_reps: replicas built
    char             split[256];
    int              sharded, loss_d0, staged, zero_first, dirty, step_now;
    Trainer         *master, rep[MULTI_MAX];   // rep[0] is unused: device 0 is the master
    int              gpu[MULTI_MAX];
    Job              job[MULTI_MAX];
    Shard            shard[MULTI_MAX];
    LossAtZero       z;
    AutoSplit        au;
    MultiDevStats    stats[MULTI_MAX];
    pthread_t        thread[MULTI_MAX];
    pthread_barrier_t start, done;
    int              phase, S;
    StepShape        shape;                    // the step's: images H x W, the model at h x w
    const float     *images;                   // the step's batch: floats, or bytes (images_u8), or neither
    const uint8_t   *images_u8;                //   (each device's share is still on it: benchmarks)
    const AugSample *images_aug;               // augment=gpu: the batch's samples, made by each device
    double           batch_mult, ema_d;
    OptStep          st;
    void            *ev[MULTI_MAX][EV_COUNT];  // device k's events (EV_*; NULL on CPU devices)
    MultiFailHook    hook;
    void            *hook_arg;
    Buckets          bk;                       // reduce=device0
    HookArg          hook_args[MULTI_MAX];
    int              procs, procs_reduce;       // several processes (core/procs/procs.h); sum the gradients this step
    int              procs_overlap;             // ... bucket by bucket as device 0 gathers them (procs_overlap)
    int              n_step;                    // images of the step in flight (0: none in this process)
    int              sync_bn;                   // SyncBatchNorm across this process's devices (cfg sync_bn)
    BnMeet           meet;
    BnSync           bn_sync[MULTI_MAX];        // device k's: bn_meet_sum with sync_args[k]
    HookArg          sync_args[MULTI_MAX];
};

// ---- core/devices/multi.c: device helpers -------------------------------------------------------------
// "cpu K", "GPU ID", or "GPU ID.R" for the R-th further device on that GPU (YT_TEST_SAME_GPU)
const char *mt_dev_name(const Multi *mt, int k, char *buf, size_t size);
// dst (in dt's memory) = n floats of src (in st's memory); through host memory when peer access is off
void mt_copy_floats(Multi *mt, Trainer *dt, float *dst, Trainer *st, const float *src, size_t n, float *stage);
// n doubles between devices' scal blocks (as floats: the bytes travel unchanged)
void mt_copy_doubles(Multi *mt, Trainer *dt, double *dst, Trainer *st, const double *src, int n, float *stage);
void mt_add_into(Trainer *dst, float *to, const float *from, size_t n);   // to += from, in dst's memory
int mt_used_devices(const Multi *mt);   // devices with images this step
// device k's queue: its event e is recorded; wait for device j's event e
void mt_record(Multi *mt, int k, int e);
void mt_wait_for(Multi *mt, int k, int j, int e);
// every worker runs `phase` (PH_*); 0, or -1 with err naming the device that failed
int mt_run_all(Multi *mt, int phase, Err *err);

// ---- core/devices/multi_reduce.c: the reduce modes --------------------------------------------------------
// reduce=sharded, per device and phase: keep only [lo, hi) of the gradients (the rest zeroed); sum its
// shard from every device; clip, step and EMA its shard; gather the other shards' weights.
void mt_zero_outside(Trainer *t, size_t lo, size_t hi);
void mt_reduce_shard(Multi *mt, int k);
void mt_update_shard(Multi *mt, int k);
void mt_allgather_shards(Multi *mt, int k);
// reduce=device0: the gradient buckets (plan, per-step reset, a replica's release, setup, teardown),
// the gather into the master and the broadcast of its weights.
int mt_bucketed(const Multi *mt);
void mt_plan_buckets(Multi *mt);
void mt_buckets_reset(Multi *mt);
void mt_buckets_release(Multi *mt, int k);
void mt_buckets_init(Multi *mt);
void mt_buckets_free(Multi *mt);
void mt_gather(Multi *mt);
void mt_broadcast(Multi *mt);
// loss_on=device0: the loss of the whole batch on device 0; its items after the wait; setup, teardown.
int mt_loss_at_zero(Multi *mt, int B, const float *targets, int nt, Err *err);
void mt_loss_dev0_items(Multi *mt, LossOut *out);
int mt_loss_dev0_init(Multi *mt, int max_B, Err *err);
void mt_loss_dev0_free(Multi *mt);
// reduce=sharded: shard bounds, each device's shard state, and the update phases of a step.
void mt_shard_bounds(Multi *mt);
int mt_shard_init(Multi *mt, int k, Err *err);
void mt_shard_free(Shard *sh);
int mt_sharded_update(Multi *mt, int epoch, int i, Err *err);

// ---- core/devices/multi_procs.c: several processes (core/procs/procs.h) ----------------------------------------
void mt_procs_normaliser(Multi *mt);             // after the forward phase: scal[SC_ALL], batch_mult
int mt_procs_normaliser_d0(Multi *mt, int B);   // loss_on=device0: device 0's; returns the global batch
int mt_procs_normaliser_empty(Multi *mt);        // the same for a process without images
void mt_procs_reduce(Multi *mt);                 // after this process's reduction
int mt_procs_check(Multi *mt, Err *err);
