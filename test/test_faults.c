// test_faults.c: what a run does when the machine misbehaves. The same seed gives the same run
// twice; a run folder that cannot be made stops the run before training; a checkpoint that cannot
// be written leaves the previous one intact, says so and stops the run with a failure status; a
// truncated training state is refused on resume with a message naming the intact weights; SIGTERM
// mid-run saves where the run stands and exits with status 143; a CUDA error (the fatal hook of
// gpu/device.h, entered here as YT_FAIL_CUDA does on the CPU) runs the trainer's handler once, which
// saves the EMA weights or, when it cannot, names the checkpoints that are intact.
#include "test/test.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

#include "cfg/config.h"
#include "core/train/train.h"
#include "gpu/device.h"
#include "io/safetensors.h"
#include "io/synth.h"

// Under AddressSanitizer (make test SANITIZE=1) a calloc too large to reserve returns NULL, as glibc's
// does, instead of aborting: test_too_large_for_memory relies on it.
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifdef UNDER_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

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

static int train_on(const char *proj, const char *name, int epochs, const char *device) {
    static Config cfg;
    Err err;
    char d[3 * P], p[3 * P], n[300], e[32], dv[64];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    snprintf(p, sizeof p, "project=%s", proj);
    snprintf(n, sizeof n, "name=%s", name);
    snprintf(e, sizeof e, "epochs=%d", epochs);
    snprintf(dv, sizeof dv, "device=%s", device);
    char *ov[] = { d, p, n, e, "imgsz=64", "batch=4", "workers=2", dv, "exist_ok=1" };
    if (config_load("cfg/t.ini", 9, ov, &cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    return train_run(&cfg);
}

static int train(const char *proj, const char *name, int epochs) { return train_on(proj, name, epochs, "cpu"); }

// The run's stderr goes to a file between these two calls, so its messages can be checked.
static int saved_stderr = -1;
static char messages[P];

static void capture_stderr(void) {
    snprintf(messages, sizeof messages, "%s/messages.txt", project);
    fflush(stderr);
    saved_stderr = dup(2);
    FILE *f = fopen(messages, "w");
    if (f) { dup2(fileno(f), 2); fclose(f); }
}

// Restore stderr; 1 when the captured messages hold every one of the n strings (else print them).
static int captured_has(int n, const char **what) {
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    char text[8192] = "";
    FILE *f = fopen(messages, "r");
    if (f) { text[fread(text, 1, sizeof text - 1, f)] = 0; fclose(f); }
    for (int i = 0; i < n; i++)
        if (!strstr(text, what[i])) { printf("    no \"%s\" in the messages:\n%s\n", what[i], text); return 0; }
    return 1;
}

// A device that fails mid-run (injected into device 1 of two): the run stops with status 1 naming
// the device, and the EMA weights are saved from device 0 and load.
static void test_device_failure_saves_last(void) {
    char last[P];
    snprintf(last, sizeof last, "%s/devfail/weights/last.safetensors", project);
    test_switch(SW_FAIL_DEVICE, "1");
    capture_stderr();
    int rc = train_on(project, "devfail", 1, "cpu:2");
    const char *said[] = { "device 1", "saved the EMA weights", last, "no training state was saved yet", "weights=" };
    int has = captured_has(5, said);
    test_switch(SW_FAIL_DEVICE, NULL);
    CHECK(rc == 1, "a failed device gave status %d, not 1", rc);
    CHECK(has, "the messages do not name the device and the saved weights");
    Model m;
    static Config cfg;
    Err err;
    char *ov[] = { "imgsz=64", "nc=6" };
    if (config_load("cfg/t.ini", 2, ov, &cfg, &err) || model_build(&cfg, 1, 64, &m, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(model_load(&m, last, "", &err) == 0, "the saved weights do not load: %s", err.msg);
    model_free(&m);
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
    capture_stderr();
    CHECK(train(project, "a", 1) == 1, "a failed checkpoint write did not fail the run");
    const char *said[] = { "cannot create", tmp, "last.safetensors was left as it was" };
    CHECK(captured_has(3, said), "the message does not say the previous checkpoint is intact");
    CHECK(same_file(last, copy), "the previous checkpoint was damaged");
    snprintf(cmd, sizeof cmd, "rmdir '%s'", tmp);
    CHECK(system(cmd) == 0, "cleanup");
}

// A training state cut short on disk: resume refuses it, says why, and names the weights that survive.
static void test_truncated_state_names_the_intact_weights(void) {
    char state[P], copy[P], last[P], cmd[3 * P];
    snprintf(state, sizeof state, "%s/a/weights/last_state.safetensors", project);
    snprintf(copy, sizeof copy, "%s.before", state);
    snprintf(last, sizeof last, "%s/a/weights/last.safetensors", project);
    struct stat st;
    if (stat(state, &st)) SKIP("the first test left no state file");
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && truncate -s %lld '%s'", state, copy, (long long)st.st_size * 2 / 3, state);
    if (system(cmd)) SKIP("truncate failed");
    static Config cfg;
    Err err;
    char r[P + 16];
    snprintf(r, sizeof r, "resume=%s/a", project);
    char *ov[] = { r };
    CHECK(config_load(NULL, 1, ov, &cfg, &err) == 0, "%s", err.msg);
    capture_stderr();
    int rc = train_resume(&cfg, 1, ov);
    const char *said[] = { "cannot resume", state, "truncated", "Intact beside it", last, "weights=" };
    CHECK(captured_has(6, said), "the refusal is unclear");
    CHECK(rc == 2, "a truncated state was accepted (status %d)", rc);
    snprintf(cmd, sizeof cmd, "mv '%s' '%s'", copy, state);
    CHECK(system(cmd) == 0, "cleanup");
}

// SIGTERM (as Ctrl-C's SIGINT) once training runs: the step ends, last and last_state are saved, status 143.
static void test_sigterm_saves_and_exits_cleanly(void) {
    char started[P + 64], state[P + 64];
    snprintf(started, sizeof started, "%s/sig/train_batch0.jpg", project);
    snprintf(state, sizeof state, "%s/sig/weights/last_state.safetensors", project);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) SKIP("fork failed");
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(99);
        _exit(train(project, "sig", 1000));
    }
    struct stat st;
    struct timespec tick = { 0, 20000000 };
    for (int i = 0; i < 6000 && stat(started, &st); i++) nanosleep(&tick, NULL);   // up to 2 minutes
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM, "SIGTERM ended the run with %s %d",
          WIFEXITED(status) ? "status" : "signal", WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
    SafeTensors s;
    Err err;
    int rc = st_open(state, &s, &err);
    CHECK(rc == 0, "no readable training state after SIGTERM: %s", err.msg);
    if (rc == 0) {
        CHECK(st_meta(&s, "epoch") && st_meta(&s, "batch"), "the state does not say where the run stopped");
        st_close(&s);
    }
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

// ---- CUDA errors outside the multi-device driver (issue #8) -----------------------------------

static char hook_log[P];

static int count_in(const char *path, const char *what) {
    size_t n;
    char *text = slurp(path, &n);
    int k = 0;
    for (const char *p = text ? text : ""; (p = strstr(p, what)); p++) k++;
    free(text);
    return k;
}

// The test's fatal hook: notes each call; arg set: fails again inside, as a dead GPU would.
static void note_call(const char *what, void *arg) {
    FILE *f = fopen(hook_log, "a");
    if (f) { fprintf(f, "hook ran: %s\n", what); fclose(f); }
    if (arg) device_fatal("inside the hook");
}

static void *fail_too(void *arg) { device_fatal("another thread"); }

// A second thread fails while the first runs the hook: it must wait, not run the hook or exit.
static void note_call_slowly(const char *what, void *arg) {
    pthread_t th;
    pthread_create(&th, NULL, fail_too, NULL);
    struct timespec wait = { 0, 100000000 };
    nanosleep(&wait, NULL);
    note_call(what, NULL);
}

// fn in a child with stdout dropped and stderr in `messages`; the child's exit status, or -1.
static int in_child(void (*fn)(void)) {
    snprintf(messages, sizeof messages, "%s/child-messages.txt", project);
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY), err = open(messages, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (null < 0 || err < 0 || dup2(null, 1) < 0 || dup2(err, 2) < 0) _exit(99);
        fn();
        _exit(0);                                      // fn should not return: device_fatal exits
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void fatal_twice(void) { device_set_fatal_hook(note_call, (void *)1); device_fatal("first"); }
static void fatal_in_two_threads(void) { device_set_fatal_hook(note_call_slowly, NULL); device_fatal("first"); }

static void test_fatal_hook_runs_once(void) {
    snprintf(hook_log, sizeof hook_log, "%s/hook.txt", project);
    remove(hook_log);
    int rc = in_child(fatal_twice);
    CHECK(rc == 1, "an error inside the hook: status %d, want 1", rc);
    CHECK(count_in(hook_log, "hook ran") == 1 && count_in(hook_log, "hook ran: first") == 1,
          "the hook ran %d times, want once (for the first error)", count_in(hook_log, "hook ran"));
    CHECK(count_in(messages, "a second error (inside the hook)") == 1, "the second error is not reported");
    remove(hook_log);
    rc = in_child(fatal_in_two_threads);
    CHECK(rc == 1, "two threads failing: status %d, want 1", rc);
    CHECK(count_in(hook_log, "hook ran") == 1, "with two threads failing the hook ran %d times, want once",
          count_in(hook_log, "hook ran"));
}

static void train_failing_at_step_3(void) {
    test_switch(SW_FAIL_CUDA, "3");                   // epoch 1's first step: epoch 0's checkpoints exist
    train_on(project, "cudafail", 2, "cpu");
}

static void resume_failing_at_once(void) {
    static Config cfg;
    Err err;
    char r[P + 16];
    snprintf(r, sizeof r, "resume=%s/cudafail", project);
    char *ov[] = { r };
    if (config_load(NULL, 1, ov, &cfg, &err)) _exit(98);
    test_switch(SW_FAIL_CUDA, "1");
    train_resume(&cfg, 1, ov);
}

// A CUDA error mid-run: one handler call saves the EMA weights (they load) and names the state to resume.
static void test_cuda_error_saves_last(void) {
    char last[P + 64];
    snprintf(last, sizeof last, "%s/cudafail/weights/last.safetensors", project);
    int rc = in_child(train_failing_at_step_3);
    CHECK(rc == 1, "a CUDA error gave status %d, want 1", rc);
    const char *said[] = { "injected at step 3", "the run stops on a CUDA error", "saved the EMA weights", last,
                           "last_state.safetensors is intact", "resume=" };
    for (int i = 0; i < 6; i++) CHECK(count_in(messages, said[i]) >= 1, "no \"%s\" in %s", said[i], messages);
    CHECK(count_in(messages, "the run stops on a CUDA error") == 1, "the handler ran more than once");
    Model m;
    static Config cfg;
    Err err;
    char *ov[] = { "imgsz=64", "nc=6" };
    if (config_load("cfg/t.ini", 2, ov, &cfg, &err) || model_build(&cfg, 1, 64, &m, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(model_load(&m, last, "", &err) == 0, "the saved weights do not load: %s", err.msg);
    model_free(&m);
}

// The handler's save fails: nothing is damaged and the message names the intact files and their epoch.
static void test_cuda_error_names_the_intact_checkpoints(void) {
    char last[P + 64], copy[P + 80], tmp[P + 80], state[P + 64], cmd[4 * P];
    snprintf(last, sizeof last, "%s/cudafail/weights/last.safetensors", project);
    snprintf(state, sizeof state, "%s/cudafail/weights/last_state.safetensors", project);
    snprintf(copy, sizeof copy, "%s.before", last);
    snprintf(tmp, sizeof tmp, "%s.tmp", last);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s' && mkdir -p '%s'", last, copy, tmp);   // the save cannot happen
    struct stat st;
    if (stat(state, &st) || system(cmd)) SKIP("the previous test left no run to resume");
    int rc = in_child(resume_failing_at_once);
    CHECK(rc == 1, "a CUDA error whose save failed gave status %d, want 1", rc);
    const char *said[] = { "the run stops on a CUDA error", "nothing saved", "cannot create", "intact:", last, state,
                           "the end of epoch 0", "resume=" };
    for (int i = 0; i < 8; i++) CHECK(count_in(messages, said[i]) >= 1, "no \"%s\" in %s", said[i], messages);
    CHECK(same_file(last, copy), "the intact checkpoint was changed");
    snprintf(cmd, sizeof cmd, "rmdir '%s'", tmp);
    CHECK(system(cmd) == 0, "cleanup");
}

int main(void) {
    RUN(test_same_seed_same_run);
    RUN(test_unusable_run_folder);
    RUN(test_failed_checkpoint_keeps_the_previous);
    RUN(test_truncated_state_names_the_intact_weights);
    RUN(test_sigterm_saves_and_exits_cleanly);
    RUN(test_too_large_for_memory);
    RUN(test_device_failure_saves_last);
    RUN(test_fatal_hook_runs_once);
    RUN(test_cuda_error_saves_last);
    RUN(test_cuda_error_names_the_intact_checkpoints);
    return test_summary();
}
