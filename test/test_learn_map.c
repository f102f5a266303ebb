// test_learn_map.c: the learning test (issue 7): `./yolotrain cfg/t.ini` trained from scratch on the
// built-in synthetic shapes, at the size and for the epochs below, must reach mAP50 >= MIN_MAP50 on
// the val split in the final validation. CPU only; about 5 minutes on 2 cores (the time is printed).
#include <fcntl.h>
#include <sys/resource.h>

#include "cfg/config.h"
#include "core/train/train.h"
#include "io/synth.h"
#include "test/test.h"

// The run, as the command line would give it. With nbs = 64 a batch of 8 steps the optimizer every
// 8 batches once warmup is over: 8 steps per epoch, about 200 in the whole run, too few to learn much.
// During warmup the accumulation ramps from 1 to 8, so a warmup over most of the run (20 of 24 epochs)
// gives about twice the steps; lr0 0.08 makes up for the ramp. Mosaic closes for the last 8 epochs.
// The run is deterministic for one floating-point path, but the path varies by machine (OpenBLAS
// picks its kernels by CPU and splits work by thread count) and training is chaotic: over core types
// and seeds the final mAP50 falls in a band, and swings about as much between the last epochs. The
// threshold sits one and a half band widths below the lowest run measured (figures, and the
// recipes tried before this one: bench/RESULTS.md and bench/HISTORY.md).
#define MIN_MAP50 0.30
static const char *const overrides[] = {
    "device=cpu", "workers=2", "seed=0", "imgsz=96", "epochs=24", "batch=8", "warmup_epochs=20",
    "close_mosaic=8", "lr0=0.08", "scale=0.5", "mixup=0",
};
enum { N_OVERRIDES = sizeof overrides / sizeof overrides[0] };

// The built-in generator sized for 96 px (data=synth-small, cfg/quick.ini's set): images of 128-160 px (scaled by
// 0.6-0.75) hold up to 4 shapes of 20 px and up, so the smallest are still 12 px at the model's input.
static SynthConfig learn_set(void) { return synth_small(); }

// metrics/mAP_0.5 (column 7) of every row of results.csv into map[]; returns the row count.
static int read_map50(const char *csv, double *map, int max) {
    FILE *f = fopen(csv, "r");
    if (!f) return 0;
    char line[1024];
    int n = 0, header = fgets(line, sizeof line, f) != NULL;
    while (header && n < max && fgets(line, sizeof line, f)) {
        char *p = line;
        for (int col = 0; col < 6 && p; col++) p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
        if (p) map[n++] = strtod(p, NULL);
    }
    fclose(f);
    return n;
}

// train_run with its output (data summary, progress bars, per-epoch tables) sent to log.
static int train_quietly(Config *cfg, const char *log) {
    fflush(stdout), fflush(stderr);
    int out = dup(STDOUT_FILENO), errs = dup(STDERR_FILENO), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || errs < 0 || fd < 0) return -1;
    dup2(fd, STDOUT_FILENO), dup2(fd, STDERR_FILENO);
    close(fd);
    int rc = train_run(cfg);
    fflush(stdout), fflush(stderr);
    dup2(out, STDOUT_FILENO), dup2(errs, STDERR_FILENO);
    close(out), close(errs);
    return rc;
}

static double cpu_seconds(void) {                 // user + system time of every thread so far
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static void test_reaches_useful_map50(void) {
    const char *tmp = test_tmpdir("learn-map");
    char data_dir[4200], yaml[4300], project[4300], log[4300], csv[4400];
    snprintf(data_dir, sizeof data_dir, "%s/synth", tmp);
    snprintf(yaml, sizeof yaml, "data=%s/data.yaml", data_dir);
    snprintf(project, sizeof project, "project=%s", tmp);
    snprintf(log, sizeof log, "%s/train.log", tmp);
    snprintf(csv, sizeof csv, "%s/exp/results.csv", tmp);
    SynthConfig sc = learn_set();
    Err err;
    double t0 = now_seconds(), c0 = cpu_seconds();
    int rc = synth_generate(data_dir, &sc, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    char *ov[N_OVERRIDES + 2];
    for (int i = 0; i < N_OVERRIDES; i++) ov[i] = (char *)overrides[i];
    ov[N_OVERRIDES] = yaml, ov[N_OVERRIDES + 1] = project;
    static Config cfg;                               // large: not on the stack
    rc = config_load("cfg/t.ini", N_OVERRIDES + 2, ov, &cfg, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    rc = train_quietly(&cfg, log);
    CHECK(rc == 0, "train_run returned %d; see %s", rc, log);
    double map[1024];
    int n = read_map50(csv, map, 1024);
    CHECK(n == cfg.epochs, "%s: %d rows for %d epochs", csv, n, cfg.epochs);
    printf("    gelan-t, imgsz %d, %d epochs: mAP50 by epoch", cfg.imgsz, cfg.epochs);
    for (int i = 0; i < n; i++) printf(" %.3f", map[i]);
    printf("\n    %.1f s (%.0f s of CPU) for data and training; final mAP50 %.3f, threshold %.2f\n",
           now_seconds() - t0, cpu_seconds() - c0, n ? map[n - 1] : 0.0, MIN_MAP50);
    int ok = n > 0 && map[n - 1] >= MIN_MAP50;
    CHECK(ok, "final mAP50 %.3f < %.2f; the run is in %s", n ? map[n - 1] : 0.0, MIN_MAP50, tmp);
    char rm[4400];
    snprintf(rm, sizeof rm, "rm -rf '%s'", tmp);
    if (ok && rc == 0 && system(rm) != 0) printf("    could not remove %s\n", tmp);   // a failed run stays
}

int main(void) {
    RUN(test_reaches_useful_map50);
    return test_summary();
}
