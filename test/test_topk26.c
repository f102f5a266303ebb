// test_topk26.c: NMS-free top-k inference: a hand-made case (an anchor kept with two classes, one of the
// top-k anchors dropped), the conf filter and the agnostic mode, equality with a brute-force top-k over
// every (anchor, class) pair, max_det above the anchor count, ranking by logit where scores round to
// the same float, and the box/logit decode. The tables hold logits; scores are topk26_score of them.
#include "core/spec/topk26.h"
#include "test/test.h"

static const float HAND[5][3] = { { 0.1f, 0.8f, 0.2f }, { 0.9f, 0.89f, 0.05f }, { 0.3f, 0.1f, 0.2f },
                                  { 0.95f, 0.0f, 0.0f }, { 0.5f, 0.6f, 0.7f } };

static void hand_boxes(float *boxes) {
    for (int a = 0; a < 5; a++)
        for (int i = 0; i < 4; i++) boxes[4 * a + i] = (float)(10 * a + i);
}

static void test_hand(void) {
    float boxes[20], logits[15];
    hand_boxes(boxes);
    memcpy(logits, HAND, sizeof HAND);
    Topk26Item work[5 + 3 * 3];
    Det26 out[5];
    CHECK(topk26_work_items(5, 3, 3) == 5 + 9, "work items %zu", topk26_work_items(5, 3, 3));
    // top 3 anchors by best class: 3 (.95), 1 (.9), 0 (.8); top 3 pairs: 3c0, 1c0, 1c1 (0 drops out)
    Topk26Opts o = { 3, 0, 0.0f };
    int n = topk26_select(boxes, logits, 5, 3, &o, work, out);
    int want_a[3] = { 3, 1, 1 }, want_c[3] = { 0, 0, 1 };
    CHECK(n == 3, "%d detections", n);
    for (int i = 0; i < n && i < 3; i++) {
        CHECK(out[i].anchor == want_a[i] && out[i].cls == want_c[i], "#%d: anchor %d class %d", i, out[i].anchor,
              out[i].cls);
        CHECK(out[i].score == topk26_score(HAND[want_a[i]][want_c[i]]) && out[i].box[2] == 10 * want_a[i] + 2,
              "#%d values", i);
    }
    o.conf = topk26_score(0.9f);   // score > conf, strictly: .9 goes too
    n = topk26_select(boxes, logits, 5, 3, &o, work, out);
    CHECK(n == 1 && out[0].anchor == 3, "conf 0.9: %d detections", n);
    o = (Topk26Opts){ 3, 1, 0.0f };   // agnostic: one class per anchor
    n = topk26_select(boxes, logits, 5, 3, &o, work, out);
    CHECK(n == 3 && out[0].anchor == 3 && out[1].anchor == 1 && out[1].cls == 0 && out[2].anchor == 0 &&
          out[2].cls == 1, "agnostic: %d, %d/%d, %d/%d", n, out[1].anchor, out[1].cls, out[2].anchor, out[2].cls);
    o = (Topk26Opts){ 300, 0, 0.0f };   // k = min(max_det, A) = 5: .95 .9 .89 .8 .7
    Topk26Item work5[5 + 5 * 3];
    n = topk26_select(boxes, logits, 5, 3, &o, work5, out);
    CHECK(n == 5 && out[3].score == topk26_score(0.8f) && out[4].score == topk26_score(0.7f), "max_det above A: %d, last %g", n,
          n ? out[n - 1].score : 0);
}

// Two-stage top-k equals the top k of all A*nc pairs (distinct scores): a pair of an anchor outside
// the top k anchors is beaten by those k anchors' best pairs.
static void test_against_brute_force(void) {
    enum { A = 211, NC = 7, K = 30 };
    Rng r = rng_for(26, 5, 0);
    static float boxes[4 * A], logits[A * NC];
    static Topk26Item work[A + K * NC], all[A * NC];
    Det26 out[K];
    for (int trial = 0; trial < 5; trial++) {
        for (int i = 0; i < 4 * A; i++) boxes[i] = (float)rng_uniform(&r, 0, 640);
        for (int i = 0; i < A * NC; i++) logits[i] = (float)rng_uniform(&r, -6, 6);
        Topk26Opts o = { K, 0, 0.3f };
        int n = topk26_select(boxes, logits, A, NC, &o, work, out);
        int m = 0;
        for (int i = 0; i < A * NC; i++) all[m++] = (Topk26Item){ logits[i], i };
        for (int i = 0; i < m; i++)   // selection sort of the first K, descending
            for (int j = i + 1; j < m && i < K; j++)
                if (all[j].s > all[i].s) { Topk26Item t = all[i]; all[i] = all[j]; all[j] = t; }
        int want = 0, bad = 0;
        for (int i = 0; i < K; i++) want += topk26_score(all[i].s) > 0.3f;
        CHECK(n == want, "trial %d: %d detections, brute force %d", trial, n, want);
        for (int i = 0; i < n && i < want; i++)
            bad += out[i].anchor != all[i].i / NC || out[i].cls != all[i].i % NC || out[i].score != topk26_score(all[i].s) ||
                   out[i].box[0] != boxes[4 * (all[i].i / NC)];
        CHECK(bad == 0, "trial %d: %d detections differ from brute force", trial, bad);
    }
}

