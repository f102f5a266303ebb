// test_step.c: the single most important test: one whole training step of gelan-s (forward, loss,
// backward) against the PyTorch fixture: the loss and its three items, and every parameter gradient.
#include "test/test.h"

#include "cfg/config.h"
#include "core/spec/loss.h"
#include "core/spec/model.h"
#include "io/safetensors.h"
#include "test/fixture.h"
#ifdef USE_CUDA
#include "gpu/loss.h"
#include "gpu/model_gpu.h"
#endif

typedef struct { int n_tensors, n_bad; double worst_ratio, worst_rel_l2; char worst[160]; } GradReport;

// Compare our gradient of parameter p with the fixture: whole (grad/NAME) or sampled
// (grad_idx/NAME, grad_val/NAME) plus the whole-tensor [sum, L2 norm, max abs] (grad_stats/NAME).
static double TOL = 1e-3;             // rtol per element, and atol as a fraction of the tensor's max
static double REL_L2 = 0;             // > 0: judge each gradient by ||ours - ref|| / ||ref|| <= REL_L2

static void compare_grad(const SafeTensors *st, const float *grad, const ParamInfo *p, GradReport *r) {
    char name[256];
    Err err;
    const float *g = grad + p->offset;
    double atol_scale = 0;
    int bad = 0;
    double ratio = 0, se = 0, sr = 0;     // squared error and squared reference of the compared values
    snprintf(name, sizeof name, "grad/%s", p->name);
    if (st_find(st, name)) {
        float *ref = xmalloc(p->n * sizeof(float));
        st_read_f32(st, name, ref, p->n, &err);
        for (size_t i = 0; i < p->n; i++) atol_scale = fmax(atol_scale, fabs(ref[i]));
        for (size_t i = 0; i < p->n; i++) {
            double e = fabs((double)g[i] - ref[i]), lim = TOL * atol_scale + TOL * fabs(ref[i]) + 1e-12;
            bad += !(e <= lim);
            ratio = fmax(ratio, e / lim);
            se += e * e; sr += (double)ref[i] * ref[i];
        }
        free(ref);
    } else {
        char ni[256], nv[256], ns[256];
        snprintf(ni, sizeof ni, "grad_idx/%s", p->name);
        snprintf(nv, sizeof nv, "grad_val/%s", p->name);
        snprintf(ns, sizeof ns, "grad_stats/%s", p->name);
        const StTensor *ti = st_find(st, ni);
        if (!ti) return;                                   // the fixture has no gradient (DFL)
        size_t k = st_numel(ti);
        float *idx = xmalloc(k * sizeof(float)), *val = xmalloc(k * sizeof(float)), stats[4];
        st_read_f32(st, ni, idx, k, &err);
        st_read_f32(st, nv, val, k, &err);
        st_read_f32(st, ns, stats, 4, &err);
        atol_scale = stats[2];
        for (size_t i = 0; i < k; i++) {
            size_t j = (size_t)idx[i];
            double e = fabs((double)g[j] - val[i]), lim = TOL * atol_scale + TOL * fabs(val[i]) + 1e-12;
            bad += !(e <= lim);
            ratio = fmax(ratio, e / lim);
            se += e * e; sr += (double)val[i] * val[i];
        }
        double sum = 0, sq = 0, mx = 0;
        for (size_t i = 0; i < p->n; i++) { sum += g[i]; sq += (double)g[i] * g[i]; mx = fmax(mx, fabs(g[i])); }
        double l2 = sqrt(sq);
        double e_l2 = fabs(l2 - stats[1]) / (TOL * stats[1] + 1e-12), e_mx = fabs(mx - stats[2]) / (TOL * stats[2] + 1e-12);
        // the sum cancels: per-element errors of rtol r bound its error by r*L1 <= r*sqrt(n)*L2; we ask
        // ten times less than that bound with r = 1e-3
        double e_sum = fabs(sum - stats[0]) / (0.1 * TOL * sqrt((double)p->n) * stats[1] + 1e-12);
        bad += e_l2 > 1 || e_mx > 1 || e_sum > 1;
        if (switch_str(SW_VERBOSE)) printf("    %s: samples %.2f, L2 %.2f, max %.2f, sum %.2f of tolerance\n", p->name, ratio, e_l2, e_mx, e_sum);
        ratio = fmax(ratio, fmax(e_l2, fmax(e_mx, e_sum)));
        free(idx); free(val);
    }
    double rel = sr > 0 ? sqrt(se / sr) : 0;
    r->worst_rel_l2 = fmax(r->worst_rel_l2, rel);
    if (REL_L2 > 0) bad = rel > REL_L2;   // reduced precision: judged by the relative L2 error alone
    r->n_tensors++;
    r->n_bad += bad > 0;
    if (ratio > r->worst_ratio) { r->worst_ratio = ratio; snprintf(r->worst, sizeof r->worst, "%s", p->name); }
    if (bad || switch_str(SW_VERBOSE)) printf("    %-56s %s (%.2f of tolerance)\n", p->name, bad ? "DIFFERS" : "ok", ratio);
}

