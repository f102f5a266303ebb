// schema.c: the table of every configuration key (section, type, allowed values, default, field)
// and the one set of functions that parse, check and print a value for any entry of it.
#include "cfg/parts.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int check_device(const char *v, char *why, size_t n);
static int check_split(const char *v, char *why, size_t n);
static int check_freeze(const char *v, char *why, size_t n);
static int check_project(const char *v, char *why, size_t n);
static int check_name(const char *v, char *why, size_t n);
static int check_cls_pw(const char *v, char *why, size_t n);
static int check_fl_gamma(const char *v, char *why, size_t n);

// Every row ends with the key's help: one line of meaning, what `yolotrain MODE --help` prints (a mode
// may say more of its own: cfg/help.c). A key that changes nothing says so there.
#define F(field) offsetof(Config, field), sizeof(((Config *)0)->field)
#define INT(sec, name, field, lo, hi, def, help)     { sec, name, KEY_INT, F(field), lo, hi, 0, NULL, NULL, def, help }
#define INTM(sec, name, field, lo, hi, m, def, help) { sec, name, KEY_INT, F(field), lo, hi, m, NULL, NULL, def, help }
// an INT that also takes one value outside lo..hi, `extra` ("-1 (auto)": the number, then what it means)
#define INTX(sec, name, field, lo, hi, extra, def, help) \
    { sec, name, KEY_INT, F(field), lo, hi, 0, extra, NULL, def, help }
#define BOOL(sec, name, field, def, help)            { sec, name, KEY_BOOL, F(field), 0, 1, 0, NULL, NULL, def, help }
#define DBL(sec, name, field, lo, hi, def, help)     { sec, name, KEY_DOUBLE, F(field), lo, hi, 0, NULL, NULL, def, help }
#define STR(sec, name, field, check, def, help)      { sec, name, KEY_STRING, F(field), 0, 0, 0, NULL, check, def, help }
#define ENUM(sec, name, field, allowed, def, help)   { sec, name, KEY_ENUM, F(field), 0, 0, 0, allowed, NULL, def, help }
#define HYP(name, lo, hi, def, help)                 DBL("hyp", #name, hyp.name, lo, hi, def, help)
// a hyp key yolov9 acts on and ours does not: check refuses every value but the one without effect
#define HYPC(name, lo, hi, check, def, help) { "hyp", #name, KEY_DOUBLE, F(hyp.name), lo, hi, 0, NULL, check, def, help }

