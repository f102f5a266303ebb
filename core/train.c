// train.c: one training run: dataset, loader, model, optimizer schedule, EMA, logs, checkpoints.
// The step follows YOLOv9's train.py (reference section 4.8): forward, loss x batch, backward,
// and every `accumulate` batches: clip to norm 10, SGD nesterov, EMA update.
#include "core/train.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "io/dataset.h"
#include "io/loader.h"
#include "io/picture.h"
#include "core/train_tb.h"
#include "io/plot.h"
#include "core/checkpoint.h"
#include "core/infer_devices.h"
#include "core/memlimit.h"
#include "core/readfile.h"
#include "core/runlock.h"
#include "core/multi.h"
#include "core/train26.h"
#include "core/transfer.h"
#include "core/plots.h"
#include "core/val.h"
#include "gpu/device.h"
#include "io/synth.h"

// ---- the step ------------------------------------------------------------------------------

// The model on its device and the loss work; the master also gets the optimizer state and the EMA.
static int trainer_setup(Trainer *t, const Config *cfg, int gpu, int master, int micro, Err *err) {
    memset(t, 0, sizeof *t);
    if (model_build(cfg, micro, cfg->imgsz, &t->m, err)) return -1;
    Model *m = &t->m;
    if (m->end2end && train26_check(cfg, err)) { model_free(m); return -1; }
    if (!m->end2end && strcmp(cfg->optimizer, "SGD") && strcmp(cfg->optimizer, "auto")) {
        model_free(m);
        return err_set(err, "optimizer=%s: %s trains with SGD, as YOLOv9's train.py; MuSGD and AdamW are YOLO26's "
                       "(cfg/yolo26s.ini): use optimizer=SGD or auto", cfg->optimizer, cfg->file);
    }
    unsigned char frozen[CFG_MAX_LAYERS];
    if (freeze_mask(cfg, m, frozen, err)) { model_free(m); return -1; }
    freeze_apply(m, frozen);
    if (cfg->weights[0]) {          // what matches by name and shape; the rest fresh (core/transfer.h)
        if (model_transfer(m, cfg->weights, (uint64_t)cfg->seed, master, err)) { model_free(m); return -1; }
    } else {
        model_init_weights(m, (uint64_t)cfg->seed);
    }
    t->master = master;
    if (gpu < 0) {
        // The arenas are reserved but not yet touched: refuse now rather than be killed mid-epoch.
        // OpenBLAS's buffers first (it would spin where they do not fit), then the run's own need
        // against the least of MemAvailable, the cgroup limit and ulimit -v.
        if (blas_reserve(err)) { model_free(m); return -1; }
        double states = m->end2end ? 4.0 : 3.0;       // YOLO26: two optimizer states (MuSGD s, m; AdamW m, v)
        double stacks = (cfg->workers + 4.0) * (8 << 20);   // loader and BLAS threads' stacks (address space)
        double need = model_host_bytes(m) + stacks +
                      sizeof(float) * (states * m->n_state + (double)cfg->batch * cfg->imgsz * cfg->imgsz * 3);
        MemBudget have = mem_budget(model_host_bytes(m));   // the arenas are mapped, not yet touched
        if (have.bytes > 0 && need > 0.9 * have.bytes) {
            model_free(m);
            return err_set(err, "training on the CPU at batch %d and imgsz %d needs %.1f GB of memory, %.1f GB are "
                           "available (%s); lower batch or imgsz (cfg/t.ini is set up for CPU runs), raise the "
                           "limit, or train on a GPU", micro, cfg->imgsz, need / 1e9, have.bytes / 1e9, have.what);
        }
        if (master) {
            t->ema = xmalloc(m->n_state * sizeof(float));
            memcpy(t->ema, m->state, m->n_state * sizeof(float));
            t->recv = xmalloc(m->n_state * sizeof(float));
        }
        if (!m->end2end) t->lw = loss_work_new();
        if (m->n_aux && !m->end2end) t->lw_aux = loss_work_new();
    } else {
#ifdef USE_CUDA
        if (trainer_gpu_init(t, cfg, gpu, err)) { model_free(m); return -1; }
#else
        model_free(m);
        return err_set(err, "device=%d: this yolotrain was built without CUDA; use device=cpu", gpu);
#endif
    }
    t->input = xmalloc((size_t)cfg->batch * cfg->imgsz * cfg->imgsz * 3 * sizeof(float));
#ifdef USE_CUDA
    if (t->dev) t->scal = ((Device *)t->dev)->scal;
#endif
    if (!t->scal) t->scal = xcalloc(SC_COUNT, sizeof(double));
    for (int k = 0; k < TM_COUNT; k++) t->tm[k] = m->be->timer_new(m->be_ctx);   // the device is the current one
    model_zero_grad(m);
    if (m->end2end && train26_init(t, cfg, err)) { trainer_free(t); return -1; }   // YOLO26: core/train26.c
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
    if (t->y26) { train26_optimizer_init(t, cfg, nb); return; }   // its groups, optimizer and schedule
    sgd_init(&t->sgd, t->slots, t->n_slots, m->be, m->be_ctx, t->sgd_buf);   // NULL: a host buffer
    LrKind kind = cfg->cos_lr ? LR_COSINE : LR_LINEAR;
    opt_schedule_init(&t->sched, &cfg->hyp, kind, cfg->epochs, nb, cfg->batch);
}

int trainer_init(Trainer *t, const Config *cfg, int nb, int gpu, Err *err) {
    if (trainer_setup(t, cfg, gpu, 1, cfg->batch, err)) return -1;
    optimizer_init(t, cfg, nb);
    return 0;
}

int trainer_init_replica(Trainer *t, const Config *cfg, int gpu, int micro, Err *err) {
    return trainer_setup(t, cfg, gpu, 0, micro, err);
}

int trainer_init_devices(Trainer *t, const Config *cfg, int nb, const DeviceList *devs, Err *err) {
    if (devs->n == 1) return trainer_init(t, cfg, nb, devs->gpu[0], err);
    int micro = multi_plan_micro(cfg->split, cfg->batch, devs->n, err);
    if (micro < 0) return -1;
    if (trainer_setup(t, cfg, devs->gpu[0], 1, micro, err)) return -1;
    optimizer_init(t, cfg, nb);
    if (multi_init(t, cfg, devs, micro, err)) { trainer_free(t); return -1; }
    return 0;
}

