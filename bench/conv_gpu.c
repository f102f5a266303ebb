// conv_gpu.c: times conv_forward_gpu and conv_backward_gpu (dx, dw, db; then dW alone and dx alone)
// on the gelan-s convs that dominate a 640x640 batch-64 training step, in fp32, tf32 and bf16, on
// both paths: im2col + cuBLAS ("gemm") and cuDNN's implicit GEMM ("cudnn", gpu/cudnn_conv.c), and
// prints how far cuDNN's y, dx, dw are from the GEMM path's (relative L2). Under bf16 the maps are
// stored bf16 and dy is the packed bf16 dz of the fused backward, as in training. Correctness
// against the CPU is test/test_gpu_ops.c's job. Run: make bench/conv_gpu && ./bench/conv_gpu [reps]
// Legend: N batch, C/K channels, H,W in, P,Q out. GB/s counts the fewest bytes each call must move.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/spec/ops.h"
#include "core/base/util.h"
#ifdef USE_CUDA
#include "gpu/cudnn_conv.h"
#include "gpu/ops.h"

typedef struct { const char *what; int N, C, H, W, K, k, stride, groups; } Layer;
static const Layer LAYERS[] = {
    { "model.0 3x3 s2 3->32", 64, 3, 640, 640, 32, 3, 2, 1 },
    { "model.1 3x3 s2 32->64", 64, 32, 320, 320, 64, 3, 2, 1 },
    { "model.2 3x3 32->32 @160", 64, 32, 160, 160, 32, 3, 1, 1 },
    { "model.3 3x3 s2 64->128", 64, 64, 160, 160, 128, 3, 2, 1 },
    { "3x3 64->64 @80", 64, 64, 80, 80, 64, 3, 1, 1 },
    { "head 3x3 128->128 @80", 64, 128, 80, 80, 128, 3, 1, 1 },
    { "22.cv2 3x3 128->64 @80", 64, 128, 80, 80, 64, 3, 1, 1 },
    { "1x1 128->128 @80", 64, 128, 80, 80, 128, 1, 1, 1 },
    { "3x3 g4 256->256 @40", 64, 256, 40, 40, 256, 3, 1, 4 },
};
enum { WARMUP = 2, MAX_REPS = 64, NOISE = 1 << 20 };
typedef enum { FORWARD, BACKWARD, WEIGHT_GRAD, INPUT_GRAD } Pass;

// n floats of device memory holding a repeated block of uniform(-1, 1) noise (never zeros)
static float *fill(Device *dev, size_t n, const float *noise) {
    float *d = arena_take(&dev->acts, n * sizeof(float), 256);
    for (size_t i = 0; i < n; i += NOISE) {
        size_t len = n - i < NOISE ? n - i : NOISE;
        checkCuda(cudaMemcpy(d + i, noise, len * sizeof(float), cudaMemcpyHostToDevice));
    }
    return d;
}

