// test_backend_ops.c: every entry of the backend table's op sub-tables (Backend.ops, .unit, .fused) on every
// backend present, in the style of ggml's tests/test-backend-ops.cpp: fixed and random small shapes (fixed
// seed), channel slices (ld > C) with guard values checked after each op, outputs that accumulate (+=) onto
// random priors. The reference is the plain CPU functions of core/ called directly, not through any
// backend's table, so a slot swapped in the CPU's table fails as one in the GPU's would. The CPU backend is
// held to the bit; a GPU (built with CUDA, one present; else a skip) to |gpu - cpu| <= arel·max|cpu| +
// rtol·|cpu| (test/test.h). A unit or fused entry a backend leaves NULL is composed by the executor; where
// a backend states one, it is checked against the reference composition (core/spec/model_run.c's order) and,
// where the executor's YT_FUSE=0 runs rely on it, to the bit against the same composition of that
// backend's own ops.
//   test_backend_ops             check every entry on every backend present
//   test_backend_ops perf [OP]   time every entry (or OP, e.g. conv_forward) on each backend, larger shapes
// Legend: N batch, C/K channels, H,W in, P,Q out, k kernel, G groups.
#include <stdint.h>
#include <string.h>

#include "core/spec/backend.h"
#include "core/spec/ops.h"
#include "core/spec/ops26.h"
#include "core/base/util.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/device.h"
#endif

static const float GUARD = -777.0f;   // fills every element outside a slice; must survive each op
static const float EPS = 1e-3f, MOMENTUM = 0.03f;

// ---- backends ---------------------------------------------------------------------------------

// bf16: the backend's ops take bf16-stored maps (Map.bf16; the GPU's), so the cases that have them run there
typedef struct { const char *name; const Backend *be; void *ctx; int exact, bf16; } Target;
typedef struct { double rtol, arel; } Tol;
static const Tol FP32 = { 1e-4, 1e-5 };
// A bf16-stored output: FP32's, plus one rounding to bf16 (at most half a unit, 2^-8 of the value), which a
// value within FP32's of the reference may take to the neighbour on the other side
static const Tol BF16 = { 1.0 / 256 + 1e-4, 1e-5 };

static Target targets[2];
static int n_targets;
#ifdef USE_CUDA
static Device dev;
#endif

static void targets_init(void) {
    targets[n_targets++] = (Target){ "cpu", &backend_cpu, NULL, 1, 0 };
#ifdef USE_CUDA
    GpuInfo info;
    Err err;
    size_t bytes[ARENA_COUNT] = { 0, 0, 0, (size_t)256 << 20, (size_t)256 << 20 };   // as test_gpu_ops
    if (gpu_list(&info, 1) > 0 && device_init(&dev, 0, bytes, &err) == 0) {
        dev.precision = GPU_FP32;                  // the reference precision (TF32 off)
        targets[n_targets++] = (Target){ "cuda", backend_gpu_get(), &dev, 0, 1 };
    } else {
        printf("# no GPU: the GPU backend skipped\n");
    }
#else
    printf("# no CUDA in this build: the GPU backend skipped\n");
#endif
}

static void targets_free(void) {
#ifdef USE_CUDA
    if (n_targets > 1) device_free(&dev);
#endif
}

// ---- tensors: a host buffer, and its copy in a backend's memory --------------------------------

// One (N,H,W,C) map as the channel slice [extra, extra + C) of a buffer with ld = C + 2·extra, GUARD outside
// the slice; vectors are (1,1,1,n) maps.
typedef struct { float *base; size_t total; int extra; Map m; } T;

static T t_new(int N, int H, int W, int C, int extra) {
    T t = { NULL, (size_t)N * H * W * (C + 2 * extra), extra, { 0 } };
    t.base = xmalloc((t.total + 1) * sizeof(float));
    for (size_t i = 0; i < t.total; i++) t.base[i] = GUARD;
    t.m = (Map){ t.base + extra, N, H, W, C, C + 2 * extra, 0, 0 };
    return t;
}
static T t_vec(int n) { return t_new(1, 1, 1, n, 0); }
static float *at(Map m, size_t j) { return m.data + (j / m.C) * m.ld + j % m.C; }
static void t_rand(T t, Rng *g, double lo, double hi) {
    for (size_t j = 0; j < map_floats(t.m); j++) *at(t.m, j) = (float)rng_uniform(g, lo, hi);
}

// h's buffer copied into tg's memory (guards included)
static T t_on(const Target *tg, T h) {
    T d = h;
    d.base = tg->be->dev.buffer_new(tg->ctx, h.total + 1);
#ifdef USE_CUDA
    if (tg->ctx == &dev) checkCuda(cudaDeviceSynchronize());   // the zeroing, on a stream dev.stream does not follow
#endif
    tg->be->dev.upload(tg->ctx, d.base, h.base, h.total);
    d.m.data = d.base + h.extra;
    return d;
}
static void t_drop(const Target *tg, T d) { tg->be->dev.buffer_free(tg->ctx, d.base); }

// bf16_round (core/spec/musgd.h): to the nearest bf16, ties to even, as __float2bfloat16
static void t_round_bf16(T t) {
    for (size_t j = 0; j < map_floats(t.m); j++) *at(t.m, j) = bf16_round(*at(t.m, j));
}
// Floats that hold a buffer of n bf16 values
static size_t bf16_floats(size_t n) { return n / 2 + 1; }

// h's buffer copied into tg's memory as a bf16-stored map (Map.bf16; every value rounded, guards included)
static T t_on_bf16(const Target *tg, T h) {
    T d = h;
    size_t nf = bf16_floats(h.total);
    uint16_t *p = xcalloc(nf, sizeof(float));
    for (size_t i = 0; i < h.total; i++) p[i] = bf16_top_bits(bf16_round(h.base[i]));
    d.base = tg->be->dev.buffer_new(tg->ctx, nf);
#ifdef USE_CUDA
    if (tg->ctx == &dev) checkCuda(cudaDeviceSynchronize());
#endif
    tg->be->dev.upload(tg->ctx, d.base, (const float *)p, nf);
    d.m.data = (float *)((uint16_t *)d.base + h.extra);
    d.m.bf16 = 1;
    free(p);
    return d;
}

// d's whole buffer (guards included) from tg's memory as floats (a bf16-stored one widened)
static float *t_fetch(const Target *tg, T d) {
    float *got = xmalloc((d.total + 1) * sizeof(float));
    if (!d.m.bf16) {
        tg->be->dev.download(tg->ctx, got, d.base, d.total);
        return got;
    }
    size_t nf = bf16_floats(d.total);
    uint16_t *p = xmalloc(nf * sizeof(float));
    tg->be->dev.download(tg->ctx, (float *)p, d.base, nf);
    for (size_t i = 0; i < d.total; i++) got[i] = bf16_from_bits(p[i]);
    free(p);
    return got;
}

// d (in tg's memory) against the reference ref: every guard kept, each element within tol (the CPU: the
// same bits). Failures print the worst element and the first five pairs.
static void t_check(const Target *tg, const char *what, T d, T ref, Tol tol) {
    float *got = t_fetch(tg, d), guard = d.m.bf16 ? bf16_round(GUARD) : GUARD;
    Map g = ref.m;
    g.data = got + ref.extra;
    size_t bad_guards = 0, bad = 0, worst = 0, n = map_floats(ref.m);
    for (size_t i = 0; i < d.total; i++) {
        int c = (int)(i % ref.m.ld);
        if ((c < ref.extra || c >= ref.extra + ref.m.C) && got[i] != guard) bad_guards++;
    }
    double maxref = 0.0, worst_err = -1.0;
    for (size_t j = 0; j < n; j++) maxref = fmax(maxref, fabs(*at(ref.m, j)));
    for (size_t j = 0; j < n; j++) {
        float a = *at(g, j), b = *at(ref.m, j);
        double e = fabs((double)a - b);
        int ok = tg->exact ? !memcmp(&a, &b, sizeof a) : close_enough(a, b, tol.arel * maxref, tol.rtol);
        if (!ok) bad++;
        if (e > worst_err || isnan(e)) { worst_err = e; worst = j; }
    }
    CHECK(bad_guards == 0, "%s %s: %zu guard values outside the slice were overwritten", tg->name, what,
          bad_guards);
    CHECK(bad == 0, "%s %s: %zu of %zu differ%s; worst [%zu] got %.8g ref %.8g, max err %.3g, max|ref| %.3g",
          tg->name, what, bad, n, tg->exact ? " (held to the bit)" : "", worst, *at(g, worst), *at(ref.m, worst),
          worst_err, maxref);
    for (size_t j = 0, shown = 0; bad && j < n && shown < 5; j++) {
        float a = *at(g, j), b = *at(ref.m, j);
        if (tg->exact ? !memcmp(&a, &b, sizeof a) : close_enough(a, b, tol.arel * maxref, tol.rtol)) continue;
        printf("      [%zu] got %.8g ref %.8g\n", j, a, b);
        shown++;
    }
    free(got);
}

// Whether two buffers in tg's memory hold the same bits (guards included).
static int t_same(const Target *tg, T a, T b) {
    float *x = xmalloc((a.total + 1) * sizeof(float)), *y = xmalloc((b.total + 1) * sizeof(float));
    tg->be->dev.download(tg->ctx, x, a.base, a.total);
    tg->be->dev.download(tg->ctx, y, b.base, b.total);
    int same = a.total == b.total && !memcmp(x, y, a.total * sizeof(float));
    free(x); free(y);
    return same;
}

// A case's tensors: the host ones (inputs, then the reference's outputs) and their copies on the target.
enum { MAX_T = 40 };
typedef struct { const Target *tg; T h[MAX_T], d[MAX_T]; int n; } Set;