void trainer_free(Trainer *t) {
    if (t->multi) multi_free(t);
    train26_free(t);
    if (t->tm[0]) t->m.be->bind(t->m.be_ctx);
    for (int k = 0; k < TM_COUNT; k++)
        if (t->tm[k]) t->m.be->timer_free(t->m.be_ctx, t->tm[k]);
    if (!t->dev) free(t->scal);
    if (t->master) sgd_free(&t->sgd);
    free(t->slots); free(t->input);
    if (t->dev) {
#ifdef USE_CUDA
        trainer_gpu_free(t);                           // the GPU memory, the model's included
#endif
    } else {
        loss_work_free(t->lw);
        loss_work_free(t->lw_aux);
        free(t->ema);
        free(t->recv);
    }
    model_free(&t->m);
    memset(t, 0, sizeof *t);
}

// ---- one iteration, in phases so several devices can share the loss normaliser ---------------

// The head maps (and a dual head's auxiliary maps) of the batch, with their gradients.
static void loss_batch(Trainer *t, int n, int S, const float *targets, int nt) {
    Model *m = &t->m;
    t->lb = (LossBatch){ .nc = m->nc, .img_h = S, .img_w = S, .targets = targets, .n_targets = nt };
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
    t->m.be->timer_record(t->m.be_ctx, t->tm[mark]);
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
        double sec = t->m.be->timer_seconds(t->m.be_ctx, t->tm[SPANS[k].from], t->tm[SPANS[k].to]);
        *(double *)((char *)&d + SPANS[k].at) += sec;
        *(double *)((char *)&t->t + SPANS[k].at) += sec;
    }
    t->tm_set = 0;
    if (delta) *delta = d;
}

// The two assignments of the batch, each head on its own (detached) predictions: the local
// target-score sums into tss[0], tss[1] (t's memory).
static int assign_heads(Trainer *t, double *tss, Err *err) {
    if (t->y26) return train26_assign(t, tss, err);   // main: the one-to-one branch, aux: one-to-many
#ifdef USE_CUDA
    if (t->dev) return trainer_gpu_assign(t, tss, err);
#endif
    if (loss_assign(t->lw, &t->lb, &tss[0], err)) return -1;
    return t->m.n_aux ? loss_assign(t->lw_aux, &t->lb_aux, &tss[1], err) : 0;
}

int trainer_phase_forward(Trainer *t, int n, int S, const float *images, const uint8_t *images_u8,
                          const float *targets, int nt, Err *err) {
    trainer_mark(t, TM_F0);
    if (images_u8) model_forward_u8(&t->m, images_u8, n, S, S, 1);
    else model_forward(&t->m, images, n, S, S, 1);   // images NULL: the batch is on the device
    trainer_mark(t, TM_F1);
    loss_batch(t, n, S, targets, nt);
    int rc = assign_heads(t, t->scal + SC_TSS, err);
    trainer_mark(t, TM_A1);
    return rc;
}

// The loss of both heads (utils/loss_tal_dual.py): the auxiliary one weighted through batch_mult,
// each normalised by its own scal[SC_NORM + h].
static void compute_heads(Trainer *t, double batch_mult) {
    t->items_mult = batch_mult;
    if (t->y26) { train26_compute(t, batch_mult); return; }   // both branches, ProgLoss-weighted
#ifdef USE_CUDA
    if (t->dev) { trainer_gpu_compute(t, batch_mult); return; }
#endif
    const double *norm = t->scal + SC_NORM;
    LossOut *out = &t->out_cpu;
    memset(out, 0, sizeof *out);
    loss_compute(t->lw, &t->lb, norm[0], batch_mult, t->grad_maps, out);
    if (!t->m.n_aux) return;
    LossOut aux;
    loss_compute(t->lw_aux, &t->lb_aux, norm[1], LOSS_AUX_WEIGHT * batch_mult, t->grad_aux, &aux);
    loss_add_aux(out, &aux);
}

void trainer_phase_backward(Trainer *t, int n, const double *tss, int n_tss, double batch_mult) {
    trainer_mark(t, TM_C0);
    if (tss) t->m.be->loss_norm(t->m.be_ctx, tss, n_tss, t->scal + SC_NORM);
    compute_heads(t, batch_mult);
    trainer_mark(t, TM_C1);
    model_backward(&t->m, n);
    trainer_mark(t, TM_B1);
}

void trainer_phase_items(Trainer *t, LossOut *out) {
    if (t->y26) { train26_items(t, out); return; }
#ifdef USE_CUDA
    if (t->dev) { trainer_gpu_items(t, out); return; }
#endif
    *out = t->out_cpu;
}

// ---- the same phases with host values (tests and inspection: they wait for the device) ---------

int trainer_forward_assign_heads(Trainer *t, int n, int S, const float *images, const uint8_t *images_u8,
                                 const float *targets, int nt, LossNorm *tss, Err *err) {
    double v[2] = { 0, 0 };
    int rc = trainer_phase_forward(t, n, S, images, images_u8, targets, nt, err);
    if (!rc) t->m.be->download(t->m.be_ctx, (float *)v, (const float *)(t->scal + SC_TSS), 4);   // 2 doubles
    *tss = (LossNorm){ v[0], v[1] };
    t->tss_local = *tss;
    trainer_read_times(t, NULL);
    return rc;
}

int trainer_forward_assign(Trainer *t, int n, int S, const float *images, const uint8_t *images_u8,
                           const float *targets, int nt, double *tss, Err *err) {
    LossNorm both;
    int rc = trainer_forward_assign_heads(t, n, S, images, images_u8, targets, nt, &both, err);
    *tss = both.main;
    return rc;
}

void trainer_compute_backward_heads(Trainer *t, int n, const LossNorm *norm, double batch_mult, LossOut *out) {
    double v[2] = { norm->main, norm->aux };
    t->m.be->upload(t->m.be_ctx, (float *)(t->scal + SC_NORM), (const float *)v, 4);   // 2 doubles
    trainer_phase_backward(t, n, NULL, 0, batch_mult);
    t->m.be->sync(t->m.be_ctx);
    trainer_read_times(t, NULL);
    trainer_phase_items(t, out);
}

void trainer_compute_backward(Trainer *t, int n, double norm, double batch_mult, LossOut *out) {
    LossNorm both = { norm, t->tss_local.aux > 1 ? t->tss_local.aux : 1 };
    trainer_compute_backward_heads(t, n, &both, batch_mult, out);
}

