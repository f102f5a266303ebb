// multi.c: several devices in one process (see multi.h). Device 0 is the master trainer; devices
// 1..n-1 are replicas. Each step: scatter micro-batches, every worker thread runs forward and
// assignment, the target-score sums are added, every worker runs loss and backward, then the
// master gathers the gradients (and the BN running statistics) with device-to-device copies,
// updates, and sends the new state back.
#include "core/multi.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

// ---- devices and splits --------------------------------------------------------------------

int parse_devices(const char *spec, int n_gpus, DeviceList *out, Err *err) {
    char buf[256];
    int k = 0;
    for (const char *p = spec; *p && k < (int)sizeof buf - 1; p++) {   // [0, 1] -> 0,1; "0 1" stays an error
        if (strchr("[]()'\"", *p)) continue;
        if (*p == ' ' && (!k || buf[k - 1] == ',' || !p[1] || p[1] == ',' || strchr("])", p[1]))) continue;
        buf[k++] = *p;
    }
    buf[k] = 0;
    memset(out, 0, sizeof *out);
    if (!strncmp(buf, "cpu", 3)) {
        long n = buf[3] == ':' ? strtol(buf + 4, NULL, 10) : buf[3] ? -1 : 1;
        if (n < 1 || n > MULTI_MAX)
            return err_set(err, "device=%s: write cpu or cpu:N with N from 1 to %d", spec, MULTI_MAX);
        out->n = (int)n;
        for (int i = 0; i < n; i++) out->gpu[i] = -1;
        return 0;
    }
    if (!buf[0]) {                                     // every GPU present, else the CPU
        out->n = n_gpus ? (n_gpus < MULTI_MAX ? n_gpus : MULTI_MAX) : 1;
        for (int i = 0; i < out->n; i++) out->gpu[i] = n_gpus ? i : -1;
        return 0;
    }
    for (char *p = buf; *p;) {
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p || (*end && *end != ','))
            return err_set(err, "device=%s: write GPU ids separated by commas (device=0,1), cpu or cpu:N", spec);
        if (id < 0 || id >= n_gpus)
            return err_set(err, "device=%s: there is no GPU %ld (%d GPU%s found)", spec, id, n_gpus, n_gpus == 1 ? "" : "s");
        for (int i = 0; i < out->n; i++)
            if (out->gpu[i] == id) return err_set(err, "device=%s: GPU %ld is named twice", spec, id);
        if (out->n == MULTI_MAX) return err_set(err, "device=%s: at most %d devices", spec, MULTI_MAX);
        out->gpu[out->n++] = (int)id;
        p = *end ? end + 1 : end;
    }
    return 0;
}

int split_batch(const char *split, int B, int n, int *sizes, Err *err) {
    memset(sizes, 0, sizeof(int) * n);
    if (!strcmp(split, "even") || !strcmp(split, "auto")) {   // torch.chunk
        int chunk = (B + n - 1) / n, left = B;
        for (int k = 0; k < n && left > 0; k++) { sizes[k] = left < chunk ? left : chunk; left -= sizes[k]; }
        return 0;
    }
    double w[MULTI_MAX], sum = 0;
    const char *p = split;
    for (int k = 0; k < n; k++) {
        char *end;
        w[k] = strtod(p, &end);
        if (end == p || w[k] < 0) return err_set(err, "split=%s: give %d non-negative weights, one per device", split, n);
        sum += w[k];
        p = *end == ',' ? end + 1 : end;
    }
    if (*p || sum <= 0) return err_set(err, "split=%s: give %d non-negative weights, one per device", split, n);
    int given = 0;
    for (int k = 0; k < n; k++) { sizes[k] = (int)(B * w[k] / sum); given += sizes[k]; }
    for (int k = 0; given < B; k = (k + 1) % n)        // the rounding remainder, one image at a time
        if (w[k] > 0) { sizes[k]++; given++; }
    if (!sizes[0]) return err_set(err, "split=%s: device 0 gets no image of a batch of %d", split, B);
    return 0;
}

// ---- workers -------------------------------------------------------------------------------

enum { PHASE_FORWARD, PHASE_BACKWARD, PHASE_QUIT };

