// test_gpu_conv_bn.c: gpu/conv_bn.cu, a 1x1 convolution that emits its BN statistics in its epilogue (issue 34),
// the GPU's Backend.unit.conv_bn_silu_forward_train under bf16. On 1x1 shapes with pixel counts that are not
// multiples of the 64-pixel tile (and more than 4096 tiles, so a block takes two), channel slices (ld > C), C not
// a multiple of the 32-channel slice, K from 16 to 256 (partial and several 64-channel tiles), and a map whose
// mean is far from zero:
// - z within 1 bf16 unit of the unfused GPU path's (cuBLAS's bf16 GEMM, which may add in another order) and of
//   the CPU's fp32 convolution of the same bf16 operands rounded once;
// - the saved statistics (mean, invstd) and the running ones within a tolerance of those the CPU composition
//   (conv_forward_cpu, bn_forward_train_cpu, silu_forward_cpu on z rounded to bf16) and the unfused GPU path give;
//   y within a few bf16 units;
// - two runs the same bits; a shape it does not take (C 12) is the unfused composition bit for bit;
// - the slot is in the GPU's table only with YT_CONV_STATS=1 (core/devices/backends.c; off by default until these
//   tests have run on a GPU), so by default the executor runs the unfused launches.
// A guard band after z and y must stay as it was. Failures print the case, the tensor, the worst index and both
// values.
// Legend: N batch, H,W size, C channels in, K channels out, P = N·H·W pixels, ld pixel stride.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/spec/backend.h"
#include "core/spec/musgd.h"   // bf16_round
#include "core/spec/ops.h"
#include "core/base/switches.h"
#include "core/base/util.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/ops.h"
#endif

#define GPU_TESTS(X) X(test_against_cpu) X(test_against_unfused) X(test_same_bits) X(test_fallback) \
    X(test_switch_off)
#define GPU_ARENAS { 0, 0, 0, (size_t)512 << 20, (size_t)256 << 20 }
#include "test/gpu_harness.h"
#ifdef USE_CUDA

static const float EPS = 1e-3f, MOMENTUM = 0.03f;
enum { GUARD_N = 4096, GUARD_BITS = 0x7f81 };   // bf16 values after z and y (a NaN no op writes) that must stay

// x: values in [lo, hi); w: in [wlo, whi). extra: x is the channel slice [extra, extra + C) of ld = C + 2·extra
typedef struct { int N, H, W, C, K, extra; float lo, hi, wlo, whi; const char *what; } Case;
static const Case CASES[] = {
    { 2, 9, 11, 16, 16, 0, -2, 2, -0.5f, 0.5f, "P 198 (a partial tile), C 16, K 16" },
    { 1, 7, 13, 24, 40, 8, -2, 2, -0.5f, 0.5f, "slice ld 40, K 40 (a partial channel tile)" },
    { 3, 20, 20, 64, 128, 0, -2, 2, -0.5f, 0.5f, "K 128: two channel tiles" },
    { 2, 17, 19, 40, 256, 16, -2, 2, -0.5f, 0.5f, "C 40 (a partial C slice), K 256, slice ld 72" },
    { 4, 40, 40, 128, 64, 0, -2, 2, -0.2f, 0.2f, "P 6400: whole tiles, C 128" },
    { 2, 31, 33, 32, 48, 0, 2, 3, 0.0f, 0.1f, "mean far from zero (cancellation)" },
    { 8, 80, 80, 64, 32, 0, -2, 2, -0.5f, 0.5f, "P 51200: 800 tile groups, several a finish thread" },
    { 3, 300, 300, 16, 16, 0, -2, 2, -0.5f, 0.5f, "P 270000: 2 tiles a group, a last group of 1 tile" },
};
enum { N_CASES = sizeof CASES / sizeof *CASES };


