// test_onnx.c: `export format=onnx`. gelan-t and YOLO26-s (fresh weights, BN statistics scrambled so
// the folding matters) are exported at 64x64 with a dynamic batch, and with a fixed batch of 2 (YOLO26-s
// directly, gelan-t through `yolotrain export ... batch=2`), then test/onnx_check.py checks the file
// (onnx.checker, strict shape inference, opset 17, the batch dimension) and runs it with its numpy
// evaluator (or onnxruntime: YT_ONNX_RUNTIME=ort) on two images against our own inference. Skips when
// no python3 has the onnx and numpy modules (Debian: python3-onnx). export's batch= refusals are checked
// without python.
//
// Dump mode, for the GPU machine's onnxruntime check (commands in the final report / io/README.md):
//   build/cpu/test/test_onnx dump CONFIG.ini WEIGHTS FIXTURE.safetensors OUTDIR
// runs our CPU inference on FIXTURE's input/images and writes OUTDIR/input.bin (B,3,S,S), expect.bin
// (the export's output0 layout) and shape.txt, for `python3 test/onnx_check.py MODEL.onnx --run OUTDIR`.
#include "test/test.h"

#include "cfg/config.h"
#include "core/eval/export.h"
#include "core/spec/nms.h"
#include "core/spec/topk26.h"
#include "io/pt.h"

// Our output0 for B images (NHWC in): DDetect (B, 4 + nc, A) xywh + scores; YOLO26 (B, 300, 6).
static float *our_output(Model *m, const float *nhwc, int B, int S, int dims[3]) {
    model_forward(m, nhwc, B, S, S, 0);
    Map head[4];
    int A = 0, nc = m->nc;
    for (int l = 0; l < m->n_levels; l++) { head[l] = model_value(m, m->head[l], B); A += head[l].H * head[l].W; }
    float *boxes = malloc(sizeof(float) * 4 * A), *scores = malloc(sizeof(float) * A * nc), *out;
    int k = A < 300 ? A : 300;
    if (!m->end2end) {
        dims[0] = B, dims[1] = 4 + nc, dims[2] = A;
        out = malloc(sizeof(float) * B * (4 + nc) * A);
        for (int n = 0; n < B; n++) {
            nms_decode(head, m->strides, m->n_levels, n, nc, boxes, scores);
            float *o = out + (size_t)n * (4 + nc) * A;
            for (int a = 0; a < A; a++) {
                const float *b = boxes + 4 * a;
                o[a] = (b[0] + b[2]) / 2, o[A + a] = (b[1] + b[3]) / 2, o[2 * A + a] = b[2] - b[0], o[3 * A + a] = b[3] - b[1];
                for (int c = 0; c < nc; c++) o[(size_t)(4 + c) * A + a] = scores[(size_t)a * nc + c];
            }
        }
    } else {
        dims[0] = B, dims[1] = k, dims[2] = 6;
        out = calloc((size_t)B * k * 6, sizeof(float));
        Head26 h;
        for (int l = 0; l < L26_LEVELS; l++) { h.box[l] = map_slice(head[l], 0, 4); h.cls[l] = map_slice(head[l], 4, nc); }
        Topk26Item *work = malloc(sizeof *work * topk26_work_items(A, nc, 300));
        Det26 *det = malloc(sizeof *det * k);
        Topk26Opts to = { .max_det = 300, .agnostic = 0, .conf = -1 };
        for (int n = 0; n < B; n++) {
            topk26_decode(&h, n, S, boxes, scores);
            int nd = topk26_select(boxes, scores, A, nc, &to, work, det);
            for (int i = 0; i < nd; i++) {
                float *o = out + ((size_t)n * k + i) * 6;
                memcpy(o, det[i].box, 4 * sizeof(float));
                o[4] = det[i].score, o[5] = (float)det[i].cls;
            }
        }
        free(work); free(det);
    }
    free(boxes); free(scores);
    return out;
}

