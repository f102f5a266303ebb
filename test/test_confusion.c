// test_confusion.c: the confusion matrix against cases worked by hand from YOLOv9's
// ConfusionMatrix.process_batch (conf > 0.25, IoU > 0.45, one to one, the background row and column,
// the `if n:` rule for false alarms), its column normalisation, and its counts through MetricsStats.
#include "test/test.h"

#include <math.h>

#include "core/eval/confusion.h"
#include "core/eval/metrics.h"

enum { NC = 3, BG = NC };

static Det box(float x1, float y1, float x2, float y2, float conf, int cls) { return (Det){ x1, y1, x2, y2, conf, cls }; }

// The (nc + 1)^2 counts of one image.
static void counts(const Det *det, int nd, const Det *gt, int ng, double *m) {
    ConfusionCell *cells = NULL;
    int n = 0, cap = 0;
    confusion_image(det, nd, gt, ng, NC, CONFUSION_CONF, CONFUSION_IOU, &cells, &n, &cap);
    ConfusionMatrix cm;
    confusion_build(&cm, NC, cells, n);
    memcpy(m, cm.m, sizeof(double) * (NC + 1) * (NC + 1));
    confusion_free(&cm);
    free(cells);
}

// Every cell zero except the listed (pred, truth, count) triples.
static int only(const double *m, const int (*want)[3], int n) {
    for (int r = 0; r <= NC; r++)
        for (int c = 0; c <= NC; c++) {
            double w = 0;
            for (int k = 0; k < n; k++) if (want[k][0] == r && want[k][1] == c) w = want[k][2];
            if (m[r * (NC + 1) + c] != w) return 0;
        }
    return 1;
}

static void test_match_and_background(void) {
    double m[(NC + 1) * (NC + 1)];
    Det a = box(0, 0, 10, 10, 0, 1);
    Det hit = box(0, 0, 10, 9, 0.9f, 1);                       // IoU .9, same class
    counts(&hit, 1, &a, 1, m);
    CHECK(only(m, (const int[][3]){ { 1, 1, 1 } }, 1), "a correct detection: diagonal");
    Det wrong = box(0, 0, 10, 9, 0.9f, 2);                     // the class is not part of the match
    counts(&wrong, 1, &a, 1, m);
    CHECK(only(m, (const int[][3]){ { 2, 1, 1 } }, 1), "a confused class: row 2, column 1");
    Det low = box(0, 0, 10, 9, 0.25f, 1);                      // conf > 0.25 only
    counts(&low, 1, &a, 1, m);
    CHECK(only(m, (const int[][3]){ { BG, 1, 1 } }, 1), "conf 0.25 is dropped: a missed label");
    Det loose = box(0, 0, 10, 4, 0.9f, 1);                     // IoU .4 <= .45: no match
    counts(&loose, 1, &a, 1, m);
    CHECK(only(m, (const int[][3]){ { BG, 1, 1 } }, 1), "no match: the label in the background row, and the "
          "detection not counted (the reference counts false alarms only when the image has a match)");
    Det fp[2] = { box(0, 0, 10, 9, 0.9f, 1), box(50, 50, 60, 60, 0.8f, 0) };
    counts(fp, 2, &a, 1, m);
    CHECK(only(m, (const int[][3]){ { 1, 1, 1 }, { 0, BG, 1 } }, 2), "an unmatched detection: background column");
    counts(fp, 2, NULL, 0, m);
    CHECK(only(m, NULL, 0), "no labels: nothing (val.py does not call process_batch)");
    counts(NULL, 0, &a, 1, m);
    CHECK(only(m, (const int[][3]){ { BG, 1, 1 } }, 1), "no detections: every label missed");
}

