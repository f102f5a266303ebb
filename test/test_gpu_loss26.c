// test_gpu_loss26.c: the CUDA YOLO26 loss (gpu/loss26.cu) against the CPU twin (core/spec/loss26.c): the
// YOLO26-s reference step's outputs and random odd-sized batches (both branches' assignments, tss, items,
// every gradient), bad rows, batch sizes changing between calls, determinism and no allocation per step.
// Without CUDA, or without a GPU, every test skips. Legend: N batch, A anchors, nc classes, ld pixel stride.
#include "core/spec/loss26.h"
#include "io/safetensors.h"
#include "test/test.h"
#include "test/fixture.h"   // json_number
#ifdef USE_CUDA
#include "gpu/loss26.h"
#endif

#define GPU_TESTS(X) X(test_fixture) X(test_random_cases) X(test_bad_rows) X(test_batch_change) \
    X(test_deterministic_no_alloc)

#include "test/gpu_harness.h"
#ifdef USE_CUDA

enum { MAX_T = 64 };                  // target rows a Scene holds
static const float GUARD = -777.0f;   // every device gradient element before a call: each must be written,
                                      // except the pad channels [4 + nc, ld), which must survive
// CPU and GPU both compute in double and round once to float: 1 ulp apart at most, far inside these
static const double ITEM_RTOL = 1e-7, GRAD_RTOL = 1e-5;

// ---- a batch on the host and on the device ------------------------------------------------------
// Scene: per branch and level one (N, H_l, W_l, ld) buffer, channels [0,4) box, [4, 4+nc) class, the rest
// pads, on the host (h) and the device (d), with gradients alike (hg, dg). hb and db are the same
// Loss26Batch over host and device maps, sharing the host targets.
typedef struct {
    int N, img_h, img_w, nc, ld;
    float *h[L26_BRANCHES][L26_LEVELS], *hg[L26_BRANCHES][L26_LEVELS];
    float *d[L26_BRANCHES][L26_LEVELS], *dg[L26_BRANCHES][L26_LEVELS];
    size_t n[L26_LEVELS];   // floats per buffer, pads included
    Head26 hgrad[L26_BRANCHES], dgrad[L26_BRANCHES];
    Loss26Batch hb, db;
    float targets[MAX_T * 6];
} Scene;

static void set_head(Head26 *h, float *data, int l, int N, int H, int W, int nc, int ld) {
    Map m = map_make(data, N, H, W, 4 + nc);
    m.ld = ld;
    h->box[l] = map_slice(m, 0, 4);
    h->cls[l] = map_slice(m, 4, nc);
}

static void scene_new(Scene *s, int N, int img_h, int img_w, int nc, int extra) {
    memset(s, 0, sizeof *s);
    s->N = N; s->img_h = img_h; s->img_w = img_w; s->nc = nc; s->ld = 4 + nc + extra;
    for (int l = 0; l < L26_LEVELS; l++) {
        int H = img_h >> (3 + l), W = img_w >> (3 + l);
        s->n[l] = (size_t)N * H * W * s->ld;
        for (int k = 0; k < L26_BRANCHES; k++) {
            s->h[k][l] = xmalloc(s->n[l] * sizeof(float));
            s->hg[k][l] = xmalloc(s->n[l] * sizeof(float));
            checkCuda(cudaMalloc((void **)&s->d[k][l], s->n[l] * sizeof(float)));
            checkCuda(cudaMalloc((void **)&s->dg[k][l], s->n[l] * sizeof(float)));
            set_head(&s->hb.head[k], s->h[k][l], l, N, H, W, nc, s->ld);
            set_head(&s->db.head[k], s->d[k][l], l, N, H, W, nc, s->ld);
            set_head(&s->hgrad[k], s->hg[k][l], l, N, H, W, nc, s->ld);
            set_head(&s->dgrad[k], s->dg[k][l], l, N, H, W, nc, s->ld);
        }
    }
    s->hb.nc = s->db.nc = nc;
    s->hb.img_h = s->db.img_h = img_h;
    s->hb.img_w = s->db.img_w = img_w;
    s->hb.targets = s->db.targets = s->targets;
}

