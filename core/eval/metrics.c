// metrics.c: process_batch matching and ap_per_class / compute_ap of YOLOv9's utils/metrics.py
// (reference §5.2-§5.4). Legend: D detections, G labels, T IoU thresholds, K classes with labels,
// X = 1000 points of the confidence axis px.
#include "core/eval/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/util.h"

#define PX METRICS_PX   // X: np.linspace(0, 1, 1000), the confidence axis of the P, R, F1 curves
#define EPS 1e-16

void metrics_iou_thresholds(float iouv[METRICS_NIOU]) {
    const float start = 0.5f, end = 0.95f;   // torch.linspace's float kernel: halves from both ends
    const float step = (end - start) / (float)(METRICS_NIOU - 1);
    for (int i = 0; i < METRICS_NIOU; i++)
        iouv[i] = i < METRICS_NIOU / 2 ? start + step * (float)i : end - step * (float)(METRICS_NIOU - 1 - i);
}

float metrics_box_iou(const Det *a, const Det *b) {
    float w = fmaxf(fminf(a->x2, b->x2) - fmaxf(a->x1, b->x1), 0.0f);
    float h = fmaxf(fminf(a->y2, b->y2) - fmaxf(a->y1, b->y1), 0.0f);
    float inter = w * h;
    float area_a = (a->x2 - a->x1) * (a->y2 - a->y1), area_b = (b->x2 - b->x1) * (b->y2 - b->y1);
    return inter / (area_a + area_b - inter + 1e-7f);
}

// ---- matching ------------------------------------------------------------------------------

typedef struct { int label, det, order; float iou; } Pair;

static int pair_by_iou(const void *pa, const void *pb) {   // IoU descending; ties: later pair first
    const Pair *a = pa, *b = pb;
    if (a->iou != b->iou) return a->iou < b->iou ? 1 : -1;
    return (a->order < b->order) - (a->order > b->order);
}

void metrics_match(const Det *det, int nd, const Det *gt, int ng, uint8_t (*correct)[METRICS_NIOU]) {
    if (!nd) return;                       // correct may be NULL then: memset(NULL, 0, 0) is undefined
    memset(correct, 0, sizeof *correct * (size_t)nd);
    if (!ng) return;
    float iouv[METRICS_NIOU];
    metrics_iou_thresholds(iouv);
    float *iou = xmalloc(sizeof *iou * (size_t)ng * nd);    // (G, D)
    for (int i = 0; i < ng; i++)
        for (int j = 0; j < nd; j++) iou[(size_t)i * nd + j] = metrics_box_iou(&gt[i], &det[j]);
    Pair *pairs = xmalloc(sizeof *pairs * (size_t)ng * nd);
    int *best_of_det = xmalloc(sizeof *best_of_det * nd), *label_taken = xmalloc(sizeof *label_taken * ng);
    for (int t = 0; t < METRICS_NIOU; t++) {
        int n = 0;
        for (int i = 0; i < ng; i++)            // torch.where order: label-major
            for (int j = 0; j < nd; j++)
                if (iou[(size_t)i * nd + j] >= iouv[t] && gt[i].cls == det[j].cls)
                    pairs[n] = (Pair){ i, j, n, iou[(size_t)i * nd + j] }, n++;
        qsort(pairs, n, sizeof *pairs, pair_by_iou);
        for (int j = 0; j < nd; j++) best_of_det[j] = -1;      // np.unique on detections: first = best
        for (int k = 0; k < n; k++) if (best_of_det[pairs[k].det] < 0) best_of_det[pairs[k].det] = pairs[k].label;
        for (int i = 0; i < ng; i++) label_taken[i] = 0;       // then on labels, in detection order
        for (int j = 0; j < nd; j++) {
            int i = best_of_det[j];
            if (i >= 0 && !label_taken[i]) { label_taken[i] = 1; correct[j][t] = 1; }
        }
    }
    free(iou); free(pairs); free(best_of_det); free(label_taken);
}

// ---- statistics over images ----------------------------------------------------------------

void metrics_stats_init(MetricsStats *s, int nc) {
    memset(s, 0, sizeof *s);
    s->nc = nc;
    s->nt = xcalloc(nc, sizeof *s->nt);
}