static int set_add(Set *s, T h) {
    s->h[s->n] = h;
    s->d[s->n] = t_on(s->tg, h);
    return s->n++;
}
// bf16: the target's copy bf16-stored, and the host's values rounded to bf16 first (the reference reads them)
static int set_add_as(Set *s, T h, int bf16) {
    if (!bf16) return set_add(s, h);
    t_round_bf16(h);
    s->h[s->n] = h;
    s->d[s->n] = t_on_bf16(s->tg, h);
    return s->n++;
}
static void set_free(Set *s) {
    for (int i = 0; i < s->n; i++) t_drop(s->tg, s->d[i]), free(s->h[i].base);
    s->n = 0;
}

// ---- timing (perf mode) -----------------------------------------------------------------------

static int perf_reps;           // 0: check; else the repeats each timed call makes
static double perf_seconds;     // the last timed call's seconds per repeat
static double perf_composed;    // a fused form's composition of the backend's own ops, likewise (0: none)

// Runs `call` once (check), or after one warm-up perf_reps times between two waits, its seconds per call
// into `secs` (perf).
#define OP_TIME(tg, secs, call)                                                  \
    do {                                                                         \
        call;                                                                    \
        if (!perf_reps) break;                                                   \
        (tg)->be->dev.sync((tg)->ctx);                                           \
        double t0_ = now_seconds();                                              \
        for (int r_ = 0; r_ < perf_reps; r_++) { call; }                         \
        (tg)->be->dev.sync((tg)->ctx);                                           \
        secs = (now_seconds() - t0_) / perf_reps;                                \
    } while (0)
#define OP_RUN(tg, call) OP_TIME(tg, perf_seconds, call)

// ---- shapes -----------------------------------------------------------------------------------

typedef struct { int N, H, W, C, extra; } Shape;
// A fixed list first (odd C, four and two channels a thread, many channels, one pixel; 135,200 pixels: more
// partial sums than one pass finishes, gpu/bn.cu), then random small shapes from the case's generator.
static const Shape FIXED[] = { { 3, 7, 7, 13, 2 }, { 1, 13, 13, 37, 0 }, { 1, 1, 1, 5, 1 }, { 2, 5, 7, 8, 4 },
                               { 1, 3, 3, 6, 2 }, { 1, 9, 9, 200, 0 }, { 2, 260, 260, 12, 4 } };
enum { N_FIXED = sizeof FIXED / sizeof *FIXED, N_RANDOM = 3 };
static const Shape PERF_SHAPE = { 8, 80, 80, 64, 0 };

static Shape shape_at(int i, Rng *g) {
    if (perf_reps) return PERF_SHAPE;
    if (i < N_FIXED) return FIXED[i];
    return (Shape){ 1 + rng_int(g, 3), 1 + rng_int(g, 13), 1 + rng_int(g, 13), 1 + rng_int(g, 40), rng_int(g, 4) };
}
static int shape_count(void) { return perf_reps ? 1 : N_FIXED + N_RANDOM; }

static T map_of(Shape s, int extra) { return t_new(s.N, s.H, s.W, s.C, extra); }

static void label(char *buf, size_t size, const char *op, Shape s, const char *part) {
    snprintf(buf, size, "%s %dx%dx%dx%d+%d %s", op, s.N, s.H, s.W, s.C, s.extra, part);
}

// ---- the executor's compositions, through a backend's own ops (core/spec/model_run.c's order) -----

// The reference backend: the plain core/ functions, in a table of the test's own (not backend_cpu's).
static void r_bn_train(void *c, Map z, const float *g, const float *b, float eps, float mom, float *rm, float *rv,
                       float *mean, float *invstd, Map u) {
    bn_forward_train_cpu(z, g, b, eps, mom, rm, rv, mean, invstd, u);
}
static void r_bn_eval(void *c, Map z, const float *g, const float *b, float eps, const float *rm, const float *rv,
                      Map u) {
    bn_forward_eval_cpu(z, g, b, eps, rm, rv, u);
}
static void r_bn_bwd(void *c, Map z, const float *g, const float *mean, const float *invstd, Map du, Map dz,
                     float *dg, float *db) {
    bn_backward_cpu(z, g, mean, invstd, du, dz, dg, db);
}
static void r_bn_apply(void *c, Map z, const float *g, const float *b, const float *mean, const float *invstd, Map u) {
    bn_apply_cpu(z, g, b, mean, invstd, u);
}
static void r_silu_fwd(void *c, Map u, Map y) { silu_forward_cpu(u, y); }
static void r_silu_bwd(void *c, Map u, Map dy, Map du) { silu_backward_cpu(u, dy, du); }
static void r_add(void *c, Map a, Map b, Map y) { add_forward_cpu(a, b, y); }
static void r_accumulate(void *c, Map s, Map d) { accumulate_map_cpu(s, d); }
static void r_conv_bwd(void *c, const ConvDims *d, Map x, const float *w, Map dy, Map dx, float *dw, float *db,
                       float *ws) {
    conv_backward_cpu(d, x, w, dy, dx, dw, db, ws);
}
static void r_upload(void *c, float *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof(float)); }
static float *r_buffer_new(void *c, size_t n) { return xcalloc(n, sizeof(float)); }
static void r_buffer_free(void *c, float *p) { free(p); }
static void r_sync(void *c) {}
static const Backend ref_be = {
    .name = "reference",
    .ops = { .bn_forward_train = r_bn_train, .bn_forward_eval = r_bn_eval, .bn_backward = r_bn_bwd,
             .bn_apply = r_bn_apply, .silu_forward = r_silu_fwd, .silu_backward = r_silu_bwd, .add_forward = r_add,
             .accumulate_map = r_accumulate, .conv_backward = r_conv_bwd },
    .dev = { .upload = r_upload, .download = r_upload, .buffer_new = r_buffer_new, .buffer_free = r_buffer_free,
             .sync = r_sync },
};
static const Target REF = { "reference", &ref_be, NULL, 1, 0 };

static void compose_bn_silu_train(const Target *tg, Map z, const BnTrain *b, Map y) {
    const BackendOps *o = &tg->be->ops;
    o->bn_forward_train(tg->ctx, z, b->gamma, b->beta, EPS, MOMENTUM, b->running_mean, b->running_var, b->mean,
                        b->invstd, y);
    o->silu_forward(tg->ctx, y, y);
}
static void compose_bn_silu_eval(const Target *tg, Map z, const float *g, const float *b, const float *rm,
                                 const float *rv, Map y) {
    tg->be->ops.bn_forward_eval(tg->ctx, z, g, b, EPS, rm, rv, y);
    tg->be->ops.silu_forward(tg->ctx, y, y);
}
static void compose_conv_bn_bwd(const Target *tg, const ConvDims *d, Map x, const float *w, Map z, const BnSaved *bn,
                                Map du, Map dz, Map dx, float *dw, float *ws) {
    tg->be->ops.bn_backward(tg->ctx, z, bn->gamma, bn->mean, bn->invstd, du, dz, bn->dgamma, bn->dbeta);
    tg->be->ops.conv_backward(tg->ctx, d, x, w, dz, dx, dw, NULL, ws);
}
static void compose_conv_bn_silu_bwd(const Target *tg, const ConvDims *d, Map x, const float *w, Map z,
                                     const BnSaved *bn, Map dy, Map tmp, Map dz, Map dx, float *dw, float *ws) {
    tg->be->ops.bn_apply(tg->ctx, z, bn->gamma, bn->beta, bn->mean, bn->invstd, tmp);
    tg->be->ops.silu_backward(tg->ctx, tmp, dy, tmp);
    compose_conv_bn_bwd(tg, d, x, w, z, bn, tmp, dz, dx, dw, ws);
}
static void compose_repconv_train(const Target *tg, Map z1, const BnTrain *b1, Map z2, const BnTrain *b2, Map u,
                                  Map tmp, Map y) {
    const BackendOps *o = &tg->be->ops;
    o->bn_forward_train(tg->ctx, z1, b1->gamma, b1->beta, EPS, MOMENTUM, b1->running_mean, b1->running_var,
                        b1->mean, b1->invstd, u);
    o->bn_forward_train(tg->ctx, z2, b2->gamma, b2->beta, EPS, MOMENTUM, b2->running_mean, b2->running_var,
                        b2->mean, b2->invstd, tmp);
    o->accumulate_map(tg->ctx, tmp, u);   // the branches added in fp32, then rounded once by the SiLU
    o->silu_forward(tg->ctx, u, y);
}
static void compose_repconv_silu_bwd(const Target *tg, Map z1, const BnSaved *b1, Map z2, const BnSaved *b2, Map dy,
                                     Map tmp, Map du) {
    const BackendOps *o = &tg->be->ops;
    o->bn_apply(tg->ctx, z1, b1->gamma, b1->beta, b1->mean, b1->invstd, du);
    o->bn_apply(tg->ctx, z2, b2->gamma, b2->beta, b2->mean, b2->invstd, tmp);
    o->accumulate_map(tg->ctx, tmp, du);
    o->silu_backward(tg->ctx, du, dy, du);
}
// The residual: the unit's own fused form where the backend has one, as the executor runs it
static void compose_bn_silu_add(const Target *tg, Map z, const BnTrain *b, Map a, Map y, Map out) {
    if (tg->be->unit.bn_silu_forward_train)
        tg->be->unit.bn_silu_forward_train(tg->ctx, z, b->gamma, b->beta, EPS, MOMENTUM, b->running_mean,
                                           b->running_var, b->mean, b->invstd, y);
    else
        compose_bn_silu_train(tg, z, b, y);
    tg->be->ops.add_forward(tg->ctx, a, y, out);
}

