// multi_reduce.c: the reduce modes of the multi-device driver (core/devices/multi.h; the scheduler is
// core/devices/multi.c): reduce=device0 (device 0 pulls the gradients in buckets while backward runs, sums
// them, updates, and the replicas copy its weights back), loss_on=device0 (the whole batch's loss on
// device 0), and reduce=sharded (each device sums, clips, steps and all-gathers its own shard).
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/devices/multi_impl.h"
#include "core/procs/procs.h"

// ---- reduce=sharded: the work of one device in one phase ----------------------------------------

void mt_zero_outside(Trainer *t, size_t lo, size_t hi) {
    Model *m = &t->m;
    m->be->dev.zero(m->be_ctx, m->grad, lo);
    m->be->dev.zero(m->be_ctx, m->grad + hi, m->n_state - hi);
}

// The first device with images this step (-1: none)
static int first_used(const Multi *mt) {
    for (int k = 0; k < mt->n; k++)
        if (mt->job[k].n) return k;
    return -1;
}

// reduce=sharded, device k: the others' gradients of its shard summed into its own, its BN
// running statistics averaged over the devices that ran images (sync_bn=1: its own, or the first's that ran
// when it ran nothing), and its gradients' sum of squares
// (into scal[SC_SUMSQ]; 0 when its shard holds nothing trainable)
void mt_reduce_shard(Multi *mt, int k) {
    Shard *sh = &mt->shard[k];
    Trainer *t = mt->job[k].t;
    Model *m = &t->m;
    size_t n = sh->hi - sh->lo;
    size_t blo = sh->lo > m->buffers ? sh->lo : m->buffers, bhi = sh->hi < m->buffers + m->n_buffers ? sh->hi : m->buffers + m->n_buffers;
    int used = mt_used_devices(mt);
    trainer_mark(t, TM_G0);
    int mean = !mt->sync_bn, ran = mt->job[k].n > 0;   // sync_bn=1: each device that ran holds the batch's already
    if (bhi > blo && !ran && mean) m->be->dev.zero(m->be_ctx, m->state + blo, bhi - blo);   // it ran nothing
    for (int j = 0; j < mt->n; j++) {
        if (j == k || !mt->job[j].n) continue;
        Trainer *o = mt->job[j].t;
        mt_wait_for(mt, k, j, EV_DONE);
        mt_copy_floats(mt, t, sh->recv, o, o->m.grad + sh->lo, n, mt->job[k].stage);
        mt_add_into(t, m->grad + sh->lo, sh->recv, n);
        if (bhi <= blo || !mean) continue;
        mt_copy_floats(mt, t, sh->recv, o, o->m.state + blo, bhi - blo, mt->job[k].stage);
        mt_add_into(t, m->state + blo, sh->recv, bhi - blo);
    }
    if (bhi > blo && used > 1 && mean) m->be->optim.scale(m->be_ctx, m->state + blo, bhi - blo, 1.0f / used);
    if (bhi > blo && !mean && !ran && used) {      // waited for above: the statistics of the first that ran
        Trainer *f = mt->job[first_used(mt)].t;
        mt_copy_floats(mt, t, m->state + blo, f, f->m.state + blo, bhi - blo, mt->job[k].stage);
    }
    if (sh->has_sgd) m->be->optim.grad_sumsq_to(m->be_ctx, sh->sgd.prep, t->scal + SC_SUMSQ);
    else m->be->dev.zero(m->be_ctx, (float *)(t->scal + SC_SUMSQ), 2);   // one double
    trainer_mark(t, TM_G1);
}