static void *to_dev(const void *h, size_t bytes) {
    void *d = arena_take(&dev.acts, bytes, 256);
    checkCuda(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}
static void from_dev(void *h, const void *d, size_t bytes) {
    device_sync(&dev);
    checkCuda(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

// One case's inputs on the host (bf16 values held as floats) and on the device.
typedef struct {
    ConvDims d;
    size_t P;
    float *x, *w, *gamma, *beta, *rm, *rv;    // host: x (P, ld), its C channels at extra; w (K, C) rounded
    Map dx;                                    // device x, bf16-stored slice
    float *dw, *dgamma, *dbeta;                // device, fp32 (the weights as the model holds them: fp32)
} Inputs;

static Inputs inputs_new(const Case *c, Rng *g) {
    Inputs in;
    int ld = c->C + 2 * c->extra;
    in.d = conv_dims(c->N, c->C, c->H, c->W, c->K, 1, 1, 0, 1);
    in.P = (size_t)c->N * c->H * c->W;
    size_t nx = in.P * ld, nw = (size_t)c->K * c->C;
    in.x = xmalloc(nx * sizeof(float));
    uint16_t *xb = xmalloc(nx * sizeof(uint16_t));
    for (size_t i = 0; i < nx; i++) in.x[i] = bf16_round((float)rng_uniform(g, c->lo, c->hi)), xb[i] = bf16_top_bits(in.x[i]);
    in.w = xmalloc(nw * sizeof(float));
    for (size_t i = 0; i < nw; i++) in.w[i] = bf16_round((float)rng_uniform(g, c->wlo, c->whi));
    in.gamma = xmalloc(c->K * sizeof(float)), in.beta = xmalloc(c->K * sizeof(float));
    in.rm = xmalloc(c->K * sizeof(float)), in.rv = xmalloc(c->K * sizeof(float));
    for (int k = 0; k < c->K; k++) {
        in.gamma[k] = (float)rng_uniform(g, 0.5, 1.5), in.beta[k] = (float)rng_uniform(g, -1, 1);
        in.rm[k] = (float)rng_uniform(g, -1, 1), in.rv[k] = (float)rng_uniform(g, 0.5, 1.5);
    }
    uint16_t *base = to_dev(xb, nx * sizeof(uint16_t));
    in.dx = (Map){ (float *)(base + c->extra), c->N, c->H, c->W, c->C, ld, 1, 0 };
    in.dw = to_dev(in.w, nw * sizeof(float));
    in.dgamma = to_dev(in.gamma, c->K * sizeof(float));
    in.dbeta = to_dev(in.beta, c->K * sizeof(float));
    free(xb);
    return in;
}
static void inputs_free(Inputs *in) { free(in->x); free(in->w); free(in->gamma); free(in->beta); free(in->rm); free(in->rv); }

// What a run gives, on the host: z and y (P, K) as floats, and the four statistics (K)
typedef struct { float *z, *y, *mean, *invstd, *rm, *rv; } Out;

static Out out_new(int K, size_t P) {
    Out o = { xmalloc(P * K * sizeof(float)), xmalloc(P * K * sizeof(float)), xmalloc(K * sizeof(float)),
              xmalloc(K * sizeof(float)), xmalloc(K * sizeof(float)), xmalloc(K * sizeof(float)) };
    return o;
}
static void out_free(Out *o) { free(o->z); free(o->y); free(o->mean); free(o->invstd); free(o->rm); free(o->rv); }

// The CPU composition on the same bf16 operands: conv in fp32, z rounded to bf16 as stored, BN + SiLU, y rounded
static Out run_cpu(const Inputs *in) {
    const ConvDims *d = &in->d;
    Out o = out_new(d->K, in->P);
    Map x = { in->x + (in->dx.ld - d->C) / 2, d->N, d->H, d->W, d->C, in->dx.ld, 0, 0 };   // the same slice
    Map z = map_make(o.z, d->N, d->P, d->Q, d->K), y = map_make(o.y, d->N, d->P, d->Q, d->K);
    float *ws = xmalloc((conv_workspace_floats(d) + 1) * sizeof(float));
    conv_forward_cpu(d, x, in->w, NULL, z, ws);
    for (size_t i = 0; i < in->P * d->K; i++) o.z[i] = bf16_round(o.z[i]);
    memcpy(o.rm, in->rm, d->K * sizeof(float));
    memcpy(o.rv, in->rv, d->K * sizeof(float));
    bn_forward_train_cpu(z, in->gamma, in->beta, EPS, MOMENTUM, o.rm, o.rv, o.mean, o.invstd, y);
    silu_forward_cpu(y, y);
    for (size_t i = 0; i < in->P * d->K; i++) o.y[i] = bf16_round(o.y[i]);
    free(ws);
    return o;
}

// The GPU under bf16, z and y bf16-stored: the fused slot (fused 1) or conv_forward_gpu + bn_silu_forward_train_gpu
static Out run_gpu(const Inputs *in, int fused) {
    const ConvDims *d = &in->d;
    size_t n = in->P * d->K, K = d->K;
    Out o = out_new(d->K, in->P);
    uint16_t *zb = arena_take(&dev.acts, (n + GUARD_N) * 2, 256), *yb = arena_take(&dev.acts, (n + GUARD_N) * 2, 256);
    uint16_t *guard = xmalloc(GUARD_N * 2);
    for (int i = 0; i < GUARD_N; i++) guard[i] = GUARD_BITS;
    checkCuda(cudaMemcpy(zb + n, guard, GUARD_N * 2, cudaMemcpyHostToDevice));
    checkCuda(cudaMemcpy(yb + n, guard, GUARD_N * 2, cudaMemcpyHostToDevice));
    float *st = arena_take(&dev.acts, 4 * K * sizeof(float), 256);
    checkCuda(cudaMemcpy(st + 2 * K, in->rm, K * sizeof(float), cudaMemcpyHostToDevice));
    checkCuda(cudaMemcpy(st + 3 * K, in->rv, K * sizeof(float), cudaMemcpyHostToDevice));
    Map z = { (float *)zb, d->N, d->P, d->Q, d->K, d->K, 1, 0 }, y = z;
    y.data = (float *)yb;
    BnTrain bn = { in->dgamma, in->dbeta, st + 2 * K, st + 3 * K, st, st + K };
    if (fused) {
        conv_bn_silu_forward_train_gpu(&dev, d, in->dx, in->dw, z, &bn, EPS, MOMENTUM, y);
    } else {
        Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
        conv_forward_gpu(&dev, d, in->dx, in->dw, NULL, z);
        bn_silu_forward_train_gpu(&dev, z, bn.gamma, bn.beta, EPS, MOMENTUM, bn.running_mean, bn.running_var, bn.mean,
                                  bn.invstd, none, y);
    }
    uint16_t *h = xmalloc((n + GUARD_N) * 2);
    for (int k = 0; k < 2; k++) {   // nothing written past z or y
        from_dev(h, (k ? yb : zb) + n, GUARD_N * 2);
        int kept = 0;
        for (int i = 0; i < GUARD_N; i++) kept += h[i] == GUARD_BITS;
        CHECK(kept == GUARD_N, "%s: %d of the %d guard values after %s overwritten", fused ? "fused" : "unfused",
              GUARD_N - kept, GUARD_N, k ? "y" : "z");
    }
    free(guard);
    from_dev(h, zb, n * 2);
    for (size_t i = 0; i < n; i++) o.z[i] = bf16_from_bits(h[i]);
    from_dev(h, yb, n * 2);
    for (size_t i = 0; i < n; i++) o.y[i] = bf16_from_bits(h[i]);
    float *s = xmalloc(4 * K * sizeof(float));
    from_dev(s, st, 4 * K * sizeof(float));
    memcpy(o.mean, s, K * 4), memcpy(o.invstd, s + K, K * 4), memcpy(o.rm, s + 2 * K, K * 4), memcpy(o.rv, s + 3 * K, K * 4);
    free(h); free(s);
    return o;
}

// bf16 units between two bf16 values (their bit patterns as ordered integers)
static int ulps(float a, float b) {
    int ia = bf16_top_bits(a), ib = bf16_top_bits(b);
    ia = ia & 0x8000 ? 0x8000 - ia : ia;
    ib = ib & 0x8000 ? 0x8000 - ib : ib;
    return abs(ia - ib);
}

// Each of n within max bf16 units, or, where the sum cancelled to near zero (its fp32 terms added in another
// order move it by more units there), within 2^-20 of the largest |ref| (measured on an H100: 2-8 units at
// |z| ~ 1e-5 .. 5e-7, 2.4e-7 apart at most, against a kernel bit for bit the unfused GPU path's)
static void within_ulps(const char *what, const char *part, const float *got, const float *ref, size_t n, int max) {
    size_t bad = 0, worst = 0, differ = 0;
    int wu = 0;
    float big = 0;
    for (size_t i = 0; i < n; i++) big = fmaxf(big, fabsf(ref[i]));
    double floor_abs = ldexp(big, -20);
    for (size_t i = 0; i < n; i++) {
        int u = ulps(got[i], ref[i]);
        differ += u > 0;
        if (u > wu) wu = u, worst = i;
        bad += u > max && !(fabs((double)got[i] - ref[i]) <= floor_abs);
    }
    CHECK(bad == 0, "%s %s: %zu of %zu more than %d bf16 units (and 2^-20 of the largest) apart; worst [%zu] got %.8g "
          "ref %.8g (%d units)", what, part, bad, n, max, worst, got[worst], ref[worst], wu);
    printf("#   %-52s %-2s %zu of %zu differ, worst %d bf16 units\n", what, part, differ, n, wu);
}

// |got - ref| <= atol + rtol·|ref| for each of n, atol scaled per element by scale[i] (NULL: 1)
static void within(const char *what, const char *part, const float *got, const float *ref, const float *scale,
                   size_t n, double atol, double rtol) {
    size_t bad = 0, worst = 0;
    double we = -1;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]), a = atol * (scale ? scale[i] : 1.0);
        if (!close_enough(got[i], ref[i], a, rtol) || isnan(got[i])) bad++;
        if (e > we || isnan(e)) we = e, worst = i;
    }
    CHECK(bad == 0, "%s %s: %zu of %zu out of tolerance; worst [%zu] got %.9g ref %.9g (err %.3g)", what, part, bad, n,
          worst, got[worst], ref[worst], we);
}

