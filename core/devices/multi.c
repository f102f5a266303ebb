// multi.c: several devices in one process (see multi.h): the scheduler (phases, worker threads, the
// step, split=auto, setup and the per-device report). The reduce modes are core/devices/multi_reduce.c, the
// split planning core/devices/split.c, the device= parser cfg/devices.c. Device 0 is the master trainer; devices
// 1..n-1 are replicas, each driven by its own worker thread. Each step: scatter micro-batches;
// every worker runs forward and assignment (or, with loss_on=device0, the forward alone and the
// loss of the whole batch on device 0); the target-score sums are added; every worker runs loss and
// backward; then the gradients are reduced (reduce=device0: gathered on the master, which updates
// and broadcasts; reduce=sharded: each device sums, updates and all-gathers its own shard).
// Every phase is queued: the devices order their work among themselves with events (what device j
// waits for from device k: k's EV_* event, recorded after the work it names), the threads meet at
// barriers only to know that the events they wait on are recorded, and the step's one host wait is
// device 0's at its end, after its queue waited for every replica. The small values the host used to
// read back (target-score sums, normalisers, sums of squares) stay on the devices (Trainer.scal).
// Legend: n_state floats of flat state (weights, BN buffers) and as many of gradients; B batch;
// n devices; shard k = state[lo_k, hi_k); pi = floats of one image's head map at one level.
#include "core/devices/multi.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/devices/multi_impl.h"
#include "core/procs/procs.h"

static const char *PHASE_NAMES[] = { "forward", "forward", "backward", "backward", "reduce", "update",
                                     "all-gather", "quit" };

const char *mt_dev_name(const Multi *mt, int k, char *buf, size_t size) {
    int again = 0;                                 // devices before k on the same GPU (YT_TEST_SAME_GPU)
    for (int j = 0; j < k; j++) again += mt->gpu[k] >= 0 && mt->gpu[j] == mt->gpu[k];
    if (mt->gpu[k] < 0) snprintf(buf, size, "cpu %d", k);
    else if (again) snprintf(buf, size, "GPU %d.%d", mt->gpu[k], again);
    else snprintf(buf, size, "GPU %d", mt->gpu[k]);
    return buf;
}

// dst (in dt's memory) = n floats of src (in st's memory); through host memory when peer access is off
void mt_copy_floats(Multi *mt, Trainer *dt, float *dst, Trainer *st, const float *src, size_t n, float *stage) {
    if (!n) return;
    if (!mt->staged || dt == st) { dt->m.be->dev.pull(dt->m.be_ctx, dst, st->m.be_ctx, src, n); return; }
    st->m.be->dev.bind(st->m.be_ctx);
    st->m.be->dev.download(st->m.be_ctx, stage, src, n);   // blocking: behind st's queued work
    dt->m.be->dev.bind(dt->m.be_ctx);
    dt->m.be->dev.upload(dt->m.be_ctx, dst, stage, n);
}

void mt_add_into(Trainer *dst, float *to, const float *from, size_t n) {
    Map a = map_make((float *)from, 1, 1, (int)n, 1), b = map_make(to, 1, 1, (int)n, 1);
    dst->m.be->ops.accumulate_map(dst->m.be_ctx, a, b);
}

int mt_used_devices(const Multi *mt) {
    int used = 0;
    for (int k = 0; k < mt->n; k++) used += mt->job[k].n > 0;
    return used;
}

// device k's queue: its event e is recorded; wait for device j's event e
void mt_record(Multi *mt, int k, int e) {
    Trainer *t = mt->job[k].t;
    t->m.be->dev.event_record(t->m.be_ctx, mt->ev[k][e]);
}
void mt_wait_for(Multi *mt, int k, int j, int e) {
    Trainer *t = mt->job[k].t;
    t->m.be->dev.event_wait(t->m.be_ctx, mt->ev[j][e]);
}

// n doubles between devices' scal blocks (as floats: the bytes travel unchanged)
void mt_copy_doubles(Multi *mt, Trainer *dt, double *dst, Trainer *st, const double *src, int n, float *stage) {
    mt_copy_floats(mt, dt, (float *)dst, st, (const float *)src, 2 * (size_t)n, stage);
}

// ---- the work of one device in one phase -------------------------------------------------------

static void forward_only(Multi *mt, Job *j) {
    Model *m = &j->t->m;
    trainer_mark(j->t, TM_F0);
    const StepShape *s = &mt->shape;
    if (j->t->input_aug) model_forward_aug(m, j->t->input_aug, j->n, s->H, s->W, s->h, s->w, 1);
    else if (j->images_u8) model_forward_u8_resized(m, j->images_u8, j->n, s->H, s->W, s->h, s->w, 1);
    else model_forward(m, j->images, j->n, s->h, s->w, 1);   // images NULL: already on the device
    trainer_mark(j->t, TM_F1);
}

