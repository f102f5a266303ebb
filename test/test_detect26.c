// test_detect26.c: the NMS-free path of YOLO26 (issue 11 item 6): validation and detect decode the
// one-to-one head with top-k (core/eval/val_decode.c), no NMS. Random YOLO26-s weights at 64 px run the whole
// validation pass; hand-made one-to-one maps that encode two known boxes give a perfect detector
// (mAP50 0.995 under the 101-point interpolation) and detect writes exactly those boxes.
#include "test/test.h"

#include "core/eval/detect.h"
#include "core/eval/val.h"
#include "io/synth.h"

enum { S = 64, NC = 6 };

static int build(Config *cfg, Model *m, const char *data) {
    Err err;
    char *argv[] = { "imgsz=64", "batch=2", "workers=2", (char *)data };
    if (config_load("cfg/yolo26s.ini", data ? 4 : 3, argv, cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    config_set_nc(cfg, NC);
    if (model_build(cfg, 2, S, m, &err)) { printf("    %s\n", err.msg); return -1; }
    model_init_weights(m, 3);
    return 0;
}

// The whole validation pass with random weights: it runs, the numbers are finite and in range, and the
// val losses (the one-to-one branch's box, cls and L1 items) are finite and positive.
static void test_val_pass_random_weights(void) {
    const char *dir = test_tmpdir("detect26");
    SynthConfig sc = synth_defaults();
    sc.n_train = 1; sc.n_val = 3; sc.min_side = 64; sc.max_side = 120; sc.threads = 1;
    Err err;
    if (synth_generate(dir, &sc, &err)) { CHECK(0, "%s", err.msg); return; }
    char data[4200];
    snprintf(data, sizeof data, "data=%s/data.yaml", dir);
    static Config cfg;
    Model m;
    if (build(&cfg, &m, data)) { CHECK(0, "build"); return; }
    CHECK(m.end2end == 1, "yolo26s: end2end %d", m.end2end);
    Dataset ds;
    DatasetOptions opt = { .quiet = 1 };
    if (dataset_open(NULL, &cfg, "val", &opt, &ds, &err)) { CHECK(0, "%s", err.msg); model_free(&m); return; }
    ValOptions o = val_options(&cfg);
    o.out = NULL;
    o.nms.conf_thres = 0;                              // random weights: keep every top-k pair
    ValResult r;
    int rc = val_evaluate(&m, &ds, &o, &r, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (!rc) {
        double v[4] = { r.m.mp, r.m.mr, r.m.map50, r.m.map };
        for (int i = 0; i < 4; i++) CHECK(isfinite(v[i]) && v[i] >= 0 && v[i] <= 1, "metric %d = %g", i, v[i]);
        CHECK(r.m.images == 3 && r.m.instances == ds.n_instances, "%d images, %d instances", r.m.images, r.m.instances);
        CHECK(isfinite(r.box + r.cls + r.dfl) && r.box > 0 && r.cls > 0 && r.dfl > 0, "end-to-end val losses %g %g %g",
              r.box, r.cls, r.dfl);
        printf("    val losses (one-to-one): box %.4g cls %.4g l1 %.4g\n", r.box, r.cls, r.dfl);
        val_result_free(&r);
    }
    dataset_free(&ds);
    model_free(&m);
}

// One-to-one maps (1, H_l, W_l, 4 + nc) of a 64x64 input: every logit -20 except two anchors.
// P3 anchor (2, 3), ltrb (1, 1, 2, 1) cells of 8 px, class 2 logit 5: box (12, 20)-(36, 36).
// P4 anchor (1, 1), ltrb (1, 1, 1, 1) cells of 16 px, class 0 logit 4: box (8, 8)-(40, 40).
static float *hand_maps(const Model *m, Map head[3]) {
    size_t total = 0, off = 0;
    for (int l = 0; l < 3; l++) total += (size_t)(S / m->strides[l]) * (S / m->strides[l]) * (4 + NC);
    float *buf = malloc(sizeof(float) * total);
    for (int l = 0; l < 3; l++) {
        int g = S / m->strides[l];
        head[l] = map_make(buf + off, 1, g, g, 4 + NC);
        off += (size_t)g * g * (4 + NC);
        for (int y = 0; y < g; y++)
            for (int x = 0; x < g; x++) {
                float *px = map_at(head[l], 0, y, x);
                for (int k = 0; k < 4; k++) px[k] = 1;
                for (int c = 0; c < NC; c++) px[4 + c] = -20;
            }
    }
    float *a = map_at(head[0], 0, 3, 2), *b = map_at(head[1], 0, 1, 1);
    a[2] = 2; a[4 + 2] = 5;
    b[4 + 0] = 4;
    return buf;
}

static const Det want[2] = { { 12, 20, 36, 36, 1, 2 }, { 8, 8, 40, 40, 1, 0 } };

static void test_hand_maps_perfect_map(void) {
    static Config cfg;
    Model m;
    if (build(&cfg, &m, NULL)) { CHECK(0, "build"); return; }
    Map head[3];
    float *buf = hand_maps(&m, head);
    ValDecoder dec;
    NmsOptions o = nms_val_options();
    val_decoder_init(&dec, &m, S, S, &o);
    int nd = val_decode(&dec, &m, head, 0, S);
    CHECK(nd == 2, "%d detections at conf 0.001, want 2 (no NMS, top-k only)", nd);
    LetterboxInfo lb = { .r = 1 };
    val_scale_boxes(dec.det, nd, S, S, S, &lb);      // a 64x64 original: the identity
    for (int i = 0; i < nd && i < 2; i++)
        CHECK(dec.det[i].cls == want[i].cls && fabsf(dec.det[i].x1 - want[i].x1) < 1e-4f && fabsf(dec.det[i].y1 - want[i].y1) < 1e-4f &&
              fabsf(dec.det[i].x2 - want[i].x2) < 1e-4f && fabsf(dec.det[i].y2 - want[i].y2) < 1e-4f,
              "detection %d: class %d (%g %g %g %g)", i, dec.det[i].cls, dec.det[i].x1, dec.det[i].y1, dec.det[i].x2, dec.det[i].y2);
    MetricsStats st;
    Metrics mt;
    metrics_stats_init(&st, NC);
    metrics_stats_add(&st, dec.det, nd, want, 2);
    metrics_compute(&st, &mt);
    CHECK(close_enough(mt.map50, 0.995, 1e-9, 0) && close_enough(mt.map, 0.995, 1e-9, 0), "mAP50 %g mAP50-95 %g",
          mt.map50, mt.map);
    metrics_free(&mt);
    metrics_stats_free(&st);
    val_decoder_free(&dec);
    free(buf);
    model_free(&m);
}

// detect: the same maps as a 128x128 image letterboxed to 64 (r 0.5): labels/x.txt holds both boxes,
// best first, normalised to the image, with their sigmoid scores.
static void test_detect_writes_boxes(void) {
    static Config cfg;
    Model m;
    if (build(&cfg, &m, NULL)) { CHECK(0, "build"); return; }
    Map head[3];
    float *buf = hand_maps(&m, head);
    ValDecoder dec;
    NmsOptions o = nms_detect_options();
    o.max_det = DETECT_E2E_MAX_DET;
    val_decoder_init(&dec, &m, S, S, &o);
    LetterboxInfo lb = { .r = 0.5 };
    int nd = detect_boxes(&dec, &m, head, S, &lb, 128, 128);
    CHECK(nd == 2, "%d detections at conf 0.25, want 2", nd);
    char path[4200];
    snprintf(path, sizeof path, "%s/x.txt", test_tmpdir("detect26-labels"));
    Err err;
    CHECK(detect_write_labels(path, dec.det, nd, 128, 128, 1, &err) == 0, "%s", err.msg);
    FILE *f = fopen(path, "r");
    for (int i = 0; f && i < 2; i++) {
        int c = -1;
        float cx, cy, w, h, conf;
        int got = fscanf(f, "%d %f %f %f %f %f", &c, &cx, &cy, &w, &h, &conf);
        float wcx = (want[i].x1 + want[i].x2) / 2 / S, wcy = (want[i].y1 + want[i].y2) / 2 / S;
        float ww = (want[i].x2 - want[i].x1) / S, wh = (want[i].y2 - want[i].y1) / S;
        float wconf = 1 / (1 + expf(i == 0 ? -5.0f : -4.0f));
        CHECK(got == 6 && c == want[i].cls && fabsf(cx - wcx) < 1e-5f && fabsf(cy - wcy) < 1e-5f && fabsf(w - ww) < 1e-5f &&
              fabsf(h - wh) < 1e-5f && fabsf(conf - wconf) < 1e-5f, "row %d: %d %g %g %g %g %g", i, c, cx, cy, w, h, conf);
    }
    CHECK(f != NULL, "%s not written", path);
    if (f) fclose(f);
    val_decoder_free(&dec);
    free(buf);
    model_free(&m);
}

int main(void) {
    RUN(test_val_pass_random_weights);
    RUN(test_hand_maps_perfect_map);
    RUN(test_detect_writes_boxes);
    return test_summary();
}
