// family_yolo26.c (was train26.c): see family_yolo26.h. Ultralytics 8.4.14 engine/trainer.py (build_optimizer, the warmup of
// _do_train, optimizer_step) and utils/loss.py E2ELoss, fitted into the trainer's phases (core/trainer/trainer.c)
// as the YOLO26 family (core/trainer/family.h).
#include "core/trainer/family_yolo26.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/trainer/family.h"

#define CLIP_NORM  10.0f   // clip_grad_norm_(max_norm=10.0)
#define MUSGD_MUON 0.2     // MuSGD(param_groups, muon=0.2, sgd=1.0) at 8.4.14
#define MUSGD_SGD  1.0

static const char *GROUP_NAME[MU_GROUPS] = { "weight-hi", "weight", "bn-hi", "bn", "bias-hi", "bias", "muon-hi", "muon" };

// ---- configuration ---------------------------------------------------------------------------

int train26_check(const Config *cfg, Err *err) {
    char at[CFG_PATH + 32];
    if (!strcmp(cfg->reduce, "sharded"))
        return err_set(err, "%s: reduce=sharded splits the gelan-s SGD update into shards; YOLO26 trains with "
                       "MuSGD/AdamW, whose Newton-Schulz step needs each weight matrix whole: use reduce=device0",
                       config_where_text(config_where(cfg, "reduce"), at, sizeof at));
    if (!strcmp(cfg->loss_on, "device0"))
        return err_set(err, "%s: loss_on=device0 gathers the outputs of a single-head model; YOLO26's end-to-end "
                       "head has two branches: use loss_on=local",
                       config_where_text(config_where(cfg, "loss_on"), at, sizeof at));
    return 0;
}

// optimizer= as given (the schema's default is the reference's, auto)
static const char *optimizer_key(const Config *cfg) { return cfg->optimizer; }

Opt26Choice train26_choose(const Config *cfg, long n_images, int nc) {
    const Hyp *h = &cfg->hyp;
    const char *name = optimizer_key(cfg);
    Opt26Choice c = { OPT26_SGD, "SGD", h->lr0, h->momentum, h->warmup_bias_lr, 0 };
    if (!strcmp(name, "auto")) {           // auto ignores lr0 and momentum
        MuAuto a = musgd_auto(n_images, cfg->batch, cfg->epochs, nc);
        c.lr0 = a.lr; c.momentum = a.momentum; c.warmup_bias_lr = a.warmup_bias_lr;
        name = a.name;
    }
    if (!strcmp(name, "MuSGD")) { c.kind = OPT26_MUSGD; c.name = "MuSGD"; c.use_muon = 1; }
    else if (!strcmp(name, "AdamW")) { c.kind = OPT26_ADAMW; c.name = "AdamW"; }
    else if (!strcmp(name, "Adam")) { c.kind = OPT26_ADAM; c.name = "Adam"; }
    else if (strcmp(name, "SGD")) die("train26_choose: optimizer '%s' passed the config check", name);
    return c;
}

int train26_group(const ParamInfo *p, int use_muon) {
    return musgd_group(p->name, p->ndim, p->kind == PK_BN_WEIGHT, use_muon);
}

int train26_params(const Model *m, int use_muon, MuParam *out) {
    int n = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        if (param_trainable(p->kind) && !p->frozen)   // freeze=: requires_grad False, skipped by the optimizer
            out[n++] = musgd_param(m->state + p->offset, m->grad + p->offset, p->shape, p->ndim,
                                   train26_group(p, use_muon));
    }
    return n;
}

// ---- setup -----------------------------------------------------------------------------------

int train26_init(Trainer *t, const Config *cfg, Err *err) {
    Train26 *y = xcalloc(1, sizeof *y);
    t->y26 = y;
    y->epochs = cfg->epochs;
    y->wt = loss26_weights(0, cfg->epochs);
    y->wt.box = cfg->hyp.box; y->wt.cls = cfg->hyp.cls; y->wt.l1 = cfg->hyp.dfl;   // the dfl gain weighs L1
    Model *m = &t->m;
    y->loss = m->be->loss.loss26_new(m->be_ctx, m->max_n, m->max_n * TARGETS_PER_IMAGE, m->nc, trainer_anchors(m));
    if (!y->loss)
        return err_set(err, "GPU: no memory left for the YOLO26 loss at batch %d; lower batch or imgsz", t->m.max_n);
    return 0;
}

