// test_gpu_ops.c: the CUDA twins of gpu/ops.h beyond what test_backend_ops checks through the backend table:
// the convolutions in every precision and path (TF32, bf16, cuDNN with and without its engines timed, chunked
// im2col, bf16 dy and dx, the stem at full size), the fused BN + SiLU forms' own outputs (a stored u, the packed
// bf16 dz), the residual with a bf16 output, BN statistics far from zero, zero_map, and the memory discipline;
// against the CPU twins of core/spec/ops.h on the same fresh random inputs, odd shapes and channel slices (ld > C)
// with guard values checked after each op (|gpu - cpu| <= atol + rtol·|cpu|, test/test.h). Without CUDA in the
// build, or without a GPU, every test is a skip.
// Legend: N batch, C/K channels, H,W in, P,Q out, k kernel, G groups.
#include <stdint.h>
#include <string.h>

#include "core/spec/ops.h"
#include "core/base/switches.h"
#include "core/base/util.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/cudnn_conv.h"
#include "gpu/ops.h"
#endif

#define GPU_TESTS(X) X(test_conv_fp32) X(test_conv_tf32) X(test_conv_bf16) X(test_conv_chunked) X(test_conv_stem_large) X(test_conv_bf16dy) \
    X(test_conv_cudnn_bf16) X(test_conv_grouped_dense) X(test_cudnn_tune) X(test_conv_bf16_dx)                                               \
    X(test_bn_silu) X(test_bn_silu_backward) X(test_residual_fused) X(test_bn_offset_variance) X(test_zero_map)     \
    X(test_step_allocates_nothing) X(test_init_refuses)

#define GPU_ARENAS { 0, 0, 0, (size_t)256 << 20, (size_t)256 << 20 }
#include "test/gpu_harness.h"
#ifdef USE_CUDA

static const float GUARD = -777.0f;   // fills every element outside a slice; must survive each op

// Tolerances: |gpu - cpu| <= arel·max|cpu| + rtol·|cpu|. fp32 at rtol 1e-4, arel 1e-5; tf32 rounds
// GEMM inputs to 10 mantissa bits, bf16 to 8, so they are held to a share of the largest value
// (on an H200 the worst seen were 3.1e-4 and 2.5e-3: the bounds leave a 4-6x margin).
typedef struct { double rtol, arel; const char *name; } Tol;
static const Tol FP32 = { 1e-4, 1e-5, "fp32" }, TF32 = { 0.0, 2e-3, "tf32" },
                 BF16 = { 0.0, 1e-2, "bf16" };

// ---- paired host/device buffers (the device: test/gpu_harness.h) -----------------------------

// One (N,H,W,C) map twice: on the host (h) and the device (d), each the channel slice
// [extra, extra+C) of a buffer with ld = C + 2*extra, all GUARD. Vectors are (1,1,1,n) maps.
typedef struct { Map h, d; int extra; size_t total; } Pair;

static void pair_upload(Pair p);

static Pair pair_new(int N, int H, int W, int C, int extra) {
    Pair p;
    int ld = C + 2 * extra;
    p.extra = extra;
    p.total = (size_t)N * H * W * ld;
    float *hb = xmalloc(p.total * sizeof(float)), *db = arena_take(&dev.acts, p.total * 4, 256);
    for (size_t i = 0; i < p.total; i++) hb[i] = GUARD;
    p.h = (Map){ hb + extra, N, H, W, C, ld, 0, 0 };
    p.d = (Map){ db + extra, N, H, W, C, ld, 0, 0 };
    pair_upload(p);   // the guards, on the device too
    return p;
}
static Pair vec_new(int n) { return pair_new(1, 1, 1, n, 0); }
static void pair_free(Pair p) { free(p.h.data - p.extra); }

static void pair_upload(Pair p) {
    checkCuda(cudaMemcpyAsync(p.d.data - p.extra, p.h.data - p.extra, p.total * sizeof(float),
                              cudaMemcpyHostToDevice, dev.stream));
    device_sync(&dev);
}

static float *elem(Map m, size_t j) { return m.data + (j / m.C) * m.ld + j % m.C; }

// fresh values in [lo, hi) in the slice, the same on host and device
static void pair_rand(Pair p, Rng *g, double lo, double hi) {
    for (size_t j = 0; j < map_floats(p.h); j++) *elem(p.h, j) = (float)rng_uniform(g, lo, hi);
    pair_upload(p);
}

// The device buffer (guards included) against the host one, which holds the CPU twin's result.
static void compare(const char *what, Pair p, Tol t) {
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
        if (!close_enough(a, b, t.arel * maxref, t.rtol)) bad++;
        if (e > worst_err || isnan(e)) { worst_err = e; worst = j; }
    }
    CHECK(bad_guards == 0, "%s: %zu guard values outside the slice were overwritten", what,
          bad_guards);
    CHECK(bad == 0, "%s (%s): %zu of %zu differ; worst [%zu] gpu %.8g cpu %.8g, max err %.3g, "
          "max|cpu| %.3g", what, t.name, bad, n, worst, *elem(g, worst), *elem(p.h, worst),
          worst_err, maxref);
    for (size_t j = 0, shown = 0; bad && j < n && shown < 5; j++) {
        double a = *elem(g, j), b = *elem(p.h, j);
        if (close_enough(a, b, t.arel * maxref, t.rtol)) continue;
        printf("      [%zu] gpu %.8g cpu %.8g\n", j, a, b);
        shown++;
    }
    printf("# %-28s %s max|gpu-cpu|/max|cpu| = %.3g\n", what, t.name,
           maxref > 0 ? worst_err / maxref : worst_err);
    free(got);
}

// ---- convolution --------------------------------------------------------------------------

typedef struct { int N, C, H, W, K, k, stride, pad, groups, x_extra, y_extra; } ConvCase;
static const ConvCase CONV_CASES[] = {
    { 3, 13, 13, 13, 19, 3, 1, 1, 1, 3, 2 },    // 3x3, slices in and out
    { 1, 12, 7, 7, 20, 3, 2, 1, 4, 0, 5 },      // stride 2, groups 4 (the head convs)
    { 3, 10, 13, 13, 10, 5, 1, 2, 10, 1, 1 },   // depthwise 5x5
    { 3, 21, 13, 13, 11, 1, 1, 0, 1, 4, 3 },    // pointwise: one GEMM through both ld
    { 1, 16, 13, 13, 8, 1, 2, 0, 4, 0, 0 },     // 1x1 stride 2 groups 4: the im2col path
    { 3, 7, 13, 13, 12, 3, 2, 0, 1, 2, 0 },     // stride 2, no padding, odd size
    { 2, 32, 11, 11, 24, 3, 2, 1, 1, 0, 0 },    // C=32 stride 2 (model.1): 16-byte im2col/col2im
    { 2, 16, 9, 9, 12, 3, 1, 1, 2, 4, 4 },      // 16-byte accesses through groups and ld slices
    { 2, 3, 17, 17, 8, 3, 2, 1, 1, 0, 1 },      // the C=3 stem through im2col (K 8)
    { 2, 3, 17, 17, 16, 3, 2, 1, 1, 1, 2 },     // the stem as gpu/conv_stem.cu computes it (K 16)
    { 1, 3, 9, 11, 32, 3, 1, 1, 1, 0, 0 },      // stride 1, K 32 (conv_stem.cu)
};
static const int CHUNKED_CASES[] = { 0, 1, 2, 6, 7, 8 };

