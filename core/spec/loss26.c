// loss26.c: see loss26.h. Ultralytics utils/loss.py (E2ELoss, v8DetectionLoss, BboxLoss) and
// utils/tal.py (TaskAlignedAssigner) at 8.4.14, in double from the fp32 outputs as the fixture was
// made. Boxes are (x1,y1,x2,y2); the assigner works in pixels, the box and L1 terms in grid cells.
#include "core/spec/loss26.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/box.h"
#include "core/spec/loss.h"   // loss_ciou: bbox_iou(..., CIoU=True) and its gradient
#include "core/spec/loss_host.h"

#define TOPK_MAX 10
#define TAL_EPS  1e-9     // assigner: in-box margin and normalisation
static const int TOPK[L26_BRANCHES]  = { 10, 7 };   // E2ELoss: v8DetectionLoss(tal_topk=10) and (7, 1)
static const int TOPK2[L26_BRANCHES] = { 10, 1 };   // topk2 == topk: no narrowing

// Gt: one target in pixels; in[] is the box of the inside test, enlarged by STAL for small targets.
typedef struct { double x1, y1, x2, y2, in[4]; int cls, row, valid; } Gt;
typedef LossAnchor Anchor;   // core/spec/loss_host.h

typedef struct {
    int           *asg;      // (N*A) assigned gt index, -1 for background
    int           *npos;     // (N*A) number of gts whose top-k picked the anchor
    double        *score;    // (N*A) target score of the assigned class
    double        *pbox;     // (N*A*4) predicted box in pixels, detached (assigner cache)
    unsigned char *have_pbox;
    int           *touched;  // (G*TOPK_MAX) this image's positive anchors
    unsigned char *keep;     // (G*TOPK_MAX) one-to-one narrowing: kept positives
    double        *tm, *um;  // (G*TOPK_MAX) their alignment metric and overlap with the final gt
    double        *gmax_t, *gmax_u;   // (G) per gt: max metric and max overlap over its positives
    int            n_fg;
} Branch;

struct Loss26Work {
    int N, A, G;
    size_t cap_cells, cap_gts;
    Gt     *gt;         // (G) grouped by image, each image's targets in input order
    LossIndex ix;       // anchors; image n owns gt[ix.begin[n] .. ix.begin[n+1]) (core/spec/loss_host.h)
    Branch  br[L26_BRANCHES];
};

// ---- weights ------------------------------------------------------------------------------------
void loss26_prog_weights(int epoch, int epochs, double w[L26_BRANCHES]) {
    double span = epochs - 1 > 1 ? epochs - 1 : 1;
    w[L26_O2M] = fmax(1 - epoch / span, 0) * (0.8 - 0.1) + 0.1;   // ProgLoss.update, k = epoch
    w[L26_O2O] = fmax(1 - w[L26_O2M], 0);
}

Loss26Weights loss26_weights(int epoch, int epochs) {
    Loss26Weights wt = { 7.5, 0.5, 1.5, { 0, 0 } };
    loss26_prog_weights(epoch, epochs, wt.w);
    return wt;
}

// ---- work buffers -------------------------------------------------------------------------------
Loss26Work *loss26_work_new(void) { return xcalloc(1, sizeof(Loss26Work)); }

static void branch_free(Branch *b) {
    free(b->asg); free(b->npos); free(b->score); free(b->pbox); free(b->have_pbox); free(b->touched);
    free(b->keep); free(b->tm); free(b->um); free(b->gmax_t); free(b->gmax_u);
}

void loss26_work_free(Loss26Work *w) {
    if (!w) return;
    for (int i = 0; i < L26_BRANCHES; i++) branch_free(&w->br[i]);
    free(w->gt); loss_index_free(&w->ix);
    free(w);
}

