// test_hostile.c: a FIFO or /dev/zero where a file belongs, in every role yolotrain reads a file in
// (config, hyp, data.yaml, image list, image, label, weights, a resume folder's files), is refused at
// once with a message naming the path; NUL bytes and overlong lines in text inputs are refused with
// file:line. Each case runs in a forked child under alarm(): a hang fails the test instead of CI.
// Outputs: export's out= naming its input is refused; empty or escaping project/name are refused; a
// second run in a held run folder is refused with the holder's pid, and a dead holder's lock is stale.
#include "test/test.h"

#include <errno.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "cfg/config.h"
#include "core/eval/detect.h"
#include "core/eval/export.h"
#include "core/base/runlock.h"
#include "core/spec/transfer.h"
#include "core/base/readfile.h"
#include "core/train/train.h"
#include "io/check.h"
#include "io/dataset.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "io/synth.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

enum { P = 2048 };
static char root[P];

static const char *at(const char *rel) {
    static char buf[4][P];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], P, "%s/%s", root, rel);
    return buf[k];
}

static void put(const char *rel, const char *text, size_t n) {
    char cmd[3 * P];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", at(rel));
    if (system(cmd)) exit(1);
    unlink(at(rel));                         // not through a symlink to /dev/zero left by special()
    FILE *f = fopen(at(rel), "wb");
    if (!f || fwrite(text, 1, n, f) != n) { printf("cannot write %s\n", at(rel)); exit(1); }
    fclose(f);
}
#define PUTS(rel, text) put(rel, text, strlen(text))
#define PUTB(rel, lit) put(rel, lit, sizeof lit - 1)     // a literal with NUL bytes inside

// The special file `kind` ("fifo" or "zero") at rel, replacing what is there.
static void special(const char *rel, const char *kind) {
    unlink(at(rel));
    int rc = !strcmp(kind, "fifo") ? mkfifo(at(rel), 0644) : symlink("/dev/zero", at(rel));
    if (rc) { printf("cannot make %s: %s\n", at(rel), strerror(errno)); exit(1); }
}

// A valid w x h PNG (gray), written with the library's own encoder.
static void put_png_wh(const char *rel, int w, int h) {
    uint8_t *px = calloc((size_t)w * h * 3, 1);
    for (int i = 0; i < w * h * 3; i++) px[i] = (uint8_t)(i * 7);
    Image im = {w, h, px};
    Err err;
    char cmd[3 * P];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", at(rel));
    if (system(cmd) || image_save_png(at(rel), &im, &err)) { printf("cannot write %s\n", at(rel)); exit(1); }
    free(px);
}
static void put_png(const char *rel) { put_png_wh(rel, 10, 10); }

