// test_optim.c: the optimiser's schedules against the numbers of yolo-training.md 4.3-4.6 and
// section 7 (#25-#28), and its updates against PyTorch's formulas written out in double here.
#include "test/test.h"

#include "core/spec/optim.h"
#include "core/base/util.h"

static Hyp scratch_high(void) {    // the optimisation keys of hyp.scratch-high.yaml
    Hyp h = { .lr0 = 0.01, .lrf = 0.01, .momentum = 0.937, .weight_decay = 0.0005,
              .warmup_epochs = 3.0, .warmup_momentum = 0.8, .warmup_bias_lr = 0.1 };
    return h;
}

static void test_interp_and_round(void) {
    double xp[3] = { 0, 10, 20 }, fp[3] = { 1, 3, -1 };
    CHECK(opt_interp(-5, xp, fp, 3) == 1, "clamped left");
    CHECK(opt_interp(0, xp, fp, 3) == 1, "first point");
    CHECK(close_enough(opt_interp(5, xp, fp, 3), 2, 1e-15, 0), "mid of first piece");
    CHECK(opt_interp(10, xp, fp, 3) == 3, "inner point");
    CHECK(close_enough(opt_interp(15, xp, fp, 3), 1, 1e-15, 0), "mid of second piece");
    CHECK(opt_interp(20, xp, fp, 3) == -1 && opt_interp(99, xp, fp, 3) == -1, "clamped right");
    CHECK(opt_round_half_even(0.5) == 0 && opt_round_half_even(1.5) == 2, "half to even");
    CHECK(opt_round_half_even(2.5) == 2 && opt_round_half_even(2.51) == 3, "half to even");
}

static void test_nominal_batch(void) {   // section 4.3 / #25
    struct { int B, acc; double wd; } t[] = { { 8, 8, 5e-4 }, { 16, 4, 5e-4 }, { 32, 2, 5e-4 },
        { 48, 1, 3.75e-4 }, { 64, 1, 5e-4 }, { 128, 1, 1e-3 }, { 256, 1, 2e-3 } };
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
        int acc = opt_nominal_accumulate(t[k].B);
        double wd = opt_nominal_weight_decay(5e-4, t[k].B);
        CHECK(acc == t[k].acc, "B=%d: accumulate %d, want %d", t[k].B, acc, t[k].acc);
        CHECK(close_enough(wd, t[k].wd, 0, 1e-12), "B=%d: wd %g, want %g", t[k].B, wd, t[k].wd);
    }
}

static void test_lr_lambdas(void) {      // section 4.5 / #27
    double lin[4][2] = { { 0, 1 }, { 1, 0.99802 }, { 250, 0.505 }, { 499, 0.01198 } };
    for (int k = 0; k < 4; k++) {
        double v = opt_lr_lambda(LR_LINEAR, lin[k][0], 500, 0.01);
        CHECK(close_enough(v, lin[k][1], 1e-12, 0), "linear lf(%g) = %.9g", lin[k][0], v);
    }
    CHECK(opt_lr_lambda(LR_COSINE, 0, 500, 0.01) == 1, "cosine starts at 1");
    CHECK(close_enough(opt_lr_lambda(LR_COSINE, 250, 500, 0.01), 0.505, 1e-12, 0), "cosine mid");
    CHECK(close_enough(opt_lr_lambda(LR_COSINE, 500, 500, 0.01), 0.01, 1e-12, 0), "cosine end");
    CHECK(opt_lr_lambda(LR_FLAT_COS, 250, 500, 0.01) == 1, "flat-cos flat through E//2");
    CHECK(close_enough(opt_lr_lambda(LR_FLAT_COS, 375, 500, 0.01), 0.505, 1e-12, 0), "flat mid");
    CHECK(close_enough(opt_lr_lambda(LR_FLAT_COS, 500, 500, 0.01), 0.01, 1e-12, 0), "flat-cos end");
    CHECK(opt_lr_lambda(LR_FIXED, 123, 500, 0.01) == 1, "fixed");
}

