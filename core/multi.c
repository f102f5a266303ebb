// multi.c: several devices in one process (see multi.h). Device 0 is the master trainer; devices
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
#include "core/multi.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>


// ---- devices and splits --------------------------------------------------------------------

static void trim(const char **a, const char **b) {   // the text [*a, *b) less its outer spaces
    while (*a < *b && **a == ' ') (*a)++;
    while (*b > *a && (*b)[-1] == ' ') (*b)--;
}

// device= as written less an outer pair of quotes and one of brackets, with the spaces next to
// commas and ends gone ("[0, 1]" -> "0,1"; "0 1" keeps its space, an error later). Returns 0, or
// -1 with err for brackets or quotes anywhere else.
static int unwrap_devices(const char *spec, char *buf, size_t size, Err *err) {
    const char *a = spec, *b = spec + strlen(spec);
    trim(&a, &b);
    if (b - a >= 2 && (*a == '\'' || *a == '"') && b[-1] == *a) a++, b--;
    trim(&a, &b);
    if (a < b && (*a == '[' || *a == '(')) {
        char close = *a == '[' ? ']' : ')';
        if (b - a < 2 || b[-1] != close)
            return err_set(err, "device=%s: the %c is not closed by a %c at the end; write device=[0,1] or "
                           "device=0,1", spec, *a, close);
        a++, b--;
        trim(&a, &b);
        if (a == b)
            return err_set(err, "device=%s: no device inside the brackets; write device=[0,1] or device=0,1", spec);
    }
    if ((size_t)(b - a) >= size) return err_set(err, "device=%.40s...: too long", spec);
    size_t k = 0;
    for (const char *p = a; p < b; p++) {
        if (strchr("[]()'\"", *p))
            return err_set(err, "device=%s: brackets go around the whole list, once: device=[0,1] or device=0,1",
                           spec);
        const char *q = p;
        while (q < b && *q == ' ') q++;
        if (*p == ' ' && (!k || buf[k - 1] == ',' || q == b || *q == ',')) continue;
        buf[k++] = *p;
    }
    buf[k] = 0;
    return 0;
}

int parse_devices(const char *spec, int n_gpus, DeviceList *out, Err *err) {
    char buf[256];
    if (unwrap_devices(spec, buf, sizeof buf, err)) return -1;
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
        if (*end && !*p)
            return err_set(err, "device=%s: an id is missing after the last comma; write device=0,1", spec);
    }
    return 0;
}

int split_weighted(const double *w, const int *cap, int B, int n, int *sizes) {
    double sum = 0, ideal[MULTI_MAX];
    for (int k = 0; k < n; k++) sum += w[k] > 0 ? w[k] : 0;
    if (sum <= 0) return -1;
    int given = 0;
    for (int k = 0; k < n; k++) {
        ideal[k] = w[k] > 0 ? B * w[k] / sum : 0;
        sizes[k] = (int)ideal[k];
        if (cap && sizes[k] > cap[k]) sizes[k] = cap[k];
        given += sizes[k];
    }
    while (given < B) {                                // the remainder, one image at a time
        int best = -1;
        for (int k = 0; k < n; k++) {
            if (w[k] <= 0 || (cap && sizes[k] >= cap[k])) continue;
            if (best < 0 || ideal[k] - sizes[k] > ideal[best] - sizes[best]) best = k;
        }
        if (best < 0) return -1;
        sizes[best]++;
        given++;
    }
    if (!sizes[0] && w[0] > 0 && B > 0 && (!cap || cap[0] > 0)) {   // a small (last, partial) batch: device 0
        int most = 1;                                                 // takes one from the fullest device
        for (int k = 2; k < n; k++) if (sizes[k] > sizes[most]) most = k;
        sizes[most]--, sizes[0]++;
    }
    return sizes[0] ? 0 : -1;
}

int split_batch(const char *split, int B, int n, int *sizes, Err *err) {
    return split_batch_capped(split, B, n, NULL, sizes, err);
}

int split_batch_capped(const char *split, int B, int n, const int *cap, int *sizes, Err *err) {
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
        if (end == p || w[k] <= 0) return err_set(err, "split=%s: give %d positive weights, one per device", split, n);
        sum += w[k];
        p = *end == ',' ? end + 1 : end;
    }
    if (*p || sum <= 0) return err_set(err, "split=%s: give %d positive weights, one per device", split, n);
    if (split_weighted(w, cap, B, n, sizes))
        return err_set(err, "split=%s: device 0 gets no image of a batch of %d", split, B);
    return 0;
}

int multi_plan_micro(const char *split, int B, int n, Err *err) {
    int sizes[MULTI_MAX], micro = 0;
    if (split_batch(split, B, n, sizes, err)) return -1;
    for (int k = 0; k < n; k++) micro = sizes[k] > micro ? sizes[k] : micro;
    if (!strcmp(split, "auto")) {
        int more = (int)ceil(1.25 * micro);
        micro = more < B ? more : B;
    }
    return micro;
}

// ---- state -----------------------------------------------------------------------------------

enum { PH_FORWARD, PH_FORWARD_ONLY, PH_BACKWARD, PH_BACKWARD_D0, PH_REDUCE, PH_UPDATE, PH_ALLGATHER, PH_QUIT };
static const char *PHASE_NAMES[] = { "forward", "forward", "backward", "backward", "reduce", "update",
                                     "all-gather", "quit" };

enum { AUTO_WARMUP = 2, AUTO_MEASURE = 4 };   // split=auto: steps skipped, then steps measured

typedef struct {             // one device's share of the step
    Trainer *t;
    const float *images;     // floats, or
    const uint8_t *images_u8; // the loader's bytes
    float   *targets;        // (nt, 6), image index local to the micro-batch
    int      tcap, n, first, nt, rc;
    double   compute;        // seconds of forward + loss + backward in the last step
    Err      err;
    float   *stage;          // host staging for copies when peer access is off
} Job;

