// train.c: one training run around the step (core/train/step.c; the Trainer, core/trainer/trainer.c): dataset,
// loader, the run folder, the epochs with their progress line, validation, results.csv and checkpoints, Ctrl-C,
// SIGTERM and SIGHUP, failures, and resume=. The fault-injection hooks the tests use are core/train/faults.c.
#include "core/train/train.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
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
#include "core/train/train_tb.h"
#include "io/plot.h"
#include "core/train/checkpoint.h"
#include "core/eval/drawer.h"
#include "core/train/epoch_rules.h"
#include "core/base/fatal.h"
#include "core/train/faults.h"
#include "core/devices/infer_devices.h"
#include "core/spec/ops.h"
#include "core/base/memlimit.h"
#include "core/base/progress.h"
#include "core/base/readfile.h"
#include "core/base/runlock.h"
#include "core/devices/multi.h"
#include "core/procs/procs.h"
#include "core/train/step.h"
#include "core/spec/transfer.h"
#include "core/eval/plots.h"
#include "core/eval/val.h"
#include "io/strlist.h"
#include "io/synth.h"

// Ctrl-C, SIGTERM and SIGHUP (a closed terminal, a dropped ssh session). Once training runs
// (stop_savable) they only set stop_requested: the loop, the validation pass and the checkpoint writes
// all finish what they hold within seconds, then the run saves where it stands, says how to resume and
// ends with status 128 + signal (stop_saved), so `yolotrain ... && next` does not go on. Before that
// (reading the dataset, building the model, loading weights) there is nothing to save: the run ends at
// once with status 128 + signal; the files written by then (the run folder, args.ini by rename) are
// whole, and the lock file (held_lock) is emptied so that it names no dead pid.
static volatile sig_atomic_t stop_requested, stop_savable, held_lock = -1;
static int stop_saved;                 // the run stopped on a signal before its end, its state saved
static void on_signal(int sig) {
    if (!stop_savable) {
        static const char msg[] = "\nyolotrain: stopped by a signal before training started; nothing to save\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        if (held_lock >= 0) w = ftruncate(held_lock, 0);
        _exit(128 + sig);
    }
    stop_requested = sig;
}

// Several processes must stop at the same step, or one would wait in a collective for another that left:
// each acts on the value agreed at a step's end (a signal in any process stops all), not on a signal
// that lands after the agreement, which the next agreement sees. stop_agree is that agreement (one
// process: the flag); stopping(agreed) is what the loop heads read.
static int stop_agree(void) {
    if (!procs_active()) return stop_requested != 0;
    int any = procs_any(stop_requested);
    if (any && !stop_requested) stop_requested = SIGTERM;
    return any;
}
static int stopping(int agreed) { return procs_active() ? agreed : stop_requested != 0; }

static void say_stopped(const char *dir, int epoch, int batch, const char *when) {
    printf("\nstopped (%s) %s epoch %d, batch %d: saved %s/weights/last.safetensors and last_state.safetensors; "
           "continue with: ./yolotrain resume=%s\n", stop_requested < 0 ? "YT_STOP_AFTER_STEPS" : "signal", when,
           epoch, batch, dir, dir);
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
static int check_space(const char *dir, const Model *m, Err *err) {
    struct statvfs v;
    if (statvfs(dir, &v)) return 0;                    // cannot tell: go on
    double need = 2.0 * (2 * m->n_state + 2 * m->n_state + m->n_state) * sizeof(float) + (64 << 20);
    double free_b = (double)v.f_bavail * v.f_frsize;
    free_b = fault_disk_free(free_b);                  // YT_DISK_FREE_MB (tests)
    if (free_b < need)
        return err_set(err, "%s: %.0f MB free, the checkpoints need about %.0f MB; free some space or set project= "
                       "to another disk", dir, free_b / 1e6, need / 1e6);
    return 0;
}

// Memory of the run for the progress line: the GPU's used memory when training on one, else RSS.
static double mem_gb(const Trainer *t) {
    if (t->m.on_device) return t->m.be->dev.mem_used(t->m.be_ctx) / 1073741824.0;
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) { if (fscanf(f, "%ld %ld", &pages, &rss) != 2) rss = 0; fclose(f); }
    return rss * (double)sysconf(_SC_PAGESIZE) / 1073741824.0;
}


typedef struct { double box, cls, dfl; int n; } Running;

typedef struct {              // one epoch's progress line
    Progress pg;              // when a line is due (core/base/progress.h)
    int      epoch, nb, i0;   // the epoch, its batches, the batch this process began it at (a resumed one: > 0)
    int      images, inst, size;   // images trained since i0, the last batch's instances and width
    double   t0;              // when this process began the epoch
} EpochLine;

static int stdout_tty(void) {
    static int tty = -1;
    if (tty < 0) tty = isatty(STDOUT_FILENO);
    return tty;
}

static void epoch_line_begin(EpochLine *e, int epoch, int nb, int i0) {
    *e = (EpochLine){ .epoch = epoch, .nb = nb, .i0 = i0, .t0 = now_seconds() };
    progress_begin(&e->pg, stdout_tty(), nb, i0, e->t0, 0);
}

// The reference's progress line after batch i: redrawn in place on a terminal; elsewhere (a log file,
// nohup) a line each tenth of the epoch or PROGRESS_PERIOD seconds, and one at its end (final). The rate
// and the ETA are those of the batches this process ran: a resumed epoch's count from the resume.
static void progress(const Config *cfg, const Trainer *t, EpochLine *e, const Running *r, int i, int final) {
    if (!procs_writer()) return;                       // several processes: rank 0 reports
    double now = now_seconds(), dt = now - e->t0;
    if (!final && ((i == e->nb && !e->pg.tty) || !progress_due(&e->pg, i, now))) return;   // the end's own line follows
    char ep[32], mem[16], bar[96], eta_s[16];
    snprintf(ep, sizeof ep, "%d/%d", e->epoch, cfg->epochs - 1);
    snprintf(mem, sizeof mem, "%.3gG", mem_gb(t));
    int ran = i - e->i0;
    double ips = dt > 0 ? e->images / dt : 0, eta = ran > 0 ? dt / ran * (e->nb - i) : 0;
    progress_bar(bar, sizeof bar, i, e->nb);
    progress_clock(eta_s, sizeof eta_s, eta);
    printf("%s%11s%11s%11.4g%11.4g%11.4g%11d%11d: %s %.1fimg/s ETA %s%s", e->pg.tty ? "\r" : "", ep, mem,
           r->box / r->n, r->cls / r->n, r->dfl / r->n, e->inst, e->size, bar, ips, eta_s,
           final || !e->pg.tty ? "\n" : "");
    fflush(stdout);
}

