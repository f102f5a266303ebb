// test_gpu_optim.c: gpu/optim.h against core/spec/optim.h (SGD, EMA, scaling bit for bit; sums of
// squares to 1e-12), the slot versions against per-tensor calls, bn_apply and its fused SiLU
// backward against CPU loops on channel slices, and the conv bias gradient against the CPU twin
// on a large map, timed. Without CUDA in the build, or without a GPU, every test is a skip.
// Legend: n floats of a tensor, N batch, H,W size, C/K channels, ld pixel stride.
#include "core/spec/ops.h"
#include "core/spec/optim.h"
#include "core/base/util.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/ops.h"
#include "gpu/optim.h"
#endif

#define GPU_TESTS(X) X(test_sgd) X(test_ema) X(test_sumsq_scale) X(test_slots) X(test_clip_queued) X(test_loss_norm) \
    X(test_bn_apply) X(test_bn_apply_silu_backward) X(test_conv_bias_grad)

#define GPU_ARENAS { 0, 0, (size_t)1 << 20, (size_t)256 << 20, (size_t)64 << 20 }
#include "test/gpu_harness.h"
#ifdef USE_CUDA

static const size_t SIZES[] = { 1, 7, 1000003 };
static const float GUARD = -777.0f;   // fills a buffer outside its channel slice; must survive

// ---- host/device copies (the device: test/gpu_harness.h) ------------------------------------

static float *host_rand(size_t n, Rng *g, double lo, double hi) {
    float *h = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = (float)rng_uniform(g, lo, hi);
    return h;
}

// Every copy goes on dev.stream: plain cudaMemcpy would not wait for its kernels (the stream
// is non-blocking), and a copy racing the previous update fails only under a slow sanitizer.
static void copy_floats(float *dst, const float *src, size_t n, enum cudaMemcpyKind kind) {
    checkCuda(cudaMemcpyAsync(dst, src, n * sizeof(float), kind, dev.stream));
    device_sync(&dev);
}

static float *to_dev(const float *h, size_t n) {
    float *d = arena_take(&dev.acts, n * sizeof(float) + 4, 256);
    copy_floats(d, h, n, cudaMemcpyHostToDevice);
    return d;
}

static float *from_dev(const float *d, size_t n) {
    float *h = xmalloc(n * sizeof(float) + 4);
    copy_floats(h, d, n, cudaMemcpyDeviceToHost);
    return h;
}

// n device floats against the host reference, bit for bit
static void check_same(const char *what, size_t n, const float *d, const float *ref) {
    float *got = from_dev(d, n);
    size_t j = 0;
    while (j < n && memcmp(&got[j], &ref[j], sizeof(float)) == 0) j++;
    CHECK(j == n, "%s (n %zu): first difference at [%zu]: gpu %.9g cpu %.9g", what, n, j,
          j < n ? got[j] : 0.0f, j < n ? ref[j] : 0.0f);
    free(got);
}

// ---- per-tensor updates ---------------------------------------------------------------------

static void test_sgd(void) {
    NEED_GPU();
    Rng r = rng_for(71, 0, 0);
    const float wd[] = { 5e-4f, 5e-4f, 0.0f };   // step 0 is the first (buf = g); then two more
    for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES; s++) {
        size_t n = SIZES[s];
        float *w = host_rand(n, &r, -1, 1), *buf = host_rand(n, &r, -1, 1);
        float *dw = to_dev(w, n), *dbuf = to_dev(buf, n);
        float *dg = arena_take(&dev.acts, n * sizeof(float), 256);
        for (int step = 0; step < 3; step++) {
            float *g = host_rand(n, &r, -2, 2);
            copy_floats(dg, g, n, cudaMemcpyHostToDevice);
            sgd_apply_cpu(w, g, buf, n, 0.01f, 0.937f, wd[step], step == 0);
            sgd_apply_gpu(&dev, dw, dg, dbuf, n, 0.01f, 0.937f, wd[step], step == 0);
            check_same("sgd w", n, dw, w);
            check_same("sgd g", n, dg, g);
            check_same("sgd buf", n, dbuf, buf);
            free(g);
        }
        free(w); free(buf);
    }
}

