// test_hyp_keys.c: every [hyp] key acts as in yolov9 or is refused or flagged, none silently ignored.
// cls_pw (yolov9's class BCE pos_weight) and fl_gamma (its focal loss), which our loss does not have,
// are refused with any value but the one without effect, from the command line, an INI and a hyp
// yaml, naming where; copy_paste on polygon labels (read as boxes, never pasted) is noted when the
// train split is opened. The key table itself is checked against those three lists.
#include "test/test.h"

#include "cfg/config.h"
#include "cfg/parts.h"
#include "io/dataset.h"
#include "io/image.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

// what each key of hyp.scratch-high.yaml does here: as yolov9 (acted on, or unused by yolov9 too)
static const char *const acts[] = { "lr0", "lrf", "momentum", "weight_decay", "warmup_epochs",
    "warmup_momentum", "warmup_bias_lr", "box", "cls", "dfl", "hsv_h", "hsv_s", "hsv_v", "degrees",
    "translate", "scale", "shear", "perspective", "flipud", "fliplr", "mosaic", "mixup",
    "obj", "obj_pw", "iou_t", "anchor_t", NULL };   // the last four: read by no yolov9 detection loss
static const char *const refused[] = { "cls_pw", "fl_gamma", NULL };
static const char *const flagged[] = { "copy_paste", NULL };   // needs polygons, which we read as boxes

static int listed(const char *const *list, const char *name) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], name)) return 1;
    return 0;
}

static void test_every_key_is_accounted_for(void) {
    for (int i = 0; i < cfg_n_keys; i++) {
        const Key *k = &cfg_keys[i];
        if (strcmp(k->section, "hyp")) continue;
        int n = listed(acts, k->name) + listed(refused, k->name) + listed(flagged, k->name);
        CHECK(n == 1, "[hyp] %s: say whether it acts as in yolov9, is refused or is flagged", k->name);
        CHECK(!listed(refused, k->name) || k->check, "[hyp] %s is refused, yet has no check", k->name);
    }
}

static Config cfg;

static int load(int n, char **ov, Err *err) { return config_load("cfg/t.ini", n, ov, &cfg, err); }

static void test_loss_keys_refused(void) {
    Err err = { { 0 } };
    char *defaults[] = { "cls_pw=1.0", "fl_gamma=0" };
    CHECK(load(2, defaults, &err) == 0, "the values without effect: %s", err.msg);
    static const char *const bad[][2] = { { "cls_pw=2", "pos_weight" }, { "cls_pw=0", "pos_weight" },
                                          { "fl_gamma=1.5", "focal" } };
    for (int i = 0; i < 3; i++) {
        char *ov[] = { (char *)bad[i][0] };
        err.msg[0] = 0;
        CHECK(load(1, ov, &err) != 0, "%s accepted, and it would change nothing", bad[i][0]);
        CHECK(strstr(err.msg, bad[i][1]) && strstr(err.msg, "allowed"), "%s: %s", bad[i][0], err.msg);
    }
    const char *dir = test_tmpdir("hyp-keys");
    char yaml[4200], ini[4200], arg[4300];
    snprintf(yaml, sizeof yaml, "%s/hyp.yaml", dir);
    FILE *f = fopen(yaml, "w");
    if (!f) { CHECK(0, "cannot write %s", yaml); return; }
    fputs("lr0: 0.01\nfl_gamma: 1.5\n", f);
    fclose(f);
    snprintf(arg, sizeof arg, "hyp=%s", yaml);
    char *ov[] = { arg };
    char want[4300];
    snprintf(want, sizeof want, "%s:2:", yaml);
    CHECK(load(1, ov, &err) != 0 && strstr(err.msg, want), "fl_gamma in a hyp yaml: %s", err.msg);
    snprintf(ini, sizeof ini, "%s/m.ini", dir);
    char cmd[8600];
    snprintf(cmd, sizeof cmd, "sed 's/^cls_pw = 1.0 /cls_pw = 0.5 /' cfg/t.ini > '%s'", ini);
    if (system(cmd)) { CHECK(0, "sed"); return; }
    CHECK(config_load(ini, 0, NULL, &cfg, &err) != 0 && strstr(err.msg, "cls_pw") && strstr(err.msg, ini),
          "cls_pw = 0.5 in an INI: %s", err.msg);
}

// train: one image with a polygon label; the note comes with copy_paste > 0 only.
static void test_copy_paste_on_polygons_noted(void) {
    const char *dir = test_tmpdir("hyp-polygons");
    char cmd[8600], data[4300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/images/t' '%s/labels/t' && printf '0 0.1 0.1 0.5 0.1 0.5 0.6\\n' > "
             "'%s/labels/t/a.txt' && printf 'train: images/t\\nval: images/t\\nnames: [a]\\n' > '%s/d.yaml'",
             dir, dir, dir, dir);
    if (system(cmd)) { CHECK(0, "cannot write the dataset"); return; }
    snprintf(cmd, sizeof cmd, "%s/images/t/a.png", dir);
    Image im = image_new(32, 32, 100);
    Err err = { { 0 } };
    if (image_save_png(cmd, &im, &err)) { CHECK(0, "%s", err.msg); return; }
    image_free(&im);
    snprintf(data, sizeof data, "data=%s/d.yaml", dir);
    for (int on = 0; on < 2; on++) {
        char *ov[] = { data, on ? "copy_paste=0.3" : "copy_paste=0" };
        if (load(2, ov, &err)) { CHECK(0, "%s", err.msg); return; }
        char *text = NULL;
        size_t n;
        FILE *f = open_memstream(&text, &n);
        DatasetOptions opt = { .report = f };
        Dataset ds;
        int rc = dataset_open(NULL, &cfg, "train", &opt, &ds, &err);
        fclose(f);
        CHECK(rc == 0, "%s", err.msg);
        if (rc == 0) dataset_free(&ds);
        int noted = text && strstr(text, "copy_paste = 0.3 has no effect: 1 label files of train hold polygons");
        CHECK(noted == on, "copy_paste=%s: %s", on ? "0.3" : "0", text ? text : "");
        free(text);
    }
}

int main(void) {
    RUN(test_every_key_is_accounted_for);
    RUN(test_loss_keys_refused);
    RUN(test_copy_paste_on_polygons_noted);
    return test_summary();
}
