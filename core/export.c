// export.c: yolov9-s (PGI training form) -> gelan-s (inference form); see export.h. The config is
// reduced first (the layers the main head needs, by walking its inputs back), then both models are
// built and every kept tensor is copied under its new name, so a mismatch cannot go unnoticed.
#include "core/export.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/model.h"

// The absolute layer index `from` entry f of layer i refers to (-1: the image).
static int from_abs(int i, int f) { return f < 0 ? i + f : f; }

// need[i] = 1 for every layer the main head's inputs (the second half of the dual head's) depend on.
static void mark_needed(const Config *cfg, unsigned char *need) {
    int D = cfg->n_layers - 1;
    const LayerSpec *h = &cfg->layers[D];
    memset(need, 0, CFG_MAX_LAYERS);
    for (int j = h->n_from / 2; j < h->n_from; j++)
        if (from_abs(D, h->from[j]) >= 0) need[from_abs(D, h->from[j])] = 1;
    for (int i = D - 1; i >= 0; i--) {
        if (!need[i]) continue;
        for (int j = 0; j < cfg->layers[i].n_from; j++)
            if (from_abs(i, cfg->layers[i].from[j]) >= 0) need[from_abs(i, cfg->layers[i].from[j])] = 1;
    }
}

int export_config(const Config *cfg, Config *out, int map[CFG_MAX_LAYERS], Err *err) {
    int D = cfg->n_layers - 1;
    if (D < 0 || strcmp(cfg->layers[D].module, "DualDDetect"))
        return err_set(err, "%s: the last layer is %s, not DualDDetect: the model has no auxiliary branch to drop; "
                       "its weights are already the inference form", cfg->file,
                       D < 0 ? "missing" : cfg->layers[D].module);
    unsigned char need[CFG_MAX_LAYERS];
    mark_needed(cfg, need);
    memcpy(out, cfg, sizeof *out);
    out->n_layers = out->n_backbone = 0;
    for (int i = 0; i < D; i++) map[i] = need[i] ? out->n_layers++ : -1;
    for (int i = 0; i < D; i++) {
        if (map[i] < 0) continue;
        LayerSpec l = cfg->layers[i];
        l.index = map[i];
        for (int j = 0; j < l.n_from; j++) {        // relative entries stay relative (-1 stays -1 here)
            int f = l.from[j], t = from_abs(i, f);
            l.from[j] = f >= 0 ? map[t] : t < 0 ? -(map[i] + 1) : map[t] - map[i];
        }
        out->layers[map[i]] = l;
        if (i < cfg->n_backbone) out->n_backbone = map[i] + 1;
    }
    LayerSpec h = cfg->layers[D];                   // DDetect on the main head's inputs
    int half = h.n_from / 2;
    h.index = map[D] = out->n_layers;
    h.n_from -= half;
    for (int j = 0; j < h.n_from; j++) h.from[j] = map[from_abs(D, cfg->layers[D].from[half + j])];
    snprintf(h.module, sizeof h.module, "DDetect");
    out->layers[out->n_layers++] = h;
    return 0;
}

int export_rename(const Config *cfg, const int map[CFG_MAX_LAYERS], const char *name, char *out, size_t n) {
    static const char *from[] = { "cv4.", "cv5.", "dfl2." }, *to[] = { "cv2.", "cv3.", "dfl." };
    int i, used = 0, D = cfg->n_layers - 1;
    if (sscanf(name, "model.%d.%n", &i, &used) != 1 || !used || i < 0 || i > D) return 0;
    const char *rest = name + used;
    if (i < D) return map[i] >= 0 && snprintf(out, n, "model.%d.%s", map[i], rest) < (int)n;
    for (int k = 0; k < 3; k++)                     // the head: main parts renamed, auxiliary ones dropped
        if (!strncmp(rest, from[k], strlen(from[k])))
            return snprintf(out, n, "model.%d.%s%s", map[D], to[k], rest + strlen(from[k])) < (int)n;
    return 0;
}

// Copy every kept tensor of big (the training model) into small (the inference model).
static int copy_kept(const Config *cfg, const int *map, const Model *big, Model *small, Err *err) {
    int filled = 0;
    char name[256];
    for (int i = 0; i < big->n_params; i++) {
        const ParamInfo *p = &big->params[i];
        if (!export_rename(cfg, map, p->name, name, sizeof name)) continue;
        int k = model_find_param(small, name);
        if (k < 0 || small->params[k].n != p->n)
            return err_set(err, "%s: %s becomes %s, which the inference model %s", cfg->file, p->name, name,
                           k < 0 ? "does not have" : "has in another shape");
        memcpy(small->state + small->params[k].offset, big->state + p->offset, p->n * sizeof(float));
        filled++;
    }
    if (filled != small->n_params)
        return err_set(err, "%s: only %d of the inference model's %d tensors come from the training model",
                       cfg->file, filled, small->n_params);
    small->bn_batches = big->bn_batches;
    return 0;
}

static int write_ini(Config *inf, const char *out, const char *ini, Err *err) {
    snprintf(inf->weights, sizeof inf->weights, "%s", out);
    snprintf(inf->file, sizeof inf->file, "%s", ini);
    FILE *f = fopen(ini, "w");
    if (!f) return err_set(err, "cannot write %s; set out= to a writable place", ini);
    config_print(inf, f);
    return fclose(f) ? err_set(err, "cannot write %s (disk full?)", ini) : 0;
}

