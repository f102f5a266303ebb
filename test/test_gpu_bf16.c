// test_gpu_bf16.c: bf16-stored maps (tensor.h, core/spec/act_plan.c) in the CUDA twins. A map stored as
// bf16 holds exactly the values of an fp32 map rounded to bf16, so every op fed one must give what
// it gives the rounded fp32 map: the same outputs bit for bit (GEMM operands, BN statistics and
// gradients, pools, copies), and a bf16 output equal to the fp32 output rounded once (one bf16 unit
// apart at most where cuBLAS writes it: its bf16-output kernels may sum in another order).
// Legend: N batch, C/K channels, H,W in, P,Q out; ld pixel stride (slices: ld > C).
#include <stdint.h>
#include <string.h>

#include "core/spec/musgd.h"   // bf16_round
#include "core/spec/ops.h"
#include "core/spec/ops26.h"
#include "core/base/util.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/ops.h"
#include "gpu/ops26.h"
#endif

#define GPU_TESTS(X) X(test_conv_input) X(test_conv_output) X(test_conv_backward) X(test_dwconv) X(test_bn) \
    X(test_pools_and_copies)

#define GPU_OWN_DEVICE
#include "test/gpu_harness.h"
#ifdef USE_CUDA

static Device dev;
static int dev_state;   // 0 untried, 1 ready, -1 no GPU
static void *cudnn_saved;   // the device's cuDNN state, put back before device_free

static int gpu_ready(void) {
    if (dev_state) return dev_state > 0;
    GpuInfo info;
    Err err;
    size_t bytes[ARENA_COUNT] = { 0, 0, 0, (size_t)256 << 20, (size_t)256 << 20 };
    dev_state = gpu_list(&info, 1) > 0 && device_init(&dev, 0, bytes, &err) == 0 ? 1 : -1;
    if (dev_state > 0) dev.precision = GPU_BF16;
    // these compare the GEMM path's bf16 storage with its own fp32 one, bit for bit; cuDNN's
    // path is test_gpu_ops's test_conv_cudnn_bf16
    cudnn_saved = dev.cudnn;
    dev.cudnn = NULL;
    return dev_state > 0;
}
#define NEED_GPU() do { if (!gpu_ready()) SKIP("no GPU"); arena_reset(&dev.acts); } while (0)

// A map's values (rounded to bf16) on the host, and two device copies: fp32 (f) and bf16-stored (b),
// each the channel slice [extra, extra + C) of a buffer with ld = C + 2 * extra.
typedef struct { float *h; Map f, b; int extra; size_t total; } Twin;


static Twin twin_new(int N, int H, int W, int C, int extra, Rng *g) {
    Twin t;
    int ld = C + 2 * extra;
    t.extra = extra;
    t.total = (size_t)N * H * W * ld;
    t.h = xmalloc(t.total * sizeof(float));
    uint16_t *hb = xmalloc(t.total * sizeof(uint16_t));
    for (size_t i = 0; i < t.total; i++) {
        t.h[i] = g ? bf16_round((float)rng_uniform(g, -2.0, 2.0)) : 0.0f;
        hb[i] = bf16_top_bits(t.h[i]);
    }
    float *df = arena_take(&dev.acts, t.total * 4, 256);
    uint16_t *db = arena_take(&dev.acts, t.total * 2, 256);
    checkCuda(cudaMemcpy(df, t.h, t.total * 4, cudaMemcpyHostToDevice));
    checkCuda(cudaMemcpy(db, hb, t.total * 2, cudaMemcpyHostToDevice));
    t.f = (Map){ df + extra, N, H, W, C, ld, 0, 0 };
    t.b = (Map){ (float *)(db + extra), N, H, W, C, ld, 1, 0 };
    free(hb);
    return t;
}
static void twin_free(Twin t) { free(t.h); }

