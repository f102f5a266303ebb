// test_gpu_musgd.c: gpu/musgd.h against core/spec/musgd.h: Newton-Schulz alone on several shapes, three
// MuSGD steps on a model-like parameter set, three AdamW and three Adam steps (bit for bit); gradients zeroed, no
// allocation. Without CUDA in the build, or without a GPU, every test is a skip.
// Legend: n floats of a tensor; r x c a Muon matrix view; k matrices of one Newton-Schulz call.
//
// Exact where the GEMMs cannot differ: the GPU rounds every tensor result to bf16 where the CPU
// does, and only the order of a GEMM's fp32 sums differs. A "sparse" matrix, at most one nonzero
// per row and per column, keeps every Newton-Schulz product a sum of one nonzero term (X X^T and B
// are diagonal), exact in any order: on it, and on a whole step whose Muon gradients have that
// support, GPU and CPU must agree bit for bit (zeros up to sign). Elementwise parts always must.
//
// Tolerance on dense matrices: a sum that lands near a bf16 rounding boundary may round the other
// way, and the flip propagates through the five iterations. Measured on the CPU by re-running
// musgd_newton_schulz with the GEMM sums reversed, in fp64, and in blocks of 32 (12 random inputs
// a shape, 36 runs): 36x36, 48x9, 16x27, 48x16 always identical; 64x32, 80x32, 37x300, 300x37 differ
// in 2-4 runs of 36, 120x576 and 128x576 in 35; then max |dX| up to 4.9% of max|X|, mean |dX| up to
// 5.1e-3 of max|X|, up to 77% of the entries. Bounds: 3x those (MAX_REL, MEAN_REL). A step moves a
// weight by lr*muon*X, so the weights get the same bounds on D = sum over steps of lr*muon*max|X|,
// read off a CPU twin with sgd = 0 (its weights move by the Muon update alone; X ignores w).
#include "core/spec/musgd.h"
#include "core/base/util.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/musgd.h"
#endif

#define GPU_TESTS(X) X(test_newton_schulz) X(test_musgd_steps_sparse) X(test_musgd_steps_dense) \
    X(test_adamw_steps) X(test_adam_steps)

#define GPU_ARENAS { 0, 0, (size_t)1 << 20, (size_t)64 << 20, (size_t)64 << 20 }
#include "test/gpu_harness.h"
#ifdef USE_CUDA

static const double MAX_REL = 0.15, MEAN_REL = 0.015;  // of max|X| (or D): see the header
static const double WD = 5e-4;                         // weight decay of every step

// ---- host/device copies (the device: test/gpu_harness.h) ------------------------------------

// Every copy goes on dev.stream (non-blocking: plain cudaMemcpy would not wait for its kernels).
static void copy_floats(float *dst, const float *src, size_t n, enum cudaMemcpyKind kind) {
    checkCuda(cudaMemcpyAsync(dst, src, n * sizeof(float), kind, dev.stream));
    device_sync(&dev);
}

static float *dev_floats(size_t n) { return arena_take(&dev.acts, (n ? n : 1) * sizeof(float), 256); }

static float *to_dev(const float *h, size_t n) {
    float *d = dev_floats(n);
    copy_floats(d, h, n, cudaMemcpyHostToDevice);
    return d;
}

static float *dev_zeros(size_t n) {
    float *d = dev_floats(n);
    checkCuda(cudaMemsetAsync(d, 0, (n ? n : 1) * sizeof(float), dev.stream));
    return d;
}

static float *from_dev(const float *d, size_t n) {
    float *h = xmalloc((n ? n : 1) * sizeof(float));
    copy_floats(h, d, n, cudaMemcpyDeviceToHost);
    return h;
}

// n device floats against the host reference, bit for bit
static void check_same(const char *what, size_t n, const float *d, const float *ref) {
    float *got = from_dev(d, n);
    size_t j = 0;
    while (j < n && memcmp(&got[j], &ref[j], sizeof(float)) == 0) j++;
    CHECK(j == n, "%s (n %zu): first difference at [%zu]: gpu %.9g cpu %.9g", what, n, j,
          j < n ? got[j] : 0.0f, j < n ? ref[j] : 0.0f);
    free(got);
}

