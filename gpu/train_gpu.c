// train_gpu.c: the trainer's GPU side: the model, its EMA and momentum buffers in one GPU's memory
// plan, and the loss computed there (DESIGN.md sections 3 and 4).
#include <stdlib.h>
#include <string.h>

#include "core/train.h"
#include "core/train26.h"
#include "gpu/loss.h"
#include "gpu/model_gpu.h"
#include "gpu/optim.h"

// Mosaic with mixup joins the labels of up to eight images into one sample.
enum { TARGETS_PER_IMAGE = 512 };

int trainer_gpu_init(Trainer *t, const Config *cfg, int id, Err *err) {
    Model *m = &t->m;
    Device *dev = xcalloc(1, sizeof *dev);
    float *initial = xmalloc(m->n_state * sizeof(float));    // the EMA starts from these weights
    memcpy(initial, m->state, m->n_state * sizeof(float));
    GpuPrecision prec = gpu_precision(cfg->precision);
    GpuPlan plan = model_gpu_plan(m, prec, t->master ? 3 : 0);
    if (m->end2end && t->master) {                     // YOLO26: its optimizer block and Newton-Schulz scratch
        plan.arena[ARENA_OPTIM] += train26_gpu_optim_bytes(m);
        size_t ns = train26_gpu_scratch_bytes(m) + ((size_t)64 << 20);
        if (plan.arena[ARENA_SCRATCH] < ns) plan.arena[ARENA_SCRATCH] = ns;
    }
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