static int write_run(const char *dir, const float *nchw, int B, int S, const float *out, const int dims[3]) {
    char p[4400];
    snprintf(p, sizeof p, "%s/input.bin", dir);
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    fwrite(nchw, sizeof(float), (size_t)B * 3 * S * S, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/expect.bin", dir);
    if (!(f = fopen(p, "wb"))) return -1;
    fwrite(out, sizeof(float), (size_t)dims[0] * dims[1] * dims[2], f);
    fclose(f);
    snprintf(p, sizeof p, "%s/shape.txt", dir);
    if (!(f = fopen(p, "w"))) return -1;
    fprintf(f, "%d %d %d %d %d\n", B, S, dims[0], dims[1], dims[2]);
    return fclose(f);
}

static float *to_nhwc(const float *nchw, int B, int S) { return nchw_to_nhwc(nchw, B, 3, S, S); }

// The runtime onnx_check.py runs the exports with: numpy (its own evaluator), or ort (onnxruntime)
// when YT_ONNX_RUNTIME=ort, as on the GPU machine.
static const char *runtime(void) {
    const char *r = switch_str(SW_ONNX_RUNTIME);
    return r && !strcmp(r, "ort") ? "ort" : "numpy";
}

// A python3 that has onnx and numpy (numpy and onnxruntime under YT_ONNX_RUNTIME=ort), or NULL.
static const char *python_with_onnx(void) {
    static const char *py[] = { "python3", "/usr/bin/python3" };
    for (int i = 0; i < 2; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy, %s' >/dev/null 2>&1", py[i],
                 !strcmp(runtime(), "ort") ? "onnxruntime" : "onnx");
        if (system(cmd) == 0) return py[i];
    }
    return NULL;
}

// Fresh weights with every BN's statistics and affine parameters moved off 0/1, so a wrong fold shows.
static void scramble_bn(Model *m) {
    Rng r = rng_for(19, 1, 0);
    for (int i = 0; i < m->n_params; i++) {
        const ParamInfo *p = &m->params[i];
        float *v = m->state + p->offset;
        for (size_t j = 0; j < p->n; j++) {
            if (p->kind == PK_RUNNING_MEAN) v[j] = (float)rng_uniform(&r, -0.2, 0.2);
            if (p->kind == PK_RUNNING_VAR) v[j] = (float)rng_uniform(&r, 0.1, 0.5);   // small enough for eps (1e-3) to matter
            if (p->kind == PK_BN_WEIGHT) v[j] = (float)rng_uniform(&r, 0.5, 1.5);
            if (p->kind == PK_BIAS && strstr(p->name, ".bn.")) v[j] = (float)rng_uniform(&r, -0.3, 0.3);
        }
    }
}

// Check path (ONNX) with onnx_check.py against our output for B random images through m; batch: the
// batch dimension the file must have ("batch": symbolic).
static void check_against(const char *py, Model *m, const char *dir, const char *path, const char *batch) {
    enum { B = 2, S = 64 };
    char cmd[13400];
    float *nchw = malloc(sizeof(float) * B * 3 * S * S);
    Rng r = rng_for(19, 2, 0);
    for (int i = 0; i < B * 3 * S * S; i++) nchw[i] = (float)rng_uniform(&r, 0, 1);
    float *nhwc = to_nhwc(nchw, B, S);
    int dims[3];
    float *out = our_output(m, nhwc, B, S, dims);
    CHECK(write_run(dir, nchw, B, S, out, dims) == 0, "cannot write the run files in %s", dir);
    snprintf(cmd, sizeof cmd, "%s test/onnx_check.py '%s' --batch %s --run '%s' --runtime %s --conf 0.001 > '%s/check.log' 2>&1",
             py, path, batch, dir, runtime(), dir);
    int rc = system(cmd);
    char log_path[4400];
    snprintf(log_path, sizeof log_path, "%s/check.log", dir);
    size_t n;
    char *log = slurp(log_path, &n);
    for (char *line = log ? strtok(log, "\n") : NULL; line; line = strtok(NULL, "\n")) printf("    %s\n", line);
    free(log);
    CHECK(rc == 0, "test/onnx_check.py failed (see above)");
    free(nchw); free(nhwc); free(out);
}