// ---- the cases: one shape of one entry on one backend ------------------------------------------

typedef void (*CaseFn)(const Target *tg, Rng *g, int i);

#define H(k) (s.h[k].m)
#define D(k) (s.d[k].m)
#define HP(k) (s.h[k].m.data)
#define DP(k) (s.d[k].m.data)
#define CHECK_OUT(k, part, tol) do { char l_[128]; label(l_, sizeof l_, op, sh, part); \
                                     if (!perf_reps) t_check(tg, l_, s.d[k], s.h[k], tol); } while (0)

// conv: fixed cases (3x3 slices in and out, stride 2 groups 4, depthwise, pointwise, the C=3 stem) then random
typedef struct { int N, C, H, W, K, k, stride, pad, groups, x_extra, y_extra; } ConvCase;
static const ConvCase CONV_CASES[] = {
    { 3, 13, 13, 13, 19, 3, 1, 1, 1, 3, 2 }, { 1, 12, 7, 7, 20, 3, 2, 1, 4, 0, 5 }, { 3, 10, 13, 13, 10, 5, 1, 2, 10, 1, 1 },
    { 3, 21, 13, 13, 11, 1, 1, 0, 1, 4, 3 }, { 2, 3, 17, 17, 16, 3, 2, 1, 1, 1, 2 },
};
static ConvCase conv_case_at(int i, Rng *g) {
    if (perf_reps) return (ConvCase){ 8, 64, 80, 80, 64, 3, 1, 1, 1, 0, 0 };
    if (i < (int)(sizeof CONV_CASES / sizeof *CONV_CASES)) return CONV_CASES[i];
    int k = 1 + 2 * rng_int(g, 2), G = 1 + rng_int(g, 2);
    return (ConvCase){ 1 + rng_int(g, 3), G * (1 + rng_int(g, 12)), k + rng_int(g, 11), k + rng_int(g, 11),
                       G * (1 + rng_int(g, 12)), k, 1 + rng_int(g, 2), k / 2, G, rng_int(g, 4), rng_int(g, 4) };
}

static void conv_case(const Target *tg, Rng *g, int i, int backward) {
    ConvCase c = conv_case_at(i, g);
    ConvDims d = conv_dims(c.N, c.C, c.H, c.W, c.K, c.k, c.stride, c.pad, c.groups);
    size_t nw = (size_t)d.K * (d.C / d.groups) * d.R * d.S;
    Shape sh = { d.N, d.P, d.Q, d.K, c.y_extra };
    const char *op = backward ? "conv_backward" : "conv_forward";
    Set s = { .tg = tg };
    T x = t_new(d.N, d.H, d.W, d.C, c.x_extra), w = t_vec((int)nw), b = t_vec(d.K), y = map_of(sh, c.y_extra);
    T dx = t_new(d.N, d.H, d.W, d.C, c.x_extra), dw = t_vec((int)nw), db = t_vec(d.K);
    t_rand(x, g, -1, 1); t_rand(w, g, -0.5, 0.5); t_rand(b, g, -1, 1); t_rand(y, g, -1, 1);
    t_rand(dx, g, -1, 1); t_rand(dw, g, -1, 1); t_rand(db, g, -1, 1);   // y: dy when backward; += priors
    int ix = set_add(&s, x), iw = set_add(&s, w), ib = set_add(&s, b), iy = set_add(&s, y);
    int idx = set_add(&s, dx), idw = set_add(&s, dw), idb = set_add(&s, db);
    float *ws = xmalloc((conv_workspace_floats(&d) + 1) * sizeof(float));
    int bias = i % 2 == 0;
    if (!backward) {
        conv_forward_cpu(&d, H(ix), HP(iw), bias ? HP(ib) : NULL, H(iy), ws);
        OP_RUN(tg, tg->be->ops.conv_forward(tg->ctx, &d, D(ix), DP(iw), bias ? DP(ib) : NULL, D(iy), ws));
        CHECK_OUT(iy, "y", FP32);
    } else {
        conv_backward_cpu(&d, H(ix), HP(iw), H(iy), H(idx), HP(idw), bias ? HP(idb) : NULL, ws);
        OP_RUN(tg, tg->be->ops.conv_backward(tg->ctx, &d, D(ix), DP(iw), D(iy), D(idx), DP(idw),
                                             bias ? DP(idb) : NULL, ws));
        CHECK_OUT(idx, "dx", FP32); CHECK_OUT(idw, "dw", FP32); CHECK_OUT(idb, "db", FP32);
    }
    free(ws);
    set_free(&s);
}
static void case_conv_forward(const Target *tg, Rng *g, int i) { conv_case(tg, g, i, 0); }
static void case_conv_backward(const Target *tg, Rng *g, int i) { conv_case(tg, g, i, 1); }

// A BN's inputs: z (mean far from 0: a one-pass variance would show it), gamma, beta, running statistics,
// and saved statistics from the CPU's forward (the same for every backend's backward).
// z16: z bf16-stored on the target (its values rounded to bf16 before anything reads them).
typedef struct { int z, ga, be, rm, rv, mean, invstd; } Bn;
static Bn bn_inputs_as(Set *s, Shape sh, Rng *g, int z16) {
    T z = map_of(sh, sh.extra), ga = t_vec(sh.C), be = t_vec(sh.C), rm = t_vec(sh.C), rv = t_vec(sh.C);
    T mean = t_vec(sh.C), invstd = t_vec(sh.C), u = map_of(sh, 0);
    t_rand(z, g, 0.5, 3.5); t_rand(ga, g, 0.5, 1.5); t_rand(be, g, -1, 1); t_rand(rm, g, -1, 1);
    t_rand(rv, g, 0.5, 1.5);
    if (z16) t_round_bf16(z);
    bn_forward_train_cpu(z.m, ga.m.data, be.m.data, EPS, MOMENTUM, NULL, NULL, mean.m.data, invstd.m.data, u.m);
    free(u.base);
    return (Bn){ set_add_as(s, z, z16), set_add(s, ga), set_add(s, be), set_add(s, rm), set_add(s, rv),
                 set_add(s, mean), set_add(s, invstd) };
}
static Bn bn_inputs(Set *s, Shape sh, Rng *g) { return bn_inputs_as(s, sh, g, 0); }
static void check_bn_stats(const Target *tg, Set *sp, const char *op, Shape sh, Bn b, int running) {
    Set s = *sp;
    if (running) { CHECK_OUT(b.rm, "running_mean", FP32); CHECK_OUT(b.rv, "running_var", FP32); }
    CHECK_OUT(b.mean, "mean", FP32); CHECK_OUT(b.invstd, "invstd", FP32);
}
static BnTrain bn_train_of(Set *s, Bn b, int on_target) {
    T *t = on_target ? s->d : s->h;
    return (BnTrain){ t[b.ga].m.data, t[b.be].m.data, t[b.rm].m.data, t[b.rv].m.data, t[b.mean].m.data,
                      t[b.invstd].m.data };
}
static int out_map(Set *s, Shape sh, int extra, Rng *g) {
    T t = map_of(sh, extra);
    t_rand(t, g, -1, 1);                           // a prior: an op that writes (=) must not read it
    return set_add(s, t);
}
static int out_vec(Set *s, int n, Rng *g) {
    T t = t_vec(n);
    t_rand(t, g, -1, 1);
    return set_add(s, t);
}

static void case_bn_forward_train(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    const char *op = "bn_forward_train";
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);
    int u = out_map(&s, sh, 3, g);
    bn_forward_train_cpu(H(b.z), HP(b.ga), HP(b.be), EPS, MOMENTUM, HP(b.rm), HP(b.rv), HP(b.mean), HP(b.invstd), H(u));
    OP_RUN(tg, tg->be->ops.bn_forward_train(tg->ctx, D(b.z), DP(b.ga), DP(b.be), EPS, MOMENTUM, DP(b.rm), DP(b.rv),
                                            DP(b.mean), DP(b.invstd), D(u)));
    CHECK_OUT(u, "u", FP32);
    check_bn_stats(tg, &s, op, sh, b, !perf_reps);
    set_free(&s);
}

static void case_bn_forward_eval(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    const char *op = "bn_forward_eval";
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);
    int u = out_map(&s, sh, 1, g);
    bn_forward_eval_cpu(H(b.z), HP(b.ga), HP(b.be), EPS, HP(b.rm), HP(b.rv), H(u));
    OP_RUN(tg, tg->be->ops.bn_forward_eval(tg->ctx, D(b.z), DP(b.ga), DP(b.be), EPS, DP(b.rm), DP(b.rv), D(u)));
    CHECK_OUT(u, "u", FP32);
    set_free(&s);
}

// bn_backward and bn_frozen_backward: du -> dz (=), dgamma, dbeta (+= priors)
static void bn_backward_case(const Target *tg, Rng *g, int i, int frozen) {
    Shape sh = shape_at(i, g);
    const char *op = frozen ? "bn_frozen_backward" : "bn_backward";
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);
    int du = out_map(&s, sh, 2, g), dz = out_map(&s, sh, 1, g), dga = out_vec(&s, sh.C, g), dbe = out_vec(&s, sh.C, g);
    (frozen ? bn_frozen_backward_cpu : bn_backward_cpu)(H(b.z), HP(b.ga), HP(b.mean), HP(b.invstd), H(du), H(dz),
                                                        HP(dga), HP(dbe));
    void (*fn)(void *, Map, const float *, const float *, const float *, Map, Map, float *, float *) =
        frozen ? tg->be->ops.bn_frozen_backward : tg->be->ops.bn_backward;
    OP_RUN(tg, fn(tg->ctx, D(b.z), DP(b.ga), DP(b.mean), DP(b.invstd), D(du), D(dz), DP(dga), DP(dbe)));
    CHECK_OUT(dz, "dz", FP32); CHECK_OUT(dga, "dgamma", FP32); CHECK_OUT(dbe, "dbeta", FP32);
    CHECK_OUT(du, "du untouched", FP32);
    set_free(&s);
}
static void case_bn_backward(const Target *tg, Rng *g, int i) { bn_backward_case(tg, g, i, 0); }
static void case_bn_frozen_backward(const Target *tg, Rng *g, int i) { bn_backward_case(tg, g, i, 1); }

