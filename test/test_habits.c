// test_habits.c: the references' habits on the command line (issue 36 item 3): yolov9's val.py and
// detect.py spellings, Ultralytics' device=cuda, run folders named as increment_path, a run's
// args.ini found from weights=, export's messages. Runs ./yolotrain from the repository root.
#include "test.h"

#include <sys/stat.h>

#include "cfg/devices.h"
#include "io/image.h"
#include "io/picture.h"
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

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++) n++;
    return n;
}

// device=cuda is GPU 0, cuda:0 is 0, cuda:0,1 is 0,1; cuda:x is an error that names the forms.
static void test_device_cuda(void) {
    static const struct { const char *spec; int n, g0, g1; } c[] = {
        { "cuda", 1, 0, -1 }, { "cuda:0", 1, 0, -1 }, { "cuda:1", 1, 1, -1 }, { "cuda:0,1", 2, 0, 1 },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        DeviceList d;
        Err err = { 0 };
        int rc = parse_devices(c[i].spec, 2, &d, &err);
        CHECK(rc == 0 && d.n == c[i].n && d.gpu[0] == c[i].g0 && (d.n < 2 || d.gpu[1] == c[i].g1),
              "device=%s: rc %d n %d %s", c[i].spec, rc, d.n, err.msg);
    }
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    int rc = yt("info cfg/t.ini imgsz=64 device=cuda:0,1");
    CHECK(rc == 0, "device=cuda:0,1 is a valid key value: exit %d %s", rc, out);
    rc = yt("info cfg/t.ini imgsz=64 device=cuda:x");
    CHECK(rc == 2 && strstr(out, "cuda:0"), "device=cuda:x: exit %d %s", rc, out);
}

// A pasted val.py / detect.py command: the spellings map to our keys, the flags that do nothing here
// are accepted with one note each.
static void test_yolov9_spellings(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    int rc = yt("info cfg/t.ini imgsz=64 --conf-thres 0.3 --iou-thres=0.6 --max-det 10 --save-txt --view-img "
                "--noautoanchor --sync-bn --view-img 1");
    CHECK(rc == 0, "exit %d %s", rc, out);
    CHECK(count(out, "--view-img") == 1 && strstr(out, "no display"), "one note for --view-img: %s", out);
    CHECK(strstr(out, "anchor-free") && !strstr(out, "sync"), "%s", out);   // --sync-bn is a key (sync_bn)
    rc = yt("info cfg/t.ini imgsz=64 --view-img maybe");
    CHECK(rc == 2, "--view-img maybe: exit %d %s", rc, out);
    rc = yt("val --help");
    CHECK(rc == 0, "exit %d", rc);
    // the values land in the keys: a bad one is reported under the key's own name
    rc = yt("info cfg/t.ini --conf-thres 2");
    CHECK(rc == 2 && strstr(out, "conf"), "--conf-thres 2: exit %d %s", rc, out);
    rc = yt("info cfg/t.ini --iou-thres=-1");
    CHECK(rc == 2 && strstr(out, "iou"), "--iou-thres=-1: exit %d %s", rc, out);
}

static int exists(const char *path) { struct stat st; return !stat(path, &st); }

// A one-epoch gelan-t run on a small synthetic set: DIR/runs/t (args.ini, weights/); DIR, or NULL.
static const char *trained_run(void) {
    static char dir[4200];
    static int state;                             // 0 not tried, 1 made, -1 failed
    if (state) return state > 0 ? dir : NULL;
    state = -1;
    snprintf(dir, sizeof dir, "%s", test_tmpdir("habits"));
    char sd[4300], args[20000];
    snprintf(sd, sizeof sd, "%s/synth", dir);
    SynthConfig sc = synth_defaults();
    sc.n_train = 4; sc.n_val = 2; sc.min_side = 64; sc.max_side = 96; sc.threads = 1;
    Err err;
    if (synth_generate(sd, &sc, &err)) { CHECK(0, "%s", err.msg); return NULL; }
    snprintf(args, sizeof args, "cfg/t.ini data=%s/data.yaml imgsz=64 batch=4 epochs=1 workers=1 device=cpu "
             "project=%s/runs name=t --exist-ok", sd, dir);
    int rc = yt(args);
    if (rc) { CHECK(0, "training for the weights: exit %d\n%s", rc, out); return NULL; }
    state = 1;
    return dir;
}

