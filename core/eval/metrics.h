// metrics.h: detection metrics as YOLOv9's val.py computes them (reference §5.2-§5.4): matching at ten
// IoU thresholds (process_batch), then ap_per_class with compute_ap's 101-point interpolation, P and R
// at the max-F1 confidence, mAP50, mAP50-95 and fitness. Legend: D detections, G labels, T = 10 IoU
// thresholds, nc classes, K classes that have labels.
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "core/eval/confusion.h"
#include "core/spec/nms.h"

#define METRICS_NIOU 10

// The IoU thresholds 0.50:0.05:0.95 exactly as torch.linspace(0.5, 0.95, 10) makes them in float32.
void metrics_iou_thresholds(float iouv[METRICS_NIOU]);

// metrics_box_iou: box_iou of the reference, inter / (area_a + area_b - inter + 1e-7), in float32.
float metrics_box_iou(const Det *a, const Det *b);

// metrics_match (process_batch): correct[d][t] = 1 when detection d is a true positive at threshold t.
// Pairs (label, detection) with IoU >= thr and the same class; sorted by IoU descending (equal IoUs: the
// later pair first, as numpy's small-array argsort reversed); one pair per detection (its best), then
// one per label (the lowest detection index, i.e. the highest confidence). gt: labels (conf unused).
void metrics_match(const Det *det, int nd, const Det *gt, int ng, uint8_t (*correct)[METRICS_NIOU]);

// MetricsStats: what val.py's `stats` list holds, over all images seen so far.
typedef struct {
    int      nc;
    int      n, cap;                    // detections
    uint8_t (*tp)[METRICS_NIOU];        // (n, T)
    float   *conf;                      // (n)
    int     *cls;                       // (n)
    int     *nt;                        // (nc) labels per class
    int      images;
    ConfusionCell *cm;                  // (n_cm) the confusion matrix's counts (core/eval/confusion.h)
    int      n_cm, cap_cm;
    int      no_confusion;              // 1: metrics_stats_add leaves cm alone (no plot will draw it)
} MetricsStats;

void metrics_stats_init(MetricsStats *s, int nc);
void metrics_stats_free(MetricsStats *s);
// Add one image: its detections (in NMS order) and labels, both in the same pixel frame; also its
// confusion-matrix counts (confusion_image at CONFUSION_CONF / CONFUSION_IOU) unless s->no_confusion.
// Classes outside [0, nc) are the caller's bug (die).
void metrics_stats_add(MetricsStats *s, const Det *det, int nd, const Det *gt, int ng);

// Append the images of `from` (same nc) after those of `into`, as if added to it in that order.
void metrics_stats_merge(MetricsStats *into, const MetricsStats *from);
// s as bytes for another process (a validation pass shared by processes, core/eval/val.c), and back:
// metrics_stats_read initialises s from what metrics_stats_write wrote; 0, or -1 (s freed) when f ends
// early or holds other than nc classes.
void metrics_stats_write(const MetricsStats *s, FILE *f);
int  metrics_stats_read(MetricsStats *s, int nc, FILE *f);

typedef struct {
    int     nc, images, instances;
    int    *nt;                         // (nc) labels per class
    int     k;                          // K: classes with labels, ascending; the only ones averaged
    int    *cls;                        // (K)
    double *p, *r, *ap50, *ap;          // (K) at the max-F1 confidence; AP@0.5; AP@0.5:0.95
    double  mp, mr, map50, map;         // means over the K classes
} Metrics;

// metrics_compute (ap_per_class): sorts by confidence (stable: ties keep image-then-NMS order, where
// numpy's quicksort order is implementation-defined). When no detection is a TP at any threshold, every
// metric is 0, as val.py skips ap_per_class then.
void metrics_compute(const MetricsStats *s, Metrics *m);
void metrics_free(Metrics *m);
// The curves ap_per_class plots (plot=True) over the confidence (or recall) axis px = linspace(0, 1,
// METRICS_PX), for the K classes with labels (ascending): precision p, recall r (IoU 0.5, np.interp
// with left 1 and 0), F1 = 2pr / (p + r + 1e-16), and pr, the precision envelope at recall px (what
// the PR curve shows; zeros for a class without detections, which the reference leaves out); ap
// at the ten IoU thresholds. metrics_compute reads P, R and AP from these.
#define METRICS_PX 1000
typedef struct {
    int     k;
    int    *cls;                        // (K)
    int    *n_pred;                     // (K) detections of the class
    double *p, *r, *f1, *pr;            // (K, METRICS_PX)
    double (*ap)[METRICS_NIOU];         // (K, T)
} MetricsCurves;
void   metrics_curves(const MetricsStats *s, MetricsCurves *c);
void   metrics_curves_free(MetricsCurves *c);
double metrics_px(int x);               // px[x]: np.linspace(0, 1, METRICS_PX)[x]
// smooth(y, f): a box filter of round(n * f * 2) // 2 + 1 taps over y padded with copies of its ends.
void   metrics_smooth(const double *y, int n, double f, double *out);

// fitness (YOLOv9): 0.1 * mAP50 + 0.9 * mAP50-95.
double metrics_fitness(const Metrics *m);

// compute_ap: AP of one recall/precision curve (n points): mrec = [0, recall, 1], mpre = [1, precision,
// 0], precision envelope, np.interp at linspace(0, 1, 101), trapezoid rule.
double metrics_compute_ap(const double *recall, const double *precision, int n);
// np.interp(x, xp, fp, left, right) for increasing xp (n >= 1), numpy's rules at ties and ends.
double metrics_interp(double x, const double *xp, const double *fp, int n, double left, double right);

// The reference's table: header, the `all` row, then one row per class with labels when verbose and
// nc > 1. names may be NULL (class numbers are printed).
void metrics_print(const Metrics *m, char *const *names, int verbose, FILE *f);