static void case_bn_apply(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    const char *op = "bn_apply";
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);
    int u = out_map(&s, sh, 2, g);
    bn_apply_cpu(H(b.z), HP(b.ga), HP(b.be), HP(b.mean), HP(b.invstd), H(u));
    OP_RUN(tg, tg->be->ops.bn_apply(tg->ctx, D(b.z), DP(b.ga), DP(b.be), DP(b.mean), DP(b.invstd), D(u)));
    CHECK_OUT(u, "u", FP32);
    set_free(&s);
}

static void case_bn_frozen_stats(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    const char *op = "bn_frozen_stats";
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);
    bn_frozen_stats_cpu(sh.C, HP(b.rm), HP(b.rv), EPS, HP(b.mean), HP(b.invstd));
    OP_RUN(tg, tg->be->ops.bn_frozen_stats(tg->ctx, sh.C, DP(b.rm), DP(b.rv), EPS, DP(b.mean), DP(b.invstd)));
    check_bn_stats(tg, &s, op, sh, b, 0);
    set_free(&s);
}

// ---- SyncBatchNorm: the whole batch's statistics through a BnSync --------------------------------

// The BnSync of the sync cases: another device, holding its own maps (z, and du for the backward), adds what it
// would contribute by the CPU reference's formulas (core/spec/bn.c, the sync twins) after this device's v
// (device order: this one first). Forward: [M, Σz], then Σ(z - mu)² with the whole batch's mu, which it takes
// from the first sum's totals as the caller does; backward: [M, Σdu, Σdu·xhat] with the saved statistics.
// It counts its calls and notes their lengths, and contributes nothing to a call of an unexpected length.
typedef struct {
    Map z, du;                                     // du.data NULL: a forward's
    const float *mean, *invstd;                    // the saved statistics (backward)
    double *mu;                                    // (K) the batch's mean, from the forward's first call
    int calls, n[4];
} OtherDevice;

static void other_sum(void *arg, double *v, int n) {
    OtherDevice *o = arg;
    int K = o->z.C, phase = o->du.data ? 2 : o->calls % 2;   // 0: [M, Σz], 1: Σ(z - mu)², 2: the backward's
    size_t M = map_pixels(o->z);
    if (o->calls < 4) o->n[o->calls] = n;
    o->calls++;
    if (n != (phase == 0 ? K + 1 : phase == 1 ? K : 2 * K + 1)) return;
    double *add = xcalloc((size_t)n, sizeof(double));
    if (phase != 1) add[0] = (double)M;
    for (size_t m = 0; m < M; m++) {
        const float *zr = o->z.data + m * o->z.ld, *g = o->du.data ? o->du.data + m * o->du.ld : NULL;
        for (int c = 0; c < K; c++) {
            if (phase == 0) {
                add[1 + c] += zr[c];
            } else if (phase == 1) {
                double e = zr[c] - o->mu[c];
                add[c] += e * e;
            } else {
                add[1 + c] += g[c];
                add[1 + K + c] += (double)g[c] * ((zr[c] - o->mean[c]) * (double)o->invstd[c]);
            }
        }
    }
    for (int j = 0; j < n; j++) v[j] += add[j];
    if (phase == 0)
        for (int c = 0; c < K; c++) o->mu[c] = v[1 + c] / v[0];
    free(add);
}

// The other device's maps: N of its own, z's channels; values whose means differ from this device's (z in
// [0.5, 3.5], du in [-1, 1]), so statistics from this device's sums alone are far from the whole batch's.
// One for the reference's BnSync and one for the target's (each its own mean and counts).
typedef struct { T z, du; double *mu[2]; } Other;
static Other other_new(Shape sh, Rng *g, int backward) {
    Other o = { map_of((Shape){ sh.N % 2 + 1, sh.H, sh.W, sh.C, 1 }, 1), { 0 },
                { xcalloc((size_t)sh.C, sizeof(double)), xcalloc((size_t)sh.C, sizeof(double)) } };
    t_rand(o.z, g, 2.0, 6.0);
    if (backward) {
        o.du = map_of((Shape){ sh.N % 2 + 1, sh.H, sh.W, sh.C, 0 }, 0);
        t_rand(o.du, g, -0.5, 1.5);
    }
    return o;
}
static void other_free(Other o) { free(o.z.base); free(o.du.base); free(o.mu[0]); free(o.mu[1]); }
static OtherDevice other_device(Other o, int k, const float *mean, const float *invstd) {
    return (OtherDevice){ o.z.m, o.du.base ? o.du.m : (Map){ 0 }, mean, invstd, o.mu[k], 0, { 0 } };
}

// The largest |a - b| over two maps' elements (how far the whole batch's result is from this device's alone)
static double max_diff(Map a, Map b) {
    double e = 0.0;
    for (size_t j = 0; j < map_floats(a); j++) e = fmax(e, fabs((double)*at(a, j) - *at(b, j)));
    return e;
}

// A second call of the same shape on the GPU allocates nothing (its buffers are kept on the Device) and waits on
// the host `waits` times (the forward twice, the backward once: before each BnSync sum); run after the checks,
// since it adds to the outputs again
#ifdef USE_CUDA
#define SYNC_SECOND_CALL(tg, op, waits, call) do { \
        if ((tg)->ctx != &dev || perf_reps) break; \
        size_t n0_ = gpu_alloc_count(); \
        long w0_ = host_wait_count(); \
        call; \
        CHECK(gpu_alloc_count() == n0_, "%s: a second call allocated %zu times", op, gpu_alloc_count() - n0_); \
        CHECK(host_wait_count() - w0_ == (waits), "%s: %ld host waits, not %d", op, host_wait_count() - w0_, (waits)); \
    } while (0)
#else
#define SYNC_SECOND_CALL(tg, op, waits, call) do { } while (0)
#endif

// Which maps of sync case i are bf16-stored on a target that takes them (the CPU runs the same shape in fp32)
static int sync_bf16(const Target *tg, int i, int which) { return tg->bf16 && i % which == 1; }

// z (fp32 or bf16, a channel slice in the fixed shapes) -> u, the whole batch's saved and running statistics;
// the other device's sums through BnSync, called twice (K + 1, then K) on the reference and on the target
static void case_bn_forward_train_sync(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    int z16 = sync_bf16(tg, i, 2), u16 = sync_bf16(tg, i, 3);
    char op[64];
    snprintf(op, sizeof op, "bn_forward_train_sync z %s u %s", z16 ? "bf16" : "fp32", u16 ? "bf16" : "fp32");
    Set s = { .tg = tg };
    Bn b = bn_inputs_as(&s, sh, g, z16);
    T u = map_of(sh, 3);
    t_rand(u, g, -1, 1);
    int iu = set_add_as(&s, u, u16);
    Other o = other_new(sh, g, 0);
    OtherDevice ref = other_device(o, 0, NULL, NULL), on = other_device(o, 1, NULL, NULL);
    BnSync sref = { other_sum, &ref }, son = { other_sum, &on };
    T local = map_of(sh, 0), lmean = t_vec(sh.C), linv = t_vec(sh.C);   // this device's statistics alone
    bn_forward_train_cpu(H(b.z), HP(b.ga), HP(b.be), EPS, MOMENTUM, NULL, NULL, lmean.m.data, linv.m.data, local.m);
    bn_forward_train_sync_cpu(H(b.z), HP(b.ga), HP(b.be), EPS, MOMENTUM, HP(b.rm), HP(b.rv), HP(b.mean), HP(b.invstd),
                              H(iu), &sref);
    OP_RUN(tg, tg->be->ops.bn_forward_train_sync(tg->ctx, D(b.z), DP(b.ga), DP(b.be), EPS, MOMENTUM, DP(b.rm),
                                                 DP(b.rv), DP(b.mean), DP(b.invstd), D(iu), &son));
    if (!perf_reps) {
        CHECK(ref.calls == 2 && ref.n[0] == sh.C + 1 && ref.n[1] == sh.C, "%s: the reference's BnSync calls", op);
        CHECK(on.calls == 2 && on.n[0] == sh.C + 1 && on.n[1] == sh.C,
              "%s %s: BnSync called %d times (n %d, %d), not twice with K + 1 = %d then K", tg->name, op, on.calls,
              on.n[0], on.n[1], sh.C + 1);
        CHECK(max_diff(local.m, H(iu)) > 0.1, "%s: the other device's sums barely move u: the case cannot tell", op);
    }
    CHECK_OUT(iu, "u", u16 ? BF16 : FP32);
    check_bn_stats(tg, &s, op, sh, b, !perf_reps);
    SYNC_SECOND_CALL(tg, op, 2, tg->be->ops.bn_forward_train_sync(tg->ctx, D(b.z), DP(b.ga), DP(b.be), EPS, MOMENTUM,
                                                                  DP(b.rm), DP(b.rv), DP(b.mean), DP(b.invstd), D(iu),
                                                                  &son));
    free(local.base); free(lmean.base); free(linv.base);
    other_free(o);
    set_free(&s);
}

