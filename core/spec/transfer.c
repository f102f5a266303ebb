// transfer.c: see transfer.h. yolov9's train.py: csd = intersect_dicts(ckpt state dict, model state
// dict) (same name, same shape), load_state_dict(csd, strict=False), "Transferred {len(csd)}/{len(model
// state dict)} items from {weights}"; Ultralytics' BaseModel.load does the same. Freezing follows
// train.py: `freeze = [f'model.{x}.' for x in (freeze if len(freeze) > 1 else range(freeze[0]))]`,
// requires_grad False for parameters under those names, so they get no gradient, no update, no weight
// decay and no share in the clipping norm; their BN layers stay in training mode (batch statistics,
// running statistics updated), as train.py leaves them.
#include "core/spec/transfer.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/pt.h"

static const char NBT[] = "num_batches_tracked";

static int same_shape(const StTensor *t, const ParamInfo *p) {
    if (t->ndim != p->ndim) return 0;
    for (int i = 0; i < p->ndim; i++)
        if (t->shape[i] != p->shape[i]) return 0;
    return 1;
}

// "model.2.cv1.bn.running_var" -> "model.2.cv1.bn.num_batches_tracked"
static void nbt_name(const char *running_var, char *out, size_t size) {
    snprintf(out, size, "%.*s%s", (int)(strlen(running_var) - strlen("running_var")), running_var, NBT);
}

static int ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

// The detection head: the layer whose name holds `part`, and the rows of its class conv bias (nc).
static int find_head(const SafeTensors *st, const char *part, int *layer, int *nc) {
    for (int i = 0; i < st->n; i++) {
        const char *s = strstr(st->tensor[i].name, part);
        if (!s || !ends_with(st->tensor[i].name, ".2.bias") || st->tensor[i].ndim != 1) continue;
        if (sscanf(st->tensor[i].name, "model.%d.", layer) != 1) *layer = -1;
        *nc = (int)st->tensor[i].shape[0];
        return 1;
    }
    return 0;
}

// The family's configs, smallest first, and the head that tells the family apart.
static const struct { const char *head, *ini[5]; } families[] = {
    { ".one2one_cv3.0.", { "cfg/yolo26n.ini", "cfg/yolo26s.ini", "cfg/yolo26m.ini", "cfg/yolo26l.ini", "cfg/yolo26x.ini" } },
    { ".cv5.0.", { "cfg/yolov9-t.ini", "cfg/yolov9-s.ini", "cfg/yolov9-m.ini", "cfg/yolov9-c.ini", "cfg/yolov9-e.ini" } },
    { ".cv3.0.", { "cfg/gelan-t.ini", "cfg/s.ini", "cfg/gelan-m.ini", "cfg/gelan-c.ini", "cfg/gelan-e.ini" } },
};

// 1 when the model built from `ini` (with nc classes) has exactly the file's tensors, names and shapes.
static int config_fits(const SafeTensors *st, const char *ini, int nc) {
    Config *cfg = xcalloc(1, sizeof *cfg);
    Model m;
    Err err;
    int fits = 0;
    if (!access(ini, R_OK) && !config_load(ini, 0, NULL, cfg, &err)) {
        config_set_nc(cfg, nc);
        if (!model_build(cfg, 1, 64, &m, &err)) {
            int listed = 0;
            fits = 1;
            for (int i = 0; fits && i < m.n_params; i++) {
                const StTensor *t = st_find(st, m.params[i].name);
                fits = t && same_shape(t, &m.params[i]);
            }
            for (int i = 0; i < st->n; i++) listed += !ends_with(st->tensor[i].name, NBT);
            fits &= listed == m.n_params;
            model_free(&m);
        }
    }
    free(cfg);
    return fits;
}

const char *weights_config(const SafeTensors *st) {
    int layer, nc;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        if (!find_head(st, families[f].head, &layer, &nc)) continue;
        for (int k = 0; k < 5; k++)
            if (config_fits(st, families[f].ini[k], nc)) return families[f].ini[k];
        return NULL;
    }
    return NULL;
}

void weights_describe(const SafeTensors *st, char *buf, size_t size) {
    int layer = -1, nc = 0, o;
    const char *ini = weights_config(st);
    char fit[64];
    snprintf(fit, sizeof fit, "%s", ini ? ini : "no config of cfg/ fits it exactly");
    if (find_head(st, ".one2one_cv3.0.", &layer, &nc))
        o = snprintf(buf, size, "a YOLO26 model (end-to-end Detect head at layer %d, nc %d; %s)", layer, nc, fit);
    else if (find_head(st, ".cv5.0.", &layer, &nc))
        o = snprintf(buf, size, "a yolov9 model in its training form (DualDDetect head at layer %d, nc %d; %s)", layer,
                     nc, fit);
    else if (find_head(st, ".cv3.0.", &layer, &nc))
        o = snprintf(buf, size, "a gelan model (DDetect head at layer %d, nc %d; %s)", layer, nc, fit);
    else
        o = snprintf(buf, size, "no YOLO detection head (no *.cv3.0.2.bias)");
    const StTensor *stem = st_find(st, "model.0.conv.weight");
    if (o >= 0 && (size_t)o < size && stem && stem->ndim == 4)
        o += snprintf(buf + o, size - o, ", a stem of %lld channels", (long long)stem->shape[0]);
    const char *cls = st_meta(st, "pt_class");
    if (o >= 0 && (size_t)o < size)
        snprintf(buf + o, size - o, ", %d tensors%s%s", st->n, cls ? "; pickled as " : "", cls ? cls : "");
}

