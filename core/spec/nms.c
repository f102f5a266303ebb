// nms.c: DFL decode of the head maps and YOLOv9's non_max_suppression (reference §1.3, §5.1).
// Legend: A anchors, nc classes, R DFL bins; boxes (A,4) xyxy pixels, scores (A,nc).
#include "core/spec/nms.h"

#include <math.h>
#include <stdlib.h>

#include "core/spec/fexp.h"
#include "core/spec/loss.h"
#include "core/base/util.h"

NmsOptions nms_val_options(void) {
    return (NmsOptions){ .conf_thres = 0.001f, .iou_thres = 0.7f, .max_det = 300, .max_nms = 30000,
                         .multi_label = 1, .agnostic = 0 };
}

NmsOptions nms_detect_options(void) {
    return (NmsOptions){ .conf_thres = 0.25f, .iou_thres = 0.45f, .max_det = 1000, .max_nms = 30000,
                         .multi_label = 0, .agnostic = 0 };
}

int nms_anchors(const Map head[], int n_levels) {
    int a = 0;
    for (int l = 0; l < n_levels; l++) a += head[l].H * head[l].W;
    return a;
}

// One anchor: 4 sides of R logits (l,t,r,b) -> xyxy pixels through the reference's xywh detour.
static void decode_box(const float *logits, float ax, float ay, float stride, float *box) {
    float d[4];
    double p[LOSS_REG_MAX];
    for (int s = 0; s < 4; s++) d[s] = (float)loss_dfl_decode(logits + s * LOSS_REG_MAX, p);
    float x1 = ax - d[0], y1 = ay - d[1], x2 = ax + d[2], y2 = ay + d[3];
    float cx = (x1 + x2) / 2 * stride, cy = (y1 + y2) / 2 * stride;
    float w = (x2 - x1) * stride, h = (y2 - y1) * stride;
    box[0] = cx - w / 2; box[1] = cy - h / 2; box[2] = cx + w / 2; box[3] = cy + h / 2;
}

void nms_decode(const Map head[], const int strides[], int n_levels, int n, int nc, float *boxes,
                float *scores) {
    int a = 0;
    for (int l = 0; l < n_levels; l++)
        for (int y = 0; y < head[l].H; y++)
            for (int x = 0; x < head[l].W; x++, a++) {
                const float *px = map_at(head[l], n, y, x);
                decode_box(px, x + 0.5f, y + 0.5f, (float)strides[l], boxes + (size_t)a * 4);
                const float *logit = px + 4 * LOSS_REG_MAX;
                for (int c = 0; c < nc; c++) scores[(size_t)a * nc + c] = fexp_sigmoid(logit[c]);   // glibc's expf, portably
            }
}

float nms_iou(const float a[4], const float b[4]) {
    float w = fmaxf(0.0f, fminf(a[2], b[2]) - fmaxf(a[0], b[0]));
    float h = fmaxf(0.0f, fminf(a[3], b[3]) - fmaxf(a[1], b[1]));
    float inter = w * h;
    float area_a = (a[2] - a[0]) * (a[3] - a[1]), area_b = (b[2] - b[0]) * (b[3] - b[1]);
    return inter / (area_a + area_b - inter);   // no eps, as torchvision: 0/0 is NaN and suppresses nothing
}

typedef struct { float conf; int anchor, cls, order; } Cand;

static int cand_cmp(const void *pa, const void *pb) {   // score descending; ties keep candidate order
    const Cand *a = pa, *b = pb;
    if (a->conf != b->conf) return a->conf < b->conf ? 1 : -1;
    return (a->order > b->order) - (a->order < b->order);
}

// The candidate filter: every class over conf_thres (multi-label), or each anchor's best class.
static int candidates(const float *scores, int A, int nc, const NmsOptions *o, Cand *out) {
    int n = 0, multi = o->multi_label && nc > 1;
    for (int a = 0; a < A; a++) {
        const float *s = scores + (size_t)a * nc;
        int best = 0;
        for (int c = 1; c < nc; c++) if (s[c] > s[best]) best = c;   // first maximum, as torch.max
        if (!(s[best] > o->conf_thres)) continue;
        for (int c = multi ? 0 : best; c < (multi ? nc : best + 1); c++)
            if (s[c] > o->conf_thres) { out[n] = (Cand){ s[c], a, c, n }; n++; }
    }
    return n;
}

int nms_run(const float *boxes, const float *scores, int A, int nc, const NmsOptions *o, Det *out) {
    Cand *cand = xmalloc(sizeof *cand * ((size_t)A * (o->multi_label ? nc : 1) + 1));
    int n = candidates(scores, A, nc, o, cand);
    qsort(cand, n, sizeof *cand, cand_cmp);
    if (n > o->max_nms) n = o->max_nms;
    float (*ob)[4] = xmalloc(sizeof *ob * (n + 1));   // boxes offset by class
    char *gone = xcalloc(n + 1, 1);
    for (int i = 0; i < n; i++) {
        float off = o->agnostic ? 0.0f : cand[i].cls * NMS_MAX_WH;
        for (int k = 0; k < 4; k++) ob[i][k] = boxes[(size_t)cand[i].anchor * 4 + k] + off;
    }
    int nd = 0;
    for (int i = 0; i < n && nd < o->max_det; i++) {
        if (gone[i]) continue;
        const float *b = boxes + (size_t)cand[i].anchor * 4;
        out[nd++] = (Det){ b[0], b[1], b[2], b[3], cand[i].conf, cand[i].cls };
        for (int j = i + 1; j < n; j++)
            if (!gone[j] && nms_iou(ob[i], ob[j]) > o->iou_thres) gone[j] = 1;
    }
    free(cand); free(ob); free(gone);
    return nd;
}
