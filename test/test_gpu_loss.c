// test_gpu_loss.c: the CUDA loss (gpu/loss.cu) against the CPU twin (core/spec/loss.c) on random batches
// (assignment, items, every gradient), the gelan-s reference step, determinism, no allocation in the
// step calls, and the time of a B=64 640x640 step. Without CUDA, or without a GPU, every test skips.
// Legend: N batch, A anchors, G targets, nc classes, C = 4R + nc channels, ld pixel stride.
#include "core/spec/loss.h"
#include "io/safetensors.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/loss.h"
#endif

#define GPU_TESTS(X) X(test_random_cases) X(test_bad_rows) X(test_fixture) X(test_deterministic) \
    X(test_no_alloc_and_speed)

#include "test/gpu_harness.h"
#ifdef USE_CUDA

#define R LOSS_REG_MAX
static const float GUARD = -777.0f;   // the pad channels [C, ld) of gradient maps; must survive

// ---- a batch on the host and on the device ------------------------------------------------------
// Batch: head and gradient maps (N, H_l, W_l, C) with ld = C + extra, on the host (h) and the device
// (d); hb and db are the same LossBatch over host and device maps, sharing the host targets.
typedef struct {
    float *h[LOSS_LEVELS], *hg[LOSS_LEVELS], *d[LOSS_LEVELS], *dg[LOSS_LEVELS];
    size_t n[LOSS_LEVELS];   // floats per level, pads included
    Map hgrad[LOSS_LEVELS], dgrad[LOSS_LEVELS];
    LossBatch hb, db;
    float targets[64 * 6];
} Batch;

static void batch_new(Batch *b, int N, int img, int nc, int extra) {
    memset(b, 0, sizeof *b);
    int C = 4 * R + nc, ld = C + extra;
    for (int l = 0; l < LOSS_LEVELS; l++) {
        int H = img >> (3 + l);
        b->n[l] = (size_t)N * H * H * ld;
        b->h[l] = xmalloc(b->n[l] * sizeof(float));
        b->hg[l] = xmalloc(b->n[l] * sizeof(float));
        checkCuda(cudaMalloc((void **)&b->d[l], b->n[l] * sizeof(float)));
        checkCuda(cudaMalloc((void **)&b->dg[l], b->n[l] * sizeof(float)));
        Map m = { NULL, N, H, H, C, ld, 0, 0 };
        m.data = b->h[l];  b->hb.head[l] = m;
        m.data = b->d[l];  b->db.head[l] = m;
        m.data = b->hg[l]; b->hgrad[l] = m;
        m.data = b->dg[l]; b->dgrad[l] = m;
    }
    b->hb.nc = b->db.nc = nc;
    b->hb.img_h = b->hb.img_w = b->db.img_h = b->db.img_w = img;
    b->hb.targets = b->db.targets = b->targets;
}

static void batch_free(Batch *b) {
    for (int l = 0; l < LOSS_LEVELS; l++) {
        free(b->h[l]); free(b->hg[l]);
        checkCuda(cudaFree(b->d[l])); checkCuda(cudaFree(b->dg[l]));
    }
}

// the host maps to the device, and GUARD into every device gradient element
static void batch_upload(Batch *b) {
    for (int l = 0; l < LOSS_LEVELS; l++) {
        checkCuda(cudaMemcpy(b->d[l], b->h[l], b->n[l] * sizeof(float), cudaMemcpyHostToDevice));
        for (size_t i = 0; i < b->n[l]; i++) b->hg[l][i] = GUARD;
        checkCuda(cudaMemcpy(b->dg[l], b->hg[l], b->n[l] * sizeof(float), cudaMemcpyHostToDevice));
    }
}

// logits as the CPU tests use: box logits ~ 1.5 N(0,1), class logits ~ N(-1, 1); pads are GUARD
static void batch_random(Batch *b, Rng *r) {
    for (int l = 0; l < LOSS_LEVELS; l++) {
        Map m = b->hb.head[l];
        for (size_t i = 0; i < b->n[l]; i++) {
            int c = (int)(i % m.ld);
            b->h[l][i] = c >= m.C ? GUARD : (float)(c < 4 * R ? 1.5 * rng_normal(r) : rng_normal(r) - 1);
        }
    }
}