const Key cfg_keys[] = {
    INT ("model", "nc",             nc,             0, 100000, "0",
         "classes; 0: the dataset's count"),
    DBL ("model", "depth_multiple", depth_multiple, 0.01, 10, "1.0",
         "scales the repeats column of the layer table"),
    DBL ("model", "width_multiple", width_multiple, 0.01, 10, "1.0",
         "scales the channel counts of the layer table"),
    INT ("model", "max_channels",   max_channels,   0, 65536, "0",
         "channel counts are capped at this before width scaling; 0: no cap"),
    INT ("model", "reg_max",        reg_max,        1, 16, "16",
         "DFL bins of the head (16: DDetect; 1: YOLO26's Detect)"),

    STR ("train", "data",         data,         NULL, "",
         "data.yaml of the dataset (a split: image folder, .txt list, COCO .json or VOC root); empty: the built-in synthetic set; synth-small: its small-image set"),
    STR ("train", "hyp",          hyp_file,     NULL, "",
         "a hyp.scratch-high.yaml style file loaded over [hyp]"),
    STR ("train", "weights",      weights,      NULL, "",
         "initial weights (.safetensors, or a yolov9 or Ultralytics .pt): what matches transfers; empty: from scratch"),
    STR ("train", "resume",       resume,       NULL, "",
         "a run folder to continue, or 1 (bare --resume): the latest run"),
    STR ("train", "device",       device,       check_device, "",
         "cpu, cpu:N (N CPU devices), 0, 0,1 or [0,1] (GPUs); empty: every GPU present, else cpu"),
    ENUM("train", "precision",    precision,    "bf16|tf32|fp32", "bf16",
         "bf16, tf32 or fp32 arithmetic on the GPU; the CPU computes in fp32 (it changes nothing there)"),
    ENUM("train", "cache",        cache,        "|ram|none", "",
         "ram: keep the training images in memory, decoded (with augment=gpu where the GPUs decode JPEGs: the "
         "files, compressed)"),
    ENUM("train", "augment",      augment,      "cpu|gpu", "cpu",
         "where training samples' pixels are made: cpu (the loader's workers) or gpu (the workers decode and draw, "
         "each device makes its micro-batch's pixels, the same bytes; the CPU backend makes them in the step)"),
    DBL ("train", "val_cache_mb", val_cache_mb, 0, 1e9, "1024",   // core/eval/val_batch.c's ValCache budget
         "megabytes of validation batches kept as loaded between validation passes (0: none)"),
    STR ("train", "project",      project,      check_project, "runs/train",
         "the folder that holds the run folders"),
    STR ("train", "name",         name,         check_name, "exp",
         "the run folder's name (exp, exp2, ... when taken)"),
    ENUM("train", "optimizer",    optimizer,    "auto|SGD|MuSGD|AdamW|Adam", "auto",
         "auto, SGD, MuSGD (YOLO26 only), AdamW or Adam"),
    STR ("train", "freeze",       freeze,       check_freeze, "",
         "N: layers 0..N-1 do not train; [i,j,...]: those layers"),
    INT ("train", "epochs",       epochs,       1, 1000000, "300",
         "epochs to train"),
    INTX("train", "batch",        batch,        1, 1048576, "-1 (auto: the largest that fits the GPU)", "64",
         "images per step, all devices together; -1: the largest that fits"),
    INTM("train", "imgsz",        imgsz,        32, 8192, 32, "640",
         "input size in pixels, a multiple of 32"),
    INT ("train", "workers",      workers,      0, 1024, "8",
         "data loading threads"),
    INT ("train", "seed",         seed,         0, INT_MAX, "0",
         "seed of every random choice"),
    BOOL("train", "exist_ok",     exist_ok,     "0",
         "reuse project/name instead of making name2, name3, ..."),
    INT ("train", "close_mosaic", close_mosaic, 0, 1000000, "15",
         "the last N epochs train without mosaic (a shorter run keeps it)"),
    INT ("train", "min_items",    min_items,    0, 1000000, "0",
         "drop training images with fewer labels than this"),
    INT ("train", "patience",     patience,     0, 1000000, "100",
         "stop after this many epochs without a better fitness; 0: never"),
    INT ("train", "save_period",  save_period,  -1, 1000000, "-1",
         "also save weights at epochs 0, N, 2N, ...; -1: off"),
    BOOL("train", "strict",       strict,       "0",
         "a bad label or image stops the run instead of being skipped (every image is decoded first)"),
    BOOL("train", "cos_lr",       cos_lr,       "0",
         "cosine learning-rate schedule instead of linear"),
    BOOL("train", "rect",         rect,         "0",   // train.py --rect (io/loader.h rect_order); val is always rect
         "1: rect batches as train.py --rect (by aspect ratio; no mosaic, no shuffle); val is always rect"),
    BOOL("train", "multi_scale",  multi_scale,  "0",   // train.py --multi-scale (core/trainer/train_shapes.c)
         "1: each batch resized to 0.5x..1.5x imgsz, steps of 32 (train.py --multi-scale)"),
    BOOL("train", "tensorboard",  tensorboard,  "1",   // RUN/events.out.tfevents.* (core/train/train_tb.h)
         "write TensorBoard event files into the run folder"),
    BOOL("train", "single_cls",   single_cls,   "0",
         "train every class as one (class 0), as train.py --single-cls"),
    DBL ("train", "fraction",     fraction,     0, 1, "1.0",
         "train on the first fraction of the sorted train images (Ultralytics' fraction)"),
    DBL ("train", "label_smoothing", label_smoothing, 0, 1, "0.0",
         "changes nothing: train.py's --label-smoothing, whose targets yolov9's loss never reads; YOLO26's loss has none"),
    BOOL("train", "noval",        noval,        "0",
         "validate after the last epoch only (train.py --noval)"),
    BOOL("train", "noplots",      noplots,      "0",
         "draw no pictures and no plots (train.py --noplots)"),

    ENUM("parallel", "reduce",  reduce,  "device0|sharded", "device0",
         "several GPUs: gradients summed on device0, or sharded"),
    ENUM("parallel", "loss_on", loss_on, "local|device0", "local",
         "several GPUs: the loss on each device, or on device0"),
    STR ("parallel", "split",   split,   check_split, "even",
         "several GPUs: the batch split: even, auto or w0,w1,..."),
    BOOL("parallel", "sync_bn", sync_bn, "0",
         "several devices: every BN normalises over the whole batch, not each device's part (--sync-bn)"),

    DBL ("val", "conf",      conf,      0, 1, "0.001",
         "score threshold of NMS (val.py's and detect.py's --conf-thres)"),
    DBL ("val", "iou",       iou,       0, 1, "0.7",
         "IoU threshold of NMS (--iou-thres)"),
    INT ("val", "max_det",   max_det,   1, 100000, "300",
         "detections kept per image (--max-det)"),
    ENUM("val", "val_split", val_split, "val|test", "val",
         "the data.yaml split to evaluate: val or test"),
    BOOL("val", "save_json", save_json, "0",
         "write predictions.json, COCO results (--save-json)"),
    BOOL("val", "save_txt",  save_txt,  "0",
         "write labels/STEM.txt per image: class cx cy w h, normalised (--save-txt)"),
    BOOL("val", "save_conf", save_conf, "0",
         "with save_txt=1: each label row ends with the score (--save-conf)"),

    // hyp.scratch-high.yaml [WongKinYiu/yolov9 data/hyps/hyp.scratch-high.yaml]
    HYP(lr0, 0, 10, "0.01",
         "initial learning rate"),
    HYP(lrf, 0, 10, "0.01",
         "final learning rate, a fraction of lr0"),
    HYP(momentum, 0, 1, "0.937",
         "SGD momentum / Adam beta1"),
    HYP(weight_decay, 0, 1, "0.0005",
         "weight decay"),
    HYP(warmup_epochs, 0, 1000, "3.0",
         "warm-up epochs (fractions allowed)"),
    HYP(warmup_momentum, 0, 1, "0.8",
         "momentum at the start of warm-up"),
    HYP(warmup_bias_lr, 0, 10, "0.1",
         "bias learning rate at the start of warm-up"),
    HYP(box, 0, 1000, "7.5",
         "box (IoU) loss gain"),
    HYP(cls, 0, 1000, "0.5",
         "class loss gain"),
    HYP(dfl, 0, 1000, "1.5",
         "distribution focal loss gain"),
    HYPC(cls_pw, 0, 1000, check_cls_pw, "1.0",
         "changes nothing: yolov9's class BCE pos_weight, which our loss lacks; only 1.0 is accepted"),
    HYP(obj, 0, 1000, "0.7",
         "changes nothing: read by no part of yolov9's loss_tal.py nor of ours (kept so hyp.scratch-high.yaml loads)"),
    HYP(obj_pw, 0, 1000, "1.0",
         "changes nothing: read by no part of yolov9's loss_tal.py nor of ours (kept so hyp.scratch-high.yaml loads)"),
    HYP(iou_t, 0, 1, "0.20",
         "changes nothing: read by no part of yolov9's loss_tal.py nor of ours (kept so hyp.scratch-high.yaml loads)"),
    HYP(anchor_t, 0, 1000, "5.0",
         "changes nothing: read by no part of yolov9's loss_tal.py nor of ours (kept so hyp.scratch-high.yaml loads)"),
    HYPC(fl_gamma, 0, 100, check_fl_gamma, "0.0",
         "changes nothing: yolov9's focal loss gamma, which our loss lacks; only 0.0 (off) is accepted"),
    HYP(hsv_h, 0, 1, "0.015",
         "hue augmentation (fraction)"),
    HYP(hsv_s, 0, 1, "0.7",
         "saturation augmentation (fraction)"),
    HYP(hsv_v, 0, 1, "0.4",
         "value augmentation (fraction)"),
    HYP(degrees, 0, 180, "0.0",
         "rotation (+/- degrees)"),
    HYP(translate, 0, 1, "0.1",
         "translation (+/- fraction)"),
    HYP(scale, 0, 10, "0.9",
         "scale (+/- gain)"),
    HYP(shear, 0, 180, "0.0",
         "shear (+/- degrees)"),
    HYP(perspective, 0, 1, "0.0",
         "perspective (+/- fraction)"),
    HYP(flipud, 0, 1, "0.0",
         "vertical flip probability"),
    HYP(fliplr, 0, 1, "0.5",
         "horizontal flip probability"),
    HYP(mosaic, 0, 1, "1.0",
         "mosaic probability"),
    HYP(mixup, 0, 1, "0.15",
         "mixup probability"),
    HYP(copy_paste, 0, 1, "0.3",
         "changes nothing here: copy-paste needs polygon labels, which are read as boxes (a run whose labels hold polygons says so)"),
};
const int cfg_n_keys = sizeof cfg_keys / sizeof cfg_keys[0];
_Static_assert(sizeof cfg_keys / sizeof cfg_keys[0] <= CFG_MAX_KEYS, "raise CFG_MAX_KEYS");

