// train.h: the training loop of YOLOv9's train.py on the CPU backend: forward, loss, backward, the
// nominal-batch optimizer schedule, EMA, per-epoch logging and checkpoints under runs/train/NAME.
#pragma once
#include "cfg/config.h"
#include "core/loss.h"
#include "core/model.h"
#include "core/optim.h"

typedef struct {                 // seconds spent per phase (a flame-style breakdown)
    double data, forward, loss, backward, optim;
} PhaseTimes;

typedef struct {
    Model       m;
    float      *ema;             // (m.n_state) EMA of every float of state; what checkpoints hold
    int64_t     ema_updates;
    ParamSlot  *slots;  int n_slots;
    Sgd         sgd;
    OptSchedule sched;
    LossWork   *lw;
    float      *input;           // (max_n, S, S, 3) the batch as floats in [0,1]
    PhaseTimes  t;
} Trainer;

// Build the model for batches of up to `batch` images of imgsz x imgsz, its optimizer for `nb`
// batches per epoch, and the EMA. Weights: cfg->weights when set, else the reference's init.
int  trainer_init(Trainer *t, const Config *cfg, int nb, Err *err);
void trainer_free(Trainer *t);
// One iteration i of `epoch` on n images (n,S,S,3 floats in input) and their target rows
// (img, cls, cx, cy, w, h): forward, loss, backward; then, when the schedule says so, clip the
// gradients to norm 10, take the SGD step and update the EMA. Returns 0, or -1 on bad targets.
int  trainer_step(Trainer *t, int n, int S, const float *targets, int nt, int epoch, int i,
                  LossOut *out, Err *err);
// Save the EMA weights (what validation and detection use) as safetensors.
int  trainer_save(const Trainer *t, const char *path, Err *err);

// `yolotrain CONFIG`: the whole run. Returns the process exit status.
int  train_run(Config *cfg);
