// test_yolo26.c: the YOLO26-s graph (cfg/yolo26s.ini) against the PyTorch fixture yolo26_s_step: the
// parameter count and names, one training-mode forward (all four head outputs and the BN running
// statistics), the end-to-end loss (core/spec/loss26) and every parameter gradient after backward.
// Legend: N batch, C channels, H,W map size, A anchors (P3, P4, P5); fixture outputs are (N, C, A).
#include "test/test.h"

#include "cfg/config.h"
#include "core/spec/loss26.h"
#include "core/spec/model.h"
#include "io/safetensors.h"
#include "test/fixture.h"
#ifdef USE_CUDA
#include "gpu/model_gpu.h"
#endif

static double TOL = 2e-3;   // gradients: rtol per element, and atol as a fraction of the tensor's largest value

// The largest |gradient| of parameter `name` in the fixture (whole or grad_stats), 0 when absent.
static double ref_max(const SafeTensors *st, const char *name) {
    char full[256];
    Err err;
    snprintf(full, sizeof full, "grad_stats/%s", name);
    float stats[4];
    if (st_find(st, full)) return st_read_f32(st, full, stats, 4, &err) ? 0 : stats[2];
    snprintf(full, sizeof full, "grad/%s", name);
    const StTensor *t = st_find(st, full);
    if (!t) return 0;
    size_t n = st_numel(t);
    float *g = xmalloc(n * sizeof(float));
    double mx = 0;
    if (!st_read_f32(st, full, g, n, &err))
        for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(g[i]));
    free(g);
    return mx;
}

// A BN without SiLU whose output reaches the loss only through other batch-normalised convs (SPPF's
// cv1, the attention's pe and proj, ffn.1) has a beta gradient of exactly 0: BN removes a per-channel
// shift. The float64 fixture holds ~1e-17 there, we hold float32 rounding; those tensors must be 0 to
// within 1e-5 of the same BN's gamma gradient. Returns that scale, or 0 for an ordinary tensor.
static double zero_grad_scale(const SafeTensors *st, const ParamInfo *p) {
    size_t len = strlen(p->name);
    if (len < 8 || strcmp(p->name + len - 8, ".bn.bias") || ref_max(st, p->name) > 1e-12) return 0;
    char w[160];
    snprintf(w, sizeof w, "%.*s.bn.weight", (int)(len - 8), p->name);
    return 1e-5 * ref_max(st, w);
}

// Our gradient of parameter p against grad/NAME (whole) or grad_idx/grad_val/grad_stats (sampled plus
// the whole tensor's sum, L2 norm and max), as test_step.c compares gelan-s.
static void compare_grad(const SafeTensors *st, const float *grad, const ParamInfo *p, Report *r) {
    char name[256], ni[256], nv[256], ns[256];
    Err err;
    const float *g = grad + p->offset;
    double ratio = 0;
    int bad = 0;
    snprintf(name, sizeof name, "grad/%s", p->name);
    snprintf(ni, sizeof ni, "grad_idx/%s", p->name);
    snprintf(nv, sizeof nv, "grad_val/%s", p->name);
    snprintf(ns, sizeof ns, "grad_stats/%s", p->name);
    double zero = zero_grad_scale(st, p);
    if (zero > 0) {
        for (size_t i = 0; i < p->n; i++) ratio = fmax(ratio, fabs(g[i]) / zero);
        bad = ratio > 1;
    } else if (st_find(st, name)) {
        float *ref = xmalloc(p->n * sizeof(float));
        st_read_f32(st, name, ref, p->n, &err);
        double scale = 0;
        for (size_t i = 0; i < p->n; i++) scale = fmax(scale, fabs(ref[i]));
        for (size_t i = 0; i < p->n; i++) {
            double e = fabs((double)g[i] - ref[i]), lim = TOL * scale + TOL * fabs(ref[i]) + 1e-12;
            bad += !(e <= lim);
            ratio = fmax(ratio, e / lim);
        }
        free(ref);
    } else if (st_find(st, ni)) {
        size_t k = st_numel(st_find(st, ni));
        float *idx = xmalloc(k * sizeof(float)), *val = xmalloc(k * sizeof(float)), stats[4];
        st_read_f32(st, ni, idx, k, &err);
        st_read_f32(st, nv, val, k, &err);
        st_read_f32(st, ns, stats, 4, &err);
        for (size_t i = 0; i < k; i++) {
            double e = fabs((double)g[(size_t)idx[i]] - val[i]), lim = TOL * stats[2] + TOL * fabs(val[i]) + 1e-12;
            bad += !(e <= lim);
            ratio = fmax(ratio, e / lim);
        }
        double sum = 0, sq = 0, mx = 0;
        for (size_t i = 0; i < p->n; i++) { sum += g[i]; sq += (double)g[i] * g[i]; mx = fmax(mx, fabs(g[i])); }
        double e_l2 = fabs(sqrt(sq) - stats[1]) / (TOL * stats[1] + 1e-12);
        double e_mx = fabs(mx - stats[2]) / (TOL * stats[2] + 1e-12);
        // the sum cancels: ask a tenth of the bound rtol * sqrt(n) * L2 that per-element errors allow
        double e_sum = fabs(sum - stats[0]) / (0.1 * TOL * sqrt((double)p->n) * stats[1] + 1e-12);
        bad += e_l2 > 1 || e_mx > 1 || e_sum > 1;
        ratio = fmax(ratio, fmax(e_l2, fmax(e_mx, e_sum)));
        free(idx); free(val);
    } else {
        CHECK(0, "the fixture has no gradient of %s", p->name);
        return;
    }
    report_add(r, p->name, ratio, bad);
}