static void scene_free(Scene *s) {
    for (int k = 0; k < L26_BRANCHES; k++)
        for (int l = 0; l < L26_LEVELS; l++) {
            free(s->h[k][l]); free(s->hg[k][l]);
            checkCuda(cudaFree(s->d[k][l])); checkCuda(cudaFree(s->dg[k][l]));
        }
}

static void set_targets(Scene *s, int n) { s->hb.n_targets = s->db.n_targets = n; }

// the host outputs to the device, and GUARD into every gradient element on both sides
static void scene_upload(Scene *s) {
    for (int k = 0; k < L26_BRANCHES; k++)
        for (int l = 0; l < L26_LEVELS; l++) {
            checkCuda(cudaMemcpy(s->d[k][l], s->h[k][l], s->n[l] * sizeof(float), cudaMemcpyHostToDevice));
            for (size_t i = 0; i < s->n[l]; i++) s->hg[k][l][i] = GUARD;
            checkCuda(cudaMemcpy(s->dg[k][l], s->hg[k][l], s->n[l] * sizeof(float), cudaMemcpyHostToDevice));
        }
}

// box distances U(0.2, 3) cells (boxes of 3 to 190 px over the levels, so candidates overlap their
// targets), class logits N(-1, 1); pads GUARD
static void scene_random(Scene *s, Rng *r) {
    for (int k = 0; k < L26_BRANCHES; k++)
        for (int l = 0; l < L26_LEVELS; l++)
            for (size_t i = 0; i < s->n[l]; i++) {
                int c = (int)(i % s->ld);
                s->h[k][l][i] = c >= 4 + s->nc ? GUARD : (float)(c < 4 ? rng_uniform(r, 0.2, 3) : rng_normal(r) - 1);
            }
}

// ---- targets ------------------------------------------------------------------------------------
static void put_row(float *t, int img, int cls, double cx, double cy, double w, double h) {
    t[0] = (float)img; t[1] = (float)cls; t[2] = (float)cx; t[3] = (float)cy; t[4] = (float)w; t[5] = (float)h;
}

// One random row: ordinary, under one P3 stride (or of zero width), across the border, or a copy of
// the previous row (jittered, or identical with another class) so that gts share anchors.
static void random_row(Scene *s, float *t, const float *prev, int img, Rng *r) {
    int kind = prev && (int)prev[0] == img ? rng_int(r, 5) : rng_int(r, 3);
    double w = rng_uniform(r, 0.05, 0.6), h = rng_uniform(r, 0.05, 0.6);
    double cx = rng_uniform(r, w / 2, 1 - w / 2), cy = rng_uniform(r, h / 2, 1 - h / 2);
    if (kind == 1) {
        w = rng_int(r, 4) ? rng_uniform(r, 1, 7.5) / s->img_w : 0;
        h = rng_uniform(r, 1, 7.5) / s->img_h;
    }
    if (kind == 2) { cx = rng_int(r, 2) ? 0.02 : 0.98; cy = rng_uniform(r, 0, 1); }
    if (kind >= 3) {
        double j = kind == 3 ? 0.03 : 0;
        cx = prev[2] + rng_uniform(r, -j, j); cy = prev[3] + rng_uniform(r, -j, j);
        w = fabs(prev[4] + rng_uniform(r, -j, j)); h = fabs(prev[5] + rng_uniform(r, -j, j));
    }
    put_row(t, img, rng_int(r, s->nc), cx, cy, w, h);
}