// du -> dz (=) from the whole batch's means, dgamma and dbeta (+= priors) from this device's own sums; the
// other device's [M, Σdu, Σdu·xhat] through BnSync, called once (2K + 1). du and dz each fp32 or bf16 (all four
// pairs on a GPU); shapes 2, 3 and 6 write dz over du (fp32, bf16, fp32), shapes 4 and 9 have no dz.
static void case_bn_backward_sync(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    int du16 = sync_bf16(tg, i, 2), dz16 = tg->bf16 && i % 3 == 2, in_place = i % 4 == 2 || i == 3;
    int no_dz = i % 5 == 4 && !in_place;
    if (in_place) dz16 = du16;
    char op[80];
    snprintf(op, sizeof op, "bn_backward_sync du %s dz %s%s", du16 ? "bf16" : "fp32", dz16 ? "bf16" : "fp32",
             in_place ? " over du" : no_dz ? " (none)" : "");
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);
    T du = map_of(sh, 2), dz = map_of(sh, 1);
    t_rand(du, g, -1, 1); t_rand(dz, g, -1, 1);
    int idu = set_add_as(&s, du, du16), idz = set_add_as(&s, dz, dz16);
    int dga = out_vec(&s, sh.C, g), dbe = out_vec(&s, sh.C, g);
    int out = in_place ? idu : idz;
    Map none = { 0 }, hz = no_dz ? none : H(out), dzd = no_dz ? none : D(out);
    Other o = other_new(sh, g, 1);
    OtherDevice ref = other_device(o, 0, HP(b.mean), HP(b.invstd)), on = other_device(o, 1, HP(b.mean), HP(b.invstd));
    BnSync sref = { other_sum, &ref }, son = { other_sum, &on };
    T local = map_of(sh, 0);                       // dz from this device's sums alone
    bn_backward_cpu(H(b.z), HP(b.ga), HP(b.mean), HP(b.invstd), H(idu), local.m, NULL, NULL);
    bn_backward_sync_cpu(H(b.z), HP(b.ga), HP(b.mean), HP(b.invstd), H(idu), hz, HP(dga), HP(dbe), &sref);
    OP_RUN(tg, tg->be->ops.bn_backward_sync(tg->ctx, D(b.z), DP(b.ga), DP(b.mean), DP(b.invstd), D(idu), dzd, DP(dga),
                                            DP(dbe), &son));
    if (!perf_reps) {
        CHECK(ref.calls == 1 && ref.n[0] == 2 * sh.C + 1, "%s: the reference's BnSync calls", op);
        CHECK(on.calls == 1 && on.n[0] == 2 * sh.C + 1, "%s %s: BnSync called %d times (n %d), not once with 2K + 1 = %d",
              tg->name, op, on.calls, on.n[0], 2 * sh.C + 1);
        if (!no_dz) CHECK(max_diff(local.m, hz) > 0.1, "%s: the other device's sums barely move dz: the case cannot tell", op);
    }
    if (!no_dz) CHECK_OUT(out, in_place ? "dz over du" : "dz", dz16 ? BF16 : FP32);
    if (!in_place) CHECK_OUT(idu, "du untouched", FP32);
    if (no_dz) CHECK_OUT(idz, "dz untouched (none given)", FP32);
    CHECK_OUT(dga, "dgamma", FP32); CHECK_OUT(dbe, "dbeta", FP32);
    SYNC_SECOND_CALL(tg, op, 1, tg->be->ops.bn_backward_sync(tg->ctx, D(b.z), DP(b.ga), DP(b.mean), DP(b.invstd),
                                                             D(idu), dzd, DP(dga), DP(dbe), &son));
    free(local.base);
    other_free(o);
    set_free(&s);
}

// The elementwise ops on one shape: a (one element far below: exp overflows, silu must give -0, not NaN), b
enum { EW_SILU_F, EW_SILU_B, EW_ADD, EW_COPY, EW_ACC };
static void elementwise_case(const Target *tg, Rng *g, int i, int kind) {
    static const char *names[] = { "silu_forward", "silu_backward", "add_forward", "copy_map", "accumulate_map" };
    Shape sh = shape_at(i, g);
    const char *op = names[kind];
    Set s = { .tg = tg };
    T a = map_of(sh, sh.extra), b = map_of(sh, 1);
    t_rand(a, g, -8, 8); t_rand(b, g, -1, 1);
    *at(a.m, 0) = -100.0f;
    int ia = set_add(&s, a), ib = set_add(&s, b), y = out_map(&s, sh, 3, g);
    const BackendOps *o = &tg->be->ops;
    switch (kind) {
    case EW_SILU_F: silu_forward_cpu(H(ia), H(y)); OP_RUN(tg, o->silu_forward(tg->ctx, D(ia), D(y))); break;
    case EW_SILU_B: silu_backward_cpu(H(ia), H(ib), H(y)); OP_RUN(tg, o->silu_backward(tg->ctx, D(ia), D(ib), D(y))); break;
    case EW_ADD: add_forward_cpu(H(ia), H(ib), H(y)); OP_RUN(tg, o->add_forward(tg->ctx, D(ia), D(ib), D(y))); break;
    case EW_COPY: copy_map_cpu(H(ia), H(y)); OP_RUN(tg, o->copy_map(tg->ctx, D(ia), D(y))); break;
    case EW_ACC: accumulate_map_cpu(H(ia), H(y)); OP_RUN(tg, o->accumulate_map(tg->ctx, D(ia), D(y))); break;
    }
    CHECK_OUT(y, "y", FP32);
    set_free(&s);
}
static void case_silu_forward(const Target *tg, Rng *g, int i) { elementwise_case(tg, g, i, EW_SILU_F); }
static void case_silu_backward(const Target *tg, Rng *g, int i) { elementwise_case(tg, g, i, EW_SILU_B); }
static void case_add_forward(const Target *tg, Rng *g, int i) { elementwise_case(tg, g, i, EW_ADD); }
static void case_copy_map(const Target *tg, Rng *g, int i) { elementwise_case(tg, g, i, EW_COPY); }
static void case_accumulate_map(const Target *tg, Rng *g, int i) { elementwise_case(tg, g, i, EW_ACC); }

// Pools: few distinct values, so windows hold ties and the first maximum must win; dx += onto a prior.
typedef struct { int k, stride, pad; } Win;
static const Win MAX_WINS[] = { { 5, 1, 2 }, { 3, 2, 1 }, { 2, 2, 0 } };
static const Win AVG_WINS[] = { { 3, 1, 1 }, { 2, 2, 0 }, { 3, 2, 1 } };
static void pool_case(const Target *tg, Rng *g, int i, int is_max, int backward) {
    Shape sx = shape_at(i, g);
    Win w = (is_max ? MAX_WINS : AVG_WINS)[i % 3];
    if (sx.H < w.k) sx.H = w.k;
    if (sx.W < w.k) sx.W = w.k;
    Shape sh = { sx.N, (sx.H + 2 * w.pad - w.k) / w.stride + 1, (sx.W + 2 * w.pad - w.k) / w.stride + 1, sx.C, 2 };
    char op[64];
    snprintf(op, sizeof op, "%s_%s k%d s%d p%d", is_max ? "maxpool" : "avgpool", backward ? "backward" : "forward",
             w.k, w.stride, w.pad);
    Set s = { .tg = tg };
    T x = map_of(sx, sx.extra), dy = map_of(sh, 1);
    for (size_t j = 0; j < map_floats(x.m); j++) *at(x.m, j) = (float)(rng_int(g, 5) / 4.0 - 0.5);
    t_rand(dy, g, -1, 1);
    int ix = set_add(&s, x), idy = set_add(&s, dy), y = out_map(&s, sh, 2, g), dx = out_map(&s, sx, sx.extra, g);
    const BackendOps *o = &tg->be->ops;
    if (is_max && !backward) {
        maxpool_forward_cpu(H(ix), w.k, w.stride, w.pad, H(y));
        OP_RUN(tg, o->maxpool_forward(tg->ctx, D(ix), w.k, w.stride, w.pad, D(y)));
    } else if (is_max) {
        maxpool_backward_cpu(H(ix), w.k, w.stride, w.pad, H(idy), H(dx));
        OP_RUN(tg, o->maxpool_backward(tg->ctx, D(ix), w.k, w.stride, w.pad, D(idy), D(dx)));
    } else if (!backward) {
        avgpool_forward_cpu(H(ix), w.k, w.stride, w.pad, H(y));
        OP_RUN(tg, o->avgpool_forward(tg->ctx, D(ix), w.k, w.stride, w.pad, D(y)));
    } else {
        avgpool_backward_cpu(w.k, w.stride, w.pad, H(idy), H(dx));
        OP_RUN(tg, o->avgpool_backward(tg->ctx, w.k, w.stride, w.pad, D(idy), D(dx)));
    }
    if (backward) CHECK_OUT(dx, "dx", FP32);
    else CHECK_OUT(y, "y", FP32);
    set_free(&s);
}
static void case_maxpool_forward(const Target *tg, Rng *g, int i) { pool_case(tg, g, i, 1, 0); }
static void case_maxpool_backward(const Target *tg, Rng *g, int i) { pool_case(tg, g, i, 1, 1); }
static void case_avgpool_forward(const Target *tg, Rng *g, int i) { pool_case(tg, g, i, 0, 0); }
static void case_avgpool_backward(const Target *tg, Rng *g, int i) { pool_case(tg, g, i, 0, 1); }

