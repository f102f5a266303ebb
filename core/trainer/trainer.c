// trainer.c: the Trainer of one device (core/trainer/trainer.h): the model on its device with the family's loss work
// and optimizer (core/trainer/family.h), the iteration in phases that several devices can share (forward and
// assignment, loss and backward, update), their timer marks, and the EMA weights' save. The step
// follows YOLOv9's train.py (reference section 4.8): forward, loss x batch, backward, and every
// `accumulate` batches: clip to norm 10, the optimizer step, EMA update. The step over the run's devices
// and processes is core/train/step.c; the run around it (folders, logs, checkpoints, signals, resume)
// core/train/train.c.
#include "core/trainer/trainer.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/trainer/family.h"
#include "core/base/memlimit.h"
#include "cfg/devices.h"
#include "core/spec/transfer.h"

int trainer_anchors(Model *m) {
    int anchors = 0;
    model_set_size(m, m->imgsz, m->imgsz);
    for (int l = 0; l < m->n_levels; l++) anchors += m->vh[m->head[l]] * m->vw[m->head[l]];
    return anchors;
}

// The model onto GPU `id` (the GPU backend's memory plan); a master takes the EMA, the momentum
// buffers (t->sgd_buf) and room to receive gradients from its optimizer arena.
static int to_gpu(Trainer *t, const Config *cfg, int id, Err *err) {
    Model *m = &t->m;
    const Backend *gpu = backend_gpu_get();
    if (!gpu) return err_set(err, "device=%d: this yolotrain was built without CUDA; use device=cpu", id);
    float *initial = xmalloc(m->n_state * sizeof(float));    // the EMA starts from these weights
    memcpy(initial, m->state, m->n_state * sizeof(float));
    if (gpu->dev.model_to_device(m, id, cfg->precision, t->master, err)) { free(initial); return -1; }
    if (t->master) {
        t->ema = m->be->dev.take(m->be_ctx, m->n_state);
        m->be->dev.upload(m->be_ctx, t->ema, initial, m->n_state);
        t->sgd_buf = m->be->dev.take(m->be_ctx, m->n_state);
        t->recv = m->be->dev.take(m->be_ctx, m->n_state);
    }
    free(initial);
    return 0;
}

// The CPU's plan as the GPU's is printed (gpu/model_gpu.c): the arenas, the rest, and what is recomputed.
static void cpu_print_plan(const Model *m, double need, MemBudget have, int shares) {
    int units = 0, again = 0;
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < 2; k++) {
            const ConvUnit *u = k ? &m->nodes[i].cv2 : &m->nodes[i].cv;
            if (u->w < 0 || u->bn_w < 0 || (m->nodes[i].op != OP_CONV && m->nodes[i].op != OP_REPCONV)) continue;
            units++, again += u->z_recompute > 0;
        }
    double g = 1e9, f = sizeof(float), temps = m->n_stats + m->n_ws + 2.0 * m->n_tmp + m->n_zre[0] + m->n_zre[1];
    printf("CPU memory plan: weights and gradients %.2f GB, activations %.2f GB (+ their gradients %.2f GB, "
           "temporaries %.2f GB), the rest (optimizer, EMA, input, stacks) %.2f GB; total %.2f GB of %.1f GB available",
           2 * f * m->n_state / g, f * m->n_act / g, f * m->n_dact / g, f * temps / g, (need - model_host_bytes(m)) / g,
           need / g, have.bytes / g);
    if (shares > 1) printf(" (a 1/%d share of the machine's for each of %d CPU devices)", shares, shares);
    int replayed = m->replay_first ? m->replay_first[m->n_nodes] : 0, again_v = 0;
    unsigned char *run_again = xcalloc(m->n_values, 1);   // the values whose writers the backward runs again
    for (int k = 0; k < replayed; k++) {
        int v = m->nodes[m->replay_nodes[k]].out;
        run_again[m->values[v].parent < 0 ? v : m->values[v].parent] = 1;
    }
    for (int v = 0; v < m->n_values; v++) again_v += run_again[v];
    free(run_again);
    if (again) printf("; %d of %d pre-BN maps recomputed in the backward instead of stored", again, units);
    if (m->n_regen && !again_v) printf("; %d maps not kept for the backward (none is read there)", m->n_regen);
    if (again_v) printf("; %d maps not kept for the backward (%d of them checkpointed: %d layers' forward run again by "
                        "the backward)", m->n_regen, again_v, replayed);
    if (again || m->n_regen) printf(" (+%.0f%% multiply-adds a step, the same results)", 100 * model_recompute_share(m));
    printf("\n");
}

