// trainer.h: the Trainer of one device (core/trainer/trainer.c: one model on its backend, its family's loss and
// optimizer, the iteration in phases, the nominal-batch optimizer schedule and EMA of YOLOv9's train.py) and the
// shapes of training batches (core/trainer/train_shapes.c). What drives it sits above it: several devices
// (core/devices/multi.h) and processes (core/procs/procs.h) run its phases on each device, the step over this
// run's devices and processes is core/train/step.h, and the run around it core/train/train.h.
#pragma once
#include "cfg/config.h"
#include "core/spec/loss.h"
#include "core/spec/model.h"
#include "core/spec/optim.h"

typedef struct {                 // seconds spent per phase (a flame-style breakdown)
    double data, forward, loss, backward, optim, gather, broadcast;
} PhaseTimes;

// The step's small values in the trainer's backend memory (t->scal: the GPU's, or the host's), so no
// host wait reads them: the local target-score sums (main head, auxiliary head), the normalisers,
// the gradients' sum of squares, and room for every device's sums under several devices. The block
// starts zeroed, so a single-head model's auxiliary sum (never written) is 0.
enum { SC_DEVICES = 16, SC_TSS = 0, SC_NORM = 2, SC_SUMSQ = 4, SC_ALL = 8, SC_SUMSQ_ALL = SC_ALL + 2 * SC_DEVICES,
       SC_COUNT = SC_SUMSQ_ALL + SC_DEVICES };
// Timer marks of a step (Backend timers): forward F0..F1, assignment F1..A1, loss C0..C1, backward
// C1..B1, gather G0..G1, update U0..U1, broadcast P0..P1. Read after the step's wait.
enum { TM_F0, TM_F1, TM_A1, TM_C0, TM_C1, TM_B1, TM_G0, TM_G1, TM_U0, TM_U1, TM_P0, TM_P1, TM_COUNT };

// The shape of a training step: the batch's images are (n, H, W, 3) (S x S, or a rect batch shape) and
// the model runs at h x w (multi_scale resizes them to it on the device; else h, w = H, W). Zeros:
// the step's S for what is not set.
typedef struct { int H, W, h, w; } StepShape;

typedef struct Trainer {
    Model       m;
    int         master;          // 1: holds the optimizer state and the EMA (device 0); 0: a replica
    struct Multi *multi;         // several devices (core/devices/multi.c), or NULL
    void      (*release)(struct Trainer *t);   // set by multi_init (multi_free): what drives the devices
                                 // beside this one, freed first by trainer_free; NULL: nothing
    float      *sgd_buf;         // momentum buffers in the device's optimizer arena (NULL on the CPU)
    float      *recv;            // master: n_state floats to receive another device's gradients
    LossBatch   lb;              // the batch of the iteration in progress
    Map         grad_maps[LOSS_LEVELS];
    LossBatch   lb_aux;          // a dual head (m.n_aux > 0): the auxiliary maps of the same batch,
    Map         grad_aux[LOSS_LEVELS];
    void       *loss_aux;        // their own assignment (the backend's loss work, m.be->loss.loss_new)
    double     *scal;            // (SC_COUNT) the step's values in the backend's memory (SC_*)
    void       *tm[TM_COUNT];    // the step's timer marks (TM_*), and which were recorded
    unsigned    tm_set;
    double      items_mult;      // batch_mult of the loss in flight, for its items
    float      *ema;             // (m.n_state) EMA of every float of state, in the model's memory;
                                 // what checkpoints hold
    int64_t     ema_updates;
    ParamSlot  *slots;  int n_slots;
    Sgd         sgd;
    OptSchedule sched;
    void       *loss;            // the loss work of the main head (m.be->loss.loss_new; NULL for YOLO26)
    float      *input;           // (max_n, S, S, 3) the batch as floats in [0,1]
    const uint8_t *input_u8;     // or, when set, the loader's uint8 batch (converted on the device)
    const AugSample *input_aug;  // or, before both, the loader's recipes and sources (augment=gpu): the device
                                 // makes the pixels (set as input_u8; a multi-device step gives each its share)
    StepShape   shape;           // the next step's shape when not S x S (core/train/train.c sets it before each
                                 // step, as input_u8; a multi-device step gives it to every device)
    PhaseTimes  t;
    double      lr[3];           // learning rates of the last iteration, per group (results.csv); YOLO26:
                                 // its bias, weight (Muon under MuSGD) and BN groups
    const struct Family *fam;    // the model family's loss and optimizer (core/trainer/family.h)
    struct Train26 *y26;         // YOLO26 (m.end2end): its loss, optimizer and schedule (core/trainer/family_yolo26.h)
    struct GelanAdam *gadam;     // gelan under optimizer=Adam|AdamW (core/trainer/family_gelan.c), else NULL
    int         sync_bn;         // sync_bn=1, one device in a process of several: BN over every process's images
    struct SumHook *sums;        // several processes, one device: its overlapped sums (core/procs/procs.c), or NULL
} Trainer;

