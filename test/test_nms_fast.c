// test_nms_fast.c: nms_run_fast (core/spec/nms_fast.c) picks exactly nms_run's detections (count, order,
// boxes, scores and classes bit for bit) on decoded random heads with 0, 1, few and > 30,000 candidates,
// ties, nc 1/3/80, max_det hit, best-class and agnostic modes, and on boxes outside its fast path.
#include <math.h>

#include "test/test.h"

#include "core/spec/backend.h"
#include "core/spec/loss.h"
#include "core/spec/loss26.h"
#include "core/spec/nms.h"
#include "core/base/util.h"
#include "test/nms_heads.h"

// Both NMS on (boxes, scores); 0 when they agree bit for bit, else a message printed.
static int same_detections(const float *boxes, const float *scores, int A, int nc, const NmsOptions *o,
                           const char *what) {
    Det *want = xmalloc(sizeof(Det) * ((size_t)A * nc + 1)), *got = xmalloc(sizeof(Det) * ((size_t)A * nc + 1));
    int nw = nms_run(boxes, scores, A, nc, o, want), ng = nms_run_fast(boxes, scores, A, nc, o, got), bad = 0;
    if (nw != ng) printf("    %s: %d detections, reference %d\n", what, ng, nw), bad = 1;
    for (int i = 0; !bad && i < nw; i++)
        if (memcmp(&want[i], &got[i], sizeof(Det))) {
            printf("    %s: detection %d: cls %d conf %.9g (%g,%g) vs reference cls %d conf %.9g (%g,%g)\n", what, i,
                   got[i].cls, got[i].conf, got[i].x1, got[i].y1, want[i].cls, want[i].conf, want[i].x1, want[i].y1);
            bad = 1;
        }
    free(want); free(got);
    return bad;
}

// Candidates above conf_thres the reference would consider (for checking that a case is what it claims).
static int count_pairs(const float *scores, int A, int nc, float thr) {
    int n = 0;
    for (size_t k = 0; k < (size_t)A * nc; k++) n += scores[k] > thr;
    return n;
}

static void check_heads(int kind, int nc, int img_h, int img_w, int N, const NmsOptions *o, int min_pairs,
                        int max_pairs) {
    Heads h;
    heads_make(&h, N, img_h, img_w, nc, kind, 11);
    float *boxes = xmalloc(sizeof(float) * 4 * h.A), *scores = xmalloc(sizeof(float) * h.A * nc);
    for (int n = 0; n < N; n++) {
        nms_decode(h.head, h.strides, 3, n, nc, boxes, scores);
        char what[128];
        snprintf(what, sizeof what, "%s nc %d image %d max_det %d multi %d agnostic %d", head_kind_name[kind], nc, n,
                 o->max_det, o->multi_label, o->agnostic);
        int pairs = count_pairs(scores, h.A, nc, o->conf_thres);
        CHECK(pairs >= min_pairs && pairs <= max_pairs, "%s: %d pairs, meant [%d, %d]", what, pairs, min_pairs, max_pairs);
        CHECK(!same_detections(boxes, scores, h.A, nc, o, what), "%s", what);
    }
    free(boxes); free(scores);
    heads_free(&h);
}

static void test_counts(void) {
    NmsOptions o = nms_val_options();
    for (int nc = 1; nc <= 80; nc = nc == 1 ? 3 : nc == 3 ? 80 : 81) {
        check_heads(HEAD_NONE, nc, 96, 128, 2, &o, 0, 0);
        check_heads(HEAD_ONE, nc, 96, 128, 2, &o, 1, 1);
        check_heads(HEAD_FEW, nc, 160, 96, 2, &o, 2, 40);
    }
}