// n device floats against the host reference: max |d| <= MAX_REL*scale + atol and mean |d| <=
// MEAN_REL*scale + atol; prints the measured ratios and the share of identical entries.
static void check_near(const char *what, size_t n, const float *d, const float *ref, double scale,
                       double atol) {
    float *got = from_dev(d, n);
    double worst = 0, sum = 0;
    size_t at = 0, same = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (e > worst || isnan(e)) { worst = isnan(e) ? INFINITY : e; at = i; }
        sum += e;
        same += memcmp(&got[i], &ref[i], sizeof(float)) == 0;
    }
    double mean = n ? sum / n : 0;
    CHECK(worst <= MAX_REL * scale + atol && mean <= MEAN_REL * scale + atol,
          "%s (n %zu): max |gpu-cpu| %.3g at [%zu] (gpu %.9g cpu %.9g), mean %.3g; scale %.3g", what, n,
          worst, at, got[at], ref[at], mean, scale);
    printf("# %-40s max %.3g, mean %.3g of scale %.3g; %.0f%% identical\n", what, worst / scale,
           mean / scale, scale, n ? 100.0 * same / n : 100.0);
    free(got);
}

static int all_zero(const float *d, size_t n) {
    float *h = from_dev(d, n);
    size_t i = 0;
    while (i < n && h[i] == 0.0f && !signbit(h[i])) i++;
    free(h);
    return i == n;
}

static double max_abs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
    return m;
}

// ---- Newton-Schulz alone --------------------------------------------------------------------

// n device floats equal to the host reference as numbers (-0 == +0: zero sums may differ in sign)
static void check_values(const char *what, size_t n, const float *d, const float *ref) {
    float *got = from_dev(d, n);
    size_t j = 0;
    while (j < n && got[j] == ref[j]) j++;
    CHECK(j == n, "%s (n %zu): first difference at [%zu]: gpu %.9g cpu %.9g", what, n, j,
          j < n ? got[j] : 0.0f, j < n ? ref[j] : 0.0f);
    free(got);
}

// g (rows, cols) = 0 but for at most one value a row and a column, at places drawn from `where`
// (the same places for the same stream) and values from `values`, times `scale`
static void sparse_fill(float *g, int rows, int cols, Rng *where, Rng *values, double scale) {
    int *pr = xmalloc(sizeof(int) * rows), *pc = xmalloc(sizeof(int) * cols);
    for (int i = 0; i < rows; i++) pr[i] = i;
    for (int i = 0; i < cols; i++) pc[i] = i;
    for (int i = rows - 1; i > 0; i--) { int t = rng_int(where, i + 1), x = pr[i]; pr[i] = pr[t]; pr[t] = x; }
    for (int i = cols - 1; i > 0; i--) { int t = rng_int(where, i + 1), x = pc[i]; pc[i] = pc[t]; pc[t] = x; }
    memset(g, 0, sizeof(float) * rows * cols);
    for (int t = 0; t < rows && t < cols; t++)
        if (t % 7 != 6) g[(size_t)pr[t] * cols + pc[t]] = (float)(rng_normal(values) * scale);   // some empty
    free(pr); free(pc);
}

static void ns_case(int r, int c, int k, int sparse, Rng *g) {
    size_t rc = (size_t)r * c, n = rc * k;
    float *G = xmalloc(n * sizeof(float)), *X = xmalloc(n * sizeof(float));
    float *ws = xmalloc(musgd_ns_workspace_floats(r, c) * sizeof(float));
    for (int j = 0; j < k; j++) {
        if (sparse) sparse_fill(G + j * rc, r, c, g, g, 1 + j);
        else for (size_t i = 0; i < rc; i++) G[j * rc + i] = (float)(rng_normal(g) * (1 + j));
        musgd_newton_schulz(G + j * rc, r, c, 1, X + j * rc, ws);
    }
    size_t mark = dev.acts.used, scratch = dev.scratch.used;
    float *dG = to_dev(G, n), *dX = dev_floats(n);
    CHECK(musgd_ns_scratch_bytes_gpu(r, c, k) <= dev.scratch.size - scratch, "scratch plan");
    musgd_newton_schulz_gpu(&dev, dG, r, c, k, dX);
    CHECK(dev.scratch.used == scratch, "scratch given back: %zu, was %zu", dev.scratch.used, scratch);
    for (int j = 0; j < k; j++) {
        char what[64];
        snprintf(what, sizeof what, "NS %s %dx%d (%d of %d)", sparse ? "sparse" : "dense", r, c, j + 1, k);
        if (sparse) check_values(what, rc, dX + j * rc, X + j * rc);
        else check_near(what, rc, dX + j * rc, X + j * rc, max_abs(X + j * rc, rc), 0.0);
    }
    float *first = from_dev(dX, n);   // the same call again: the same bits
    musgd_newton_schulz_gpu(&dev, dG, r, c, k, dX);
    check_same("NS repeated", n, dX, first);
    dev.acts.used = mark;
    free(G); free(X); free(ws); free(first);
}

