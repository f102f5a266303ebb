// family_gelan.c: the gelan and yolov9 family of the trainer (core/trainer/family.h): YOLOv9's ComputeLoss on
// the DDetect head and, for a dual head (yolov9-s), on the auxiliary branch with its own assignment
// (utils/loss_tal_dual.py), and train.py's optimizer: nominal batch 64 with accumulation, warmup, linear or
// cosine LR, clipping at norm 10, EMA; SGD, or Adam / AdamW as smart_optimizer builds them.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/trainer/family.h"
#include "core/spec/musgd.h"
#include "core/trainer/trainer.h"
#include "core/trainer/family_yolo26.h"   // train26_params: the trainable tensors as MuParam

// optimizer=Adam|AdamW (train.py smart_optimizer [WongKinYiu/yolov9 utils/torch_utils.py]): the same
// three groups as SGD (biases with no decay, weights with the scaled decay, BN weights with none),
// torch.optim.Adam / AdamW with betas (momentum, 0.999), the lr and warmup of SGD's schedule. The
// groups carry betas, not "momentum", so train.py's warmup leaves beta1 at hyp momentum. Run by the
// backend's YOLO26 optimizer (Backend.optim.opt26_*): its state block [m | v] is what Trainer.sgd.buf
// points at, so checkpoints save it as they save SGD's momentum.
typedef struct GelanAdam {
    int      kind;                 // OPT26_KIND_ADAM or OPT26_KIND_ADAMW
    MuParam *params;  int n_params;
    void    *opt;
    float   *state;  size_t n_state;
} GelanAdam;

static int adam_kind(const Config *cfg) {
    if (!strcmp(cfg->optimizer, "Adam")) return OPT26_KIND_ADAM;
    if (!strcmp(cfg->optimizer, "AdamW")) return OPT26_KIND_ADAMW;
    return 0;
}

static int check(const Config *cfg, Err *err) {
    char at[CFG_PATH + 32];
    if (!strcmp(cfg->optimizer, "MuSGD"))
        return err_set(err, "%s: optimizer=MuSGD is YOLO26's (cfg/yolo26s.ini); %s trains with SGD (auto), Adam or "
                       "AdamW, as YOLOv9's train.py", config_where_text(config_where(cfg, "optimizer"), at, sizeof at),
                       cfg->file);
    if (adam_kind(cfg) && !strcmp(cfg->reduce, "sharded"))
        return err_set(err, "%s: reduce=sharded splits the SGD update into shards; optimizer=%s steps whole on device "
                       "0: use reduce=device0", config_where_text(config_where(cfg, "reduce"), at, sizeof at),
                       cfg->optimizer);
    return 0;
}

// The loss work of the head and of a dual head's auxiliary maps (their own assignment) on the model's backend.
static int init(Trainer *t, const Config *cfg, Err *err) {
    Model *m = &t->m;
    int anchors = trainer_anchors(m), max_t = m->max_n * TARGETS_PER_IMAGE;
    t->loss = m->be->loss.loss_new(m->be_ctx, m->max_n, max_t, m->nc, anchors);
    if (t->loss && m->n_aux) t->loss_aux = m->be->loss.loss_new(m->be_ctx, m->max_n, max_t, m->nc, anchors);
    if (!t->loss || (m->n_aux && !t->loss_aux))
        return err_set(err, "GPU %d: no memory left for the loss at batch %d; lower batch or imgsz",
                       m->be->dev.device_id(m->be_ctx), m->max_n);
    return 0;
}

// Adam/AdamW's parameters (the -hi groups of YOLO26's naming take the plain groups' rates here) and
// its state block; returns the block.
static float *adam_init(Trainer *t, int kind) {
    Model *m = &t->m;
    GelanAdam *a = xcalloc(1, sizeof *a);
    t->gadam = a;
    a->kind = kind;
    a->params = xcalloc(m->n_params ? m->n_params : 1, sizeof *a->params);
    a->n_params = train26_params(m, 0, a->params);
    for (int k = 0; k < a->n_params; k++) a->n_state += 2 * a->params[k].n;
    a->opt = m->be->optim.opt26_new(m->be_ctx, a->params, a->n_params, kind, 0, 0, &a->state);
    return a->state;
}

// train.py's log line: optimizer: Adam(lr=0.01) with parameter groups 5 weight(decay=0.0), ...
static void print_groups(const Trainer *t, const Config *cfg) {
    int n[3] = { 0 };                      // BN weights, weights, biases
    for (int k = 0; k < t->n_slots; k++)
        if (t->slots[k].group >= 0) n[t->slots[k].group == 2 ? 0 : t->slots[k].group == 1 ? 1 : 2]++;
    printf("optimizer: %s(lr=%g) with parameter groups %d weight(decay=0.0), %d weight(decay=%g), %d bias\n",
           t->gadam ? cfg->optimizer : "SGD", cfg->hyp.lr0, n[0], n[1], t->sched.weight_decay, n[2]);
}