typedef struct {             // one device's share of the step
    Trainer *t;
    const float *images;     // floats, or
    const uint8_t *images_u8; // the loader's bytes
    float   *targets;        // (nt, 6), image index local to the micro-batch
    int      cap, n, nt, rc;
    double   tss;
    LossOut  out;
    Err      err;
} Job;

struct Multi {
    int              n, sizes[MULTI_MAX], last_B;
    char             split[256];
    Trainer         *master, rep[MULTI_MAX];   // rep[0] is unused: device 0 is the master
    Job              job[MULTI_MAX];
    pthread_t        thread[MULTI_MAX];
    pthread_barrier_t start, done;
    int              phase, S;
    double           norm, batch_mult;
    float           *recv;                     // n_state floats in the master's memory
};

static void run_phase(Multi *mt, int k) {
    Job *j = &mt->job[k];
    if (!j->n) return;
    if (mt->phase == PHASE_FORWARD) {
        j->rc = trainer_forward_assign(j->t, j->n, mt->S, j->images, j->images_u8, j->targets, j->nt, &j->tss,
                                       &j->err);
    } else {
        trainer_compute_backward(j->t, j->n, mt->norm, mt->batch_mult, &j->out);
        j->t->m.be->sync(j->t->m.be_ctx);      // the master reads these gradients next
    }
}

typedef struct { Multi *mt; int k; } WorkerArg;

static void *worker(void *arg) {
    WorkerArg *a = arg;
    Multi *mt = a->mt;
    Trainer *t = mt->job[a->k].t;
    t->m.be->bind(t->m.be_ctx);               // this thread's device, once
    for (;;) {
        pthread_barrier_wait(&mt->start);
        if (mt->phase == PHASE_QUIT) break;
        run_phase(mt, a->k);
        pthread_barrier_wait(&mt->done);
    }
    free(a);
    return NULL;
}

static void run_all(Multi *mt, int phase) {
    mt->phase = phase;
    pthread_barrier_wait(&mt->start);
    if (phase != PHASE_QUIT) pthread_barrier_wait(&mt->done);
}

// ---- copies between devices ----------------------------------------------------------------

static void add_into(Trainer *dst, float *to, const float *from, size_t n) {
    Map a = map_make((float *)from, 1, 1, (int)n, 1), b = map_make(to, 1, 1, (int)n, 1);
    dst->m.be->accumulate_map(dst->m.be_ctx, a, b);
}

// master.grad += sum of the replicas' gradients; BN running statistics := mean over devices
static void gather(Multi *mt) {
    Trainer *m0 = mt->master;
    Model *m = &m0->m;
    int used = 0;
    for (int k = 0; k < mt->n; k++) used += mt->job[k].n > 0;
    m->be->bind(m->be_ctx);
    for (int k = 1; k < mt->n; k++) {
        if (!mt->job[k].n) continue;
        Model *r = &mt->rep[k].m;
        m->be->pull(m->be_ctx, mt->recv, r->be_ctx, r->grad, m->n_state);
        add_into(m0, m->grad, mt->recv, m->n_state);
        m->be->pull(m->be_ctx, mt->recv, r->be_ctx, r->state + m->buffers, m->n_buffers);
        add_into(m0, m->state + m->buffers, mt->recv, m->n_buffers);
    }
    if (used > 1) m->be->scale(m->be_ctx, m->state + m->buffers, m->n_buffers, 1.0f / used);
}

// every replica := the master's state (weights and BN buffers); replica gradients := 0
static void broadcast(Multi *mt) {
    Model *m = &mt->master->m;
    m->be->sync(m->be_ctx);                       // the update is done before anyone copies it
    for (int k = 1; k < mt->n; k++) {
        Model *r = &mt->rep[k].m;
        r->be->bind(r->be_ctx);
        r->be->pull(r->be_ctx, r->state, m->be_ctx, m->state, m->n_state);
        model_zero_grad(r);
        r->be->sync(r->be_ctx);
    }
    m->be->bind(m->be_ctx);
}

// ---- the step ------------------------------------------------------------------------------

