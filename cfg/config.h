// config.h: the effective configuration of a run: the model described layer by layer, the
// hyperparameters and the training settings, read from an INI file (inih) plus command-line
// overrides. Every value remembers the file:line it came from so later checks can cite it.
#pragma once
#include "core/base/util.h"

#define CFG_MAX_LAYERS 64
#define CFG_MAX_FROM   8
#define CFG_MAX_ARGS   8
#define CFG_PATH       1024
#define CFG_MAX_KEYS   96          // entries of the key table in cfg/schema.c
#define CFG_LINE_MAX   1000        // longest INI line, comment included

typedef struct { char file[CFG_PATH]; int line; } Where;   // line 0: default; file "command line"

// One row of the model table, written in the INI as in YOLOv9's yaml:
//   [backbone] / [head]:   <index> = <from>, <number>, <module>, [<args>]
//   e.g.  4 = -1, 1, RepNCSPELAN4, [128, 128, 64, 3]
//        11 = [-1, 6], 1, Concat, [1]
//        22 = [15, 18, 21], 1, DDetect, [nc]
typedef struct {
    int    index;                    // layer number, 0-based, consecutive
    int    from[CFG_MAX_FROM];       // as written: -1 = previous layer, else an absolute index
    int    n_from;
    int    number;                   // repeats column (depth-scaled by the model builder)
    char   module[32];               // Conv, ELAN1, AConv, RepNCSPELAN4, SPPELAN, Upsample, Concat, DDetect, ...
    double args[CFG_MAX_ARGS];       // numeric args; `nc` is replaced by the model's nc, `None` by NAN
    int    n_args;
    char   sarg[32];                 // the string argument where one is written ('nearest'), else "";
                                     // it is the last arg written and not counted in n_args
    unsigned nc_mask;                // bit i set: args[i] was written `nc` (config_set_nc rewrites it)
    int    list;                     // 1: the args were written as one nested list, [[64, 128]] (CBLinear,
                                     // CBFuse); args[] holds its entries
    Where  at;
} LayerSpec;

typedef struct {                     // [hyp]: hyp.scratch-high.yaml keys and values
    double lr0, lrf, momentum, weight_decay, warmup_epochs, warmup_momentum, warmup_bias_lr;
    double box, cls, dfl, cls_pw, obj, obj_pw, iou_t, anchor_t, fl_gamma;
    double hsv_h, hsv_s, hsv_v, degrees, translate, scale, shear, perspective;
    double flipud, fliplr, mosaic, mixup, copy_paste;
} Hyp;

typedef struct {
    char   file[CFG_PATH];           // the INI file read
    // [model]
    int    nc;                       // classes; 0 = take from the dataset
    double depth_multiple, width_multiple;
    int    max_channels;             // channel counts are capped at this before width scaling (YOLO26's
                                     // scales); 0: no cap (YOLOv9)
    int    reg_max;
    LayerSpec layers[CFG_MAX_LAYERS];
    int    n_layers;
    int    n_backbone;               // layers[0, n_backbone) came from [backbone], the rest from [head]
    // [train]
    char   data[CFG_PATH];           // data.yaml path; "" = the built-in synthetic dataset
    char   hyp_file[CFG_PATH];       // hyp=FILE.yaml: loaded over [hyp]
    char   weights[CFG_PATH];        // initial weights (safetensors), "" = from scratch
    char   resume[CFG_PATH];         // "" | a run folder to continue | 1: the latest run
    char   device[256];              // "", "cpu", "cpu:2", "0", "0,1", "[0,1]"
    char   precision[16];            // bf16 | tf32 | fp32
    char   cache[16];                // "" | ram
    char   augment[8];               // cpu | gpu: where training pixels are made (issue 37)
    char   project[CFG_PATH], name[256];
    char   optimizer[16];            // auto | SGD | MuSGD | AdamW | Adam (gelan: auto = SGD, Adam/AdamW as
                                     // train.py smart_optimizer; YOLO26: core/trainer/family_yolo26.c)
    char   freeze[256];              // "" | N: layers 0..N-1 | [i,j,...]: those layers (core/spec/transfer.h)
    int    epochs, batch, imgsz, workers, seed, exist_ok, close_mosaic, min_items, patience;
    int    save_period, strict, cos_lr, rect, tensorboard;
    int    single_cls;               // every class 0, nc 1, names ['item'] (train.py --single-cls)
    double fraction;                 // train on the first round(fraction * n) images (Ultralytics)
    double val_cache_mb;             // megabytes of validation batches kept between passes (0: none)
    double label_smoothing;          // train.py --label-smoothing: accepted, no effect (as loss_tal.py)
    int    noval, noplots;           // validate only after the last epoch; no pictures or plots (train.py)
    int    multi_scale;              // train.py --multi-scale: not built, refused by training (as rect=1)
    // [parallel] (several devices: core/devices/multi.h)
    char   reduce[16];               // device0 | sharded
    char   loss_on[16];              // local | device0
    char   split[256];               // even | auto | w0,w1,...
    int    sync_bn;                  // 1: SyncBatchNorm across the devices (yolov9's --sync-bn)
    // [val] (yolotrain val; the validation inside training keeps val.py's 0.001, 0.7, 300)
    double conf, iou;                // NMS: candidate score > conf, suppress IoU > iou
    int    max_det, save_json, save_txt, save_conf;   // save_conf: labels/STEM.txt rows end with the score
    char   val_split[8];             // val | test: the data.yaml split to evaluate
    Hyp    hyp;
    // [data]: the same keys a data.yaml has; io/dataset.c interprets them. A value quoted whole
    // (`names = 'a, b'`) is kept without its quotes and marked quoted: one YAML scalar, never split.
    int    n_data_kv;
    struct { char key[64]; char value[CFG_PATH]; Where at; int quoted; } data_kv[32];
    Where  key_at[CFG_MAX_KEYS];     // where each key of the table got its value (see config_where)
} Config;                            // about 0.25 MB: allocate it, or keep it static, in threads