static void set_targets(Batch *b, int n) { b->hb.n_targets = b->db.n_targets = n; }

// ---- random targets ---------------------------------------------------------------------------
// One target row of a random kind: ordinary, smaller than a cell, across the border, or a copy of
// the previous row (jittered, or identical with another class) so that gts share anchors.
static void random_row(float *t, const float *prev, int img_idx, int nc, int img, Rng *r) {
    int kind = prev ? rng_int(r, 5) : rng_int(r, 3);
    double w = rng_uniform(r, 0.05, 0.6), h = rng_uniform(r, 0.05, 0.6);
    double cx = rng_uniform(r, w / 2, 1 - w / 2), cy = rng_uniform(r, h / 2, 1 - h / 2);
    if (kind == 1) { w = rng_uniform(r, 1, 7) / img; h = rng_uniform(r, 1, 7) / img; }
    if (kind == 2) { cx = rng_int(r, 2) ? 0.02 : 0.98; cy = rng_uniform(r, 0, 1); }
    if (kind >= 3) {
        double j = kind == 3 ? 4.0 / img : 0;
        cx = prev[2] + rng_uniform(r, -j, j); cy = prev[3] + rng_uniform(r, -j, j);
        w = prev[4] + rng_uniform(r, -j, j); h = prev[5] + rng_uniform(r, -j, j);
        img_idx = (int)prev[0];
    }
    t[0] = (float)img_idx; t[1] = (float)rng_int(r, nc);
    t[2] = (float)cx; t[3] = (float)cy; t[4] = (float)fabs(w); t[5] = (float)fabs(h);
}

// 0..40 rows over images 0..N-2 (the last image has none); case 0 of every 5 has none at all
static int random_targets(Batch *b, int N, int nc, int img, int index, Rng *r) {
    int n = index % 5 == 0 ? 0 : rng_int(r, 41);
    for (int i = 0; i < n; i++)
        random_row(b->targets + 6 * i, i ? b->targets + 6 * (i - 1) : NULL, rng_int(r, N - 1), nc, img, r);
    set_targets(b, n);
    return n;
}

// ---- CPU vs GPU -------------------------------------------------------------------------------
typedef struct { double item_rel, grad_rel; int cells, cases; } Worst;

static double rel_err(double got, double ref) { return fabs(got - ref) / fmax(fabs(ref), 1e-300); }

// gradients: every element within rtol 1e-4 / atol 1e-6 max|cpu|, pads still GUARD
static void compare_grads(Batch *b, const char *what, Worst *worst) {
    for (int l = 0; l < LOSS_LEVELS; l++) {
        float *got = xmalloc(b->n[l] * sizeof(float));
        checkCuda(cudaMemcpy(got, b->dg[l], b->n[l] * sizeof(float), cudaMemcpyDeviceToHost));
        Map m = b->hgrad[l];
        double gmax = 0;
        for (size_t i = 0; i < b->n[l]; i++) if ((int)(i % m.ld) < m.C) gmax = fmax(gmax, fabs(b->hg[l][i]));
        int bad = 0, pads = 0;
        for (size_t i = 0; i < b->n[l]; i++) {
            if ((int)(i % m.ld) >= m.C) { pads += got[i] != GUARD; continue; }
            double ref = b->hg[l][i], err = fabs(got[i] - ref);
            worst->grad_rel = fmax(worst->grad_rel, err / (1e-6 * gmax + 1e-4 * fabs(ref) + 1e-300));
            if (!close_enough(got[i], ref, 1e-6 * gmax, 1e-4) && bad++ < 3)
                CHECK(0, "%s P%d element %zu (pixel %zu, channel %zu): gpu %.9g cpu %.9g (max %.3g)", what,
                      l + 3, i, i / m.ld, i % m.ld, got[i], ref, gmax);
        }
        CHECK(bad == 0 && pads == 0, "%s P%d: %d gradients off, %d pad values overwritten", what, l + 3, bad, pads);
        free(got);
    }
}

