// model_io.c: model weights in safetensors under the PyTorch state-dict names of the reference, so
// PyTorch's load_state_dict reads what we save and we read what it saves (or a fixture's "param/").
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/model.h"
#include "core/spec/transfer.h"
#include "io/pt.h"

static const char NBT[] = "num_batches_tracked";

// "<prefix>model.2.cv1.bn.running_var" -> "<prefix>model.2.cv1.bn.num_batches_tracked"
static int nbt_name(const char *prefix, const char *running_var, char *out, size_t size) {
    size_t n = strlen(running_var) - strlen("running_var");
    return snprintf(out, size, "%s%.*s%s", prefix, (int)n, running_var, NBT) < (int)size ? 0 : -1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static void shape_text(const int64_t *shape, int ndim, char *buf, size_t size) {
    int o = snprintf(buf, size, "(");
    for (int i = 0; i < ndim && o < (int)size - 24; i++)
        o += snprintf(buf + o, size - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(buf + o, size - o, ")");
}

// -2 when the file has no such tensor or another shape (the config does not fit), -1 when unreadable
static int load_param(float *state, const SafeTensors *st, const ParamInfo *p, const char *prefix, Err *err) {
    char name[256], want[96], got[96];
    snprintf(name, sizeof name, "%s%s", prefix, p->name);
    const StTensor *t = st_find(st, name);
    if (!t) {
        err_set(err, "%s: tensor '%s' is missing: the weights do not match this model's config", st->path, name);
        return -2;
    }
    int64_t shape[4];
    for (int i = 0; i < p->ndim; i++) shape[i] = p->shape[i];
    int same = t->ndim == p->ndim;
    for (int i = 0; same && i < p->ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        shape_text(shape, p->ndim, want, sizeof want);
        shape_text(t->shape, t->ndim, got, sizeof got);
        err_set(err, "%s: tensor '%s' has shape %s, the model expects %s (a different nc or config?)", st->path, name,
                got, want);
        return -2;
    }
    return st_read_f32(st, name, state + p->offset, p->n, err);
}

int model_check_finite(const Model *m, const float *v, size_t n, const char *path, const char *what, Err *err) {
    size_t j = 0;
    while (j < n && isfinite(v[j])) j++;
    if (j == n) return 0;
    const char *name = what;
    size_t at = j;
    for (int i = 0; n == m->n_state && i < m->n_params; i++)
        if (j >= m->params[i].offset && j < m->params[i].offset + m->params[i].n) {
            name = m->params[i].name;
            at = j - m->params[i].offset;
        }
    return err_set(err, "%s: tensor '%s' holds %s at index %zu; the weights are broken (a run that diverged?): "
                   "start from other weights", path, name, isnan(v[j]) ? "NaN" : "Inf", at);
}

// A config that does not fit the weights: add what the file holds and the config that fits it.
static void say_what(const SafeTensors *st, Err *err) {
    char what[512];
    weights_describe(st, what, sizeof what);
    size_t n = strlen(err->msg);
    snprintf(err->msg + n, sizeof err->msg - n, "; the file holds %s", what);
}

int model_load(Model *m, const char *path, const char *prefix, Err *err) {
    SafeTensors st;
    if (weights_open(path, &st, err)) return -1;   // safetensors or .pt
    int rc = 0;
    size_t plen = strlen(prefix);
    float *host = xmalloc(m->n_state * sizeof(float));   // the state may live on a GPU
    m->be->dev.download(m->be_ctx, host, m->state, m->n_state);
    for (int i = 0; i < m->n_params && !rc; i++) rc = load_param(host, &st, &m->params[i], prefix, err);
    for (int i = 0; i < st.n && !rc; i++) {              // extra tensors: a config/weights mismatch
        const char *name = st.tensor[i].name;
        if (strncmp(name, prefix, plen)) continue;
        if (ends_with(name, NBT)) {
            float v;
            if (st_numel(&st.tensor[i]) == 1 && !st_read_f32(&st, name, &v, 1, err)) m->bn_batches = (int64_t)v;
            continue;
        }
        if (model_find_param(m, name + plen) < 0) {
            err_set(err, "%s: tensor '%s' is not part of this model: the weights belong to another config", path, name);
            rc = -2;
        }
    }
    if (rc == -2) {                                      // names or shapes differ: not a damaged file
        if (!*prefix) say_what(&st, err);
        rc = -1;
    }
    if (!rc) rc = model_check_finite(m, host, m->n_state, path, "state", err);
    if (!rc) m->be->dev.upload(m->be_ctx, m->state, host, m->n_state);
    free(host);
    st_close(&st);
    return rc;
}

int model_save(const Model *m, const char *path, Err *err) {
    int n = 0;
    for (int i = 0; i < m->n_params; i++) n += 1 + (m->params[i].kind == PK_RUNNING_VAR);
    StWriteTensor *t = xcalloc(n, sizeof *t);
    float *host = xmalloc(m->n_state * sizeof(float));    // the state may live on a GPU
    m->be->dev.download(m->be_ctx, host, m->state, m->n_state);
    char (*nbt)[128] = xcalloc(n, sizeof *nbt);
    int64_t batches = m->bn_batches;
    int k = 0;
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        t[k] = (StWriteTensor){ .name = p->name, .dtype = ST_F32, .ndim = p->ndim, .data = host + p->offset };
        for (int d = 0; d < p->ndim; d++) t[k].shape[d] = p->shape[d];
        k++;
        if (p->kind == PK_RUNNING_VAR) {                  // PyTorch keeps an int64 counter per BN
            nbt_name("", p->name, nbt[k], sizeof nbt[k]);
            t[k] = (StWriteTensor){ .name = nbt[k], .dtype = ST_I64, .ndim = 0, .data = &batches };
            k++;
        }
    }
    int rc = st_write(path, t, n, "{\"format\":\"pt\"}", err);
    free(t);
    free(nbt);
    free(host);
    return rc;
}