// A duration as people say it: seconds, minutes or hours
static void duration_text(double s, char *out, size_t size) {
    if (s < 90) snprintf(out, size, "%.0f s", s);
    else if (s < 90 * 60) snprintf(out, size, "%.0f min", s / 60);
    else snprintf(out, size, "%.1f hours", s / 3600);
}

// On the CPU, once, after the run's second step (the first warms OpenBLAS and the arenas up): the speed that
// step measured and what the rest of the run will take at it, with the recipe that shows a model learning in
// minutes. `left`: the training images still to go in the run.
static void say_cpu_cost(const Config *cfg, double images_per_s, double left, int nb, int batch) {
    char epoch[32], run[32];
    duration_text(nb * (double)batch / images_per_s, epoch, sizeof epoch);
    duration_text(left / images_per_s, run, sizeof run);
    const char *base = strrchr(cfg->file, '/') ? strrchr(cfg->file, '/') + 1 : cfg->file;
    printf("%sCPU: %.1f images/s: an epoch takes about %s, the rest of the run's %d epochs about %s plus validation%s\n",
           isatty(STDOUT_FILENO) ? "\n" : "", images_per_s, epoch, cfg->epochs, run,
           strcmp(base, "quick.ini") ? "; for a model that learns in minutes on a CPU: ./yolotrain cfg/quick.ini "
           "(README.md, Quick recipe)" : "");
    fflush(stdout);
}

static int count_shapes(const ValPlan *p) {
    int n = 0;
    for (int b = 0; b < p->n_batches; b++) {
        int k = 0;
        while (k < b && (p->shape[k][0] != p->shape[b][0] || p->shape[k][1] != p->shape[b][1])) k++;
        n += k == b;
    }
    return n;
}

static int open_data(Config *cfg, Dataset *ds, Err *err) {
    const char *synth = cfg->n_data_kv ? NULL : synth_builtin_dir(cfg->data);
    if (synth) {
        int bad = procs_writer() && synth_ensure(synth, err);   // several processes: rank 0 makes it
        if (procs_active() && procs_any(bad) && !bad) return err_set(err, "rank 0 could not make the synthetic dataset");
        if (bad) return -1;
        int small = strcmp(synth, SYNTH_DIR) != 0;
        snprintf(cfg->data, sizeof cfg->data, "%s/data.yaml", synth);
        printf("data: the built-in synthetic dataset%s (%s; %s)\n", small ? "'s small-image set" : "", cfg->data,
               small ? "remove the folder to remake it" : "`yolotrain synth` regenerates it");
    }
    DatasetOptions opt = { .strict = cfg->strict, .min_items = cfg->min_items, .report = stderr,
                           .single_cls = cfg->single_cls, .fraction = cfg->fraction };
    if (dataset_open(NULL, cfg, "train", &opt, ds, err)) return -1;
    if (cfg->nc != ds->nc) {
        printf("Overriding model nc=%d with nc=%d from the dataset\n", cfg->nc, ds->nc);
        config_set_nc(cfg, ds->nc);
    }
    return 0;
}

// The training loader; rect=1: the reference's rectangular batches (LoadImagesAndLabels(rect=True,
// pad=0.0)): images in ascending h/w, each batch letterboxed to its own shape, no mosaic, no shuffle.
static int open_loader(const Config *cfg, const Dataset *ds, Loader **ld, Err *err) {
    LoaderConfig lc = loader_config(cfg, 1);
    if (procs_active()) lc.share = procs_loader_share;   // several processes: each makes only its images
    ValPlan plan = { 0 };
    if (cfg->rect) {
        val_plan(ds, cfg->batch, cfg->imgsz, 1, 0.0, &plan);
        lc.rect_order = plan.order;
        lc.rect_shape = (const int (*)[2])plan.shape;
        printf("rect: %d batches of %d shapes in ascending aspect ratio, no mosaic, shuffle off (as train.py "
               "--rect)\n", plan.n_batches, count_shapes(&plan));
    }
    int rc = loader_open(&lc, ds, ld, err);
    val_plan_free(&plan);
    return rc;
}

// Keys the config accepts that change nothing: say so instead of ignoring them.
static void note_unbuilt_keys(const Config *cfg) {
    if (cfg->label_smoothing > 0)   // yolov9: smooth_BCE's cp, cn are never read by loss_tal.py; UL 8.4: no such key
        printf("note: label_smoothing=%g changes nothing, as in the references: yolov9's loss_tal.py computes "
               "smooth_BCE's targets and never uses them, and Ultralytics' YOLO26 loss has none\n", cfg->label_smoothing);
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
    TrainTb        tb;           // the TensorBoard log (tensorboard=1): written by the drawer's jobs only, in order
    Drawer        *drawer;       // draws the pictures and plots, and logs to TensorBoard, beside the run
                                 // (core/eval/drawer.h); NULL: at once (YT_DRAW_SYNC=1, or a process that draws none)
    ValCache      *val_cache;    // the validation batches as loaded, kept between passes (val_cache_new)
    double         val_seconds;  // the validation passes' wall time (EMA weights to the table), summed
    int            val_passes;
    double         t_begin;      // when this process began training (the time of the parts before: start.elapsed)
    int            epochs_done;  // epochs whose end was saved, over every part of the run
    int            time_partial; // 1: resumed from a state without its time (an older yolotrain's)
} RunState;

// The validation batches kept between passes: up to val_cache_mb megabytes (0: none).
static ValCache *val_cache_for_run(const Config *cfg) {
    double mb = cfg->val_cache_mb;
    return mb > 0 ? val_cache_new((size_t)(mb * 1048576)) : NULL;
}

// ---- jobs of the drawer: each owns copies of what it draws or logs --------------------------------

typedef struct { TrainTb *tb; int epoch; double vals[14]; } TbEpochJob;

static void tb_epoch_job(void *arg) {
    TbEpochJob *j = arg;
    train_tb_epoch(j->tb, j->epoch, j->vals);
    free(j);
}

typedef struct { TrainTb *tb; int epoch, n; char dir[CFG_PATH * 2]; const char *file[2]; } TbPictureJob;

static void tb_picture_job(void *arg) {      // after the job that drew the files (FIFO)
    TbPictureJob *j = arg;
    for (int k = 0; k < j->n; k++) train_tb_picture(j->tb, j->dir, j->file[k], j->epoch);
    free(j);
}

// Log dir/file0 (and file1) to TensorBoard once the jobs queued before have drawn them.
static void queue_tb_pictures(RunState *rs, int epoch, const char *file0, const char *file1) {
    if (!rs->tb.ev) return;
    TbPictureJob *j = xcalloc(1, sizeof *j);
    *j = (TbPictureJob){ .tb = &rs->tb, .epoch = epoch, .n = file1 ? 2 : 1, .file = { file0, file1 } };
    snprintf(j->dir, sizeof j->dir, "%s", rs->dir);
    drawer_submit(rs->drawer, tb_picture_job, j);
}

