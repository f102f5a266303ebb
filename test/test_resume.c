// test_resume.c: a run stopped in the middle of an epoch and resumed gives the same results, to
// the bit, as the run that was not stopped, also from another working directory after its initial
// weights= and hyp= files moved (the run folder alone is enough); a broken state file is refused with
// a message.
#include "test/test.h"

#include <sys/wait.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

#include "cfg/config.h"
#include "core/train/train.h"
#include "io/synth.h"
#include "test/synth_run.h"

static int make_data(void) { return synth_run_data("resume", 12); }

// Train gelan-t for 3 epochs of 3 batches into project/name; returns train_run's status.
static int train(const char *name) {
    static Config cfg;
    Err err;
    char d[4400], p[4400], n[300];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    snprintf(p, sizeof p, "project=%s", project);
    snprintf(n, sizeof n, "name=%s", name);
    char *ov[] = { d, p, n, "imgsz=64", "batch=4", "epochs=3", "workers=1", "device=cpu", "close_mosaic=1",
                   "exist_ok=1" };
    if (config_load("cfg/t.ini", 10, ov, &cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    return train_run(&cfg);
}

static void test_stop_and_resume_is_exact(void) {
    if (make_data()) { CHECK(0, "no data"); return; }
    CHECK(train("whole") == 0, "the uninterrupted run failed");
    test_switch(SW_STOP_AFTER_STEPS, "4");             // epoch 1, after its first batch
    CHECK(train("stopped") == 0, "the stopped run failed");
    test_switch(SW_STOP_AFTER_STEPS, NULL);
    char a[4500], b[4500];
    snprintf(b, sizeof b, "%s/stopped/results.csv", project);
    size_t n;
    char *partial = slurp(b, &n);
    int rows = 0;
    for (size_t i = 0; partial && i < n; i++) rows += partial[i] == '\n';
    free(partial);
    CHECK(rows == 2, "the stopped run wrote %d lines of results.csv, want the header and epoch 0", rows);
    struct stat st;                                    // results.png is drawn when a run ends, a stopped one too
    snprintf(a, sizeof a, "%s/stopped/results.png", project);
    CHECK(stat(a, &st) == 0 && st.st_size > 0, "the stopped run drew no %s", a);
    static Config cfg;
    Err err;
    char r[4500];
    snprintf(r, sizeof r, "resume=%s/stopped", project);
    char *ov[] = { r };
    CHECK(config_load(NULL, 1, ov, &cfg, &err) == 0, "%s", err.msg);
    CHECK(train_resume(&cfg, 1, ov) == 0, "resume failed");
    snprintf(a, sizeof a, "%s/whole/results.csv", project);
    CHECK(same_file(a, b), "results.csv differs between the whole run and the resumed one");
    snprintf(a, sizeof a, "%s/whole/weights/last.safetensors", project);
    snprintf(b, sizeof b, "%s/stopped/weights/last.safetensors", project);
    CHECK(same_file(a, b), "the final EMA weights differ");
    snprintf(a, sizeof a, "%s/whole/weights/last_state.safetensors", project);
    snprintf(b, sizeof b, "%s/stopped/weights/last_state.safetensors", project);
    CHECK(same_state(a, b), "the final training states differ");
}

static void test_truncated_state_is_refused(void) {
    char state[4500], cmd[9200];
    snprintf(state, sizeof state, "%s/stopped/weights/last_state.safetensors", project);
    struct stat st;
    if (stat(state, &st)) SKIP("the resume test left no state file");
    snprintf(cmd, sizeof cmd, "truncate -s %lld '%s'", (long long)st.st_size / 2, state);
    if (system(cmd)) SKIP("truncate failed");
    static Config cfg;
    Err err;
    char r[4500];
    snprintf(r, sizeof r, "resume=%s/stopped", project);
    char *ov[] = { r };
    CHECK(config_load(NULL, 1, ov, &cfg, &err) == 0, "%s", err.msg);
    int rc = train_resume(&cfg, 1, ov);
    CHECK(rc == 2, "a truncated state was accepted (status %d)", rc);
}

// Run fn with stdout into a file; its text (malloc'd) or NULL.
static char *capture(int (*fn)(void), int *rc) {
    char path[4400];
    snprintf(path, sizeof path, "%s/stdout.txt", project);
    fflush(stdout);
    int saved = dup(1);
    FILE *f = fopen(path, "w");
    if (!f || saved < 0) { if (f) fclose(f); return NULL; }
    dup2(fileno(f), 1);
    *rc = fn();
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(f);
    size_t n;
    return slurp(path, &n);
}

static int resume_whole(void) {
    static Config cfg;
    Err err;
    char r[4500];
    snprintf(r, sizeof r, "resume=%s/whole", project);
    char *ov[] = { r };
    if (config_load(NULL, 1, ov, &cfg, &err)) return -1;
    return train_resume(&cfg, 1, ov);
}

static int train_one_step(void) {
    test_switch(SW_STOP_AFTER_STEPS, "1");            // stopped in epoch 0: no validation, no results yet
    int rc = train("one_step");
    test_switch(SW_STOP_AFTER_STEPS, NULL);
    return rc;
}

// Resuming a finished run says so and exits 0 without touching it; the last line of a run names
// only the files it wrote.
static void test_honest_endings(void) {
    char csv[4500];
    snprintf(csv, sizeof csv, "%s/whole/results.csv", project);
    struct stat before, after;
    if (stat(csv, &before)) SKIP("the resume test left no finished run");
    int rc = -1;
    char *out = capture(resume_whole, &rc);
    CHECK(rc == 0, "resuming a finished run: status %d", rc);
    CHECK(out && strstr(out, "finished all 3 epochs; nothing to resume"), "%s", out ? out : "(no output)");
    CHECK(!stat(csv, &after) && after.st_mtim.tv_sec == before.st_mtim.tv_sec
          && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec && after.st_size == before.st_size,
          "the finished run's results.csv was touched");
    free(out);
    out = capture(train_one_step, &rc);
    const char *line = out ? strstr(out, "Results saved to") : NULL;
    CHECK(rc == 0 && line, "a stopped run: status %d\n%s", rc, out ? out : "");
    if (line) {
        const char *eol = strchr(line, '\n');
        int len = eol ? (int)(eol - line) : (int)strlen(line);
        char l[4600];
        snprintf(l, sizeof l, "%.*s", len, line);
        CHECK(strstr(l, "weights/last.safetensors") && !strstr(l, "best.safetensors") && !strstr(l, "results.csv"),
              "names files that were not written: %s", l);
    }
    free(out);
}

static char repo[4096];                                // the checkout: cfg/t.ini

// In a child working in folder `cwd` with stdout and stderr into cwd/NAME.log: train gelan-t as
// train() does, but with data=, weights= and hyp= relative to cwd (stopped after `stop` steps when
// > 0), or resume run folder `resume`. The child's status.
static int in_folder_with(const char *cwd, const char *name, int stop, const char *resume, const char *config,
                          const char *data) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char log[4400], cfg_path[4200], n[300], r[4500];
        snprintf(log, sizeof log, "%s/%s.log", cwd, name);
        FILE *f = fopen(log, "a");
        if (!f || chdir(cwd)) _exit(99);
        dup2(fileno(f), 1); dup2(fileno(f), 2);
        if (stop > 0) { char v[16]; snprintf(v, sizeof v, "%d", stop); test_switch(SW_STOP_AFTER_STEPS, v); }
        static Config cfg;
        Err err;
        if (config[0] == '/') snprintf(cfg_path, sizeof cfg_path, "%s", config);
        else snprintf(cfg_path, sizeof cfg_path, "%s/%s", repo, config);
        snprintf(n, sizeof n, "name=%s", name);
        snprintf(r, sizeof r, "resume=%s", resume ? resume : "");
        char *ov[] = { (char *)data, "weights=init.safetensors", "hyp=hyp.yaml", "project=runs", n,
                       "imgsz=64", "batch=4", "epochs=3", "workers=1", "device=cpu", "close_mosaic=1" };
        char *rv[] = { r };
        int rc = resume ? (config_load(NULL, 1, rv, &cfg, &err) ? 98 : train_resume(&cfg, 1, rv))
                        : (config_load(cfg_path, 11, ov, &cfg, &err) ? 98 : train_run(&cfg));
        if (rc == 98) printf("%s\n", err.msg);
        fflush(stdout); fflush(stderr);
        _exit(rc);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int in_folder(const char *cwd, const char *name, int stop, const char *resume) {
    return in_folder_with(cwd, name, stop, resume, "cfg/t.ini", "data=../synth/data.yaml");
}

// A run started in work/ with relative data=, weights= and hyp= resumes from elsewhere/ after its
// initial weights and hyp file are gone, and ends as the run that was not stopped.
static void test_resume_from_its_folder_alone(void) {
    char work[4400], elsewhere[4400], init[4500], hyp[4500], cmd[9300], run[4500], a[4600], b[4600];
    snprintf(work, sizeof work, "%s/../work", project);
    snprintf(elsewhere, sizeof elsewhere, "%s/../elsewhere", project);
    snprintf(init, sizeof init, "%s/init.safetensors", work);
    snprintf(hyp, sizeof hyp, "%s/hyp.yaml", work);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' '%s' && cp '%s/whole/weights/last.safetensors' '%s' && "
             "printf 'lr0: 0.02\\nfliplr: 0.0\\n' > '%s'", work, elsewhere, project, init, hyp);
    if (system(cmd)) SKIP("no finished run to take initial weights from");
    CHECK(in_folder(work, "ref", 0, NULL) == 0, "the uninterrupted run failed; see %s/ref.log", work);
    CHECK(in_folder(work, "moved", 4, NULL) == 0, "the stopped run failed; see %s/moved.log", work);
    snprintf(cmd, sizeof cmd, "rm '%s' '%s'", init, hyp);
    CHECK(system(cmd) == 0, "cannot remove the initial files");
    snprintf(run, sizeof run, "%s/runs/moved", work);
    int rc = in_folder(elsewhere, "resume", 0, run);
    CHECK(rc == 0, "resuming from another folder without the initial files: status %d; see %s/resume.log", rc,
          elsewhere);
    const char *files[] = { "results.csv", "weights/last.safetensors", "weights/last_state.safetensors" };
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/runs/ref/%s", work, files[i]);
        snprintf(b, sizeof b, "%s/runs/moved/%s", work, files[i]);
        CHECK(i == 2 ? same_state(a, b) : same_file(a, b), "%s differs from the uninterrupted run's", files[i]);
    }
}

