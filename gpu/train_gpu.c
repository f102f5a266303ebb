// train_gpu.c: the trainer's GPU side: the model, its EMA and momentum buffers in one GPU's memory
// plan, and the loss computed there (DESIGN.md sections 3 and 4).
#include <stdlib.h>
#include <string.h>

#include "core/train.h"
#include "core/train26.h"
#include "gpu/loss.h"
#include "gpu/model_gpu.h"
#include "gpu/optim.h"

#include <stdint.h>
#include <stdio.h>

// Mosaic with mixup joins the labels of up to eight images into one sample.
enum { TARGETS_PER_IMAGE = 512 };

// What training allocates for m on one GPU: the model's arenas, with the optimizer's states on the
// master, and YOLO26's optimizer block and Newton-Schulz scratch.
static GpuPlan training_plan(const Model *m, GpuPrecision prec, int master) {
    GpuPlan plan = model_gpu_plan(m, prec, master ? 3 : 0);
    if (m->end2end && master) {
        plan.arena[ARENA_OPTIM] += train26_gpu_optim_bytes(m);
        size_t ns = train26_gpu_scratch_bytes(m) + ((size_t)64 << 20);
        if (plan.arena[ARENA_SCRATCH] < ns) plan.arena[ARENA_SCRATCH] = ns;
    }
    return plan;
}

int trainer_gpu_init(Trainer *t, const Config *cfg, int id, Err *err) {
    Model *m = &t->m;
    GpuPrecision prec = gpu_precision(cfg->precision);
    Device *dev = xcalloc(1, sizeof *dev);
    float *initial = xmalloc(m->n_state * sizeof(float));    // the EMA starts from these weights
    memcpy(initial, m->state, m->n_state * sizeof(float));
    GpuPlan plan = training_plan(m, prec, t->master);
    model_gpu_print_plan(&plan, id, stdout);
    if (model_to_gpu(m, dev, id, &plan, prec, err)) { free(initial); free(dev); return -1; }
    t->dev = dev;
    if (t->master) {                                   // EMA, momentum, and room to receive gradients
        t->ema = arena_take(&dev->optim, m->n_state * sizeof(float), 256);
        m->be->upload(dev, t->ema, initial, m->n_state);
        t->sgd_buf = arena_take(&dev->optim, m->n_state * sizeof(float), 256);
        t->recv = arena_take(&dev->optim, m->n_state * sizeof(float), 256);
    }
    free(initial);
    if (m->end2end) return 0;                          // YOLO26's loss work: train26_init makes it
    int anchors = 0;
    model_set_size(m, m->imgsz, m->imgsz);
    for (int l = 0; l < m->n_levels; l++) anchors += m->vh[m->head[l]] * m->vw[m->head[l]];
    t->gpu_loss = loss_work_new_gpu(dev, m->max_n, m->max_n * TARGETS_PER_IMAGE, m->nc, anchors);
    if (t->gpu_loss && m->n_aux)                       // a dual head: the auxiliary maps' own assignment
        t->gpu_loss_aux = loss_work_new_gpu(dev, m->max_n, m->max_n * TARGETS_PER_IMAGE, m->nc, anchors);
    if (!t->gpu_loss || (m->n_aux && !t->gpu_loss_aux)) {
        trainer_gpu_free(t);
        return err_set(err, "GPU %d: no memory left for the loss at batch %d; lower batch or imgsz", id, m->max_n);
    }
    return 0;
}

void trainer_gpu_free(Trainer *t) {                    // the caller frees the model's host side
    if (t->gpu_loss) loss_work_free_gpu(t->gpu_loss);
    if (t->gpu_loss_aux) loss_work_free_gpu(t->gpu_loss_aux);
    model_drop_recordings(&t->m);
    device_free(t->dev);
    free(t->dev);
    t->dev = NULL;
    t->gpu_loss = t->gpu_loss_aux = NULL;
}

int trainer_gpu_assign(Trainer *t, double *tss, Err *err) {
    if (loss_assign_gpu_async(t->dev, t->gpu_loss, &t->lb, tss, err)) return -1;
    return t->m.n_aux ? loss_assign_gpu_async(t->dev, t->gpu_loss_aux, &t->lb_aux, tss + 1, err) : 0;
}

