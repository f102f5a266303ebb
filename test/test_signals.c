// test_signals.c: SIGTERM at any point of a run (YT_SIGNAL_AT raises it where a user's kill could land):
// during start-up (the dataset loading) the run ends at once with status 143 and nothing half-written;
// during validation or while checkpoints are written it stops with the "stopped ... resume with" line
// and status 143 (so `yolotrain ... && next` does not go on), and resuming gives the same results.csv,
// weights and state, to the bit, as a run that was never stopped. SIGHUP (a closed terminal) does what
// SIGTERM does, with status 129, unless it was ignored (nohup); a stdout whose reader went away (`| head`)
// never ends a run. Each run is a forked child, so the signal stays there.
#include "test/test.h"

#include <signal.h>
#include <sys/wait.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

#include "cfg/config.h"
#include "core/train/train.h"
#include "io/synth.h"

enum { P = 2048 };
static char dir[P], data_yaml[P], project[P];

static int make_data(void) {
    snprintf(dir, sizeof dir, "%s", test_tmpdir("signals"));
    char sd[P + 8];
    snprintf(sd, sizeof sd, "%s/synth", dir);
    snprintf(data_yaml, sizeof data_yaml, "%s/data.yaml", sd);
    snprintf(project, sizeof project, "%s/runs", dir);
    SynthConfig sc = synth_defaults();
    sc.n_train = 6; sc.n_val = 4; sc.min_side = 64; sc.max_side = 80; sc.threads = 1;
    Err err;
    if (synth_generate(sd, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    return 0;
}

// gelan-t, 2 epochs of 2 batches (the second one partial) into project/name, in a child with
// YT_SIGNAL_AT=at (NULL: none) or resuming; its stdout and stderr go to project/name.log. Returns
// the child's exit status, or 128 + the signal that ended it. With dead_stdout its stdout is instead a
// pipe whose reader is gone, as after `yolotrain ... | head` once head has exited; with ignore_hup it
// starts with SIGHUP ignored, as under nohup.
enum { DEAD_STDOUT = 1, IGNORE_HUP = 2 };
static int run_with(const char *name, const char *at, int resume, int how) {
    char log[2 * P];
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = fopen(log, resume ? "a" : "w");
        if (!f) _exit(99);
        dup2(fileno(f), 1); dup2(fileno(f), 2);
        int fds[2];
        if ((how & DEAD_STDOUT) && (pipe(fds) || dup2(fds[1], 1) < 0 || close(fds[0]) || close(fds[1]))) _exit(97);
        if (how & IGNORE_HUP) signal(SIGHUP, SIG_IGN);
        if (at) test_switch(SW_SIGNAL_AT, at);
        static Config cfg;
        Err err;
        char d[P + 8], p[P + 16], n[300], r[2 * P];
        snprintf(d, sizeof d, "data=%s", data_yaml);
        snprintf(p, sizeof p, "project=%s", project);
        snprintf(n, sizeof n, "name=%s", name);
        snprintf(r, sizeof r, "resume=%s/%s", project, name);
        char *ov[] = { d, p, n, "imgsz=64", "batch=4", "epochs=2", "workers=1", "device=cpu", "close_mosaic=1" };
        char *rv[] = { r };
        int rc = resume ? (config_load(NULL, 1, rv, &cfg, &err) ? 98 : train_resume(&cfg, 1, rv))
                        : (config_load("cfg/t.ini", 9, ov, &cfg, &err) ? 98 : train_run(&cfg));
        fflush(stdout); fflush(stderr);
        _exit(rc);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int run(const char *name, const char *at, int resume) { return run_with(name, at, resume, 0); }

static int log_has(const char *name, const char *what) {
    char log[2 * P];
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    size_t n;
    char *text = slurp(log, &n);
    int has = text && strstr(text, what);
    if (!has) printf("    no \"%s\" in %s:\n%s\n", what, log, text ? text : "(none)");
    free(text);
    return has;
}

// Every result file of run `name` is the one of the uninterrupted run, byte for byte (the state but for its wall time).
static void same_as_whole(const char *name) {
    const char *files[] = { "results.csv", "weights/last.safetensors", "weights/best.safetensors",
                            "weights/last_state.safetensors" };
    for (int i = 0; i < 4; i++) {
        char a[2 * P], b[2 * P];
        snprintf(a, sizeof a, "%s/whole/%s", project, files[i]);
        snprintf(b, sizeof b, "%s/%s/%s", project, name, files[i]);
        CHECK(i == 3 ? same_state(a, b) : same_file(a, b), "%s: %s differs from the uninterrupted run's", name,
              files[i]);
    }
}

static int ready(void) {
    static int state;                     // 0 not yet, 1 ready, -1 failed
    if (!state) state = !make_data() && run("whole", NULL, 0) == 0 ? 1 : -1;
    return state > 0;
}

static void test_signal_during_validation(void) {
    if (!ready()) { CHECK(0, "no data or the uninterrupted run failed"); return; }
    int rc = run("val", "val", 0);
    CHECK(rc == 128 + SIGTERM, "a run stopped during validation must exit 143 after saving, not %d", rc);
    CHECK(log_has("val", "stopped (signal) during the validation of epoch 0, batch 2: saved"), "no stopped line");
    CHECK(log_has("val", "resume="), "no resume hint");
    CHECK(run("val", NULL, 1) == 0, "the resumed run failed");
    same_as_whole("val");
}

static void test_signal_while_checkpointing(void) {
    if (!ready()) { CHECK(0, "no data or the uninterrupted run failed"); return; }
    int rc = run("ckpt", "checkpoint", 0);
    CHECK(rc == 128 + SIGTERM, "a run stopped while checkpointing must exit 143 after saving, not %d", rc);
    CHECK(log_has("ckpt", "stopped (signal) at the start of epoch 1, batch 0: saved"), "no stopped line");
    CHECK(run("ckpt", NULL, 1) == 0, "the resumed run failed");
    same_as_whole("ckpt");
}

static void test_signal_during_startup(void) {
    if (!ready()) { CHECK(0, "no data or the uninterrupted run failed"); return; }
    CHECK(run("early", "startup", 0) == 128 + SIGTERM, "a run stopped before training must end with 143");
    CHECK(log_has("early", "stopped by a signal before training started; nothing to save"), "no message");
    char p[2 * P];
    struct stat st;
    snprintf(p, sizeof p, "%s/early", project);
    CHECK(stat(p, &st) != 0, "a run folder was made before training could start");
}

// SIGHUP (the terminal closed, an ssh session dropped) saves and says how to resume, as SIGTERM does;
// the lock file names no pid once the run has ended.
static void test_hangup_saves(void) {
    if (!ready()) { CHECK(0, "no data or the uninterrupted run failed"); return; }
    int rc = run("hup", "val:HUP", 0);
    CHECK(rc == 128 + SIGHUP, "a run stopped by SIGHUP must save and exit 129, not %d", rc);
    CHECK(log_has("hup", "stopped (signal) during the validation of epoch 0, batch 2: saved"), "no stopped line");
    char lock[2 * P];
    struct stat st;
    snprintf(lock, sizeof lock, "%s/hup/.lock", project);
    CHECK(stat(lock, &st) == 0 && st.st_size == 0, "the lock file still names a pid after the run ended");
    CHECK(run("hup", NULL, 1) == 0, "the resumed run failed");
    same_as_whole("hup");
}

// Under nohup SIGHUP is ignored when the run starts: it stays ignored and the run finishes.
static void test_nohup_keeps_hangup_ignored(void) {
    if (!ready()) { CHECK(0, "no data or the uninterrupted run failed"); return; }
    int rc = run_with("nohup", "val:HUP", 0, IGNORE_HUP);
    CHECK(rc == 0, "a run under nohup ended with %d on SIGHUP", rc);
    same_as_whole("nohup");
}

// stdout a pipe whose reader has gone (`| head` after head exits): the run goes on and writes its files.
static void test_dead_stdout_does_not_stop_the_run(void) {
    if (!ready()) { CHECK(0, "no data or the uninterrupted run failed"); return; }
    int rc = run_with("pipe", NULL, 0, DEAD_STDOUT);
    CHECK(rc == 0, "a run whose stdout reader went away ended with %d (141: killed by SIGPIPE)", rc);
    same_as_whole("pipe");
}

int main(void) {
    RUN(test_signal_during_validation);
    RUN(test_signal_while_checkpointing);
    RUN(test_signal_during_startup);
    RUN(test_hangup_saves);
    RUN(test_nohup_keeps_hangup_ignored);
    RUN(test_dead_stdout_does_not_stop_the_run);
    return test_summary();
}
