// test_ops.c: the CPU ops of core/spec/ops.h. Gradient checks (central differences of a random-weighted sum, in double) for every op with a
// backward, the GEMM conv path against the plain loops on channel slices with guard values, and
// BatchNorm against a double-precision computation. Legend: N batch, C/K channels, H,W in, P,Q out.
#include <pthread.h>

#include "core/spec/ops.h"
#include "core/base/util.h"
#include "test/test.h"

static const float GUARD = -777.0f;   // fills the channels outside a slice; must survive every op
static const double H_STEP = 1e-2;    // finite-difference step

// ---- maps, vectors and comparisons --------------------------------------------------------

// A (N,H,W,C) map that is the channel slice [extra, extra+C) of a buffer with ld = C + 2*extra;
// every element (inside the slice too) starts as GUARD.
static Map map_new(int N, int H, int W, int C, int extra) {
    int ld = C + 2 * extra;
    size_t n = (size_t)N * H * W * ld;
    float *buf = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) buf[i] = GUARD;
    Map m = { buf + extra, N, H, W, C, ld, 0, 0 };
    return m;
}
static void map_free(Map m) { free(m.data - (m.ld - m.C) / 2); }

// element j of the map in (n, h, w, c) order
static float *elem(Map m, size_t j) { return m.data + (j / m.C) * m.ld + j % m.C; }

static int guards_intact(Map m) {
    int extra = (m.ld - m.C) / 2;
    const float *buf = m.data - extra;
    for (size_t i = 0; i < map_pixels(m); i++)
        for (int c = 0; c < m.ld; c++)
            if ((c < extra || c >= extra + m.C) && buf[i * m.ld + c] != GUARD) return 0;
    return 1;
}

static void map_rand(Map m, Rng *g, double lo, double hi) {
    for (size_t j = 0; j < map_floats(m); j++) *elem(m, j) = (float)rng_uniform(g, lo, hi);
}
static void map_copy_values(Map src, Map dst) {
    for (size_t j = 0; j < map_floats(src); j++) *elem(dst, j) = *elem(src, j);
}
static float *vec_rand(size_t n, Rng *g, double lo, double hi) {
    float *v = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = (float)rng_uniform(g, lo, hi);
    return v;
}
static float *vec_dup(const float *v, size_t n) {
    float *c = xmalloc(n * sizeof(float));
    memcpy(c, v, n * sizeof(float));
    return c;
}
static Map vec_map(float *v, size_t n) { return map_make(v, 1, 1, 1, (int)n); }

// L = Σ r_i·y_i, in double
static double dot(Map y, const float *r) {
    double s = 0.0;
    for (size_t j = 0; j < map_floats(y); j++) s += (double)r[j] * *elem(y, j);
    return s;
}

// got (+ prior, when given) against ref, element by element; prints the worst element on failure
static void compare(const char *what, Map got, Map ref, const float *prior, double rtol) {
    double maxref = 0.0;
    for (size_t j = 0; j < map_floats(ref); j++) maxref = fmax(maxref, fabs(*elem(ref, j)));
    size_t bad = 0, worst = 0;
    double worst_err = -1.0;
    for (size_t j = 0; j < map_floats(ref); j++) {
        double want = *elem(ref, j) + (prior ? prior[j] : 0.0), err = fabs(*elem(got, j) - want);
        if (!close_enough(*elem(got, j), want, 1e-5 * maxref + 1e-7, rtol)) bad++;
        if (err > worst_err || isnan(err)) { worst_err = err; worst = j; }
    }
    double want = *elem(ref, worst) + (prior ? prior[worst] : 0.0);
    CHECK(bad == 0, "%s: %zu of %zu elements differ; worst [%zu] got %.8g want %.8g", what, bad,
          map_floats(ref), worst, *elem(got, worst), want);
}

// ---- gradient check -----------------------------------------------------------------------

typedef double (*LossFn)(void *ctx);
typedef int (*KinkFn)(void *ctx, Map v, size_t j);   // 1: v[j] is within a step of a kink

// Central differences of loss() in v at up to 200 sampled elements, against the analytic ana.
static void grad_check(const char *what, LossFn loss, void *ctx, Map v, Map ana, KinkFn kink) {
    size_t n = map_floats(v), tried = n < 200 ? n : 200, checked = 0, bad = 0;
    Rng g = rng_for(99, n, 0);
    for (size_t t = 0; t < tried; t++) {
        size_t j = n <= 200 ? t : (size_t)rng_int(&g, (int)n);
        if (kink && kink(ctx, v, j)) continue;
        float *p = elem(v, j), x0 = *p, xp = (float)(x0 + H_STEP), xm = (float)(x0 - H_STEP);
        *p = xp;
        double lp = loss(ctx);
        *p = xm;
        double lm = loss(ctx);
        *p = x0;
        double num = (lp - lm) / ((double)xp - xm), a = *elem(ana, j);
        checked++;
        if (fabs(a - num) <= 1e-3 + 1e-2 * fmax(fabs(a), fabs(num))) continue;
        if (bad++ < 3) printf("    %s[%zu]: analytic %.7g numeric %.7g\n", what, j, a, num);
    }
    CHECK(bad == 0, "%s: %zu of %zu sampled gradients wrong", what, bad, checked);
    CHECK(checked * 2 >= tried, "%s: only %zu of %zu samples away from kinks", what, checked,
          tried);
}

