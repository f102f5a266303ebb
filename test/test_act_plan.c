// test_act_plan.c: the activation arena's storage plan (core/spec/act_plan.c) on gelan-s, yolov9-s and
// YOLO26-s: the fp32 layout has the size model_build planned; under bf16 the images, the head maps
// and every map an fp32-only op touches stay fp32, buffers never overlap, slices follow their owner,
// and the arena shrinks by what the bf16 maps save.
#include <stdlib.h>

#include "test/test.h"

#include "cfg/config.h"
#include "core/spec/model.h"

static int owner(const Model *m, int v) { return m->values[v].parent < 0 ? v : m->values[v].parent; }

static int fp32_only_op(const Node *nd) {
    return nd->op == OP_ATTN || nd->op == OP_DETACH;
}

typedef struct { size_t lo, hi; } Span;   // [lo, hi) in floats

static int cmp_span(const void *a, const void *b) {
    const Span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

// Every buffer of the layout, at its planned size, in floats.
static int spans_of(Model *m, Span *s) {
    int k = 0;
    model_set_size(m, m->imgsz, m->imgsz);
    for (int v = 0; v < m->n_values; v++) {
        const Value *val = &m->values[v];
        if (val->parent >= 0) continue;
        size_t n = (size_t)m->max_n * m->vh[v] * m->vw[v] * val->C;
        s[k++] = (Span){ val->offset, val->offset + (val->bf16 ? (n + 1) / 2 : n) };
    }
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        for (int u = 0; u < 2; u++) {
            const ConvUnit *cu = u ? &nd->cv2 : &nd->cv;
            if (cu->w < 0 || cu->bn_w < 0 || (nd->op != OP_CONV && nd->op != OP_REPCONV)) continue;
            size_t n = (size_t)m->max_n * cu->d.P * cu->d.Q * cu->d.K;
            s[k++] = (Span){ cu->z, cu->z + (cu->z_bf16 ? (n + 1) / 2 : n) };
        }
    }
    return k;
}

static void check_layout(Model *m, const char *what) {
    Span *s = xmalloc(sizeof *s * (m->n_values + 2 * m->n_nodes));
    int k = spans_of(m, s);
    qsort(s, k, sizeof *s, cmp_span);
    int overlaps = 0;
    for (int i = 0; i < k; i++) {
        if (i && s[i].lo < s[i - 1].hi) overlaps++;
        if (s[i].hi > m->n_act) overlaps++;
    }
    CHECK(overlaps == 0, "%s: %d buffers overlap or pass the arena's end (%zu floats)", what, overlaps, m->n_act);
    free(s);
}

static void check_model(const char *cfg_path, int imgsz, int expect_bf16) {
    static Config cfg;
    Model m;
    Err err;
    if (config_load(cfg_path, 0, NULL, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    if (model_build(&cfg, 2, imgsz, &m, &err)) { CHECK(0, "%s", err.msg); return; }
    size_t built = m.n_act;
    CHECK(model_act_floats(&m, 0) == built, "%s: fp32 layout %zu floats, build planned %zu", cfg_path,
          model_act_floats(&m, 0), built);
    size_t half = model_act_floats(&m, 1);
    model_plan_storage(&m, 1);
    CHECK(m.n_act == half, "%s: model_act_floats %zu, planned %zu", cfg_path, half, m.n_act);
    check_layout(&m, cfg_path);

    int bad = 0, n_bf16 = 0, n_owned = 0, n_z = 0;
    bad += m.values[owner(&m, m.input)].bf16;
    for (int l = 0; l < m.n_levels; l++) {
        bad += m.values[owner(&m, m.head[l])].bf16;
        if (l < m.n_aux) bad += m.values[owner(&m, m.aux[l])].bf16;
    }
    for (int v = 0; v < m.n_values; v++) {
        if (m.values[v].parent >= 0) { bad += m.values[v].bf16 != m.values[m.values[v].parent].bf16; continue; }
        n_owned++;
        n_bf16 += m.values[v].bf16;
    }
    for (int i = 0; i < m.n_nodes; i++) {
        const Node *nd = &m.nodes[i];
        if (fp32_only_op(nd)) {
            bad += m.values[owner(&m, nd->in)].bf16 + m.values[owner(&m, nd->out)].bf16;
            if (nd->out2 >= 0) bad += m.values[owner(&m, nd->out2)].bf16;
        }
        if (nd->op == OP_CONV && nd->cv.bn_w < 0) bad += m.values[owner(&m, nd->out)].bf16;   // bias convs
        if (nd->op == OP_CONV && unit_is_dw(&nd->cv) && !nd->act)   // BN without SiLU: the BN writes fp32
            bad += m.values[owner(&m, nd->out)].bf16;
        if ((nd->op == OP_CONV || nd->op == OP_REPCONV) && nd->cv.bn_w >= 0) {
            bad += !nd->cv.z_bf16;   // GEMM and depthwise units' z in bf16
            n_z += nd->cv.z_bf16;
        }
    }
    CHECK(bad == 0, "%s: %d maps stored bf16 where an op, the loss or the input needs fp32", cfg_path, bad);
    printf("    %s: %d of %d buffers and %d pre-BN maps bf16; arena %.1f -> %.1f MB at batch 2, %d px\n", cfg_path,
           n_bf16, n_owned, n_z, 4e-6 * built, 4e-6 * half, imgsz);
    if (expect_bf16) {
        CHECK(n_bf16 > n_owned / 2 && n_z > 0, "%s: only %d of %d buffers bf16", cfg_path, n_bf16, n_owned);
        CHECK(half < 0.6 * built, "%s: bf16 arena %zu floats, fp32 %zu: expected about half", cfg_path, half, built);
    }
    model_plan_storage(&m, 0);                     // and back: every map fp32 again, the same size
    int any = 0;
    for (int v = 0; v < m.n_values; v++) any += m.values[v].bf16;
    for (int i = 0; i < m.n_nodes; i++) any += m.nodes[i].cv.z_bf16 + m.nodes[i].cv2.z_bf16;
    CHECK(any == 0 && m.n_act == built, "%s: back to fp32: %d bf16 maps, %zu floats (built %zu)", cfg_path, any,
          m.n_act, built);
    check_layout(&m, cfg_path);
    model_free(&m);
}

static void test_gelan_s(void) { check_model("cfg/s.ini", 160, 1); }
static void test_yolov9_s(void) { check_model("cfg/yolov9-s.ini", 160, 1); }
static void test_yolo26_s(void) { check_model("cfg/yolo26s.ini", 160, 1); }

int main(void) {
    RUN(test_gelan_s);
    RUN(test_yolov9_s);
    RUN(test_yolo26_s);
    return test_summary();
}