static int build_scrambled(const char *ini, Model *m) {
    static Config cfg;
    Err err = { { 0 } };
    char *ov[] = { "nc=3", "imgsz=64" };
    if (config_load(ini, 2, ov, &cfg, &err) || model_build(&cfg, 2, 64, m, &err)) { printf("    %s\n", err.msg); return -1; }
    model_init_weights(m, 7);
    scramble_bn(m);
    return 0;
}

// batch: 0 symbolic (dynamic=1), else fixed (the check runs 2 images)
static void export_and_run(const char *ini, const char *tag, int batch) {
    const char *py = python_with_onnx();
    if (!py) SKIP("no python3 with numpy and %s", !strcmp(runtime(), "ort") ? "onnxruntime (pip install onnxruntime)" : "onnx (Debian: apt-get install python3-onnx)");
    Err err = { { 0 } };
    Model m;
    if (build_scrambled(ini, &m)) { CHECK(0, "build %s", ini); return; }
    const char *dir = test_tmpdir(tag);
    char path[4400];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    CHECK(export_onnx_model(&m, 64, batch, path, &err) == 0, "%s", err.msg);
    check_against(py, &m, dir, path, batch ? "2" : "batch");
    model_free(&m);
}

// yolov9-s weights exported with its PGI config: the ONNX file is the gelan-s form, and equals our
// inference of the converted weights in cfg/s.ini.
static void test_yolov9s_as_gelan_s(void) {
    const char *py = python_with_onnx();
    if (!py) SKIP("no python3 with numpy and %s", !strcmp(runtime(), "ort") ? "onnxruntime (pip install onnxruntime)" : "onnx (Debian: apt-get install python3-onnx)");
    Err err = { { 0 } };
    Model dual, gelan;
    if (build_scrambled("cfg/yolov9-s.ini", &dual)) { CHECK(0, "build yolov9-s"); return; }
    const char *dir = test_tmpdir("onnx-yolov9s");
    char w[4400], conv[4400], onnx[4400], wa[4500], oa[4500];
    snprintf(w, sizeof w, "%s/w.safetensors", dir);
    snprintf(conv, sizeof conv, "%s/gelan.safetensors", dir);
    snprintf(onnx, sizeof onnx, "%s/model.onnx", dir);
    CHECK(model_save(&dual, w, &err) == 0, "%s", err.msg);
    static Config cfg;
    char *ov[] = { "nc=3", "imgsz=64" };
    CHECK(config_load("cfg/yolov9-s.ini", 2, ov, &cfg, &err) == 0, "%s", err.msg);
    CHECK(export_weights(&cfg, w, conv, NULL, &err) == 0, "%s", err.msg);
    snprintf(wa, sizeof wa, "weights=%s", w);
    snprintf(oa, sizeof oa, "out=%s", onnx);
    char *argv[] = { "cfg/yolov9-s.ini", wa, oa, "format=onnx", "imgsz=64", "dynamic=1" };
    CHECK(export_run(6, argv, &cfg) == 0, "export_run failed");
    if (build_scrambled("cfg/s.ini", &gelan)) { CHECK(0, "build gelan-s"); model_free(&dual); return; }
    CHECK(model_load(&gelan, conv, "", &err) == 0, "%s", err.msg);
    check_against(py, &gelan, dir, onnx, "batch");
    model_free(&dual);
    model_free(&gelan);
}

static void test_gelan_t(void) { export_and_run("cfg/t.ini", "onnx-gelan-t", 0); }
static void test_yolo26s(void) { export_and_run("cfg/yolo26s.ini", "onnx-yolo26s", 0); }
static void test_yolo26s_batch2(void) { export_and_run("cfg/yolo26s.ini", "onnx-yolo26s-b2", 2); }