static void test_many_max_nms_and_max_det(void) {   // 640 px, nc 80: > 30,000 pairs, 300 kept
    NmsOptions o = nms_val_options();
    check_heads(HEAD_MANY, 80, 640, 640, 1, &o, 30001, 1 << 30);
    o.max_det = 7;
    check_heads(HEAD_MANY, 80, 320, 256, 1, &o, 1000, 1 << 30);
    o = nms_detect_options();                      // best class only, conf 0.25
    check_heads(HEAD_MANY, 80, 320, 256, 1, &o, 100, 1 << 30);
    o.agnostic = 1;
    check_heads(HEAD_MANY, 3, 320, 256, 1, &o, 100, 1 << 30);
}

static void test_ties(void) {
    NmsOptions o = nms_val_options();
    for (int nc = 1; nc <= 80; nc = nc == 1 ? 3 : nc == 3 ? 80 : 81) check_heads(HEAD_TIES, nc, 128, 96, 2, &o, 100, 1 << 30);
    o.iou_thres = 0.45f;
    check_heads(HEAD_TIES, 3, 128, 96, 1, &o, 100, 1 << 30);
    o.multi_label = 0;
    check_heads(HEAD_TIES, 3, 128, 96, 1, &o, 100, 1 << 30);
}

// Outside the fast path (the reference runs): classes closer than NMS_MAX_WH apart, NaN boxes, a
// negative iou_thres that makes every pair suppress; and -0 against +0 scores, which compare equal.
static void test_fallbacks(void) {
    enum { A = 60, NC = 3 };
    float boxes[A * 4], scores[A * NC];
    Rng r = rng_for(5, 0, 0);
    for (int a = 0; a < A; a++) {
        float x = (float)rng_uniform(&r, -9000, 9000), y = (float)rng_uniform(&r, 0, 50);
        boxes[a * 4 + 0] = x; boxes[a * 4 + 1] = y; boxes[a * 4 + 2] = x + 8000; boxes[a * 4 + 3] = y + 30;
        for (int c = 0; c < NC; c++) scores[a * NC + c] = (float)rng_int(&r, 4) / 4;
    }
    NmsOptions o = nms_val_options();
    CHECK(!same_detections(boxes, scores, A, NC, &o, "wide boxes"), "wide boxes");
    boxes[4 * 5] = NAN;
    CHECK(!same_detections(boxes, scores, A, NC, &o, "a NaN box"), "NaN");
    for (int a = 0; a < A; a++) {               // narrow boxes again: only the threshold leaves the fast path
        float x = (float)rng_uniform(&r, 0, 100);
        boxes[a * 4 + 0] = x; boxes[a * 4 + 2] = x + 10;
    }
    o.iou_thres = -0.5f;
    CHECK(!same_detections(boxes, scores, A, NC, &o, "negative iou_thres"), "negative iou");
    o = nms_val_options();
    o.conf_thres = -1;
    for (int k = 0; k < A * NC; k++) scores[k] = k % 2 ? -0.0f : 0.0f;
    CHECK(!same_detections(boxes, scores, A, NC, &o, "signed zeros"), "signed zeros");
}

// IoU exactly at the threshold survives (strict >), as in the reference: boxes 0 and 1 overlap by 0.5.
static void test_threshold_exact(void) {
    float boxes[] = { 0, 0, 10, 10,   0, 0, 10, 5,   0, 5, 10, 9,   100, 100, 110, 110 };
    float scores[] = { 0.9f, 0.8f, 0.7f, 0.6f };
    NmsOptions o = nms_val_options();
    o.iou_thres = 0.5f;
    Det d[4];
    CHECK(nms_run_fast(boxes, scores, 4, 1, &o, d) == 4, "IoU 0.5 at iou_thres 0.5 must survive");
    CHECK(!same_detections(boxes, scores, 4, 1, &o, "threshold 0.5"), "0.5");
    o.iou_thres = 0.45f;
    CHECK(nms_run_fast(boxes, scores, 4, 1, &o, d) == 3, "IoU 0.5 at iou_thres 0.45 must go");
}

