// checkpoint.c: save and load a trainer's whole state (see checkpoint.h). Four flat tensors (state,
// grad, ema, momentum) in the model's own layout, counters in the safetensors metadata.
#include "core/train/checkpoint.h"

#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

static const char FORMAT[] = "yolotrain-state-1";

// A flat host copy of n floats from the trainer's memory (CPU or GPU).
static float *host_copy(const Trainer *t, const float *src, size_t n) {
    float *h = xmalloc((n ? n : 1) * sizeof(float));
    t->m.be->dev.download(t->m.be_ctx, h, src, n);
    return h;
}

int checkpoint_save(const Trainer *t, const RunPoint *p, const char *path, Err *err) {
    const Model *m = &t->m;
    size_t nt = t->sgd.n_train;
    float *state = host_copy(t, m->state, m->n_state), *grad = host_copy(t, m->grad, m->n_state);
    float *ema = host_copy(t, t->ema, m->n_state), *mom = host_copy(t, t->sgd.buf, nt);
    StWriteTensor w[4] = {
        { "state", ST_F32, 1, { (int64_t)m->n_state }, state }, { "grad", ST_F32, 1, { (int64_t)m->n_state }, grad },
        { "ema", ST_F32, 1, { (int64_t)m->n_state }, ema },     { "momentum", ST_F32, 1, { (int64_t)nt }, mom },
    };
    char meta[2048];
    snprintf(meta, sizeof meta,
             "{\"format\":\"%s\",\"epoch\":\"%d\",\"batch\":\"%d\",\"ema_updates\":\"%lld\",\"sgd_steps\":\"%lld\","
             "\"last_opt_step\":\"%lld\",\"bn_batches\":\"%lld\",\"best_fitness\":\"%.17g\",\"best_epoch\":\"%d\","
             "\"box\":\"%.17g\",\"cls\":\"%.17g\",\"dfl\":\"%.17g\",\"n\":\"%d\",\"elapsed_s\":\"%.3f\","
             "\"elapsed_from\":\"%d\"}",
             FORMAT, p->epoch, p->batch, (long long)t->ema_updates, (long long)t->sgd.steps,
             (long long)t->sched.last_opt_step, (long long)m->bn_batches, p->best_fitness, p->best_epoch, p->box, p->cls,
             p->dfl, p->n, p->elapsed, p->elapsed_from);
    int rc = st_write(path, w, 4, meta, err);
    free(state); free(grad); free(ema); free(mom);
    return rc;
}

static int meta_num(const SafeTensors *st, const char *key, double *v, Err *err) {
    const char *s = st_meta(st, key);
    char *end;
    if (!s) return err_set(err, "%s: the training state lacks '%s'; it is not a yolotrain state file", st->path, key);
    *v = strtod(s, &end);
    if (end == s || *end) return err_set(err, "%s: '%s' = '%s' is not a number", st->path, key, s);
    return 0;
}

// Read a flat tensor of exactly n floats into the trainer's memory at dst.
static int read_flat(Trainer *t, const SafeTensors *st, const char *name, float *dst, size_t n, Err *err) {
    const StTensor *x = st_find(st, name);
    if (!x || st_numel(x) != n)
        return err_set(err, "%s: tensor '%s' has %zu values, this model needs %zu: the state belongs to another "
                       "config", st->path, name, x ? st_numel(x) : 0, n);
    float *h = xmalloc((n ? n : 1) * sizeof(float));
    int rc = st_read_f32(st, name, h, n, err);
    if (!rc) rc = model_check_finite(&t->m, h, n, st->path, name, err);
    if (!rc) t->m.be->dev.upload(t->m.be_ctx, dst, h, n);
    free(h);
    return rc;
}

// After a state file that does not open (truncated, corrupt): name the weights files beside it that
// do, so the user knows what survived and how to go on from it.
static void name_intact(const char *path, Err *err) {
    static const char *names[2] = { "last.safetensors", "best.safetensors" };
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path + 1) : 0;
    char list[2100] = "";
    for (int i = 0; i < 2; i++) {
        char other[1024];
        snprintf(other, sizeof other, "%.*s%s", dir_len, path, names[i]);
        SafeTensors st;
        Err ignored;
        if (st_open(other, &st, &ignored)) continue;
        st_close(&st);
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s%s", n ? " and " : "", other);
    }
    char why[sizeof err->msg];
    snprintf(why, sizeof why, "%s", err->msg);
    if (list[0])
        err_set(err, "%s; the run cannot resume from it. Intact beside it: %s (EMA weights): start a new run "
                "from them with weights=", why, list);
    else
        err_set(err, "%s; the run cannot resume from it, and no intact weights file lies beside it", why);
}

int checkpoint_load(Trainer *t, RunPoint *p, const char *path, Err *err) {
    SafeTensors st;
    if (st_open(path, &st, err)) {
        name_intact(path, err);
        return -1;
    }
    const char *fmt = st_meta(&st, "format");
    int rc = fmt && !strcmp(fmt, FORMAT) ? 0 : err_set(err, "%s: not a yolotrain training state (format %s)", path,
                                                      fmt ? fmt : "missing");
    Model *m = &t->m;
    if (!rc) rc = read_flat(t, &st, "state", m->state, m->n_state, err);
    if (!rc) rc = read_flat(t, &st, "grad", m->grad, m->n_state, err);
    if (!rc) rc = read_flat(t, &st, "ema", t->ema, m->n_state, err);
    if (!rc) rc = read_flat(t, &st, "momentum", t->sgd.buf, t->sgd.n_train, err);
    double v[12];
    static const char *keys[12] = { "epoch", "batch", "ema_updates", "sgd_steps", "last_opt_step", "bn_batches",
                                    "best_fitness", "best_epoch", "box", "cls", "dfl", "n" };
    for (int i = 0; i < 12 && !rc; i++) rc = meta_num(&st, keys[i], &v[i], err);
    double el[2] = { -1, v[0] };             // saved without its time (an older yolotrain): unknown
    if (!rc && st_meta(&st, "elapsed_s"))
        for (int i = 0; i < 2 && !rc; i++) rc = meta_num(&st, i ? "elapsed_from" : "elapsed_s", &el[i], err);
    if (!rc && st_meta(&st, "elapsed_s") && (!(el[0] >= 0) || el[1] < 0 || el[1] > v[0]))
        rc = err_set(err, "%s: elapsed_s %g, elapsed_from %g: not the time of this state", path, el[0], el[1]);
    if (!rc) {
        *p = (RunPoint){ (int)v[0], (int)v[1], v[6], (int)v[7], v[8], v[9], v[10], (int)v[11], el[0], (int)el[1] };
        t->ema_updates = (int64_t)v[2];
        t->sgd.steps = (int64_t)v[3];
        t->sched.last_opt_step = (int64_t)v[4];
        m->bn_batches = (int64_t)v[5];
    }
    st_close(&st);
    return rc;
}

int checkpoint_epoch(const char *path, int *epoch, Err *err) {
    SafeTensors st;
    if (st_open(path, &st, err)) return -1;
    double v;
    int rc = meta_num(&st, "epoch", &v, err);
    if (!rc) *epoch = (int)v;
    st_close(&st);
    return rc;
}