static float *dev_floats(size_t n, Rng *g) {
    float *h = xmalloc(n * sizeof(float)), *d = arena_take(&dev.acts, n * 4, 256);
    for (size_t i = 0; i < n; i++) h[i] = g ? (float)rng_uniform(g, -0.5, 0.5) : 0.0f;
    checkCuda(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

static float *download(const float *d, size_t n) {
    device_sync(&dev);
    float *h = xmalloc(n * sizeof(float));
    checkCuda(cudaMemcpy(h, d, n * 4, cudaMemcpyDeviceToHost));
    return h;
}

// Two device float arrays are equal bit for bit.
static void same_floats(const char *what, const float *a, const float *b, size_t n) {
    float *x = download(a, n), *y = download(b, n);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&x[i], &y[i], 4) && !bad++) first = i;
    CHECK(bad == 0, "%s: %zu of %zu differ; first [%zu] %.9g vs %.9g", what, bad, n, first, x[first], y[first]);
    free(x); free(y);
}

// The fp32 map f rounded to bf16 against the bf16-stored map b (same shape, each its own ld): equal,
// or at most `ulps` bf16 units apart. Also checks that b's guard columns still hold the input's.
static void rounded_equal(const char *what, Map f, Map b, int ulps) {
    size_t nf = (size_t)f.N * f.H * f.W * f.ld, nb = (size_t)b.N * b.H * b.W * b.ld;
    float *x = download(f.data, nf);
    uint16_t *y = xmalloc(nb * 2);
    checkCuda(cudaMemcpy(y, b.data, nb * 2, cudaMemcpyDeviceToHost));
    size_t bad = 0, first = 0, n = map_floats(f), off = 0;
    int worst = 0;
    for (size_t j = 0; j < n; j++) {
        size_t px = j / f.C, c = j % f.C;
        uint16_t want = bf16_top_bits(bf16_round(x[px * f.ld + c])), got = y[px * b.ld + c];
        int d = abs((int)want - (int)got);
        if (d > worst) worst = d;
        if (d > ulps && !bad++) { first = j; off = px * b.ld + c; }
    }
    CHECK(bad == 0, "%s: %zu of %zu differ by more than %d bf16 units; first [%zu] %.6g vs %.6g", what, bad, n, ulps,
          first, bf16_round(x[first / f.C * f.ld + first % f.C]), bf16_from_bits(y[off]));
    printf("#   %-36s worst %d bf16 units\n", what, worst);
    free(x); free(y);
}

// ---- convolution --------------------------------------------------------------------------

typedef struct { int N, C, H, W, K, k, stride, groups, extra; const char *what; } Case;
static const Case CASES[] = {
    { 2, 32, 11, 11, 24, 3, 2, 1, 8, "3x3 s2, 16-byte im2col" },
    { 2, 16, 9, 9, 40, 3, 1, 2, 8, "3x3 groups 2, slice" },
    { 3, 21, 13, 13, 11, 1, 1, 1, 3, "pointwise, odd slice" },
    { 1, 12, 7, 7, 20, 3, 2, 4, 1, "groups 4, scalar im2col" },
    { 2, 48, 5, 5, 16, 1, 1, 1, 0, "pointwise, packed" },
    { 2, 3, 19, 17, 32, 3, 2, 1, 1, "stem, direct (conv_stem.cu)" },
};

static ConvDims dims_of(const Case *c) {
    return conv_dims(c->N, c->C, c->H, c->W, c->K, c->k, c->stride, c->k / 2, c->groups);
}

static void test_conv_input(void) {   // a bf16-stored x is the very operand the fp32 x is rounded to
    NEED_GPU();
    Rng g = rng_for(71, 1, 0);
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const Case *c = &CASES[i];
        ConvDims d = dims_of(c);
        Twin x = twin_new(c->N, c->H, c->W, c->C, c->extra, &g);
        float *w = dev_floats((size_t)c->K * c->C / c->groups * c->k * c->k, &g);
        size_t ny = (size_t)d.N * d.P * d.Q * d.K;
        Map y1 = map_make(dev_floats(ny, NULL), d.N, d.P, d.Q, d.K), y2 = map_make(dev_floats(ny, NULL), d.N, d.P, d.Q, d.K);
        conv_forward_gpu(&dev, &d, x.f, w, NULL, y1);
        conv_forward_gpu(&dev, &d, x.b, w, NULL, y2);
        same_floats(c->what, y1.data, y2.data, ny);
        twin_free(x);
    }
}

