// test_cli.c: the yolotrain binary's command line as a user types it: --version, MODE --help, the
// mode words, exit statuses. Runs ./yolotrain (make test builds it first) from the repository root.
#include "test.h"


#include "io/synth.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

static char out[1 << 16];

// Run `./yolotrain ARGS` with stderr joined to stdout; the exit status, output in out.
static int yt(const char *args) {
    char cmd[20100];
    snprintf(cmd, sizeof cmd, "./yolotrain %s", args);
    return test_shell(cmd, out, sizeof out);
}

static void test_version(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    int rc = yt("--version");
    CHECK(rc == 0, "exit %d: %s", rc, out);
    CHECK(!strncmp(out, "yolotrain ", 10) && strstr(out, "CUDA ") && strstr(out, "cuDNN ") && strstr(out, "FreeType "),
          "%s", out);
}

static void test_mode_help(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    static const struct { const char *args, *has, *lacks; } c[] = {
        { "train --help", "epochs=300", "save_json" },
        { "cfg/s.ini --help", "lr0=0.01", "save_json" },
        { "val --help", "save_json=0", "mosaic" },
        { "detect --help", "source=", "epochs" },
        { "predict --help", "nosave=0", "epochs" },
        { "export --help", "format=", "mosaic" },
        { "info --help", "imgsz=640", "epochs" },
        { "check --help", "data=", "lr0" },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int rc = yt(c[i].args);
        CHECK(rc == 0 && strstr(out, c[i].has) && !strstr(out, c[i].lacks), "%s: exit %d\n%s", c[i].args, rc, out);
    }
    int rc = yt("train --help");
    CHECK(strstr(out, "exist_ok=0") && strstr(out, "reuse project/name"), "a key has its meaning: %s", out);
    (void)rc;
}

// The line of `key` in the last help printed ("  key=default  meaning"), or "" when there is none.
static const char *help_line(const char *key) {
    static char line[1024];
    char want[80];
    snprintf(want, sizeof want, "\n  %s=", key);
    const char *p = strstr(out, want);
    line[0] = 0;
    if (p) snprintf(line, sizeof line, "%.*s", (int)strcspn(p + 1, "\n"), p + 1);
    return line;
}

// Each mode's help shows the keys it reads with its own defaults (val's and detect's folders and
// thresholds, check's folder) and says what weights= is to it; the keys that change nothing say so.
static void test_mode_defaults(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    static const struct { const char *mode, *key, *has; } c[] = {
        { "train", "project", "project=runs/train " }, { "train", "conf", "" }, { "train", "weights", "initial weights" },
        { "val", "project", "project=runs/val " }, { "val", "conf", "conf=0.001 " }, { "val", "iou", "iou=0.7 " },
        { "val", "save_conf", "save_conf=0 " }, { "val", "weights", "the weights to validate" },
        { "detect", "project", "project=runs/detect " }, { "detect", "conf", "conf=0.25 " },
        { "detect", "iou", "iou=0.45 " }, { "detect", "max_det", "max_det=1000 " },
        { "detect", "weights", "the weights to run" },
        { "check", "project", "project=runs/check " }, { "export", "weights", "the weights to export" },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char args[64];
        snprintf(args, sizeof args, "%s --help", c[i].mode);
        int rc = yt(args);
        const char *l = help_line(c[i].key);
        if (!c[i].has[0]) CHECK(rc == 0 && !l[0], "%s: %s is not read there: %s", args, c[i].key, l);
        else CHECK(rc == 0 && strstr(l, c[i].has), "%s: want \"%s\" in the line of %s: \"%s\"", args, c[i].has, c[i].key, l);
    }
    static const char *const inert[] = { "label_smoothing", "copy_paste", "cls_pw", "obj", "obj_pw", "iou_t", "anchor_t",
                                         "fl_gamma" };
    yt("train --help");
    for (size_t i = 0; i < sizeof inert / sizeof inert[0]; i++)
        CHECK(strstr(help_line(inert[i]), "changes nothing"), "%s's help: \"%s\"", inert[i], help_line(inert[i]));
    CHECK(!strstr(help_line("mosaic"), "changes nothing"), "mosaic does something: %s", help_line("mosaic"));
}

static void test_modes_and_errors(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    int rc = yt("info model=cfg/s.ini --img 320");
    CHECK(rc == 0 && strstr(out, "at 320"), "info model=: exit %d %s", rc, out);
    rc = yt("info --cfg cfg/t.ini");
    CHECK(rc == 0 && strstr(out, "cfg/t.ini:"), "info --cfg: exit %d %s", rc, out);
    rc = yt("cfg/s.ini --exst-ok device=cpu");
    CHECK(rc == 2 && strstr(out, "unknown key") && strstr(out, "exist_ok"), "exit %d %s", rc, out);
    rc = yt("predict cfg/s.ini source=/nonexistent/x.jpg");
    CHECK(rc == 2, "predict is detect: exit %d %s", rc, out);
    rc = yt("cfg/t.ini augment=tpu device=cpu");
    CHECK(rc == 2 && strstr(out, "augment = tpu") && strstr(out, "allowed: cpu, gpu"), "augment=tpu: exit %d %s", rc, out);
    rc = yt("cfg/t.ini augment=gpu device=cpu data=/nonexistent/d.yaml");   // the note comes before the data
    CHECK(rc == 2 && strstr(out, "note: augment=gpu on the CPU"), "augment=gpu on the CPU: exit %d %s", rc, out);
}

// stdout is line-buffered: piped into one log with stderr, `detect`'s line for a good image comes
// before the error about the next, unreadable one, and "Results saved" after it (block-buffered,
// every stdout line would come at the exit, after the error).
static void test_piped_order(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    const char *dir = test_tmpdir("cli");
    char sd[4200], path[4300], args[20000];
    snprintf(sd, sizeof sd, "%s/synth", dir);
    SynthConfig sc = synth_defaults();
    sc.n_train = 4; sc.n_val = 2; sc.min_side = 64; sc.max_side = 96; sc.threads = 1;
    Err err;
    if (synth_generate(sd, &sc, &err)) { CHECK(0, "%s", err.msg); return; }
    snprintf(args, sizeof args, "cfg/t.ini data=%s/data.yaml imgsz=64 batch=4 epochs=1 workers=1 device=cpu "
             "project=%s/runs name=t --exist-ok", sd, dir);
    int rc = yt(args);
    if (rc) { CHECK(0, "training for the weights: exit %d\n%s", rc, out); return; }
    snprintf(path, sizeof path, "%s/src", dir);
    mkdir(path, 0755);
    snprintf(args, sizeof args, "cp %s/images/val/000000.jpg %s/src/a.jpg && printf 'not a jpeg' > %s/src/b.jpg",
             sd, dir, dir);
    if (system(args)) { CHECK(0, "cannot make the source folder"); return; }
    snprintf(args, sizeof args, "predict cfg/t.ini weights=%s/runs/t/weights/last.safetensors source=%s/src imgsz=64 "
             "device=cpu project=%s/runs name=d", dir, dir, dir);
    rc = yt(args);
    const char *good = strstr(out, "image 1/2"), *bad = strstr(out, "b.jpg"), *end = strstr(out, "Results saved");
    CHECK(rc == 1 && good && bad && end && good < bad && bad < end, "exit %d; want the lines in order:\n%s", rc, out);
}

int main(void) {
    RUN(test_version);
    RUN(test_mode_help);
    RUN(test_mode_defaults);
    RUN(test_modes_and_errors);
    RUN(test_piped_order);
    return test_summary();
}