// One step on the fixture: the CPU (gpu < 0) or GPU `gpu` at `prec` (0 fp32, 1 tf32, 2 bf16).
// Loss items to rtol `loss_rtol`, gradients per TOL.
static void fixture_step(int gpu, int prec, double loss_rtol) {
    const char *sh = shared_dir();
    if (!sh) SKIP("../shared is absent (set YT_SHARED)");
    char path[4200], jpath[4200];
    snprintf(path, sizeof path, "%s/fixtures/gelan_s_step.safetensors", sh);
    snprintf(jpath, sizeof jpath, "%s/fixtures/gelan_s_step.json", sh);
    if (access(path, R_OK) || access(jpath, R_OK)) SKIP("the fixture gelan_s_step is absent");
    static Config cfg;
    Err err;
    if (config_load("cfg/s.ini", 0, NULL, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    SafeTensors st;
    if (st_open(path, &st, &err)) { CHECK(0, "%s", err.msg); return; }
    const StTensor *im = st_find(&st, "input/images"), *tg = st_find(&st, "input/targets");
    int N = (int)im->shape[0], H = (int)im->shape[2], W = (int)im->shape[3], G = (int)tg->shape[0];
    Model m;
    if (model_build(&cfg, N, H, &m, &err)) { CHECK(0, "%s", err.msg); st_close(&st); return; }
    CHECK(model_load(&m, path, "param/", &err) == 0, "%s", err.msg);
#ifdef USE_CUDA
    Device dev;
    GpuLossWork *glw = NULL;
    if (gpu >= 0) {
        if (model_to_gpu(&m, &dev, gpu, NULL, (GpuPrecision)prec, &err)) { CHECK(0, "%s", err.msg); model_free(&m); st_close(&st); return; }
        glw = loss_work_new_gpu(&dev, N, 64, m.nc, 1344);
    }
#endif
    float *x = xmalloc((size_t)N * 3 * H * W * sizeof(float)), *targets = xmalloc((size_t)G * 6 * sizeof(float));
    st_read_f32(&st, "input/images", x, (size_t)N * 3 * H * W, &err);
    st_read_f32(&st, "input/targets", targets, (size_t)G * 6, &err);
    float *xh = nchw_to_nhwc(x, N, 3, H, W);

    double t0 = now_seconds();
    model_forward(&m, xh, N, H, W, 1);
    LossBatch lb = { .nc = m.nc, .img_h = H, .img_w = W, .targets = targets, .n_targets = G };
    Map grad[LOSS_LEVELS];
    for (int l = 0; l < LOSS_LEVELS; l++) { lb.head[l] = model_value(&m, m.head[l], N); grad[l] = model_grad(&m, m.head[l], N); }
    LossWork *lw = loss_work_new();
    LossOut out;
#ifdef USE_CUDA
    if (gpu >= 0) CHECK(loss_forward_backward_gpu(&dev, glw, &lb, grad, &out, &err) == 0, "%s", err.msg);
    else
#endif
    CHECK(loss_forward_backward(lw, &lb, grad, &out, &err) == 0, "%s", err.msg);
    double t1 = now_seconds();
    model_zero_grad(&m);
    model_backward(&m, N);
    float *gh = xmalloc(m.n_state * sizeof(float)), *sh_state = xmalloc(m.n_state * sizeof(float));
    m.be->dev.download(m.be_ctx, gh, m.grad, m.n_state);
    m.be->dev.download(m.be_ctx, sh_state, m.state, m.n_state);
    printf("    %s: forward + loss %.3f s, backward %.3f s (batch %d at %dx%d)\n", m.be->name, t1 - t0,
           now_seconds() - t1, N, H, W);

    double ref_total = json_number(jpath, "loss_total", 0);
    double ref_items[3] = { json_number(jpath, "loss_items_box_cls_dfl", 0), json_number(jpath, "loss_items_box_cls_dfl", 1),
                            json_number(jpath, "loss_items_box_cls_dfl", 2) };
    printf("    loss %.9g (ref %.9g); box %.9g (%.9g) cls %.9g (%.9g) dfl %.9g (%.9g)\n", out.total, ref_total,
           out.box, ref_items[0], out.cls, ref_items[1], out.dfl, ref_items[2]);
    CHECK(close_enough(out.total, ref_total, 0, loss_rtol), "loss_total");
    CHECK(close_enough(out.box, ref_items[0], 0, loss_rtol), "box");
    CHECK(close_enough(out.cls, ref_items[1], 0, loss_rtol), "cls");
    CHECK(close_enough(out.dfl, ref_items[2], 0, loss_rtol), "dfl");

    GradReport r = { 0 };
    for (int i = 0; i < m.n_params; i++)
        if (param_trainable(m.params[i].kind)) compare_grad(&st, gh, &m.params[i], &r);
    printf("    gradients: %d tensors compared, %d differ; worst %s at %.2f of tolerance (rtol %g); "
           "worst relative L2 error %.3g\n", r.n_tensors, r.n_bad, r.worst, r.worst_ratio, TOL, r.worst_rel_l2);
    CHECK(r.n_tensors == 464 + 211, "compared %d gradient tensors, the fixture has 675", r.n_tensors);
    CHECK(r.n_bad == 0, "%d gradient tensors differ from the fixture", r.n_bad);
    int bn_bad = 0, bn_n = 0;                          // BN running statistics after the forward
    for (int i = 0; i < m.n_params; i++) {
        const ParamInfo *p = &m.params[i];
        if (p->kind != PK_RUNNING_MEAN && p->kind != PK_RUNNING_VAR) continue;
        char name[256];
        snprintf(name, sizeof name, "bn_after/%s", p->name);
        float *ref = xmalloc(p->n * sizeof(float));
        if (!st_read_f32(&st, name, ref, p->n, &err)) {
            bn_n++;
            for (size_t j = 0; j < p->n; j++)
                if (!(fabs(sh_state[p->offset + j] - ref[j]) <= 1e-6 + 0.1 * TOL * fabs(ref[j]))) { bn_bad++; break; }
        }
        free(ref);
    }
    CHECK(bn_n == 442 && (bn_bad == 0 || REL_L2 > 1), "%d of %d BN statistics tensors differ", bn_bad, bn_n);
#ifdef USE_CUDA
    if (glw) loss_work_free_gpu(glw);
#endif
    loss_work_free(lw);
    free(x); free(xh); free(targets); free(gh); free(sh_state);
    model_free(&m);
#ifdef USE_CUDA
    if (gpu >= 0) device_free(&dev);
#endif
    st_close(&st);
}

// fp32: rtol 2e-3. Here the CPU lands within 0.84 of 1e-3; OpenBLAS on another CPU and cuBLAS sum in
// other orders and put a few tensors of layer 21 at up to 1.25 of 1e-3 (measured on the H200 machine).
static void test_fixture_step(void) { TOL = 2e-3; fixture_step(-1, 0, 1e-5); }

#ifdef USE_CUDA
static int have_gpu(void) { GpuInfo g[1]; return gpu_list(g, 1) > 0; }
#endif

// The same step on the GPU in fp32 (TF32 off), as tight as on the CPU.
static void test_fixture_step_gpu_fp32(void) {
#ifdef USE_CUDA
    if (!have_gpu()) SKIP("no GPU");
    TOL = 2e-3;
    fixture_step(0, 0, 1e-5);
#else
    SKIP("no CUDA in this build");
#endif
}

// Reduced precision: GEMM inputs rounded to tf32 (10-bit mantissa) or bf16 (7-bit) at every one of
// ~100 convolutions. This fixture step (batch 4, maps down to 8x8, batch-statistics BN) amplifies
// rounding enormously in backward: even the fp32 GPU step's 1e-7 per-op differences become up to 6%
// relative L2 error in some gradient tensors (measured), so tf32 and bf16 gradients are not
// comparable element by element here. This test checks the loss items (tf32 to 1%, bf16 to 2%:
// measured 0.5% and 1.3%); that reduced-precision steps train like fp32 ones is test_gpu_train's.
static void test_fixture_step_gpu_tf32(void) {
#ifdef USE_CUDA
    if (!have_gpu()) SKIP("no GPU");
    TOL = 1e-2; REL_L2 = 1e9;             // gradients reported, not judged
    fixture_step(0, 1, 1e-2);
    REL_L2 = 0;
#else
    SKIP("no CUDA in this build");
#endif
}

static void test_fixture_step_gpu_bf16(void) {
#ifdef USE_CUDA
    if (!have_gpu()) SKIP("no GPU");
    TOL = 5e-2; REL_L2 = 1e9;
    fixture_step(0, 2, 2e-2);
    REL_L2 = 0;
#else
    SKIP("no CUDA in this build");
#endif
}

int main(void) {
    RUN(test_fixture_step);
    RUN(test_fixture_step_gpu_fp32);
    RUN(test_fixture_step_gpu_tf32);
    RUN(test_fixture_step_gpu_bf16);
    return test_summary();
}
