// test_multi.c: several devices in one process. Device lists and batch splits as users write them;
// N CPU devices give the loss and gradients of one device accumulating the same micro-batches with
// the whole batch's normaliser (DESIGN.md section 2), for even, odd and weighted splits; a few
// multi-device training steps run.
#include "test/test.h"

#include "cfg/config.h"
#include "core/multi.h"
#include "io/image.h"
#include "io/synth.h"
#ifdef USE_CUDA
#include "gpu/device.h"
#endif

static void test_parse_devices(void) {
    DeviceList d;
    Err err;
    CHECK(!parse_devices("cpu", 0, &d, &err) && d.n == 1 && d.gpu[0] == -1, "cpu");
    CHECK(!parse_devices("cpu:3", 0, &d, &err) && d.n == 3 && d.gpu[2] == -1, "cpu:3");
    CHECK(!parse_devices("", 0, &d, &err) && d.n == 1 && d.gpu[0] == -1, "empty without GPUs: the CPU");
    CHECK(!parse_devices("", 2, &d, &err) && d.n == 2 && d.gpu[1] == 1, "empty with 2 GPUs: both");
    CHECK(!parse_devices("0,1", 2, &d, &err) && d.n == 2 && d.gpu[0] == 0 && d.gpu[1] == 1, "0,1");
    CHECK(!parse_devices("[1, 0]", 2, &d, &err) && d.n == 2 && d.gpu[0] == 1 && d.gpu[1] == 0, "[1, 0]");
    CHECK(!parse_devices("(1)", 2, &d, &err) && d.n == 1 && d.gpu[0] == 1, "(1)");
    CHECK(parse_devices("0 1", 2, &d, &err) == -1, "'0 1' must be an error, not GPU 1");
    CHECK(parse_devices("1,1", 2, &d, &err) == -1 && strstr(err.msg, "twice"), "repeated: %s", err.msg);
    CHECK(parse_devices("2", 2, &d, &err) == -1 && strstr(err.msg, "no GPU 2"), "absent: %s", err.msg);
    CHECK(parse_devices("gpu", 2, &d, &err) == -1, "a word");
    CHECK(parse_devices("cpu:0", 0, &d, &err) == -1, "cpu:0");
}

static void test_split_batch(void) {
    int s[4];
    Err err;
    CHECK(!split_batch("even", 8, 2, s, &err) && s[0] == 4 && s[1] == 4, "8 on 2");
    CHECK(!split_batch("even", 127, 2, s, &err) && s[0] == 64 && s[1] == 63, "127 on 2: %d %d", s[0], s[1]);
    CHECK(!split_batch("even", 3, 4, s, &err) && s[0] == 1 && s[2] == 1 && s[3] == 0, "3 on 4 (torch.chunk)");
    CHECK(!split_batch("even", 10, 4, s, &err) && s[0] == 3 && s[2] == 3 && s[3] == 1, "10 on 4: 3 3 3 1");
    CHECK(!split_batch("3,1", 8, 2, s, &err) && s[0] == 6 && s[1] == 2, "3,1 of 8: %d %d", s[0], s[1]);
    CHECK(!split_batch("1,1,1", 7, 3, s, &err) && s[0] + s[1] + s[2] == 7 && s[0] == 3, "1,1,1 of 7");
    CHECK(split_batch("0,1", 8, 2, s, &err) == -1, "device 0 with no image");
    CHECK(split_batch("1,x", 8, 2, s, &err) == -1, "a bad weight");
    CHECK(split_batch("1", 8, 2, s, &err) == -1, "too few weights");
}

enum { S = 64, B = 8, MAX_T = B * SYNTH_MAX_OBJECTS };

static float images[B * S * S * 3], targets[MAX_T * 6];
static int n_targets;

static void make_batch(void) {
    SynthConfig sc = synth_defaults();
    sc.min_side = sc.max_side = S;
    n_targets = 0;
    for (int n = 0; n < B; n++) {
        Image im;
        SynthObject obj[SYNTH_MAX_OBJECTS];
        int k = synth_render(&sc, 0, n, &im, obj);
        for (size_t i = 0; i < (size_t)S * S * 3; i++) images[(size_t)n * S * S * 3 + i] = im.px[i] / 255.0f;
        for (int j = 0; j < k; j++) {
            float *r = targets + 6 * n_targets++;
            r[0] = n; r[1] = obj[j].cls;
            r[2] = (obj[j].x1 + obj[j].x2) / 2.0f / S; r[3] = (obj[j].y1 + obj[j].y2) / 2.0f / S;
            r[4] = (float)(obj[j].x2 - obj[j].x1) / S; r[5] = (float)(obj[j].y2 - obj[j].y1) / S;
        }
        image_free(&im);
    }
}