// The CPU's memory plan, as a GPU's: the arenas are reserved but not yet touched, so refuse now rather than be
// killed mid-epoch. The run's need (arenas, optimizer states, the input batch, thread stacks) against the least of
// MemAvailable, the cgroup limit and ulimit -v (OpenBLAS's buffers taken first: it would spin where they do not
// fit); where it does not fit, the pre-BN maps that cost least to recompute are recomputed by the backward
// instead of stored, then maps are checkpointed (core/spec/act_plan.c: the same bits, more time), as few as fit.
// Says the plan.
static int cpu_plan(Model *m, const Family *fam, const Config *cfg, int plan, int master, Err *err) {
    double states = fam->host_states;                  // YOLO26: two optimizer states (MuSGD s, m; AdamW m, v)
    if (m->opt_block && states < 4) states = 4;        // gelan's Adam: EMA, receive, m, v
    double stacks = (cfg->workers + 4.0) * (8 << 20);  // loader and BLAS threads' stacks (address space)
    double other = stacks + sizeof(float) * (states * m->n_state + (double)cfg->batch * plan * plan * 3);
    MemBudget have = mem_budget(model_host_bytes(m));   // the arenas are mapped, not yet touched
    // device=cpu:N: N trainers in this process plan one after another while none has touched its arenas, so each
    // would see the whole machine; each plans within its share instead
    DeviceList devs;
    Err ignored;
    int shares = !parse_devices(cfg->device, 0, &devs, &ignored) && devs.n > 1 && devs.gpu[0] < 0 ? devs.n : 1;
    have.bytes /= shares;
    double room = 0.9 * have.bytes, all_stored = model_host_bytes(m) + other;
    if (have.bytes > 0 && all_stored > room) {
        double fixed = model_host_bytes(m) - sizeof(float) * (double)m->n_act;   // all but the activations
        double fit = (room - other - fixed) / sizeof(float);
        model_plan_recompute(m, fit > 0 ? (size_t)fit : 0);
        if (model_reserve_act(m))
            return err_set(err, "training on the CPU at batch %d and imgsz %d: the activations (%.1f GB) cannot be "
                           "reserved; lower batch or imgsz", m->max_n, cfg->imgsz, sizeof(float) * m->n_act / 1e9);
    }
    double need = model_host_bytes(m) + other;
    if (have.bytes > 0 && need > room)
        return err_set(err, "training on the CPU at batch %d and imgsz %d%s needs %.1f GB of memory (with every pre-BN "
                       "map recomputed and every map it can checkpointed), %.1f GB are available (%s%s); lower batch or imgsz "
                       "(cfg/quick.ini is a quick CPU run), raise the limit, or train on a GPU", m->max_n, cfg->imgsz,
                       plan > cfg->imgsz ? " (multi_scale: up to 1.5x)" : "", need / 1e9, have.bytes / 1e9, have.what,
                       shares > 1 ? ", a share for each CPU device" : "");
    if (master) cpu_print_plan(m, need, have, shares);
    return 0;
}

// The device's memory (the model's included; model_free does the host side).
static void device_release(Trainer *t) {
    const Backend *be = t->m.be;
    if (t->m.on_device) {
        model_drop_recordings(&t->m);                  // the device's recordings go before the device
        be->dev.device_close(t->m.be_ctx);
    } else {
        free(t->ema);
        free(t->recv);
    }
}

