// procs.c: the trainer's side of a run of several processes (core/procs/procs.h). The transport is
// core/procs/comm.h; device memory reaches it through the backend (Backend.comm.comm_sum: NCCL between GPUs) or
// through host memory.
#include "core/procs/procs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/procs/buckets.h"
#include "core/base/switches.h"

static int dev_total, dev_before, dev_mine = 1;   // procs_agree's: devices of all, of ranks before, of this one

static int forced;
static const Backend *overlap_asked;             // procs_overlap's backend, and its agreed answer
static int overlap_answer;
void procs_force(int on) { forced = on; overlap_asked = NULL; }   // tests: ask again (YT_NCCL_OVERLAP)
int procs_active(void) { return comm_size() > 1 || forced; }
int procs_writer(void) { return comm_rank() == 0; }

uint64_t procs_hash_names(const Dataset *ds) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < ds->n; i++) {
        const char *p = ds->s[i].image, *slash = strrchr(p, '/');
        for (const char *c = slash ? slash + 1 : p;; c++) {
            h = (h ^ (unsigned char)*c) * 1099511628211ull;   // the 0 too: names do not run together
            if (!*c) break;
        }
    }
    return h;
}

int procs_join(const Config *cfg, const Dataset *ds, int n_devices, int on_gpus, Err *err) {
    if (comm_init(err)) return -1;
    if (!procs_active()) {
        if (comm_launched() && !comm_built())
            printf("note: started by mpirun/srun, but this yolotrain was built without MPI: each process trains alone "
                   "(install libopenmpi-dev and rebuild)\n");
        return 0;
    }
    if (procs_agree(cfg, ds->n, procs_hash_names(ds), n_devices, on_gpus, err)) return -1;
    int first, n;
    procs_share(cfg->batch, &first, &n);
    printf("processes: rank %d of %d on %s, %d of %d devices; of each batch of %d this process trains images %d..%d%s\n",
           comm_rank(), comm_size(), comm_host(), n_devices, dev_total, cfg->batch, first, first + n - 1,
           procs_writer() ? "; it writes the run's files" : "");
    return 0;
}

int procs_any(int flag) {
    double f = flag != 0;
    comm_sum_doubles(&f, 1);
    return f > 0;
}

void procs_note_count(const char *dir) {
    if (!procs_writer() || comm_size() < 2) return;   // no file: one process
    char path[4200];
    snprintf(path, sizeof path, "%s/processes.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "%d processes, %d devices\n", comm_size(), dev_total);
    fclose(f);
}

int procs_check_count(const char *dir, Err *err) {
    char path[4200];
    int P = 1, D = 0;
    snprintf(path, sizeof path, "%s/processes.txt", dir);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%d processes, %d devices", &P, &D) < 1) P = 1;
        fclose(f);
    }
    if (P == comm_size()) return 0;
    return err_set(err, "%s was trained by %d process%s; this resume runs %d: resume it with the same count (%s), as the "
                   "batch split, the sums and the shards depend on it", dir, P, P == 1 ? "" : "es", comm_size(),
                   P == 1 ? "without mpirun" : "mpirun -np N with N as before");
}

// Keys each host may set its own way: its devices, its loader threads.
static int per_host_key(const char *line) {
    static const char *const keys[] = { "device", "workers" };
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        size_t n = strlen(keys[k]);
        if (!strncmp(line, keys[k], n) && (line[n] == ' ' || line[n] == '=')) return 1;
    }
    return 0;
}

// The keys whose lines differ between a and b (the INI text of config_print), into out.
static void differing_keys(const char *a, const char *b, char *out, size_t size) {
    size_t o = 0;
    out[0] = 0;
    char sec[64] = "";
    while (*a || *b) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (*a == '[') snprintf(sec, sizeof sec, "%.*s", (int)(la < 60 ? la : 60), a);
        int same = la == lb && !memcmp(a, b, la);
        if (!same && !per_host_key(a) && o + 8 < size) {
            const char *line = la ? a : b;
            size_t key = strcspn(line, " =\n");
            o += snprintf(out + o, size - o, "%s%s%.*s", o ? ", " : "", sec[0] == '[' && (*line >= '0' && *line <= '9')
                          ? sec : "", (int)(key < 40 ? key : 40), line);
            if (o >= size) { o = size - 1; break; }
        }
        a += la + (a[la] == '\n');
        b += lb + (b[lb] == '\n');
    }
}

typedef struct { int n_images, n_devices, on_gpus; uint64_t hash; char host[64]; char keys[384]; } Agreement;