static void test_conv_output(void) {   // y written as bf16 by the GEMM: the fp32 y rounded once
    NEED_GPU();
    Rng g = rng_for(71, 2, 0);
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const Case *c = &CASES[i];
        ConvDims d = dims_of(c);
        Twin x = twin_new(c->N, c->H, c->W, c->C, c->extra, &g);
        Twin y = twin_new(d.N, d.P, d.Q, d.K, 2, NULL);
        float *w = dev_floats((size_t)c->K * c->C / c->groups * c->k * c->k, &g);
        conv_forward_gpu(&dev, &d, x.b, w, NULL, y.f);
        conv_forward_gpu(&dev, &d, x.b, w, NULL, y.b);
        rounded_equal(c->what, y.f, y.b, 1);
        twin_free(x); twin_free(y);
    }
}

static void test_conv_backward(void) {   // dw and dx from a bf16-stored x: as from the rounded fp32 x
    NEED_GPU();
    Rng g = rng_for(71, 3, 0);
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        const Case *c = &CASES[i];
        ConvDims d = dims_of(c);
        Twin x = twin_new(c->N, c->H, c->W, c->C, c->extra, &g);
        size_t nw = (size_t)c->K * c->C / c->groups * c->k * c->k, nx = (size_t)c->N * c->H * c->W * c->C;
        size_t ny = (size_t)d.N * d.P * d.Q * d.K;
        float *w = dev_floats(nw, &g), *dw1 = dev_floats(nw, NULL), *dw2 = dev_floats(nw, NULL);
        Map dy = map_make(dev_floats(ny, &g), d.N, d.P, d.Q, d.K);
        Map dx1 = map_make(dev_floats(nx, NULL), c->N, c->H, c->W, c->C), dx2 = map_make(dev_floats(nx, NULL), c->N, c->H, c->W, c->C);
        conv_backward_gpu(&dev, &d, x.f, w, dy, dx1, dw1, NULL);
        conv_backward_gpu(&dev, &d, x.b, w, dy, dx2, dw2, NULL);
        same_floats(c->what, dw1, dw2, nw);
        same_floats(c->what, dx1.data, dx2.data, nx);
        twin_free(x);
    }
}

// ---- depthwise convolution (YOLO26) ------------------------------------------------------------

