// test_freeze26.c: freeze= for YOLO26 (Ultralytics' freeze: the frozen layers' BatchNorm in evaluation
// mode during training, core/spec/transfer.h freeze_apply). The evaluation-mode BN of the training path:
// a finite-difference check of its op (core/spec/bn.c bn_frozen_*) and of the whole model's gradients with
// every BN in evaluation mode (YOLO26-n), a frozen layer's training output equal to its
// evaluation output with its running statistics untouched, and the GPU's training step against the CPU's
// with frozen layers (skips without CUDA or a GPU).
// Legend: N batch, H,W size, C channels, M pixels.
#include "test/test.h"

#include "cfg/config.h"
#include "core/spec/backend.h"
#include "core/spec/model.h"
#include "core/spec/transfer.h"
#ifdef USE_CUDA
#include "gpu/model_gpu.h"
#endif

enum { N = 2, S = 64 };

// ---- the op ------------------------------------------------------------------------------------

// L = Σ r·u, u = bn_apply(z) with the frozen statistics (the training forward of a frozen unit)
static double op_loss(Map z, const float *g, const float *b, const float *mean, const float *invstd, Map u,
                      const float *r) {
    bn_apply_cpu(z, g, b, mean, invstd, u);
    double L = 0;
    for (size_t i = 0; i < map_floats(u); i++) L += (double)r[i] * u.data[i];
    return L;
}

// Central difference of op_loss in *v (h = 1e-2) against the analytic value `ana`; counts the misses.
static int fd_check(float *v, double ana, Map z, const float *g, const float *b, const float *mean,
                    const float *invstd, Map u, const float *r, const char *what, int j) {
    const float h = 1e-2f, keep = *v;
    *v = keep + h;
    double lp = op_loss(z, g, b, mean, invstd, u, r);
    *v = keep - h;
    double lm = op_loss(z, g, b, mean, invstd, u, r);
    *v = keep;
    double num = (lp - lm) / (2.0 * h);
    int bad = !(fabs(ana - num) <= 1e-3 + 1e-2 * fmax(fabs(ana), fabs(num)));
    if (bad) printf("    %s[%d]: analytic %.6g, numeric %.6g\n", what, j, ana, num);
    return bad;
}

// bn_frozen_stats + bn_apply forward, bn_frozen_backward: dz, dgamma, dbeta against central differences
// (N=2, C=3, H=W=5). A backward with bn_backward's batch-mean terms fails the dz check.
static void test_frozen_bn_op_gradcheck(void) {
    enum { C = 3, H = 5, W = 5, M = N * H * W };
    Rng rng = rng_for(26, 19, 0);
    float z[M * C], u[M * C], r[M * C], dz[M * C], g[C], b[C], rm[C], rv[C], mean[C], invstd[C];
    float dg[C] = { 0 }, db[C] = { 0 };
    for (int i = 0; i < M * C; i++) z[i] = (float)rng_uniform(&rng, -1, 1), r[i] = (float)rng_uniform(&rng, -1, 1);
    for (int c = 0; c < C; c++) {
        g[c] = (float)rng_uniform(&rng, 0.5, 1.5); b[c] = (float)rng_uniform(&rng, -0.5, 0.5);
        rm[c] = (float)rng_uniform(&rng, -0.3, 0.3); rv[c] = (float)rng_uniform(&rng, 0.2, 2.0);
    }
    float rm0[C], rv0[C];
    memcpy(rm0, rm, sizeof rm); memcpy(rv0, rv, sizeof rv);
    bn_frozen_stats_cpu(C, rm, rv, 1e-3f, mean, invstd);
    CHECK(!memcmp(rm, rm0, sizeof rm) && !memcmp(rv, rv0, sizeof rv), "running statistics changed");
    CHECK(mean[1] == rm[1] && fabs(invstd[1] - 1 / sqrt(rv[1] + 1e-3)) < 1e-6, "statistics %g %g", mean[1], invstd[1]);
    Map zm = map_make(z, N, H, W, C), um = map_make(u, N, H, W, C);
    bn_frozen_backward_cpu(zm, g, mean, invstd, map_make(r, N, H, W, C), map_make(dz, N, H, W, C), dg, db);
    int bad = 0;
    for (int j = 0; j < M * C; j += 7) bad += fd_check(&z[j], dz[j], zm, g, b, mean, invstd, um, r, "dz", j);
    for (int c = 0; c < C; c++) {
        bad += fd_check(&g[c], dg[c], zm, g, b, mean, invstd, um, r, "dgamma", c);
        bad += fd_check(&b[c], db[c], zm, g, b, mean, invstd, um, r, "dbeta", c);
    }
    CHECK(bad == 0, "%d gradients differ from central differences", bad);
    float dz2[M * C];   // dz may alias du
    memcpy(dz2, r, sizeof r);
    Map dm = map_make(dz2, N, H, W, C);
    bn_frozen_backward_cpu(zm, g, mean, invstd, dm, dm, NULL, NULL);
    CHECK(!memcmp(dz2, dz, sizeof dz), "dz in place differs");
}