// ---- convolution --------------------------------------------------------------------------

typedef struct { int N, C, H, W, K, k, stride, pad, groups, grad_check; } ConvShape;

static const ConvShape conv_shapes[] = {
    { 2, 3, 5, 5, 4, 3, 1, 1, 1, 1 },        // 3x3 same padding
    { 2, 3, 5, 5, 4, 3, 2, 1, 1, 1 },        // stride 2, pad 1
    { 2, 8, 5, 5, 8, 3, 1, 1, 4, 1 },        // groups 4 (the head's box branch)
    { 2, 3, 5, 5, 4, 1, 1, 0, 1, 1 },        // pointwise: input used directly by the GEMM
    { 2, 8, 5, 5, 8, 1, 1, 0, 4, 1 },        // pointwise, groups 4
    { 2, 6, 5, 5, 6, 3, 1, 1, 6, 1 },        // depthwise
    { 1, 4, 6, 7, 5, 3, 2, 1, 1, 1 },        // batch 1, even and non-square, stride 2
    { 2, 3, 7, 7, 2, 5, 2, 2, 1, 1 },        // k 5
    { 2, 3, 5, 5, 4, 1, 2, 0, 1, 1 },        // 1x1 stride 2: the im2col path
    { 2, 4, 5, 5, 3, 3, 1, 0, 1, 1 },        // unpadded
    { 1, 512, 32, 31, 4, 3, 1, 1, 1, 0 },    // several im2col chunks
    { 4, 512, 17, 16, 8, 3, 2, 1, 4, 0 },    // several chunks, groups 4
};

typedef struct { ConvDims d; Map x, y; float *w, *b, *r; } ConvCase;

static double conv_loss(void *ctx) {
    ConvCase *t = ctx;
    conv_forward_ref(&t->d, t->x, t->w, t->b, t->y);
    return dot(t->y, t->r);
}

// conv_forward_cpu / conv_backward_cpu on channel slices (ld > C) against the reference results
// y, dx, dw, db; the gradients start from random priors to check that they accumulate.
static void conv_compare_gemm(ConvCase *t, Map dx, const float *dw, const float *db, Rng *g) {
    const ConvDims *d = &t->d;
    size_t wn = (size_t)d->K * (d->C / d->groups) * d->R * d->S;
    Map x = map_new(d->N, d->H, d->W, d->C, 3), y = map_new(d->N, d->P, d->Q, d->K, 2);
    Map dy = map_new(d->N, d->P, d->Q, d->K, 1), gx = map_new(d->N, d->H, d->W, d->C, 2);
    map_copy_values(t->x, x);
    map_copy_values(map_make(t->r, d->N, d->P, d->Q, d->K), dy);
    map_rand(gx, g, -1, 1);
    float *prior_x = xmalloc(map_floats(gx) * sizeof(float));
    for (size_t j = 0; j < map_floats(gx); j++) prior_x[j] = *elem(gx, j);
    float *prior_w = vec_rand(wn, g, -1, 1), *gw = vec_dup(prior_w, wn);
    float *prior_b = vec_rand(d->K, g, -1, 1), *gb = vec_dup(prior_b, d->K);
    float *ws = xmalloc((conv_workspace_floats(d) + 1) * sizeof(float));

    conv_forward_cpu(d, x, t->w, t->b, y, ws);
    conv_backward_cpu(d, x, t->w, dy, gx, gw, gb, ws);
    compare("gemm y", y, t->y, NULL, 1e-4);
    compare("gemm dx", gx, dx, prior_x, 1e-4);
    compare("gemm dw", vec_map(gw, wn), vec_map((float *)dw, wn), prior_w, 1e-4);
    compare("gemm db", vec_map(gb, d->K), vec_map((float *)db, d->K), prior_b, 1e-4);
    CHECK(guards_intact(x) && guards_intact(y) && guards_intact(dy) && guards_intact(gx),
          "a conv wrote outside its channel slice");
    map_free(x), map_free(y), map_free(dy), map_free(gx);
    free(prior_x), free(prior_w), free(gw), free(prior_b), free(gb), free(ws);
}

