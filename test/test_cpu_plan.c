// test_cpu_plan.c: the CPU's activation plan (core/spec/act_plan.c model_plan_recompute): pre-BN maps recomputed by
// the backward instead of stored give the same head maps, parameter gradients and BN running statistics as the plan
// that stores them all, to the bit (gelan-t; yolov9-t, whose RepConvs need both branches' maps at once; YOLO26-n,
// depthwise convs and attention); the plan recomputes the cheapest first and only as many as the budget asks; and
// the trainer plans so on its own when the memory is short (YT_MEM_AVAILABLE_MB), says so at start, and refuses
// with what to change when even that does not fit. The quick recipe's config trains, and a CPU run says its speed
// and time after its second step. And the Makefile compiles on every core by default.
#include "test/test.h"

#include "cfg/config.h"
#include "core/spec/model.h"
#include "test/model_grads.h"

enum { N = 2, S = 64 };

typedef struct {
    float *head, *grad, *state;   // the head maps after the forward; gradients and state after the backward
    size_t n_head, n;
    int recomputed;
} Run;

static size_t head_floats(Model *m) {
    size_t n = 0;
    for (int l = 0; l < m->n_levels; l++) n += map_floats(model_value(m, m->head[l], N));
    return n;
}

// One training forward and backward of cfg_path with random head gradients; budget: the floats the plan may
// take (0: every z recomputed; SIZE_MAX: all stored, the plan model_build made).
static int run(const char *cfg_path, size_t budget, Run *out) {
    static Config cfg;
    Model m;
    Err err;
    if (config_load(cfg_path, 0, NULL, &cfg, &err) || model_build(&cfg, N, S, &m, &err)) {
        printf("    %s\n", err.msg);
        return -1;
    }
    out->recomputed = budget == SIZE_MAX ? 0 : model_plan_recompute(&m, budget);
    if (model_reserve_act(&m)) { printf("    no memory for the activations\n"); model_free(&m); return -1; }
    model_init_weights(&m, 7);
    size_t n_img = (size_t)N * S * S * 3;
    float *img = xmalloc(n_img * sizeof(float));
    Rng r = rng_for(11, 12, 13);
    for (size_t i = 0; i < n_img; i++) img[i] = (float)rng_uniform(&r, 0, 1);
    model_forward(&m, img, N, S, S, 1);
    out->n_head = head_floats(&m);
    out->head = xmalloc(out->n_head * sizeof(float));
    for (int l = 0, at = 0; l < m.n_levels; l++) {
        Map v = model_value(&m, m.head[l], N);
        memcpy(out->head + at, v.data, map_floats(v) * sizeof(float));
        at += (int)map_floats(v);
    }
    random_head_grads(&m, N, &r);                          // the loss's part: any gradient will do
    model_zero_grad(&m);
    model_backward(&m, N);
    out->n = m.n_state;
    out->grad = xmalloc(m.n_state * sizeof(float));
    out->state = xmalloc(m.n_state * sizeof(float));
    memcpy(out->grad, m.grad, m.n_state * sizeof(float));
    memcpy(out->state, m.state, m.n_state * sizeof(float));   // BN running statistics included
    free(img);
    model_free(&m);
    return 0;
}

static size_t differ(const float *a, const float *b, size_t n, size_t *first) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float))) { if (!bad) *first = i; bad++; }
    return bad;
}

static void run_free(Run *r) { free(r->head); free(r->grad); free(r->state); }

static void same_bits(const char *cfg_path) {
    Run stored, again;
    if (run(cfg_path, SIZE_MAX, &stored) || run(cfg_path, 0, &again)) { CHECK(0, "%s: no model", cfg_path); return; }
    size_t first = 0, bad;
    CHECK(again.recomputed > 0, "%s: a budget of 0 recomputes no pre-BN map", cfg_path);
    bad = differ(stored.head, again.head, stored.n_head, &first);
    CHECK(bad == 0, "%s: %zu of %zu head values differ, first at %zu", cfg_path, bad, stored.n_head, first);
    bad = differ(stored.grad, again.grad, stored.n, &first);
    CHECK(bad == 0, "%s: %zu of %zu gradients differ, first at %zu: %g against %g", cfg_path, bad, stored.n, first,
          bad ? again.grad[first] : 0.0, bad ? stored.grad[first] : 0.0);
    bad = differ(stored.state, again.state, stored.n, &first);
    CHECK(bad == 0, "%s: %zu of %zu state values (BN running statistics) differ, first at %zu", cfg_path, bad,
          stored.n, first);
    printf("    %s: %d pre-BN maps recomputed, the same bits\n", cfg_path, again.recomputed);
    run_free(&stored);
    run_free(&again);
}

