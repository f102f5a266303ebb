// nms_heads.h: random DFL head maps for the NMS tests (test_nms_fast.c, test_gpu_nms.c): three levels
// at strides 8, 16, 32 of an img_h x img_w input, N images, nc classes, each pixel [64 box logits | nc
// class logits | 3 pad floats], and a kind that sets how many (anchor, class) pairs clear conf 0.001.
// Legend: N images, A anchors, nc classes, C = 64 + nc channels, ld = C + 3.
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/nms.h"
#include "core/base/util.h"

enum HeadKind { HEAD_NONE, HEAD_ONE, HEAD_FEW, HEAD_MANY, HEAD_TIES, HEAD_KINDS };
static const char *const head_kind_name[HEAD_KINDS] = { "none", "one", "few", "many", "ties" };

typedef struct {
    int    N, nc, img_h, img_w, A, strides[3];
    float *buf;           // the three levels one after the other
    Map    head[3];
} Heads;

// Class logits: NONE all -20 (no candidate); ONE a single pair at +2; FEW ~1 in 50 anchors, one class;
// MANY N(-3, 2.5) everywhere (at nc 80 and 640 px far more than max_nms = 30000 pairs); TIES logits
// from {-8, -1, 0, 1} and box logits from {0, 3} so that many scores and boxes are exactly equal.
static inline float head_class_logit(Rng *r, int kind, int a, int c, int nc) {
    switch (kind) {
    case HEAD_ONE:  return a == 7 && c == nc - 1 ? 2.0f : -20.0f;
    case HEAD_FEW:  return a % 53 == 3 && c == a % nc ? (float)rng_uniform(r, -2, 3) : -20.0f;
    case HEAD_MANY: return (float)(-3 + 2.5 * rng_normal(r));
    case HEAD_TIES: { static const float v[4] = { -8, -1, 0, 1 }; return v[rng_int(r, 4)]; }
    default:        return -20.0f;
    }
}

static inline void heads_make(Heads *h, int N, int img_h, int img_w, int nc, int kind, uint64_t seed) {
    int C = 64 + nc, ld = C + 3;
    size_t total = 0, off = 0;
    *h = (Heads){ .N = N, .nc = nc, .img_h = img_h, .img_w = img_w, .strides = { 8, 16, 32 } };
    for (int l = 0; l < 3; l++) total += (size_t)N * (img_h / h->strides[l]) * (img_w / h->strides[l]) * ld;
    h->buf = xmalloc(sizeof(float) * (total + 1));
    Rng r = rng_for(seed, kind, nc);
    for (int l = 0; l < 3; l++) {
        int H = img_h / h->strides[l], W = img_w / h->strides[l];
        h->head[l] = (Map){ h->buf + off, N, H, W, C, ld, 0, 0 };
        off += (size_t)N * H * W * ld;
        h->A += H * W;                        // nms_anchors' sum
    }
    for (int n = 0; n < N; n++) {
        int a = 0;
        for (int l = 0; l < 3; l++)
            for (int y = 0; y < h->head[l].H; y++)
                for (int x = 0; x < h->head[l].W; x++, a++) {
                    float *px = map_at(h->head[l], n, y, x);
                    for (int k = 0; k < 64; k++)
                        px[k] = kind == HEAD_TIES ? 3.0f * rng_int(&r, 2) : (float)(2 * rng_normal(&r));
                    for (int c = 0; c < nc; c++) px[64 + c] = head_class_logit(&r, kind, a, c, nc);
                    for (int k = C; k < ld; k++) px[k] = -777.0f;   // pad: must not be read
                }
    }
}

static inline void heads_free(Heads *h) { free(h->buf); }

// Image n's detections from a device (got, nd of them) against the CPU reference's (want, nw): 0 when
// equal detection for detection, bit for bit; else 1, with the first difference printed under `what`.
static inline int dets_differ(const char *what, int n, const Det *got, int nd, const Det *want, int nw) {
    int first = -1;
    for (int i = 0; i < nw && i < nd && first < 0; i++) if (memcmp(&got[i], &want[i], sizeof(Det))) first = i;
    if (nw == nd && first < 0) return 0;
    printf("    %s image %d: %d detections, CPU %d", what, n, nd, nw);
    if (first >= 0)
        printf("; detection %d: cls %d conf %.9g box %.9g %.9g %.9g %.9g vs CPU cls %d conf %.9g box %.9g %.9g %.9g %.9g",
               first, got[first].cls, got[first].conf, got[first].x1, got[first].y1, got[first].x2, got[first].y2,
               want[first].cls, want[first].conf, want[first].x1, want[first].y1, want[first].x2, want[first].y2);
    printf("\n");
    return 1;
}