// compare() under the name "PATH kR sS gG WHICH" of conv d's output `which`
static void compare_conv(const char *path, const ConvDims *d, const char *which, Pair p, Tol t) {
    char name[64];
    snprintf(name, sizeof name, "%s k%d s%d g%d %s", path, d->R, d->stride, d->groups, which);
    compare(name, p, t);
}

static void conv_case(const ConvCase *cc, int with_bias, Tol t, Rng *g) {
    ConvDims d = conv_dims(cc->N, cc->C, cc->H, cc->W, cc->K, cc->k, cc->stride, cc->pad,
                           cc->groups);
    size_t nw = (size_t)d.K * (d.C / d.groups) * d.R * d.S;
    Pair x = pair_new(d.N, d.H, d.W, d.C, cc->x_extra), y = pair_new(d.N, d.P, d.Q, d.K, cc->y_extra);
    Pair w = vec_new((int)nw), b = vec_new(d.K), dy = pair_new(d.N, d.P, d.Q, d.K, cc->y_extra);
    Pair dx = pair_new(d.N, d.H, d.W, d.C, cc->x_extra), dw = vec_new((int)nw), db = vec_new(d.K);
    pair_rand(x, g, -1, 1); pair_rand(w, g, -0.5, 0.5); pair_rand(b, g, -1, 1);
    pair_rand(dy, g, -1, 1);
    pair_rand(dx, g, -1, 1); pair_rand(dw, g, -1, 1); pair_rand(db, g, -1, 1);   // += priors
    float *ws = xmalloc((conv_workspace_floats(&d) + 1) * sizeof(float));
    const float *bh = with_bias ? b.h.data : NULL, *bd = with_bias ? b.d.data : NULL;

    conv_forward_cpu(&d, x.h, w.h.data, bh, y.h, ws);
    conv_forward_gpu(&dev, &d, x.d, w.d.data, bd, y.d);
    conv_backward_cpu(&d, x.h, w.h.data, dy.h, dx.h, dw.h.data, with_bias ? db.h.data : NULL, ws);
    conv_backward_gpu(&dev, &d, x.d, w.d.data, dy.d, dx.d, dw.d.data, with_bias ? db.d.data : NULL);
    compare_conv("conv", &d, "y", y, t);
    compare_conv("conv", &d, "dx", dx, t);
    compare_conv("conv", &d, "dw", dw, t);
    compare_conv("conv", &d, "db", db, FP32);   // a plain sum in double: no GEMM rounding
    free(ws);
    Pair all[] = { x, y, w, b, dy, dx, dw, db };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) pair_free(all[i]);
}

static void conv_all(GpuPrecision prec, Tol t, uint64_t seed) {
    NEED_GPU();
    Rng g = rng_for(seed, 0, 0);
    dev.precision = prec;
    for (size_t i = 0; i < sizeof CONV_CASES / sizeof *CONV_CASES; i++) {
        arena_reset(&dev.acts);
        conv_case(&CONV_CASES[i], i % 2 == 0, t, &g);
    }
    dev.precision = GPU_FP32;
}

static void test_conv_fp32(void) { conv_all(GPU_FP32, FP32, 11); }
static void test_conv_tf32(void) { conv_all(GPU_TF32, TF32, 12); }
static void test_conv_bf16(void) { conv_all(GPU_BF16, BF16, 13); }

// A tiny im2col cap forces many chunks: forward, dW accumulation and col2im across chunks, in
// fp32 and in bf16 (whose im2col rows and dcol live in separate buffers).
static void test_conv_chunked(void) {
    NEED_GPU();
    Rng g = rng_for(14, 0, 0);
    size_t cap = dev.col_cap_floats;
    dev.col_cap_floats = 1000;
    size_t n = sizeof CHUNKED_CASES / sizeof *CHUNKED_CASES;
    for (size_t i = 0; i < 2 * n; i++) {
        dev.precision = i < n ? GPU_FP32 : GPU_BF16;
        arena_reset(&dev.acts);
        conv_case(&CONV_CASES[CHUNKED_CASES[i % n]], 1, i < n ? FP32 : BF16, &g);
    }
    dev.precision = GPU_FP32;
    dev.col_cap_floats = cap;
}

// f rounded to bf16 (to nearest even, as __float2bfloat16; f finite), as its 16 bits
static uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static void round_bf16(Pair p);

