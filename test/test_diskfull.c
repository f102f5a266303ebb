// test_diskfull.c: a run refuses to start on a disk without room for its checkpoints (the free
// space given by YT_DISK_FREE_MB), naming the numbers and the way out; a checkpoint write that fails part-way (the disk fills up; simulated by a file
// size limit, RLIMIT_FSIZE, in a forked child with SIGXFSZ ignored so write() returns EFBIG) leaves
// the previous checkpoint byte for byte and says so; the run stops with a non-zero status, and
// resuming once there is room again finishes the run.
#include "test/test.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "cfg/config.h"
#include "core/train/checkpoint.h"
#include "core/train/train.h"
#include "io/synth.h"

enum { P = 4096 };
static char root[P], data_yaml[P + 32], run[P + 32], log_path[P + 32];

static int copy_file(const char *from, const char *to) {
    size_t n;
    char *x = slurp(from, &n);
    FILE *f = x ? fopen(to, "wb") : NULL;
    int ok = f && fwrite(x, 1, n, f) == n;
    if (f) ok &= fclose(f) == 0;
    free(x);
    return ok ? 0 : -1;
}

static long long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) ? -1 : (long long)sb.st_size;
}

// No *.tmp left in the run's weights folder.
static int tmp_files_left(void) {
    char w[P + 64];
    snprintf(w, sizeof w, "%s/weights", run);
    DIR *d = opendir(w);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    return n;
}

// Run f in a child whose files may not grow past `limit` bytes (0: no limit), its stdout thrown away
// and its stderr in log_path; returns the child's exit status, or 128 + the signal that ended it.
static int in_child(int (*f)(void *), void *arg, long long limit) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int out = open("/dev/null", O_WRONLY), log = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || log < 0 || dup2(out, 1) < 0 || dup2(log, 2) < 0) _exit(99);
        signal(SIGXFSZ, SIG_IGN);                  // write() then fails with EFBIG, as on a full disk
        struct rlimit rl = { (rlim_t)limit, (rlim_t)limit };
        if (limit > 0 && setrlimit(RLIMIT_FSIZE, &rl)) _exit(98);
        _exit(f(arg));
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int log_has(const char *what) {
    size_t n;
    char *text = slurp(log_path, &n);
    int has = text && strstr(text, what);
    if (!has) printf("    no \"%s\" in the run's messages:\n%s\n", what, text ? text : "(none)");
    free(text);
    return has;
}

// ---- one checkpoint ------------------------------------------------------------------------------
static Trainer trainer;
static char state[P + 64];

static int save_state_once(void *arg) {
    Err err;
    RunPoint p = { .epoch = 2, .best_epoch = -1 };
    if (checkpoint_save(&trainer, &p, state, &err) == 0) return 0;
    fprintf(stderr, "%s\n", err.msg);
    return 1;
}