const char *const cfg_sections[] = { "model", "backbone", "head", "train", "parallel", "val", "hyp", "data", NULL };

int section_known(const char *section) {
    for (int i = 0; cfg_sections[i]; i++)
        if (!strcmp(cfg_sections[i], section)) return 1;
    return 0;
}

const Key *key_find(const char *section, const char *name) {
    for (int i = 0; i < cfg_n_keys; i++)
        if ((!section || !strcmp(cfg_keys[i].section, section)) && !strcmp(cfg_keys[i].name, name))
            return &cfg_keys[i];
    return NULL;
}

void unquote(const char *value, char *out, size_t n) {
    size_t len = strlen(value);
    if (len >= 2 && (value[0] == '\'' || value[0] == '"') && value[len - 1] == value[0])
        snprintf(out, n, "%.*s", (int)(len - 2), value + 1);
    else
        snprintf(out, n, "%s", value);
}

// ---- parsing one value: 0, or -1 with `why` = "problem; what is allowed"

static int parse_int(const Key *k, const char *s, int *out, char *why, size_t n) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    char extra[128] = "";
    if (k->allowed) snprintf(extra, sizeof extra, ", or %s", k->allowed);
    if (end == s || *end) {
        snprintf(why, n, "not an integer; allowed: integers from %.0f to %.0f%s", k->lo, k->hi, extra);
        return -1;
    }
    if (k->allowed && errno != ERANGE && v == strtol(k->allowed, NULL, 10)) { *out = (int)v; return 0; }
    if (errno == ERANGE || v < k->lo || v > k->hi) {
        snprintf(why, n, "out of range; allowed: integers from %.0f to %.0f%s", k->lo, k->hi, extra);
        return -1;
    }
    if (k->multiple && v % k->multiple) {
        long below = v / k->multiple * k->multiple, above = below + k->multiple;
        if (below < k->lo) snprintf(why, n, "not a positive multiple of %d; nearest valid value: %ld", k->multiple, above);
        else snprintf(why, n, "not a positive multiple of %d; nearest valid values: %ld or %ld", k->multiple, below, above);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_bool(const char *s, int *out, char *why, size_t n) {
    static const char *const yes[] = { "1", "true", "yes", "on" }, *const no[] = { "0", "false", "no", "off" };
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) { *out = 1; return 0; }
        if (!strcasecmp(s, no[i])) { *out = 0; return 0; }
    }
    snprintf(why, n, "not a yes/no value; allowed: 0 or 1 (also false/true, no/yes, off/on)");
    return -1;
}