// x bf16-stored: y, dw, db bit for bit those of the rounded fp32 x; y written as bf16: the fp32 y rounded
// once (each output a sum in the same order). Both kernels: four channels a thread and one.
static void test_dwconv(void) {
    NEED_GPU();
    Rng g = rng_for(71, 6, 0);
    static const struct { int N, C, H, W, k, stride, extra; const char *what; } DW[] = {
        { 2, 32, 19, 21, 3, 2, 4, "dw 3x3 s2, four channels a thread, slice" },
        { 3, 16, 9, 14, 5, 1, 0, "dw 5x5 s1, four channels a thread" },
        { 2, 37, 11, 13, 3, 1, 3, "dw 3x3, one channel a thread, odd slice" },
        { 2, 9, 15, 17, 7, 1, 0, "dw 7x7, one tap a block" },
    };
    for (size_t i = 0; i < sizeof DW / sizeof *DW; i++) {
        DwDims d = dw_dims(DW[i].N, DW[i].C, DW[i].H, DW[i].W, DW[i].k, DW[i].stride);
        size_t nw = (size_t)d.C * d.k * d.k, ny = (size_t)d.N * d.P * d.Q * d.C;
        Twin x = twin_new(d.N, d.H, d.W, d.C, DW[i].extra, &g), y = twin_new(d.N, d.P, d.Q, d.C, 2, NULL);
        float *w = dev_floats(nw, &g), *b = dev_floats(d.C, &g);
        float *dw1 = dev_floats(nw, NULL), *dw2 = dev_floats(nw, NULL), *db1 = dev_floats(d.C, NULL);
        float *db2 = dev_floats(d.C, NULL);
        Map y1 = map_make(dev_floats(ny, NULL), d.N, d.P, d.Q, d.C), y2 = map_make(dev_floats(ny, NULL), d.N, d.P, d.Q, d.C);
        Map dy = map_make(dev_floats(ny, &g), d.N, d.P, d.Q, d.C);
        dwconv_forward_gpu(&dev, &d, x.f, w, b, y1);
        dwconv_forward_gpu(&dev, &d, x.b, w, b, y2);
        same_floats(DW[i].what, y1.data, y2.data, ny);
        dwconv_forward_gpu(&dev, &d, x.b, w, b, y.f);
        dwconv_forward_gpu(&dev, &d, x.b, w, b, y.b);
        rounded_equal(DW[i].what, y.f, y.b, 0);
        Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
        dwconv_backward_gpu(&dev, &d, x.f, w, dy, none, dw1, db1);
        dwconv_backward_gpu(&dev, &d, x.b, w, dy, none, dw2, db2);
        same_floats(DW[i].what, dw1, dw2, nw);
        same_floats(DW[i].what, db1, db2, d.C);
        twin_free(x); twin_free(y);
    }
}

// ---- batch normalisation --------------------------------------------------------------------

static void test_bn(void) {
    NEED_GPU();
    Rng g = rng_for(71, 4, 0);
    int N = 3, H = 9, W = 7, C = 40;
    size_t n = (size_t)N * H * W * C;
    Twin z = twin_new(N, H, W, C, 0, &g), y = twin_new(N, H, W, C, 4, NULL);
    float *gamma = dev_floats(C, &g), *beta = dev_floats(C, &g);
    float *st[2][4];   // per run: running mean, running var, mean, invstd
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 4; k++) st[r][k] = dev_floats(C, &g);
    checkCuda(cudaMemcpy(st[1][0], st[0][0], C * 4, cudaMemcpyDeviceToDevice));
    checkCuda(cudaMemcpy(st[1][1], st[0][1], C * 4, cudaMemcpyDeviceToDevice));
    Map none = { NULL, 0, 0, 0, 0, 0, 0, 0 };
    bn_silu_forward_train_gpu(&dev, z.f, gamma, beta, 1e-3f, 0.03f, st[0][0], st[0][1], st[0][2], st[0][3], none, y.f);
    bn_silu_forward_train_gpu(&dev, z.b, gamma, beta, 1e-3f, 0.03f, st[1][0], st[1][1], st[1][2], st[1][3], none, y.b);
    const char *names[4] = { "running mean", "running var", "batch mean", "invstd" };
    for (int k = 0; k < 4; k++) same_floats(names[k], st[0][k], st[1][k], C);
    rounded_equal("bn+silu output", y.f, y.b, 0);

    Map dy = map_make(dev_floats(n, &g), N, H, W, C);
    float *dz1 = dev_floats(n / 2 + 1, NULL), *dz2 = dev_floats(n / 2 + 1, NULL);
    float *dg[2] = { dev_floats(C, NULL), dev_floats(C, NULL) }, *db[2] = { dev_floats(C, NULL), dev_floats(C, NULL) };
    bn_silu_backward_bf16_gpu(&dev, z.f, gamma, beta, st[0][2], st[0][3], dy, dz1, dg[0], db[0]);
    bn_silu_backward_bf16_gpu(&dev, z.b, gamma, beta, st[0][2], st[0][3], dy, dz2, dg[1], db[1]);
    same_floats("dz (bf16 bits)", dz1, dz2, n / 2);
    same_floats("dgamma", dg[0], dg[1], C);
    same_floats("dbeta", db[0], db[1], C);

    Map u1 = map_make(dev_floats(n, NULL), N, H, W, C), u2 = map_make(dev_floats(n, NULL), N, H, W, C);
    bn_apply_gpu(&dev, z.f, gamma, beta, st[0][2], st[0][3], u1);
    bn_apply_gpu(&dev, z.b, gamma, beta, st[0][2], st[0][3], u2);
    same_floats("bn recompute", u1.data, u2.data, n);
    bn_forward_eval_gpu(&dev, z.f, gamma, beta, 1e-3f, st[0][0], st[0][1], y.f);
    bn_forward_eval_gpu(&dev, z.b, gamma, beta, 1e-3f, st[0][0], st[0][1], y.b);
    rounded_equal("bn eval output", y.f, y.b, 0);
    twin_free(z); twin_free(y);
}

