// test_loss26.c: the YOLO26 end-to-end loss: the ProgLoss schedule, assigner edge cases (STAL, conflicts,
// the one-to-one narrowing, no targets, bad rows), a finite-difference check of the output gradients,
// and every term of both branches against the YOLO26-s reference step (fixture).
#include "core/spec/loss26.h"
#include "io/safetensors.h"
#include "test/test.h"

// ---- helpers ----------------------------------------------------------------------------------
// Scene: both branches' outputs for an N x img x img input; per level one (N,H,W,4+nc) buffer whose
// channel slices are the box and class maps (the layout a concat-writing graph produces).
typedef struct {
    float *data[L26_BRANCHES][L26_LEVELS], *grad[L26_BRANCHES][L26_LEVELS];
    Head26 g[L26_BRANCHES];
    Loss26Batch b;
    int N, img, nc;
} Scene;

static void scene_make(Scene *s, int N, int img, int nc) {
    memset(s, 0, sizeof *s);
    s->N = N; s->img = img; s->nc = nc;
    for (int k = 0; k < L26_BRANCHES; k++)
        for (int l = 0; l < L26_LEVELS; l++) {
            int H = img >> (3 + l);
            size_t n = (size_t)N * H * H * (4 + nc);
            s->data[k][l] = calloc(n, sizeof(float));
            s->grad[k][l] = calloc(n, sizeof(float));
            Map m = map_make(s->data[k][l], N, H, H, 4 + nc), g = map_make(s->grad[k][l], N, H, H, 4 + nc);
            s->b.head[k].box[l] = map_slice(m, 0, 4);
            s->b.head[k].cls[l] = map_slice(m, 4, nc);
            s->g[k].box[l] = map_slice(g, 0, 4);
            s->g[k].cls[l] = map_slice(g, 4, nc);
        }
    s->b.nc = nc;
    s->b.img_h = s->b.img_w = img;
}

static void scene_free(Scene *s) {
    for (int k = 0; k < L26_BRANCHES; k++)
        for (int l = 0; l < L26_LEVELS; l++) { free(s->data[k][l]); free(s->grad[k][l]); }
}

// every anchor of image n, both branches, predicts the pixel box b; class logits `logit`
static void scene_predict(Scene *s, int n, const double b[4], float logit) {
    for (int k = 0; k < L26_BRANCHES; k++)
        for (int l = 0; l < L26_LEVELS; l++) {
            Map bm = s->b.head[k].box[l], cm = s->b.head[k].cls[l];
            double st = (double)s->img / bm.H;
            for (int y = 0; y < bm.H; y++)
                for (int x = 0; x < bm.W; x++) {
                    float *d = map_at(bm, n, y, x), *c = map_at(cm, n, y, x);
                    d[0] = (float)(x + 0.5 - b[0] / st); d[1] = (float)(y + 0.5 - b[1] / st);
                    d[2] = (float)(b[2] / st - x - 0.5); d[3] = (float)(b[3] / st - y - 0.5);
                    for (int i = 0; i < s->nc; i++) c[i] = logit;
                }
        }
}

static void target_px(float *row, int img_idx, int cls, double x1, double y1, double x2, double y2, int img) {
    row[0] = (float)img_idx; row[1] = (float)cls;
    row[2] = (float)((x1 + x2) / 2 / img); row[3] = (float)((y1 + y2) / 2 / img);
    row[4] = (float)((x2 - x1) / img); row[5] = (float)((y2 - y1) / img);
}

static int anchors_of(const Scene *s) {
    int A = 0;
    for (int l = 0; l < L26_LEVELS; l++) A += s->b.head[0].box[l].H * s->b.head[0].box[l].W;
    return A;
}

// foreground anchors of target `row` in branch br, over all images
static int count_fg(const Loss26Work *w, const Scene *s, int br, int row) {
    int c = 0, A = anchors_of(s);
    for (int n = 0; n < s->N; n++)
        for (int a = 0; a < A; a++) c += loss26_target(w, br, n, a, NULL) == row;
    return c;
}

static const Head26 *grads_of(Scene *s, const Head26 *g[L26_BRANCHES]) {
    g[0] = &s->g[0]; g[1] = &s->g[1];
    return g[0];
}