// One branch's head maps (host copies, levels P3..P5) against output/<branch>/boxes and /scores.
static void compare_outputs(const SafeTensors *st, const Map *maps, int nl, const char *branch, double rtol,
                            Report *r) {
    static const char *part[2] = { "boxes", "scores" };
    int C0[2] = { 0, 4 }, Cn[2] = { 4, maps[0].C - 4 }, N = maps[0].N, A = 0;
    for (int l = 0; l < nl; l++) A += maps[l].H * maps[l].W;
    for (int k = 0; k < 2; k++) {
        char name[96];
        Err err;
        snprintf(name, sizeof name, "output/%s/%s", branch, part[k]);
        size_t n = (size_t)N * Cn[k] * A;
        const StTensor *t = st_find(st, name);
        if (!t || st_numel(t) != n) { CHECK(0, "%s: missing or not %zu values", name, n); continue; }
        float *ref = xmalloc(n * sizeof(float));
        st_read_f32(st, name, ref, n, &err);
        double scale = 0, ratio = 0;
        int bad = 0;
        for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
        for (int b = 0; b < N; b++)
            for (int c = 0; c < Cn[k]; c++)
                for (int l = 0, a = 0; l < nl; a += maps[l].H * maps[l].W, l++)
                    for (int y = 0; y < maps[l].H; y++)
                        for (int x = 0; x < maps[l].W; x++) {
                            double rv = ref[((size_t)b * Cn[k] + c) * A + a + y * maps[l].W + x];
                            double got = map_at(maps[l], b, y, x)[C0[k] + c];
                            double e = fabs(got - rv), lim = rtol * scale + rtol * fabs(rv) + 1e-12;
                            bad += !(e <= lim);
                            ratio = fmax(ratio, e / lim);
                        }
        free(ref);
        report_add(r, name, ratio, bad);
    }
}

// Host copies of the head maps: maps[br][l] (N,H,W,4+nc) of branch br (L26_O2M: m->aux, L26_O2O:
// m->head), and as many gradient maps; the loss reads and writes these, the model's memory may be a GPU's.
typedef struct { Map maps[L26_BRANCHES][L26_LEVELS], grads[L26_BRANCHES][L26_LEVELS]; } HostHeads;

static int head_value(const Model *m, int br, int l) { return br == L26_O2M ? m->aux[l] : m->head[l]; }