// The hand-made rows of every random case, all on image 0: a target under one P3 stride in both
// sides (STAL), one of zero width, one wholly outside the image (no anchor inside), one with negative
// coordinates (mask_gt: invalid) and an exact duplicate with another class (conflicts). Returns the count.
static int special_rows(Scene *s, float *t) {
    double px = 1.0 / s->img_w, py = 1.0 / s->img_h;
    put_row(t, 0, 0, 0.5, 0.5, 5 * px, 6 * py);
    put_row(t + 6, 0, s->nc - 1, 0.3, 0.6, 0, 3 * py);
    put_row(t + 12, 0, 0, 1.3, 0.5, 0.1, 0.1);
    put_row(t + 18, 0, 0, -0.6, -0.6, 0.1, 0.1);
    put_row(t + 24, 0, 0, 0.4, 0.4, 0.3, 0.2);
    put_row(t + 30, 0, s->nc > 1 ? 1 : 0, 0.4, 0.4, 0.3, 0.2);
    return 6;
}

// the special rows, then up to `per_image` random rows for every image but the last (which has none)
static int random_targets(Scene *s, int per_image, Rng *r) {
    int n = special_rows(s, s->targets);
    for (int img = 0; img < s->N - 1; img++)
        for (int i = rng_int(r, per_image + 1); i > 0 && n < MAX_T; i--, n++)
            random_row(s, s->targets + 6 * n, s->targets + 6 * (n - 1), img, r);
    set_targets(s, n);
    return n;
}

// ---- CPU vs GPU ---------------------------------------------------------------------------------
typedef struct { double item_rel, grad_rel; int cases, cells, fg; } Worst;

static double rel_err(double got, double ref) { return ref == 0 ? fabs(got) : fabs(got - ref) / fabs(ref); }

static void check_item(double got, double ref, const char *what, const char *name, Worst *worst) {
    worst->item_rel = fmax(worst->item_rel, rel_err(got, ref));
    CHECK(close_enough(got, ref, 1e-12, ITEM_RTOL), "%s %s: gpu %.15g cpu %.15g", what, name, got, ref);
}

// one map of branch br (the channels [c0, c0+C) of each pixel): every element within GRAD_RTOL x its
// max |cpu| (plus GRAD_RTOL x |cpu|); the pads still GUARD; `want` says whether it was asked for
static void compare_map(const Scene *s, int br, int l, int c0, int C, const float *got, int want,
                        const char *what, Worst *worst) {
    const float *ref = s->hg[br][l];
    double gmax = 0;
    for (size_t i = 0; i < s->n[l]; i++) {
        int c = (int)(i % s->ld) - c0;
        if (c >= 0 && c < C) gmax = fmax(gmax, fabs(ref[i]));
    }
    int bad = 0, pads = 0;
    for (size_t i = 0; i < s->n[l]; i++) {
        int ch = (int)(i % s->ld), c = ch - c0;
        if (ch >= 4 + s->nc) { pads += got[i] != GUARD; continue; }
        if (c < 0 || c >= C) continue;
        if (!want) { bad += got[i] != GUARD; continue; }
        double err = fabs(got[i] - ref[i]);
        worst->grad_rel = fmax(worst->grad_rel, err / (GRAD_RTOL * (gmax + fabs(ref[i])) + 1e-300));
        if (!close_enough(got[i], ref[i], GRAD_RTOL * gmax, GRAD_RTOL) && bad++ < 3)
            CHECK(0, "%s branch %d P%d element %zu (pixel %zu, channel %d): gpu %.9g cpu %.9g (max %.3g)", what, br,
                  l + 3, i, i / s->ld, ch, got[i], ref[i], gmax);
    }
    CHECK(bad == 0 && pads == 0, "%s branch %d P%d channels [%d,%d): %d gradients off%s, %d pads overwritten", what,
          br, l + 3, c0, c0 + C, bad, want ? "" : " (none asked for)", pads);
}