static void conv_case(int i) {
    const ConvShape *s = &conv_shapes[i];
    ConvDims d = conv_dims(s->N, s->C, s->H, s->W, s->K, s->k, s->stride, s->pad, s->groups);
    size_t wn = (size_t)d.K * (d.C / d.groups) * d.R * d.S, yn = (size_t)d.N * d.P * d.Q * d.K;
    Rng g = rng_for(1, (uint64_t)i, 0);
    ConvCase t = { d, map_new(d.N, d.H, d.W, d.C, 0), map_new(d.N, d.P, d.Q, d.K, 0),
                   vec_rand(wn, &g, -1, 1), vec_rand(d.K, &g, -1, 1), vec_rand(yn, &g, -1, 1) };
    map_rand(t.x, &g, -1, 1);
    Map dx = map_new(d.N, d.H, d.W, d.C, 0);
    zero_map_cpu(dx);
    float *dw = xcalloc(wn, sizeof(float)), *db = xcalloc(d.K, sizeof(float));
    conv_backward_ref(&d, t.x, t.w, map_make(t.r, d.N, d.P, d.Q, d.K), dx, dw, db);
    if (s->grad_check) {
        grad_check("conv dx", conv_loss, &t, t.x, dx, NULL);
        grad_check("conv dw", conv_loss, &t, vec_map(t.w, wn), vec_map(dw, wn), NULL);
        grad_check("conv db", conv_loss, &t, vec_map(t.b, d.K), vec_map(db, d.K), NULL);
    }
    conv_loss(&t);   // t.y = reference output at the unperturbed point
    conv_compare_gemm(&t, dx, dw, db, &g);
    map_free(t.x), map_free(t.y), map_free(dx);
    free(t.w), free(t.b), free(t.r), free(dw), free(db);
}

static void test_conv(void) {
    int n = (int)(sizeof conv_shapes / sizeof conv_shapes[0]);
    for (int i = 0; i < n; i++) {
        int failed_before = t_failed_now;
        t_failed_now = 0;
        conv_case(i);
        const ConvShape *s = &conv_shapes[i];
        if (t_failed_now)
            printf("    ^ conv N=%d C=%d H=%d W=%d K=%d k=%d stride=%d pad=%d groups=%d\n", s->N,
                   s->C, s->H, s->W, s->K, s->k, s->stride, s->pad, s->groups);
        t_failed_now |= failed_before;
    }
}

static void test_conv_dims(void) {
    ConvDims d = conv_dims(4, 64, 64, 64, 128, 3, 2, 1, 1);
    CHECK(d.P == 32 && d.Q == 32 && d.R == 3 && d.S == 3, "3x3 s2 p1 on 64: P=%d Q=%d", d.P, d.Q);
    d = conv_dims(1, 8, 7, 6, 8, 3, 2, 1, 4);
    CHECK(d.P == 4 && d.Q == 3 && d.groups == 4, "3x3 s2 p1 on 7x6: P=%d Q=%d", d.P, d.Q);
    CHECK(conv_workspace_floats(&d) >= (size_t)8 * 9, "workspace holds at least one im2col row");
    d = conv_dims(16, 256, 80, 80, 128, 1, 1, 0, 1);
    CHECK(conv_workspace_floats(&d) == 0, "a pointwise conv needs no workspace");
    d = conv_dims(16, 64, 320, 320, 128, 3, 2, 1, 1);
    CHECK(conv_workspace_floats(&d) <= (size_t)1 << 22, "workspace bounded at 640 px: %zu floats",
          conv_workspace_floats(&d));
}

// ---- batch normalisation ------------------------------------------------------------------

enum { BN_EXTRA = 2 };
static const float BN_EPS = 1e-3f, BN_MOMENTUM = 0.03f;

// double-precision batch statistics of channel c (biased variance)
static void bn_stats_ref(Map z, int c, double *mean, double *var) {
    size_t M = map_pixels(z);
    double s = 0.0, v = 0.0;
    for (size_t m = 0; m < M; m++) s += z.data[m * z.ld + c];
    s /= (double)M;
    for (size_t m = 0; m < M; m++) v += (z.data[m * z.ld + c] - s) * (z.data[m * z.ld + c] - s);
    *mean = s, *var = v / (double)M;
}

// u = (z - mean) / sqrt(var + eps) * gamma + beta, in double, into a packed map
static void bn_apply_ref(Map z, int c, double mean, double var, double gamma, double beta, Map u) {
    double invstd = 1.0 / sqrt(var + BN_EPS);
    for (size_t m = 0; m < map_pixels(z); m++)
        u.data[m * u.ld + c] = (float)((z.data[m * z.ld + c] - mean) * invstd * gamma + beta);
}