// What a device's queue has done, for the others to wait on (recorded each step, after the work):
// its assignment (or, loss_on=device0, its forward), its backward, its shard's reduce, its update,
// its all-gather, its copy of the master's weights; device 0's loss under loss_on=device0.
enum { EV_ASSIGNED, EV_DONE, EV_REDUCED, EV_UPDATED, EV_GATHERED, EV_PULLED, EV_LOSS, EV_COUNT };

typedef struct {             // reduce=sharded: what device k owns
    size_t     lo, hi;       // state[lo, hi)
    ParamSlot *slots;        // the trainable parts of the master's slots inside [lo, hi), in k's memory
    int        n_slots, has_sgd;
    Sgd        sgd;          // momentum: the master's buffer in place (k = 0), else k's own
    size_t     mom_at;       // where its momentum sits in the master's packed buffer
    float     *ema, *recv;   // (hi - lo) each; device 0: the master's EMA and receive buffer in place
    float     *host_block;   // CPU devices: the memory of mom, ema, recv
} Shard;

typedef struct {             // loss_on=device0: the whole batch's head maps on device 0
    float      *out[LOSS_LEVELS], *dout[LOSS_LEVELS];   // (B, H_l, W_l, C) each
    void       *loss;        // the loss work on device 0's backend (Backend.loss_new)
    int         max_B;
} LossAtZero;

typedef struct { int steps, done, use; double busy[MULTI_MAX], imgs[MULTI_MAX], rate[MULTI_MAX]; } AutoSplit;

// reduce=device0's gradient exchange in buckets while backward runs: after node `node`'s backward,
// grad[lo, hi) is final on every device (parameters are laid out in node order), so device 0 pulls
// that range from each replica (queued behind the replica's event, no host wait on the GPUs) and adds
// it, in device order as the whole-array gather did: the same sums, bit for bit.
enum { BUCKET_FLOATS = 2 << 20, MAX_BUCKETS = 64 };   // 8 MB buckets by default (multi_set_bucket_floats)
typedef struct { int node; size_t lo, hi; } Bucket;
typedef struct {
    Bucket          b[MAX_BUCKETS];
    int             n;
    size_t          floats;                       // the size aimed at
    void           *ev[MULTI_MAX][MAX_BUCKETS];   // replica k's "bucket b is computed" (GPU events)
    int             posted[MULTI_MAX];            // buckets replica k has marked this step (under mu)
    int             next[MULTI_MAX];              // the next bucket device k's backward reaches
    int             pulled;                       // buckets device 0 has gathered this step
    pthread_mutex_t mu;
    pthread_cond_t  cv;
} Buckets;
typedef struct { struct Multi *mt; int k; } HookArg;

struct Multi {
    int              n, n_reps, sizes[MULTI_MAX], cap[MULTI_MAX], last_B;   // n_reps: replicas built
    char             split[256];
    int              sharded, loss_d0, staged, zero_first, dirty, step_now;
    Trainer         *master, rep[MULTI_MAX];   // rep[0] is unused: device 0 is the master
    int              gpu[MULTI_MAX];
    Job              job[MULTI_MAX];
    Shard            shard[MULTI_MAX];
    LossAtZero       z;
    AutoSplit        au;
    MultiDevStats    stats[MULTI_MAX];
    pthread_t        thread[MULTI_MAX];
    pthread_barrier_t start, done;
    int              phase, S;
    double           batch_mult, ema_d;
    OptStep          st;
    void            *ev[MULTI_MAX][EV_COUNT];  // device k's events (EV_*; NULL on CPU devices)
    MultiFailHook    hook;
    void            *hook_arg;
    Buckets          bk;                       // reduce=device0
    HookArg          hook_args[MULTI_MAX];
};

static void buckets_reset(Multi *mt);
static void buckets_release(Multi *mt, int k);

static const char *dev_name(const Multi *mt, int k, char *buf, size_t size) {
    if (mt->gpu[k] < 0) snprintf(buf, size, "cpu %d", k);
    else snprintf(buf, size, "GPU %d", mt->gpu[k]);
    return buf;
}

// dst (in dt's memory) = n floats of src (in st's memory); through host memory when peer access is off
static void copy_floats(Multi *mt, Trainer *dt, float *dst, Trainer *st, const float *src, size_t n, float *stage) {
    if (!n) return;
    if (!mt->staged || dt == st) { dt->m.be->pull(dt->m.be_ctx, dst, st->m.be_ctx, src, n); return; }
    st->m.be->bind(st->m.be_ctx);
    st->m.be->download(st->m.be_ctx, stage, src, n);   // blocking: behind st's queued work
    dt->m.be->bind(dt->m.be_ctx);
    dt->m.be->upload(dt->m.be_ctx, dst, stage, n);
}

static void add_into(Trainer *dst, float *to, const float *from, size_t n) {
    Map a = map_make((float *)from, 1, 1, (int)n, 1), b = map_make(to, 1, 1, (int)n, 1);
    dst->m.be->accumulate_map(dst->m.be_ctx, a, b);
}

static int used_devices(const Multi *mt) {
    int used = 0;
    for (int k = 0; k < mt->n; k++) used += mt->job[k].n > 0;
    return used;
}

// device k's queue: its event e is recorded; wait for device j's event e
static void record(Multi *mt, int k, int e) {
    Trainer *t = mt->job[k].t;
    t->m.be->event_record(t->m.be_ctx, mt->ev[k][e]);
}
static void wait_for(Multi *mt, int k, int j, int e) {
    Trainer *t = mt->job[k].t;
    t->m.be->event_wait(t->m.be_ctx, mt->ev[j][e]);
}

// n doubles between devices' scal blocks (as floats: the bytes travel unchanged)
static void copy_doubles(Multi *mt, Trainer *dt, double *dst, Trainer *st, const double *src, int n, float *stage) {
    copy_floats(mt, dt, (float *)dst, st, (const float *)src, 2 * (size_t)n, stage);
}

// ---- the work of one device in one phase -------------------------------------------------------

static void forward_only(Multi *mt, Job *j) {
    Model *m = &j->t->m;
    trainer_mark(j->t, TM_F0);
    if (j->images_u8) model_forward_u8(m, j->images_u8, j->n, mt->S, mt->S, 1);
    else model_forward(m, j->images, j->n, mt->S, mt->S, 1);   // images NULL: already on the device
    trainer_mark(j->t, TM_F1);
}

