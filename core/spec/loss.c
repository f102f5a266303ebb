// loss.c: see loss.h. Every quantity is computed in double from the fp32 maps: the reference fixture was
// computed in float64, and the BCE sum runs over N*A*nc terms. Boxes are (x1,y1,x2,y2); the assigner
// works in pixels, the box and DFL losses in grid units of each anchor's level (as loss_tal.py does).
#include "core/spec/loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/box.h"
#include "core/spec/loss_host.h"

#define R        LOSS_REG_MAX
#define TOPK     10
#define TAL_EPS  1e-9           // assigner: in-box margin and normalisation
#define DIST_MAX (R - 1 - 0.01) // bbox2dist clamp: 14.99
#define GAIN_BOX 7.5
#define GAIN_CLS 0.5
#define GAIN_DFL 1.5

typedef struct { double x1, y1, x2, y2; int cls, row; } Gt;          // pixels; row in b->targets
typedef LossAnchor Anchor;   // core/spec/loss_host.h

struct LossWork {
    int N, A, G;
    size_t cap_cells, cap_gts;
    Gt            *gt;         // (G) grouped by image, each image's targets in input order
    LossIndex      ix;         // anchors; image n owns gt[ix.begin[n] .. ix.begin[n+1]) (core/spec/loss_host.h)
    int           *asg;        // (N*A) assigned gt index, -1 for background
    int           *npos;       // (N*A) number of gts that picked the anchor (assigner scratch)
    double        *score;      // (N*A) target score of the assigned class
    double        *pbox;       // (N*A*4) predicted box in pixels, detached (assigner cache)
    unsigned char *have_pbox;  // (N*A)
    int           *touched;    // (G*TOPK) this image's positive anchors
    double        *tm, *um;    // (G*TOPK) their alignment metric and overlap with the final gt
    double        *gmax_t, *gmax_u;   // (G) per gt: max metric and max overlap over its positives
    int            n_fg;
};

// ---- geometry ---------------------------------------------------------------------------------
double loss_ciou(const double b1[4], const double b2[4], double d1[4]) { return box_ciou(b1, b2, d1); }

double loss_dfl_decode(const float *logits, double p[R]) {
    double m = logits[0], sum = 0, e = 0;
    for (int i = 1; i < R; i++) m = fmax(m, logits[i]);
    for (int i = 0; i < R; i++) sum += p[i] = exp(logits[i] - m);
    for (int i = 0; i < R; i++) e += i * (p[i] /= sum);
    return e;
}

// dfl_split: target distance -> left bin and its weight, as _df_loss computes them
static int dfl_split(double t, double *wl) { return box_dfl_split(t, DIST_MAX, wl); }

static double log_sum_exp(const float *x) {
    double m = x[0], s = 0;
    for (int i = 1; i < R; i++) m = fmax(m, x[i]);
    for (int i = 0; i < R; i++) s += exp(x[i] - m);
    return m + log(s);
}

double loss_dfl_side(const float *logits, double t) {
    double wl, lse = log_sum_exp(logits);
    int left = dfl_split(t, &wl);
    return wl * (lse - logits[left]) + (1 - wl) * (lse - logits[left + 1]);
}

// ---- work buffers -----------------------------------------------------------------------------
LossWork *loss_work_new(void) { return xcalloc(1, sizeof(LossWork)); }

void loss_work_free(LossWork *w) {
    if (!w) return;
    free(w->gt); loss_index_free(&w->ix); free(w->asg); free(w->npos); free(w->score);
    free(w->pbox); free(w->have_pbox); free(w->touched); free(w->tm); free(w->um);
    free(w->gmax_t); free(w->gmax_u);
    free(w);
}

static void work_reserve(LossWork *w, int N, int A, int G) {
    size_t cells = (size_t)N * A;
    if (cells > w->cap_cells) {
        w->cap_cells = cells;
        w->asg = xrealloc(w->asg, cells * sizeof(int));
        w->npos = xrealloc(w->npos, cells * sizeof(int));
        w->score = xrealloc(w->score, cells * sizeof(double));
        w->pbox = xrealloc(w->pbox, cells * 4 * sizeof(double));
        w->have_pbox = xrealloc(w->have_pbox, cells);
    }
    loss_index_reserve(&w->ix, N, A);
    if ((size_t)G > w->cap_gts || !w->gt) {
        w->cap_gts = (size_t)G > 2 * w->cap_gts ? (size_t)G : 2 * w->cap_gts + 16;
        size_t g = w->cap_gts;
        w->gt = xrealloc(w->gt, g * sizeof(Gt));
        w->touched = xrealloc(w->touched, g * TOPK * sizeof(int));
        w->tm = xrealloc(w->tm, g * TOPK * sizeof(double));
        w->um = xrealloc(w->um, g * TOPK * sizeof(double));
        w->gmax_t = xrealloc(w->gmax_t, g * sizeof(double));
        w->gmax_u = xrealloc(w->gmax_u, g * sizeof(double));
    }
}

