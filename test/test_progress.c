// test_progress.c: progress wherever a run is watched. The bar and the clock as printed; when a line is
// due where stdout is not a terminal (each tenth of a pass, or PROGRESS_PERIOD seconds); ./yolotrain with
// stdout piped prints lines during an epoch, not only at its end; a stopped and resumed run's closing
// line counts both parts, and the resumed part's first line shows a real rate; on a terminal the epoch line
// and the validation bar are redrawn in place.
#include "test/test.h"

#include <stdlib.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

#include "core/base/progress.h"
#include "test/synth_run.h"

static char out[1 << 17];

static void test_bar_and_clock(void) {
    char b[96];
    progress_bar(b, sizeof b, 9, 20);
    CHECK(!strcmp(b, " 45%|████      | 9/20"), "9 of 20: '%s'", b);
    progress_bar(b, sizeof b, 0, 7);
    CHECK(!strcmp(b, "  0%|          | 0/7"), "0 of 7: '%s'", b);
    progress_bar(b, sizeof b, 7, 7);
    CHECK(!strcmp(b, "100%|██████████| 7/7"), "7 of 7: '%s'", b);
    progress_clock(b, sizeof b, 75);
    CHECK(!strcmp(b, "1:15"), "75 s: '%s'", b);
    progress_clock(b, sizeof b, 3 * 3600 + 62);
    CHECK(!strcmp(b, "3:01:02"), "3 h 62 s: '%s'", b);
}

// Where stdout is not a terminal: one line per tenth crossed, or after PROGRESS_PERIOD seconds of silence.
static void test_due_each_tenth_or_period(void) {
    Progress p;
    progress_begin(&p, 0, 100, 0, 0.0, 0);
    int lines = 0;
    for (int i = 1; i <= 100; i++) lines += progress_due(&p, i, 0.1 * i);
    CHECK(lines == 10, "100 quick steps: %d lines, want one a tenth (10)", lines);
    progress_begin(&p, 0, 1000, 0, 0.0, 0);      // slow: 30 s a step, a tenth is 100 steps
    lines = 0;
    for (int i = 1; i <= 10; i++) lines += progress_due(&p, i, 30.0 * i);
    CHECK(lines == 5, "10 steps of 30 s: %d lines, want one a minute (5)", lines);
    progress_begin(&p, 0, 20, 10, 0.0, 0);       // resumed at half: the first five tenths were reported
    CHECK(!progress_due(&p, 11, 1.0) && progress_due(&p, 12, 2.0), "a resumed pass reports from its next tenth");
    progress_begin(&p, 0, 10, 0, 0.0, 5.0);      // quiet for 5 s: a short pass says nothing
    lines = 0;
    for (int i = 1; i <= 10; i++) lines += progress_due(&p, i, 0.4 * i);
    CHECK(lines == 0, "a 4 s pass quiet for 5 s printed %d lines", lines);
    progress_begin(&p, 1, 10, 0, 0.0, 5.0);      // a terminal: every step
    lines = 0;
    for (int i = 1; i <= 10; i++) lines += progress_due(&p, i, 0.4 * i);
    CHECK(lines == 10, "a terminal redrew %d of 10 steps", lines);
}

// Run cmdline with stdout and stderr going to a log file, as under nohup; its status, the log in out.
static int logged(const char *cmdline) {
    char cmd[20000], log[4400];
    snprintf(log, sizeof log, "%s.log", project);
    snprintf(cmd, sizeof cmd, "%s >%s 2>&1", cmdline, log);
    int rc = system(cmd);
    size_t n = 0;
    char *text = slurp(log, &n);
    snprintf(out, sizeof out, "%s", text ? text : "(no log)");
    free(text);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// `./yolotrain` on the synthetic set, logged.
static int yolotrain(const char *env, const char *args) {
    char cmd[20000];
    snprintf(cmd, sizeof cmd, "%s ./yolotrain cfg/t.ini data=%s project=%s imgsz=64 batch=2 workers=1 device=cpu "
             "close_mosaic=0 noplots=1 tensorboard=0 %s", env, data_yaml, project, args);
    return logged(cmd);
}

// `./yolotrain resume=PROJECT/run`, logged.
static int resume(const char *run) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "./yolotrain resume=%s/%s", project, run);
    return logged(cmd);
}

// The epoch lines (those with "img/s") in out from `from` on: their count; the first one's rate in *rate.
static int epoch_lines(const char *from, double *rate) {
    int n = 0;
    for (const char *s = from; (s = strstr(s, "img/s")); s++) {
        const char *a = s;
        while (a > out && a[-1] != ' ') a--;
        if (n++ == 0 && rate) *rate = atof(a);
    }
    return n;
}

static void test_lines_in_a_log(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    if (synth_run_data("progress", 20)) { CHECK(0, "no data"); return; }
    int rc = yolotrain("", "name=piped epochs=1");
    double rate = 0;
    int n = epoch_lines(out, &rate);
    CHECK(rc == 0, "the run failed (%d):\n%s", rc, out);
    CHECK(n == 10, "10 batches logged: %d epoch lines, want one a tenth (10):\n%s", n, out);
    CHECK(!strchr(out, '\r'), "a logged run redrew a line in place:\n%s", out);
    CHECK(strstr(out, "1 epoch completed in "), "no closing line:\n%s", out);
}