static void test_newton_schulz(void) {
    NEED_GPU();
    Rng g = rng_for(81, 0, 0);
    const int shapes[][3] = { { 8, 20, 1 }, { 20, 8, 1 }, { 7, 7, 1 }, { 16, 27, 1 }, { 64, 32, 1 },
                              { 36, 36, 3 }, { 37, 300, 1 }, { 300, 37, 2 }, { 256, 1152, 1 } };
    for (int sparse = 1; sparse >= 0; sparse--)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            ns_case(shapes[s][0], shapes[s][1], shapes[s][2], sparse, &g);
}

// ---- a model-like parameter set -----------------------------------------------------------------

static int is_muon_group(int g) { return g >= MU_MUON_HI; }

typedef struct { const char *name; int ndim, shape[4], is_norm; } Spec;
static const Spec MODEL[] = {
    { "model.0.conv.weight", 4, { 16, 3, 3, 3 }, 0 },              // 16 x 27
    { "model.0.bn.weight", 1, { 16 }, 1 },
    { "model.0.bn.bias", 1, { 16 }, 1 },
    { "model.1.conv.weight", 4, { 64, 32, 1, 1 }, 0 },             // 64 x 32: r > c, transposed
    { "model.2.cv1.conv.weight", 4, { 32, 16, 3, 3 }, 0 },         // 32 x 144: three of this shape,
    { "model.2.cv2.conv.weight", 4, { 32, 16, 3, 3 }, 0 },         //   one NS batch across groups
    { "model.4.conv.weight", 4, { 36, 4, 3, 3 }, 0 },              // 36 x 36
    { "model.5.dw.conv.weight", 4, { 48, 1, 3, 3 }, 0 },           // depthwise 48 x 9
    { "model.6.conv.weight", 4, { 120, 64, 3, 3 }, 0 },            // 120 x 576: sums round
    { "model.10.attn.proj.weight", 2, { 48, 16 }, 0 },             // shape_scale sqrt(3)
    { "model.10.attn.scale", 1, { 5 }, 0 },                        // a decayed plain weight
    { "model.23.cv3.0.0.0.conv.weight", 4, { 32, 16, 3, 3 }, 0 },  // muon-hi
    { "model.23.cv3.0.0.0.bn.weight", 1, { 32 }, 1 },              // bn-hi
    { "model.23.cv3.0.2.bias", 1, { 80 }, 0 },                     // bias-hi
    { "model.23.cv3.0.2.weight", 4, { 80, 32, 1, 1 }, 0 },         // 80 x 32, muon-hi
    { "model.23.one2one_cv3.0.2.scale", 1, { 7 }, 0 },             // weight-hi
};
enum { N_MODEL = sizeof MODEL / sizeof *MODEL, TWINS = 3 };   // twins: CPU, CPU sgd = 0, GPU

typedef struct {
    size_t total, off[N_MODEL];
    float *w[2], *g[2];          // host: the CPU reference and the Muon-only twin
    float *dw, *dg;              // device
    MuParam p[TWINS][N_MODEL];
} Model;

static void model_init(Model *m, int use_muon, Rng *r) {
    m->total = 0;
    for (int k = 0; k < N_MODEL; k++) {
        m->off[k] = m->total;
        size_t n = 1;
        for (int d = 0; d < MODEL[k].ndim; d++) n *= (size_t)MODEL[k].shape[d];
        m->total += n;
    }
    for (int t = 0; t < 2; t++) {
        m->w[t] = xmalloc(m->total * sizeof(float));
        m->g[t] = xcalloc(m->total, sizeof(float));
    }
    for (size_t i = 0; i < m->total; i++) m->w[0][i] = m->w[1][i] = (float)rng_uniform(r, -0.5, 0.5);
    m->dw = to_dev(m->w[0], m->total);
    m->dg = dev_zeros(m->total);
    for (int k = 0; k < N_MODEL; k++) {
        const Spec *s = &MODEL[k];
        int grp = musgd_group(s->name, s->ndim, s->is_norm, use_muon);
        for (int t = 0; t < TWINS; t++) {
            float *w = t < 2 ? m->w[t] : m->dw, *g = t < 2 ? m->g[t] : m->dg;
            m->p[t][k] = musgd_param(w + m->off[k], g + m->off[k], s->shape, s->ndim, grp);
        }
    }
}