// The stem (gpu/conv_stem.cu) at a training size, 2 images of 640x640 in (fp32, as the model's input), K 32:
// the forward's many chunks, the weight gradient's 1600 strips and their combine. fp32 against the CPU on the
// same operands. bf16 (dy packed as training passes it) against the CPU on the operands rounded to bf16 first,
// as the GPU rounds them: the products are then exact on both sides and only the order of the fp32 sums
// differs (tensor-core steps of 16 and strips of pixels against the CPU's loops), which the FP32 bounds hold
// with room (each sum's rounding error is far below 1e-5 of its terms' magnitudes).
static void test_conv_stem_large(void) {
    NEED_GPU();
    Rng g = rng_for(18, 0, 0);
    ConvDims d = conv_dims(2, 3, 640, 640, 32, 3, 2, 1, 1);
    size_t nw = (size_t)d.K * d.C * d.R * d.S, ny = (size_t)d.N * d.P * d.Q * d.K;
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    for (int bf = 0; bf < 2; bf++) {
        arena_reset(&dev.acts);
        dev.precision = bf ? GPU_BF16 : GPU_FP32;
        Pair x = pair_new(d.N, d.H, d.W, d.C, 0), y = pair_new(d.N, d.P, d.Q, d.K, 0), dy = pair_new(d.N, d.P, d.Q, d.K, 0);
        Pair w = vec_new((int)nw), b = vec_new(d.K), dw = vec_new((int)nw);
        pair_rand(x, &g, -1, 1); pair_rand(w, &g, -0.5, 0.5); pair_rand(b, &g, -1, 1); pair_rand(dy, &g, -1, 1);
        pair_rand(dw, &g, -1, 1);   // a += prior
        if (bf) { round_bf16(x); round_bf16(w); round_bf16(dy); }
        float *ws = xmalloc((conv_workspace_floats(&d) + 1) * sizeof(float));
        conv_forward_cpu(&d, x.h, w.h.data, b.h.data, y.h, ws);
        conv_forward_gpu(&dev, &d, x.d, w.d.data, b.d.data, y.d);
        conv_backward_cpu(&d, x.h, w.h.data, dy.h, none, dw.h.data, NULL, ws);
        if (bf) {
            uint16_t *h16 = xmalloc(ny * sizeof *h16);
            for (size_t j = 0; j < ny; j++) h16[j] = bf16_bits(dy.h.data[j]);
            void *d16 = arena_take(&dev.acts, ny * 2, 256);
            checkCuda(cudaMemcpy(d16, h16, ny * 2, cudaMemcpyHostToDevice));
            conv_backward_bf16dy_gpu(&dev, &d, x.d, w.d.data, d16, none, dw.d.data);
            free(h16);
        } else {
            conv_backward_gpu(&dev, &d, x.d, w.d.data, dy.d, none, dw.d.data, NULL);
        }
        compare(bf ? "stem 640 y (bf16 operands)" : "stem 640 y", y, FP32);
        compare(bf ? "stem 640 dw (bf16 operands)" : "stem 640 dw", dw, FP32);
        free(ws);
        Pair all[] = { x, y, dy, w, b, dw };
        for (size_t k = 0; k < sizeof all / sizeof *all; k++) pair_free(all[k]);
    }
    dev.precision = GPU_FP32;
}


// The backward from a packed bf16 dy equals, bit for bit, the backward that converts an fp32 dy
// itself (with a small im2col cap, so chunks index into the packed dy).
static void test_conv_bf16dy(void) {
    NEED_GPU();
    Rng g = rng_for(15, 0, 0);
    void *cudnn = dev.cudnn;   // a property of the GEMM path: cuDNN sums in another order
    dev.cudnn = NULL;
    size_t cap = dev.col_cap_floats;
    dev.col_cap_floats = 1000;
    dev.precision = GPU_BF16;
    for (size_t i = 0; i < sizeof CONV_CASES / sizeof *CONV_CASES; i++) {
        arena_reset(&dev.acts);
        const ConvCase *cc = &CONV_CASES[i];
        ConvDims d = conv_dims(cc->N, cc->C, cc->H, cc->W, cc->K, cc->k, cc->stride, cc->pad, cc->groups);
        size_t nw = (size_t)d.K * (d.C / d.groups) * d.R * d.S, ny = (size_t)d.N * d.P * d.Q * d.K;
        Pair x = pair_new(d.N, d.H, d.W, d.C, cc->x_extra), w = vec_new((int)nw);
        Pair dy = pair_new(d.N, d.P, d.Q, d.K, 0), dx = pair_new(d.N, d.H, d.W, d.C, cc->x_extra);
        Pair dx2 = pair_new(d.N, d.H, d.W, d.C, cc->x_extra), dw = vec_new((int)nw), dw2 = vec_new((int)nw);
        pair_rand(x, &g, -1, 1); pair_rand(w, &g, -0.5, 0.5); pair_rand(dy, &g, -1, 1);
        uint16_t *h16 = xmalloc(ny * sizeof *h16);
        for (size_t j = 0; j < ny; j++) h16[j] = bf16_bits(dy.h.data[j]);
        void *d16 = arena_take(&dev.acts, ny * 2, 256);
        checkCuda(cudaMemcpy(d16, h16, ny * 2, cudaMemcpyHostToDevice));
        conv_backward_gpu(&dev, &d, x.d, w.d.data, dy.d, dx.d, dw.d.data, NULL);
        conv_backward_bf16dy_gpu(&dev, &d, x.d, w.d.data, d16, dx2.d, dw2.d.data);
        device_sync(&dev);
        float *a = xmalloc(dx.total * 4), *b = xmalloc(dx.total * 4), *e = xmalloc(nw * 4), *f = xmalloc(nw * 4);
        checkCuda(cudaMemcpy(a, dx.d.data - dx.extra, dx.total * 4, cudaMemcpyDeviceToHost));
        checkCuda(cudaMemcpy(b, dx2.d.data - dx2.extra, dx.total * 4, cudaMemcpyDeviceToHost));
        checkCuda(cudaMemcpy(e, dw.d.data, nw * 4, cudaMemcpyDeviceToHost));
        checkCuda(cudaMemcpy(f, dw2.d.data, nw * 4, cudaMemcpyDeviceToHost));
        CHECK(memcmp(a, b, dx.total * 4) == 0, "case %zu: dx from a bf16 dy differs", i);
        CHECK(memcmp(e, f, nw * 4) == 0, "case %zu: dw from a bf16 dy differs", i);
        free(a); free(b); free(e); free(f); free(h16);
        Pair all[] = { x, w, dy, dx, dx2, dw, dw2 };
        for (size_t k = 0; k < sizeof all / sizeof *all; k++) pair_free(all[k]);
    }
    dev.precision = GPU_FP32;
    dev.col_cap_floats = cap;
    dev.cudnn = cudnn;
}

// A bf16-stored copy of a device map slice (same shape and ld), as training stores activations
static Map bf16_twin(Map m) {
    Map b = m;
    b.data = arena_take(&dev.acts, (size_t)m.N * m.H * m.W * m.ld * 2, 256);
    b.bf16 = 1;
    checkCuda(cudaMemsetAsync(b.data, 0xff, (size_t)m.N * m.H * m.W * m.ld * 2, dev.stream));   // NaN guards
    copy_map_gpu(&dev, m, b);
    return b;
}

// Host values rounded to bf16 in place (the CPU twin then sees the GPU's operands)
static void round_bf16(Pair p) {
    size_t n = map_floats(p.h);
    for (size_t j = 0; j < n; j++) {
        uint32_t u = (uint32_t)bf16_bits(*elem(p.h, j)) << 16;
        memcpy(elem(p.h, j), &u, 4);
    }
    pair_upload(p);
}

// The training path under bf16 (bf16-stored x and y, the packed bf16 dz of the fused backward)
// through cuDNN, against the CPU twin on the rounded operands: odd shapes, batch 1 to 3, stride 2,
// groups, depthwise, channel slices in and out, dx and dw accumulating onto earlier values.
static void stored_bf16_case(const ConvCase *cc, Rng *rng);