// items, total, tss and n_fg
static void compare_out(const LossOut *g, const LossOut *c, const char *what, Worst *worst) {
    const double got[4] = { g->box, g->cls, g->dfl, g->total }, ref[4] = { c->box, c->cls, c->dfl, c->total };
    const char *name[4] = { "box", "cls", "dfl", "total" };
    for (int k = 0; k < 4; k++) {
        worst->item_rel = fmax(worst->item_rel, ref[k] == 0 ? fabs(got[k]) : rel_err(got[k], ref[k]));
        CHECK(close_enough(got[k], ref[k], 1e-12, 1e-6), "%s %s: gpu %.12g cpu %.12g", what, name[k], got[k], ref[k]);
    }
    CHECK(close_enough(g->tss, c->tss, 1e-12, 1e-6) && g->n_fg == c->n_fg, "%s tss %.12g / %.12g, fg %d / %d",
          what, g->tss, c->tss, g->n_fg, c->n_fg);
}

// the whole comparison for the batch as it stands: assignment, tss, LossOut, gradients
static void compare_case(Batch *b, GpuLossWork *gw, const char *what, Worst *worst) {
    LossWork *cw = loss_work_new();
    Err err = {{0}};
    double tss_c, tss_g;
    CHECK(loss_assign(cw, &b->hb, &tss_c, &err) == 0, "%s cpu: %s", what, err.msg);
    CHECK(loss_assign_gpu(&dev, gw, &b->db, &tss_g, &err) == 0, "%s gpu: %s", what, err.msg);
    CHECK(close_enough(tss_g, tss_c, 1e-12, 1e-6), "%s tss gpu %.12g cpu %.12g", what, tss_g, tss_c);
    int N = b->hb.head[0].N, A = 0, bad = 0;
    for (int l = 0; l < LOSS_LEVELS; l++) A += b->hb.head[l].H * b->hb.head[l].W;
    int *row = xmalloc((size_t)N * A * sizeof(int));
    double *score = xmalloc((size_t)N * A * sizeof(double));
    loss_targets_gpu(&dev, gw, row, score);
    for (int i = 0; i < N * A; i++) {
        double sc;
        int rc = loss_target(cw, i / A, i % A, &sc);
        if ((rc != row[i] || !close_enough(score[i], sc, 1e-12, 1e-6)) && bad++ < 3)
            CHECK(0, "%s image %d anchor %d: gpu row %d score %.12g, cpu row %d score %.12g", what, i / A, i % A,
                  row[i], score[i], rc, sc);
    }
    CHECK(bad == 0, "%s: %d of %d anchors assigned differently", what, bad, N * A);
    LossOut oc, og;
    loss_compute(cw, &b->hb, fmax(tss_c, 1), N, b->hgrad, &oc);
    loss_compute_gpu(&dev, gw, &b->db, fmax(tss_g, 1), N, b->dgrad, &og);
    compare_out(&og, &oc, what, worst);
    compare_grads(b, what, worst);
    worst->cells += N * A;
    worst->cases++;
    free(row);
    free(score);
    loss_work_free(cw);
}

// ---- tests ------------------------------------------------------------------------------------
static void test_random_cases(void) {
    NEED_GPU();
    GpuLossWork *gw = loss_work_new_gpu(&dev, 4, 64, 80, 8400);
    CHECK(gw != NULL, "loss_work_new_gpu");
    if (!gw) return;
    Rng r = rng_for(21, 0, 0);
    Worst worst = { 0, 0, 0, 0 };
    for (int k = 0; k < 24; k++) {
        int N = 2 + rng_int(&r, 3), img = 64 + 32 * rng_int(&r, 9), nc = 3 + rng_int(&r, 78);
        if (k == 23) { N = 2; img = 640; }   // 8400 anchors: the top-k scans 33 chunks
        Batch b;
        batch_new(&b, N, img, nc, k % 3 == 1 ? 3 : 0);
        batch_random(&b, &r);
        int G = random_targets(&b, N, nc, img, k, &r);
        batch_upload(&b);
        char what[96];
        snprintf(what, sizeof what, "case %d (N %d, %dpx, nc %d, %d targets)", k, N, img, nc, G);
        compare_case(&b, gw, what, &worst);
        batch_free(&b);
    }
    printf("    %d cases, %d anchors: worst item error %.2e (relative), worst gradient error %.2e of its "
           "tolerance\n", worst.cases, worst.cells, worst.item_rel, worst.grad_rel);
    loss_work_free_gpu(gw);
}