static void bn_train_case(int N, int C, int H, int W, double offset) {
    Rng g = rng_for(2, (uint64_t)C, (uint64_t)offset);
    Map z = map_new(N, H, W, C, BN_EXTRA), u = map_new(N, H, W, C, BN_EXTRA);
    Map want = map_new(N, H, W, C, 0);
    map_rand(z, &g, offset - 1, offset + 1);
    float *gamma = vec_rand(C, &g, 0.5, 1.5), *beta = vec_rand(C, &g, -0.5, 0.5);
    float *rm = vec_rand(C, &g, -0.5, 0.5), *rv = vec_rand(C, &g, 0.5, 1.5);
    float *rm0 = vec_dup(rm, C), *rv0 = vec_dup(rv, C);
    float *mean = xmalloc(C * sizeof(float)), *invstd = xmalloc(C * sizeof(float));
    bn_forward_train_cpu(z, gamma, beta, BN_EPS, BN_MOMENTUM, rm, rv, mean, invstd, u);
    double M = (double)map_pixels(z);
    int bad_stats = 0;
    for (int c = 0; c < C; c++) {
        double mu, var;
        bn_stats_ref(z, c, &mu, &var);
        bn_apply_ref(z, c, mu, var, gamma[c], beta[c], want);
        bad_stats += !close_enough(mean[c], mu, 1e-6, 1e-6);
        bad_stats += !close_enough(invstd[c], 1.0 / sqrt(var + BN_EPS), 0, 1e-6);
        bad_stats += !close_enough(rm[c], 0.97 * rm0[c] + 0.03 * mu, 1e-7, 1e-6);
        bad_stats += !close_enough(rv[c], 0.97 * rv0[c] + 0.03 * var * M / (M - 1), 1e-7, 1e-6);
    }
    CHECK(bad_stats == 0, "C=%d offset %g: %d wrong mean/invstd/running values", C, offset,
          bad_stats);
    compare("bn train u", u, want, NULL, 1e-5);
    CHECK(guards_intact(u) && guards_intact(z), "bn wrote outside its channel slice");

    bn_forward_eval_cpu(z, gamma, beta, BN_EPS, rm0, rv0, u);
    for (int c = 0; c < C; c++) bn_apply_ref(z, c, rm0[c], rv0[c], gamma[c], beta[c], want);
    compare("bn eval u", u, want, NULL, 1e-5);
    CHECK(guards_intact(u), "bn eval wrote outside its channel slice");
    map_free(z), map_free(u), map_free(want);
    free(gamma), free(beta), free(rm), free(rv), free(rm0), free(rv0), free(mean), free(invstd);
}

static void test_bn_forward(void) {
    bn_train_case(2, 3, 5, 5, 0.0);
    bn_train_case(2, 70, 3, 3, 0.0);    // more channels than one accumulation block
    bn_train_case(2, 3, 5, 5, 50.0);    // mean far from 0: statistics must not cancel
}

typedef struct { Map z, u; float *gamma, *beta, *mean, *invstd, *r; } BnCase;

static double bn_loss(void *ctx) {
    BnCase *t = ctx;
    bn_forward_train_cpu(t->z, t->gamma, t->beta, BN_EPS, BN_MOMENTUM, NULL, NULL, t->mean,
                         t->invstd, t->u);
    return dot(t->u, t->r);
}

// dz in double from the textbook formula, for the accuracy check
static void bn_backward_ref(BnCase *t, int c, Map dz) {
    Map z = t->z;
    size_t M = map_pixels(z);
    double mu, var, sdu = 0.0, sdux = 0.0;
    bn_stats_ref(z, c, &mu, &var);
    double is = 1.0 / sqrt(var + BN_EPS);
    for (size_t m = 0; m < M; m++) {
        sdu += t->r[m * z.C + c];
        sdux += t->r[m * z.C + c] * (z.data[m * z.ld + c] - mu) * is;
    }
    for (size_t m = 0; m < M; m++) {
        double xhat = (z.data[m * z.ld + c] - mu) * is;
        double du = t->r[m * z.C + c];
        dz.data[m * dz.ld + c] = (float)(t->gamma[c] * is * (du - sdu / M - xhat * sdux / M));
    }
}

static void test_bn_backward(void) {
    int N = 2, C = 3, H = 5, W = 5;
    Rng g = rng_for(3, 0, 0);
    BnCase t = { map_new(N, H, W, C, BN_EXTRA), map_new(N, H, W, C, 0), vec_rand(C, &g, 0.5, 1.5),
                 vec_rand(C, &g, -0.5, 0.5), xmalloc(C * sizeof(float)), xmalloc(C * sizeof(float)),
                 vec_rand((size_t)N * H * W * C, &g, -1, 1) };
    map_rand(t.z, &g, -1, 1);
    bn_loss(&t);
    Map dz = map_new(N, H, W, C, BN_EXTRA), want = map_new(N, H, W, C, 0);
    float *dgamma = vec_rand(C, &g, -1, 1), *dbeta = vec_rand(C, &g, -1, 1);
    float *gamma0 = vec_dup(dgamma, C), *beta0 = vec_dup(dbeta, C);   // priors: they accumulate
    bn_backward_cpu(t.z, t.gamma, t.mean, t.invstd, map_make(t.r, N, H, W, C), dz, dgamma, dbeta);
    for (int c = 0; c < C; c++) dgamma[c] -= gamma0[c], dbeta[c] -= beta0[c];
    grad_check("bn dz", bn_loss, &t, t.z, dz, NULL);
    grad_check("bn dgamma", bn_loss, &t, vec_map(t.gamma, C), vec_map(dgamma, C), NULL);
    grad_check("bn dbeta", bn_loss, &t, vec_map(t.beta, C), vec_map(dbeta, C), NULL);
    for (int c = 0; c < C; c++) bn_backward_ref(&t, c, want);
    compare("bn dz vs double", dz, want, NULL, 1e-4);
    CHECK(guards_intact(dz), "bn backward wrote outside its channel slice");
    map_free(t.z), map_free(t.u), map_free(dz), map_free(want);
    free(t.gamma), free(t.beta), free(t.mean), free(t.invstd), free(t.r);
    free(dgamma), free(dbeta), free(gamma0), free(beta0);
}