static void test_conv_cudnn_bf16(void) {
    NEED_GPU();
    if (!dev.cudnn) SKIP("cuDNN not in use (not found at run time, or YT_CONV=gemm)");
    Rng g = rng_for(16, 0, 0);
    int plans0, refused0, plans, refused;
    cudnn_conv_stats(dev.cudnn, &plans0, &refused0, NULL);
    for (size_t i = 0; i < sizeof CONV_CASES / sizeof *CONV_CASES; i++) stored_bf16_case(&CONV_CASES[i], &g);
    cudnn_conv_stats(dev.cudnn, &plans, &refused, NULL);
    printf("# cuDNN plans made %d, shapes refused %d\n", plans - plans0, refused - refused0);
    CHECK(plans > plans0, "cuDNN is in use but made no plan: every case went the GEMM path");
}

// One case of test_conv_cudnn_bf16 (bf16-stored x and y, the packed bf16 dy: cuDNN where it takes the shape, else
// the GEMM path) against the CPU twin
static void stored_bf16_case(const ConvCase *cc, Rng *rng) {
    Rng g = *rng;
    dev.precision = GPU_BF16;
    arena_reset(&dev.acts);
    ConvDims d = conv_dims(cc->N, cc->C, cc->H, cc->W, cc->K, cc->k, cc->stride, cc->pad, cc->groups);
    size_t nw = (size_t)d.K * (d.C / d.groups) * d.R * d.S;
    Pair x = pair_new(d.N, d.H, d.W, d.C, cc->x_extra), y = pair_new(d.N, d.P, d.Q, d.K, cc->y_extra);
    Pair w = vec_new((int)nw), dy = pair_new(d.N, d.P, d.Q, d.K, 0);
    Pair dx = pair_new(d.N, d.H, d.W, d.C, cc->x_extra), dw = vec_new((int)nw);
    pair_rand(x, &g, -1, 1); pair_rand(w, &g, -0.5, 0.5); pair_rand(dy, &g, -1, 1);
    pair_rand(dx, &g, -1, 1); pair_rand(dw, &g, -1, 1);   // += priors
    round_bf16(x);
    round_bf16(dy);
    float *ws = xmalloc((conv_workspace_floats(&d) + 1) * sizeof(float));
    Map xb = bf16_twin(x.d), yb = bf16_twin(y.d), dyb = bf16_twin(dy.d);
    conv_forward_cpu(&d, x.h, w.h.data, NULL, y.h, ws);
    conv_forward_gpu(&dev, &d, xb, w.d.data, NULL, yb);
    copy_map_gpu(&dev, yb, y.d);
    conv_backward_cpu(&d, x.h, w.h.data, dy.h, dx.h, dw.h.data, NULL, ws);
    conv_backward_bf16dy_gpu(&dev, &d, xb, w.d.data, dyb.data, dx.d, dw.d.data);
    compare_conv("bf16 maps", &d, "y", y, BF16);
    compare_conv("bf16 maps", &d, "dx", dx, BF16);
    compare_conv("bf16 maps", &d, "dw", dw, BF16);
    free(ws);
    Pair all[] = { x, y, w, dy, dx, dw };
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) pair_free(all[k]);
    dev.precision = GPU_FP32;
    *rng = g;
}

// Grouped 1x1 convs through their dense form (gpu/conv.cu dense_grouped, YT_GROUPED_DENSE): the head's 1x1 of 4
// groups at 4,489 pixels (two slices of the weight gradient and a row left over) with channel slices in and out,
// and one of 2 groups (one slice). Each switch value (0: each group's own GEMMs; unset: dense) against the CPU
// twin, in fp32 and in bf16, from fp32 maps and from bf16-stored ones as training passes them.
static const ConvCase GROUPED_CASES[] = {
    { 1, 16, 67, 67, 16, 1, 1, 0, 4, 3, 2 },
    { 2, 8, 9, 9, 12, 1, 1, 0, 2, 0, 1 },
};

static void test_conv_grouped_dense(void) {
    NEED_GPU();
    const char *modes[] = { "0", NULL };
    Rng g = rng_for(19, 0, 0);
    for (int m = 0; m < 2; m++) {
        test_switch(SW_GROUPED_DENSE, modes[m]);
        printf("# YT_GROUPED_DENSE=%s\n", modes[m] ? modes[m] : "(unset)");
        for (size_t i = 0; i < sizeof GROUPED_CASES / sizeof *GROUPED_CASES; i++) {
            for (int p = 0; p < 2; p++) {
                dev.precision = p ? GPU_BF16 : GPU_FP32;
                arena_reset(&dev.acts);
                conv_case(&GROUPED_CASES[i], p == 0, p ? BF16 : FP32, &g);
            }
            stored_bf16_case(&GROUPED_CASES[i], &g);
        }
    }
    test_switch(SW_GROUPED_DENSE, NULL);
    dev.precision = GPU_FP32;
}

// The engines YT_CUDNN_TUNE times (gpu/cudnn_conv.c) on the shapes it exists for: gelan's 3x3 convs of 32 and
// 48 channels, whose first heuristic engines convert layouts, and a 64-channel one. Tuning off, on, and on again
// as a new process would (the choices forgotten, read back from the engine file): each direction against the CPU
// twin on the rounded operands, the second tuned run the first's bits with nothing timed. Then with no file
// (YT_CUDNN_ENGINES=none: nothing timed, the untuned bits) and with a damaged file (still the CPU twin's results).
static int same_on_device(Pair a, Pair b);

