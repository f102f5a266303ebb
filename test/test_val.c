// test_val.c: validation end to end on a tiny synthetic dataset with gelan-t (random weights, so only
// ranges and determinism can be checked), and the letterbox box mapping on hand cases.
#include "test/test.h"

#include "core/val.h"
#include "io/augment.h"
#include "io/synth.h"

// 200x100 image, S = 64: long-side resize to 64x32, letterbox to 64x64 with 16 rows of padding on top.
// Sample box (16,24)-(48,40) is (16,8)-(48,24) unpadded, / 0.32 -> (50,25)-(150,75).
static void test_scale_boxes_hand(void) {
    Image im = image_new(200, 100, 0), small = augment_load_resize(&im, 64, 0);
    LetterboxInfo lb;
    Image boxed = augment_letterbox(&small, 64, 64, 0, 0, &lb);
    CHECK(small.w == 64 && small.h == 32 && boxed.w == 64 && boxed.h == 64, "%dx%d", small.w, small.h);
    CHECK(lb.r == 1 && lb.padw == 0 && lb.padh == 16, "r %g pad %g %g", lb.r, lb.padw, lb.padh);
    Det d[2] = { { 16, 24, 48, 40, 0.5f, 0 }, { -5, 10, 70, 60, 0.5f, 0 } };
    val_scale_boxes(d, 2, 64, 200, 100, &lb);
    CHECK(close_enough(d[0].x1, 50, 1e-4, 0) && close_enough(d[0].y1, 25, 1e-4, 0), "%g %g", d[0].x1, d[0].y1);
    CHECK(close_enough(d[0].x2, 150, 1e-4, 0) && close_enough(d[0].y2, 75, 1e-4, 0), "%g %g", d[0].x2, d[0].y2);
    CHECK(d[1].x1 == 0 && d[1].y1 == 0 && d[1].x2 == 200 && d[1].y2 == 100, "clip: %g %g %g %g",
          d[1].x1, d[1].y1, d[1].x2, d[1].y2);
    image_free(&im); image_free(&small); image_free(&boxed);
    // 300x101: the resize truncates 101*64/300 = 21.55 to 21 rows, so the gain is 21/101, not 64/300
    LetterboxInfo lb2 = { .r = 1, .padw = 0, .padh = 21.5 };
    Det e = { 10, 21.5f + 21, 20, 21.5f + 21, 0.5f, 0 };
    val_scale_boxes(&e, 1, 64, 300, 101, &lb2);
    CHECK(close_enough(e.y1, 101, 1e-4, 0) && close_enough(e.x1, 10 * 101 / 21.0, 1e-4, 0), "%g %g", e.x1, e.y1);
}

// The chain val_evaluate runs per image, on a hand-made head: one 8x8 level at stride 8 (S = 64) where
// only anchor (3.5, 3.5) scores, with one-hot sides ltrb (1,2,3,1): sample box (20,12)-(52,36). For the
// 200x100 image above that is (62.5, 0)-(162.5, 62.5) after unpadding, unscaling and clipping; a label
// there makes a perfect detector (AP 0.995).
static void test_decode_nms_map_back(void) {
    enum { G = 8, NC = 2, C = 64 + NC };
    float *buf = calloc(G * G * C, sizeof *buf);
    Map head = map_make(buf, 1, G, G, C);
    for (int y = 0; y < G; y++)
        for (int x = 0; x < G; x++) map_at(head, 0, y, x)[64] = map_at(head, 0, y, x)[65] = -20;
    float *px = map_at(head, 0, 3, 3);
    const int side[4] = { 1, 2, 3, 1 };
    for (int s = 0; s < 4; s++) px[s * 16 + side[s]] = 60;
    px[65] = 3;
    int stride = 8;
    float boxes[G * G * 4], scores[G * G * NC];
    nms_decode(&head, &stride, 1, 0, NC, boxes, scores);
    NmsOptions o = nms_val_options();
    Det d[300];
    int nd = nms_run(boxes, scores, G * G, NC, &o, d);
    CHECK(nd == 1 && d[0].cls == 1, "%d detections", nd);
    LetterboxInfo lb = { .r = 1, .padw = 0, .padh = 16 };
    val_scale_boxes(d, nd, 64, 200, 100, &lb);
    Det want = { 62.5f, 0, 162.5f, 62.5f, 1, 1 };
    CHECK(close_enough(d[0].x1, want.x1, 1e-3, 0) && close_enough(d[0].y1, 0, 1e-3, 0) &&
          close_enough(d[0].x2, want.x2, 1e-3, 0) && close_enough(d[0].y2, want.y2, 1e-3, 0),
          "%g %g %g %g", d[0].x1, d[0].y1, d[0].x2, d[0].y2);
    MetricsStats st;
    Metrics m;
    metrics_stats_init(&st, NC);
    metrics_stats_add(&st, d, nd, &want, 1);
    metrics_compute(&st, &m);
    CHECK(close_enough(m.map, 0.995, 1e-9, 0), "mAP50-95 %g", m.map);
    metrics_free(&m);
    metrics_stats_free(&st);
    free(buf);
}