// ---- synchronised BN: the whole batch's statistics from parts (core/spec/ops.h BnSync) -------------------

static void sum_alone(void *arg, double *v, int n) { (void)arg; (void)v; (void)n; }

// Two threads, each with its part of the batch, meeting at every sum (as core/devices/multi.c's devices do)
typedef struct { pthread_barrier_t b; double *v[2], acc[64]; int calls; } Pair;
typedef struct { Pair *p; int k; } PairArg;
static void sum_pair(void *arg, double *v, int n) {
    PairArg *a = arg;
    a->p->v[a->k] = v;
    pthread_barrier_wait(&a->p->b);
    if (a->k == 0) { for (int i = 0; i < n; i++) a->p->acc[i] = a->p->v[0][i] + a->p->v[1][i]; a->p->calls++; }
    pthread_barrier_wait(&a->p->b);
    memcpy(v, a->p->acc, sizeof(double) * n);
    pthread_barrier_wait(&a->p->b);
}

enum { SB_N = 4, SB_C = 5, SB_H = 3, SB_W = 3 };
typedef struct {
    PairArg arg; Map z, u, du, dz; const float *gamma, *beta;
    float mean[SB_C], invstd[SB_C], rm[SB_C], rv[SB_C], dgamma[SB_C], dbeta[SB_C];
} SyncPart;

static Map part_of(Map m, int first, int n) {   // images first .. first+n-1 of m
    Map p = m;
    p.data += (size_t)first * m.H * m.W * m.ld;
    p.N = n;
    return p;
}

static void *sync_part_run(void *arg) {
    SyncPart *q = arg;
    BnSync s = { sum_pair, &q->arg };
    bn_forward_train_sync_cpu(q->z, q->gamma, q->beta, BN_EPS, 0.1f, q->rm, q->rv, q->mean, q->invstd, q->u, &s);
    bn_backward_sync_cpu(q->z, q->gamma, q->mean, q->invstd, q->du, q->dz, q->dgamma, q->dbeta, &s);
    return NULL;
}

static int same_floats(const float *a, const float *b, int n) { return !memcmp(a, b, sizeof(float) * n); }