static void branch_reserve(Branch *b, size_t cells, size_t gts, int grow_cells, int grow_gts) {
    if (grow_cells) {
        b->asg = xrealloc(b->asg, cells * sizeof(int));
        b->npos = xrealloc(b->npos, cells * sizeof(int));
        b->score = xrealloc(b->score, cells * sizeof(double));
        b->pbox = xrealloc(b->pbox, cells * 4 * sizeof(double));
        b->have_pbox = xrealloc(b->have_pbox, cells);
    }
    if (grow_gts) {
        b->touched = xrealloc(b->touched, gts * TOPK_MAX * sizeof(int));
        b->keep = xrealloc(b->keep, gts * TOPK_MAX);
        b->tm = xrealloc(b->tm, gts * TOPK_MAX * sizeof(double));
        b->um = xrealloc(b->um, gts * TOPK_MAX * sizeof(double));
        b->gmax_t = xrealloc(b->gmax_t, gts * sizeof(double));
        b->gmax_u = xrealloc(b->gmax_u, gts * sizeof(double));
    }
}

static void work_reserve(Loss26Work *w, int N, int A, int G) {
    size_t cells = (size_t)N * A;
    int grow_cells = cells > w->cap_cells, grow_gts = (size_t)G > w->cap_gts || !w->gt;
    if (grow_cells) w->cap_cells = cells;
    if (grow_gts) {
        w->cap_gts = (size_t)G > 2 * w->cap_gts ? (size_t)G : 2 * w->cap_gts + 16;
        w->gt = xrealloc(w->gt, w->cap_gts * sizeof(Gt));
    }
    for (int i = 0; i < L26_BRANCHES; i++) branch_reserve(&w->br[i], cells, w->cap_gts, grow_cells, grow_gts);
    loss_index_reserve(&w->ix, N, A);
}

// ---- inputs (the checks: core/spec/loss_host.c) --------------------------------------------------------
// load_targets: validate, group by image keeping input order (the reference's padded (N, Gmax)
// layout), scale to pixels and convert to xyxy as v8DetectionLoss.preprocess does.
// STAL (box_stal): the inside-test box of small targets widened to the P4 stride.
static int load_targets(Loss26Work *w, const Loss26Batch *b, Err *err) {
    if (loss_group_targets(b->targets, b->n_targets, w->N, b->nc, w->ix.begin, w->ix.fill, err)) return -1;
    double s0 = w->ix.anchor[0].stride, s1 = (double)b->img_h / b->head[L26_O2M].box[1].H;
    for (int i = 0; i < b->n_targets; i++) {
        const float *t = b->targets + 6 * i;
        double x[4];
        box_target_xyxy(t, b->img_h, b->img_w, x);
        Gt *g = &w->gt[w->ix.fill[(int)t[0]]++];
        *g = (Gt){ x[0], x[1], x[2], x[3], { 0 }, (int)t[1], i, 0 };
        g->valid = g->x1 + g->y1 + g->x2 + g->y2 > 0;   // mask_gt
        box_stal(x, g->valid, s0, s1, g->in);
    }
    return 0;
}

// ---- assigner -----------------------------------------------------------------------------------
// Ctx: one branch on one image.
typedef struct { Loss26Work *w; Branch *br; const Head26 *head; int n, topk, topk2; } Ctx;


static const float *box_at(const Head26 *h, int n, const Anchor *an) {
    return map_at(h->box[an->level], n, an->row, an->col);
}
static const float *cls_at(const Head26 *h, int n, const Anchor *an) {
    return map_at(h->cls[an->level], n, an->row, an->col);
}

// pred_pixels: the detached predicted box of anchor a in pixels, decoded once per assignment
static const double *pred_pixels(const Ctx *c, int a) {
    size_t i = (size_t)c->n * c->w->A + a;
    double *box = c->br->pbox + 4 * i;
    if (!c->br->have_pbox[i]) {
        const Anchor *an = &c->w->ix.anchor[a];
        const float *d = box_at(c->head, c->n, an);
        box[0] = (an->x - d[0]) * an->stride;  box[1] = (an->y - d[1]) * an->stride;
        box[2] = (an->x + d[2]) * an->stride;  box[3] = (an->y + d[3]) * an->stride;
        c->br->have_pbox[i] = 1;
    }
    return box;
}