// upsample by the neck's x2, x3, CBFuse's x4 (yolov9-c) and x16 (gelan-e)
static void upsample_case(const Target *tg, Rng *g, int i, int backward) {
    static const int factors[] = { 2, 3, 4, 16 };
    Shape sx = shape_at(i, g);
    int f = factors[i % 4];
    if (!perf_reps && (f == 16 || map_pixels(map_make(NULL, sx.N, sx.H, sx.W, 1)) > 4096))
        sx = (Shape){ 3, 7, 5, 9, 1 };             // the output f² times larger: kept small
    Shape sh = { sx.N, sx.H * f, sx.W * f, sx.C, 2 };
    char op[64];
    snprintf(op, sizeof op, "upsample_%s x%d", backward ? "backward" : "forward", f);
    Set s = { .tg = tg };
    T x = map_of(sx, sx.extra), dy = map_of(sh, 0);
    t_rand(x, g, -1, 1); t_rand(dy, g, -1, 1);
    int ix = set_add(&s, x), idy = set_add(&s, dy), y = out_map(&s, sh, 2, g), dx = out_map(&s, sx, 3, g);
    if (!backward) {
        upsample_forward_cpu(H(ix), f, H(y));
        OP_RUN(tg, tg->be->ops.upsample_forward(tg->ctx, D(ix), f, D(y)));
        CHECK_OUT(y, "y", FP32);
    } else {
        upsample_backward_cpu(f, H(idy), H(dx));
        OP_RUN(tg, tg->be->ops.upsample_backward(tg->ctx, f, D(idy), D(dx)));
        CHECK_OUT(dx, "dx", FP32);
    }
    set_free(&s);
}
static void case_upsample_forward(const Target *tg, Rng *g, int i) { upsample_case(tg, g, i, 0); }
static void case_upsample_backward(const Target *tg, Rng *g, int i) { upsample_case(tg, g, i, 1); }

// multi_scale's bilinear resize, up and down, odd sizes and ratios: bit for bit on every backend (each
// product and sum rounded alone)
static void case_resize_bilinear(const Target *tg, Rng *g, int i) {
    static const int sizes[][4] = { { 96, 64, 160, 96 }, { 160, 96, 64, 32 }, { 7, 5, 11, 3 }, { 5, 9, 5, 9 },
                                    { 1, 3, 2, 7 } };   // H, W -> P, Q
    const int *z = sizes[i % 5];
    Shape sx = { 3, z[0], z[1], 3, 1 }, sh = { 3, z[2], z[3], 3, 2 };
    if (perf_reps) sx = (Shape){ 8, 640, 640, 3, 0 }, sh = (Shape){ 8, 480, 480, 3, 0 };
    const char *op = "resize_bilinear";
    Set s = { .tg = tg };
    T x = map_of(sx, sx.extra);
    t_rand(x, g, 0, 1);
    int ix = set_add(&s, x), y = out_map(&s, sh, sh.extra, g);
    resize_bilinear_cpu(H(ix), H(y));
    OP_RUN(tg, tg->be->ops.resize_bilinear(tg->ctx, D(ix), D(y)));
    CHECK_OUT(y, "y", ((Tol){ 0, 0 }));
    set_free(&s);
}

// YOLO26's depthwise convolution (k 3, 5, 7; stride 1, 2) and attention core
static void dwconv_case(const Target *tg, Rng *g, int i, int backward) {
    static const int ks[] = { 3, 5, 7 };
    Shape sx = shape_at(i, g);
    int k = ks[i % 3], stride = k == 7 ? 1 : 1 + i % 2;   // 7x7: stride 1, as test_gpu_ops26 runs it
    if (sx.H < k) sx.H = k;
    if (sx.W < k) sx.W = k;
    DwDims d = dw_dims(sx.N, sx.C, sx.H, sx.W, k, stride);
    Shape sh = { d.N, d.P, d.Q, d.C, 1 };
    char op[64];
    snprintf(op, sizeof op, "dwconv_%s k%d s%d", backward ? "backward" : "forward", k, stride);
    Set s = { .tg = tg };
    T x = map_of(sx, sx.extra), w = t_vec(d.C * k * k), b = t_vec(d.C), dy = map_of(sh, 2);
    t_rand(x, g, -1, 1); t_rand(w, g, -0.5, 0.5); t_rand(b, g, -1, 1); t_rand(dy, g, -1, 1);
    int ix = set_add(&s, x), iw = set_add(&s, w), ib = set_add(&s, b), idy = set_add(&s, dy);
    int y = out_map(&s, sh, 1, g), dx = out_map(&s, sx, sx.extra, g), dw = out_vec(&s, d.C * k * k, g);
    int db = out_vec(&s, d.C, g);
    if (!backward) {
        dwconv_forward_cpu(&d, H(ix), HP(iw), HP(ib), H(y));
        OP_RUN(tg, tg->be->ops.dwconv_forward(tg->ctx, &d, D(ix), DP(iw), DP(ib), D(y)));
        CHECK_OUT(y, "y", FP32);
    } else {
        dwconv_backward_cpu(&d, H(ix), HP(iw), H(idy), H(dx), HP(dw), HP(db));
        OP_RUN(tg, tg->be->ops.dwconv_backward(tg->ctx, &d, D(ix), DP(iw), D(idy), D(dx), DP(dw), DP(db)));
        CHECK_OUT(dx, "dx", FP32); CHECK_OUT(dw, "dw", FP32); CHECK_OUT(db, "db", FP32);
    }
    set_free(&s);
}
static void case_dwconv_forward(const Target *tg, Rng *g, int i) { dwconv_case(tg, g, i, 0); }
static void case_dwconv_backward(const Target *tg, Rng *g, int i) { dwconv_case(tg, g, i, 1); }

// The attention's backward takes the probabilities of the same backend's forward.
static void attn_case(const Target *tg, Rng *g, int i, int backward) {
    static const int cases[][5] = { { 1, 3, 5, 8, 2 }, { 2, 5, 7, 12, 3 }, { 2, 4, 4, 6, 1 } };   // N, H, W, dim, heads
    const int *c = cases[i % 3];
    AttnDims d = perf_reps ? attn_dims(8, 20, 20, 256, 4, 0.5) : attn_dims(c[0], c[1], c[2], c[3], c[4], 0.5);
    int Ct = attn_qkv_channels(&d), C = d.heads * d.head_dim, extra = i % 4;
    Shape sq = { d.N, d.H, d.W, Ct, extra }, sh = { d.N, d.H, d.W, C, extra };
    const char *op = backward ? "attn_backward" : "attn_forward";
    Set s = { .tg = tg };
    T qkv = map_of(sq, extra), dy = map_of(sh, extra);
    t_rand(qkv, g, -2, 2); t_rand(dy, g, -1, 1);
    int iq = set_add(&s, qkv), idy = set_add(&s, dy), y = out_map(&s, sh, extra, g), v = out_map(&s, sh, 0, g);
    int p = out_vec(&s, (int)attn_probs_floats(&d), g), dv = out_map(&s, sh, 1, g), dq = out_map(&s, sq, extra, g);
    float *ws = xmalloc((attn_workspace_floats(&d) + 1) * sizeof(float));
    attn26_forward_cpu(&d, H(iq), H(y), H(v), HP(p));
    if (!backward) {
        OP_RUN(tg, tg->be->ops.attn_forward(tg->ctx, &d, D(iq), D(y), D(v), DP(p)));
        CHECK_OUT(y, "y", FP32); CHECK_OUT(v, "v", FP32); CHECK_OUT(p, "softmax", FP32);
    } else {
        tg->be->ops.attn_forward(tg->ctx, &d, D(iq), D(y), D(v), DP(p));
        attn26_backward_cpu(&d, H(iq), HP(p), H(idy), H(dv), H(dq), ws);
        OP_RUN(tg, tg->be->ops.attn_backward(tg->ctx, &d, D(iq), DP(p), D(idy), D(dv), D(dq), ws));
        CHECK_OUT(dq, "dqkv", FP32);
    }
    free(ws);
    set_free(&s);
}
static void case_attn_forward(const Target *tg, Rng *g, int i) { attn_case(tg, g, i, 0); }
static void case_attn_backward(const Target *tg, Rng *g, int i) { attn_case(tg, g, i, 1); }

// ---- unit and fused forms: against the reference composition; where the executor's YT_FUSE=0 runs rely on
// it, to the bit against the same composition of the backend's own ops --------------------------------------

// A second set of outputs on the target, for the composition of its own ops: the same priors
static int twin(Set *s, int k) {
    T h = s->h[k], c = h;
    c.base = xmalloc((h.total + 1) * sizeof(float));
    memcpy(c.base, h.base, h.total * sizeof(float));
    return set_add(s, c);
}
#define SAME_BITS(a, b, part) CHECK(perf_reps || t_same(tg, s.d[a], s.d[b]), "%s %s %s: the fused form differs " \
                                    "from the composition of the backend's own ops", tg->name, op, part)

static void case_bn_silu_forward_train(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    const char *op = "bn_silu_forward_train";
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);
    int y = out_map(&s, sh, 2, g);
    BnTrain bh = bn_train_of(&s, b, 0), bd = bn_train_of(&s, b, 1);
    compose_bn_silu_train(&REF, H(b.z), &bh, H(y));
    OP_RUN(tg, tg->be->unit.bn_silu_forward_train(tg->ctx, D(b.z), bd.gamma, bd.beta, EPS, MOMENTUM, bd.running_mean,
                                                   bd.running_var, bd.mean, bd.invstd, D(y)));
    CHECK_OUT(y, "y", FP32);
    check_bn_stats(tg, &s, op, sh, b, !perf_reps);
    set_free(&s);
}

static void case_bn_silu_forward_eval(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    const char *op = "bn_silu_forward_eval";
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);
    int y = out_map(&s, sh, 2, g), y2 = twin(&s, y);
    compose_bn_silu_eval(&REF, H(b.z), HP(b.ga), HP(b.be), HP(b.rm), HP(b.rv), H(y));
    OP_RUN(tg, tg->be->unit.bn_silu_forward_eval(tg->ctx, D(b.z), DP(b.ga), DP(b.be), EPS, DP(b.rm), DP(b.rv), D(y)));
    OP_TIME(tg, perf_composed, compose_bn_silu_eval(tg, D(b.z), DP(b.ga), DP(b.be), DP(b.rm), DP(b.rv), D(y2)));
    CHECK_OUT(y, "y", FP32);
    SAME_BITS(y, y2, "y");
    set_free(&s);
}