static void test_ema(void) {
    NEED_GPU();
    Rng r = rng_for(72, 0, 0);
    const int64_t updates[] = { 1, 2, 3000, 100000 };
    for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES; s++) {
        size_t n = SIZES[s];
        float *ema = host_rand(n, &r, -1, 1), *x = host_rand(n, &r, -1, 1);
        float *dema = to_dev(ema, n), *dx = to_dev(x, n);
        for (size_t u = 0; u < sizeof updates / sizeof *updates; u++) {
            ema_update_cpu(ema, x, n, ema_decay(updates[u]));
            ema_update_gpu(&dev, dema, dx, n, ema_decay(updates[u]));
        }
        check_same("ema", n, dema, ema);
        free(ema); free(x);
    }
}

static void test_sumsq_scale(void) {
    NEED_GPU();
    Rng r = rng_for(73, 0, 0);
    for (size_t s = 0; s < sizeof SIZES / sizeof *SIZES; s++) {
        size_t n = SIZES[s];
        float *g = host_rand(n, &r, -3, 3), *dg = to_dev(g, n);
        double ref = grad_sumsq_cpu(g, n), got = grad_sumsq_gpu(&dev, dg, n);
        CHECK(close_enough(got, ref, 0.0, 1e-12), "sumsq n %zu: gpu %.17g cpu %.17g", n, got, ref);
        double again = grad_sumsq_gpu(&dev, dg, n);
        CHECK(memcmp(&again, &got, sizeof got) == 0, "sumsq n %zu not deterministic: %.17g, %.17g",
              n, got, again);
        grad_scale_cpu(g, n, 0.37f);
        grad_scale_gpu(&dev, dg, n, 0.37f);
        check_same("grad_scale", n, dg, g);
        free(g);
    }
}

// ---- slots: a toy model of odd tensors, one fixed (no gradient) and one empty ---------------

enum { N_SLOTS = 9 };
static const size_t SLOT_N[N_SLOTS] = { 7, 1000003, 0, 4096, 4097, 1, 300, 12, 5 };
static const int SLOT_GROUP[N_SLOTS] = { 0, 1, 2, -1, 1, 0, 2, 1, 1 };

// Slots over packed device arrays w, g, buf (no alignment beyond a float), as a model lays them.
static void slots_point(GpuSlot *sl, float *w, float *g, float *buf) {
    size_t off = 0;
    for (int k = 0; k < N_SLOTS; k++) {
        int fixed = SLOT_GROUP[k] < 0;
        sl[k] = (GpuSlot){ w + off, fixed ? NULL : g + off, fixed ? NULL : buf + off, SLOT_N[k],
                           SLOT_GROUP[k], 0 };
        off += SLOT_N[k];
    }
}

