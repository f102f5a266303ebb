// test_metrics.c: DFL decode, NMS against a brute-force reference, process_batch matching and the
// mAP known answers of the reference (§5, §7 #10, #34, #35).
#include "test/test.h"

#include "core/eval/metrics.h"
#include "core/spec/nms.h"
#include "core/base/util.h"

// ---- decode --------------------------------------------------------------------------------

// One level, 24x24 cells at stride 8, nc = 2: every anchor uniform logits (7.5 per side) except
// anchor (row 20, col 10), whose sides are one-hot at bins 2, 3, 4, 5 (a logit of 60: exp(-60) ~ 0).
static void test_decode_one_hot(void) {
    enum { H = 24, W = 24, NC = 2, C = 64 + NC };
    float *buf = calloc(H * W * C, sizeof *buf);
    Map head = map_make(buf, 1, H, W, C);
    float *px = map_at(head, 0, 20, 10);
    for (int s = 0; s < 4; s++) px[s * 16 + 2 + s] = 60.0f;
    px[64] = 0.0f; px[65] = 2.0f;
    int strides[1] = { 8 };
    float boxes[H * W * 4], scores[H * W * NC];
    CHECK(nms_anchors(&head, 1) == H * W, "%d", nms_anchors(&head, 1));
    nms_decode(&head, strides, 1, 0, NC, boxes, scores);
    const float *b = boxes + (20 * W + 10) * 4;      // §7 #10: (10.5, 20.5), ltrb (2,3,4,5) -> (68,140,116,204)
    const float want[4] = { 68, 140, 116, 204 };
    for (int k = 0; k < 4; k++) CHECK(close_enough(b[k], want[k], 1e-4, 0), "corner %d: %g vs %g", k, b[k], want[k]);
    const float *s = scores + (20 * W + 10) * NC;
    CHECK(close_enough(s[0], 0.5, 1e-7, 0) && close_enough(s[1], 1 / (1 + exp(-2.0)), 1e-6, 0), "%g %g", s[0], s[1]);
    b = boxes;                                       // anchor (0.5, 0.5), 7.5 per side: (-56, -56, 64, 64)
    CHECK(close_enough(b[0], -56, 1e-4, 0) && close_enough(b[3], 64, 1e-4, 0), "%g %g", b[0], b[3]);
    free(buf);
}

// ---- NMS -----------------------------------------------------------------------------------

// The reference written another way: repeatedly take the best remaining (box, class) candidate
// (earliest on equal score) and drop same-class candidates overlapping it by more than thr.
static int nms_brute(const float *boxes, const float *scores, int A, int nc, const NmsOptions *o, Det *out) {
    int n = A * nc, nd = 0;
    char *alive = calloc(n, 1);
    for (int k = 0; k < n; k++) {
        const float *s = scores + (k / nc) * nc;
        float mx = s[0];
        for (int c = 1; c < nc; c++) mx = s[c] > mx ? s[c] : mx;
        alive[k] = mx > o->conf_thres && scores[k] > o->conf_thres;
    }
    while (nd < o->max_det) {
        int best = -1;
        for (int k = 0; k < n; k++) if (alive[k] && (best < 0 || scores[k] > scores[best])) best = k;
        if (best < 0) break;
        const float *b = boxes + (best / nc) * 4;
        out[nd++] = (Det){ b[0], b[1], b[2], b[3], scores[best], best % nc };
        alive[best] = 0;
        for (int k = 0; k < n; k++)
            if (alive[k] && k % nc == best % nc && nms_iou(b, boxes + (k / nc) * 4) > o->iou_thres) alive[k] = 0;
    }
    free(alive);
    return nd;
}