// A conv + BN + SiLU unit's forward in training: x (N,H,W,C) -> z (N,P,Q,K) -> y = silu(BN_train(z)), the batch
// statistics saved and the running ones updated; against conv_forward then the BN + SiLU composition
static void case_conv_bn_silu_forward_train(const Target *tg, Rng *g, int i) {
    ConvCase c = conv_case_at(i, g);
    ConvDims d = conv_dims(c.N, c.C, c.H, c.W, c.K, c.k, c.stride, c.pad, c.groups);
    size_t nw = (size_t)d.K * (d.C / d.groups) * d.R * d.S;
    Shape sh = { d.N, d.P, d.Q, d.K, 0 }, sx = { d.N, d.H, d.W, d.C, c.x_extra };
    const char *op = "conv_bn_silu_forward_train";
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);                   // its z is a prior the conv overwrites
    T x = map_of(sx, c.x_extra), w = t_vec((int)nw);
    t_rand(x, g, -1, 1); t_rand(w, g, -0.5, 0.5);
    int ix = set_add(&s, x), iw = set_add(&s, w), y = out_map(&s, sh, c.y_extra, g);
    float *ws = xmalloc((conv_workspace_floats(&d) + 1) * sizeof(float));
    BnTrain bh = bn_train_of(&s, b, 0), bd = bn_train_of(&s, b, 1);
    conv_forward_cpu(&d, H(ix), HP(iw), NULL, H(b.z), ws);
    compose_bn_silu_train(&REF, H(b.z), &bh, H(y));
    OP_RUN(tg, tg->be->unit.conv_bn_silu_forward_train(tg->ctx, &d, D(ix), DP(iw), D(b.z), &bd, EPS, MOMENTUM, D(y),
                                                        ws));
    CHECK_OUT(b.z, "z", FP32); CHECK_OUT(y, "y", FP32);
    check_bn_stats(tg, &s, op, sh, b, !perf_reps);
    free(ws);
    set_free(&s);
}

// A conv + BN unit's backward: x (N,H,W,C) -> z (N,P,Q,K) with saved statistics; from dy at the SiLU (silu) or
// du at the BN: dx, dw, dgamma, dbeta (+= priors)
static void conv_bn_case(const Target *tg, Rng *g, int i, int silu) {
    ConvCase c = conv_case_at(i, g);
    ConvDims d = conv_dims(c.N, c.C, c.H, c.W, c.K, c.k, c.stride, c.pad, c.groups);
    size_t nw = (size_t)d.K * (d.C / d.groups) * d.R * d.S;
    Shape sh = { d.N, d.P, d.Q, d.K, 0 }, sx = { d.N, d.H, d.W, d.C, c.x_extra };
    const char *op = silu ? "conv_bn_silu_backward" : "conv_bn_backward";
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);
    T x = map_of(sx, c.x_extra), w = t_vec((int)nw), dy = map_of(sh, c.y_extra);
    t_rand(x, g, -1, 1); t_rand(w, g, -0.5, 0.5); t_rand(dy, g, -1, 1);
    int ix = set_add(&s, x), iw = set_add(&s, w), idy = set_add(&s, dy);
    int dx = out_map(&s, sx, c.x_extra, g), dw = out_vec(&s, (int)nw, g), dga = out_vec(&s, d.K, g);
    int dbe = out_vec(&s, d.K, g), tmp = out_map(&s, sh, 0, g), dz = out_map(&s, sh, 0, g);
    float *ws = xmalloc((conv_workspace_floats(&d) + 1) * sizeof(float));
    BnSaved bh = { HP(b.ga), HP(b.be), HP(b.mean), HP(b.invstd), HP(dga), HP(dbe) };
    BnSaved bd = { DP(b.ga), DP(b.be), DP(b.mean), DP(b.invstd), DP(dga), DP(dbe) };
    if (silu) {
        compose_conv_bn_silu_bwd(&REF, &d, H(ix), HP(iw), H(b.z), &bh, H(idy), H(tmp), H(dz), H(dx), HP(dw), ws);
        OP_RUN(tg, tg->be->unit.conv_bn_silu_backward(tg->ctx, &d, D(ix), DP(iw), D(b.z), &bd, D(idy), D(tmp), D(dz),
                                                       D(dx), DP(dw), ws));
    } else {
        compose_conv_bn_bwd(&REF, &d, H(ix), HP(iw), H(b.z), &bh, H(idy), H(dz), H(dx), HP(dw), ws);
        OP_RUN(tg, tg->be->unit.conv_bn_backward(tg->ctx, &d, D(ix), DP(iw), D(b.z), &bd, D(idy), D(dz), D(dx), DP(dw),
                                                  ws));
    }
    CHECK_OUT(dx, "dx", FP32); CHECK_OUT(dw, "dw", FP32); CHECK_OUT(dga, "dgamma", FP32); CHECK_OUT(dbe, "dbeta", FP32);
    free(ws);
    set_free(&s);
}
static void case_conv_bn_silu_backward(const Target *tg, Rng *g, int i) { conv_bn_case(tg, g, i, 1); }
static void case_conv_bn_backward(const Target *tg, Rng *g, int i) { conv_bn_case(tg, g, i, 0); }

// A RepConv's forward: both BNs' statistics and y; then the same inputs through the backend's own ops
static void case_repconv_forward_train(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    const char *op = "repconv_forward_train";
    Set s = { .tg = tg };
    Bn b1 = bn_inputs(&s, sh, g), b2 = bn_inputs(&s, (Shape){ sh.N, sh.H, sh.W, sh.C, 1 }, g);
    int u = out_map(&s, sh, 0, g), t = out_map(&s, sh, 0, g), y = out_map(&s, sh, 2, g), y2 = twin(&s, y);
    BnTrain h1 = bn_train_of(&s, b1, 0), h2 = bn_train_of(&s, b2, 0), d1 = bn_train_of(&s, b1, 1);
    BnTrain d2 = bn_train_of(&s, b2, 1);
    compose_repconv_train(&REF, H(b1.z), &h1, H(b2.z), &h2, H(u), H(t), H(y));
    OP_RUN(tg, tg->be->fused.repconv_forward_train(tg->ctx, D(b1.z), &d1, D(b2.z), &d2, EPS, MOMENTUM, D(u), D(t),
                                                    D(y)));
    CHECK_OUT(y, "y", FP32);
    check_bn_stats(tg, &s, op, sh, b1, !perf_reps);
    check_bn_stats(tg, &s, op, sh, b2, !perf_reps);
    BnTrain n1 = d1, n2 = d2;                      // the running statistics stay as the fused call left them
    n1.running_mean = n1.running_var = n2.running_mean = n2.running_var = NULL;
    OP_TIME(tg, perf_composed, compose_repconv_train(tg, D(b1.z), &n1, D(b2.z), &n2, D(u), D(t), D(y2)));
    SAME_BITS(y, y2, "y");
    set_free(&s);
}

static void case_repconv_silu_backward(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    const char *op = "repconv_silu_backward";
    Set s = { .tg = tg };
    Bn b1 = bn_inputs(&s, sh, g), b2 = bn_inputs(&s, (Shape){ sh.N, sh.H, sh.W, sh.C, 1 }, g);
    T dy = map_of(sh, 1);
    t_rand(dy, g, -1, 1);
    int idy = set_add(&s, dy), t = out_map(&s, sh, 0, g), du = out_map(&s, sh, 0, g), du2 = twin(&s, du);
    BnSaved h1 = { HP(b1.ga), HP(b1.be), HP(b1.mean), HP(b1.invstd), NULL, NULL };
    BnSaved h2 = { HP(b2.ga), HP(b2.be), HP(b2.mean), HP(b2.invstd), NULL, NULL };
    BnSaved d1 = { DP(b1.ga), DP(b1.be), DP(b1.mean), DP(b1.invstd), NULL, NULL };
    BnSaved d2 = { DP(b2.ga), DP(b2.be), DP(b2.mean), DP(b2.invstd), NULL, NULL };
    compose_repconv_silu_bwd(&REF, H(b1.z), &h1, H(b2.z), &h2, H(idy), H(t), H(du));
    OP_RUN(tg, tg->be->fused.repconv_silu_backward(tg->ctx, D(b1.z), &d1, D(b2.z), &d2, D(idy), D(t), D(du)));
    OP_TIME(tg, perf_composed, compose_repconv_silu_bwd(tg, D(b1.z), &d1, D(b2.z), &d2, D(idy), D(t), D(du2)));
    CHECK_OUT(du, "du", FP32);
    SAME_BITS(du, du2, "du");
    set_free(&s);
}

