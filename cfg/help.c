// help.c: `yolotrain MODE --help`: the keys each mode reads, each with its meaning from cfg/schema.c's
// table (the one place a key is described) and its default, or the mode's own default and words where
// the mode differs (val's and detect's folders and thresholds; what weights= is to each mode).
#include "cfg/parts.h"

#include <stdlib.h>
#include <string.h>

// The keys each mode reads: whole sections ("[train]") and single keys.
static const struct { const char *mode, *keys; } mode_keys[] = {
    { "train",  "[model] [train] [parallel] [hyp]" },
    { "val",    "data weights device precision batch imgsz workers strict project name exist_ok single_cls noplots [val] "
                "box cls dfl" },     // the gains: YOLO26's val losses, as its validator's
    { "detect", "weights data device precision imgsz project name exist_ok conf iou max_det save_txt save_conf" },
    { "export", "weights imgsz" },
    { "info",   "[model] imgsz" },
    // check's picture is the first training batch as the loader augments it
    { "check",  "data imgsz workers seed min_items strict rect project name exist_ok hsv_h hsv_s hsv_v degrees translate "
                "scale shear perspective flipud fliplr mosaic mixup" },
    { "synth",  "seed" },
    { "switches", "" },   // no keys: the YT_* environment variables (core/base/switches.h)
};

// Where a mode's default or meaning of a key is not the schema's: def (NULL: the schema's) and help
// (NULL: the schema's). The run folders of val, detect and check are named as val.py's and detect.py's
// (core/train/outdir.h): project=, name= and exist_ok= count only from the command line.
static const struct { const char *mode, *key, *def, *help; } mode_own[] = {
    { "val",    "weights", NULL, "the weights to validate (.safetensors or .pt); RUN/weights/X alone: RUN/args.ini is the config" },
    { "val",    "project", "runs/val", "the folder of val's result folders (exp, exp2, ...)" },
    { "detect", "weights", NULL, "the weights to run (.safetensors or .pt); RUN/weights/X alone: RUN/args.ini is the config" },
    { "detect", "project", "runs/detect", "the folder of detect's result folders (exp, exp2, ...)" },
    { "detect", "conf",    "0.25", NULL },
    { "detect", "iou",     "0.45", NULL },
    { "detect", "max_det", "1000", "detections kept per image (--max-det; YOLO26's end-to-end head: at most 300)" },
    { "check",  "project", "runs/check", "the folder of check's folders (exp, exp2, ...), which hold check_batch.jpg" },
    { "export", "weights", NULL, "the weights to export: a run's RUN/weights/best.safetensors (RUN/args.ini is the config)" },
};

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
            const char *def = value, *help = k->help;
            for (size_t j = 0; j < sizeof mode_own / sizeof mode_own[0]; j++) {
                if (strcmp(mode_own[j].mode, mode) || strcmp(mode_own[j].key, k->name)) continue;
                if (mode_own[j].def) def = mode_own[j].def;
                if (mode_own[j].help) help = mode_own[j].help;
            }
            char kv[CFG_LINE_MAX + 160];
            snprintf(kv, sizeof kv, "%s=%s", k->name, def);
            fprintf(f, "  %-26s %s\n", kv, help);
        }
    }
    free(cfg);
}

int config_help_check(char *why, size_t n) {
    for (int i = 0; i < cfg_n_keys; i++)
        if (!cfg_keys[i].help || !cfg_keys[i].help[0])
            return snprintf(why, n, "[%s] %s has no help text in cfg/schema.c", cfg_keys[i].section, cfg_keys[i].name), -1;
    for (size_t m = 0; m < sizeof mode_keys / sizeof mode_keys[0]; m++)
        for (const char *w = mode_keys[m].keys; *w;) {
            size_t len = strcspn(w, " ");
            char word[64];
            snprintf(word, sizeof word, "%.*s", (int)len, w);
            int sec = word[0] == '[';
            if (sec) word[len - 1] = 0;
            if (sec ? !section_known(word + 1) : !key_find(NULL, word))
                return snprintf(why, n, "mode %s lists %s, which cfg/schema.c does not have", mode_keys[m].mode, w), -1;
            w += len;
            while (*w == ' ') w++;
        }
    for (size_t j = 0; j < sizeof mode_own / sizeof mode_own[0]; j++) {
        const Key *k = key_find(NULL, mode_own[j].key);
        size_t m = 0;
        while (m < sizeof mode_keys / sizeof mode_keys[0] && strcmp(mode_keys[m].mode, mode_own[j].mode)) m++;
        if (!k || m == sizeof mode_keys / sizeof mode_keys[0] || !listed(mode_keys[m].keys, k))
            return snprintf(why, n, "mode %s has its own default or help for %s, a key it does not read", mode_own[j].mode,
                            mode_own[j].key), -1;
    }
    return 0;
}
