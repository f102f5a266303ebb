// export.c: yolov9-s (PGI training form) -> gelan-s (inference form); see export.h. The config is
// reduced first (the layers the main head needs, by walking its inputs back), then both models are
// built and every kept tensor is copied under its new name, so a mismatch cannot go unnoticed.
#include "core/eval/export.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/spec/model.h"
#include "core/spec/transfer.h"
#include "io/pt.h"

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

// The reference's inference models keep a Silence layer (the image, passed on) only where two layers read
// it (gelan-e's second backbone): yolov9-c/m's Silence feeds the auxiliary branch and goes with it, so
// gelan-c/m start at their first Conv. Drop the needed Silence layers read by fewer than two needed ones.
static void drop_lone_silence(const Config *cfg, unsigned char *need) {
    int D = cfg->n_layers - 1;
    for (int s = 0; s < D; s++) {
        if (!need[s] || strcmp(cfg->layers[s].module, "Silence")) continue;
        int readers = 0;
        for (int i = s + 1; i < D; i++)
            for (int j = 0; j < cfg->layers[i].n_from; j++) readers += need[i] && from_abs(i, cfg->layers[i].from[j]) == s;
        if (readers < 2) need[s] = 0;
    }
}

// The layer that entry f of layer i reads, looking through dropped Silence layers to their input.
static int source(const Config *cfg, const int *map, int i, int f) {
    int t = from_abs(i, f);
    while (t >= 0 && map[t] < 0 && !strcmp(cfg->layers[t].module, "Silence")) t = from_abs(t, cfg->layers[t].from[0]);
    return t;
}