// ---- the schedule -----------------------------------------------------------------------------
static void test_prog_weights(void) {
    double w[2];
    loss26_prog_weights(0, 100, w);
    CHECK(w[0] == 0.8 && w[1] == 1 - 0.8, "epoch 0: %.17g %.17g", w[0], w[1]);
    CHECK(w[1] == 0.19999999999999996, "o2o weight as the fixture's json: %.17g", w[1]);
    loss26_prog_weights(99, 100, w);
    CHECK(fabs(w[0] - 0.1) < 1e-15 && fabs(w[1] - 0.9) < 1e-15, "last epoch: %g %g", w[0], w[1]);
    loss26_prog_weights(33, 100, w);
    CHECK(fabs(w[0] - (0.1 + 0.7 * (1 - 33.0 / 99))) < 1e-15, "epoch 33: %g", w[0]);
    loss26_prog_weights(150, 100, w);
    CHECK(fabs(w[0] - 0.1) < 1e-15, "past the end the floor holds: %g", w[0]);
    loss26_prog_weights(0, 1, w);
    CHECK(w[0] == 0.8, "one epoch: max(E-1, 1) = 1: %g", w[0]);
    Loss26Weights wt = loss26_weights(0, 100);
    CHECK(wt.box == 7.5 && wt.cls == 0.5 && wt.l1 == 1.5, "default gains");
}

// ---- assigner edge cases ----------------------------------------------------------------------
// STAL: a target under 8 px on a side has its inside-test side widened to 16 px (per side, centre
// kept); at exactly 8 px it is not, so a box [28, 36] holds no anchor centre (P3 28 and 36 are on
// its edges, P4 24 and 40 and P5 16 and 48 outside) and gets no positive at all.
static void stal_case(double w, double h, int want_o2m, const char *what) {
    Scene s;
    scene_make(&s, 1, 64, 2);
    double b[4] = { 32 - w / 2, 32 - h / 2, 32 + w / 2, 32 + h / 2 };
    scene_predict(&s, 0, b, -1.0f);
    float t[6];
    target_px(t, 0, 1, b[0], b[1], b[2], b[3], 64);
    s.b.targets = t; s.b.n_targets = 1;
    Loss26Work *wk = loss26_work_new();
    double tss[2];
    Err err;
    CHECK(loss26_assign(wk, &s.b, tss, &err) == 0, "%s", err.msg);
    int o2m = count_fg(wk, &s, L26_O2M, 0), o2o = count_fg(wk, &s, L26_O2O, 0);
    CHECK(o2m == want_o2m, "%s: %d one-to-many positives, want %d", what, o2m, want_o2m);
    CHECK(o2o == (want_o2m > 0), "%s: %d one-to-one positives", what, o2o);
    if (want_o2m > 0) CHECK(fabs(tss[L26_O2O] - 1) < 1e-6, "%s: a perfect box scores 1: %g", what, tss[1]);
    loss26_work_free(wk);
    scene_free(&s);
}

static void test_stal(void) {
    stal_case(8.0, 8.0, 0, "8x8: no widening, centres on the edges");
    stal_case(7.5, 7.5, 4, "7.5x7.5: widened to 16x16, P3 anchors 28, 36 in x and y");
    stal_case(4.0, 30.0, 8, "4x30: x widened only; P3 x 28, 36 by y 20, 28, 36, 44");
}

// Conflicts: an anchor in both targets' top-k goes to the target it overlaps more (the overlap of
// every gt of the image counts), not to the first listed. Every anchor predicts A's box exactly.
static void test_conflict(void) {
    Scene s;
    scene_make(&s, 1, 64, 2);
    double A[4] = { 10, 10, 22, 22 }, B[4] = { 10, 10, 30, 22 };   // 5 and 7 candidates, 5 shared
    scene_predict(&s, 0, A, 0.0f);
    float t[12];
    target_px(t, 0, 0, B[0], B[1], B[2], B[3], 64);       // row 0: B, listed first
    target_px(t + 6, 0, 0, A[0], A[1], A[2], A[3], 64);   // row 1: A
    s.b.targets = t; s.b.n_targets = 2;
    Loss26Work *wk = loss26_work_new();
    double tss[2];
    Err err;
    CHECK(loss26_assign(wk, &s.b, tss, &err) == 0, "%s", err.msg);
    CHECK(count_fg(wk, &s, L26_O2M, 1) == 5, "A keeps its 5 shared anchors: %d", count_fg(wk, &s, L26_O2M, 1));
    CHECK(count_fg(wk, &s, L26_O2M, 0) == 2, "B keeps the 2 of its own: %d", count_fg(wk, &s, L26_O2M, 0));
    CHECK(count_fg(wk, &s, L26_O2O, 0) == 1 && count_fg(wk, &s, L26_O2O, 1) == 1, "one-to-one: one each");
    // the o2m score of A's anchors is its overlap (1) scaled by max overlap / max metric: all 1 here
    double sc;
    int a_p5 = 8 * 8 + 4 * 4;   // the single P5 anchor of the top-left 2x2 P5 cell grid
    CHECK(loss26_target(wk, L26_O2M, 0, a_p5, &sc) == 1 && fabs(sc - 1) < 1e-6, "P5 anchor -> A, score %g", sc);
    loss26_work_free(wk);
    scene_free(&s);
}