static void compare_grads(const Scene *s, const int want[L26_BRANCHES], const char *what, Worst *worst) {
    for (int k = 0; k < L26_BRANCHES; k++)
        for (int l = 0; l < L26_LEVELS; l++) {
            float *got = xmalloc(s->n[l] * sizeof(float));
            checkCuda(cudaMemcpy(got, s->dg[k][l], s->n[l] * sizeof(float), cudaMemcpyDeviceToHost));
            compare_map(s, k, l, 0, 4, got, want[k], what, worst);
            compare_map(s, k, l, 4, s->nc, got, want[k], what, worst);
            free(got);
        }
}

// both branches' assignment: row and score per (n, a) as loss26_target reads them
static void compare_assignment(const Scene *s, const Loss26Work *cw, const GpuLoss26Work *gw, const char *what,
                               Worst *worst) {
    int A = 0;
    for (int l = 0; l < L26_LEVELS; l++) A += s->hb.head[0].box[l].H * s->hb.head[0].box[l].W;
    int *row = xmalloc((size_t)s->N * A * sizeof(int));
    double *score = xmalloc((size_t)s->N * A * sizeof(double));
    for (int k = 0; k < L26_BRANCHES; k++) {
        int bad = 0;
        loss26_targets_gpu(&dev, gw, k, row, score);
        for (int i = 0; i < s->N * A; i++) {
            double sc;
            int rc = loss26_target(cw, k, i / A, i % A, &sc);
            worst->fg += rc >= 0;
            if ((rc != row[i] || !close_enough(score[i], sc, 1e-12, ITEM_RTOL)) && bad++ < 3)
                CHECK(0, "%s branch %d image %d anchor %d: gpu row %d score %.15g, cpu row %d score %.15g", what, k,
                      i / A, i % A, row[i], score[i], rc, sc);
        }
        CHECK(bad == 0, "%s branch %d: %d of %d anchors assigned differently", what, k, bad, s->N * A);
    }
    worst->cells += s->N * A;
    free(row);
    free(score);
}

// Opts: the compute call's settings (weights, normaliser scale as several devices would give, batch_mult,
// which branches get gradients)
typedef struct { Loss26Weights wt; double tss_scale, mult_scale; int want[L26_BRANCHES]; } Opts;

static Opts opts_default(void) {
    Opts o = { loss26_weights(0, 100), 1, 1, { 1, 1 } };
    return o;
}

// The whole comparison for the scene as it stands: assign, tss, assignment, compute, items, gradients.
// out (may be NULL) gets the GPU's Loss26Out.
static void compare_case(Scene *s, GpuLoss26Work *gw, const Opts *o, const char *what, Worst *worst,
                         Loss26Out *out) {
    Loss26Work *cw = loss26_work_new();
    Err err = {{0}};
    double tc[L26_BRANCHES], tg[L26_BRANCHES], norm[L26_BRANCHES];
    CHECK(loss26_assign(cw, &s->hb, tc, &err) == 0, "%s cpu: %s", what, err.msg);
    CHECK(loss26_assign_gpu(&dev, gw, &s->db, tg, &err) == 0, "%s gpu: %s", what, err.msg);
    for (int k = 0; k < L26_BRANCHES; k++) {
        check_item(tg[k], tc[k], what, k ? "o2o tss" : "o2m tss", worst);
        norm[k] = fmax(tc[k], 1) * o->tss_scale;
    }
    compare_assignment(s, cw, gw, what, worst);
    const Head26 *hg[L26_BRANCHES], *dg[L26_BRANCHES];
    for (int k = 0; k < L26_BRANCHES; k++) {
        hg[k] = o->want[k] ? &s->hgrad[k] : NULL;
        dg[k] = o->want[k] ? &s->dgrad[k] : NULL;
    }
    double mult = s->N * o->mult_scale;
    Loss26Out oc, og;
    loss26_compute(cw, &s->hb, &o->wt, norm, mult, hg, &oc);
    loss26_compute_gpu(&dev, gw, &s->db, &o->wt, norm, mult, dg, &og);
    const char *name[3] = { "box", "cls", "l1" };
    for (int k = 0; k < L26_BRANCHES; k++) {
        const double got[3] = { og.br[k].box, og.br[k].cls, og.br[k].l1 };
        const double ref[3] = { oc.br[k].box, oc.br[k].cls, oc.br[k].l1 };
        for (int i = 0; i < 3; i++) {
            char item[32];
            snprintf(item, sizeof item, "%s %s", k ? "o2o" : "o2m", name[i]);
            check_item(got[i], ref[i], what, item, worst);
        }
        CHECK(og.br[k].tss == oc.br[k].tss && og.br[k].n_fg == oc.br[k].n_fg, "%s branch %d: tss %.15g / %.15g, "
              "fg %d / %d", what, k, og.br[k].tss, oc.br[k].tss, og.br[k].n_fg, oc.br[k].n_fg);
    }
    check_item(og.total, oc.total, what, "total", worst);
    compare_grads(s, o->want, what, worst);
    worst->cases++;
    if (out) *out = og;
    loss26_work_free(cw);
}