static void model_free(Model *m) {
    for (int t = 0; t < 2; t++) { free(m->w[t]); free(m->g[t]); }
}

// A fresh gradient for every twin: uniform, a different scale each step, a few exact zeros; with
// `sparse`, the Muon parameters' gradients keep one sparse support (see the header) every step.
static void model_grads(Model *m, int step, int sparse, Rng *r) {
    for (size_t i = 0; i < m->total; i++)
        m->g[0][i] = i % 17 == 3 ? 0.0f : (float)(rng_uniform(r, -1, 1) * (0.5 + step));
    for (int k = 0; k < N_MODEL && sparse; k++) {
        const MuParam *p = &m->p[0][k];
        Rng where = rng_for(90, (uint64_t)k, 0);
        if (is_muon_group(p->group)) sparse_fill(m->g[0] + m->off[k], p->r, p->c, &where, r, 0.5 + step);
    }
    memcpy(m->g[1], m->g[0], m->total * sizeof(float));
    copy_floats(m->dg, m->g[0], m->total, cudaMemcpyHostToDevice);
}

// The schedule of a warmup: momentum 0.8 -> 0.9, lr rising for weights, falling for biases, x3 on -hi.
static MuStep step_at(int step, int warm) {
    MuStep st = { { 0 }, warm ? 0.8 + 0.05 * step : 0.9, WD };
    for (int g = 0; g < MU_GROUPS; g++) {
        int bias = g == MU_BIAS || g == MU_BIAS_HI;
        double lr = bias && warm ? 0.1 - 0.03 * step : 0.002 + 0.004 * step;
        st.lr[g] = lr * musgd_group_lr_scale(g);
    }
    return st;
}

// ---- MuSGD ------------------------------------------------------------------------------------

// Per Muon parameter, D += lr*muon*max|X| of this step: the Muon-only twin's largest weight change.
static void muon_scale_add(const Model *m, const float *before, double *D) {
    for (int k = 0; k < N_MODEL; k++) {
        const MuParam *p = &m->p[1][k];
        double big = 0;
        for (size_t i = 0; i < p->n; i++) big = fmax(big, fabs(p->w[i] - before[m->off[k] + i]));
        D[k] += big;
    }
}

// Every parameter and state against the CPU: bit for bit, but for Muon weights (and through wd,
// their SGD momenta) on dense gradients, which get the bounds of the header.
static void musgd_compare(const Model *m, const MuSgd *cpu, const float *dm, const float *ds,
                          const double *D, int step, int sparse) {
    float *s_gpu = from_dev(ds, m->total);
    size_t om = 0;
    for (int k = 0; k < N_MODEL; k++) {
        const MuParam *p = &m->p[0][k];
        size_t o = m->off[k];
        char what[96];
        snprintf(what, sizeof what, "%s step %d %s", sparse ? "sparse" : "dense", step, MODEL[k].name);
        if (!is_muon_group(p->group) || sparse) {
            check_same(what, p->n, m->dw + o, p->w);
            CHECK(!memcmp(s_gpu + o, cpu->s + o, p->n * sizeof(float)), "%s: SGD momentum differs", what);
            if (!is_muon_group(p->group)) continue;
        }
        char mom[128];
        snprintf(mom, sizeof mom, "%s Muon momentum", what);
        check_same(mom, p->n, dm + om, cpu->m + om);
        om += p->n;
        if (sparse) continue;
        double big_w = max_abs(p->w, p->n), big_s = max_abs(cpu->s + o, p->n);
        check_near(what, p->n, m->dw + o, p->w, D[k], 5e-7 * big_w);   // + ~4 fp32 ulps
        // s takes wd*w each step: its error stays below steps*wd times the weights' bound
        for (size_t i = 0; i < p->n; i++)
            if (fabs(s_gpu[o + i] - cpu->s[o + i]) > (step + 1) * WD * MAX_REL * D[k] + 1e-6 * big_s) {
                CHECK(0, "%s: SGD momentum [%zu] gpu %.9g cpu %.9g", what, i, s_gpu[o + i], cpu->s[o + i]);
                break;
            }
    }
    CHECK(all_zero(m->dg, m->total), "step %d: gradients not zeroed", step);
    free(s_gpu);
}