// loss_on=device0: this device's rows of the whole batch's output gradients (once device 0's loss
// wrote them), then its backward
static void backward_from_zero(Multi *mt, int k) {
    Job *j = &mt->job[k];
    Model *m = &j->t->m;
    if (k) {
        wait_for(mt, k, 0, EV_LOSS);
        trainer_mark(j->t, TM_C0);
    }
    for (int l = 0; l < m->n_levels; l++) {
        Map g = model_grad(m, m->head[l], j->n);
        size_t pi = map_floats(g) / j->n;
        copy_floats(mt, j->t, g.data, mt->master, mt->z.dout[l] + j->first * pi, j->n * pi, j->stage);
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
    double *all = t->scal + SC_ALL;
    int n_all = 0;
    for (int i = 0; i < mt->n; i++) {
        if (!mt->job[i].n) continue;
        Trainer *o = mt->job[i].t;
        if (i != k) wait_for(mt, k, i, EV_ASSIGNED);
        copy_doubles(mt, t, all + 2 * n_all++, o, o->scal + SC_TSS, 2, j->stage);
    }
    trainer_phase_backward(t, j->n, all, n_all, mt->batch_mult);
}

static void zero_outside(Trainer *t, size_t lo, size_t hi) {
    Model *m = &t->m;
    m->be->zero(m->be_ctx, m->grad, lo);
    m->be->zero(m->be_ctx, m->grad + hi, m->n_state - hi);
}

// reduce=sharded, device k: the others' gradients of its shard summed into its own, its BN
// running statistics averaged over the devices that ran images, and its gradients' sum of squares
// (into scal[SC_SUMSQ]; 0 when its shard holds nothing trainable)
static void reduce_shard(Multi *mt, int k) {
    Shard *sh = &mt->shard[k];
    Trainer *t = mt->job[k].t;
    Model *m = &t->m;
    size_t n = sh->hi - sh->lo;
    size_t blo = sh->lo > m->buffers ? sh->lo : m->buffers, bhi = sh->hi < m->buffers + m->n_buffers ? sh->hi : m->buffers + m->n_buffers;
    int used = used_devices(mt);
    trainer_mark(t, TM_G0);
    if (bhi > blo && !mt->job[k].n) m->be->zero(m->be_ctx, m->state + blo, bhi - blo);   // it ran nothing
    for (int j = 0; j < mt->n; j++) {
        if (j == k || !mt->job[j].n) continue;
        Trainer *o = mt->job[j].t;
        wait_for(mt, k, j, EV_DONE);
        copy_floats(mt, t, sh->recv, o, o->m.grad + sh->lo, n, mt->job[k].stage);
        add_into(t, m->grad + sh->lo, sh->recv, n);
        if (bhi <= blo) continue;
        copy_floats(mt, t, sh->recv, o, o->m.state + blo, bhi - blo, mt->job[k].stage);
        add_into(t, m->state + blo, sh->recv, bhi - blo);
    }
    if (bhi > blo && used > 1) m->be->scale(m->be_ctx, m->state + blo, bhi - blo, 1.0f / used);
    if (sh->has_sgd) m->be->grad_sumsq_to(m->be_ctx, sh->sgd.prep, t->scal + SC_SUMSQ);
    else m->be->zero(m->be_ctx, (float *)(t->scal + SC_SUMSQ), 2);   // one double
    trainer_mark(t, TM_G1);
}

// reduce=sharded, device k (once every device reduced): clip by the norm over every shard (the sums
// of squares copied in, in device order), SGD and EMA of its shard (when the schedule steps)
static void update_shard(Multi *mt, int k) {
    Shard *sh = &mt->shard[k];
    Trainer *t = mt->job[k].t;
    Model *m = &t->m;
    trainer_mark(t, TM_U0);
    for (int j = 0; j < mt->n; j++)
        if (j != k) wait_for(mt, k, j, EV_REDUCED);   // they read k's gradients outside its shard
    zero_outside(t, sh->lo, sh->hi);               // summed into their owners by the reduce
    if (mt->st.step) {
        if (sh->has_sgd) {
            double *all = t->scal + SC_SUMSQ_ALL;
            for (int j = 0; j < mt->n; j++)
                copy_doubles(mt, t, all + j, mt->job[j].t, mt->job[j].t->scal + SC_SUMSQ, 1, mt->job[k].stage);
            m->be->grad_clip(m->be_ctx, sh->sgd.prep, all, mt->n, 10.0f);   // as clip_grad_norm, over every shard
            sgd_step(&sh->sgd, &mt->st);
        }
        m->be->ema_update(m->be_ctx, sh->ema, m->state + sh->lo, sh->hi - sh->lo, mt->ema_d);
    }
    trainer_mark(t, TM_U1);
}

static void allgather_shards(Multi *mt, int k) {
    Trainer *t = mt->job[k].t;
    trainer_mark(t, TM_P0);
    for (int j = 0; j < mt->n; j++) {
        if (j == k) continue;
        const Shard *o = &mt->shard[j];
        wait_for(mt, k, j, EV_UPDATED);
        copy_floats(mt, t, t->m.state + o->lo, mt->job[j].t, mt->job[j].t->m.state + o->lo, o->hi - o->lo,
                    mt->job[k].stage);
    }
    trainer_mark(t, TM_P1);
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
    case PH_REDUCE: reduce_shard(mt, k); break;
    case PH_UPDATE: update_shard(mt, k); break;
    case PH_ALLGATHER: allgather_shards(mt, k); break;
    }
}

// The event each phase records when its work is queued: what the other devices wait for.
static const int PHASE_EVENT[] = { EV_ASSIGNED, EV_ASSIGNED, EV_DONE, EV_DONE, EV_REDUCED, EV_UPDATED, EV_GATHERED };

