// help.c: `yolotrain MODE --help`: one line of meaning for every key of cfg/schema.c's table, and
// which keys each mode reads. A key without a line here is still listed (with its default).
#include "cfg/parts.h"

#include <stdlib.h>
#include <string.h>

static const struct { const char *name, *text; } key_help[] = {
    { "nc",             "classes; 0: the dataset's count" },
    { "depth_multiple", "scales the repeats column of the layer table" },
    { "width_multiple", "scales the channel counts of the layer table" },
    { "max_channels",   "channel counts are capped at this before width scaling; 0: no cap" },
    { "reg_max",        "DFL bins of the head (16: DDetect; 1: YOLO26's Detect)" },
    { "data",           "data.yaml of the dataset; empty: the built-in synthetic set; synth-small: its small-image set" },
    { "hyp",            "a hyp.scratch-high.yaml style file loaded over [hyp]" },
    { "weights",        "initial weights (.safetensors, or a yolov9 or Ultralytics .pt); empty: from scratch" },
    { "resume",         "a run folder to continue, or 1 (bare --resume): the latest run" },
    { "device",         "cpu, cpu:N (N CPU devices), 0, 0,1 or [0,1] (GPUs); empty: every GPU present, else cpu" },
    { "precision",      "bf16, tf32 or fp32 arithmetic on the GPU" },
    { "cache",          "ram: keep decoded images in memory" },
    { "val_cache_mb",   "megabytes of validation batches kept as loaded between validation passes (0: none)" },
    { "project",        "the folder that holds the run folders (val, detect: runs/val, runs/detect unless given on the command line)" },
    { "name",           "the run folder's name (exp, exp2, ... when taken)" },
    { "optimizer",      "auto, SGD, MuSGD (YOLO26 only), AdamW or Adam" },
    { "freeze",         "N: layers 0..N-1 do not train; [i,j,...]: those layers" },
    { "epochs",         "epochs to train" },
    { "batch",          "images per step, all devices together; -1: the largest that fits" },
    { "imgsz",          "input size in pixels, a multiple of 32" },
    { "workers",        "data loading threads" },
    { "seed",           "seed of every random choice" },
    { "exist_ok",       "reuse project/name instead of making name2, name3, ..." },
    { "close_mosaic",   "the last N epochs train without mosaic (a shorter run keeps it)" },
    { "min_items",      "drop training images with fewer labels than this" },
    { "patience",       "stop after this many epochs without a better fitness; 0: never" },
    { "save_period",    "also save weights at epochs 0, N, 2N, ...; -1: off" },
    { "strict",         "a bad label or image stops the run instead of being skipped (every image is decoded first)" },
    { "cos_lr",         "cosine learning-rate schedule instead of linear" },
    { "rect",           "1: rect batches as train.py --rect (by aspect ratio; no mosaic, no shuffle); val is always rect" },
    { "multi_scale",    "1: each batch resized to 0.5x..1.5x imgsz, steps of 32 (train.py --multi-scale)" },
    { "single_cls",     "train every class as one (class 0)" },
    { "fraction",       "train on the first fraction of the sorted train images" },
    { "label_smoothing", "accepted; changes nothing, as in both references" },
    { "noval",          "validate after the last epoch only" },
    { "noplots",        "draw no pictures and no plots" },
    { "tensorboard",    "write TensorBoard event files into the run folder" },
    { "reduce",         "several GPUs: gradients summed on device0, or sharded" },
    { "loss_on",        "several GPUs: the loss on each device, or on device0" },
    { "split",          "several GPUs: the batch split: even, auto or w0,w1,..." },
    { "conf",           "score threshold of NMS (detect: 0.25)" },
    { "iou",            "IoU threshold of NMS (detect: 0.45)" },
    { "max_det",        "detections kept per image" },
    { "val_split",      "the data.yaml split to evaluate: val or test" },
    { "save_json",      "write predictions.json (COCO format)" },
    { "save_txt",       "write labels/STEM.txt per image" },
    { "lr0",            "initial learning rate" },
    { "lrf",            "final learning rate, a fraction of lr0" },
    { "momentum",       "SGD momentum / Adam beta1" },
    { "weight_decay",   "weight decay" },
    { "warmup_epochs",  "warm-up epochs (fractions allowed)" },
    { "warmup_momentum", "momentum at the start of warm-up" },
    { "warmup_bias_lr", "bias learning rate at the start of warm-up" },
    { "box",            "box (IoU) loss gain" },
    { "cls",            "class loss gain" },
    { "dfl",            "distribution focal loss gain" },
    { "cls_pw",         "yolov9's class BCE pos_weight; only 1 (no effect): our loss has none" },
    { "obj",            "unused, as in yolov9's loss" },
    { "obj_pw",         "unused, as in yolov9's loss" },
    { "iou_t",          "unused, as in yolov9's loss" },
    { "anchor_t",       "unused, as in yolov9's loss" },
    { "fl_gamma",       "yolov9's focal loss gamma; only 0 (off): our loss has none" },
    { "hsv_h",          "hue augmentation (fraction)" },
    { "hsv_s",          "saturation augmentation (fraction)" },
    { "hsv_v",          "value augmentation (fraction)" },
    { "degrees",        "rotation (+/- degrees)" },
    { "translate",      "translation (+/- fraction)" },
    { "scale",          "scale (+/- gain)" },
    { "shear",          "shear (+/- degrees)" },
    { "perspective",    "perspective (+/- fraction)" },
    { "flipud",         "vertical flip probability" },
    { "fliplr",         "horizontal flip probability" },
    { "mosaic",         "mosaic probability" },
    { "mixup",          "mixup probability" },
    { "copy_paste",     "copy-paste probability (needs polygon labels: no effect here, said when present)" },
};

