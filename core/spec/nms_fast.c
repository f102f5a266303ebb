// nms_fast.c: nms_run's detections, bit for bit, faster: a stable radix sort of the candidates on their
// score bits instead of qsort, and a greedy pass that tests a kept box only against later candidates of
// its own class (each class's boxes contiguous), instead of every later candidate. Why that is the same:
// the reference offsets each box by cls * NMS_MAX_WH; when all x coordinates lie in a span shorter than
// NMS_MAX_WH, boxes of different classes lie in disjoint x ranges after the offset, and since float
// rounding is monotonic the intersection width comes out <= 0, the IoU 0 (or NaN), never > iou_thres >= 0.
// Outside that case (huge or non-finite boxes, a negative iou_thres) nms_run itself runs.
// Legend: A anchors, nc classes, n candidates, D detections kept.
#include "core/spec/nms.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/util.h"

typedef struct {          // the candidates, structure of arrays, in filter order then in sorted order
    int       n;
    uint32_t *key;        // (n) descending score as an ascending unsigned key
    int      *anchor, *cls;
} Cands;

// An unsigned key whose ascending order is the floats' descending order (-0 and +0 equal, as ==).
static uint32_t desc_key(float f) {
    if (f == 0) f = 0;                             // -0 -> +0: the reference compares with <, ==
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = u >> 31 ? ~u : u | 0x80000000u;            // ascending unsigned = ascending float
    return ~u;
}

// The reference's filter (nms.c candidates): every class over conf_thres, or each anchor's best class.
static void filter(const float *scores, int A, int nc, const NmsOptions *o, Cands *c) {
    int multi = o->multi_label && nc > 1;
    c->n = 0;
    for (int a = 0; a < A; a++) {
        const float *s = scores + (size_t)a * nc;
        int best = 0;
        for (int k = 1; k < nc; k++) if (s[k] > s[best]) best = k;
        if (!(s[best] > o->conf_thres)) continue;
        for (int k = multi ? 0 : best; k < (multi ? nc : best + 1); k++)
            if (s[k] > o->conf_thres) c->key[c->n] = desc_key(s[k]), c->anchor[c->n] = a, c->cls[c->n] = k, c->n++;
    }
}

// order (n) = the candidate indices sorted by key, stable: LSD radix, 8 bits a pass; a pass whose byte
// is the same for every key is skipped (the high bytes of scores in (0, 1) mostly are).
static void radix_order(const Cands *c, int *order, int *tmp) {
    for (int i = 0; i < c->n; i++) order[i] = i;
    for (int shift = 0; shift < 32; shift += 8) {
        int count[257] = { 0 };
        for (int i = 0; i < c->n; i++) count[((c->key[i] >> shift) & 255) + 1]++;
        int same = 0;
        for (int b = 1; b <= 256; b++) same |= count[b] == c->n;
        if (same) continue;
        for (int b = 0; b < 256; b++) count[b + 1] += count[b];
        for (int i = 0; i < c->n; i++) tmp[count[(c->key[order[i]] >> shift) & 255]++] = order[i];
        memcpy(order, tmp, sizeof *order * c->n);
    }
}

// Whether boxes of different classes can never suppress each other (see the top of the file).
static int classes_apart(const float *boxes, const Cands *c, const int *order, int n, const NmsOptions *o) {
    if (o->iou_thres < 0) return 0;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) {
        const float *b = boxes + (size_t)c->anchor[order[i]] * 4;
        if (!isfinite(b[0]) || !isfinite(b[2]) || !isfinite(b[1]) || !isfinite(b[3])) return 0;
        lo = fmin(lo, fmin(b[0], b[2])); hi = fmax(hi, fmax(b[0], b[2]));
    }
    return hi - lo < NMS_MAX_WH;
}

