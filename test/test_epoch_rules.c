// test_epoch_rules.c: what a run does at its epochs' edges, against yolov9's train.py: a tie in fitness
// is the best (best weights rewritten, patience reset), so a run whose fitness stays 0 is not stopped
// by patience; save_period keeps epochs 0, N, 2N, ... as epoch{N}; mosaic closes at epoch
// epochs - close_mosaic, so a run shorter than close_mosaic trains as with close_mosaic = 0, and the
// closing is printed when it happens, at epoch 0 too. Short gelan-t runs at 64 px on the CPU.
#include "test/test.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cfg/config.h"
#include "core/train/train.h"
#include "test/synth_run.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

// gelan-t, 64 px, batch 4 into project/name with `extra` overrides; its stdout goes to *out (free it).
static int train(const char *name, int n_extra, char **extra, char **out) {
    static Config cfg;
    Err err;
    char d[4400], p[4400], n[300], log[4700];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    snprintf(p, sizeof p, "project=%s", project);
    snprintf(n, sizeof n, "name=%s", name);
    char *ov[16] = { d, p, n, "imgsz=64", "batch=4", "workers=1", "device=cpu", "noplots=1", "tensorboard=0" };
    int k = 9;
    for (int i = 0; i < n_extra && k < 16; i++) ov[k++] = extra[i];
    if (config_load("cfg/t.ini", k, ov, &cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    snprintf(log, sizeof log, "%s/%s.log", project, name);
    mkdir(project, 0755);
    fflush(stdout);
    int saved = dup(1), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (saved < 0 || fd < 0) return -1;
    dup2(fd, 1);
    int rc = train_run(&cfg);
    fflush(stdout);
    dup2(saved, 1);
    close(saved), close(fd);
    FILE *f = fopen(log, "r");
    size_t len = 0;
    *out = calloc(1, 1 << 20);
    if (f) len = fread(*out, 1, (1 << 20) - 1, f), fclose(f);
    (*out)[len] = 0;
    return rc;
}

static int exists(const char *name, const char *file) {
    char path[4700];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s/%s", project, name, file);
    return stat(path, &st) == 0;
}

// results.csv's first four columns (epoch, box, cls, dfl) per row; returns the rows read.
static int read_losses(const char *name, double v[][4], int max) {
    char path[4700], line[2048];
    snprintf(path, sizeof path, "%s/%s/results.csv", project, name);
    FILE *f = fopen(path, "r");
    int rows = 0;
    for (int row = 0; f && fgets(line, sizeof line, f); row++) {
        if (row == 0 || rows == max) continue;
        char *s = line;
        for (int c = 0; c < 4; c++) {
            v[rows][c] = strtod(s, &s);
            if (*s == ',') s++;
        }
        rows++;
    }
    if (f) fclose(f);
    return rows;
}

// Validation images without labels make every fitness exactly 0: each epoch ties with the best.
static int unlabel_val(void) {
    char cmd[4500];
    snprintf(cmd, sizeof cmd, "rm -f '%.*s/synth/labels/val/'*.txt", (int)(strlen(project) - 5), project);
    return system(cmd);
}

static void test_ties_and_save_period(void) {
    if (synth_run_data("epoch-ties", 8) || unlabel_val()) { CHECK(0, "no data"); return; }
    char *out = NULL;
    char *ov[] = { "epochs=3", "patience=1", "save_period=2", "close_mosaic=0" };
    CHECK(train("ties", 4, ov, &out) == 0, "the run failed:\n%s", out);
    double v[4][4];
    int rows = read_losses("ties", v, 4);
    CHECK(rows == 3, "%d epochs ran; patience=1 must not stop a run whose fitness stays 0 (ties reset it)",
          rows);
    CHECK(out && !strstr(out, "Stopping training early"), "stopped early");
    CHECK(out && strstr(out, "Best epoch 2:"), "the last tie is not the best, as it is for yolov9's best.pt");
    CHECK(exists("ties", "weights/epoch0.safetensors") && exists("ties", "weights/epoch2.safetensors"),
          "save_period=2 keeps epochs 0 and 2, as yolov9's epoch %% save_period == 0");
    CHECK(!exists("ties", "weights/epoch1.safetensors"), "epoch 1 kept");
    free(out);
}

static void test_close_mosaic(void) {
    if (synth_run_data("epoch-mosaic", 8)) { CHECK(0, "no data"); return; }
    char *out[3] = { NULL, NULL, NULL };
    char *never[] = { "epochs=2", "close_mosaic=0" }, *longer[] = { "epochs=2", "close_mosaic=3" },
         *all[] = { "epochs=2", "close_mosaic=2" };
    CHECK(train("never", 2, never, &out[0]) == 0, "close_mosaic=0 failed");
    CHECK(train("longer", 2, longer, &out[1]) == 0, "close_mosaic=3 failed");
    CHECK(train("all", 2, all, &out[2]) == 0, "close_mosaic=2 failed");
    double a[2][4], b[2][4], c[2][4];
    int na = read_losses("never", a, 2), nb = read_losses("longer", b, 2), nc = read_losses("all", c, 2);
    CHECK(na == 2 && nb == 2 && nc == 2, "rows %d %d %d", na, nb, nc);
    for (int e = 0; e < 2 && na == 2 && nb == 2; e++)
        for (int k = 1; k < 4; k++)
            CHECK(a[e][k] == b[e][k], "epoch %d loss %d: %g with close_mosaic=0, %g with 3 of 2 epochs (mosaic "
                  "closed early)", e, k, a[e][k], b[e][k]);
    CHECK(nc != 2 || a[0][1] != c[0][1], "closing at epoch 0 changes nothing: the test could not see it");
    CHECK(out[1] && !strstr(out[1], "Closing dataloader mosaic"), "closed in a run shorter than close_mosaic");
    CHECK(out[2] && strstr(out[2], "Closing dataloader mosaic"), "closing at epoch 0 not printed");
    for (int i = 0; i < 3; i++) free(out[i]);
}

int main(void) {
    RUN(test_ties_and_save_period);
    RUN(test_close_mosaic);
    return test_summary();
}