// loss_on=device0: this device's rows of the whole batch's output gradients (once device 0's loss
// wrote them), then its backward
static void backward_from_zero(Multi *mt, int k) {
    Job *j = &mt->job[k];
    Model *m = &j->t->m;
    if (k) {
        mt_wait_for(mt, k, 0, EV_LOSS);
        trainer_mark(j->t, TM_C0);
    }
    for (int l = 0; l < m->n_levels; l++) {
        Map g = model_grad(m, m->head[l], j->n);
        size_t pi = map_floats(g) / j->n;
        mt_copy_floats(mt, j->t, g.data, mt->master, mt->z.dout[l] + j->first * pi, j->n * pi, j->stage);
    }
    trainer_mark(j->t, TM_C1);                     // device 0: its loss (from C0) and the copy
    model_backward(m, j->n);
    trainer_mark(j->t, TM_B1);
}

// loss_on=local, device k: the normalisers from every device's target-score sums (copied in, in
// device order, each behind its owner's assignment), then the loss and backward
static void backward_local(Multi *mt, int k) {
    Job *j = &mt->job[k];
    Trainer *t = j->t;
    if (mt->procs) {                               // several processes: the sums are in already
        trainer_phase_backward(t, j->n, t->scal + SC_ALL, 1, mt->batch_mult);
        return;
    }
    double *all = t->scal + SC_ALL;
    int n_all = 0;
    for (int i = 0; i < mt->n; i++) {
        if (!mt->job[i].n) continue;
        Trainer *o = mt->job[i].t;
        if (i != k) mt_wait_for(mt, k, i, EV_ASSIGNED);
        mt_copy_doubles(mt, t, all + 2 * n_all++, o, o->scal + SC_TSS, 2, j->stage);
    }
    trainer_phase_backward(t, j->n, all, n_all, mt->batch_mult);
}

static void do_phase(Multi *mt, int k) {
    Job *j = &mt->job[k];
    Trainer *t = j->t;
    switch (mt->phase) {
    case PH_FORWARD:
        j->rc = trainer_phase_forward(t, j->n, mt->S, j->images, j->images_u8, j->targets, j->nt, &j->err);
        break;
    case PH_FORWARD_ONLY:
        forward_only(mt, j);
        break;
    case PH_BACKWARD: backward_local(mt, k); break;
    case PH_BACKWARD_D0: backward_from_zero(mt, k); break;
    case PH_REDUCE: mt_reduce_shard(mt, k); break;
    case PH_UPDATE: mt_update_shard(mt, k); break;
    case PH_ALLGATHER: mt_allgather_shards(mt, k); break;
    }
}

// ---- sync_bn=1: the BN sums of the devices with images (BnMeet) ----------------------------------

static void bn_meet_sum(void *arg, double *v, int n) {
    HookArg *a = arg;
    Multi *mt = a->mt;
    BnMeet *me = &mt->meet;
    pthread_mutex_lock(&me->mu);
    if (me->left) me->broken = 1;                  // a device is gone: this sum can never complete
    if (me->broken) { pthread_cond_broadcast(&me->cv); pthread_mutex_unlock(&me->mu); return; }
    if (me->arrived && n != me->len)
        die("sync_bn: device %d sums %d values where the others sum %d (the devices ran different models)", a->k, n,
            me->len);
    me->v[a->k] = v;
    me->len = n;
    if (++me->arrived < me->n) {
        long r = me->round;
        while (me->round == r && !me->broken) pthread_cond_wait(&me->cv, &me->mu);
        pthread_mutex_unlock(&me->mu);
        return;
    }
    if (n > me->cap) { me->cap = n; me->acc = xrealloc(me->acc, sizeof(double) * n); }
    int first = 1;
    for (int k = 0; k < mt->n; k++) {              // device order: the same doubles on every device
        if (!mt->job[k].n) continue;
        for (int i = 0; i < n; i++) me->acc[i] = first ? me->v[k][i] : me->acc[i] + me->v[k][i];
        first = 0;
    }
    if (mt->procs) procs_bn_sum(me->acc, n);       // then over the processes (from this worker: MPI SERIALIZED)
    for (int k = 0; k < mt->n; k++)
        if (mt->job[k].n) memcpy(me->v[k], me->acc, sizeof(double) * n);
    me->arrived = 0;
    me->round++;
    pthread_cond_broadcast(&me->cv);
    pthread_mutex_unlock(&me->mu);
}

// Device k is done with the phase's sums (or failed before them): a sum still waiting for it never completes.
static void bn_meet_leave(Multi *mt) {
    BnMeet *me = &mt->meet;
    pthread_mutex_lock(&me->mu);
    me->left++;
    if (me->arrived) { me->broken = 1; pthread_cond_broadcast(&me->cv); }
    pthread_mutex_unlock(&me->mu);
}

// A phase with BN sums: forward and backward, in training
static int phase_syncs(const Multi *mt) { return mt->sync_bn && mt->phase <= PH_BACKWARD_D0; }

