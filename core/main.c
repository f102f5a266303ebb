// main.c: the command line. `yolotrain CONFIG [overrides]` trains; other modes are a word first.
// Exit status: 0 done, 1 a failure of the machine (I/O, memory), 2 bad input (config, data, usage),
// 128 + signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP) a run stopped by a signal, saved when it could be.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cfg/config.h"
#include "core/spec/backend.h"
#include "core/eval/detect.h"
#include "core/eval/export.h"
#include "core/spec/model.h"
#include "core/base/switches.h"
#include "core/train/outdir.h"
#include "core/train/train.h"
#include "core/eval/val.h"
#include "io/check.h"
#include "io/synth.h"
#include "io/text.h"

#ifndef YT_VERSION
#define YT_VERSION "unknown"
#endif

static void usage(FILE *f) {
    fprintf(f,
        "usage: yolotrain CONFIG.ini [key=value | --key value ...]   train (cfg/s.ini: gelan-s)\n"
        "       yolotrain resume=RUN_FOLDER|1 [overrides]                continue a stopped run exactly\n"
        "       yolotrain info CONFIG.ini [overrides]                  layer table, parameters, FLOPs\n"
        "       yolotrain check [CONFIG.ini] [data=FILE.yaml] [...]    validate a dataset, summarise it\n"
        "       yolotrain val CONFIG.ini weights=FILE [data=FILE.yaml]  P, R, mAP50, mAP50-95 on the val split\n"
        "       yolotrain detect|predict CONFIG.ini weights=FILE source=IMAGE|DIR|LIST.txt [conf=0.25] [iou=0.45]\n"
        "       yolotrain export weights=RUN/weights/best.safetensors [out=FILE]  yolov9-s -> gelan-s\n"
        "       yolotrain export CONFIG.ini weights=FILE format=onnx [dynamic=1|batch=N] [imgsz=640] [out=FILE.onnx]\n"
        "       yolotrain synth [overrides]                            regenerate the built-in dataset\n"
        "       yolotrain switches                                    the YT_* environment variables and their values\n"
        "       yolotrain --version                                   the version and what this build has\n"
        "Overrides name any key of the config (epochs=10, --batch 16, device=cpu, data=coco128.yaml); a yes/no\n"
        "key alone is a flag (--exist-ok, --cos-lr); yolov9's --batch-size, --img, --cfg FILE and Ultralytics'\n"
        "model=FILE work too. `yolotrain MODE --help` lists the keys of a mode (train, val, detect, export,\n"
        "info, check) with their defaults.\n");
}

// The usage of a mode and the options it reads besides the config keys (config_help lists those, with
// the mode's own defaults: cfg/help.c).
static const struct { const char *mode, *text; } mode_own[] = {
    { "train",  "yolotrain [train] CONFIG.ini|model=CONFIG.ini [key=value | --key value | --flag ...]\n" },
    { "val",    "yolotrain val [CONFIG.ini] weights=FILE [data=FILE.yaml] [key=value ...]\n"
                "  (no CONFIG.ini: the run's args.ini beside weights=RUN/weights/FILE)\n" },
    { "detect", "yolotrain detect|predict [CONFIG.ini] weights=FILE source=IMAGE|DIR|LIST.txt [key=value ...]\n"
                "  (no CONFIG.ini: the run's args.ini beside weights=RUN/weights/FILE)\n"
                "  source=                    an image, a folder of images or a .txt list of image paths\n"
                "  nosave=0                   do not write the pictures with boxes (detect.py's --nosave)\n" },
    { "export", "yolotrain export [CONFIG.ini] weights=FILE [format=safetensors|onnx] [out=FILE]\n"
                "  format=safetensors         safetensors (yolov9-s -> gelan-s) or onnx\n"
                "  out=                       the output file (default: next to the weights); never replaces a file\n"
                "  dynamic=0                  onnx: a dynamic batch size\n"
                "  batch=1                    onnx: the fixed batch size of the input\n" },
    { "info",   "yolotrain info CONFIG.ini [key=value ...]: layer table, parameters, FLOPs\n" },
    { "check",  "yolotrain check [CONFIG.ini] [data=FILE.yaml] [key=value ...]: validate a dataset\n" },
    { "synth",  "yolotrain synth [seed=N]: regenerate the built-in dataset under data/synth/\n" },
    { "switches", "yolotrain switches: every YT_* environment variable (variants, diagnostics, test hooks, user\n"
                  "settings) with its value here, its default, what it selects and the tests that pin it\n" },
};

