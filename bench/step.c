// step.c: training-step speed with a per-phase breakdown (forward, loss, backward, optimizer).
//   make benches && ./bench/step                    CPU: gelan-s 4x256, gelan-t 8x320, gelan-s 4x640
//   ./bench/step CONFIG imgsz batch steps [device [precision]]   e.g. cfg/s.ini 640 64 20 0 bf16
//   (device as in the config: cpu, cpu:2, 0, 0,1; batch -1: the largest that fits, as training's batch=-1;
//   YT_GPU_RESERVE_GB=G takes G GiB first, e.g. to size the batch for a smaller GPU)
// "fwd1" is one training-mode forward alone. On one GPU the timed steps reuse the batch already on
// the device (PyTorch's GPU-only figures are measured so); several devices upload each step. Images and targets are random (data loading is
// measured by bench/loader and by the training loop's own data-wait figure). A step waits on the
// host once, at its end; the phase times come from the backend's timer marks (GPU events on a GPU),
// read after that wait. The plan printed is the whole GPU memory the run holds (nothing else is
// allocated after it).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/devices/infer_devices.h"
#include "core/spec/model.h"
#include "core/devices/multi.h"
#include "core/train/step.h"
#include "core/base/switches.h"
#include "gpu/cudnn_conv.h"
#include "gpu/device.h"

#include "cfg/config.h"
#include "core/train/train.h"
#ifdef USE_CUDA
#include <cuda_runtime.h>
#endif

static void random_batch(Trainer *t, int n, int S, float *targets, int *nt, Rng *r) {
    for (size_t i = 0; i < (size_t)n * S * S * 3; i++) t->input[i] = (float)rng_uniform(r, 0, 1);
    *nt = 0;
    for (int b = 0; b < n; b++)
        for (int k = 0; k < 6; k++, (*nt)++) {
            float *row = targets + 6 * *nt;
            row[0] = b; row[1] = rng_int(r, t->m.nc);
            row[4] = (float)rng_uniform(r, 0.05, 0.4); row[5] = (float)rng_uniform(r, 0.05, 0.4);
            row[2] = (float)rng_uniform(r, row[4] / 2, 1 - row[4] / 2);
            row[3] = (float)rng_uniform(r, row[5] / 2, 1 - row[5] / 2);
        }
}

static void sync(const Trainer *t) {
#ifdef USE_CUDA
    if (t->m.on_device) cudaDeviceSynchronize();
#endif
}

// One timed step; `resident`: the batch is already on the one GPU, where the warm-up uploaded it.
static void step(Trainer *t, int resident, int n, int S, const float *targets, int nt, int i, LossOut *lo, Err *err) {
    if (resident) trainer_step_batch(t, NULL, NULL, n, S, targets, nt, 0, i, lo, err);
    else trainer_step(t, n, S, targets, nt, 0, i, lo, err);
}

// FLOPs of one node at batch n (2 x multiply-adds); backward computes dx and dw: twice that.
static double node_flops(const Model *m, const Node *nd, int n) {
    double f = 0;
    for (int u = 0; u < 2; u++) {
        const ConvUnit *cu = u ? &nd->cv2 : &nd->cv;
        if (cu->w < 0 || (nd->op != OP_CONV && nd->op != OP_REPCONV)) continue;
        const ConvDims *d = &cu->d;
        f += 2.0 * n * d->P * d->Q * d->K * (d->C / d->groups) * d->R * d->S;   // P, Q per image
    }
    return f;
}

// With YT_PROFILE set: the 15 most expensive (node, direction) pairs of the profiled steps (YT_PROFILE=all: every pair).
static void print_profile(const Model *m, int n, int steps, int rows) {
    static const char *ops[] = { "conv", "repconv", "maxpool", "avgpool", "upsample", "copy", "add", "attn", "detach" };
    _Static_assert(sizeof ops / sizeof *ops == OP_KINDS, "a name for every OpKind");
    int k = 2 * m->n_nodes, *order = xmalloc(k * sizeof *order);
    double fwd = 0, bwd = 0;
    for (int i = 0; i < k; i++) { order[i] = i; if (i % 2) bwd += m->prof[i]; else fwd += m->prof[i]; }
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && m->prof[order[j]] > m->prof[order[j - 1]]; j--) { int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t; }
    printf("profiled (a wait after every node): forward %.1f ms, backward %.1f ms per step\n", 1e3 * fwd / steps,
           1e3 * bwd / steps);
    printf("%4s %-9s %-8s %-44s %9s %9s %6s\n", "node", "dir", "op", "tensor", "ms/step", "TFLOP/s", "share");
    for (int r = 0; r < rows && r < k; r++) {
        int i = order[r] / 2, b = order[r] % 2;
        const Node *nd = &m->nodes[i];
        double t = m->prof[order[r]] / steps, f = node_flops(m, nd, n) * (b ? 2 : 1);
        const char *name = nd->cv.w >= 0 && (nd->op == OP_CONV || nd->op == OP_REPCONV) ? m->params[nd->cv.w].name : "-";
        printf("%4d %-9s %-8s %-44.44s %9.3f %9.1f %5.1f%%\n", i, b ? "backward" : "forward", ops[nd->op], name, 1e3 * t,
               f > 0 ? f / t / 1e12 : 0, 100 * m->prof[order[r]] / (fwd + bwd));
    }
    free(order);
}