// candidate: the anchor centre lies strictly inside the target's (STAL) box, and the target is valid
static int candidate(const Gt *g, const Anchor *an) {
    double x = an->x * an->stride, y = an->y * an->stride;
    return g->valid && x - g->in[0] > TAL_EPS && y - g->in[1] > TAL_EPS && g->in[2] - x > TAL_EPS &&
           g->in[3] - y > TAL_EPS;
}

// overlap: CIoU(gt, pred) clamped at 0 for candidates, 0 elsewhere (get_box_metrics' overlaps)
static double overlap(const Ctx *c, const Gt *g, int a) {
    if (!candidate(g, &c->w->ix.anchor[a])) return 0;
    double gb[4] = { g->x1, g->y1, g->x2, g->y2 };
    return fmax(loss_ciou(gb, pred_pixels(c, a), NULL), 0);
}

// align_metric: score^0.5 * overlap^6 for the gt's class (0 off-candidate); *u gets the overlap
static double align_metric(const Ctx *c, const Gt *g, int a, double *u) {
    *u = overlap(c, g, a);
    if (*u == 0) return 0;
    double s = box_sigmoid(cls_at(c->head, c->n, &c->w->ix.anchor[a])[g->cls]);
    return pow(s, 0.5) * pow(*u, 6.0);
}

// select_topk: torch.topk(k) over the gt's metric row (0 off-candidate), then only candidates count.
// When fewer than k metrics are > 0 the rest of the k are zero-metric anchors, lowest index first.
static int select_topk(const Ctx *c, const Gt *g, int *out) {
    LossTopk top;
    double u;
    loss_topk_init(&top, c->w->A < c->topk ? c->w->A : c->topk);
    if (!g->valid) return 0;
    for (int a = 0; a < c->w->A; a++) {
        double t = align_metric(c, g, a, &u);
        loss_topk_offer(&top, a, t, t <= 0 && candidate(g, &c->w->ix.anchor[a]));   // the flag counts at t <= 0 only
    }
    return loss_topk_take(&top, out);
}

// best_gt: select_highest_overlaps: argmax of the overlap over all of the image's gts (off-candidate
// pairs count 0), first maximum, so an all-zero column goes to the image's first gt.
static int best_gt(const Ctx *c, int a) {
    const int *gb = c->w->ix.begin;
    int best = gb[c->n];
    double bu = -1;
    for (int j = gb[c->n]; j < gb[c->n + 1]; j++) {
        double u = overlap(c, &c->w->gt[j], a);
        if (u > bu) { bu = u; best = j; }
    }
    return best;
}

// narrow: the one-to-one step (topk2 != topk): each gt keeps its topk2 positives of largest metric
// (ties: lower anchor index); the rest become background. asg: this image's row.
static void narrow(const Ctx *c, int *asg, int nt) {
    Branch *br = c->br;
    memset(br->keep, 0, (size_t)nt);
    for (int j = c->w->ix.begin[c->n]; j < c->w->ix.begin[c->n + 1]; j++)
        for (int r = 0; r < c->topk2; r++) {
            int best = -1;
            for (int i = 0; i < nt; i++) {
                int a = br->touched[i];
                if (asg[a] != j || br->keep[i]) continue;
                if (best < 0 || br->tm[i] > br->tm[best] || (br->tm[i] == br->tm[best] && a < br->touched[best]))
                    best = i;
            }
            if (best < 0) break;
            br->keep[best] = 1;
        }
    for (int i = 0; i < nt; i++)
        if (!br->keep[i]) asg[br->touched[i]] = -1;
}