static void heads_download(const Model *m, int N, HostHeads *h) {
    for (int br = 0; br < L26_BRANCHES; br++)
        for (int l = 0; l < L26_LEVELS; l++) {
            Map v = model_value(m, head_value(m, br, l), N);
            h->maps[br][l] = map_make(xmalloc(map_floats(v) * sizeof(float)), N, v.H, v.W, v.C);
            h->grads[br][l] = map_make(xcalloc(map_floats(v), sizeof(float)), N, v.H, v.W, v.C);
            m->be->dev.download(m->be_ctx, h->maps[br][l].data, v.data, map_floats(v));   // owned: contiguous
        }
}

static void heads_upload_grads(const Model *m, int N, const HostHeads *h) {
    for (int br = 0; br < L26_BRANCHES; br++)
        for (int l = 0; l < L26_LEVELS; l++) {
            Map g = model_grad(m, head_value(m, br, l), N);
            m->be->dev.upload(m->be_ctx, g.data, h->grads[br][l].data, map_floats(g));
        }
}

static void heads_free(HostHeads *h) {
    for (int br = 0; br < L26_BRANCHES; br++)
        for (int l = 0; l < L26_LEVELS; l++) { free(h->maps[br][l].data); free(h->grads[br][l].data); }
}

// The loss of the epoch-0-of-100 weights on the host maps; d loss / d maps into h->grads.
static int run_loss(const Inputs *in, int nc, HostHeads *h, Loss26Out *out, Err *err) {
    Loss26Batch b = { .nc = nc, .img_h = in->H, .img_w = in->W, .targets = in->targets, .n_targets = in->G };
    Head26 g[L26_BRANCHES];
    const Head26 *gp[L26_BRANCHES] = { &g[0], &g[1] };
    for (int br = 0; br < L26_BRANCHES; br++)
        for (int l = 0; l < L26_LEVELS; l++) {
            b.head[br].box[l] = map_slice(h->maps[br][l], 0, 4);
            b.head[br].cls[l] = map_slice(h->maps[br][l], 4, nc);
            g[br].box[l] = map_slice(h->grads[br][l], 0, 4);
            g[br].cls[l] = map_slice(h->grads[br][l], 4, nc);
        }
    Loss26Weights wt = loss26_weights(0, 100);
    Loss26Work *w = loss26_work_new();
    int rc = loss26_forward_backward(w, &b, &wt, gp, out, err);
    loss26_work_free(w);
    return rc;
}

static void check_loss(const char *jpath, const Loss26Out *out, int N, double rtol) {
    static const char *key[L26_BRANCHES] = { "one2many_box_cls_l1_times_batch", "one2one_box_cls_l1_times_batch" };
    double ref_total = json_number(jpath, "loss_total", 0);
    printf("    loss %.9g (ref %.9g)\n", out->total, ref_total);
    CHECK(close_enough(out->total, ref_total, 0, rtol), "loss_total %.9g, the fixture's %.9g", out->total, ref_total);
    for (int br = 0; br < L26_BRANCHES; br++) {
        const Loss26Terms *t = &out->br[br];
        double got[3] = { t->box * N, t->cls * N, t->l1 * N };
        for (int i = 0; i < 3; i++) {
            double ref = json_number(jpath, key[br], i);
            printf("    %s[%d] %.9g (ref %.9g)\n", key[br], i, got[i], ref);
            CHECK(close_enough(got[i], ref, 0, rtol), "%s[%d]", key[br], i);
        }
        CHECK(t->n_fg > 0, "branch %d assigned no anchor", br);
    }
}