// Device k's images and its targets, re-indexed from 0.
static void scatter(Multi *mt, int S, const float *targets, int nt) {
    int first = 0;
    for (int k = 0; k < mt->n; k++) {
        Job *j = &mt->job[k];
        j->n = mt->sizes[k];
        const uint8_t *u8 = mt->master->input_u8;
        j->images = u8 ? NULL : mt->master->input + (size_t)first * S * S * 3;
        j->images_u8 = u8 ? u8 + (size_t)first * S * S * 3 : NULL;
        j->nt = 0;
        for (int r = 0; r < nt; r++) {
            int img = (int)targets[6 * r];
            if (img < first || img >= first + j->n) continue;
            if (j->nt == j->cap) { j->cap = 2 * j->cap + 64; j->targets = xrealloc(j->targets, sizeof(float) * 6 * j->cap); }
            memcpy(j->targets + 6 * j->nt, targets + 6 * r, 6 * sizeof(float));
            j->targets[6 * j->nt++] -= (float)first;
        }
        first += j->n;
    }
}

int multi_forward_backward(Multi *mt, int n, int S, const float *targets, int nt, LossOut *out, Err *err) {
    if (n != mt->last_B) {
        if (split_batch(mt->split, n, mt->n, mt->sizes, err)) return -1;
        mt->last_B = n;
    }
    scatter(mt, S, targets, nt);
    mt->S = S;
    run_all(mt, PHASE_FORWARD);
    double tss = 0;
    for (int k = 0; k < mt->n; k++) {
        if (mt->job[k].n && mt->job[k].rc) { *err = mt->job[k].err; return -1; }
        tss += mt->job[k].n ? mt->job[k].tss : 0;
    }
    mt->norm = tss > 1 ? tss : 1;                 // the whole batch's normaliser, as DataParallel's
    mt->batch_mult = n;
    run_all(mt, PHASE_BACKWARD);
    memset(out, 0, sizeof *out);
    for (int k = 0; k < mt->n; k++) {             // each share's items and total add up to the batch's
        const LossOut *o = &mt->job[k].out;
        if (!mt->job[k].n) continue;
        out->box += o->box; out->cls += o->cls; out->dfl += o->dfl; out->total += o->total; out->n_fg += o->n_fg;
    }
    out->tss = mt->norm;
    double t0 = now_seconds();
    gather(mt);
    mt->master->t.gather += now_seconds() - t0;
    return 0;
}

int multi_step(Multi *mt, int n, int S, const float *targets, int nt, int epoch, int i, LossOut *out, Err *err) {
    if (multi_forward_backward(mt, n, S, targets, nt, out, err)) return -1;
    trainer_update(mt->master, epoch, i);
    double t0 = now_seconds();
    broadcast(mt);
    mt->master->t.broadcast += now_seconds() - t0;
    return 0;
}

const int *multi_sizes(const Multi *mt) { return mt->sizes; }
const Trainer *multi_replica(const Multi *mt, int k) { return k ? &mt->rep[k] : mt->master; }

// ---- setup ---------------------------------------------------------------------------------

int multi_init(Trainer *master, const Config *cfg, const DeviceList *devs, int micro, Err *err) {
    Multi *mt = xcalloc(1, sizeof *mt);
    mt->n = devs->n;
    mt->master = master;
    snprintf(mt->split, sizeof mt->split, "%s", cfg->split);
    for (int k = 1; k < mt->n; k++)
        if (trainer_init_replica(&mt->rep[k], cfg, devs->gpu[k], micro, err)) {
            for (int j = 1; j < k; j++) trainer_free(&mt->rep[j]);
            free(mt);
            return -1;
        }
    Model *m = &master->m;
    m->be->bind(m->be_ctx);
    mt->recv = master->recv;
    for (int k = 0; k < mt->n; k++) mt->job[k].t = k ? &mt->rep[k] : master;
    master->multi = mt;
    broadcast(mt);                                 // every replica starts from the master's weights
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
    run_all(mt, PHASE_QUIT);
    for (int k = 0; k < mt->n; k++) pthread_join(mt->thread[k], NULL);
    pthread_barrier_destroy(&mt->start);
    pthread_barrier_destroy(&mt->done);
    for (int k = 1; k < mt->n; k++) trainer_free(&mt->rep[k]);
    for (int k = 0; k < mt->n; k++) free(mt->job[k].targets);
    master->multi = NULL;
    master->m.be->bind(master->m.be_ctx);
    free(mt);
}