// The CPU backend's table entries (what a device's twins are held to): nms_detect gives nms_decode +
// nms_run per image; the validation loss staged in two chunks gives loss_forward_backward on the batch.
static void test_backend_entries(void) {
    Heads h;
    heads_make(&h, 3, 96, 128, 3, HEAD_MANY, 9);
    NmsOptions o = nms_val_options();
    void *prep = backend_cpu.val.nms_prepare(NULL, 3, h.A, 3, &o);
    Det *got = xmalloc(sizeof(Det) * 3 * o.max_det), *want = xmalloc(sizeof(Det) * (h.A * 3 + 1));
    int nd[3];
    backend_cpu.val.nms_detect(NULL, prep, h.head, h.strides, 3, got, nd);
    float *boxes = xmalloc(sizeof(float) * 4 * h.A), *scores = xmalloc(sizeof(float) * h.A * 3);
    for (int n = 0; n < 3; n++) {
        nms_decode(h.head, h.strides, 3, n, 3, boxes, scores);
        int nw = nms_run(boxes, scores, h.A, 3, &o, want);
        CHECK(nw == nd[n] && nw > 0 && !memcmp(want, got + (size_t)n * o.max_det, sizeof(Det) * nw), "image %d: %d vs %d", n,
              nd[n], nw);
    }
    backend_cpu.val.nms_release(NULL, prep);
    float targets[] = { 0, 1, 0.5f, 0.5f, 0.3f, 0.4f,   2, 0, 0.3f, 0.6f, 0.2f, 0.2f,   2, 2, 0.7f, 0.3f, 0.4f, 0.3f };
    LossBatch b = { .nc = 3, .img_h = 96, .img_w = 128, .targets = targets, .n_targets = 3 };
    for (int l = 0; l < 3; l++) b.head[l] = h.head[l];
    LossWork *lw = loss_work_new();
    LossOut ref, out;
    Err err;
    CHECK(loss_forward_backward(lw, &b, NULL, &ref, &err) == 0, "%s", err.msg);
    void *vl = backend_cpu.val.vloss_prepare(NULL, 3, 3, 3, h.A, 0);
    Map first[3], rest[3];
    for (int l = 0; l < 3; l++) {              // images 0 and 1..2 as two forward chunks
        first[l] = h.head[l], first[l].N = 1;
        rest[l] = h.head[l], rest[l].N = 2, rest[l].data = map_at(h.head[l], 1, 0, 0);
    }
    backend_cpu.val.vloss_stage(NULL, vl, first, 0, 3);
    backend_cpu.val.vloss_stage(NULL, vl, rest, 1, 3);
    CHECK(backend_cpu.val.vloss_eval(NULL, vl, &b, &out, &err) == 0, "%s", err.msg);
    CHECK(out.box == ref.box && out.cls == ref.cls && out.dfl == ref.dfl && ref.box > 0, "losses %.17g %.17g %.17g vs %.17g %.17g %.17g",
          out.box, out.cls, out.dfl, ref.box, ref.cls, ref.dfl);
    backend_cpu.val.vloss_release(NULL, vl);
    loss_work_free(lw);
    free(got); free(want); free(boxes); free(scores);
    heads_free(&h);
}