static int parse_double(const Key *k, const char *s, double *out, char *why, size_t n) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !isfinite(v)) {
        snprintf(why, n, "not a number; allowed: numbers from %g to %g", k->lo, k->hi);
        return -1;
    }
    if (v < k->lo || v > k->hi) {
        snprintf(why, n, "out of range; allowed: numbers from %g to %g", k->lo, k->hi);
        return -1;
    }
    if (k->check && k->check(s, why, n)) return -1;
    *out = v;
    return 0;
}

// The '|'-separated words of `allowed`, written "a, b, c" ("" shown as "").
static void allowed_list(const char *allowed, char *buf, size_t n) {
    size_t o = 0;
    for (const char *w = allowed;; ) {
        size_t len = strcspn(w, "|");
        o += snprintf(buf + o, n - o, "%s%s%.*s%s", w == allowed ? "" : ", ", len ? "" : "\"",
                      (int)len, w, len ? "" : "\"");
        if (o >= n || !w[len]) return;
        w += len + 1;
    }
}

static int parse_enum(const Key *k, const char *s, char *out, char *why, size_t n) {
    for (const char *w = k->allowed;; ) {
        size_t len = strcspn(w, "|");
        if (strlen(s) == len && !strncmp(s, w, len)) { snprintf(out, k->size, "%s", s); return 0; }
        if (!w[len]) break;
        w += len + 1;
    }
    char list[256];
    allowed_list(k->allowed, list, sizeof list);
    snprintf(why, n, "not an allowed word; allowed: %s", list);
    return -1;
}