void trainer_update(Trainer *t, int epoch, int i) {
    Model *m = &t->m;
    trainer_mark(t, TM_U0);
    if (t->y26) {                                      // MuSGD, AdamW or SGD over the 8 groups
        train26_update(t, epoch, i);
        trainer_mark(t, TM_U1);
        return;
    }
    OptStep st = opt_schedule_next(&t->sched, epoch, i);
    memcpy(t->lr, st.lr, sizeof t->lr);
    if (st.step) {
        clip_grad_norm_queued(&t->sgd, 10.0f, t->scal + SC_SUMSQ);
        sgd_step(&t->sgd, &st);                        // also zeroes the gradients
        m->be->ema_update(m->be_ctx, t->ema, m->state, m->n_state, ema_decay(++t->ema_updates));
    }
    trainer_mark(t, TM_U1);
}

// The learning rates of iteration (epoch, i) into t->lr without advancing the schedule: a run
// resumed after its epoch's last batch (stopped during validation) logs them as the run that went on.
static void trainer_lr_at(Trainer *t, int epoch, int i) {
    if (t->y26) { train26_lr_at(t, epoch, i); return; }
    OptSchedule copy = t->sched;                       // opt_schedule_next records steps: not in t
    OptStep st = opt_schedule_next(&copy, epoch, i);
    memcpy(t->lr, st.lr, sizeof t->lr);
}

int trainer_step(Trainer *t, int n, int S, const float *targets, int nt, int epoch, int i,
                 LossOut *out, Err *err) {
    if (t->multi) return multi_step(t->multi, n, S, targets, nt, epoch, i, out, err);
    const float *images = t->input_u8 || t->input_resident ? NULL : t->input;
    if (trainer_phase_forward(t, n, S, images, t->input_u8, targets, nt, err)) {
        t->m.be->sync(t->m.be_ctx);                    // the forward read the batch: done before it goes back
        return -1;
    }
    trainer_phase_backward(t, n, t->scal + SC_TSS, 1, n);
    trainer_update(t, epoch, i);
    t->m.be->sync(t->m.be_ctx);                        // the step's one host wait
    trainer_read_times(t, NULL);
    trainer_phase_items(t, out);
    return 0;
}

int trainer_save(const Trainer *t, const char *path, Err *err) {
    Model view = t->m;                 // the same names and shapes, with the EMA's values
    view.state = t->ema;
    return model_save(&view, path, err);
}

// ---- the run -------------------------------------------------------------------------------

// Ctrl-C and SIGTERM. Once training runs (stop_savable) they only set stop_requested: the loop, the
// validation pass and the checkpoint writes all finish what they hold within seconds, then the run
// saves where it stands and says how to resume. Before that (reading the dataset, building the
// model, loading weights) there is nothing to save: the run ends at once with status 128 + signal;
// the files written by then (the run folder, args.ini by rename, the lock the kernel drops) are whole.
static volatile sig_atomic_t stop_requested, stop_savable;
static void on_signal(int sig) {
    if (!stop_savable) {
        static const char msg[] = "\nyolotrain: stopped by a signal before training started; nothing to save\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        _exit(128 + sig);
    }
    stop_requested = sig;
}

// YT_SIGNAL_AT=startup|val|checkpoint (tests): SIGTERM to this process at that point (once per
// process), as a user's kill arriving while the dataset loads, validation runs or checkpoints are written.
static void injected_signal(const char *where) {
    static int done;
    const char *at = getenv("YT_SIGNAL_AT");
    if (!done && at && !strcmp(at, where)) { done = 1; raise(SIGTERM); }
}

static void say_stopped(const char *dir, int epoch, int batch, const char *when) {
    printf("\nstopped (%s) %s epoch %d, batch %d: saved %s/weights/last.safetensors and last_state.safetensors; "
           "continue with: ./yolotrain resume=%s\n", stop_requested < 0 ? "YT_STOP_AFTER_STEPS" : "signal", when,
           epoch, batch, dir, dir);
}

int make_dirs(const char *path) {
    char buf[4 * CFG_PATH];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}

// runs/train/exp, exp2, exp3, ... (the first free one), or exactly NAME with exist_ok; plus weights/;
// locked for this run (*lock). A folder another run holds is skipped, or refused under exist_ok.
static int run_dir(const Config *cfg, char *dir, size_t size, int *lock, Err *err) {
    struct stat st;
    for (int k = 1; k < 10000; k++) {
        if (k == 1) snprintf(dir, size, "%s/%s", cfg->project, cfg->name);
        else snprintf(dir, size, "%s/%s%d", cfg->project, cfg->name, k);
        if (!cfg->exist_ok && !stat(dir, &st)) continue;
        char w[CFG_PATH * 2 + 16];
        snprintf(w, sizeof w, "%s/weights", dir);
        if (make_dirs(w)) return err_set(err, "cannot create %s: %s; set project= to a writable folder", w, strerror(errno));
        int rc = run_lock(dir, lock, err);
        if (rc < 0 || (rc > 0 && cfg->exist_ok)) return -1;
        if (rc == 0) return 0;             // rc > 0: another run made this folder just now; the next name
    }
    return err_set(err, "%s/%s: no free run folder name up to %s9999; pick another name=", cfg->project, cfg->name,
                   cfg->name);
}

// Refuse to start when the run folder's disk cannot hold the checkpoints of one epoch end (last,
// best, the training state, each written beside the old one before the rename): better now than
// at epoch 180.
// YT_DISK_FREE_MB=N (tests) stands in for the free space statvfs reports.
static int check_space(const char *dir, const Model *m, Err *err) {
    struct statvfs v;
    if (statvfs(dir, &v)) return 0;                    // cannot tell: go on
    double need = 2.0 * (2 * m->n_state + 2 * m->n_state + m->n_state) * sizeof(float) + (64 << 20);
    double free_b = (double)v.f_bavail * v.f_frsize;
    const char *fake = getenv("YT_DISK_FREE_MB");
    if (fake) free_b = atof(fake) * 1e6;
    if (free_b < need)
        return err_set(err, "%s: %.0f MB free, the checkpoints need about %.0f MB; free some space or set project= "
                       "to another disk", dir, free_b / 1e6, need / 1e6);
    return 0;
}