// The same for a dataset described by the config's own [data] section, whose relative path resolves
// from the config's folder: args.ini, in the run folder, holds the dataset's root as an absolute path.
static void test_resume_data_section_from_elsewhere(void) {
    char work[4400], elsewhere[4400], ini[4500], cmd[9300], run[4500];
    snprintf(work, sizeof work, "%s/../work", project);
    snprintf(elsewhere, sizeof elsewhere, "%s/../elsewhere", project);
    snprintf(ini, sizeof ini, "%s/cfgs/d.ini", work);    // ../../synth: from cfgs/ only, not from elsewhere/
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/cfgs' '%s' && cp '%s/whole/weights/last.safetensors' '%s/init.safetensors' && "
             "printf 'lr0: 0.02\\n' > '%s/hyp.yaml' && cp '%s/cfg/t.ini' '%s' && printf '\\n[data]\\npath = ../../synth\\n"
             "train = images/train\\nval = images/val\\nnc = 6\\n' >> '%s'", work, elsewhere, project, work, work, repo,
             ini, ini);
    if (system(cmd)) SKIP("no finished run to take initial weights from");
    CHECK(in_folder_with(work, "dsec", 4, NULL, ini, "data=") == 0, "the stopped run failed; see %s/dsec.log", work);
    snprintf(run, sizeof run, "%s/runs/dsec", work);
    int rc = in_folder_with(elsewhere, "dsec-resume", 0, run, ini, "data=");
    CHECK(rc == 0, "resuming a [data] run from another folder: status %d; see %s/dsec-resume.log", rc, elsewhere);
}

