// train.h: the training loop of YOLOv9's train.py on the CPU backend: forward, loss, backward, the
// nominal-batch optimizer schedule, EMA, per-epoch logging and checkpoints under runs/train/NAME.
#pragma once
#include "cfg/config.h"
#include "core/loss.h"
#include "core/model.h"
#include "core/optim.h"

typedef struct {                 // seconds spent per phase (a flame-style breakdown)
    double data, forward, loss, backward, optim, gather, broadcast;
} PhaseTimes;

typedef struct Trainer {
    Model       m;
    int         master;          // 1: holds the optimizer state and the EMA (device 0); 0: a replica
    struct Multi *multi;         // several devices (core/multi.c), or NULL
    void       *dev;             // the Device when training on a GPU (gpu/train_gpu.c), else NULL
    void       *gpu_loss;        // its loss work (gpu/loss.h)
    float      *sgd_buf;         // momentum buffers in the GPU's optimizer arena (NULL on the CPU)
    float      *recv;            // master: n_state floats to receive another device's gradients
    LossBatch   lb;              // the batch of the iteration in progress
    Map         grad_maps[LOSS_LEVELS];
    LossBatch   lb_aux;          // a dual head (m.n_aux > 0): the auxiliary maps of the same batch,
    Map         grad_aux[LOSS_LEVELS];
    LossWork   *lw_aux;          // their own assignment (the CPU's; gpu_loss_aux on a GPU)
    void       *gpu_loss_aux;
    LossNorm    tss_local;       // the local target-score sums of the last assignment
    float      *ema;             // (m.n_state) EMA of every float of state, in the model's memory;
                                 // what checkpoints hold
    int64_t     ema_updates;
    ParamSlot  *slots;  int n_slots;
    Sgd         sgd;
    OptSchedule sched;
    LossWork   *lw;
    float      *input;           // (max_n, S, S, 3) the batch as floats in [0,1]
    const uint8_t *input_u8;     // or, when set, the loader's uint8 batch (converted on the device)
    int         input_resident;  // 1: the batch is already on the device (bench/step's GPU-only step)
    PhaseTimes  t;
    double      lr[3];           // learning rates of the last iteration, per group (results.csv); YOLO26:
                                 // its bias, weight (Muon under MuSGD) and BN groups
    struct Train26 *y26;         // YOLO26 (m.end2end): its loss, optimizer and schedule (core/train26.h)
} Trainer;

// Build the model for batches of up to `batch` images of imgsz x imgsz, its optimizer for `nb`
// batches per epoch, and the EMA. Weights: cfg->weights when set, else the reference's init.
// gpu: the GPU to train on, or -1 for the CPU.
int  trainer_init(Trainer *t, const Config *cfg, int nb, int gpu, Err *err);
// A replica for another device of a multi-device run: model (for micro-batches of up to `micro`
// images), loss work and input, no optimizer.
int  trainer_init_replica(Trainer *t, const Config *cfg, int gpu, int micro, Err *err);
// The master on devs->gpu[0] and, for several devices, its replicas (core/multi.h).
struct DeviceList;
int  trainer_init_devices(Trainer *t, const Config *cfg, int nb, const struct DeviceList *devs, Err *err);
void trainer_free(Trainer *t);
// The iteration in phases (a multi-device step runs them on every device, with the normaliser
// summed over devices between the first two). images: n (S,S,3) floats in host memory.
// images_u8 bytes when set, else images floats (NULL: the batch is already on the device)
int  trainer_forward_assign(Trainer *t, int n, int S, const float *images, const uint8_t *images_u8,
                            const float *targets, int nt, double *tss, Err *err);
void trainer_compute_backward(Trainer *t, int n, double norm, double batch_mult, LossOut *out);
// The same phases with one normaliser per head output (LossNorm, core/loss.h), for a dual head
// (yolov9-s): several devices sum tss->main and tss->aux over devices separately and pass max(sum, 1)
// of each. The two above are these for the main head; with a dual head, trainer_compute_backward
// normalises the auxiliary head by its local sum, which is exact on one device only.
int  trainer_forward_assign_heads(Trainer *t, int n, int S, const float *images, const uint8_t *images_u8,
                                  const float *targets, int nt, LossNorm *tss, Err *err);
void trainer_compute_backward_heads(Trainer *t, int n, const LossNorm *norm, double batch_mult, LossOut *out);
void trainer_update(Trainer *t, int epoch, int i);   // schedule; maybe clip, SGD, EMA
// One iteration i of `epoch` on n images (n,S,S,3 floats in input) and their target rows
// (img, cls, cx, cy, w, h): forward, loss, backward; then, when the schedule says so, clip the
// gradients to norm 10, take the SGD step and update the EMA. Returns 0, or -1 on bad targets.
int  trainer_step(Trainer *t, int n, int S, const float *targets, int nt, int epoch, int i,
                  LossOut *out, Err *err);
// Save the EMA weights (what validation and detection use) as safetensors.
int  trainer_save(const Trainer *t, const char *path, Err *err);

#ifdef USE_CUDA
// gpu/train_gpu.c: move the model onto GPU `id` at cfg's precision; a master takes the EMA and the
// momentum buffers (t->sgd_buf) from its optimizer arena; makes the GPU loss work.
int  trainer_gpu_init(Trainer *t, const Config *cfg, int id, Err *err);
void trainer_gpu_free(Trainer *t);    // the loss work and the device; model_free does the rest
int  trainer_gpu_assign(Trainer *t, LossNorm *tss, Err *err);
void trainer_gpu_compute(Trainer *t, const LossNorm *norm, double batch_mult, LossOut *out);
#endif

// mkdir -p; 0, or -1 with errno set
int  make_dirs(const char *path);

// `yolotrain CONFIG`: the whole run. Returns the process exit status. With cfg->resume set to a
// run folder it continues that run from weights/last_state.safetensors.
int  train_run(Config *cfg);
// `yolotrain resume=FOLDER|1 [overrides]`: reload the run's args.ini, apply the overrides (argv), go on.
int  train_resume(Config *cfg, int argc, char **argv);