// Memory of the run for the progress line: the GPU's used memory when training on one, else RSS.
static double mem_gb(const Trainer *t) {
#ifdef USE_CUDA
    if (t->dev) return device_mem_used(t->dev) / 1073741824.0;
#endif
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) { if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0; fclose(f); }
    return rss * (double)sysconf(_SC_PAGESIZE) / 1073741824.0;
}


typedef struct { double box, cls, dfl; int n; } Running;

// The reference's progress line; redrawn in place on a terminal, printed once per epoch otherwise.
static void progress(const Config *cfg, const Trainer *t, int epoch, const Running *r, int inst, int S, int i,
                     int nb, double t_epoch, int images, int final) {
    static int tty = -1;
    if (tty < 0) tty = isatty(STDOUT_FILENO);
    if (!final && !tty) return;
    char ep[32], mem[16];
    snprintf(ep, sizeof ep, "%d/%d", epoch, cfg->epochs - 1);
    snprintf(mem, sizeof mem, "%.3gG", mem_gb(t));
    double ips = t_epoch > 0 ? images / t_epoch : 0, eta = i ? t_epoch / i * (nb - i) : 0;
    int bar = 10 * i / nb;
    printf("%s%11s%11s%11.4g%11.4g%11.4g%11d%11d: %3d%%|%.*s%.*s| %d/%d %.1fimg/s ETA %d:%02d", tty ? "\r" : "",
           ep, mem, r->box / r->n, r->cls / r->n, r->dfl / r->n, inst, S, 100 * i / nb, bar * 3,
           "██████████████████████████████", (10 - bar), "          ", i, nb, ips, (int)eta / 60, (int)eta % 60);
    if (final) printf("\n");
    fflush(stdout);
}

static int open_data(Config *cfg, Dataset *ds, Err *err) {
    if (!cfg->data[0] && !cfg->n_data_kv) {
        if (synth_ensure(SYNTH_DIR, err)) return -1;
        snprintf(cfg->data, sizeof cfg->data, "%s/data.yaml", SYNTH_DIR);
        printf("data: the built-in synthetic dataset (%s; `yolotrain synth` regenerates it)\n", cfg->data);
    }
    DatasetOptions opt = { .strict = cfg->strict, .min_items = cfg->min_items, .report = stderr };
    if (dataset_open(NULL, cfg, "train", &opt, ds, err)) return -1;
    if (cfg->nc != ds->nc) {
        printf("Overriding model nc=%d with nc=%d from the dataset\n", cfg->nc, ds->nc);
        config_set_nc(cfg, ds->nc);
    }
    return 0;
}

// Keys the config accepts for pieces that are not built yet: say so instead of ignoring them.
static void note_unbuilt_keys(const Config *cfg) {
    if (cfg->rect) printf("note: rect=1 has no effect yet: training batches are square (imgsz x imgsz)\n");
}

