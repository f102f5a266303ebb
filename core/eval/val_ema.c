// val_ema.c: validating a trainer's EMA weights on every device it trains on: the master runs with
// state = ema; each replica gets a copy of the EMA for the pass (through host memory, so it needs no
// peer access) and the master's training weights back afterwards, which is what it held before.
// Legend: n_state floats of the flat state (parameters and BN buffers).
#include "core/eval/val.h"

#include <stdlib.h>

#include "core/devices/multi.h"
#include "core/trainer/trainer.h"

// Every replica's state = src (n_state floats in the master's memory), staged through host.
static void replicas_set_state(Trainer *t, const float *src, float *host) {
    Model *m0 = &t->m;
    m0->be->dev.bind(m0->be_ctx);
    m0->be->dev.download(m0->be_ctx, host, src, m0->n_state);
    for (int k = 1; k < multi_count(t->multi); k++) {
        Model *m = &multi_replica_mut(t->multi, k)->m;   // borrowed between steps
        m->be->dev.bind(m->be_ctx);
        m->be->dev.upload(m->be_ctx, m->state, host, m->n_state);
    }
    m0->be->dev.bind(m0->be_ctx);
}

int val_evaluate_ema(Trainer *t, const Dataset *ds, const ValOptions *o, ValResult *r, Err *err) {
    int n = t->multi ? multi_count(t->multi) : 1;
    Model **models = xmalloc(sizeof *models * n);
    float *host = n > 1 ? xmalloc(sizeof(float) * t->m.n_state) : NULL;
    models[0] = &t->m;
    for (int k = 1; k < n; k++) models[k] = &multi_replica_mut(t->multi, k)->m;
    float *live = t->m.state;
    t->m.state = t->ema;
    if (n > 1) replicas_set_state(t, t->ema, host);
    int rc = val_evaluate_models(models, n, ds, o, r, err);
    t->m.state = live;
    if (n > 1) replicas_set_state(t, live, host);
    free(models); free(host);
    return rc;
}
