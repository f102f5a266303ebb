// test_family.c: the model family's configs (cfg/gelan-{t,s,m,c,e}, yolov9-{t,s,m,c,e}, yolo26{n,s,m,l,x}):
// parameter and state-dict tensor counts against the references' (../shared/fixtures/README.md), the
// export of every yolov9-* to its gelan-* (same layers, same tensor names and shapes), the nested-list
// rows of CBLinear/CBFuse read back from args.ini, and the builder's messages for bad CBFuse rows.
#include "test/test.h"

#include "cfg/config.h"
#include "core/eval/export.h"
#include "core/spec/model.h"

typedef struct { const char *config; size_t params; int tensors; } Member;

// Training form, nc = 80, as WongKinYiu/yolov9 and Ultralytics 8.4.14 build them.
static const Member FAMILY[] = {
    { "cfg/gelan-t.ini", 2442640, 1339 },   { "cfg/gelan-s.ini", 7226208, 1339 },
    { "cfg/gelan-m.ini", 20124000, 907 },   { "cfg/gelan-c.ini", 25498752, 937 },
    { "cfg/gelan-e.ini", 58114432, 1811 },
    { "cfg/yolov9-t.ini", 3717680, 1772 },  { "cfg/yolov9-s.ini", 9804512, 1772 },
    { "cfg/yolov9-m.ini", 32878432, 1412 }, { "cfg/yolov9-c.ini", 51182080, 1460 },
    { "cfg/yolov9-e.ini", 69529664, 2172 },
    { "cfg/yolo26n.ini", 2572280, 708 },    { "cfg/yolo26s.ini", 10009784, 708 },
    { "cfg/yolo26m.ini", 21896248, 768 },   { "cfg/yolo26l.ini", 26299704, 1092 },
    { "cfg/yolo26x.ini", 58993368, 1092 },
    { "cfg/s.ini", 7226208, 1339 },         { "cfg/t.ini", 2442640, 1339 },   // the older names
};
enum { N_FAMILY = sizeof FAMILY / sizeof FAMILY[0] };

static Config cfg_a, cfg_b, cfg_c;