static int is_help(const char *a) { return !strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "help"); }

// `yolotrain MODE --help`: 1 when argv holds --help (printed), else 0.
static int mode_help(const char *mode, int argc, char **argv) {
    int asked = 0;
    for (int i = 0; i < argc; i++) asked |= is_help(argv[i]);
    if (!asked) return 0;
    for (size_t i = 0; i < sizeof mode_own / sizeof mode_own[0]; i++)
        if (!strcmp(mode_own[i].mode, mode)) fputs(mode_own[i].text, stdout);
    if (!strcmp(mode, "switches")) return 1;     // reads no config keys
    printf("keys (key=default  meaning; also --key value, and --key alone for a yes/no key):\n");
    config_help(mode, stdout);
    return 1;
}

static int version(void) {
    printf("yolotrain %s\nbuild: CUDA %s, cuDNN %s, FreeType %s\n", YT_VERSION,
           backend_gpu_get() ? "yes" : "no", backend_built_with_cudnn() ? "yes" : "no",
           text_built_with_freetype() ? "yes" : "no");
    int set = 0;
    for (int s = 0; s < SW_COUNT; s++) set += switch_str((Switch)s) != NULL;
    printf("switches: %d YT_* environment variables, %d set here (yolotrain switches lists them)\n", SW_COUNT, set);
    return 0;
}

static int cmd_switches(int argc, char **argv, Config *cfg) {
    if (argc > 0) { fprintf(stderr, "yolotrain switches: takes no arguments (%s)\n", argv[0]); return 2; }
    switches_print(stdout);
    return 0;
}

