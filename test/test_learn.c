// test_learn.c: it learns. gelan-t trains a few hundred steps on a handful of built-in synthetic
// images; the loss must fall by a large factor and the model must then find those objects (a box
// of the right class with IoU > 0.5 after a confidence threshold and NMS). Bounded for CI: ~1 min.
// The run is deterministic for one floating-point path, but which path depends on the machine:
// OpenBLAS picks its kernels by CPU (OPENBLAS_CORETYPE) and splits work by thread count, and the
// training is chaotic, so each path is a different run. The recipe and the bounds below are chosen
// so that the verdict holds on every path, not just the one it was tuned on.
#include "test/test.h"

#include "cfg/config.h"
#include "core/train/step.h"
#include "core/train/train.h"
#include "io/image.h"
#include "io/synth.h"

enum { N = 4, S = 160, STEPS = 400, MAX_OBJ = N * SYNTH_MAX_OBJECTS };

typedef struct { float x1, y1, x2, y2, score; int cls; } Det;

static double iou(const float *a, const float *b) {
    double iw = fmin(a[2], b[2]) - fmax(a[0], b[0]), ih = fmin(a[3], b[3]) - fmax(a[1], b[1]);
    if (iw <= 0 || ih <= 0) return 0;
    double inter = iw * ih;
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter);
}

// Best-class decode of image n's anchors above conf, then greedy class-aware NMS at IoU 0.5.
static int detect(const Model *m, int n, float conf, Det *out, int max) {
    int k = 0;
    for (int l = 0; l < m->n_levels; l++) {
        Map h = model_value(m, m->head[l], N);
        for (int y = 0; y < h.H; y++)
            for (int x = 0; x < h.W; x++) {
                const float *v = map_at(h, n, y, x);
                int c = 0;
                for (int j = 1; j < m->nc; j++) if (v[64 + j] > v[64 + c]) c = j;
                float s = 1.0f / (1.0f + expf(-v[64 + c]));
                if (s < conf || k == max) continue;
                double d[4], p[LOSS_REG_MAX];
                for (int side = 0; side < 4; side++) d[side] = loss_dfl_decode(v + 16 * side, p);
                float st = (float)m->strides[l], ax = x + 0.5f, ay = y + 0.5f;
                out[k++] = (Det){ (ax - d[0]) * st, (ay - d[1]) * st, (ax + d[2]) * st, (ay + d[3]) * st, s, c };
            }
    }
    for (int i = 1; i < k; i++)                         // by score, descending
        for (int j = i; j > 0 && out[j].score > out[j - 1].score; j--) { Det t = out[j]; out[j] = out[j - 1]; out[j - 1] = t; }
    int kept = 0;
    for (int i = 0; i < k; i++) {
        int keep = 1;
        for (int j = 0; j < kept && keep; j++) keep = !(out[j].cls == out[i].cls && iou(&out[j].x1, &out[i].x1) > 0.5);
        if (keep) out[kept++] = out[i];
    }
    return kept;
}