// weights/last_state.safetensors: everything to continue from point p (see core/train/checkpoint.h)
static int save_state(const Trainer *t, const RunState *rs, int epoch, int batch, const Running *r) {
    Err err;
    char path[CFG_PATH * 2 + 64];
    snprintf(path, sizeof path, "%s/weights/last_state.safetensors", rs->dir);
    RunPoint p = { epoch, batch, rs->best_fitness, rs->best_epoch, r->box, r->cls, r->dfl, r->n,
                   rs->start.elapsed + (now_seconds() - rs->t_begin), rs->start.elapsed_from };
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
    if (!rs->tb.ev) return;
    TbEpochJob *j = xmalloc(sizeof *j);
    *j = (TbEpochJob){ &rs->tb, epoch, { 0 } };
    memcpy(j->vals, vals, sizeof vals);
    drawer_submit(rs->drawer, tb_epoch_job, j);
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
// train_batch0.jpg as train.py plots it (on_train_batch_end): the batch the model sees, so after
// multi_scale's resize. The bytes are resized on the host here by the CPU twin of the device's resize
// and cast to bytes by truncation, as plot_images' numpy assignment does; the targets are normalised
// and stay as they are.
static int picture_step_batch(const Batch *b, StepShape s, char *const *names, int nc, char *const *files,
                              const char *path, Err *err) {
    if (!s.h || !s.w || (s.h == b->h && s.w == b->w) || b->n < 1) return picture_batch(b, names, nc, files, path, err);
    size_t in = (size_t)b->n * b->h * b->w * 3, out = (size_t)b->n * s.h * s.w * 3;
    float *x = malloc(sizeof(float) * in), *y = malloc(sizeof(float) * out);
    uint8_t *u = malloc(out);
    int rc = -1;
    if (!x || !y || !u) {
        rc = err_set(err, "%s: no memory for the resized batch (%zu bytes)", path, out);
    } else {
        for (size_t k = 0; k < in; k++) x[k] = b->images[k];
        resize_bilinear_cpu(map_make(x, b->n, b->h, b->w, 3), map_make(y, b->n, s.h, s.w, 3));
        for (size_t k = 0; k < out; k++) u[k] = (uint8_t)(y[k] < 0 ? 0 : y[k] > 255 ? 255 : y[k]);
        Batch r = *b;
        r.images = u, r.h = s.h, r.w = s.w, r.S = s.h > s.w ? s.h : s.w;
        rc = picture_batch(&r, names, nc, files, path, err);
    }
    free(x), free(y), free(u);
    return rc;
}

enum { TRAIN_TILES = 16 };                   // picture_batch draws at most 16 images

typedef struct {
    Batch b; StepShape s; char **names; int nc; TrainTb *tb; char dir[CFG_PATH * 2];
    char *files[TRAIN_TILES];                // each tile's image file, its name drawn on the tile
} StepPictureJob;

static void step_picture_job(void *arg) {
    StepPictureJob *j = arg;
    char path[CFG_PATH * 2 + 64];
    Err err;
    snprintf(path, sizeof path, "%s/train_batch0.jpg", j->dir);
    if (picture_step_batch(&j->b, j->s, j->names, j->nc, j->files, path, &err)) fprintf(stderr, "note: %s\n", err.msg);
    else train_tb_picture(j->tb, j->dir, "train_batch0.jpg", 0);
    free(j->b.images); free(j->b.targets);
    for (int i = 0; i < TRAIN_TILES; i++) free(j->files[i]);
    drawer_names_free(j->names, j->nc);
    free(j);
}

// train_batch0.jpg of batch b (the loader's: it goes back to it after the step), drawn by the drawer
// from a copy of its first 16 images and their targets.
static void queue_step_picture(RunState *rs, const Batch *b, StepShape s) {
    StepPictureJob *j = xcalloc(1, sizeof *j);
    int n = b->n < TRAIN_TILES ? b->n : TRAIN_TILES;
    int h = b->h ? b->h : b->S, w = b->w ? b->w : b->S;   // the pixels' size, for the copy and the recipes alike
    size_t px = (size_t)h * w * 3;
    j->b = (Batch){ .n = n, .S = b->S, .h = b->h, .w = b->w };
    j->b.images = xmalloc(px * n + 1);
    if (b->aug) {                             // augment=gpu: these few on the host, from the same recipes
        AugScratch scratch = { 0 };
        for (int i = 0; i < n; i++)
            augment_sample_pixels(&b->aug[i], &scratch, &(Image){ w, h, j->b.images + i * px });
        augment_scratch_free(&scratch);
    } else {
        memcpy(j->b.images, b->images, px * n);
    }
    j->b.targets = xmalloc(sizeof(float) * 6 * (b->nt + 1));
    for (int k = 0; k < b->nt; k++)           // rows of images past the 16 drawn are not drawn
        if ((int)b->targets[6 * k] < n) memcpy(j->b.targets + 6 * j->b.nt++, b->targets + 6 * k, sizeof(float) * 6);
    j->s = s;
    for (int i = 0; i < n; i++) j->files[i] = xstrdup(rs->train->s[b->index[i]].image);
    j->names = drawer_names(rs->train->names, rs->train->nc);
    j->nc = rs->train->nc;
    j->tb = &rs->tb;
    snprintf(j->dir, sizeof j->dir, "%s", rs->dir);
    drawer_submit(rs->drawer, step_picture_job, j);
}

typedef struct { double *rows; int n, failed, epoch; Err err; TrainTb *tb; char png[CFG_PATH * 2 + 64], dir[CFG_PATH * 2]; } ResultsJob;

static void results_job(void *arg) {
    ResultsJob *j = arg;
    if (j->failed || plot_results_rows(j->rows, j->n, j->png, &j->err)) fprintf(stderr, "note: %s\n", j->err.msg);
    else if (j->tb) train_tb_picture(j->tb, j->dir, "results.png", j->epoch);
    free(j->rows);
    free(j);
}

// results.png from results.csv, drawn once the run ends (its last epoch, an early stop by patience, or
// a signal), as both references draw it after training; redrawing it every epoch took 0.1 s a time
// (100 ms for 60 rows on cpu2), 6 s of a 60-epoch run. With `epoch` >= 0 it also goes to TensorBoard, as yolov9's.
static void draw_results(const Config *cfg, RunState *rs, int epoch) {
    if (cfg->noplots) return;
    char csv[CFG_PATH * 2 + 64], png[CFG_PATH * 2 + 64];
    snprintf(csv, sizeof csv, "%s/results.csv", rs->dir);
    snprintf(png, sizeof png, "%s/results.png", rs->dir);
    struct stat st;
    if (stat(csv, &st) != 0) return;                  // stopped before an epoch ended: nothing to draw
    ResultsJob *j = xcalloc(1, sizeof *j);            // the rows now: a later epoch may append more
    if (plot_results_read(csv, &j->rows, &j->n, &j->err)) j->failed = 1;
    snprintf(j->png, sizeof j->png, "%s", png);
    j->tb = epoch >= 0 ? &rs->tb : NULL;
    j->epoch = epoch;
    snprintf(j->dir, sizeof j->dir, "%s", rs->dir);
    drawer_submit(rs->drawer, results_job, j);
}

// In every process: the next epoch's loss weights and the validation (several processes share it); then
// rank 0 logs and saves. 1 when a signal (in any process) stopped the validation: nothing written, the
// caller saves the state before it.
static int end_epoch(Config *cfg, Trainer *t, RunState *rs, int epoch, const Running *r) {
    Err err;
    char path[CFG_PATH * 2 + 64];
    trainer_end_epoch(t);                              // YOLO26's ProgLoss: the next epoch's branch weights
    ValOptions vo = val_options_train(cfg);           // train.py: 2*batch, rect, pad 0.5; run in chunks
    // val_batch0 pictures after the first and the last epoch only: drawing and encoding them was most
    // of a small validation (3 ms of its 4.9 per image, coco128 on an H200); train.py plots none
    // during training
    vo.picture_dir = !cfg->noplots && (epoch == 0 || epoch == cfg->epochs - 1) ? rs->dir : NULL;
    // the plots of the run's last validation: the last epoch's, or one that patience may end the run after
    vo.plots_dir = !cfg->noplots && (epoch == cfg->epochs - 1 || (cfg->patience > 0 && epoch - rs->best_epoch >=
                   cfg->patience)) ? rs->dir : NULL;
    vo.drawer = rs->drawer;                            // the pictures and plots: copied, drawn beside the run
    vo.cache = rs->val_cache;                          // the second pass on copies the first's loaded batches
    vo.stop = &stop_requested;                         // a signal ends the pass within a batch
    vo.rank = comm_rank();                             // several processes: each runs its share of the batches
    vo.ranks = comm_size();
    fault_signal_at("val");
    ValResult v = { 0 };
    // noval: train.py's `if not noval or final_epoch`; an epoch not validated logs zeros (its results
    // tuple as initialised), and its fitness 0 equals best_fitness 0 until a validation, so it is saved
    // as best and counts as best for patience, as train.py's `best_fitness == fi` and EarlyStopping's >=
    int skip = cfg->noval && epoch != cfg->epochs - 1;
    double tv = now_seconds();
    int vrc = skip ? 0 : val_evaluate_ema(t, rs->val, &vo, &v, &err);   // the EMA weights, on every device
    if (!skip) rs->val_seconds += now_seconds() - tv, rs->val_passes++;
    if (skip) vo.picture_dir = NULL;
    // a stop in any process stops all: the pass told every process of one during it; this, of one since
    int stopped = stopping(stop_agree());
    if (vrc && stopped) return 1;
    if (!procs_writer()) {                             // rank 0 logs and saves
        if (!vrc) val_result_free(&v);
        return 0;
    }
    if (vrc) { fprintf(stderr, "yolotrain: validation failed: %s\n", err.msg); memset(&v, 0, sizeof v); }
    if (vo.picture_dir && !vrc) queue_tb_pictures(rs, epoch, "val_batch0_labels.jpg", "val_batch0_pred.jpg");
    results_row(rs, epoch, r, &v, t->lr);
    if (vo.plots_dir) draw_results(cfg, rs, epoch);    // the run's last validation: the last epoch's or patience's
    snprintf(path, sizeof path, "%s/weights/last.safetensors", rs->dir);
    int rc = 0;
    fault_signal_at("checkpoint");
    if (trainer_save(t, path, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); rc = -1; }
    if (!rc && !vrc && epoch_is_best(v.fitness, rs->best_fitness, rs->best_epoch)) {   // ties too
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
    if (epoch_period_save(epoch, cfg->save_period)) {
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
    Drawer        *drawer;     // its queued pictures are finished before the process ends
} Failure;

// 1 when the EMA weights hold only finite values (else err names the first tensor that does not):
// weights that went NaN are never saved over good ones.
static int ema_finite(const Trainer *t, Err *err) {
    size_t n = t->m.n_state;
    float *host = xmalloc(n * sizeof(float));
    t->m.be->dev.download(t->m.be_ctx, host, t->ema, n);
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
    drawer_wait(f->drawer);                            // a CUDA error exits after this: whole pictures first
    if (!procs_writer()) return;                       // several processes: rank 0 holds the run's files
    char last[CFG_PATH * 2 + 64], why[sizeof(Err)] = "";
    Err err;
    if (what) fprintf(stderr, "\nyolotrain: the run stops on a CUDA error (%s)\n", what);
    snprintf(last, sizeof last, "%s/weights/last.safetensors", f->dir);
    if (f->t->multi && !strcmp(f->cfg->reduce, "sharded")) snprintf(why, sizeof why, "under reduce=sharded the EMA "
                                                                      "is spread over the devices");
    else if (!f->t->m.be->dev.usable(f->t->m.be_ctx)) snprintf(why, sizeof why, "GPU %d can no longer run work (a "
                                                           "sticky CUDA error)", f->t->m.be->dev.device_id(f->t->m.be_ctx));
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

// Queue batch b's upload to the devices behind the step that runs now: its bytes, or with augment=gpu the
// tiles its samples are made from (core/devices/multi.h).
static void prefetch_batch(Trainer *t, const Batch *b) {
    if (b->aug) multi_prefetch_aug(t, b->aug, b->n);
    else multi_prefetch(t, b->images, b->n, b->h, b->w);
}

// augment=gpu's prefetch beside the step, a thread per device: queuing the copies is quick, but nvJPEG parses each
// file on the host as it queues its decode (a batch of 64 mosaics: about 300 files), and on this thread the devices'
// shares would go one after another, before the step. Each device has one thread for the run (lane k serves device
// k), handed its share of each batch (a thread per batch ran the same end to end). The shares are split here, on
// the thread that runs the steps and before the step: under split=auto the step may change the split, which it
// reads without a lock (a share that then no longer matches only makes that step copy again).
typedef struct Prefetcher Prefetcher;
typedef struct {
    Prefetcher *p;
    pthread_t th;
    int started, pending;          // pending: share is being prefetched
    MultiShare share;              // of the samples s
    const AugSample *s;
} PrefetchLane;
struct Prefetcher {
    pthread_mutex_t mu;            // guards every lane's pending, share and s, and quit
    pthread_cond_t cv;
    int ready, quit;               // ready: mu and cv made
    PrefetchLane lane[MULTI_MAX];
};

static void prefetch_share(const MultiShare *sh, const AugSample *s) {
    Trainer *d = sh->dev;
    d->m.be->dev.prefetch_aug(d->m.be_ctx, s + sh->first, sh->count);
}

static void *prefetch_lane_main(void *arg) {
    PrefetchLane *l = arg;
    Prefetcher *p = l->p;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!l->pending && !p->quit) pthread_cond_wait(&p->cv, &p->mu);
        if (!l->pending) break;                    // quit, nothing left
        pthread_mutex_unlock(&p->mu);
        prefetch_share(&l->share, l->s);
        pthread_mutex_lock(&p->mu);
        l->pending = 0;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void prefetch_begin(Prefetcher *p, Trainer *t, const Batch *b) {
    if (!b->aug) {
        prefetch_batch(t, b);                      // the bytes: quick
        return;
    }
    if (!p->ready) {
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cv, NULL);
        p->ready = 1;
    }
    MultiShare sh[MULTI_MAX];
    int n_dev = multi_shares(t, b->n, sh);
    for (int k = 0; k < n_dev; k++) {             // a lane starts on its device's first share
        PrefetchLane *l = &p->lane[k];
        if (!sh[k].count || l->started) continue;
        l->p = p;
        l->started = !pthread_create(&l->th, NULL, prefetch_lane_main, l);
    }
    pthread_mutex_lock(&p->mu);
    for (int k = 0; k < n_dev; k++) {
        PrefetchLane *l = &p->lane[k];
        if (!sh[k].count || !l->started) continue;
        l->share = sh[k], l->s = b->aug, l->pending = 1;
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < n_dev; k++)
        if (sh[k].count && !p->lane[k].started) prefetch_share(&sh[k], b->aug);   // no thread to be had
}

static void prefetch_end(Prefetcher *p) {
    if (!p->ready) return;
    pthread_mutex_lock(&p->mu);
    for (int k = 0; k < MULTI_MAX; k++)
        while (p->lane[k].pending) pthread_cond_wait(&p->cv, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void prefetcher_stop(Prefetcher *p) {
    if (!p->ready) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int k = 0; k < MULTI_MAX; k++)
        if (p->lane[k].started) pthread_join(p->lane[k].th, NULL);
    pthread_cond_destroy(&p->cv), pthread_mutex_destroy(&p->mu);
    *p = (Prefetcher){ 0 };
}

// The shape of batch i: the loader's images (S x S, or the rect batch's), resized under multi_scale
// to the size drawn for (seed, epoch, i).
static StepShape batch_shape(const Config *cfg, const Batch *b, int epoch, int i) {
    StepShape s = { b->h, b->w, b->h, b->w };
    if (cfg->multi_scale) train_ms_shape(train_ms_size((uint64_t)cfg->seed, epoch, i, cfg->imgsz), b->h, b->w, &s.h, &s.w);
    return s;
}

static int train_epochs(Config *cfg, Trainer *t, Loader *ld, RunState *rs) {
    int nb = loader_batches(ld), S = cfg->imgsz, rc = 0;
    Prefetcher pf = { 0 };                          // augment=gpu: the next batch's prefetch beside the step
    const char *dir = rs->dir;
    char path[CFG_PATH * 2 + 64];
    Err err;
    Failure fail = { cfg, t, dir, cfg->resume[0] ? rs->start.epoch : -1, rs->start.batch, rs->drawer };
    device_set_fatal_hook(save_after_failure, &fail);   // until this returns: fail lives here
    const Backend *be = t->m.be;
    if (t->m.on_device && be->dev.host_pin) loader_pin_buffers(ld, &(LoaderPinning){ be->dev.host_pin, be->dev.host_unpin, NULL });   // async uploads
    printf("%11s%11s%11s%11s%11s%11s%11s\n", "Epoch", "mem", "box_loss", "cls_loss", "dfl_loss", "Instances", "Size");
    int steps = 0, halt = 0;                        // halt: the processes' agreed stop (stop_agree)
    double t_step1 = 0;                             // when the run's first step ended (say_cpu_cost)
    for (int epoch = rs->start.epoch; epoch < cfg->epochs && !stopping(halt); epoch++) {
        int mosaic_on = epoch_mosaic_on(epoch, cfg->epochs, cfg->close_mosaic);   // the first closed epoch says so
        if (!mosaic_on && (epoch == rs->start.epoch || epoch_mosaic_on(epoch - 1, cfg->epochs, cfg->close_mosaic)))
            printf("Closing dataloader mosaic\n");
        int i = epoch == rs->start.epoch ? rs->start.batch : 0;   // a resumed epoch goes on where it stopped
        loader_start_epoch_at(ld, epoch, mosaic_on, i);
        Running r = { 0 };
        if (i == 0) model_zero_grad(&t->m);            // train.py zeroes at every epoch start
        else r = (Running){ rs->start.box, rs->start.cls, rs->start.dfl, rs->start.n };
        EpochLine line;
        epoch_line_begin(&line, epoch, nb, i);
        line.size = S;                                 // the last batch's width (the Size column)
        double tw = line.t0;
        // Two batches in hand: the next one's upload runs on the GPUs' copy streams behind this step.
        Batch *b = NULL, *next = NULL;
        if (loader_next(ld, &b)) prefetch_batch(t, b);
        for (t->t.data += now_seconds() - tw; !stopping(halt) && b; b = next, i++) {
            tw = now_seconds();
            if (!loader_next(ld, &next)) next = NULL;
            else prefetch_begin(&pf, t, next);
            t->t.data += now_seconds() - tw;
            fault_before_step(t, ++steps);              // YT_FAIL_CUDA, YT_NAN_AT_STEP (tests)
            t->input_u8 = b->images;                   // converted on the device: a quarter of the bytes
            t->input_aug = b->aug;                     // augment=gpu: the device makes the pixels
            t->shape = batch_shape(cfg, b, epoch, i);
            if (epoch == 0 && i == 0 && !cfg->noplots && procs_writer()) queue_step_picture(rs, b, t->shape);
            LossOut lo;                                // (several processes: this one's share of the batch)
            int bad = trainer_step(t, b->n, S, b->targets, b->nt, epoch, i, &lo, &err);
            tw = now_seconds();
            prefetch_end(&pf);                         // (a wait for it is the data's)
            t->t.data += now_seconds() - tw;
            t->input_u8 = NULL, t->input_aug = NULL;   // the batch goes back to the loader below
            line.size = t->shape.w;                    // imgs.shape[-1], as the reference logs it
            t->shape = (StepShape){ 0 };
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
            line.images += b->n; line.inst = b->nt;
            int b_n = b->n;
            loader_release(ld, b);                     // the step has waited for its copies on the GPU
            if (steps == 1) t_step1 = now_seconds();
            if (steps == 2 && !t->m.on_device && procs_writer()) {
                double left = ((double)(cfg->epochs - epoch) * nb - (i + 1)) * cfg->batch;
                say_cpu_cost(cfg, b_n / (now_seconds() - t_step1), left, nb, cfg->batch);
            }
            progress(cfg, t, &line, &r, i + 1, 0);
            if (rs->stop_after > 0 && steps == rs->stop_after) stop_requested = -1;
            halt = stop_agree();                       // several processes: all at once
            fault_signal_at("agreed");                 // (tests: a signal just after the agreement)
        }
        if (b) loader_release(ld, b);                  // stopped with the next batch in hand: resume remakes it
        if (i > line.i0) progress(cfg, t, &line, &r, i, 1);
        else if (i == nb && procs_writer())            // resumed after its batches: the line was printed then
            printf("epoch %d: its %d batches ran before the stop; validating it again\n", epoch, nb);
        if (t->multi) {                                // per-device time split and memory, devices.csv
            snprintf(path, sizeof path, "%s/devices.csv", dir);
            FILE *dev_csv = procs_writer() ? fopen(path, "a") : NULL;
            multi_epoch_report(t->multi, dev_csv, epoch);
            if (dev_csv) fclose(dev_csv);
            multi_gather_state(t->multi);              // sharded: EMA, momentum into device 0 before saving
        }
        int in_loop = stopping(halt);
        int ended = in_loop ? 1 : end_epoch(cfg, t, rs, epoch, &r);   // every process validates
        if (procs_active()) {                          // rank 0 saved: its outcome for all
            int v[2] = { ended, rs->best_epoch };
            comm_bcast(v, sizeof v);
            ended = v[0];
            rs->best_epoch = v[1];
            halt = stop_agree();                       // a signal since
        }
        if (ended > 0 && !procs_writer()) { stop_saved = 1; goto done; }   // rank 0 saves where the run stands
        if (ended > 0) {                               // mid-epoch or mid-validation: save where we are;
            snprintf(path, sizeof path, "%s/weights/last.safetensors", dir);   // resume validates again
            int bad = trainer_save(t, path, &err);
            if (bad) fprintf(stderr, "yolotrain: %s\n", err.msg);
            rc = save_state(t, rs, epoch, i, &r) || bad;
            if (!rc) say_stopped(dir, epoch, i, in_loop ? "at" : "during the validation of");
            stop_saved = !rc;
            goto done;
        }
        if (ended < 0 || (procs_writer() && save_state(t, rs, epoch + 1, 0, &(Running){ 0 }))) { rc = 1; goto done; }
        fail.saved_epoch = epoch + 1;
        fail.saved_batch = 0;
        rs->epochs_done = epoch + 1;
        if (stopping(halt) && epoch + 1 < cfg->epochs) {   // while checkpointing: those files are whole
            if (procs_writer()) say_stopped(dir, epoch + 1, 0, "at the start of");
            stop_saved = 1;
            goto done;
        }
        if (epoch_patience_stops(epoch, rs->best_epoch, cfg->patience)) {
            printf("Stopping training early as no improvement observed in last %d epochs. Best results "
                   "observed at epoch %d; the best model is saved as best.safetensors.\n", cfg->patience, rs->best_epoch);
            break;
        }
    }
done:
    prefetcher_stop(&pf);
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

// A resumed run writes into its folder (checkpoints by rename, results.csv, args.ini, the lock): one it
// cannot write is refused before the data is loaded, saying to copy it (-1 with err).
static int check_writable(const char *dir, Err *err) {
    static const char *const parts[] = { "", "/weights", "/results.csv", "/.lock" };
    char path[CFG_PATH + 32];
    struct stat st;
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
        snprintf(path, sizeof path, "%s%s", dir, parts[k]);
        if (k >= 2 && stat(path, &st)) continue;      // not written yet: the folder's permission decides
        if (access(path, k < 2 ? W_OK | X_OK : W_OK) == 0) continue;
        const char *slash = strrchr(dir, '/');
        return err_set(err, "cannot resume %s: %s is not writable (%s), and a resumed run writes its checkpoints "
                       "and results there; copy the run folder somewhere writable (cp -r %s /some/where/) and "
                       "resume the copy (yolotrain resume=/some/where/%s)", dir, path, strerror(errno), dir,
                       slash ? slash + 1 : dir);
    }
    return 0;
}

// epochs= on resume other than the run's own (args.ini's): the learning-rate curve, which spans the
// epochs, and close_mosaic's last epochs move, so the run does not go on as it was set up; say so.
static void note_new_schedule(const char *dir, int own_epochs, int done_epochs, const Config *cfg) {
    if (cfg->epochs == own_epochs) return;
    char mosaic[96] = "";
    int closes = cfg->epochs - cfg->close_mosaic, closed = own_epochs - cfg->close_mosaic;
    if (cfg->close_mosaic > 0 && (closes > 0 || closed > 0))   // else mosaic is off throughout, as it was
        snprintf(mosaic, sizeof mosaic, ", and close_mosaic=%d turns mosaic off from epoch %d", cfg->close_mosaic,
                 closes > 0 ? closes : 0);
    if (done_epochs >= own_epochs)
        printf("note: %s finished its %d epochs; epochs=%d trains it on to epoch %d with the schedule of a %d-epoch "
               "run: the learning rate, which had decayed toward lrf x lr0, follows the %d-epoch curve from epoch %d "
               "on%s. This is not the run a %d-epoch training from the start gives (train anew for that)\n", dir,
               own_epochs, cfg->epochs, cfg->epochs - 1, cfg->epochs, cfg->epochs, done_epochs, mosaic, cfg->epochs);
    else
        printf("note: epochs=%d changes the schedule of %s, set up for %d epochs (args.ini): from epoch %d on the "
               "learning rate follows the %d-epoch curve%s; the result is neither run trained without a stop\n",
               cfg->epochs, dir, own_epochs, done_epochs, cfg->epochs, mosaic);
}

// Everything a resume needs is in the run folder: args.ini (its paths absolute, see write_args; the
// hyp= file is not read again) and the state, which holds the weights (the initial weights= are not
// opened), so it resumes from any working directory after the pretrained file has moved.
int train_resume(Config *cfg, int argc, char **argv) {
    Err err;
    char dir[CFG_PATH], ini[CFG_PATH + 16];
    if (find_run(cfg, dir, sizeof dir, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 2; }
    snprintf(ini, sizeof ini, "%s/args.ini", dir);
    if (config_load_run(ini, 0, NULL, cfg, &err)) {  // the run's own config, for its epochs
        fprintf(stderr, "yolotrain: cannot resume: %s\n", err.msg);
        return 2;
    }
    int own_epochs = cfg->epochs;
    if (config_load_run(ini, argc, argv, cfg, &err)) {   // then the command line
        fprintf(stderr, "yolotrain: cannot resume: %s\n", err.msg);
        return 2;
    }
    char state[CFG_PATH * 2 + 64];
    int done_epochs;
    snprintf(state, sizeof state, "%s/weights/last_state.safetensors", dir);
    if (!checkpoint_epoch(state, &done_epochs, &err) && done_epochs >= cfg->epochs) {
        printf("%s finished all %d epochs; nothing to resume. Its weights: %s/weights/best.safetensors and "
               "last.safetensors (train on from them with weights=%s/weights/last.safetensors)\n", dir, cfg->epochs,
               dir, dir);
        return 0;
    }
    if (check_writable(dir, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 2; }
    note_new_schedule(dir, own_epochs, done_epochs, cfg);
    snprintf(cfg->resume, sizeof cfg->resume, "%s", dir);
    char *slash = strrchr(dir, '/');
    snprintf(cfg->name, sizeof cfg->name, "%s", slash ? slash + 1 : dir);
    if (slash) { *slash = 0; snprintf(cfg->project, sizeof cfg->project, "%s", dir); }
    else snprintf(cfg->project, sizeof cfg->project, ".");
    cfg->exist_ok = 1;
    return train_run(cfg);
}

static int train_run_(Config *cfg);

// yolov9's closing line, "N epochs completed in X hours.", over every part of a resumed run: this part's
// `seconds` and the time the state it resumed from had recorded.
static void say_completed(const RunState *rs, double seconds) {
    int n = rs->epochs_done;
    double hours = (rs->start.elapsed + seconds) / 3600;
    if (rs->start.elapsed_from > 0 || rs->time_partial)
        printf("%d epoch%s completed; %.3f hours counted from epoch %d on (the time before it was not recorded)\n", n,
               n == 1 ? "" : "s", hours, rs->start.elapsed_from);
    else
        printf("%d epoch%s completed in %.3f hours.\n", n, n == 1 ? "" : "s", hours);
}

// "Results saved to DIR (...)" naming the files of the run that exist.
static void say_results(const char *dir) {
    static const char *const files[] = { "weights/last.safetensors", "weights/best.safetensors", "results.csv",
                                         "results.png" };
    char list[512] = "", path[CFG_PATH * 2 + 64];
    size_t o = 0;
    struct stat st;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
        o += snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", files[i]);
    }
    if (o) printf("Results saved to %s (%s)\n", dir, list);
    else printf("Results saved to %s (no weights or results written)\n", dir);
}

// A path as typed, relative to the working directory, made absolute (cwd/path, symlinks kept as written).
static void make_absolute(char *path, size_t size, const char *cwd) {
    if (!path[0] || path[0] == '/' || !cwd) return;
    char *abs = path_join(cwd, path);
    if (strlen(abs) < size) memcpy(path, abs, strlen(abs) + 1);
    free(abs);
}

// RUN/args.ini, the effective config (what resume= reads back), through a temporary file and a
// rename: a resumed run rewrites it, and a kill then must not leave half of it. Its data=, weights=
// and hyp= are absolute: they were typed relative to the working directory the run started in, which
// a resume from elsewhere does not know, and a path relative to the run folder would break once the
// folder is copied (a read-only one must be); the files were opened from here, so cwd/path is them.
// A resumed run opens no weights= file, so its value stays as the first run wrote it.
static void write_args(const Config *cfg, const char *dir) {
    char path[CFG_PATH * 2 + 32], tmp[CFG_PATH * 2 + 40], cwd[CFG_PATH];
    snprintf(path, sizeof path, "%s/args.ini", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    Config *c = xmalloc(sizeof *c);
    *c = *cfg;
    const char *here = getcwd(cwd, sizeof cwd);
    make_absolute(c->data, sizeof c->data, here);
    if (!cfg->resume[0]) make_absolute(c->weights, sizeof c->weights, here);
    if (!cfg->resume[0] || strcmp(config_where(cfg, "hyp")->file, "command line") == 0)
        make_absolute(c->hyp_file, sizeof c->hyp_file, here);
    if (!c->data[0] && c->n_data_kv > 0) {         // a [data] section: its splits resolve from its root
        Err e;
        char *root = dataspec_root(cfg, &e);
        if (!root || config_data_set(c, "path", root, &e)) fprintf(stderr, "warning: args.ini: %s\n", e.msg);
        free(root);
    }
    FILE *f = fopen(tmp, "w");
    if (f) {
        config_print(c, f);
        if (fclose(f) == 0) rename(tmp, path);
        else remove(tmp);
    }
    free(c);
}

// A signal ignored when the run starts stays ignored: nohup ignores SIGHUP, a shell script's
// background job SIGINT, and their users mean the run to go on.
static void catch_signal(int sig, struct sigaction *old) {
    struct sigaction on = { .sa_handler = on_signal };
    sigemptyset(&on.sa_mask);
    sigaction(sig, NULL, old);
    if (sig == SIGTERM || old->sa_handler != SIG_IGN) sigaction(sig, &on, NULL);
}

// The run with Ctrl-C, SIGTERM and SIGHUP handled (see on_signal); the callers' handlers come back
// after. SIGPIPE is ignored from here on, also after the run: a stdout whose reader went away (`| head`,
// a killed `| tee`) fails its writes with EPIPE, which the run ignores while it goes on writing its
// files, and the process's last flush of stdout must not turn a saved run's status into 141.
int train_run(Config *cfg) {
    static const int sigs[3] = { SIGINT, SIGTERM, SIGHUP };
    struct sigaction old[3], ignore = { .sa_handler = SIG_IGN };
    sigemptyset(&ignore.sa_mask);
    stop_requested = stop_savable = stop_saved = 0;
    held_lock = -1;
    for (int k = 0; k < 3; k++) catch_signal(sigs[k], &old[k]);
    sigaction(SIGPIPE, &ignore, NULL);
    int rc = train_run_(cfg);
    if (rc && comm_size() > 1) comm_abort(rc, "the run stopped (status %d; the reason is above)", rc);   // the others
    comm_finalize();                                 // wait on it: end them all; else leave MPI
    for (int k = 0; k < 3; k++) sigaction(sigs[k], &old[k], NULL);
    if (rc == 0 && stop_saved && stop_requested > 0) rc = 128 + stop_requested;   // 130, 143, 129
    stop_savable = 0;
    return rc;
}

static int train_run_(Config *cfg) {
    Err err;
    DeviceList devs;
    if (pick_devices(cfg, &devs)) return 2;
    if (comm_init(&err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 2; }   // mpirun/srun: join
    int gpu = devs.gpu[0];
    note_unbuilt_keys(cfg);
    if (!strcmp(cfg->augment, "gpu") && gpu < 0)
        printf("note: augment=gpu on the CPU: the workers decode and draw, and each step makes its pixels on the host "
               "(the bytes of augment=cpu, in one thread: slower)\n");
    Dataset ds;
    fault_signal_at("startup");
    if (open_data(cfg, &ds, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 2; }
    if (procs_join(cfg, &ds, devs.n, devs.gpu[0] >= 0, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); dataset_free(&ds); return 2; }
    Dataset vds;
    DatasetOptions vopt = { .strict = cfg->strict, .nc = ds.nc, .report = stderr, .single_cls = cfg->single_cls };
    if (dataset_open(NULL, cfg, "val", &vopt, &vds, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); dataset_free(&ds); return 2; }
    Loader *ld;
    if (open_loader(cfg, &ds, &ld, &err)) {
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
    if (!strcmp(cfg->augment, "gpu") && multi_decodes_jpeg(&t)) {   // cache=ram then keeps the JPEGs as bytes
        loader_set_defer_decode(ld, 1);
        printf("augment=gpu: the GPU%s decode%s the JPEG files (nvJPEG); the workers read them and draw\n",
               devs.n > 1 ? "s" : "", devs.n > 1 ? "" : "s");
    }
    char dir[CFG_PATH * 2];                        // made only once the run can start
    int lock = -1;
    if (!procs_writer()) snprintf(dir, sizeof dir, "%s/%s", cfg->project, cfg->name);   // read on resume only
    else if (run_dir(cfg, dir, sizeof dir, &lock, &err) || check_space(dir, &t.m, &err)) {
        fprintf(stderr, "yolotrain: %s\n", err.msg);
        run_unlock(dir, lock);
        trainer_free(&t); loader_close(ld); dataset_free(&ds); dataset_free(&vds);
        return 1;
    }
    held_lock = lock;                              // a signal before training empties it (on_signal)
    char path[CFG_PATH * 2 + 32];
    if (procs_writer()) write_args(cfg, dir);
    // the pictures, plots and TensorBoard's records of rank 0 are drawn and written beside the run
    Drawer *drawer = procs_writer() && !cfg->noplots ? drawer_for_run() : NULL;
    if (!cfg->resume[0] && !cfg->noplots && procs_writer()) plots_labels_queue(drawer, &ds, dir);   // labels.jpg, as train.py before the first epoch
    char where[64];
    if (devs.n > 1) snprintf(where, sizeof where, "%d %s (%s)", devs.n, gpu < 0 ? "CPU devices" : "GPUs", gpu < 0 ? "fp32" : cfg->precision);
    else snprintf(where, sizeof where, gpu < 0 ? "cpu" : "GPU %d (%s)", gpu, cfg->precision);
    printf("model: %s, %zu parameters, nc=%d; device: %s; %d images, batch %d, %d batches/epoch, "
           "accumulate %d, weight_decay %.3g\nLogging results to %s\nStarting training for %d epochs...\n",
           cfg->file, model_count_params(&t.m), t.m.nc, where, ds.n, cfg->batch, loader_batches(ld),
           t.sched.accumulate, t.sched.weight_decay, dir, cfg->epochs);
    RunState rs = { .train = &ds, .val = &vds, .dir = dir, .best_epoch = -1, .drawer = drawer,
                    .val_cache = val_cache_for_run(cfg) };
    rs.stop_after = fault_stop_after();               // YT_STOP_AFTER_STEPS (tests)
    fault_device_hook(t.multi);                       // YT_FAIL_DEVICE (tests)
    int rc = 0;
    if (cfg->resume[0]) {
        snprintf(path, sizeof path, "%s/weights/last_state.safetensors", dir);
        if (procs_check_count(dir, &err)) {
            fprintf(stderr, "yolotrain: cannot resume: %s\n", err.msg);
            rc = 2;
        } else if (checkpoint_load(&t, &rs.start, path, &err)) {
            fprintf(stderr, "yolotrain: cannot resume: %s\n", err.msg);
            rc = 2;
        } else {
            rs.best_fitness = rs.start.best_fitness;
            rs.best_epoch = rs.start.best_epoch;
            if (t.multi) multi_scatter_state(t.multi);   // replicas and shards take the loaded state
            printf("Resuming %s from epoch %d, batch %d\n", dir, rs.start.epoch, rs.start.batch);
            if (rs.start.batch > 0) trainer_lr_at(&t, rs.start.epoch, rs.start.batch - 1);
            if (procs_writer()) drop_results_from(dir, rs.start.epoch);
            if (rs.start.elapsed < 0) {               // a state of an older yolotrain
                printf("note: %s holds no training time (saved by an older yolotrain): the time is counted from "
                       "epoch %d on\n", path, rs.start.epoch);
                rs.start.elapsed = 0;
                rs.time_partial = 1;
            }
            rs.epochs_done = rs.start.epoch;
        }
    }
    if (rc == 0 && procs_writer()) train_tb_open(&rs.tb, cfg, dir, t.m.reg_max, rs.start.epoch);
    if (rc == 0 && !cfg->resume[0]) procs_note_count(dir);
    stop_savable = 1;                                // from here a signal saves where the run stands
    double t0 = now_seconds();
    rs.t_begin = t0;
    if (!rc) rc = train_epochs(cfg, &t, ld, &rs);
    if (rc == 0 && stop_requested && procs_writer()) draw_results(cfg, &rs, -1);   // a stopped run's epochs so far
    double t_loop = now_seconds() - t0;
    int drew = drawer != NULL;
    drawer_free(drawer);                             // every picture whole before the run says it ended
    rs.drawer = NULL;
    if (rc != 2 && procs_writer()) {                 // 2: the run could not start
        double total = now_seconds() - t0;
        const PhaseTimes *p = &t.t;
        say_completed(&rs, total);
        printf("Time per phase (device 0%s): data wait %.1f s, forward %.1f s, loss %.1f s, backward %.1f s, "
               "gather %.1f s, optimizer %.1f s, broadcast %.1f s\n", cfg->resume[0] ? ", since the resume" : "",
               p->data, p->forward, p->loss, p->backward, p->gather, p->optim, p->broadcast);
        if (rs.val_passes) {                         // validation's share of the epochs' wall time
            printf("Validation: %.1f s of %.1f s (%.1f%%) in %d pass%s, %.2f s a pass", rs.val_seconds, t_loop,
                   100 * rs.val_seconds / (t_loop > 0 ? t_loop : 1), rs.val_passes, rs.val_passes > 1 ? "es" : "",
                   rs.val_seconds / rs.val_passes);
            if (drew) printf("; the run then waited %.1f s for the pictures and plots drawn beside it", total - t_loop);
            printf("\n");
        }
        if (rs.best_epoch >= 0)
            printf("Best epoch %d: P %.3f R %.3f mAP50 %.3f mAP50-95 %.3f (fitness %.4f)\n", rs.best_epoch,
                   rs.best.m.mp, rs.best.m.mr, rs.best.m.map50, rs.best.m.map, rs.best_fitness);
        if (rc == 0) say_results(dir);
        else printf("The run stopped on an error (above); its files are in %s\n", dir);
    }
    val_result_free(&rs.best);
    val_cache_free(rs.val_cache);
    train_tb_close(&rs.tb);
    held_lock = -1;
    run_unlock(dir, lock);
    trainer_free(&t);
    loader_close(ld);
    dataset_free(&ds);
    dataset_free(&vds);
    return rc;
}
