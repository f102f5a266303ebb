// test_gpu_ops26.c: the CUDA twins of core/spec/ops26.h (gpu/dwconv.cu, gpu/attn.cu) against their CPU twins on
// the same random inputs: odd shapes, batch 1, channel slices (ld > C) with guard values checked after
// each op, backward onto random priors (+=). fp32, TF32 off, to |gpu - cpu| <= atol + rtol·|cpu| (test/test.h). Without CUDA in the
// build, or without a GPU, every test is a skip.
// Legend: N batch, C channels, H,W in, P,Q out, k kernel, T tokens, nh heads.
#include "core/spec/ops26.h"
#include "core/base/util.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/ops26.h"
#endif

#define GPU_TESTS(X) X(test_dwconv) X(test_attention)

#define GPU_ARENAS { 0, 0, 0, (size_t)256 << 20, (size_t)256 << 20 }
#include "test/gpu_harness.h"
#ifdef USE_CUDA

static const float GUARD = -777.0f;   // fills every element outside a slice; must survive each op
static const double RTOL = 1e-4, AREL = 1e-5;   // |gpu - cpu| <= AREL*max|cpu| + RTOL*|cpu|

// One (N,H,W,C) map on the host (h) and the device (d), each the channel slice [extra, extra+C) of a
// buffer with ld = C + 2*extra, all GUARD outside. Vectors are (1,1,1,n) maps.
typedef struct { Map h, d; int extra; size_t total; } Pair;

static void pair_upload(Pair p) {
    checkCuda(cudaMemcpyAsync(p.d.data - p.extra, p.h.data - p.extra, p.total * sizeof(float),
                              cudaMemcpyHostToDevice, dev.stream));
    device_sync(&dev);
}

static Pair pair_new(int N, int H, int W, int C, int extra) {
    Pair p;
    int ld = C + 2 * extra;
    p.extra = extra;
    p.total = (size_t)N * H * W * ld;
    float *hb = xmalloc(p.total * sizeof(float)), *db = arena_take(&dev.acts, p.total * 4, 256);
    for (size_t i = 0; i < p.total; i++) hb[i] = GUARD;
    p.h = (Map){ hb + extra, N, H, W, C, ld, 0, 0 };
    p.d = (Map){ db + extra, N, H, W, C, ld, 0, 0 };
    pair_upload(p);
    return p;
}
static Pair vec_new(size_t n) { return pair_new(1, 1, 1, (int)n, 0); }
static void pair_free(Pair p) { free(p.h.data - p.extra); }
static float *elem(Map m, size_t j) { return m.data + (j / m.C) * m.ld + j % m.C; }

static void pair_rand(Pair p, Rng *g, double lo, double hi) {
    for (size_t j = 0; j < map_floats(p.h); j++) *elem(p.h, j) = (float)rng_uniform(g, lo, hi);
    pair_upload(p);
}

