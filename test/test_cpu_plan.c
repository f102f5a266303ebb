// test_cpu_plan.c: the CPU's activation plan (core/spec/act_plan.c model_plan_recompute): pre-BN maps recomputed by
// the backward instead of stored give the same head maps, parameter gradients and BN running statistics as the plan
// that stores them all, to the bit (gelan-t; yolov9-t, whose RepConvs need both branches' maps at once; YOLO26-n,
// depthwise convs and attention), and so do values left unkept and checkpointed (their writers run again by the
// backward); the plan recomputes the cheapest first and only as many as the budget asks, checkpointing only where
// every pre-BN map recomputed does not fit; and the trainer plans so on its own when the memory is short
// (YT_MEM_AVAILABLE_MB), says so at start, trains to the full-memory run's bits, and refuses with what to change
// when even that does not fit. The quick recipe's config trains, and a CPU run says its speed
// and time after its second step. And the Makefile compiles on every core by default.
#include "test/test.h"

#include "cfg/config.h"
#include "core/spec/model.h"
#include "test/model_grads.h"

enum { N = 2, S = 64 };

typedef struct {
    float *head, *grad, *state;   // the head maps after the forward; gradients and state after the backward
    size_t n_head, n, n_act;      // n_act: the plan's floats (arena and zre)
    int recomputed, regen, replayed;   // pre-BN maps recomputed, values checkpointed, nodes the backward runs again
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
    out->regen = m.n_regen;
    out->replayed = m.replay_first ? m.replay_first[m.n_nodes] : 0;
    out->n_act = m.n_act + m.n_zre[0] + m.n_zre[1];
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

// again against stored, to the bit: the head maps, the parameter gradients, the state (BN running statistics)
static void compare(const char *cfg_path, const Run *stored, const Run *again) {
    size_t first = 0, bad;
    bad = differ(stored->head, again->head, stored->n_head, &first);
    CHECK(bad == 0, "%s: %zu of %zu head values differ, first at %zu", cfg_path, bad, stored->n_head, first);
    bad = differ(stored->grad, again->grad, stored->n, &first);
    CHECK(bad == 0, "%s: %zu of %zu gradients differ, first at %zu: %g against %g", cfg_path, bad, stored->n, first,
          bad ? again->grad[first] : 0.0, bad ? stored->grad[first] : 0.0);
    bad = differ(stored->state, again->state, stored->n, &first);
    CHECK(bad == 0, "%s: %zu of %zu state values (BN running statistics) differ, first at %zu", cfg_path, bad,
          stored->n, first);
}

// Pre-BN maps recomputed (a budget of 2/3 of the stored plan: only values no backward reads left unkept, no node
// run again), then with a budget of 0
// every pre-BN map recomputed and every value that can be checkpointed (its writers run again by the backward):
// each the same bits as storing everything.
static void same_bits(const char *cfg_path) {
    Run stored, again, ckpt;
    if (run(cfg_path, SIZE_MAX, &stored) || run(cfg_path, stored.n_act * 2 / 3, &again) || run(cfg_path, 0, &ckpt)) {
        CHECK(0, "%s: no model", cfg_path);
        return;
    }
    CHECK(again.recomputed > 0 && again.replayed == 0, "%s: 2/3 of the arena: %d pre-BN maps recomputed, %d nodes "
          "run again", cfg_path, again.recomputed, again.replayed);
    compare(cfg_path, &stored, &again);
    CHECK(ckpt.regen > 0 && ckpt.replayed > 0 && ckpt.n_act < again.n_act, "%s: a budget of 0: %d values "
          "checkpointed, %d writers run again, %zu floats planned", cfg_path, ckpt.regen, ckpt.replayed, ckpt.n_act);
    compare(cfg_path, &stored, &ckpt);
    printf("    %s: %d pre-BN maps recomputed, the same bits; with %d values checkpointed (%d nodes run again, "
           "%zu of %zu floats), the same bits\n", cfg_path, again.recomputed, ckpt.regen, ckpt.replayed, ckpt.n_act,
           stored.n_act);
    run_free(&stored);
    run_free(&again);
    run_free(&ckpt);
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

// gelan-s (cfg/s.ini) for batch 4 at 160 px into m; -1 after a failed check
static int build_s160(Model *m) {
    static Config cfg;
    Err err;
    if (config_load("cfg/s.ini", 0, NULL, &cfg, &err) || model_build(&cfg, 4, 160, m, &err)) {
        CHECK(0, "%s", err.msg);
        return -1;
    }
    return 0;
}

// A budget between all stored and all recomputed: the plan fits it, recomputes the cheapest, and leaves the
// rest stored; a budget the stored plan fits recomputes nothing and keeps model_build's arena.
static void test_plan_fits_budget(void) {
    Model m;
    if (build_s160(&m)) return;
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

// The least recompute that fits: values no backward reads go first (nothing runs again), then pre-BN maps, then
// checkpointed values, as few as fit. A budget that the unread values fit recomputes nothing; one that every z
// recomputed fits runs no node again; one between that and the least plan recomputes every z first, then
// checkpoints fewer values than the least plan, and fits; the multiply-adds said grow with it.
static void test_plan_checkpoints_after_z(void) {
    Model m;
    if (build_s160(&m)) return;
    double *cost = xmalloc(2 * m.n_nodes * sizeof *cost);
    int *again = xmalloc(2 * m.n_nodes * sizeof *again), n = 0;
    model_plan_recompute(&m, 0);
    size_t least = m.n_act + m.n_zre[0] + m.n_zre[1];
    int most = m.n_regen;
    double share_most = model_recompute_share(&m);
    for (int v = 0; v < m.n_values; v++) m.values[v].regen = 0;
    m.n_regen = 0;
    size_t all_z = model_act_floats(&m, 0) + m.n_zre[0] + m.n_zre[1];   // every z recomputed, nothing checkpointed
    CHECK(most > 0 && least < all_z, "a budget of 0: %d values checkpointed, %zu floats against %zu", most, least,
          all_z);
    for (int i = 0; i < m.n_nodes; i++) m.nodes[i].cv.z_recompute = m.nodes[i].cv2.z_recompute = 0;
    size_t all = model_act_floats(&m, 0), unread;   // stored; then with the values no backward reads unkept
    int k = model_plan_recompute(&m, all - 1);
    unread = m.n_act;
    CHECK(k == 0 && m.n_regen > 0 && unread < all && m.replay_first && m.replay_first[m.n_nodes] == 0 &&
          model_recompute_share(&m) == 0, "a budget just below the stored plan: %d pre-BN maps recomputed, %d values "
          "unkept, %d nodes run again", k, m.n_regen, m.replay_first ? m.replay_first[m.n_nodes] : -1);
    k = model_plan_recompute(&m, all_z);
    double share_z = model_recompute_share(&m);
    CHECK(k > 0 && m.replay_first && m.replay_first[m.n_nodes] == 0 && m.n_act + m.n_zre[0] + m.n_zre[1] <= all_z,
          "a budget every z recomputed fits: %d nodes run again", m.replay_first ? m.replay_first[m.n_nodes] : -1);
    size_t mid = (least + all_z) / 2;
    k = model_plan_recompute(&m, mid);
    n = units(&m, cost, again);
    CHECK(k == n, "a budget below every z recomputed: only %d of %d pre-BN maps recomputed", k, n);
    CHECK(m.n_regen > 0 && m.n_regen < most && m.n_act + m.n_zre[0] + m.n_zre[1] <= mid,
          "budget %zu floats: %d values checkpointed (%d at budget 0), %zu floats planned", mid, m.n_regen, most,
          m.n_act + m.n_zre[0] + m.n_zre[1]);
    double share = model_recompute_share(&m);
    CHECK(share_z < share && share <= share_most, "multiply-adds: +%.3f every z, +%.3f checkpointing, +%.3f the most",
          share_z, share, share_most);
    printf("    gelan-s, batch 4 at 160: %zu floats stored, %zu with the unread values unkept, %zu at the budget of "
           "every z recomputed (+%.0f%%), %zu with %d values checkpointed (+%.0f%%), %zu the least (%d, +%.0f%%)\n", all, unread,
           all_z, 100 * share_z, m.n_act + m.n_zre[0] + m.n_zre[1], m.n_regen, 100 * share, least, most,
           100 * share_most);
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

// device=cpu:N: the N trainers plan one after another before any touches its memory, so each plans within a 1/N
// share (at 900 MB two devices of 8 images each would each plan 0.55 GB all stored: 1.1 GB in all).
static void test_cpu_devices_share_memory(void) {
    char cmd[8192], out[16384];
    const char *tmp = test_tmpdir("cpu-plan-share");
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    snprintf(cmd, sizeof cmd, "YT_STOP_AFTER_STEPS=1 YT_MEM_AVAILABLE_MB=900 ./yolotrain cfg/t.ini imgsz=320 batch=16 "
             "epochs=1 workers=1 device=cpu:2 project=%s name=two", tmp);
    int rc = test_shell(cmd, out, sizeof out);
    CHECK(rc == 0 && strstr(out, "of 0.5 GB available (a 1/2 share of the machine's for each of 2 CPU devices)") &&
          strstr(out, "pre-BN maps recomputed in the backward"),
          "two CPU devices at 900 MB: exit %d, no half-share plan with recompute said:\n%s", rc, out);
}

// RUN's training state (project/RUN/weights/last_state.safetensors): weights, gradients, momentum, EMA, BN running
// statistics and the loss sums of the steps, in *n bytes; the run's elapsed time, the one value two runs of the
// same steps differ in, is cut out of the header with the header's padding. NULL if it cannot be read.
static char *state_of(const char *project, const char *run, size_t *n) {
    char path[4600];
    snprintf(path, sizeof path, "%s/%s/weights/last_state.safetensors", project, run);
    char *x = slurp(path, n);
    uint64_t len = 0;
    if (x && *n >= 8) memcpy(&len, x, 8);                 // safetensors: the header's length, little-endian
    char *k = x && len && 8 + len <= *n ? memmem(x + 8, len, "\"elapsed_s\":\"", 13) : NULL;
    char *q = k ? strchr(k + 13, '"') : NULL;
    if (!q) { free(x); return NULL; }
    char *out = xmalloc(*n), *o = out;
    for (char *c = x + 8; c < x + 8 + len; c++)
        if ((c < k || c >= q) && *c != ' ') *o++ = *c;
    memcpy(o, x + 8 + len, *n - 8 - len);
    *n = (size_t)(o - out) + (*n - 8 - len);
    free(x);
    return out;
}

// The trainer checkpoints by itself when every pre-BN map recomputed does not fit, says so, and trains to the
// same bits: after two steps the state (weights, BN running statistics, momentum, EMA, the losses) is the
// full-memory run's byte for byte. The same on two CPU devices with sync_bn=1, whose replayed BN outputs come
// from the whole batch's saved statistics.
static void checkpoints_same_bits(const char *extra, const char *name) {
    char cmd[8192], out[16384], args[512], full_name[64], low_name[64];
    const char *tmp = test_tmpdir("cpu-ckpt");
    snprintf(args, sizeof args, "YT_STOP_AFTER_STEPS=2 ./yolotrain cfg/t.ini imgsz=320 batch=16 epochs=1 workers=1 %s",
             extra);
    snprintf(full_name, sizeof full_name, "full%s", name);
    snprintf(low_name, sizeof low_name, "low%s", name);
    snprintf(cmd, sizeof cmd, "%s project=%s name=%s", args, tmp, full_name);
    int rc = test_shell(cmd, out, sizeof out);
    CHECK(rc == 0 && !strstr(out, "recomputed in the backward"), "%s all memory: exit %d:\n%s", extra, rc, out);
    snprintf(cmd, sizeof cmd, "YT_MEM_AVAILABLE_MB=550 %s project=%s name=%s", args, tmp, low_name);
    rc = test_shell(cmd, out, sizeof out);
    const char *said = strstr(out, "of them checkpointed: ");
    int layers = 0;
    CHECK(rc == 0 && said && sscanf(said, "of them checkpointed: %d layers' forward run again", &layers) == 1 &&
          layers > 0, "%s 550 MB: exit %d, no checkpointing said:\n%s", extra, rc, out);
    size_t nf = 0, nl = 0;
    char *full = state_of(tmp, full_name, &nf), *low = state_of(tmp, low_name, &nl);
    CHECK(full && low && nf == nl && !memcmp(full, low, nf), "%s: the checkpointing run's state differs from the "
          "full-memory run's (%zu and %zu bytes)", extra, nf, nl);
    free(full);
    free(low);
}

static void test_trainer_checkpoints_same_bits(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    checkpoints_same_bits("", "");
    checkpoints_same_bits("device=cpu:2 sync_bn=1", "_sync");
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
    RUN(test_plan_checkpoints_after_z);
    RUN(test_trainer_plans);
    RUN(test_cpu_devices_share_memory);
    RUN(test_trainer_checkpoints_same_bits);
    RUN(test_quick_recipe_is_the_learning_test);
    RUN(test_quick_recipe_trains);
    RUN(test_small_set_checks);
    RUN(test_make_uses_every_core);
    return test_summary();
}