// The event each phase records when its work is queued: what the other devices wait for.
static const int PHASE_EVENT[] = { EV_ASSIGNED, EV_ASSIGNED, EV_DONE, EV_DONE, EV_REDUCED, EV_UPDATED, EV_GATHERED };

// Before device k's first write of the step to memory another device may still read from the last
// step: the replicas' copies of the master's weights (reduce=device0, device 0's BN buffers), the
// others' all-gather of k's shard (reduce=sharded).
static void order_before_forward(Multi *mt, int k) {
    for (int j = 0; j < mt->n; j++) {
        if (j == k) continue;
        if (mt->sharded) mt_wait_for(mt, k, j, EV_GATHERED);
        else if (k == 0) mt_wait_for(mt, 0, j, EV_PULLED);
    }
}

// Device k's part of the current phase, queued; an error (the fail hook, a returned -1, a pending
// CUDA error) is left in the job for the host to report after the barrier.
static void run_phase(Multi *mt, int k) {
    Job *j = &mt->job[k];
    Trainer *t = j->t;
    j->rc = j->bystander = 0;
    if (mt->phase == PH_FORWARD || mt->phase == PH_FORWARD_ONLY) {   // before any gradient of the step
        order_before_forward(mt, k);
        if (mt->zero_first) model_zero_grad(&t->m);
        if (k == 0 && mt->dirty) mt_zero_outside(t, mt->shard[0].lo, mt->shard[0].hi);
    }
    if (mt->phase <= PH_BACKWARD_D0 && !j->n) {   // no image for this device this step
        mt_record(mt, k, PHASE_EVENT[mt->phase]);      // the step's end waits for its zeroing above
        return;
    }
    if (mt->hook && mt->hook(k, PHASE_NAMES[mt->phase], mt->hook_arg)) {
        j->rc = err_set(&j->err, "failed in its %s phase (injected)", PHASE_NAMES[mt->phase]);
        if (phase_syncs(mt)) bn_meet_leave(mt);
        return;
    }
    t->m.bn_sync = phase_syncs(mt) ? &mt->bn_sync[k] : NULL;
    do_phase(mt, k);
    if (t->m.bn_sync) {
        t->m.bn_sync = NULL;
        bn_meet_leave(mt);
        if (!j->rc && mt->meet.broken) {           // another device failed mid-phase: its error is the step's
            j->rc = err_set(&j->err, "another device stopped before its BN sums in the %s phase", PHASE_NAMES[mt->phase]);
            j->bystander = 1;
        }
    }
    mt_record(mt, k, PHASE_EVENT[mt->phase]);
    char msg[256];
    if (!j->rc && t->m.be->dev.check(t->m.be_ctx, msg, sizeof msg))
        j->rc = err_set(&j->err, "CUDA error in the %s phase: %s", PHASE_NAMES[mt->phase], msg);
}

typedef struct { Multi *mt; int k; } WorkerArg;

static void *worker(void *arg) {
    WorkerArg *a = arg;
    Multi *mt = a->mt;
    Trainer *t = mt->job[a->k].t;
    t->m.be->dev.bind(t->m.be_ctx);               // this thread's device, once
    for (;;) {
        pthread_barrier_wait(&mt->start);
        if (mt->phase == PH_QUIT) break;
        run_phase(mt, a->k);
        if (a->k && (mt->phase == PH_BACKWARD || mt->phase == PH_BACKWARD_D0)) mt_buckets_release(mt, a->k);
        pthread_barrier_wait(&mt->done);
    }
    free(a);
    return NULL;
}

// Every worker runs `phase`; returns -1 with err naming the first device that failed. Every
// worker is back at the start barrier either way, so a failure leaves no thread waiting.
int mt_run_all(Multi *mt, int phase, Err *err) {
    mt->phase = phase;
    if (phase_syncs(mt)) {                         // every worker waits at the start barrier: no sum is open
        BnMeet *me = &mt->meet;
        me->n = mt_used_devices(mt);
        me->arrived = me->left = me->broken = 0;
        me->round = 0;
    }
    if (phase == PH_BACKWARD || phase == PH_BACKWARD_D0) mt_buckets_reset(mt);
    pthread_barrier_wait(&mt->start);
    if (phase == PH_QUIT) return 0;
    pthread_barrier_wait(&mt->done);
    int failed = 0;
    for (int k = 0; k < mt->n; k++) failed |= mt->job[k].rc != 0;
    if (phase_syncs(mt) && mt->procs && !failed)   // the phase's BN sums end in every process (a failed step
        procs_bn_end(mt->meet.n > 0);              // ends them all through comm_abort instead)
    for (int k = 0; k < mt->n; k++) {               // a device that failed first, before those it left waiting
        if (!mt->job[k].rc || mt->job[k].bystander) continue;
        char name[32];
        return err_set(err, "device %d (%s): %s", k, mt_dev_name(mt, k, name, sizeof name), mt->job[k].err.msg);
    }
    for (int k = 0; k < mt->n; k++) {
        if (!mt->job[k].rc) continue;
        char name[32];
        return err_set(err, "device %d (%s): %s", k, mt_dev_name(mt, k, name, sizeof name), mt->job[k].err.msg);
    }
    return 0;
}