static void test_nms_vs_brute_force(void) {
    enum { A = 200, NC = 3 };
    float boxes[A * 4], scores[A * NC];
    Det got[A * NC], want[A * NC];
    for (int trial = 0; trial < 20; trial++) {
        Rng r = rng_for(7, trial, 0);
        for (int a = 0; a < A; a++) {           // clustered boxes so that many overlap
            float cx = rng_uniform(&r, 0, 200), cy = rng_uniform(&r, 0, 200);
            float w = rng_uniform(&r, 10, 60), h = rng_uniform(&r, 10, 60);
            boxes[a * 4 + 0] = cx - w / 2; boxes[a * 4 + 1] = cy - h / 2;
            boxes[a * 4 + 2] = cx + w / 2; boxes[a * 4 + 3] = cy + h / 2;
            for (int c = 0; c < NC; c++) scores[a * NC + c] = (float)rng_uniform(&r, 0, 1);
        }
        NmsOptions o = nms_val_options();
        o.conf_thres = 0.3f; o.iou_thres = trial % 2 ? 0.45f : 0.7f; o.max_det = trial < 10 ? 300 : 25;
        o.multi_label = trial % 3 != 0;
        if (!o.multi_label) {                   // best class only: zero the others for the reference
            for (int a = 0; a < A; a++) {
                int best = 0;
                for (int c = 1; c < NC; c++) if (scores[a * NC + c] > scores[a * NC + best]) best = c;
                for (int c = 0; c < NC; c++) if (c != best) scores[a * NC + c] = 0;
            }
        }
        int ng = nms_run(boxes, scores, A, NC, &o, got);
        int nw = nms_brute(boxes, scores, A, NC, &o, want);
        CHECK(ng == nw, "trial %d: %d detections, brute force %d", trial, ng, nw);
        CHECK(ng > 5 && ng <= o.max_det, "trial %d: %d detections", trial, ng);
        for (int i = 0; i < ng && i < nw; i++)
            if (memcmp(&got[i], &want[i], sizeof got[i])) {
                CHECK(0, "trial %d: detection %d differs (cls %d %g vs %d %g)", trial, i, got[i].cls,
                      got[i].conf, want[i].cls, want[i].conf);
                break;
            }
    }
}

static void test_nms_suppression_rule(void) {   // strict >: IoU exactly at the threshold survives
    float boxes[] = { 0, 0, 10, 10,   0, 0, 10, 5,   0, 5, 10, 9,   100, 100, 110, 110 };
    float scores[] = { 0.9f, 0.8f, 0.7f, 0.6f };
    NmsOptions o = nms_val_options();
    o.iou_thres = 0.5f;
    Det d[4];
    int n = nms_run(boxes, scores, 4, 1, &o, d);  // IoU(0,1) = 0.5 kept; IoU(0,2) = 0.4 kept
    CHECK(n == 4, "%d kept", n);
    o.iou_thres = 0.45f;
    n = nms_run(boxes, scores, 4, 1, &o, d);      // box 1 goes; box 2 overlaps box 0 by 0.4 and stays
    CHECK(n == 3 && d[1].conf == 0.7f && d[2].conf == 0.6f, "%d kept", n);
}

// ---- matching ------------------------------------------------------------------------------

static Det box(float x1, float y1, float x2, float y2, float conf, int cls) {
    return (Det){ x1, y1, x2, y2, conf, cls };
}

static void test_iou_thresholds(void) {
    float v[METRICS_NIOU];
    metrics_iou_thresholds(v);
    CHECK(v[0] == 0.5f && v[9] == 0.95f, "%.9g %.9g", v[0], v[9]);
    for (int i = 0; i < METRICS_NIOU; i++) CHECK(fabs(v[i] - (0.5 + 0.05 * i)) < 1e-6, "%d: %.9g", i, v[i]);
}

static void test_match_rules(void) {
    uint8_t c[2][METRICS_NIOU];
    // a detection between two labels goes to its best label; the other detection takes the other label
    Det gt[2] = { box(0, 0, 10, 10, 0, 0), box(0, 0, 10, 12, 0, 0) };
    Det det[2] = { box(0, 0, 10, 11, 0.9f, 0), box(0, 0, 10, 10, 0.8f, 0) };
    metrics_match(det, 2, gt, 2, c);           // IoUs: d0-A .909, d0-B .917, d1-A 1, d1-B .833
    for (int t = 0; t < METRICS_NIOU; t++) {
        CHECK(c[0][t] == (t < 9), "d0 t%d: %d", t, c[0][t]);
        CHECK(c[1][t] == 1, "d1 t%d: %d", t, c[1][t]);
    }
    // one label, two detections: the lower detection index (higher confidence) wins when both qualify,
    // even though the other overlaps more (the re-sort is commented out in the reference)
    Det one = box(0, 0, 100, 100, 0, 0);
    Det two[2] = { box(0, 0, 100, 78, 0.9f, 0), box(0, 0, 100, 96, 0.8f, 0) };   // IoU .78 and .96
    metrics_match(two, 2, &one, 1, c);
    for (int t = 0; t < METRICS_NIOU; t++) {
        CHECK(c[0][t] == (t <= 5), "d0 t%d: %d", t, c[0][t]);   // thresholds .50 .. .75
        CHECK(c[1][t] == (t > 5), "d1 t%d: %d", t, c[1][t]);
    }
    Det other = box(0, 0, 100, 100, 0.9f, 1);   // a perfect box of another class is no match
    metrics_match(&other, 1, &one, 1, c);
    CHECK(!c[0][0], "class mismatch matched");
}

