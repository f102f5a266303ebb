// test_transfer.c: starting from other weights. The shared .pt checkpoints load into their configs
// (what val, detect and export do), transfer to another class count takes every tensor whose name and
// shape match ("Transferred 1333/1339 items", as yolov9 prints) and keeps the rest fresh, a file of
// another model is refused with what it seems to hold, and freeze keeps the chosen layers' parameters
// while their BN statistics still move (train.py leaves BN in training mode).
#include "test/test.h"

#include <fcntl.h>

#include "cfg/config.h"
#include "core/train/step.h"
#include "core/train/train.h"
#include "core/spec/transfer.h"
#include "io/pt.h"

static char pt_gelan[4300], pt_y26[4300];

static int have_pts(void) {
    const char *sh = shared_dir();
    if (!sh) return 0;
    snprintf(pt_gelan, sizeof pt_gelan, "%s/fixtures/pt/gelan_s_yolov9.pt", sh);
    snprintf(pt_y26, sizeof pt_y26, "%s/fixtures/pt/yolo26s_ultralytics.pt", sh);
    return !access(pt_gelan, R_OK) && !access(pt_y26, R_OK);
}

static int build(const char *ini, const char *nc, Model *m, Config *cfg) {
    Err err;
    char *ov[] = { (char *)nc, "imgsz=64", "batch=1" };
    if (config_load(ini, 3, ov, cfg, &err) || model_build(cfg, 1, 64, m, &err)) { printf("    %s\n", err.msg); return -1; }
    return 0;
}

// Every parameter of m equals the file's tensor of the same name (converted to float).
static int equals_file(const Model *m, const char *path, int skip_head_cls) {
    SafeTensors st;
    Err err;
    if (weights_open(path, &st, &err)) { printf("    %s\n", err.msg); return 0; }
    int ok = 1;
    for (int i = 0; i < m->n_params && ok; i++) {
        const ParamInfo *p = &m->params[i];
        if (skip_head_cls && strstr(p->name, ".cv3.") && strstr(p->name, ".2.")) continue;
        float *v = malloc(p->n * sizeof *v);
        ok = !st_read_f32(&st, p->name, v, p->n, &err) && !memcmp(v, m->state + p->offset, p->n * sizeof *v);
        if (!ok) printf("    %s differs from the file\n", p->name);
        free(v);
    }
    st_close(&st);
    return ok;
}

static void test_pt_loads_into_its_config(void) {
    if (!have_pts()) SKIP("no ../shared/fixtures/pt");
    static Config cfg;
    Model m;
    Err err = { { 0 } };
    if (build("cfg/s.ini", "nc=80", &m, &cfg)) { CHECK(0, "gelan-s build"); return; }
    CHECK(model_load(&m, pt_gelan, "", &err) == 0, "%s", err.msg);
    CHECK(equals_file(&m, pt_gelan, 0), "gelan-s weights");
    model_free(&m);
    if (build("cfg/yolo26s.ini", "nc=80", &m, &cfg)) { CHECK(0, "YOLO26-s build"); return; }
    CHECK(model_load(&m, pt_y26, "", &err) == 0, "%s", err.msg);
    CHECK(equals_file(&m, pt_y26, 0), "YOLO26-s weights");
    model_free(&m);
}