static void test_slots(void) {
    NEED_GPU();
    Rng r = rng_for(74, 0, 0);
    size_t n = 0;
    for (int k = 0; k < N_SLOTS; k++) n += SLOT_N[k];
    float *w = host_rand(n, &r, -1, 1), *g = host_rand(n, &r, -1, 1), *buf = host_rand(n, &r, -1, 1);
    // copy A goes through the slot launchers, copy B through per-tensor calls
    float *wa = to_dev(w, n), *ga = to_dev(g, n), *ba = to_dev(buf, n);
    float *wb = to_dev(w, n), *gb = to_dev(g, n), *bb = to_dev(buf, n);
    GpuSlot sa[N_SLOTS], sb[N_SLOTS];
    slots_point(sa, wa, ga, ba);
    slots_point(sb, wb, gb, bb);
    GpuSlots slots = optim_slots_upload(&dev, &dev.optim, sa, N_SLOTS);

    double per_tensor = 0.0, ref = 0.0;
    for (int k = 0; k < N_SLOTS; k++)
        if (SLOT_GROUP[k] >= 0) {
            per_tensor += grad_sumsq_gpu(&dev, sb[k].g, SLOT_N[k]);
            ref += grad_sumsq_cpu(g + (sb[k].g - gb), SLOT_N[k]);
        }
    double all = grad_sumsq_slots_gpu(&dev, slots);
    CHECK(memcmp(&all, &per_tensor, sizeof all) == 0, "sumsq slots %.17g, per tensor %.17g", all,
          per_tensor);
    CHECK(close_enough(all, ref, 0.0, 1e-12), "sumsq slots %.17g, cpu %.17g", all, ref);

    grad_scale_slots_gpu(&dev, slots, 0.5f);
    for (int k = 0; k < N_SLOTS; k++)
        if (SLOT_GROUP[k] >= 0) {
            grad_scale_gpu(&dev, sb[k].g, SLOT_N[k], 0.5f);
            grad_scale_cpu(g + (sb[k].g - gb), SLOT_N[k], 0.5f);
        }
    check_same("grad_scale slots", n, ga, g);
    check_same("grad_scale per tensor", n, gb, g);

    const float lr[3] = { 0.1f, 0.01f, 0.02f }, mu = 0.9f, wd = 5e-4f;
    for (int step = 0; step < 2; step++) {
        sgd_apply_slots_gpu(&dev, slots, lr, mu, wd, step == 0);
        for (int k = 0; k < N_SLOTS; k++) {
            int grp = SLOT_GROUP[k];
            if (grp < 0) continue;
            float kwd = grp == 1 ? wd : 0.0f;
            size_t off = sb[k].w - wb;
            sgd_apply_gpu(&dev, sb[k].w, sb[k].g, sb[k].buf, SLOT_N[k], lr[grp], mu, kwd, step == 0);
            sgd_apply_cpu(w + off, g + off, buf + off, SLOT_N[k], lr[grp], mu, kwd, step == 0);
        }
        if (step > 0) break;
        for (int k = 0; k < N_SLOTS; k++) {   // a second gradient, the same everywhere
            if (SLOT_GROUP[k] < 0) continue;
            size_t off = sb[k].w - wb;
            for (size_t i = 0; i < SLOT_N[k]; i++) g[off + i] = (float)rng_uniform(&r, -1, 1);
        }
        copy_floats(ga, g, n, cudaMemcpyHostToDevice);
        copy_floats(gb, g, n, cudaMemcpyHostToDevice);
    }
    check_same("sgd slots w (fixed slot untouched)", n, wa, w);
    check_same("sgd per tensor w", n, wb, w);
    check_same("sgd slots g", n, ga, g);
    check_same("sgd per tensor g", n, gb, g);
    float *fa = from_dev(ba, n), *fb = from_dev(bb, n);
    for (int k = 0; k < N_SLOTS; k++)   // the fixed slot's buf area is never written: skip it
        if (SLOT_GROUP[k] >= 0) {
            size_t off = sb[k].w - wb;
            CHECK(memcmp(fa + off, buf + off, SLOT_N[k] * 4) == 0, "sgd slots buf, slot %d", k);
            CHECK(memcmp(fb + off, buf + off, SLOT_N[k] * 4) == 0, "sgd per tensor buf, slot %d", k);
        }
    free(fa); free(fb); free(w); free(g); free(buf);
}

// The step's clipping without a host wait equals the host's: Σ g² read back, clip_grad_norm's coef on
// the host, the scale launch. With the norm above max_norm (a clip) and below it (none), from one
// sum and from two (the shards of reduce=sharded, added in order), bit for bit.
static void test_clip_queued(void) {
    NEED_GPU();
    Rng r = rng_for(75, 0, 0);
    size_t n = 0;
    for (int k = 0; k < N_SLOTS; k++) n += SLOT_N[k];
    double *sums;
    checkCuda(cudaMalloc((void **)&sums, 3 * sizeof(double)));
    for (int c = 0; c < 3; c++) {
        float gain = c == 1 ? 1e-4f : 1.0f;        // case 1: a norm of ~0.1, nothing to clip
        float *w = host_rand(n, &r, -1, 1), *g = host_rand(n, &r, -gain, gain), *buf = host_rand(n, &r, -1, 1);
        float *wa = to_dev(w, n), *ga = to_dev(g, n), *ba = to_dev(buf, n), *gb = to_dev(g, n);
        GpuSlot sa[N_SLOTS], sb[N_SLOTS];
        slots_point(sa, wa, ga, ba);
        slots_point(sb, wa, gb, ba);
        GpuSlots a = optim_slots_upload(&dev, &dev.optim, sa, N_SLOTS), b = optim_slots_upload(&dev, &dev.optim, sb, N_SLOTS);
        double other = c == 2 ? 1234.5 : 0;        // case 2: another shard's sum joins in
        double total_ss = grad_sumsq_slots_gpu(&dev, b) + other;
        float total = (float)sqrt(total_ss), coef = 1.0f / (total + 1e-6f) * 10.0f;
        if (coef < 1.0f) grad_scale_slots_gpu(&dev, b, coef);
        grad_sumsq_slots_to_gpu(&dev, a, sums);
        checkCuda(cudaMemcpy(sums + 1, &other, sizeof other, cudaMemcpyHostToDevice));
        grad_clip_slots_gpu(&dev, a, sums, c == 2 ? 2 : 1, 10.0f);
        device_sync(&dev);
        float *fa = from_dev(ga, n), *fb = from_dev(gb, n);
        CHECK(memcmp(fa, fb, n * sizeof(float)) == 0, "case %d: queued clip differs from the host's (norm %g, coef %g)",
              c, total, coef);
        CHECK(c == 1 ? coef >= 1.0f : coef < 1.0f, "case %d: coef %g (the case should %sclip)", c, coef, c == 1 ? "not " : "");
        size_t diff = 0;
        for (size_t i = 0; i < n; i++) diff += fa[i] != g[i];
        CHECK(c == 1 ? diff == 0 : diff > n / 2, "case %d: %zu of %zu gradients changed", c, diff, n);
        free(fa); free(fb); free(w); free(g); free(buf);
        arena_reset(&dev.acts);                    // wa, ga, ba, gb
    }
    checkCuda(cudaFree(sums));
}