int procs_agree(const Config *cfg, int n_images, uint64_t list_hash, int n_devices, int on_gpus, Err *err) {
    int P = comm_size(), me = comm_rank();
    dev_total = n_devices; dev_before = 0; dev_mine = n_devices;
    if (P < 2) return 0;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) die("procs: no memory for the configuration's text");
    config_print(cfg, f);
    fclose(f);
    uint64_t n0 = len;                                   // rank 0's text, to every rank
    comm_bcast(&n0, sizeof n0);
    char *text0 = xcalloc(n0 + 1, 1);
    if (!me) memcpy(text0, text, n0);
    comm_bcast(text0, n0);
    Agreement mine = { n_images, n_devices, on_gpus != 0, list_hash, "", "" }, *all = xcalloc(P, sizeof *all);
    snprintf(mine.host, sizeof mine.host, "%s", comm_host());
    differing_keys(text0, text, mine.keys, sizeof mine.keys);
    comm_allgather(&mine, all, sizeof mine);
    free(text); free(text0);
    size_t o = 0;
    char msg[sizeof err->msg] = "";
    dev_total = 0;
    for (int r = 0; r < P; r++) {
        if (r == me) dev_before = dev_total;
        dev_total += all[r].n_devices;
        if (all[r].keys[0])
            o += snprintf(msg + o, o < sizeof msg ? sizeof msg - o : 0, "%srank %d (host %s) has other values than "
                          "rank 0 for: %s", o ? "; " : "", r, all[r].host, all[r].keys);
        else if (all[r].n_images != all[0].n_images || all[r].hash != all[0].hash)
            o += snprintf(msg + o, o < sizeof msg ? sizeof msg - o : 0, "%srank %d (host %s) reads another training "
                          "set: %d images (list hash %016llx), rank 0 %d (%016llx)", o ? "; " : "", r, all[r].host,
                          all[r].n_images, (unsigned long long)all[r].hash, all[0].n_images,
                          (unsigned long long)all[0].hash);
        else if (all[r].on_gpus != all[0].on_gpus)
            o += snprintf(msg + o, o < sizeof msg ? sizeof msg - o : 0, "%srank %d (host %s) trains on %s, rank 0 on "
                          "%s: every process needs the same kind (the sums go through NCCL between GPUs, through "
                          "MPI between CPU devices); give each a device= of that kind", o ? "; " : "", r,
                          all[r].host, all[r].on_gpus ? "GPUs" : "CPU devices", all[0].on_gpus ? "GPUs" : "CPU devices");
    }
    free(all);
    if (o) return err_set(err, "the %d processes do not agree (rank 0's configuration and dataset win; device= and "
                          "workers= may differ per host): %s", P, msg);
    return 0;
}

int procs_devices_total(void) { return dev_total; }

void procs_share(int B, int *first, int *n) {
    if (!procs_active() || dev_total <= 0) { *first = 0; *n = B; return; }
    int c = (B + dev_total - 1) / dev_total, f = 0, k = 0;   // torch.chunk over every device
    for (int d = 0; d < dev_before + dev_mine; d++) {
        int s = B - d * c;
        s = s < 0 ? 0 : s > c ? c : s;
        if (d < dev_before) f += s;
        else k += s;
    }
    *first = f;
    *n = k;
}

int procs_loader_share(int B, int *first, void *arg) {
    int n;
    procs_share(B, first, &n);
    return n;
}

int procs_normaliser(const double local[2], int n_local, double global[2]) {
    double v[3] = { local[0], local[1], n_local };
    comm_sum_doubles(v, 3);
    global[0] = v[0];
    global[1] = v[1];
    return (int)v[2];
}

int procs_normaliser_queued(Trainer *t, const double *pairs, int n_pairs, int n_local, double *dst) {
    const Backend *be = t->m.be;
    if (!be->comm.comm_sum_pairs || be->comm.comm_sum_pairs(t->m.be_ctx, pairs, n_pairs, dst)) return -1;
    double N = n_local;                            // host integers: no wait for the device
    comm_sum_doubles(&N, 1);
    return (int)N;
}

void procs_sum(Trainer *t, float *p, size_t n) {
    const Backend *be = t->m.be;
    if (!n || !procs_active()) return;
    if (be->comm.comm_sum && !be->comm.comm_sum(t->m.be_ctx, p, n)) return;
    if (!t->m.on_device) { comm_sum_floats(p, n); return; }
    float *h = xmalloc(n * sizeof(float));
    be->dev.download(t->m.be_ctx, h, p, n);                  // behind the device's queued work
    comm_sum_floats(h, n);
    be->dev.upload(t->m.be_ctx, p, h, n);
    free(h);
}

