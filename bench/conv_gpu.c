// conv_gpu.c: times conv_forward_gpu and conv_backward_gpu (dx, dw, db) on gelan-s-sized layers at
// batch 16, 640x640, in fp32, tf32 and bf16; correctness is test/test_gpu_ops.c's job.
// Run: make STATIC=1 bench/conv_gpu && ./bench/conv_gpu     Legend: N batch, C/K channels, H,W in.
#include <stdio.h>

#include "core/ops.h"
#include "core/util.h"
#ifdef USE_CUDA
#include "gpu/ops.h"

typedef struct { const char *what; int N, C, H, W, K, k, stride, groups; } Layer;
static const Layer LAYERS[] = {
    { "3x3 s2 stem", 16, 3, 640, 640, 32, 3, 2, 1 },
    { "3x3 64->64 @160", 16, 64, 160, 160, 64, 3, 1, 1 },
    { "1x1 128->128 @80", 16, 128, 80, 80, 128, 1, 1, 1 },
    { "3x3 256->256 @20", 16, 256, 20, 20, 256, 3, 1, 1 },
    { "3x3 g4 256->256 @40", 16, 256, 40, 40, 256, 3, 1, 4 },
};
enum { REPS = 20 };

static float *fill(Device *dev, size_t n, Rng *g) {
    float *h = xmalloc(n * sizeof(float)), *d = arena_take(&dev->acts, n * sizeof(float), 256);
    for (size_t i = 0; i < n; i++) h[i] = (float)rng_uniform(g, -1, 1);
    checkCuda(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    free(h);
    return d;
}

// milliseconds per call of the forward (backward = 0) or the backward: mean of REPS after 3 warm-ups
static float time_conv(Device *dev, const ConvDims *d, Map x, float *w, float *b, Map y, Map dx,
                       float *dw, float *db, int backward) {
    cudaEvent_t t0, t1;
    checkCuda(cudaEventCreate(&t0));
    checkCuda(cudaEventCreate(&t1));
    for (int r = -3; r < REPS; r++) {
        if (r == 0) checkCuda(cudaEventRecord(t0, dev->stream));
        if (backward) conv_backward_gpu(dev, d, x, w, y, dx, dw, db);
        else conv_forward_gpu(dev, d, x, w, b, y);
    }
    checkCuda(cudaEventRecord(t1, dev->stream));
    checkCuda(cudaEventSynchronize(t1));
    float ms = 0;
    checkCuda(cudaEventElapsedTime(&ms, t0, t1));
    checkCuda(cudaEventDestroy(t0));
    checkCuda(cudaEventDestroy(t1));
    return ms / REPS;
}

int main(void) {
    Device dev;
    Err err;
    size_t bytes[ARENA_COUNT] = { 0, 0, 0, (size_t)8 << 30, (size_t)2 << 30 };
    if (device_init(&dev, 0, bytes, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    Rng g = rng_for(1, 0, 0);
    const char *names[] = { "fp32", "tf32", "bf16" };
    printf("%-22s %-5s %9s %9s %9s %9s\n", "layer", "prec", "fwd ms", "fwd TF/s", "bwd ms",
           "bwd TF/s");
    for (size_t i = 0; i < sizeof LAYERS / sizeof *LAYERS; i++) {
        const Layer *l = &LAYERS[i];
        arena_reset(&dev.acts);
        ConvDims d = conv_dims(l->N, l->C, l->H, l->W, l->K, l->k, l->stride, l->k / 2, l->groups);
        size_t nw = (size_t)d.K * (d.C / d.groups) * d.R * d.S;
        Map x = map_make(fill(&dev, (size_t)d.N * d.H * d.W * d.C, &g), d.N, d.H, d.W, d.C);
        Map y = map_make(fill(&dev, (size_t)d.N * d.P * d.Q * d.K, &g), d.N, d.P, d.Q, d.K);
        Map dx = map_make(fill(&dev, (size_t)d.N * d.H * d.W * d.C, &g), d.N, d.H, d.W, d.C);
        float *w = fill(&dev, nw, &g), *b = fill(&dev, d.K, &g), *dw = fill(&dev, nw, &g);
        float *db = fill(&dev, d.K, &g);
        double flops = 2.0 * d.N * d.P * d.Q * (double)nw;   // per GEMM
        for (int p = GPU_FP32; p <= GPU_BF16; p++) {
            dev.precision = (GpuPrecision)p;
            float f = time_conv(&dev, &d, x, w, b, y, dx, dw, db, 0);
            float bw = time_conv(&dev, &d, x, w, b, y, dx, dw, db, 1);
            printf("%-22s %-5s %9.3f %9.1f %9.3f %9.1f\n", l->what, names[p], f, flops / f / 1e9,
                   bw, 2 * flops / bw / 1e9);
        }
    }
    device_free(&dev);
    return 0;
}
#else
int main(void) {
    printf("conv_gpu: built without CUDA; nothing to time\n");
    return 0;
}
#endif