// Logits 17, 19 and 23 all have the score 1.0f, and -30 and -25 scores of about 1e-13 and 1e-11: the
// ranking follows the logits (a ranking by score would keep anchor order for the first three), which is
// also the order ONNX's TopK over the logits gives. Fails on a selection that sorts scores.
static void test_saturated_scores_rank_by_logit(void) {
    enum { A = 5, NC = 1 };
    float boxes[4 * A], logits[A] = { 17.0f, 19.0f, -30.0f, 23.0f, -25.0f };
    for (int i = 0; i < 4 * A; i++) boxes[i] = (float)i;
    Topk26Item work[A + A * NC];
    Det26 out[A];
    CHECK(topk26_score(17.0f) == 1.0f && topk26_score(23.0f) == 1.0f, "the premise: saturated scores");
    Topk26Opts o = { A, 0, -1.0f };
    int n = topk26_select(boxes, logits, A, NC, &o, work, out), want[A] = { 3, 1, 0, 4, 2 };
    CHECK(n == A, "%d detections", n);
    for (int i = 0; i < n && i < A; i++) CHECK(out[i].anchor == want[i], "#%d: anchor %d, want %d", i, out[i].anchor, want[i]);
    o.agnostic = 1;
    n = topk26_select(boxes, logits, A, NC, &o, work, out);
    CHECK(n == A && out[0].anchor == 3 && out[1].anchor == 1 && out[4].anchor == 2, "agnostic: %d, %d %d", n,
          out[0].anchor, out[1].anchor);
}

static void test_decode(void) {
    enum { N = 2, IMG = 64, NC = 2 };
    float *buf[L26_LEVELS];
    Head26 h;
    int A = 0;
    for (int l = 0; l < L26_LEVELS; l++) {
        int H = IMG >> (3 + l);
        buf[l] = calloc((size_t)N * H * H * (4 + NC), sizeof(float));
        Map m = map_make(buf[l], N, H, H, 4 + NC);
        h.box[l] = map_slice(m, 0, 4);
        h.cls[l] = map_slice(m, 4, NC);
        A += H * H;
    }
    float *d = map_at(h.box[1], 1, 2, 3), *c = map_at(h.cls[1], 1, 2, 3);   // P4 cell (y 2, x 3), image 1
    d[0] = 1.0f; d[1] = 0.5f; d[2] = 2.0f; d[3] = -0.25f;
    c[0] = 0.0f; c[1] = 2.0f;
    float *boxes = malloc(sizeof(float) * 4 * A), *logits = malloc(sizeof(float) * A * NC);
    topk26_decode(&h, 1, IMG, boxes, logits);
    int a = 8 * 8 + 2 * 4 + 3;
    float *b = boxes + 4 * a;
    CHECK(b[0] == (3.5f - 1) * 16 && b[1] == (2.5f - 0.5f) * 16 && b[2] == (3.5f + 2) * 16 &&
          b[3] == (2.5f - 0.25f) * 16, "box %g %g %g %g", b[0], b[1], b[2], b[3]);
    CHECK(logits[a * NC] == 0.0f && logits[a * NC + 1] == 2.0f, "logits");
    CHECK(topk26_score(0.0f) == 0.5f && fabsf(topk26_score(2.0f) - 1 / (1 + expf(-2))) < 1e-7f, "scores");
    CHECK(boxes[0] == 4 && boxes[2] == 4, "anchor 0, zero distances: the point (4, 4): %g %g", boxes[0], boxes[2]);
    for (int l = 0; l < L26_LEVELS; l++) free(buf[l]);
    free(boxes); free(logits);
}

int main(void) {
    RUN(test_hand);
    RUN(test_against_brute_force);
    RUN(test_saturated_scores_rank_by_logit);
    RUN(test_decode);
    return test_summary();
}