// A dual head as on the CPU (core/train.c): the auxiliary loss weighted through batch_mult.
void trainer_gpu_compute(Trainer *t, double batch_mult) {
    const double *norm = t->scal + SC_NORM;
    loss_compute_gpu_async(t->dev, t->gpu_loss, &t->lb, norm, batch_mult, t->grad_maps);
    if (t->m.n_aux)
        loss_compute_gpu_async(t->dev, t->gpu_loss_aux, &t->lb_aux, norm + 1, LOSS_AUX_WEIGHT * batch_mult, t->grad_aux);
}

void trainer_gpu_items(Trainer *t, LossOut *out) {
    loss_items_gpu(t->gpu_loss, t->items_mult, out);
    if (!t->m.n_aux) return;
    LossOut aux;
    loss_items_gpu(t->gpu_loss_aux, LOSS_AUX_WEIGHT * t->items_mult, &aux);
    loss_add_aux(out, &aux);
}

// ---- batch=-1 ---------------------------------------------------------------------------------

static size_t plan_bytes(const Config *cfg, GpuPrecision prec, int n);

size_t trainer_gpu_plan_bytes(const Config *cfg, int n) { return plan_bytes(cfg, gpu_precision(cfg->precision), n); }

// The training plan's bytes on the master GPU for micro-batch n (SIZE_MAX when the model cannot be
// built for it, which counts as not fitting).
static size_t plan_bytes(const Config *cfg, GpuPrecision prec, int n) {
    Model m;
    Err err;
    if (model_build(cfg, n, cfg->imgsz, &m, &err)) return SIZE_MAX;
    GpuPlan p = training_plan(&m, prec, 1);
    model_free(&m);
    size_t total = 0;
    for (int k = 0; k < ARENA_COUNT; k++) total += p.arena[k];
    return total;
}

int trainer_gpu_auto_batch(Config *cfg, const int *gpus, int n, Err *err) {
    GpuPrecision prec = gpu_precision(cfg->precision);
    size_t free_min = SIZE_MAX;
    int tightest = gpus[0];
    for (int k = 0; k < n; k++) {
        if (device_check(gpus[k], prec, err)) return -1;
        size_t f = gpu_free_bytes(gpus[k]);
        if (f < free_min) { free_min = f; tightest = gpus[k]; }
    }
    double gib = 1 << 30, budget = AUTO_BATCH_FRACTION * (double)free_min;
    size_t p1 = plan_bytes(cfg, prec, 1), p2 = plan_bytes(cfg, prec, 2);
    if (p1 == SIZE_MAX || p1 > budget)
        return err_set(err, "batch=-1: even one image at imgsz %d needs %.2f GiB on a GPU, more than %.0f%% of the "
                       "%.2f GiB free on GPU %d; lower imgsz or free the GPU", cfg->imgsz, p1 / gib,
                       100 * AUTO_BATCH_FRACTION, free_min / gib, tightest);
    // The plan grows about linearly with the batch (activations, their gradients, the input), but
    // parts are capped (im2col chunks, scratch), so the line through 1 and 2 is only a first guess:
    // a bisection between a batch that fits (lo) and one that does not (hi) finds the largest.
    double guess = p2 > p1 ? 1 + (budget - p1) / (double)(p2 - p1) : AUTO_BATCH_MAX;
    int lo = 1, hi = AUTO_BATCH_MAX + 1;
    int g = guess > AUTO_BATCH_MAX ? AUTO_BATCH_MAX : guess < 1 ? 1 : (int)guess;
    if (plan_bytes(cfg, prec, g) <= budget) lo = g;
    else hi = g;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (plan_bytes(cfg, prec, mid) <= budget) lo = mid;
        else hi = mid;
    }
    int micro = lo;
    size_t bytes = plan_bytes(cfg, prec, micro);
    cfg->batch = micro * n;
    printf("batch=-1 (auto): %d images per GPU%s: the plan, %.2f GiB, is the largest within %.0f%% of the %.2f GiB "
           "free on GPU %d\n", micro, n > 1 ? " (the batch is their sum)" : "", bytes / gib, 100 * AUTO_BATCH_FRACTION,
           free_min / gib, tightest);
    return 0;
}