// The state block (see Train26.state) and the optimizer over it.
static void optimizer_state(Trainer *t) {
    Train26 *y = t->y26;
    size_t n_all = 0, n_muon = 0;
    for (int g = 0; g < MU_GROUPS; g++) {
        n_all += y->group_floats[g];
        if (g >= MU_MUON_HI) n_muon += y->group_floats[g];
    }
    int adam = y->opt.kind == OPT26_ADAMW || y->opt.kind == OPT26_ADAM;
    y->n_opt = adam ? 2 * n_all : n_all + n_muon;   // SGD has no Muon groups
    int kind = y->opt.kind == OPT26_ADAMW ? OPT26_KIND_ADAMW : y->opt.kind == OPT26_ADAM ? OPT26_KIND_ADAM : OPT26_KIND_SGD;
    y->optimizer = t->m.be->optim.opt26_new(t->m.be_ctx, y->params, y->n_params, kind, y->muon, y->sgd, &y->state);
}

static void print_choice(const Config *cfg, const Train26 *y, double wd) {
    if (!strcmp(optimizer_key(cfg), "auto"))
        printf("optimizer: 'optimizer=auto' found, determining best 'optimizer', 'lr0' and 'momentum' automatically...\n");
    printf("optimizer: %s(lr=%.6g, momentum=%.6g%s) with parameter groups", y->opt.name, y->opt.lr0, y->opt.momentum,
           y->opt.use_muon ? ", muon=0.2, sgd=1.0" : "");
    for (int g = 0; g < MU_GROUPS; g++)
        printf("%s %d %s(decay=%.6g%s)", g ? "," : "", y->group_count[g], GROUP_NAME[g],
               musgd_group_decays(g) ? wd : 0.0, g % 2 == 0 ? ", lr x3" : "");
    printf("\n");
}

void train26_optimizer_init(Trainer *t, const Config *cfg, int nb) {
    Train26 *y = t->y26;
    Model *m = &t->m;
    // auto counts images, the trainer batches: ceil(n/B) = nb gives n exactly when batch >= 64
    y->opt = train26_choose(cfg, (long)nb * cfg->batch, m->nc);
    y->muon = MUSGD_MUON;
    y->sgd = MUSGD_SGD;
    y->params = xcalloc(m->n_params, sizeof *y->params);
    y->n_params = train26_params(m, y->opt.use_muon, y->params);
    for (int k = 0; k < y->n_params; k++) {
        y->group_count[y->params[k].group]++;
        y->group_floats[y->params[k].group] += y->params[k].n;
    }
    optimizer_state(t);
    sgd_init(&t->sgd, t->slots, t->n_slots, m->be, m->be_ctx, y->state);   // for clipping over every slot
    t->sgd.n_train = y->n_opt;             // checkpoints save the whole block as "momentum"
    opt_schedule_init(&t->sched, &cfg->hyp, cfg->cos_lr ? LR_COSINE : LR_LINEAR, cfg->epochs, nb, cfg->batch);
    if (cfg->hyp.warmup_epochs <= 0) t->sched.nw = -1;   // Ultralytics: no warmup (YOLOv9 keeps 100 iterations)
    print_choice(cfg, y, t->sched.weight_decay);
}

void train26_free(Trainer *t) {
    Train26 *y = t->y26;
    if (!y) return;
    if (y->loss) t->m.be->loss.loss26_free(t->m.be_ctx, y->loss);
    if (y->optimizer) t->m.be->optim.opt26_free(t->m.be_ctx, y->optimizer);   // and the state block it made
    free(y->params);
    free(y);
    t->y26 = NULL;
}

// ---- loss ------------------------------------------------------------------------------------

// The trainer's maps of the batch (core/trainer/trainer.c loss_batch): head[] is the one-to-one branch, aux[]
// the one-to-many one; channels [4 ltrb | nc logits].
static void batch_of(Trainer *t) {
    Train26 *y = t->y26;
    int nc = t->m.nc;
    y->lb = (Loss26Batch){ .nc = nc, .img_h = t->lb.img_h, .img_w = t->lb.img_w, .targets = t->lb.targets,
                           .n_targets = t->lb.n_targets };
    for (int l = 0; l < L26_LEVELS; l++) {
        const Map *v[L26_BRANCHES] = { [L26_O2M] = &t->lb_aux.head[l], [L26_O2O] = &t->lb.head[l] };
        const Map *g[L26_BRANCHES] = { [L26_O2M] = &t->grad_aux[l], [L26_O2O] = &t->grad_maps[l] };
        for (int br = 0; br < L26_BRANCHES; br++) {
            y->lb.head[br].box[l] = map_slice(*v[br], 0, 4);
            y->lb.head[br].cls[l] = map_slice(*v[br], 4, nc);
            y->grad[br].box[l] = map_slice(*g[br], 0, 4);
            y->grad[br].cls[l] = map_slice(*g[br], 4, nc);
        }
    }
}

int train26_assign(Trainer *t, double *tss, Err *err) {
    Train26 *y = t->y26;
    batch_of(t);
    double *dst[L26_BRANCHES];
    dst[L26_O2O] = tss;                            // the trainer's main sum
    dst[L26_O2M] = tss + 1;                        // and its auxiliary one
    return t->m.be->loss.loss26_assign(t->m.be_ctx, y->loss, &y->lb, dst, err);
}

