// confusion.c: see confusion.h (YOLOv9 utils/metrics.py ConfusionMatrix.process_batch and plot's
// normalisation). Legend: D' detections above conf, G labels, P pairs above the IoU threshold.
#include "core/eval/confusion.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/eval/metrics.h"
#include "core/base/util.h"

typedef struct { int label, det, order; float iou; } Match;

// argsort()[::-1]: IoU descending; equal IoUs in reverse of their current order
static int by_iou_desc(const void *pa, const void *pb) {
    const Match *a = pa, *b = pb;
    if (a->iou != b->iou) return a->iou < b->iou ? 1 : -1;
    return (a->order < b->order) - (a->order > b->order);
}

static void sort_desc(Match *m, int n) {
    for (int i = 0; i < n; i++) m[i].order = i;
    qsort(m, n, sizeof *m, by_iou_desc);
}

// matches[np.unique(matches[:, col], return_index=True)[1]]: the first row of each value, by value.
static int unique_first(Match *m, int n, int by_det, int size) {
    int *first = xmalloc(sizeof *first * (size + 1)), k = 0;
    for (int v = 0; v < size; v++) first[v] = -1;
    for (int i = 0; i < n; i++) {
        int v = by_det ? m[i].det : m[i].label;
        if (first[v] < 0) first[v] = i;
    }
    Match *tmp = xmalloc(sizeof *tmp * (n + 1));
    for (int v = 0; v < size; v++) if (first[v] >= 0) tmp[k++] = m[first[v]];
    memcpy(m, tmp, sizeof *m * k);
    free(tmp); free(first);
    return k;
}

static void add(ConfusionCell **cells, int *n, int *cap, int pred, int truth) {
    if (*n == *cap) *cap = 2 * *cap + 16, *cells = xrealloc(*cells, sizeof **cells * *cap);
    (*cells)[(*n)++] = (ConfusionCell){ pred, truth };
}

void confusion_image(const Det *det, int nd, const Det *gt, int ng, int nc, float conf, float iou,
                     ConfusionCell **cells, int *n, int *cap) {
    const Det **d = xmalloc(sizeof *d * (nd + 1));
    int nk = 0;
    for (int j = 0; j < nd; j++) if (det[j].conf > conf) d[nk++] = &det[j];   // detections[:, 4] > conf
    Match *m = xmalloc(sizeof *m * ((size_t)ng * nk + 1));
    int np_ = 0;
    for (int i = 0; i < ng; i++)                 // torch.where order: label-major
        for (int j = 0; j < nk; j++) {
            float v = metrics_box_iou(&gt[i], d[j]);
            if (v > iou) m[np_++] = (Match){ i, j, 0, v };
        }
    if (np_ > 1) {
        sort_desc(m, np_);
        np_ = unique_first(m, np_, 1, nk);       // each detection: its best label
        sort_desc(m, np_);
        np_ = unique_first(m, np_, 0, ng);       // each label: its best detection
    }
    int *det_of = xmalloc(sizeof *det_of * (ng + 1)), *matched = xcalloc(nk + 1, sizeof *matched);
    for (int i = 0; i < ng; i++) det_of[i] = -1;
    for (int k = 0; k < np_; k++) det_of[m[k].label] = m[k].det, matched[m[k].det] = 1;
    for (int i = 0; i < ng; i++) add(cells, n, cap, det_of[i] >= 0 ? d[det_of[i]]->cls : nc, gt[i].cls);
    for (int j = 0; np_ && j < nk; j++) if (!matched[j]) add(cells, n, cap, d[j]->cls, nc);
    free(d); free(m); free(det_of); free(matched);
}

void confusion_build(ConfusionMatrix *cm, int nc, const ConfusionCell *cells, int n) {
    cm->nc = nc;
    cm->m = xcalloc((size_t)(nc + 1) * (nc + 1), sizeof *cm->m);
    for (int k = 0; k < n; k++) cm->m[(size_t)cells[k].pred * (nc + 1) + cells[k].truth] += 1;
}

void confusion_free(ConfusionMatrix *cm) { free(cm->m); memset(cm, 0, sizeof *cm); }

void confusion_normalised(const ConfusionMatrix *cm, double *out) {
    int n = cm->nc + 1;
    for (int c = 0; c < n; c++) {
        double sum = 0;
        for (int r = 0; r < n; r++) sum += cm->m[(size_t)r * n + c];
        for (int r = 0; r < n; r++) {
            double v = cm->m[(size_t)r * n + c] / (sum + 1e-9);
            out[(size_t)r * n + c] = v < 0.005 ? NAN : v;
        }
    }
}
