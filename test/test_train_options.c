// test_train_options.c: the training options of yolov9's train.py and Ultralytics that change the run
// around the step: noval (validate only after the last epoch: the other epochs log zeros, as train.py's
// results tuple), noplots (no pictures, no plots), single_cls (nc 1 in the saved config).
#include "test/test.h"

#include <sys/stat.h>

#include "cfg/config.h"
#include "core/train.h"
#include "io/synth.h"

static char data_yaml[4300], project[4300];

static int make_data(void) {
    const char *dir = test_tmpdir("trainopt");
    char sd[4200];
    snprintf(sd, sizeof sd, "%s/synth", dir);
    snprintf(data_yaml, sizeof data_yaml, "%s/data.yaml", sd);
    snprintf(project, sizeof project, "%s/runs", dir);
    SynthConfig sc = synth_defaults();
    sc.n_train = 8; sc.n_val = 4; sc.min_side = 64; sc.max_side = 96; sc.threads = 1;
    Err err;
    if (synth_generate(sd, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    return 0;
}

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

int main(void) {
    RUN(test_noval_noplots_single_cls);
    return test_summary();
}