// The model on its device and the loss work; the master also gets the optimizer state and the EMA.
static int trainer_setup(Trainer *t, const Config *cfg, int gpu, int master, int micro, Err *err) {
    memset(t, 0, sizeof *t);
    int plan = train_plan_size(cfg);               // multi_scale: its largest input
    if (model_build(cfg, micro, plan, &t->m, err)) return -1;
    Model *m = &t->m;
    if (plan > cfg->imgsz && !model_resize_fits(m, micro, cfg->imgsz, cfg->imgsz)) {   // never with a real stem
        model_free(m);
        return err_set(err, "%s: multi_scale=1: this model's largest map holds less than the batch's images "
                       "(%d x %d x %d x 3 floats, the bytes before the resize); set multi_scale=0", cfg->file,
                       micro, cfg->imgsz, cfg->imgsz);
    }
    t->fam = m->end2end ? &family_yolo26 : &family_gelan;
    if (t->fam->check(cfg, err)) { model_free(m); return -1; }
    unsigned char frozen[CFG_MAX_LAYERS];
    if (freeze_mask(cfg, m, frozen, err)) { model_free(m); return -1; }
    freeze_apply(m, frozen);
    // weights=: what matches by name and shape, the rest fresh (core/spec/transfer.h); a resumed run takes its
    // weights from its state instead, so the initial file is not needed (it may have moved since)
    if (cfg->weights[0] && !cfg->resume[0]) {
        if (model_transfer(m, cfg->weights, (uint64_t)cfg->seed, master, err)) { model_free(m); return -1; }
    } else {
        model_init_weights(m, (uint64_t)cfg->seed);
    }
    t->master = master;
    if (gpu < 0) {
        if (blas_reserve(err) || cpu_plan(m, t->fam, cfg, plan, master, err)) { model_free(m); return -1; }
        if (master) {
            t->ema = xmalloc(m->n_state * sizeof(float));
            memcpy(t->ema, m->state, m->n_state * sizeof(float));
            t->recv = xmalloc(m->n_state * sizeof(float));
        }
    } else if (to_gpu(t, cfg, gpu, err)) {
        model_free(m);
        return -1;
    }
    t->input = xmalloc((size_t)cfg->batch * cfg->imgsz * cfg->imgsz * 3 * sizeof(float));
    t->scal = m->be->dev.scalars(m->be_ctx);
    if (!t->scal) t->scal = xcalloc(SC_COUNT, sizeof(double));
    for (int k = 0; k < TM_COUNT; k++) t->tm[k] = m->be->dev.timer_new(m->be_ctx);   // the device is the current one
    model_zero_grad(m);
    if (t->fam->init(t, cfg, err)) { trainer_free(t); return -1; }   // the family's loss work
    return 0;
}

// freeze=: say once what stays fixed (train.py logs each name; one line is enough here)
static void print_frozen(const Model *m, const unsigned char *frozen) {
    long tensors = 0, floats = 0;
    for (int i = 0; i < m->n_params; i++)
        if (param_trainable(m->params[i].kind) && param_frozen(frozen, m->params[i].name))
            tensors++, floats += (long)m->params[i].n;
    if (tensors) printf("freeze: %ld parameter tensors (%ld values) of the frozen layers get no update\n", tensors, floats);
}

static void optimizer_init(Trainer *t, const Config *cfg, int nb) {
    Model *m = &t->m;
    unsigned char frozen[CFG_MAX_LAYERS];
    Err ignored;
    if (freeze_mask(cfg, m, frozen, &ignored)) memset(frozen, 0, sizeof frozen);   // trainer_setup checked it
    t->slots = xcalloc(m->n_params, sizeof *t->slots);
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        int g = param_group(p->kind);
        if (g < 0 && p->kind != PK_FIXED) continue;      // BN buffers are no parameters
        if (param_frozen(frozen, p->name)) g = -1;       // as requires_grad False: no update, decay or norm share
        t->slots[t->n_slots++] = (ParamSlot){ m->state + p->offset, g >= 0 ? m->grad + p->offset : NULL, p->n, g };
    }
    print_frozen(m, frozen);
    t->fam->optimizer_init(t, cfg, nb);               // its groups, optimizer and schedule
}

int trainer_init(Trainer *t, const Config *cfg, int nb, int gpu, Err *err) {
    return trainer_init_master(t, cfg, nb, gpu, cfg->batch, err);
}

int trainer_init_master(Trainer *t, const Config *cfg, int nb, int gpu, int micro, Err *err) {
    if (trainer_setup(t, cfg, gpu, 1, micro, err)) return -1;
    optimizer_init(t, cfg, nb);
    return 0;
}

int trainer_init_replica(Trainer *t, const Config *cfg, int gpu, int micro, Err *err) {
    return trainer_setup(t, cfg, gpu, 0, micro, err);
}

void trainer_free(Trainer *t) {
    if (t->release) t->release(t);                  // the devices beside it first (multi_free)
    if (t->fam) t->fam->free(t);
    if (t->tm[0]) t->m.be->dev.bind(t->m.be_ctx);
    for (int k = 0; k < TM_COUNT; k++)
        if (t->tm[k]) t->m.be->dev.timer_free(t->m.be_ctx, t->tm[k]);
    if (!t->m.on_device) free(t->scal);
    if (t->master) sgd_free(&t->sgd);
    free(t->slots); free(t->input); free(t->sums);
    device_release(t);
    model_free(&t->m);
    memset(t, 0, sizeof *t);
}

// ---- one iteration, in phases so several devices can share the loss normaliser ---------------