// ---- the model ---------------------------------------------------------------------------------

// YOLO26-n (nc 2) at S x S for N images: fresh weights, running statistics moved off 0/1 so evaluation
// mode differs from identity, layers `frozen` (-1 ends the list) frozen as freeze= would.
static int build(Model *m, const int *frozen_layers) {
    static Config cfg;
    Err err;
    char *ov[] = { "nc=2", "imgsz=64" };
    if (config_load("cfg/yolo26n.ini", 2, ov, &cfg, &err) || model_build(&cfg, N, S, m, &err)) {
        printf("    %s\n", err.msg);
        return -1;
    }
    model_init_weights(m, 5);
    Rng r = rng_for(26, 19, 1);
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        for (size_t j = 0; j < p->n; j++) {
            if (p->kind == PK_RUNNING_MEAN) m->state[p->offset + j] = (float)rng_uniform(&r, -0.3, 0.3);
            if (p->kind == PK_RUNNING_VAR) m->state[p->offset + j] = (float)rng_uniform(&r, 0.3, 2.0);
        }
    }
    unsigned char frozen[CFG_MAX_LAYERS] = { 0 };
    for (int k = 0; frozen_layers[k] >= 0; k++) frozen[frozen_layers[k]] = 1;
    freeze_apply(m, frozen);
    return 0;
}

static float *images(void) {
    float *x = xmalloc(sizeof(float) * N * S * S * 3);
    Rng r = rng_for(26, 19, 2);
    for (int i = 0; i < N * S * S * 3; i++) x[i] = (float)rng_uniform(&r, 0, 1);
    return x;
}

// The head maps both branches train (m->aux: one-to-many, m->head: one-to-one), in order.
static int head_maps(const Model *m, Map *out) {
    int n = 0;
    for (int l = 0; l < m->n_levels; l++) out[n++] = model_value(m, m->aux[l], N);
    for (int l = 0; l < m->n_levels; l++) out[n++] = model_value(m, m->head[l], N);
    return n;
}

// The fixed weights r of L = Σ r·maps, per head map element (N,H,W,C order), in [0, 1] on the
// one-to-many maps (their mean carries back as a per-channel mean of du, which a training-mode BN
// backward would subtract: with r in [-1, 1] that term is too small to see) and 0 on the one-to-one
// ones: those read detached features, so the backbone's gradient leaves out the way they depend on
// it, and a central difference would not.
static float *loss_weights(const Model *m, size_t *count) {
    Map h[8];
    int n = head_maps(m, h);
    size_t total = 0, o2m = 0;
    for (int i = 0; i < n; i++) total += map_floats(h[i]), o2m += i < m->n_levels ? map_floats(h[i]) : 0;
    float *r = xcalloc(total, sizeof(float));
    Rng rng = rng_for(26, 19, 3);
    for (size_t i = 0; i < o2m; i++) r[i] = (float)rng_uniform(&rng, 0, 1);
    *count = total;
    return r;
}

// Training forward; L = Σ r·maps in double (CPU model)
static double model_loss(Model *m, const float *x, const float *r) {
    model_forward(m, x, N, S, S, 1);
    Map h[8];
    int n = head_maps(m, h);
    double L = 0;
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < N; b++)
            for (int y = 0; y < h[i].H; y++)
                for (int xx = 0; xx < h[i].W; xx++)
                    for (int c = 0; c < h[i].C; c++) L += (double)r[k++] * map_at(h[i], b, y, xx)[c];
    return L;
}

// dL/d maps = r written into the head maps' gradients (host copies, uploaded), then backward.
static void model_grads(Model *m, const float *r) {
    Map h[8];
    int n = 0;
    for (int l = 0; l < m->n_levels; l++) h[n++] = model_grad(m, m->aux[l], N);
    for (int l = 0; l < m->n_levels; l++) h[n++] = model_grad(m, m->head[l], N);
    size_t k = 0;
    for (int i = 0; i < n; i++) {   // the head maps own their buffers: contiguous (N,H,W,C)
        m->be->dev.upload(m->be_ctx, h[i].data, r + k, map_floats(h[i]));
        k += map_floats(h[i]);
    }
    model_zero_grad(m);
    model_backward(m, N);
}

static int param_index(const Model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}

