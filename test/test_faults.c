// test_faults.c: what a run does when the machine misbehaves. The same seed gives the same run
// twice; a run folder that cannot be made stops the run before training; a checkpoint that cannot
// be written leaves the previous one intact and stops the run with a failure status.
#include "test/test.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

#include "cfg/config.h"
#include "core/train.h"
#include "io/synth.h"

enum { P = 2048 };                 // path buffers; test_tmpdir paths are short
static char data_yaml[P], project[P];

static int make_data(void) {
    const char *dir = test_tmpdir("faults");
    char sd[P];
    snprintf(sd, sizeof sd, "%s/synth", dir);
    snprintf(data_yaml, sizeof data_yaml, "%s/data.yaml", sd);
    snprintf(project, sizeof project, "%s/runs", dir);
    SynthConfig sc = synth_defaults();
    sc.n_train = 8; sc.n_val = 4; sc.min_side = 64; sc.max_side = 96; sc.threads = 1;
    Err err;
    if (synth_generate(sd, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    return 0;
}

static int train(const char *proj, const char *name, int epochs) {
    static Config cfg;
    Err err;
    char d[3 * P], p[3 * P], n[300], e[32];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    snprintf(p, sizeof p, "project=%s", proj);
    snprintf(n, sizeof n, "name=%s", name);
    snprintf(e, sizeof e, "epochs=%d", epochs);
    char *ov[] = { d, p, n, e, "imgsz=64", "batch=4", "workers=2", "device=cpu", "exist_ok=1" };
    if (config_load("cfg/t.ini", 9, ov, &cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    return train_run(&cfg);
}

static int same_file(const char *a, const char *b) {
    char cmd[7 * P];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

static void test_same_seed_same_run(void) {
    if (make_data()) { CHECK(0, "no data"); return; }
    CHECK(train(project, "a", 2) == 0 && train(project, "b", 2) == 0, "a run failed");
    char x[3 * P], y[3 * P];
    snprintf(x, sizeof x, "%s/a/results.csv", project);
    snprintf(y, sizeof y, "%s/b/results.csv", project);
    CHECK(same_file(x, y), "results.csv differs between two runs of the same seed");
    snprintf(x, sizeof x, "%s/a/weights/last.safetensors", project);
    snprintf(y, sizeof y, "%s/b/weights/last.safetensors", project);
    CHECK(same_file(x, y), "the weights differ between two runs of the same seed");
    struct stat st;                                    // and the run folder holds its pictures
    const char *files[] = { "train_batch0.jpg", "val_batch0_labels.jpg", "val_batch0_pred.jpg", "results.png" };
    for (int i = 0; i < 4; i++) {
        snprintf(x, sizeof x, "%s/a/%s", project, files[i]);
        CHECK(stat(x, &st) == 0 && st.st_size > 0, "%s is missing", x);
    }
}

static void test_unusable_run_folder(void) {
    char file[3 * P], proj[4 * P];
    snprintf(file, sizeof file, "%s/a-file", project);
    FILE *f = fopen(file, "w");
    if (!f) SKIP("cannot write %s", file);
    fclose(f);
    snprintf(proj, sizeof proj, "%s/inside", file);            // a folder inside a regular file
    CHECK(train(proj, "x", 1) == 1, "a run folder that cannot exist did not stop the run with status 1");
}

static void test_failed_checkpoint_keeps_the_previous(void) {
    char last[P], copy[P], tmp[4600], cmd[9400];
    snprintf(last, sizeof last, "%s/a/weights/last.safetensors", project);
    snprintf(copy, sizeof copy, "%s.before", last);
    snprintf(tmp, sizeof tmp, "%s.tmp", last);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && mkdir -p '%s'", last, copy, tmp);   // the next write cannot happen
    if (system(cmd)) SKIP("setup failed");
    CHECK(train(project, "a", 1) == 1, "a failed checkpoint write did not fail the run");
    CHECK(same_file(last, copy), "the previous checkpoint was damaged");
    snprintf(cmd, sizeof cmd, "rmdir '%s'", tmp);
    CHECK(system(cmd) == 0, "cleanup");
}

// A batch the machine cannot hold is refused with the numbers, before anything is touched.
static void test_too_large_for_memory(void) {
    static Config cfg;
    Err err;
    char *ov[] = { "batch=4096", "imgsz=640", "device=cpu", "epochs=1" };
    if (config_load("cfg/s.ini", 4, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    Trainer t;
    int rc = trainer_init(&t, &cfg, 1, -1, &err);
    if (rc == 0) { trainer_free(&t); SKIP("this machine has over 3 TB of memory"); }
    CHECK(strstr(err.msg, "batch 4096") && strstr(err.msg, "GB"), "message: %s", err.msg);
}

int main(void) {
    RUN(test_same_seed_same_run);
    RUN(test_unusable_run_folder);
    RUN(test_failed_checkpoint_keeps_the_previous);
    RUN(test_too_large_for_memory);
    return test_summary();
}