// The config file is the first argument unless it looks like an override; the rest are overrides.
static int load(int argc, char **argv, Config *cfg) {
    const char *path = NULL;
    if (argc > 0 && !strchr(argv[0], '=') && strncmp(argv[0], "--", 2)) { path = argv[0]; argc--; argv++; }
    Err err;
    if (config_load(path, argc, argv, cfg, &err)) {
        fprintf(stderr, "yolotrain: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int cmd_info(int argc, char **argv, Config *cfg) {
    if (load(argc, argv, cfg)) return 2;
    if (!cfg->n_layers) { fprintf(stderr, "yolotrain info: name a model config, e.g. cfg/s.ini\n"); return 2; }
    Model m;
    Err err;
    if (model_build(cfg, 1, cfg->imgsz, &m, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 2; }
    model_print_info(&m, cfg, stdout);
    model_free(&m);
    return 0;
}

// val, detect and check name their folder as val.py and detect.py: name= and exist_ok= from the command line,
// else exp and 0; a config's (a run's args.ini: the training run's name, often exist_ok = 1) are for
// training, as its project= is (core/train/outdir.h).
static void eval_outdir_keys(Config *cfg) {
    const Where *w = config_where(cfg, "name");
    if (!w || strcmp(w->file, "command line")) snprintf(cfg->name, sizeof cfg->name, "exp");
    w = config_where(cfg, "exist_ok");
    if (!w || strcmp(w->file, "command line")) cfg->exist_ok = 0;
}

// check_batch.jpg goes to runs/check/exp, exp2, ... (project=, name=, exist_ok=1 from the command line),
// made only once the training split has opened: a missing dataset leaves nothing behind.
static int check_picture_path(const Config *cfg, char *path, size_t n, Err *err) {
    char dir[2 * CFG_PATH + 16];
    if (outdir_make(cfg, "runs/check", 0, dir, sizeof dir, err)) return -1;
    snprintf(path, n, "%s/check_batch.jpg", dir);
    return 0;
}

static int cmd_check(int argc, char **argv, Config *cfg) {
    if (load(argc, argv, cfg)) return 2;
    Err err;
    const char *synth = cfg->n_data_kv ? NULL : synth_builtin_dir(cfg->data);
    if (synth) {                                     // the built-in dataset, as training would use it
        if (synth_ensure(synth, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 1; }
        snprintf(cfg->data, sizeof cfg->data, "%s/data.yaml", synth);
    }
    eval_outdir_keys(cfg);
    if (check_run(cfg, stdout, check_picture_path, &err)) { fprintf(stderr, "yolotrain check: %s\n", err.msg); return 2; }
    return 0;
}

static int cmd_synth(int argc, char **argv, Config *cfg) {
    if (load(argc, argv, cfg)) return 2;
    SynthConfig sc = synth_defaults();
    sc.seed = (uint64_t)cfg->seed;
    Err err;
    double t0 = now_seconds();
    if (synth_generate(SYNTH_DIR, &sc, &err)) { fprintf(stderr, "yolotrain synth: %s\n", err.msg); return 1; }
    printf("wrote %d train and %d val images under %s/ in %.1f s (data.yaml there)\n", sc.n_train, sc.n_val,
           SYNTH_DIR, now_seconds() - t0);
    return 0;
}

// val and detect with no config: the run's args.ini beside weights=RUN/weights/X, as export finds it.
// Returns 0 (cfg has a model), or 2 after a message.
static int load_eval(const char *mode, int argc, char **argv, Config *cfg) {
    if (load(argc, argv, cfg)) return 2;
    Err err;
    if (cfg->weights[0] && weights_usable(cfg->weights, &err)) {   // missing, or the training state
        fprintf(stderr, "yolotrain %s: %s\n", mode, err.msg);
        return 2;
    }
    if (cfg->n_layers) return 0;
    char ini[CFG_PATH + 16];
    struct stat st;
    if (!cfg->weights[0]) {
        fprintf(stderr, "yolotrain %s: name a model config and weights, e.g. yolotrain %s cfg/s.ini weights=FILE, "
                "or a run's weights alone: weights=RUN/weights/best.safetensors\n", mode, mode);
        return 2;
    }
    run_args_ini(cfg->weights, ini, sizeof ini);
    if (stat(ini, &st)) {
        fprintf(stderr, "yolotrain %s: weights=%s: no %s beside them (not a run's weights/ folder); name the model "
                "config they were trained with: yolotrain %s CONFIG.ini weights=%s\n", mode, cfg->weights, ini, mode,
                cfg->weights);
        return 2;
    }
    if (config_load_run(ini, argc, argv, cfg, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 2; }
    printf("config: %s (the run's, found from weights=)\n", ini);
    return 0;
}

static int cmd_val(int argc, char **argv, Config *cfg) {
    if (load_eval("val", argc, argv, cfg)) return 2;
    eval_outdir_keys(cfg);
    return val_run(cfg);
}

static int cmd_detect(int argc, char **argv, Config *cfg) {
    DetectOptions o;
    Err err;
    if (detect_take_args(&argc, argv, &o, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 2; }
    if (load_eval("detect", argc, argv, cfg)) return 2;
    eval_outdir_keys(cfg);
    return detect_run(cfg, &o);
}

static int cmd_train(int argc, char **argv, Config *cfg) {
    if (load(argc, argv, cfg)) return 2;
    if (cfg->resume[0]) {                            // the run's own config; the rest are overrides
        int skip = argc > 0 && !strchr(argv[0], '=') && strncmp(argv[0], "--", 2);
        return train_resume(cfg, argc - skip, argv + skip);
    }
    if (!cfg->n_layers) { fprintf(stderr, "yolotrain: name a model config to train, e.g. cfg/s.ini\n"); return 2; }
    return train_run(cfg);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);             // piped logs keep the order of stdout and stderr lines
    switches_warn_unknown(stderr);
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version"))) return version();
    if (argc < 2 || is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    static const struct { const char *name; int (*run)(int, char **, Config *); } cmds[] = {
        { "info", cmd_info }, { "check", cmd_check }, { "synth", cmd_synth }, { "train", cmd_train },
        { "val", cmd_val }, { "detect", cmd_detect }, { "predict", cmd_detect }, { "export", export_run },
        { "switches", cmd_switches },
    };
    const char *mode = argv[1];
    int first = 2;
    if (!strcmp(mode, "predict")) mode = "detect";
    int known = 0;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) known |= !strcmp(argv[1], cmds[i].name);
    if (!known) mode = "train", first = 1;
    if (mode_help(mode, argc - first, argv + first)) return 0;
    Config *cfg = xmalloc(sizeof *cfg);           // large: not on the stack
    int rc = -1;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) rc = cmds[i].run(argc - 2, argv + 2, cfg);
    if (rc < 0) rc = cmd_train(argc - 1, argv + 1, cfg);
    free(cfg);
    return rc;
}