// reduce=sharded, device k (once every device reduced): clip by the norm over every shard (the sums
// of squares copied in, in device order), SGD and EMA of its shard (when the schedule steps)
void mt_update_shard(Multi *mt, int k) {
    Shard *sh = &mt->shard[k];
    Trainer *t = mt->job[k].t;
    Model *m = &t->m;
    trainer_mark(t, TM_U0);
    for (int j = 0; j < mt->n; j++)
        if (j != k) mt_wait_for(mt, k, j, EV_REDUCED);   // they read k's gradients outside its shard
    mt_zero_outside(t, sh->lo, sh->hi);               // summed into their owners by the reduce
    if (mt->st.step) {
        if (sh->has_sgd) {
            double *all = t->scal + SC_SUMSQ_ALL;
            for (int j = 0; j < mt->n; j++)
                mt_copy_doubles(mt, t, all + j, mt->job[j].t, mt->job[j].t->scal + SC_SUMSQ, 1, mt->job[k].stage);
            m->be->optim.grad_clip(m->be_ctx, sh->sgd.prep, all, mt->n, 10.0f);   // as clip_grad_norm, over every shard
            sgd_step(&sh->sgd, &mt->st);
        }
        m->be->optim.ema_update(m->be_ctx, sh->ema, m->state + sh->lo, sh->hi - sh->lo, mt->ema_d);
    }
    trainer_mark(t, TM_U1);
}

void mt_allgather_shards(Multi *mt, int k) {
    Trainer *t = mt->job[k].t;
    trainer_mark(t, TM_P0);
    for (int j = 0; j < mt->n; j++) {
        if (j == k) continue;
        const Shard *o = &mt->shard[j];
        mt_wait_for(mt, k, j, EV_UPDATED);
        mt_copy_floats(mt, t, t->m.state + o->lo, mt->job[j].t, mt->job[j].t->m.state + o->lo, o->hi - o->lo,
                    mt->job[k].stage);
    }
    trainer_mark(t, TM_P1);
}

// ---- reduce=device0 --------------------------------------------------------------------------

void mt_plan_buckets(Multi *mt) { mt->bk.n = buckets_plan(&mt->master->m, mt->bk.floats, mt->bk.b, MAX_BUCKETS); }

// Replica k's backward reached node i: mark the buckets that are now final.
static void replica_hook(void *arg, int node) {
    HookArg *a = arg;
    Buckets *bk = &a->mt->bk;
    Trainer *t = a->mt->job[a->k].t;
    while (bk->next[a->k] < bk->n && bk->b[bk->next[a->k]].node == node) {
        int b = bk->next[a->k]++;
        t->m.be->dev.event_record(t->m.be_ctx, bk->ev[a->k][b]);
        pthread_mutex_lock(&bk->mu);
        bk->posted[a->k] = b + 1;
        pthread_cond_broadcast(&bk->cv);
        pthread_mutex_unlock(&bk->mu);
    }
}

// Device 0: bucket b of every replica that ran images, added into the master's gradients.
static void pull_bucket(Multi *mt, int b) {
    Trainer *m0 = mt->master;
    Model *m = &m0->m;
    const Bucket *bu = &mt->bk.b[b];
    for (int k = 1; k < mt->n; k++) {
        if (!mt->job[k].n) continue;
        pthread_mutex_lock(&mt->bk.mu);
        while (mt->bk.posted[k] <= b) pthread_cond_wait(&mt->bk.cv, &mt->bk.mu);
        pthread_mutex_unlock(&mt->bk.mu);
        Trainer *r = &mt->rep[k];
        m->be->dev.event_wait(m->be_ctx, mt->bk.ev[k][b]);
        mt_copy_floats(mt, m0, m0->recv + bu->lo, r, r->m.grad + bu->lo, bu->hi - bu->lo, mt->job[0].stage);
        mt_add_into(m0, m->grad + bu->lo, m0->recv + bu->lo, bu->hi - bu->lo);
    }
    if (mt->procs_overlap) procs_sum_begin(m0, m->grad + bu->lo, bu->hi - bu->lo);   // final here: over the processes
    mt->bk.pulled = b + 1;
}

// Device 0's backward reached node i: gather the buckets that are final on it.
static void master_hook(void *arg, int node) {
    HookArg *a = arg;
    Buckets *bk = &a->mt->bk;
    while (bk->next[0] < bk->n && bk->b[bk->next[0]].node == node) pull_bucket(a->mt, bk->next[0]++);
}

// Before a backward phase (workers parked): nothing posted, pulled or reached yet.
void mt_buckets_reset(Multi *mt) {
    memset(mt->bk.posted, 0, sizeof mt->bk.posted);
    memset(mt->bk.next, 0, sizeof mt->bk.next);
    mt->bk.pulled = 0;
}