// The parameter count and names: the fixture's state dict, no more, no less (model_load checks both).
static void test_params(void) {
    static Config cfg;
    Err err;
    Model m;
    if (config_load("cfg/yolo26s.ini", 0, NULL, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    if (model_build(&cfg, 1, 640, &m, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(model_count_params(&m) == 10009784, "%zu parameters; YOLO26-s has 10,009,784", model_count_params(&m));
    CHECK(m.end2end && m.n_levels == 3 && m.n_aux == 3, "end-to-end head with 3 levels per branch");
    int hw = 0, train_only = 0, before_detach = 0, detach = 0;
    for (int l = 0; l < m.n_levels; l++) hw += m.vh[m.head[l]] * m.vw[m.head[l]];
    for (int i = 0; i < m.n_nodes; i++) {      // evaluation skips exactly the one-to-many branch
        const Node *nd = &m.nodes[i];
        detach += nd->op == OP_DETACH;
        train_only += nd->train_only;
        before_detach += nd->train_only && nd->layer == 23 && !detach;
    }
    CHECK(detach == 3 && train_only == 3 * 8 && before_detach == train_only,
          "%d nodes for training only, %d of them in the one-to-many branch; 3 levels x 8 expected", train_only,
          before_detach);
    CHECK(hw == 8400 && m.strides[0] == 8 && m.strides[2] == 32, "%d anchors at 640; strides 8, 16, 32", hw);
    const char *sh = shared_dir();
    char path[4200];
    if (sh) snprintf(path, sizeof path, "%s/fixtures/yolo26_s_step.safetensors", sh);
    if (sh && !access(path, R_OK)) CHECK(model_load(&m, path, "param/", &err) == 0, "%s", err.msg);
    else printf("    the names against the fixture's: skipped (%s)\n", sh ? "its file is absent" : "../shared is absent");
    model_free(&m);
}

// cfg/yolo26s.ini with the row of layer `row`'s index replaced by `row`, written into dir; returns the path.
static const char *ini_with_row(const char *dir, const char *row, char *path, size_t size) {
    snprintf(path, size, "%s/y26.ini", dir);
    FILE *in = fopen("cfg/yolo26s.ini", "r"), *out = fopen(path, "w");
    char line[1100], idx[16];
    snprintf(idx, sizeof idx, "%.*s= ", (int)(strchr(row, '=') - row), row);
    while (in && out && fgets(line, sizeof line, in)) fputs(strncmp(line, idx, strlen(idx)) ? line : row, out);
    if (in) fclose(in);
    if (out) fclose(out);
    return path;
}

// Building refuses what the graph cannot do, naming the row.
static void test_config_errors(void) {
    static const char *bad[][2] = {
        { "23 = [16, 19, 22], 1, Detect, [nc]\n", "end-to-end" },
        { "10 = -1, 2, C2PSA, [512]\n", "C2PSA keeps its channels" },
        { "2 = -1, 2, C3k2, [256, 2, 0.25]\n", "True or False" },
    };
    const char *dir = test_tmpdir("yolo26");
    for (int i = 0; i < 3; i++) {
        static Config cfg;
        char path[4200];
        Err err;
        if (config_load(ini_with_row(dir, bad[i][0], path, sizeof path), 0, NULL, &cfg, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        Model m;
        int rc = model_build(&cfg, 1, 256, &m, &err);
        CHECK(rc != 0 && strstr(err.msg, bad[i][1]) && strstr(err.msg, "y26.ini:"), "'%.40s' must fail with '%s': %s",
              bad[i][0], bad[i][1], rc ? err.msg : "built");
        if (!rc) model_free(&m);
    }
}

// One step of YOLO26-s on the fixture on the CPU (gpu < 0) or GPU `gpu` in fp32: outputs to map_rtol,
// loss items to loss_rtol, gradients and BN statistics per TOL.
static void fixture_step(int gpu, double map_rtol, double loss_rtol) {
    const char *sh = shared_dir();
    if (!sh) SKIP("../shared is absent (set YT_SHARED)");
    char path[4200], jpath[4200];
    snprintf(path, sizeof path, "%s/fixtures/yolo26_s_step.safetensors", sh);
    snprintf(jpath, sizeof jpath, "%s/fixtures/yolo26_s_step.json", sh);
    if (access(path, R_OK) || access(jpath, R_OK)) SKIP("the fixture yolo26_s_step is absent");
    static Config cfg;
    Err err;
    if (config_load("cfg/yolo26s.ini", 0, NULL, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    SafeTensors st;
    if (st_open(path, &st, &err)) { CHECK(0, "%s", err.msg); return; }
    Inputs in = { 0 };
    Model m;
    if (read_inputs(&st, &in, &err) || model_build(&cfg, in.N, in.H, &m, &err)) {
        CHECK(0, "%s", err.msg);
        free(in.images); free(in.targets);
        st_close(&st);
        return;
    }
    CHECK(model_load(&m, path, "param/", &err) == 0, "%s", err.msg);
#ifdef USE_CUDA
    Device dev;
    if (gpu >= 0 && model_to_gpu(&m, &dev, gpu, NULL, GPU_FP32, &err)) {
        CHECK(0, "%s", err.msg);
        model_free(&m); free(in.images); free(in.targets); st_close(&st);
        return;
    }
#endif
    double t0 = now_seconds();
    model_forward(&m, in.images, in.N, in.H, in.W, 1);
    HostHeads h;
    heads_download(&m, in.N, &h);
    Loss26Out out = { 0 };
    CHECK(run_loss(&in, m.nc, &h, &out, &err) == 0, "%s", err.msg);
    heads_upload_grads(&m, in.N, &h);
    double t1 = now_seconds();
    model_zero_grad(&m);
    model_backward(&m, in.N);
    float *grad = xmalloc(m.n_state * sizeof(float)), *state = xmalloc(m.n_state * sizeof(float));
    m.be->dev.download(m.be_ctx, grad, m.grad, m.n_state);
    m.be->dev.download(m.be_ctx, state, m.state, m.n_state);
    printf("    %s: forward + loss %.3f s, backward %.3f s (batch %d at %dx%d)\n", m.be->name, t1 - t0,
           now_seconds() - t1, in.N, in.H, in.W);
    check_loss(jpath, &out, in.N, loss_rtol);

    Report maps = { 0 }, grads = { 0 }, bn = { 0 };
    compare_outputs(&st, h.maps[L26_O2M], L26_LEVELS, "one2many", map_rtol, &maps);
    compare_outputs(&st, h.maps[L26_O2O], L26_LEVELS, "one2one", map_rtol, &maps);
    for (int i = 0; i < m.n_params; i++)
        if (param_trainable(m.params[i].kind)) compare_grad(&st, grad, &m.params[i], &grads);
    compare_bn(&st, &m, state, 0.1 * TOL, &bn);
    char what[64];
    snprintf(what, sizeof what, "outputs (rtol %g)", map_rtol);
    print_report(what, &maps);
    print_report("gradients (rtol 2e-3)", &grads);
    print_report("BN statistics (1e-6 + 2e-4 relative)", &bn);
    CHECK(maps.n_tensors == 4 && maps.n_bad == 0, "%d of %d outputs differ", maps.n_bad, maps.n_tensors);
    CHECK(grads.n_tensors == 247 + 119 && grads.n_bad == 0, "%d of %d gradient tensors differ (the fixture has 366)",
          grads.n_bad, grads.n_tensors);
    CHECK(bn.n_tensors == 228 && bn.n_bad == 0, "%d of %d BN statistics tensors differ (the fixture has 228)",
          bn.n_bad, bn.n_tensors);
    heads_free(&h);
    free(grad); free(state); free(in.images); free(in.targets);
    model_free(&m);
#ifdef USE_CUDA
    if (gpu >= 0) device_free(&dev);
#endif
    st_close(&st);
}

// fp32 on the CPU, as tight as the gelan-s and yolov9-s fixture steps (loss items 3e-5: test_dual says why).
static void test_fixture_step(void) { fixture_step(-1, 1e-4, 3e-5); }

// The same on the GPU in fp32 (TF32 off): cuBLAS sums in other orders than OpenBLAS, so outputs and
// loss items get twice the CPU's rtol, as test_dual.c allows yolov9-s.
static void test_fixture_step_gpu_fp32(void) {
#ifdef USE_CUDA
    GpuInfo g[1];
    if (gpu_list(g, 1) < 1) SKIP("no GPU");
    fixture_step(0, 2e-4, 2e-5);
#else
    SKIP("no CUDA in this build");
#endif
}

int main(void) {
    RUN(test_params);
    RUN(test_config_errors);
    RUN(test_fixture_step);
    RUN(test_fixture_step_gpu_fp32);
    return test_summary();
}