// ---- split=auto -------------------------------------------------------------------------------

// After AUTO_WARMUP steps, measure AUTO_MEASURE steps of forward+loss+backward per device, then
// split in proportion to the measured images per second, once (a second re-split would chase noise).
static void auto_split(Multi *mt, int B) {
    AutoSplit *a = &mt->au;
    if (strcmp(mt->split, "auto") || a->done || ++a->steps <= AUTO_WARMUP) return;
    for (int k = 0; k < mt->n; k++) { a->busy[k] += mt->job[k].compute; a->imgs[k] += mt->job[k].n; }
    if (a->steps < AUTO_WARMUP + AUTO_MEASURE) return;
    a->done = 1;
    double mean = 0;
    int measured = 0;
    for (int k = 0; k < mt->n; k++)
        if (a->imgs[k] > 0 && a->busy[k] > 0) { a->rate[k] = a->imgs[k] / a->busy[k]; mean += a->rate[k]; measured++; }
    if (!measured) return;
    for (int k = 0; k < mt->n; k++) if (!(a->imgs[k] > 0 && a->busy[k] > 0)) a->rate[k] = mean / measured;
    int sizes[MULTI_MAX];
    a->use = split_by_speed(a->rate, mt->sizes, mt->cap, B, mt->n, sizes);
    printf("split=auto: measured");
    for (int k = 0; k < mt->n; k++) printf(" %.2f", 1000 / a->rate[k]);
    if (!a->use) { printf(" ms per image per device; the split stays as it is\n"); return; }
    printf(" ms per image per device; the batch of %d is now split", B);
    for (int k = 0; k < mt->n; k++) printf("%s%d", k ? "+" : " ", sizes[k]);
    printf("\n");
    mt->last_B = -1;
}

// The micro-batch sizes of a batch of B images: split=auto's measured split once it has one, else split=.
static int split_sizes(const Multi *mt, int B, int *sizes, Err *err) {
    if (mt->au.use) {
        if (split_weighted(mt->au.rate, mt->cap, B, mt->n, sizes))
            return err_set(err, "split=auto: no split of %d images fits the devices' micro-batch sizes", B);
    } else if (split_batch_capped(mt->split, B, mt->n, mt->cap, sizes, err)) {   // the caps: a partial batch
        return -1;                                                                //   never outgrows the plan
    }
    for (int k = 0; k < mt->n; k++)
        if (sizes[k] > mt->cap[k])
            return err_set(err, "split=%s gives device %d %d images of a batch of %d; it was built for %d", mt->split, k,
                           sizes[k], B, mt->cap[k]);
    return 0;
}

static int plan_split(Multi *mt, int B, Err *err) {
    if (B == mt->last_B) return 0;
    if (split_sizes(mt, B, mt->sizes, err)) return -1;
    mt->last_B = B;
    return 0;
}

// ---- the step ------------------------------------------------------------------------------

// Device k's images and its targets, re-indexed from 0.
static void scatter(Multi *mt, const float *targets, int nt) {
    int first = 0;
    size_t bytes = (size_t)mt->shape.H * mt->shape.W * 3, floats = (size_t)mt->shape.h * mt->shape.w * 3;
    for (int k = 0; k < mt->n; k++) {
        Job *j = &mt->job[k];
        j->n = mt->sizes[k];
        j->first = first;
        j->compute = 0;
        const uint8_t *u8 = mt->images_u8;        // images NULL too: each share is still where the last step put it
        j->images = u8 || !mt->images ? NULL : mt->images + first * floats;
        j->images_u8 = u8 ? u8 + first * bytes : NULL;
        j->t->shape = mt->shape;                   // each device's trainer_phase_forward reads it
        j->t->input_aug = mt->images_aug ? mt->images_aug + first : NULL;   // augment=gpu: its samples
        j->nt = 0;
        for (int r = 0; r < nt; r++) {
            int img = (int)targets[6 * r];
            if (img < first || img >= first + j->n) continue;
            if (j->nt == j->tcap) { j->tcap = 2 * j->tcap + 64; j->targets = xrealloc(j->targets, sizeof(float) * 6 * j->tcap); }
            memcpy(j->targets + 6 * j->nt, targets + 6 * r, 6 * sizeof(float));
            j->targets[6 * j->nt++] -= (float)first;
        }
        first += j->n;
    }
}

// loss_on=local: every device its own loss, normalised by the whole batch's target-score sums
// (one per head output: a dual head's auxiliary maps have their own), summed on each device
static int loss_local(Multi *mt, int B, Err *err) {
    if (mt_run_all(mt, PH_FORWARD, err)) return -1;
    mt->batch_mult = B;
    if (mt->procs) mt_procs_normaliser(mt);       // every process's sums; the batch of them all
    return mt_run_all(mt, PH_BACKWARD, err);
}