// ---- inputs (the checks: core/spec/loss_host.c) --------------------------------------------------------
int loss_check_target(const float *t, int i, int N, int nc, Err *err) {
    for (int k = 0; k < 6; k++)
        if (!isfinite(t[k])) return err_set(err, "loss: target row %d has a non-finite value", i);
    if (t[0] != floorf(t[0]) || t[0] < 0 || t[0] >= N)
        return err_set(err, "loss: target row %d: image index %g outside [0, %d)", i, t[0], N);
    if (t[1] != floorf(t[1]) || t[1] < 0 || t[1] >= nc)
        return err_set(err, "loss: target row %d: class %g outside [0, %d)", i, t[1], nc);
    return 0;
}

// load_targets: validate the rows, group them by image keeping their order, convert to pixel xyxy.
static int load_targets(LossWork *w, const LossBatch *b, Err *err) {
    int *fill = w->ix.fill;
    if (loss_group_targets(b->targets, b->n_targets, w->N, b->nc, w->ix.begin, fill, err)) return -1;
    for (int i = 0; i < b->n_targets; i++) {
        const float *t = b->targets + 6 * i;
        double x[4];
        box_target_xyxy(t, b->img_h, b->img_w, x);
        w->gt[fill[(int)t[0]]++] = (Gt){ x[0], x[1], x[2], x[3], (int)t[1], i };
    }
    return 0;
}

// ---- assigner ---------------------------------------------------------------------------------
static const float *logits_at(const LossBatch *b, int n, const Anchor *an) {
    return map_at(b->head[an->level], n, an->row, an->col);
}

// pred_pixels: the detached predicted box of (n, a) in pixels, decoded once per assignment
static const double *pred_pixels(LossWork *w, const LossBatch *b, int n, int a) {
    size_t i = (size_t)n * w->A + a;
    double *box = w->pbox + 4 * i;
    if (!w->have_pbox[i]) {
        const Anchor *an = &w->ix.anchor[a];
        const float *x = logits_at(b, n, an);
        double p[R], l = loss_dfl_decode(x, p), t = loss_dfl_decode(x + R, p);
        double r = loss_dfl_decode(x + 2 * R, p), bt = loss_dfl_decode(x + 3 * R, p);
        box[0] = (an->x - l) * an->stride;  box[1] = (an->y - t) * an->stride;
        box[2] = (an->x + r) * an->stride;  box[3] = (an->y + bt) * an->stride;
        w->have_pbox[i] = 1;
    }
    return box;
}

// overlap: CIoU(gt, pred) clamped at 0, as the assigner's get_box_metrics
static double overlap(LossWork *w, const LossBatch *b, int n, const Gt *g, int a) {
    double gb[4] = { g->x1, g->y1, g->x2, g->y2 };
    return fmax(loss_ciou(gb, pred_pixels(w, b, n, a), NULL), 0);
}

// align_metric: t = score^0.5 * overlap^6 for the gt's class; *u receives the overlap
static double align_metric(LossWork *w, const LossBatch *b, int n, const Gt *g, int a, double *u) {
    double s = box_sigmoid(logits_at(b, n, &w->ix.anchor[a])[4 * R + g->cls]);
    *u = overlap(w, b, n, g, a);
    return pow(s, 0.5) * pow(*u, 6.0);
}

static int in_box(const Gt *g, const Anchor *an) {
    double x = an->x * an->stride, y = an->y * an->stride;
    return fmin(fmin(x - g->x1, y - g->y1), fmin(g->x2 - x, g->y2 - y)) > TAL_EPS;
}