// Run f's transfer with stdout going to a file; returns what it printed.
static char printed[4096];
static int transfer_quiet(Model *m, const char *path, Err *err) {
    fflush(stdout);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s/out.txt", test_tmpdir("transfer"));
    int saved = dup(1), fd = open(tmp, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    dup2(fd, 1);
    int rc = model_transfer(m, path, 0, 1, err);
    fflush(stdout);
    dup2(saved, 1);
    close(fd); close(saved);
    size_t n;
    char *s = slurp(tmp, &n);
    snprintf(printed, sizeof printed, "%s", s ? s : "");
    free(s);
    return rc;
}

static void test_transfer_to_six_classes(void) {
    if (!have_pts()) SKIP("no ../shared/fixtures/pt");
    static Config cfg;
    Model m, fresh;
    Err err = { { 0 } };
    if (build("cfg/s.ini", "nc=6", &m, &cfg) || build("cfg/s.ini", "nc=6", &fresh, &cfg)) { CHECK(0, "build"); return; }
    CHECK(transfer_quiet(&m, pt_gelan, &err) == 0, "%s", err.msg);
    char want[4400];
    snprintf(want, sizeof want, "Transferred 1333/1339 items from %s\n", pt_gelan);
    CHECK(!strcmp(printed, want), "printed '%s', want '%s'", printed, want);
    CHECK(equals_file(&m, pt_gelan, 1), "the matching tensors");
    model_init_weights(&fresh, 0);                     // the class convs stay as a fresh model's
    int k = model_find_param(&m, "model.22.cv3.0.2.weight");
    CHECK(k >= 0 && m.params[k].shape[0] == 6 &&
          !memcmp(m.state + m.params[k].offset, fresh.state + m.params[k].offset, m.params[k].n * sizeof(float)),
          "model.22.cv3.0.2.weight is not the fresh initialisation");
    CHECK(m.bn_batches > 0, "num_batches_tracked not taken: %lld", (long long)m.bn_batches);
    model_free(&m);
    model_free(&fresh);
}

static void test_transfer_refuses_another_model(void) {
    if (!have_pts()) SKIP("no ../shared/fixtures/pt");
    static Config cfg;
    Model m;
    Err err = { { 0 } };
    if (build("cfg/yolo26s.ini", "nc=80", &m, &cfg)) { CHECK(0, "build"); return; }
    CHECK(transfer_quiet(&m, pt_gelan, &err) == -1, "gelan-s weights accepted by YOLO26-s");
    CHECK(strstr(err.msg, pt_gelan) && strstr(err.msg, "a gelan model (DDetect head at layer 22, nc 80; cfg/s.ini") &&
          strstr(err.msg, "models.yolo.DetectionModel"), "message: %s", err.msg);
    model_free(&m);
    if (build("cfg/t.ini", "nc=80", &m, &cfg)) { CHECK(0, "build"); return; }
    CHECK(transfer_quiet(&m, pt_y26, &err) == -1, "YOLO26-s weights accepted by gelan-t");
    CHECK(strstr(err.msg, "a YOLO26 model (end-to-end Detect head at layer 23, nc 80; cfg/yolo26s.ini)"), "message: %s",
          err.msg);
    model_free(&m);
}

static void test_freeze_key(void) {
    static Config cfg;
    Err err = { { 0 } };
    unsigned char f[CFG_MAX_LAYERS];
    char why[256];
    CHECK(!config_freeze_layers("3", f, CFG_MAX_LAYERS, why, sizeof why) && f[0] && f[2] && !f[3], "freeze=3");
    CHECK(!config_freeze_layers("[1,5]", f, CFG_MAX_LAYERS, why, sizeof why) && !f[0] && f[1] && f[5] && !f[4], "[1,5]");
    CHECK(!config_freeze_layers("2,4", f, CFG_MAX_LAYERS, why, sizeof why) && f[2] && f[4] && !f[3], "2,4");
    CHECK(!config_freeze_layers("[7]", f, CFG_MAX_LAYERS, why, sizeof why) && f[7] && !f[0], "[7]: that layer only");
    char *bad[] = { "freeze=abc", "freeze=[1,", "freeze=1 2", "freeze=-1", "freeze=[64]" };
    for (int i = 0; i < 5; i++) {
        CHECK(config_load("cfg/t.ini", 1, &bad[i], &cfg, &err) == -1, "%s accepted", bad[i]);
        CHECK(strstr(err.msg, "freeze"), "%s: message %s", bad[i], err.msg);
    }
    char *y26[] = { "freeze=24", "imgsz=64", "batch=1" };   // all 24 layers: Ultralytics refuses it too
    Trainer t;
    CHECK(config_load("cfg/yolo26s.ini", 3, y26, &cfg, &err) == 0, "%s", err.msg);
    CHECK(trainer_init(&t, &cfg, 1, -1, &err) == -1 && strstr(err.msg, "nothing is left to train"), "YOLO26 freeze=24: %s",
          err.msg);
    char *far[] = { "freeze=[3,40]", "imgsz=64", "batch=1" };
    CHECK(config_load("cfg/t.ini", 3, far, &cfg, &err) == 0, "%s", err.msg);
    CHECK(trainer_init(&t, &cfg, 1, -1, &err) == -1 && strstr(err.msg, "layer 40 does not exist"), "%s", err.msg);
}

// Two optimizer steps of gelan-t with freeze=[0,2]: layers 0 and 2 keep their parameters, layer 1 and
// the rest move, and layer 0's BN running mean moves too (as in train.py).
static void test_freeze_keeps_layers(void) {
    static Config cfg;
    Err err = { { 0 } };
    char *ov[] = { "freeze=[0,2]", "imgsz=64", "batch=2", "nc=3", "seed=1" };
    if (config_load("cfg/t.ini", 5, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    Trainer t;
    if (trainer_init(&t, &cfg, 1, -1, &err)) { CHECK(0, "%s", err.msg); return; }
    Model *m = &t.m;
    float *before = malloc(m->n_state * sizeof *before);
    memcpy(before, m->state, m->n_state * sizeof *before);
    Rng r = rng_for(3, 0, 0);
    for (size_t i = 0; i < (size_t)2 * 64 * 64 * 3; i++) t.input[i] = (float)rng_uniform(&r, 0, 1);
    float targets[] = { 0, 1, 0.5f, 0.5f, 0.4f, 0.3f, 1, 2, 0.3f, 0.6f, 0.2f, 0.2f };
    t.sched.batch_total = 64; t.sched.accumulate = 1; t.sched.nw = 1;   // an optimizer step every batch
    LossOut lo;
    for (int i = 0; i < 3; i++) CHECK(!trainer_step(&t, 2, 64, targets, 2, 0, i, &lo, &err), "%s", err.msg);
    int frozen_moved = 0, free_moved = 0, bn_moved = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        int layer = -1;
        sscanf(p->name, "model.%d.", &layer);
        int moved = memcmp(before + p->offset, m->state + p->offset, p->n * sizeof(float)) != 0;
        if (p->kind == PK_RUNNING_MEAN && layer == 0) bn_moved |= moved;
        if (!param_trainable(p->kind)) continue;
        if (layer == 0 || layer == 2) { frozen_moved += moved; if (moved) printf("    frozen %s moved\n", p->name); }
        else if (layer == 1) free_moved += moved;
    }
    CHECK(frozen_moved == 0, "%d tensors of frozen layers moved", frozen_moved);
    CHECK(free_moved > 0, "no tensor of layer 1 moved: the test cannot tell freezing from not training");
    CHECK(bn_moved, "layer 0's BN running mean did not move (train.py keeps BN in training mode)");
    free(before);
    trainer_free(&t);
}

// Three MuSGD steps of YOLO26-n with freeze=[0,2] (Ultralytics' freeze): layers 0 and 2 keep their
// parameters and, their BN being in evaluation mode, their running statistics; layer 1 moves both.
static void test_freeze_yolo26(void) {
    static Config cfg;
    Err err = { { 0 } };
    char *ov[] = { "freeze=[0,2]", "imgsz=64", "batch=2", "nc=3", "seed=1", "optimizer=MuSGD" };
    if (config_load("cfg/yolo26n.ini", 6, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    Trainer t;
    if (trainer_init(&t, &cfg, 1, -1, &err)) { CHECK(0, "%s", err.msg); return; }
    Model *m = &t.m;
    float *before = malloc(m->n_state * sizeof *before);
    memcpy(before, m->state, m->n_state * sizeof *before);
    Rng r = rng_for(3, 0, 0);
    for (size_t i = 0; i < (size_t)2 * 64 * 64 * 3; i++) t.input[i] = (float)rng_uniform(&r, 0, 1);
    float targets[] = { 0, 1, 0.5f, 0.5f, 0.4f, 0.3f, 1, 2, 0.3f, 0.6f, 0.2f, 0.2f };
    t.sched.batch_total = 64; t.sched.accumulate = 1; t.sched.nw = 1;   // an optimizer step every batch
    LossOut lo;
    for (int i = 0; i < 3; i++) CHECK(!trainer_step(&t, 2, 64, targets, 2, 0, i, &lo, &err), "%s", err.msg);
    int frozen_moved = 0, stats_moved = 0, free_moved = 0, free_stats = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        int layer = -1, stat = p->kind == PK_RUNNING_MEAN || p->kind == PK_RUNNING_VAR;
        sscanf(p->name, "model.%d.", &layer);
        int moved = memcmp(before + p->offset, m->state + p->offset, p->n * sizeof(float)) != 0;
        if (!param_trainable(p->kind) && !stat) continue;
        if (layer == 0 || layer == 2) {
            if (moved) printf("    frozen %s moved\n", p->name);
            if (stat) stats_moved += moved;
            else frozen_moved += moved;
        } else if (layer == 1) {
            if (stat) free_stats += moved;
            else free_moved += moved;
        }
    }
    CHECK(frozen_moved == 0, "%d parameter tensors of frozen layers moved", frozen_moved);
    CHECK(stats_moved == 0, "%d BN statistics of frozen layers moved (Ultralytics: BatchNorm.eval())", stats_moved);
    CHECK(free_moved == 3 && free_stats == 2, "layer 1: %d of 3 parameter tensors and %d of 2 statistics moved", free_moved,
          free_stats);
    free(before);
    trainer_free(&t);
}

int main(void) {
    RUN(test_pt_loads_into_its_config);
    RUN(test_transfer_to_six_classes);
    RUN(test_transfer_refuses_another_model);
    RUN(test_freeze_key);
    RUN(test_freeze_keeps_layers);
    RUN(test_freeze_yolo26);
    return test_summary();
}