// loss_on=device0: forward everywhere, the loss of the whole batch on device 0, backward everywhere
static int loss_device0(Multi *mt, int B, const float *targets, int nt, Err *err) {
    if (B > mt->z.max_B) return err_set(err, "loss_on=device0: a batch of %d images; built for %d", B, mt->z.max_B);
    if (mt_run_all(mt, PH_FORWARD_ONLY, err)) return -1;
    if (mt_loss_at_zero(mt, B, targets, nt, err)) return -1;
    return mt_run_all(mt, PH_BACKWARD_D0, err);
}

// A step failed: wait for what every device still has queued from it, so nothing it reads (the
// host's batch, pinned buffers) or writes (another device's memory) is in use when the caller goes
// on. Host waits on the failure path only.
static int settle(Multi *mt) {
    for (int k = 0; k < mt->n; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->dev.bind(t->m.be_ctx);
        t->m.be->dev.sync(t->m.be_ctx);
    }
    mt->master->m.be->dev.bind(mt->master->m.be_ctx);
    return -1;
}

// Forward, loss, backward and the reduction, queued on every device.
static int forward_backward(Multi *mt, int n, int S, const float *targets, int nt, Err *err) {
    if (plan_split(mt, n, err)) return -1;
    mt->n_step = n;
    mt->S = S;
    mt->shape = trainer_shape(mt->master, S);      // rect, multi_scale: set by the run
    scatter(mt, targets, nt);
    mt->procs_overlap = mt->procs && mt->procs_reduce && mt_bucketed(mt) && procs_overlap(mt->master);
    int rc = mt->loss_d0 ? loss_device0(mt, n, targets, nt, err) : loss_local(mt, n, err);
    mt->zero_first = mt->dirty = 0;                // done by the forward phase
    if (rc) return -1;
    if (mt->sharded) rc = mt_run_all(mt, PH_REDUCE, err);
    else mt_gather(mt);
    if (!rc && mt->procs) mt_procs_reduce(mt);    // then across processes
    return rc;
}

// The step's one host wait: device 0's queue waits for every replica's last work of the step
// (event `last`), then the host waits for device 0. Then the loss items (each share's add up to the
// batch's), the devices' timer marks and the per-device report. wall: the host's seconds since the
// step began, of which each device was busy for its marks' total and idle for the rest.
static void finish_step(Multi *mt, int last, double t0, LossOut *out) {
    Trainer *m0 = mt->master;
    m0->m.be->dev.bind(m0->m.be_ctx);
    for (int k = 1; k < mt->n; k++) mt_wait_for(mt, 0, k, last);
    m0->m.be->dev.sync(m0->m.be_ctx);
    double wall = now_seconds() - t0;
    memset(out, 0, sizeof *out);
    if (mt->loss_d0 && mt->n_step) mt_loss_dev0_items(mt, out);   // none: no loss this step here
    for (int k = 0; k < mt->n; k++) {
        Job *j = &mt->job[k];
        if (!mt->loss_d0 && j->n) {
            LossOut o;
            trainer_phase_items(j->t, &o);
            out->box += o.box; out->cls += o.cls; out->dfl += o.dfl; out->total += o.total; out->n_fg += o.n_fg;
            out->n_fg_aux += o.n_fg_aux;
            if (k == 0) { out->tss = o.tss; out->tss_aux = mt->master->m.n_aux ? o.tss_aux : 0; }
        }
        PhaseTimes d;
        trainer_read_times(j->t, &d);
        MultiDevStats *s = &mt->stats[k];
        s->forward += d.forward; s->loss += d.loss; s->backward += d.backward;
        s->gather += d.gather; s->update += d.optim; s->broadcast += d.broadcast;
        j->compute = d.forward + d.loss + d.backward;
        double busy = j->compute + d.gather + d.optim + d.broadcast;
        s->idle += wall > busy ? wall - busy : 0;
    }
    if (mt->procs) procs_sum_items(out);          // each process's share: the batch's
}

int multi_forward_backward(Multi *mt, int n, int S, const float *targets, int nt, LossOut *out, Err *err) {
    double t0 = now_seconds();
    mt->images_u8 = mt->master->input_u8;
    mt->images = mt->images_u8 ? NULL : mt->master->input;
    mt->images_aug = mt->master->input_aug;
    mt->procs_reduce = 1;
    if (forward_backward(mt, n, S, targets, nt, err)) return settle(mt);
    finish_step(mt, mt->sharded ? EV_REDUCED : EV_DONE, t0, out);
    return 0;
}

static void after_step(Multi *mt) {
    for (int k = 0; k < mt->n; k++) {
        MultiDevStats *s = &mt->stats[k];
        s->steps++;
        s->images += mt->job[k].n;
        if (mt->gpu[k] < 0) s->mem_bytes = s->peak_bytes = -1;   // the CPU: n/a
        const Trainer *t = mt->job[k].t;
        if (t->m.on_device) {
            s->mem_bytes = (double)t->m.be->dev.mem_used(t->m.be_ctx);
            s->peak_bytes = fmax(s->peak_bytes, s->mem_bytes);
        }
    }
    mt->master->m.be->dev.bind(mt->master->m.be_ctx);  // the memory query selects each GPU in turn
}

