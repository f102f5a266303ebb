// test_gpu_multi.c: the multi-device driver (core/devices/multi.h) on real CUDA with one GPU. The test hook
// YT_TEST_SAME_GPU=1 lets device= name GPU 0 two or three times: each device is its own Device (stream,
// cuBLAS and cuDNN handles, arenas) with its own worker thread, and the copies between them are
// device-to-device copies within the GPU. As test_multi does for CPU devices: the loss and gradients of
// a split step equal those of one device accumulating the same micro-batches (reduce=device0|sharded,
// loss_on=device0, split=even|auto|weighted, host-staged copies, 2 and 3 devices), whole steps leave one
// device's weights, EMA and momentum, split=auto measures on the GPU's timers, and a step waits on the
// host once; YOLO26 trains on them. A machine with two GPUs runs test_multi's test_equivalence_two_gpus as well.
// Legend: B batch, S image side, N floats of flat state.
#include "test/test.h"
#include "test/synth_batch.h"
#include "test/trainer_host.h"

#include "cfg/config.h"
#include "core/devices/multi.h"
#include "core/train/step.h"

#define CPU_TESTS(X) X(test_parse_same_gpu)
#define GPU_TESTS(X) X(test_equivalence_two_on_one_gpu) X(test_equivalence_three_on_one_gpu) \
                     X(test_equivalence_bf16) X(test_steps_device0) X(test_steps_sharded) X(test_split_auto) \
                     X(test_one_host_wait_per_step) X(test_yolo26_two_on_one_gpu) X(test_sync_bn_alone) X(test_sync_bn_on_one_gpu)

// device=0,0 is refused (a GPU named twice) unless the test hook is set to exactly 1.
static void test_parse_same_gpu(void) {
    DeviceList d;
    Err err;
    test_switch(SW_TEST_SAME_GPU, NULL);
    CHECK(parse_devices("0,0", 1, &d, &err) == -1 && strstr(err.msg, "twice"), "without the hook: %s", err.msg);
    test_switch(SW_TEST_SAME_GPU, "0");
    CHECK(parse_devices("0,0", 1, &d, &err) == -1, "YT_TEST_SAME_GPU=0 must not allow it");
    test_switch(SW_TEST_SAME_GPU, "1");
    CHECK(!parse_devices("0,0", 1, &d, &err) && d.n == 2 && d.gpu[0] == 0 && d.gpu[1] == 0, "0,0 with the hook");
    CHECK(!parse_devices("[0, 0, 0]", 1, &d, &err) && d.n == 3 && d.gpu[2] == 0, "[0, 0, 0] with the hook");
    CHECK(parse_devices("0,1", 1, &d, &err) == -1 && strstr(err.msg, "no GPU 1"), "an absent GPU: %s", err.msg);
    CHECK(!parse_devices("cpu:2", 0, &d, &err) && d.n == 2, "cpu:2 unchanged");
    test_switch(SW_TEST_SAME_GPU, NULL);
}

#define GPU_OWN_DEVICE
#include "test/gpu_harness.h"
#ifdef USE_CUDA
#include "gpu/device.h"

enum { S = 64, B = 8, MAX_T = B * SYNTH_MAX_OBJECTS };

static float images[B * S * S * 3], targets[MAX_T * 6];
static int n_targets;

typedef struct { const char *reduce, *loss_on; int host_copies; } Mode;
static const Mode LOCAL = { "device0", "local", 0 }, SHARDED = { "sharded", "local", 0 },
                  LOSS0 = { "device0", "device0", 0 }, BOTH = { "sharded", "device0", 0 },
                  STAGED = { "sharded", "device0", 1 };

// 1 when there is a GPU (and the batch is made), with the hook set for the tests' device lists.
static int gpu_here(void) {
    GpuInfo g;
    if (gpu_list(&g, 1) < 1) return 0;
    if (!n_targets) n_targets = synth_batch(B, S, images, targets);
    test_switch(SW_TEST_SAME_GPU, "1");
    return 1;
}
#define NEED_GPU() do { if (!gpu_here()) SKIP("no GPU"); } while (0)