// ---- pools, upsampling, copies, residual adds ------------------------------------------------

static void test_pools_and_copies(void) {
    NEED_GPU();
    Rng g = rng_for(71, 5, 0);
    int N = 2, H = 10, W = 9, C = 24;
    Twin x = twin_new(N, H, W, C, 4, &g), x2 = twin_new(N, H, W, C, 0, &g);
    Twin same = twin_new(N, H, W, C, 2, NULL);
    maxpool_forward_gpu(&dev, x.f, 5, 1, 2, same.f);
    maxpool_forward_gpu(&dev, x.b, 5, 1, 2, same.b);
    rounded_equal("maxpool 5/1/2", same.f, same.b, 0);
    copy_map_gpu(&dev, x.f, same.f);
    copy_map_gpu(&dev, x.b, same.b);
    rounded_equal("copy", same.f, same.b, 0);
    add_forward_gpu(&dev, x.f, x2.f, same.f);
    add_forward_gpu(&dev, x.b, x2.b, same.b);
    rounded_equal("add", same.f, same.b, 0);
    copy_map_gpu(&dev, x.f, same.b);                 // fp32 -> bf16: rounded once
    rounded_equal("copy fp32 into bf16", x.f, same.b, 0);

    Twin half = twin_new(N, H / 2, (W - 1) / 2, C, 0, NULL);
    avgpool_forward_gpu(&dev, x.f, 2, 2, 0, half.f);
    avgpool_forward_gpu(&dev, x.b, 2, 2, 0, half.b);
    rounded_equal("avgpool 2/2/0", half.f, half.b, 0);
    Twin up = twin_new(N, 2 * H, 2 * W, C, 0, NULL);
    upsample_forward_gpu(&dev, x.f, 2, up.f);
    upsample_forward_gpu(&dev, x.b, 2, up.b);
    rounded_equal("upsample x2", up.f, up.b, 0);

    size_t nx = (size_t)N * H * W * C, ny = (size_t)N * ((H - 1) / 2 + 1) * ((W - 1) / 2 + 1) * C;
    Map dy = map_make(dev_floats(ny, &g), N, (H - 1) / 2 + 1, (W - 1) / 2 + 1, C);
    Map dx1 = map_make(dev_floats(nx, NULL), N, H, W, C), dx2 = map_make(dev_floats(nx, NULL), N, H, W, C);
    maxpool_backward_gpu(&dev, x.f, 3, 2, 1, dy, dx1);
    maxpool_backward_gpu(&dev, x.b, 3, 2, 1, dy, dx2);
    same_floats("maxpool backward", dx1.data, dx2.data, nx);
    twin_free(x); twin_free(x2); twin_free(same); twin_free(half); twin_free(up);
}

#define RUN_ONE(fn) RUN(fn);
int main(void) {
    GPU_TESTS(RUN_ONE)
    if (dev_state > 0) dev.cudnn = cudnn_saved, device_free(&dev);
    return test_summary();
}
#endif
