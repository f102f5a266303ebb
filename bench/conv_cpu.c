// conv_cpu.c: times conv_forward_cpu / conv_backward_cpu (im2col + OpenBLAS GEMM) on gelan-s
// shapes at batch 4 and a 256x256 input, after checking each shape against the plain loops.
// Build: make benches, or gcc -std=c11 -D_GNU_SOURCE -O2 -I. -o bench/conv_cpu bench/conv_cpu.c
//        core/spec/conv.c core/spec/elementwise.c core/base/util.c -lopenblas -lm; run: ./bench/conv_cpu
#include "core/spec/ops.h"
#include "core/base/util.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *name; int C, H, K, k, stride, groups; } Shape;

// H is the input size at a 256x256 image (P3 = 32, P4 = 16)
static const Shape shapes[] = {
    { "stem 3x3 s2 3->32 @256", 3, 256, 32, 3, 2, 1 },
    { "AConv 3x3 s2 64->128 @64", 64, 64, 128, 3, 2, 1 },
    { "RepNCSP 3x3 64->64 @32", 64, 32, 64, 3, 1, 1 },
    { "P3 3x3 128->128 @32", 128, 32, 128, 3, 1, 1 },
    { "head 3x3 64->64 g4 @32", 64, 32, 64, 3, 1, 4 },
    { "cv4 1x1 256->128 @32", 256, 32, 128, 1, 1, 1 },
    { "P5 1x1 512->256 @8", 512, 8, 256, 1, 1, 1 },
};

enum { BATCH = 4 };

static float *rand_floats(size_t n, Rng *g) {
    float *v = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = (float)rng_uniform(g, -1, 1);
    return v;
}

static ConvDims shape_dims(const Shape *s, int N) {
    return conv_dims(N, s->C, s->H, s->H, s->K, s->k, s->stride, s->k / 2, s->groups);
}

static double max_rel_err(const float *got, const float *ref, size_t n) {
    double maxref = 0.0, maxerr = 0.0;
    for (size_t i = 0; i < n; i++) maxref = fmax(maxref, fabs(ref[i]));
    for (size_t i = 0; i < n; i++) maxerr = fmax(maxerr, fabs(got[i] - ref[i]));
    return maxerr / (maxref > 0 ? maxref : 1);
}

// One image through the GEMM path and the plain loops: forward and the three gradients.
static double validate(const Shape *s) {
    ConvDims d = shape_dims(s, 1);
    size_t xn = (size_t)d.H * d.W * d.C, yn = (size_t)d.P * d.Q * d.K;
    size_t wn = (size_t)d.K * (d.C / d.groups) * d.R * d.S;
    Rng g = rng_for(5, 0, 0);
    float *x = rand_floats(xn, &g), *w = rand_floats(wn, &g), *b = rand_floats(d.K, &g);
    float *dy = rand_floats(yn, &g), *ws = xmalloc((conv_workspace_floats(&d) + 1) * sizeof(float));
    float *y[2], *dx[2], *dw[2], *db[2];
    for (int i = 0; i < 2; i++) {
        y[i] = xmalloc(yn * sizeof(float));
        dx[i] = xcalloc(xn, sizeof(float)), dw[i] = xcalloc(wn, sizeof(float));
        db[i] = xcalloc(d.K, sizeof(float));
    }
    Map mx = map_make(x, 1, d.H, d.W, d.C), mdy = map_make(dy, 1, d.P, d.Q, d.K);
    conv_forward_cpu(&d, mx, w, b, map_make(y[0], 1, d.P, d.Q, d.K), ws);
    conv_forward_ref(&d, mx, w, b, map_make(y[1], 1, d.P, d.Q, d.K));
    conv_backward_cpu(&d, mx, w, mdy, map_make(dx[0], 1, d.H, d.W, d.C), dw[0], db[0], ws);
    conv_backward_ref(&d, mx, w, mdy, map_make(dx[1], 1, d.H, d.W, d.C), dw[1], db[1]);
    double err = fmax(fmax(max_rel_err(y[0], y[1], yn), max_rel_err(dx[0], dx[1], xn)),
                      fmax(max_rel_err(dw[0], dw[1], wn), max_rel_err(db[0], db[1], d.K)));
    for (int i = 0; i < 2; i++) free(y[i]), free(dx[i]), free(dw[i]), free(db[i]);
    free(x), free(w), free(b), free(dy), free(ws);
    return err;
}

// mean seconds per call of fwd (forward) or bwd (backward), over >= 5 calls and >= 0.5 s
typedef struct { ConvDims d; Map x, y, dy, dx; float *w, *b, *dw, *db, *ws; } Bench;

static void run_once(Bench *t, int backward) {
    if (backward) conv_backward_cpu(&t->d, t->x, t->w, t->dy, t->dx, t->dw, t->db, t->ws);
    else conv_forward_cpu(&t->d, t->x, t->w, t->b, t->y, t->ws);
}

static double time_op(Bench *t, int backward) {
    run_once(t, backward);   // warm-up: page faults, OpenBLAS threads
    int reps = 0;
    double t0 = now_seconds(), el;
    do {
        run_once(t, backward);
        reps++;
        el = now_seconds() - t0;
    } while (reps < 5 || el < 0.5);
    return el / reps;
}

static void bench_shape(const Shape *s) {
    ConvDims d = shape_dims(s, BATCH);
    size_t xn = (size_t)BATCH * d.H * d.W * d.C, yn = (size_t)BATCH * d.P * d.Q * d.K;
    size_t wn = (size_t)d.K * (d.C / d.groups) * d.R * d.S;
    Rng g = rng_for(6, 0, 0);
    Bench t = { d, map_make(rand_floats(xn, &g), BATCH, d.H, d.W, d.C),
                map_make(xmalloc(yn * sizeof(float)), BATCH, d.P, d.Q, d.K),
                map_make(rand_floats(yn, &g), BATCH, d.P, d.Q, d.K),
                map_make(xcalloc(xn, sizeof(float)), BATCH, d.H, d.W, d.C), rand_floats(wn, &g),
                rand_floats(d.K, &g), xcalloc(wn, sizeof(float)), xcalloc(d.K, sizeof(float)),
                xmalloc((conv_workspace_floats(&d) + 1) * sizeof(float)) };
    double flops = 2.0 * yn * (d.C / d.groups) * d.R * d.S;   // one GEMM's worth
    double err = validate(s), fwd = time_op(&t, 0), bwd = time_op(&t, 1);
    printf("%-28s %9.2f %8.1f %9.2f %8.1f %9.1f %9.1e\n", s->name, fwd * 1e3, flops / fwd * 1e-9,
           bwd * 1e3, 2 * flops / bwd * 1e-9, conv_workspace_floats(&d) * 4.0 / (1 << 20), err);
    free(t.x.data), free(t.y.data), free(t.dy.data), free(t.dx.data);
    free(t.w), free(t.b), free(t.dw), free(t.db), free(t.ws);
}

int main(void) {
    printf("conv_cpu: batch %d, 256x256 input, %d OpenBLAS threads\n", BATCH,
           openblas_get_num_threads());
    printf("%-28s %9s %8s %9s %8s %9s %9s\n", "shape", "fwd ms", "GFLOP/s", "bwd ms", "GFLOP/s",
           "ws MiB", "max err");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) bench_shape(&shapes[i]);
    return 0;
}