void metrics_stats_free(MetricsStats *s) {
    free(s->tp); free(s->conf); free(s->cls); free(s->nt); free(s->cm);
    memset(s, 0, sizeof *s);
}

void metrics_stats_add(MetricsStats *s, const Det *det, int nd, const Det *gt, int ng) {
    if (s->n + nd > s->cap) {
        s->cap = 2 * (s->n + nd) + 64;
        s->tp = xrealloc(s->tp, sizeof *s->tp * s->cap);
        s->conf = xrealloc(s->conf, sizeof *s->conf * s->cap);
        s->cls = xrealloc(s->cls, sizeof *s->cls * s->cap);
    }
    metrics_match(det, nd, gt, ng, s->tp + s->n);
    for (int j = 0; j < nd; j++) {
        if (det[j].cls < 0 || det[j].cls >= s->nc) die("metrics_stats_add: detection class %d", det[j].cls);
        s->conf[s->n + j] = det[j].conf;
        s->cls[s->n + j] = det[j].cls;
    }
    for (int i = 0; i < ng; i++) {
        if (gt[i].cls < 0 || gt[i].cls >= s->nc) die("metrics_stats_add: label class %d", gt[i].cls);
        s->nt[gt[i].cls]++;
    }
    if (!s->no_confusion) confusion_image(det, nd, gt, ng, s->nc, CONFUSION_CONF, CONFUSION_IOU, &s->cm, &s->n_cm, &s->cap_cm);
    s->n += nd;
    s->images++;
}

void metrics_stats_merge(MetricsStats *into, const MetricsStats *from) {
    if (from->nc != into->nc) die("metrics_stats_merge: %d classes into %d", from->nc, into->nc);
    if (into->n + from->n > into->cap) {
        into->cap = into->n + from->n + 64;
        into->tp = xrealloc(into->tp, sizeof *into->tp * into->cap);
        into->conf = xrealloc(into->conf, sizeof *into->conf * into->cap);
        into->cls = xrealloc(into->cls, sizeof *into->cls * into->cap);
    }
    if (from->n) {
        memcpy(into->tp + into->n, from->tp, sizeof *from->tp * from->n);
        memcpy(into->conf + into->n, from->conf, sizeof *from->conf * from->n);
        memcpy(into->cls + into->n, from->cls, sizeof *from->cls * from->n);
    }
    for (int c = 0; c < into->nc; c++) into->nt[c] += from->nt[c];
    if (into->n_cm + from->n_cm > into->cap_cm)
        into->cap_cm = into->n_cm + from->n_cm + 64, into->cm = xrealloc(into->cm, sizeof *into->cm * into->cap_cm);
    if (from->n_cm) memcpy(into->cm + into->n_cm, from->cm, sizeof *from->cm * from->n_cm);
    into->n_cm += from->n_cm;
    into->n += from->n;
    into->images += from->images;
}

void metrics_stats_write(const MetricsStats *s, FILE *f) {
    int head[5] = { s->nc, s->n, s->images, s->n_cm, s->no_confusion };
    fwrite(head, sizeof head, 1, f);
    if (s->n) {
        fwrite(s->tp, sizeof *s->tp, s->n, f);
        fwrite(s->conf, sizeof *s->conf, s->n, f);
        fwrite(s->cls, sizeof *s->cls, s->n, f);
    }
    fwrite(s->nt, sizeof *s->nt, s->nc, f);
    if (s->n_cm) fwrite(s->cm, sizeof *s->cm, s->n_cm, f);
}

int metrics_stats_read(MetricsStats *s, int nc, FILE *f) {
    int head[5];
    metrics_stats_init(s, nc);
    if (fread(head, sizeof head, 1, f) != 1 || head[0] != nc || head[1] < 0 || head[3] < 0) {
        metrics_stats_free(s);
        return -1;
    }
    int n = head[1], ncm = head[3];
    s->images = head[2];
    s->no_confusion = head[4];
    s->tp = xmalloc(sizeof *s->tp * (n + 1));
    s->conf = xmalloc(sizeof *s->conf * (n + 1));
    s->cls = xmalloc(sizeof *s->cls * (n + 1));
    s->cm = xmalloc(sizeof *s->cm * (ncm + 1));
    s->n = s->cap = n;
    s->n_cm = s->cap_cm = ncm;
    int ok = fread(s->tp, sizeof *s->tp, n, f) == (size_t)n && fread(s->conf, sizeof *s->conf, n, f) == (size_t)n &&
             fread(s->cls, sizeof *s->cls, n, f) == (size_t)n && fread(s->nt, sizeof *s->nt, nc, f) == (size_t)nc &&
             fread(s->cm, sizeof *s->cm, ncm, f) == (size_t)ncm;
    for (int j = 0; ok && j < n; j++) ok = s->cls[j] >= 0 && s->cls[j] < nc;   // what is indexed by them
    for (int j = 0; ok && j < ncm; j++) ok = s->cm[j].pred >= 0 && s->cm[j].pred <= nc && s->cm[j].truth >= 0 &&
                                             s->cm[j].truth <= nc;
    if (!ok) metrics_stats_free(s);
    return ok ? 0 : -1;
}