// Before device k's first write of the step to memory another device may still read from the last
// step: the replicas' copies of the master's weights (reduce=device0, device 0's BN buffers), the
// others' all-gather of k's shard (reduce=sharded).
static void order_before_forward(Multi *mt, int k) {
    for (int j = 0; j < mt->n; j++) {
        if (j == k) continue;
        if (mt->sharded) wait_for(mt, k, j, EV_GATHERED);
        else if (k == 0) wait_for(mt, 0, j, EV_PULLED);
    }
}

// Device k's part of the current phase, queued; an error (the fail hook, a returned -1, a pending
// CUDA error) is left in the job for the host to report after the barrier.
static void run_phase(Multi *mt, int k) {
    Job *j = &mt->job[k];
    Trainer *t = j->t;
    j->rc = 0;
    if (mt->phase == PH_FORWARD || mt->phase == PH_FORWARD_ONLY) {   // before any gradient of the step
        order_before_forward(mt, k);
        if (mt->zero_first) model_zero_grad(&t->m);
        if (k == 0 && mt->dirty) zero_outside(t, mt->shard[0].lo, mt->shard[0].hi);
    }
    if (mt->phase <= PH_BACKWARD_D0 && !j->n) {   // no image for this device this step
        record(mt, k, PHASE_EVENT[mt->phase]);      // the step's end waits for its zeroing above
        return;
    }
    if (mt->hook && mt->hook(k, PHASE_NAMES[mt->phase], mt->hook_arg)) {
        j->rc = err_set(&j->err, "failed in its %s phase (injected)", PHASE_NAMES[mt->phase]);
        return;
    }
    do_phase(mt, k);
    record(mt, k, PHASE_EVENT[mt->phase]);
    char msg[256];
    if (!j->rc && t->m.be->check(t->m.be_ctx, msg, sizeof msg))
        j->rc = err_set(&j->err, "CUDA error in the %s phase: %s", PHASE_NAMES[mt->phase], msg);
}

typedef struct { Multi *mt; int k; } WorkerArg;

static void *worker(void *arg) {
    WorkerArg *a = arg;
    Multi *mt = a->mt;
    Trainer *t = mt->job[a->k].t;
    t->m.be->bind(t->m.be_ctx);               // this thread's device, once
    for (;;) {
        pthread_barrier_wait(&mt->start);
        if (mt->phase == PH_QUIT) break;
        run_phase(mt, a->k);
        if (a->k && (mt->phase == PH_BACKWARD || mt->phase == PH_BACKWARD_D0)) buckets_release(mt, a->k);
        pthread_barrier_wait(&mt->done);
    }
    free(a);
    return NULL;
}

// Every worker runs `phase`; returns -1 with err naming the first device that failed. Every
// worker is back at the start barrier either way, so a failure leaves no thread waiting.
static int run_all(Multi *mt, int phase, Err *err) {
    mt->phase = phase;
    if (phase == PH_BACKWARD || phase == PH_BACKWARD_D0) buckets_reset(mt);
    pthread_barrier_wait(&mt->start);
    if (phase == PH_QUIT) return 0;
    pthread_barrier_wait(&mt->done);
    for (int k = 0; k < mt->n; k++) {
        if (!mt->job[k].rc) continue;
        char name[32];
        return err_set(err, "device %d (%s): %s", k, dev_name(mt, k, name, sizeof name), mt->job[k].err.msg);
    }
    return 0;
}


// ---- reduce=device0 --------------------------------------------------------------------------

// The trainable offsets of node i's parameters: [*lo, *hi), or *lo > *hi when it has none.
static void node_params(const Model *m, const Node *nd, size_t *lo, size_t *hi) {
    *lo = (size_t)-1; *hi = 0;
    for (int u = 0; u < 2; u++) {
        const ConvUnit *cu = u ? &nd->cv2 : &nd->cv;
        if (nd->op != OP_CONV && nd->op != OP_REPCONV) continue;
        int idx[4] = { cu->w, cu->b, cu->bn_w, cu->bn_b };
        for (int q = 0; q < 4; q++) {
            if (idx[q] < 0) continue;
            const ParamInfo *p = &m->params[idx[q]];
            if (p->offset < *lo) *lo = p->offset;
            if (p->offset + p->n > *hi) *hi = p->offset + p->n;
        }
    }
}

// Buckets of about BUCKET_FLOATS, closed only after a node below which no parameter lies above the
// bucket's start; the last one reaches offset 0. Together they cover [0, buffers).
static void plan_buckets(Multi *mt) {
    const Model *m = &mt->master->m;
    int n = m->n_nodes;
    size_t *below_max = xcalloc(n + 1, sizeof *below_max), lo, hi;   // max end over nodes < i
    for (int i = 0; i < n; i++) {
        node_params(m, &m->nodes[i], &lo, &hi);
        below_max[i + 1] = below_max[i] > hi ? below_max[i] : hi;
    }
    Buckets *bk = &mt->bk;
    size_t top = m->buffers, from = (size_t)-1;
    bk->n = 0;
    for (int i = n - 1; i > 0 && bk->n < MAX_BUCKETS - 1; i--) {
        node_params(m, &m->nodes[i], &lo, &hi);
        if (lo < from) from = lo;                  // the lowest offset of nodes i..n-1
        if (from <= top && top - from >= bk->floats && below_max[i] <= from)
            bk->b[bk->n++] = (Bucket){ i, from, top }, top = from;
    }
    bk->b[bk->n++] = (Bucket){ 0, 0, top };
    free(below_max);
}

// Replica k's backward reached node i: mark the buckets that are now final.
static void replica_hook(void *arg, int node) {
    HookArg *a = arg;
    Buckets *bk = &a->mt->bk;
    Trainer *t = a->mt->job[a->k].t;
    while (bk->next[a->k] < bk->n && bk->b[bk->next[a->k]].node == node) {
        int b = bk->next[a->k]++;
        t->m.be->event_record(t->m.be_ctx, bk->ev[a->k][b]);
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
        m->be->event_wait(m->be_ctx, mt->bk.ev[k][b]);
        copy_floats(mt, m0, m0->recv + bu->lo, r, r->m.grad + bu->lo, bu->hi - bu->lo, mt->job[0].stage);
        add_into(m0, m->grad + bu->lo, m0->recv + bu->lo, bu->hi - bu->lo);
    }
    mt->bk.pulled = b + 1;
}