static void test_empty_and_errors(void) {
    Scene s;
    scene_make(&s, 2, 64, 3);
    double b[4] = { 0, 0, 8, 8 };
    scene_predict(&s, 0, b, -2.0f);
    scene_predict(&s, 1, b, 1.0f);
    Loss26Work *wk = loss26_work_new();
    Loss26Weights wt = loss26_weights(0, 10);
    const Head26 *g[2];
    grads_of(&s, g);
    Loss26Out o;
    Err err;
    CHECK(loss26_forward_backward(wk, &s.b, &wt, g, &o, &err) == 0, "%s", err.msg);
    int A = anchors_of(&s);
    double sp = A * 3 * (log1p(exp(-2.0)) + log1p(exp(1.0)));   // BCE with target 0, both images
    for (int k = 0; k < 2; k++) {
        CHECK(o.br[k].box == 0 && o.br[k].l1 == 0 && o.br[k].n_fg == 0 && o.br[k].tss == 1, "branch %d", k);
        CHECK(close_enough(o.br[k].cls, 0.5 * sp, 0, 1e-12), "branch %d cls %.12g vs %.12g", k, o.br[k].cls, 0.5 * sp);
    }
    CHECK(close_enough(o.total, 2 * 0.5 * sp, 0, 1e-12), "total %g", o.total);
    float bad[6] = { 2, 0, 0.5f, 0.5f, 0.1f, 0.1f };
    s.b.targets = bad; s.b.n_targets = 1;
    CHECK(loss26_assign(wk, &s.b, (double[2]){0}, &err) == -1 && strstr(err.msg, "image index"), "%s", err.msg);
    bad[0] = 0; bad[1] = 3;
    CHECK(loss26_assign(wk, &s.b, (double[2]){0}, &err) == -1 && strstr(err.msg, "class"), "%s", err.msg);
    bad[1] = 0; bad[4] = NAN;
    CHECK(loss26_assign(wk, &s.b, (double[2]){0}, &err) == -1 && strstr(err.msg, "non-finite"), "%s", err.msg);
    bad[4] = 0.1f;
    s.b.img_w = 60;
    CHECK(loss26_assign(wk, &s.b, (double[2]){0}, &err) == -1 && strstr(err.msg, "stride"), "%s", err.msg);
    loss26_work_free(wk);
    scene_free(&s);
}

// ---- gradient ---------------------------------------------------------------------------------
static void scene_random(Scene *s, Rng *r) {
    for (int k = 0; k < L26_BRANCHES; k++)
        for (int l = 0; l < L26_LEVELS; l++) {
            Map bm = s->b.head[k].box[l], cm = s->b.head[k].cls[l];
            for (int n = 0; n < bm.N; n++)
                for (int y = 0; y < bm.H; y++)
                    for (int x = 0; x < bm.W; x++) {
                        float *d = map_at(bm, n, y, x), *c = map_at(cm, n, y, x);
                        // square boxes (l + r = t + b), as the targets: see test_gradient_fd
                        d[0] = (float)rng_uniform(r, 0.5, 2.5); d[2] = (float)rng_uniform(r, 0.5, 2.5);
                        d[1] = (float)rng_uniform(r, 0.3, d[0] + d[2] - 0.3); d[3] = d[0] + d[2] - d[1];
                        for (int i = 0; i < cm.C; i++) c[i] = (float)rng_uniform(r, -3, 1);
                    }
        }
}