// Replica k is done with its backward phase, or failed in it: every bucket counts as posted, so
// device 0 never waits for work that will not come (a failed step is abandoned anyway).
void mt_buckets_release(Multi *mt, int k) {
    pthread_mutex_lock(&mt->bk.mu);
    mt->bk.posted[k] = mt->bk.n;
    pthread_cond_broadcast(&mt->bk.cv);
    pthread_mutex_unlock(&mt->bk.mu);
}

int mt_bucketed(const Multi *mt) { return !mt->sharded && mt->bk.n > 0; }

void mt_buckets_init(Multi *mt) {
    if (mt->sharded) return;
    mt->bk.floats = BUCKET_FLOATS;
    mt_plan_buckets(mt);
    pthread_mutex_init(&mt->bk.mu, NULL);
    pthread_cond_init(&mt->bk.cv, NULL);
    for (int k = 0; k < mt->n; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->dev.bind(t->m.be_ctx);
        for (int b = 0; k && b < MAX_BUCKETS; b++) mt->bk.ev[k][b] = t->m.be->dev.event_new(t->m.be_ctx);
        mt->hook_args[k] = (HookArg){ mt, k };
        t->m.backward_hook = k ? replica_hook : master_hook;
        t->m.backward_arg = &mt->hook_args[k];
    }
    mt->master->m.be->dev.bind(mt->master->m.be_ctx);
}

void mt_buckets_free(Multi *mt) {
    if (!mt_bucketed(mt)) return;
    for (int k = 1; k < mt->n && k <= mt->n_reps; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->dev.bind(t->m.be_ctx);
        for (int b = 0; b < MAX_BUCKETS; b++) t->m.be->dev.event_free(t->m.be_ctx, mt->bk.ev[k][b]);
        t->m.backward_hook = NULL;
    }
    mt->master->m.backward_hook = NULL;
    pthread_mutex_destroy(&mt->bk.mu);
    pthread_cond_destroy(&mt->bk.cv);
    mt->bk.n = 0;
}

// master.grad += sum of the replicas' gradients; BN running statistics := mean over devices (sync_bn=1: each
// device's are the batch's already) (queued on device 0, each replica's part behind its backward)
void mt_gather(Multi *mt) {
    Trainer *m0 = mt->master;
    Model *m = &m0->m;
    int used = mt_used_devices(mt);
    m->be->dev.bind(m->be_ctx);
    trainer_mark(m0, TM_G0);
    for (int b = mt->bk.pulled; b < mt->bk.n; b++) pull_bucket(mt, b);   // those device 0's backward did not reach
    for (int k = 1; k < mt->n; k++) {
        if (!mt->job[k].n) continue;
        Trainer *r = &mt->rep[k];
        mt_wait_for(mt, 0, k, EV_DONE);
        if (mt->sync_bn) continue;                 // every device that ran holds the batch's statistics already
        mt_copy_floats(mt, m0, m0->recv, r, r->m.state + m->buffers, m->n_buffers, mt->job[0].stage);
        mt_add_into(m0, m->state + m->buffers, m0->recv, m->n_buffers);
    }
    if (used > 1 && !mt->sync_bn) m->be->optim.scale(m->be_ctx, m->state + m->buffers, m->n_buffers, 1.0f / used);
    if (mt->sync_bn && !mt->job[0].n && used) {    // device 0 ran nothing: the first replica's that did
        Trainer *r = mt->job[first_used(mt)].t;
        mt_copy_floats(mt, m0, m->state + m->buffers, r, r->m.state + m->buffers, m->n_buffers, mt->job[0].stage);
    }
    trainer_mark(m0, TM_G1);
}

// every replica := the master's state (weights and BN buffers) once device 0's update is done;
// replica gradients := 0. Queued on each replica from the host thread (the workers are parked).
void mt_broadcast(Multi *mt) {
    Trainer *m0 = mt->master;
    Model *m = &m0->m;
    mt_record(mt, 0, EV_UPDATED);
    for (int k = 1; k < mt->n; k++) {
        Trainer *r = &mt->rep[k];
        r->m.be->dev.bind(r->m.be_ctx);
        mt_wait_for(mt, k, 0, EV_UPDATED);
        trainer_mark(r, TM_P0);
        mt_copy_floats(mt, r, r->m.state, m0, m->state, m->n_state, mt->job[0].stage);
        model_zero_grad(&r->m);
        trainer_mark(r, TM_P1);
        mt_record(mt, k, EV_PULLED);
    }
    m->be->dev.bind(m->be_ctx);
}