static int load_cfg(Config *cfg, int batch, const char *split, Mode mode, const char *precision) {
    char b[32], s[64], r[64], l[64], p[64];
    snprintf(b, sizeof b, "batch=%d", batch);
    snprintf(s, sizeof s, "split=%s", split);
    snprintf(r, sizeof r, "reduce=%s", mode.reduce);
    snprintf(l, sizeof l, "loss_on=%s", mode.loss_on);
    snprintf(p, sizeof p, "precision=%s", precision);
    char *ov[] = { b, s, r, l, p, "imgsz=64", "epochs=1", "nc=6", "seed=3" };
    Err err;
    if (config_load("cfg/t.ini", 9, ov, cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    return 0;
}

static int init_devices(Trainer *t, const Config *cfg, const char *spec) {
    DeviceList devs;
    Err err;
    if (parse_devices(spec, 1, &devs, &err) || trainer_init_devices(t, cfg, 1, &devs, &err)) {
        CHECK(0, "device=%s: %s", spec, err.msg);
        return -1;
    }
    return 0;
}

// n floats of a trainer's memory (GPU or host) into host memory
static float *fetch(const Trainer *t, const float *p, size_t n) {
    float *h = xmalloc(n * sizeof(float));
    t->m.be->dev.bind(t->m.be_ctx);
    t->m.be->dev.download(t->m.be_ctx, h, p, n);
    return h;
}

// One step's gradients and loss on `spec` (the first n images, split as `split` says) against one
// device on GPU 0 taking the same micro-batches one after the other with the whole batch's
// normaliser. fp32 (TF32 off) is held to test_multi's tolerance: the two add the same terms in
// another order. `grad_tol` scales it for bf16 (its reason at the caller).
static void equivalence(const char *spec, int n, const char *split, Mode mode, const char *precision, double grad_tol) {
    static Config cfg;
    if (load_cfg(&cfg, n, split, mode, precision)) { CHECK(0, "config"); return; }
    Trainer t, r;
    if (init_devices(&t, &cfg, spec)) return;
    static float tg[MAX_T * 6];
    int nt = micro_targets(targets, n_targets, 0, n, tg);
    memcpy(t.input, images, (size_t)n * S * S * 3 * sizeof(float));
    // device-to-device copies within the GPU: the peer self-test must pass without enabling access to itself
    CHECK(!multi_host_copies(t.multi), "device=%s fell back to host-staged copies", spec);
    if (mode.host_copies) multi_use_host_copies(t.multi);
    multi_set_bucket_floats(t.multi, 50000);      // many buckets: each sent while backward goes on
    CHECK(!strcmp(mode.reduce, "sharded") || multi_bucket_count(t.multi) > 8, "%d gradient buckets",
          multi_bucket_count(t.multi));
    LossOut lo, ref;
    Err err;
    CHECK(multi_forward_backward(t.multi, n, S, tg, nt, &lo, &err) == 0, "%s", err.msg);
    multi_gather_state(t.multi);                  // sharded: the shards' sums into the master's grad
    int n_dev = multi_count(t.multi), sizes[MULTI_MAX];
    memcpy(sizes, multi_sizes(t.multi), sizeof sizes);
    float *mg = fetch(&t, t.m.grad, t.m.n_state);
    if (trainer_init(&r, &cfg, 1, 0, &err)) { CHECK(0, "%s", err.msg); free(mg); trainer_free(&t); return; }
    micro_reference(&r, S, images, targets, n_targets, sizes, n_dev, n, &ref);
    float *g = fetch(&r, r.m.grad, r.m.n_state);
    double rel_l2, worst = grad_worst(&t.m, mg, g, &rel_l2);
    printf("    device=%s %s %s/%s%s, batch %d, split %s (", spec, precision, mode.reduce, mode.loss_on,
           mode.host_copies ? "/staged" : "", n, split);
    for (int k = 0; k < n_dev; k++) printf("%d%s", sizes[k], k < n_dev - 1 ? "+" : "");
    printf("): loss %.7g vs %.7g; gradients: worst %.2f of tolerance, relative L2 %.2g\n", lo.total, ref.total, worst,
           rel_l2);
    CHECK(close_enough(lo.total, ref.total, 0, 1e-6 * grad_tol), "loss %.9g, one device %.9g", lo.total, ref.total);
    CHECK(close_enough(lo.box, ref.box, 1e-9, 1e-6 * grad_tol) && close_enough(lo.cls, ref.cls, 0, 1e-6 * grad_tol) &&
          close_enough(lo.dfl, ref.dfl, 1e-9, 1e-6 * grad_tol), "loss items differ");
    CHECK(worst <= grad_tol, "gradients differ from one device's (worst %.2f of 1e-6 max|ref| + 1e-4|ref|, allowed %g)",
          worst, grad_tol);
    free(g); free(mg);
    trainer_free(&r);
    trainer_free(&t);
}

static void test_equivalence_two_on_one_gpu(void) {
    NEED_GPU();
    equivalence("0,0", 8, "even", LOCAL, "fp32", 1);
    equivalence("0,0", 7, "even", LOCAL, "fp32", 1);
    equivalence("0,0", 8, "even", SHARDED, "fp32", 1);
    equivalence("0,0", 7, "even", LOSS0, "fp32", 1);
    equivalence("0,0", 8, "3,1", BOTH, "fp32", 1);
    equivalence("0,0", 8, "auto", LOCAL, "fp32", 1);   // before its measurement: the planned first split
    equivalence("0,0", 8, "even", STAGED, "fp32", 1);
}

static void test_equivalence_three_on_one_gpu(void) {
    NEED_GPU();
    equivalence("0,0,0", 8, "even", LOCAL, "fp32", 1);     // 3+3+2
    equivalence("0,0,0", 7, "even", SHARDED, "fp32", 1);   // 3+3+1, three shards
    equivalence("0,0,0", 8, "auto", SHARDED, "fp32", 1);
    equivalence("0,0,0", 8, "even", LOSS0, "fp32", 1);
}

// bf16, the GPU's default precision: both sides round the same operands to bf16 (the replicas hold the
// master's weights bit for bit), so only the order of the fp32 sums differs, as in fp32; but the bf16
// products magnify that rounding where a gradient is a small difference of large terms.
static void test_equivalence_bf16(void) {
    NEED_GPU();
    equivalence("0,0", 8, "even", LOCAL, "bf16", 10);
    equivalence("0,0,0", 7, "even", SHARDED, "bf16", 10);
}

// Whole steps (update and broadcast included): 3 steps on `spec` leave the master with the weights, EMA
// and momentum of one device that takes the same micro-batches and updates, and every replica with the
// master's weights, bit for bit.
static void steps_match(const char *spec, Mode mode) {
    static Config cfg;
    if (load_cfg(&cfg, B, "even", mode, "fp32")) { CHECK(0, "config"); return; }
    Trainer t, r, w0;
    Err err;
    if (init_devices(&t, &cfg, spec)) return;
    if (trainer_init(&r, &cfg, 1, 0, &err) || trainer_init(&w0, &cfg, 1, -1, &err)) {
        CHECK(0, "%s", err.msg);
        trainer_free(&t);
        return;
    }
    memcpy(t.input, images, sizeof images);
    int n_dev = multi_count(t.multi), sizes[MULTI_MAX];
    split_batch("even", B, n_dev, sizes, &err);
    const double loss_tol[3] = { 1e-5, 1e-5, 1e-4 };   // test_multi's: warmup's bias lr magnifies rounding
    for (int i = 0; i < 3; i++) {
        LossOut lo, ref;
        if (trainer_step(&t, B, S, targets, n_targets, 0, i, &lo, &err)) { CHECK(0, "%s", err.msg); break; }
        micro_reference(&r, S, images, targets, n_targets, sizes, n_dev, B, &ref);
        trainer_update(&r, 0, i);
        CHECK(close_enough(lo.total, ref.total, 0, loss_tol[i]), "step %d loss %.9g vs %.9g", i, lo.total, ref.total);
    }
    multi_gather_state(t.multi);
    size_t N = t.m.n_state, M = r.sgd.n_train;
    float *tw = fetch(&t, t.m.state, N), *rw = fetch(&r, r.m.state, N), *te = fetch(&t, t.ema, N),
          *re = fetch(&r, r.ema, N), *tm = fetch(&t, t.sgd.buf, M), *rm = fetch(&r, r.sgd.buf, M);
    // BN running statistics are left out (one device updates them per micro-batch, devices average theirs)
    double dw = rel_change(tw, rw, w0.m.state, t.m.buffers), de = rel_change(te, re, w0.m.state, t.m.buffers),
           dm = rel_change(tm, rm, NULL, M);
    printf("    device=%s %s/%s, 3 steps: |multi - one| / |change|: weights %.2g, EMA %.2g, momentum %.2g\n", spec,
           mode.reduce, mode.loss_on, dw, de, dm);
    CHECK(dw < 3e-3, "the weights differ from one device's by %.2g of their change", dw);
    CHECK(de < 3e-3, "the EMA differs from one device's by %.2g of its change", de);
    CHECK(dm < 3e-3, "the momentum differs from one device's by %.2g of its size", dm);
    CHECK(t.sgd.steps == 3 && r.sgd.steps == 3 && t.ema_updates == r.ema_updates, "SGD steps %lld and %lld (want 3), "
          "EMA updates %lld and %lld", (long long)t.sgd.steps, (long long)r.sgd.steps, (long long)t.ema_updates,
          (long long)r.ema_updates);
    for (int k = 1; k < n_dev; k++) {
        const Trainer *rep = multi_replica(t.multi, k);
        float *kw = fetch(rep, rep->m.state, N);
        CHECK(!memcmp(kw, tw, N * sizeof(float)), "device %d does not hold the master's state", k);
        free(kw);
    }
    t.m.be->dev.bind(t.m.be_ctx);
    free(tw); free(rw); free(te); free(re); free(tm); free(rm);
    trainer_free(&w0);
    trainer_free(&r);
    trainer_free(&t);
}

static void test_steps_device0(void) { NEED_GPU(); steps_match("0,0", LOCAL); steps_match("0,0", BOTH); }
static void test_steps_sharded(void) { NEED_GPU(); steps_match("0,0,0", SHARDED); }

// split=auto on real CUDA: after its warm-up and measurement (the GPU's event timers of each device's
// stream) the split is a valid one, every device's phases were timed, and the steps after it still run.
// Which split it picks is test_multi's test_split_by_speed: two devices sharing one GPU time alike.
static void test_split_auto(void) {
    NEED_GPU();
    static Config cfg;
    if (load_cfg(&cfg, B, "auto", LOCAL, "bf16")) { CHECK(0, "config"); return; }
    Trainer t;
    if (init_devices(&t, &cfg, "0,0")) return;
    memcpy(t.input, images, sizeof images);
    LossOut lo;
    Err err;
    for (int i = 0; i < 8; i++) CHECK(!trainer_step(&t, B, S, targets, n_targets, 0, i, &lo, &err), "%s", err.msg);
    const int *sz = multi_sizes(t.multi);
    printf("    split after the measurement: %d+%d, loss %.4g\n", sz[0], sz[1], lo.total);
    CHECK(sz[0] + sz[1] == B && sz[0] >= 1 && sz[1] >= 0, "split=auto gave %d+%d", sz[0], sz[1]);
    CHECK(isfinite(lo.total) && lo.total > 0, "loss %g", lo.total);
    for (int k = 0; k < 2; k++) {
        const MultiDevStats *s = multi_stats(t.multi, k);
        CHECK(s->steps == 8 && s->forward > 0 && s->backward > 0 && s->mem_bytes > 0, "device %d: %d steps, forward "
              "%g s, backward %g s, memory %g", k, s->steps, s->forward, s->backward, s->mem_bytes);
    }
    CHECK(multi_stats(t.multi, 0)->gather > 0 && multi_stats(t.multi, 0)->update > 0, "device 0 gathers and updates");
    trainer_free(&t);
}

// Steps of `spec` fed the loader's bytes, uploaded ahead as training does: one host wait per step.
static void host_waits(const char *spec, Mode mode) {
    static Config cfg;
    if (load_cfg(&cfg, B, "even", mode, "bf16")) { CHECK(0, "config"); return; }
    Trainer t;
    if (init_devices(&t, &cfg, spec)) return;
    static uint8_t u8[B * S * S * 3];
    for (size_t i = 0; i < sizeof u8; i++) u8[i] = (uint8_t)lrintf(images[i] * 255.0f);
    t.input_u8 = u8;
    LossOut lo;
    Err err;
    long waits[4];
    for (int i = 0; i < 4; i++) {
        multi_prefetch(&t, u8, B, S, S);
        long w0 = host_wait_count();
        CHECK(!trainer_step(&t, B, S, targets, n_targets, 0, i, &lo, &err), "%s", err.msg);
        waits[i] = host_wait_count() - w0;
    }
    printf("    device=%s %s/%s: host waits per step %ld %ld %ld %ld (loss %.4g)\n", spec, mode.reduce, mode.loss_on,
           waits[0], waits[1], waits[2], waits[3], lo.total);
    for (int i = 0; i < 4; i++) CHECK(waits[i] == 1, "step %d waited %ld times on the host", i, waits[i]);
    CHECK(isfinite(lo.total) && lo.total > 0, "loss %g", lo.total);
    trainer_free(&t);
}

static void test_one_host_wait_per_step(void) {
    NEED_GPU();
    host_waits("0,0", LOCAL);
    host_waits("0,0,0", SHARDED);
    host_waits("0,0", LOSS0);
}

// YOLO26 (reduce=device0, loss_on=local: its one mode) on two devices of one GPU: its loss, with both
// branches' normalisers summed over the devices, trains, and the replica ends each step with the master's
// weights bit for bit.
static void test_yolo26_two_on_one_gpu(void) {
    NEED_GPU();
    static Config cfg;
    char *ov[] = { "imgsz=64", "batch=8", "epochs=3", "nc=6", "seed=3" };
    Err err;
    if (config_load("cfg/yolo26n.ini", 5, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    Trainer t;
    if (init_devices(&t, &cfg, "0,0")) return;
    memcpy(t.input, images, sizeof images);
    size_t N = t.m.n_state;
    for (int i = 0; i < 2; i++) {
        LossOut lo;
        CHECK(!trainer_step(&t, B, S, targets, n_targets, 0, i, &lo, &err), "%s", err.msg);
        const Trainer *rep = multi_replica(t.multi, 1);
        float *mw = fetch(&t, t.m.state, N), *rw = fetch(rep, rep->m.state, N);
        printf("    YOLO26 device=0,0 step %d: loss %.5g (o2o normaliser %.4g)\n", i, lo.total, lo.tss);
        CHECK(isfinite(lo.total) && lo.total > 0 && lo.tss > 0, "step %d: loss %g, normaliser %g", i, lo.total, lo.tss);
        CHECK(!memcmp(mw, rw, N * sizeof(float)), "step %d: the replica does not hold the master's weights", i);
        free(mw); free(rw);
    }
    t.m.be->dev.bind(t.m.be_ctx);
    trainer_free(&t);
}

// sync_bn=1 on devices of one GPU (config `cfg` under `precision`) against one GPU device running the whole batch
// of n at once: test_multi's bounds (loss within 1e-3 relative, gradients within 1e-2 relative L2; without the
// sync they differ by about 1); the replica's BN running statistics are the master's. Returns the relative L2.
static double sync_bn_gpu(const char *cfg_path, const char *spec, int n, const char *precision, int sync) {
    static Config cfg;
    char b[32], p[64], y[32];
    snprintf(b, sizeof b, "batch=%d", n);
    snprintf(p, sizeof p, "precision=%s", precision);
    snprintf(y, sizeof y, "sync_bn=%d", sync);
    char *ov[] = { b, p, y, "imgsz=64", "epochs=1", "nc=6", "seed=3" };
    Err err;
    if (config_load(cfg_path, 7, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return 1e9; }
    Trainer t, r;
    if (init_devices(&t, &cfg, spec)) return 1e9;
    static float tg[MAX_T * 6];
    int nt = micro_targets(targets, n_targets, 0, n, tg);
    memcpy(t.input, images, (size_t)n * S * S * 3 * sizeof(float));
    LossOut lo, ref;
    CHECK(multi_forward_backward(t.multi, n, S, tg, nt, &lo, &err) == 0, "%s", err.msg);
    multi_gather_state(t.multi);
    size_t N = t.m.n_state, b0 = t.m.buffers, nb = t.m.n_buffers;
    float *mg = fetch(&t, t.m.grad, N), *ms = fetch(&t, t.m.state, N);
    const Trainer *rep = multi_replica(t.multi, 1);
    float *rs1 = fetch(rep, rep->m.state, N);
    CHECK(!sync || !memcmp(ms + b0, rs1 + b0, nb * sizeof(float)), "%s: the replica's BN running statistics are not "
          "the master's", spec);
    t.m.be->dev.bind(t.m.be_ctx);
    trainer_free(&t);
    if (trainer_init(&r, &cfg, 1, 0, &err)) { CHECK(0, "%s", err.msg); free(mg); free(ms); free(rs1); return 1e9; }
    whole_batch_step(&r, S, images, targets, n_targets, n, &ref);
    float *g = fetch(&r, r.m.grad, N);
    double rel_l2;
    grad_worst(&r.m, mg, g, &rel_l2);
    printf("    %s device=%s %s sync_bn=%d, batch %d: loss %.7g vs %.7g (one device, whole batch); gradients relative "
           "L2 %.2g\n", cfg_path, spec, precision, sync, n, lo.total, ref.total, rel_l2);
    if (sync && !strcmp(precision, "fp32")) {     // bf16: see test_sync_bn_alone (a finite loss only)
        CHECK(close_enough(lo.total, ref.total, 0, 1e-3), "loss %.9g, one device %.9g", lo.total, ref.total);
        CHECK(rel_l2 < 1e-2, "gradients: relative L2 %.2g from the whole batch's on one device", rel_l2);
    }
    CHECK(isfinite(lo.total) && isfinite(rel_l2), "loss %g, gradients %g", lo.total, rel_l2);
    free(g); free(mg); free(ms); free(rs1);
    trainer_free(&r);
    return rel_l2;
}

// One device, the whole batch: the synced BN path with a sum that adds nothing (bn_sync set on the model: the
// composed unit forms, bn_forward_train_sync and bn_backward_sync) against the model's own path; `phases`: 1
// forward only synced, 2 backward only, 3 both. Returns the gradients' relative L2 distance.
static void sum_alone(void *arg, double *v, int n) { (void)arg; (void)v; (void)n; }
static double synced_alone(const char *cfg_path, const char *precision, int phases) {
    static Config cfg;
    char p[64];
    snprintf(p, sizeof p, "precision=%s", precision);
    char *ov[] = { "batch=8", p, "imgsz=64", "epochs=1", "nc=6", "seed=3" };
    Err err;
    if (config_load(cfg_path, 6, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return 1e9; }
    static const BnSync alone = { sum_alone, NULL };
    float *g[2];
    LossOut lo[2];
    size_t N = 0;
    for (int k = 0; k < 2; k++) {
        Trainer r;
        if (trainer_init(&r, &cfg, 1, 0, &err)) { CHECK(0, "%s", err.msg); return 1e9; }
        double tss;
        r.m.bn_sync = k && (phases & 1) ? &alone : NULL;
        micro_forward(&r, S, images, targets, n_targets, 0, B, &tss, &err);
        r.m.bn_sync = k && (phases & 2) ? &alone : NULL;
        trainer_compute_backward(&r, B, tss > 1 ? tss : 1, B, &lo[k]);
        r.m.bn_sync = NULL;
        N = r.m.n_state;
        g[k] = fetch(&r, r.m.grad, N);
        if (k) {
            double rel_l2;
            grad_worst(&r.m, g[1], g[0], &rel_l2);
            printf("    %s %s one device, synced %s alone: loss %.7g vs %.7g; gradients relative L2 %.2g\n", cfg_path,
                   precision, phases == 3 ? "forward and backward" : phases == 1 ? "forward" : "backward", lo[1].total,
                   lo[0].total, rel_l2);
            trainer_free(&r);
            free(g[0]); free(g[1]);
            return rel_l2;
        }
        trainer_free(&r);
    }
    return 1e9;
}

// One device's own step on the whole batch under `precision`: its gradients (free them) and loss
static float *own_step(const char *cfg_path, const char *precision, double *loss, size_t *N) {
    static Config cfg;
    char p[64];
    snprintf(p, sizeof p, "precision=%s", precision);
    char *ov[] = { "batch=8", p, "imgsz=64", "epochs=1", "nc=6", "seed=3" };
    Err err;
    Trainer r;
    if (config_load(cfg_path, 6, ov, &cfg, &err) || trainer_init(&r, &cfg, 1, 0, &err)) { CHECK(0, "%s", err.msg); return NULL; }
    LossOut lo;
    whole_batch_step(&r, S, images, targets, n_targets, B, &lo);
    *loss = lo.total;
    *N = r.m.n_state;
    float *g = fetch(&r, r.m.grad, r.m.n_state);
    trainer_free(&r);
    return g;
}

// The synced path on one device is the device's own path within the order of its sums, in fp32 and bf16
static void test_sync_bn_alone(void) {
    NEED_GPU();
    {   // how far bf16 alone moves this step from fp32's (gelan-t at 64 px at init: the assignment's near ties)
        double l32, l16;
        size_t N;
        float *g32 = own_step("cfg/t.ini", "fp32", &l32, &N), *g16 = own_step("cfg/t.ini", "bf16", &l16, &N);
        if (g32 && g16) {
            double se = 0, sr = 0;
            for (size_t i = 0; i < N; i++) se += ((double)g16[i] - g32[i]) * ((double)g16[i] - g32[i]), sr += (double)g32[i] * g32[i];
            printf("    cfg/t.ini one device, the whole batch: bf16 against fp32: loss %.7g vs %.7g; gradients relative L2 "
                   "%.2g (state and gradients, buffers included)\n", l16, l32, sqrt(se / (sr > 0 ? sr : 1)));
        }
        free(g32); free(g16);
    }
    // fp32 is held to 1e-2 (measured on an H100: 5.8e-4 forward, 1.7e-6 backward). In bf16 this step is chaotic
    // (the assignment's near ties at init: bf16 alone moves it 1.1 from fp32, printed above), so the bf16 runs show
    // that bf16 maps go through the synced path to a finite loss; their kernels are held to the CPU twins by
    // test_backend_ops.
    for (int ph = 1; ph <= 3; ph++) {
        double d = synced_alone("cfg/t.ini", "fp32", ph);
        CHECK(d < 1e-2, "fp32, synced phases %d: gradients relative L2 %.2g from the device's own path", ph, d);
    }
    double d = synced_alone("cfg/t.ini", "bf16", 3), d26 = synced_alone("cfg/yolo26n.ini", "bf16", 3);
    CHECK(isfinite(d) && isfinite(d26), "bf16: gradients %g, YOLO26 %g", d, d26);
}

static void test_sync_bn_on_one_gpu(void) {
    NEED_GPU();
    sync_bn_gpu("cfg/t.ini", "0,0", 8, "fp32", 1);
    sync_bn_gpu("cfg/t.ini", "0,0,0", 7, "fp32", 1);
    sync_bn_gpu("cfg/t.ini", "0,0", 8, "bf16", 1);    // bf16 maps through the synced BN (printed, finite)
    sync_bn_gpu("cfg/yolo26n.ini", "0,0", 8, "bf16", 1);   // depthwise units' BN too
    sync_bn_gpu("cfg/yolo26n.ini", "0,0", 8, "fp32", 1);
    double off = sync_bn_gpu("cfg/t.ini", "0,0", 8, "fp32", 0);
    CHECK(off > 0.1, "without sync_bn two devices match the whole batch (relative L2 %.2g): the test cannot tell", off);
}

#define RUN_ONE(fn) RUN(fn);
int main(void) {
    CPU_TESTS(RUN_ONE)
    GPU_TESTS(RUN_ONE)
    return test_summary();
}
#endif
