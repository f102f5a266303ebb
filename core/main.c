// main.c: the command line. `yolotrain CONFIG [overrides]` trains; other modes are a word first.
// Exit status: 0 done, 1 a failure of the machine (I/O, memory), 2 bad input (config, data, usage).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg/config.h"
#include "core/detect.h"
#include "core/export.h"
#include "core/model.h"
#include "core/train.h"
#include "core/val.h"
#include "io/check.h"
#include "io/synth.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: yolotrain CONFIG.ini [key=value | --key value ...]   train (cfg/s.ini: gelan-s)\n"
        "       yolotrain resume=RUN_FOLDER|1 [overrides]                continue a stopped run exactly\n"
        "       yolotrain info CONFIG.ini [overrides]                  layer table, parameters, FLOPs\n"
        "       yolotrain check [CONFIG.ini] [data=FILE.yaml] [...]    validate a dataset, summarise it\n"
        "       yolotrain val CONFIG.ini weights=FILE [data=FILE.yaml]  P, R, mAP50, mAP50-95 on the val split\n"
        "       yolotrain detect CONFIG.ini weights=FILE source=IMAGE|DIR|LIST.txt [conf=0.25] [iou=0.45]\n"
        "       yolotrain export weights=RUN/weights/best.safetensors [out=FILE]  yolov9-s -> gelan-s\n"
        "       yolotrain export CONFIG.ini weights=FILE format=onnx [dynamic=1|batch=N] [imgsz=640] [out=FILE.onnx]\n"
        "       yolotrain synth [overrides]                            regenerate the built-in dataset\n"
        "Overrides name any key of the config (epochs=10, --batch 16, device=cpu, data=coco128.yaml).\n");
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

static int cmd_check(int argc, char **argv, Config *cfg) {
    if (load(argc, argv, cfg)) return 2;
    Err err;
    if (!cfg->data[0] && !cfg->n_data_kv) {         // the built-in dataset, as training would use it
        if (synth_ensure(SYNTH_DIR, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 1; }
        snprintf(cfg->data, sizeof cfg->data, "%s/data.yaml", SYNTH_DIR);
    }
    char picture[CFG_PATH + 64];
    snprintf(picture, sizeof picture, "%s/check_batch.jpg", cfg->project);
    if (make_dirs(cfg->project)) { fprintf(stderr, "yolotrain check: cannot create %s\n", cfg->project); return 1; }
    if (check_run(cfg, stdout, picture, &err)) { fprintf(stderr, "yolotrain check: %s\n", err.msg); return 2; }
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

static int cmd_val(int argc, char **argv, Config *cfg) {
    if (load(argc, argv, cfg)) return 2;
    if (!cfg->n_layers) { fprintf(stderr, "yolotrain val: name a model config, e.g. cfg/s.ini\n"); return 2; }
    return val_run(cfg);
}

static int cmd_detect(int argc, char **argv, Config *cfg) {
    DetectOptions o;
    Err err;
    if (detect_take_args(&argc, argv, &o, &err)) { fprintf(stderr, "yolotrain: %s\n", err.msg); return 2; }
    if (load(argc, argv, cfg)) return 2;
    if (!cfg->n_layers) { fprintf(stderr, "yolotrain detect: name a model config, e.g. cfg/s.ini\n"); return 2; }
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
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    static const struct { const char *name; int (*run)(int, char **, Config *); } cmds[] = {
        { "info", cmd_info }, { "check", cmd_check }, { "synth", cmd_synth }, { "train", cmd_train },
        { "val", cmd_val }, { "detect", cmd_detect }, { "export", export_run },
    };
    Config *cfg = xmalloc(sizeof *cfg);           // large: not on the stack
    int rc = -1;
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (!strcmp(argv[1], cmds[i].name)) rc = cmds[i].run(argc - 2, argv + 2, cfg);
    if (rc < 0) rc = cmd_train(argc - 1, argv + 1, cfg);
    free(cfg);
    return rc;
}
