// test_procs.c: several processes joined through MPI (core/procs/comm.h, core/procs/procs.h). The test binary starts
// itself under `mpirun -np P` (skipped with the reason when this build has no MPI or mpirun is absent):
// P processes with CPU devices (cpu:1 or cpu:2 each) give the loss, the normaliser and the gradients of
// one device accumulating the same micro-batches, in every reduce mode, with the same floats on every
// rank; three whole steps leave the weights, EMA and momentum of that device, the same bit for bit on
// every rank (so every rank clipped by the same factor); processes that disagree on the configuration or
// the dataset are refused with the keys named; a rank that is killed, or that fails, ends every rank
// within seconds (no hang), named; a validation shared by the processes gives one process's numbers bit
// for bit, and a failure or a stop in one rank ends the pass in every rank; sync_bn=1 gives the loss and gradients
// of one device running the whole batch, processes without images included. Each mpirun runs under `timeout`.
#include "test/test.h"
#include "test/synth_batch.h"
#include "test/trainer_host.h"

#include <cblas.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "cfg/config.h"
#include "core/procs/comm.h"
#include "core/devices/multi.h"
#include "core/train/step.h"
#include "core/procs/procs.h"
#include "core/eval/val.h"
#include "io/image.h"
#include "io/loader.h"
#include "io/safetensors.h"
#include "io/synth.h"
#include "test/synth_run.h"
#ifdef USE_CUDA
#include "gpu/comm_nccl.h"
#include "gpu/device.h"
#endif

enum { S = 64, B = 18, MAX_T = B * SYNTH_MAX_OBJECTS, MAX_DEV = 8 };

static float images[B * S * S * 3], targets[MAX_T * 6];
static int n_targets;

static void make_batch(void) { n_targets = synth_batch(B, S, images, targets); }

// ---- the ranks' side (started by mpirun) -----------------------------------------------------------

static int rank_failed;
#define RCHECK(cond, ...) do { if (!(cond)) { printf("rank %d: FAIL %s:%d: ", comm_rank(), __FILE__, __LINE__); \
    printf(__VA_ARGS__); printf("\n"); fflush(stdout); rank_failed = 1; } } while (0)