static int by_value(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// xb, yb: bf16-stored x and y; dy (never overwritten, so both paths see the same) and its packed
// bf16 copy dy16
typedef struct { const ConvDims *d; Map x, y, dx, xb, yb, dy, dy16; float *w, *b, *dw, *db; } Bufs;

static void conv_pass(Device *dev, const Bufs *t, Pass pass) {
    Map none = t->dx;
    none.data = NULL;
    if (dev->precision == GPU_BF16) {
        if (pass == FORWARD) conv_forward_gpu(dev, t->d, t->xb, t->w, NULL, t->yb);
        Map dx = pass == WEIGHT_GRAD ? none : t->dx;
        float *dw = pass == INPUT_GRAD ? NULL : t->dw;
        if (pass != FORWARD) conv_backward_bf16dy_gpu(dev, t->d, t->xb, t->w, t->dy16.data, dx, dw);
        return;
    }
    if (pass == FORWARD) conv_forward_gpu(dev, t->d, t->x, t->w, t->b, t->y);
    if (pass == BACKWARD) conv_backward_gpu(dev, t->d, t->x, t->w, t->dy, t->dx, t->dw, t->db);
    if (pass == WEIGHT_GRAD) conv_backward_gpu(dev, t->d, t->x, t->w, t->dy, none, t->dw, NULL);
    if (pass == INPUT_GRAD) conv_backward_gpu(dev, t->d, t->x, t->w, t->dy, t->dx, NULL, NULL);
}

// m (either storage) as fp32 host values, through an fp32 map taken from the activation arena
static float *snapshot(Device *dev, Map m) {
    size_t n = map_floats(m), mark = dev->acts.used;
    Map f = map_make(arena_take(&dev->acts, n * sizeof(float), 256), m.N, m.H, m.W, m.C);
    copy_map_gpu(dev, m, f);
    device_sync(dev);   // the stream is non-blocking: cudaMemcpy would not wait for it
    float *h = xmalloc(n * sizeof(float));
    checkCuda(cudaMemcpy(h, f.data, n * sizeof(float), cudaMemcpyDeviceToHost));
    dev->acts.used = mark;
    return h;
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - b[i];
        num += e * e;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// y (forward), dx and dw (one backward from zero) of the current path, on the host
typedef struct { float *y, *dx, *dw; } Outs;

static Outs outputs(Device *dev, const Bufs *t) {
    size_t nw = (size_t)t->d->K * (t->d->C / t->d->groups) * t->d->R * t->d->S;
    conv_pass(dev, t, FORWARD);
    Outs o = { snapshot(dev, dev->precision == GPU_BF16 ? t->yb : t->y), NULL, NULL };
    checkCuda(cudaMemsetAsync(t->dx.data, 0, map_floats(t->dx) * sizeof(float), dev->stream));
    checkCuda(cudaMemsetAsync(t->dw, 0, nw * sizeof(float), dev->stream));
    if (dev->precision != GPU_BF16) checkCuda(cudaMemsetAsync(t->db, 0, t->d->K * sizeof(float), dev->stream));
    conv_pass(dev, t, BACKWARD);
    o.dx = snapshot(dev, t->dx);
    Map w = map_make(t->dw, 1, 1, 1, (int)nw);
    o.dw = snapshot(dev, w);
    return o;
}

// median milliseconds of `reps` calls of one pass, each between two events, after warm-ups
static float time_pass(Device *dev, const Bufs *t, Pass pass, int reps) {
    cudaEvent_t ev[MAX_REPS + 1];
    float ms[MAX_REPS];
    for (int r = 0; r <= reps; r++) checkCuda(cudaEventCreate(&ev[r]));
    for (int r = 0; r < WARMUP; r++) conv_pass(dev, t, pass);
    checkCuda(cudaEventRecord(ev[0], dev->stream));
    for (int r = 0; r < reps; r++) {
        conv_pass(dev, t, pass);
        checkCuda(cudaEventRecord(ev[r + 1], dev->stream));
    }
    checkCuda(cudaEventSynchronize(ev[reps]));
    for (int r = 0; r < reps; r++) checkCuda(cudaEventElapsedTime(&ms[r], ev[r], ev[r + 1]));
    for (int r = 0; r <= reps; r++) checkCuda(cudaEventDestroy(ev[r]));
    qsort(ms, reps, sizeof *ms, by_value);
    return ms[reps / 2];
}

// scratch for the largest layer in the most demanding precision
static size_t scratch_bytes(void) {
    Device probe;
    size_t most = 0;
    device_defaults(&probe, 0);
    for (size_t i = 0; i < sizeof LAYERS / sizeof *LAYERS; i++) {
        const Layer *l = &LAYERS[i];
        ConvDims d = conv_dims(l->N, l->C, l->H, l->W, l->K, l->k, l->stride, l->k / 2, l->groups);
        for (int p = GPU_FP32; p <= GPU_BF16; p++) {
            probe.precision = (GpuPrecision)p;
            size_t b = conv_workspace_bytes_gpu(&probe, &d);
            most = b > most ? b : most;
        }
    }
    return most;
}

static Map bf16_copy(Device *dev, Map m) {
    Map b = m;
    b.data = arena_take(&dev->acts, map_floats(m) * 2, 256);
    b.bf16 = 1;
    b.ld = m.C;
    copy_map_gpu(dev, m, b);
    return b;
}

static void bench_layer(Device *dev, const Layer *l, const float *noise, int reps) {
    static const char *names[] = { "fp32", "tf32", "bf16" };
    arena_reset(&dev->acts);
    ConvDims d = conv_dims(l->N, l->C, l->H, l->W, l->K, l->k, l->stride, l->k / 2, l->groups);
    size_t nw = (size_t)d.K * (d.C / d.groups) * d.R * d.S;
    size_t nx = (size_t)d.N * d.H * d.W * d.C, ny = (size_t)d.N * d.P * d.Q * d.K;
    Bufs t = { &d, map_make(fill(dev, nx, noise), d.N, d.H, d.W, d.C),
               map_make(fill(dev, ny, noise), d.N, d.P, d.Q, d.K),
               map_make(fill(dev, nx, noise), d.N, d.H, d.W, d.C), { 0 }, { 0 },
               map_make(fill(dev, ny, noise), d.N, d.P, d.Q, d.K), { 0 }, fill(dev, nw, noise),
               fill(dev, d.K, noise), fill(dev, nw, noise), fill(dev, d.K, noise) };
    t.xb = bf16_copy(dev, t.x);
    t.yb = bf16_copy(dev, t.y);
    t.dy16 = bf16_copy(dev, t.dy);
    double flops = 2.0 * d.N * d.P * d.Q * (double)nw;        // per GEMM
    void *cudnn = dev->cudnn;
    for (int p = GPU_FP32; p <= GPU_BF16; p++) {
        dev->precision = (GpuPrecision)p;
        Outs ref = { NULL, NULL, NULL };
        for (int path = 0; path < (cudnn ? 2 : 1); path++) {
            dev->cudnn = path ? cudnn : NULL;
            Outs o = outputs(dev, &t);
            float f = time_pass(dev, &t, FORWARD, reps), b = time_pass(dev, &t, BACKWARD, reps);
            float gw = time_pass(dev, &t, WEIGHT_GRAD, reps), gx = time_pass(dev, &t, INPUT_GRAD, reps);
            printf("%-24s %-4s %-5s %8.3f %7.1f %8.3f %7.1f %8.3f %8.3f", l->what, names[p], path ? "cudnn" : "gemm", f,
                   flops / f / 1e9, b, 2 * flops / b / 1e9, gw, gx);
            if (path)
                printf("   %.1e %.1e %.1e", rel_l2(o.y, ref.y, ny), rel_l2(o.dx, ref.dx, nx), rel_l2(o.dw, ref.dw, nw));
            printf("\n");
            if (path) free(o.y), free(o.dx), free(o.dw);
            else ref = o;
        }
        free(ref.y), free(ref.dx), free(ref.dw);
    }
    dev->cudnn = cudnn;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    reps = reps < 1 ? 1 : reps > MAX_REPS ? MAX_REPS : reps;
    Device dev;
    Err err;
    size_t bytes[ARENA_COUNT] = { 0, 0, 0, (size_t)7 << 30, scratch_bytes() + ((size_t)256 << 20) };
    if (device_init(&dev, 0, bytes, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    Rng g = rng_for(1, 0, 0);
    float *noise = xmalloc(NOISE * sizeof(float));
    for (int i = 0; i < NOISE; i++) noise[i] = (float)rng_uniform(&g, -1, 1);
    printf("median of %d; ms per call; TF/s over the GEMM flops; GB/s over the fewest bytes\n", reps);
    printf("%-24s %-4s %-5s %8s %7s %8s %7s %8s %8s   %s\n", "layer (batch 64)", "prec", "path", "fwd ms", "TF/s",
           "bwd ms", "TF/s", "dW ms", "dx ms", "cudnn vs gemm: y dx dw (rel L2)");
    for (size_t i = 0; i < sizeof LAYERS / sizeof *LAYERS; i++) bench_layer(&dev, &LAYERS[i], noise, reps);
    int plans, refused;
    cudnn_conv_stats(dev.cudnn, &plans, &refused, NULL);
    printf("cuDNN plans made %d, shapes refused %d%s\n", plans, refused, dev.cudnn ? "" : " (cuDNN not in use)");
    free(noise);
    device_free(&dev);
    return 0;
}
#else
int main(void) {
    printf("conv_gpu: built without CUDA; nothing to time\n");
    return 0;
}
#endif