static void test_warmup(void) {         // section 4.4 / #26: B = 64, nb = 1000, E = 500
    Hyp h = scratch_high();
    OptSchedule s;
    opt_schedule_init(&s, &h, LR_LINEAR, 500, 1000, 64);
    CHECK(s.nw == 3000, "nw %d", s.nw);
    OptStep st = opt_schedule_next(&s, 0, 0);
    CHECK(st.lr[0] == 0.1 && st.lr[1] == 0 && st.lr[2] == 0, "ni=0 lr %g %g", st.lr[0], st.lr[1]);
    CHECK(st.momentum == 0.8 && st.accumulate == 1 && st.step, "ni=0 momentum %g", st.momentum);
    st = opt_schedule_next(&s, 1, 500);   // ni = 1500: halfway, epoch 1 -> lr0*lf(1) = 0.0099802
    CHECK(close_enough(st.lr[0], 0.05 + 0.5 * 0.0099802, 1e-15, 1e-12), "bias lr %.12g", st.lr[0]);
    CHECK(close_enough(st.lr[1], 0.5 * 0.0099802, 1e-15, 1e-12), "ni=1500 lr %.12g", st.lr[1]);
    CHECK(st.lr[2] == st.lr[1], "groups 1 and 2 share the warmup lr");
    CHECK(close_enough(st.momentum, 0.8685, 1e-15, 1e-12), "ni=1500 momentum %.12g", st.momentum);
    st = opt_schedule_next(&s, 3, 0);     // ni = 3000: the last warmup iteration lands on lr0*lf(3)
    double lr3 = 0.01 * opt_lr_lambda(LR_LINEAR, 3, 500, 0.01);
    CHECK(st.lr[0] == lr3 && st.lr[1] == lr3 && st.momentum == 0.937, "ni=3000 lr %.12g", st.lr[0]);
    st = opt_schedule_next(&s, 3, 999);   // after warmup: the scheduler only
    CHECK(st.lr[0] == lr3 && st.lr[2] == lr3 && st.momentum == 0.937, "ni=3999");
    CHECK(st.accumulate == 1, "ni=3999 accumulate %d", st.accumulate);
    CHECK(close_enough(lr3, 0.0099406, 1e-15, 1e-12), "lr0*lf(3) = %.12g", lr3);

    opt_schedule_init(&s, &h, LR_LINEAR, 500, 10, 64);   // 3 epochs of 10 batches: 30 -> 100
    CHECK(s.nw == 100, "warmup is at least 100 iterations, got %d", s.nw);
}

static void test_warmup_accumulate(void) {   // B = 16: accumulate ramps 1 -> 4 over nw = 3000
    Hyp h = scratch_high();
    OptSchedule s;
    opt_schedule_init(&s, &h, LR_LINEAR, 500, 1000, 16);
    int want[][2] = { { 0, 1 }, { 499, 1 }, { 500, 2 }, { 1500, 2 }, { 2499, 3 }, { 2500, 4 },
                      { 3000, 4 } };
    for (int k = 0; k < 7; k++) {    // 1 + 3*ni/3000: 1.5 -> 2, 2.5 -> 2, 3.5 -> 4 (half to even)
        s.last_opt_step = -1000000;
        OptStep st = opt_schedule_next(&s, 0, want[k][0]);
        CHECK(st.accumulate == want[k][1], "ni=%d accumulate %d", want[k][0], st.accumulate);
    }
}

static void test_step_decision(void) {
    Hyp h = scratch_high();
    OptSchedule s;
    opt_schedule_init(&s, &h, LR_LINEAR, 500, 1000, 16);   // accumulate 4, nw = 3000
    int steps = 0;
    for (int i = 0; i < 20; i++) {   // early warmup: accumulate 1, a step every batch
        OptStep st = opt_schedule_next(&s, 0, i);
        steps += st.step;
    }
    CHECK(steps == 20, "steps in the first 20 warmup batches: %d", steps);
    s.last_opt_step = -1;            // as after a resume at epoch 4, past warmup
    for (int i = 0; i < 13; i++) {
        OptStep st = opt_schedule_next(&s, 4, i);
        CHECK(st.accumulate == 4, "accumulate %d", st.accumulate);
        CHECK(st.step == (i % 4 == 0), "i=%d step %d", i, st.step);   // ni 4000, 4004, 4008, ...
    }
    CHECK(s.last_opt_step == 4012, "last_opt_step %lld", (long long)s.last_opt_step);
}