// The device buffer (guards included) against the host one, which holds the CPU twin's result.
static void compare(const char *what, Pair p) {
    device_sync(&dev);
    float *got = xmalloc(p.total * sizeof(float));
    checkCuda(cudaMemcpy(got, p.d.data - p.extra, p.total * sizeof(float), cudaMemcpyDeviceToHost));
    Map g = p.h;
    g.data = got + p.extra;
    size_t bad_guards = 0, bad = 0, worst = 0, n = map_floats(p.h);
    for (size_t i = 0; i < p.total; i++) {
        int c = (int)(i % p.h.ld);
        if ((c < p.extra || c >= p.extra + p.h.C) && got[i] != GUARD) bad_guards++;
    }
    double maxref = 0.0, worst_err = -1.0;
    for (size_t j = 0; j < n; j++) maxref = fmax(maxref, fabs(*elem(p.h, j)));
    for (size_t j = 0; j < n; j++) {
        double a = *elem(g, j), b = *elem(p.h, j), e = fabs(a - b);
        if (!close_enough(a, b, AREL * maxref, RTOL)) bad++;
        if (e > worst_err || isnan(e)) { worst_err = e; worst = j; }
    }
    CHECK(bad_guards == 0, "%s: %zu guard values outside the slice were overwritten", what, bad_guards);
    CHECK(bad == 0, "%s: %zu of %zu differ; worst [%zu] gpu %.8g cpu %.8g, max err %.3g, max|cpu| %.3g", what,
          bad, n, worst, *elem(g, worst), *elem(p.h, worst), worst_err, maxref);
    for (size_t j = 0, shown = 0; bad && j < n && shown < 5; j++) {
        double a = *elem(g, j), b = *elem(p.h, j);
        if (close_enough(a, b, AREL * maxref, RTOL)) continue;
        printf("      [%zu] gpu %.8g cpu %.8g\n", j, a, b);
        shown++;
    }
    printf("# %-34s max|gpu-cpu|/max|cpu| = %.3g\n", what, maxref > 0 ? worst_err / maxref : worst_err);
    free(got);
}

// ---- depthwise convolution ---------------------------------------------------------------------
typedef struct { int N, C, H, W, k, stride, x_extra, y_extra, bias; } DwCase;
static const DwCase DW_CASES[] = {
    { 1, 5, 7, 9, 3, 1, 0, 0, 1 },      // batch 1, odd sizes
    { 2, 37, 11, 13, 3, 2, 3, 1, 0 },   // stride 2, channels not a multiple of the 32-channel tile
    { 3, 33, 6, 5, 5, 2, 1, 2, 1 },     // 5x5 stride 2, slices in and out
    { 2, 64, 40, 40, 3, 1, 0, 0, 0 },   // many pixels: several partial-sum blocks
    { 8, 24, 130, 130, 3, 1, 1, 0, 1 }, // 135,200 pixels: the most partial-sum blocks (256), lanes wrap rows
    { 2, 9, 15, 17, 7, 1, 0, 2, 1 },    // 7x7: the one-tap-a-block kernel
    { 2, 32, 19, 21, 3, 2, 4, 8, 1 },   // four channels a thread (dwconv_fwd4 / dx4): k3 s2, slices
    { 3, 16, 9, 14, 5, 1, 0, 4, 0 },    // four channels a thread: k5 s1
    { 2, 8, 11, 10, 5, 2, 8, 0, 1 },    // four channels a thread: k5 s2
};

static void dw_case(const DwCase *c, Rng *g) {
    DwDims d = dw_dims(c->N, c->C, c->H, c->W, c->k, c->stride);
    size_t nw = (size_t)d.C * d.k * d.k;
    Pair x = pair_new(d.N, d.H, d.W, d.C, c->x_extra), y = pair_new(d.N, d.P, d.Q, d.C, c->y_extra);
    Pair dy = pair_new(d.N, d.P, d.Q, d.C, c->y_extra), dx = pair_new(d.N, d.H, d.W, d.C, c->x_extra);
    Pair w = vec_new(nw), b = vec_new(d.C), dw = vec_new(nw), db = vec_new(d.C);
    pair_rand(x, g, -1, 1); pair_rand(w, g, -0.5, 0.5); pair_rand(b, g, -1, 1); pair_rand(dy, g, -1, 1);
    pair_rand(dx, g, -1, 1); pair_rand(dw, g, -1, 1); pair_rand(db, g, -1, 1);   // += priors
    const float *bh = c->bias ? b.h.data : NULL, *bd = c->bias ? b.d.data : NULL;
    dwconv_forward_cpu(&d, x.h, w.h.data, bh, y.h);
    dwconv_forward_gpu(&dev, &d, x.d, w.d.data, bd, y.d);
    dwconv_backward_cpu(&d, x.h, w.h.data, dy.h, dx.h, dw.h.data, db.h.data);
    dwconv_backward_gpu(&dev, &d, x.d, w.d.data, dy.d, dx.d, dw.d.data, db.d.data);
    char name[96];
    const char *part[4] = { "y", "dx", "dw", "db" };
    Pair out[4] = { y, dx, dw, db };
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "dwconv %dx%d C%d k%d s%d %s", d.H, d.W, d.C, d.k, d.stride, part[i]);
        compare(name, out[i]);
    }
    CHECK(dev.scratch.used == 0, "dwconv left %zu scratch bytes taken", dev.scratch.used);
    Pair all[] = { x, y, dy, dx, w, b, dw, db };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