// select_topk: the gt's positives before conflict resolution. torch.topk over metric*inbox takes the
// top 10 over all anchors; when fewer than 10 are > 0 the rest are zero-metric anchors (we take the
// lowest indices), of which only those inside the box count. Returns the number written to out.
static int select_topk(LossWork *w, const LossBatch *b, int n, const Gt *g, int *out) {
    LossTopk top;
    loss_topk_init(&top, w->A < TOPK ? w->A : TOPK);
    if (!(g->x1 + g->y1 + g->x2 + g->y2 > 0)) return 0;   // mask_gt: padding-like rows never match
    for (int a = 0; a < w->A; a++) {
        int in = in_box(g, &w->ix.anchor[a]);
        double u, t = in ? align_metric(w, b, n, g, a, &u) : 0;
        loss_topk_offer(&top, a, t, in);
    }
    return loss_topk_take(&top, out);
}

// best_gt: the conflict rule of select_highest_overlaps: argmax of the overlap over all gts of the
// image (not only those that picked the anchor), ties to the lowest index.
static int best_gt(LossWork *w, const LossBatch *b, int n, int a) {
    int best = -1;
    double bu = -1;
    for (int j = w->ix.begin[n]; j < w->ix.begin[n + 1]; j++) {
        double u = overlap(w, b, n, &w->gt[j], a);
        if (u > bu) { bu = u; best = j; }
    }
    return best;
}

// assign_image: positives, conflicts, then target scores t * max_u / (max_t + eps) per gt.
static double assign_image(LossWork *w, const LossBatch *b, int n) {
    int *asg = w->asg + (size_t)n * w->A, *npos = w->npos + (size_t)n * w->A;
    double *score = w->score + (size_t)n * w->A, tss = 0;
    int nt = 0, picks[TOPK];
    for (int j = w->ix.begin[n]; j < w->ix.begin[n + 1]; j++) {
        int np = select_topk(w, b, n, &w->gt[j], picks);
        for (int i = 0; i < np; i++)
            if (npos[picks[i]]++ == 0) { asg[picks[i]] = j; w->touched[nt++] = picks[i]; }
        w->gmax_t[j] = w->gmax_u[j] = 0;
    }
    for (int i = 0; i < nt; i++) {
        int a = w->touched[i];
        if (npos[a] > 1) asg[a] = best_gt(w, b, n, a);
        w->tm[i] = align_metric(w, b, n, &w->gt[asg[a]], a, &w->um[i]);
        w->gmax_t[asg[a]] = fmax(w->gmax_t[asg[a]], w->tm[i]);
        w->gmax_u[asg[a]] = fmax(w->gmax_u[asg[a]], w->um[i]);
    }
    for (int i = 0; i < nt; i++) {
        int a = w->touched[i], j = asg[a];
        score[a] = w->tm[i] * w->gmax_u[j] / (w->gmax_t[j] + TAL_EPS);
        tss += score[a];
    }
    w->n_fg += nt;
    return tss;
}

int loss_assign(LossWork *w, const LossBatch *b, double *tss_local, Err *err) {
    int A, N = b->head[0].N;
    *tss_local = 0;
    if (loss_check_maps(b, &A, err)) return -1;
    if (b->n_targets < 0 || (b->n_targets > 0 && !b->targets))
        return err_set(err, "loss: %d targets without data", b->n_targets);
    work_reserve(w, N, A, b->n_targets);
    w->N = N; w->A = A; w->G = b->n_targets;
    loss_index_anchors(&w->ix, b->head, b->img_h);
    if (load_targets(w, b, err)) return -1;
    size_t cells = (size_t)N * A;
    for (size_t i = 0; i < cells; i++) { w->asg[i] = -1; w->npos[i] = 0; w->score[i] = 0; }
    memset(w->have_pbox, 0, cells);
    w->n_fg = 0;
    double tss = 0;
    for (int n = 0; n < N; n++) tss += assign_image(w, b, n);
    *tss_local = tss;
    return 0;
}

int loss_target(const LossWork *w, int n, int a, double *score) {
    size_t i = (size_t)n * w->A + a;
    if (score) *score = w->asg[i] >= 0 ? w->score[i] : 0;
    return w->asg[i] >= 0 ? w->gt[w->asg[i]].row : -1;
}

// ---- loss terms and gradients -----------------------------------------------------------------
typedef struct { double box, cls, dfl; double k_box, k_cls, k_dfl; } Sums;   // k: d total / d sum