int export_config(const Config *cfg, Config *out, int map[CFG_MAX_LAYERS], Err *err) {
    int D = cfg->n_layers - 1;
    if (D < 0 || strcmp(cfg->layers[D].module, "DualDDetect"))
        return err_set(err, "%s: the last layer is %s, not DualDDetect: the model has no auxiliary branch to drop; "
                       "its weights are already the inference form", cfg->file,
                       D < 0 ? "missing" : cfg->layers[D].module);
    unsigned char need[CFG_MAX_LAYERS];
    mark_needed(cfg, need);
    drop_lone_silence(cfg, need);
    memcpy(out, cfg, sizeof *out);
    out->n_layers = out->n_backbone = 0;
    for (int i = 0; i < D; i++) map[i] = need[i] ? out->n_layers++ : -1;
    for (int i = 0; i < D; i++) {
        if (map[i] < 0) continue;
        LayerSpec l = cfg->layers[i];
        l.index = map[i];
        for (int j = 0; j < l.n_from; j++) {        // relative entries stay relative (-1 stays -1 here)
            int f = l.from[j], t = source(cfg, map, i, f);
            l.from[j] = t < 0 ? -(map[i] + 1) : f >= 0 ? map[t] : map[t] - map[i];
        }
        out->layers[map[i]] = l;
        if (i < cfg->n_backbone) out->n_backbone = map[i] + 1;
    }
    LayerSpec h = cfg->layers[D];                   // DDetect on the main head's inputs
    int half = h.n_from / 2;
    h.index = map[D] = out->n_layers;
    h.n_from -= half;
    for (int j = 0; j < h.n_from; j++) h.from[j] = map[source(cfg, map, D, cfg->layers[D].from[half + j])];
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

// The inference model of cfg (a DualDDetect config is reduced, see export_config) with `weights`;
// *inf gets its config. Returns 0 with *small built, or -1 with err.
static int inference_model(const Config *cfg, const char *weights, int size, Config *inf, Model *small, Err *err) {
    int map[CFG_MAX_LAYERS], D = cfg->n_layers - 1;
    if (D < 0 || strcmp(cfg->layers[D].module, "DualDDetect")) {      // already the inference form
        memcpy(inf, cfg, sizeof *inf);
        if (model_build(inf, 1, size, small, err)) return -1;
        if (!model_load(small, weights, "", err)) return 0;
        model_free(small);
        return -1;
    }
    Model big;
    if (export_config(cfg, inf, map, err) || model_build(cfg, 1, size, &big, err)) return -1;
    int rc = model_load(&big, weights, "", err);
    if (!rc && model_build(inf, 1, size, small, err)) rc = -1;
    else if (!rc && (rc = copy_kept(cfg, map, &big, small, err))) model_free(small);
    model_free(&big);
    return rc;
}

int export_weights(const Config *cfg, const char *weights, const char *out, const char *ini, Err *err) {
    enum { SIZE = 64 };                            // any multiple of 32: weights do not depend on it
    Config *inf = xmalloc(sizeof *inf);
    Model small;
    int map[CFG_MAX_LAYERS], rc = export_config(cfg, inf, map, err);   // refuses a model without DualDDetect
    int built = !rc && !(rc = inference_model(cfg, weights, SIZE, inf, &small, err));
    if (!rc) rc = model_save(&small, out, err);
    if (!rc && ini) rc = write_ini(inf, out, ini, err);
    if (built) model_free(&small);
    free(inf);
    return rc;
}

// ---- the command ------------------------------------------------------------------------------

// Take KEY=VALUE (or --KEY VALUE, --KEY=VALUE) from the arguments: keys of export, not of the config.
static void take_arg(int *argc, char **argv, const char *key, char *out, size_t size) {
    int n = 0;
    size_t k = strlen(key);
    for (int i = 0; i < *argc; i++) {
        const char *a = argv[i], *b = a + 2 * !strncmp(a, "--", 2);
        if (!strncmp(b, key, k) && b[k] == '=') snprintf(out, size, "%s", b + k + 1);
        else if (b != a && !strcmp(b, key) && i + 1 < *argc) snprintf(out, size, "%s", argv[++i]);
        else argv[n++] = argv[i];
    }
    *argc = n;
}

void run_args_ini(const char *weights, char *ini, size_t size) {
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

// out.safetensors -> out.ini; weights.safetensors (or .pt) -> weights-converted.safetensors
static void derive(const char *path, const char *suffix, char *buf, size_t size) {
    size_t n = strlen(path), cut = 0;
    static const char *ext[] = { ".safetensors", ".pt" };
    for (int k = 0; k < 2 && !cut; k++)
        if (n > strlen(ext[k]) && !strcmp(path + n - strlen(ext[k]), ext[k])) cut = strlen(ext[k]);
    snprintf(buf, size, "%.*s%s", (int)(n - cut), path, suffix);
}

// Weights outside a run folder: the command with the config that fits them (format=onnx but for
// yolov9's training form: the safetensors export drops its auxiliary branch, which only yolov9 has).
static int no_run_ini(const char *ini, const char *weights, Err *err) {
    SafeTensors st;
    if (weights_open(weights, &st, err)) return -1;
    const char *fit = weights_config(&st);
    st_close(&st);
    if (!fit)
        return err_set(err, "%s is missing: weights=%s is not inside a run folder, and no config of cfg/ fits it; name "
                       "the config it was trained with: yolotrain export CONFIG.ini weights=%s format=onnx", ini, weights,
                       weights);
    return err_set(err, "%s is missing: weights=%s is not inside a run folder; name its config: yolotrain export %s "
                   "weights=%s%s", ini, weights, fit, weights, strstr(fit, "yolov9-") ? "" : " format=onnx");
}

// last_state holds the weights with the optimizer and EMA, for resume=.
int weights_usable(const char *weights, Err *err) {
    struct stat st;
    if (stat(weights, &st))
        return err_set(err, "weights=%s: no such file; name a run's weights, e.g. "
                       "weights=runs/train/exp/weights/best.safetensors", weights);
    const char *base = strrchr(weights, '/');
    base = base ? base + 1 : weights;
    if (!strcmp(base, "last_state.safetensors"))
        return err_set(err, "weights=%s: this is the training state (for resume=); use last.safetensors or "
                       "best.safetensors beside it", weights);
    return 0;
}

static int load_config(int argc, char **argv, Config *cfg, Err *err) {
    const char *path = NULL;
    char ini[CFG_PATH + 16];
    if (argc > 0 && !strchr(argv[0], '=') && strncmp(argv[0], "--", 2)) { path = argv[0]; argc--; argv++; }
    if (!path) {                                   // the run's own config, found from weights=
        if (config_load(NULL, argc, argv, cfg, err)) return -1;
        if (!cfg->weights[0]) return err_set(err, "export needs weights=RUN/weights/best.safetensors");
        if (weights_usable(cfg->weights, err)) return -1;
        run_args_ini(cfg->weights, ini, sizeof ini);
        struct stat st;
        if (stat(ini, &st)) return no_run_ini(ini, cfg->weights, err);
        path = ini;
    }
    if (config_load(path, argc, argv, cfg, err)) return -1;
    if (!cfg->weights[0]) return err_set(err, "export needs weights=RUN/weights/best.safetensors");
    return weights_usable(cfg->weights, err);
}

// nc of a weights file: the rows of the first head's class conv bias (*.cv3.0.2.bias)
static int weights_nc(const char *path, Err *err) {
    SafeTensors st;
    if (weights_open(path, &st, err)) return -1;
    int nc = 0;
    for (int i = 0; i < st.n && !nc; i++) {
        size_t n = strlen(st.tensor[i].name);
        if (n > 13 && !strcmp(st.tensor[i].name + n - 13, ".cv3.0.2.bias") && st.tensor[i].ndim == 1) nc = (int)st.tensor[i].shape[0];
    }
    st_close(&st);
    return nc ? nc : err_set(err, "%s: no detection head (*.cv3.0.2.bias) found: not weights of a YOLO detector", path);
}

// format=onnx: the inference model, BN folded, with its decoded head (core/eval/export_onnx.c)
// batch: the fixed batch dimension, or 0 for a symbolic one (dynamic=1)
static int export_onnx(Config *cfg, const char *out, int batch, Err *err) {
    int nc = weights_nc(cfg->weights, err);
    if (nc < 0) return -1;
    if (cfg->nc != nc) config_set_nc(cfg, nc);
    Config *inf = xmalloc(sizeof *inf);
    Model m;
    double t0 = now_seconds();
    int rc = inference_model(cfg, cfg->weights, cfg->imgsz, inf, &m, err);
    if (!rc) {
        rc = export_onnx_model(&m, cfg->imgsz, batch, out, err);
        char b[16] = "batch";
        if (batch) snprintf(b, sizeof b, "%d", batch);
        if (!rc) printf("wrote %s (ONNX opset 17, BN folded%s) in %.2f s: input images (%s, 3, %d, %d) RGB 0-1, output0 "
                        "(%s, %s\n", out, m.end2end ? ", YOLO26 end-to-end" : "", now_seconds() - t0, b, cfg->imgsz,
                        cfg->imgsz, b, m.end2end ? "300, 6): x1 y1 x2 y2 score class" : "4 + nc, anchors): xywh pixels, class scores");
        model_free(&m);
    }
    free(inf);
    return rc;
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

// Nor does it replace any file it did not make: out= may name a file of the user's, and the config
// written beside it (out.ini) is a name the user never gave. lstat: a symlink there counts too.
static int outputs_new(const char *out, const char *ini, Err *err) {
    const char *outs[2] = { out, ini };
    struct stat st;
    for (int i = 0; i < 2; i++)
        if (outs[i] && !lstat(outs[i], &st))
            return err_set(err, "%s exists%s; export replaces no file: move it away or name another out=",
                           outs[i], i ? " (the config written beside out=)" : "");
    return 0;
}

// export's batch=TEXT: the fixed batch of an ONNX file (1 by default), 0 for dynamic=1; -1 after saying
// why when it is not a whole number in 1..4096, is given with dynamic=1 or for safetensors.
static int export_batch(const char *text, int dynamic, int onnx) {
    if (!text[0]) return dynamic ? 0 : 1;
    char *end;
    errno = 0;
    long b = strtol(text, &end, 10);
    if (!onnx) fprintf(stderr, "yolotrain export: batch=%s: a batch size is for format=onnx\n", text);
    else if (dynamic) fprintf(stderr, "yolotrain export: batch=%s with dynamic=1: the batch is symbolic then; give one of them\n", text);
    else if (end == text || *end || errno || b < 1 || b > 4096)
        fprintf(stderr, "yolotrain export: batch=%s: allowed: a whole number 1..4096 (the ONNX input's fixed batch)\n", text);
    else return (int)b;
    return -1;
}

int export_run(int argc, char **argv, Config *cfg) {
    char out[CFG_PATH] = "", ini[CFG_PATH + 16], format[32] = "safetensors", dyn[16] = "0", bat[32] = "";
    Err err;
    take_arg(&argc, argv, "out", out, sizeof out);
    take_arg(&argc, argv, "format", format, sizeof format);
    take_arg(&argc, argv, "dynamic", dyn, sizeof dyn);
    take_arg(&argc, argv, "batch", bat, sizeof bat);   // export's batch (the model's input), not training's
    int onnx = !strcmp(format, "onnx");
    if (!onnx && strcmp(format, "safetensors")) {
        fprintf(stderr, "yolotrain export: format=%s: allowed: safetensors (yolov9-s -> gelan-s weights), onnx\n", format);
        return 2;
    }
    if (strcmp(dyn, "0") && strcmp(dyn, "1")) {
        fprintf(stderr, "yolotrain export: dynamic=%s: allowed: 0 (a fixed batch, batch=N, 1 by default), 1 (any batch)\n", dyn);
        return 2;
    }
    int batch = export_batch(bat, dyn[0] == '1', onnx);
    if (batch < 0) return 2;
    if (load_config(argc, argv, cfg, &err)) { fprintf(stderr, "yolotrain export: %s\n", err.msg); return 2; }
    if (onnx) {
        if (!out[0]) derive(cfg->weights, ".onnx", out, sizeof out);
        if (outputs_clear(cfg, out, out, &err) || outputs_new(out, NULL, &err)) {
            fprintf(stderr, "yolotrain export: %s\n", err.msg);
            return 2;
        }
        if (export_onnx(cfg, out, batch, &err)) { fprintf(stderr, "yolotrain export: %s\n", err.msg); return 2; }
        return 0;
    }
    int D = cfg->n_layers - 1;
    if (D >= 0 && strcmp(cfg->layers[D].module, "DualDDetect")) {   // gelan, YOLO26: nothing to drop
        printf("%s: already the inference form (the last layer is %s, no auxiliary branch to drop): nothing to "
               "convert; val and detect take weights=%s as it is, and format=onnx exports it\n", cfg->file,
               cfg->layers[D].module, cfg->weights);
        return 0;
    }
    if (!out[0]) derive(cfg->weights, "-converted.safetensors", out, sizeof out);
    derive(out, ".ini", ini, sizeof ini);
    if (outputs_clear(cfg, out, ini, &err) || outputs_new(out, ini, &err)) {
        fprintf(stderr, "yolotrain export: %s\n", err.msg);
        return 2;
    }
    if (export_weights(cfg, cfg->weights, out, ini, &err)) {
        fprintf(stderr, "yolotrain export: %s\n", err.msg);
        return 2;
    }
    printf("wrote %s (the inference form of %s: auxiliary branch dropped, main head renamed) and its config %s;\n"
           "use: yolotrain val %s, yolotrain detect %s source=IMAGES\n", out, cfg->file, ini, ini, ini);
    return 0;
}