// One device alone: bn_forward_train_cpu's statistics and bn_backward_cpu's bits. Two devices with a batch's
// parts (1 + 3 images): the whole batch's statistics, normalised output and gradients; dgamma, dbeta are each
// device's own (their sum the whole batch's).
static void test_bn_sync(void) {
    int N = SB_N, C = SB_C, H = SB_H, W = SB_W;
    Rng g = rng_for(4, 0, 0);
    Map z = map_new(N, H, W, C, BN_EXTRA), u = map_new(N, H, W, C, 0), du = map_new(N, H, W, C, 0);
    map_rand(z, &g, -1, 3);
    map_rand(du, &g, -1, 1);
    float *gamma = vec_rand(C, &g, 0.5, 1.5), *beta = vec_rand(C, &g, -0.5, 0.5);
    float mean[SB_C], invstd[SB_C], rm[SB_C] = { 0 }, rv[SB_C] = { 1, 1, 1, 1, 1 }, dgamma[SB_C] = { 0 }, dbeta[SB_C] = { 0 };
    bn_forward_train_cpu(z, gamma, beta, BN_EPS, 0.1f, rm, rv, mean, invstd, u);
    Map dz = map_new(N, H, W, C, 0);
    bn_backward_cpu(z, gamma, mean, invstd, du, dz, dgamma, dbeta);

    SyncPart one = { .z = z, .u = map_new(N, H, W, C, 0), .du = du, .dz = map_new(N, H, W, C, 0), .gamma = gamma,
                     .beta = beta, .rv = { 1, 1, 1, 1, 1 } };
    BnSync alone = { sum_alone, NULL };
    bn_forward_train_sync_cpu(z, gamma, beta, BN_EPS, 0.1f, one.rm, one.rv, one.mean, one.invstd, one.u, &alone);
    bn_backward_sync_cpu(z, gamma, one.mean, one.invstd, du, one.dz, one.dgamma, one.dbeta, &alone);
    CHECK(same_floats(one.mean, mean, C) && same_floats(one.invstd, invstd, C) && same_floats(one.rm, rm, C) &&
          same_floats(one.rv, rv, C), "one device: not bn_forward_train_cpu's statistics");
    Map applied = map_new(N, H, W, C, 0);
    bn_apply_cpu(z, gamma, beta, mean, invstd, applied);
    CHECK(!memcmp(one.u.data, applied.data, map_floats(u) * sizeof(float)), "one device: u is not bn_apply's");
    CHECK(!memcmp(one.dz.data, dz.data, map_floats(dz) * sizeof(float)) && same_floats(one.dgamma, dgamma, C) &&
          same_floats(one.dbeta, dbeta, C), "one device: not bn_backward_cpu's bits");

    Pair pair = { .calls = 0 };
    pthread_barrier_init(&pair.b, NULL, 2);
    SyncPart part[2];
    Map pu = map_new(N, H, W, C, 0), pdz = map_new(N, H, W, C, 0);
    pthread_t th[2];
    for (int k = 0; k < 2; k++) {
        int first = k ? 1 : 0, n = k ? 3 : 1;
        part[k] = (SyncPart){ { &pair, k }, part_of(z, first, n), part_of(pu, first, n), part_of(du, first, n),
                              part_of(pdz, first, n), gamma, beta, .rv = { 1, 1, 1, 1, 1 } };
        pthread_create(&th[k], NULL, sync_part_run, &part[k]);
    }
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&pair.b);
    CHECK(pair.calls == 3, "%d sums: the forward's two and the backward's one", pair.calls);
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < C; c++) {
            CHECK(close_enough(part[k].mean[c], mean[c], 1e-7, 1e-6) && close_enough(part[k].invstd[c], invstd[c], 0, 1e-6),
                  "device %d channel %d: mean %g invstd %g, the whole batch's %g %g", k, c, part[k].mean[c],
                  part[k].invstd[c], mean[c], invstd[c]);
            CHECK(close_enough(part[k].rm[c], rm[c], 1e-7, 1e-6) && close_enough(part[k].rv[c], rv[c], 0, 1e-6),
                  "device %d channel %d: running statistics", k, c);
        }
    compare("synced u vs the whole batch's", pu, applied, NULL, 1e-5);
    compare("synced dz vs the whole batch's", pdz, dz, NULL, 1e-5);
    for (int c = 0; c < C; c++)
        CHECK(close_enough(part[0].dgamma[c] + part[1].dgamma[c], dgamma[c], 1e-6, 1e-5) &&
              close_enough(part[0].dbeta[c] + part[1].dbeta[c], dbeta[c], 1e-6, 1e-5) &&
              !close_enough(part[0].dbeta[c], dbeta[c], 1e-6, 1e-5), "channel %d: dgamma, dbeta are each device's own", c);
    map_free(z), map_free(u), map_free(du), map_free(dz), map_free(one.u), map_free(one.dz), map_free(applied);
    map_free(pu), map_free(pdz);
    free(gamma), free(beta);
}

// ---- elementwise --------------------------------------------------------------------------

typedef struct { Map u, y; float *r; } SiluCase;

static double silu_loss(void *ctx) {
    SiluCase *t = ctx;
    silu_forward_cpu(t->u, t->y);
    return dot(t->y, t->r);
}

static void test_silu(void) {
    int N = 2, C = 3, H = 5, W = 5;
    Rng g = rng_for(4, 0, 0);
    SiluCase t = { map_new(N, H, W, C, 1), map_new(N, H, W, C, 2),
                   vec_rand((size_t)N * H * W * C, &g, -1, 1) };
    map_rand(t.u, &g, -4, 4);
    Map du = map_new(N, H, W, C, 1);
    silu_backward_cpu(t.u, map_make(t.r, N, H, W, C), du);
    grad_check("silu du", silu_loss, &t, t.u, du, NULL);
    silu_loss(&t);
    for (size_t j = 0; j < map_floats(t.u); j++) {
        double u = *elem(t.u, j), want = u / (1.0 + exp(-u));
        if (!close_enough(*elem(t.y, j), want, 1e-7, 1e-6))
            CHECK(0, "silu(%g) = %g, want %g", u, *elem(t.y, j), want);
    }
    Map in_place = map_new(N, H, W, C, 1);
    map_copy_values(t.u, in_place);
    silu_forward_cpu(in_place, in_place);
    int same = 1;
    for (size_t j = 0; j < map_floats(t.y); j++) same &= *elem(in_place, j) == *elem(t.y, j);
    CHECK(same, "silu in place differs from out of place");
    CHECK(guards_intact(t.y) && guards_intact(du) && guards_intact(in_place), "silu wrote outside");
    map_free(t.u), map_free(t.y), map_free(du), map_free(in_place), free(t.r);
}