// The loss normalisers from n devices' (main, aux) sums: max(Σ in order, 1), as the host adds them.
static void test_loss_norm(void) {
    NEED_GPU();
    const double src[8] = { 0.1, 0.2, 0.3, 0.25, 0.7, 0.1, 1e-3, 0.3 };
    double *d, out[2];
    checkCuda(cudaMalloc((void **)&d, 10 * sizeof(double)));
    checkCuda(cudaMemcpy(d, src, sizeof src, cudaMemcpyHostToDevice));
    for (int n = 1; n <= 4; n++) {
        loss_norm_gpu(&dev, d, n, d + 8);
        checkCuda(cudaMemcpy(out, d + 8, sizeof out, cudaMemcpyDeviceToHost));
        for (int h = 0; h < 2; h++) {
            double acc = 0;
            for (int k = 0; k < n; k++) acc += src[2 * k + h];
            double want = acc > 1 ? acc : 1;
            CHECK(memcmp(&out[h], &want, sizeof want) == 0, "n %d head %d: %.17g, host %.17g", n, h, out[h], want);
        }
    }
    checkCuda(cudaFree(d));
}

// ---- BN apply: (N,H,W,C) maps as channel slices [extra, extra+C) of buffers with guards ----

typedef struct { Map h, d; int extra; size_t total; } Pair;

static Pair pair_new(int N, int H, int W, int C, int extra, Rng *g, double lo, double hi) {
    Pair p;
    int ld = C + 2 * extra;
    p.extra = extra;
    p.total = (size_t)N * H * W * ld;
    float *hb = xmalloc(p.total * sizeof(float));
    for (size_t i = 0; i < p.total; i++) {
        int c = (int)(i % ld);
        hb[i] = c < extra || c >= extra + C ? GUARD : (float)rng_uniform(g, lo, hi);
    }
    p.h = (Map){ hb + extra, N, H, W, C, ld, 0, 0 };
    p.d = (Map){ to_dev(hb, p.total) + extra, N, H, W, C, ld, 0, 0 };
    return p;
}
static void pair_free(Pair p) { free(p.h.data - p.extra); }

// The device buffer, guards included, against the host one: bit for bit (tol 0) or to
// |gpu - cpu| <= tol·(max|cpu| + |cpu|), the CPU-vs-GPU fp32 bound at tol 1e-5.
static void compare(const char *what, Pair p, double tol) {
    float *got = from_dev(p.d.data - p.extra, p.total), *ref = p.h.data - p.extra;
    double maxref = 0.0, worst = 0.0;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < p.total; i++) maxref = fmax(maxref, fabs(ref[i] == GUARD ? 0 : ref[i]));
    for (size_t i = 0; i < p.total; i++) {
        double e = fabs((double)got[i] - ref[i]);
        int ok = tol == 0 ? memcmp(&got[i], &ref[i], sizeof(float)) == 0
                          : e <= tol * (maxref + fabs(ref[i]));
        if (!ok && !bad++) first = i;
        worst = fmax(worst, e);
    }
    CHECK(bad == 0, "%s: %zu of %zu differ (guards included); first [%zu] gpu %.9g cpu %.9g", what,
          bad, p.total, first, got[first], ref[first]);
    printf("# %-34s max|gpu-cpu|/max|cpu| = %.3g\n", what, maxref > 0 ? worst / maxref : worst);
    free(got);
}