void procs_mean_buffers(Trainer *t, float *p, size_t n, int used) {
    if (!n || !procs_active()) return;
    double all = used;
    comm_sum_doubles(&all, 1);
    const Backend *be = t->m.be;
    if (used != 1) be->optim.scale(t->m.be_ctx, p, n, (float)used);   // the local mean back to a sum
    procs_sum(t, p, n);
    if (all > 1) be->optim.scale(t->m.be_ctx, p, n, (float)(1.0 / all));
}

int procs_will_step(const Trainer *t, int epoch, int i) {
    OptSchedule copy = t->sched;                         // opt_schedule_next records steps: not in t
    return opt_schedule_next(&copy, epoch, i).step;
}

void procs_sum_items(LossOut *out) {
    if (!procs_active()) return;
    double v[5] = { out->box, out->cls, out->dfl, out->total, 0 };
    double fg[2] = { out->n_fg, out->n_fg_aux };
    comm_sum_doubles(v, 4);
    comm_sum_doubles(fg, 2);
    out->box = v[0]; out->cls = v[1]; out->dfl = v[2]; out->total = v[3];
    out->n_fg = (int)fg[0]; out->n_fg_aux = (int)fg[1];
}

// ---- the gradients' sums overlapped with the backward (Backend.comm.comm_sum_begin) ------------------------

int procs_overlap(const Trainer *t) {
    const Backend *be = t->m.be;
    if (overlap_asked == be) return overlap_answer;   // asked once per backend
    const char *env = switch_str(SW_NCCL_OVERLAP);
    double can = be->comm.comm_sum_begin && !be->comm.comm_sum_begin(t->m.be_ctx, NULL, 0) && !(env && !strcmp(env, "0"));
    comm_sum_doubles(&can, 1);                     // every process takes the same road (the same NCCL calls)
    overlap_asked = be;
    overlap_answer = (int)can == comm_size();
    return overlap_answer;
}

void procs_sum_begin(Trainer *t, float *p, size_t n) {
    if (t->m.be->comm.comm_sum_begin(t->m.be_ctx, p, n))
        comm_abort(1, "the overlapped sums over the processes could not be queued");   // procs_overlap said yes
}

// One device's backward reached node i: the sums of the buckets it finished begin beside the rest of it,
// and after the last (node 0) the device's queue waits for them all, before the update reads them. It only
// queues work, so a recorded backward holds the sums too (core/spec/model_run.c).
typedef struct SumHook { Trainer *t; Bucket b[MAX_BUCKETS]; int n, next; size_t floats; } SumHook;
static size_t bucket_floats = BUCKET_FLOATS;

void procs_set_bucket_floats(size_t floats) { bucket_floats = floats ? floats : BUCKET_FLOATS; }

static void sum_hook(void *arg, int node) {
    SumHook *h = arg;
    Model *m = &h->t->m;
    while (h->next < h->n && h->b[h->next].node == node) {
        const Bucket *b = &h->b[h->next++];
        procs_sum_begin(h->t, m->grad + b->lo, b->hi - b->lo);
    }
    if (h->next == h->n && node == 0) m->be->comm.comm_sum_end(m->be_ctx);
}

// The buckets' sums of a device whose backward runs with them (hook set) or, with no images, of its zero
// gradients at once: every process queues the same sums in the same order.
static SumHook *sums_arm(Trainer *t) {
    if (!t->sums) t->sums = xcalloc(1, sizeof *t->sums);
    SumHook *h = t->sums;
    if (h->floats != bucket_floats) {
        h->t = t;
        h->floats = bucket_floats;
        h->n = buckets_plan(&t->m, bucket_floats, h->b, MAX_BUCKETS);
    }
    h->next = 0;
    return h;
}

int procs_bucket_count(Trainer *t) { return sums_arm(t)->n; }

// ---- sync_bn=1: the BN sums of a phase over the processes -------------------------------------------
// Each sum is a header and the values: a process with images sends [1, n], then its n doubles; at the phase's
// end [0, 0]. A process without images sends [0, 0], then zeros of the length the header says, until a header
// adds up to 0 (every process with images has ended): every rank makes the same collectives in the same order.