static void items_of(const Loss26Out *o, LossOut *out) {
    const Loss26Terms *a = &o->br[L26_O2O], *b = &o->br[L26_O2M];
    *out = (LossOut){ .box = a->box, .cls = a->cls, .dfl = a->l1, .total = o->total, .tss = a->tss, .n_fg = a->n_fg,
                      .tss_aux = b->tss, .n_fg_aux = b->n_fg };
}

void train26_compute(Trainer *t, double batch_mult) {
    Train26 *y = t->y26;
    const Head26 *g[L26_BRANCHES] = { &y->grad[0], &y->grad[1] };
    const double *norm[L26_BRANCHES];
    norm[L26_O2O] = t->scal + SC_NORM;
    norm[L26_O2M] = t->scal + SC_NORM + 1;
    t->m.be->loss.loss26_compute(t->m.be_ctx, y->loss, &y->lb, &y->wt, norm, batch_mult, g);
}

void train26_items(Trainer *t, LossOut *out) {
    Loss26Out o;
    memset(&o, 0, sizeof o);
    t->m.be->loss.loss26_items(t->m.be_ctx, t->y26->loss, &t->y26->wt, t->items_mult, &o);
    items_of(&o, out);
}

static void prog_update(Train26 *y) {
    y->prog_updates++;
    loss26_prog_weights(y->prog_updates, y->epochs, y->wt.w);
}

void train26_end_epoch(Trainer *t) {
    prog_update(t->y26);
}

// ---- optimizer -------------------------------------------------------------------------------

MuStep train26_schedule(const Train26 *y, const OptSchedule *s, int epoch, int i) {
    double ni = i + (double)s->nb * epoch, lf = opt_lr_lambda(s->kind, epoch, s->epochs, s->lrf);
    double xi[2] = { 0, s->nw };
    int warm = ni <= s->nw;
    MuStep st = { .momentum = y->opt.momentum, .weight_decay = s->weight_decay };
    for (int g = 0; g < MU_GROUPS; g++) {
        double target = y->opt.lr0 * musgd_group_lr_scale(g) * lf;   // initial_lr * lf(epoch)
        double fp[2] = { g == MU_BIAS || g == MU_BIAS_HI ? y->opt.warmup_bias_lr : 0.0, target };
        st.lr[g] = warm ? opt_interp(ni, xi, fp, 2) : target;
    }
    int betas = y->opt.kind == OPT26_ADAMW || y->opt.kind == OPT26_ADAM;
    if (!betas && s->nw >= 0) {                    // Adam's and AdamW's groups carry betas, not "momentum"
        double fm[2] = { s->warmup_momentum, s->momentum };
        st.momentum = warm ? opt_interp(ni, xi, fm, 2) : s->momentum;   // warmup's last value stays
    }
    return st;
}

// The checkpointed step count drives AdamW's bias correction.
static void optimizer_step(Trainer *t, const MuStep *st) {
    t->m.be->optim.opt26_step(t->m.be_ctx, t->y26->optimizer, st, (long)t->sgd.steps);
}

// The rates of step st as the trainer logs them (results.csv's x/lr0..2).
static void log_lr(Trainer *t, const MuStep *st) {
    Train26 *y = t->y26;
    memcpy(y->lr, st->lr, sizeof y->lr);
    t->lr[0] = st->lr[MU_BIAS];
    t->lr[1] = st->lr[y->opt.use_muon ? MU_MUON : MU_WEIGHT];
    t->lr[2] = st->lr[MU_BN];
}

void train26_lr_at(Trainer *t, int epoch, int i) {
    MuStep st = train26_schedule(t->y26, &t->sched, epoch, i);
    log_lr(t, &st);
}

void train26_update(Trainer *t, int epoch, int i) {
    Train26 *y = t->y26;
    Model *m = &t->m;
    OptStep when = opt_schedule_next(&t->sched, epoch, i);   // accumulate and whether to step
    MuStep st = train26_schedule(y, &t->sched, epoch, i);
    log_lr(t, &st);
    if (!when.step) return;
    clip_grad_norm_queued(&t->sgd, CLIP_NORM, t->scal + SC_SUMSQ);
    optimizer_step(t, &st);                // also zeroes the gradients
    t->sgd.steps++;
    m->be->optim.ema_update(m->be_ctx, t->ema, m->state, m->n_state, ema_decay(++t->ema_updates));
}

const Family family_yolo26 = { "yolo26", 4.0, train26_check, train26_init, train26_optimizer_init, train26_free,
                               train26_assign, train26_compute, train26_items, train26_update, train26_lr_at,
                               train26_end_epoch };