static int bench(const char *cfgfile, int S, int n, int steps, const char *device, const char *precision) {
    static Config cfg;
    Err err;
    char a1[32], a2[32], a3[32];
    snprintf(a1, sizeof a1, "imgsz=%d", S);
    snprintf(a2, sizeof a2, "batch=%d", n);
    snprintf(a3, sizeof a3, "precision=%s", precision);
    char *ov[] = { a1, a2, a3, "epochs=1" };
    if (config_load(cfgfile, 4, ov, &cfg, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    GpuInfo gi[MULTI_MAX];
#ifdef USE_CUDA
    int n_gpus = gpu_list(gi, MULTI_MAX);
#else
    int n_gpus = 0;
    (void)gi;
#endif
    DeviceList devs;
    if (parse_devices(device, n_gpus, &devs, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    if (infer_auto_batch(&cfg, &devs, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }   // batch -1
    n = cfg.batch;
    int gpu = devs.gpu[0];
    Trainer t;
    if (trainer_init_devices(&t, &cfg, steps + 1, &devs, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    float *targets = xmalloc(6 * 6 * (size_t)n * sizeof(float));   // 6 objects per image
    int nt;
    Rng r = rng_for(1, 2, 3);
    random_batch(&t, n, S, targets, &nt, &r);
    LossOut lo;
    for (int i = 0; i < 2; i++) trainer_step(&t, n, S, targets, nt, 0, i, &lo, &err);   // warm-up
    // One GPU: the batch stays where warm-up uploaded it, as anchors.md measures PyTorch's step
    // ("batch already on the GPU"); the loader's upload is in the end-to-end figures.
    int resident = devs.n == 1 && gpu >= 0;            // the timed steps reuse the batch on the GPU
    sync(&t);
    double t0 = now_seconds(), fwd = 0;
    if (devs.n == 1) {                                 // one device's forward alone (not split)
        model_forward(&t.m, resident ? NULL : t.input, n, S, S, 1);
        sync(&t);
        fwd = now_seconds() - t0;
    }
    memset(&t.t, 0, sizeof t.t);
    t0 = now_seconds();
    for (int i = 2; i < steps + 2; i++) step(&t, resident, n, S, targets, nt, i, &lo, &err);
    sync(&t);
    double dt = (now_seconds() - t0) / steps;
    const PhaseTimes *p = &t.t;
    printf("%-10s %4d %5d %5s %5s %8.4f  %8.4f  %8.4f %7.4f %8.4f %7.4f  %7.1f\n", cfg.file, S, n,
           device[0] ? device : gpu < 0 ? "cpu" : "gpu", gpu < 0 ? "fp32" : precision, fwd, dt, p->forward / steps,
           p->loss / steps, p->backward / steps, p->optim / steps, n / dt);
    if (devs.n > 1)
        printf("  %d devices: per step gather %.4f s, broadcast %.4f s (device 0's phases above)\n", devs.n,
               p->gather / steps, p->broadcast / steps);
#ifdef USE_CUDA
    if (t.m.on_device) {   // cuDNN's plans, made in the warm-up steps (gpu/cudnn_conv.c)
        int plans, refused;
        double secs;
        cudnn_conv_stats(((Device *)t.m.be_ctx)->cudnn, &plans, &refused, &secs);
        if (plans + refused) printf("  cuDNN: %d plans made, %d shapes left to cuBLAS, %.2f s making them\n", plans, refused, secs);
    }
#endif
    for (int i = 0; i < MODEL_RECS; i++)   // what CUDA Graphs replay each step (core/spec/model_run.c)
        if (t.m.recs[i].rec)
            printf("  CUDA Graphs: the %s of batch %d replayed, %zu launches\n", t.m.recs[i].kind ? "backward" : "forward",
                   t.m.recs[i].n, t.m.recs[i].launches);
    if (switch_str(SW_PROFILE)) {
        t.m.prof = xcalloc(2 * (size_t)t.m.n_nodes, sizeof(double));
        for (int i = 0; i < steps; i++) step(&t, resident, n, S, targets, nt, steps + 2 + i, &lo, &err);
        print_profile(&t.m, n, steps, strcmp(switch_str(SW_PROFILE), "all") ? 15 : 2 * t.m.n_nodes);
        free(t.m.prof);
        t.m.prof = NULL;
    }
    trainer_free(&t);
    free(targets);
    return 0;
}

int main(int argc, char **argv) {
    printf("%-10s %4s %5s %5s %5s %8s  %8s  %8s %7s %8s %7s  %7s\n", "config", "size", "batch", "dev", "prec",
           "fwd1 s", "step s", "forward", "loss", "backward", "optim", "img/s");
    if (argc > 1) {
        if (argc < 5) { fprintf(stderr, "usage: bench/step CONFIG imgsz batch steps [device [precision]]\n"); return 2; }
        return bench(argv[1], atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argc > 5 ? argv[5] : "cpu",
                     argc > 6 ? argv[6] : "bf16");
    }
    return bench("cfg/s.ini", 256, 4, 2, "cpu", "fp32") || bench("cfg/t.ini", 320, 8, 3, "cpu", "fp32") ||
           bench("cfg/s.ini", 640, 4, 2, "cpu", "fp32");
}