// A fixed assignment (it is detached), then central differences of the total over sampled outputs of
// both branches, box and class channels (test_ops.c's gradient check). CIoU's alpha is a constant to autograd
// (no_grad), so the gradient is not the derivative of the loss unless the aspect term v is flat: with
// square targets and square predictions v = 0 and dv = 0, and the two agree to O(h^2). The alpha rule
// itself is checked on loss_ciou by test_loss.c (test_ciou_gradient).
static void test_gradient_fd(void) {
    Scene s;
    scene_make(&s, 2, 64, 3);
    Rng r = rng_for(26, 1, 0);
    scene_random(&s, &r);
    float t[6 * 6];
    for (int i = 0; i < 6; i++) {
        double w = rng_uniform(&r, 6, 40), h = w;
        double cx = rng_uniform(&r, w / 2, 64 - w / 2), cy = rng_uniform(&r, h / 2, 64 - h / 2);
        target_px(t + 6 * i, i % 2, rng_int(&r, 3), cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, 64);
    }
    s.b.targets = t; s.b.n_targets = 6;
    Loss26Work *wk = loss26_work_new();
    Loss26Weights wt = loss26_weights(3, 10);
    double tss[2];
    Err err;
    CHECK(loss26_assign(wk, &s.b, tss, &err) == 0, "%s", err.msg);
    CHECK(wk && tss[0] > 0 && tss[1] > 0, "positives in both branches: %g %g", tss[0], tss[1]);
    tss[0] = fmax(tss[0], 1); tss[1] = fmax(tss[1], 1);
    const Head26 *g[2];
    grads_of(&s, g);
    Loss26Out o, op, om;
    loss26_compute(wk, &s.b, &wt, tss, 2, g, &o);
    int fg[2 * 2 * 84][3], nfg = 0, A = anchors_of(&s), checked = 0, bad = 0, fg_box = 0;
    for (int k = 0; k < 2; k++)
        for (int n = 0; n < 2; n++)
            for (int a = 0; a < A; a++)
                if (loss26_target(wk, k, n, a, NULL) >= 0) { fg[nfg][0] = k; fg[nfg][1] = n; fg[nfg++][2] = a; }
    for (int trial = 0; trial < 200; trial++) {
        // even trials: a box channel of a foreground anchor; odd: any output
        int pick = rng_int(&r, nfg), k = trial % 2 ? rng_int(&r, 2) : fg[pick][0];
        int n = trial % 2 ? rng_int(&r, 2) : fg[pick][1], a = trial % 2 ? rng_int(&r, A) : fg[pick][2];
        int l = a < 64 ? 0 : a < 80 ? 1 : 2, i = a - (l == 0 ? 0 : l == 1 ? 64 : 80), W = 8 >> l;
        int box = trial % 2 ? rng_int(&r, 2) : 1;
        Map m = box ? s.b.head[k].box[l] : s.b.head[k].cls[l], gm = box ? s.g[k].box[l] : s.g[k].cls[l];
        int y = i / W, x = i % W, c = rng_int(&r, m.C);
        float *p = map_at(m, n, y, x) + c, x0 = *p, xp = x0 + 1e-3f, xm = x0 - 1e-3f;
        *p = xp; loss26_compute(wk, &s.b, &wt, tss, 2, NULL, &op);
        *p = xm; loss26_compute(wk, &s.b, &wt, tss, 2, NULL, &om);
        *p = x0;
        double num = (op.total - om.total) / ((double)xp - xm), ana = map_at(gm, n, y, x)[c];
        // a kink (L1 sign, CIoU min/max) within h: the one-sided slopes disagree; skip the entry
        double right = (op.total - o.total) / ((double)xp - x0), left = (o.total - om.total) / ((double)x0 - xm);
        if (fabs(right - left) > 2e-4 + 1e-2 * fmax(fabs(right), fabs(left))) continue;
        fg_box += box && ana != 0;
        checked++;
        if (fabs(ana - num) > 2e-4 + 1e-2 * fmax(fabs(ana), fabs(num))) {
            if (bad++ < 5) printf("    branch %d P%d %s (%d,%d,%d,%d): ana %.6g num %.6g\n", k, l + 3,
                                  box ? "box" : "cls", n, y, x, c, ana, num);
        }
    }
    CHECK(bad == 0, "%d of %d gradient entries off", bad, checked);
    CHECK(checked >= 180 && fg_box >= 80, "only %d entries (%d foreground box) checked", checked, fg_box);
    loss26_work_free(wk);
    scene_free(&s);
}

// ---- the reference step -----------------------------------------------------------------------
// (B, C, A) fixture outputs, A = P3, P4, P5 row-major, into channel slice [c0, c0+C) of NHWC maps
static int load_outputs(const SafeTensors *st, const char *name, Map m[L26_LEVELS], int C, Err *err) {
    const StTensor *t = st_find(st, name);
    int B = m[0].N, A = 0;
    for (int l = 0; l < L26_LEVELS; l++) A += m[l].H * m[l].W;
    if (!t || t->ndim != 3 || t->shape[0] != B || t->shape[1] != C || t->shape[2] != A)
        return err_set(err, "%s missing or not (%d, %d, %d)", name, B, C, A);
    size_t n = (size_t)B * C * A;
    float *x = malloc(n * sizeof(float));
    if (st_read_f32(st, name, x, n, err)) { free(x); return -1; }
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            int a = 0;
            for (int l = 0; l < L26_LEVELS; l++)
                for (int y = 0; y < m[l].H; y++)
                    for (int xx = 0; xx < m[l].W; xx++) map_at(m[l], b, y, xx)[c] = x[((size_t)b * C + c) * A + a++];
        }
    free(x);
    return 0;
}

