// loss_host.h: what both loss families prepare on the host before their assigners run, whichever
// backend runs them (core/spec/loss.c, core/spec/loss26.c and their CUDA twins gpu/loss.cu, gpu/loss26.cu): the
// head maps' checks with the anchor count, and the target rows checked and grouped by image. One copy,
// so both backends refuse the same inputs with the same messages. Includable from C and CUDA.
// Legend: N images, A anchors per image, nc classes; a target row is image, class, cx, cy, w, h (normalised).
#pragma once
#include <stddef.h>

#include "core/spec/loss.h"
#include "core/spec/loss26.h"

#ifdef __cplusplus
extern "C" {
#endif

// The DFL head's maps (core/spec/loss.h): one batch size, C = 4 * LOSS_REG_MAX + nc channels, each an integer
// stride of the image; *A gets the anchors per image. 0, or -1 with a message.
int  loss_check_maps(const LossBatch *b, int *A, Err *err);
// YOLO26's two branches (core/spec/loss26.h): every box (4) and class (nc) map of a level shaped as the
// one-to-many box map of that level, an integer stride of the image. 0, or -1 with a message.
int  loss26_check_maps(const Loss26Batch *b, int *A, Err *err);
// The nt rows checked (loss_check_target) and counted by image: begin[n] .. begin[n + 1] (N + 1 ints)
// will be image n's rows in input order, and fill[n] = begin[n] (N ints) for the caller's placing
// pass. 0, or -1 with a message naming the first bad row.
int  loss_group_targets(const float *targets, int nt, int N, int nc, int *begin, int *fill, Err *err);
// A CPU work's anchors and per-image index of its targets: anchor[a] (A) level by level, row-major;
// image n owns gt[begin[n] .. begin[n + 1]) and fill is the grouping's scratch (N + 1 ints each).
// loss_index_reserve grows them for N images and A anchors; loss_index_anchors fills the anchors from
// the levels' maps (maps[l]: any map of level l) of an input img_h pixels high.
typedef struct { int level, row, col; double x, y, stride; } LossAnchor;   // x, y in cells (col+0.5, row+0.5)
typedef struct { LossAnchor *anchor; int *begin, *fill; size_t cap_anchors, cap_images; } LossIndex;
void loss_index_reserve(LossIndex *ix, int N, int A);
void loss_index_anchors(LossIndex *ix, const Map maps[3], int img_h);
void loss_index_free(LossIndex *ix);

// The assigner's top k of one gt on the CPU (torch.topk over the gt's metric row), fed anchor by anchor in
// index order: the k largest metrics > 0, best first (ties keep the lower anchor); when fewer than k are
// > 0, the rest of the k are the lowest-index zero-metric anchors, of which only those inside the gt's
// box count (a NaN metric takes no place). k <= LOSS_TOPK_MAX.
enum { LOSS_TOPK_MAX = 16 };
typedef struct {
    int k, nb, nz, best[LOSS_TOPK_MAX], zero[LOSS_TOPK_MAX];
    double bm[LOSS_TOPK_MAX];
    unsigned char zin[LOSS_TOPK_MAX];
} LossTopk;

static inline void loss_topk_init(LossTopk *s, int k) { s->k = k; s->nb = s->nz = 0; }
static inline void loss_topk_offer(LossTopk *s, int a, double t, int inside) {
    if (t > 0 && (s->nb < s->k || t > s->bm[s->nb - 1])) {
        int p = s->nb < s->k ? s->nb++ : s->k - 1;
        for (; p > 0 && s->bm[p - 1] < t; p--) { s->bm[p] = s->bm[p - 1]; s->best[p] = s->best[p - 1]; }
        s->bm[p] = t;
        s->best[p] = a;
    } else if (t <= 0 && s->nz < s->k) {
        s->zin[s->nz] = (unsigned char)inside;
        s->zero[s->nz++] = a;
    }
}
// The picked anchors into out (at most k); returns their count.
static inline int loss_topk_take(const LossTopk *s, int *out) {
    int count = 0;
    for (int i = 0; i < s->nb; i++) out[count++] = s->best[i];
    for (int i = 0; i < s->k - s->nb && i < s->nz; i++)
        if (s->zin[i]) out[count++] = s->zero[i];
    return count;
}

#ifdef __cplusplus
}
#endif