// The keys each mode reads: whole sections ("[train]") and single keys.
static const struct { const char *mode, *keys; } mode_keys[] = {
    { "train",  "[model] [train] [parallel] [hyp]" },
    { "val",    "data weights device precision batch imgsz workers cache project name exist_ok single_cls noplots [val]" },
    { "detect", "weights data device precision imgsz project name exist_ok max_det save_txt" },
    { "export", "weights imgsz" },
    { "info",   "imgsz nc depth_multiple width_multiple" },
    { "check",  "data imgsz workers min_items strict project" },
    { "synth",  "seed" },
    { "switches", "" },   // no keys: the YT_* environment variables (core/base/switches.h)
};

static const char *help_of(const char *name) {
    for (size_t i = 0; i < sizeof key_help / sizeof key_help[0]; i++)
        if (!strcmp(key_help[i].name, name)) return key_help[i].text;
    return "";
}

// 1 when the word list `keys` names k or k's section.
static int listed(const char *keys, const Key *k) {
    char sec[40];
    snprintf(sec, sizeof sec, "[%s]", k->section);
    for (const char *w = keys; *w;) {
        size_t len = strcspn(w, " ");
        if ((strlen(k->name) == len && !strncmp(w, k->name, len)) || (strlen(sec) == len && !strncmp(w, sec, len)))
            return 1;
        w += len;
        while (*w == ' ') w++;
    }
    return 0;
}

void config_help(const char *mode, FILE *f) {
    const char *keys = NULL;
    for (size_t i = 0; i < sizeof mode_keys / sizeof mode_keys[0]; i++)
        if (!strcmp(mode_keys[i].mode, mode)) keys = mode_keys[i].keys;
    if (!keys) return;
    Config *cfg = xmalloc(sizeof *cfg);
    config_defaults(cfg);
    char value[CFG_LINE_MAX + 1];
    for (int s = 0; cfg_sections[s]; s++) {
        int header = 0;
        for (int i = 0; i < cfg_n_keys; i++) {
            const Key *k = &cfg_keys[i];
            if (strcmp(k->section, cfg_sections[s]) || !listed(keys, k)) continue;
            if (!header++) fprintf(f, "[%s]\n", k->section);
            key_format(cfg, k, value, sizeof value);
            char kv[CFG_LINE_MAX + 160];
            snprintf(kv, sizeof kv, "%s=%s", k->name, value);
            fprintf(f, "  %-26s %s\n", kv, help_of(k->name));
        }
    }
    free(cfg);
}