// ---- loss_on=device0 -------------------------------------------------------------------------

// The replicas' head maps into device 0's batch buffers (each behind its forward), the loss of the
// whole batch there, and its gradient w.r.t. the maps in dout (the workers copy their rows back
// behind EV_LOSS). Queued; the items are read after the step's wait (loss_dev0_items).
int mt_loss_at_zero(Multi *mt, int B, const float *targets, int nt, Err *err) {
    Trainer *m0 = mt->master;
    Model *m = &m0->m;
    LossBatch lb = { .nc = m->nc, .img_h = mt->shape.h, .img_w = mt->shape.w, .targets = targets, .n_targets = nt };
    Map grads[LOSS_LEVELS];
    m->be->dev.bind(m->be_ctx);
    if (!B) {                                      // several processes: none of this batch's images are
        mt->batch_mult = mt_procs_normaliser_empty(mt);   // this one's, but its (zero) sums still count
        mt_record(mt, 0, EV_LOSS);
        return 0;
    }
    for (int k = 1; k < mt->n; k++)
        if (mt->job[k].n) mt_wait_for(mt, 0, k, EV_ASSIGNED);
    trainer_mark(m0, TM_C0);
    for (int l = 0; l < m->n_levels; l++) {
        int v = m->head[l], H = m->vh[v], W = m->vw[v], C = m->values[v].C;
        size_t pi = (size_t)H * W * C;
        for (int k = 0; k < mt->n; k++) {
            Job *j = &mt->job[k];
            if (j->n) mt_copy_floats(mt, m0, mt->z.out[l] + j->first * pi, j->t, model_value(&j->t->m, v, j->n).data,
                                  j->n * pi, mt->job[0].stage);
        }
        lb.head[l] = map_make(mt->z.out[l], B, H, W, C);
        grads[l] = map_make(mt->z.dout[l], B, H, W, C);
    }
    double *tss = m0->scal + SC_TSS, *norm = m0->scal + SC_NORM;
    int rc;
    mt->batch_mult = B;
    if (!(rc = m->be->loss.loss_assign(m->be_ctx, mt->z.loss, &lb, tss, err))) {
        if (mt->procs) mt->batch_mult = mt_procs_normaliser_d0(mt, B);   // every process's sums
        m->be->loss.loss_norm(m->be_ctx, mt->procs ? m0->scal + SC_ALL : tss, 1, norm);
        m->be->loss.loss_compute(m->be_ctx, mt->z.loss, &lb, norm, mt->batch_mult, grads);
    }
    mt_record(mt, 0, EV_LOSS);
    if (rc) {
        char name[32], msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return err_set(err, "device 0 (%s): %s", mt_dev_name(mt, 0, name, sizeof name), msg);
    }
    return 0;
}

void mt_loss_dev0_items(Multi *mt, LossOut *out) {
    const Model *m = &mt->master->m;
    m->be->loss.loss_items(m->be_ctx, mt->z.loss, mt->batch_mult, out);
}

int mt_loss_dev0_init(Multi *mt, int max_B, Err *err) {
    Trainer *m0 = mt->master;
    Model *m = &m0->m;
    if (m->n_aux) return err_set(err, "loss_on=device0 is built for single-head models (this one has a dual head); "
                                 "use loss_on=local");
    mt->z.max_B = max_B;
    int anchors = 0;
    for (int l = 0; l < m->n_levels; l++) {
        int v = m->head[l], side = m->imgsz / m->values[v].stride;
        size_t n = (size_t)max_B * side * side * m->values[v].C;
        anchors += side * side;
        mt->z.out[l] = m->be->dev.buffer_new(m->be_ctx, n);   // outside device 0's memory plan
        mt->z.dout[l] = m->be->dev.buffer_new(m->be_ctx, n);
        if (!mt->z.out[l] || !mt->z.dout[l])
            return err_set(err, "loss_on=device0: GPU %d has no room for the batch's head outputs (%.0f MiB); "
                           "use loss_on=local or a smaller batch", m->be->dev.device_id(m->be_ctx),
                           2.0 * n * sizeof(float) / 1048576);
    }
    mt->z.loss = m->be->loss.loss_new(m->be_ctx, max_B, max_B * TARGETS_PER_IMAGE, m->nc, anchors);
    if (!mt->z.loss) return err_set(err, "loss_on=device0: no room on device 0 for the loss of %d images", max_B);
    return 0;
}