static void optimizer_init(Trainer *t, const Config *cfg, int nb) {
    Model *m = &t->m;
    int adam = adam_kind(cfg);
    float *buf = adam ? adam_init(t, adam) : t->sgd_buf;
    sgd_init(&t->sgd, t->slots, t->n_slots, m->be, m->be_ctx, buf);   // NULL: a host buffer; Adam: clipping
    if (adam) t->sgd.n_train = t->gadam->n_state;   // checkpoints save [m | v] as "momentum"
    LrKind kind = cfg->cos_lr ? LR_COSINE : LR_LINEAR;
    opt_schedule_init(&t->sched, &cfg->hyp, kind, cfg->epochs, nb, cfg->batch);
    if (adam) print_groups(t, cfg);
}

static void release(Trainer *t) {
    if (t->loss) t->m.be->loss.loss_free(t->m.be_ctx, t->loss);
    if (t->loss_aux) t->m.be->loss.loss_free(t->m.be_ctx, t->loss_aux);
    t->loss = t->loss_aux = NULL;
    if (t->gadam) {
        if (t->gadam->opt) t->m.be->optim.opt26_free(t->m.be_ctx, t->gadam->opt);   // and its state block
        free(t->gadam->params);
        free(t->gadam);
        t->gadam = NULL;
    }
}

// OptStep's three groups onto the backend optimizer's: [0] biases, [1] weights, [2] BN weights. beta1
// is hyp momentum throughout (the warmup moves only "momentum" keys, which Adam's groups lack).
static MuStep gelan_adam_step(const OptStep *st, double momentum) {
    MuStep ms = { .momentum = momentum, .weight_decay = st->weight_decay };
    ms.lr[MU_BIAS] = ms.lr[MU_BIAS_HI] = st->lr[0];
    ms.lr[MU_WEIGHT] = ms.lr[MU_WEIGHT_HI] = ms.lr[MU_MUON] = ms.lr[MU_MUON_HI] = st->lr[1];
    ms.lr[MU_BN] = ms.lr[MU_BN_HI] = st->lr[2];
    return ms;
}

// The two assignments of the batch, each head on its own (detached) predictions.
static int assign(Trainer *t, double *tss, Err *err) {
    const Backend *be = t->m.be;
    if (be->loss.loss_assign(t->m.be_ctx, t->loss, &t->lb, &tss[0], err)) return -1;
    return t->m.n_aux ? be->loss.loss_assign(t->m.be_ctx, t->loss_aux, &t->lb_aux, &tss[1], err) : 0;
}

// The loss of both heads: the auxiliary one weighted through batch_mult, each normalised by its own
// scal[SC_NORM + h].
static void compute(Trainer *t, double batch_mult) {
    const Backend *be = t->m.be;
    const double *norm = t->scal + SC_NORM;
    be->loss.loss_compute(t->m.be_ctx, t->loss, &t->lb, norm, batch_mult, t->grad_maps);
    if (t->m.n_aux)
        be->loss.loss_compute(t->m.be_ctx, t->loss_aux, &t->lb_aux, norm + 1, LOSS_AUX_WEIGHT * batch_mult, t->grad_aux);
}

static void items(Trainer *t, LossOut *out) {
    const Backend *be = t->m.be;
    be->loss.loss_items(t->m.be_ctx, t->loss, t->items_mult, out);
    if (!t->m.n_aux) return;
    LossOut aux;
    be->loss.loss_items(t->m.be_ctx, t->loss_aux, LOSS_AUX_WEIGHT * t->items_mult, &aux);
    loss_add_aux(out, &aux);
}

static void update(Trainer *t, int epoch, int i) {
    Model *m = &t->m;
    OptStep st = opt_schedule_next(&t->sched, epoch, i);
    memcpy(t->lr, st.lr, sizeof t->lr);
    if (!st.step) return;
    clip_grad_norm_queued(&t->sgd, 10.0f, t->scal + SC_SUMSQ);
    if (t->gadam) {                                    // the checkpointed count drives the bias correction
        MuStep ms = gelan_adam_step(&st, t->sched.momentum);
        m->be->optim.opt26_step(m->be_ctx, t->gadam->opt, &ms, (long)t->sgd.steps);   // also zeroes the gradients
        t->sgd.steps++;
    } else {
        sgd_step(&t->sgd, &st);                        // also zeroes the gradients
    }
    m->be->optim.ema_update(m->be_ctx, t->ema, m->state, m->n_state, ema_decay(++t->ema_updates));
}

static void lr_at(Trainer *t, int epoch, int i) {
    OptSchedule copy = t->sched;                       // opt_schedule_next records steps: not in t
    OptStep st = opt_schedule_next(&copy, epoch, i);
    memcpy(t->lr, st.lr, sizeof t->lr);
}

static void end_epoch(Trainer *t) {}

const Family family_gelan = { "gelan", 3.0, check, init, optimizer_init, release, assign, compute, items, update,
                              lr_at, end_epoch };
