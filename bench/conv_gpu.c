// conv_gpu.c: times conv_forward_gpu and conv_backward_gpu (dx, dw, db; then dW alone and dx alone)
// on the gelan-s convs that dominate a 640x640 batch-64 training step, in fp32, tf32 and bf16;
// correctness is test/test_gpu_ops.c's job. Run: make bench/conv_gpu && ./bench/conv_gpu [reps]
// Legend: N batch, C/K channels, H,W in, P,Q out. GB/s counts the fewest bytes each call must move.
#include <stdio.h>
#include <stdlib.h>

#include "core/ops.h"
#include "core/util.h"
#ifdef USE_CUDA
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

typedef struct { const ConvDims *d; Map x, y, dx; float *w, *b, *dw, *db; } Bufs;

static void conv_pass(Device *dev, const Bufs *t, Pass pass) {
    Map none = t->dx;
    none.data = NULL;
    if (pass == FORWARD) conv_forward_gpu(dev, t->d, t->x, t->w, t->b, t->y);
    if (pass == BACKWARD) conv_backward_gpu(dev, t->d, t->x, t->w, t->y, t->dx, t->dw, t->db);
    if (pass == WEIGHT_GRAD) conv_backward_gpu(dev, t->d, t->x, t->w, t->y, none, t->dw, NULL);
    if (pass == INPUT_GRAD) conv_backward_gpu(dev, t->d, t->x, t->w, t->y, t->dx, NULL, NULL);
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

static void bench_layer(Device *dev, const Layer *l, const float *noise, int reps) {
    static const char *names[] = { "fp32", "tf32", "bf16" };
    arena_reset(&dev->acts);
    ConvDims d = conv_dims(l->N, l->C, l->H, l->W, l->K, l->k, l->stride, l->k / 2, l->groups);
    size_t nw = (size_t)d.K * (d.C / d.groups) * d.R * d.S;
    size_t nx = (size_t)d.N * d.H * d.W * d.C, ny = (size_t)d.N * d.P * d.Q * d.K;
    Bufs t = { &d, map_make(fill(dev, nx, noise), d.N, d.H, d.W, d.C),
               map_make(fill(dev, ny, noise), d.N, d.P, d.Q, d.K),
               map_make(fill(dev, nx, noise), d.N, d.H, d.W, d.C), fill(dev, nw, noise),
               fill(dev, d.K, noise), fill(dev, nw, noise), fill(dev, d.K, noise) };
    double flops = 2.0 * d.N * d.P * d.Q * (double)nw;        // per GEMM
    double fwd_bytes = 4.0 * (nx + ny + nw);                  // x, w in; y out
    double bwd_bytes = 4.0 * (nx + ny + 2 * nx + 3 * nw);     // x, dy, w in; dx, dw read+write
    for (int p = GPU_FP32; p <= GPU_BF16; p++) {
        dev->precision = (GpuPrecision)p;
        float f = time_pass(dev, &t, FORWARD, reps), b = time_pass(dev, &t, BACKWARD, reps);
        float gw = time_pass(dev, &t, WEIGHT_GRAD, reps), gx = time_pass(dev, &t, INPUT_GRAD, reps);
        printf("%-24s %-4s %8.3f %7.1f %7.0f %8.3f %7.1f %7.0f %8.3f %8.3f\n", l->what, names[p], f,
               flops / f / 1e9, fwd_bytes / f / 1e6, b, 2 * flops / b / 1e9, bwd_bytes / b / 1e6,
               gw, gx);
    }
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    reps = reps < 1 ? 1 : reps > MAX_REPS ? MAX_REPS : reps;
    Device dev;
    Err err;
    size_t bytes[ARENA_COUNT] = { 0, 0, 0, (size_t)4 << 30, scratch_bytes() };
    if (device_init(&dev, 0, bytes, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    Rng g = rng_for(1, 0, 0);
    float *noise = xmalloc(NOISE * sizeof(float));
    for (int i = 0; i < NOISE; i++) noise[i] = (float)rng_uniform(&g, -1, 1);
    printf("median of %d; ms per call; TF/s over the GEMM flops; GB/s over the fewest bytes\n", reps);
    printf("%-24s %-4s %8s %7s %7s %8s %7s %7s %8s %8s\n", "layer (batch 64)", "prec", "fwd ms",
           "TF/s", "GB/s", "bwd ms", "TF/s", "GB/s", "dW ms", "dx ms");
    for (size_t i = 0; i < sizeof LAYERS / sizeof *LAYERS; i++) bench_layer(&dev, &LAYERS[i], noise, reps);
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
