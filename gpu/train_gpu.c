// train_gpu.c: a trainer's memory plan on one GPU (the model's arenas, a master's EMA, momentum and
// receive buffers, YOLO26's optimizer block and Newton-Schulz scratch), the model moved into it, and
// batch=-1's choice of the largest batch whose plan fits. Reached through the Backend table
// (gpu/backend_gpu.c: model_to_device, auto_batch, plan_bytes).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/trainer/family_yolo26.h"
#include "gpu/model_gpu.h"
#include "gpu/musgd.h"
#include "gpu/train_gpu.h"

static size_t trainable_floats(const Model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) n += param_trainable(m->params[i].kind) ? m->params[i].n : 0;
    return n;
}

// YOLO26's optimizer block: 2 floats per trainable float (gpu/musgd.h's m and s, or m and v), and its tables.
static size_t optim26_bytes(const Model *m) {
    return 2 * trainable_floats(m) * sizeof(float) + ((size_t)1 << 20);
}

// Newton-Schulz scratch of the largest Muon matrix (shapes only: the worst case, MuSGD).
static size_t scratch26_bytes(const Model *m) {
    MuParam *p = xcalloc(m->n_params, sizeof *p);
    int n = train26_params(m, 1, p);
    size_t bytes = musgd_scratch_bytes_gpu(p, n);
    free(p);
    return bytes;
}

// What training allocates for m on one GPU: the model's arenas, with the optimizer's states on the
// master, and YOLO26's optimizer block and Newton-Schulz scratch.
static GpuPlan training_plan(const Model *m, GpuPrecision prec, int master) {
    GpuPlan plan = model_gpu_plan(m, prec, master ? 3 : 0);
    if (m->opt_block && master) plan.arena[ARENA_OPTIM] += optim26_bytes(m);   // gelan's Adam too
    if (m->end2end && master) {
        size_t ns = scratch26_bytes(m) + ((size_t)64 << 20) + plan.augment;   // as model_gpu_plan
        if (plan.arena[ARENA_SCRATCH] < ns) plan.arena[ARENA_SCRATCH] = ns;
    }
    return plan;
}

int model_to_device_gpu(Model *m, int id, const char *precision, int master, Err *err) {
    GpuPrecision prec = gpu_precision(precision);
    Device *dev = xcalloc(1, sizeof *dev);
    GpuPlan plan = training_plan(m, prec, master);   // a replica's and inference's: the model's arenas only
    model_gpu_print_plan(&plan, id, stdout);
    if (model_to_gpu(m, dev, id, &plan, prec, err)) { free(dev); return -1; }
    return 0;
}

// ---- batch=-1 ---------------------------------------------------------------------------------

static size_t plan_bytes(const Config *cfg, GpuPrecision prec, int n);

size_t trainer_gpu_plan_bytes(const Config *cfg, int n) { return plan_bytes(cfg, gpu_precision(cfg->precision), n); }

// The training plan's bytes on the master GPU for micro-batch n (SIZE_MAX when the model cannot be
// built for it, which counts as not fitting), at the largest input (multi_scale: up to 1.5x imgsz).
static size_t plan_bytes(const Config *cfg, GpuPrecision prec, int n) {
    Model m;
    Err err;
    if (model_build(cfg, n, train_plan_size(cfg), &m, &err)) return SIZE_MAX;
    GpuPlan p = training_plan(&m, prec, 1);
    model_free(&m);
    size_t total = 0;
    for (int k = 0; k < ARENA_COUNT; k++) total += p.arena[k];
    return total;
}

int trainer_gpu_auto_batch(Config *cfg, const int *gpus, int n, Err *err) {
    GpuPrecision prec = gpu_precision(cfg->precision);
    size_t free_min = SIZE_MAX;
    int tightest = gpus[0];
    for (int k = 0; k < n; k++) {
        if (device_check(gpus[k], prec, err)) return -1;
        size_t f = gpu_free_bytes(gpus[k]);
        if (f < free_min) { free_min = f; tightest = gpus[k]; }
    }
    double gib = 1 << 30, budget = AUTO_BATCH_FRACTION * (double)free_min;
    size_t p1 = plan_bytes(cfg, prec, 1), p2 = plan_bytes(cfg, prec, 2);
    if (p1 == SIZE_MAX || p1 > budget)
        return err_set(err, "batch=-1: even one image at imgsz %d needs %.2f GiB on a GPU, more than %.0f%% of the "
                       "%.2f GiB free on GPU %d; lower imgsz or free the GPU", cfg->imgsz, p1 / gib,
                       100 * AUTO_BATCH_FRACTION, free_min / gib, tightest);
    // The plan grows about linearly with the batch (activations, their gradients, the input), but
    // parts are capped (im2col chunks, scratch), so the line through 1 and 2 is only a first guess:
    // a bisection between a batch that fits (lo) and one that does not (hi) finds the largest.
    double guess = p2 > p1 ? 1 + (budget - p1) / (double)(p2 - p1) : AUTO_BATCH_MAX;
    int lo = 1, hi = AUTO_BATCH_MAX + 1;
    int g = guess > AUTO_BATCH_MAX ? AUTO_BATCH_MAX : guess < 1 ? 1 : (int)guess;
    if (plan_bytes(cfg, prec, g) <= budget) lo = g;
    else hi = g;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (plan_bytes(cfg, prec, mid) <= budget) lo = mid;
        else hi = mid;
    }
    int micro = lo;
    size_t bytes = plan_bytes(cfg, prec, micro);
    cfg->batch = micro * n;
    printf("batch=-1 (auto): %d images per GPU%s: the plan, %.2f GiB, is the largest within %.0f%% of the %.2f GiB "
           "free on GPU %d\n", micro, n > 1 ? " (the batch is their sum)" : "", bytes / gib, 100 * AUTO_BATCH_FRACTION,
           free_min / gib, tightest);
    return 0;
}