static void test_bad_rows(void) {
    NEED_GPU();
    GpuLossWork *gw = loss_work_new_gpu(&dev, 2, 2, 3, 84);
    Batch b;
    batch_new(&b, 2, 64, 3, 0);
    Rng r = rng_for(22, 0, 0);
    batch_random(&b, &r);
    batch_upload(&b);
    float *t = b.targets;
    const float row[6] = { 1, 2, 0.5f, 0.5f, 0.3f, 0.3f };
    memcpy(t, row, sizeof row);
    set_targets(&b, 1);
    Err err = {{0}};
    LossOut o;
    CHECK(loss_forward_backward_gpu(&dev, gw, &b.db, b.dgrad, &o, &err) == 0, "%s", err.msg);
    t[1] = 3;
    CHECK(loss_forward_backward_gpu(&dev, gw, &b.db, b.dgrad, &o, &err) == -1 && strstr(err.msg, "class"),
          "class 3 of 3: %s", err.msg);
    t[1] = 0; t[0] = 2;
    CHECK(loss_forward_backward_gpu(&dev, gw, &b.db, b.dgrad, &o, &err) == -1 && strstr(err.msg, "image"),
          "image 2 of 2: %s", err.msg);
    t[0] = 0; t[2] = NAN;
    CHECK(loss_forward_backward_gpu(&dev, gw, &b.db, b.dgrad, &o, &err) == -1 && strstr(err.msg, "non-finite"),
          "NaN: %s", err.msg);
    t[2] = 0.5f;
    memcpy(t + 6, row, sizeof row);
    memcpy(t + 12, row, sizeof row);
    set_targets(&b, 3);
    CHECK(loss_forward_backward_gpu(&dev, gw, &b.db, b.dgrad, &o, &err) == -1 && strstr(err.msg, "exceed"),
          "3 targets in a work for 2: %s", err.msg);
    batch_free(&b);
    loss_work_free_gpu(gw);
}

// ---- the reference step -----------------------------------------------------------------------
// json_number: number `index` of the value (a number or an array) after "key":, NAN if absent
static double json_number(const char *text, const char *key, int index) {
    const char *p = strstr(text, key);
    if (!p || !(p = strchr(p, ':'))) return NAN;
    p++;
    while (*p == ' ' || *p == '\n' || *p == '[') p++;
    for (int i = 0; i < index && p; i++) if ((p = strchr(p, ','))) p++;
    return p ? strtod(p, NULL) : NAN;
}

static int read_text(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = 0;
    fclose(f);
    return 0;
}

// a (N, C, H, W) fixture tensor into the batch's NHWC host map of level l
static int load_head(const SafeTensors *st, const char *name, Batch *b, int l, Err *err) {
    Map m = b->hb.head[l];
    const StTensor *t = st_find(st, name);
    if (!t || t->ndim != 4 || t->shape[0] != m.N || t->shape[1] != m.C || t->shape[2] != m.H || t->shape[3] != m.W)
        return err_set(err, "%s missing or not (%d, %d, %d, %d)", name, m.N, m.C, m.H, m.W);
    size_t n = st_numel(t);
    float *nchw = xmalloc(n * sizeof(float));
    int rc = st_read_f32(st, name, nchw, n, err);
    for (size_t i = 0; i < n && !rc; i++) {
        size_t x = i % m.W, y = i / m.W % m.H, c = i / ((size_t)m.W * m.H) % m.C, k = i / ((size_t)m.W * m.H * m.C);
        map_at(m, (int)k, (int)y, (int)x)[c] = nchw[i];
    }
    free(nchw);
    return rc;
}