typedef struct { Config *cfg; Dataset ds; Model m; } Fixture;

// gelan-t at 64 px over a 3-image synthetic val split written under the test's tmp folder.
static int fixture_open(Fixture *f, const char *dir) {
    SynthConfig sc = synth_defaults();
    sc.n_train = 2; sc.n_val = 3; sc.min_side = 64; sc.max_side = 120; sc.threads = 1;
    Err err;
    if (synth_generate(dir, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    char data[4200];
    snprintf(data, sizeof data, "data=%s/data.yaml", dir);
    char *argv[] = { "imgsz=64", "batch=2", "workers=2", data };
    f->cfg = malloc(sizeof *f->cfg);
    if (config_load("cfg/t.ini", 4, argv, f->cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    DatasetOptions opt = { .quiet = 1 };
    if (dataset_open(NULL, f->cfg, "val", &opt, &f->ds, &err)) { printf("    %s\n", err.msg); return -1; }
    config_set_nc(f->cfg, f->ds.nc);
    if (model_build(f->cfg, 2, 64, &f->m, &err)) { printf("    %s\n", err.msg); return -1; }
    model_init_weights(&f->m, 1);
    return 0;
}

static void fixture_close(Fixture *f) {
    model_free(&f->m);
    dataset_free(&f->ds);
    free(f->cfg);
}

static void test_val_evaluate_runs(void) {
    const char *dir = test_tmpdir("val");
    Fixture f;
    if (fixture_open(&f, dir)) { CHECK(0, "fixture"); return; }
    char path[4200];                                  // weights round trip, as `yolotrain val` loads them
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    Err err;
    CHECK(!model_save(&f.m, path, &err) && !model_load(&f.m, path, "", &err), "%s", err.msg);
    ValOptions o = val_options(f.cfg);
    o.nms.conf_thres = 0;                             // random weights score ~1e-5: keep every candidate
    snprintf(path, sizeof path, "%s/table.txt", dir);
    o.out = fopen(path, "w");
    o.verbose = 1;
    ValResult r, r2;
    int rc = val_evaluate(&f.m, &f.ds, &o, &r, &err);
    fclose(o.out);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) { fixture_close(&f); return; }
    const Metrics *m = &r.m;
    CHECK(m->images == 3 && m->instances == f.ds.n_instances && m->instances > 0, "%d images %d instances",
          m->images, m->instances);
    double v[4] = { m->mp, m->mr, m->map50, m->map };
    for (int i = 0; i < 4; i++) CHECK(v[i] >= 0 && v[i] <= 1, "metric %d = %g", i, v[i]);
    CHECK(m->map <= m->map50 + 1e-12, "mAP50-95 %g > mAP50 %g", m->map, m->map50);
    CHECK(r.box > 0 && r.cls > 0 && r.dfl > 0 && isfinite(r.box + r.cls + r.dfl), "losses %g %g %g", r.box, r.cls, r.dfl);
    CHECK(close_enough(r.fitness, 0.1 * m->map50 + 0.9 * m->map, 1e-12, 0), "fitness");
    FILE *t = fopen(path, "r");
    char line[256] = "";
    CHECK(t && fgets(line, sizeof line, t) && strstr(line, "Instances") && strstr(line, "mAP50-95"), "table: %s", line);
    if (t) fclose(t);
    o.out = NULL; o.workers = 1;                      // same numbers with another worker count
    CHECK(val_evaluate(&f.m, &f.ds, &o, &r2, &err) == 0, "%s", err.msg);
    CHECK(r2.m.map50 == m->map50 && r2.m.map == m->map && r2.m.mp == m->mp && r2.box == r.box, "not deterministic");
    val_result_free(&r2);
    val_result_free(&r);
    o.batch = 3;                                      // more than the model was built for
    CHECK(val_evaluate(&f.m, &f.ds, &o, &r, &err) == -1 && strstr(err.msg, "batch"), "batch check: %s", err.msg);
    fixture_close(&f);
}

int main(void) {
    RUN(test_scale_boxes_hand);
    RUN(test_decode_nms_map_back);
    RUN(test_val_evaluate_runs);
    return test_summary();
}