// The head maps (and a dual head's auxiliary maps) of the batch, with their gradients.
static void loss_batch(Trainer *t, int n, int h, int w, const float *targets, int nt) {
    Model *m = &t->m;
    t->lb = (LossBatch){ .nc = m->nc, .img_h = h, .img_w = w, .targets = targets, .n_targets = nt };
    t->lb_aux = t->lb;
    for (int l = 0; l < LOSS_LEVELS; l++) {
        t->lb.head[l] = model_value(m, m->head[l], n);
        t->grad_maps[l] = model_grad(m, m->head[l], n);
        if (!m->n_aux) continue;
        t->lb_aux.head[l] = model_value(m, m->aux[l], n);
        t->grad_aux[l] = model_grad(m, m->aux[l], n);
    }
}

void trainer_mark(Trainer *t, int mark) {
    t->m.be->dev.timer_record(t->m.be_ctx, t->tm[mark]);
    t->tm_set |= 1u << mark;
}

void trainer_read_times(Trainer *t, PhaseTimes *delta) {
    static const struct { int from, to; size_t at; } SPANS[] = {
        { TM_F0, TM_F1, offsetof(PhaseTimes, forward) }, { TM_F1, TM_A1, offsetof(PhaseTimes, loss) },
        { TM_C0, TM_C1, offsetof(PhaseTimes, loss) },    { TM_C1, TM_B1, offsetof(PhaseTimes, backward) },
        { TM_G0, TM_G1, offsetof(PhaseTimes, gather) },  { TM_U0, TM_U1, offsetof(PhaseTimes, optim) },
        { TM_P0, TM_P1, offsetof(PhaseTimes, broadcast) },
    };
    PhaseTimes d = { 0 };
    for (size_t k = 0; k < sizeof SPANS / sizeof SPANS[0]; k++) {
        unsigned both = 1u << SPANS[k].from | 1u << SPANS[k].to;
        if ((t->tm_set & both) != both) continue;
        double sec = t->m.be->dev.timer_seconds(t->m.be_ctx, t->tm[SPANS[k].from], t->tm[SPANS[k].to]);
        *(double *)((char *)&d + SPANS[k].at) += sec;
        *(double *)((char *)&t->t + SPANS[k].at) += sec;
    }
    t->tm_set = 0;
    if (delta) *delta = d;
}

StepShape trainer_shape(const Trainer *t, int S) {
    StepShape s = t->shape;
    if (!s.H || !s.W) s.H = s.W = S;
    if (!s.h || !s.w) s.h = s.H, s.w = s.W;
    return s;
}

int trainer_phase_forward(Trainer *t, int n, int S, const float *images, const uint8_t *images_u8,
                          const float *targets, int nt, Err *err) {
    StepShape s = trainer_shape(t, S);             // targets are normalised: a resize leaves them as they are
    trainer_mark(t, TM_F0);
    if (t->input_aug) model_forward_aug(&t->m, t->input_aug, n, s.H, s.W, s.h, s.w, 1);
    else if (images_u8) model_forward_u8_resized(&t->m, images_u8, n, s.H, s.W, s.h, s.w, 1);
    else model_forward(&t->m, images, n, s.h, s.w, 1);   // floats: at the model's size; NULL: on the device
    trainer_mark(t, TM_F1);
    loss_batch(t, n, s.h, s.w, targets, nt);
    int rc = t->fam->assign(t, t->scal + SC_TSS, err);   // YOLO26: main the one-to-one branch, aux one-to-many
    trainer_mark(t, TM_A1);
    return rc;
}

void trainer_phase_backward(Trainer *t, int n, const double *tss, int n_tss, double batch_mult) {
    trainer_mark(t, TM_C0);
    if (tss) t->m.be->loss.loss_norm(t->m.be_ctx, tss, n_tss, t->scal + SC_NORM);
    t->items_mult = batch_mult;
    t->fam->compute(t, batch_mult);                    // both heads (or branches), each by its normaliser
    trainer_mark(t, TM_C1);
    model_backward(&t->m, n);
    trainer_mark(t, TM_B1);
}

void trainer_phase_items(Trainer *t, LossOut *out) {
    t->fam->items(t, out);
}

void trainer_update(Trainer *t, int epoch, int i) {
    trainer_mark(t, TM_U0);
    t->fam->update(t, epoch, i);                       // SGD; YOLO26: MuSGD, AdamW or SGD over its 8 groups
    trainer_mark(t, TM_U1);
}

// The learning rates of iteration (epoch, i) into t->lr without advancing the schedule: a run
// resumed after its epoch's last batch (stopped during validation) logs them as the run that went on.
void trainer_lr_at(Trainer *t, int epoch, int i) { t->fam->lr_at(t, epoch, i); }

int trainer_save(const Trainer *t, const char *path, Err *err) {
    Model view = t->m;                 // the same names and shapes, with the EMA's values
    view.state = t->ema;
    return model_save(&view, path, err);
}