static void test_counts(void) {
    Err err;
    for (int i = 0; i < N_FAMILY; i++) {
        const Member *f = &FAMILY[i];
        Model m;
        if (config_load(f->config, 0, NULL, &cfg_a, &err) || model_build(&cfg_a, 1, 64, &m, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        CHECK(model_count_params(&m) == f->params && model_count_tensors(&m) == f->tensors,
              "%s: %zu parameters and %d tensors; the reference has %zu and %d", f->config, model_count_params(&m),
              model_count_tensors(&m), f->params, f->tensors);
        model_free(&m);
    }
}

// `yolotrain info` prints both counts.
static void test_info_prints_counts(void) {
    Err err;
    Model m;
    if (config_load("cfg/yolov9-c.ini", 0, NULL, &cfg_a, &err) || model_build(&cfg_a, 1, 64, &m, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    model_print_info(&m, &cfg_a, f);
    fclose(f);
    CHECK(strstr(text, "51,182,080 parameters, 1460 state-dict tensors") != NULL, "info says: %s", text);
    CHECK(strstr(text, "CBFuse") && strstr(text, "ADown") && strstr(text, "Silence"), "the layer table names the modules");
    free(text);
    model_free(&m);
}

// The sorted names of a model's tensors with their sizes, as one text for comparison.
static int same_tensors(const Model *a, const Model *b, const char *what) {
    if (a->n_params != b->n_params) { CHECK(0, "%s: %d and %d tensors", what, a->n_params, b->n_params); return 0; }
    for (int i = 0; i < a->n_params; i++) {
        int k = model_find_param(b, a->params[i].name);
        if (k < 0 || b->params[k].n != a->params[i].n) {
            CHECK(0, "%s: %s is %s", what, a->params[i].name, k < 0 ? "missing" : "of another size");
            return 0;
        }
    }
    return 1;
}

// export_config turns yolov9-X into gelan-X's layer table, and export_rename maps every kept tensor onto
// a gelan-X tensor of the same size, covering all of them.
static void test_export_every_scale(void) {
    static const char *scales[] = { "t", "s", "m", "c", "e" };
    Err err;
    for (int s = 0; s < 5; s++) {
        char yv9[64], gel[64], name[256];
        snprintf(yv9, sizeof yv9, "cfg/yolov9-%s.ini", scales[s]);
        snprintf(gel, sizeof gel, "cfg/gelan-%s.ini", scales[s]);
        int map[CFG_MAX_LAYERS];
        if (config_load(yv9, 0, NULL, &cfg_a, &err) || config_load(gel, 0, NULL, &cfg_b, &err) ||
            export_config(&cfg_a, &cfg_c, map, &err)) {
            CHECK(0, "%s", err.msg);
            continue;
        }
        int same = cfg_c.n_layers == cfg_b.n_layers;
        for (int i = 0; same && i < cfg_b.n_layers; i++) {
            const LayerSpec *x = &cfg_c.layers[i], *y = &cfg_b.layers[i];
            same = !strcmp(x->module, y->module) && x->n_from == y->n_from && x->n_args == y->n_args;
            for (int j = 0; same && j < y->n_from; j++) same = x->from[j] == y->from[j];
            if (!same) CHECK(0, "%s exported: layer %d is %s, %s has %s", yv9, i, x->module, gel, y->module);
        }
        CHECK(same, "%s exported has %d layers, %s %d", yv9, cfg_c.n_layers, gel, cfg_b.n_layers);
        Model big, small, ref;
        if (model_build(&cfg_a, 1, 64, &big, &err)) { CHECK(0, "%s", err.msg); continue; }
        if (model_build(&cfg_c, 1, 64, &small, &err) || model_build(&cfg_b, 1, 64, &ref, &err)) {
            CHECK(0, "%s", err.msg);
            model_free(&big);
            continue;
        }
        same_tensors(&small, &ref, yv9);
        int kept = 0, wrong = 0;
        for (int i = 0; i < big.n_params; i++) {
            if (!export_rename(&cfg_a, map, big.params[i].name, name, sizeof name)) continue;
            int k = model_find_param(&ref, name);
            wrong += k < 0 || ref.params[k].n != big.params[i].n;
            kept++;
        }
        CHECK(kept == ref.n_params && wrong == 0, "%s: %d tensors kept, %d of them not in %s (%d tensors)", yv9, kept,
              wrong, gel, ref.n_params);
        model_free(&big); model_free(&small); model_free(&ref);
    }
}

// CBLinear/CBFuse's nested lists survive args.ini (config_print, then config_load).
static void test_nested_lists_round_trip(void) {
    Err err;
    if (config_load("cfg/yolov9-e.ini", 0, NULL, &cfg_a, &err)) { CHECK(0, "%s", err.msg); return; }
    const char *dir = test_tmpdir("family");
    char path[4200];
    snprintf(path, sizeof path, "%s/args.ini", dir);
    FILE *f = fopen(path, "w");
    if (!f) { CHECK(0, "cannot write %s", path); return; }
    config_print(&cfg_a, f);
    fclose(f);
    if (config_load(path, 0, NULL, &cfg_b, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(cfg_b.n_layers == cfg_a.n_layers, "%d layers read back, %d written", cfg_b.n_layers, cfg_a.n_layers);
    for (int i = 0; i < cfg_a.n_layers && i < cfg_b.n_layers; i++) {
        const LayerSpec *x = &cfg_a.layers[i], *y = &cfg_b.layers[i];
        int same = x->list == y->list && x->n_args == y->n_args && !strcmp(x->module, y->module);
        for (int j = 0; same && j < x->n_args; j++) same = x->args[j] == y->args[j] || (isnan(x->args[j]) && isnan(y->args[j]));
        CHECK(same, "layer %d (%s) reads back differently", i, x->module);
    }
    CHECK(cfg_a.layers[14].list && cfg_a.layers[14].n_args == 5 && cfg_a.layers[14].args[4] == 1024,
          "yolov9-e's layer 14 is CBLinear [[64, 128, 256, 512, 1024]]");
}

// A config from rows (the [model] keys of yolov9-c, then the given rows), loaded and built at 64 px:
// returns the error message, "" when it builds.
static const char *build_rows(const char *rows) {
    static char msg[1024];
    Err err;
    const char *dir = test_tmpdir("rows");
    char path[4200];
    snprintf(path, sizeof path, "%s/m.ini", dir);
    FILE *f = fopen(path, "w");
    if (!f) return "cannot write the config";
    fprintf(f, "[model]\nnc = 80\n[backbone]\n%s", rows);
    fclose(f);
    Model m;
    if (config_load(path, 0, NULL, &cfg_a, &err) || model_build(&cfg_a, 1, 64, &m, &err)) {
        snprintf(msg, sizeof msg, "%s", err.msg);
        return msg;
    }
    model_free(&m);
    return "";
}

// 32x32 maps at layers 1 and 4, 16x16 at 2; CBLinear 3 splits 2's output into 8 and 16 channels.
#define ROWS_OK "0 = -1, 1, Silence, []\n1 = -1, 1, Conv, [16, 3, 2]\n2 = -1, 1, ADown, [32]\n" \
                "3 = 2, 1, CBLinear, [[8, 16]]\n4 = 0, 1, Conv, [16, 3, 2]\n"
#define HEAD    "6 = [5, 1], 1, DualDDetect, [nc]\n"

static void test_bad_rows(void) {
    const char *m = build_rows(ROWS_OK "5 = [3, -1], 1, CBFuse, [[1]]\n" HEAD);
    CHECK(!*m, "a good CBFuse row: %s", m);
    m = build_rows(ROWS_OK "5 = [3, -1], 1, CBFuse, [[2]]\n" HEAD);
    CHECK(strstr(m, "m.ini:9: layer 5 (CBFuse): index 2 of input 1 must be 0 to 1"), "%s", m);
    m = build_rows(ROWS_OK "5 = [3, -1], 1, CBFuse, [[0]]\n" HEAD);
    CHECK(strstr(m, "output 0 of layer 3 has 8 channels, the last input 16"), "%s", m);
    m = build_rows(ROWS_OK "5 = [4, -1], 1, CBFuse, [[0]]\n" HEAD);
    CHECK(strstr(m, "input 1 (layer 4) is not a CBLinear layer"), "%s", m);
    m = build_rows(ROWS_OK "5 = [3, -1], 1, CBFuse, [[1, 1]]\n" HEAD);
    CHECK(strstr(m, "2 inputs, 2 indices"), "%s", m);
    m = build_rows(ROWS_OK "5 = [3, 2], 1, CBFuse, [[1]]\n" HEAD);
    CHECK(strstr(m, "the last input 32"), "%s", m);
    m = build_rows("0 = -1, 1, Conv, [16, 3, 2]\n1 = 0, 1, CBLinear, [[32]]\n2 = 0, 1, ADown, [32]\n"
                   "3 = [1, 2], 1, CBFuse, [[0]]\n");
    CHECK(strstr(m, "input 1 is 32x32, which does not scale up to the last input's 16x16"), "%s", m);
    m = build_rows(ROWS_OK "5 = [3, -1], 1, CBFuse, [1]\n" HEAD);
    CHECK(strstr(m, "CBFuse takes one nested list"), "%s", m);
    m = build_rows(ROWS_OK "5 = [3, -1], 1, CBFuse, [[1], 2]\n" HEAD);
    CHECK(strstr(m, "after the nested list (it is the only argument)"), "%s", m);
    m = build_rows("0 = -1, 1, Conv, [16, 3, 2]\n1 = -1, 1, ADown, [[32]]\n");
    CHECK(strstr(m, "ADown takes no nested list"), "%s", m);
    m = build_rows("0 = -1, 1, Silence, [1]\n");
    CHECK(strstr(m, "Silence takes 0 to 0 numeric args"), "%s", m);
}

// ---- gradients through the new modules ----------------------------------------------------

// A tiny model with every new module: ADown (2) feeding CBLinear (3), whose second output CBFuse (5) adds,
// upsampled x2, to the second stem (4, reading the image through Silence 0); a dual head on 5 and 1.
static const char *TINY = "[model]\nnc = 2\n[backbone]\n0 = -1, 1, Silence, []\n1 = -1, 1, Conv, [16, 3, 2]\n"
                          "2 = -1, 1, ADown, [32]\n3 = 2, 1, CBLinear, [[8, 16]]\n4 = 0, 1, Conv, [16, 3, 2]\n"
                          "5 = [3, -1], 1, CBFuse, [[1]]\n6 = [5, 1], 1, DualDDetect, [nc]\n";

typedef struct { Model m; const float *x; float *r[2]; int N, S; } Tiny;

// L = sum over both heads' maps of r * map, in training mode (batch statistics)
static double tiny_loss(Tiny *t) {
    model_forward(&t->m, t->x, t->N, t->S, t->S, 1);
    Map a = model_value(&t->m, t->m.aux[0], t->N), h = model_value(&t->m, t->m.head[0], t->N);
    double l = 0;
    for (size_t j = 0; j < map_floats(a); j++) l += (double)a.data[j] * t->r[0][j] + (double)h.data[j] * t->r[1][j];
    return l;
}

// Central differences of L in 12 weights of each of the modules' tensors against model_backward's. The step
// (1e-2: smaller ones drown in the fp32 forward's rounding) would cross the kinks of ADown's max pool for
// the weights before it (layer 1), so those are left to test_ops (max pool k3 s2 p1 by itself) and to
// test_dual's yolov9-c fixture (the whole model against PyTorch).
static void test_module_gradients(void) {
    Err err;
    const char *dir = test_tmpdir("tiny");
    char path[4200];
    snprintf(path, sizeof path, "%s/tiny.ini", dir);
    FILE *f = fopen(path, "w");
    if (!f) { CHECK(0, "cannot write %s", path); return; }
    fputs(TINY, f);
    fclose(f);
    Tiny t = { .N = 2, .S = 32 };
    if (config_load(path, 0, NULL, &cfg_a, &err) || model_build(&cfg_a, t.N, t.S, &t.m, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    Rng g = rng_for(5, 6, 7);
    size_t nx = (size_t)t.N * t.S * t.S * 3, nr = map_floats(model_value(&t.m, t.m.head[0], t.N));
    float *x = xmalloc(nx * sizeof(float));
    for (size_t j = 0; j < nx; j++) x[j] = (float)rng_uniform(&g, 0, 1);
    t.x = x;
    for (int k = 0; k < 2; k++) {
        t.r[k] = xmalloc(nr * sizeof(float));
        for (size_t j = 0; j < nr; j++) t.r[k][j] = (float)rng_uniform(&g, -1, 1);
    }
    tiny_loss(&t);
    model_zero_grad(&t.m);
    memcpy(model_grad(&t.m, t.m.aux[0], t.N).data, t.r[0], nr * sizeof(float));
    memcpy(model_grad(&t.m, t.m.head[0], t.N).data, t.r[1], nr * sizeof(float));
    model_backward(&t.m, t.N);
    static const char *names[] = { "model.2.cv1.conv.weight", "model.2.cv2.conv.weight",
                                   "model.2.cv1.bn.weight", "model.2.cv2.bn.bias", "model.3.conv.weight",
                                   "model.4.conv.weight" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        int k = model_find_param(&t.m, names[i]);
        if (k < 0) { CHECK(0, "%s is missing", names[i]); continue; }
        const ParamInfo *p = &t.m.params[k];
        int bad = 0;
        for (int s = 0; s < 12; s++) {
            size_t j = (size_t)rng_int(&g, (int)p->n);
            float *w = t.m.state + p->offset + j, w0 = *w, h = 1e-2f;
            *w = w0 + h;
            double lp = tiny_loss(&t);
            *w = w0 - h;
            double lm = tiny_loss(&t);
            *w = w0;
            double num = (lp - lm) / (2.0 * h), a = t.m.grad[p->offset + j];
            if (fabs(a - num) > 2e-3 + 2e-2 * fmax(fabs(a), fabs(num)) && bad++ < 2)
                printf("    %s[%zu]: analytic %.7g numeric %.7g\n", names[i], j, a, num);
        }
        CHECK(bad == 0, "%s: %d of 12 gradients differ from central differences", names[i], bad);
    }
    free(x); free(t.r[0]); free(t.r[1]);
    model_free(&t.m);
}

int main(void) {
    RUN(test_counts);
    RUN(test_info_prints_counts);
    RUN(test_export_every_scale);
    RUN(test_nested_lists_round_trip);
    RUN(test_bad_rows);
    RUN(test_module_gradients);
    return test_summary();
}