static int load_cfg(Config *cfg, int batch, const char *split) {
    char b[32], s[64];
    snprintf(b, sizeof b, "batch=%d", batch);
    snprintf(s, sizeof s, "split=%s", split);
    char *ov[] = { b, s, "imgsz=64", "epochs=1", "nc=6", "seed=3", "precision=fp32" };
    Err err;
    if (config_load("cfg/t.ini", 7, ov, cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    return 0;
}

// One device, the micro-batches one after the other with the whole batch's normaliser: the
// gradients accumulate in t's, the loss items add up in total.
static void reference_step(Trainer *tp, const int *sizes, int nd, int n, LossOut *total) {
    Trainer *t = tp;
    Err err;
    static float tg[MAX_T * 6];
    double tss = 0;
    for (int pass = 0; pass < 2; pass++) {      // pass 0: the normaliser; pass 1: loss and backward
        memset(total, 0, sizeof *total);
        for (int k = 0, first = 0; k < nd; first += sizes[k++]) {
            if (!sizes[k]) continue;
            int nt = 0;
            for (int r = 0; r < n_targets; r++) {
                int img = (int)targets[6 * r];
                if (img < first || img >= first + sizes[k] || img >= n) continue;
                memcpy(tg + 6 * nt, targets + 6 * r, 6 * sizeof(float));
                tg[6 * nt++] -= first;
            }
            double s;
            trainer_forward_assign(t, sizes[k], S, images + (size_t)first * S * S * 3, NULL, tg, nt, &s, &err);
            if (pass == 0) { tss += s; continue; }
            LossOut o;
            trainer_compute_backward(t, sizes[k], tss > 1 ? tss : 1, n, &o);
            total->box += o.box; total->cls += o.cls; total->dfl += o.dfl; total->total += o.total;
        }
    }
}

static void reference(const Config *cfg, int gpu, const int *sizes, int nd, int n, float *grad, LossOut *total) {
    Trainer t;
    Err err;
    if (trainer_init(&t, cfg, 1, gpu, &err)) { CHECK(0, "%s", err.msg); return; }
    reference_step(&t, sizes, nd, n, total);
    t.m.be->download(t.m.be_ctx, grad, t.m.grad, t.m.n_state);
    trainer_free(&t);
}

// spec: "cpu:N" or GPU ids; the reference runs on the first device of the list
static void equivalence_on(const char *spec, int n_gpus, int n, const char *split) {
    static Config cfg;
    if (load_cfg(&cfg, n, split)) { CHECK(0, "config"); return; }
    DeviceList devs;
    Err err;
    CHECK(!parse_devices(spec, n_gpus, &devs, &err), "%s", err.msg);
    int n_dev = devs.n;
    Trainer t;
    if (trainer_init_devices(&t, &cfg, 1, &devs, &err)) { CHECK(0, "%s", err.msg); return; }
    int nt = 0;
    static float tg[MAX_T * 6];
    for (int r = 0; r < n_targets; r++)
        if (targets[6 * r] < n) memcpy(tg + 6 * nt++, targets + 6 * r, 6 * sizeof(float));
    memcpy(t.input, images, (size_t)n * S * S * 3 * sizeof(float));
    LossOut lo, ref;
    CHECK(multi_forward_backward(t.multi, n, S, tg, nt, &lo, &err) == 0, "%s", err.msg);
    const int *sizes = multi_sizes(t.multi);
    float *g = xmalloc(t.m.n_state * sizeof(float)), *mg = xmalloc(t.m.n_state * sizeof(float));
    t.m.be->download(t.m.be_ctx, mg, t.m.grad, t.m.n_state);
    reference(&cfg, devs.gpu[0], sizes, n_dev, n, g, &ref);
    double worst = 0, se = 0, sr = 0;
    for (size_t i = 0; i < t.m.buffers; i++) {
        double e = fabs((double)mg[i] - g[i]);
        worst = fmax(worst, e / (1e-6 + 1e-4 * fabs(g[i])));
        se += e * e; sr += (double)g[i] * g[i];
    }
    printf("    %s, batch %d, split %s (", spec, n, split);
    for (int k = 0; k < n_dev; k++) printf("%d%s", sizes[k], k < n_dev - 1 ? "+" : "");
    printf("): loss %.7g vs %.7g; gradients: worst %.2f of tolerance, relative L2 %.2g\n", lo.total, ref.total,
           worst, sqrt(se / sr));
    CHECK(close_enough(lo.total, ref.total, 0, 1e-6), "loss %.9g, one device %.9g", lo.total, ref.total);
    CHECK(close_enough(lo.box, ref.box, 1e-9, 1e-6) && close_enough(lo.cls, ref.cls, 0, 1e-6) &&
          close_enough(lo.dfl, ref.dfl, 1e-9, 1e-6), "loss items differ");
    CHECK(worst <= 1, "gradients differ from one device's (worst %.2f of 1e-6 + 1e-4|ref|)", worst);
    free(g); free(mg);
    trainer_free(&t);
}

static void equivalence(int n_dev, int n, const char *split) {
    char spec[16];
    snprintf(spec, sizeof spec, "cpu:%d", n_dev);
    equivalence_on(spec, 0, n, split);
}

// The same on two GPUs (peer-to-peer copies), when the machine has them.
static void test_equivalence_two_gpus(void) {
#ifdef USE_CUDA
    GpuInfo g[2];
    int n = gpu_list(g, 2);
    if (n < 2) SKIP("fewer than 2 GPUs");
    equivalence_on("0,1", n, 8, "even");
    equivalence_on("0,1", n, 7, "even");
#else
    SKIP("no CUDA in this build");
#endif
}

static void test_equivalence_even(void) { make_batch(); equivalence(2, 8, "even"); }
static void test_equivalence_odd(void) { equivalence(2, 7, "even"); equivalence(3, 8, "even"); }
static void test_equivalence_weighted(void) { equivalence(2, 8, "3,1"); }

static void init_weights_only(const Config *cfg, Trainer *t) {
    Err err;
    if (trainer_init(t, cfg, 1, -1, &err)) { CHECK(0, "%s", err.msg); }
}

// Whole steps (update and broadcast included): 3 steps on 2 CPU devices leave the master with the
// weights of one device that accumulates the same micro-batches and takes the same updates, and
// every replica with the master's weights.
static void test_steps_match_one_device(void) {
    static Config cfg;
    if (load_cfg(&cfg, 8, "even")) { CHECK(0, "config"); return; }
    DeviceList devs;
    Err err;
    parse_devices("cpu:2", 0, &devs, &err);
    Trainer t, r;
    if (trainer_init_devices(&t, &cfg, 1, &devs, &err) || trainer_init(&r, &cfg, 1, -1, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    memcpy(t.input, images, sizeof images);
    int sizes[2] = { 4, 4 };
    for (int i = 0; i < 3; i++) {
        LossOut lo, ref;
        if (trainer_step(&t, B, S, targets, n_targets, 0, i, &lo, &err)) { CHECK(0, "%s", err.msg); break; }
        reference_step(&r, sizes, 2, B, &ref);
        trainer_update(&r, 0, i);
        printf("    step %d: loss %.7g (2 devices) vs %.7g (one device)\n", i, lo.total, ref.total);
        CHECK(close_enough(lo.total, ref.total, 0, 1e-5), "step %d loss", i);
    }
    // The two sum the same gradients in another order (per device, then across devices), and the
    // warmup's bias lr of 0.1 magnifies rounding: compare the change the steps made to the weights.
    Trainer w0;
    init_weights_only(&cfg, &w0);
    double se = 0, sd = 0;
    for (size_t i = 0; i < t.m.buffers; i++) {
        double e = (double)t.m.state[i] - r.m.state[i], d = (double)r.m.state[i] - w0.m.state[i];
        se += e * e; sd += d * d;
    }
    printf("    weights after 3 steps: |multi - one| / |update| = %.2g\n", sqrt(se / sd));
    CHECK(sqrt(se / sd) < 1e-3, "the updates differ from one device's by %.2g of their size", sqrt(se / sd));
    trainer_free(&w0);
    const Trainer *rep = multi_replica(t.multi, 1);
    CHECK(!memcmp(rep->m.state, t.m.state, t.m.n_state * sizeof(float)), "the replica does not hold the master's state");
    trainer_free(&t);
    trainer_free(&r);
}

int main(void) {
    RUN(test_parse_devices);
    RUN(test_split_batch);
    RUN(test_equivalence_even);
    RUN(test_equivalence_odd);
    RUN(test_equivalence_weighted);
    RUN(test_steps_match_one_device);
    RUN(test_equivalence_two_gpus);
    return test_summary();
}