// yolotrain export ... format=onnx batch=2 (gelan-t): the file has batch 2 in and out and runs two images
// as our inference does; batch=0, batch=x, batch=2 with dynamic=1 and batch= for safetensors are refused
// (status 2) naming the key.
static void test_export_batch(void) {
    Err err = { { 0 } };
    Model m;
    if (build_scrambled("cfg/t.ini", &m)) { CHECK(0, "build gelan-t"); return; }
    const char *dir = test_tmpdir("onnx-batch");
    char w[4400], onnx[4400], wa[4500], oa[4500];
    snprintf(w, sizeof w, "%s/w.safetensors", dir);
    snprintf(onnx, sizeof onnx, "%s/model.onnx", dir);
    CHECK(model_save(&m, w, &err) == 0, "%s", err.msg);
    snprintf(wa, sizeof wa, "weights=%s", w);
    snprintf(oa, sizeof oa, "out=%s", onnx);
    static Config cfg;
    static const char *bad[][2] = { { "batch=0", "format=onnx" }, { "batch=x", "format=onnx" },
                                    { "batch=2", "dynamic=1" }, { "batch=2", "format=safetensors" } };
    for (int i = 0; i < 4; i++) {
        char *argv[] = { "cfg/t.ini", wa, oa, "format=onnx", "imgsz=64", (char *)bad[i][0], (char *)bad[i][1] };
        fflush(stdout);
        CHECK(export_run(7, argv, &cfg) == 2, "%s %s: accepted", bad[i][0], bad[i][1]);
    }
    char *argv[] = { "cfg/t.ini", wa, oa, "format=onnx", "imgsz=64", "batch=2" };
    CHECK(export_run(6, argv, &cfg) == 0, "export batch=2 failed");
    const char *py = python_with_onnx();
    if (!py) { model_free(&m); SKIP("no python3 with numpy and %s", !strcmp(runtime(), "ort") ? "onnxruntime" : "onnx"); }
    check_against(py, &m, dir, onnx, "2");
    model_free(&m);
}

// dump CONFIG WEIGHTS FIXTURE OUTDIR: see the header
static int dump(char **argv) {
    static Config cfg;
    Err err = { { 0 } };
    SafeTensors fx;
    if (st_open(argv[2], &fx, &err)) { fprintf(stderr, "%s\n", err.msg); return 2; }
    const StTensor *t = st_find(&fx, "input/images");
    if (!t || t->ndim != 4 || t->shape[1] != 3) { fprintf(stderr, "%s: no input/images (B,3,S,S)\n", argv[2]); return 2; }
    int B = (int)t->shape[0], S = (int)t->shape[2];
    float *nchw = malloc(sizeof(float) * B * 3 * S * S);
    st_read_f32(&fx, "input/images", nchw, (size_t)B * 3 * S * S, &err);
    st_close(&fx);
    char imgsz[32];
    snprintf(imgsz, sizeof imgsz, "imgsz=%d", S);
    char *ov[] = { imgsz };
    Model m;
    if (config_load(argv[0], 1, ov, &cfg, &err) || model_build(&cfg, B, S, &m, &err) || model_load(&m, argv[1], "", &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    float *nhwc = to_nhwc(nchw, B, S);
    int dims[3];
    float *out = our_output(&m, nhwc, B, S, dims);
    int rc = write_run(argv[3], nchw, B, S, out, dims);
    printf("%s: %d images of %dx%d through %s, output0 (%d, %d, %d)\n", argv[3], B, S, S, argv[0], dims[0], dims[1], dims[2]);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "dump")) return dump(argv + 2);
    RUN(test_gelan_t);
    RUN(test_yolo26s);
    RUN(test_yolo26s_batch2);
    RUN(test_export_batch);
    RUN(test_yolov9s_as_gelan_s);
    return test_summary();
}