// PyTorch's SGD (momentum, dampening 0, nesterov) for one element, written out in double.
static void sgd_ref(double *w, double g, double *buf, double lr, double mu, double wd, int first) {
    g = g + wd * *w;
    *buf = first ? g : mu * *buf + g;
    g = g + mu * *buf;
    *w = *w - lr * g;
}

static void test_sgd_hand(void) {        // w = 1, g = 1, mu = 0.5, lr = 0.1: worked by hand
    float w = 1, g = 1, buf = 0;
    const float want[3] = { 0.85f, 0.675f, 0.4875f };   // buf 1, 1.5, 1.75; g' 1.5, 1.75, 1.875
    for (int t = 0; t < 3; t++) {
        g = 1;
        sgd_apply_cpu(&w, &g, &buf, 1, 0.1f, 0.5f, 0.0f, t == 0);
        CHECK(close_enough(w, want[t], 1e-7, 0), "step %d: w %.9g, want %.9g", t, w, want[t]);
        CHECK(g == 0, "grad zeroed");
    }
    CHECK(buf == 1.75f, "buf %.9g", buf);
}

static void test_sgd_matches_reference(void) {
    enum { N = 7 };
    float w[3][N], g[3][N];
    double wr[3][N], br[3][N];
    ParamSlot slots[3];
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < N; i++) w[k][i] = (float)(wr[k][i] = 0.5 - 0.3 * i);
        slots[k] = (ParamSlot){ w[k], g[k], N, k };
    }
    Sgd o;
    sgd_init(&o, slots, 3, &backend_cpu, NULL, NULL);
    const double mu[3] = { 0.8, 0.85, 0.937 };   // momentum moves during warmup; buffers follow it
    for (int t = 0; t < 3; t++) {
        OptStep st = { .lr = { 0.1, 0.02, 0.05 }, .momentum = mu[t], .weight_decay = 0.01 };
        for (int k = 0; k < 3; k++)
            for (int i = 0; i < N; i++) {
                double gi = 0.25 * (i - 3) + 0.125 * t - 0.0625 * k;   // exact in fp32
                g[k][i] = (float)gi;
                sgd_ref(&wr[k][i], gi, &br[k][i], st.lr[k], mu[t], k == 1 ? 0.01 : 0, t == 0);
            }
        sgd_step(&o, &st);
    }
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < N; i++)
            CHECK(close_enough(w[k][i], wr[k][i], 1e-7, 1e-6), "group %d [%d]: %.9g vs %.9g",
                  k, i, w[k][i], wr[k][i]);
    sgd_free(&o);
}

static void test_sgd_groups_and_fixed(void) {   // same w, g and lr everywhere: only group 1 decays
    enum { N = 4 };
    float w[4][N], g[4][N];
    ParamSlot slots[4];
    const int group[4] = { 0, 1, -1, 2 };
    for (int k = 0; k < 4; k++) {
        for (int i = 0; i < N; i++) { w[k][i] = 1.0f + i; g[k][i] = 0.5f; }
        slots[k] = (ParamSlot){ w[k], g[k], N, group[k] };
    }
    Sgd o;
    sgd_init(&o, slots, 4, &backend_cpu, NULL, NULL);
    OptStep st = { .step = 1, .lr = { 0.1, 0.1, 0.1 }, .momentum = 0.9, .weight_decay = 0.05 };
    for (int t = 0; t < 3; t++) {
        for (int k = 0; k < 4; k++)
            if (group[k] >= 0) for (int i = 0; i < N; i++) g[k][i] = 0.5f;
        sgd_step(&o, &st);
    }
    for (int i = 0; i < N; i++) {
        CHECK(w[0][i] == w[3][i], "groups 0 and 2 equal (no decay): %.9g %.9g", w[0][i], w[3][i]);
        CHECK(w[1][i] < w[0][i], "group 1 decays: %.9g vs %.9g", w[1][i], w[0][i]);
        CHECK(w[2][i] == 1.0f + i && g[2][i] == 0.5f, "fixed tensor untouched: %.9g", w[2][i]);
        CHECK(g[0][i] == 0 && g[1][i] == 0 && g[3][i] == 0, "trainable grads zeroed");
    }
    // no decay, buf = g, g' = (1+mu) g on every step: w = w0 - lr*g*(1+mu)*(1 + (1+mu) + ...)
    double d1 = 0.5 * 1.9, d2 = 0.5 + 0.9 * (0.45 + 0.5), d3 = 0.5 + 0.9 * (0.9 * 0.95 + 0.5);
    CHECK(close_enough(w[0][0], 1 - 0.1 * (d1 + d2 + d3), 1e-6, 0), "group 0 w %.9g", w[0][0]);
    sgd_free(&o);
}