static void musgd_run(int sparse) {
    Rng r = rng_for(82, (uint64_t)sparse, 0);
    Model m;
    model_init(&m, 1, &r);
    MuSgd cpu, muon_only;
    musgd_init(&cpu, m.p[0], N_MODEL, 0.2, 1.0);
    musgd_init(&muon_only, m.p[1], N_MODEL, 0.2, 0.0);
    size_t nstate = musgd_state_floats(m.p[2], N_MODEL);
    CHECK(nstate == m.total, "state floats %zu, want %zu", nstate, m.total);
    float *dm = dev_zeros(nstate), *ds = dev_zeros(nstate);
    GpuMuSgd *o = musgd_new_gpu(&dev, &dev.optim, m.p[2], N_MODEL, 0.2, 1.0, dm, ds);
    size_t need = musgd_scratch_bytes_gpu(m.p[2], N_MODEL), scratch = dev.scratch.used;
    CHECK(need > 0 && need <= dev.scratch.size - scratch, "scratch plan %zu bytes", need);
    size_t allocs = gpu_alloc_count();
    double D[N_MODEL] = { 0 };
    float *before = xmalloc(m.total * sizeof(float));
    for (int step = 0; step < 3; step++) {
        MuStep st = step_at(step, 1);
        model_grads(&m, step, sparse, &r);
        memcpy(before, m.w[1], m.total * sizeof(float));
        musgd_step(&cpu, &st);
        musgd_step(&muon_only, &st);
        musgd_step_gpu(&dev, o, &st);
        muon_scale_add(&m, before, D);
        musgd_compare(&m, &cpu, dm, ds, D, step, sparse);
    }
    CHECK(gpu_alloc_count() == allocs, "the steps allocated %zu times", gpu_alloc_count() - allocs);
    CHECK(dev.scratch.used == scratch, "scratch given back: %zu, was %zu", dev.scratch.used, scratch);
    CHECK(D[0] > 1e-4, "the Muon update moved the weights: D %g", D[0]);
    musgd_free_gpu(o);
    musgd_free(&cpu);
    musgd_free(&muon_only);
    free(before);
    model_free(&m);
}

static void test_musgd_steps_sparse(void) {
    NEED_GPU();
    musgd_run(1);
}

static void test_musgd_steps_dense(void) {
    NEED_GPU();
    musgd_run(0);
}

// ---- AdamW and Adam (l2: gelan's optimizer=Adam) -----------------------------------------------

static void adam_run(int l2) {
    Rng r = rng_for(83, 0, 0);
    Model m;
    model_init(&m, 0, &r);
    AdamW cpu;
    adamw_init(&cpu, m.p[0], N_MODEL);
    cpu.l2 = l2;
    float *dm = dev_zeros(m.total), *dv = dev_zeros(m.total);
    GpuMuSgd *o = adamw_new_gpu(&dev, &dev.optim, m.p[2], N_MODEL, dm, dv, l2);
    size_t allocs = gpu_alloc_count(), scratch = dev.scratch.used;
    for (int step = 0; step < 3; step++) {
        MuStep st = step_at(step, 0);
        model_grads(&m, step, 0, &r);
        adamw_step(&cpu, &st);
        musgd_step_gpu(&dev, o, &st);
        char what[64];
        snprintf(what, sizeof what, "%s step %d w", l2 ? "adam" : "adamw", step);
        check_same(what, m.total, m.dw, m.w[0]);
        check_same("adamw m", m.total, dm, cpu.m);
        check_same("adamw v", m.total, dv, cpu.v);
        CHECK(all_zero(m.dg, m.total), "step %d: gradients not zeroed", step);
    }
    CHECK(gpu_alloc_count() == allocs, "the steps allocated %zu times", gpu_alloc_count() - allocs);
    CHECK(dev.scratch.used == scratch, "scratch given back");
    CHECK(musgd_steps_gpu(o) == cpu.steps, "step count %ld, cpu %ld", musgd_steps_gpu(o), cpu.steps);
    musgd_free_gpu(o);
    adamw_free(&cpu);
    model_free(&m);
}

static void test_adamw_steps(void) {
    NEED_GPU();
    adam_run(0);
}

static void test_adam_steps(void) {
    NEED_GPU();
    adam_run(1);
}

GPU_MAIN()
#endif