static void test_fixture(void) {
    const char *dir = shared_dir();
    if (!dir) SKIP("no shared folder (set YT_SHARED)");
    char path[4200];
    snprintf(path, sizeof path, "%s/fixtures/yolo26_s_step.safetensors", dir);
    if (access(path, R_OK) != 0) SKIP("fixtures/yolo26_s_step.safetensors is absent");
    SafeTensors st;
    Err err = {{0}};
    if (st_open(path, &st, &err)) { CHECK(0, "%s", err.msg); return; }
    Scene s;
    scene_make(&s, 4, 256, 80);
    const char *names[2][2] = { { "output/one2many/boxes", "output/one2many/scores" },
                                { "output/one2one/boxes", "output/one2one/scores" } };
    const StTensor *tt = st_find(&st, "input/targets");
    int ok = tt && tt->ndim == 2 && tt->shape[1] == 6;
    for (int k = 0; k < 2 && ok; k++)
        ok = load_outputs(&st, names[k][0], s.b.head[k].box, 4, &err) == 0 &&
             load_outputs(&st, names[k][1], s.b.head[k].cls, 80, &err) == 0;
    CHECK(ok, "fixture tensors: %s", err.msg);
    if (ok) {
        float *targets = malloc(st_numel(tt) * sizeof(float));
        st_read_f32(&st, "input/targets", targets, st_numel(tt), &err);
        s.b.targets = targets;
        s.b.n_targets = (int)tt->shape[0];
        Loss26Work *wk = loss26_work_new();
        Loss26Weights wt = loss26_weights(0, 100);
        const Head26 *g[2];
        grads_of(&s, g);
        Loss26Out o;
        double t0 = now_seconds();
        CHECK(loss26_forward_backward(wk, &s.b, &wt, g, &o, &err) == 0, "%s", err.msg);
        double ms = 1e3 * (now_seconds() - t0);
        const double ref[2][3] = { { 14.34180954013959, 20.92358291302934, 0.3171483877640062 },
                                   { 12.538095892875234, 22.412866553250428, 0.2839341084284349 } };
        const double ref_total = 35.51301198365717;
        const char *br[2] = { "one2many", "one2one" }, *term[3] = { "box", "cls", "l1" };
        for (int k = 0; k < 2; k++) {
            double got[3] = { 4 * o.br[k].box, 4 * o.br[k].cls, 4 * o.br[k].l1 };
            for (int i = 0; i < 3; i++) {
                printf("    %s %s x batch: %.12f (ref %.12f, rel %.1e)\n", br[k], term[i], got[i], ref[k][i],
                       fabs(got[i] - ref[k][i]) / fabs(ref[k][i]));
                CHECK(close_enough(got[i], ref[k][i], 0, 1e-5), "%s %s %.12f vs %.12f", br[k], term[i], got[i],
                      ref[k][i]);
            }
        }
        printf("    total %.12f (ref %.12f, rel %.1e); fg %d / %d, tss %.4f / %.4f; %.1f ms\n", o.total, ref_total,
               fabs(o.total - ref_total) / ref_total, o.br[0].n_fg, o.br[1].n_fg, o.br[0].tss, o.br[1].tss, ms);
        CHECK(close_enough(o.total, ref_total, 0, 1e-5), "total %.12f vs %.12f", o.total, ref_total);
        for (int row = 0; row < s.b.n_targets; row++) {
            int c1 = count_fg(wk, &s, L26_O2O, row), cm = count_fg(wk, &s, L26_O2M, row);
            CHECK(c1 <= 1 && cm <= 10 && cm >= c1, "target %d: %d o2o, %d o2m positives", row, c1, cm);
        }
        size_t allocs = alloc_count();
        CHECK(loss26_forward_backward(wk, &s.b, &wt, g, &o, &err) == 0, "%s", err.msg);
        CHECK(alloc_count() == allocs, "a second step allocated %zu times", alloc_count() - allocs);
        loss26_work_free(wk);
        free(targets);
    }
    scene_free(&s);
    st_close(&st);
}

int main(void) {
    RUN(test_prog_weights);
    RUN(test_stal);
    RUN(test_conflict);
    RUN(test_empty_and_errors);
    RUN(test_gradient_fd);
    RUN(test_fixture);
    return test_summary();
}
