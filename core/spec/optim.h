// optim.h: the optimisation of YOLOv9's train.py: a per-iteration schedule of host scalars (nominal
// batch, warmup, LR lambda, when to step) and the elementwise updates it drives (SGD nesterov as
// PyTorch computes it, global-norm gradient clipping, EMA). Reference: yolo-training.md section 4.
// Legend: n floats of one tensor; ni = i + nb*epoch, the global batch index; groups as below.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "cfg/config.h"   // Hyp
#include "core/spec/backend.h"

#define OPT_NBS 64        // nominal batch size: gradients of ~64 images make one step

// ---- schedule (host scalars; the GPU code reuses these as they are) ------------------------
typedef enum { LR_LINEAR, LR_COSINE, LR_FLAT_COS, LR_FIXED } LrKind;

// np.interp: piecewise-linear through (xp[k], fp[k]), xp increasing, n >= 1; clamped to fp[0]
// left of xp[0] and to fp[n-1] from xp[n-1] on, as numpy does.
double opt_interp(double x, const double *xp, const double *fp, int n);
double opt_round_half_even(double x);   // Python round() and np.round(): 0.5 -> 0, 2.5 -> 2
// The LambdaLR factor for epoch e of E: lr = lr0 * opt_lr_lambda(...).
double opt_lr_lambda(LrKind kind, double e, int epochs, double lrf);
int    opt_nominal_accumulate(int batch_total);                  // max(round(64/B), 1)
double opt_nominal_weight_decay(double wd, int batch_total);     // wd * B*accumulate/64

typedef struct {          // what to do at one iteration
    int    step;          // 1: after this backward clip, step, zero grads, update EMA
    int    accumulate;    // batches per optimizer step in force at this iteration
    double lr[3];         // per group: [0] biases, [1] conv weights, [2] BN weights
    double momentum;
    double weight_decay;  // for group 1; groups 0 and 2 never decay
} OptStep;

typedef struct {
    double lr0, lrf, momentum, warmup_momentum, warmup_bias_lr;
    LrKind kind;
    int    epochs, nb, batch_total;
    int    nw;             // warmup iterations: max(round(warmup_epochs*nb), 100)
    int    accumulate;     // nominal, after warmup
    double weight_decay;   // nominal (scaled) weight decay
    int64_t last_opt_step; // -1 at the start (and on resume, as train.py does)
} OptSchedule;

// nb = batches per epoch, batch_total = images per batch summed over devices; the caller has
// checked the config (all >= 1; flat-cos needs epochs >= 2), a violation dies.
void    opt_schedule_init(OptSchedule *s, const Hyp *h, LrKind kind, int epochs, int nb,
                          int batch_total);
// Call once per iteration i of `epoch`, in order. Says whether this iteration ends with an
// optimizer step (and records it), with the lr/momentum/weight decay PyTorch would use.
OptStep opt_schedule_next(OptSchedule *s, int epoch, int i);

// ---- parameters as the model lends them: ParamSlot (core/spec/backend.h) ------------------------

// ---- SGD, nesterov, 3 groups (momentum buffers for the trainable slots, in slot order) -----
typedef struct {
    const ParamSlot *slots;   // borrowed: must outlive the Sgd
    int     n_slots;
    const Backend *be;        // where the slots live (CPU or a GPU) and the update runs
    void   *ctx;
    float  *buf;              // (n_train) momentum buffers, one contiguous array
    int     own_buf;          // 1: buf was allocated here (host)
    void   *prep;             // the backend's prepared slots (Backend.optim.optim_prepare)
    size_t  n_train;          // floats in groups 0..2
    int64_t steps;            // steps taken; the first sets buf = g (PyTorch's lazy buffer)
} Sgd;

// buf: n_train floats in the backend's memory, or NULL to allocate them on the host (CPU).
// Dies on a group outside -1..2.
void sgd_init(Sgd *o, const ParamSlot *slots, int n_slots, const Backend *be, void *ctx, float *buf);
size_t sgd_buffer_floats(const ParamSlot *slots, int n_slots);
void sgd_free(Sgd *o);
// One step of every trainable slot with st's lr[group], momentum and weight decay (group 1
// only), then zero their gradients.
void sgd_step(Sgd *o, const OptStep *st);
// Elementwise twin for one tensor: g <- g + wd*w; buf <- mu*buf + g (first: buf = g);
// g <- g + mu*buf; w <- w - lr*g; then g = 0.
void sgd_apply_cpu(float *w, float *g, float *buf, size_t n, float lr, float mu, float wd,
                   int first);

// ---- gradient clipping (torch.nn.utils.clip_grad_norm_) -----------------------------------
// total = L2 norm over the gradients of all trainable slots; when total > max_norm every such
// gradient is multiplied by max_norm/(total + 1e-6). Returns total (inf/NaN pass through).
float clip_grad_norm(const Sgd *o, float max_norm);
// The same queued on the optimizer's backend, no host wait: the sum of squares goes to *sumsq (a
// double in the backend's memory) and the factor is computed there.
void clip_grad_norm_queued(const Sgd *o, float max_norm, double *sumsq);
double grad_sumsq_cpu(const float *g, size_t n);   // sum of squares, in double
void   grad_scale_cpu(float *g, size_t n, float s);
// the CPU backend's slot-level twins (core/spec/backend.h)
double grad_sumsq_slots_cpu(const ParamSlot *slots, int n_slots);
void   grad_scale_slots_cpu(const ParamSlot *slots, int n_slots, float s);
void   sgd_apply_slots_cpu(const ParamSlot *slots, int n_slots, float *buf, const float lr[3], float mu,
                           float wd, int first);

// ---- EMA of the model's floating state (ModelEMA) -----------------------------------------
// d(u) = 0.9999*(1 - exp(-u/2000)); u counts EMA updates, 1 at the first (after step one).
double ema_decay(int64_t updates);
// ema <- ema*d, then ema <- ema + (1-d)*x: fp32 ops rounded one at a time as PyTorch does.
// Call over every float array of state: parameters, fixed tensors and BN running stats. As in
// PyTorch, the rounding lets even the fixed DFL weights 0..15 drift (by ~1e-3 over 1e5 updates).
void   ema_update_cpu(float *ema, const float *x, size_t n, double d);