// --sync-bn (sync_bn=1): two devices say they normalise over the whole batch and train; one device says there is
// nothing to synchronise; under mpirun it is refused (test_procs).
static void test_sync_bn_flag(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    const char *dir = trained_run();
    if (!dir) return;
    char args[20000];
    for (int two = 0; two < 2; two++) {
        snprintf(args, sizeof args, "cfg/t.ini data=%s/synth/data.yaml imgsz=64 batch=4 epochs=1 workers=1 noplots=1 "
                 "device=%s --sync-bn project=%s/runs name=sync%d --exist-ok", dir, two ? "cpu:2" : "cpu", dir, two);
        int rc = yt(args);
        CHECK(rc == 0, "exit %d\n%s", rc, out);
        CHECK(two ? strstr(out, "sync_bn=1 (BN over the whole batch)") != NULL : strstr(out, "nothing to synchronise") != NULL,
              "%s devices: %s", two ? "two" : "one", out);
    }
}

// val twice is runs/val/exp, then exp2, though the run's args.ini says name = t, exist_ok = 1 (its
// training's); name= and exist_ok=1 on the command line still count.
static void test_val_increments(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    const char *dir = trained_run();
    if (!dir) return;
    char args[20000], path[4400];
    snprintf(args, sizeof args, "val %s/runs/t/args.ini weights=%s/runs/t/weights/best.safetensors device=cpu "
             "project=%s/val noplots=1", dir, dir, dir);
    for (int i = 0; i < 2; i++) {
        int rc = yt(args);
        CHECK(rc == 0 && strstr(out, i ? "/val/exp2" : "/val/exp"), "val %d: exit %d\n%s", i + 1, rc, out);
    }
    snprintf(path, sizeof path, "%s/val/exp2", dir);
    CHECK(exists(path), "%s is missing", path);
    snprintf(args + strlen(args), sizeof args - strlen(args), " name=exp --exist-ok");
    int rc = yt(args);
    CHECK(rc == 0 && strstr(out, "/val/exp\n") && !exists(strcat(path, "/../exp3")), "exist_ok=1: exit %d\n%s", rc, out);
}

// detect nosave=1 makes no folder and names none; with save_txt=1 the folder holds the labels.
// detect.py's --conf-thres and --iou-thres are detect's conf and iou.
static void test_detect_nosave(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    const char *dir = trained_run();
    if (!dir) return;
    char args[20000], path[4400];
    snprintf(args, sizeof args, "detect cfg/t.ini weights=%s/runs/t/weights/last.safetensors source=%s/synth/images/val "
             "imgsz=64 device=cpu project=%s/det --nosave --conf-thres 0.5 --iou-thres 0.5", dir, dir, dir);
    int rc = yt(args);
    snprintf(path, sizeof path, "%s/det", dir);
    CHECK(rc == 0 && !strstr(out, "Results saved") && strstr(out, "nothing saved") && !exists(path),
          "nosave=1: exit %d\n%s", rc, out);
    rc = yt(strcat(args, " --save-txt"));
    snprintf(path, sizeof path, "%s/det/exp/labels", dir);
    CHECK(rc == 0 && strstr(out, "Results saved to") && exists(path), "nosave=1 save_txt=1: exit %d\n%s", rc, out);
    rc = yt(strcat(args, " --conf-thres 2"));
    CHECK(rc == 2 && strstr(out, "conf=2"), "--conf-thres 2 is detect's conf: exit %d\n%s", rc, out);
}