// core/spec/model_run.c's bn_recompute loop, one rounding per statement
static void bn_apply_ref(Map z, const float *gamma, const float *beta, const float *mean,
                         const float *invstd, Map u) {
    for (size_t i = 0; i < map_pixels(z); i++)
        for (int c = 0; c < z.C; c++) {
            float t = z.data[i * z.ld + c] - mean[c];
            t = t * invstd[c];
            t = t * gamma[c];
            u.data[i * u.ld + c] = t + beta[c];
        }
}

typedef struct { int N, H, W, C, z_extra, u_extra; } BnCase;
static const BnCase BN_CASES[] = { { 2, 7, 5, 19, 3, 2 }, { 1, 1, 1, 1, 0, 0 },
                                   { 3, 13, 11, 64, 0, 5 }, { 2, 9, 9, 37, 4, 0 } };

typedef struct { Pair gamma, beta, mean, invstd; } BnStats;

static BnStats stats_new(int C, Rng *g) {
    BnStats s = { pair_new(1, 1, 1, C, 0, g, 0.5, 1.5), pair_new(1, 1, 1, C, 0, g, -0.5, 0.5),
                  pair_new(1, 1, 1, C, 0, g, -0.5, 0.5), pair_new(1, 1, 1, C, 0, g, 0.5, 2) };
    return s;
}
static void stats_free(BnStats s) {
    pair_free(s.gamma); pair_free(s.beta); pair_free(s.mean); pair_free(s.invstd);
}

static void test_bn_apply(void) {
    NEED_GPU();
    Rng r = rng_for(75, 0, 0);
    for (size_t k = 0; k < sizeof BN_CASES / sizeof *BN_CASES; k++) {
        const BnCase *b = &BN_CASES[k];
        BnStats s = stats_new(b->C, &r);
        Pair z = pair_new(b->N, b->H, b->W, b->C, b->z_extra, &r, -2, 2);
        Pair u = pair_new(b->N, b->H, b->W, b->C, b->u_extra, &r, -1, 1);
        bn_apply_ref(z.h, s.gamma.h.data, s.beta.h.data, s.mean.h.data, s.invstd.h.data, u.h);
        bn_apply_gpu(&dev, z.d, s.gamma.d.data, s.beta.d.data, s.mean.d.data, s.invstd.d.data, u.d);
        char what[64];
        snprintf(what, sizeof what, "bn_apply C=%d ld %d/%d", b->C, z.h.ld, u.h.ld);
        compare(what, u, 0.0);
        stats_free(s); pair_free(z); pair_free(u);
    }
}

// Fused du = dy·silu'(bn_apply(z)) against the CPU twins, into a slice, a contiguous temp and dy
// itself, and bit for bit against the unfused GPU pair (bn_apply_gpu, then silu_backward_gpu).
static void test_bn_apply_silu_backward(void) {
    NEED_GPU();
    Rng r = rng_for(76, 0, 0);
    for (size_t k = 0; k < sizeof BN_CASES / sizeof *BN_CASES; k++) {
        const BnCase *b = &BN_CASES[k];
        BnStats s = stats_new(b->C, &r);
        Pair z = pair_new(b->N, b->H, b->W, b->C, b->z_extra, &r, -4, 4);
        Pair dy = pair_new(b->N, b->H, b->W, b->C, b->u_extra, &r, -1, 1);
        Pair du = pair_new(b->N, b->H, b->W, b->C, b->u_extra, &r, -1, 1);
        Pair tmp = pair_new(b->N, b->H, b->W, b->C, 0, &r, -1, 1);
        Pair un = pair_new(b->N, b->H, b->W, b->C, 0, &r, -1, 1);
        const float *ga = s.gamma.d.data, *be = s.beta.d.data, *me = s.mean.d.data,
                    *is = s.invstd.d.data;
        bn_apply_ref(z.h, s.gamma.h.data, s.beta.h.data, s.mean.h.data, s.invstd.h.data, tmp.h);
        silu_backward_cpu(tmp.h, dy.h, du.h);
        silu_backward_cpu(tmp.h, dy.h, tmp.h);
        bn_apply_silu_backward_gpu(&dev, z.d, ga, be, me, is, dy.d, du.d);
        bn_apply_silu_backward_gpu(&dev, z.d, ga, be, me, is, dy.d, tmp.d);
        bn_apply_gpu(&dev, z.d, ga, be, me, is, un.d);
        silu_backward_gpu(&dev, un.d, dy.d, un.d);
        char what[64];
        snprintf(what, sizeof what, "bn_apply_silu_bwd C=%d slice", b->C);
        compare(what, du, 1e-5);
        snprintf(what, sizeof what, "bn_apply_silu_bwd C=%d temp", b->C);
        compare(what, tmp, 1e-5);
        float *fused = from_dev(tmp.d.data, tmp.total), *unfused = from_dev(un.d.data, un.total);
        CHECK(memcmp(fused, unfused, tmp.total * 4) == 0, "C=%d: fused differs from unfused", b->C);
        free(fused); free(unfused);
        bn_apply_ref(z.h, s.gamma.h.data, s.beta.h.data, s.mean.h.data, s.invstd.h.data, un.h);
        silu_backward_cpu(un.h, dy.h, dy.h);
        bn_apply_silu_backward_gpu(&dev, z.d, ga, be, me, is, dy.d, dy.d);   // du aliases dy
        snprintf(what, sizeof what, "bn_apply_silu_bwd C=%d in place", b->C);
        compare(what, dy, 1e-5);
        stats_free(s); pair_free(z); pair_free(dy); pair_free(du); pair_free(tmp); pair_free(un);
    }
}