// The same for YOLO26 (vloss_prepare end2end, vloss_eval26): the one-to-one maps (4 + nc channels, a
// view of the random heads with the box distances made positive) staged in two chunks give
// loss26_forward_backward on the batch with those maps in both branches, bit for bit.
static void test_backend_entries26(void) {
    Heads h;
    heads_make(&h, 3, 96, 128, 3, HEAD_MANY, 11);
    Map v[3];
    for (int l = 0; l < 3; l++) {
        v[l] = h.head[l], v[l].C = 4 + 3;
        for (int n = 0; n < v[l].N; n++)
            for (int y = 0; y < v[l].H; y++)
                for (int x = 0; x < v[l].W; x++)
                    for (int k = 0; k < 4; k++) map_at(v[l], n, y, x)[k] = fabsf(map_at(v[l], n, y, x)[k]);
    }
    float targets[] = { 0, 1, 0.5f, 0.5f, 0.3f, 0.4f,   2, 0, 0.3f, 0.6f, 0.2f, 0.2f,   2, 2, 0.7f, 0.3f, 0.4f, 0.3f };
    Loss26Batch b = { .nc = 3, .img_h = 96, .img_w = 128, .targets = targets, .n_targets = 3 };
    for (int br = 0; br < L26_BRANCHES; br++)
        for (int l = 0; l < L26_LEVELS; l++) b.head[br].box[l] = map_slice(v[l], 0, 4), b.head[br].cls[l] = map_slice(v[l], 4, 3);
    Loss26Work *lw = loss26_work_new();
    Loss26Weights wt = loss26_weights(0, 1);
    const Head26 *none[L26_BRANCHES] = { NULL, NULL };
    Loss26Out ref, out;
    Err err;
    CHECK(loss26_forward_backward(lw, &b, &wt, none, &ref, &err) == 0, "%s", err.msg);
    void *vl = backend_cpu.val.vloss_prepare(NULL, 3, 3, 3, h.A, 1);
    Map first[3], rest[3];
    for (int l = 0; l < 3; l++) {              // images 0 and 1..2 as two forward chunks
        first[l] = v[l], first[l].N = 1;
        rest[l] = v[l], rest[l].N = 2, rest[l].data = map_at(v[l], 1, 0, 0);
    }
    backend_cpu.val.vloss_stage(NULL, vl, first, 0, 3);
    backend_cpu.val.vloss_stage(NULL, vl, rest, 1, 3);
    CHECK(backend_cpu.val.vloss_eval26(NULL, vl, &b, &wt, &out, &err) == 0, "%s", err.msg);
    const Loss26Terms *x = &out.br[L26_O2O], *y = &ref.br[L26_O2O];
    CHECK(x->box == y->box && x->cls == y->cls && x->l1 == y->l1 && out.total == ref.total && y->box > 0 && y->n_fg > 0,
          "o2o losses %.17g %.17g %.17g vs %.17g %.17g %.17g (%d foreground)", x->box, x->cls, x->l1, y->box, y->cls, y->l1,
          y->n_fg);
    backend_cpu.val.vloss_release(NULL, vl);
    loss26_work_free(lw);
    heads_free(&h);
}

// The speed-up the fast variant exists for, on the 640 px, nc 80 head (printed; not a pass condition).
static void test_speed(void) {
    Heads h;
    heads_make(&h, 1, 640, 640, 80, HEAD_MANY, 3);
    float *boxes = xmalloc(sizeof(float) * 4 * h.A), *scores = xmalloc(sizeof(float) * h.A * 80);
    Det *d = xmalloc(sizeof(Det) * 301);
    nms_decode(h.head, h.strides, 3, 0, 80, boxes, scores);
    NmsOptions o = nms_val_options();
    double t0 = now_seconds();
    nms_run(boxes, scores, h.A, 80, &o, d);
    double t1 = now_seconds();
    nms_run_fast(boxes, scores, h.A, 80, &o, d);
    double t2 = now_seconds();
    printf("    640 px, nc 80, %d pairs: nms_run %.1f ms, nms_run_fast %.1f ms\n", count_pairs(scores, h.A, 80, 0.001f),
           (t1 - t0) * 1e3, (t2 - t1) * 1e3);
    free(boxes); free(scores); free(d);
    heads_free(&h);
}

int main(void) {
    RUN(test_counts);
    RUN(test_many_max_nms_and_max_det);
    RUN(test_ties);
    RUN(test_fallbacks);
    RUN(test_threshold_exact);
    RUN(test_backend_entries);
    RUN(test_backend_entries26);
    RUN(test_speed);
    return test_summary();
}