static void test_clip(void) {
    float a[2] = { 12, 0 }, b[1] = { 16 }, fixed_g[1] = { 1000 }, fixed_w[1] = { 7 };
    ParamSlot slots[3] = { { a, a, 2, 1 }, { fixed_w, fixed_g, 1, -1 }, { b, b, 1, 0 } };
    Sgd o;
    sgd_init(&o, slots, 3, &backend_cpu, NULL, NULL);
    float total = clip_grad_norm(&o, 10.0f);   // sqrt(12^2 + 16^2) = 20; fixed ignored
    sgd_free(&o);
    CHECK(total == 20.0f, "total %.9g", total);
    float coef = 1.0f / (20.0f + 1e-6f) * 10.0f;
    CHECK(a[0] == 12 * coef && b[0] == 16 * coef && a[1] == 0, "scaled %.9g %.9g", a[0], b[0]);
    CHECK(close_enough(sqrt(a[0] * a[0] + b[0] * b[0]), 10, 1e-5, 0), "norm after clip");
    CHECK(fixed_g[0] == 1000, "the fixed tensor's grad is not clipped");
    float c[2] = { 3, 4 };
    ParamSlot small = { c, c, 2, 2 };
    sgd_init(&o, &small, 1, &backend_cpu, NULL, NULL);
    total = clip_grad_norm(&o, 10.0f);
    sgd_free(&o);
    CHECK(total == 5.0f && c[0] == 3 && c[1] == 4, "small grads stay: %g %g %g", total, c[0], c[1]);
}

static void test_ema_decay(void) {        // section 4.6 / #28
    double want[5][2] = { { 1, 4.998e-4 }, { 100, 0.048766 }, { 1000, 0.393430 },
                          { 2000, 0.632057 }, { 10000, 0.993163 } };
    for (int k = 0; k < 5; k++) {
        double d = ema_decay((int64_t)want[k][0]);
        CHECK(close_enough(d, want[k][1], 0, 1e-4), "d(%g) = %.9g", want[k][0], d);
    }
    CHECK(ema_decay(0) == 0, "d(0) = 0: the first EMA copies the model");
}

static void test_ema_update(void) {       // fp32, one rounding per op, in PyTorch's order
    enum { N = 64 };
    float ema[N], x[N];
    double ref[N];
    Rng r = rng_for(7, 0, 0);
    for (int i = 0; i < N; i++) ref[i] = ema[i] = (float)rng_uniform(&r, -2, 2);
    for (int u = 1; u <= 3; u++) {
        double d = ema_decay(u * 1000);
        for (int i = 0; i < N; i++) x[i] = (float)rng_uniform(&r, -2, 2);
        float keep = (float)d, take = (float)(1 - d);
        for (int i = 0; i < N; i++) {
            volatile float t = take * x[i], e = ema[i] * keep;   // volatile: round each op
            float want = e + t;
            ref[i] = ref[i] * d + (1 - d) * x[i];
            ema_update_cpu(&ema[i], &x[i], 1, d);
            CHECK(ema[i] == want, "u=%d [%d]: %.9g, want %.9g", u, i, ema[i], want);
            CHECK(close_enough(ema[i], ref[i], 1e-6, 1e-5), "u=%d [%d] vs double", u, i);
        }
    }
}

int main(void) {
    (void)shared_dir;   // unused here; test.h defines it static (not inline)
    RUN(test_interp_and_round);
    RUN(test_nominal_batch);
    RUN(test_lr_lambdas);
    RUN(test_warmup);
    RUN(test_warmup_accumulate);
    RUN(test_step_decision);
    RUN(test_sgd_hand);
    RUN(test_sgd_matches_reference);
    RUN(test_sgd_groups_and_fixed);
    RUN(test_clip);
    RUN(test_ema_decay);
    RUN(test_ema_update);
    return test_summary();
}