// ---- AP ------------------------------------------------------------------------------------

static double linspace_at(int i, int n) { return i == n - 1 ? 1.0 : i * (1.0 / (n - 1)); }   // np.linspace(0,1,n)

double metrics_interp(double x, const double *xp, const double *fp, int n, double left, double right) {
    if (x > xp[n - 1]) return right;
    if (x < xp[0]) return left;
    int lo = 0, hi = n;                       // j: the last index with xp[j] <= x
    while (lo < hi) { int mid = (lo + hi) / 2; if (x < xp[mid]) hi = mid; else lo = mid + 1; }
    int j = lo - 1;
    if (j == n - 1 || xp[j] == x) return fp[j];
    double slope = (fp[j + 1] - fp[j]) / (xp[j + 1] - xp[j]);
    double y = slope * (x - xp[j]) + fp[j];
    if (isnan(y)) y = slope * (x - xp[j + 1]) + fp[j + 1];   // numpy's fallback for infinite slopes
    if (isnan(y) && fp[j] == fp[j + 1]) y = fp[j];
    return y;
}

// compute_ap, and when py is not NULL the precision envelope at recall px (PX points), what
// ap_per_class plots as the PR curve.
static double compute_ap(const double *recall, const double *precision, int n, double *py) {
    double *mrec = xmalloc(sizeof *mrec * (n + 2)), *mpre = xmalloc(sizeof *mpre * (n + 2));
    mrec[0] = 0; mpre[0] = 1;
    for (int i = 0; i < n; i++) mrec[i + 1] = recall[i], mpre[i + 1] = precision[i];
    mrec[n + 1] = 1; mpre[n + 1] = 0;
    for (int i = n; i >= 0; i--) mpre[i] = fmax(mpre[i], mpre[i + 1]);   // the precision envelope
    double ap = 0, x0 = 0, y0 = metrics_interp(0, mrec, mpre, n + 2, mpre[0], mpre[n + 1]);
    for (int k = 1; k < 101; k++) {           // np.trapz over np.interp at 101 points
        double x1 = linspace_at(k, 101), y1 = metrics_interp(x1, mrec, mpre, n + 2, mpre[0], mpre[n + 1]);
        ap += (x1 - x0) * (y0 + y1) / 2.0;
        x0 = x1; y0 = y1;
    }
    for (int x = 0; py && x < PX; x++) py[x] = metrics_interp(linspace_at(x, PX), mrec, mpre, n + 2, mpre[0], mpre[n + 1]);
    free(mrec); free(mpre);
    return ap;
}

double metrics_compute_ap(const double *recall, const double *precision, int n) {
    return compute_ap(recall, precision, n, NULL);
}

// One class: cumulative TP/FP of its np_ detections dets (in confidence order), AP at every threshold,
// its P and R curves over px from the IoU-0.5 column and its PR curve py (IoU 0.5).
static void class_curves(const MetricsStats *s, const int *dets, int np_, int c, double *ap, double *pc, double *rc,
                         double *py) {
    int nl = s->nt[c];
    if (!np_) return;                         // AP 0, P = R = 0, as the reference's zeros
    double *xp = xmalloc(sizeof *xp * np_), *rec = xmalloc(sizeof *rec * np_), *pre = xmalloc(sizeof *pre * np_);
    for (int t = 0; t < METRICS_NIOU; t++) {
        double tpc = 0, fpc = 0;
        for (int i = 0; i < np_; i++) {
            int d = dets[i];
            tpc += s->tp[d][t]; fpc += 1 - s->tp[d][t];
            xp[i] = -(double)s->conf[d];
            rec[i] = tpc / (nl + EPS);
            pre[i] = tpc / (tpc + fpc);
        }
        ap[t] = compute_ap(rec, pre, np_, t ? NULL : py);
        if (t) continue;
        for (int x = 0; x < PX; x++) {
            double q = -linspace_at(x, PX);
            rc[x] = metrics_interp(q, xp, rec, np_, 0.0, rec[np_ - 1]);
            pc[x] = metrics_interp(q, xp, pre, np_, 1.0, pre[np_ - 1]);
        }
    }
    free(xp); free(rec); free(pre);
}