static void test_dwconv(void) {
    NEED_GPU();
    Rng g = rng_for(2601, 0, 0);
    for (size_t i = 0; i < sizeof DW_CASES / sizeof *DW_CASES; i++) {
        arena_reset(&dev.acts);
        dw_case(&DW_CASES[i], &g);
    }
}

// ---- attention ---------------------------------------------------------------------------------
typedef struct { int N, H, W, dim, heads, extra; } AttnCase;
static const AttnCase ATTN_CASES[] = {
    { 1, 3, 5, 8, 2, 0 },      // batch 1, T = 15, hd 4, kd 2
    { 2, 5, 7, 12, 3, 3 },     // odd T = 35, 3 heads, slices
    { 2, 4, 4, 6, 1, 1 },      // one head, kd 3
    { 1, 20, 20, 256, 4, 0 },  // YOLO26-s at 640: T = 400, hd 64, kd 32
};

static void attn_case(const AttnCase *c, Rng *g) {
    AttnDims d = attn_dims(c->N, c->H, c->W, c->dim, c->heads, 0.5);
    int Ct = attn_qkv_channels(&d), C = d.heads * d.head_dim;
    Pair qkv = pair_new(d.N, d.H, d.W, Ct, c->extra), y = pair_new(d.N, d.H, d.W, C, c->extra);
    Pair v = pair_new(d.N, d.H, d.W, C, 0), dy = pair_new(d.N, d.H, d.W, C, c->extra);
    Pair dv = pair_new(d.N, d.H, d.W, C, 1), dq = pair_new(d.N, d.H, d.W, Ct, c->extra);
    Pair p = vec_new(attn_probs_floats(&d));
    pair_rand(qkv, g, -2, 2); pair_rand(dy, g, -1, 1); pair_rand(dv, g, -1, 1); pair_rand(dq, g, -1, 1);
    float *ws = xmalloc(attn_workspace_floats(&d) * sizeof(float));
    attn26_forward_cpu(&d, qkv.h, y.h, v.h, p.h.data);
    attn26_forward_gpu(&dev, &d, qkv.d, y.d, v.d, p.d.data);
    attn26_backward_cpu(&d, qkv.h, p.h.data, dy.h, dv.h, dq.h, ws);
    attn26_backward_gpu(&dev, &d, qkv.d, p.d.data, dy.d, dv.d, dq.d);
    char name[96];
    const char *part[4] = { "y", "v", "softmax", "dqkv" };
    Pair out[4] = { y, v, p, dq };
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "attn N%d T%d nh%d kd%d hd%d %s", d.N, d.H * d.W, d.heads, d.key_dim,
                 d.head_dim, part[i]);
        compare(name, out[i]);
    }
    CHECK(dev.scratch.used == 0, "attention left %zu scratch bytes taken", dev.scratch.used);
    free(ws);
    Pair all[] = { qkv, y, v, dy, dv, dq, p };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

static void test_attention(void) {
    NEED_GPU();
    Rng g = rng_for(2602, 0, 0);
    for (size_t i = 0; i < sizeof ATTN_CASES / sizeof *ATTN_CASES; i++) {
        arena_reset(&dev.acts);
        attn_case(&ATTN_CASES[i], &g);
    }
}

GPU_MAIN()
#endif