static int parse_string(const Key *k, const char *s, char *out, char *why, size_t n) {
    if (strlen(s) >= k->size) {
        snprintf(why, n, "too long; allowed: at most %zu characters", k->size - 1);
        return -1;
    }
    if (k->check && k->check(s, why, n)) return -1;
    snprintf(out, k->size, "%s", s);
    return 0;
}

int key_set(Config *cfg, const Key *k, const char *value, const Where *at, Err *err) {
    char text[CFG_LINE_MAX + 1], why[512];
    unquote(value, text, sizeof text);
    void *field = (char *)cfg + k->offset;
    int rc;
    switch (k->type) {
    case KEY_INT:    rc = parse_int(k, text, field, why, sizeof why); break;
    case KEY_BOOL:   rc = parse_bool(text, field, why, sizeof why); break;
    case KEY_DOUBLE: rc = parse_double(k, text, field, why, sizeof why); break;
    case KEY_ENUM:   rc = parse_enum(k, text, field, why, sizeof why); break;
    default:         rc = parse_string(k, text, field, why, sizeof why); break;
    }
    // config_print writes `name = "value"`, a line config_load must read back (CFG_LINE_MAX); a
    // longer command-line value was once cut short silently by unquote
    size_t max = CFG_LINE_MAX - strlen(k->name) - 5;
    if (!rc && strlen(value) > max) {
        snprintf(why, sizeof why, "too long; allowed: at most %zu characters", max);
        rc = -1;
    }
    if (rc) {
        char w[CFG_PATH + 32];
        int cut = strlen(value) > 80;             // keep the problem visible after a long value
        return err_set(err, "%s: [%s] %s = %.*s%s: %s", config_where_text(at, w, sizeof w),
                       k->section, k->name, cut ? 60 : 80, value, cut ? "..." : "", why);
    }
    cfg->key_at[k - cfg_keys] = *at;
    return 0;
}

// ---- printing

void number_format(double v, char *buf, size_t n) {
    if (v == floor(v) && fabs(v) < 0x1p53) {       // a whole number in digits: 160, not 1.6e+02
        snprintf(buf, n, "%.0f", v);
        return;
    }
    char text[32];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(text, sizeof text, "%.*g", prec, v);
        if (strtod(text, NULL) == v) break;
    }
    snprintf(buf, n, "%s", text);
}

// 1 when a '#' follows whitespace (any isspace, as config.c's strip_comment sees it): a comment.
static int has_comment_mark(const char *v) {
    for (const char *p = strchr(v, '#'); p; p = strchr(p + 1, '#'))
        if (p > v && isspace((unsigned char)p[-1])) return 1;
    return 0;
}