// The detections in confidence order bucketed by class (a stable counting sort): class c's are
// by_class[start[c] .. start[c+1]-1], still in confidence order. One pass instead of one per class,
// which matters at COCO size (80 classes, a million detections).
static void bucket_by_class(const MetricsStats *s, const int *order, int *start, int *by_class) {
    for (int c = 0; c <= s->nc; c++) start[c] = 0;
    for (int k = 0; k < s->n; k++) start[s->cls[k] + 1]++;
    for (int c = 0; c < s->nc; c++) start[c + 1] += start[c];
    int *fill = xcalloc(s->nc + 1, sizeof *fill);
    for (int k = 0; k < s->n; k++) {
        int c = s->cls[order[k]];
        by_class[start[c] + fill[c]++] = order[k];
    }
    free(fill);
}

void metrics_smooth(const double *y, int n, double f, double *out) {
    int nf = (int)lround(n * f * 2) / 2 + 1, half = nf / 2;
    for (int x = 0; x < n; x++) {
        double v = 0;
        for (int k = x - half; k <= x + half; k++) v += y[k < 0 ? 0 : k >= n ? n - 1 : k] * (1.0 / nf);
        out[x] = v;
    }
}

// The index of the max of smooth(mean F1, 0.1): a 101-tap box filter over the curve padded with 50
// copies of each end value (np.convolve 'valid'); the first maximum wins, as np.argmax.
static int best_f1_index(const double *f1) {
    double sm[PX];
    metrics_smooth(f1, PX, 0.1, sm);
    int best = 0;
    for (int x = 1; x < PX; x++) if (sm[x] > sm[best]) best = x;
    return best;
}

static int *confidence_order(const MetricsStats *s) {   // stable argsort of -conf
    int *order = xmalloc(sizeof *order * (s->n + 1));
    int n = s->n, *tmp = xmalloc(sizeof *tmp * (n + 1));
    for (int k = 0; k < n; k++) order[k] = k;
    for (int w = 1; w < n; w *= 2) {          // bottom-up merge sort: stable, no comparator context
        for (int lo = 0; lo < n; lo += 2 * w) {
            int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, a = lo, b = mid, o = lo;
            while (a < mid && b < hi) tmp[o++] = s->conf[order[b]] > s->conf[order[a]] ? order[b++] : order[a++];
            while (a < mid) tmp[o++] = order[a++];
            while (b < hi) tmp[o++] = order[b++];
        }
        memcpy(order, tmp, sizeof *tmp * n);
    }
    free(tmp);
    return order;
}

static int any_tp(const MetricsStats *s) {
    for (int k = 0; k < s->n; k++)
        for (int t = 0; t < METRICS_NIOU; t++) if (s->tp[k][t]) return 1;
    return 0;
}

void metrics_curves(const MetricsStats *s, MetricsCurves *c) {
    memset(c, 0, sizeof *c);
    c->cls = xmalloc(sizeof *c->cls * (s->nc + 1));
    for (int k = 0; k < s->nc; k++) if (s->nt[k]) c->cls[c->k++] = k;
    size_t n = (size_t)c->k * PX + 1;
    c->p = xcalloc(n, sizeof *c->p); c->r = xcalloc(n, sizeof *c->r);
    c->f1 = xcalloc(n, sizeof *c->f1); c->pr = xcalloc(n, sizeof *c->pr);
    c->ap = xcalloc(c->k + 1, sizeof *c->ap);
    c->n_pred = xcalloc(c->k + 1, sizeof *c->n_pred);
    int *order = confidence_order(s), *start = xmalloc(sizeof *start * (s->nc + 1));
    int *by_class = xmalloc(sizeof *by_class * (s->n + 1));
    bucket_by_class(s, order, start, by_class);
    for (int i = 0; i < c->k; i++) {
        int k = c->cls[i];
        size_t o = (size_t)i * PX;
        c->n_pred[i] = start[k + 1] - start[k];
        class_curves(s, by_class + start[k], c->n_pred[i], k, c->ap[i], c->p + o, c->r + o, c->pr + o);
        for (int x = 0; x < PX; x++) c->f1[o + x] = 2 * c->p[o + x] * c->r[o + x] / (c->p[o + x] + c->r[o + x] + EPS);
    }
    free(order); free(start); free(by_class);
}