// Device 0's backward reached node i: gather the buckets that are final on it.
static void master_hook(void *arg, int node) {
    HookArg *a = arg;
    Buckets *bk = &a->mt->bk;
    while (bk->next[0] < bk->n && bk->b[bk->next[0]].node == node) pull_bucket(a->mt, bk->next[0]++);
}

// Before a backward phase (workers parked): nothing posted, pulled or reached yet.
static void buckets_reset(Multi *mt) {
    memset(mt->bk.posted, 0, sizeof mt->bk.posted);
    memset(mt->bk.next, 0, sizeof mt->bk.next);
    mt->bk.pulled = 0;
}

// Replica k is done with its backward phase, or failed in it: every bucket counts as posted, so
// device 0 never waits for work that will not come (a failed step is abandoned anyway).
static void buckets_release(Multi *mt, int k) {
    pthread_mutex_lock(&mt->bk.mu);
    mt->bk.posted[k] = mt->bk.n;
    pthread_cond_broadcast(&mt->bk.cv);
    pthread_mutex_unlock(&mt->bk.mu);
}

static int bucketed(const Multi *mt) { return !mt->sharded && mt->bk.n > 0; }

static void buckets_init(Multi *mt) {
    if (mt->sharded) return;
    mt->bk.floats = BUCKET_FLOATS;
    plan_buckets(mt);
    pthread_mutex_init(&mt->bk.mu, NULL);
    pthread_cond_init(&mt->bk.cv, NULL);
    for (int k = 0; k < mt->n; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->bind(t->m.be_ctx);
        for (int b = 0; k && b < MAX_BUCKETS; b++) mt->bk.ev[k][b] = t->m.be->event_new(t->m.be_ctx);
        mt->hook_args[k] = (HookArg){ mt, k };
        t->m.backward_hook = k ? replica_hook : master_hook;
        t->m.backward_arg = &mt->hook_args[k];
    }
    mt->master->m.be->bind(mt->master->m.be_ctx);
}

static void buckets_free(Multi *mt) {
    if (!bucketed(mt)) return;
    for (int k = 1; k < mt->n && k <= mt->n_reps; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->bind(t->m.be_ctx);
        for (int b = 0; b < MAX_BUCKETS; b++) t->m.be->event_free(t->m.be_ctx, mt->bk.ev[k][b]);
        t->m.backward_hook = NULL;
    }
    mt->master->m.backward_hook = NULL;
    pthread_mutex_destroy(&mt->bk.mu);
    pthread_cond_destroy(&mt->bk.cv);
    mt->bk.n = 0;
}

// master.grad += sum of the replicas' gradients; BN running statistics := mean over devices
// (queued on device 0, each replica's part behind its backward)
static void gather(Multi *mt) {
    Trainer *m0 = mt->master;
    Model *m = &m0->m;
    int used = used_devices(mt);
    m->be->bind(m->be_ctx);
    trainer_mark(m0, TM_G0);
    for (int b = mt->bk.pulled; b < mt->bk.n; b++) pull_bucket(mt, b);   // those device 0's backward did not reach
    for (int k = 1; k < mt->n; k++) {
        if (!mt->job[k].n) continue;
        Trainer *r = &mt->rep[k];
        wait_for(mt, 0, k, EV_DONE);
        copy_floats(mt, m0, m0->recv, r, r->m.state + m->buffers, m->n_buffers, mt->job[0].stage);
        add_into(m0, m->state + m->buffers, m0->recv, m->n_buffers);
    }
    if (used > 1) m->be->scale(m->be_ctx, m->state + m->buffers, m->n_buffers, 1.0f / used);
    trainer_mark(m0, TM_G1);
}

// every replica := the master's state (weights and BN buffers) once device 0's update is done;
// replica gradients := 0. Queued on each replica from the host thread (the workers are parked).
static void broadcast(Multi *mt) {
    Trainer *m0 = mt->master;
    Model *m = &m0->m;
    record(mt, 0, EV_UPDATED);
    for (int k = 1; k < mt->n; k++) {
        Trainer *r = &mt->rep[k];
        r->m.be->bind(r->m.be_ctx);
        wait_for(mt, k, 0, EV_UPDATED);
        trainer_mark(r, TM_P0);
        copy_floats(mt, r, r->m.state, m0, m->state, m->n_state, mt->job[0].stage);
        model_zero_grad(&r->m);
        trainer_mark(r, TM_P1);
        record(mt, k, EV_PULLED);
    }
    m->be->bind(m->be_ctx);
}

// ---- loss_on=device0 -------------------------------------------------------------------------

// The replicas' head maps into device 0's batch buffers (each behind its forward), the loss of the
// whole batch there, and its gradient w.r.t. the maps in dout (the workers copy their rows back
// behind EV_LOSS). Queued; the items are read after the step's wait (loss_dev0_items).
static int loss_at_zero(Multi *mt, int B, const float *targets, int nt, Err *err) {
    Trainer *m0 = mt->master;
    Model *m = &m0->m;
    LossBatch lb = { .nc = m->nc, .img_h = mt->S, .img_w = mt->S, .targets = targets, .n_targets = nt };
    Map grads[LOSS_LEVELS];
    m->be->bind(m->be_ctx);
    for (int k = 1; k < mt->n; k++)
        if (mt->job[k].n) wait_for(mt, 0, k, EV_ASSIGNED);
    trainer_mark(m0, TM_C0);
    for (int l = 0; l < m->n_levels; l++) {
        int v = m->head[l], H = m->vh[v], W = m->vw[v], C = m->values[v].C;
        size_t pi = (size_t)H * W * C;
        for (int k = 0; k < mt->n; k++) {
            Job *j = &mt->job[k];
            if (j->n) copy_floats(mt, m0, mt->z.out[l] + j->first * pi, j->t, model_value(&j->t->m, v, j->n).data,
                                  j->n * pi, mt->job[0].stage);
        }
        lb.head[l] = map_make(mt->z.out[l], B, H, W, C);
        grads[l] = map_make(mt->z.dout[l], B, H, W, C);
    }
    double *tss = m0->scal + SC_TSS, *norm = m0->scal + SC_NORM;
    int rc;
    mt->batch_mult = B;
    if (!(rc = m->be->loss_assign(m->be_ctx, mt->z.loss, &lb, tss, err))) {
        m->be->loss_norm(m->be_ctx, tss, 1, norm);
        m->be->loss_compute(m->be_ctx, mt->z.loss, &lb, norm, B, grads);
    }
    record(mt, 0, EV_LOSS);
    if (rc) {
        char name[32], msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return err_set(err, "device 0 (%s): %s", dev_name(mt, 0, name, sizeof name), msg);
    }
    return 0;
}