static void tune_case(int tune, int N, int C, int H, Rng *g, Pair out[3]) {
    test_switch(SW_CUDNN_TUNE, tune ? "1" : "0");
    void *saved = dev.cudnn, *fresh = cudnn_conv_ctx_new(dev.stream);
    dev.cudnn = fresh;
    ConvDims d = conv_dims(N, C, H, H, C, 3, 1, 1, 1);
    size_t nw = (size_t)d.K * d.C * 9;
    Pair x = pair_new(N, H, H, C, 0), w = vec_new((int)nw), dy = pair_new(N, H, H, C, 0);
    out[0] = pair_new(N, H, H, C, 0), out[1] = pair_new(N, H, H, C, 0), out[2] = vec_new((int)nw);
    pair_rand(x, g, -1, 1); pair_rand(w, g, -0.5, 0.5); pair_rand(dy, g, -1, 1);
    for (int i = 1; i < 3; i++) pair_rand(out[i], g, -1, 1);   // += priors
    round_bf16(x);
    round_bf16(dy);
    float *ws = xmalloc((conv_workspace_floats(&d) + 1) * sizeof(float));
    Map xb = bf16_twin(x.d), yb = bf16_twin(out[0].d), dyb = bf16_twin(dy.d);
    conv_forward_cpu(&d, x.h, w.h.data, NULL, out[0].h, ws);
    conv_forward_gpu(&dev, &d, xb, w.d.data, NULL, yb);
    copy_map_gpu(&dev, yb, out[0].d);
    conv_backward_cpu(&d, x.h, w.h.data, dy.h, out[1].h, out[2].h.data, NULL, ws);
    conv_backward_bf16dy_gpu(&dev, &d, xb, w.d.data, dyb.data, out[1].d, out[2].d.data);
    int plans, refused;
    cudnn_conv_stats(fresh, &plans, &refused, NULL);
    CHECK(plans >= 3 && refused == 0, "C%d: %d plans, %d shapes refused", C, plans, refused);
    static const char *what[3] = { "y", "dx", "dw" };
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "tune %d C%d %s", tune, C, what[i]);
        compare(name, out[i], BF16);
    }
    checkCuda(cudaStreamSynchronize(dev.stream));
    dev.cudnn = saved;
    cudnn_conv_ctx_free(fresh);
    free(ws);
    pair_free(x), pair_free(w), pair_free(dy);
}

// YT_CUDNN_ENGINES = path (NULL: unset), read again, the process's choices forgotten
static void engines_file(const char *path) {
    test_switch(SW_CUDNN_ENGINES, path);
    cudnn_conv_tune_forget();
}

static void test_cudnn_tune(void) {
    NEED_GPU();
    if (!dev.cudnn) SKIP("cuDNN not in use (not found at run time, or YT_CONV=gemm)");
    const char *was = switch_str(SW_CUDNN_TUNE), *was_file = switch_str(SW_CUDNN_ENGINES);
    char *keep = was ? xstrdup(was) : NULL, *keep_file = was_file ? xstrdup(was_file) : NULL;
    char path[4200], junk[4200];
    const char *dir = test_tmpdir("cudnn_tune");
    snprintf(path, sizeof path, "%s/engines.txt", dir);
    snprintf(junk, sizeof junk, "%s/damaged.txt", dir);
    engines_file(path);
    dev.precision = GPU_BF16;
    static const int SHAPES[][3] = { { 8, 48, 40 }, { 4, 32, 80 }, { 4, 64, 40 } };   // N, C, H
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++) {
        Pair off[3], a[3], b[3];
        for (int run = 0; run < 3; run++) {   // off, tuned, tuned again from the file
            arena_reset(&dev.acts);
            Rng g = rng_for(18, s, 0);
            int timed = cudnn_conv_tune_timed();
            if (run == 2) cudnn_conv_tune_forget();
            tune_case(run > 0, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], &g, run == 0 ? off : run == 1 ? a : b);
            if (run == 1) CHECK(cudnn_conv_tune_timed() > timed, "C%d: tuning on, nothing timed", SHAPES[s][1]);
            if (run == 2) CHECK(cudnn_conv_tune_timed() == timed, "C%d: the file's choices timed again", SHAPES[s][1]);
        }
        for (int i = 0; i < 3; i++) CHECK(same_on_device(a[i], b[i]), "C%d: tuned, then from the file: output %d differs", SHAPES[s][1], i);
        // no file: nothing timed, the heuristics' first engine as with tuning off
        engines_file("none");
        arena_reset(&dev.acts);
        Rng g = rng_for(18, s, 0);
        int timed = cudnn_conv_tune_timed();
        tune_case(1, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], &g, b + 0);
        CHECK(cudnn_conv_tune_timed() == timed, "C%d: YT_CUDNN_ENGINES=none, yet timed", SHAPES[s][1]);
        for (int i = 0; i < 3; i++) CHECK(same_on_device(off[i], b[i]), "C%d: no file: output %d differs from untuned", SHAPES[s][1], i);
        for (int i = 0; i < 3; i++) pair_free(off[i]), pair_free(a[i]), pair_free(b[i]);
        engines_file(path);
    }
    CHECK(file_lines(path) >= 3, "%s: %d lines after three shapes tuned", path, file_lines(path));
    // a damaged file: a malformed line, binary junk, another GPU's line, a torn last line; the runs still match
    // the CPU twin (tune_case compares) and new choices are appended after a newline of their own
    FILE *f = fopen(junk, "w");
    if (f) {
        fputs("yt-cudnn-engines 1 x 1 zz\n\x01\x02garbage\nyt-cudnn-engines 1 Other_GPU-sm90 91900 00 62 0\n"
              "yt-cudnn-engines 1 ", f);
        fclose(f);
    }
    engines_file(junk);
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++) {
        Pair c[3];
        arena_reset(&dev.acts);
        Rng g = rng_for(18, s, 0);
        tune_case(1, SHAPES[s][0], SHAPES[s][1], SHAPES[s][2], &g, c);
        for (int i = 0; i < 3; i++) pair_free(c[i]);
    }
    CHECK(file_lines(junk) >= 4 + 3, "%s: %d lines: the choices were not appended", junk, file_lines(junk));
    test_switch(SW_CUDNN_TUNE, keep);
    engines_file(keep_file);
    free(keep), free(keep_file);
    dev.precision = GPU_FP32;
}