static void test_interp_and_ap(void) {
    const double xp[] = { 0, 1, 1, 2 }, fp[] = { 0, 1, 2, 3 };
    CHECK(metrics_interp(1, xp, fp, 4, -1, 9) == 2, "tie: the last equal xp, as numpy");
    CHECK(close_enough(metrics_interp(0.5, xp, fp, 4, -1, 9), 0.5, 1e-15, 0), "inside");
    CHECK(metrics_interp(-0.1, xp, fp, 4, -1, 9) == -1 && metrics_interp(2.5, xp, fp, 4, -1, 9) == 9, "ends");
    CHECK(metrics_interp(2, xp, fp, 4, -1, 9) == 3, "x == last xp gives the last fp");
    const double r1[] = { 1 }, p1[] = { 1 };
    CHECK(close_enough(metrics_compute_ap(r1, p1, 1), 0.995, 1e-12, 0), "%.15g", metrics_compute_ap(r1, p1, 1));
}

// ---- mAP known answers ---------------------------------------------------------------------

// Feed images (each: its detections, then its labels) and compute.
static void run_case(int nc, const Det *det, const int *nd, const Det *gt, const int *ng, int images, Metrics *m) {
    MetricsStats s;
    metrics_stats_init(&s, nc);
    for (int i = 0; i < images; i++) {
        metrics_stats_add(&s, det, nd[i], gt, ng[i]);
        det += nd[i]; gt += ng[i];
    }
    metrics_compute(&s, m);
    metrics_stats_free(&s);
}

static void test_map_perfect(void) {            // §7 #34: a perfect detector scores 0.995, not 1
    Det gt[3] = { box(10, 10, 50, 60, 0, 0), box(5, 5, 20, 30, 0, 1), box(70, 10, 90, 40, 0, 0) };
    Det det[3] = { box(10, 10, 50, 60, 0.9f, 0), box(5, 5, 20, 30, 0.8f, 1), box(70, 10, 90, 40, 0.7f, 0) };
    int nd[2] = { 2, 1 }, ng[2] = { 2, 1 };
    Metrics m;
    run_case(2, det, nd, gt, ng, 2, &m);
    CHECK(m.k == 2 && m.images == 2 && m.instances == 3 && m.nt[0] == 2, "k %d images %d", m.k, m.images);
    CHECK(close_enough(m.map50, 0.995, 1e-12, 0) && close_enough(m.map, 0.995, 1e-12, 0), "%.15g %.15g", m.map50, m.map);
    CHECK(close_enough(m.mp, 1, 1e-12, 0) && close_enough(m.mr, 1, 1e-9, 0), "P %.15g R %.15g", m.mp, m.mr);
    CHECK(close_enough(metrics_fitness(&m), 0.995, 1e-12, 0), "fitness %g", metrics_fitness(&m));
    metrics_free(&m);
}

static void test_map_tp_then_fp(void) {         // §7 #34: one TP then one FP for one label: also 0.995
    Det gt[1] = { box(0, 0, 10, 10, 0, 0) };
    Det det[2] = { box(0, 0, 10, 10, 0.9f, 0), box(0, 0, 10, 10, 0.5f, 0) };   // a duplicate is an FP
    int nd[1] = { 2 }, ng[1] = { 1 };
    Metrics m;
    run_case(1, det, nd, gt, ng, 1, &m);
    CHECK(close_enough(m.map50, 0.995, 1e-12, 0) && close_enough(m.map, 0.995, 1e-12, 0), "%.15g", m.map50);
    metrics_free(&m);
}