static void test_one_to_one(void) {
    double m[(NC + 1) * (NC + 1)];
    // one detection between two labels keeps its best (IoU .9 with B over .6 with A); A is missed
    Det two[2] = { box(0, 0, 10, 6, 0, 0), box(0, 0, 10, 9, 0, 2) };
    Det d = box(0, 0, 10, 10, 0.9f, 2);
    counts(&d, 1, two, 2, m);
    CHECK(only(m, (const int[][3]){ { 2, 2, 1 }, { BG, 0, 1 } }, 2), "a detection takes one label");
    // two detections on one label: the label keeps the higher IoU (the reference re-sorts here, unlike
    // val.py's process_batch), the other is a false alarm
    Det a = box(0, 0, 10, 10, 0, 0);
    Det ds[2] = { box(0, 0, 10, 7, 0.9f, 1), box(0, 0, 10, 9, 0.5f, 0) };   // IoU .7 and .9
    counts(ds, 2, &a, 1, m);
    CHECK(only(m, (const int[][3]){ { 0, 0, 1 }, { 1, BG, 1 } }, 2), "the best IoU wins, not the best confidence");
    // equal IoUs: argsort()[::-1] puts the later pair first, so the later detection wins
    Det same[2] = { box(0, 0, 10, 9, 0.9f, 0), box(0, 0, 10, 9, 0.8f, 1) };
    counts(same, 2, &a, 1, m);
    CHECK(only(m, (const int[][3]){ { 1, 0, 1 }, { 0, BG, 1 } }, 2), "tie: the later detection is matched");
}

static void test_normalised_and_stats(void) {
    ConfusionCell cells[] = { { 0, 0 }, { 0, 0 }, { 0, 0 }, { 1, 0 }, { BG, 1 }, { 2, BG } };
    ConfusionMatrix cm;
    confusion_build(&cm, NC, cells, 6);
    double n[(NC + 1) * (NC + 1)];
    confusion_normalised(&cm, n);
    CHECK(close_enough(n[0 * 4 + 0], 3 / (4 + 1e-9), 1e-15, 0) && close_enough(n[1 * 4 + 0], 1 / (4 + 1e-9), 1e-15, 0),
          "column 0: %g %g", n[0], n[4]);
    CHECK(close_enough(n[BG * 4 + 1], 1 / (1 + 1e-9), 1e-15, 0) && close_enough(n[2 * 4 + BG], 1 / (1 + 1e-9), 1e-15, 0),
          "background cells");
    CHECK(isnan(n[2 * 4 + 0]) && isnan(n[0 * 4 + 2]), "zeros (and values under 0.005) are blank");
    confusion_free(&cm);
    MetricsStats a, b;                         // the counts travel with the statistics and merge
    metrics_stats_init(&a, NC); metrics_stats_init(&b, NC);
    Det g = box(0, 0, 10, 10, 0, 1), d = box(0, 0, 10, 9, 0.9f, 1), miss = box(0, 0, 10, 10, 0, 2);
    metrics_stats_add(&a, &d, 1, &g, 1);
    metrics_stats_add(&b, NULL, 0, &miss, 1);
    metrics_stats_merge(&a, &b);
    CHECK(a.n_cm == 2 && a.cm[0].pred == 1 && a.cm[0].truth == 1 && a.cm[1].pred == BG && a.cm[1].truth == 2,
          "%d cells", a.n_cm);
    MetricsStats c;                            // a pass that draws no plot leaves the counts out, nothing else
    metrics_stats_init(&c, NC);
    c.no_confusion = 1;
    metrics_stats_add(&c, &d, 1, &g, 1);
    CHECK(c.n_cm == 0 && c.n == 1 && c.images == 1 && c.nt[1] == 1 && c.tp[0][0] == 1 && c.conf[0] == d.conf,
          "without counts: %d cells, %d detections, %d images", c.n_cm, c.n, c.images);
    metrics_stats_free(&a); metrics_stats_free(&b); metrics_stats_free(&c);
}

int main(void) {
    RUN(test_match_and_background);
    RUN(test_one_to_one);
    RUN(test_normalised_and_stats);
    return test_summary();
}