int multi_step(Multi *mt, const float *images, const uint8_t *images_u8, int n, int S, const float *targets, int nt,
               int epoch, int i, LossOut *out, Err *err) {
    double t0 = now_seconds();
    mt->images = images;
    mt->images_u8 = images_u8;
    mt->images_aug = mt->master->input_aug;       // augment=gpu (core/train/train.c sets it as input_u8)
    mt->zero_first = i == 0;                       // train.py zeroes the gradients at each epoch start
    mt->procs_reduce = mt->procs && procs_will_step(mt->master, epoch, i);   // accumulated until the step
    if (forward_backward(mt, n, S, targets, nt, err)) return settle(mt);
    if (mt->sharded) {
        if (mt_sharded_update(mt, epoch, i, err)) return settle(mt);
    } else {
        trainer_update(mt->master, epoch, i);
        mt_broadcast(mt);
    }
    finish_step(mt, mt->sharded ? EV_GATHERED : EV_PULLED, t0, out);
    after_step(mt);
    auto_split(mt, n);
    return 0;
}

// The shares the step will scatter (split_sizes), so each device's step finds its copy; a split that changes in
// between (split=auto) only makes that step copy again.
int multi_shares(Trainer *t, int n, MultiShare share[MULTI_MAX]) {
    Multi *mt = t->multi;
    if (!mt) {
        share[0] = (MultiShare){ t, 0, n };
        return 1;
    }
    int sizes[MULTI_MAX], first = 0;
    Err err;
    if (split_sizes(mt, n, sizes, &err)) return 0;   // the step reports it
    for (int k = 0; k < mt->n; k++) {
        share[k] = (MultiShare){ mt->job[k].t, first, sizes[k] };
        first += sizes[k];
    }
    return mt->n;
}

// share(d, first, count, arg) for each device d of t with a share of a batch of n, one after another.
static void each_share(Trainer *t, int n, void (*share)(Trainer *d, int first, int count, const void *arg),
                       const void *arg) {
    MultiShare sh[MULTI_MAX];
    int n_dev = multi_shares(t, n, sh);
    for (int k = 0; k < n_dev; k++)
        if (sh[k].count) share(sh[k].dev, sh[k].first, sh[k].count, arg);
}

typedef struct { const uint8_t *images; size_t per; } U8Batch;

static void share_u8(Trainer *d, int first, int count, const void *arg) {
    const U8Batch *b = arg;                       // CPU devices convert the bytes in the step (no-op)
    d->m.be->dev.prefetch_u8(d->m.be_ctx, b->images + first * b->per, count * b->per);
}

// Each GPU's share is the bytes its step will pass to model_forward_u8 (scatter's).
void multi_prefetch(Trainer *t, const uint8_t *images, int n, int H, int W) {
    each_share(t, n, share_u8, &(U8Batch){ images, (size_t)H * W * 3 });
}

static void share_aug(Trainer *d, int first, int count, const void *arg) {
    d->m.be->dev.prefetch_aug(d->m.be_ctx, (const AugSample *)arg + first, count);
}

// augment=gpu: the same for the tiles of each device's samples, the shares model_forward_aug will get.
void multi_prefetch_aug(Trainer *t, const AugSample *s, int n) { each_share(t, n, share_aug, s); }

int multi_decodes_jpeg(Trainer *t) {
    Multi *mt = t->multi;
    if (!mt) return t->m.be->dev.decodes_jpeg(t->m.be_ctx);
    for (int k = 0; k < mt->n; k++) {
        Trainer *d = mt->job[k].t;
        if (!d->m.be->dev.decodes_jpeg(d->m.be_ctx)) return 0;
    }
    return 1;
}

void multi_set_bucket_floats(Multi *mt, size_t floats) {
    if (!mt_bucketed(mt)) return;
    mt->bk.floats = floats ? floats : BUCKET_FLOATS;
    mt_plan_buckets(mt);
}

int multi_bucket_count(const Multi *mt) { return mt->bk.n; }

const int *multi_sizes(const Multi *mt) { return mt->sizes; }
int multi_count(const Multi *mt) { return mt->n; }
const Trainer *multi_replica(const Multi *mt, int k) { return k ? &mt->rep[k] : mt->master; }
Trainer *multi_replica_mut(Multi *mt, int k) { return k ? &mt->rep[k] : mt->master; }

void multi_shard(const Multi *mt, int k, size_t *lo, size_t *hi) {
    if (mt->sharded) { *lo = mt->shard[k].lo; *hi = mt->shard[k].hi; return; }
    *lo = 0;
    *hi = k ? 0 : mt->master->m.n_state;
}

void multi_set_fail_hook(Multi *mt, MultiFailHook hook, void *arg) { mt->hook = hook; mt->hook_arg = arg; }