void mt_loss_dev0_free(Multi *mt) {
    const Model *m = &mt->master->m;
    for (int l = 0; l < LOSS_LEVELS; l++) {
        m->be->dev.buffer_free(m->be_ctx, mt->z.out[l]);
        m->be->dev.buffer_free(m->be_ctx, mt->z.dout[l]);
    }
    if (mt->z.loss) m->be->loss.loss_free(m->be_ctx, mt->z.loss);
}

// ---- reduce=sharded ---------------------------------------------------------------------------

// Contiguous shards of about n_state/n floats, boundaries on 64 floats (256 bytes) for the copies.
void mt_shard_bounds(Multi *mt) {
    size_t N = mt->master->m.n_state;
    for (int k = 0; k < mt->n; k++) {
        size_t lo = (N * k / mt->n) & ~(size_t)63, hi = k == mt->n - 1 ? N : (N * (k + 1) / mt->n) & ~(size_t)63;
        mt->shard[k].lo = lo;
        mt->shard[k].hi = hi;
    }
}

// The trainable parts of the master's slots inside [lo, hi), pointing into device k's state; the
// master packs momentum in slot order, so the shard's momentum is one run of it, from mom_at.
static size_t shard_slots(Multi *mt, int k) {
    Shard *sh = &mt->shard[k];
    Trainer *m0 = mt->master, *t = mt->job[k].t;
    size_t packed = 0, n_mom = 0;
    sh->slots = xcalloc(m0->n_slots ? m0->n_slots : 1, sizeof *sh->slots);
    for (int s = 0; s < m0->n_slots; s++) {
        const ParamSlot *p = &m0->slots[s];
        if (p->group < 0) continue;
        size_t o = (size_t)(p->w - m0->m.state), a = o > sh->lo ? o : sh->lo, b = o + p->n < sh->hi ? o + p->n : sh->hi;
        if (a < b) {
            if (!n_mom) sh->mom_at = packed + (a - o);
            else if (packed + (a - o) != sh->mom_at + n_mom) die("multi: the optimizer's slots are not in state order");
            sh->slots[sh->n_slots++] = (ParamSlot){ t->m.state + a, t->m.grad + a, b - a, p->group };
            n_mom += b - a;
        }
        packed += p->n;
    }
    return n_mom;
}

// Device k's momentum, EMA and receive buffer for its shard: device 0 uses the master's in place;
// the others get their own (GPU: an optimizer arena of the shard's size).
int mt_shard_init(Multi *mt, int k, Err *err) {
    Shard *sh = &mt->shard[k];
    Trainer *m0 = mt->master, *t = mt->job[k].t;
    size_t n = sh->hi - sh->lo, n_mom = shard_slots(mt, k);
    float *mom;
    t->m.be->dev.bind(t->m.be_ctx);
    if (k == 0) {
        sh->ema = m0->ema + sh->lo;
        sh->recv = m0->recv;
        mom = m0->sgd.buf + sh->mom_at;
    } else {
        const Backend *be = t->m.be;
        if (t->m.on_device) {                      // an optimizer arena of the shard's size
            size_t bytes = (2 * n + n_mom) * sizeof(float) + 3 * 256 + sizeof(ParamSlot) * 8 * (size_t)sh->n_slots + (1 << 20);
            if (be->dev.reserve(t->m.be_ctx, bytes))
                return err_set(err, "reduce=sharded: GPU %d has no room for its shard's optimizer state (%.0f MiB)",
                               be->dev.device_id(t->m.be_ctx), bytes / 1048576.0);
            sh->ema = be->dev.take(t->m.be_ctx, n);
            sh->recv = be->dev.take(t->m.be_ctx, n);
            mom = be->dev.take(t->m.be_ctx, n_mom ? n_mom : 1);
        } else {
            sh->host_block = xcalloc(2 * n + n_mom + 1, sizeof(float));
            sh->ema = sh->host_block;
            sh->recv = sh->host_block + n;
            mom = sh->host_block + 2 * n;
        }
        mt_copy_floats(mt, t, sh->ema, m0, m0->ema + sh->lo, n, mt->job[k].stage);
        t->m.be->dev.sync(t->m.be_ctx);
    }
    if (n_mom) {
        sgd_init(&sh->sgd, sh->slots, sh->n_slots, t->m.be, t->m.be_ctx, mom);
        sh->has_sgd = 1;
    }
    m0->m.be->dev.bind(m0->m.be_ctx);
    return 0;
}

