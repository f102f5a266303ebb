// test_splits.c: every split mode survives an epoch's partial batches: the last one (5 images in
// batches of 4: 4 + 1) and a first that is also the last (5 images, batch 8), on CPU devices; a run
// stopped right after the partial batch saves its state as at any stop, and resuming finishes.
#include "test/test.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

#include "cfg/config.h"
#include "core/train/train.h"
#include "io/synth.h"

enum { P = 2048 };
static char dir[P], data_yaml[P], project[P];

static int make_data(void) {
    snprintf(dir, sizeof dir, "%s", test_tmpdir("splits"));
    snprintf(data_yaml, sizeof data_yaml, "%s/synth/data.yaml", dir);
    snprintf(project, sizeof project, "%s/runs", dir);
    SynthConfig sc = synth_defaults();
    sc.n_train = 5; sc.n_val = 2; sc.min_side = 64; sc.max_side = 72; sc.threads = 1;
    char sd[P + 8];
    snprintf(sd, sizeof sd, "%s/synth", dir);
    Err err;
    if (synth_generate(sd, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    return 0;
}

// One run of project/name, its stdout into DIR/name.log; resume=1 continues it instead.
static int train(const char *name, const char *device, const char *split, int batch, int epochs, int resume) {
    static Config cfg;
    Err err;
    char d[P + 8], p[P + 16], n[128], dv[64], sp[64], b[32], e[32], r[2 * P];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    snprintf(p, sizeof p, "project=%s", project);
    snprintf(n, sizeof n, "name=%s", name);
    snprintf(dv, sizeof dv, "device=%s", device);
    snprintf(sp, sizeof sp, "split=%s", split);
    snprintf(b, sizeof b, "batch=%d", batch);
    snprintf(e, sizeof e, "epochs=%d", epochs);
    snprintf(r, sizeof r, "resume=%s/%s", project, name);
    char *ov[] = { d, p, n, dv, sp, b, e, "imgsz=64", "workers=1", "exist_ok=1" };
    char *rv[] = { r };
    char log[2 * P];
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    fflush(stdout); fflush(stderr);
    int saved = dup(1), saved_err = dup(2);
    FILE *f = fopen(log, "a");
    if (f) { dup2(fileno(f), 1); dup2(fileno(f), 2); fclose(f); }
    int rc = resume ? (config_load(NULL, 1, rv, &cfg, &err) ? -1 : train_resume(&cfg, 1, rv))
                    : (config_load("cfg/t.ini", 10, ov, &cfg, &err) ? -1 : train_run(&cfg));
    fflush(stdout); fflush(stderr);
    dup2(saved, 1); dup2(saved_err, 2);
    close(saved); close(saved_err);
    if (rc == -1) printf("    %s\n", err.msg);
    return rc;
}

static void test_every_split_partial_batches(void) {
    if (make_data()) { CHECK(0, "no data"); return; }
    static const char *const modes[][2] = { { "cpu:2", "even" }, { "cpu:2", "auto" }, { "cpu:2", "3,1" },
                                            { "cpu:2", "1,3" }, { "cpu:3", "even" }, { "cpu:3", "1,1,5" } };
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        char name[64];
        snprintf(name, sizeof name, "stop%zu", k);
        test_switch(SW_STOP_AFTER_STEPS, "2");        // right after the last, partial batch (1 image):
                                                       // saved as at any stop, resume validates
        int rc = train(name, modes[k][0], modes[k][1], 4, 1, 0);
        test_switch(SW_STOP_AFTER_STEPS, NULL);
        CHECK(rc == 0, "device=%s split=%s: a run over a partial last batch: status %d", modes[k][0], modes[k][1], rc);
        CHECK(train(name, modes[k][0], modes[k][1], 4, 1, 1) == 0, "device=%s split=%s: resume failed", modes[k][0],
              modes[k][1]);
        char last[2 * P];
        snprintf(last, sizeof last, "%s/%s/results.csv", project, name);
        size_t n;
        char *csv = slurp(last, &n);
        int rows = 0;
        for (size_t i = 0; csv && i < n; i++) rows += csv[i] == '\n';
        free(csv);
        CHECK(rows == 2, "device=%s split=%s: %d lines of results.csv, want the header and epoch 0", modes[k][0],
              modes[k][1], rows);
        snprintf(name, sizeof name, "one%zu", k);      // batch 8 over 5 images: the first batch is partial
        CHECK(train(name, modes[k][0], modes[k][1], 8, 1, 0) == 0, "device=%s split=%s: one partial batch",
              modes[k][0], modes[k][1]);
    }
}

int main(void) {
    RUN(test_every_split_partial_batches);
    return test_summary();
}