static void test_fixture(void) {
    NEED_GPU();
    const char *dir = shared_dir();
    if (!dir) SKIP("no shared folder (set YT_SHARED)");
    char path[4200], text[4096];
    snprintf(path, sizeof path, "%s/fixtures/gelan_s_step.json", dir);
    if (read_text(path, text, sizeof text)) SKIP("fixtures/gelan_s_step.json is absent");
    snprintf(path, sizeof path, "%s/fixtures/gelan_s_step.safetensors", dir);
    SafeTensors st;
    Err err = {{0}};
    if (access(path, R_OK) != 0) SKIP("fixtures/gelan_s_step.safetensors is absent");
    if (st_open(path, &st, &err)) { CHECK(0, "%s", err.msg); return; }
    Batch b;
    batch_new(&b, 4, 256, 80, 0);
    const char *names[LOSS_LEVELS] = { "output/p3", "output/p4", "output/p5" };
    int ok = 1;
    for (int l = 0; l < LOSS_LEVELS && ok; l++) ok = load_head(&st, names[l], &b, l, &err) == 0;
    const StTensor *tt = st_find(&st, "input/targets");
    ok = ok && tt && tt->ndim == 2 && tt->shape[1] == 6 && tt->shape[0] <= 64;
    ok = ok && st_read_f32(&st, "input/targets", b.targets, st_numel(tt), &err) == 0;
    CHECK(ok, "fixture tensors: %s", err.msg);
    if (ok) {
        set_targets(&b, (int)tt->shape[0]);
        batch_upload(&b);
        GpuLossWork *gw = loss_work_new_gpu(&dev, 4, 64, 80, 8400);
        LossOut o;
        CHECK(loss_forward_backward_gpu(&dev, gw, &b.db, b.dgrad, &o, &err) == 0, "%s", err.msg);
        const double got[4] = { o.total, o.box, o.cls, o.dfl };
        const char *name[4] = { "total", "box", "cls", "dfl" };
        for (int k = 0; k < 4; k++) {
            double ref = k ? json_number(text, "\"loss_items_box_cls_dfl\"", k - 1)
                           : json_number(text, "\"loss_total\"", 0);
            CHECK(close_enough(got[k], ref, 0, 1e-5), "%s %.12f vs json %.12f", name[k], got[k], ref);
            printf("    gelan-s step %s: gpu %.12f, json %.12f (rel %.1e)\n", name[k], got[k], ref,
                   rel_err(got[k], ref));
        }
        Worst worst = { 0, 0, 0, 0 };
        compare_case(&b, gw, "fixture", &worst);
        printf("    fixture vs CPU twin: worst item error %.2e, worst gradient error %.2e of its tolerance\n",
               worst.item_rel, worst.grad_rel);
        loss_work_free_gpu(gw);
    }
    batch_free(&b);
    st_close(&st);
}

// ---- determinism, allocation, speed -----------------------------------------------------------
static float *download_grads(Batch *b) {
    size_t total = b->n[0] + b->n[1] + b->n[2], off = 0;
    float *g = xmalloc(total * sizeof(float));
    for (int l = 0; l < LOSS_LEVELS; off += b->n[l], l++)
        checkCuda(cudaMemcpy(g + off, b->dg[l], b->n[l] * sizeof(float), cudaMemcpyDeviceToHost));
    return g;
}

static void test_deterministic(void) {
    NEED_GPU();
    Rng r = rng_for(23, 0, 0);
    Batch b;
    batch_new(&b, 4, 320, 80, 0);
    batch_random(&b, &r);
    for (int i = 0; i < 40; i++)
        random_row(b.targets + 6 * i, i ? b.targets + 6 * (i - 1) : NULL, rng_int(&r, 4), 80, 320, &r);
    set_targets(&b, 40);
    batch_upload(&b);
    GpuLossWork *gw = loss_work_new_gpu(&dev, 4, 64, 80, 2100);
    LossOut o1, o2;
    Err err = {{0}};
    CHECK(loss_forward_backward_gpu(&dev, gw, &b.db, b.dgrad, &o1, &err) == 0, "%s", err.msg);
    float *g1 = download_grads(&b);
    for (int l = 0; l < LOSS_LEVELS; l++) checkCuda(cudaMemset(b.dg[l], 0, b.n[l] * sizeof(float)));
    CHECK(loss_forward_backward_gpu(&dev, gw, &b.db, b.dgrad, &o2, &err) == 0, "%s", err.msg);
    float *g2 = download_grads(&b);
    // field by field: the struct's padding is not part of the answer
    int same = o1.n_fg == o2.n_fg;
    const double a[5] = { o1.box, o1.cls, o1.dfl, o1.total, o1.tss };
    const double c[5] = { o2.box, o2.cls, o2.dfl, o2.total, o2.tss };
    CHECK(same && memcmp(a, c, sizeof a) == 0, "LossOut differs: total %.17g vs %.17g", o1.total, o2.total);
    CHECK(memcmp(g1, g2, (b.n[0] + b.n[1] + b.n[2]) * sizeof(float)) == 0, "gradients differ between runs");
    CHECK(o1.n_fg > 0, "no foreground");
    free(g1);
    free(g2);
    loss_work_free_gpu(gw);
    batch_free(&b);
}