static void test_silu_extremes(void) {
    float u[] = { -1e4f, -100.0f, -30.0f, 0.0f, 30.0f, 100.0f, 1e4f }, y[7], du[7], one[7];
    for (int i = 0; i < 7; i++) one[i] = 1.0f;
    silu_forward_cpu(vec_map(u, 7), vec_map(y, 7));
    silu_backward_cpu(vec_map(u, 7), vec_map(one, 7), vec_map(du, 7));
    for (int i = 0; i < 7; i++)
        CHECK(isfinite(y[i]) && isfinite(du[i]), "silu(%g) = %g, silu' = %g", u[i], y[i], du[i]);
    CHECK(y[1] == 0.0f && y[3] == 0.0f && y[5] == 100.0f, "silu(-100, 0, 100) = %g %g %g", y[1],
          y[3], y[5]);
    CHECK(du[3] == 0.5f && du[5] == 1.0f && du[1] == 0.0f, "silu'(0, 100, -100) = %g %g %g", du[3],
          du[5], du[1]);
}

static void test_add_copy_accumulate_zero(void) {
    int N = 2, C = 3, H = 4, W = 5;
    Rng g = rng_for(5, 0, 0);
    Map a = map_new(N, H, W, C, 1), b = map_new(N, H, W, C, 2), y = map_new(N, H, W, C, 3);
    map_rand(a, &g, -1, 1), map_rand(b, &g, -1, 1);
    int bad = 0;
    add_forward_cpu(a, b, y);
    for (size_t j = 0; j < map_floats(a); j++) bad += *elem(y, j) != *elem(a, j) + *elem(b, j);
    CHECK(bad == 0, "add: %d wrong", bad);
    copy_map_cpu(a, y);
    for (size_t j = 0; j < map_floats(a); j++) bad += *elem(y, j) != *elem(a, j);
    CHECK(bad == 0, "copy: %d wrong", bad);
    accumulate_map_cpu(b, y);
    for (size_t j = 0; j < map_floats(a); j++) bad += *elem(y, j) != *elem(a, j) + *elem(b, j);
    CHECK(bad == 0, "accumulate: %d wrong", bad);
    zero_map_cpu(y);
    for (size_t j = 0; j < map_floats(a); j++) bad += *elem(y, j) != 0.0f;
    CHECK(bad == 0, "zero: %d wrong", bad);
    CHECK(guards_intact(a) && guards_intact(b) && guards_intact(y), "wrote outside the slice");
    map_free(a), map_free(b), map_free(y);
}

// ---- pooling and upsampling ---------------------------------------------------------------

typedef enum { POOL_MAX, POOL_AVG, UPSAMPLE } PoolKind;
typedef struct { PoolKind kind; int k, stride, pad; Map x, y; float *r; } PoolCase;

static void pool_forward(PoolCase *t) {
    if (t->kind == POOL_MAX) maxpool_forward_cpu(t->x, t->k, t->stride, t->pad, t->y);
    if (t->kind == POOL_AVG) avgpool_forward_cpu(t->x, t->k, t->stride, t->pad, t->y);
    if (t->kind == UPSAMPLE) upsample_forward_cpu(t->x, t->k, t->y);
}

static double pool_loss(void *ctx) {
    PoolCase *t = ctx;
    pool_forward(t);
    return dot(t->y, t->r);
}

// Max pooling has a kink where x[j] ties with another element of a window it shares.
static int maxpool_kink(void *ctx, Map v, size_t j) {
    PoolCase *t = ctx;
    int c = (int)(j % v.C), w = (int)(j / v.C % v.W), h = (int)(j / v.C / v.W % v.H);
    int n = (int)(j / v.C / v.W / v.H);
    float xj = *elem(v, j);
    for (int hh = h - t->k + 1; hh < h + t->k; hh++)
        for (int ww = w - t->k + 1; ww < w + t->k; ww++) {
            if (hh < 0 || hh >= v.H || ww < 0 || ww >= v.W || (hh == h && ww == w)) continue;
            if (fabs(map_at(v, n, hh, ww)[c] - xj) < 1.5 * H_STEP) return 1;
        }
    return 0;
}

static void pool_case(PoolKind kind, int N, int C, int H, int W, int k, int stride, int pad) {
    int up = kind == UPSAMPLE;
    int P = up ? H * k : (H + 2 * pad - k) / stride + 1;
    int Q = up ? W * k : (W + 2 * pad - k) / stride + 1;
    Rng g = rng_for(6, (uint64_t)kind, (uint64_t)(k * 100 + stride * 10 + pad));
    PoolCase t = { kind, k, stride, pad, map_new(N, H, W, C, 1), map_new(N, P, Q, C, 2),
                   vec_rand((size_t)N * P * Q * C, &g, -1, 1) };
    map_rand(t.x, &g, -1, 1);
    Map dx = map_new(N, H, W, C, 1), dy = map_make(t.r, N, P, Q, C);
    map_rand(dx, &g, -1, 1);
    float *prior = xmalloc(map_floats(dx) * sizeof(float));
    for (size_t j = 0; j < map_floats(dx); j++) prior[j] = *elem(dx, j);
    if (kind == POOL_MAX) maxpool_backward_cpu(t.x, k, stride, pad, dy, dx);
    if (kind == POOL_AVG) avgpool_backward_cpu(k, stride, pad, dy, dx);
    if (kind == UPSAMPLE) upsample_backward_cpu(k, dy, dx);
    for (size_t j = 0; j < map_floats(dx); j++) *elem(dx, j) -= prior[j];   // dx accumulates
    const char *what[] = { "maxpool dx", "avgpool dx", "upsample dx" };
    grad_check(what[kind], pool_loss, &t, t.x, dx, kind == POOL_MAX ? maxpool_kink : NULL);
    CHECK(guards_intact(t.y) && guards_intact(dx), "%s wrote outside its slice", what[kind]);
    if (t_failed_now) printf("    ^ %s k=%d stride=%d pad=%d\n", what[kind], k, stride, pad);
    map_free(t.x), map_free(t.y), map_free(dx), free(t.r), free(prior);
}