int export_weights(const Config *cfg, const char *weights, const char *out, const char *ini, Err *err) {
    enum { SIZE = 64 };                            // any multiple of 32: weights do not depend on it
    Config *inf = xmalloc(sizeof *inf);
    int map[CFG_MAX_LAYERS], rc = export_config(cfg, inf, map, err);
    Model big, small;
    int have_big = 0, have_small = 0;
    if (!rc) rc = model_build(cfg, 1, SIZE, &big, err), have_big = !rc;
    if (!rc) rc = model_load(&big, weights, "", err);
    if (!rc) rc = model_build(inf, 1, SIZE, &small, err), have_small = !rc;
    if (!rc) rc = copy_kept(cfg, map, &big, &small, err);
    if (!rc) rc = model_save(&small, out, err);
    if (!rc && ini) rc = write_ini(inf, out, ini, err);
    if (have_big) model_free(&big);
    if (have_small) model_free(&small);
    free(inf);
    return rc;
}

// ---- the command ------------------------------------------------------------------------------

// Take out=FILE (or --out FILE, --out=FILE) from the arguments.
static void take_out(int *argc, char **argv, char *out, size_t size) {
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i];
        if (!strncmp(a, "out=", 4) || !strncmp(a, "--out=", 6)) snprintf(out, size, "%s", strchr(a, '=') + 1);
        else if (!strcmp(a, "--out") && i + 1 < *argc) snprintf(out, size, "%s", argv[++i]);
        else argv[n++] = argv[i];
    }
    *argc = n;
}

// RUN/weights/best.safetensors -> RUN/args.ini (the run's effective config)
static void run_ini(const char *weights, char *ini, size_t size) {
    char dir[CFG_PATH];
    snprintf(dir, sizeof dir, "%s", weights);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else *slash = 0;
    size_t n = strlen(dir);
    if (!strcmp(dir, "weights")) snprintf(dir, sizeof dir, ".");
    else if (n > 8 && !strcmp(dir + n - 8, "/weights")) dir[n - 8] = 0;
    snprintf(ini, size, "%s/args.ini", dir);
}

// out.safetensors -> out.ini; weights.safetensors -> weights-converted.safetensors
static void derive(const char *path, const char *suffix, char *buf, size_t size) {
    size_t n = strlen(path), e = strlen(".safetensors");
    int cut = n > e && !strcmp(path + n - e, ".safetensors");
    snprintf(buf, size, "%.*s%s", (int)(cut ? n - e : n), path, suffix);
}

static int load_config(int argc, char **argv, Config *cfg, Err *err) {
    const char *path = NULL;
    char ini[CFG_PATH + 16];
    if (argc > 0 && !strchr(argv[0], '=') && strncmp(argv[0], "--", 2)) { path = argv[0]; argc--; argv++; }
    if (!path) {                                   // the run's own config, found from weights=
        if (config_load(NULL, argc, argv, cfg, err)) return -1;
        if (!cfg->weights[0]) return err_set(err, "export needs weights=RUN/weights/best.safetensors");
        run_ini(cfg->weights, ini, sizeof ini);
        struct stat st;
        if (stat(ini, &st))
            return err_set(err, "%s is missing: weights=%s is not inside a run folder; name its training config: "
                           "yolotrain export cfg/yolov9-s.ini weights=%s", ini, cfg->weights, cfg->weights);
        path = ini;
    }
    if (config_load(path, argc, argv, cfg, err)) return -1;
    if (!cfg->weights[0]) return err_set(err, "export needs weights=RUN/weights/best.safetensors");
    return 0;
}

// 1 when a and b name one existing file (any spelling, a symlink or a hard link).
static int same_file(const char *a, const char *b) {
    struct stat x, y;
    return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

// An output never replaces an input: out= naming the weights would lose them (the auxiliary branch).
static int outputs_clear(const Config *cfg, const char *out, const char *ini, Err *err) {
    const char *outs[2] = { out, ini }, *ins[2] = { cfg->weights, cfg->file };
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if (ins[j][0] && same_file(outs[i], ins[j]))
                return err_set(err, "out=%s: %s would overwrite the input %s; name another file", out, outs[i],
                               ins[j]);
    return 0;
}

int export_run(int argc, char **argv, Config *cfg) {
    char out[CFG_PATH] = "", ini[CFG_PATH + 16];
    Err err;
    take_out(&argc, argv, out, sizeof out);
    if (load_config(argc, argv, cfg, &err)) { fprintf(stderr, "yolotrain export: %s\n", err.msg); return 2; }
    if (!out[0]) derive(cfg->weights, "-converted.safetensors", out, sizeof out);
    derive(out, ".ini", ini, sizeof ini);
    if (outputs_clear(cfg, out, ini, &err)) { fprintf(stderr, "yolotrain export: %s\n", err.msg); return 2; }
    if (export_weights(cfg, cfg->weights, out, ini, &err)) {
        fprintf(stderr, "yolotrain export: %s\n", err.msg);
        return 2;
    }
    printf("wrote %s (the inference form of %s: auxiliary branch dropped, main head renamed) and its config %s;\n"
           "use: yolotrain val %s, yolotrain detect %s source=IMAGES\n", out, cfg->file, ini, ini, ini);
    return 0;
}