static int extend_whole(void) {
    static Config cfg;
    Err err;
    char r[4500];
    snprintf(r, sizeof r, "resume=%s/whole", project);
    char *ov[] = { r, "epochs=4" };
    if (config_load(NULL, 2, ov, &cfg, &err)) return -1;
    return train_resume(&cfg, 2, ov);
}

// resume=RUN epochs=N of a finished run trains on, and says that the schedule is now another one.
static void test_extending_a_finished_run_says_the_schedule_changes(void) {
    char csv[4500];
    struct stat st;
    snprintf(csv, sizeof csv, "%s/whole/results.csv", project);
    if (stat(csv, &st)) SKIP("the resume test left no finished run");
    int rc = -1;
    char *out = capture(extend_whole, &rc);
    CHECK(rc == 0, "extending a finished run: status %d", rc);
    CHECK(out && strstr(out, "finished its 3 epochs; epochs=4") && strstr(out, "schedule of a 4-epoch run"),
          "no word of the changed schedule:\n%s", out ? out : "(no output)");
    free(out);
}

// The folders above dir that this process owns get o+x, so another user reaches dir: test/run.sh gives
// each test binary a TMPDIR of mode 0700.
static void traversable_above(const char *dir) {
    char p[4500];
    snprintf(p, sizeof p, "%s", dir);
    for (char *slash = strrchr(p, '/'); slash && slash != p; slash = strrchr(p, '/')) {
        *slash = 0;
        struct stat st;
        if (!stat(p, &st) && st.st_uid == getuid() && !(st.st_mode & S_IXOTH)) chmod(p, st.st_mode | S_IXOTH);
    }
}