static int load_cfg(Config *cfg, int batch, const char *reduce, const char *loss_on, const char *extra) {
    char b[32], r[64], l[64];
    snprintf(b, sizeof b, "batch=%d", batch);
    snprintf(r, sizeof r, "reduce=%s", reduce);
    snprintf(l, sizeof l, "loss_on=%s", loss_on);
    char *ov[] = { b, r, l, "split=even", "imgsz=64", "epochs=1", "nc=6", "seed=3", "precision=fp32", (char *)extra };
    Err err;
    if (config_load("cfg/t.ini", extra ? 10 : 9, ov, cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    return 0;
}

// One device, the micro-batches (sizes, over every device of every process) one after the other with
// the whole batch's normaliser (as test_multi's reference).
static void reference_step(Trainer *t, const int *sizes, int nd, int n, LossOut *total, double *norm) {
    *norm = micro_reference(t, S, images, targets, n_targets, sizes, nd, n, total);
}

// The same micro-batches with the gradients grouped as the processes add them: each process's M
// micro-batches summed (in device order), then those sums added in rank order. One device taking whole
// steps from the ungrouped sum drifts from the processes by rounding alone (4e-8 of the change after
// the first step, 7e-3 after the third at warmup's bias lr of 0.1: as one process on 6 devices with
// loss_on=device0 drifts from one device today), so the 3-step check takes the grouping out.
static void reference_step_grouped(Trainer *t, const int *sizes, int nd, int M, int n, LossOut *total, double *norm) {
    size_t N = t->m.buffers;
    float *sum = xcalloc(N, sizeof(float));
    LossOut part;
    memset(total, 0, sizeof *total);
    int P = nd / M, first = 0;
    // the normaliser of the whole batch first: reference_step's first pass over every micro-batch
    double tss = 0;
    Err err;
    for (int k = 0, f = 0; k < nd; f += sizes[k++]) {
        if (!sizes[k]) continue;
        double sk;
        micro_forward(t, S, images, targets, n_targets, f, sizes[k], &sk, &err);
        tss += sk;
    }
    for (int p = 0; p < P; p++) {
        model_zero_grad(&t->m);
        for (int k = p * M; k < (p + 1) * M; first += sizes[k++]) {
            if (!sizes[k]) continue;
            double sk;
            micro_forward(t, S, images, targets, n_targets, first, sizes[k], &sk, &err);
            trainer_compute_backward(t, sizes[k], tss > 1 ? tss : 1, n, &part);
            total->box += part.box; total->cls += part.cls; total->dfl += part.dfl; total->total += part.total;
        }
        for (size_t i = 0; i < N; i++) sum[i] = p ? sum[i] + t->m.grad[i] : t->m.grad[i];
    }
    memcpy(t->m.grad, sum, N * sizeof(float));
    free(sum);
    *norm = tss > 1 ? tss : 1;
}

typedef struct { int M; const char *reduce, *loss_on; int n, n_steps; } Case;

// This rank's trainer: one device (procs_step_one's path) or M CPU devices (the multi-device driver).
static int rank_trainer(const Case *c, Config *cfg, Trainer *t) {
    Err err;
    if (load_cfg(cfg, c->n, c->reduce, c->loss_on, NULL)) return -1;
    if (procs_agree(cfg, 0, 0, c->M, 0, &err)) { RCHECK(0, "%s", err.msg); return -1; }
    DeviceList devs;
    char spec[16];
    snprintf(spec, sizeof spec, "cpu:%d", c->M);
    if (parse_devices(spec, 0, &devs, &err) || trainer_init_devices(t, cfg, 1, &devs, &err)) {
        RCHECK(0, "%s", err.msg);
        return -1;
    }
    return 0;
}

// This rank's images of the batch of n: its share's floats, its target rows (from 0), their count.
static int rank_share(int n, const float **img, float *tg, int *nt) {
    int first, k;
    procs_share(n, &first, &k);
    *img = images + (size_t)first * S * S * 3;
    *nt = micro_targets(targets, n_targets, first, k, tg);
    return k;
}

// Every device's micro-batch of the last step, over every process in rank order; returns the count.
static int all_sizes(const Trainer *t, int M, int n_local, int *all) {
    int mine[MAX_DEV] = { 0 };
    if (t->multi) memcpy(mine, multi_sizes(t->multi), sizeof(int) * M);
    else mine[0] = n_local;
    comm_allgather(mine, all, sizeof(int) * M);
    return M * comm_size();
}

// The same bytes on every rank: rank 0's, broadcast, against this rank's.
static int same_bytes_everywhere(const void *p, size_t n) {
    char *r0 = xmalloc(n + 1);
    memcpy(r0, p, n);
    comm_bcast(r0, n);
    int same = !memcmp(r0, p, n);
    free(r0);
    int all[64], ok = 1;
    comm_allgather(&same, all, sizeof same);
    for (int r = 0; r < comm_size(); r++) ok &= all[r];
    return ok;
}
static int same_everywhere(const float *p, size_t n) { return same_bytes_everywhere(p, n * sizeof(float)); }

static void rank_equivalence(const Case *c) {
    static Config cfg;
    Trainer t;
    if (rank_trainer(c, &cfg, &t)) return;
    const float *img;
    static float tg[MAX_T * 6];
    int nt, nl = rank_share(c->n, &img, tg, &nt);
    LossOut lo;
    Err err;
    if (t.multi) {
        memcpy(t.input, img, (size_t)nl * S * S * 3 * sizeof(float));
        multi_set_bucket_floats(t.multi, 50000);       // many buckets
        RCHECK(!multi_forward_backward(t.multi, nl, S, tg, nt, &lo, &err), "%s", err.msg);
        multi_gather_state(t.multi);
    } else {
        double g[2];
        procs_set_bucket_floats(50000);            // many buckets
        procs_forward_backward(&t, img, NULL, nl, S, tg, nt, 1, g, &err);
        procs_items(&t, nl, g, &lo);
    }
    int sizes[MAX_DEV * 64], nd = all_sizes(&t, c->M, nl, sizes);
    RCHECK(same_everywhere(t.m.grad, t.m.buffers), "the summed gradients differ between ranks");
    // The gradients are summed bucket by bucket (the CPU backend's comm_sum_begin keeps them for the end of
    // the backward) unless YT_NCCL_OVERLAP=0; reduce=sharded sums each device's shard after the backward.
    const char *env = switch_str(SW_NCCL_OVERLAP);
    int overlap = procs_overlap(&t);
    RCHECK(overlap == !(env && !strcmp(env, "0")), "procs_overlap: %d", overlap);
    if (!strcmp(c->reduce, "sharded")) overlap = 0;
    // The target-score sum over every process (before max(., 1)) and the gradients' norm (what the clip
    // factor is made of) are the same doubles on every rank.
    double mine[2] = { t.scal[SC_ALL], 0 }, seen[2 * 64];
    for (size_t i = 0; i < t.m.buffers; i++) mine[1] += (double)t.m.grad[i] * t.m.grad[i];
    comm_allgather(mine, seen, sizeof mine);
    for (int r = 1; r < comm_size(); r++)
        RCHECK(seen[2 * r] == seen[0] && seen[2 * r + 1] == seen[1], "rank %d: target-score sum %.17g, gradient norm² "
               "%.17g; rank 0: %.17g, %.17g", r, seen[2 * r], seen[2 * r + 1], seen[0], seen[1]);
    if (comm_rank() == 0) {
        Trainer r;
        if (trainer_init(&r, &cfg, 1, -1, &err)) { RCHECK(0, "%s", err.msg); trainer_free(&t); return; }
        LossOut ref;
        double tss;
        reference_step(&r, sizes, nd, c->n, &ref, &tss);
        const float *g = r.m.grad, *mg = t.m.grad;
        double norm2 = 0;
        for (size_t i = 0; i < t.m.buffers; i++) norm2 += (double)g[i] * g[i];
        double rel_l2, worst = grad_worst(&t.m, mg, g, &rel_l2);   // test_multi's bound
        char how[64] = "after the backward";
        if (overlap)
            snprintf(how, sizeof how, "in %d buckets", t.multi ? multi_bucket_count(t.multi) : procs_bucket_count(&t));
        printf("    %d processes x cpu:%d %s/%s, gradients summed %s, batch %d (", comm_size(), c->M, c->reduce, c->loss_on,
               how, c->n);
        for (int k = 0; k < nd; k++) printf("%d%s", sizes[k], k < nd - 1 ? "+" : "");
        printf("): loss %.7g vs %.7g, target-score sum %.9g vs %.9g, gradient norm %.7g vs %.7g; gradients: worst %.2f "
               "of tolerance, relative L2 %.2g\n", lo.total, ref.total, mine[0], tss, sqrt(mine[1]), sqrt(norm2), worst,
               rel_l2);
        RCHECK(close_enough(lo.total, ref.total, 0, 1e-6), "loss %.9g, one device %.9g", lo.total, ref.total);
        RCHECK(close_enough(lo.box, ref.box, 1e-9, 1e-6) && close_enough(lo.cls, ref.cls, 0, 1e-6) &&
               close_enough(lo.dfl, ref.dfl, 1e-9, 1e-6), "loss items differ");
        RCHECK(close_enough(mine[0], tss, 1e-12, 1e-12) && mine[0] > 0, "target-score sum %.17g, one device %.17g",
               mine[0], tss);
        RCHECK(lo.tss == (tss > 1 ? tss : 1) || close_enough(lo.tss, tss, 0, 1e-12), "normaliser %.17g", lo.tss);
        RCHECK(close_enough(sqrt(mine[1]), sqrt(norm2), 0, 1e-5), "gradient norm %.9g, one device %.9g", sqrt(mine[1]),
               sqrt(norm2));
        RCHECK(worst <= 1, "gradients differ from one device's (worst %.2f of 1e-6 max|ref| + 1e-4|ref|)", worst);
        trainer_free(&r);
    }
    trainer_free(&t);
}

// Three whole steps (normaliser, sums, clip, SGD, EMA) against one device taking the same steps.
static void rank_steps(const Case *cs) {
    Case one = *cs, *c = &one;
    one.n = cs->n_steps;                           // micro-batches of 3 or more, as test_multi's steps
    static Config cfg;
    Trainer t, r, w0;
    Err err;
    if (rank_trainer(c, &cfg, &t)) return;
    int ref_ok = comm_rank() != 0 || (!trainer_init(&r, &cfg, 1, -1, &err) && !trainer_init(&w0, &cfg, 1, -1, &err));
    RCHECK(ref_ok, "%s", err.msg);
    const float *img;
    static float tg[MAX_T * 6];
    int nt, nl = rank_share(c->n, &img, tg, &nt);
    const double loss_tol[3] = { 1e-5, 1e-5, 1e-4 };   // test_multi's: warmup's bias lr magnifies rounding
    for (int i = 0; i < 3; i++) {
        LossOut lo, ref;
        if (trainer_step_batch(&t, img, NULL, nl, S, tg, nt, 0, i, &lo, &err)) { RCHECK(0, "%s", err.msg); break; }
        int sizes[MAX_DEV * 64], nd = all_sizes(&t, c->M, nl, sizes);
        if (comm_rank() || !ref_ok) continue;
        double tss;
        reference_step_grouped(&r, sizes, nd, c->M, c->n, &ref, &tss);
        trainer_update(&r, 0, i);
        RCHECK(close_enough(lo.total, ref.total, 0, loss_tol[i]), "step %d loss %.9g vs %.9g", i, lo.total, ref.total);
    }
    if (t.multi) multi_gather_state(t.multi);
    size_t N = t.m.n_state;
    RCHECK(same_everywhere(t.m.state, N), "the weights after 3 steps differ between ranks (another clip factor?)");
    RCHECK(same_everywhere(t.ema, N), "the EMA after 3 steps differs between ranks");
    if (comm_rank() == 0 && ref_ok) {
        double dw = rel_change(t.m.state, r.m.state, w0.m.state, t.m.buffers),
               de = rel_change(t.ema, r.ema, w0.m.state, t.m.buffers), dm = rel_change(t.sgd.buf, r.sgd.buf, NULL, r.sgd.n_train);
        printf("    %d processes x cpu:%d %s/%s, 3 steps: |procs - one| / |change|: weights %.2g, EMA %.2g, momentum "
               "%.2g (sgd steps %lld, %lld)\n", comm_size(), c->M, c->reduce, c->loss_on, dw, de, dm,
               (long long)t.sgd.steps, (long long)r.sgd.steps);
        RCHECK(dw < 3e-3, "the weights differ from one device's by %.2g of their change", dw);
        RCHECK(de < 3e-3, "the EMA differs from one device's by %.2g of its change", de);
        RCHECK(dm < 3e-3, "the momentum differs from one device's by %.2g of its size", dm);
        RCHECK(t.sgd.steps == r.sgd.steps && t.ema_updates == r.ema_updates, "step counters differ");
        trainer_free(&r);
        trainer_free(&w0);
    }
    trainer_free(&t);
}

// Rank 1 sets other keys, or reads another dataset: every rank is refused, the keys named.
static void rank_disagree(const char *what) {
    static Config cfg;
    Err err;
    int r1 = comm_rank() == 1, dataset = !strcmp(what, "dataset"), kind = !strcmp(what, "kind");
    if (load_cfg(&cfg, 8, "device0", "local", r1 && !dataset && !kind ? "lr0=0.02" : NULL)) return;
    if (r1 && !dataset && !kind) cfg.seed = 4;
    if (r1) snprintf(cfg.device, sizeof cfg.device, "cpu:2");   // its own devices: allowed
    // device counts may differ; "kind": rank 1 says its devices are GPUs
    int rc = procs_agree(&cfg, r1 && dataset ? 127 : 128, 42, 1 + r1, r1 && kind, &err);
    RCHECK(rc == -1, "rank %d: a disagreement was accepted", comm_rank());
    if (rc && comm_rank() == 0) printf("    refused: %s\n", err.msg);
    if (!rc) return;
    if (dataset) RCHECK(strstr(err.msg, "rank 1") && strstr(err.msg, "127 images"), "%s", err.msg);
    else if (kind) RCHECK(strstr(err.msg, "rank 1") && strstr(err.msg, "trains on GPUs, rank 0 on CPU devices"), "%s",
                          err.msg);
    else {
        const char *keys = strstr(err.msg, "for: ");
        RCHECK(keys && strstr(keys, "lr0") && strstr(keys, "seed") && !strstr(keys, "device"), "%s", err.msg);
    }
}

// sync_bn=1 over the processes (M devices each; some may have no images): the loss and gradients of one device
// running the whole batch of n at once, within test_multi's bounds (the batch shapes round differently), the
// same gradients and BN running statistics on every rank; and without sync_bn they differ by about 1.
static void rank_sync_bn(int M, int n, int sync, double tol) {
    static Config cfg;
    Err err;
    Trainer t;
    DeviceList devs;
    char spec[16];
    snprintf(spec, sizeof spec, "cpu:%d", M);
    if (load_cfg(&cfg, n, "device0", "local", sync ? "sync_bn=1" : "sync_bn=0")) return;
    if (procs_agree(&cfg, 0, 0, M, 0, &err)) { RCHECK(0, "%s", err.msg); return; }
    if (parse_devices(spec, 0, &devs, &err) || trainer_init_devices(&t, &cfg, 1, &devs, &err)) {
        RCHECK(0, "%s", err.msg);
        return;
    }
    const float *img;
    static float tg[MAX_T * 6];
    int nt, nl = rank_share(n, &img, tg, &nt);
    LossOut lo;
    if (t.multi) {
        memcpy(t.input, img, (size_t)nl * S * S * 3 * sizeof(float));
        RCHECK(!multi_forward_backward(t.multi, nl, S, tg, nt, &lo, &err), "%s", err.msg);
    } else {
        double g[2];
        procs_forward_backward(&t, img, NULL, nl, S, tg, nt, 1, g, &err);
        procs_items(&t, nl, g, &lo);
    }
    RCHECK(same_everywhere(t.m.grad, t.m.buffers), "the summed gradients differ between ranks");
    RCHECK(same_everywhere(t.m.state + t.m.buffers, t.m.n_buffers), "the BN running statistics differ between ranks");
    double rel_l2 = 0;
    if (comm_rank() == 0) {
        Trainer r;
        if (trainer_init(&r, &cfg, 1, -1, &err)) { RCHECK(0, "%s", err.msg); trainer_free(&t); return; }
        LossOut ref;
        whole_batch_step(&r, S, images, targets, n_targets, n, &ref);
        grad_worst(&t.m, t.m.grad, r.m.grad, &rel_l2);
        printf("    %d processes x cpu:%d sync_bn=%d, batch %d: loss %.7g vs %.7g (one device, whole batch); gradients "
               "relative L2 %.2g\n", comm_size(), M, sync, n, lo.total, ref.total, rel_l2);
        if (sync) {
            RCHECK(close_enough(lo.total, ref.total, 0, 1e-3), "loss %.9g, one device %.9g", lo.total, ref.total);
            RCHECK(rel_l2 < tol, "gradients: relative L2 %.2g from the whole batch's on one device", rel_l2);
        } else {
            RCHECK(rel_l2 > 0.1, "without sync_bn the processes match the whole batch (relative L2 %.2g): the test "
                   "cannot tell", rel_l2);
        }
        trainer_free(&r);
    }
    trainer_free(&t);
}

// Steps until rank 1 dies (SIGKILL) or fails (comm_abort) at its third; the others would go on for minutes.
static void rank_fault(const char *how) {
    static Config cfg;
    Trainer t;
    Case c = { 1, "device0", "local", 4, 4 };
    if (rank_trainer(&c, &cfg, &t)) return;
    const float *img;
    static float tg[MAX_T * 6];
    int nt, nl = rank_share(c.n, &img, tg, &nt);
    Err err;
    for (int i = 0; i < 2000; i++) {
        if (comm_rank() == 1 && i == 2) {
            printf("rank 1: %s now\n", how);
            fflush(stdout);
            if (!strcmp(how, "kill")) raise(SIGKILL);
            comm_abort(3, "injected failure at step %d", i);
        }
        LossOut lo;
        trainer_step_batch(&t, img, NULL, nl, S, tg, nt, 0, i, &lo, &err);
    }
    printf("rank %d: FAIL: went on for 2000 steps after rank 1 stopped\n", comm_rank());
    rank_failed = 1;
    trainer_free(&t);
}

// ---- validation shared by the processes ----------------------------------------------------------

// The numbers of a validation, bit for bit: 1 when a and b are the same.
static int same_val(const ValResult *a, const ValResult *b) {
    const Metrics *x = &a->m, *y = &b->m;
    double u[8] = { x->mp, x->mr, x->map50, x->map, a->fitness, a->box, a->cls, a->dfl },
           v[8] = { y->mp, y->mr, y->map50, y->map, b->fitness, b->box, b->cls, b->dfl };
    int same = !memcmp(u, v, sizeof u) && x->images == y->images && x->instances == y->instances && x->k == y->k;
    for (int c = 0; same && c < x->k; c++)
        same = x->cls[c] == y->cls[c] && !memcmp(&x->p[c], &y->p[c], sizeof(double)) && !memcmp(&x->r[c], &y->r[c],
               sizeof(double)) && !memcmp(&x->ap50[c], &y->ap50[c], sizeof(double)) && !memcmp(&x->ap[c], &y->ap[c],
               sizeof(double));
    return same;
}

// This rank's trainer on cpu:M and the val split of the dataset in dir.
static int val_trainer(const char *dir, int M, Config *cfg, Trainer *t, Dataset *ds) {
    Err err;
    char data[4200];
    snprintf(data, sizeof data, "data=%s/data.yaml", dir);
    if (load_cfg(cfg, 8, "device0", "local", data)) { RCHECK(0, "config"); return -1; }
    DatasetOptions opt = { .quiet = 1 };
    if (dataset_open(NULL, cfg, "val", &opt, ds, &err)) { RCHECK(0, "%s", err.msg); return -1; }
    config_set_nc(cfg, ds->nc);
    DeviceList devs;
    char spec[16];
    snprintf(spec, sizeof spec, "cpu:%d", M);
    if (procs_agree(cfg, 0, 0, M, 0, &err) || parse_devices(spec, 0, &devs, &err) ||
        trainer_init_devices(t, cfg, 1, &devs, &err)) {
        RCHECK(0, "%s", err.msg);
        dataset_free(ds);
        return -1;
    }
    return 0;
}

// The EMA of this rank's trainer validated by every process (each its batches b % P == rank on its cpu:M);
// rank 0 then validates it alone. Every rank gets what one process gets, bit for bit: P, R, mAP50,
// mAP50-95 (overall and per class), the losses; and the same confusion matrix, curves and batch-0
// pictures on rank 0; each rank ran its share of the batches.
static void rank_val(const char *dir, int M) {
    static Config cfg;
    Trainer t;
    Dataset ds;
    if (val_trainer(dir, M, &cfg, &t, &ds)) return;
    for (size_t k = 0; k < t.m.n_state; k++) t.ema[k] = t.m.state[k] * 0.9f;   // the EMA, not the weights
    char shared[4300], alone[4300];
    snprintf(shared, sizeof shared, "%s/shared", dir);
    snprintf(alone, sizeof alone, "%s/alone", dir);
    if (comm_rank() == 0) RCHECK(!make_dirs(shared) && !make_dirs(alone), "cannot make %s", shared);
    ValOptions o = val_options(&cfg);
    o.out = NULL; o.nms.conf_thres = 0; o.batch = 1; o.workers = 1;   // 11 batches
    o.rank = comm_rank(); o.ranks = comm_size();
    o.picture_dir = o.plots_dir = shared;               // rank 0 draws (batch 0 is its)
    ValResult r, one;
    Err err;
    int rc = val_evaluate_ema(&t, &ds, &o, &r, &err), P = comm_size(), nb = (ds.n + o.batch - 1) / o.batch;
    RCHECK(rc == 0, "%s", err.msg);
    if (!rc) {
        double key[8] = { r.m.mp, r.m.mr, r.m.map50, r.m.map, r.fitness, r.box, r.cls, r.dfl };
        RCHECK(same_bytes_everywhere(key, sizeof key), "the processes got other numbers");
        int mine = (nb - comm_rank() + P - 1) / P, ran[64];
        comm_allgather(&r.ran, ran, sizeof r.ran);
        RCHECK(r.ran == mine && r.m.images == ds.n, "ran %d batches (%d expected), %d images", r.ran, mine, r.m.images);
        if (comm_rank() == 0) {
            printf("    %d processes x cpu:%d: %d images in %d batches, run", P, M, ds.n, nb);
            for (int k = 0; k < P; k++) printf("%s%d", k ? " + " : " ", ran[k]);
            printf("; P %.6f R %.6f mAP50 %.6f mAP50-95 %.6f, val losses %.6g %.6g %.6g\n", r.m.mp, r.m.mr, r.m.map50,
                   r.m.map, r.box, r.cls, r.dfl);
        }
    }
    if (comm_rank() == 0 && !rc) {
        o.rank = o.ranks = 0;
        o.picture_dir = o.plots_dir = alone;
        if (val_evaluate_ema(&t, &ds, &o, &one, &err)) RCHECK(0, "alone: %s", err.msg);
        else {
            RCHECK(same_val(&r, &one), "not what one process gets: mAP50 %.17g vs %.17g, cls loss %.17g vs %.17g",
                   r.m.map50, one.m.map50, r.cls, one.cls);
            RCHECK(r.m.mp > 0 && r.m.map50 > 0 && r.cls > 0, "nothing to compare: P %g mAP50 %g", r.m.mp, r.m.map50);
            RCHECK(one.ran == nb, "alone: %d batches of %d", one.ran, nb);
            const char *files[] = { "confusion_matrix.png", "PR_curve.png", "val_batch0_labels.jpg", "val_batch0_pred.jpg" };
            for (int k = 0; k < 4; k++) {
                char a[4400], b[4400];
                snprintf(a, sizeof a, "%s/%s", shared, files[k]);
                snprintf(b, sizeof b, "%s/%s", alone, files[k]);
                RCHECK(same_file(a, b), "%s differs from one process's (or is missing)", files[k]);
            }
            val_result_free(&one);
        }
    }
    if (!rc) val_result_free(&r);
    trainer_free(&t);
    dataset_free(&ds);
}

// A pass that fails (another imgsz) or is stopped (its stop flag) in rank 1 only: every rank returns -1 at
// once, the failure named with rank 1.
static void rank_val_fault(const char *dir, const char *how) {
    static Config cfg;
    Trainer t;
    Dataset ds;
    if (val_trainer(dir, 1, &cfg, &t, &ds)) return;
    static volatile int stop;
    int r1 = comm_rank() == 1, fail = !strcmp(how, "fail");
    ValOptions o = val_options(&cfg);
    o.out = NULL; o.batch = 2; o.workers = 1;
    o.rank = comm_rank(); o.ranks = comm_size();
    if (r1 && fail) o.imgsz = 96;                      // more than the model's plan: refused in rank 1
    stop = r1 && !fail;
    o.stop = &stop;
    ValResult r;
    Err err;
    int rc = val_evaluate_ema(&t, &ds, &o, &r, &err);
    RCHECK(rc == -1, "rank %d: the pass went on", comm_rank());
    if (rc && fail) RCHECK(strstr(err.msg, "process 1 of") && strstr(err.msg, "imgsz"), "%s", err.msg);
    if (rc && !fail) RCHECK(strstr(err.msg, "stopped"), "%s", err.msg);
    if (rc && comm_rank() == 0) printf("    %s in rank 1: every rank: %s\n", how, err.msg);
    if (!rc) val_result_free(&r);
    trainer_free(&t);
    dataset_free(&ds);
}

static int rank_main(int argc, char **argv) {
    Err err;
    if (comm_init(&err)) { printf("rank ?: FAIL: %s\n", err.msg); return 1; }
    make_batch();
    const char *what = argv[2];
    if (!strcmp(what, "equiv") && argc >= 8) {
        Case c = { atoi(argv[3]), argv[4], argv[5], atoi(argv[6]), atoi(argv[7]) };
        rank_equivalence(&c);
        rank_steps(&c);
    } else if (!strcmp(what, "disagree") && argc >= 4) {
        rank_disagree(argv[3]);
    } else if (!strcmp(what, "syncbn") && argc >= 7) {
        rank_sync_bn(atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atof(argv[6]));
    } else if (!strcmp(what, "fault") && argc >= 4) {
        rank_fault(argv[3]);
    } else if (!strcmp(what, "val") && argc >= 5) {
        rank_val(argv[3], atoi(argv[4]));
    } else if (!strcmp(what, "valfault") && argc >= 5) {
        rank_val_fault(argv[3], argv[4]);
    } else {
        printf("rank %d: FAIL: unknown case %s\n", comm_rank(), what);
        rank_failed = 1;
    }
    int all[64], any = 0;
    comm_allgather(&rank_failed, all, sizeof rank_failed);
    for (int r = 0; r < comm_size(); r++) any |= all[r];
    if (comm_rank() == 0) printf("ranks: %s\n", any ? "FAILED" : "all passed");
    fflush(stdout);
    comm_finalize();
    return any;
}

// ---- the test's side: mpirun ---------------------------------------------------------------------

static char self[4096], mpirun[4096], skip_why[256];

// 1 when this build has MPI and mpirun is here; else 0 with the reason in skip_why.
static int have_mpirun(void) {
    if (!comm_built()) {
        snprintf(skip_why, sizeof skip_why, "this yolotrain was built without MPI (no mpicc; make deps installs Open MPI)");
        return 0;
    }
    FILE *p = popen("command -v mpirun 2>/dev/null", "r");
    int found = p && fgets(mpirun, sizeof mpirun, p);
    if (p) pclose(p);
    if (!found) { snprintf(skip_why, sizeof skip_why, "mpirun not found (apt-get install openmpi-bin)"); return 0; }
    mpirun[strcspn(mpirun, "\n")] = 0;
    return 1;
}

// cmd through the shell: its output (as much as fits) into out, its exit status returned.
static int run_shell(const char *cmd, char *out, size_t size) {
    FILE *p = popen(cmd, "r");
    size_t o = 0;
    out[0] = 0;
    if (!p) return -1;
    while (o + 1 < size && fgets(out + o, (int)(size - o), p)) o += strlen(out + o);
    char sink[4096];
    while (fgets(sink, sizeof sink, p)) {}
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

// mpirun -np P of this binary with args, under a timeout; its output into out, its status returned.
static int run_ranks(int np, const char *args, int limit_s, char *out, size_t size, double *secs) {
    char cmd[8192 + 4096];
    snprintf(cmd, sizeof cmd, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 "
             "ASAN_OPTIONS=detect_leaks=0 OPENBLAS_NUM_THREADS=1 "
             "timeout -k 5 %d %s --allow-run-as-root --oversubscribe --bind-to none -np %d %s rank %s 2>&1",
             limit_s, mpirun, np, self, args);
    double t0 = now_seconds();
    int rc = run_shell(cmd, out, size);
    *secs = now_seconds() - t0;
    return rc;
}

static void print_indented(const char *out) {
    for (const char *l = out; *l;) {
        size_t n = strcspn(l, "\n");
        if (strncmp(l, "parallel:", 9) && strncmp(l, "  cpu ", 6) && strncmp(l, "freeze", 6))
            printf("    | %.*s\n", (int)n, l);
        l += n + (l[n] == '\n');
    }
}

// The gradients of a batch of n, then 3 steps on a batch of n_steps.
static void equiv(int np, int M, const char *reduce, const char *loss_on, int n, int n_steps) {
    char args[256], out[1 << 16];
    double secs;
    snprintf(args, sizeof args, "equiv %d %s %s %d %d", M, reduce, loss_on, n, n_steps);
    int rc = run_ranks(np, args, 300, out, sizeof out, &secs);
    print_indented(out);
    CHECK(rc == 0 && strstr(out, "ranks: all passed"), "mpirun -np %d %s: status %d after %.0f s", np, args, rc, secs);
}

static void test_two_processes_one_device(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    equiv(2, 1, "device0", "local", 7, 8);        // 4+3, then 4+4 images: procs_step_one's path
    test_switch(SW_NCCL_OVERLAP, "0");             // the sums after the backward, in one call
    equiv(2, 1, "device0", "local", 7, 8);
    test_switch(SW_NCCL_OVERLAP, NULL);
}
static void test_two_processes_two_devices(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    equiv(2, 2, "device0", "local", 7, 12);       // 2+2 + 2+1, then 3+3 + 3+3
    test_switch(SW_NCCL_OVERLAP, "0");
    equiv(2, 2, "device0", "local", 7, 12);
    test_switch(SW_NCCL_OVERLAP, NULL);
    equiv(2, 2, "sharded", "local", 8, 12);
}
static void test_three_processes(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    equiv(3, 1, "device0", "local", 8, 8);        // 3 + 3 + 2
    equiv(3, 2, "device0", "device0", 12, 18);    // loss_on=device0: each process's batch on its device 0
    equiv(3, 2, "sharded", "device0", 11, 18);    // 2+2 + 2+2 + 2+1
}

// A batch smaller than the devices: the last processes get no image (as an epoch's last batch may
// leave them) and still take part in every sum.
static void test_processes_without_images(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    equiv(3, 1, "device0", "local", 2, 8);        // 1 + 1 + 0
    equiv(3, 2, "sharded", "device0", 2, 18);     // 1+1 + 0+0 + 0+0
}

static void test_disagreement_refused(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    const char *what[] = { "config", "dataset", "kind" };
    for (int k = 0; k < 3; k++) {
        char args[64], out[1 << 14];
        double secs;
        snprintf(args, sizeof args, "disagree %s", what[k]);
        int rc = run_ranks(2, args, 120, out, sizeof out, &secs);
        print_indented(out);
        CHECK(rc == 0 && strstr(out, "ranks: all passed"), "%s: status %d", what[k], rc);
    }
}

static void sync_bn_ranks(int np, int M, int n, int sync, double tol) {
    char args[64], out[1 << 15];
    double secs;
    snprintf(args, sizeof args, "syncbn %d %d %d %g", M, n, sync, tol);
    int rc = run_ranks(np, args, 300, out, sizeof out, &secs);
    print_indented(out);
    CHECK(rc == 0 && strstr(out, "ranks: all passed"), "mpirun -np %d %s: status %d after %.0f s", np, args, rc, secs);
}

// sync_bn=1 over processes: one device each (procs_forward_backward), two each (the devices' meeting, then the
// processes' sum from the worker that completes it), and processes without images, which add zeros. A batch of
// 2 normalises maps of a few pixels near the head, where the other batch shapes' rounding moves the gradients
// most (5e-3 measured): its bound is 3e-2; without the sync the difference is about 1.
static void test_sync_bn_processes(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    sync_bn_ranks(2, 1, 8, 1, 1e-2);
    sync_bn_ranks(2, 2, 7, 1, 1e-2);               // 2+2 + 2+1
    sync_bn_ranks(3, 1, 2, 1, 3e-2);               // 1 + 1 + 0
    sync_bn_ranks(3, 2, 2, 1, 3e-2);               // 1+1 + 0+0 + 0+0
    sync_bn_ranks(2, 1, 8, 0, 0);
}

// A rank killed (SIGKILL) or failing (comm_abort) mid-run ends every rank within seconds, named.
static void test_dead_rank_stops_all(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    const char *how[] = { "kill", "fail" };
    for (int k = 0; k < 2; k++) {
        char args[64], out[1 << 15];
        double secs;
        snprintf(args, sizeof args, "fault %s", how[k]);
        int rc = run_ranks(3, args, 120, out, sizeof out, &secs);
        print_indented(out);
        printf("    %s: mpirun ended with status %d after %.1f s\n", how[k], rc, secs);
        CHECK(rc != 0 && secs < 100, "%s: status %d after %.0f s (the 120 s timeout ends a hang)", how[k], rc, secs);
        CHECK(!strstr(out, "went on for"), "%s: a rank went on", how[k]);
        CHECK(strstr(out, k ? "rank 1 of 3 (host " : "rank 1") && (k || strstr(out, "signal 9") || strstr(out, "Killed") ||
              strstr(out, "killed")), "%s: the failing rank is not named", how[k]);
        CHECK(secs < 60, "%s: the ranks took %.0f s to stop", how[k], secs);
    }
}

// Labels the model finds: the first 3 detections of each image, as a one-device validation of the
// ranks' trainer writes them (save_txt), replace its labels, so the shared passes have true positives to
// count (at its initial weights the model finds none of the synthetic shapes). 0, or -1.
static int val_labels_from_model(const char *dir) {
    static Config cfg;
    Trainer t;
    Dataset ds;
    Err err;
    char data[4200], pred[4300];
    snprintf(data, sizeof data, "data=%s/data.yaml", dir);
    snprintf(pred, sizeof pred, "%s/pred", dir);
    DatasetOptions opt = { .quiet = 1 };
    if (load_cfg(&cfg, 8, "device0", "local", data) || dataset_open(NULL, &cfg, "val", &opt, &ds, &err)) return -1;
    config_set_nc(&cfg, ds.nc);
    if (trainer_init(&t, &cfg, 1, -1, &err)) { printf("    %s\n", err.msg); dataset_free(&ds); return -1; }
    for (size_t k = 0; k < t.m.n_state; k++) t.ema[k] = t.m.state[k] * 0.9f;   // as rank_val
    ValOptions o = val_options(&cfg);
    o.out = NULL; o.nms.conf_thres = 0; o.batch = 2; o.workers = 1;
    o.save_txt = 1; o.save_dir = pred;
    ValResult r;
    int rc = val_evaluate_ema(&t, &ds, &o, &r, &err);
    if (rc) printf("    %s\n", err.msg);
    else val_result_free(&r);
    for (int i = 0; !rc && i < ds.n; i++) {
        const char *slash = strrchr(ds.s[i].label, '/');
        char from[4500], line[256];
        snprintf(from, sizeof from, "%s/labels%s", pred, slash);
        FILE *f = fopen(from, "r"), *g = fopen(ds.s[i].label, "w");
        for (int k = 0; f && g && k < 3 && fgets(line, sizeof line, f); k++) fputs(line, g);
        rc = !f || !g ? -1 : 0;
        if (f) fclose(f);
        if (g) fclose(g);
    }
    trainer_free(&t);
    dataset_free(&ds);
    return rc;
}

// A synthetic dataset for the validation cases: n_val images of 64-120 px (several rect shapes) labelled
// by the model, in test_tmpdir(tag)/synth; 0 with its path in dir, or -1.
static int val_data(const char *tag, int n_train, int n_val, char *dir, size_t size) {
    SynthConfig sc = synth_defaults();
    sc.n_train = n_train; sc.n_val = n_val; sc.min_side = 64; sc.max_side = 120; sc.threads = 1;
    snprintf(dir, size, "%s/synth", test_tmpdir(tag));
    Err err;
    if (synth_generate(dir, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    return val_labels_from_model(dir);
}

static void val_ranks(int np, const char *args) {
    char out[1 << 15];
    double secs;
    int rc = run_ranks(np, args, 300, out, sizeof out, &secs);
    print_indented(out);
    CHECK(rc == 0 && strstr(out, "ranks: all passed"), "mpirun -np %d %s: status %d after %.0f s", np, args, rc, secs);
}

// Validation shared by 2 processes x cpu:1 and cpu:2, and by 3 x cpu:1: one process's numbers, bit for bit.
static void test_validation_shared(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    char dir[4300], args[4400];
    if (val_data("val", 2, 11, dir, sizeof dir)) { CHECK(0, "synthetic data"); return; }
    const int np[3] = { 2, 2, 3 }, M[3] = { 1, 2, 1 };
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args, "val %s %d", dir, M[k]);
        val_ranks(np[k], args);
    }
}

// A validation that fails or is stopped in one process ends the pass in every process (no hang).
static void test_validation_fault_everywhere(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    char dir[4300], args[4400];
    if (val_data("val", 2, 11, dir, sizeof dir)) { CHECK(0, "synthetic data"); return; }
    const char *how[] = { "fail", "stop" };
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args, "valfault %s %s", dir, how[k]);
        val_ranks(3, args);
    }
}

// Relative L2 difference of every F32 tensor of two safetensors files; -1 when one cannot be read.
static double file_diff(const char *a, const char *b, int *n_tensors) {
    SafeTensors x, y;
    *n_tensors = 0;
    Err err;
    if (st_open(a, &x, &err)) { printf("    %s\n", err.msg); return -1; }
    if (st_open(b, &y, &err)) { printf("    %s\n", err.msg); st_close(&x); return -1; }
    double se = 0, sr = 0;
    for (int i = 0; i < x.n; i++) {
        const StTensor *t = &x.tensor[i], *u = st_find(&y, t->name);
        if (t->dtype != ST_F32 || !u || u->nbytes != t->nbytes) continue;
        size_t n = st_numel(t);
        float *p = xmalloc(n * sizeof(float)), *q = xmalloc(n * sizeof(float));
        if (!st_read_f32(&x, t->name, p, n, &err) && !st_read_f32(&y, t->name, q, n, &err)) {
            for (size_t k = 0; k < n; k++) se += ((double)p[k] - q[k]) * ((double)p[k] - q[k]), sr += (double)q[k] * q[k];
            ++*n_tensors;
        }
        free(p); free(q);
    }
    st_close(&x); st_close(&y);
    return sr > 0 ? sqrt(se / sr) : -1;
}


// Images [3, 7) of each batch (the last, of 4, keeps 1).
static int share_3_4(int whole, int *first, void *arg) {
    *first = 3;
    return whole - 3 < 0 ? 0 : whole - 3 < 4 ? whole - 3 : 4;
}
static int share_none(int whole, int *first, void *arg) { *first = 0; return 0; }

// LoaderConfig.share: a process makes only its images of each batch, the same bytes and targets as
// that part of the whole batch (mosaic on, 2 workers); a share without images still gives each batch.
static void test_loader_share(void) {
    if (synth_run_data("share", 20)) { CHECK(0, "synthetic data"); return; }
    static Config cfg;
    Err err;
    char d[4400];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    char *ov[] = { d, "imgsz=64", "batch=8", "workers=2" };
    if (config_load("cfg/t.ini", 4, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    Dataset ds;
    DatasetOptions opt = { .quiet = 1, .report = tmpfile() };
    if (dataset_open(NULL, &cfg, "train", &opt, &ds, &err)) { CHECK(0, "%s", err.msg); fclose(opt.report); return; }
    fclose(opt.report);
    Loader *whole, *part, *none;
    LoaderConfig lw = loader_config(&cfg, 1), lp = lw, ln = lw;
    lp.share = share_3_4;
    ln.share = share_none;
    if (loader_open(&lw, &ds, &whole, &err) || loader_open(&lp, &ds, &part, &err) || loader_open(&ln, &ds, &none, &err)) {
        CHECK(0, "%s", err.msg);
        dataset_free(&ds);
        return;
    }
    size_t per = (size_t)64 * 64 * 3;
    for (int epoch = 0; epoch < 2; epoch++) {
        loader_start_epoch(whole, epoch, 1);
        loader_start_epoch(part, epoch, 1);
        loader_start_epoch(none, epoch, 1);
        Batch *a, *b, *z;
        int k = 0;
        for (; loader_next(whole, &a); k++) {
            CHECK(loader_next(part, &b) && loader_next(none, &z), "epoch %d batch %d: the shares ended early", epoch, k);
            int first = 0, n = share_3_4(a->n, &first, NULL);
            CHECK(b->n == n && z->n == 0 && z->nt == 0, "batch %d of %d: share of %d, empty share of %d", k, a->n, b->n, z->n);
            CHECK(!memcmp(b->images, a->images + first * per, n * per), "epoch %d batch %d: other bytes", epoch, k);
            int nt = 0, same = 1;
            for (int r = 0; r < a->nt; r++) {
                int img = (int)a->targets[6 * r];
                if (img < first || img >= first + n) continue;
                float row[6];
                memcpy(row, a->targets + 6 * r, sizeof row);
                row[0] -= first;
                same &= nt < b->nt && !memcmp(row, b->targets + 6 * nt, sizeof row);
                nt++;
            }
            CHECK(same && nt == b->nt, "epoch %d batch %d: other targets (%d rows, %d expected)", epoch, k, b->nt, nt);
            loader_release(whole, a);
            loader_release(part, b);
            loader_release(none, z);
        }
        CHECK(k == 3 && !loader_next(part, &b) && !loader_next(none, &z), "epoch %d: %d batches", epoch, k);
    }
    loader_close(whole);
    loader_close(part);
    loader_close(none);
    dataset_free(&ds);
}

// Whole runs: 3 steps of `mpirun -np 2 ./yolotrain ... device=cpu` leave the training state of one process
// on cpu:2 (the same micro-batches, summed in the same order); rank 1 writes nothing (one run folder);
// resuming that run as one process is refused, naming the counts.
static void test_training_run(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built (make builds it before the tests)");
    if (synth_run_data("procs", 24)) { CHECK(0, "synthetic data"); return; }
    char common[9000], cmd[16000], out[1 << 16];
    snprintf(common, sizeof common, "cfg/t.ini data=%s project=%s imgsz=64 batch=8 epochs=2 workers=1 noplots=1 seed=5",
             data_yaml, project);
    snprintf(cmd, sizeof cmd, "YT_STOP_AFTER_STEPS=3 OPENBLAS_NUM_THREADS=1 timeout -k 5 300 ./yolotrain %s name=one "
             "device=cpu:2 2>&1", common);
    int rc1 = run_shell(cmd, out, sizeof out);
    CHECK(rc1 == 0, "one process: status %d:\n%s", rc1, out);
    snprintf(cmd, sizeof cmd, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "OMPI_MCA_btl_vader_single_copy_mechanism=none YT_STOP_AFTER_STEPS=3 OPENBLAS_NUM_THREADS=1 "
             "ASAN_OPTIONS=detect_leaks=0 timeout -k 5 300 %s --allow-run-as-root --oversubscribe --bind-to none -np 2 "
             "./yolotrain %s name=two device=cpu 2>&1", mpirun, common);
    int rc2 = run_shell(cmd, out, sizeof out);
    CHECK(rc2 == 0 && strstr(out, "rank 1 of 2") && strstr(out, "images 4..7"), "two processes: status %d:\n%s", rc2, out);
    char a[9000], b[9000];
    int n = 0;
    snprintf(a, sizeof a, "%s/two/weights/last_state.safetensors", project);
    snprintf(b, sizeof b, "%s/one/weights/last_state.safetensors", project);
    double d = file_diff(a, b, &n);
    printf("    3 steps as 2 processes x cpu vs 1 process x cpu:2: the training state (weights, EMA, momentum) differs by %.2g (relative L2, %d "
           "tensors)\n", d, n);
    CHECK(d >= 0 && d < 1e-5 && n >= 3, "the training states differ by %.3g over %d tensors", d, n);
    snprintf(a, sizeof a, "%s/two2", project);
    snprintf(b, sizeof b, "%s/two/processes.txt", project);
    CHECK(access(a, F_OK) && !access(b, F_OK), "rank 1 made a run folder of its own, or no processes.txt");
    snprintf(cmd, sizeof cmd, "timeout -k 5 120 ./yolotrain resume=%s/two 2>&1", project);
    int rc3 = run_shell(cmd, out, sizeof out);
    CHECK(rc3 == 2 && strstr(out, "trained by 2 processes"), "resume as one process: status %d: %s", rc3, out);
}

// mpirun -np 2 of ./yolotrain with args; rank_env (NULL: none) set in rank 1 only. Its status.
static int run_two(const char *args, const char *rank_env, char *out, size_t size) {
    char cmd[24000];
    snprintf(cmd, sizeof cmd, "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
             "OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1 ASAN_OPTIONS=detect_leaks=0 "
             "timeout -k 5 300 %s --allow-run-as-root --oversubscribe --bind-to none -np 2 sh -c 'if [ "
             "\"$OMPI_COMM_WORLD_RANK\" = 1 ]; then export %s; fi; exec ./yolotrain \"$@\"' sh %s 2>&1", mpirun,
             rank_env ? rank_env : "RANK1_ENV=none", args);
    return run_shell(cmd, out, size);
}

// Run `common` as 2 processes in runs/name with rank_env in rank 1: it must stop saying `said`; resumed
// as 2 processes, the run must end with the results.csv of one process on cpu:2 (runs/one).
static void stopped_then_resumed(const char *common, const char *runs, const char *name, const char *rank_env,
                                 const char *said, const char *what) {
    char cmd[16000], out[1 << 16], a[4500], b[4500];
    snprintf(cmd, sizeof cmd, "%s name=%s device=cpu", common, name);
    int rc = run_two(cmd, rank_env, out, sizeof out);
    CHECK(rc == 128 + SIGTERM && strstr(out, said), "%s: status %d (want 143):\n%s", what, rc, out);
    snprintf(cmd, sizeof cmd, "resume=%s/%s", runs, name);
    rc = run_two(cmd, NULL, out, sizeof out);
    snprintf(a, sizeof a, "%s/%s/results.csv", runs, name);
    snprintf(b, sizeof b, "%s/one/results.csv", runs);
    CHECK(rc == 0 && same_file(a, b), "%s, resumed: status %d, results.csv %s:\n%s", what, rc,
          same_file(a, b) ? "the same" : "differs", out);
}

// Whole runs of 2 epochs, validated: `mpirun -np 2 ./yolotrain ... device=cpu` shares each validation
// (rank 1 runs 2 of its 4 batches, said on rank 0's output) and writes what one process on cpu:2 writes:
// results.csv byte for byte (the metrics and val losses of every epoch among its columns), the same
// val_batch0 pictures, confusion matrix and PR curve. SIGTERM in rank 1 alone as the first validation
// starts stops both processes there (rank 0 saves); resumed as 2 processes, the run ends as the others.
static void test_training_validation(void) {
    if (!have_mpirun()) SKIP("%s", skip_why);
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built (make builds it before the tests)");
    char dir[4300], runs[4400], common[9000], cmd[16000], out[1 << 16];
    if (val_data("run-val", 12, 40, dir, sizeof dir)) { CHECK(0, "synthetic data"); return; }
    snprintf(runs, sizeof runs, "%s/runs", dir);
    // batch 6: 3 images per device (the evaluation's rect shapes fit them), 4 val batches of 12
    snprintf(common, sizeof common, "cfg/t.ini data=%s/data.yaml project=%s imgsz=64 batch=6 epochs=2 workers=1 seed=3",
             dir, runs);
    snprintf(cmd, sizeof cmd, "OPENBLAS_NUM_THREADS=1 timeout -k 5 300 ./yolotrain %s name=one device=cpu:2 2>&1", common);
    int rc1 = run_shell(cmd, out, sizeof out);
    CHECK(rc1 == 0, "one process: status %d:\n%s", rc1, out);
    snprintf(cmd, sizeof cmd, "%s name=two device=cpu", common);
    int rc2 = run_two(cmd, NULL, out, sizeof out);
    const char *shared = "Validation shared by 2 processes: batches 2 + 2 of 4", *second = strstr(out, shared);
    second = second ? strstr(second + 1, shared) : NULL;
    CHECK(rc2 == 0 && second, "two processes: status %d, validation not shared at both epochs:\n%s", rc2, out);
    const char *files[] = { "results.csv", "val_batch0_labels.jpg", "val_batch0_pred.jpg", "confusion_matrix.png",
                            "PR_curve.png" };
    for (int k = 0; k < 5; k++) {
        char a[4500], b[4500];
        snprintf(a, sizeof a, "%s/two/%s", runs, files[k]);
        snprintf(b, sizeof b, "%s/one/%s", runs, files[k]);
        CHECK(same_file(a, b), "%s differs from one process's (or is missing)", files[k]);
    }
    stopped_then_resumed(common, runs, "sig", "YT_SIGNAL_AT=val", "stopped (signal) during the validation of epoch 0",
                         "a signal in rank 1 during validation");
    // SIGTERM in rank 1 just after the step-end agreement not to stop: both still take the next step,
    // agree there and stop together (acting on the flag itself, rank 1 left the loop while rank 0 went
    // into the next step's collectives, and both hung until the timeout)
    stopped_then_resumed(common, runs, "late", "YT_SIGNAL_AT=agreed", "stopped (signal) at epoch 0, batch 2",
                         "a signal in rank 1 just after a step's agreement");
    char csv[4500], line[1024] = "";
    snprintf(csv, sizeof csv, "%s/two/results.csv", runs);
    FILE *f = fopen(csv, "r");
    for (int row = 0; f && row < 3 && fgets(line, sizeof line, f); row++) {}
    if (f) fclose(f);
    printf("    2 epochs as 2 processes x cpu (validation shared, batches 2 + 2), and stopped by SIGTERM in rank 1 "
           "during validation or just after a step's agreement, then resumed, vs 1 process x cpu:2: results.csv, pictures and plots the same bytes; "
           "last row:\n    %s", line);
}

// The several-process path with this process alone (procs_force: the normaliser through the host, the
// sums of a communicator of one; on a GPU NCCL's, the normaliser's on the device and the gradients' bucket by
// bucket beside the backward unless YT_NCCL_OVERLAP=0) gives one process's 3 steps bit for bit. Returns the
// passes the forced trainer recorded (its forward and backward: CUDA Graphs, hooked or not).
static int forced_matches(int gpu) {
    static Config cfg;
    Err err;
    if (load_cfg(&cfg, 8, "device0", "local", NULL)) { CHECK(0, "config"); return 0; }
    Trainer a, b;
    if (trainer_init(&a, &cfg, 1, gpu, &err) || trainer_init(&b, &cfg, 1, gpu, &err)) { CHECK(0, "%s", err.msg); return 0; }
    static float tg[MAX_T * 6];
    int nt = micro_targets(targets, n_targets, 0, 8, tg);   // the rows of the first 8 images
    for (int i = 0; i < 3; i++) {
        LossOut la, lb;
        procs_force(0);
        CHECK(!trainer_step_batch(&a, images, NULL, 8, S, tg, nt, 0, i, &la, &err), "%s", err.msg);
        procs_force(1);
        CHECK(!trainer_step_batch(&b, images, NULL, 8, S, tg, nt, 0, i, &lb, &err), "%s", err.msg);
        procs_force(0);
        CHECK(la.total == lb.total && la.tss == lb.tss && la.n_fg == lb.n_fg, "step %d: loss %.9g vs %.9g, normaliser "
              "%.9g vs %.9g", i, la.total, lb.total, la.tss, lb.tss);
    }
    size_t N = a.m.n_state;
    float *x = xmalloc(4 * N * sizeof(float)), *y = x + N, *ex = y + N, *ey = ex + N;
    a.m.be->dev.download(a.m.be_ctx, x, a.m.state, N);
    b.m.be->dev.download(b.m.be_ctx, y, b.m.state, N);
    a.m.be->dev.download(a.m.be_ctx, ex, a.ema, N);
    b.m.be->dev.download(b.m.be_ctx, ey, b.ema, N);
    CHECK(!memcmp(x, y, N * sizeof(float)), "the weights after 3 steps differ");
    CHECK(!memcmp(ex, ey, N * sizeof(float)), "the EMA after 3 steps differs");
    free(x);
    int recorded = 0;
    for (int k = 0; k < MODEL_RECS; k++) recorded += b.m.recs[k].rec != NULL;
    trainer_free(&a);
    trainer_free(&b);
    return recorded;
}

static void test_one_process_forced_cpu(void) { forced_matches(-1); }

#ifdef USE_CUDA
// Host waits in each of 4 steps of the one-device path with the loader's bytes uploaded ahead (as
// training does), plain or forced through the several-process path: one each, the step's end, when the
// normaliser's sums stay on the device (NCCL); 3 when they go through the host (its read and write).
static void host_waits_per_step(int gpu, int forced, long waits[4]) {
    static Config cfg;
    Err err;
    memset(waits, 0, 4 * sizeof *waits);
    if (load_cfg(&cfg, 8, "device0", "local", NULL)) { CHECK(0, "config"); return; }
    Trainer t;
    if (trainer_init(&t, &cfg, 1, gpu, &err)) { CHECK(0, "%s", err.msg); return; }
    static uint8_t u8[8 * S * S * 3];
    static float tg[MAX_T * 6];
    for (size_t i = 0; i < sizeof u8; i++) u8[i] = (uint8_t)lrintf(images[i] * 255.0f);
    int nt = micro_targets(targets, n_targets, 0, 8, tg);
    t.input_u8 = u8;
    procs_force(forced);
    for (int i = 0; i < 4; i++) {
        LossOut lo;
        multi_prefetch(&t, u8, 8, S, S);
        long w0 = host_wait_count();
        CHECK(!trainer_step(&t, 8, S, tg, nt, 0, i, &lo, &err), "%s", err.msg);
        waits[i] = host_wait_count() - w0;
    }
    procs_force(0);
    trainer_free(&t);
}
#endif

#ifdef USE_CUDA
// Why the NCCL tests cannot run here (no GPU, or no NCCL), or NULL.
static const char *gpu_nccl_missing(void) {
    GpuInfo g[1];
    if (gpu_list(g, 1) < 1) return "no GPU";
    if (!nccl_available()) return "NCCL (libnccl.so.2) not found or not built in (make found no nccl.h)";
    return NULL;
}
#endif

static void test_nccl_communicator_of_one(void) {
#ifdef USE_CUDA
    const char *why = gpu_nccl_missing();
    if (why) SKIP("%s", why);
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    long c0 = nccl_calls();
    test_switch(SW_NCCL_OVERLAP, "0");             // the sums after the backward, in one call
    int rec_after = forced_matches(0);
    long c1 = nccl_calls();
    test_switch(SW_NCCL_OVERLAP, NULL);            // bucket by bucket beside it (the default), many buckets
    procs_set_bucket_floats(50000);
    int rec_beside = forced_matches(0);
    procs_set_bucket_floats(0);
    long c2 = nccl_calls();
    printf("    GPU 0 with a NCCL communicator of one, 3 steps bit for bit as one process: sums after the backward %ld "
           "NCCL calls, %d passes recorded; beside it %ld calls, %d passes recorded\n", c1 - c0, rec_after, c2 - c1,
           rec_beside);
    CHECK(c1 > c0 && c2 > c1, "NCCL was not used");
    const char *graphs = switch_str(SW_GRAPHS);
    int want = graphs && !strcmp(graphs, "0") ? 0 : 2;   // the forward and the backward, whose hook begins the sums
    CHECK(rec_after == want && rec_beside == want, "passes recorded: %d and %d, not %d", rec_after, rec_beside, want);
    long plain[4], forced[4];
    host_waits_per_step(0, 0, plain);
    host_waits_per_step(0, 1, forced);
    printf("    host waits per step: one process %ld %ld %ld %ld, through the several-process path (NCCL) %ld %ld %ld %ld\n",
           plain[0], plain[1], plain[2], plain[3], forced[0], forced[1], forced[2], forced[3]);
    for (int i = 0; i < 4; i++)
        CHECK(plain[i] == 1 && forced[i] == 1, "step %d: %ld and %ld host waits, not 1", i, plain[i], forced[i]);
#else
    SKIP("no CUDA in this build");
#endif
}

// The watchdog's limit (core/procs/comm.h): YT_NCCL_TIMEOUT's text to seconds, refused with the value named.
static void test_watchdog_limit(void) {
    double l = -1;
    Err err;
    CHECK(!comm_wait_limit(NULL, &l, &err) && l == 600, "unset: %g, not 600", l);
    CHECK(!comm_wait_limit("0", &l, &err) && l == 0, "0: %g", l);
    CHECK(!comm_wait_limit("2", &l, &err) && l == 2, "2: %g", l);
    CHECK(!comm_wait_limit("1.5", &l, &err) && l == 1.5, "1.5: %g", l);
    static const char *const bad[] = { "", "abc", "-1", "5s", "nan", "inf" };
    for (int i = 0; i < 6; i++) {
        err.msg[0] = 0;
        CHECK(comm_wait_limit(bad[i], &l, &err) == -1, "'%s' was taken", bad[i]);
        char want[64];
        snprintf(want, sizeof want, "YT_NCCL_TIMEOUT=%s:", bad[i]);
        CHECK(strstr(err.msg, want) != NULL, "'%s': %s", bad[i], err.msg);
    }
    CHECK(!comm_wait_expired(599.9, 600) && comm_wait_expired(600, 600) && comm_wait_expired(601, 600),
          "600 s: expired at the limit, not before");
    CHECK(!comm_wait_expired(1e9, 0), "0 waits forever");
}

#ifdef USE_CUDA
// `test_procs hang` (test_nccl_watchdog's child): GPU 0 through the several-process path with a NCCL
// communicator of one; 10 plain steps before the communicator (blocking host waits) and 10 after (the
// watchdog's polling ones) timed; then the device's queue stops (a spinning kernel) and a step waits
// behind it. The watchdog must end this process; returns 3 if that step ever returns.
static int hang_main(void) {
    static Config cfg;
    Err err;
    make_batch();
    if (load_cfg(&cfg, 8, "device0", "local", NULL)) { printf("hang: config\n"); return 2; }
    Trainer t;
    if (trainer_init(&t, &cfg, 1, 0, &err)) { printf("hang: %s\n", err.msg); return 2; }
    static float tg[MAX_T * 6];
    int nt = micro_targets(targets, n_targets, 0, 8, tg);
    LossOut lo;
    double ms[2];
    for (int k = 0; k < 2; k++) {
        if (k == 1) {                              // the communicator, with the step's sums through NCCL
            procs_force(1);
            if (trainer_step_batch(&t, images, NULL, 8, S, tg, nt, 0, 0, &lo, &err)) { printf("hang: %s\n", err.msg); return 2; }
            procs_force(0);
        }
        if (trainer_step_batch(&t, images, NULL, 8, S, tg, nt, 0, 1, &lo, &err)) { printf("hang: %s\n", err.msg); return 2; }
        double t0 = now_seconds();
        for (int i = 0; i < 10; i++)
            if (trainer_step_batch(&t, images, NULL, 8, S, tg, nt, 0, 2 + i, &lo, &err)) { printf("hang: %s\n", err.msg); return 2; }
        ms[k] = (now_seconds() - t0) * 100;
    }
    printf("hang: a step of batch 8 at %d px: %.3f ms with blocking host waits, %.3f ms with the watchdog's polling ones\n",
           S, ms[0], ms[1]);
    procs_force(1);
    t.m.be->dev.inject_fault(t.m.be_ctx, BACKEND_FAULT_HANG);
    printf("hang: queue stopped at %.6f\n", now_seconds());
    fflush(stdout);
    trainer_step_batch(&t, images, NULL, 8, S, tg, nt, 0, 20, &lo, &err);
    printf("hang: FAIL: the step behind the stopped queue returned\n");
    return 3;
}
#endif

// A GPU process whose queue stops behind its sums with YT_NCCL_TIMEOUT=2 ends within seconds, non-zero,
// naming rank 0 and its host (the NCCL watchdog), where it would wait forever without it. The child is
// killed after 60 s (a failure), so the test never hangs.
static void test_nccl_watchdog(void) {
#ifdef USE_CUDA
    const char *why = gpu_nccl_missing();
    if (why) SKIP("%s", why);
    char log[] = "/tmp/yt_watchdog_XXXXXX";
    int fd = mkstemp(log);
    if (fd < 0) { CHECK(0, "mkstemp"); return; }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        test_switch(SW_NCCL_TIMEOUT, "2");
        setenv("NCCL_NVLS_ENABLE", "0", 1);
        execl(self, self, "hang", (char *)NULL);
        _exit(127);
    }
    close(fd);
    int status = 0, done = 0;
    double t0 = now_seconds();
    while (!done && now_seconds() - t0 < 60) {
        if (waitpid(pid, &status, WNOHANG) == pid) done = 1;
        else usleep(50000);
    }
    double t_end = now_seconds();
    if (!done) { kill(pid, SIGKILL); waitpid(pid, &status, 0); }
    size_t n = 0;
    char *out = slurp(log, &n);
    unlink(log);
    if (!out) { CHECK(0, "the child's output %s: unreadable", log); return; }
    double t_hang = 0;
    for (char *line = out, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        if (strstr(line, "hang:") || strstr(line, "yolotrain:") || strstr(line, "YT_")) printf("    child: %s\n", line);
        const char *q = strstr(line, "queue stopped at ");
        if (q) t_hang = atof(q + 17);
        if (next) next[-1] = '\n';
    }
    char want[160];
    snprintf(want, sizeof want, "rank 0 of 1 on host %s: no progress in the GPU sums of GPU 0 for ", comm_host());
    printf("    the child ended %.1f s after its queue stopped (YT_NCCL_TIMEOUT=2): %s, status %d\n",
           t_hang ? t_end - t_hang : -1, done ? (WIFEXITED(status) ? "exited" : "killed by a signal") : "hung (killed after 60 s)",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    CHECK(done, "the child hung: no watchdog");
    CHECK(done && WIFEXITED(status) && WEXITSTATUS(status) != 0 && WEXITSTATUS(status) != 3 && WEXITSTATUS(status) != 2,
          "the child did not end through the watchdog (status %d)", status);
    CHECK(t_hang > 0 && t_end - t_hang < 10, "the child ended %.1f s after its queue stopped, not within 10 s",
          t_end - t_hang);
    CHECK(strstr(out, want) != NULL, "no line naming rank 0 and host %s", comm_host());
    free(out);
#else
    SKIP("no CUDA in this build");
#endif
}

int main(int argc, char **argv) {
    openblas_set_num_threads(1);
    if (argc >= 3 && !strcmp(argv[1], "rank")) return rank_main(argc, argv);
#ifdef USE_CUDA
    if (argc >= 2 && !strcmp(argv[1], "hang")) return hang_main();
#endif
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) self[n] = 0;
    if (comm_launched()) {                         // run under mpirun by hand: say how it is meant to run
        printf("test_procs: run it alone; it starts mpirun itself\n");
        return 0;
    }
    make_batch();
    RUN(test_one_process_forced_cpu);
    RUN(test_loader_share);
    RUN(test_nccl_communicator_of_one);
    RUN(test_watchdog_limit);
    RUN(test_nccl_watchdog);
    RUN(test_two_processes_one_device);
    RUN(test_two_processes_two_devices);
    RUN(test_three_processes);
    RUN(test_processes_without_images);
    RUN(test_disagreement_refused);
    RUN(test_sync_bn_processes);
    RUN(test_dead_rank_stops_all);
    RUN(test_validation_shared);
    RUN(test_validation_fault_everywhere);
    RUN(test_training_run);
    RUN(test_training_validation);
    return test_summary();
}