// assign_image: top-k positives, conflicts, the one-to-one narrowing, then the target scores
// t * max_u / (max_t + eps) per gt. Returns the image's sum of target scores.
static double assign_image(const Ctx *c) {
    Loss26Work *w = c->w;
    Branch *br = c->br;
    int *asg = br->asg + (size_t)c->n * w->A, *npos = br->npos + (size_t)c->n * w->A;
    double *score = br->score + (size_t)c->n * w->A, tss = 0;
    int nt = 0, picks[TOPK_MAX];
    for (int j = w->ix.begin[c->n]; j < w->ix.begin[c->n + 1]; j++) {
        int np = select_topk(c, &w->gt[j], picks);
        for (int i = 0; i < np; i++)
            if (npos[picks[i]]++ == 0) { asg[picks[i]] = j; br->touched[nt++] = picks[i]; }
        br->gmax_t[j] = br->gmax_u[j] = 0;
    }
    for (int i = 0; i < nt; i++) {
        int a = br->touched[i];
        if (npos[a] > 1) asg[a] = best_gt(c, a);
        br->tm[i] = align_metric(c, &w->gt[asg[a]], a, &br->um[i]);
    }
    if (c->topk2 != c->topk) narrow(c, asg, nt);
    for (int i = 0; i < nt; i++) {
        int j = asg[br->touched[i]];
        if (j < 0) continue;
        br->gmax_t[j] = fmax(br->gmax_t[j], br->tm[i]);
        br->gmax_u[j] = fmax(br->gmax_u[j], br->um[i]);
    }
    for (int i = 0; i < nt; i++) {
        int a = br->touched[i], j = asg[a];
        if (j < 0) continue;
        score[a] = br->tm[i] * br->gmax_u[j] / (br->gmax_t[j] + TAL_EPS);
        tss += score[a];
        br->n_fg++;
    }
    return tss;
}

int loss26_assign(Loss26Work *w, const Loss26Batch *b, double tss_local[L26_BRANCHES], Err *err) {
    int A;
    for (int i = 0; i < L26_BRANCHES; i++) tss_local[i] = 0;
    if (loss26_check_maps(b, &A, err)) return -1;
    if (b->n_targets < 0 || (b->n_targets > 0 && !b->targets))
        return err_set(err, "loss26: %d targets without data", b->n_targets);
    int N = b->head[L26_O2M].box[0].N;
    work_reserve(w, N, A, b->n_targets);
    w->N = N; w->A = A; w->G = b->n_targets;
    loss_index_anchors(&w->ix, b->head[L26_O2M].box, b->img_h);
    if (load_targets(w, b, err)) return -1;
    size_t cells = (size_t)N * A;
    for (int k = 0; k < L26_BRANCHES; k++) {
        Branch *br = &w->br[k];
        for (size_t i = 0; i < cells; i++) { br->asg[i] = -1; br->npos[i] = 0; br->score[i] = 0; }
        memset(br->have_pbox, 0, cells);
        br->n_fg = 0;
        for (int n = 0; n < N; n++)
            tss_local[k] += assign_image(&(Ctx){ w, br, &b->head[k], n, TOPK[k], TOPK2[k] });
    }
    return 0;
}

int loss26_target(const Loss26Work *w, int br, int n, int a, double *score) {
    size_t i = (size_t)n * w->A + a;
    int j = w->br[br].asg[i];
    if (score) *score = j >= 0 ? w->br[br].score[i] : 0;
    return j >= 0 ? w->gt[j].row : -1;
}

// ---- loss terms and gradients -------------------------------------------------------------------
typedef struct { double box, cls, l1; double k_box, k_cls, k_l1; } Sums;   // k: d total / d sum