static void test_gelan_same_bits(void) { same_bits("cfg/t.ini"); }
static void test_dual_same_bits(void) { same_bits("cfg/yolov9-t.ini"); }
static void test_yolo26_same_bits(void) { same_bits("cfg/yolo26n.ini"); }

// Per unit with a BN: z_recompute and the multiply-adds per float of z.
static int units(const Model *m, double *cost, int *again) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < 2; k++) {
            const ConvUnit *u = k ? &m->nodes[i].cv2 : &m->nodes[i].cv;
            if (u->w < 0 || u->bn_w < 0 || (m->nodes[i].op != OP_CONV && m->nodes[i].op != OP_REPCONV)) continue;
            cost[n] = (double)u->d.C / u->d.groups * u->d.R * u->d.S;
            again[n++] = u->z_recompute;
        }
    return n;
}

// A budget between all stored and all recomputed: the plan fits it, recomputes the cheapest, and leaves the
// rest stored; a budget the stored plan fits recomputes nothing and keeps model_build's arena.
static void test_plan_fits_budget(void) {
    static Config cfg;
    Model m;
    Err err;
    if (config_load("cfg/s.ini", 0, NULL, &cfg, &err) || model_build(&cfg, 4, 160, &m, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    size_t all = m.n_act;
    CHECK(model_plan_recompute(&m, all) == 0 && m.n_act == all && m.n_zre[0] + m.n_zre[1] == 0,
          "a budget of the stored plan's %zu floats: %zu floats planned, %zu in zre", all, m.n_act, m.n_zre[0]);
    size_t budget = all * 2 / 3;
    int k = model_plan_recompute(&m, budget);
    CHECK(k > 0 && m.n_act + m.n_zre[0] + m.n_zre[1] <= budget, "budget %zu floats: %d recomputed, %zu + %zu + %zu "
          "floats", budget, k, m.n_act, m.n_zre[0], m.n_zre[1]);
    double *cost = xmalloc(2 * m.n_nodes * sizeof *cost);
    int *again = xmalloc(2 * m.n_nodes * sizeof *again), n = units(&m, cost, again), wrong = 0, stored = 0;
    for (int i = 0; i < n; i++) {
        stored += !again[i];
        for (int j = 0; j < n; j++) wrong += again[i] && !again[j] && cost[i] > cost[j];
    }
    CHECK(wrong == 0, "%d recomputed maps cost more than a stored one", wrong);
    CHECK(stored > 0, "every map recomputed where %zu of %zu floats would do", budget, all);
    double share = model_recompute_share(&m);
    CHECK(share > 0 && share < 1.0 / 3, "recomputing adds %.3f of a step's multiply-adds", share);
    printf("    gelan-s, batch 4 at 160: %d of %d recomputed for 2/3 of the arena, +%.1f%% multiply-adds\n", k, n,
           100 * share);
    free(cost);
    free(again);
    model_free(&m);
}

// The trainer plans by itself: with the memory short it recomputes and says so (and trains); with too little even
// for that it refuses, naming what it needs and what to change.
static void test_trainer_plans(void) {
    char cmd[8192], out[16384];
    const char *tmp = test_tmpdir("cpu-plan");
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    snprintf(cmd, sizeof cmd, "YT_STOP_AFTER_STEPS=1 YT_MEM_AVAILABLE_MB=900 ./yolotrain cfg/t.ini imgsz=320 batch=16 "
             "epochs=1 workers=1 project=%s name=short", tmp);
    int rc = test_shell(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "CPU memory plan:") && strstr(out, "pre-BN maps recomputed in the backward"),
          "short memory: exit %d, no recompute plan said:\n%s", rc, out);
    snprintf(cmd, sizeof cmd, "YT_STOP_AFTER_STEPS=1 YT_MEM_AVAILABLE_MB=400 ./yolotrain cfg/t.ini imgsz=320 batch=16 "
             "epochs=1 workers=1 project=%s name=none", tmp);
    rc = test_shell(cmd, out, sizeof out);
    CHECK(rc != 0 && strstr(out, "needs") && strstr(out, "lower batch or imgsz") && strstr(out, "cfg/quick.ini"),
          "too little memory: exit %d:\n%s", rc, out);
}

// The quick recipe (README.md): cfg/quick.ini parses and trains its first steps on the built-in set, and the run
// says after its second step how fast it goes and how long it will take, naming the recipe.
static void test_quick_recipe_trains(void) {
    char cmd[8192], out[16384];
    const char *tmp = test_tmpdir("cpu-quick");
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    snprintf(cmd, sizeof cmd, "YT_STOP_AFTER_STEPS=3 ./yolotrain cfg/quick.ini project=%s", tmp);
    int rc = test_shell(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "model: cfg/quick.ini") && strstr(out, "data/synth-small/data.yaml") &&
          strstr(out, "train: images 512") && strstr(out, "Starting training for"),
          "cfg/quick.ini: exit %d:\n%s", rc, out);
    const char *cost = strstr(out, "CPU: ");
    CHECK(cost && strstr(cost, "images/s: an epoch takes about") && strstr(cost, "the rest of the run's 24 epochs"),
          "no speed and time for the run after its second step:\n%s", out);
    snprintf(cmd, sizeof cmd, "YT_STOP_AFTER_STEPS=2 ./yolotrain cfg/t.ini imgsz=64 batch=4 epochs=2 project=%s", tmp);
    rc = test_shell(cmd, out, sizeof out);
    cost = strstr(out, "CPU: ");
    CHECK(rc == 0 && cost && strstr(cost, "the rest of the run's 2 epochs") && strstr(cost, "./yolotrain cfg/quick.ini"),
          "cfg/t.ini: exit %d, the speed line does not name the quick recipe:\n%s", rc, out);
}

