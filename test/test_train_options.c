// test_train_options.c: the training options of yolov9's train.py and Ultralytics that change the run
// around the step: noval (validate only after the last epoch: the other epochs log zeros, as train.py's
// results tuple), noplots (no pictures, no plots), single_cls (nc 1 in the saved config); gelan's
// optimizer=Adam|AdamW against torch.optim.Adam / AdamW's formulas over train.py's three groups; rect
// and multi_scale runs that train and resume exactly (their formulas: test_batch_shapes).
#include "test/test.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cfg/config.h"
#include "core/train/train.h"
#include "io/image.h"
#include "io/synth.h"
#include "test/synth_run.h"

static int make_data(void) { return synth_run_data("trainopt", 8); }

// gelan-t, 2 epochs of 2 batches at 64 px into project/name, with `extra` overrides
static int train(const char *name, int n_extra, char **extra) {
    static Config cfg;
    Err err;
    char d[4400], p[4400], n[300];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    snprintf(p, sizeof p, "project=%s", project);
    snprintf(n, sizeof n, "name=%s", name);
    char *ov[16] = { d, p, n, "imgsz=64", "batch=4", "epochs=2", "workers=1", "device=cpu", "close_mosaic=1",
                     "exist_ok=1" };
    int k = 10;
    for (int i = 0; i < n_extra && k < 16; i++) ov[k++] = extra[i];
    if (config_load("cfg/t.ini", k, ov, &cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    return train_run(&cfg);
}

static int exists(const char *name, const char *file) {
    char path[4700];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/%s", project, name, file);
    return stat(path, &st) == 0;
}

// results.csv's rows: vals[row][14]; returns the number of rows read
static int read_results(const char *name, double vals[][14], int max) {
    char path[4700], line[1024];
    snprintf(path, sizeof path, "%s/%s/results.csv", project, name);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int rows = 0;
    for (int row = 0; fgets(line, sizeof line, f); row++) {
        if (row == 0 || rows == max) continue;
        char *s = line;
        for (int c = 0; c < 14; c++) {
            vals[rows][c] = strtod(s, &s);
            if (*s == ',') s++;
        }
        rows++;
    }
    fclose(f);
    return rows;
}

static void test_noval_noplots_single_cls(void) {
    if (make_data()) { CHECK(0, "no data"); return; }
    char *opts[] = { "noval=1", "noplots=1", "single_cls=1" };
    CHECK(train("opts", 3, opts) == 0, "the run failed");
    double v[4][14];
    int rows = read_results("opts", v, 4);
    CHECK(rows == 2, "%d rows in results.csv, want 2", rows);
    if (rows == 2) {
        for (int c = 4; c <= 10; c++)                 // P R mAP50 mAP val losses: train.py's zeros
            CHECK(v[0][c] == 0, "epoch 0 was not validated, yet column %d is %g", c, v[0][c]);
        CHECK(v[0][1] > 0 && v[0][11] > 0, "epoch 0's train loss and lr are still logged");
        CHECK(v[1][8] > 0 && v[1][10] > 0, "the last epoch is validated: val box %g, dfl %g", v[1][8], v[1][10]);
    }
    CHECK(exists("opts", "weights/best.safetensors") && exists("opts", "weights/last.safetensors"), "weights");
    static const char *const pictures[] = { "labels.jpg", "train_batch0.jpg", "results.png", "val_batch0_labels.jpg",
                                            "val_batch0_pred.jpg", "confusion_matrix.png", "PR_curve.png" };
    for (int i = 0; i < 7; i++) CHECK(!exists("opts", pictures[i]), "noplots=1 wrote %s", pictures[i]);
    char path[4700];
    size_t n;
    snprintf(path, sizeof path, "%s/opts/args.ini", project);
    char *ini = slurp(path, &n);
    CHECK(ini && strstr(ini, "single_cls = 1") && strstr(ini, "\nnc = 1\n"), "args.ini:\n%.400s", ini ? ini : "");
    free(ini);

    CHECK(train("plain", 0, NULL) == 0, "the plain run failed");   // the same run without the options
    rows = read_results("plain", v, 4);
    CHECK(rows == 2 && v[0][8] > 0, "without noval epoch 0 is validated (val box %g)", rows ? v[0][8] : -1);
    for (int i = 0; i < 3; i++) CHECK(exists("plain", pictures[i]), "without noplots %s is drawn", pictures[i]);
}

// One step of gelan-t under optimizer=Adam or AdamW after warmup (epoch 1 of 200 batches: no warmup,
// a step), against the formulas in double per train.py group: [0] biases, no decay; [1] weights with
// the scaled decay (Adam: added to the gradient; AdamW: p *= 1 - lr*wd); [2] BN weights, no decay.
// weight_decay 0.05 outweighs the gradients, so a decay in the wrong group or place flips a step.
static void adam_check(const char *name, int l2) {
    static Config cfg;
    Err err;
    char opt[64];
    snprintf(opt, sizeof opt, "optimizer=%s", name);
    char *ov[] = { opt, "imgsz=64", "batch=2", "device=cpu", "weight_decay=0.05", "momentum=0.9" };
    if (config_load("cfg/t.ini", 6, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    Trainer t;
    if (trainer_init(&t, &cfg, 200, -1, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(t.gadam != NULL, "optimizer=%s did not make the Adam state", name);
    OptSchedule copy = t.sched;
    OptStep st = opt_schedule_next(&copy, 1, 0);
    CHECK(st.step && st.weight_decay > 0.04, "%s: step %d, wd %g", name, st.step, st.weight_decay);
    size_t total = 0;
    for (int k = 0; k < t.n_slots; k++) total += t.slots[k].group >= 0 ? t.slots[k].n : 0;
    double *w0 = calloc(total, sizeof *w0), *g0 = calloc(total, sizeof *g0);
    size_t at = 0;
    for (int k = 0; k < t.n_slots; k++) {
        const ParamSlot *p = &t.slots[k];
        if (p->group < 0) continue;
        for (size_t i = 0; i < p->n; i++, at++) {
            p->g[i] = (float)(1e-4 * sin(0.37 * (double)at + k));   // a small norm: no clipping
            w0[at] = p->w[i];
            g0[at] = p->g[i];
        }
    }
    trainer_update(&t, 1, 0);
    double b1 = 0.9, b2 = 0.999, eps = 1e-8, worst = 0;
    int bad = 0, groups_seen[3] = { 0 };
    at = 0;
    for (int k = 0; k < t.n_slots; k++) {
        const ParamSlot *p = &t.slots[k];
        if (p->group < 0) continue;
        groups_seen[p->group]++;
        double lr = st.lr[p->group], wd = p->group == 1 ? st.weight_decay : 0;
        for (size_t i = 0; i < p->n; i++, at++) {
            double w = w0[at], g = g0[at];
            if (l2) g += wd * w;
            else w *= 1 - lr * wd;
            double m = (1 - b1) * g, v = (1 - b2) * g * g;
            w -= lr * (m / (1 - b1)) / (sqrt(v / (1 - b2)) + eps);
            double d = fabs(p->w[i] - w);
            if (d > worst) worst = d;
            if (d > 1e-6 && bad++ < 3) printf("    %s: slot %d (group %d) [%zu]: %.9g, want %.9g\n", name, k, p->group, i,
                                              p->w[i], w);
            if (p->g[i] != 0) bad++;
        }
    }
    CHECK(!bad && groups_seen[0] && groups_seen[1] && groups_seen[2], "%s: %d values off (worst %g), groups %d %d %d",
          name, bad, worst, groups_seen[0], groups_seen[1], groups_seen[2]);
    CHECK(t.sgd.n_train == 2 * total && t.sgd.steps == 1, "%s: state %zu floats for %zu parameters, steps %lld", name,
          t.sgd.n_train, total, (long long)t.sgd.steps);
    free(w0); free(g0);
    trainer_free(&t);
}

static void test_adam(void) { adam_check("Adam", 1); }
static void test_adamw(void) { adam_check("AdamW", 0); }

// The run `name`_whole with `opts`, the same run stopped in epoch 1 after its first batch and resumed:
// 1 when both wrote the same results.csv (a failed run or resume is a failed check too).
static int stop_resume_same(const char *name, int n, char **opts) {
    char whole[300], stopped[300];
    snprintf(whole, sizeof whole, "%s_whole", name);
    snprintf(stopped, sizeof stopped, "%s_stopped", name);
    CHECK(train(whole, n, opts) == 0, "%s: the uninterrupted run failed", name);
    test_switch(SW_STOP_AFTER_STEPS, "3");             // epoch 1, after its first batch
    CHECK(train(stopped, n, opts) == 0, "%s: the stopped run failed", name);
    test_switch(SW_STOP_AFTER_STEPS, NULL);
    static Config cfg;
    Err err;
    char r[4800], a[4900], b[4900];
    snprintf(r, sizeof r, "resume=%s/%s", project, stopped);
    char *ov[] = { r };
    CHECK(config_load(NULL, 1, ov, &cfg, &err) == 0, "%s", err.msg);
    CHECK(train_resume(&cfg, 1, ov) == 0, "%s: resume failed", name);
    snprintf(a, sizeof a, "%s/%s/results.csv", project, whole);
    snprintf(b, sizeof b, "%s/%s/results.csv", project, stopped);
    return same_file(a, b);
}

// A run stopped mid-epoch under optimizer=AdamW resumes to the same results (the [m | v] block and the
// step count are checkpointed); MuSGD stays YOLO26's.
static void test_adam_resume(void) {
    if (!data_yaml[0] && make_data()) { CHECK(0, "no data"); return; }
    char *opts[] = { "optimizer=AdamW", "epochs=3", "lr0=0.001" };
    CHECK(stop_resume_same("adamw", 3, opts), "results.csv differs between the whole AdamW run and the resumed one");
    char *musgd[] = { "optimizer=MuSGD" };
    CHECK(train("musgd", 1, musgd) != 0, "gelan with optimizer=MuSGD must be refused");
}

// rect=1 with multi_scale=1 (and each alone): runs that train, and a run stopped mid-epoch resumes to
// the results of the run that was never stopped (the rect order is fixed and each batch's size is
// drawn from (seed, epoch, batch), so the resumed batches are the same); two CPU devices take the
// batch's shape too (each its share of the images, resized on its own device).
static void test_rect_multi_scale(void) {
    if (!data_yaml[0] && make_data()) { CHECK(0, "no data"); return; }
    char *both[] = { "rect=1", "multi_scale=1", "epochs=3" }, *rect[] = { "rect=1" }, *ms[] = { "multi_scale=1" };
    CHECK(train("rect", 1, rect) == 0 && exists("rect", "weights/last.safetensors"), "rect=1 did not train");
    CHECK(train("ms", 1, ms) == 0 && exists("ms", "weights/last.safetensors"), "multi_scale=1 did not train");
    // train_batch0.jpg shows the batch the model saw, after the resize (train.py plots imgs after
    // interpolate): its 2 x 2 tiles of 4 images at the first batch's drawn size, for a seed whose
    // first draw is not 64
    int seed = 1, h = 64, w = 64, pw = 0, ph = 0;
    for (; seed < 100 && h == 64; seed++) train_ms_shape(train_ms_size((uint64_t)seed, 0, 0, 64), 64, 64, &h, &w);
    char seed_kv[32], pic[4700], *ms_seed[] = { "multi_scale=1", seed_kv };
    snprintf(seed_kv, sizeof seed_kv, "seed=%d", seed - 1);
    snprintf(pic, sizeof pic, "%s/ms_seed/train_batch0.jpg", project);
    Err perr;
    CHECK(train("ms_seed", 2, ms_seed) == 0 && image_probe(pic, &pw, &ph, &perr) == 0 && pw == 2 * w && ph == 2 * h,
          "train_batch0.jpg is %d x %d, want the 4 images at the drawn %d x %d: %d x %d", pw, ph, w, h, 2 * w, 2 * h);
    CHECK(stop_resume_same("both", 3, both), "results.csv differs between the whole rect + multi_scale run and the "
          "resumed one");
    double v[4][14];
    CHECK(read_results("both_whole", v, 4) == 3 && v[2][1] > 0 && isfinite(v[2][1]), "3 epochs with finite losses");
    char *two[] = { "rect=1", "multi_scale=1", "device=cpu:2" };
    CHECK(train("both_cpu2", 3, two) == 0 && read_results("both_cpu2", v, 4) == 2 && isfinite(v[1][1]) && v[1][1] > 0,
          "rect=1 multi_scale=1 on two CPU devices");
}

// Pictures and plots drawn by the run's drawer thread (the default) are the bytes YT_DRAW_SYNC=1 draws on
// the run's own thread, in a whole run and in one stopped mid-epoch (its results.png drawn at the stop);
// every file is whole (no .tmp left) when the run returns.
static int same_pictures(const char *a, const char *b, int stopped) {
    static const char *const files[] = { "labels.jpg", "labels_correlogram.jpg", "train_batch0.jpg",
                                         "val_batch0_labels.jpg", "val_batch0_pred.jpg", "results.png",
                                         "confusion_matrix.png", "PR_curve.png", "F1_curve.png", "P_curve.png",
                                         "R_curve.png" };
    int ok = 1, n = stopped ? 6 : 11;                  // a stopped run drew no plots of a last validation
    for (int i = 0; i < 11; i++) {
        char x[4800], y[4800], tmp[4900];
        snprintf(x, sizeof x, "%s/%s/%s", project, a, files[i]);
        snprintf(y, sizeof y, "%s/%s/%s", project, b, files[i]);
        snprintf(tmp, sizeof tmp, "%s.tmp", y);
        int want = i < n;
        CHECK(exists(a, files[i]) == want && exists(b, files[i]) == want, "%s: %s is%s there, want%s", b, files[i],
              exists(b, files[i]) ? "" : " not", want ? " it" : " none");
        if (want && !same_file(x, y)) { CHECK(0, "%s differs between %s and %s", files[i], a, b); ok = 0; }
        CHECK(access(tmp, F_OK) != 0, "%s was left", tmp);
    }
    return ok;
}

static void test_background_drawing(void) {
    if (!data_yaml[0] && make_data()) { CHECK(0, "no data"); return; }
    test_switch(SW_DRAW_SYNC, "1");
    CHECK(train("draw_sync", 0, NULL) == 0, "the run drawing synchronously failed");
    test_switch(SW_STOP_AFTER_STEPS, "3");             // epoch 1, after its first batch
    CHECK(train("draw_sync_stop", 0, NULL) == 0, "the stopped run drawing synchronously failed");
    test_switch(SW_DRAW_SYNC, NULL);
    CHECK(train("draw_bg_stop", 0, NULL) == 0, "the stopped run drawing in the background failed");
    test_switch(SW_STOP_AFTER_STEPS, NULL);
    CHECK(train("draw_bg", 0, NULL) == 0, "the run drawing in the background failed");
    CHECK(same_pictures("draw_sync", "draw_bg", 0), "the pictures of a whole run differ");
    CHECK(same_pictures("draw_sync_stop", "draw_bg_stop", 1), "the pictures of a stopped run differ");
}

int main(void) {
    RUN(test_noval_noplots_single_cls);
    RUN(test_adam);
    RUN(test_adamw);
    RUN(test_adam_resume);
    RUN(test_rect_multi_scale);
    RUN(test_background_drawing);
    return test_summary();
}