// The devices device= names, or -1 after printing why it cannot be used (with the GPUs found).
static int pick_devices(Config *cfg, DeviceList *devs) {
    if (infer_pick_devices(cfg, "yolotrain", devs)) return -1;   // as val and detect pick theirs
    if (!cfg->device[0] && devs->gpu[0] < 0) printf("device: no GPU found, training on the CPU\n");
    Err err;
    if (infer_auto_batch(cfg, devs, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return -1; }   // batch=-1
    return 0;
}

// The start-up plan of a multi-device run: micro-batch per device, and what an uneven split costs.
static void print_split(const Config *cfg, const DeviceList *devs) {
    int sizes[MULTI_MAX];
    Err err;
    if (devs->n < 2 || split_batch(cfg->split, cfg->batch, devs->n, sizes, &err)) return;
    printf("devices:");
    for (int k = 0; k < devs->n; k++)
        printf(" %s%d: %d images%s", devs->gpu[k] < 0 ? "cpu" : "GPU ", devs->gpu[k] < 0 ? k : devs->gpu[k], sizes[k],
               k < devs->n - 1 ? "," : "\n");
    if (!strcmp(cfg->split, "even") && cfg->batch % devs->n)
        printf("warning: batch=%d does not divide by %d devices: split as torch.chunk gives %d and %d images, so the "
               "device with fewer waits for the others each step; a multiple of %d (e.g. batch=%d) keeps them even\n",
               cfg->batch, devs->n, sizes[0], sizes[devs->n - 1], devs->n,
               cfg->batch < devs->n ? devs->n : cfg->batch / devs->n * devs->n);   // never batch=0
}

typedef struct {              // what the run keeps across epochs for validation and checkpoints
    const Dataset *train, *val;
    const char    *dir;
    double         best_fitness;
    int            best_epoch;
    ValResult      best;         // metrics of the best epoch (Metrics arrays freed at the end)
    RunPoint       start;        // where this process starts (a resumed run: where the last one stopped)
    int            stop_after;   // > 0: stop after this many steps, as on Ctrl-C (YT_STOP_AFTER_STEPS, tests)
    TrainTb        tb;           // the TensorBoard log (tensorboard=1)
} RunState;

// weights/last_state.safetensors: everything to continue from point p (see core/checkpoint.h)
static int save_state(const Trainer *t, const RunState *rs, int epoch, int batch, const Running *r) {
    Err err;
    char path[CFG_PATH * 2 + 64];
    snprintf(path, sizeof path, "%s/weights/last_state.safetensors", rs->dir);
    RunPoint p = { epoch, batch, rs->best_fitness, rs->best_epoch, r->box, r->cls, r->dfl, r->n };
    if (checkpoint_save(t, &p, path, &err)) {
        fprintf(stderr, "yolotrain: %s; the previous state file, if any, is intact\n", err.msg);
        return -1;
    }
    return 0;
}

// results.csv as the reference writes it: %20s header, %20.5g values, epoch 0-based
static void results_row(RunState *rs, int epoch, const Running *r, const ValResult *v, const double lr[3]) {
    char path[CFG_PATH * 2 + 64];
    snprintf(path, sizeof path, "%s/results.csv", rs->dir);
    FILE *f = fopen(path, "a");
    if (!f) { fprintf(stderr, "yolotrain: cannot append to %s: %s\n", path, strerror(errno)); return; }
    if (ftell(f) == 0)
        for (int i = 0; i < 14; i++) fprintf(f, "%20s%s", results_keys[i], i < 13 ? "," : "\n");
    double vals[14] = { epoch, r->box / r->n, r->cls / r->n, r->dfl / r->n, v->m.mp, v->m.mr, v->m.map50, v->m.map,
                        v->box, v->cls, v->dfl, lr[0], lr[1], lr[2] };
    for (int i = 0; i < 14; i++) fprintf(f, "%20.5g%s", vals[i], i < 13 ? "," : "\n");
    fclose(f);
    train_tb_epoch(&rs->tb, epoch, vals);
}

// Drop the results.csv rows of epochs >= `epoch`: an epoch's row is written before its checkpoint,
// so a failed save or a crash leaves a row that the resumed run writes again. Temp file + rename.
static void drop_results_from(const char *dir, int epoch) {
    char path[CFG_PATH * 2 + 64], tmp[CFG_PATH * 2 + 80], line[1024];
    snprintf(path, sizeof path, "%s/results.csv", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = rf_fopen(path, "results file", NULL);
    if (!f) return;
    FILE *o = fopen(tmp, "w");
    if (!o) { fclose(f); return; }
    for (int row = 0; fgets(line, sizeof line, f); row++)
        if (row == 0 || atoi(line) < epoch) fputs(line, o);
    fclose(f);
    if (fclose(o) == 0) rename(tmp, path);
    else remove(tmp);
}

// After an epoch: validate the EMA weights, log, save last (and best by fitness). -1 on a failed save,
// 1 when a signal stopped the validation (nothing written: the caller saves the state before it).
static int end_epoch(Config *cfg, Trainer *t, RunState *rs, int epoch, const Running *r) {
    Err err;
    char path[CFG_PATH * 2 + 64];
    if (t->y26) train26_end_epoch(t);                  // ProgLoss: the next epoch's branch weights
    ValOptions vo = val_options_train(cfg);           // train.py: 2*batch, rect, pad 0.5; run in chunks
    // val_batch0 pictures after the first and the last epoch only: drawing and encoding them was most
    // of a small validation (3 ms of its 4.9 per image, coco128 on an H200); train.py plots none
    // during training
    vo.picture_dir = epoch == 0 || epoch == cfg->epochs - 1 ? rs->dir : NULL;
    // the plots of the run's last validation: the last epoch's, or one that patience may end the run after
    vo.plots_dir = epoch == cfg->epochs - 1 || (cfg->patience > 0 && epoch - rs->best_epoch >= cfg->patience) ? rs->dir : NULL;
    vo.stop = &stop_requested;                         // a signal ends the pass within a batch
    injected_signal("val");
    ValResult v = { 0 };
    int vrc = val_evaluate_ema(t, rs->val, &vo, &v, &err);   // the EMA weights, on every device
    if (vrc && stop_requested) return 1;
    if (vrc) { fprintf(stderr, "yolotrain: validation failed: %s\n", err.msg); memset(&v, 0, sizeof v); }
    for (int k = 0; vo.picture_dir && !vrc && k < 2; k++)
        train_tb_picture(&rs->tb, rs->dir, k ? "val_batch0_pred.jpg" : "val_batch0_labels.jpg", epoch);
    results_row(rs, epoch, r, &v, t->lr);
    char csv[CFG_PATH * 2 + 64];
    snprintf(csv, sizeof csv, "%s/results.csv", rs->dir);
    snprintf(path, sizeof path, "%s/results.png", rs->dir);
    if (plot_results(csv, path, &err)) fprintf(stderr, "note: %s\n", err.msg);
    else if (epoch == cfg->epochs - 1) train_tb_picture(&rs->tb, rs->dir, "results.png", epoch);   // as yolov9, at the end
    snprintf(path, sizeof path, "%s/weights/last.safetensors", rs->dir);
    int rc = 0;
    injected_signal("checkpoint");
    if (trainer_save(t, path, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); rc = -1; }
    if (!rc && !vrc && (v.fitness > rs->best_fitness || rs->best_epoch < 0)) {
        rs->best_fitness = v.fitness;
        rs->best_epoch = epoch;
        snprintf(path, sizeof path, "%s/weights/best.safetensors", rs->dir);
        if (trainer_save(t, path, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); rc = -1; }
        val_result_free(&rs->best);
        rs->best = v;                                  // kept: the final summary prints it
    } else if (!vrc) {
        val_result_free(&v);
    }
    if (rc) return -1;
    if (cfg->save_period > 0 && (epoch + 1) % cfg->save_period == 0) {
        snprintf(path, sizeof path, "%s/weights/epoch%d.safetensors", rs->dir, epoch);
        if (trainer_save(t, path, &err)) fprintf(stderr, "yolotrain: %s\n", err.msg);
    }
    return 0;
}

// What a failure handler needs: the run, and which checkpoints on disk are whole.
typedef struct {
    const Config  *cfg;
    Trainer       *t;
    const char    *dir;
    int            saved_epoch, saved_batch;   // where last_state.safetensors continues; epoch -1: none yet
} Failure;

// 1 when the EMA weights hold only finite values (else err names the first tensor that does not):
// weights that went NaN are never saved over good ones.
static int ema_finite(const Trainer *t, Err *err) {
    size_t n = t->m.n_state;
    float *host = xmalloc(n * sizeof(float));
    t->m.be->download(t->m.be_ctx, host, t->ema, n);
    int rc = model_check_finite(&t->m, host, n, "the EMA weights", "ema", err);
    free(host);
    return rc == 0;
}

// A step failed (what NULL: a device error or bad targets, reported already) or a CUDA call did (the
// fatal hook of gpu/device.h, what: the error): keep the newest weights. The EMA on device 0 is whole
// as of the last optimizer step, so it goes to weights/last.safetensors; last_state stays where it
// was saved (this step's gradients may be partial), which is where resume continues. Nothing is
// written under reduce=sharded (the EMA is spread over the devices, one of which failed) or when
// device 0's GPU is dead (a sticky error); then, or when the save fails, the intact files are named.
static void save_after_failure(const char *what, void *arg) {
    const Failure *f = arg;
    char last[CFG_PATH * 2 + 64], why[sizeof(Err)] = "";
    Err err;
    if (what) fprintf(stderr, "\nyolotrain: the run stops on a CUDA error (%s)\n", what);
    snprintf(last, sizeof last, "%s/weights/last.safetensors", f->dir);
    if (f->t->multi && !strcmp(f->cfg->reduce, "sharded")) snprintf(why, sizeof why, "under reduce=sharded the EMA "
                                                                      "is spread over the devices");
#ifdef USE_CUDA
    else if (f->t->dev && !device_usable(f->t->dev)) snprintf(why, sizeof why, "GPU %d can no longer run work (a "
                                                              "sticky CUDA error)", ((Device *)f->t->dev)->id);
#endif
    else if (!ema_finite(f->t, &err)) snprintf(why, sizeof why, "%s", err.msg);
    else if (trainer_save(f->t, last, &err)) snprintf(why, sizeof why, "%s", err.msg);
    if (!why[0]) {
        fprintf(stderr, "yolotrain: saved the EMA weights of the last optimizer step to %s; ", last);
        if (f->saved_epoch < 0) fprintf(stderr, "no training state was saved yet: start again with weights=%s\n", last);
        else fprintf(stderr, "the training state %s/weights/last_state.safetensors is intact: ./yolotrain resume=%s "
                     "continues from there\n", f->dir, f->dir);
        return;
    }
    if (f->saved_epoch < 0) {
        fprintf(stderr, "yolotrain: nothing saved (%s); the run had saved no checkpoint yet\n", why);
        return;
    }
    char when[64];
    if (f->saved_batch) snprintf(when, sizeof when, "epoch %d, batch %d", f->saved_epoch, f->saved_batch);
    else snprintf(when, sizeof when, "the end of epoch %d", f->saved_epoch - 1);
    fprintf(stderr, "yolotrain: nothing saved (%s); intact: %s and %s/weights/last_state.safetensors, of %s: "
            "./yolotrain resume=%s continues from there\n", why, last, f->dir, when, f->dir);
}

// YT_FAIL_DEVICE=K (tests): device K of a multi-device run fails its backward from the second step on,
// as a device error would.
static int injected_failure(int device, const char *phase, void *arg) {
    static int backward_calls;
    return device == *(const int *)arg && !strcmp(phase, "backward") && ++backward_calls >= 2;
}

// YT_FAIL_CUDA=STEP[:sticky] (tests): before step STEP of the run (from 1) a CUDA call fails through
// checkCuda (sticky: one that ends the GPU context); on the CPU the fatal path is entered directly.
static void injected_cuda_failure(const Trainer *t, int step) {
    const char *spec = getenv("YT_FAIL_CUDA");
    if (!spec || atoi(spec) != step) return;
    fprintf(stderr, "YT_FAIL_CUDA=%s: a CUDA error injected at step %d\n", spec, step);
#ifdef USE_CUDA
    if (t->dev) device_inject_fault(t->dev, strstr(spec, "sticky") != NULL);
#endif
    device_fatal("injected");
}

// YT_NAN_AT_STEP=N (tests): before step N a weight becomes NaN, as a diverging run's would, so the
// step's loss is NaN and the run must stop without saving NaN weights over the last finite ones.
static void injected_nan(const Trainer *t, int step) {
    const char *at = getenv("YT_NAN_AT_STEP");
    if (!at || atoi(at) != step) return;
    float nan = NAN;
    t->m.be->upload(t->m.be_ctx, t->m.state, &nan, 1);
}

static int train_epochs(Config *cfg, Trainer *t, Loader *ld, RunState *rs) {
    int nb = loader_batches(ld), S = cfg->imgsz, rc = 0;
    const Dataset *ds = rs->train;
    const char *dir = rs->dir;
    char path[CFG_PATH * 2 + 64];
    Err err;
    Failure fail = { cfg, t, dir, cfg->resume[0] ? rs->start.epoch : -1, rs->start.batch };
    device_set_fatal_hook(save_after_failure, &fail);   // until this returns: fail lives here
#ifdef USE_CUDA
    if (t->dev) loader_pin_buffers(ld, &(LoaderPinning){ gpu_host_pin, gpu_host_unpin, NULL });   // async uploads
#endif
    printf("%11s%11s%11s%11s%11s%11s%11s\n", "Epoch", "mem", "box_loss", "cls_loss", "dfl_loss", "Instances", "Size");
    int steps = 0;
    for (int epoch = rs->start.epoch; epoch < cfg->epochs && !stop_requested; epoch++) {
        int mosaic_on = epoch < cfg->epochs - cfg->close_mosaic;
        if (epoch && epoch == cfg->epochs - cfg->close_mosaic) printf("Closing dataloader mosaic\n");
        int i = epoch == rs->start.epoch ? rs->start.batch : 0;   // a resumed epoch goes on where it stopped
        loader_start_epoch_at(ld, epoch, mosaic_on, i);
        Running r = { 0 };
        if (i == 0) model_zero_grad(&t->m);            // train.py zeroes at every epoch start
        else r = (Running){ rs->start.box, rs->start.cls, rs->start.dfl, rs->start.n };
        double t0 = now_seconds(), tw = t0;
        int images = 0, inst = 0;
        // Two batches in hand: the next one's upload runs on the GPUs' copy streams behind this step.
        Batch *b = NULL, *next = NULL;
        if (loader_next(ld, &b)) multi_prefetch(t, b->images, b->n, S);
        for (t->t.data += now_seconds() - tw; !stop_requested && b; b = next, i++) {
            tw = now_seconds();
            if (loader_next(ld, &next)) multi_prefetch(t, next->images, next->n, S);
            else next = NULL;
            t->t.data += now_seconds() - tw;
            if (epoch == 0 && i == 0) {
                snprintf(path, sizeof path, "%s/train_batch0.jpg", dir);
                if (picture_batch(b, ds->names, ds->nc, path, &err)) fprintf(stderr, "note: %s\n", err.msg);
                else train_tb_picture(&rs->tb, dir, "train_batch0.jpg", 0);
            }
            injected_cuda_failure(t, ++steps);
            injected_nan(t, steps);
            t->input_u8 = b->images;                   // converted on the device: a quarter of the bytes
            LossOut lo;
            int bad = trainer_step(t, b->n, S, b->targets, b->nt, epoch, i, &lo, &err);
            t->input_u8 = NULL;                        // the batch goes back to the loader below
            if (bad) {
                fprintf(stderr, "\nyolotrain: %s\n", err.msg);
                loader_release(ld, b);
                if (next) loader_release(ld, next);
                save_after_failure(NULL, &fail);
                rc = 1;
                goto done;
            }
            if (!isfinite(lo.box) || !isfinite(lo.cls) || !isfinite(lo.dfl)) {   // the weights may follow
                fprintf(stderr, "\nyolotrain: the loss is not finite at epoch %d, batch %d (step %d of this run): "
                        "box %g, cls %g, dfl %g; the run stops (lower lr0, or check the data and the weights)\n",
                        epoch, i, steps, lo.box, lo.cls, lo.dfl);
                loader_release(ld, b);
                if (next) loader_release(ld, next);
                save_after_failure(NULL, &fail);
                rc = 1;
                goto done;
            }
            r.box += lo.box; r.cls += lo.cls; r.dfl += lo.dfl; r.n++;
            images += b->n; inst = b->nt;
            loader_release(ld, b);                     // the step has waited for its copies on the GPU
            progress(cfg, t, epoch, &r, inst, S, i + 1, nb, now_seconds() - t0, images, 0);
            if (rs->stop_after > 0 && steps == rs->stop_after) stop_requested = -1;
        }
        if (b) loader_release(ld, b);                  // stopped with the next batch in hand: resume remakes it
        progress(cfg, t, epoch, &r, inst, S, i, nb, now_seconds() - t0, images, 1);
        if (t->multi) {                                // per-device time split and memory, devices.csv
            snprintf(path, sizeof path, "%s/devices.csv", dir);
            FILE *dev_csv = fopen(path, "a");
            multi_epoch_report(t->multi, dev_csv, epoch);
            if (dev_csv) fclose(dev_csv);
            multi_gather_state(t->multi);              // sharded: EMA, momentum into device 0 before saving
        }
        int in_loop = stop_requested != 0;
        int ended = in_loop ? 1 : end_epoch(cfg, t, rs, epoch, &r);
        if (ended > 0) {                               // mid-epoch or mid-validation: save where we are;
            snprintf(path, sizeof path, "%s/weights/last.safetensors", dir);   // resume validates again
            int bad = trainer_save(t, path, &err);
            if (bad) fprintf(stderr, "yolotrain: %s\n", err.msg);
            rc = save_state(t, rs, epoch, i, &r) || bad;
            if (!rc) say_stopped(dir, epoch, i, in_loop ? "at" : "during the validation of");
            goto done;
        }
        if (ended < 0 || save_state(t, rs, epoch + 1, 0, &(Running){ 0 })) { rc = 1; goto done; }
        fail.saved_epoch = epoch + 1;
        fail.saved_batch = 0;
        if (stop_requested && epoch + 1 < cfg->epochs) {   // while checkpointing: those files are whole
            say_stopped(dir, epoch + 1, 0, "at the start of");
            goto done;
        }
        if (cfg->patience > 0 && epoch - rs->best_epoch >= cfg->patience) {
            printf("Stopping training early as no improvement observed in last %d epochs. Best results "
                   "observed at epoch %d; the best model is saved as best.safetensors.\n", cfg->patience, rs->best_epoch);
            break;
        }
    }
done:
    device_set_fatal_hook(NULL, NULL);
    return rc;
}

// resume=1: the folder under `project` whose weights/last_state.safetensors was written last (read
// with opendir and stat: no shell, so no name under project can run anything).
static int newest_run(const char *project, char *dir, size_t size, Err *err) {
    DIR *d = opendir(project);
    double newest = -1;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char state[CFG_PATH * 2 + 64];
        struct stat st;
        snprintf(state, sizeof state, "%s/%s/weights/last_state.safetensors", project, e->d_name);
        if (stat(state, &st) || !S_ISREG(st.st_mode)) continue;
        double t = st.st_mtim.tv_sec + 1e-9 * st.st_mtim.tv_nsec;
        char run[CFG_PATH * 2 + 64];
        int len = snprintf(run, sizeof run, "%s/%s", project, e->d_name);
        if (t <= newest || len < 0 || (size_t)len >= size) continue;   // a name too long to hold is passed over
        newest = t;
        memcpy(dir, run, (size_t)len + 1);
    }
    if (d) closedir(d);
    return newest < 0 ? err_set(err, "resume=1: no run with a training state under %s; name the run folder", project) : 0;
}

// The run folder `resume=` names: a folder, a file inside its weights/, or 1 for the newest run
// under project that has a training state.
static int find_run(const Config *cfg, char *dir, size_t size, Err *err) {
    struct stat st;
    if (!strcmp(cfg->resume, "1")) return newest_run(cfg->project, dir, size, err);
    snprintf(dir, size, "%s", cfg->resume);
    char *w = strstr(dir, "/weights/");
    if (w) *w = 0;
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
    char state[CFG_PATH * 2 + 64], csv[CFG_PATH * 2 + 64];
    Err why;
    if (rf_check_dir(dir, "run folder (resume=)", err)) return -1;
    snprintf(state, sizeof state, "%s/weights/last_state.safetensors", dir);
    if (stat(state, &st)) return err_set(err, "resume=%s: %s is missing; a run saves it at each epoch end and when "
                                         "stopped", cfg->resume, state);
    int fd = rf_open(state, "training state", err);   // a FIFO here would hang the load much later
    if (fd < 0) return -1;
    close(fd);
    fd = -1;
    snprintf(csv, sizeof csv, "%s/results.csv", dir);  // appended to each epoch: a FIFO would block that
    if (!stat(csv, &st) && (fd = rf_open(csv, "results file", &why)) < 0)
        return err_set(err, "resume=%s: %s", cfg->resume, why.msg);
    if (fd >= 0) close(fd);
    return 0;
}

int train_resume(Config *cfg, int argc, char **argv) {
    Err err;
    char dir[CFG_PATH], ini[CFG_PATH + 16];
    if (find_run(cfg, dir, sizeof dir, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 2; }
    snprintf(ini, sizeof ini, "%s/args.ini", dir);
    if (config_load(ini, argc, argv, cfg, &err)) {   // the run's own config, then the command line
        fprintf(stderr, "yolotrain: cannot resume: %s\n", err.msg);
        return 2;
    }
    snprintf(cfg->resume, sizeof cfg->resume, "%s", dir);
    char *slash = strrchr(dir, '/');
    snprintf(cfg->name, sizeof cfg->name, "%s", slash ? slash + 1 : dir);
    if (slash) { *slash = 0; snprintf(cfg->project, sizeof cfg->project, "%s", dir); }
    else snprintf(cfg->project, sizeof cfg->project, ".");
    cfg->exist_ok = 1;
    return train_run(cfg);
}

static int train_run_(Config *cfg);

// RUN/args.ini, the effective config (what resume= reads back), through a temporary file and a
// rename: a resumed run rewrites it, and a kill then must not leave half of it.
static void write_args(const Config *cfg, const char *dir) {
    char path[CFG_PATH * 2 + 32], tmp[CFG_PATH * 2 + 40];
    snprintf(path, sizeof path, "%s/args.ini", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    config_print(cfg, f);
    if (fclose(f) == 0) rename(tmp, path);
    else remove(tmp);
}

// The run with Ctrl-C and SIGTERM handled (see on_signal); the callers' handlers come back after.
int train_run(Config *cfg) {
    struct sigaction on = { .sa_handler = on_signal }, old_int, old_term;
    sigemptyset(&on.sa_mask);
    stop_requested = stop_savable = 0;
    sigaction(SIGINT, &on, &old_int);
    sigaction(SIGTERM, &on, &old_term);
    int rc = train_run_(cfg);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    stop_savable = 0;
    return rc;
}

static int train_run_(Config *cfg) {
    Err err;
    DeviceList devs;
    if (pick_devices(cfg, &devs)) return 2;
    int gpu = devs.gpu[0];
    note_unbuilt_keys(cfg);
    Dataset ds;
    injected_signal("startup");
    if (open_data(cfg, &ds, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 2; }
    Dataset vds;
    DatasetOptions vopt = { .strict = cfg->strict, .nc = ds.nc, .report = stderr };
    if (dataset_open(NULL, cfg, "val", &vopt, &vds, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); dataset_free(&ds); return 2; }
    LoaderConfig lc = loader_config(cfg, 1);
    Loader *ld;
    if (loader_open(&lc, &ds, &ld, &err)) {
        fprintf(stderr, "yolotrain: %s\n", err.msg);
        dataset_free(&ds); dataset_free(&vds);
        return 2;
    }
    Trainer t;
    print_split(cfg, &devs);
    if (trainer_init_devices(&t, cfg, loader_batches(ld), &devs, &err)) {
        fprintf(stderr, "yolotrain: %s\n", err.msg);
        loader_close(ld); dataset_free(&ds); dataset_free(&vds);
        return 2;
    }
    char dir[CFG_PATH * 2];                        // made only once the run can start
    int lock = -1;
    if (run_dir(cfg, dir, sizeof dir, &lock, &err) || check_space(dir, &t.m, &err)) {
        fprintf(stderr, "yolotrain: %s\n", err.msg);
        run_unlock(dir, lock);
        trainer_free(&t); loader_close(ld); dataset_free(&ds); dataset_free(&vds);
        return 1;
    }
    char path[CFG_PATH * 2 + 32];
    write_args(cfg, dir);
    if (!cfg->resume[0]) plots_labels(&ds, dir);   // labels.jpg, as train.py before the first epoch
    char where[64];
    if (devs.n > 1) snprintf(where, sizeof where, "%d %s (%s)", devs.n, gpu < 0 ? "CPU devices" : "GPUs", gpu < 0 ? "fp32" : cfg->precision);
    else snprintf(where, sizeof where, gpu < 0 ? "cpu" : "GPU %d (%s)", gpu, cfg->precision);
    printf("model: %s, %zu parameters, nc=%d; device: %s; %d images, batch %d, %d batches/epoch, "
           "accumulate %d, weight_decay %.3g\nLogging results to %s\nStarting training for %d epochs...\n",
           cfg->file, model_count_params(&t.m), t.m.nc, where, ds.n, cfg->batch, loader_batches(ld),
           t.sched.accumulate, t.sched.weight_decay, dir, cfg->epochs);
    RunState rs = { .train = &ds, .val = &vds, .dir = dir, .best_epoch = -1 };
    const char *sa = getenv("YT_STOP_AFTER_STEPS"), *fd = getenv("YT_FAIL_DEVICE");
    rs.stop_after = sa ? atoi(sa) : 0;
    static int fail_device;
    if (fd && t.multi) {
        fail_device = atoi(fd);
        multi_set_fail_hook(t.multi, injected_failure, &fail_device);
    }
    int rc = 0;
    if (cfg->resume[0]) {
        snprintf(path, sizeof path, "%s/weights/last_state.safetensors", dir);
        if (checkpoint_load(&t, &rs.start, path, &err)) {
            fprintf(stderr, "yolotrain: cannot resume: %s\n", err.msg);
            rc = 2;
        } else {
            rs.best_fitness = rs.start.best_fitness;
            rs.best_epoch = rs.start.best_epoch;
            if (t.multi) multi_scatter_state(t.multi);   // replicas and shards take the loaded state
            printf("Resuming %s from epoch %d, batch %d\n", dir, rs.start.epoch, rs.start.batch);
            if (rs.start.batch > 0) trainer_lr_at(&t, rs.start.epoch, rs.start.batch - 1);
            drop_results_from(dir, rs.start.epoch);
        }
    }
    if (rc == 0) train_tb_open(&rs.tb, cfg, dir, t.m.reg_max, rs.start.epoch);
    stop_savable = 1;                                // from here a signal saves where the run stands
    double t0 = now_seconds();
    if (!rc) rc = train_epochs(cfg, &t, ld, &rs);
    if (rc != 2) {                                   // 2: the run could not start
        double total = now_seconds() - t0;
        const PhaseTimes *p = &t.t;
        printf("%.3f hours. Time per phase (device 0): data wait %.1f s, forward %.1f s, loss %.1f s, backward %.1f s, "
               "gather %.1f s, optimizer %.1f s, broadcast %.1f s\n", total / 3600, p->data, p->forward, p->loss,
               p->backward, p->gather, p->optim, p->broadcast);
        if (rs.best_epoch >= 0)
            printf("Best epoch %d: P %.3f R %.3f mAP50 %.3f mAP50-95 %.3f (fitness %.4f)\n", rs.best_epoch,
                   rs.best.m.mp, rs.best.m.mr, rs.best.m.map50, rs.best.m.map, rs.best_fitness);
        if (rc == 0) printf("Results saved to %s (weights/last.safetensors, weights/best.safetensors, results.csv)\n", dir);
        else printf("The run stopped on an error (above); its files are in %s\n", dir);
    }
    val_result_free(&rs.best);
    train_tb_close(&rs.tb);
    run_unlock(dir, lock);
    trainer_free(&t);
    loader_close(ld);
    dataset_free(&ds);
    dataset_free(&vds);
    return rc;
}