// Rewrite RUN's training state in place, its header keeping its length: the recorded time made `hours`
// hours, or (hours < 0) its key renamed, as in a state an older yolotrain saved. 0, or -1.
static int patch_state(const char *run, double hours) {
    char path[4600];
    size_t n = 0;
    snprintf(path, sizeof path, "%s/%s/weights/last_state.safetensors", project, run);
    char *x = slurp(path, &n), *k = x ? memmem(x, n < 4096 ? n : 4096, "\"elapsed_s\":\"", 13) : NULL;
    char *v = k ? k + 13 : NULL, *q = v ? strchr(v, '"') : NULL;
    int w = q ? (int)(q - v) : 0, rc = -1;
    char num[64];
    if (hours < 0 && k) memcpy(k + 1, "elapsed_x", 9), rc = 0;
    else if (q && snprintf(num, sizeof num, "%0*.0f", w, hours * 3600) == w) memcpy(v, num, w), rc = 0;
    FILE *f = rc ? NULL : fopen(path, "wb");
    if (!f || fwrite(x, 1, n, f) != n) rc = -1;
    if (f && fclose(f)) rc = -1;
    free(x);
    return rc;
}

// On a terminal (script(1) gives the run one): the epoch line and the validation bar are redrawn in place,
// and the bar is erased before the validation table.
static void test_bars_on_a_terminal(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    if (system("script -qec true /dev/null >/dev/null 2>&1")) SKIP("no script(1) to give the run a terminal");
    if (synth_run_data("progress_tty", 20)) { CHECK(0, "no data"); return; }
    char cmd[20000];
    snprintf(cmd, sizeof cmd, "script -qec './yolotrain cfg/t.ini data=%s project=%s imgsz=64 batch=2 workers=1 "
             "device=cpu close_mosaic=0 noplots=1 tensorboard=0 name=tty epochs=1' /dev/null", data_yaml, project);
    int rc = logged(cmd);
    const char *val = strstr(out, "\r                 Class     Images  Instances");
    CHECK(rc == 0, "the run on a terminal (%d):\n%s", rc, out);
    CHECK(strstr(out, "\r        0/0 ") && strstr(out, " 5/10 "), "no epoch line redrawn in place:\n%s", out);
    CHECK(val && strstr(val, "img/s ETA") && strstr(val, "\r\033[K                 Class"),
          "no validation bar redrawn and erased before the table:\n%s", out);
}

// Stopped after 15 steps (epoch 1, batch 5) with 2 hours recorded, the resumed run's closing line counts
// them with its own time, and its first epoch line shows the rate of the batches it ran.
static void test_resume_counts_both_parts(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    if (synth_run_data("progress_resume", 20)) { CHECK(0, "no data"); return; }
    int rc = yolotrain("YT_STOP_AFTER_STEPS=15", "name=r epochs=2");
    CHECK(rc == 0 && strstr(out, "1 epoch completed in "), "the stopped run (%d):\n%s", rc, out);
    CHECK(patch_state("r", 2.0) == 0, "cannot set the recorded time of %s/r", project);
    rc = resume("r");
    const char *resumed = strstr(out, "Resuming");
    double rate = 0;
    int n = resumed ? epoch_lines(resumed, &rate) : 0;
    CHECK(rc == 0 && resumed, "the resumed run (%d):\n%s", rc, out);
    CHECK(strstr(out, "2 epochs completed in 2.00"), "the closing line does not count the 2 hours before:\n%s", out);
    CHECK(n == 5 && rate > 0, "resumed at batch 5 of 10: %d epoch lines, the first at %g img/s:\n%s", n, rate, out);
    CHECK(!strstr(out, " 0.0img/s"), "a line of the resumed run shows no rate:\n%s", out);
}

// A state saved without its time (an older yolotrain) still resumes; the closing line says from which
// epoch it counts: stopped after `steps` steps, in epoch `epoch`.
static void older_state(const char *run, const char *steps, int epoch) {
    char env[64], name[64], want[64];
    snprintf(env, sizeof env, "YT_STOP_AFTER_STEPS=%s", steps);
    snprintf(name, sizeof name, "name=%s epochs=2", run);
    snprintf(want, sizeof want, "hours counted from epoch %d on", epoch);
    int rc = yolotrain(env, name);
    CHECK(rc == 0, "the stopped run (%d):\n%s", rc, out);
    CHECK(patch_state(run, -1) == 0, "cannot take the time out of %s/%s", project, run);
    rc = resume(run);
    CHECK(rc == 0 && strstr(out, "holds no training time") && strstr(out, "2 epochs completed; 0.00") &&
          strstr(out, want), "resuming a state without its time, stopped in epoch %d (%d):\n%s", epoch, rc, out);
}

static void test_resume_of_an_older_state(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    if (synth_run_data("progress_old", 20)) { CHECK(0, "no data"); return; }
    older_state("old0", "5", 0);
    older_state("old1", "15", 1);
}

// Stopped during a validation, the resumed run has no batch of that epoch to run: it says so instead of
// an epoch line of nothing (0.0img/s), then validates.
static void test_resume_in_validation(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    if (synth_run_data("progress_val", 20)) { CHECK(0, "no data"); return; }
    int rc = yolotrain("YT_SIGNAL_AT=val", "name=v epochs=2");
    CHECK(rc == 143, "the run signalled in its validation (%d):\n%s", rc, out);
    rc = resume("v");
    const char *resumed = strstr(out, "Resuming");
    CHECK(rc == 0 && resumed && strstr(resumed, "epoch 0: its 10 batches ran before the stop"),
          "the resumed run (%d):\n%s", rc, out);
    CHECK(!strstr(out, " 0.0img/s"), "a line of the resumed run shows no rate:\n%s", out);
    CHECK(strstr(out, "2 epochs completed in "), "no closing line:\n%s", out);
}

int main(void) {
    RUN(test_bar_and_clock);
    RUN(test_due_each_tenth_or_period);
    RUN(test_lines_in_a_log);
    RUN(test_bars_on_a_terminal);
    RUN(test_resume_counts_both_parts);
    RUN(test_resume_of_an_older_state);
    RUN(test_resume_in_validation);
    return test_summary();
}