static void test_pool_gradients(void) {
    pool_case(POOL_MAX, 2, 3, 5, 5, 3, 2, 1);
    pool_case(POOL_MAX, 2, 3, 5, 5, 5, 1, 2);   // SPPELAN's pool
    pool_case(POOL_MAX, 2, 3, 6, 7, 2, 2, 0);
    pool_case(POOL_AVG, 2, 3, 5, 5, 2, 1, 0);   // AConv's pool
    pool_case(POOL_AVG, 2, 3, 5, 5, 3, 2, 1);
    pool_case(POOL_AVG, 1, 4, 6, 7, 3, 1, 1);
    pool_case(UPSAMPLE, 2, 3, 5, 5, 2, 0, 0);
    pool_case(UPSAMPLE, 1, 2, 3, 4, 3, 0, 0);
    pool_case(UPSAMPLE, 1, 2, 2, 3, 4, 0, 0);   // CBFuse's P5 -> P3
    pool_case(UPSAMPLE, 1, 2, 1, 2, 16, 0, 0);  // gelan-e's CBFuse P5 -> P1
}

// padding never wins a max; ties send the gradient to the first maximum in scan order
static void test_maxpool_padding_and_ties(void) {
    float x[2 * 3 * 3], y[2 * 3 * 3];
    for (int i = 0; i < 18; i++) x[i] = -1.0f - i;   // all negative: a zero pad would win
    maxpool_forward_cpu(map_make(x, 1, 3, 3, 2), 3, 1, 1, map_make(y, 1, 3, 3, 2));
    CHECK(y[0] == -1.0f && y[1] == -2.0f && y[16] == -9.0f && y[17] == -10.0f,
          "padded max pool: corners %g %g %g %g", y[0], y[1], y[16], y[17]);

    float flat[4 * 4], dy[3 * 3], dx[4 * 4] = { 0 };
    for (int i = 0; i < 16; i++) flat[i] = 0.5f;
    for (int i = 0; i < 9; i++) dy[i] = 1.0f;
    maxpool_backward_cpu(map_make(flat, 1, 4, 4, 1), 2, 1, 0, map_make(dy, 1, 3, 3, 1),
                         map_make(dx, 1, 4, 4, 1));
    int bad = 0;
    for (int h = 0; h < 4; h++)
        for (int w = 0; w < 4; w++) bad += dx[h * 4 + w] != (h < 3 && w < 3 ? 1.0f : 0.0f);
    CHECK(bad == 0, "tied max pool: %d pixels got the wrong gradient", bad);
}

static void test_avgpool_upsample_values(void) {
    float x[3 * 3], y[3 * 3], up[6 * 6];
    for (int i = 0; i < 9; i++) x[i] = (float)(i + 1);
    avgpool_forward_cpu(map_make(x, 1, 3, 3, 1), 3, 1, 1, map_make(y, 1, 3, 3, 1));
    CHECK(y[0] == 12.0f / 9.0f && y[4] == 5.0f, "count_include_pad: corner %g, centre %g", y[0],
          y[4]);
    avgpool_forward_cpu(map_make(x, 1, 3, 3, 1), 2, 1, 0, map_make(y, 1, 2, 2, 1));
    CHECK(y[0] == 3.0f && y[3] == 7.0f, "k2 s1 p0: %g %g", y[0], y[3]);
    upsample_forward_cpu(map_make(x, 1, 3, 3, 1), 2, map_make(up, 1, 6, 6, 1));
    int bad = 0;
    for (int h = 0; h < 6; h++)
        for (int w = 0; w < 6; w++) bad += up[h * 6 + w] != x[h / 2 * 3 + w / 2];
    CHECK(bad == 0, "upsample: %d wrong", bad);
}

int main(void) {
    RUN(test_conv_dims);
    RUN(test_conv);
    RUN(test_bn_forward);
    RUN(test_bn_backward);
    RUN(test_bn_sync);
    RUN(test_silu);
    RUN(test_silu_extremes);
    RUN(test_add_copy_accumulate_zero);
    RUN(test_pool_gradients);
    RUN(test_maxpool_padding_and_ties);
    RUN(test_avgpool_upsample_values);
    return test_summary();
}