void procs_bn_sum(double *v, int n) {
    double h[2] = { 1, n };
    comm_sum_doubles(h, 2);
    if (h[1] != h[0] * n)
        comm_abort(1, "sync_bn: the processes' BN sums differ (%d values here, %.0f over %.0f processes): do they train "
                      "the same model?", n, h[1], h[0]);
    comm_sum_doubles(v, (size_t)n);
}

void procs_bn_end(int active) {
    for (;;) {
        double h[2] = { 0, 0 };
        comm_sum_doubles(h, 2);
        if (h[0] == 0) return;
        if (active) comm_abort(1, "sync_bn: this process ended its BN sums while %.0f others go on", h[0]);
        size_t len = (size_t)(h[1] / h[0]);
        double *zeros = xcalloc(len ? len : 1, sizeof(double));
        comm_sum_doubles(zeros, len);
        free(zeros);
    }
}

static void bn_sum_procs(void *arg, double *v, int n) { (void)arg; procs_bn_sum(v, n); }
const BnSync procs_bn_sync = { bn_sum_procs, NULL };

int procs_forward_backward(Trainer *t, const float *images, const uint8_t *images_u8, int n, int S,
                           const float *targets, int nt, int sum_grads, double global[2], Err *err) {
    const Backend *be = t->m.be;
    double local[2] = { 0, 0 };
    int overlap = sum_grads && procs_overlap(t);        // first in the step, as the multi-device driver asks it:
                                                         // the same MPI calls in the same order in every process
    if (t->sync_bn) overlap = 0;                         // the BN sums end before any gradient's (a process without
                                                         // images cannot tell them apart)
    t->m.bn_sync = t->sync_bn && n > 0 ? &procs_bn_sync : NULL;   // sync_bn=1: the BN sums of every process
    if (n > 0 && trainer_phase_forward(t, n, S, images, images_u8, targets, nt, err)) {
        be->dev.sync(t->m.be_ctx);
        comm_abort(1, "%s", err->msg);                   // the others wait in the next sum: end them all
    }
    if (t->sync_bn) procs_bn_end(n > 0);
    global[0] = global[1] = NAN;                         // the sums stay in scal[SC_ALL] (NCCL), or:
    int N = procs_normaliser_queued(t, t->scal + SC_TSS, n > 0, n, t->scal + SC_ALL);
    if (N < 0) {                                         // through the host: a wait for the device
        if (n > 0) be->dev.download(t->m.be_ctx, (float *)local, (const float *)(t->scal + SC_TSS), 4);   // 2 doubles
        N = procs_normaliser(local, n, global);
        be->dev.upload(t->m.be_ctx, (float *)(t->scal + SC_ALL), (const float *)global, 4);
    }
    SumHook *h = overlap ? sums_arm(t) : NULL;
    if (n > 0) {                                         // a process without images only sums
        if (h) t->m.backward_hook = sum_hook, t->m.backward_arg = h, t->m.hook_queues = 1;
        trainer_phase_backward(t, n, t->scal + SC_ALL, 1, N);
        t->m.backward_hook = NULL;
        t->m.hook_queues = 0;
    } else if (h) {
        for (int k = 0; k < h->n; k++) sum_hook(h, h->b[k].node);
    }
    t->m.bn_sync = NULL;
    if (t->sync_bn) procs_bn_end(n > 0);
    procs_mean_buffers(t, t->m.state + t->m.buffers, t->m.n_buffers, n > 0);
    if (sum_grads && !overlap) procs_sum(t, t->m.grad, t->m.buffers);
    return N;
}

void procs_items(Trainer *t, int n, const double global[2], LossOut *out) {
    memset(out, 0, sizeof *out);
    if (n > 0) trainer_phase_items(t, out);
    else {
        double g[2] = { global[0], global[1] };
        if (isnan(g[0])) t->m.be->dev.download(t->m.be_ctx, (float *)g, (const float *)(t->scal + SC_ALL), 4);   // done
        out->tss = g[0] > 1 ? g[0] : 1;
        out->tss_aux = t->m.n_aux ? (g[1] > 1 ? g[1] : 1) : 0;
    }
    procs_sum_items(out);
}

int procs_step_one(Trainer *t, const float *images, const uint8_t *images_u8, int n, int S, const float *targets,
                   int nt, int epoch, int i, LossOut *out, Err *err) {
    double global[2];
    procs_forward_backward(t, images, images_u8, n, S, targets, nt, procs_will_step(t, epoch, i), global, err);
    trainer_update(t, epoch, i);
    t->m.be->dev.sync(t->m.be_ctx);                          // the step's host wait
    trainer_read_times(t, NULL);
    procs_items(t, n, global, out);
    return 0;
}
