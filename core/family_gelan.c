// family_gelan.c: the gelan and yolov9 family of the trainer (core/family.h): YOLOv9's ComputeLoss on
// the DDetect head and, for a dual head (yolov9-s), on the auxiliary branch with its own assignment
// (utils/loss_tal_dual.py), and train.py's SGD: nominal batch 64 with accumulation, warmup, linear or
// cosine LR, clipping at norm 10, EMA.
#include <string.h>

#include "core/family.h"
#include "core/train.h"

static int check(const Config *cfg, Err *err) {
    if (strcmp(cfg->optimizer, "SGD") && strcmp(cfg->optimizer, "auto"))
        return err_set(err, "optimizer=%s: %s trains with SGD, as YOLOv9's train.py; MuSGD and AdamW are YOLO26's "
                       "(cfg/yolo26s.ini): use optimizer=SGD or auto", cfg->optimizer, cfg->file);
    return 0;
}

// The loss work of the head and of a dual head's auxiliary maps (their own assignment) on the model's backend.
static int init(Trainer *t, const Config *cfg, Err *err) {
    Model *m = &t->m;
    int anchors = trainer_anchors(m), max_t = m->max_n * TARGETS_PER_IMAGE;
    t->loss = m->be->loss_new(m->be_ctx, m->max_n, max_t, m->nc, anchors);
    if (t->loss && m->n_aux) t->loss_aux = m->be->loss_new(m->be_ctx, m->max_n, max_t, m->nc, anchors);
    if (!t->loss || (m->n_aux && !t->loss_aux))
        return err_set(err, "GPU %d: no memory left for the loss at batch %d; lower batch or imgsz",
                       m->be->device_id(m->be_ctx), m->max_n);
    return 0;
}

static void optimizer_init(Trainer *t, const Config *cfg, int nb) {
    Model *m = &t->m;
    sgd_init(&t->sgd, t->slots, t->n_slots, m->be, m->be_ctx, t->sgd_buf);   // NULL: a host buffer
    LrKind kind = cfg->cos_lr ? LR_COSINE : LR_LINEAR;
    opt_schedule_init(&t->sched, &cfg->hyp, kind, cfg->epochs, nb, cfg->batch);
}

static void release(Trainer *t) {
    if (t->loss) t->m.be->loss_free(t->m.be_ctx, t->loss);
    if (t->loss_aux) t->m.be->loss_free(t->m.be_ctx, t->loss_aux);
    t->loss = t->loss_aux = NULL;
}

// The two assignments of the batch, each head on its own (detached) predictions.
static int assign(Trainer *t, double *tss, Err *err) {
    const Backend *be = t->m.be;
    if (be->loss_assign(t->m.be_ctx, t->loss, &t->lb, &tss[0], err)) return -1;
    return t->m.n_aux ? be->loss_assign(t->m.be_ctx, t->loss_aux, &t->lb_aux, &tss[1], err) : 0;
}

// The loss of both heads: the auxiliary one weighted through batch_mult, each normalised by its own
// scal[SC_NORM + h].
static void compute(Trainer *t, double batch_mult) {
    const Backend *be = t->m.be;
    const double *norm = t->scal + SC_NORM;
    be->loss_compute(t->m.be_ctx, t->loss, &t->lb, norm, batch_mult, t->grad_maps);
    if (t->m.n_aux)
        be->loss_compute(t->m.be_ctx, t->loss_aux, &t->lb_aux, norm + 1, LOSS_AUX_WEIGHT * batch_mult, t->grad_aux);
}

static void items(Trainer *t, LossOut *out) {
    const Backend *be = t->m.be;
    be->loss_items(t->m.be_ctx, t->loss, t->items_mult, out);
    if (!t->m.n_aux) return;
    LossOut aux;
    be->loss_items(t->m.be_ctx, t->loss_aux, LOSS_AUX_WEIGHT * t->items_mult, &aux);
    loss_add_aux(out, &aux);
}

static void update(Trainer *t, int epoch, int i) {
    Model *m = &t->m;
    OptStep st = opt_schedule_next(&t->sched, epoch, i);
    memcpy(t->lr, st.lr, sizeof t->lr);
    if (!st.step) return;
    clip_grad_norm_queued(&t->sgd, 10.0f, t->scal + SC_SUMSQ);
    sgd_step(&t->sgd, &st);                            // also zeroes the gradients
    m->be->ema_update(m->be_ctx, t->ema, m->state, m->n_state, ema_decay(++t->ema_updates));
}

static void lr_at(Trainer *t, int epoch, int i) {
    OptSchedule copy = t->sched;                       // opt_schedule_next records steps: not in t
    OptStep st = opt_schedule_next(&copy, epoch, i);
    memcpy(t->lr, st.lr, sizeof t->lr);
}

static void end_epoch(Trainer *t) {}

const Family family_gelan = { "gelan", 3.0, check, init, optimizer_init, release, assign, compute, items, update,
                              lr_at, end_epoch };