static void test_failed_state_write_keeps_the_previous(void) {
    snprintf(root, sizeof root, "%s", test_tmpdir("diskfull"));
    snprintf(log_path, sizeof log_path, "%s/log.txt", root);
    snprintf(state, sizeof state, "%s/last_state.safetensors", root);
    static Config cfg;
    Err err;
    char *ov[] = { "imgsz=64", "batch=1", "device=cpu" };
    if (config_load("cfg/t.ini", 3, ov, &cfg, &err) || trainer_init(&trainer, &cfg, 4, -1, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    RunPoint p = { .epoch = 1, .best_epoch = -1 };
    char before[P + 80];
    snprintf(before, sizeof before, "%s.before", state);
    if (checkpoint_save(&trainer, &p, state, &err) || copy_file(state, before)) { CHECK(0, "setup: %s", err.msg); return; }
    int rc = in_child(save_state_once, NULL, file_size(state) / 2);
    CHECK(rc == 1, "a checkpoint write past the file size limit returned %d, want the failure (1)", rc);
    CHECK(log_has("file size limit") && log_has("was left as it was") && log_has(state), "the message is unclear");
    CHECK(same_file(state, before), "the previous checkpoint was changed");
    char tmp[P + 80];
    snprintf(tmp, sizeof tmp, "%s.tmp", state);
    CHECK(file_size(tmp) < 0, "the partial %s was left behind", tmp);
    RunPoint q;
    CHECK(checkpoint_load(&trainer, &q, state, &err) == 0 && q.epoch == 1, "the previous checkpoint does not load");
    trainer_free(&trainer);
}

// ---- a whole run ---------------------------------------------------------------------------------
static int make_data(void) {
    char sd[P + 16];
    snprintf(sd, sizeof sd, "%s/synth", root);
    snprintf(data_yaml, sizeof data_yaml, "%s/data.yaml", sd);
    snprintf(run, sizeof run, "%s/runs/a", root);
    SynthConfig sc = synth_defaults();
    sc.n_train = 8; sc.n_val = 4; sc.min_side = 64; sc.max_side = 96; sc.threads = 1;
    Err err;
    if (synth_generate(sd, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    return 0;
}

// 3 epochs of 2 batches; the first run stops after 3 steps (epoch 1, batch 1).
static int first_run(void *arg) {
    static Config cfg;
    Err err;
    char d[P + 64], p[P + 64];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    snprintf(p, sizeof p, "project=%s/runs", root);
    char *ov[] = { d, p, "name=a", "imgsz=64", "batch=4", "epochs=3", "workers=1", "device=cpu", "close_mosaic=1" };
    if (config_load("cfg/t.ini", 9, ov, &cfg, &err)) { fprintf(stderr, "%s\n", err.msg); return 97; }
    test_switch(SW_STOP_AFTER_STEPS, "3");
    return train_run(&cfg);
}

static int resume_run(void *arg) {
    static Config cfg;
    Err err;
    char r[P + 64];
    snprintf(r, sizeof r, "resume=%s", run);
    char *ov[] = { r };
    if (config_load(NULL, 1, ov, &cfg, &err)) { fprintf(stderr, "%s\n", err.msg); return 97; }
    test_switch(SW_STOP_AFTER_STEPS, NULL);
    return train_resume(&cfg, 1, ov);
}

static void test_run_stops_when_the_disk_fills(void) {
    if (!root[0]) snprintf(root, sizeof root, "%s", test_tmpdir("diskfull"));
    snprintf(log_path, sizeof log_path, "%s/log.txt", root);
    if (make_data()) { CHECK(0, "no data"); return; }
    int rc = in_child(first_run, NULL, 0);
    if (rc) { CHECK(0, "the first run failed (%d)", rc); log_has("(its messages)"); return; }
    char st[P + 64], w[P + 64], st0[P + 80], w0[P + 80];
    snprintf(st, sizeof st, "%s/weights/last_state.safetensors", run);
    snprintf(w, sizeof w, "%s/weights/last.safetensors", run);
    snprintf(st0, sizeof st0, "%s/state.before", root);
    snprintf(w0, sizeof w0, "%s/last.before", root);
    if (copy_file(st, st0) || copy_file(w, w0)) { CHECK(0, "the stopped run left no checkpoints"); return; }

    // 1 MB: the epoch's weights (last.safetensors) cannot be written
    rc = in_child(resume_run, NULL, 1 << 20);
    CHECK(rc != 0 && rc < 128, "a run whose weights could not be saved ended with status %d", rc);
    CHECK(log_has("file size limit") && log_has("last.safetensors was left as it was"), "the message is unclear");
    CHECK(same_file(w, w0) && same_file(st, st0), "a checkpoint was changed by the failed write");
    CHECK(tmp_files_left() == 0, "a partial .tmp file was left in %s/weights", run);

    // room for the weights but not for the training state
    rc = in_child(resume_run, NULL, file_size(w) + (256 << 10));
    CHECK(rc != 0 && rc < 128, "a run whose state could not be saved ended with status %d", rc);
    CHECK(log_has("last_state.safetensors was left as it was"), "the message is unclear");
    CHECK(same_file(st, st0), "the training state was changed by the failed write");
    CHECK(tmp_files_left() == 0, "a partial .tmp file was left in %s/weights", run);

    // room again: the run resumes from the intact state and finishes
    rc = in_child(resume_run, NULL, 0);
    CHECK(rc == 0, "resuming after the failures ended with status %d", rc);
    RunPoint p;
    static Config cfg;
    Err err;
    char *ov[] = { "imgsz=64", "batch=4", "device=cpu", "nc=6" };
    CHECK(config_load("cfg/t.ini", 4, ov, &cfg, &err) == 0, "%s", err.msg);
    Trainer t;
    if (trainer_init(&t, &cfg, 2, -1, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(checkpoint_load(&t, &p, st, &err) == 0 && p.epoch == 3 && p.batch == 0,
          "the finished run's state is not at the end: %s", err.msg);
    trainer_free(&t);
}

// A nearly full disk: refused before training, nothing trained, the numbers and project= named;
// with room (the same run, no stand-in) it trains.
static int short_run(void *arg) {
    static Config cfg;
    Err err;
    char d[P + 64], p[P + 64];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    snprintf(p, sizeof p, "project=%s/runs", root);
    char *ov[] = { d, p, "name=full", "exist_ok=1", "imgsz=64", "batch=4", "epochs=1", "workers=1", "device=cpu" };
    if (config_load("cfg/t.ini", 9, ov, &cfg, &err)) { fprintf(stderr, "%s\n", err.msg); return 97; }
    if (arg) test_switch(SW_DISK_FREE_MB, (const char *)arg);
    else test_switch(SW_DISK_FREE_MB, NULL);
    return train_run(&cfg);
}

static void test_full_disk_refused_at_start(void) {
    if (!root[0]) snprintf(root, sizeof root, "%s", test_tmpdir("diskfull"));
    snprintf(log_path, sizeof log_path, "%s/log.txt", root);
    if (make_data()) { CHECK(0, "no data"); return; }
    char w[P + 64];
    snprintf(w, sizeof w, "%s/runs/full/weights/last.safetensors", root);
    int rc = in_child(short_run, "5", 0);
    CHECK(rc == 1, "a run on a disk with 5 MB free ended with status %d, want 1", rc);
    CHECK(log_has("5 MB free") && log_has("the checkpoints need about") && log_has("project="), "the message is unclear");
    CHECK(file_size(w) < 0, "the refused run wrote %s", w);
    rc = in_child(short_run, NULL, 0);
    CHECK(rc == 0 && file_size(w) > 0, "with room, the same run ended with status %d", rc);
}

int main(void) {
    RUN(test_full_disk_refused_at_start);
    RUN(test_failed_state_write_keeps_the_previous);
    RUN(test_run_stops_when_the_disk_fills);
    return test_summary();
}