void text_format(const char *v, char *buf, size_t n) {
    size_t len = strlen(v);
    int plain = len && !isspace((unsigned char)v[0]) && !isspace((unsigned char)v[len - 1])
                && !strchr("#;'\"", v[0]) && !has_comment_mark(v);
    if (plain) snprintf(buf, n, "%s", v);
    else if (strchr(v, '"')) snprintf(buf, n, "'%s'", v);
    else snprintf(buf, n, "\"%s\"", v);
}

void key_format(const Config *cfg, const Key *k, char *buf, size_t n) {
    const void *field = (const char *)cfg + k->offset;
    if (k->type == KEY_INT || k->type == KEY_BOOL) snprintf(buf, n, "%d", *(const int *)field);
    else if (k->type == KEY_DOUBLE) number_format(*(const double *)field, buf, n);
    else text_format(field, buf, n);
}

// ---- suggestions for misspelt keys

static int edit_distance(const char *a, const char *b) {
    int la = (int)strlen(a), lb = (int)strlen(b), row[64];
    if (la > 63 || lb > 63) return 99;
    for (int j = 0; j <= lb; j++) row[j] = j;
    for (int i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = i;
        for (int j = 1; j <= lb; j++) {
            int up = row[j], best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            diag = up;
            row[j] = best;
        }
    }
    return row[lb];
}

static int close_to(const char *name, const char *key) {
    size_t ln = strlen(name), lk = strlen(key);
    if (ln >= 3 && lk >= 3 && (strstr(name, key) || strstr(key, name))) return 1;
    return edit_distance(name, key) <= (ln <= 3 ? 1 : 2 + (int)ln / 6);
}

void key_suggest(const char *section, const char *name, char *buf, size_t n) {
    const Key *elsewhere = section ? key_find(NULL, name) : NULL;
    if (elsewhere) { snprintf(buf, n, "%s belongs in [%s]", name, elsewhere->section); return; }
    size_t o = snprintf(buf, n, "close keys:");
    int found = 0;
    for (int i = 0; i < cfg_n_keys && o < n; i++) {
        const Key *k = &cfg_keys[i];
        if ((section && strcmp(k->section, section)) || !close_to(name, k->name)) continue;
        o += snprintf(buf + o, n - o, "%s %s%s%s", found++ ? "," : "", section ? "" : k->section,
                      section ? "" : ".", k->name);
    }
    if (found) return;
    if (!section) { snprintf(buf, n, "no key is close; every key is listed in cfg/s.ini"); return; }
    o = snprintf(buf, n, "keys of [%s]:", section);
    for (int i = 0; i < cfg_n_keys && o < n; i++)
        if (!strcmp(cfg_keys[i].section, section))
            o += snprintf(buf + o, n - o, "%s %s", found++ ? "," : "", cfg_keys[i].name);
}

// ---- rules for free-form strings

// freeze: "" | N | [i,j,...] | i,j,... (layer indices)
int config_freeze_layers(const char *v, unsigned char *frozen, int max, char *why, size_t n) {
    static const char *forms = "allowed: N (the first N layers, as yolov9's --freeze N) or a list of layer indices "
                               "[0,1,2] or 0,1,2";
    memset(frozen, 0, (size_t)max);
    if (!*v) return 0;
    const char *p = v + (*v == '[');
    int list = *v == '[' || strchr(v, ',') != NULL;
    char *end;
    for (;;) {
        if (!isdigit((unsigned char)*p)) break;
        errno = 0;
        long k = strtol(p, &end, 10);
        if (errno || k > (list ? max - 1 : max)) {
            snprintf(why, n, "layer %.20s: the model has at most %d layers; %s", p, max, forms);
            return -1;
        }
        if (list) frozen[k] = 1;
        else for (long i = 0; i < k; i++) frozen[i] = 1;
        p = end;
        if (*p == ',') { p++; continue; }
        if ((*v == '[' && p[0] == ']' && !p[1]) || (*v != '[' && !*p)) return 0;
        break;
    }
    snprintf(why, n, "not a layer count or list; %s", forms);
    return -1;
}

static int check_freeze(const char *v, char *why, size_t n) {
    unsigned char frozen[CFG_MAX_LAYERS];
    return config_freeze_layers(v, frozen, CFG_MAX_LAYERS, why, n);
}

