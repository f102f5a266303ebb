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
    void       *dev;             // the Device when training on a GPU (gpu/train_gpu.c), else NULL
    void       *gpu_loss;        // its loss work (gpu/loss.h)
    float      *ema;             // (m.n_state) EMA of every float of state, in the model's memory;
                                 // what checkpoints hold
    int64_t     ema_updates;
    ParamSlot  *slots;  int n_slots;
    Sgd         sgd;
    OptSchedule sched;
    LossWork   *lw;
    float      *input;           // (max_n, S, S, 3) the batch as floats in [0,1]
    PhaseTimes  t;
    double      lr[3];           // learning rates of the last iteration, per group (results.csv)
} Trainer;

// Build the model for batches of up to `batch` images of imgsz x imgsz, its optimizer for `nb`
// batches per epoch, and the EMA. Weights: cfg->weights when set, else the reference's init.
// gpu: the GPU to train on, or -1 for the CPU.
int  trainer_init(Trainer *t, const Config *cfg, int nb, int gpu, Err *err);
void trainer_free(Trainer *t);
// One iteration i of `epoch` on n images (n,S,S,3 floats in input) and their target rows
// (img, cls, cx, cy, w, h): forward, loss, backward; then, when the schedule says so, clip the
// gradients to norm 10, take the SGD step and update the EMA. Returns 0, or -1 on bad targets.
int  trainer_step(Trainer *t, int n, int S, const float *targets, int nt, int epoch, int i,
                  LossOut *out, Err *err);
// Save the EMA weights (what validation and detection use) as safetensors.
int  trainer_save(const Trainer *t, const char *path, Err *err);

#ifdef USE_CUDA
// gpu/train_gpu.c: move the model onto GPU `id` at cfg's precision; takes the EMA and the momentum
// buffers (*sgd_buf) from its optimizer arena and makes the GPU loss work.
int  trainer_gpu_init(Trainer *t, const Config *cfg, int id, float **sgd_buf, Err *err);
void trainer_gpu_free(Trainer *t);    // the loss work and the device; model_free does the rest
int  trainer_gpu_loss(Trainer *t, const LossBatch *b, Map grad[LOSS_LEVELS], LossOut *out, Err *err);
#endif

// mkdir -p; 0, or -1 with errno set
int  make_dirs(const char *path);

// `yolotrain CONFIG`: the whole run. Returns the process exit status. With cfg->resume set to a
// run folder it continues that run from weights/last_state.safetensors.
int  train_run(Config *cfg);
// `yolotrain resume=FOLDER|1 [overrides]`: reload the run's args.ini, apply the overrides (argv), go on.
int  train_resume(Config *cfg, int argc, char **argv);