// Run fn in a child with a 10 s alarm; returns its exit status, or -SIG when it was killed (a hang).
typedef int (*Case)(const char *arg, char *msg, size_t n);
static int in_child(Case fn, const char *arg, char *msg, size_t n) {
    int pipefd[2];
    if (pipe(pipefd)) return -100;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(pipefd[0]);
        alarm(10);
        char m[2048] = "";
        int rc = fn(arg, m, sizeof m);
        if (write(pipefd[1], m, strlen(m)) < 0) rc = 99;
        _exit(rc);
    }
    close(pipefd[1]);
    ssize_t got = read(pipefd[0], msg, n - 1);   // until the child exits (or is killed)
    msg[got > 0 ? got : 0] = 0;
    close(pipefd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

static int do_config(const char *path, char *msg, size_t n) {
    static Config cfg;
    Err err = {{0}};
    int rc = config_load(path, 0, NULL, &cfg, &err);
    snprintf(msg, n, "%s", err.msg);
    return rc ? 2 : 0;
}

static int do_hyp(const char *path, char *msg, size_t n) {
    static Config cfg;
    Err err = {{0}};
    char arg[P + 8];
    snprintf(arg, sizeof arg, "hyp=%s", path);
    char *ov[] = { arg };
    int rc = config_load(NULL, 1, ov, &cfg, &err);
    snprintf(msg, n, "%s", err.msg);
    return rc ? 2 : 0;
}

// dataset_open of the train split; the report (every problem line) goes to msg with the error.
static int do_dataset(const char *yaml, char *msg, size_t n) {
    char *text = NULL;
    size_t len = 0;
    FILE *rep = open_memstream(&text, &len);
    DatasetOptions opt = { .report = rep, .quiet = 1 };
    Dataset ds;
    Err err = {{0}};
    int rc = dataset_open(yaml, NULL, "train", &opt, &ds, &err);
    fclose(rep);
    snprintf(msg, n, "%s%s", text ? text : "", rc ? err.msg : "");
    free(text);
    if (!rc) { int kept = ds.n; dataset_free(&ds); return kept == 1 ? 3 : 4; }   // 3: only the good image kept
    return 2;
}

static int do_weights(const char *path, char *msg, size_t n) {
    SafeTensors st;
    Err err = {{0}};
    int rc = st_open(path, &st, &err);
    snprintf(msg, n, "%s", err.msg);
    if (!rc) st_close(&st);
    return rc ? 2 : 0;
}

// fn(arg) with stderr (and, with also_stdout, stdout) going to a scratch file, whose text becomes
// msg (n bytes at most); the streams are put back after. Returns fn's status (98: no scratch file).
static int captured(int (*fn)(void *), void *arg, int also_stdout, char *msg, size_t n) {
    char tmp[P];
    snprintf(tmp, sizeof tmp, "%s/captured-%d.txt", root, (int)getpid());   // forked children too
    FILE *f = fopen(tmp, "w+");
    if (!f) { snprintf(msg, n, "cannot write %s", tmp); return 98; }
    fflush(stdout); fflush(stderr);
    int so = dup(1), se = dup(2);
    if (also_stdout) dup2(fileno(f), 1);
    dup2(fileno(f), 2);
    int rc = fn(arg);
    fflush(stdout); fflush(stderr);
    dup2(so, 1); dup2(se, 2); close(so); close(se);
    rewind(f);
    msg[fread(msg, 1, n - 1, f)] = 0;
    fclose(f);
    return rc;
}

// What captured() runs: a training run, a resume (with its arguments), an export, a detect.
typedef struct { Config *cfg; int argc; char **argv; DetectOptions *det; } Call;
static int call_train(void *a) { return train_run(((Call *)a)->cfg); }
static int call_resume(void *a) { Call *c = a; return train_resume(c->cfg, c->argc, c->argv); }
static int call_export(void *a) { Call *c = a; return export_run(c->argc, c->argv, c->cfg); }
static int call_detect(void *a) { Call *c = a; return detect_run(c->cfg, c->det); }

// train_resume prints its refusal on stderr: it goes to a file, which becomes msg.
static int do_resume(const char *dir, char *msg, size_t n) {
    static Config cfg;
    config_defaults(&cfg);
    snprintf(cfg.resume, sizeof cfg.resume, "%s", dir);
    Call c = { &cfg, 0, NULL, NULL };
    return captured(call_resume, &c, 0, msg, n);
}

// One role: fn on `path` after `rel` became a FIFO and then /dev/zero; want the status and every
// string of `says` in the message.
static void expect_refused(const char *role, Case fn, const char *path_in, const char *rel, int want,
                           const char *says) {
    char path[P], where[P];                  // at()'s buffers are reused
    snprintf(path, sizeof path, "%s", path_in);
    snprintf(where, sizeof where, "%s", at(rel));
    const char *kinds[] = { "fifo", "zero" };
    const char *named[] = { "FIFO", "character device" };
    for (int k = 0; k < 2; k++) {
        special(rel, kinds[k]);
        char msg[4096];
        int rc = in_child(fn, path, msg, sizeof msg);
        CHECK(rc == want, "%s as %s: status %d (want %d; negative: killed by that signal, a hang)\n%s", role,
              kinds[k], rc, want, msg);
        CHECK(strstr(msg, where) && strstr(msg, named[k]) && strstr(msg, says),
              "%s as %s: the message does not name the path, '%s' and '%s':\n%s", role, kinds[k], named[k],
              says, msg);
    }
}

static void make_tree(void) {
    snprintf(root, sizeof root, "%s", test_tmpdir("hostile"));
    put_png("images/train/a.png");
    PUTS("labels/train/a.txt", "0 0.5 0.5 0.2 0.2\n");
    put_png("images/train/b.png");
    PUTS("data.yaml", "train: images/train\nval: images/train\nnames: [x]\n");
    PUTS("list.yaml", "train: list.txt\nval: list.txt\nnames: [x]\n");
    PUTS("fifo.yaml", "train: images/train\nval: images/train\nnames: [x]\n");
}

static void test_special_files_in_every_role(void) {
    make_tree();
    expect_refused("config", do_config, at("c.ini"), "c.ini", 2, "config");
    expect_refused("hyp", do_hyp, at("hyp.yaml"), "hyp.yaml", 2, "hyp file");
    expect_refused("data.yaml", do_dataset, at("d.yaml"), "d.yaml", 2, "dataset description");
    expect_refused("image list", do_dataset, at("list.yaml"), "list.txt", 2, "image list");
    // an image or a label file that is special: that image is excluded, the run goes on with a.png
    unlink(at("images/train/b.png"));
    expect_refused("image", do_dataset, at("data.yaml"), "images/train/b.jpg", 3, "image");
    unlink(at("images/train/b.jpg"));
    put_png("images/train/b.png");
    expect_refused("label file", do_dataset, at("data.yaml"), "labels/train/b.txt", 3, "label file");
    unlink(at("labels/train/b.txt"));
    expect_refused("weights", do_weights, at("w.safetensors"), "w.safetensors", 2, "weights file");
    // a resume folder: its config, its training state, its results; and the folder itself
    PUTS("run/args.ini", "[train]\nepochs = 1\n");
    PUTS("run/weights/last_state.safetensors", "not read");
    expect_refused("resume args.ini", do_resume, at("run"), "run/args.ini", 2, "config");
    PUTS("run/args.ini", "[train]\nepochs = 1\n");
    expect_refused("resume state", do_resume, at("run"), "run/weights/last_state.safetensors", 2,
                   "training state");
    PUTS("run/weights/last_state.safetensors", "not read");
    expect_refused("resume results", do_resume, at("run"), "run/results.csv", 2, "results file");
    unlink(at("run/results.csv"));
    special("runfifo", "fifo");
    char msg[4096];
    char dir[P];
    snprintf(dir, sizeof dir, "%s", at("runfifo"));
    int rc = in_child(do_resume, dir, msg, sizeof msg);
    CHECK(rc == 2 && strstr(msg, "not a folder"), "a FIFO as the resume folder: %d\n%s", rc, msg);
}

// NUL bytes and overlong lines: refused with file:line in every text reader.
static void test_nul_and_long_lines(void) {
    make_tree();
    char msg[4096];
    PUTB("c.ini", "[train]\nepochs = 1\nbatch = 2\0\n");
    int rc = in_child(do_config, at("c.ini"), msg, sizeof msg);
    CHECK(rc == 2 && strstr(msg, "c.ini:3: a NUL byte"), "config NUL: %d %s", rc, msg);
    PUTB("hyp.yaml", "lr0: 0.01\n\0");
    rc = in_child(do_hyp, at("hyp.yaml"), msg, sizeof msg);
    CHECK(rc == 2 && strstr(msg, "hyp.yaml:2: a NUL byte"), "hyp NUL: %d %s", rc, msg);
    PUTB("d.yaml", "train: images/train\nval: images/train\0\nnames: [x]\n");
    rc = in_child(do_dataset, at("d.yaml"), msg, sizeof msg);
    CHECK(rc == 2 && strstr(msg, "d.yaml:2: a NUL byte"), "data.yaml NUL: %d %s", rc, msg);
    PUTB("labels/train/b.txt", "0 0.5 0.5 0.2 0.2\n0 0.5\0 0.5 0.2 0.2\n");
    rc = in_child(do_dataset, at("data.yaml"), msg, sizeof msg);
    CHECK(rc == 3 && strstr(msg, "labels/train/b.txt:2: a NUL byte"), "label NUL: %d %s", rc, msg);
    size_t big = RF_LINE_MAX + 10;
    char *line = malloc(big + 1);
    memset(line, 'a', big);
    line[big] = '\n';
    memcpy(line, "images/x.png", 12);
    put("list.txt", line, big + 1);
    free(line);
    rc = in_child(do_dataset, at("list.yaml"), msg, sizeof msg);
    CHECK(rc == 2 && strstr(msg, "list.txt:1: the line is") && strstr(msg, "over the"), "list long line: %d %s",
          rc, msg);
}

// ---- outputs never overwrite an input or another run -------------------------------------------

static int do_export(const char *out, char *msg, size_t n) {
    static Config cfg;
    char w[P + 16], o[P + 8];
    snprintf(w, sizeof w, "weights=%s", at("run/weights/best.safetensors"));
    snprintf(o, sizeof o, "out=%s", out);
    char *argv[] = { "cfg/yolov9-s.ini", w, o };
    Call c = { &cfg, 3, argv, NULL };
    return captured(call_export, &c, 0, msg, n);
}

static void test_export_out_is_not_an_input(void) {
    make_tree();
    PUTS("run/weights/best.safetensors", "the yolov9-s weights");
    if (symlink(at("run/weights/best.safetensors"), at("link.safetensors"))) { CHECK(0, "symlink"); return; }
    char outs[3][P], msg[4096];
    snprintf(outs[0], P, "%s", at("run/weights/best.safetensors"));
    snprintf(outs[1], P, "%s", at("run/weights/../weights/best.safetensors"));
    snprintf(outs[2], P, "%s", at("link.safetensors"));
    for (int i = 0; i < 3; i++) {
        int rc = in_child(do_export, outs[i], msg, sizeof msg);
        CHECK(rc == 2 && strstr(msg, "would overwrite the input"), "out=%s: %d %s", outs[i], rc, msg);
    }
    size_t len;
    char *text = slurp(at("run/weights/best.safetensors"), &len);
    CHECK(text && !strcmp(text, "the yolov9-s weights"), "the input was changed");
    free(text);
}

static void test_project_and_name(void) {
    static Config cfg;
    const char *bad[] = { "project=", "name=", "name=..", "name=.", "name=../../etc", "name=a/b" };
    for (int i = 0; i < 6; i++) {
        Err err = {{0}};
        char *ov[] = { (char *)bad[i] };
        CHECK(config_load(NULL, 1, ov, &cfg, &err) != 0 && strstr(err.msg, bad[i][0] == 'p' ? "project" : "name"),
              "%s was accepted (%s)", bad[i], err.msg);
    }
    Err err;
    char *ok[] = { "project=/tmp/x y", "name=exp.1" };
    CHECK(config_load(NULL, 2, ok, &cfg, &err) == 0, "%s", err.msg);
}

// A key's accepted range is what works end to end: reg_max other than 16 (DFL) is refused where
// the model is built, naming the layer and what to write, not at the first loss.
static void test_reg_max_range(void) {
    static Config cfg;
    Err err;
    Model m;
    char *ov[] = { "imgsz=64", "reg_max=8" };
    CHECK(config_load("cfg/t.ini", 2, ov, &cfg, &err) == 0, "%s", err.msg);
    int rc = model_build(&cfg, 1, 64, &m, &err);
    CHECK(rc != 0 && strstr(err.msg, "cfg/t.ini:") && strstr(err.msg, "set reg_max = 16"), "%s", rc ? err.msg : "built");
    if (!rc) model_free(&m);
    char *big[] = { "reg_max=17" };
    CHECK(config_load("cfg/t.ini", 1, big, &cfg, &err) != 0, "reg_max=17 accepted");
}

// A second run in a held run folder is refused naming the holder's pid; a crashed holder's lock is stale.
static void test_concurrent_runs(void) {
    make_tree();
    SynthConfig sc = synth_defaults();
    sc.n_train = 4; sc.n_val = 2; sc.min_side = 64; sc.max_side = 80; sc.threads = 1;
    Err err;
    if (synth_generate(at("synth"), &sc, &err)) { CHECK(0, "%s", err.msg); return; }
    char dir[P];
    snprintf(dir, sizeof dir, "%s", at("runs/exp"));
    char cmd[P + 16];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    if (system(cmd)) { CHECK(0, "mkdir"); return; }
    int go[2];
    if (pipe(go)) { CHECK(0, "pipe"); return; }
    pid_t holder = fork();
    if (holder == 0) {                           // holds the folder until the pipe closes
        int fd;
        Err e;
        close(go[1]);
        if (run_lock(dir, &fd, &e)) _exit(1);
        char c;
        if (read(go[0], &c, 1) < 0) _exit(2);
        _exit(0);
    }
    close(go[0]);
    usleep(200 * 1000);
    static Config cfg;
    char d[P + 8], p[P + 16];
    snprintf(d, sizeof d, "data=%s", at("synth/data.yaml"));
    snprintf(p, sizeof p, "project=%s", at("runs"));
    char *ov[] = { d, p, "name=exp", "exist_ok=1", "imgsz=64", "batch=2", "epochs=1", "workers=1", "device=cpu" };
    CHECK(config_load("cfg/t.ini", 9, ov, &cfg, &err) == 0, "%s", err.msg);
    char msg[4096], pid[32];
    Call c = { &cfg, 0, NULL, NULL };
    int rc = captured(call_train, &c, 0, msg, sizeof msg);
    snprintf(pid, sizeof pid, "(pid %d)", (int)holder);
    CHECK(rc == 1 && strstr(msg, "in use by another run") && strstr(msg, pid), "rc %d:\n%s", rc, msg);
    close(go[1]);
    int status;
    waitpid(holder, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the holder could not lock");
    int fd;                                      // the holder is gone: its lock file is stale, taken over
    CHECK(run_lock(dir, &fd, &err) == 0, "a stale lock was not taken over: %s", err.msg);
    run_unlock(dir, fd);
}

// ---- resume=1: the newest run, found without a shell ---------------------------------------------

// Two runs under a project whose name holds a quote and a command: resume=1 names the newer one
// (its state is damaged here, so the resume stops on it, naming it) and nothing is executed.
static void test_resume_newest_without_shell(void) {
    const char *proj = "runs/it's; touch PWNED; '";
    char rel[P], cmd[3 * P];
    const char *names[2] = { "old", "new" };
    for (int i = 0; i < 2; i++) {             // made with mkdir(2): put()'s shell would run the name
        const char *parts[3] = { "runs", proj, NULL };
        char path[P];
        for (int k = 0; k < 2; k++) mkdir(at(parts[k]), 0755);
        snprintf(rel, sizeof rel, "%s/%s", proj, names[i]);
        mkdir(at(rel), 0755);
        snprintf(rel, sizeof rel, "%s/%s/weights", proj, names[i]);
        mkdir(at(rel), 0755);
        snprintf(rel, sizeof rel, "%s/%s/weights/last_state.safetensors", proj, names[i]);
        snprintf(path, sizeof path, "%s", at(rel));
        FILE *w = fopen(path, "w");
        CHECK(w && fputs("not a state", w) >= 0 && fclose(w) == 0, "cannot write %s", path);
        struct timeval tv[2] = { { 1000000000 + 1000 * i, 0 }, { 1000000000 + 1000 * i, 0 } };
        CHECK(utimes(at(rel), tv) == 0, "utimes %s", at(rel));
    }
    static Config cfg;
    Err err;
    char r[P + 16];
    snprintf(r, sizeof r, "project=%s", at(proj));
    char *rv[] = { "resume=1", r };
    if (config_load(NULL, 2, rv, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    char msg[4096], want[P];
    Call c = { &cfg, 2, rv, NULL };
    int rc = captured(call_resume, &c, 0, msg, sizeof msg);
    snprintf(want, sizeof want, "%s/new", at(proj));
    CHECK(rc != 0 && strstr(msg, want) && !strstr(msg, "/old"), "rc %d, expected the run %s named:\n%s", rc, want, msg);
    snprintf(cmd, sizeof cmd, "%s/PWNED", root);
    CHECK(access(cmd, F_OK) != 0 && access("PWNED", F_OK) != 0, "a name under project= ran a command");
}

// ---- detect: one result per input, every input -----------------------------------------------

static int run_detect(const char *source, const char *name, char *msg, size_t n) {
    static Config cfg;
    Err err;
    char w[P + 16], p[P + 16], nm[64];
    snprintf(w, sizeof w, "weights=%s", at("w.safetensors"));
    snprintf(p, sizeof p, "project=%s", at("det"));
    snprintf(nm, sizeof nm, "name=%s", name);
    char *ov[] = { w, p, nm, "imgsz=64", "device=cpu", "exist_ok=1" };
    if (config_load("cfg/t.ini", 6, ov, &cfg, &err)) { snprintf(msg, n, "%s", err.msg); return -1; }
    DetectOptions o = { .nms = nms_detect_options() };
    snprintf(o.source, sizeof o.source, "%s", source);
    Call c = { &cfg, 0, NULL, &o };
    return captured(call_detect, &c, 1, msg, n);
}

static void test_detect_names_and_odd_images(void) {
    make_tree();
    static Config cfg;
    Err err;
    char *ov[] = { "imgsz=64", "nc=2" };
    Model m;
    if (config_load("cfg/t.ini", 2, ov, &cfg, &err) || model_build(&cfg, 1, 64, &m, &err)) { CHECK(0, "%s", err.msg); return; }
    model_init_weights(&m, 3);
    int saved = model_save(&m, at("w.safetensors"), &err);
    model_free(&m);
    if (saved) { CHECK(0, "%s", err.msg); return; }
    put_png("a/x.png");
    put_png("b/x.png");
    put_png_wh("c/x.png", 3, 10000);              // scaled to 64: a side of 0 px before the fix
    char list[3 * P];
    snprintf(list, sizeof list, "%s\n%s\n%s\n", at("a/x.png"), at("b/x.png"), at("c/x.png"));
    PUTS("list.txt", list);
    char msg[8192];
    int rc = run_detect(at("list.txt"), "names", msg, sizeof msg);
    CHECK(rc == 0, "detect: %d\n%s", rc, msg);
    const char *outs[] = { "det/names/x.png", "det/names/x_2.png", "det/names/x_3.png" };
    for (int i = 0; i < 3; i++) CHECK(access(at(outs[i]), F_OK) == 0, "%s is missing\n%s", outs[i], msg);
    CHECK(strstr(msg, "its results are named x_2") && strstr(msg, "3x10000"), "%s", msg);
    char cmd[P + 16];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", at("empty"));
    if (system(cmd)) return;
    rc = run_detect(at("empty"), "empty", msg, sizeof msg);   // qsort(NULL, 0) tripped UBSan here
    CHECK(rc == 2 && strstr(msg, "no JPEG or PNG images found"), "empty folder: %d\n%s", rc, msg);
}

// `check CONFIG.ini data=X` judges class ids by the dataset's names (2 here), as training does, not
// by the config's nc (80): class 5 is outside 0..1.
static void test_check_uses_dataset_nc(void) {
    make_tree();
    PUTS("two.yaml", "train: images/train\nval: images/train\nnames: [x, y]\n");
    PUTS("labels/train/b.txt", "5 0.5 0.5 0.2 0.2\n");
    static Config cfg;
    Err err;
    char d[P + 8];
    snprintf(d, sizeof d, "data=%s", at("two.yaml"));
    char *ov[] = { d };
    if (config_load("cfg/t.ini", 1, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    check_run(&cfg, out, NULL, &err);
    fclose(out);
    CHECK(cfg.nc == 80 && text && strstr(text, "labels/train/b.txt:1: class 5 is outside 0..1"), "%s", text);
    free(text);
}

// ---- NaN: in weights, in the loss -----------------------------------------------------------------

static void test_nan_weights_refused(void) {
    make_tree();
    static Config cfg;
    Err err;
    char *ov[] = { "imgsz=64", "nc=2" };
    Model m;
    if (config_load("cfg/t.ini", 2, ov, &cfg, &err) || model_build(&cfg, 1, 64, &m, &err)) { CHECK(0, "%s", err.msg); return; }
    model_init_weights(&m, 3);
    const ParamInfo *p = &m.params[5];
    m.state[p->offset + 2] = NAN;
    CHECK(model_save(&m, at("nan.safetensors"), &err) == 0, "%s", err.msg);
    m.state[p->offset + 2] = INFINITY;
    CHECK(model_save(&m, at("inf.safetensors"), &err) == 0, "%s", err.msg);
    char want[300];
    snprintf(want, sizeof want, "tensor '%s' holds NaN at index 2", p->name);
    CHECK(model_load(&m, at("nan.safetensors"), "", &err) != 0 && strstr(err.msg, want), "%s", err.msg);
    snprintf(want, sizeof want, "tensor '%s' holds Inf at index 2", p->name);
    CHECK(model_load(&m, at("inf.safetensors"), "", &err) != 0 && strstr(err.msg, want), "%s", err.msg);
    // training's weights= goes through the transfer, which checks the same
    CHECK(model_transfer(&m, at("inf.safetensors"), 1, 0, &err) != 0 && strstr(err.msg, want), "transfer: %s", err.msg);
    model_free(&m);
}

// A loss that turns NaN mid-run (YT_NAN_AT_STEP poisons a weight): the run stops with status 1 naming
// the step and the loss items; the EMA weights (finite: no optimizer step since) are saved, and the
// state of the last epoch end stays where resume continues.
static void test_nan_loss_stops(void) {
    make_tree();
    SynthConfig sc = synth_defaults();
    sc.n_train = 4; sc.n_val = 2; sc.min_side = 64; sc.max_side = 80; sc.threads = 1;
    Err err;
    if (synth_generate(at("synth"), &sc, &err)) { CHECK(0, "%s", err.msg); return; }
    static Config cfg;
    char d[P + 8], p[P + 16];
    snprintf(d, sizeof d, "data=%s", at("synth/data.yaml"));
    snprintf(p, sizeof p, "project=%s", at("runs"));
    char *ov[] = { d, p, "name=nan", "imgsz=64", "batch=2", "epochs=3", "workers=1", "device=cpu" };
    if (config_load("cfg/t.ini", 8, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    test_switch(SW_NAN_AT_STEP, "3");             // epoch 1, batch 0: after epoch 0's checkpoints
    static char msg[1 << 16];
    Call c = { &cfg, 0, NULL, NULL };
    int rc = captured(call_train, &c, 1, msg, sizeof msg);
    test_switch(SW_NAN_AT_STEP, NULL);
    CHECK(rc == 1, "status %d", rc);
    CHECK(strstr(msg, "the loss is not finite at epoch 1, batch 0 (step 3 of this run): box ") && strstr(msg, "cls nan"), "%s", msg);
    CHECK(strstr(msg, "saved the EMA weights") && strstr(msg, "continues from there"), "%s", msg);
    Model m;
    config_set_nc(&cfg, SYNTH_NC);
    if (model_build(&cfg, 1, 64, &m, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(model_load(&m, at("runs/nan/weights/last.safetensors"), "", &err) == 0, "last: %s", err.msg);
    model_free(&m);
}

// ---- resource limits: ulimit -v ----------------------------------------------------------------

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#ifndef UNDER_ASAN
static long vm_size_kb(void) {
    long kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    for (char line[256]; f && fgets(line, sizeof line, f); )
        if (sscanf(line, "VmSize: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

// A tiny training run under RLIMIT_AS = what is mapped now + extra_mb; its messages into msg.
static int limited_run(const char *extra_mb, char *msg, size_t n) {
    struct rlimit r;
    r.rlim_cur = r.rlim_max = (rlim_t)(vm_size_kb() + atol(extra_mb) * 1024) * 1024;
    if (setrlimit(RLIMIT_AS, &r)) { snprintf(msg, n, "setrlimit: %s", strerror(errno)); return 97; }
    static Config cfg;
    Err err;
    char d[P + 8], p[P + 16];
    snprintf(d, sizeof d, "data=%s", at("synth/data.yaml"));
    snprintf(p, sizeof p, "project=%s", at("runs"));
    char *ov[] = { d, p, "name=lim", "imgsz=64", "batch=2", "epochs=1", "workers=1", "device=cpu" };
    if (config_load("cfg/t.ini", 8, ov, &cfg, &err)) { snprintf(msg, n, "%s", err.msg); return 98; }
    Call c = { &cfg, 0, NULL, NULL };
    return captured(call_train, &c, 1, msg, n);
}
#endif

// Under ulimit -v the memory check counts the limit (not only MemAvailable), OpenBLAS's buffers are
// sized to it, and what does not fit is a clear refusal within seconds, never a spin; a limit with
// room trains.
static void test_address_space_limit(void) {
#ifdef UNDER_ASAN
    SKIP("AddressSanitizer maps terabytes of shadow memory: RLIMIT_AS cannot apply");
#else
    make_tree();
    SynthConfig sc = synth_defaults();
    sc.n_train = 4; sc.n_val = 2; sc.min_side = 64; sc.max_side = 80; sc.threads = 1;
    Err err;
    if (synth_generate(at("synth"), &sc, &err)) { CHECK(0, "%s", err.msg); return; }
    static char msg[1 << 15];
    // first in this process: no GEMM has run, so OpenBLAS has no buffers yet (as in a fresh yolotrain)
    int rc = in_child(limited_run, "50", msg, sizeof msg);
    CHECK(rc == 2 && strstr(msg, "ulimit -v") && strstr(msg, "OpenBLAS alone needs"),
          "a 50 MB address-space limit: status %d (negative: killed, a spin)\n%s", rc, msg);
    rc = in_child(limited_run, "400", msg, sizeof msg);      // the old code spun here (3 x 128 MB)
    CHECK(rc == 0 || (rc == 2 && strstr(msg, "ulimit -v")),
          "a 400 MB address-space limit: status %d (negative: killed, a spin)\n%s", rc, msg);
    rc = in_child(limited_run, "1500", msg, sizeof msg);
    CHECK(rc == 0, "a 1.5 GB address-space limit: status %d\n%s", rc, msg);
#endif
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    RUN(test_address_space_limit);           // first: before any GEMM of this process
    RUN(test_special_files_in_every_role);
    RUN(test_nul_and_long_lines);
    RUN(test_export_out_is_not_an_input);
    RUN(test_project_and_name);
    RUN(test_reg_max_range);
    RUN(test_concurrent_runs);
    RUN(test_resume_newest_without_shell);
    RUN(test_detect_names_and_odd_images);
    RUN(test_check_uses_dataset_nc);
    RUN(test_nan_weights_refused);
    RUN(test_nan_loss_stops);
    return test_summary();
}
