// train_gpu26.c: the YOLO26 trainer's GPU side (core/train26.h): both branches' loss (gpu/loss26.h) and
// MuSGD / AdamW (gpu/musgd.h), their state in the GPU's optimizer arena beside the EMA.
// Legend: n_all trainable floats; the state block is [s | m] (MuSGD, SGD) or [m | v] (AdamW), n_all each.
#include <stdlib.h>

#include "core/train26.h"
#include "gpu/loss26.h"
#include "gpu/model_gpu.h"
#include "gpu/musgd.h"

// Mosaic with mixup joins the labels of up to eight images into one sample (as gpu/train_gpu.c).
enum { TARGETS_PER_IMAGE = 512 };

static size_t trainable_floats(const Model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) n += param_trainable(m->params[i].kind) ? m->params[i].n : 0;
    return n;
}

size_t train26_gpu_optim_bytes(const Model *m) {
    return 2 * trainable_floats(m) * sizeof(float) + ((size_t)1 << 20);   // + the optimizer's tables
}

size_t train26_gpu_scratch_bytes(const Model *m) {
    MuParam *p = xcalloc(m->n_params, sizeof *p);   // shapes only: the worst case, MuSGD
    int n = train26_params(m, 1, p);
    size_t bytes = musgd_scratch_bytes_gpu(p, n);
    free(p);
    return bytes;
}

float *train26_gpu_take_state(Trainer *t, size_t n_floats) {
    Device *dev = t->dev;
    float *s = arena_take(&dev->optim, n_floats * sizeof(float), 256);
    t->m.be->zero(dev, s, n_floats);
    return s;
}

void *train26_gpu_optim_new(Trainer *t) {
    Train26 *y = t->y26;
    Device *dev = t->dev;
    size_t n_all = musgd_state_floats(y->params, y->n_params);
    if (y->opt.kind == OPT26_ADAMW)
        return adamw_new_gpu(dev, &dev->optim, y->params, y->n_params, y->state, y->state + n_all);
    return musgd_new_gpu(dev, &dev->optim, y->params, y->n_params, y->muon, y->sgd, y->state + n_all, y->state);
}

void train26_gpu_optim_step(Trainer *t, const MuStep *st) {
    musgd_set_steps_gpu(t->y26->gpu_opt, (long)t->sgd.steps);   // the checkpointed count: AdamW's t
    musgd_step_gpu(t->dev, t->y26->gpu_opt, st);
}

void *train26_gpu_loss_new(Trainer *t) {
    Model *m = &t->m;
    int anchors = 0;
    model_set_size(m, m->imgsz, m->imgsz);
    for (int l = 0; l < m->n_levels; l++) anchors += m->vh[m->head[l]] * m->vw[m->head[l]];
    return loss26_work_new_gpu(t->dev, m->max_n, m->max_n * TARGETS_PER_IMAGE, m->nc, anchors);
}

void train26_gpu_free(Trainer *t) {
    Train26 *y = t->y26;
    if (y->gpu_lw) loss26_work_free_gpu(y->gpu_lw);
    if (y->gpu_opt) musgd_free_gpu(y->gpu_opt);
    y->gpu_lw = y->gpu_opt = NULL;
}

int train26_gpu_assign(Trainer *t, double *tss, Err *err) {
    double *dst[L26_BRANCHES];
    dst[L26_O2O] = tss;                            // the trainer's main sum
    dst[L26_O2M] = tss + 1;                        // and its auxiliary one
    return loss26_assign_gpu_async(t->dev, t->y26->gpu_lw, &t->y26->lb, dst, err);
}

void train26_gpu_compute(Trainer *t, double batch_mult) {
    Train26 *y = t->y26;
    const Head26 *g[L26_BRANCHES] = { &y->grad[0], &y->grad[1] };
    const double *norm[L26_BRANCHES];
    norm[L26_O2O] = t->scal + SC_NORM;
    norm[L26_O2M] = t->scal + SC_NORM + 1;
    loss26_compute_gpu_async(t->dev, y->gpu_lw, &y->lb, &y->wt, norm, batch_mult, g);
}

void train26_gpu_items(Trainer *t, Loss26Out *out) {
    loss26_items_gpu(t->y26->gpu_lw, &t->y26->wt, t->items_mult, out);
}