void metrics_curves_free(MetricsCurves *c) {
    free(c->cls); free(c->p); free(c->r); free(c->f1); free(c->pr); free(c->ap); free(c->n_pred);
    memset(c, 0, sizeof *c);
}

double metrics_px(int x) { return linspace_at(x, PX); }

void metrics_compute(const MetricsStats *s, Metrics *m) {
    memset(m, 0, sizeof *m);
    m->nc = s->nc; m->images = s->images;
    m->nt = xcalloc(s->nc, sizeof *m->nt);
    for (int c = 0; c < s->nc; c++) m->nt[c] = s->nt[c], m->instances += s->nt[c];
    m->cls = xmalloc(sizeof *m->cls * (s->nc + 1));
    m->p = xcalloc(s->nc + 1, sizeof *m->p);  m->r = xcalloc(s->nc + 1, sizeof *m->r);
    m->ap50 = xcalloc(s->nc + 1, sizeof *m->ap50);  m->ap = xcalloc(s->nc + 1, sizeof *m->ap);
    if (!any_tp(s)) return;                   // val.py: `if len(stats) and stats[0].any()`
    MetricsCurves cv;
    metrics_curves(s, &cv);
    m->k = cv.k;
    double *f1 = xcalloc(PX, sizeof *f1);
    for (int i = 0; i < m->k; i++) {
        m->cls[i] = cv.cls[i];
        m->ap50[i] = cv.ap[i][0];
        for (int t = 0; t < METRICS_NIOU; t++) m->ap[i] += cv.ap[i][t];
        m->ap[i] /= METRICS_NIOU;
    }
    for (int x = 0; x < PX; x++) {            // f1.mean(0): the mean over classes of each class's F1
        for (int i = 0; i < m->k; i++) f1[x] += cv.f1[(size_t)i * PX + x];
        f1[x] /= m->k;
    }
    int best = best_f1_index(f1);
    for (int i = 0; i < m->k; i++) {
        m->p[i] = cv.p[(size_t)i * PX + best]; m->r[i] = cv.r[(size_t)i * PX + best];
        m->mp += m->p[i]; m->mr += m->r[i]; m->map50 += m->ap50[i]; m->map += m->ap[i];
    }
    m->mp /= m->k; m->mr /= m->k; m->map50 /= m->k; m->map /= m->k;
    metrics_curves_free(&cv);
    free(f1);
}

void metrics_free(Metrics *m) {
    free(m->nt); free(m->cls); free(m->p); free(m->r); free(m->ap50); free(m->ap);
    memset(m, 0, sizeof *m);
}

double metrics_fitness(const Metrics *m) { return 0.1 * m->map50 + 0.9 * m->map; }

void metrics_print(const Metrics *m, char *const *names, int verbose, FILE *f) {
    fprintf(f, "%22s%11s%11s%11s%11s%11s%11s\n", "Class", "Images", "Instances", "P", "R", "mAP50", "mAP50-95");
    fprintf(f, "%22s%11d%11d%11.3g%11.3g%11.3g%11.3g\n", "all", m->images, m->instances, m->mp, m->mr,
            m->map50, m->map);
    if (!m->instances) fprintf(f, "WARNING: no labels found in the val set, can not compute metrics without labels\n");
    if (!verbose || m->nc < 2) return;
    for (int i = 0; i < m->k; i++) {
        char num[16];
        int c = m->cls[i];
        snprintf(num, sizeof num, "%d", c);
        fprintf(f, "%22s%11d%11d%11.3g%11.3g%11.3g%11.3g\n", names ? names[c] : num, m->images, m->nt[c],
                m->p[i], m->r[i], m->ap50[i], m->ap[i]);
    }
}