static void test_learns_synthetic_objects(void) {
    static Config cfg;
    Err err;
    // lr0 0.02, twice the config's: at 0.01 an object the task-aligned assigner has not taken up by
    // ~300 steps stays unfound for good (the count plateaus, more steps do not help), and which
    // objects those are depends on the rounding path. At 0.02 the count saturates by ~300 steps.
    char *ov[] = { "batch=4", "imgsz=160", "epochs=1", "nc=6", "seed=0", "lr0=0.02" };
    if (config_load("cfg/t.ini", 6, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    // four synthetic images, resized to S x S (normalised boxes stay valid), and their targets
    SynthConfig sc = synth_defaults();
    sc.min_side = sc.max_side = S;                     // objects 12 px and up: an anchor centre inside
    float targets[MAX_OBJ * 6], boxes[MAX_OBJ][4];
    int cls[MAX_OBJ], img_of[MAX_OBJ], nt = 0;
    Trainer t;
    if (trainer_init(&t, &cfg, 1, -1, &err)) { CHECK(0, "%s", err.msg); return; }
    for (int n = 0; n < N; n++) {
        Image im, small;
        SynthObject obj[SYNTH_MAX_OBJECTS];
        int k = synth_render(&sc, 0, n, &im, obj);
        small = image_resize(&im, S, S, 1);
        for (size_t i = 0; i < (size_t)S * S * 3; i++) t.input[(size_t)n * S * S * 3 + i] = small.px[i] / 255.0f;
        for (int j = 0; j < k; j++) {
            float sx = (float)S / im.w, sy = (float)S / im.h;
            float b[4] = { obj[j].x1 * sx, obj[j].y1 * sy, obj[j].x2 * sx, obj[j].y2 * sy };
            float *r = targets + 6 * nt;
            r[0] = n; r[1] = obj[j].cls;
            r[2] = (b[0] + b[2]) / 2 / S; r[3] = (b[1] + b[3]) / 2 / S; r[4] = (b[2] - b[0]) / S; r[5] = (b[3] - b[1]) / S;
            memcpy(boxes[nt], b, sizeof b);
            cls[nt] = obj[j].cls; img_of[nt] = n; nt++;
        }
        image_free(&im); image_free(&small);
    }
    // a short schedule for a tiny set: step every batch, warmup 30 iterations
    t.sched.batch_total = 64; t.sched.accumulate = 1; t.sched.nw = 30;
    double t0 = now_seconds(), first = 0, last = 0;
    LossOut lo;
    for (int i = 0; i < STEPS; i++) {
        if (trainer_step(&t, N, S, targets, nt, 0, i, &lo, &err)) { CHECK(0, "%s", err.msg); break; }
        if (i < 5) first += lo.total / 5;
        if (i >= STEPS - 5) last += lo.total / 5;
    }
    printf("    %d steps of gelan-t on %d images (%d objects) at %d: loss %.2f -> %.2f in %.0f s\n", STEPS, N, nt, S,
           first, last, now_seconds() - t0);
    CHECK(last < first / 4, "loss fell only from %.2f to %.2f", first, last);
    // the trained weights (not the EMA, which by design lags over so few steps) find the objects
    // BN with batch statistics: after so few, fast-changing steps the running statistics (momentum
    // 0.03) still lag the weights; they are right once they settle (checked: 200 more forwards).
    model_forward(&t.m, t.input, N, S, S, 1);
    int found = 0, big = 0, big_found = 0;
    static Det det[4096];
    for (int j = 0; j < nt; j++) {
        int k = detect(&t.m, img_of[j], 0.25f, det, 4096), hit = 0;
        for (int d = 0; d < k && !hit; d++) hit = det[d].cls == cls[j] && iou(&det[d].x1, boxes[j]) > 0.5;
        found += hit;
        int is_big = boxes[j][2] - boxes[j][0] >= 24 && boxes[j][3] - boxes[j][1] >= 24;
        big += is_big; big_found += is_big && hit;
        if (switch_str(SW_VERBOSE)) {
            double best = 0, bs = 0;
            k = detect(&t.m, img_of[j], 0.01f, det, 4096);
            for (int d = 0; d < k; d++) if (det[d].cls == cls[j] && iou(&det[d].x1, boxes[j]) > best) { best = iou(&det[d].x1, boxes[j]); bs = det[d].score; }
            printf("    object %d (class %d, %.0fx%.0f px): best IoU %.2f at score %.2f\n", j, cls[j], boxes[j][2] - boxes[j][0], boxes[j][3] - boxes[j][1], best, bs);
        }
    }
    printf("    found %d of %d objects, %d of the %d of 24 px and more (right class, IoU > 0.5, confidence > 0.25)\n",
           found, nt, big_found, big);
    // Objects under ~20 px start slowly under the task-aligned assigner (its metric is IoU^6 with the
    // initial ~15-cell predicted boxes), as in the reference. Over OpenBLAS core types and seeds
    // (seeds stand in for other rounding paths) this recipe finds every object, or all but the
    // smallest (8 px, partly hidden); the test asks for every object of 24 px and more and allows
    // two misses, one more than the worst run showed.
    CHECK(big > 0 && big_found == big, "found %d of %d objects of 24 px and more", big_found, big);
    CHECK(found >= nt - 2, "found only %d of %d objects", found, nt);
    trainer_free(&t);
}

int main(void) {
    RUN(test_learns_synthetic_objects);
    return test_summary();
}