// Gradients of YOLO26-n with every layer's BN in evaluation mode (freeze_apply on all 24 layers; freeze=
// itself refuses that, nothing would train, but the gradients are still computed) against central
// differences (h = 1e-2) of L = Σ r·(head maps), for conv and BN weights from the stem to the head's
// depthwise units: the backward of the evaluation-mode training path (with bn_backward in its place,
// 7 of 76 miss). With some layers in training
// mode the batch statistics of 2x2 maps make L too curved for float central differences (a few
// percent apart either way); test_gpu_matches_cpu covers that mix.
static void test_model_gradcheck_eval_bn(void) {
    int all[CFG_MAX_LAYERS + 1], n = 0;
    for (; n < 24; n++) all[n] = n;
    all[n] = -1;
    Model m;
    if (build(&m, all)) { CHECK(0, "build"); return; }
    CHECK(m.nodes[0].cv.bn_frozen && m.nodes[m.n_nodes - 1].layer == 23, "freeze_apply left layer 0 in training mode");
    float *x = images();
    size_t nr;
    float *r = loss_weights(&m, &nr);
    model_loss(&m, x, r);
    model_grads(&m, r);
    float *grad = xmalloc(m.n_state * sizeof(float));   // forwards below leave m.grad alone; kept apart anyway
    memcpy(grad, m.grad, m.n_state * sizeof(float));
    static const char *names[] = { "model.0.conv.weight", "model.1.conv.weight", "model.1.bn.weight",
                                   "model.1.bn.bias", "model.2.cv1.conv.weight", "model.2.m.0.cv2.bn.weight",
                                   "model.3.conv.weight", "model.9.cv2.conv.weight", "model.23.cv3.0.1.1.bn.weight",
                                   "model.23.cv3.0.0.0.conv.weight" };
    int bad = 0, checked = 0;
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        int pi = param_index(&m, names[k]);
        if (pi < 0) { CHECK(0, "no parameter %s", names[k]); continue; }
        const ParamInfo *p = &m.params[pi];
        for (size_t j = 0; j < p->n; j += p->n / 8 + 1) {
            float *w = m.state + p->offset + j, keep = *w;
            const float h = 1e-2f;
            double ana = grad[p->offset + j];
            *w = keep + h;
            double lp = model_loss(&m, x, r);
            *w = keep - h;
            double lm = model_loss(&m, x, r);
            *w = keep;
            double num = (lp - lm) / (2.0 * h);
            int miss = !(fabs(ana - num) <= 1e-3 + 1e-2 * fmax(fabs(ana), fabs(num)));
            if (miss) printf("    %s[%zu]: analytic %.6g, numeric %.6g\n", p->name, j, ana, num);
            bad += miss;
            checked++;
        }
    }
    CHECK(bad == 0, "%d of %d gradients differ from central differences", bad, checked);
    free(x); free(r); free(grad);
    model_free(&m);
}

// A frozen layer (layer 0) gives in a training forward what an evaluation forward gives, and its
// running statistics stay; an unfrozen layer's move.
static void test_frozen_layer_is_eval_mode(void) {
    Model m;
    if (build(&m, (const int[]){ 0, -1 })) { CHECK(0, "build"); return; }
    float *x = images();
    Map y = model_value(&m, m.nodes[0].out, N);
    float *ev = xmalloc(map_floats(y) * sizeof(float)), *st0 = xmalloc(m.n_state * sizeof(float));
    model_forward(&m, x, N, S, S, 0);
    memcpy(ev, y.data, map_floats(y) * sizeof(float));
    memcpy(st0, m.state, m.n_state * sizeof(float));
    model_forward(&m, x, N, S, S, 1);
    double worst = 0;
    for (size_t i = 0; i < map_floats(y); i++) worst = fmax(worst, fabs(y.data[i] - ev[i]) / (1e-3 + fabs(ev[i])));
    CHECK(worst < 1e-5, "layer 0 in training differs from evaluation by %g (relative)", worst);
    int frozen_moved = 0, free_moved = 0;
    for (int i = 0; i < m.n_params; i++) {
        const ParamInfo *p = &m.params[i];
        if (p->kind != PK_RUNNING_MEAN && p->kind != PK_RUNNING_VAR) continue;
        int moved = memcmp(st0 + p->offset, m.state + p->offset, p->n * sizeof(float)) != 0;
        if (!strncmp(p->name, "model.0.", 8)) frozen_moved += moved;
        else if (!strncmp(p->name, "model.1.", 8)) free_moved += moved;
    }
    CHECK(frozen_moved == 0 && free_moved == 2, "running statistics moved: frozen layer %d (want 0), layer 1 %d (want 2)",
          frozen_moved, free_moved);
    free(x); free(ev); free(st0);
    model_free(&m);
}

// ---- the GPU -----------------------------------------------------------------------------------