void mt_shard_free(Shard *sh) {
    if (sh->has_sgd) sgd_free(&sh->sgd);
    free(sh->slots);
    free(sh->host_block);
    memset(sh, 0, sizeof *sh);
}

// The schedule on the host; the clip factor on every device from every shard's sum of squares;
// then every device updates its shard and gathers the others'.
int mt_sharded_update(Multi *mt, int epoch, int i, Err *err) {
    Trainer *t = mt->master;
    mt->st = opt_schedule_next(&t->sched, epoch, i);
    memcpy(t->lr, mt->st.lr, sizeof t->lr);
    if (mt->st.step) mt->ema_d = ema_decay(++t->ema_updates);
    if (mt_run_all(mt, PH_UPDATE, err)) return -1;
    return mt_run_all(mt, PH_ALLGATHER, err);
}

void multi_gather_state(Multi *mt) {
    if (!mt->sharded) return;
    Trainer *m0 = mt->master;
    m0->m.be->dev.bind(m0->m.be_ctx);
    for (int k = 1; k < mt->n; k++) {
        Shard *sh = &mt->shard[k];
        Trainer *t = mt->job[k].t;
        size_t n = sh->hi - sh->lo;
        mt_copy_floats(mt, m0, m0->ema + sh->lo, t, sh->ema, n, mt->job[0].stage);
        mt_copy_floats(mt, m0, m0->m.grad + sh->lo, t, t->m.grad + sh->lo, n, mt->job[0].stage);
        if (sh->has_sgd) mt_copy_floats(mt, m0, m0->sgd.buf + sh->mom_at, t, sh->sgd.buf, sgd_buffer_floats(sh->slots, sh->n_slots),
                                     mt->job[0].stage);
    }
    m0->m.be->dev.sync(m0->m.be_ctx);
    m0->sgd.steps = mt->shard[0].has_sgd ? mt->shard[0].sgd.steps : mt->shard[mt->n - 1].sgd.steps;
    mt->dirty = 1;                                 // the master's grad holds the others' shards too
}

void multi_scatter_state(Multi *mt) {
    Trainer *m0 = mt->master;
    m0->m.be->dev.sync(m0->m.be_ctx);
    for (int k = 1; k < mt->n; k++) {
        Trainer *r = &mt->rep[k];
        Shard *sh = &mt->shard[k];
        size_t n = sh->hi - sh->lo;
        r->m.be->dev.bind(r->m.be_ctx);
        mt_copy_floats(mt, r, r->m.state, m0, m0->m.state, m0->m.n_state, mt->job[k].stage);
        model_zero_grad(&r->m);
        if (mt->sharded) {
            mt_copy_floats(mt, r, sh->ema, m0, m0->ema + sh->lo, n, mt->job[k].stage);
            mt_copy_floats(mt, r, r->m.grad + sh->lo, m0, m0->m.grad + sh->lo, n, mt->job[k].stage);
            if (sh->has_sgd) mt_copy_floats(mt, r, sh->sgd.buf, m0, m0->sgd.buf + sh->mom_at,
                                         sgd_buffer_floats(sh->slots, sh->n_slots), mt->job[k].stage);
        }
        r->m.be->dev.sync(r->m.be_ctx);
    }
    m0->m.be->dev.bind(m0->m.be_ctx);
    if (!mt->sharded) return;
    for (int k = 0; k < mt->n; k++) mt->shard[k].sgd.steps = m0->sgd.steps;
    mt_zero_outside(m0, mt->shard[0].lo, mt->shard[0].hi);
    m0->m.be->dev.sync(m0->m.be_ctx);
    mt->dirty = 0;
}