// One class, four labels over two images; detections by confidence: TP, FP, TP, FP (exact boxes or
// disjoint ones, so the same at every threshold). recall .25 .25 .5 .5, precision 1 .5 .667 .5.
// Envelope over mrec [0 .25 .25 .5 .5 1]: mpre [1 1 .667 .667 .5 0]. On x = 0, .01, .., 1 the
// interpolant is 1 up to .24, 2/3 from .25 to .49, .5 at .5, then 1 - x (0 at x = 1). Trapezoids:
// .24 + (1 + 2/3)/2*.01 + 24*.01*2/3 + (2/3 + .5)/2*.01 + .125 = .5391666...
static void test_map_hand_case(void) {
    Det gt[4] = { box(0, 0, 10, 10, 0, 0), box(20, 20, 40, 40, 0, 0), box(0, 0, 30, 30, 0, 0), box(50, 50, 60, 60, 0, 0) };
    Det det[4] = { box(0, 0, 10, 10, 0.9f, 0), box(100, 100, 110, 110, 0.8f, 0),
                   box(0, 0, 30, 30, 0.7f, 0), box(200, 200, 210, 210, 0.6f, 0) };
    int nd[2] = { 2, 2 }, ng[2] = { 2, 2 };
    Metrics m;
    run_case(1, det, nd, gt, ng, 2, &m);
    double want = 0.24 + (1 + 2.0 / 3) / 2 * 0.01 + 0.16 + (2.0 / 3 + 0.5) / 2 * 0.01 + 0.125;
    CHECK(close_enough(m.map50, want, 1e-12, 0) && close_enough(m.map, want, 1e-12, 0), "%.15g vs %.15g", m.map50, want);
    CHECK(m.mp > 0 && m.mp <= 1 && m.mr > 0 && m.mr <= 0.5 + 1e-9, "P %g R %g", m.mp, m.mr);
    metrics_free(&m);
}

static void test_map_partial_iou(void) {        // IoU .72: TP at .50-.70 only, so mAP50-95 = .995/2
    Det gt[1] = { box(0, 0, 100, 100, 0, 0) }, det[1] = { box(0, 0, 100, 72, 0.9f, 0) };
    int nd[1] = { 1 }, ng[1] = { 1 };
    Metrics m;
    run_case(1, det, nd, gt, ng, 1, &m);
    CHECK(close_enough(m.map50, 0.995, 1e-12, 0) && close_enough(m.map, 0.4975, 1e-12, 0), "%g %g", m.map50, m.map);
    CHECK(close_enough(metrics_fitness(&m), 0.1 * 0.995 + 0.9 * 0.4975, 1e-12, 0), "fitness");
    metrics_free(&m);
}

static void test_map_empty_and_class_sets(void) {
    Det gt[2] = { box(0, 0, 10, 10, 0, 0), box(20, 20, 30, 30, 0, 1) };
    Det det[2] = { box(0, 0, 10, 10, 0.9f, 0), box(50, 50, 60, 60, 0.9f, 2) };
    Metrics m;
    int nd0[1] = { 0 }, ng0[1] = { 2 };
    run_case(3, det, nd0, gt, ng0, 1, &m);        // no predictions: every metric 0
    CHECK(m.map50 == 0 && m.map == 0 && m.mp == 0 && m.mr == 0 && m.k == 0 && m.instances == 2, "empty");
    metrics_free(&m);
    int nd1[1] = { 2 }, ng1[1] = { 1 };
    run_case(3, det, nd1, gt, ng1, 1, &m);        // class 2 has no labels: its FP is not averaged
    CHECK(m.k == 1 && m.cls[0] == 0 && close_enough(m.map50, 0.995, 1e-12, 0), "k %d map50 %g", m.k, m.map50);
    metrics_free(&m);
    int ng2[1] = { 2 };
    run_case(3, det, nd1, gt, ng2, 1, &m);        // class 1 has a label and no prediction: AP 0, averaged
    CHECK(m.k == 2 && close_enough(m.map50, 0.995 / 2, 1e-12, 0), "k %d map50 %g", m.k, m.map50);
    CHECK(m.p[1] == 0 && m.r[1] == 0 && m.ap[1] == 0, "class 1: %g %g %g", m.p[1], m.r[1], m.ap[1]);
    metrics_free(&m);
}

// ---- the curves ap_per_class plots, and metrics_compute unchanged by their factoring ----------