// ---- per-device report -------------------------------------------------------------------------

const MultiDevStats *multi_stats(const Multi *mt, int k) { return &mt->stats[k]; }

void multi_reset_stats(Multi *mt) {
    for (int k = 0; k < mt->n; k++) {
        double peak = mt->stats[k].peak_bytes, mem = mt->stats[k].mem_bytes;
        memset(&mt->stats[k], 0, sizeof mt->stats[k]);
        mt->stats[k].peak_bytes = peak;           // a peak is a peak: it survives the reset
        mt->stats[k].mem_bytes = mem;
    }
}

void multi_epoch_report(Multi *mt, FILE *csv, int epoch) {
    if (csv && ftell(csv) == 0)
        fprintf(csv, "epoch,device,images_per_step,steps,forward_ms,loss_ms,backward_ms,gather_ms,update_ms,broadcast_ms,"
                     "idle_ms,mem_gib,peak_mem_gib\n");
    for (int k = 0; k < mt->n; k++) {
        const MultiDevStats *s = &mt->stats[k];
        double per = s->steps ? 1000.0 / s->steps : 0, ipb = s->steps ? (double)s->images / s->steps : 0;
        char name[32], mem[48];
        mt_dev_name(mt, k, name, sizeof name);
        if (s->mem_bytes < 0) snprintf(mem, sizeof mem, "n/a");
        else snprintf(mem, sizeof mem, "%.2fG (peak %.2fG)", s->mem_bytes / 1073741824, s->peak_bytes / 1073741824);
        printf("  %-7s %5.1f img/step  ms/step: forward %.1f loss %.1f backward %.1f gather %.1f update %.1f broadcast "
               "%.1f idle %.1f  mem %s\n", name, ipb, s->forward * per, s->loss * per, s->backward * per,
               s->gather * per, s->update * per, s->broadcast * per, s->idle * per, mem);
        if (!csv) continue;
        fprintf(csv, "%d,%s,%.2f,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,", epoch, name, ipb, s->steps, s->forward * per,
                s->loss * per, s->backward * per, s->gather * per, s->update * per, s->broadcast * per, s->idle * per);
        if (s->mem_bytes < 0) fprintf(csv, "n/a,n/a\n");
        else fprintf(csv, "%.3f,%.3f\n", s->mem_bytes / 1073741824, s->peak_bytes / 1073741824);
    }
    if (csv) fflush(csv);
    multi_reset_stats(mt);
}

// ---- setup ---------------------------------------------------------------------------------

// Floats the host stages per copy when peer access is off: the state, or a micro-batch's head maps.
static size_t stage_floats(const Multi *mt) {
    const Model *m = &mt->master->m;
    size_t n = m->n_state, maps = 0;
    for (int l = 0; l < m->n_levels; l++) {
        int side = m->imgsz / m->values[m->head[l]].stride;
        maps += (size_t)side * side * m->values[m->head[l]].C;
    }
    int most = mt->z.max_B > mt->cap[0] ? mt->z.max_B : mt->cap[0];
    return maps * most > n ? maps * most : n;
}

void multi_use_host_copies(Multi *mt) {
    mt->staged = 1;
    for (int k = 0; k < mt->n; k++)
        if (!mt->job[k].stage) mt->job[k].stage = xmalloc(stage_floats(mt) * sizeof(float));
}

int multi_host_copies(const Multi *mt) { return mt->staged; }

static void print_plan(const Multi *mt, const char *copies) {
    printf("parallel: %d devices, reduce=%s, loss_on=%s, split=%s%s; %s\n", mt->n, mt->sharded ? "sharded" : "device0",
           mt->loss_d0 ? "device0" : "local", mt->split, mt->sync_bn ? ", sync_bn=1 (BN over the whole batch)" : "",
           copies);
    for (int k = 0; k < mt->n; k++) {
        char name[32];
        printf("  %-7s micro-batch up to %d images", mt_dev_name(mt, k, name, sizeof name), mt->cap[k]);
        if (mt->sharded) printf(", shard of %zu floats [%zu, %zu): its gradient sum, clip, SGD and EMA",
                                mt->shard[k].hi - mt->shard[k].lo, mt->shard[k].lo, mt->shard[k].hi);
        else if (!k) printf(", gathers the gradients, updates, broadcasts");
        if (!k && mt->loss_d0) printf(", holds the head outputs of %d images and computes their loss", mt->z.max_B);
        printf("\n");
    }
}

_Static_assert(MULTI_MAX <= SC_DEVICES, "Trainer.scal holds every device's sums");

static void events_new(Multi *mt) {
    for (int k = 0; k < mt->n; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->dev.bind(t->m.be_ctx);
        for (int e = 0; e < EV_COUNT; e++) mt->ev[k][e] = t->m.be->dev.event_new(t->m.be_ctx);
    }
    mt->master->m.be->dev.bind(mt->master->m.be_ctx);
}