static void print_worst(const char *what, const Worst *w) {
    printf("    %s: %d cases, %d cells, %d foreground: worst item error %.2e (relative), worst gradient error "
           "%.2e of its tolerance\n", what, w->cases, w->cells, w->fg, w->item_rel, w->grad_rel);
}

// ---- the reference step -------------------------------------------------------------------------
// (B, C, A) fixture outputs, A = P3, P4, P5 row-major, into the maps m (as test_loss26.c reads them)
static int load_outputs(const SafeTensors *st, const char *name, const Map m[L26_LEVELS], int C, Err *err) {
    const StTensor *t = st_find(st, name);
    int B = m[0].N, A = 0;
    for (int l = 0; l < L26_LEVELS; l++) A += m[l].H * m[l].W;
    if (!t || t->ndim != 3 || t->shape[0] != B || t->shape[1] != C || t->shape[2] != A)
        return err_set(err, "%s missing or not (%d, %d, %d)", name, B, C, A);
    size_t n = (size_t)B * C * A;
    float *x = xmalloc(n * sizeof(float));
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

static int load_fixture(const SafeTensors *st, Scene *s, Err *err) {
    const char *names[2][2] = { { "output/one2many/boxes", "output/one2many/scores" },
                                { "output/one2one/boxes", "output/one2one/scores" } };
    for (int k = 0; k < L26_BRANCHES; k++)
        if (load_outputs(st, names[k][0], s->hb.head[k].box, 4, err) ||
            load_outputs(st, names[k][1], s->hb.head[k].cls, s->nc, err)) return -1;
    const StTensor *tt = st_find(st, "input/targets");
    if (!tt || tt->ndim != 2 || tt->shape[1] != 6 || tt->shape[0] > MAX_T)
        return err_set(err, "input/targets missing or not (G <= %d, 6)", MAX_T);
    set_targets(s, (int)tt->shape[0]);
    return st_read_f32(st, "input/targets", s->targets, st_numel(tt), err);
}

static void test_fixture(void) {
    NEED_GPU();
    const char *dir = shared_dir();
    if (!dir) SKIP("no shared folder (set YT_SHARED)");
    char path[4200], json[4200];
    snprintf(path, sizeof path, "%s/fixtures/yolo26_s_step.safetensors", dir);
    snprintf(json, sizeof json, "%s/fixtures/yolo26_s_step.json", dir);
    if (access(path, R_OK) != 0) SKIP("fixtures/yolo26_s_step.safetensors is absent");
    SafeTensors st;
    Err err = {{0}};
    if (st_open(path, &st, &err)) { CHECK(0, "%s", err.msg); return; }
    Scene s;
    scene_new(&s, 4, 256, 256, 80, 0);
    int ok = load_fixture(&st, &s, &err) == 0;
    CHECK(ok, "fixture tensors: %s", err.msg);
    if (ok) {
        scene_upload(&s);
        GpuLoss26Work *gw = loss26_work_new_gpu(&dev, 4, MAX_T, 80, 1344);
        Opts o = opts_default();
        Worst worst = { 0, 0, 0, 0, 0 };
        Loss26Out out;
        compare_case(&s, gw, &o, "fixture", &worst, &out);
        // and the reference itself, as test_loss26.c checks the CPU twin
        const char *key[2] = { "one2many_box_cls_l1_times_batch", "one2one_box_cls_l1_times_batch" };
        for (int k = 0; k < L26_BRANCHES; k++) {
            const double got[3] = { 4 * out.br[k].box, 4 * out.br[k].cls, 4 * out.br[k].l1 };
            for (int i = 0; i < 3; i++) {
                double ref = json_number(json, key[k], i);
                CHECK(close_enough(got[i], ref, 0, 1e-5), "%s[%d]: gpu %.12f json %.12f", key[k], i, got[i], ref);
            }
        }
        double ref_total = json_number(json, "loss_total", 0);
        CHECK(close_enough(out.total, ref_total, 0, 1e-5), "total: gpu %.12f json %.12f", out.total, ref_total);
        printf("    YOLO26-s step: total gpu %.12f, json %.12f (rel %.1e); fg %d / %d\n", out.total, ref_total,
               rel_err(out.total, ref_total), out.br[0].n_fg, out.br[1].n_fg);
        print_worst("fixture vs CPU twin", &worst);
        loss26_work_free_gpu(gw);
    }
    scene_free(&s);
    st_close(&st);
}

// ---- random batches -----------------------------------------------------------------------------
typedef struct { int N, img_h, img_w, nc, extra, per_image; } Shape;

static void random_case(GpuLoss26Work *gw, const Shape *sh, int index, Worst *worst) {
    Rng r = rng_for(2611, (uint64_t)index, 0);
    Scene s;
    scene_new(&s, sh->N, sh->img_h, sh->img_w, sh->nc, sh->extra);
    scene_random(&s, &r);
    int G = random_targets(&s, sh->per_image, &r);
    scene_upload(&s);
    // odd cases: another epoch's weights, the normaliser and batch of a 2-device step, no o2o gradient
    Opts o = opts_default();
    if (index % 2) {
        o.wt = loss26_weights(index, 7);
        o.tss_scale = 1.75;
        o.mult_scale = 2;
    }
    if (index % 3 == 2) o.want[L26_O2O] = 0;
    char what[128];
    snprintf(what, sizeof what, "case %d (N %d, %dx%d, nc %d, ld %d, %d targets)", index, sh->N, sh->img_h, sh->img_w,
             sh->nc, s.ld, G);
    compare_case(&s, gw, &o, what, worst, NULL);
    scene_free(&s);
}

static void test_random_cases(void) {
    NEED_GPU();
    const Shape shapes[] = { { 3, 96, 160, 5, 3, 12 }, { 3, 96, 160, 5, 0, 20 }, { 2, 160, 96, 1, 1, 8 },
                             { 4, 64, 64, 7, 0, 16 },  { 2, 224, 288, 80, 2, 25 }, { 3, 96, 160, 5, 3, 30 } };
    int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    GpuLoss26Work *gw = loss26_work_new_gpu(&dev, 4, MAX_T, 80, 1400);
    CHECK(gw != NULL, "loss26_work_new_gpu");
    if (!gw) return;
    Worst worst = { 0, 0, 0, 0, 0 };
    for (int k = 0; k < n_shapes; k++) random_case(gw, &shapes[k], k, &worst);
    print_worst("random batches", &worst);
    CHECK(worst.fg > 0, "no foreground anywhere");
    loss26_work_free_gpu(gw);
}

// ---- errors -------------------------------------------------------------------------------------
// both twins refuse the batch with the same message
static void same_refusal(Scene *s, GpuLoss26Work *gw, const char *what) {
    Loss26Work *cw = loss26_work_new();
    Err ec = {{0}}, eg = {{0}};
    double t[L26_BRANCHES];
    int rc = loss26_assign(cw, &s->hb, t, &ec), rg = loss26_assign_gpu(&dev, gw, &s->db, t, &eg);
    CHECK(rc == -1 && rg == -1 && strcmp(ec.msg, eg.msg) == 0, "%s: cpu %d \"%s\", gpu %d \"%s\"", what, rc, ec.msg,
          rg, eg.msg);
    loss26_work_free(cw);
}

static void test_bad_rows(void) {
    NEED_GPU();
    Scene s;
    scene_new(&s, 2, 96, 160, 3, 0);
    Rng r = rng_for(2612, 0, 0);
    scene_random(&s, &r);
    scene_upload(&s);
    GpuLoss26Work *gw = loss26_work_new_gpu(&dev, 2, 2, 3, 315);
    float *t = s.targets;
    put_row(t, 1, 2, 0.5, 0.5, 0.3, 0.3);
    set_targets(&s, 1);
    Err err = {{0}};
    double tss[L26_BRANCHES];
    CHECK(loss26_assign_gpu(&dev, gw, &s.db, tss, &err) == 0, "a good row: %s", err.msg);
    t[1] = 3;
    same_refusal(&s, gw, "class 3 of 3");
    t[1] = 0.5f;
    same_refusal(&s, gw, "class 0.5");
    t[1] = 0; t[0] = 2;
    same_refusal(&s, gw, "image 2 of 2");
    t[0] = -1;
    same_refusal(&s, gw, "image -1");
    t[0] = 0; t[4] = NAN;
    same_refusal(&s, gw, "NaN width");
    t[4] = INFINITY;
    same_refusal(&s, gw, "infinite width");
    t[4] = 0.3f;
    s.hb.img_w = s.db.img_w = 150;
    same_refusal(&s, gw, "maps that do not fit the image");
    s.hb.img_w = s.db.img_w = 160;
    put_row(t + 6, 0, 0, 0.5, 0.5, 0.3, 0.3);
    put_row(t + 12, 0, 0, 0.5, 0.5, 0.3, 0.3);
    set_targets(&s, 3);
    CHECK(loss26_assign_gpu(&dev, gw, &s.db, tss, &err) == -1 && strstr(err.msg, "exceed"),
          "3 targets in a work for 2: %s", err.msg);
    set_targets(&s, 1);
    CHECK(loss26_assign_gpu(&dev, gw, &s.db, tss, &err) == 0, "good again after refusals: %s", err.msg);
    loss26_work_free_gpu(gw);
    scene_free(&s);
}

// ---- state between calls ------------------------------------------------------------------------
// One work through batches of 3, 1 and 2 images of different sizes and target counts, back to 3:
// each call must match a fresh CPU twin, so nothing of the previous call leaks into the next.
static void test_batch_change(void) {
    NEED_GPU();
    const Shape shapes[] = { { 3, 96, 160, 5, 3, 20 }, { 1, 64, 64, 5, 0, 0 }, { 2, 128, 96, 4, 1, 6 },
                             { 3, 96, 160, 5, 3, 20 } };
    GpuLoss26Work *gw = loss26_work_new_gpu(&dev, 3, MAX_T, 5, 315);
    Worst worst = { 0, 0, 0, 0, 0 };
    for (int k = 0; k < 4; k++) random_case(gw, &shapes[k], 10 + k, &worst);
    print_worst("changing batches", &worst);
    loss26_work_free_gpu(gw);
}

// ---- determinism, allocation, speed -------------------------------------------------------------
static float *download_grads(const Scene *s) {
    size_t per = s->n[0] + s->n[1] + s->n[2], off = 0;
    float *g = xmalloc(L26_BRANCHES * per * sizeof(float));
    for (int k = 0; k < L26_BRANCHES; k++)
        for (int l = 0; l < L26_LEVELS; off += s->n[l], l++)
            checkCuda(cudaMemcpy(g + off, s->dg[k][l], s->n[l] * sizeof(float), cudaMemcpyDeviceToHost));
    return g;
}

static void step(Scene *s, GpuLoss26Work *gw, const Loss26Weights *wt, Loss26Out *out) {
    Err err = {{0}};
    double tss[L26_BRANCHES];
    const Head26 *g[L26_BRANCHES] = { &s->dgrad[0], &s->dgrad[1] };
    CHECK(loss26_assign_gpu(&dev, gw, &s->db, tss, &err) == 0, "%s", err.msg);
    for (int k = 0; k < L26_BRANCHES; k++) tss[k] = fmax(tss[k], 1);
    loss26_compute_gpu(&dev, gw, &s->db, wt, tss, s->N, g, out);
}

static int same_out(const Loss26Out *a, const Loss26Out *b) {   // field by field: padding is no answer
    int same = a->total == b->total;
    for (int k = 0; k < L26_BRANCHES; k++)
        same &= a->br[k].box == b->br[k].box && a->br[k].cls == b->br[k].cls && a->br[k].l1 == b->br[k].l1 &&
                a->br[k].tss == b->br[k].tss && a->br[k].n_fg == b->br[k].n_fg;
    return same;
}

// 8 images at 640x640 (8400 anchors), nc 80, up to 8 targets per image: two steps give the same bits,
// three more allocate nothing; then the step is timed.
static void test_deterministic_no_alloc(void) {
    NEED_GPU();
    Rng r = rng_for(2613, 0, 0);
    Scene s;
    scene_new(&s, 8, 640, 640, 80, 0);
    scene_random(&s, &r);
    int G = random_targets(&s, 8, &r);
    scene_upload(&s);
    GpuLoss26Work *gw = loss26_work_new_gpu(&dev, 8, MAX_T, 80, 8400);
    Loss26Weights wt = loss26_weights(0, 100);
    Loss26Out o1, o2;
    step(&s, gw, &wt, &o1);
    float *g1 = download_grads(&s);
    scene_upload(&s);
    step(&s, gw, &wt, &o2);
    float *g2 = download_grads(&s);
    size_t n = L26_BRANCHES * (s.n[0] + s.n[1] + s.n[2]);
    CHECK(same_out(&o1, &o2), "Loss26Out differs: total %.17g vs %.17g", o1.total, o2.total);
    CHECK(memcmp(g1, g2, n * sizeof(float)) == 0, "gradients differ between runs");
    CHECK(o1.br[0].n_fg > 0 && o1.br[1].n_fg > 0, "no foreground: %d %d", o1.br[0].n_fg, o1.br[1].n_fg);
    // gradients not asked for: the same items
    Loss26Out o3;
    double tss[L26_BRANCHES] = { o1.br[0].tss, o1.br[1].tss };
    loss26_compute_gpu(&dev, gw, &s.db, &wt, tss, s.N, NULL, &o3);
    CHECK(same_out(&o1, &o3), "without gradients: total %.17g vs %.17g", o3.total, o1.total);
    size_t allocs = gpu_alloc_count(), free0, free1, total;
    checkCuda(cudaMemGetInfo(&free0, &total));
    double t0 = now_seconds();
    for (int k = 0; k < 3; k++) step(&s, gw, &wt, &o2);
    double t1 = now_seconds();
    checkCuda(cudaMemGetInfo(&free1, &total));
    CHECK(gpu_alloc_count() == allocs && free1 == free0, "step calls allocated: %zu cudaMallocs, %zd bytes",
          gpu_alloc_count() - allocs, (ssize_t)(free0 - free1));
    printf("    B=8 640x640 (8400 anchors, %d targets, nc 80, fg %d / %d): assign + loss and gradients of both "
           "branches %.2f ms\n", G, o2.br[0].n_fg, o2.br[1].n_fg, 1e3 * (t1 - t0) / 3);
    free(g1);
    free(g2);
    loss26_work_free_gpu(gw);
    scene_free(&s);
}

GPU_MAIN()
#endif