// data=synth-small names the small-image set for check (and val) as for training: 512 train and 64 val images.
static void test_small_set_checks(void) {
    char cmd[8192], out[16384];
    const char *tmp = test_tmpdir("cpu-check");
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    snprintf(cmd, sizeof cmd, "./yolotrain check data=synth-small project=%s", tmp);
    int rc = test_shell(cmd, out, sizeof out);
    const char *val = strstr(out, "== val");
    CHECK(rc == 0 && strstr(out, "images: 512 (of 512 found)") && val && strstr(val, "images: 64 (of 64 found)"),
          "check data=synth-small: exit %d:\n%s", rc, out);
}

// The Makefile compiles on every core when no -j is given (the CUDA build file by file took minutes), and keeps a -j
// that is. make -p -q only prints its database: nothing is built. A parent make's flags are left out.
static void test_make_uses_every_core(void) {
    char out[16384], want[32];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (access("Makefile", R_OK) || system("command -v make >/dev/null 2>&1")) SKIP("no Makefile or make here");
    test_shell("env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -p -q NVCC= yolotrain 2>/dev/null | grep '^MAKEFLAGS'", out,
               sizeof out);
    snprintf(want, sizeof want, "-j%ld", cores);
    CHECK(strstr(out, want) != NULL, "plain make: MAKEFLAGS without %s: %s", want, out);
    test_shell("env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -j1 -p -q NVCC= yolotrain 2>/dev/null | grep '^MAKEFLAGS'",
               out, sizeof out);
    CHECK(strstr(out, "-j1") != NULL && (cores == 1 || !strstr(out, want)), "make -j1: %s", out);
}

// cfg/quick.ini is the run test_learn_map holds to mAP50 >= 0.30: its settings and set are the test's overrides.
static void test_quick_recipe_is_the_learning_test(void) {
    static Config cfg;
    Err err;
    if (config_load("cfg/quick.ini", 0, NULL, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(!strcmp(cfg.data, "synth-small") && cfg.imgsz == 96 && cfg.epochs == 24 && cfg.batch == 8 &&
          cfg.close_mosaic == 8 && cfg.hyp.warmup_epochs == 20 && cfg.hyp.lr0 == 0.08 && cfg.hyp.scale == 0.5 && cfg.hyp.mixup == 0 &&
          cfg.seed == 0, "cfg/quick.ini: data=%s imgsz=%d epochs=%d batch=%d close_mosaic=%d warmup_epochs=%g lr0=%g "
          "scale=%g mixup=%g seed=%d, not test_learn_map's run", cfg.data, cfg.imgsz, cfg.epochs, cfg.batch,
          cfg.close_mosaic, cfg.hyp.warmup_epochs, cfg.hyp.lr0, cfg.hyp.scale, cfg.hyp.mixup, cfg.seed);
}

int main(void) {
    RUN(test_gelan_same_bits);
    RUN(test_dual_same_bits);
    RUN(test_yolo26_same_bits);
    RUN(test_plan_fits_budget);
    RUN(test_trainer_plans);
    RUN(test_quick_recipe_is_the_learning_test);
    RUN(test_quick_recipe_trains);
    RUN(test_small_set_checks);
    RUN(test_make_uses_every_core);
    return test_summary();
}