// val and detect with a run's weights and no config read the run's args.ini, as export does; weights
// outside a run, or missing, are said to be so.
static void test_run_config(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    const char *dir = trained_run();
    if (!dir) return;
    char args[20000];
    snprintf(args, sizeof args, "val weights=%s/runs/t/weights/best.safetensors device=cpu project=%s/v noplots=1",
             dir, dir);
    int rc = yt(args);
    CHECK(rc == 0 && strstr(out, "runs/t/args.ini") && strstr(out, "Results saved to"), "val: exit %d\n%s", rc, out);
    snprintf(args, sizeof args, "detect --weights %s/runs/t/weights/best.safetensors --source %s/synth/images/val "
             "device=cpu project=%s/d", dir, dir, dir);
    rc = yt(args);
    CHECK(rc == 0 && strstr(out, "runs/t/args.ini") && strstr(out, "Results saved to"), "detect: exit %d\n%s", rc, out);
    snprintf(args, sizeof args, "val weights=%s/runs/t/weights/nothere.safetensors device=cpu", dir);
    rc = yt(args);
    CHECK(rc == 2 && strstr(out, "nothere.safetensors: no such file"), "missing weights: exit %d\n%s", rc, out);
    snprintf(args, sizeof args, "cp %s/runs/t/weights/best.safetensors %s/w.safetensors", dir, dir);
    if (system(args)) { CHECK(0, "%s", args); return; }
    snprintf(args, sizeof args, "detect weights=%s/w.safetensors source=%s/synth/images/val device=cpu", dir, dir);
    rc = yt(args);
    CHECK(rc == 2 && strstr(out, "args.ini beside them") && strstr(out, "CONFIG.ini"), "outside a run: exit %d\n%s",
          rc, out);
}

// export: a missing weights file is missing weights (not a missing args.ini), last_state is the training
// state, and a gelan run's default export is a notice and status 0 (nothing to convert, nothing written).
static void test_export_messages(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    const char *dir = trained_run();
    if (!dir) return;
    char args[20000], path[4400];
    snprintf(args, sizeof args, "export weights=%s/runs/t/weights/nothere.safetensors", dir);
    int rc = yt(args);
    CHECK(rc == 2 && strstr(out, "nothere.safetensors: no such file") && !strstr(out, "args.ini"), "exit %d\n%s", rc, out);
    snprintf(path, sizeof path, "%s/runs/t/weights/last_state.safetensors", dir);
    CHECK(exists(path), "%s is missing", path);
    snprintf(args, sizeof args, "export weights=%s", path);
    rc = yt(args);
    CHECK(rc == 2 && strstr(out, "training state") && strstr(out, "last.safetensors"), "exit %d\n%s", rc, out);
    snprintf(args, sizeof args, "export weights=%s/runs/t/weights/best.safetensors", dir);
    rc = yt(args);
    snprintf(path, sizeof path, "%s/runs/t/weights/best-converted.safetensors", dir);
    CHECK(rc == 0 && strstr(out, "already the inference form") && !exists(path), "gelan: exit %d\n%s", rc, out);
}

// val --save-txt --save-conf: each label row ends with the score (six columns), as val.py's save_one_txt;
// without --save-conf five. Rows are read from the first label file with any.
static int label_columns(const char *labels) {
    char cmd[4400];
    snprintf(cmd, sizeof cmd, "cat %s/*.txt 2>/dev/null | head -n 1 | wc -w", labels);
    char words[64];
    if (test_shell(cmd, words, sizeof words)) return -1;
    return atoi(words);
}

static void test_val_save_conf(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    const char *dir = trained_run();
    if (!dir) return;
    char args[20000], labels[4400];
    snprintf(args, sizeof args, "val weights=%s/runs/t/weights/last.safetensors device=cpu project=%s/sc noplots=1 "
             "--save-txt conf=0.0001", dir, dir);
    int rc = yt(args);
    snprintf(labels, sizeof labels, "%s/sc/exp/labels", dir);
    int cols = label_columns(labels);
    CHECK(rc == 0 && cols == 5, "--save-txt: exit %d, %d columns\n%s", rc, cols, out);
    rc = yt(strcat(args, " --save-conf"));
    snprintf(labels, sizeof labels, "%s/sc/exp2/labels", dir);
    cols = label_columns(labels);
    CHECK(rc == 0 && cols == 6, "--save-conf: exit %d, %d columns\n%s", rc, cols, out);
}