// Read `path`, then apply overrides (argv-style: "key=value" or "--key" "value"). Returns 0, or -1
// with err naming file:line (or the override), the text, and what is allowed.
// Precedence: defaults < the INI < the hyp=FILE.yaml keys < command-line overrides. Overrides are
// "key=value", "--key value" or "--key=value"; key may be "section.key" ("data.path" sets a [data]
// key); '-' in a key reads as '_'. Their Where is file "command line", line = position in argv + 1.
// path may be NULL: defaults and overrides only. In the INI, `#` and `;` start a comment at a line
// start or after a blank (a `#` inside quotes is kept); lines hold at most CFG_LINE_MAX characters.
// Bare boolean flags: `--exist-ok` sets 1 (the next argument is taken only when it is a yes/no word),
// `--resume` alone means the latest run. yolov9's and Ultralytics' spellings map to our keys:
// --batch-size = batch, --img / --img-size = imgsz; `model=FILE` or `--cfg FILE` names the config
// file when path is NULL (naming another one as well is an error). A relative path that is not
// there is looked for among the installed configs, BIN/../share/yolotrain/cfg/ then .../yolotrain/
// of the running binary (make install); cfg->file is the file read.
int  config_load(const char *path, int argc, char **argv, Config *cfg, Err *err);
// A run's args.ini (resume=), then the overrides: as config_load, but the hyp= file named in it is not
// read again, as its [hyp] section already holds the values it gave (the file may have moved since);
// a hyp= among the overrides is read.
int  config_load_run(const char *ini, int argc, char **argv, Config *cfg, Err *err);
// The config file that model=FILE / --cfg FILE among the overrides names, into *path (unchanged
// when none does). -1 with err when *path is already another file.
int  config_model_arg(int argc, char **argv, const char **path, Err *err);
// `yolotrain MODE --help`: the keys MODE (train, val, detect, export, info, check) reads, each with
// its default and one line of meaning (the key table's, or the mode's own where it differs: val's
// project=runs/val, detect's conf=0.25, ...), grouped by section.
void config_help(const char *mode, FILE *f);
// The help's tables agree with the key table: every key has a help line, every key a mode lists exists,
// every mode's own default or help is for a key that mode reads. 0, or -1 with why (test_config).
int  config_help_check(char *why, size_t n);
// Where a key got its value (for messages of later checks), or NULL for an unknown key. key is
// "name" or "section.name"; "data.KEY" finds a [data] key. line 0 means the built-in default.
const Where *config_where(const Config *cfg, const char *key);
// Print the effective configuration as INI (args.ini; the start-up summary). config_load reads it
// back to the same Config (Where aside).
void config_print(const Config *cfg, FILE *f);

// Every key at its default, no layers, no [data] keys.
void config_defaults(Config *cfg);
// Set the class count and rewrite every layer arg written `nc` (io/ calls it once the dataset's
// names are known, when [model] nc = 0).
void config_set_nc(Config *cfg, int nc);
// "cfg/s.ini:12", "command line argument 3" or "default", into buf; returns buf.
const char *config_where_text(const Where *w, char *buf, size_t n);

// config_freeze_layers: the layers freeze=v names into frozen[0..max) (1 = frozen): "" none, N the
// first N (yolov9's --freeze N), [i,j,...] or i,j,... those. -1 with why on bad text or an index >= max.
int config_freeze_layers(const char *v, unsigned char *frozen, int max, char *why, size_t n);
// The value of a [data] key, or NULL when it was not given.
const char *config_data_get(const Config *cfg, const char *key);
// config_data_set: set [data] key to value as the command line would. Returns 0, or -1 with err.
int config_data_set(Config *cfg, const char *key, const char *value, Err *err);
