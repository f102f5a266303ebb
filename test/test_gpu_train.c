// test_gpu_train.c: training on the GPU. The first steps match the CPU's losses; bf16 and tf32
// training track the fp32 loss curve over a few hundred steps; the step loop allocates nothing; CUDA
// Graphs give the direct steps' bits, for one shape and for rect / multi_scale's changing shapes.
#include "test/test.h"
#include "test/synth_batch.h"
#include "test/trainer_host.h"

#include "cfg/config.h"
#include "core/train/step.h"
#include "core/train/train.h"
#include "io/image.h"
#include "io/synth.h"
#ifdef USE_CUDA
#include "gpu/device.h"
#include "gpu/model_gpu.h"
#endif

enum { N = 8, S = 256, STEPS = 240, MAX_T = N * SYNTH_MAX_OBJECTS };

#ifdef USE_CUDA
typedef struct { float images[N * S * S * 3]; float targets[MAX_T * 6]; int nt; } Batch8;

// Eight synthetic images rendered at S x S and their target rows.
static void make_batch(Batch8 *b) { b->nt = synth_batch(N, S, b->images, b->targets); }

// Train `steps` steps on the batch on `gpu` (-1: CPU) at `precision`; losses[i] = total of step i.
static int run(const Batch8 *b, int gpu, const char *precision, int steps, double *losses, size_t *allocs) {
    static Config cfg;
    Err err;
    char prec[32];
    snprintf(prec, sizeof prec, "precision=%s", precision);
    char *ov[] = { "batch=8", "imgsz=256", "epochs=1", "nc=6", "seed=0", prec };
    if (config_load("cfg/t.ini", 6, ov, &cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    Trainer t;
    if (trainer_init(&t, &cfg, 1, gpu, &err)) { printf("    %s\n", err.msg); return -1; }
    t.sched.batch_total = 64; t.sched.accumulate = 1; t.sched.nw = 30;   // a step per batch (test_learn)
    memcpy(t.input, b->images, sizeof b->images);
    LossOut lo;
    size_t a0 = 0;
    for (int i = 0; i < steps; i++) {
        if (i == 3) a0 = gpu_alloc_count();
        if (trainer_step(&t, N, S, b->targets, b->nt, 0, i, &lo, &err)) { printf("    %s\n", err.msg); break; }
        losses[i] = lo.total;
    }
    if (allocs) *allocs = gpu_alloc_count() - a0;
    trainer_free(&t);
    return 0;
}

static int have_gpu(void) { GpuInfo g[1]; return gpu_list(g, 1) > 0; }

// A bf16 trainer on GPU 0 for the graph tests, with CUDA Graphs on or off (YT_GRAPHS=0, until
// graph_trainer_end) and the short schedule of these tests; 0, or -1 with the reason printed.
static int graph_trainer(Trainer *t, int graphs, int multi_scale) {
    static Config cfg;
    Err err;
    char *ov[] = { "batch=8", "imgsz=256", "epochs=1", "nc=6", "seed=0", "precision=bf16", "multi_scale=1" };
    if (config_load("cfg/t.ini", multi_scale ? 7 : 6, ov, &cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    if (graphs) test_switch(SW_GRAPHS, NULL);
    else test_switch(SW_GRAPHS, "0");
    if (trainer_init(t, &cfg, 1, 0, &err)) { printf("    %s\n", err.msg); test_switch(SW_GRAPHS, NULL); return -1; }
    t->sched.batch_total = 64; t->sched.accumulate = 1; t->sched.nw = 30;
    return 0;
}

// The passes t recorded, its final weights (*n floats into *state, malloc'd); frees t.
static void graph_trainer_end(Trainer *t, float **state, size_t *n, int *recorded) {
    *recorded = 0;
    for (int i = 0; i < MODEL_RECS; i++) *recorded += t->m.recs[i].rec != NULL;
    *n = t->m.n_state;
    *state = malloc(t->m.n_state * sizeof(float));
    model_gpu_download_state(&t->m, *state);
    trainer_free(t);
    test_switch(SW_GRAPHS, NULL);
}

// `steps` bf16 steps on GPU 0 with CUDA Graphs on or off (YT_GRAPHS=0): losses, the final weights
// (*n floats into *state, malloc'd) and how many passes were recorded.
static int run_graphs(const Batch8 *b, int graphs, int steps, double *losses, float **state, size_t *n,
                      int *recorded) {
    Trainer t;
    if (graph_trainer(&t, graphs, 0)) return -1;
    memcpy(t.input, b->images, sizeof b->images);
    LossOut lo;
    Err err;
    int rc = 0;
    for (int i = 0; i < steps && !rc; i++) {
        if ((rc = trainer_step(&t, N, S, b->targets, b->nt, 0, i, &lo, &err))) printf("    %s\n", err.msg);
        losses[i] = lo.total;
    }
    graph_trainer_end(&t, state, n, recorded);
    return rc;
}

// The step shapes of rect and multi_scale batches, (H, W) of the bytes -> (h, w) of the model: square,
// square enlarged to multi_scale's largest (the memory plan's size), rect, rect shrunk, rect stretched.
// Five shapes: ten (pass, shape) pairs for eight recording slots, so the last shape always runs directly.
static const StepShape SHAPES[] = { { S, S, S, S }, { S, S, 384, 384 }, { 192, S, 192, S }, { 192, S, 128, 160 },
                                    { S, 160, 320, 224 } };
enum { N_SHAPES = sizeof SHAPES / sizeof SHAPES[0] };

// `steps` bf16 steps on GPU 0 under multi_scale (plan for 384 at imgsz 256), cycling through SHAPES with
// uint8 images (the top-left H x W of each batch image): losses, final weights (malloc'd), passes
// recorded, and the device allocations after the first step.
static int run_shapes(const Batch8 *b, int graphs, int steps, double *losses, float **state, size_t *n,
                      int *recorded, size_t *allocs) {
    static uint8_t u8[N * S * S * 3];
    Trainer t;
    if (graph_trainer(&t, graphs, 1)) return -1;
    LossOut lo;
    Err err;
    int rc = 0;
    size_t a0 = 0;
    for (int i = 0; i < steps && !rc; i++) {
        StepShape s = SHAPES[i % N_SHAPES];
        for (int k = 0; k < N; k++)
            for (int y = 0; y < s.H; y++)
                for (int x = 0; x < s.W * 3; x++)
                    u8[((size_t)(k * s.H + y) * s.W) * 3 + x] =
                        (uint8_t)(b->images[((size_t)(k * S + y) * S) * 3 + x] * 255.0f + 0.5f);
        if (i == 1) a0 = gpu_alloc_count();
        t.input_u8 = u8;
        t.shape = s;
        if ((rc = trainer_step(&t, N, S, b->targets, b->nt, 0, i, &lo, &err))) printf("    %s\n", err.msg);
        losses[i] = lo.total;
    }
    *allocs = gpu_alloc_count() - a0;
    graph_trainer_end(&t, state, n, recorded);
    return rc;
}

static double mean(const double *x, int a, int b) {
    double s = 0;
    for (int i = a; i < b; i++) s += x[i];
    return s / (b - a);
}
#endif

static void test_gpu_matches_cpu_first_steps(void) {
#ifndef USE_CUDA
    SKIP("no CUDA in this build");
#else
    if (!have_gpu()) SKIP("no GPU");
    static Batch8 b;
    make_batch(&b);
    double cpu[3], gpu[3];
    if (run(&b, -1, "fp32", 3, cpu, NULL) || run(&b, 0, "fp32", 3, gpu, NULL)) { CHECK(0, "run failed"); return; }
    // The first loss comes from identical weights: fp32 rounding only. Later steps follow updates made
    // at warmup's bias lr of 0.1, which magnify the differences about 30-fold a step (measured on an
    // H200, 2026-11-30: 1.4e-5, 8.6e-5, 2.5e-3; the same with the code before that day's kernel
    // changes, so the growth is the dynamics', not a kernel's). An update that differed would show
    // at step 1 already.
    const double tol[3] = { 2e-5, 5e-4, 1e-2 };
    for (int i = 0; i < 3; i++) {
        printf("    step %d: loss cpu %.7g gpu %.7g\n", i, cpu[i], gpu[i]);
        CHECK(close_enough(gpu[i], cpu[i], 0, tol[i]), "step %d: gpu %.9g cpu %.9g", i, gpu[i], cpu[i]);
    }
#endif
}

// bf16 and tf32 training must train as well as fp32. Early on the three runs part (they make
// different early updates at warmup's high bias lr and regroup; measured up to 45% apart around step
// 50), so the test asks: each learns (loss down more than 4x), and over the last 60 steps no 20-step
// window is more than 10% above fp32's. Below is not a defect: the runs are chaotic, and with cuDNN's
// convolutions (another summation order) tf32 ended 7% under fp32 and bf16 8.5% over (H200).
static void test_reduced_precision_tracks_fp32(void) {
#ifndef USE_CUDA
    SKIP("no CUDA in this build");
#else
    if (!have_gpu()) SKIP("no GPU");
    static Batch8 b;
    static double l32[STEPS], l16[STEPS], ltf[STEPS];
    make_batch(&b);
    size_t allocs = 1;
    if (run(&b, 0, "fp32", STEPS, l32, &allocs) || run(&b, 0, "bf16", STEPS, l16, NULL) ||
        run(&b, 0, "tf32", STEPS, ltf, NULL)) { CHECK(0, "run failed"); return; }
    CHECK(allocs == 0, "%zu device allocations in %d steps", allocs, STEPS - 3);
    CHECK(mean(l32, STEPS - 20, STEPS) < mean(l32, 0, 20) / 4, "fp32 did not learn: %.3g -> %.3g",
          mean(l32, 0, 20), mean(l32, STEPS - 20, STEPS));
    double worst16 = 0, worsttf = 0;
    for (int w = 0; w + 20 <= STEPS; w += 20) {
        double f = mean(l32, w, w + 20), h = mean(l16, w, w + 20), t = mean(ltf, w, w + 20);
        printf("    steps %3d-%3d: fp32 %8.4f  bf16 %8.4f  tf32 %8.4f\n", w, w + 19, f, h, t);
        if (w < STEPS - 60) continue;
        worst16 = fmax(worst16, (h - f) / f);
        worsttf = fmax(worsttf, (t - f) / f);
    }
    printf("    last 60 steps, worst window: bf16 %+.1f%%, tf32 %+.1f%% above fp32\n", 100 * worst16, 100 * worsttf);
    CHECK(mean(l16, STEPS - 20, STEPS) < mean(l16, 0, 20) / 4, "bf16 did not learn");
    CHECK(mean(ltf, STEPS - 20, STEPS) < mean(ltf, 0, 20) / 4, "tf32 did not learn");
    CHECK(worst16 < 0.10, "bf16 ends %.1f%% above the fp32 curve", 100 * worst16);
    CHECK(worsttf < 0.10, "tf32 ends %.1f%% above the fp32 curve", 100 * worsttf);
#endif
}

// A step replayed from CUDA Graphs is the step run launch by launch: the same losses and the same
// weights, bit for bit, after steps that ran directly (1), were recorded (2) and replayed (3-6).
static void test_graphs_equal_eager(void) {
#ifndef USE_CUDA
    SKIP("no CUDA in this build");
#else
    if (!have_gpu()) SKIP("no GPU");
    static Batch8 b;
    make_batch(&b);
    enum { STEPS_G = 6 };
    double lg[STEPS_G], le[STEPS_G];
    float *wg = NULL, *we = NULL;
    int rg = 0, re = 0;
    size_t n = 0, ne = 0, differ = 0;
    if (run_graphs(&b, 1, STEPS_G, lg, &wg, &n, &rg) || run_graphs(&b, 0, STEPS_G, le, &we, &ne, &re)) {
        CHECK(0, "run failed"); free(wg); free(we); return;
    }
    printf("    passes recorded: %d with graphs, %d with YT_GRAPHS=0\n", rg, re);
    CHECK(rg == 2, "%d passes recorded (the forward and the backward expected)", rg);
    CHECK(re == 0, "YT_GRAPHS=0 still recorded %d passes", re);
    for (int i = 0; i < STEPS_G; i++)
        CHECK(lg[i] == le[i], "step %d: loss %.9g replayed, %.9g direct", i, lg[i], le[i]);
    for (size_t i = 0; i < n && n == ne; i++) differ += memcmp(&wg[i], &we[i], sizeof(float)) != 0;
    CHECK(n > 0 && n == ne && differ == 0, "%zu of %zu weights differ between replayed and direct steps", differ, n);
    free(wg); free(we);
#endif
}

// rect and multi_scale steps change shape from batch to batch: replayed and direct steps still give the
// same bits; the first four shapes' passes fill the eight recording slots and the fifth runs directly
// every time (no slot is taken from a recorded shape); no step allocates device memory, whatever its
// shape (the plan is for the largest).
static void test_graphs_varying_shapes(void) {
#ifndef USE_CUDA
    SKIP("no CUDA in this build");
#else
    if (!have_gpu()) SKIP("no GPU");
    static Batch8 b;
    make_batch(&b);
    enum { STEPS_V = 3 * N_SHAPES };
    double lg[STEPS_V], le[STEPS_V];
    float *wg = NULL, *we = NULL;
    int rg = 0, re = 0;
    size_t n = 0, ne = 0, differ = 0, ag = 1, ae = 1;
    if (run_shapes(&b, 1, STEPS_V, lg, &wg, &n, &rg, &ag) || run_shapes(&b, 0, STEPS_V, le, &we, &ne, &re, &ae)) {
        CHECK(0, "run failed"); free(wg); free(we); return;
    }
    printf("    %d shapes, %d steps: passes recorded %d with graphs, %d without; device allocations %zu, %zu\n",
           N_SHAPES, STEPS_V, rg, re, ag, ae);
    CHECK(rg == MODEL_RECS_TRAIN && re == 0, "recorded %d passes (want %d), %d with YT_GRAPHS=0", rg, MODEL_RECS_TRAIN, re);
    CHECK(ag == 0 && ae == 0, "the steps allocated device memory: %zu with graphs, %zu without", ag, ae);
    for (int i = 0; i < STEPS_V; i++)
        CHECK(lg[i] == le[i] && isfinite(lg[i]), "step %d (shape %d): loss %.9g replayed, %.9g direct", i, i % N_SHAPES,
              lg[i], le[i]);
    for (size_t i = 0; i < n && n == ne; i++) differ += memcmp(&wg[i], &we[i], sizeof(float)) != 0;
    CHECK(n > 0 && n == ne && differ == 0, "%zu of %zu weights differ between replayed and direct steps", differ, n);
    free(wg); free(we);
#endif
}

// The GPU's uint8 input path gives the same losses as floats made on the host.
static void test_gpu_u8_input(void) {
#ifndef USE_CUDA
    SKIP("no CUDA in this build");
#else
    if (!have_gpu()) SKIP("no GPU");
    static Config cfg;
    Err err;
    char *ov[] = { "batch=8", "imgsz=256", "epochs=1", "nc=6", "seed=0", "precision=fp32" };
    if (config_load("cfg/t.ini", 6, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    static Batch8 b;
    make_batch(&b);
    static uint8_t u8[N * S * S * 3];
    for (size_t i = 0; i < sizeof u8; i++) u8[i] = (uint8_t)(b.images[i] * 255.0f + 0.5f);
    for (size_t i = 0; i < sizeof u8; i++) b.images[i] = u8[i] / 255.0f;
    Trainer t;
    if (trainer_init(&t, &cfg, 1, 0, &err)) { CHECK(0, "%s", err.msg); return; }
    double s1, s2;
    LossOut o1, o2;
    trainer_forward_assign(&t, N, S, b.images, NULL, b.targets, b.nt, &s1, &err);
    trainer_compute_backward(&t, N, s1 > 1 ? s1 : 1, N, &o1);
    trainer_forward_assign(&t, N, S, NULL, u8, b.targets, b.nt, &s2, &err);
    trainer_compute_backward(&t, N, s2 > 1 ? s2 : 1, N, &o2);
    CHECK(s1 == s2 && o1.total == o2.total, "float %.9g / %.9g, uint8 %.9g / %.9g", s1, o1.total, s2, o2.total);
    trainer_free(&t);
#endif
}

int main(void) {
    RUN(test_gpu_matches_cpu_first_steps);
    RUN(test_reduced_precision_tracks_fp32);
    RUN(test_gpu_u8_input);
    RUN(test_graphs_equal_eager);
    RUN(test_graphs_varying_shapes);
    return test_summary();
}