// box_anchor: (1 - CIoU) in cells and the L1 term on distances normalised by the image size
// (distance * stride / width for l, r; / height for t, b), both weighted by the target score.
// d: the anchor's raw l, t, r, b; g (may be NULL) gets d total / d d.
static void box_anchor(const float *d, const Anchor *an, const Gt *gt, double wgt, const double img[2],
                       Sums *s, float *g) {
    double st = an->stride;
    double pb[4] = { an->x - d[0], an->y - d[1], an->x + d[2], an->y + d[3] };
    double tb[4] = { gt->x1 / st, gt->y1 / st, gt->x2 / st, gt->y2 / st };
    double dpb[4], ciou = loss_ciou(pb, tb, dpb);
    s->box += (1 - ciou) * wgt;
    double kb = s->k_box * wgt, kl = s->k_l1 * wgt / 4;   // /4: mean over the sides
    double dbox[4] = { kb * dpb[0], kb * dpb[1], -kb * dpb[2], -kb * dpb[3] };   // x1 = ax - l, x2 = ax + r
    double dist[4] = { an->x - tb[0], an->y - tb[1], tb[2] - an->x, tb[3] - an->y };   // bbox2dist, no clamp
    double l1 = 0;
    for (int k = 0; k < 4; k++) {
        double size = img[k % 2], p = d[k] * st / size, t = dist[k] * st / size;
        l1 += fabs(p - t);
        if (g) g[k] = (float)(dbox[k] + kl * ((p > t) - (p < t)) * st / size);   // sign(0) = 0, as torch
    }
    s->l1 += l1 / 4 * wgt;
}

static void compute_branch(Loss26Work *w, const Loss26Batch *b, int k, const double k_gain[3],
                           const Head26 *grad, Loss26Terms *out) {
    const Branch *br = &w->br[k];
    const Head26 *h = &b->head[k];
    double img[2] = { b->img_w, b->img_h };
    Sums s = { 0, 0, 0, k_gain[0], k_gain[1], k_gain[2] };
    for (int n = 0; n < w->N; n++)
        for (int a = 0; a < w->A; a++) {
            const Anchor *an = &w->ix.anchor[a];
            size_t i = (size_t)n * w->A + a;
            int j = br->asg[i];
            float *gb = grad ? map_at(grad->box[an->level], n, an->row, an->col) : NULL;
            float *gc = grad ? map_at(grad->cls[an->level], n, an->row, an->col) : NULL;
            s.cls += loss_bce_logits(cls_at(h, n, an), b->nc, j >= 0 ? w->gt[j].cls : -1, br->score[i], s.k_cls, gc);
            if (j >= 0) box_anchor(box_at(h, n, an), an, &w->gt[j], br->score[i], img, &s, gb);
            else if (gb) memset(gb, 0, 4 * sizeof(float));
        }
    out->box = s.box;
    out->cls = s.cls;
    out->l1 = s.l1;
    out->n_fg = br->n_fg;
}

void loss26_compute(Loss26Work *w, const Loss26Batch *b, const Loss26Weights *wt,
                    const double tss_norm[L26_BRANCHES], double batch_mult,
                    const Head26 *grad[L26_BRANCHES], Loss26Out *out) {
    out->total = 0;
    for (int k = 0; k < L26_BRANCHES; k++) {
        double tss = tss_norm[k], f = wt->w[k] * batch_mult / tss;
        double k_gain[3] = { wt->box * f, wt->cls * f, wt->l1 * f };
        Loss26Terms *t = &out->br[k];
        compute_branch(w, b, k, k_gain, grad ? grad[k] : NULL, t);
        t->box *= wt->box / tss;
        t->cls *= wt->cls / tss;
        t->l1 *= wt->l1 / tss;
        t->tss = tss;
        out->total += batch_mult * wt->w[k] * (t->box + t->cls + t->l1);
    }
}

int loss26_forward_backward(Loss26Work *w, const Loss26Batch *b, const Loss26Weights *wt,
                            const Head26 *grad[L26_BRANCHES], Loss26Out *out, Err *err) {
    double tss[L26_BRANCHES];
    if (loss26_assign(w, b, tss, err)) return -1;
    for (int k = 0; k < L26_BRANCHES; k++) tss[k] = fmax(tss[k], 1);
    loss26_compute(w, b, wt, tss, b->head[L26_O2M].box[0].N, grad, out);
    return 0;
}