// Both branches' conv_bn_backward from one du into the same dx (3x3 and 1x1 branches of one x)
static void case_repconv_bn_backward(const Target *tg, Rng *g, int i) {
    ConvCase c = conv_case_at(i, g);
    ConvDims d1 = conv_dims(c.N, c.C, c.H, c.W, c.K, 3, c.stride, 1, 1), d2 = conv_dims(c.N, c.C, c.H, c.W, c.K, 1,
                                                                                         c.stride, 0, 1);
    size_t nw1 = (size_t)d1.K * d1.C * 9, nw2 = (size_t)d2.K * d2.C;
    Shape sh = { d1.N, d1.P, d1.Q, d1.K, 0 }, sx = { d1.N, d1.H, d1.W, d1.C, c.x_extra };
    const char *op = "repconv_bn_backward";
    Set s = { .tg = tg };
    Bn b1 = bn_inputs(&s, sh, g), b2 = bn_inputs(&s, sh, g);
    T x = map_of(sx, c.x_extra), w1 = t_vec((int)nw1), w2 = t_vec((int)nw2), du = map_of(sh, 0);
    t_rand(x, g, -1, 1); t_rand(w1, g, -0.5, 0.5); t_rand(w2, g, -0.5, 0.5); t_rand(du, g, -1, 1);
    int ix = set_add(&s, x), iw1 = set_add(&s, w1), iw2 = set_add(&s, w2), idu = set_add(&s, du);
    int dx = out_map(&s, sx, c.x_extra, g), dw1 = out_vec(&s, (int)nw1, g), dw2 = out_vec(&s, (int)nw2, g);
    int g1 = out_vec(&s, d1.K, g), e1 = out_vec(&s, d1.K, g), g2 = out_vec(&s, d1.K, g), e2 = out_vec(&s, d1.K, g);
    int dz = out_map(&s, sh, 0, g);
    float *ws = xmalloc((conv_workspace_floats(&d1) + conv_workspace_floats(&d2) + 1) * sizeof(float));
    BnSaved h1 = { HP(b1.ga), HP(b1.be), HP(b1.mean), HP(b1.invstd), HP(g1), HP(e1) };
    BnSaved h2 = { HP(b2.ga), HP(b2.be), HP(b2.mean), HP(b2.invstd), HP(g2), HP(e2) };
    BnSaved q1 = { DP(b1.ga), DP(b1.be), DP(b1.mean), DP(b1.invstd), DP(g1), DP(e1) };
    BnSaved q2 = { DP(b2.ga), DP(b2.be), DP(b2.mean), DP(b2.invstd), DP(g2), DP(e2) };
    compose_conv_bn_bwd(&REF, &d1, H(ix), HP(iw1), H(b1.z), &h1, H(idu), H(dz), H(dx), HP(dw1), ws);
    compose_conv_bn_bwd(&REF, &d2, H(ix), HP(iw2), H(b2.z), &h2, H(idu), H(dz), H(dx), HP(dw2), ws);
    OP_RUN(tg, tg->be->fused.repconv_bn_backward(tg->ctx, &d1, DP(iw1), D(b1.z), &q1, DP(dw1), D(dx), &d2, DP(iw2),
                                                  D(b2.z), &q2, DP(dw2), D(dx), D(ix), D(idu), D(dz), ws));
    CHECK_OUT(dx, "dx", FP32); CHECK_OUT(dw1, "dw1", FP32); CHECK_OUT(dw2, "dw2", FP32);
    CHECK_OUT(g1, "dgamma1", FP32); CHECK_OUT(e1, "dbeta1", FP32); CHECK_OUT(g2, "dgamma2", FP32);
    CHECK_OUT(e2, "dbeta2", FP32);
    free(ws);
    set_free(&s);
}

// A conv unit's output taken by the residual addition after it: out = a + silu(BN_train(z))
static void case_bn_silu_add_forward_train(const Target *tg, Rng *g, int i) {
    Shape sh = shape_at(i, g);
    const char *op = "bn_silu_add_forward_train";
    Set s = { .tg = tg };
    Bn b = bn_inputs(&s, sh, g);
    T a = map_of(sh, 1);
    t_rand(a, g, -3, 3);
    int ia = set_add(&s, a), y = out_map(&s, sh, 0, g), out = out_map(&s, sh, 2, g), out2 = twin(&s, out);
    BnTrain bh = bn_train_of(&s, b, 0), bd = bn_train_of(&s, b, 1);
    compose_bn_silu_add(&REF, H(b.z), &bh, H(ia), H(y), H(out));
    OP_RUN(tg, tg->be->fused.bn_silu_add_forward_train(tg->ctx, D(b.z), &bd, EPS, MOMENTUM, D(ia), D(y), D(out)));
    CHECK_OUT(out, "out", FP32);
    check_bn_stats(tg, &s, op, sh, b, !perf_reps);
    bd.running_mean = bd.running_var = NULL;       // the running statistics stay as the fused call left them
    OP_TIME(tg, perf_composed, compose_bn_silu_add(tg, D(b.z), &bd, D(ia), D(y), D(out2)));
    SAME_BITS(out, out2, "out");
    set_free(&s);
}

// ---- the entries -------------------------------------------------------------------------------

// One entry of a sub-table: its name, where its slot lies, its case (NULL: not covered here, why says why).
typedef struct { const char *name; char table; size_t offset; CaseFn fn; const char *why; } Entry;
#define OPS(f) { #f, 'o', offsetof(BackendOps, f), case_##f, NULL }
#define UNIT(f) { #f, 'u', offsetof(BackendUnit, f), case_##f, NULL }
#define FUSED(f) { #f, 'f', offsetof(BackendFused, f), case_##f, NULL }
static const Entry ENTRIES[] = {
    OPS(conv_forward), OPS(conv_backward), OPS(bn_forward_train), OPS(bn_forward_eval), OPS(bn_backward),
    OPS(bn_apply), OPS(bn_frozen_stats), OPS(bn_frozen_backward), OPS(silu_forward), OPS(silu_backward),
    OPS(add_forward), OPS(copy_map), OPS(accumulate_map), OPS(maxpool_forward), OPS(maxpool_backward),
    OPS(avgpool_forward), OPS(avgpool_backward), OPS(upsample_forward), OPS(upsample_backward),
    OPS(resize_bilinear), OPS(dwconv_forward), OPS(dwconv_backward), OPS(attn_forward), OPS(attn_backward),
    { "prepare_weights", 'o', offsetof(BackendOps, prepare_weights), NULL,
      "no output of its own: the bf16 weights it rounds are checked through the convolutions by test_gpu_bf16 "
      "and test_determinism (YT_WEIGHTS_ONCE=0)" },
    UNIT(bn_silu_forward_train), UNIT(bn_silu_forward_eval), UNIT(conv_bn_silu_forward_train), UNIT(conv_bn_silu_backward),
    UNIT(conv_bn_backward),
    FUSED(repconv_forward_train), FUSED(repconv_silu_backward), FUSED(repconv_bn_backward),
    FUSED(bn_silu_add_forward_train),
    OPS(bn_forward_train_sync), OPS(bn_backward_sync),   // last: the entries before keep their seeds
};
enum { N_ENTRIES = sizeof ENTRIES / sizeof *ENTRIES };
// Every slot of the three sub-tables has its entry: a new op fails to build until it has a case.
_Static_assert(N_ENTRIES == (sizeof(BackendOps) + sizeof(BackendUnit) + sizeof(BackendFused)) / sizeof(void (*)(void)),
               "test_backend_ops: an op, unit or fused slot of core/spec/backend.h without its entry");

// Whether be states e (its slot is not NULL)
static int has_slot(const Backend *be, const Entry *e) {
    const char *t = e->table == 'o' ? (const char *)&be->ops : e->table == 'u' ? (const char *)&be->unit
                                                                              : (const char *)&be->fused;
    void (*fn)(void);
    memcpy(&fn, t + e->offset, sizeof fn);
    return fn != NULL;
}

// Check mode: each entry a test of its own, on every backend present.
static const Entry *current;
static void run_entry(void) {
    const Entry *e = current;
    if (!e->fn) SKIP("%s", e->why);
    int ran = 0;
    for (int t = 0; t < n_targets; t++) {
        const Target *tg = &targets[t];
        if (!has_slot(tg->be, e)) {
            CHECK(e->table != 'o', "%s: the %s backend leaves the op slot NULL", e->name, tg->name);
            printf("    %s: %s leaves it to the executor's composition\n", e->name, tg->name);
            continue;
        }
        Rng g = rng_for(35, (uint64_t)(e - ENTRIES), 0);   // the same inputs on every backend
        for (int i = 0; i < shape_count(); i++) e->fn(tg, &g, i);
        ran++;
    }
    if (!ran && !t_failed_now) SKIP("no backend present states it (each composes it from the ops)");
}

// Perf mode: each entry (or the one named) on each backend, larger shapes, milliseconds per call (warm-up,
// then perf_reps calls between two waits); for a fused form checked to the bit, also the composition of
// the backend's own ops that it replaces (the A/B of YT_FUSE=0, one kernel at a time).
static int perf(const char *only) {
    perf_reps = 20;
    int found = 0;
    printf("# %-28s %-6s %12s %12s\n", "entry", "backend", "ms per call", "composed");
    for (int k = 0; k < N_ENTRIES; k++) {
        const Entry *e = &ENTRIES[k];
        if (only && strcmp(only, e->name)) continue;
        found = 1;
        for (int t = 0; t < n_targets && e->fn; t++) {
            if (!has_slot(targets[t].be, e)) continue;
            Rng g = rng_for(35, (uint64_t)k, 0);
            perf_seconds = perf_composed = 0;
            e->fn(&targets[t], &g, 0);
            printf("  %-28s %-6s %12.4f", e->name, targets[t].name, perf_seconds * 1e3);
            if (perf_composed > 0) printf(" %12.4f", perf_composed * 1e3);   // what YT_FUSE=0 runs instead
            printf("\n");
        }
    }
    if (!found) printf("no entry named %s\n", only);
    return !found;
}

int main(int argc, char **argv) {
    targets_init();
    if (argc > 1 && !strcmp(argv[1], "perf")) {
        int rc = perf(argc > 2 ? argv[2] : NULL);
        targets_free();
        return rc;
    }
    for (int k = 0; k < N_ENTRIES; k++) {
        current = &ENTRIES[k];
        test_run_(ENTRIES[k].name, run_entry);
    }
    targets_free();
    return test_summary();
}