// val and detect given last_state.safetensors say it is the training state and name the weights to use,
// as export does (not "not weights of a YOLO detector").
static void test_eval_last_state(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    const char *dir = trained_run();
    if (!dir) return;
    char args[20000];
    const char *forms[] = { "val weights=%s/runs/t/weights/last_state.safetensors device=cpu",
                            "val cfg/t.ini weights=%s/runs/t/weights/last_state.safetensors device=cpu",
                            "detect weights=%s/runs/t/weights/last_state.safetensors source=. device=cpu" };
    for (int i = 0; i < 3; i++) {
        snprintf(args, sizeof args, forms[i], dir);
        int rc = yt(args);
        CHECK(rc == 2 && strstr(out, "training state") && strstr(out, "last.safetensors") &&
              strstr(out, "best.safetensors"), "%s: exit %d\n%s", args, rc, out);
    }
}

// check writes check_batch.jpg under runs/check/exp, then exp2 (increment_path), not among the training
// runs; with the dataset missing it creates nothing. Run from an empty folder, so runs/ is its own.
static void test_check_folder(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    const char *dir = trained_run();
    if (!dir) return;
    char cwd[4096], args[20000], path[4400];
    if (!getcwd(cwd, sizeof cwd)) { CHECK(0, "getcwd"); return; }
    snprintf(path, sizeof path, "%s/empty", dir);
    mkdir(path, 0755);
    snprintf(args, sizeof args, "cd %s/empty && %s/yolotrain check data=%s/nothere.yaml", dir, cwd, dir);
    int rc = test_shell(args, out, sizeof out);
    snprintf(path, sizeof path, "%s/empty/runs", dir);
    CHECK(rc == 2 && !exists(path), "missing data: exit %d, runs/ %s\n%s", rc, exists(path) ? "made" : "absent", out);
    snprintf(args, sizeof args, "cd %s/empty && %s/yolotrain check data=%s/synth/data.yaml imgsz=64 workers=1", dir, cwd,
             dir);
    for (int i = 0; i < 2; i++) {
        rc = test_shell(args, out, sizeof out);
        snprintf(path, sizeof path, "%s/empty/runs/check/exp%s/check_batch.jpg", dir, i ? "2" : "");
        CHECK(rc == 0 && exists(path) && strstr(out, i ? "runs/check/exp2/check_batch.jpg" : "runs/check/exp/check_batch.jpg"),
              "check %d: exit %d, %s %s\n%s", i + 1, rc, path, exists(path) ? "made" : "missing", out);
    }
    // augment=gpu leaves training's pixels to the devices; check's picture still has them: the same bytes
    snprintf(args, sizeof args, "cd %s/empty && %s/yolotrain check data=%s/synth/data.yaml imgsz=64 workers=1 augment=gpu",
             dir, cwd, dir);
    rc = test_shell(args, out, sizeof out);
    char first[4400];
    snprintf(first, sizeof first, "%s/empty/runs/check/exp/check_batch.jpg", dir);
    snprintf(path, sizeof path, "%s/empty/runs/check/exp3/check_batch.jpg", dir);
    CHECK(rc == 0 && same_file(first, path), "check augment=gpu: exit %d, %s differs from %s\n%s", rc, path, first, out);
    snprintf(path, sizeof path, "%s/empty/runs/train", dir);
    CHECK(!exists(path), "check made %s", path);
}

// A config named without its folder, as `yolotrain t.ini` in the checkout: the message points at cfg/t.ini;
// a name with no such file under cfg/ gets no such hint.
static void test_config_hint(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    int rc = yt("t.ini epochs=1");
    CHECK(rc == 2 && strstr(out, "cannot open the config") && strstr(out, "cfg/t.ini"), "exit %d\n%s", rc, out);
    rc = yt("info nothere.ini");
    CHECK(rc == 2 && strstr(out, "cannot open the config") && !strstr(out, "did you mean"), "exit %d\n%s", rc, out);
}

// The most rows of any labels/*.txt under dir, or -1.
static int most_rows(const char *labels) {
    char cmd[4400], text[256];
    snprintf(cmd, sizeof cmd, "wc -l %s/*.txt 2>/dev/null | grep -v ' total$' | sort -n | tail -n 1", labels);
    if (test_shell(cmd, text, sizeof text) || !text[0]) return -1;
    return atoi(text);
}