// got against ref: z within zulps bf16 units, the statistics within tolerance (mean to 1e-4 of the channel's
// spread: 1/invstd), y within a few bf16 units plus what a 1-unit change of z moves it
static void compare(const char *what, const Out *got, const Out *ref, int K, size_t P, int zulps) {
    within_ulps(what, "z", got->z, ref->z, P * K, zulps);
    float *sd = xmalloc(K * sizeof(float));
    for (int k = 0; k < K; k++) sd[k] = 1.0f / ref->invstd[k];
    within(what, "mean", got->mean, ref->mean, sd, K, 1e-4, 1e-5);
    within(what, "invstd", got->invstd, ref->invstd, NULL, K, 0, 1e-4);
    within(what, "running_mean", got->rm, ref->rm, sd, K, 1e-5, 1e-5);
    within(what, "running_var", got->rv, ref->rv, NULL, K, 0, 1e-4);
    float maxy = 0;
    for (size_t i = 0; i < P * K; i++) maxy = fmaxf(maxy, fabsf(ref->y[i]));
    within(what, "y", got->y, ref->y, NULL, P * K, 4e-3 * maxy, 2e-2);
    free(sd);
}

static void bf16_device(void) {
    dev.precision = GPU_BF16;
    dev.wbf16_n = 0;   // no pass's weight copy: each call rounds its own
}