// A bf16-stored input gradient (core/spec/grad_plan.c stores such where a conv's data gradient is bf16 values
// anyway): through cuDNN the same bits as the fp32 gradient it was widened into, through the GEMM path
// (cuDNN off, gpu/conv.cu dgrad_into_bf16: a few images at a time, rounded) that gradient rounded, within
// one bf16 step. The stem's cases are left out (its input gradient is never needed).
static void bf16_dx_cases(int use_cudnn) {
    Rng g = rng_for(17, use_cudnn, 0);
    void *cudnn = dev.cudnn;
    if (!use_cudnn) dev.cudnn = NULL;
    dev.precision = GPU_BF16;
    for (size_t i = 0; i < sizeof CONV_CASES / sizeof *CONV_CASES; i++) {
        arena_reset(&dev.acts);
        const ConvCase *cc = &CONV_CASES[i];
        if (cc->C == 3) continue;
        ConvDims d = conv_dims(cc->N, cc->C, cc->H, cc->W, cc->K, cc->k, cc->stride, cc->pad, cc->groups);
        size_t nw = (size_t)d.K * (d.C / d.groups) * d.R * d.S, ny = (size_t)d.N * d.P * d.Q * d.K;
        size_t nx = (size_t)d.N * d.H * d.W * d.C;
        Pair x = pair_new(d.N, d.H, d.W, d.C, cc->x_extra), w = vec_new((int)nw), dy = pair_new(d.N, d.P, d.Q, d.K, 0);
        Pair dx = pair_new(d.N, d.H, d.W, d.C, 0);
        pair_rand(x, &g, -1, 1); pair_rand(w, &g, -0.5, 0.5); pair_rand(dy, &g, -1, 1);
        uint16_t *h16 = xmalloc(ny * sizeof *h16), *got = xmalloc(nx * sizeof *got);
        for (size_t j = 0; j < ny; j++) h16[j] = bf16_bits(dy.h.data[j]);
        void *d16 = arena_take(&dev.acts, ny * 2, 256);
        checkCuda(cudaMemcpy(d16, h16, ny * 2, cudaMemcpyHostToDevice));
        Map ref = dx.d, b = dx.d;
        ref.fresh = 1;
        b.data = arena_take(&dev.acts, nx * 2, 256);
        b.bf16 = 1, b.fresh = 1;
        checkCuda(cudaMemset(b.data, 0xff, nx * 2));   // NaN: an element left unwritten shows
        conv_backward_bf16dy_gpu(&dev, &d, x.d, w.d.data, d16, ref, NULL);
        conv_backward_bf16dy_gpu(&dev, &d, x.d, w.d.data, d16, b, NULL);
        device_sync(&dev);
        float *a = xmalloc(nx * 4);
        checkCuda(cudaMemcpy(a, ref.data, nx * 4, cudaMemcpyDeviceToHost));
        checkCuda(cudaMemcpy(got, b.data, nx * 2, cudaMemcpyDeviceToHost));
        size_t bad = 0, first = 0;
        int exact = use_cudnn && !(d.R == 1 && d.S == 1 && d.stride == 1 && d.pad == 0);
        for (size_t j = 0; j < nx; j++) {
            int want = bf16_bits(a[j]), diff = abs((int)(int16_t)got[j] - (int)(int16_t)want);
            if (exact ? got[j] != want : diff > 1) { if (!bad) first = j; bad++; }
        }
        CHECK(bad == 0, "case %zu (%s): %zu of %zu bf16 dx elements off, first at %zu: %04x against %04x", i,
              use_cudnn ? "cuDNN" : "GEMM", bad, nx, first, bad ? got[first] : 0, bad ? bf16_bits(a[first]) : 0);
        free(a); free(h16); free(got);
        Pair all[] = { x, w, dy, dx };
        for (size_t k = 0; k < sizeof all / sizeof *all; k++) pair_free(all[k]);
    }
    dev.precision = GPU_FP32;
    dev.cudnn = cudnn;
}

static void test_conv_bf16_dx(void) {
    NEED_GPU();
    bf16_dx_cases(0);
    if (dev.cudnn) bf16_dx_cases(1);
    else printf("# cuDNN not in use: the bf16 input gradients went the GEMM path only\n");
}

// ---- batch normalisation ------------------------------------------------------------------

// A training BN's running statistics (updated) and saved ones (written) against the CPU twin's
static void compare_bn_stats(const char *what, Pair rm, Pair rv, Pair mean, Pair invstd) {
    const char *names[4] = { "running_mean", "running_var", "mean", "invstd" };
    Pair p[4] = { rm, rv, mean, invstd };
    for (int k = 0; k < 4; k++) {
        char label[96];
        snprintf(label, sizeof label, "%s %s", what, names[k]);
        compare(label, p[k], FP32);
    }
}

typedef struct { int N, H, W, C, extra; } Shape;
// odd C (one channel a thread), C 8 and 6 (four and two channels a thread where every ld allows); 200
// channels: several channel tiles of the partial sums, the last one short; 135,200 pixels: more partials
// than the pass finishes itself (gpu/bn.cu FOLD_PARTS), so a launch of its own finishes the channels
static const Shape BN_SHAPES[] = { { 3, 7, 7, 13, 2 }, { 1, 13, 13, 37, 0 }, { 1, 1, 1, 5, 1 }, { 2, 5, 7, 8, 4 },
                                   { 1, 3, 3, 6, 2 }, { 1, 9, 9, 200, 0 }, { 2, 260, 260, 12, 4 } };
static const float EPS = 1e-3f, MOMENTUM = 0.03f;

// The fused BN + SiLU forward equals BN then SiLU on the CPU, with and without storing u.
static void test_bn_silu(void) {
    NEED_GPU();
    Rng g = rng_for(24, 0, 0);
    for (int store_u = 0; store_u < 2; store_u++) {
        Shape s = BN_SHAPES[store_u];
        arena_reset(&dev.acts);
        Pair z = pair_new(s.N, s.H, s.W, s.C, s.extra), u = pair_new(s.N, s.H, s.W, s.C, 1);
        Pair y = pair_new(s.N, s.H, s.W, s.C, 2), ga = vec_new(s.C), be = vec_new(s.C);
        Pair mean = vec_new(s.C), invstd = vec_new(s.C);
        pair_rand(z, &g, -2, 3); pair_rand(ga, &g, 0.5, 1.5); pair_rand(be, &g, -1, 1);
        bn_forward_train_cpu(z.h, ga.h.data, be.h.data, EPS, MOMENTUM, NULL, NULL, mean.h.data,
                             invstd.h.data, u.h);
        silu_forward_cpu(u.h, y.h);
        Map ud = u.d;
        if (!store_u) {   // u stays all GUARD on both sides
            ud.data = NULL;
            for (size_t j = 0; j < map_floats(u.h); j++) *elem(u.h, j) = GUARD;
        }
        bn_silu_forward_train_gpu(&dev, z.d, ga.d.data, be.d.data, EPS, MOMENTUM, NULL, NULL,
                                  mean.d.data, invstd.d.data, ud, y.d);
        compare("bn+silu y", y, FP32);
        compare("bn+silu u", u, FP32);
        compare("bn+silu invstd", invstd, FP32);
        Pair all[] = { z, u, y, ga, be, mean, invstd };
        for (size_t k = 0; k < sizeof all / sizeof *all; k++) pair_free(all[k]);
    }
}

// Whether two pairs' device buffers (guards included) hold the same bits.
static int same_on_device(Pair a, Pair b) {
    device_sync(&dev);
    float *x = xmalloc(a.total * sizeof(float)), *y = xmalloc(b.total * sizeof(float));
    checkCuda(cudaMemcpy(x, a.d.data - a.extra, a.total * sizeof(float), cudaMemcpyDeviceToHost));
    checkCuda(cudaMemcpy(y, b.d.data - b.extra, b.total * sizeof(float), cudaMemcpyDeviceToHost));
    int same = a.total == b.total && !memcmp(x, y, a.total * sizeof(float));
    free(x); free(y);
    return same;
}