// detect --max-det N keeps N detections an image (detect.py's --max-det); a run's args.ini's max_det
// (val's 300) is not detect's, whose default stays 1000.
static void test_detect_max_det(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    const char *dir = trained_run();
    if (!dir) return;
    char args[20000], labels[4400];
    snprintf(args, sizeof args, "detect weights=%s/runs/t/weights/last.safetensors source=%s/synth/images/val "
             "device=cpu project=%s/md --nosave --save-txt conf=0.0001 iou=0.9", dir, dir, dir);
    int rc = yt(args);
    snprintf(labels, sizeof labels, "%s/md/exp/labels", dir);
    int all = most_rows(labels);
    CHECK(rc == 0 && all > 2, "without --max-det: exit %d, at most %d rows\n%s", rc, all, out);
    rc = yt(strcat(args, " --max-det 2"));
    snprintf(labels, sizeof labels, "%s/md/exp2/labels", dir);
    int two = most_rows(labels);
    CHECK(rc == 0 && two >= 1 && two <= 2, "--max-det 2: exit %d, at most %d rows\n%s", rc, two, out);
}

// Pixels of a picture's band rows [y0, y1), columns [x0, x1), that differ from b's by more than 40.
static int band_diff(const Image *a, const Image *b, int x0, int x1, int y0, int y1) {
    int n = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++)
            for (int c = 0; c < 3; c++) {
                int d = a->px[((size_t)y * a->w + x) * 3 + c] - b->px[((size_t)y * b->w + x) * 3 + c];
                n += d > 40 || d < -40;
            }
    return n;
}

// Batch pictures carry each tile's file name at its top-left, as plot_images draws paths[i] (the name
// only, its first 40 characters): a named tile's top band changes, an unnamed tile and the rest of the
// named one do not, and a longer name draws as its first 40 characters.
static void test_tile_names(void) {
    enum { S = 160 };
    const char *dir = test_tmpdir("tiles");
    Batch b = { .n = 2, .S = S, .h = S, .w = S };
    b.images = calloc((size_t)2 * S * S * 3, 1);      // black tiles, no boxes
    char *named[2] = { "/data/images/train/tile_name_here.jpg", NULL };
    char *long60[2] = { "x/0123456789012345678901234567890123456789_and_20_more_chars.jpg", NULL };
    char *first40[2] = { "0123456789012345678901234567890123456789", NULL };
    char p[4][4400];
    const char *what[4] = { "none", "named", "long", "first40" };
    char *const *files[4] = { NULL, named, long60, first40 };
    Err err;
    for (int k = 0; k < 4; k++) {
        snprintf(p[k], sizeof p[k], "%s/%s.jpg", dir, what[k]);
        CHECK(picture_batch(&b, NULL, 0, files[k], p[k], &err) == 0, "%s", err.msg);
    }
    free(b.images);
    Image im[4];
    for (int k = 0; k < 4; k++)
        if (image_load(p[k], &im[k], &err)) { CHECK(0, "%s", err.msg); return; }
    int top = band_diff(&im[1], &im[0], 4, S - 4, 4, 24), other = band_diff(&im[1], &im[0], S + 4, 2 * S - 4, 4, 24);
    int below = band_diff(&im[1], &im[0], 4, S - 4, 40, S - 4);
    CHECK(top > 30 && other == 0 && below == 0, "named tile's top band: %d pixels changed, the unnamed tile's %d, "
          "below the band %d", top, other, below);
    CHECK(im[2].w == im[3].w && band_diff(&im[2], &im[3], 0, im[2].w, 0, im[2].h) == 0,
          "a 60-character name is drawn as its first 40 characters");
    for (int k = 0; k < 4; k++) image_free(&im[k]);
}

int main(void) {
    RUN(test_device_cuda);
    RUN(test_yolov9_spellings);
    RUN(test_val_increments);
    RUN(test_sync_bn_flag);
    RUN(test_detect_nosave);
    RUN(test_run_config);
    RUN(test_export_messages);
    RUN(test_val_save_conf);
    RUN(test_eval_last_state);
    RUN(test_check_folder);
    RUN(test_config_hint);
    RUN(test_tile_names);
    RUN(test_detect_max_det);
    return test_summary();
}