// nms_iou's arithmetic, operation for operation (C11 mode: no FMA contraction).
static inline float iou(const float *a, const float *b) {
    float w = fmaxf(0.0f, fminf(a[2], b[2]) - fmaxf(a[0], b[0]));
    float h = fmaxf(0.0f, fminf(a[3], b[3]) - fmaxf(a[1], b[1]));
    float inter = w * h;
    float area_a = (a[2] - a[0]) * (a[3] - a[1]), area_b = (b[2] - b[0]) * (b[3] - b[1]);
    return inter / (area_a + area_b - inter);
}

typedef struct {          // the n NMS entries grouped by class: bucket k holds start[k] .. start[k+1]-1
    int    *start;        // (buckets + 1)
    int    *slot;         // (n) entry i's place in the grouped arrays
    float (*ob)[4];       // (n) offset boxes, grouped, in score order within a class
    char   *gone;         // (n) grouped
} Groups;

static void group(const float *boxes, const Cands *c, const int *order, int n, int buckets, const NmsOptions *o,
                  Groups *g) {
    int *fill = xcalloc(buckets + 1, sizeof *fill);
    for (int i = 0; i < n; i++) g->start[(buckets > 1 ? c->cls[order[i]] : 0) + 1]++;
    for (int k = 0; k < buckets; k++) g->start[k + 1] += g->start[k];
    for (int i = 0; i < n; i++) {
        int cl = c->cls[order[i]], k = buckets > 1 ? cl : 0, s = g->start[k] + fill[k]++;
        float off = o->agnostic ? 0.0f : cl * NMS_MAX_WH;
        g->slot[i] = s;
        for (int q = 0; q < 4; q++) g->ob[s][q] = boxes[(size_t)c->anchor[order[i]] * 4 + q] + off;
    }
    free(fill);
}

// The greedy pass in score order; a kept entry suppresses the later entries of its group.
static int greedy(const float *boxes, const float *scores, int nc, const Cands *c, const int *order, int n,
                  int buckets, const NmsOptions *o, Det *out) {
    Groups g = { xcalloc(buckets + 1, sizeof(int)), xmalloc(sizeof(int) * (n + 1)), xmalloc(sizeof(float[4]) * (n + 1)),
                 xcalloc(n + 1, 1) };
    group(boxes, c, order, n, buckets, o, &g);
    int nd = 0;
    for (int i = 0; i < n && nd < o->max_det; i++) {
        int s = g.slot[i], k = buckets > 1 ? c->cls[order[i]] : 0;
        if (g.gone[s]) continue;
        int a = c->anchor[order[i]], cl = c->cls[order[i]];
        const float *b = boxes + (size_t)a * 4;
        out[nd++] = (Det){ b[0], b[1], b[2], b[3], scores[(size_t)a * nc + cl], cl };
        for (int j = s + 1; j < g.start[k + 1]; j++)
            if (!g.gone[j] && iou(g.ob[s], g.ob[j]) > o->iou_thres) g.gone[j] = 1;
    }
    free(g.start); free(g.slot); free(g.ob); free(g.gone);
    return nd;
}

int nms_run_fast(const float *boxes, const float *scores, int A, int nc, const NmsOptions *o, Det *out) {
    size_t cap = (size_t)A * (o->multi_label ? nc : 1) + 1;
    Cands c = { 0, xmalloc(sizeof(uint32_t) * cap), xmalloc(sizeof(int) * cap), xmalloc(sizeof(int) * cap) };
    int *order = xmalloc(sizeof(int) * cap), *tmp = xmalloc(sizeof(int) * cap);
    filter(scores, A, nc, o, &c);
    radix_order(&c, order, tmp);
    int n = c.n < o->max_nms ? c.n : o->max_nms, nd;
    if (n < 0) n = 0;
    if (o->agnostic) nd = greedy(boxes, scores, nc, &c, order, n, 1, o, out);
    else if (classes_apart(boxes, &c, order, n, o)) nd = greedy(boxes, scores, nc, &c, order, n, nc, o, out);
    else nd = nms_run(boxes, scores, A, nc, o, out);
    free(c.key); free(c.anchor); free(c.cls); free(order); free(tmp);
    return nd;
}
