// test_grad_plan.c: the plan of the activation gradients (core/spec/grad_plan.c). Writes planned as
// "fresh" (the first into a buffer left unzeroed: the op writes its sum instead of adding it) give
// the gradients of the old plan, where every buffer is zeroed and every write adds
// (YT_GRAD_FRESH=0), to the bit; with the gradient arena filled with NaN before the backward, so a
// read of a channel nothing wrote shows. On gelan-t, yolov9-t (the auxiliary heads of PGI) and
// YOLO26-n (depthwise convs and attention, which only add, and the detached one-to-one head). The new plan
// also puts a residual input's gradient in the buffer of the addition's output gradient (Model.grad_alias);
// the old one has no such aliases (YT_GRAD_ALIAS=0).
#include "test/test.h"

#include "cfg/config.h"
#include "core/spec/backend.h"
#include "core/spec/model.h"
#include "test/model_grads.h"

enum { N = 2, S = 64 };

typedef struct {
    float *grad;         // the parameter gradients after one backward
    size_t n;
    int zeroed;          // buffers the plan zeroes
    int fresh;           // writes it plans as fresh
    int aliases;         // inputs' gradients in their addition's buffer
    size_t n_dact;       // the gradient arena's floats
} Run;

// One training forward and backward of `cfg_path` with random head gradients, under the old plan
// (fresh 0: every buffer zeroed, every write adds) or the new one, with the aliases or without them.
static int run(const char *cfg_path, int fresh, int alias, Run *out) {
    static Config cfg;
    Model m;
    Err err;
    test_switch(SW_GRAD_FRESH, fresh ? "1" : "0");
    test_switch(SW_GRAD_ALIAS, alias ? "1" : "0");
    if (config_load(cfg_path, 0, NULL, &cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    int rc = model_build(&cfg, N, S, &m, &err);
    test_switch(SW_GRAD_FRESH, NULL);
    test_switch(SW_GRAD_ALIAS, NULL);
    if (rc) { printf("    %s\n", err.msg); return -1; }
    model_init_weights(&m, 7);
    size_t n_img = (size_t)N * S * S * 3;
    float *img = xmalloc(n_img * sizeof(float));
    Rng r = rng_for(11, 12, 13);
    for (size_t i = 0; i < n_img; i++) img[i] = (float)rng_uniform(&r, 0, 1);
    for (size_t i = 0; i < m.n_dact; i++) m.dact[i] = NAN;   // what an unplanned read would find
    model_forward(&m, img, N, S, S, 1);                     // zeroes the head maps' gradients
    random_head_grads(&m, N, &r);                          // the loss's part: any gradient will do
    model_zero_grad(&m);
    model_backward(&m, N);
    out->n = m.n_state;
    out->grad = xmalloc(m.n_state * sizeof(float));
    memcpy(out->grad, m.grad, m.n_state * sizeof(float));
    out->zeroed = m.zero_first[m.n_nodes + 1];
    out->fresh = 0;
    out->aliases = m.n_grad_alias;
    out->n_dact = m.n_dact;
    for (int i = 0; i < m.n_nodes; i++)
        for (unsigned b = m.grad_fresh[i]; b; b &= b - 1) out->fresh++;
    free(img);
    model_free(&m);
    return 0;
}

static void same_gradients(const char *cfg_path) {
    Run old, now, zeroed_aliased;
    if (run(cfg_path, 0, 0, &old) || run(cfg_path, 1, 1, &now) || run(cfg_path, 0, 1, &zeroed_aliased)) {
        CHECK(0, "%s: no model", cfg_path);
        return;
    }
    const Run *plans[2] = { &now, &zeroed_aliased };
    for (int k = 0; k < 2; k++) {
        const Run *p = plans[k];
        size_t bad = 0, first = 0, nan = 0;
        for (size_t i = 0; i < old.n; i++) {
            if (isnan(p->grad[i]) || isnan(old.grad[i])) nan++;
            if (!(p->grad[i] == old.grad[i])) { if (!bad) first = i; bad++; }
        }
        const char *what = k ? "zeroed buffers with aliases" : "the new plan";
        CHECK(nan == 0, "%s, %s: %zu NaN gradients (a read of an unwritten gradient)", cfg_path, what, nan);
        CHECK(bad == 0, "%s, %s: %zu of %zu gradients differ, first at %zu: %g against %g", cfg_path, what, bad, old.n,
              first, bad ? p->grad[first] : 0.0, bad ? old.grad[first] : 0.0);
    }
    CHECK(old.fresh == 0, "%s: the old plan marks %d fresh writes", cfg_path, old.fresh);
    CHECK(now.fresh > 0 && now.zeroed < old.zeroed, "%s: %d fresh writes, %d buffers zeroed (old plan %d)", cfg_path,
          now.fresh, now.zeroed, old.zeroed);
    CHECK(old.aliases == 0 && now.aliases > 0, "%s: %d aliased gradients (old plan %d)", cfg_path, now.aliases,
          old.aliases);
    printf("    %s: %d of %d buffers still zeroed, %d fresh writes, %d aliased gradients, arena %zu floats (old %zu)\n",
           cfg_path, now.zeroed, old.zeroed, now.fresh, now.aliases, now.n_dact, old.n_dact);
    free(old.grad);
    free(now.grad);
    free(zeroed_aliased.grad);
}

// Under bf16 activations (core/spec/act_plan.c) some gradients are stored as bf16 (core/spec/grad_plan.c
// plan_grad_types): each one fresh-written once by a conv's data gradient and read by the conv + BN + SiLU that
// made its value (gpu/conv.cu conv_dgrad_bf16_gpu: not a pointwise conv); never zeroed, never a head, never
// aliased. None with YT_GRAD_BF16=0 or without such a rule.
static int not_pointwise(const ConvDims *d) { return !(d->R == 1 && d->S == 1 && d->stride == 1 && d->pad == 0); }

static int bf16_gradients(const char *cfg_path, const char *env, int storage_bf16, int *bad) {
    static Config cfg;
    Model m;
    Err err;
    if (env) test_switch(SW_GRAD_BF16, env);
    int rc = config_load(cfg_path, 0, NULL, &cfg, &err) || model_build(&cfg, N, S, &m, &err);
    if (rc) { printf("    %s\n", err.msg); test_switch(SW_GRAD_BF16, NULL); return -1; }
    model_plan_storage(&m, storage_bf16);
    model_plan_grad_storage(&m, storage_bf16 ? not_pointwise : NULL);   // the GPU's rule under bf16 with cuDNN
    test_switch(SW_GRAD_BF16, NULL);
    int n = 0;
    *bad = 0;
    for (int v = 0; v < m.n_values; v++) {
        if (!m.grad_bf16[v]) continue;
        n++;
        for (int k = m.zero_first[0]; k < m.zero_first[m.n_nodes + 1]; k++) *bad += m.zero_list[k] == v;
        for (int l = 0; l < m.n_levels; l++) *bad += m.head[l] == v || (l < m.n_aux && m.aux[l] == v);
        for (int i = 0; i < m.n_nodes; i++) *bad += m.grad_alias[i] == v || (m.grad_alias[i] >= 0 && m.nodes[i].out == v);
        *bad += m.values[v].parent >= 0;
        Map g = model_grad(&m, v, N);
        *bad += !g.bf16;
    }
    CHECK(n == m.n_grad_bf16, "%s: %d bf16 gradients counted, %d planned", cfg_path, n, m.n_grad_bf16);
    model_free(&m);
    return n;
}

static void test_bf16_gradient_plan(void) {
    const char *cfgs[] = { "cfg/t.ini", "cfg/yolov9-t.ini", "cfg/yolo26n.ini" };
    for (int k = 0; k < 3; k++) {
        int bad = 0, bad_off = 0, bad_fp32 = 0;
        int on = bf16_gradients(cfgs[k], NULL, 1, &bad), off = bf16_gradients(cfgs[k], "0", 1, &bad_off);
        int fp32 = bf16_gradients(cfgs[k], NULL, 0, &bad_fp32);
        CHECK(on > 0 && bad == 0, "%s: %d bf16 gradients, %d breaking the rules", cfgs[k], on, bad);
        CHECK(off == 0 && fp32 == 0, "%s: %d bf16 gradients with YT_GRAD_BF16=0, %d with fp32 storage", cfgs[k], off,
              fp32);
        printf("    %s: %d gradients stored as bf16\n", cfgs[k], on);
    }
}

static void test_gelan_fresh_writes(void) { same_gradients("cfg/t.ini"); }
static void test_dual_fresh_writes(void) { same_gradients("cfg/yolov9-t.ini"); }
static void test_yolo26_fresh_writes(void) { same_gradients("cfg/yolo26n.ini"); }

int main(void) {
    RUN(test_gelan_fresh_writes);
    RUN(test_dual_fresh_writes);
    RUN(test_yolo26_fresh_writes);
    RUN(test_bf16_gradient_plan);
    return test_summary();
}