typedef struct { int taken, total; } Count;

static int take_tensors(Model *m, const SafeTensors *st, float *host, Count *c, Err *err) {
    char nbt[160];
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        const StTensor *t = st_find(st, p->name);
        c->total++;
        if (t && same_shape(t, p)) {
            if (st_read_f32(st, p->name, host + p->offset, p->n, err)) return -1;
            c->taken++;
        }
        if (p->kind != PK_RUNNING_VAR) continue;
        nbt_name(p->name, nbt, sizeof nbt);          // PyTorch counts BN's counter as an item
        c->total++;
        t = st_find(st, nbt);
        float v;
        if (t && st_numel(t) == 1 && !st_read_f32(st, nbt, &v, 1, err)) { c->taken++; m->bn_batches = (int64_t)v; }
    }
    return 0;
}

int model_transfer(Model *m, const char *path, uint64_t seed, int verbose, Err *err) {
    SafeTensors st;
    if (weights_open(path, &st, err)) return -1;
    model_init_weights(m, seed);
    float *host = xmalloc(m->n_state * sizeof(float));   // the state may live on a GPU
    m->be->dev.download(m->be_ctx, host, m->state, m->n_state);
    Count c = { 0, 0 };
    int rc = take_tensors(m, &st, host, &c, err);
    if (!rc && 2 * c.taken < c.total) {
        char what[512];
        weights_describe(&st, what, sizeof what);
        rc = err_set(err, "%s: only %d/%d items of this model (name and shape) are in the file; it seems to hold %s. "
                     "Train with the config of that model, or without weights=", path, c.taken, c.total, what);
    }
    if (!rc) rc = model_check_finite(m, host, m->n_state, path, "state", err);   // NaN/Inf weights refused
    if (!rc) m->be->dev.upload(m->be_ctx, m->state, host, m->n_state);
    if (!rc && verbose) printf("Transferred %d/%d items from %s\n", c.taken, c.total, path);
    free(host);
    st_close(&st);
    return rc;
}

// ---- freeze ------------------------------------------------------------------------------------
int freeze_mask(const Config *cfg, const Model *m, unsigned char frozen[CFG_MAX_LAYERS], Err *err) {
    char why[256], at[CFG_PATH + 32];
    int n_layers = cfg->n_layers;
    if (config_freeze_layers(cfg->freeze, frozen, CFG_MAX_LAYERS, why, sizeof why))
        return err_set(err, "%s: freeze=%s: %s", config_where_text(config_where(cfg, "freeze"), at, sizeof at),
                       cfg->freeze, why);
    int any = 0;
    for (int i = 0; i < CFG_MAX_LAYERS; i++) {
        any |= frozen[i];
        if (frozen[i] && i >= n_layers && (cfg->freeze[0] == '[' || strchr(cfg->freeze, ',')))
            return err_set(err, "%s: freeze=%s: layer %d does not exist; the model has layers 0..%d",
                           config_where_text(config_where(cfg, "freeze"), at, sizeof at), cfg->freeze, i, n_layers - 1);
    }
    int left = 0;   // Ultralytics refuses a freeze that leaves nothing to train
    for (int i = 0; i < m->n_params && any; i++)
        left += param_trainable(m->params[i].kind) && !param_frozen(frozen, m->params[i].name);
    if (any && !left)
        return err_set(err, "%s: freeze=%s freezes every layer of the model (0..%d): nothing is left to train; freeze "
                       "fewer layers or list them", config_where_text(config_where(cfg, "freeze"), at, sizeof at),
                       cfg->freeze, n_layers - 1);
    return 0;
}

// Ultralytics (engine/trainer.py, _setup_train and _model_train) sets requires_grad=False on the
// frozen layers' parameters and calls .eval() on their BatchNorm2d modules at every epoch's start, so
// those normalise with their running statistics and never update them. yolov9's train.py only sets
// requires_grad=False: its model.train() leaves every BN in training mode (gelan keeps that).
void freeze_apply(Model *m, const unsigned char frozen[CFG_MAX_LAYERS]) {
    for (int i = 0; i < m->n_params; i++) m->params[i].frozen = param_frozen(frozen, m->params[i].name);
    for (int i = 0; i < m->n_nodes; i++) {
        Node *nd = &m->nodes[i];
        int eval = m->end2end && nd->layer >= 0 && nd->layer < CFG_MAX_LAYERS && frozen[nd->layer];
        nd->cv.bn_frozen = nd->cv2.bn_frozen = eval && (nd->op == OP_CONV || nd->op == OP_REPCONV);
    }
}

int param_frozen(const unsigned char frozen[CFG_MAX_LAYERS], const char *name) {
    int i;
    return sscanf(name, "model.%d.", &i) == 1 && i >= 0 && i < CFG_MAX_LAYERS && frozen[i];
}