static void test_against_cpu(void) {
    NEED_GPU();
    bf16_device();
    Rng g = rng_for(34, 1, 0);
    for (int i = 0; i < N_CASES; i++) {
        const Case *c = &CASES[i];
        arena_reset(&dev.acts);
        Inputs in = inputs_new(c, &g);
        Map zprobe = { in.dx.data, c->N, c->H, c->W, c->K, c->K, 1, 0 };   // a contiguous bf16 z, 16-byte aligned
        CHECK(conv_bn_fits_gpu(&dev, &in.d, in.dx, zprobe), "%s: the fused kernel does not take it", c->what);
        Out ref = run_cpu(&in), got = run_gpu(&in, 1);
        compare(c->what, &got, &ref, c->K, in.P, 1);
        out_free(&ref); out_free(&got);
        inputs_free(&in);
    }
}

static void test_against_unfused(void) {
    NEED_GPU();
    bf16_device();
    Rng g = rng_for(34, 2, 0);
    for (int i = 0; i < N_CASES; i++) {
        const Case *c = &CASES[i];
        arena_reset(&dev.acts);
        Inputs in = inputs_new(c, &g);
        Out ref = run_gpu(&in, 0), got = run_gpu(&in, 1);
        compare(c->what, &got, &ref, c->K, in.P, 1);
        out_free(&ref); out_free(&got);
        inputs_free(&in);
    }
}