// Build the model for batches of up to `batch` images of imgsz x imgsz, its optimizer for `nb`
// batches per epoch, and the EMA. Weights: cfg->weights when set, else the reference's init.
// gpu: the GPU to train on, or -1 for the CPU.
int  trainer_init(Trainer *t, const Config *cfg, int nb, int gpu, Err *err);
// A replica for another device of a multi-device run: model (for micro-batches of up to `micro`
// images), loss work and input, no optimizer.
int  trainer_init_replica(Trainer *t, const Config *cfg, int gpu, int micro, Err *err);
// The master of several devices, for micro-batches of up to `micro` images (trainer_init: micro = cfg->batch);
// core/train/step.h's trainer_init_devices then starts its replicas.
int  trainer_init_master(Trainer *t, const Config *cfg, int nb, int gpu, int micro, Err *err);
void trainer_free(Trainer *t);
void trainer_update(Trainer *t, int epoch, int i);   // schedule; maybe clip, SGD, EMA (queued)
// The learning rates of iteration (epoch, i) into t->lr without advancing the schedule: a run resumed
// after its epoch's last batch (stopped during validation) logs them as the run that went on.
void trainer_lr_at(Trainer *t, int epoch, int i);
// The phases as a step queues them, with no host wait (a multi-device step runs them on every
// device): forward and assignment, the local target-score sums into scal[SC_TSS], SC_TSS + 1; then
// the normalisers max(Σ, 1) from n_tss pairs of sums at tss (t's memory; NULL: scal[SC_NORM..] is
// already set), the loss and backward. After the step's one wait (the backend's sync, or a later
// point of a stream that waited for this device) trainer_read_times adds the phases' times to t->t
// (and into *delta when not NULL) and trainer_phase_items gives the loss items. images: n (S,S,3)
// floats in host memory, images_u8 bytes when set (NULL both: the batch is already on the device).
// test/trainer_host.h has the same phases with their values on the host, for tests.
int  trainer_phase_forward(Trainer *t, int n, int S, const float *images, const uint8_t *images_u8,
                           const float *targets, int nt, Err *err);
void trainer_phase_backward(Trainer *t, int n, const double *tss, int n_tss, double batch_mult);
void trainer_phase_items(Trainer *t, LossOut *out);
void trainer_read_times(Trainer *t, PhaseTimes *delta);
void trainer_mark(Trainer *t, int mark);             // record timer mark TM_* on t's queue
// Save the EMA weights (what validation and detection use) as safetensors.
int  trainer_save(const Trainer *t, const char *path, Err *err);


// t->shape with the step's S filled in where it is 0.
StepShape trainer_shape(const Trainer *t, int S);

// ---- the shapes of training batches (core/trainer/train_shapes.c) --------------------------------------
// multi_scale (yolov9 train.py --multi-scale, Ultralytics 8.x multi_scale=True): batch i of `epoch`
// runs at sz = randrange(int(0.5 S), int(1.5 S) + 32) // 32 * 32 (at least 32), drawn from
// rng_for(seed + TRAIN_MS_SALT, epoch, i) so a resumed or multi-device run draws the same; a batch of
// H x W images with sf = sz / max(H, W) != 1 is resized to ceil(H sf / 32) * 32 x ceil(W sf / 32) * 32
// (float64, as Python computes it), else kept.
#define TRAIN_MS_SALT 0x6d756c7469ull   // "multi": a stream apart from the loader's (seed, epoch, index)
int  train_ms_size(uint64_t seed, int epoch, int i, int S);
void train_ms_shape(int sz, int H, int W, int *h, int *w);
int  train_ms_max(int S);                 // the largest size train_ms_size draws
// The square side a training memory plan is for: imgsz, or multi_scale's largest input when larger
// (rect batch shapes never exceed imgsz, and their long side is imgsz).
int  train_plan_size(const Config *cfg);

// Mosaic with mixup joins the labels of up to eight images into one sample: the loss work's target rows.
enum { TARGETS_PER_IMAGE = 512 };
// Anchors per image at the planned size (m set to it): what the loss work is sized for.
int  trainer_anchors(Model *m);