// The fused backward of SiLU(BN(z)) from dy equals SiLU's backward then BN's on the CPU.
static void test_bn_silu_backward(void) {
    NEED_GPU();
    Rng g = rng_for(25, 0, 0);
    for (size_t i = 0; i < sizeof BN_SHAPES / sizeof *BN_SHAPES; i++) {
        Shape s = BN_SHAPES[i];
        arena_reset(&dev.acts);
        Pair z = pair_new(s.N, s.H, s.W, s.C, s.extra), u = pair_new(s.N, s.H, s.W, s.C, 0);
        Pair dy = pair_new(s.N, s.H, s.W, s.C, 2), dz = pair_new(s.N, s.H, s.W, s.C, 1);
        Pair ga = vec_new(s.C), be = vec_new(s.C), mean = vec_new(s.C), invstd = vec_new(s.C);
        Pair dga = vec_new(s.C), dbe = vec_new(s.C);
        pair_rand(z, &g, -2, 3); pair_rand(dy, &g, -1, 1);
        pair_rand(ga, &g, 0.5, 1.5); pair_rand(be, &g, -1, 1);
        pair_rand(dga, &g, -1, 1); pair_rand(dbe, &g, -1, 1);   // += priors
        bn_forward_train_cpu(z.h, ga.h.data, be.h.data, EPS, MOMENTUM, NULL, NULL, mean.h.data,
                             invstd.h.data, u.h);
        pair_upload(mean); pair_upload(invstd);
        Map du = map_make(xmalloc(map_floats(u.h) * sizeof(float)), s.N, s.H, s.W, s.C);
        silu_backward_cpu(u.h, dy.h, du);
        bn_backward_cpu(z.h, ga.h.data, mean.h.data, invstd.h.data, du, dz.h, dga.h.data, dbe.h.data);
        free(du.data);
        bn_silu_backward_gpu(&dev, z.d, ga.d.data, be.d.data, mean.d.data, invstd.d.data, dy.d, dz.d,
                             dga.d.data, dbe.d.data);
        compare("bn+silu backward dz", dz, FP32);
        compare("bn+silu backward dgamma", dga, FP32);
        compare("bn+silu backward dbeta", dbe, FP32);
        compare("bn+silu backward dy untouched", dy, FP32);
        if (s.extra == 0) {   // the bf16 form: dz rounded to bf16, packed; dgamma, dbeta as above
            size_t nz = map_floats(z.h);
            Pair dga2 = vec_new(s.C), dbe2 = vec_new(s.C);
            uint16_t *got = xmalloc(nz * 2), *d16 = arena_take(&dev.acts, nz * 2, 256);
            bn_silu_backward_bf16_gpu(&dev, z.d, ga.d.data, be.d.data, mean.d.data, invstd.d.data, dy.d, d16,
                                      dga2.d.data, dbe2.d.data);
            device_sync(&dev);   // dev.stream does not order with the blocking copies below
            checkCuda(cudaMemcpy(got, d16, nz * 2, cudaMemcpyDeviceToHost));
            float *want = xmalloc(dz.total * 4);   // the fp32 dz the GPU wrote above, with its slice
            checkCuda(cudaMemcpy(want, dz.d.data - dz.extra, dz.total * 4, cudaMemcpyDeviceToHost));
            Map wm = dz.h;
            wm.data = want + dz.extra;
            size_t bad = 0;
            for (size_t j = 0; j < nz; j++) bad += got[j] != bf16_bits(*elem(wm, j));
            CHECK(bad == 0, "bn+silu backward bf16 dz: %zu of %zu are not the fp32 dz rounded", bad, nz);
            free(got); free(want); pair_free(dga2); pair_free(dbe2);
        }
        Pair all[] = { z, u, dy, dz, ga, be, mean, invstd, dga, dbe };
        for (size_t k = 0; k < sizeof all / sizeof *all; k++) pair_free(all[k]);
    }
}

// A conv unit's SiLU(BN) output taken by the residual addition after it: out = a + silu(BN_train(z)) in one
// pass against the CPU's BN, SiLU and addition, and bit for bit against the GPU's two launches, with the
// unit's output stored in fp32 and in bf16 (the added value rounded as it would be stored).
static void test_residual_fused(void) {
    NEED_GPU();
    Rng g = rng_for(28, 0, 0);
    for (size_t i = 0; i < sizeof BN_SHAPES / sizeof *BN_SHAPES; i++) {
        Shape s = BN_SHAPES[i];
        for (int y16 = 0; y16 < 2; y16++) {
            arena_reset(&dev.acts);
            Pair z = pair_new(s.N, s.H, s.W, s.C, s.extra), a = pair_new(s.N, s.H, s.W, s.C, 1);
            Pair y = pair_new(s.N, s.H, s.W, s.C, 0), out = pair_new(s.N, s.H, s.W, s.C, 2);
            Pair out2 = pair_new(s.N, s.H, s.W, s.C, 2);
            Pair ga = vec_new(s.C), be = vec_new(s.C), rm = vec_new(s.C), rv = vec_new(s.C);
            Pair mean = vec_new(s.C), invstd = vec_new(s.C);
            pair_rand(z, &g, -2, 3); pair_rand(a, &g, -3, 3);
            pair_rand(ga, &g, 0.5, 1.5); pair_rand(be, &g, -1, 1); pair_rand(rm, &g, -1, 1); pair_rand(rv, &g, 0.5, 1.5);
            bn_forward_train_cpu(z.h, ga.h.data, be.h.data, EPS, MOMENTUM, rm.h.data, rv.h.data, mean.h.data,
                                 invstd.h.data, y.h);
            silu_forward_cpu(y.h, y.h);
            add_forward_cpu(a.h, y.h, out.h);
            Map yd = y16 ? bf16_twin(y.d) : y.d;   // the unit's output as training would store it
            BnTrain b = { ga.d.data, be.d.data, rm.d.data, rv.d.data, mean.d.data, invstd.d.data };
            bn_silu_add_forward_train_gpu(&dev, z.d, &b, EPS, MOMENTUM, a.d, yd, out.d);
            compare(y16 ? "residual out (bf16 y)" : "residual out", out, y16 ? BF16 : FP32);
            compare_bn_stats("residual", rm, rv, mean, invstd);
            bn_silu_forward_train_gpu(&dev, z.d, ga.d.data, be.d.data, EPS, MOMENTUM, NULL, NULL, mean.d.data,
                                      invstd.d.data, (Map){ 0 }, yd);   // the two launches it replaces
            add_forward_gpu(&dev, a.d, yd, out2.d);
            CHECK(same_on_device(out, out2), "shape %zu%s: the fused residual differs from its two launches", i,
                  y16 ? " (bf16 y)" : "");
            Pair all[] = { z, a, y, out, out2, ga, be, rm, rv, mean, invstd };
            for (size_t k = 0; k < sizeof all / sizeof *all; k++) pair_free(all[k]);
        }
    }
}

