// test_val.c: validation end to end on a tiny synthetic dataset with gelan-t (random weights, so only
// ranges and determinism can be checked), the letterbox box mapping on hand cases, the rect batch
// rule and plan, and the same numbers when the batches are spread over two models.
#include <unistd.h>

#include "test/test.h"

#include "core/devices/multi.h"
#include "core/train/step.h"
#include "core/eval/plots.h"
#include "core/train/train.h"
#include "core/eval/val.h"
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

// A model of cfg_path (random weights) at 64 px over a 3-image synthetic val split written under the
// test's tmp folder.
static int fixture_of(Fixture *f, const char *cfg_path, const char *dir) {
    SynthConfig sc = synth_defaults();
    sc.n_train = 2; sc.n_val = 3; sc.min_side = 64; sc.max_side = 120; sc.threads = 1;
    Err err;
    if (synth_generate(dir, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    char data[4200];
    snprintf(data, sizeof data, "data=%s/data.yaml", dir);
    char *argv[] = { "imgsz=64", "batch=2", "workers=2", data };
    f->cfg = malloc(sizeof *f->cfg);
    if (config_load(cfg_path, 4, argv, f->cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    DatasetOptions opt = { .quiet = 1 };
    if (dataset_open(NULL, f->cfg, "val", &opt, &f->ds, &err)) { printf("    %s\n", err.msg); return -1; }
    config_set_nc(f->cfg, f->ds.nc);
    if (model_build(f->cfg, 2, 64, &f->m, &err)) { printf("    %s\n", err.msg); return -1; }
    model_init_weights(&f->m, 1);
    return 0;
}

static int fixture_open(Fixture *f, const char *dir) { return fixture_of(f, "cfg/t.ini", dir); }

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
    CHECK(r2.m.map50 == m->map50 && r2.m.map == m->map && r2.m.mp == m->mp && r2.m.mr == m->mr && r2.box == r.box,
          "not deterministic");
    val_result_free(&r2);
    snprintf(path, sizeof path, "%s/speed.txt", dir);  // plots: the same numbers, their own Speed column
    o.out = fopen(path, "w");
    o.plots_dir = dir;
    CHECK(val_evaluate(&f.m, &f.ds, &o, &r2, &err) == 0, "%s", err.msg);
    fclose(o.out);
    o.out = NULL; o.plots_dir = NULL;
    CHECK(r2.m.map50 == m->map50 && r2.m.map == m->map && r2.m.mp == m->mp && r2.m.mr == m->mr && r2.box == r.box,
          "numbers differ with plots");
    val_result_free(&r2);
    char cmp[4300], speed[512] = "";
    snprintf(cmp, sizeof cmp, "%s/confusion_matrix.png", dir);
    t = fopen(path, "r");
    while (t && fgets(line, sizeof line, t)) if (!strncmp(line, "Speed:", 6)) snprintf(speed, sizeof speed, "%s", line);
    if (t) fclose(t);
    CHECK(access(cmp, F_OK) == 0 && strstr(speed, "ms metrics, ") && strstr(speed, "ms plots per image"),
          "confusion matrix drawn, plots timed apart: %s", speed);
    char empty_dir[4300], empty[4400];                 // its counts were gathered: not an empty matrix
    snprintf(empty_dir, sizeof empty_dir, "%s/empty", dir);
    snprintf(empty, sizeof empty, "%s/confusion_matrix.png", empty_dir);
    MetricsStats none;
    metrics_stats_init(&none, f.m.nc);
    CHECK(!make_dirs(empty_dir), "%s", empty_dir);
    plots_validation(&none, f.ds.names, empty_dir);
    metrics_stats_free(&none);
    CHECK(access(empty, F_OK) == 0 && !same_file(cmp, empty), "the confusion matrix drew no counts");
    val_result_free(&r);
    o.batch = 3;                                      // more than the model holds: forwards in chunks
    CHECK(val_evaluate(&f.m, &f.ds, &o, &r, &err) == 0 && r.m.images == 3, "batch 3: %s", err.msg);
    val_result_free(&r);
    o.imgsz = 96;                                     // more than the model's plan
    CHECK(val_evaluate(&f.m, &f.ds, &o, &r, &err) == -1 && strstr(err.msg, "imgsz"), "imgsz check: %s", err.msg);
    fixture_close(&f);
}

// The reference's rule (§3.9): ratio [max ar, 1] when every h/w < 1, [1, 1/min ar] when every h/w > 1,
// else [1, 1]; then ceil(ratio * S / 32 + pad) * 32.
static void test_rect_shape_rule(void) {
    int h, w;
    val_rect_shape(0.75, 0.75, 640, 0.5, &h, &w);
    CHECK(h == 512 && w == 672, "ar 0.75 at 640: %dx%d, want 512x672 (the reference's example)", h, w);
    val_rect_shape(1.5, 2.0, 640, 0.5, &h, &w);
    CHECK(h == 672 && w == 448, "ar 1.5-2 at 640: %dx%d, want 672x448", h, w);
    val_rect_shape(0.8, 1.2, 640, 0.5, &h, &w);
    CHECK(h == 672 && w == 672, "mixed ar at 640: %dx%d, want 672x672", h, w);
    val_rect_shape(0.75, 0.75, 640, 0, &h, &w);
    CHECK(h == 480 && w == 640, "pad 0: %dx%d, want 480x640", h, w);
}

// Five images of known sizes, batch 2, S = 64: sorted by h/w (0.33, 0.5 | 1, 1.33 | 2) into batches of
// 64x96, 96x96 and 96x64.
static void test_rect_plan(void) {
    static const int wh[5][2] = { { 200, 100 }, { 100, 200 }, { 100, 100 }, { 300, 100 }, { 120, 160 } };
    Sample s[5] = { 0 };
    for (int i = 0; i < 5; i++) s[i].w = wh[i][0], s[i].h = wh[i][1];
    Dataset ds = { .n = 5, .s = s };
    ValPlan p;
    val_plan(&ds, 2, 64, 1, 0.5, &p);
    static const int order[5] = { 3, 0, 2, 4, 1 }, shape[3][2] = { { 64, 96 }, { 96, 96 }, { 96, 64 } };
    CHECK(p.n_batches == 3, "%d batches", p.n_batches);
    for (int i = 0; i < 5; i++) CHECK(p.order[i] == order[i], "position %d: image %d, want %d", i, p.order[i], order[i]);
    for (int b = 0; b < 3 && b < p.n_batches; b++)
        CHECK(p.shape[b][0] == shape[b][0] && p.shape[b][1] == shape[b][1], "batch %d: %dx%d, want %dx%d", b,
              p.shape[b][0], p.shape[b][1], shape[b][0], shape[b][1]);
    val_plan_free(&p);
    val_plan(&ds, 2, 64, 0, 0.5, &p);                 // rect off: dataset order, S x S
    CHECK(p.order[1] == 1 && p.shape[2][0] == 64 && p.shape[2][1] == 64, "rect off");
    val_plan_free(&p);
}

// Loaded batches have the plan's shape, and their labels line up: every label maps back inside its image.
static void test_rect_batches_load(void) {
    Fixture f;
    if (fixture_open(&f, test_tmpdir("val-rect"))) { CHECK(0, "fixture"); return; }
    ValPlan p;
    val_plan(&f.ds, 2, 64, 1, 0.5, &p);
    ValBatch vb = { 0 };
    for (int b = 0; b < p.n_batches; b++) {
        val_batch_load(&f.ds, &p, b, 64, 2, &vb);
        int h, w;
        val_rect_shape(p.ar[b][0], p.ar[b][1], 64, 0.5, &h, &w);
        CHECK(vb.H == h && vb.W == w && vb.H % 32 == 0 && vb.W % 32 == 0, "batch %d: %dx%d, rule %dx%d", b, vb.H, vb.W, h, w);
        int want = 0;
        for (int i = 0; i < vb.n; i++) want += f.ds.s[vb.index[i]].nbox;
        CHECK(vb.nt == want, "batch %d: %d labels, want %d", b, vb.nt, want);
        for (int k = 0; k < vb.nt; k++) {
            const float *t = vb.targets + 6 * k;
            CHECK(t[2] > 0 && t[2] < 1 && t[3] > 0 && t[3] < 1, "label %d off the image: %g %g", k, t[2], t[3]);
        }
    }
    val_batch_free(&vb);
    val_plan_free(&p);
    fixture_close(&f);
}

// Two models built for 6 and 3 images (different forward chunks) share the batches: the result is the
// one-model result bit for bit, losses included. (Both hold one image of every padded shape; a model
// holding only one image of imgsz would shrink the padding of larger shapes, see val_evaluate_models.)
// save_json / save_txt: one JSON object and one label line per detection, image ids from the file
// stems (the synthetic set's 000000.jpg ... give numbers), boxes inside the original image.
static void test_save_json_txt(void) {
    const char *dir = test_tmpdir("val-save");
    Fixture f;
    if (fixture_open(&f, dir)) { CHECK(0, "fixture"); return; }
    char out[4200], path[4400];
    snprintf(out, sizeof out, "%s/out/run", dir);
    ValOptions o = val_options(f.cfg);
    o.out = NULL; o.nms.conf_thres = 0; o.nms.max_det = 5;
    o.save_json = o.save_txt = 1; o.save_dir = out;
    ValResult r;
    Err err;
    CHECK(val_evaluate(&f.m, &f.ds, &o, &r, &err) == 0, "%s", err.msg);
    val_result_free(&r);
    snprintf(path, sizeof path, "%s/predictions.json", out);
    FILE *j = fopen(path, "r");
    CHECK(j != NULL, "no %s", path);
    int objects = 0, bad = 0;
    char line[1024];
    while (j && fgets(line, sizeof line, j)) {
        float x, y, w, h, score;
        int id, cls;
        if (!strstr(line, "image_id")) continue;
        objects++;
        if (sscanf(line, " {\"image_id\": %d, \"category_id\": %d, \"bbox\": [%f, %f, %f, %f], \"score\": %f}", &id, &cls,
                   &x, &y, &w, &h, &score) != 7 || cls < 0 || cls >= f.ds.nc || x < 0 || w < 0 || score < 0 || score > 1)
            bad++;
    }
    if (j) fclose(j);
    CHECK(objects == 5 * f.ds.n && !bad, "%d objects (want %d), %d malformed", objects, 5 * f.ds.n, bad);
    int lines = 0;
    for (int i = 0; i < f.ds.n; i++) {
        const char *base = strrchr(f.ds.s[i].image, '/') + 1;
        snprintf(path, sizeof path, "%s/labels/%.*s.txt", out, (int)(strrchr(base, '.') - base), base);
        FILE *t = fopen(path, "r");
        CHECK(t != NULL, "no %s", path);
        while (t && fgets(line, sizeof line, t)) lines++;
        if (t) fclose(t);
    }
    CHECK(lines == 5 * f.ds.n, "%d label lines", lines);
    fixture_close(&f);
}

// The val keys: conf, iou, max_det, val_split parse; split=test names the key meant.
static void test_val_keys(void) {
    static Config cfg;
    Err err;
    char *good[] = { "conf=0.25", "iou=0.45", "max_det=100", "val_split=test", "save_json=1", "save_txt=1" };
    CHECK(config_load("cfg/t.ini", 6, good, &cfg, &err) == 0, "%s", err.msg);
    CHECK(cfg.conf == 0.25 && cfg.iou == 0.45 && cfg.max_det == 100 && !strcmp(cfg.val_split, "test") && cfg.save_json &&
          cfg.save_txt, "values %g %g %d %s", cfg.conf, cfg.iou, cfg.max_det, cfg.val_split);
    char *bad[] = { "split=test" };
    CHECK(config_load("cfg/t.ini", 1, bad, &cfg, &err) == -1 && strstr(err.msg, "val_split=test"), "%s", err.msg);
    char *range[] = { "conf=1.5" };
    CHECK(config_load("cfg/t.ini", 1, range, &cfg, &err) == -1 && strstr(err.msg, "conf"), "%s", err.msg);
}

static void test_two_models_same_result(void) {
    Fixture f;
    if (fixture_open(&f, test_tmpdir("val-two"))) { CHECK(0, "fixture"); return; }
    Err err;
    Model ma, mb;
    if (model_build(f.cfg, 6, 64, &ma, &err) || model_build(f.cfg, 3, 64, &mb, &err)) {
        CHECK(0, "%s", err.msg); fixture_close(&f); return;
    }
    memcpy(ma.state, f.m.state, sizeof(float) * f.m.n_state);
    memcpy(mb.state, f.m.state, sizeof(float) * f.m.n_state);
    ValOptions o = val_options(f.cfg);
    o.out = NULL; o.nms.conf_thres = 0;
    ValResult a, b;
    Model *two[2] = { &ma, &mb };
    int ok = val_evaluate(&ma, &f.ds, &o, &a, &err) == 0 && val_evaluate_models(two, 2, &f.ds, &o, &b, &err) == 0;
    CHECK(ok, "%s", err.msg);
    if (ok) {
        CHECK(a.m.map50 == b.m.map50 && a.m.map == b.m.map && a.m.mp == b.m.mp && a.m.mr == b.m.mr,
              "metrics differ: mAP50 %.17g vs %.17g", a.m.map50, b.m.map50);
        CHECK(a.box == b.box && a.cls == b.cls && a.dfl == b.dfl && a.cls > 0, "losses differ: %.17g %.17g", a.cls, b.cls);
        val_result_free(&a); val_result_free(&b);
    }
    model_free(&ma); model_free(&mb);
    fixture_close(&f);
}

// A trainer's EMA validated on device=cpu:2 (the batches split between the two CPU devices, each
// replica given the EMA for the pass) gives what device=cpu gives, bit for bit; the replica gets its
// training weights back afterwards.
static void ema_result(const char *dir, const char *device, ValResult *r, int *restored) {
    char dev[64], data[4200];
    snprintf(dev, sizeof dev, "device=%s", device);
    snprintf(data, sizeof data, "data=%s/data.yaml", dir);
    char *argv[] = { "imgsz=64", "batch=6", "workers=1", "seed=1", dev, data };
    static Config cfg;
    static Trainer t;
    Err err;
    Dataset ds;
    DatasetOptions opt = { .quiet = 1 };
    *restored = 0;
    memset(r, 0, sizeof *r);
    if (config_load("cfg/t.ini", 6, argv, &cfg, &err) || dataset_open(NULL, &cfg, "val", &opt, &ds, &err)) {
        CHECK(0, "%s", err.msg); return;
    }
    config_set_nc(&cfg, ds.nc);
    DeviceList devs;
    if (parse_devices(cfg.device, 0, &devs, &err) || trainer_init_devices(&t, &cfg, 1, &devs, &err)) {
        CHECK(0, "%s", err.msg); dataset_free(&ds); return;
    }
    for (size_t k = 0; k < t.m.n_state; k++) t.ema[k] = t.m.state[k] * 0.5f;   // EMA != training weights
    ValOptions o = val_options(&cfg);
    o.out = NULL; o.nms.conf_thres = 0; o.batch = 1;
    CHECK(val_evaluate_ema(&t, &ds, &o, r, &err) == 0, "%s: %s", device, err.msg);
    const Trainer *rep = t.multi ? multi_replica(t.multi, 1) : &t;
    *restored = t.m.state != t.ema && !memcmp(rep->m.state, t.m.state, sizeof(float) * t.m.n_state);
    trainer_free(&t);
    dataset_free(&ds);
}

static void test_ema_on_two_devices(void) {
    SynthConfig sc = synth_defaults();
    sc.n_train = 2; sc.n_val = 3; sc.min_side = 64; sc.max_side = 120; sc.threads = 1;
    Err err;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", test_tmpdir("val-ema"));
    if (synth_generate(dir, &sc, &err)) { CHECK(0, "%s", err.msg); return; }
    ValResult one, two;
    int r1, r2;
    ema_result(dir, "cpu", &one, &r1);
    ema_result(dir, "cpu:2", &two, &r2);
    CHECK(r1 && r2, "training weights not restored: %d %d", r1, r2);
    CHECK(one.m.map50 == two.m.map50 && one.m.map == two.m.map && one.m.mp == two.m.mp && one.m.mr == two.m.mr,
          "metrics differ: mAP50 %.17g vs %.17g", one.m.map50, two.m.map50);
    CHECK(one.box == two.box && one.cls == two.cls && one.dfl == two.dfl && one.cls > 0,
          "val losses differ: cls %.17g vs %.17g", one.cls, two.cls);
    val_result_free(&one); val_result_free(&two);
}

// Validation batches kept between passes (a training run's ValCache): the second pass copies every batch
// the first loaded and gives the same numbers, bit for bit; a budget of 0 keeps none; another plan
// (batch size) starts the cache again.
static void test_cache_same_result(void) {
    Fixture f;
    if (fixture_open(&f, test_tmpdir("val-cache"))) { CHECK(0, "fixture"); return; }
    Err err;
    ValOptions o = val_options(f.cfg);
    o.out = NULL; o.nms.conf_thres = 0; o.batch = 2;   // 3 images: 2 batches
    ValResult a, b, c;
    CHECK(val_evaluate(&f.m, &f.ds, &o, &a, &err) == 0, "%s", err.msg);
    o.cache = val_cache_new((size_t)1 << 30);
    long long hits, loads;
    CHECK(val_evaluate(&f.m, &f.ds, &o, &b, &err) == 0, "%s", err.msg);
    val_cache_counts(o.cache, &hits, &loads);
    CHECK(hits == 0 && loads == 2, "first pass: %lld kept batches used, %lld loaded", hits, loads);
    val_result_free(&b);
    CHECK(val_evaluate(&f.m, &f.ds, &o, &b, &err) == 0, "%s", err.msg);
    val_cache_counts(o.cache, &hits, &loads);
    CHECK(hits == 2 && loads == 2, "second pass: %lld kept batches used, %lld loaded (want 2, 2)", hits, loads);
    CHECK(a.m.map50 == b.m.map50 && a.m.map == b.m.map && a.m.mp == b.m.mp && a.m.mr == b.m.mr && a.box == b.box &&
          a.cls == b.cls && a.dfl == b.dfl && a.m.instances == b.m.instances, "the kept batches changed the numbers");
    o.batch = 3;                                      // another plan: loaded again
    CHECK(val_evaluate(&f.m, &f.ds, &o, &c, &err) == 0, "%s", err.msg);
    val_cache_counts(o.cache, &hits, &loads);
    CHECK(hits == 2 && loads == 3, "another plan: %lld used, %lld loaded (want 2, 3)", hits, loads);
    CHECK(c.m.images == 3, "batch 3: %d images", c.m.images);
    val_result_free(&c);
    val_cache_free(o.cache);
    o.cache = val_cache_new(0);                       // no room: every pass loads
    for (int k = 0; k < 2; k++) {
        CHECK(val_evaluate(&f.m, &f.ds, &o, &c, &err) == 0, "%s", err.msg);
        val_result_free(&c);
    }
    val_cache_counts(o.cache, &hits, &loads);
    CHECK(hits == 0 && loads == 2, "budget 0: %lld used, %lld loaded", hits, loads);
    val_cache_free(o.cache);
    val_result_free(&a); val_result_free(&b);
    fixture_close(&f);
}

// YOLO26's validation losses weigh their items by the config's gains ([hyp] box, cls, dfl), as the
// reference's validator takes the training hyperparameters: the items are linear in the gains.
static void test_val26_losses_take_gains(void) {
    const char *dir = test_tmpdir("val26");
    Fixture f;
    if (fixture_of(&f, "cfg/yolo26n.ini", dir)) { CHECK(0, "fixture"); return; }
    Err err;
    ValOptions o = val_options(f.cfg);
    o.out = NULL; o.nms.conf_thres = 0;
    ValResult r, r2;
    int ok = val_evaluate(&f.m, &f.ds, &o, &r, &err) == 0;
    f.cfg->hyp.box *= 2, f.cfg->hyp.cls *= 3, f.cfg->hyp.dfl *= 0.5;
    o = val_options(f.cfg);
    o.out = NULL; o.nms.conf_thres = 0;
    ok = ok && val_evaluate(&f.m, &f.ds, &o, &r2, &err) == 0;
    CHECK(ok, "%s", err.msg);
    if (ok) {
        CHECK(r.box > 0 && r.cls > 0 && r.dfl > 0, "losses %g %g %g", r.box, r.cls, r.dfl);
        CHECK(close_enough(r2.box, 2 * r.box, 0, 1e-9) && close_enough(r2.cls, 3 * r.cls, 0, 1e-9) &&
              close_enough(r2.dfl, 0.5 * r.dfl, 0, 1e-9), "gains x2 x3 x0.5: box %g -> %g, cls %g -> %g, l1 %g -> %g",
              r.box, r2.box, r.cls, r2.cls, r.dfl, r2.dfl);
        val_result_free(&r); val_result_free(&r2);
    }
    fixture_close(&f);
}

// The progress bar where out is not a terminal (a log file): a line each tenth of the pass crossed, none at
// the end (the table follows at once), and none at all in a pass shorter than progress_quiet seconds.
static int progress_lines(Fixture *f, const char *path, double quiet, int *redrawn) {
    ValOptions o = val_options(f->cfg);
    o.batch = 1;                                      // three batches: one image each
    o.progress_quiet = quiet;
    o.out = fopen(path, "w");
    ValResult r;
    Err err;
    int rc = o.out ? val_evaluate(&f->m, &f->ds, &o, &r, &err) : -1;
    if (o.out) fclose(o.out);
    if (rc) { CHECK(0, "%s", o.out ? err.msg : path); return -1; }
    val_result_free(&r);
    size_t n = 0;
    char *text = slurp(path, &n);
    int lines = 0;
    for (const char *s = text; s && (s = strstr(s, "img/s ETA")); s++) lines++;
    *redrawn = text && strchr(text, '\r');
    free(text);
    return lines;
}

static void test_val_progress_in_a_log(void) {
    const char *dir = test_tmpdir("val_progress");
    Fixture f;
    if (fixture_open(&f, dir)) { CHECK(0, "fixture"); return; }
    char path[4200];
    snprintf(path, sizeof path, "%s/log.txt", dir);
    int redrawn = 0, lines = progress_lines(&f, path, 0, &redrawn);
    CHECK(lines == 2 && !redrawn, "3 images logged: %d progress lines (want 33%% and 66%%)%s", lines,
          redrawn ? ", redrawn in place" : "");
    lines = progress_lines(&f, path, 60, &redrawn);
    CHECK(lines == 0, "a pass shorter than its quiet time printed %d progress lines", lines);
    fixture_close(&f);
}

int main(void) {
    RUN(test_scale_boxes_hand);
    RUN(test_decode_nms_map_back);
    RUN(test_val_evaluate_runs);
    RUN(test_val_progress_in_a_log);
    RUN(test_rect_shape_rule);
    RUN(test_rect_plan);
    RUN(test_rect_batches_load);
    RUN(test_save_json_txt);
    RUN(test_val_keys);
    RUN(test_two_models_same_result);
    RUN(test_ema_on_two_devices);
    RUN(test_cache_same_result);
    RUN(test_val26_losses_take_gains);
    return test_summary();
}