// One class, 2 labels; detections at conf .9 (TP), .6 (FP), .3 (TP): recall [.5 .5 1], precision
// [1 .5 2/3]. The curves by ap_per_class's formulas, worked by hand.
static void test_curves_hand_case(void) {
    Det gt[2] = { box(0, 0, 10, 10, 0, 0), box(50, 50, 60, 60, 0, 0) };
    Det det[3] = { box(0, 0, 10, 10, 0.9f, 0), box(20, 20, 30, 30, 0.6f, 0), box(50, 50, 60, 60, 0.3f, 0) };
    MetricsStats s;
    metrics_stats_init(&s, 1);
    metrics_stats_add(&s, det, 3, gt, 2);
    MetricsCurves c;
    metrics_curves(&s, &c);
    CHECK(c.k == 1 && c.cls[0] == 0 && c.n_pred[0] == 3, "k %d", c.k);
    double rec2 = 1 / (2 + 1e-16), c9 = -(double)0.9f, c6 = -(double)0.6f;
    CHECK(metrics_px(0) == 0 && metrics_px(999) == 1 && close_enough(metrics_px(600), 600.0 / 999, 1e-15, 0), "px");
    // confidence 0: right of every detection (np.interp's right = the last value)
    CHECK(c.r[0] == 2 / (2 + 1e-16) && close_enough(c.p[0], 2.0 / 3, 1e-15, 0), "px 0: r %.17g p %.17g", c.r[0], c.p[0]);
    // confidence .95: left of every detection: recall 0 (left=0), precision 1 (left=1)
    CHECK(c.r[949] == 0 && c.p[949] == 1 && c.f1[949] == 0, "px .95: r %g p %g", c.r[949], c.p[949]);
    double q = -metrics_px(700), p_ref = 1 + (0.5 - 1) * (q - c9) / (c6 - c9);   // between .9 and .6
    CHECK(close_enough(c.p[700], p_ref, 1e-12, 0) && close_enough(c.r[700], rec2, 1e-15, 0), "px .7: p %.17g want %.17g",
          c.p[700], p_ref);
    CHECK(close_enough(c.f1[700], 2 * p_ref * rec2 / (p_ref + rec2 + 1e-16), 1e-12, 0), "F1 %.17g", c.f1[700]);
    // PR: mrec [0 .5 .5 1 1], envelope [1 1 2/3 2/3 0]
    CHECK(c.pr[0] == 1 && c.pr[400] == 1 && close_enough(c.pr[700], 2.0 / 3, 1e-12, 0) && c.pr[999] == 0,
          "PR %g %g %g %g", c.pr[0], c.pr[400], c.pr[700], c.pr[999]);
    Metrics m;                                 // P and R are the curves at the best-F1 index
    metrics_compute(&s, &m);
    int hit = 0;
    for (int x = 0; x < METRICS_PX; x++) hit |= c.p[x] == m.p[0] && c.r[x] == m.r[0];
    CHECK(hit && m.ap50[0] == c.ap[0][0], "P %g R %g not on the curves", m.p[0], m.r[0]);
    metrics_free(&m);
    metrics_curves_free(&c);
    metrics_stats_free(&s);
}

static void test_smooth(void) {                // smooth(y, 0.05): 51 taps, ends padded with copies
    double y[1000], sm[1000];
    for (int i = 0; i < 1000; i++) y[i] = i >= 500;
    metrics_smooth(y, 1000, 0.05, sm);
    CHECK(sm[0] == 0 && close_enough(sm[499], 25.0 / 51, 1e-14, 0) && close_enough(sm[500], 26.0 / 51, 1e-14, 0) &&
          close_enough(sm[999], 1, 1e-14, 0), "%.17g %.17g %.17g", sm[499], sm[500], sm[999]);
    metrics_smooth(y, 1000, 0.1, sm);          // the best-F1 filter: 101 taps
    CHECK(close_enough(sm[499], 50.0 / 101, 1e-14, 0), "%.17g", sm[499]);
}

