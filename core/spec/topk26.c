// topk26.c: see topk26.h. Two sorts per image (A anchors, then k*nc pairs), each by logit descending,
// index ascending on ties; nothing is allocated.
#include "core/spec/topk26.h"

#include <stdlib.h>

#include "core/spec/fexp.h"

size_t topk26_work_items(int A, int nc, int max_det) {
    size_t k = (size_t)(max_det < A ? max_det : A);
    return (size_t)A + k * (size_t)nc;   // the anchors, then the pairs of the top k
}

float topk26_score(float logit) { return fexp_sigmoid(logit); }   // expf as glibc's, also on a GPU

void topk26_decode(const Head26 *h, int n, int img_h, float *boxes, float *logits) {
    int a = 0, nc = h->cls[0].C;
    for (int l = 0; l < L26_LEVELS; l++) {
        Map bm = h->box[l], cm = h->cls[l];
        float stride = (float)img_h / bm.H;
        for (int y = 0; y < bm.H; y++)
            for (int x = 0; x < bm.W; x++, a++) {
                const float *d = map_at(bm, n, y, x), *c = map_at(cm, n, y, x);
                float ax = x + 0.5f, ay = y + 0.5f, *b = boxes + 4 * (size_t)a;
                b[0] = (ax - d[0]) * stride; b[1] = (ay - d[1]) * stride;
                b[2] = (ax + d[2]) * stride; b[3] = (ay + d[3]) * stride;
                for (int k = 0; k < nc; k++) logits[(size_t)a * nc + k] = c[k];
            }
    }
}

static int by_logit(const void *pa, const void *pb) {
    const Topk26Item *a = pa, *b = pb;
    if (a->s != b->s) return a->s > b->s ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

// the best class of anchor a: first maximum, as torch.max
static Topk26Item best_class(const float *logits, int nc, int a) {
    Topk26Item t = { logits[(size_t)a * nc], 0 };
    for (int c = 1; c < nc; c++)
        if (logits[(size_t)a * nc + c] > t.s) t = (Topk26Item){ logits[(size_t)a * nc + c], c };
    return t;
}

static int emit(const float *boxes, int a, float logit, int cls, float conf, Det26 *out) {
    float s = topk26_score(logit);
    if (!(s > conf)) return 0;
    const float *b = boxes + 4 * (size_t)a;
    *out = (Det26){ { b[0], b[1], b[2], b[3] }, s, cls, a };
    return 1;
}

int topk26_select(const float *boxes, const float *logits, int A, int nc, const Topk26Opts *o,
                  Topk26Item *work, Det26 *out) {
    int k = o->max_det < A ? o->max_det : A, n = 0;
    if (k <= 0) return 0;
    Topk26Item *anchors = work, *pairs = work + A;
    for (int a = 0; a < A; a++) anchors[a] = (Topk26Item){ best_class(logits, nc, a).s, a };
    qsort(anchors, (size_t)A, sizeof *anchors, by_logit);   // ori_index: the top k by best logit
    if (o->agnostic) {
        for (int i = 0; i < k; i++) {
            int a = anchors[i].i;
            n += emit(boxes, a, anchors[i].s, best_class(logits, nc, a).i, o->conf, out + n);
        }
        return n;
    }
    for (int i = 0; i < k; i++)   // flattened (rank i, class c) as scores.flatten(1) orders them
        for (int c = 0; c < nc; c++)
            pairs[(size_t)i * nc + c] = (Topk26Item){ logits[(size_t)anchors[i].i * nc + c], i * nc + c };
    qsort(pairs, (size_t)k * nc, sizeof *pairs, by_logit);
    for (int j = 0; j < k; j++) {
        int a = anchors[pairs[j].i / nc].i;
        n += emit(boxes, a, pairs[j].s, pairs[j].i % nc, o->conf, out + n);
    }
    return n;
}