// ---- conv bias gradient --------------------------------------------------------------------

// db += Σ dy over pixels for a 1x1 conv (only db asked: x and dx may be absent) against the CPU.
static void bias_case(int N, int H, int W, int K, int extra, Rng *r, int timed) {
    ConvDims d = conv_dims(N, 16, H, W, K, 1, 1, 0, 1);
    Pair dy = pair_new(N, H, W, K, extra, r, -1, 1), db = pair_new(1, 1, 1, K, 0, r, -1, 1);
    float *prior = to_dev(db.h.data, K);
    Map none = { NULL, N, H, W, 16, 16, 0, 0 };
    conv_backward_cpu(&d, none, NULL, dy.h, none, NULL, db.h.data, NULL);
    conv_backward_gpu(&dev, &d, none, NULL, dy.d, none, NULL, db.d.data);
    char what[64];
    snprintf(what, sizeof what, "conv db N=%d %dx%d K=%d ld %d", N, H, W, K, dy.h.ld);
    compare(what, db, 1e-6);
    float *first = from_dev(db.d.data, K);   // again from the same prior: the same bits
    copy_floats(db.d.data, prior, K, cudaMemcpyDeviceToDevice);
    conv_backward_gpu(&dev, &d, none, NULL, dy.d, none, NULL, db.d.data);
    check_same("conv db repeated", K, db.d.data, first);
    if (timed) {
        enum { REPS = 50 };
        cudaEvent_t t0, t1;
        checkCuda(cudaEventCreate(&t0));
        checkCuda(cudaEventCreate(&t1));
        checkCuda(cudaEventRecord(t0, dev.stream));
        for (int i = 0; i < REPS; i++)
            conv_backward_gpu(&dev, &d, none, NULL, dy.d, none, NULL, db.d.data);
        checkCuda(cudaEventRecord(t1, dev.stream));
        checkCuda(cudaEventSynchronize(t1));
        float ms = 0;
        checkCuda(cudaEventElapsedTime(&ms, t0, t1));
        printf("# conv bias grad N=%d %dx%d K=%d: %.4f ms/call, %.0f GB/s of dy\n", N, H, W, K,
               ms / REPS, map_floats(dy.h) * 4.0 / (ms / REPS * 1e6));
        checkCuda(cudaEventDestroy(t0));
        checkCuda(cudaEventDestroy(t1));
    }
    free(first); pair_free(dy); pair_free(db);
}

static void test_conv_bias_grad(void) {
    NEED_GPU();
    Rng r = rng_for(77, 0, 0);
    bias_case(1, 13, 11, 37, 3, &r, 0);    // odd sizes, a slice of dy
    bias_case(1, 1, 1, 5, 0, &r, 0);       // one pixel
    bias_case(8, 160, 160, 64, 0, &r, 1);  // a large map: where the old one-pass kernel was slow
}

GPU_MAIN()
#endif