// A channel whose values sit far from zero (mean 1000, spread 1): the one-pass moments are taken
// about a shift, so the statistics keep their digits. (u itself is not compared: z - mean in float
// loses 1e-4 of it on either side, the CPU normalising in double, the GPU in float like cuDNN.)
static void test_bn_offset_variance(void) {
    NEED_GPU();
    Rng g = rng_for(26, 0, 0);
    Shape s = BN_SHAPES[1];
    arena_reset(&dev.acts);
    Pair z = pair_new(s.N, s.H, s.W, s.C, s.extra), u = pair_new(s.N, s.H, s.W, s.C, 0);
    Pair ga = vec_new(s.C), be = vec_new(s.C), mean = vec_new(s.C), invstd = vec_new(s.C);
    pair_rand(z, &g, 999.5, 1000.5); pair_rand(ga, &g, 0.5, 1.5); pair_rand(be, &g, -1, 1);
    bn_forward_train_cpu(z.h, ga.h.data, be.h.data, EPS, MOMENTUM, NULL, NULL, mean.h.data,
                         invstd.h.data, u.h);
    bn_forward_train_gpu(&dev, z.d, ga.d.data, be.d.data, EPS, MOMENTUM, NULL, NULL, mean.d.data,
                         invstd.d.data, u.d);
    compare("bn offset mean", mean, FP32);
    compare("bn offset invstd", invstd, FP32);
    Pair all[] = { z, u, ga, be, mean, invstd };
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) pair_free(all[k]);
}

// ---- elementwise --------------------------------------------------------------------------

// zero_map (not in the backend table: test_backend_ops checks the elementwise ops of the table) through
// channel slices
static void test_zero_map(void) {
    NEED_GPU();
    Rng g = rng_for(31, 0, 0);
    static const Shape shapes[] = { { 3, 7, 7, 13, 2 }, { 1, 13, 13, 5, 0 }, { 2, 5, 7, 8, 4 }, { 1, 3, 3, 6, 2 } };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        Shape s = shapes[i];
        arena_reset(&dev.acts);
        Pair d = pair_new(s.N, s.H, s.W, s.C, s.extra);
        pair_rand(d, &g, -1, 1);
        zero_map_cpu(d.h);
        zero_map_gpu(&dev, d.d);
        compare("zero", d, FP32);
        pair_free(d);
    }
}

// ---- memory discipline --------------------------------------------------------------------

// One conv + BN + SiLU training step on device maps, in every precision. t holds x, dx (N,H,W,C),
// z, u, y (N,H,W,K); p holds w, dw (K,C,3,3) then gamma, beta, mean, invstd, dgamma, dbeta (K).
typedef struct { Pair x, dx, z, u, y, p; } Toy;

static void toy_step(Toy *t, const ConvDims *d) {
    size_t nw = (size_t)d->K * d->C * d->R * d->S;
    float *w = t->p.d.data, *dw = w + nw, *gamma = dw + nw, *beta = gamma + d->K;
    float *mean = beta + d->K, *invstd = mean + d->K, *dgamma = invstd + d->K, *dbeta = dgamma + d->K;
    for (int p = GPU_FP32; p <= GPU_BF16; p++) {
        dev.precision = (GpuPrecision)p;
        conv_forward_gpu(&dev, d, t->x.d, w, NULL, t->z.d);
        bn_forward_train_gpu(&dev, t->z.d, gamma, beta, EPS, MOMENTUM, NULL, NULL, mean, invstd,
                             t->u.d);
        silu_forward_gpu(&dev, t->u.d, t->y.d);
        silu_backward_gpu(&dev, t->u.d, t->y.d, t->y.d);   // dy = y stands in for the loss grad
        bn_backward_gpu(&dev, t->z.d, gamma, mean, invstd, t->y.d, t->u.d, dgamma, dbeta);
        conv_backward_gpu(&dev, d, t->x.d, w, t->u.d, t->dx.d, dw, NULL);
    }
    dev.precision = GPU_FP32;
    device_sync(&dev);
}

// After a warm-up, three steps make no cudaMalloc of ours and take no GPU memory (cuBLAS's
// included: its workspace is ours), and leave the scratch arena as they found it.
static void test_step_allocates_nothing(void) {
    NEED_GPU();
    ConvDims d = conv_dims(2, 16, 20, 20, 24, 3, 1, 1, 1);
    Toy t = { pair_new(2, 20, 20, 16, 0), pair_new(2, 20, 20, 16, 0), pair_new(2, 20, 20, 24, 0),
              pair_new(2, 20, 20, 24, 0), pair_new(2, 20, 20, 24, 0), vec_new(2 * 24 * 16 * 9 + 6 * 24) };
    Rng g = rng_for(51, 0, 0);
    Pair *all[] = { &t.x, &t.dx, &t.z, &t.u, &t.y, &t.p };
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) pair_rand(*all[k], &g, 0.5, 1);
    toy_step(&t, &d);
    size_t before = gpu_alloc_count(), scratch = dev.scratch.used, free0, free1, total;
    checkCuda(cudaMemGetInfo(&free0, &total));
    for (int step = 0; step < 3; step++) toy_step(&t, &d);
    checkCuda(cudaMemGetInfo(&free1, &total));
    CHECK(gpu_alloc_count() == before, "%zu cudaMalloc calls in 3 steps",
          gpu_alloc_count() - before);
    CHECK(free1 == free0, "free GPU memory moved from %zu to %zu bytes", free0, free1);
    CHECK(dev.scratch.used == scratch, "scratch used %zu, was %zu", dev.scratch.used, scratch);
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) pair_free(*all[k]);
}

// A plan larger than the GPU is refused with the numbers, not a crash.
static void test_init_refuses(void) {
    NEED_GPU();
    Device big;
    Err err = { { 0 } };
    size_t bytes[ARENA_COUNT] = { (size_t)1 << 50, 0, 0, 0, 0 };
    CHECK(device_init(&big, 0, bytes, &err) == -1, "a 1 PiB plan was accepted");
    CHECK(strstr(err.msg, "out of GPU memory") && strstr(err.msg, "params"), "message: %s",
          err.msg);
}

GPU_MAIN()
#endif