static void events_free(Multi *mt) {
    for (int k = 0; k < mt->n && k <= mt->n_reps; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->dev.bind(t->m.be_ctx);
        for (int e = 0; e < EV_COUNT; e++)
            if (mt->ev[k][e]) t->m.be->dev.event_free(t->m.be_ctx, mt->ev[k][e]);
    }
}

// Everything multi_init made, threads excepted (they start last, when nothing can fail any more).
static void release(Multi *mt) {
    for (int k = 0; k < mt->n; k++) {             // nothing queued may still use what is freed below
        Trainer *t = mt->job[k].t;
        if (k > mt->n_reps) break;
        t->m.be->dev.bind(t->m.be_ctx);
        t->m.be->dev.sync(t->m.be_ctx);
    }
    events_free(mt);
    mt_buckets_free(mt);
    for (int k = 0; k < mt->n; k++) mt_shard_free(&mt->shard[k]);
    mt_loss_dev0_free(mt);
    pthread_mutex_destroy(&mt->meet.mu);
    pthread_cond_destroy(&mt->meet.cv);
    free(mt->meet.acc);
    for (int k = 1; k <= mt->n_reps; k++) trainer_free(&mt->rep[k]);
    for (int k = 0; k < mt->n; k++) { free(mt->job[k].targets); free(mt->job[k].stage); }
    mt->master->multi = NULL;
    mt->master->m.be->dev.bind(mt->master->m.be_ctx);
    free(mt);
}

// Peer access and its self-test (GPUs), or nothing to do (CPU devices copy with memcpy). Returns
// 1 when copies must be staged through host memory.
static int setup_copies(Multi *mt, char *report, size_t size) {
    snprintf(report, size, "copies between devices: memcpy (CPU devices)");
    const Backend *be = mt->master->m.be;
    if (mt->gpu[0] >= 0 && be->dev.peer_setup) return !be->dev.peer_setup(mt->gpu, mt->n, report, size);
    return 0;
}

int multi_init(Trainer *master, const Config *cfg, const DeviceList *devs, int micro, Err *err) {
    Multi *mt = xcalloc(1, sizeof *mt);
    mt->n = devs->n;
    mt->master = master;
    mt->sharded = !strcmp(cfg->reduce, "sharded");
    mt->loss_d0 = !strcmp(cfg->loss_on, "device0");
    snprintf(mt->split, sizeof mt->split, "%s", cfg->split);
    mt->sync_bn = cfg->sync_bn;
    pthread_mutex_init(&mt->meet.mu, NULL);
    pthread_cond_init(&mt->meet.cv, NULL);
    for (int k = 0; k < mt->n; k++) {
        mt->sync_args[k] = (HookArg){ mt, k };
        mt->bn_sync[k] = (BnSync){ bn_meet_sum, &mt->sync_args[k] };
    }
    master->multi = mt;
    master->release = multi_free;                     // trainer_free(master) frees the replicas first
    for (int k = 0; k < mt->n; k++) {
        mt->gpu[k] = devs->gpu[k];
        mt->job[k].t = k ? &mt->rep[k] : master;
        mt->cap[k] = k ? micro : master->m.max_n;
    }
    for (int k = 1; k < mt->n; k++, mt->n_reps++)
        if (trainer_init_replica(&mt->rep[k], cfg, devs->gpu[k], micro, err)) { release(mt); return -1; }
    master->m.be->dev.bind(master->m.be_ctx);
    char copies[512];
    int staged = setup_copies(mt, copies, sizeof copies);
    if (mt->loss_d0 && mt_loss_dev0_init(mt, cfg->batch, err)) { release(mt); return -1; }
    if (staged) multi_use_host_copies(mt);
    events_new(mt);
    mt_broadcast(mt);                                 // every replica starts from the master's weights
    mt_buckets_init(mt);
    if (mt->sharded) {
        mt_shard_bounds(mt);
        for (int k = 0; k < mt->n; k++)
            if (mt_shard_init(mt, k, err)) { release(mt); return -1; }
    }
    mt->procs = procs_active();
    if (mt->procs && mt_procs_check(mt, err)) { release(mt); return -1; }
    memset(mt->stats, 0, sizeof mt->stats);
    print_plan(mt, copies);
    pthread_barrier_init(&mt->start, NULL, mt->n + 1);
    pthread_barrier_init(&mt->done, NULL, mt->n + 1);
    for (int k = 0; k < mt->n; k++) {
        WorkerArg *a = xmalloc(sizeof *a);
        *a = (WorkerArg){ mt, k };
        if (pthread_create(&mt->thread[k], NULL, worker, a)) die("cannot start device worker %d", k);
    }
    return 0;
}

void multi_free(Trainer *master) {
    Multi *mt = master->multi;
    if (!mt) return;
    Err err;
    mt_run_all(mt, PH_QUIT, &err);
    for (int k = 0; k < mt->n; k++) pthread_join(mt->thread[k], NULL);
    pthread_barrier_destroy(&mt->start);
    pthread_barrier_destroy(&mt->done);
    release(mt);
}