// B=64 at 640 (8400 anchors), 8 targets per image, nc=80: three steps allocate nothing; then timed.
static void test_no_alloc_and_speed(void) {
    NEED_GPU();
    enum { N = 64, G = 8 * N };
    Rng r = rng_for(24, 0, 0);
    Batch b;
    batch_new(&b, 1, 640, 80, 0);   // maps for N=1 set up the shapes; the data are N images
    float *targets = xmalloc(G * 6 * sizeof(float));
    LossBatch lb = b.db;
    Map grad[LOSS_LEVELS];
    float *d[LOSS_LEVELS], *dg[LOSS_LEVELS];
    for (int l = 0; l < LOSS_LEVELS; l++) {
        size_t n = b.n[l] * N;
        float *h = xmalloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) h[i] = (float)rng_uniform(&r, -3, 3);
        checkCuda(cudaMalloc((void **)&d[l], n * sizeof(float)));
        checkCuda(cudaMalloc((void **)&dg[l], n * sizeof(float)));
        checkCuda(cudaMemcpy(d[l], h, n * sizeof(float), cudaMemcpyHostToDevice));
        free(h);
        lb.head[l].data = d[l]; lb.head[l].N = N;
        grad[l] = lb.head[l]; grad[l].data = dg[l];
    }
    for (int i = 0; i < G; i++)
        random_row(targets + 6 * i, i ? targets + 6 * (i - 1) : NULL, i % N, 80, 640, &r);
    lb.targets = targets;
    lb.n_targets = G;
    GpuLossWork *gw = loss_work_new_gpu(&dev, N, G, 80, 8400);
    Err err = {{0}};
    LossOut o;
    CHECK(loss_forward_backward_gpu(&dev, gw, &lb, grad, &o, &err) == 0, "%s", err.msg);   // warm-up
    size_t allocs = gpu_alloc_count(), free0, free1, total;
    checkCuda(cudaMemGetInfo(&free0, &total));
    double t0 = now_seconds(), tss = 0;
    for (int k = 0; k < 3; k++) CHECK(loss_forward_backward_gpu(&dev, gw, &lb, grad, &o, &err) == 0, "%s", err.msg);
    double t1 = now_seconds();
    for (int k = 0; k < 10; k++) CHECK(loss_assign_gpu(&dev, gw, &lb, &tss, &err) == 0, "%s", err.msg);
    double t2 = now_seconds();
    for (int k = 0; k < 10; k++) loss_compute_gpu(&dev, gw, &lb, fmax(tss, 1), N, grad, &o);
    double t3 = now_seconds();
    checkCuda(cudaMemGetInfo(&free1, &total));
    CHECK(gpu_alloc_count() == allocs && free1 == free0, "step calls allocated: %zu cudaMallocs, %zd bytes",
          gpu_alloc_count() - allocs, (ssize_t)(free0 - free1));
    CHECK(isfinite(o.total) && o.n_fg > 0, "total %g fg %d", o.total, o.n_fg);
    printf("    B=%d 640x640 (8400 anchors, %d targets, nc 80, %d fg): step %.2f ms (assign %.2f ms + "
           "loss and gradients %.2f ms)\n", N, G, o.n_fg, 1e3 * (t1 - t0) / 3, 1e2 * (t2 - t1), 1e2 * (t3 - t2));
    loss_work_free_gpu(gw);
    for (int l = 0; l < LOSS_LEVELS; l++) { checkCuda(cudaFree(d[l])); checkCuda(cudaFree(dg[l])); }
    free(targets);
    batch_free(&b);
}

GPU_MAIN()
#endif