static void loss_dev0_items(Multi *mt, LossOut *out) {
    const Model *m = &mt->master->m;
    m->be->loss_items(m->be_ctx, mt->z.loss, mt->batch_mult, out);
}

static int loss_dev0_init(Multi *mt, int max_B, Err *err) {
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
        mt->z.out[l] = m->be->buffer_new(m->be_ctx, n);   // outside device 0's memory plan
        mt->z.dout[l] = m->be->buffer_new(m->be_ctx, n);
        if (!mt->z.out[l] || !mt->z.dout[l])
            return err_set(err, "loss_on=device0: GPU %d has no room for the batch's head outputs (%.0f MiB); "
                           "use loss_on=local or a smaller batch", m->be->device_id(m->be_ctx),
                           2.0 * n * sizeof(float) / 1048576);
    }
    mt->z.loss = m->be->loss_new(m->be_ctx, max_B, max_B * TARGETS_PER_IMAGE, m->nc, anchors);
    if (!mt->z.loss) return err_set(err, "loss_on=device0: no room on device 0 for the loss of %d images", max_B);
    return 0;
}

static void loss_dev0_free(Multi *mt) {
    const Model *m = &mt->master->m;
    for (int l = 0; l < LOSS_LEVELS; l++) {
        m->be->buffer_free(m->be_ctx, mt->z.out[l]);
        m->be->buffer_free(m->be_ctx, mt->z.dout[l]);
    }
    if (mt->z.loss) m->be->loss_free(m->be_ctx, mt->z.loss);
}

// ---- reduce=sharded ---------------------------------------------------------------------------