// One training forward and backward with layers 1, 2 and 23 (the head, depthwise units included)
// frozen, on the GPU in fp32 (TF32 off) and on the CPU from the same weights: head maps, every
// parameter gradient and the BN running statistics. Tolerance as test_yolo26's GPU step (2e-3 of the
// tensor's largest value plus 2e-3 relative: cuDNN and OpenBLAS sum in other orders through 23 layers),
// with a floor of 1e-6 of the largest gradient of all: a few BN biases (the attention's pe and proj,
// the PSA ffn's second conv) have a gradient that is zero up to rounding (1e-8 here, against 69 for the
// largest), as the training-mode BN after them removes any shift of their channels, so their own
// largest value is rounding noise.
static void test_gpu_matches_cpu(void) {
#ifndef USE_CUDA
    SKIP("no CUDA in this build");
#else
    GpuInfo info[1];
    if (gpu_list(info, 1) < 1) SKIP("no GPU");
    const int frozen[] = { 1, 2, 23, -1 };
    Model c, g;
    Device dev;
    Err err;
    if (build(&c, frozen) || build(&g, frozen)) { CHECK(0, "build"); return; }
    if (model_to_gpu(&g, &dev, 0, NULL, GPU_FP32, &err)) { CHECK(0, "%s", err.msg); model_free(&c); model_free(&g); return; }
    float *x = images();
    size_t nr;
    float *r = loss_weights(&c, &nr);
    Model *ms[2] = { &c, &g };
    float *grad[2], *state[2], *maps[2];
    for (int k = 0; k < 2; k++) {
        model_forward(ms[k], x, N, S, S, 1);
        Map h[8];
        int n = head_maps(ms[k], h);
        maps[k] = xmalloc(nr * sizeof(float));
        for (int i = 0, at = 0; i < n; at += (int)map_floats(h[i]), i++)
            ms[k]->be->dev.download(ms[k]->be_ctx, maps[k] + at, h[i].data, map_floats(h[i]));
        model_grads(ms[k], r);
        grad[k] = xmalloc(c.n_state * sizeof(float));
        state[k] = xmalloc(c.n_state * sizeof(float));
        ms[k]->be->dev.download(ms[k]->be_ctx, grad[k], ms[k]->grad, c.n_state);
        ms[k]->be->dev.download(ms[k]->be_ctx, state[k], ms[k]->state, c.n_state);
    }
    double mx = 0, worst = 0;
    for (size_t i = 0; i < nr; i++) mx = fmax(mx, fabs(maps[0][i]));
    for (size_t i = 0; i < nr; i++) worst = fmax(worst, fabs(maps[1][i] - maps[0][i]) / (2e-4 * mx + 2e-4 * fabs(maps[0][i])));
    CHECK(worst <= 1, "head maps: GPU and CPU differ by %.3g of the tolerance", worst);
    int bad = 0, tensors = 0;
    double floor = 0;
    for (int i = 0; i < c.n_params; i++)
        if (param_trainable(c.params[i].kind))
            for (size_t j = 0; j < c.params[i].n; j++) floor = fmax(floor, 1e-6 * fabs(grad[0][c.params[i].offset + j]));
    for (int i = 0; i < c.n_params; i++) {
        const ParamInfo *p = &c.params[i];
        int grads = param_trainable(p->kind), stats = p->kind == PK_RUNNING_MEAN || p->kind == PK_RUNNING_VAR;
        if (!grads && !stats) continue;
        const float *a = (grads ? grad[0] : state[0]) + p->offset, *b = (grads ? grad[1] : state[1]) + p->offset;
        double top = 0, ratio = 0;
        for (size_t j = 0; j < p->n; j++) top = fmax(top, fabs(a[j]));
        double atol = fmax(2e-3 * top, grads ? floor : 0);
        for (size_t j = 0; j < p->n; j++) ratio = fmax(ratio, fabs(b[j] - a[j]) / (atol + 2e-3 * fabs(a[j]) + 1e-30));
        if (ratio > 1 && bad++ < 5) printf("    %s %s: %.3g of the tolerance\n", p->name, grads ? "gradient" : "", ratio);
        tensors++;
    }
    CHECK(bad == 0, "%d of %d tensors (gradients, BN statistics) differ between GPU and CPU", bad, tensors);
    for (int i = 0; i < c.n_params; i++)   // the frozen layers' statistics stay bit for bit on both
        if ((c.params[i].kind == PK_RUNNING_VAR) && c.params[i].frozen)
            CHECK(!memcmp(state[0] + c.params[i].offset, state[1] + c.params[i].offset, c.params[i].n * sizeof(float)),
                  "%s: frozen statistics differ", c.params[i].name);
    for (int k = 0; k < 2; k++) { free(grad[k]); free(state[k]); free(maps[k]); }
    free(x); free(r);
    model_free(&c); model_free(&g);
    device_free(&dev);
#endif
}

int main(void) {
    RUN(test_frozen_bn_op_gradcheck);
    RUN(test_model_gradcheck_eval_bn);
    RUN(test_frozen_layer_is_eval_mode);
    RUN(test_gpu_matches_cpu);
    return test_summary();
}