// Random statistics through metrics_compute: mP, mR, mAP50, mAP50-95 exactly as the code before the
// curves were factored out of it gave them (hex floats printed by that build).
static unsigned long long rng_state = 88172645463325252ULL;
static double rnd(void) {
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 7; rng_state ^= rng_state << 17;
    return (rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static void test_metrics_unchanged(void) {
    static const double want[12][4] = {
        { 0x1.04dd24f6ee38dp-2, 0x1.4cccccccccccdp-1, 0x1.352a4dfd4f8aep-2, 0x1.70121eb1f0276p-3 },
        { 0x1.9e9887e99252ap-3, 0x1.8555555555556p-1, 0x1.0ace60356fef2p-2, 0x1.791358b65e3f2p-3 },
        { 0x1.6f6b58bb5d03cp-3, 0x1.5cdcdcdcdcdcdp-1, 0x1.5373496eab6e9p-3, 0x1.197167e44b563p-3 },
        { 0x1.19c67a90857ecp-2, 0x1.0693e93e93e94p-1, 0x1.1c242bd4d8cap-2, 0x1.67162d5d29244p-3 },
        { 0x1.57498be16abe8p-3, 0x1.86d3a06d3a06dp-1, 0x1.6160ce8f34c82p-3, 0x1.f8bf7d372aae8p-4 },
        { 0x1.3ec731687b42dp-3, 0x1.682834efea257p-1, 0x1.863bf0cadd9cfp-3, 0x1.0df02aa9e89ebp-3 },
        { 0x1.7a315c095a2e5p-3, 0x1.4726a0f5b243ep-2, 0x1.b012a7dcd76c7p-3, 0x1.5a12287865541p-3 },
        { 0x1.4141414141414p-3, 0x1.3f2b3884fcacep-1, 0x1.19db424444401p-3, 0x1.83278b8c06636p-4 },
        { 0x1.56db7ca90a5b8p-3, 0x1.305f22df60952p-1, 0x1.523b0d3becf18p-3, 0x1.e09fcff5d2827p-4 },
        { 0x1.4bc70011c50e1p-3, 0x1.52ac2a6c4e667p-1, 0x1.5b952c5c5e145p-3, 0x1.015d0075b9a64p-3 },
        { 0x1.4bf4757462272p-3, 0x1.4803dbf68f7eep-1, 0x1.528a2cb4c5b54p-3, 0x1.e7669dcfcde52p-4 },
        { 0x1.4d1949eae633dp-3, 0x1.927935b322b31p-1, 0x1.7c2f8b7221f4ep-3, 0x1.212489d0ab342p-3 },
    };
    for (int trial = 0; trial < 12; trial++) {
        int nc = 1 + trial % 7, images = 5 + trial * 3;
        MetricsStats s;
        metrics_stats_init(&s, nc);
        for (int im = 0; im < images; im++) {
            Det gt[12], det[40];
            int ng = (int)(rnd() * 8), nd = (int)(rnd() * 30);
            for (int i = 0; i < ng; i++) {
                float x = rnd() * 500, y = rnd() * 500, w = 10 + rnd() * 100, h = 10 + rnd() * 100;
                gt[i] = (Det){ x, y, x + w, y + h, 1, (int)(rnd() * nc) };
            }
            for (int j = 0; j < nd; j++) {
                if (ng && rnd() < 0.6) {
                    Det g = gt[(int)(rnd() * ng)];
                    float j1 = (rnd() - 0.5) * 20;
                    det[j] = (Det){ g.x1 + j1, g.y1 - j1, g.x2 + j1 * 0.5f, g.y2, (float)((int)(rnd() * 50) / 50.0),
                                    rnd() < 0.8 ? g.cls : (int)(rnd() * nc) };
                } else {
                    float x = rnd() * 500, y = rnd() * 500;
                    det[j] = (Det){ x, y, x + 30, y + 40, (float)rnd(), (int)(rnd() * nc) };
                }
            }
            metrics_stats_add(&s, det, nd, gt, ng);
        }
        Metrics m;
        metrics_compute(&s, &m);
        CHECK(m.mp == want[trial][0] && m.mr == want[trial][1] && m.map50 == want[trial][2] && m.map == want[trial][3],
              "trial %d: %a %a %a %a", trial, m.mp, m.mr, m.map50, m.map);
        metrics_free(&m);
        metrics_stats_free(&s);
    }
}

int main(void) {
    RUN(test_decode_one_hot);
    RUN(test_nms_vs_brute_force);
    RUN(test_nms_suppression_rule);
    RUN(test_iou_thresholds);
    RUN(test_match_rules);
    RUN(test_interp_and_ap);
    RUN(test_map_perfect);
    RUN(test_map_tp_then_fp);
    RUN(test_map_hand_case);
    RUN(test_map_partial_iou);
    RUN(test_map_empty_and_class_sets);
    RUN(test_curves_hand_case);
    RUN(test_smooth);
    RUN(test_metrics_unchanged);
    return test_summary();
}