// Contiguous shards of about n_state/n floats, boundaries on 64 floats (256 bytes) for the copies.
static void shard_bounds(Multi *mt) {
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
static int shard_init(Multi *mt, int k, Err *err) {
    Shard *sh = &mt->shard[k];
    Trainer *m0 = mt->master, *t = mt->job[k].t;
    size_t n = sh->hi - sh->lo, n_mom = shard_slots(mt, k);
    float *mom;
    t->m.be->bind(t->m.be_ctx);
    if (k == 0) {
        sh->ema = m0->ema + sh->lo;
        sh->recv = m0->recv;
        mom = m0->sgd.buf + sh->mom_at;
    } else {
        const Backend *be = t->m.be;
        if (t->m.on_device) {                      // an optimizer arena of the shard's size
            size_t bytes = (2 * n + n_mom) * sizeof(float) + 3 * 256 + sizeof(ParamSlot) * 8 * (size_t)sh->n_slots + (1 << 20);
            if (be->reserve(t->m.be_ctx, bytes))
                return err_set(err, "reduce=sharded: GPU %d has no room for its shard's optimizer state (%.0f MiB)",
                               be->device_id(t->m.be_ctx), bytes / 1048576.0);
            sh->ema = be->take(t->m.be_ctx, n);
            sh->recv = be->take(t->m.be_ctx, n);
            mom = be->take(t->m.be_ctx, n_mom ? n_mom : 1);
        } else {
            sh->host_block = xcalloc(2 * n + n_mom + 1, sizeof(float));
            sh->ema = sh->host_block;
            sh->recv = sh->host_block + n;
            mom = sh->host_block + 2 * n;
        }
        copy_floats(mt, t, sh->ema, m0, m0->ema + sh->lo, n, mt->job[k].stage);
        t->m.be->sync(t->m.be_ctx);
    }
    if (n_mom) {
        sgd_init(&sh->sgd, sh->slots, sh->n_slots, t->m.be, t->m.be_ctx, mom);
        sh->has_sgd = 1;
    }
    m0->m.be->bind(m0->m.be_ctx);
    return 0;
}

static void shard_free(Shard *sh) {
    if (sh->has_sgd) sgd_free(&sh->sgd);
    free(sh->slots);
    free(sh->host_block);
    memset(sh, 0, sizeof *sh);
}

// The schedule on the host; the clip factor on every device from every shard's sum of squares;
// then every device updates its shard and gathers the others'.
static int sharded_update(Multi *mt, int epoch, int i, Err *err) {
    Trainer *t = mt->master;
    mt->st = opt_schedule_next(&t->sched, epoch, i);
    memcpy(t->lr, mt->st.lr, sizeof t->lr);
    if (mt->st.step) mt->ema_d = ema_decay(++t->ema_updates);
    if (run_all(mt, PH_UPDATE, err)) return -1;
    return run_all(mt, PH_ALLGATHER, err);
}

void multi_gather_state(Multi *mt) {
    if (!mt->sharded) return;
    Trainer *m0 = mt->master;
    m0->m.be->bind(m0->m.be_ctx);
    for (int k = 1; k < mt->n; k++) {
        Shard *sh = &mt->shard[k];
        Trainer *t = mt->job[k].t;
        size_t n = sh->hi - sh->lo;
        copy_floats(mt, m0, m0->ema + sh->lo, t, sh->ema, n, mt->job[0].stage);
        copy_floats(mt, m0, m0->m.grad + sh->lo, t, t->m.grad + sh->lo, n, mt->job[0].stage);
        if (sh->has_sgd) copy_floats(mt, m0, m0->sgd.buf + sh->mom_at, t, sh->sgd.buf, sgd_buffer_floats(sh->slots, sh->n_slots),
                                     mt->job[0].stage);
    }
    m0->m.be->sync(m0->m.be_ctx);
    m0->sgd.steps = mt->shard[0].has_sgd ? mt->shard[0].sgd.steps : mt->shard[mt->n - 1].sgd.steps;
    mt->dirty = 1;                                 // the master's grad holds the others' shards too
}

void multi_scatter_state(Multi *mt) {
    Trainer *m0 = mt->master;
    m0->m.be->sync(m0->m.be_ctx);
    for (int k = 1; k < mt->n; k++) {
        Trainer *r = &mt->rep[k];
        Shard *sh = &mt->shard[k];
        size_t n = sh->hi - sh->lo;
        r->m.be->bind(r->m.be_ctx);
        copy_floats(mt, r, r->m.state, m0, m0->m.state, m0->m.n_state, mt->job[k].stage);
        model_zero_grad(&r->m);
        if (mt->sharded) {
            copy_floats(mt, r, sh->ema, m0, m0->ema + sh->lo, n, mt->job[k].stage);
            copy_floats(mt, r, r->m.grad + sh->lo, m0, m0->m.grad + sh->lo, n, mt->job[k].stage);
            if (sh->has_sgd) copy_floats(mt, r, sh->sgd.buf, m0, m0->sgd.buf + sh->mom_at,
                                         sgd_buffer_floats(sh->slots, sh->n_slots), mt->job[k].stage);
        }
        r->m.be->sync(r->m.be_ctx);
    }
    m0->m.be->bind(m0->m.be_ctx);
    if (!mt->sharded) return;
    for (int k = 0; k < mt->n; k++) mt->shard[k].sgd.steps = m0->sgd.steps;
    zero_outside(m0, mt->shard[0].lo, mt->shard[0].hi);
    m0->m.be->sync(m0->m.be_ctx);
    mt->dirty = 0;
}

// ---- split=auto -------------------------------------------------------------------------------

int split_by_speed(const double *rate, const int *cur, const int *cap, int B, int n, int *sizes) {
    if (split_weighted(rate, cap, B, n, sizes)) return 0;
    double t_old = 0, t_new = 0;
    for (int k = 0; k < n; k++) {
        t_old = fmax(t_old, cur[k] / rate[k]);
        t_new = fmax(t_new, sizes[k] / rate[k]);
    }
    return t_new < 0.97 * t_old;                   // a gain under 3% is noise: keep the split
}

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
static void scatter(Multi *mt, int S, const float *targets, int nt) {
    int first = 0;
    for (int k = 0; k < mt->n; k++) {
        Job *j = &mt->job[k];
        j->n = mt->sizes[k];
        j->first = first;
        j->compute = 0;
        const uint8_t *u8 = mt->master->input_u8;
        // input_resident (benchmarks): each device's micro-batch is still where the last step put it
        j->images = u8 || mt->master->input_resident ? NULL : mt->master->input + (size_t)first * S * S * 3;
        j->images_u8 = u8 ? u8 + (size_t)first * S * S * 3 : NULL;
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
    if (run_all(mt, PH_FORWARD, err)) return -1;
    mt->batch_mult = B;
    return run_all(mt, PH_BACKWARD, err);
}

// loss_on=device0: forward everywhere, the loss of the whole batch on device 0, backward everywhere
static int loss_device0(Multi *mt, int B, const float *targets, int nt, Err *err) {
    if (B > mt->z.max_B) return err_set(err, "loss_on=device0: a batch of %d images; built for %d", B, mt->z.max_B);
    if (run_all(mt, PH_FORWARD_ONLY, err)) return -1;
    if (loss_at_zero(mt, B, targets, nt, err)) return -1;
    return run_all(mt, PH_BACKWARD_D0, err);
}

// A step failed: wait for what every device still has queued from it, so nothing it reads (the
// host's batch, pinned buffers) or writes (another device's memory) is in use when the caller goes
// on. Host waits on the failure path only.
static int settle(Multi *mt) {
    for (int k = 0; k < mt->n; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->bind(t->m.be_ctx);
        t->m.be->sync(t->m.be_ctx);
    }
    mt->master->m.be->bind(mt->master->m.be_ctx);
    return -1;
}

// Forward, loss, backward and the reduction, queued on every device.
static int forward_backward(Multi *mt, int n, int S, const float *targets, int nt, Err *err) {
    if (plan_split(mt, n, err)) return -1;
    scatter(mt, S, targets, nt);
    mt->S = S;
    int rc = mt->loss_d0 ? loss_device0(mt, n, targets, nt, err) : loss_local(mt, n, err);
    mt->zero_first = mt->dirty = 0;                // done by the forward phase
    if (rc) return -1;
    if (mt->sharded) return run_all(mt, PH_REDUCE, err);
    gather(mt);
    return 0;
}

// The step's one host wait: device 0's queue waits for every replica's last work of the step
// (event `last`), then the host waits for device 0. Then the loss items (each share's add up to the
// batch's), the devices' timer marks and the per-device report. wall: the host's seconds since the
// step began, of which each device was busy for its marks' total and idle for the rest.
static void finish_step(Multi *mt, int last, double t0, LossOut *out) {
    Trainer *m0 = mt->master;
    m0->m.be->bind(m0->m.be_ctx);
    for (int k = 1; k < mt->n; k++) wait_for(mt, 0, k, last);
    m0->m.be->sync(m0->m.be_ctx);
    double wall = now_seconds() - t0;
    memset(out, 0, sizeof *out);
    if (mt->loss_d0) loss_dev0_items(mt, out);
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
}

int multi_forward_backward(Multi *mt, int n, int S, const float *targets, int nt, LossOut *out, Err *err) {
    double t0 = now_seconds();
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
            s->mem_bytes = (double)t->m.be->mem_used(t->m.be_ctx);
            s->peak_bytes = fmax(s->peak_bytes, s->mem_bytes);
        }
    }
    mt->master->m.be->bind(mt->master->m.be_ctx);  // the memory query selects each GPU in turn
}

