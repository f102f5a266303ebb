// val_decode.c: one image's detections from the head maps: DFL decode + NMS for DDetect heads, or
// YOLO26's NMS-free top-k over the one-to-one branch (yolo26.md §4) for end-to-end heads. Shared by
// validation and detect. Legend: A anchors, nc classes.
#include "core/eval/val.h"

#include <stdlib.h>

void val_decoder_init(ValDecoder *d, const Model *m, int max_h, int max_w, const NmsOptions *o) {
    int A = (max_h / 8) * (max_w / 8) + (max_h / 16) * (max_w / 16) + (max_h / 32) * (max_w / 32);
    int cap = (o->max_det > A ? o->max_det : A) + 1;
    *d = (ValDecoder){ .end2end = m->end2end, .nc = m->nc, .A = A, .nms = *o };
    d->boxes = xmalloc(sizeof(float) * 4 * A);
    d->scores = xmalloc(sizeof(float) * (size_t)A * m->nc);
    d->det = xmalloc(sizeof(Det) * cap);
    if (m->end2end) {
        d->work = xmalloc(sizeof(Topk26Item) * topk26_work_items(A, m->nc, o->max_det));
        d->det26 = xmalloc(sizeof(Det26) * cap);
    }
}

void val_decoder_free(ValDecoder *d) {
    free(d->boxes); free(d->scores); free(d->det); free(d->work); free(d->det26);
}

// The one-to-one head maps [4 distances | nc logits] as the two slices topk26 reads.
static Head26 head26_of(const Model *m, const Map head[]) {
    Head26 h;
    for (int l = 0; l < L26_LEVELS; l++) {
        h.box[l] = map_slice(head[l], 0, 4);
        h.cls[l] = map_slice(head[l], 4, m->nc);
    }
    return h;
}

int val_decode(ValDecoder *d, const Model *m, const Map head[], int n, int img_h) {
    int A = nms_anchors(head, m->n_levels);
    if (A > d->A) die("val_decode: %d anchors, scratch for %d", A, d->A);
    if (!d->end2end) {
        nms_decode(head, m->strides, m->n_levels, n, m->nc, d->boxes, d->scores);
        return nms_run_fast(d->boxes, d->scores, A, m->nc, &d->nms, d->det);   // nms_run's output, faster
    }
    Head26 h = head26_of(m, head);
    topk26_decode(&h, n, img_h, d->boxes, d->scores);   // the logits, in the scores buffer
    Topk26Opts to = { .max_det = d->nms.max_det, .agnostic = d->nms.agnostic, .conf = d->nms.conf_thres };
    int nd = topk26_select(d->boxes, d->scores, A, m->nc, &to, d->work, d->det26);
    for (int i = 0; i < nd; i++) {
        const Det26 *x = &d->det26[i];
        d->det[i] = (Det){ x->box[0], x->box[1], x->box[2], x->box[3], x->score, x->cls };
    }
    return nd;
}