// "", cpu, cpu:N, or GPU ids: 0 | 0,1 | [0,1]
static int check_device(const char *v, char *why, size_t n) {
    static const char *forms = "allowed: \"\" (automatic), cpu, cpu:N (N CPU devices), "
                               "a GPU id such as 0, or a list 0,1 or [0,1] (also cuda, cuda:0, cuda:0,1)";
    if (!*v || !strcmp(v, "cpu") || !strcmp(v, "cuda")) return 0;
    if (!strncmp(v, "cuda:", 5) && v[5]) return check_device(v + 5, why, n);   // Ultralytics' cuda:0, cuda:0,1
    const char *p = v;
    char *end;
    if (!strncmp(v, "cpu:", 4)) {
        long k = strtol(v + 4, &end, 10);
        if (end != v + 4 && !*end && k >= 1 && k <= 1024) return 0;
        snprintf(why, n, "cpu:N needs a device count N from 1 to 1024; %s", forms);
        return -1;
    }
    int bracket = *p == '[';
    p += bracket;
    for (;;) {
        while (*p == ' ') p++;
        if (!isdigit((unsigned char)*p)) break;
        strtol(p, &end, 10);
        p = end;
        while (*p == ' ') p++;
        if (isdigit((unsigned char)*p)) {
            snprintf(why, n, "GPU ids are separated by commas; write device=0,1 (no spaces)");
            return -1;
        }
        if (*p == ',') { p++; continue; }
        if ((bracket && p[0] == ']' && !p[1]) || (!bracket && !*p)) return 0;
        break;
    }
    snprintf(why, n, "not a device list; %s", forms);
    return -1;
}

// A folder to write runs under: never empty (project= would write the run to /exp).
static int check_project(const char *v, char *why, size_t n) {
    if (*v) return 0;
    snprintf(why, n, "empty; name the folder for runs, e.g. project=runs/train");
    return -1;
}

// One folder name inside project: no '/', not "." or "..", so a run never lands outside project or
// in project itself, beside other runs' files.
static int check_name(const char *v, char *why, size_t n) {
    if (*v && !strchr(v, '/') && strcmp(v, ".") && strcmp(v, "..")) return 0;
    snprintf(why, n, "not a folder name; a run's folder is project/name: one name without '/', not '.' "
             "or '..', e.g. name=exp");
    return -1;
}

// yolov9's loss_tal.py makes cls_pw the class BCE's pos_weight and fl_gamma > 0 a FocalLoss around it;
// our loss has neither, so only the values without effect are taken rather than ignored.
static int check_cls_pw(const char *v, char *why, size_t n) {
    if (strtod(v, NULL) == 1.0) return 0;
    snprintf(why, n, "yolov9's pos_weight of the class BCE, which yolotrain's loss does not have; allowed: "
             "1.0 (no effect, the default)");
    return -1;
}

static int check_fl_gamma(const char *v, char *why, size_t n) {
    if (strtod(v, NULL) == 0.0) return 0;
    snprintf(why, n, "yolov9's focal loss gamma, and yolotrain's loss has no focal loss; allowed: 0.0 (off, "
             "the default)");
    return -1;
}

// even | auto | w0,w1,... (positive numbers, one per device)
static int check_split(const char *v, char *why, size_t n) {
    if (!strcmp(v, "even") || !strcmp(v, "auto")) return 0;
    const char *p = v;
    for (;;) {
        char *end;
        double w = strtod(p, &end);
        if (end == p || !isfinite(w) || w <= 0) break;
        p = end;
        while (*p == ' ') p++;
        if (!*p) return 0;
        if (*p++ != ',') break;
    }
    if (!strcmp(v, "val") || !strcmp(v, "test"))   // val.py's --task spelling
        snprintf(why, n, "split= is the multi-GPU batch split; to validate on the %s split of data.yaml write "
                 "val_split=%s", v, v);
    else snprintf(why, n, "not a split; allowed: even, auto, or positive weights per device such as 3,1");
    return -1;
}