int multi_step(Multi *mt, int n, int S, const float *targets, int nt, int epoch, int i, LossOut *out, Err *err) {
    double t0 = now_seconds();
    mt->zero_first = i == 0;                       // train.py zeroes the gradients at each epoch start
    if (forward_backward(mt, n, S, targets, nt, err)) return settle(mt);
    if (mt->sharded) {
        if (sharded_update(mt, epoch, i, err)) return settle(mt);
    } else {
        trainer_update(mt->master, epoch, i);
        broadcast(mt);
    }
    finish_step(mt, mt->sharded ? EV_GATHERED : EV_PULLED, t0, out);
    after_step(mt);
    auto_split(mt, n);
    return 0;
}

// Each GPU's share is the bytes its step will pass to model_forward_u8 (scatter's), so the step
// finds the copy; a split that changes in between (split=auto) only makes that step copy again.
void multi_prefetch(Trainer *t, const uint8_t *images, int n, int S) {
    size_t per = (size_t)S * S * 3;               // CPU devices convert the bytes in the step (no-op)
    Multi *mt = t->multi;
    if (!mt) {
        t->m.be->prefetch_u8(t->m.be_ctx, images, n * per);
        return;
    }
    int sizes[MULTI_MAX], first = 0;
    Err err;
    if (split_sizes(mt, n, sizes, &err)) return;   // the step reports it
    for (int k = 0; k < mt->n; k++) {
        Trainer *d = mt->job[k].t;
        if (sizes[k]) d->m.be->prefetch_u8(d->m.be_ctx, images + first * per, sizes[k] * per);
        first += sizes[k];
    }
}

void multi_set_bucket_floats(Multi *mt, size_t floats) {
    if (!bucketed(mt)) return;
    mt->bk.floats = floats ? floats : BUCKET_FLOATS;
    plan_buckets(mt);
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
        dev_name(mt, k, name, sizeof name);
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

static void print_plan(const Multi *mt, const char *copies) {
    printf("parallel: %d devices, reduce=%s, loss_on=%s, split=%s; %s\n", mt->n, mt->sharded ? "sharded" : "device0",
           mt->loss_d0 ? "device0" : "local", mt->split, copies);
    for (int k = 0; k < mt->n; k++) {
        char name[32];
        printf("  %-7s micro-batch up to %d images", dev_name(mt, k, name, sizeof name), mt->cap[k]);
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
        t->m.be->bind(t->m.be_ctx);
        for (int e = 0; e < EV_COUNT; e++) mt->ev[k][e] = t->m.be->event_new(t->m.be_ctx);
    }
    mt->master->m.be->bind(mt->master->m.be_ctx);
}

static void events_free(Multi *mt) {
    for (int k = 0; k < mt->n && k <= mt->n_reps; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->bind(t->m.be_ctx);
        for (int e = 0; e < EV_COUNT; e++)
            if (mt->ev[k][e]) t->m.be->event_free(t->m.be_ctx, mt->ev[k][e]);
    }
}

// Everything multi_init made, threads excepted (they start last, when nothing can fail any more).
static void release(Multi *mt) {
    for (int k = 0; k < mt->n; k++) {             // nothing queued may still use what is freed below
        Trainer *t = mt->job[k].t;
        if (k > mt->n_reps) break;
        t->m.be->bind(t->m.be_ctx);
        t->m.be->sync(t->m.be_ctx);
    }
    events_free(mt);
    buckets_free(mt);
    for (int k = 0; k < mt->n; k++) shard_free(&mt->shard[k]);
    loss_dev0_free(mt);
    for (int k = 1; k <= mt->n_reps; k++) trainer_free(&mt->rep[k]);
    for (int k = 0; k < mt->n; k++) { free(mt->job[k].targets); free(mt->job[k].stage); }
    mt->master->multi = NULL;
    mt->master->m.be->bind(mt->master->m.be_ctx);
    free(mt);
}

// Peer access and its self-test (GPUs), or nothing to do (CPU devices copy with memcpy). Returns
// 1 when copies must be staged through host memory.
static int setup_copies(Multi *mt, char *report, size_t size) {
    snprintf(report, size, "copies between devices: memcpy (CPU devices)");
    const Backend *be = mt->master->m.be;
    if (mt->gpu[0] >= 0 && be->peer_setup) return !be->peer_setup(mt->gpu, mt->n, report, size);
    return 0;
}

int multi_init(Trainer *master, const Config *cfg, const DeviceList *devs, int micro, Err *err) {
    Multi *mt = xcalloc(1, sizeof *mt);
    mt->n = devs->n;
    mt->master = master;
    mt->sharded = !strcmp(cfg->reduce, "sharded");
    mt->loss_d0 = !strcmp(cfg->loss_on, "device0");
    snprintf(mt->split, sizeof mt->split, "%s", cfg->split);
    master->multi = mt;
    for (int k = 0; k < mt->n; k++) {
        mt->gpu[k] = devs->gpu[k];
        mt->job[k].t = k ? &mt->rep[k] : master;
        mt->cap[k] = k ? micro : master->m.max_n;
    }
    for (int k = 1; k < mt->n; k++, mt->n_reps++)
        if (trainer_init_replica(&mt->rep[k], cfg, devs->gpu[k], micro, err)) { release(mt); return -1; }
    master->m.be->bind(master->m.be_ctx);
    char copies[512];
    int staged = setup_copies(mt, copies, sizeof copies);
    if (mt->loss_d0 && loss_dev0_init(mt, cfg->batch, err)) { release(mt); return -1; }
    if (staged) multi_use_host_copies(mt);
    events_new(mt);
    broadcast(mt);                                 // every replica starts from the master's weights
    buckets_init(mt);
    if (mt->sharded) {
        shard_bounds(mt);
        for (int k = 0; k < mt->n; k++)
            if (shard_init(mt, k, err)) { release(mt); return -1; }
    }
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
    run_all(mt, PH_QUIT, &err);
    for (int k = 0; k < mt->n; k++) pthread_join(mt->thread[k], NULL);
    pthread_barrier_destroy(&mt->start);
    pthread_barrier_destroy(&mt->done);
    release(mt);
}