// In a child that cannot write the run folder (an unprivileged user when the tests run as root, else
// the folder made read-only): resuming it says to copy it, before loading the data. The child's status.
static int resume_unwritable(const char *run, const char *log) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = fopen(log, "w");
        if (!f) _exit(99);
        dup2(fileno(f), 1); dup2(fileno(f), 2);
        if (getuid() == 0 && (setgid(65534) || setuid(65534))) _exit(97);
        if (access(run, W_OK) == 0) _exit(96);          // still writable: cannot test here
        if (access(run, R_OK | X_OK)) _exit(95);        // not even readable (a folder above it): likewise
        static Config cfg;
        Err err;
        char r[4500];
        snprintf(r, sizeof r, "resume=%s", run);
        char *ov[] = { r };
        int rc = config_load(NULL, 1, ov, &cfg, &err) ? 98 : train_resume(&cfg, 1, ov);
        fflush(stdout); fflush(stderr);
        _exit(rc);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_read_only_run_says_copy_it(void) {
    char run[4500], cmd[9300], log[4600];
    snprintf(run, sizeof run, "%s/ro", project);
    snprintf(log, sizeof log, "%s/ro.log", project);
    test_switch(SW_STOP_AFTER_STEPS, "1");
    int rc = train("ro");
    test_switch(SW_STOP_AFTER_STEPS, NULL);
    if (rc) { CHECK(0, "the run to resume failed"); return; }
    snprintf(cmd, sizeof cmd, "chmod -R a+rX '%s/..' && chmod -R a-w '%s'", project, run);
    if (system(cmd)) SKIP("chmod failed");
    traversable_above(project);
    rc = resume_unwritable(run, log);
    snprintf(cmd, sizeof cmd, "chmod -R u+w '%s'", run);
    if (system(cmd)) printf("    could not make %s writable again\n", run);
    if (rc >= 95 && rc <= 97) SKIP("cannot make a folder this process cannot write but can read");
    size_t n;
    char *out = slurp(log, &n);
    CHECK(rc == 2, "resuming a read-only run: status %d", rc);
    CHECK(out && strstr(out, "not writable") && strstr(out, "copy the run folder"), "no advice to copy it:\n%s",
          out ? out : "(none)");
    CHECK(out && !strstr(out, "train: images"), "the data was loaded before the refusal:\n%s", out ? out : "");
    free(out);
}

int main(void) {
    if (!getcwd(repo, sizeof repo)) return 1;
    RUN(test_stop_and_resume_is_exact);
    RUN(test_honest_endings);
    RUN(test_resume_from_its_folder_alone);
    RUN(test_resume_data_section_from_elsewhere);
    RUN(test_extending_a_finished_run_says_the_schedule_changes);
    RUN(test_read_only_run_says_copy_it);
    RUN(test_truncated_state_is_refused);
    return test_summary();
}