double loss_bce_logits(const float *x, int nc, int label, double score, double k, float *g) {
    double sum = 0;
    for (int c = 0; c < nc; c++) {
        // log(1 + e) rather than log1p: as exact in double for the terms that matter, and faster
        double z = c == label ? score : 0, e = exp(-fabs(x[c])), den = 1 + e;
        sum += fmax(x[c], 0) - x[c] * z + log(den);
        if (g) g[c] = (float)(k * ((x[c] >= 0 ? 1 : e) / den - z));
    }
    return sum;
}

// box_anchor: (1 - CIoU) and DFL of one foreground anchor, both weighted by its target score.
// The CIoU gradient reaches the 4R logits through the softmax expectation that decodes the box.
static void box_anchor(const float *x, const Anchor *an, const Gt *gt, double wgt, Sums *s, float *g) {
    double p[4][R], e[4];
    for (int k = 0; k < 4; k++) e[k] = loss_dfl_decode(x + k * R, p[k]);
    double pb[4] = { an->x - e[0], an->y - e[1], an->x + e[2], an->y + e[3] };
    double tb[4] = { gt->x1 / an->stride, gt->y1 / an->stride, gt->x2 / an->stride, gt->y2 / an->stride };
    double dpb[4], ciou = loss_ciou(pb, tb, dpb);
    s->box += (1 - ciou) * wgt;
    double kb = s->k_box * wgt;   // d total / d (1 - CIoU)
    double de[4] = { kb * dpb[0], kb * dpb[1], -kb * dpb[2], -kb * dpb[3] };   // x1 = ax - l, x2 = ax + r
    double dist[4] = { an->x - tb[0], an->y - tb[1], tb[2] - an->x, tb[3] - an->y };
    double kd = s->k_dfl * wgt / 4;   // mean over the four sides
    for (int k = 0; k < 4; k++) {
        s->dfl += loss_dfl_side(x + k * R, dist[k]) * wgt / 4;
        if (g) box_dfl_grad(p[k], R, e[k], de[k], kd, dist[k], DIST_MAX, g + k * R);
    }
}

void loss_compute(LossWork *w, const LossBatch *b, double tss_norm, double batch_mult,
                  Map grad[LOSS_LEVELS], LossOut *out) {
    Sums s = { 0, 0, 0, GAIN_BOX * batch_mult / tss_norm, GAIN_CLS * batch_mult / tss_norm,
               GAIN_DFL * batch_mult / tss_norm };
    for (int n = 0; n < w->N; n++)
        for (int a = 0; a < w->A; a++) {
            const Anchor *an = &w->ix.anchor[a];
            const float *x = logits_at(b, n, an);
            float *g = grad ? map_at(grad[an->level], n, an->row, an->col) : NULL;
            size_t i = (size_t)n * w->A + a;
            int j = w->asg[i];
            s.cls += loss_bce_logits(x + 4 * R, b->nc, j >= 0 ? w->gt[j].cls : -1, w->score[i], s.k_cls,
                                     g ? g + 4 * R : NULL);
            if (j >= 0) box_anchor(x, an, &w->gt[j], w->score[i], &s, g);
            else if (g) memset(g, 0, 4 * R * sizeof(float));
        }
    out->box = GAIN_BOX * s.box / tss_norm;
    out->cls = GAIN_CLS * s.cls / tss_norm;
    out->dfl = GAIN_DFL * s.dfl / tss_norm;
    out->total = batch_mult * (out->box + out->cls + out->dfl);
    out->tss = tss_norm;
    out->n_fg = w->n_fg;
    out->tss_aux = 0;
    out->n_fg_aux = 0;
}

void loss_add_aux(LossOut *main, const LossOut *aux) {
    main->box += LOSS_AUX_WEIGHT * aux->box;
    main->cls += LOSS_AUX_WEIGHT * aux->cls;
    main->dfl += LOSS_AUX_WEIGHT * aux->dfl;
    main->total += aux->total;
    main->tss_aux = aux->tss;
    main->n_fg_aux = aux->n_fg;
}

int loss_forward_backward(LossWork *w, const LossBatch *b, Map grad[LOSS_LEVELS], LossOut *out,
                          Err *err) {
    double tss;
    if (loss_assign(w, b, &tss, err)) return -1;
    loss_compute(w, b, fmax(tss, 1), b->head[0].N, grad, out);
    return 0;
}