static void same(const char *what, const char *part, const float *a, const float *b, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) && !bad++) first = i;
    CHECK(bad == 0, "%s %s: %zu of %zu differ between the two runs; first [%zu] %.9g vs %.9g", what, part, bad, n, first,
          a[first], b[first]);
}
static void same_out(const char *what, const Out *a, const Out *b, int K, size_t P) {
    same(what, "z", a->z, b->z, P * K), same(what, "y", a->y, b->y, P * K);
    same(what, "mean", a->mean, b->mean, K), same(what, "invstd", a->invstd, b->invstd, K);
    same(what, "running_mean", a->rm, b->rm, K), same(what, "running_var", a->rv, b->rv, K);
}

static void test_same_bits(void) {
    NEED_GPU();
    bf16_device();
    Rng g = rng_for(34, 3, 0);
    for (int i = 0; i < N_CASES; i++) {
        const Case *c = &CASES[i];
        arena_reset(&dev.acts);
        Inputs in = inputs_new(c, &g);
        Out a = run_gpu(&in, 1), b = run_gpu(&in, 1);
        same_out(c->what, &a, &b, c->K, in.P);
        out_free(&a); out_free(&b);
        inputs_free(&in);
    }
}

// Shapes the kernel does not take run the composition, bit for bit
static void test_fallback(void) {
    NEED_GPU();
    bf16_device();
    Rng g = rng_for(34, 4, 0);
    static const Case odd[] = { { 2, 9, 9, 12, 20, 0, -2, 2, -0.5f, 0.5f, "C 12, K 20 (not multiples of 8)" },
                                { 1, 8, 8, 16, 24, 1, -2, 2, -0.5f, 0.5f, "slice at 1 channel (unaligned x)" } };
    for (int i = 0; i < 2; i++) {
        arena_reset(&dev.acts);
        Inputs in = inputs_new(&odd[i], &g);
        Map zprobe = { in.dx.data, in.d.N, in.d.P, in.d.Q, in.d.K, in.d.K, 1, 0 };
        CHECK(!conv_bn_fits_gpu(&dev, &in.d, in.dx, zprobe), "%s: taken by the fused kernel", odd[i].what);
        Out a = run_gpu(&in, 1), b = run_gpu(&in, 0);
        same_out(odd[i].what, &a, &b, odd[i].K, in.P);
        out_free(&a); out_free(&b);
        inputs_free(&in);
    }
}

// Unset or 0: the GPU's table without the slot (the executor composes the unit); YT_CONV_STATS=1: with it
static void test_switch_off(void) {
    test_switch(SW_CONV_STATS, "1");
    const Backend *on = backend_gpu_get();
    test_switch(SW_CONV_STATS, "0");
    const Backend *off = backend_gpu_get();
    test_switch(SW_CONV_STATS, NULL);
    const Backend *dflt = backend_gpu_get();
    CHECK(off && !off->unit.conv_bn_silu_forward_train, "YT_CONV_STATS=0 leaves conv_bn_silu_forward_train in the table");
    CHECK(dflt && !dflt->unit.conv_bn_silu_forward_train, "the default table has conv_bn_silu_forward_train");
    CHECK(off && off->unit.bn_silu_forward_train && off->fused.repconv_forward_train,
          "YT_CONV_STATS=0 took other fused forms out too");
    CHECK(on && on->unit.conv_bn_silu_forward_train, "YT_CONV_STATS=1 gives no conv_bn_silu_forward_train");
}

GPU_MAIN()
#endif
