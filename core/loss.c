// loss.c: see loss.h. Every quantity is computed in double from the fp32 maps: the reference fixture was
// computed in float64, and the BCE sum runs over N*A*nc terms. Boxes are (x1,y1,x2,y2); the assigner
// works in pixels, the box and DFL losses in grid units of each anchor's level (as loss_tal.py does).
#include "core/loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define R        LOSS_REG_MAX
#define TOPK     10
#define TAL_EPS  1e-9           // assigner: in-box margin and normalisation
#define IOU_EPS  1e-7           // bbox_iou
#define DIST_MAX (R - 1 - 0.01) // bbox2dist clamp: 14.99
#define GAIN_BOX 7.5
#define GAIN_CLS 0.5
#define GAIN_DFL 1.5

typedef struct { double x1, y1, x2, y2; int cls, row; } Gt;          // pixels; row in b->targets
typedef struct { int level, row, col; double x, y, stride; } Anchor;  // x, y in cells (col+0.5, row+0.5)

struct LossWork {
    int N, A, G;
    size_t cap_cells, cap_images, cap_anchors, cap_gts;
    Anchor        *anchor;     // (A)
    Gt            *gt;         // (G) grouped by image, each image's targets in input order
    int           *gt_begin;   // (N+1) image n owns gt[gt_begin[n] .. gt_begin[n+1])
    int           *gt_fill;    // (N+1) scratch for grouping the targets
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
// d min(a,b)/da: 1, 0 or 1/2 on a tie (PyTorch's minimum/maximum backward splits ties evenly)
static double dmin_da(double a, double b) { return a < b ? 1 : a > b ? 0 : 0.5; }

double loss_ciou(const double b1[4], const double b2[4], double d1[4]) {
    double w1 = b1[2] - b1[0], h1 = b1[3] - b1[1] + IOU_EPS;
    double w2 = b2[2] - b2[0], h2 = b2[3] - b2[1] + IOU_EPS;
    double iw = fmin(b1[2], b2[2]) - fmax(b1[0], b2[0]), ih = fmin(b1[3], b2[3]) - fmax(b1[1], b2[1]);
    double inter = fmax(iw, 0) * fmax(ih, 0);
    double uni = w1 * h1 + w2 * h2 - inter + IOU_EPS, iou = inter / uni;
    double cw = fmax(b1[2], b2[2]) - fmin(b1[0], b2[0]), ch = fmax(b1[3], b2[3]) - fmin(b1[1], b2[1]);
    double c2 = cw * cw + ch * ch + IOU_EPS;
    double sx = b2[0] + b2[2] - b1[0] - b1[2], sy = b2[1] + b2[3] - b1[1] - b1[3];
    double rho2 = (sx * sx + sy * sy) / 4;
    double k = 4 / (M_PI * M_PI), da = atan(w2 / h2) - atan(w1 / h1), v = k * da * da;
    double alpha = v / (v - iou + (1 + IOU_EPS));
    if (d1) {
        // inter: clamp passes the gradient where its input is >= 0 (PyTorch clamp_min)
        double gx = ih > 0 ? ih : 0, gy = iw > 0 ? iw : 0;
        double di[4] = { iw >= 0 ? -gx * dmin_da(-b1[0], -b2[0]) : 0, ih >= 0 ? -gy * dmin_da(-b1[1], -b2[1]) : 0,
                         iw >= 0 ?  gx * dmin_da(b1[2], b2[2]) : 0,   ih >= 0 ?  gy * dmin_da(b1[3], b2[3]) : 0 };
        double dwh[4] = { -h1, -w1, h1, w1 };                    // d(w1*h1)/db1
        double dcw[4] = { -dmin_da(b1[0], b2[0]), 0, dmin_da(-b1[2], -b2[2]), 0 };   // max(a,b) = -min(-a,-b)
        double dch[4] = { 0, -dmin_da(b1[1], b2[1]), 0, dmin_da(-b1[3], -b2[3]) };
        double r = w1 / h1, datan = 1 / (1 + r * r);
        double dr[4] = { -1 / h1, w1 / (h1 * h1), 1 / h1, -w1 / (h1 * h1) };
        double drho[4] = { -sx / 2, -sy / 2, -sx / 2, -sy / 2 };
        for (int i = 0; i < 4; i++) {
            double diou = (di[i] - iou * (dwh[i] - di[i])) / uni;
            double dc2 = 2 * cw * dcw[i] + 2 * ch * dch[i];
            double dratio = drho[i] / c2 - rho2 / (c2 * c2) * dc2;
            double dv = -2 * k * da * datan * dr[i];
            d1[i] = diou - dratio - alpha * dv;
        }
    }
    return iou - (rho2 / c2 + v * alpha);
}

double loss_dfl_decode(const float *logits, double p[R]) {
    double m = logits[0], sum = 0, e = 0;
    for (int i = 1; i < R; i++) m = fmax(m, logits[i]);
    for (int i = 0; i < R; i++) sum += p[i] = exp(logits[i] - m);
    for (int i = 0; i < R; i++) e += i * (p[i] /= sum);
    return e;
}

// dfl_split: target distance -> left bin and its weight, as _df_loss computes them
static int dfl_split(double t, double *wl) {
    t = fmin(fmax(t, 0), DIST_MAX);
    int left = (int)t;
    *wl = (left + 1) - t;
    return left;
}

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

static double sigmoid(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }

// ---- work buffers -----------------------------------------------------------------------------
LossWork *loss_work_new(void) { return xcalloc(1, sizeof(LossWork)); }

void loss_work_free(LossWork *w) {
    if (!w) return;
    free(w->anchor); free(w->gt); free(w->gt_begin); free(w->gt_fill); free(w->asg); free(w->npos); free(w->score);
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
    if ((size_t)N > w->cap_images || !w->gt_begin) {
        w->cap_images = (size_t)N;
        w->gt_begin = xrealloc(w->gt_begin, (size_t)(N + 1) * sizeof(int));
        w->gt_fill = xrealloc(w->gt_fill, (size_t)(N + 1) * sizeof(int));
    }
    if ((size_t)A > w->cap_anchors) {
        w->cap_anchors = (size_t)A;
        w->anchor = xrealloc(w->anchor, (size_t)A * sizeof(Anchor));
    }
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

// ---- inputs -----------------------------------------------------------------------------------
static int check_maps(const LossBatch *b, int *A, Err *err) {
    int N = b->head[0].N, C = 4 * R + b->nc;
    *A = 0;
    if (b->nc < 1) return err_set(err, "loss: nc = %d; need at least one class", b->nc);
    for (int l = 0; l < LOSS_LEVELS; l++) {
        Map m = b->head[l];
        if (m.N != N || m.C != C || m.H < 1 || m.W < 1 || m.ld < m.C)
            return err_set(err, "loss: head map P%d is %dx%dx%dx%d (ld %d); expected N=%d, C=4*%d+%d=%d",
                           l + 3, m.N, m.H, m.W, m.C, m.ld, N, R, b->nc, C);
        if (b->img_h % m.H || b->img_w % m.W || b->img_h / m.H != b->img_w / m.W)
            return err_set(err, "loss: head map P%d is %dx%d, which is no integer stride of the %dx%d image",
                           l + 3, m.H, m.W, b->img_h, b->img_w);
        *A += m.H * m.W;
    }
    return 0;
}

static void make_anchors(LossWork *w, const LossBatch *b) {
    int a = 0;
    for (int l = 0; l < LOSS_LEVELS; l++) {
        Map m = b->head[l];
        double stride = (double)b->img_h / m.H;
        for (int y = 0; y < m.H; y++)
            for (int x = 0; x < m.W; x++)
                w->anchor[a++] = (Anchor){ l, y, x, x + 0.5, y + 0.5, stride };
    }
}

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
    int N = w->N;
    memset(w->gt_begin, 0, (size_t)(N + 1) * sizeof(int));
    for (int i = 0; i < b->n_targets; i++) {
        const float *t = b->targets + 6 * i;
        if (loss_check_target(t, i, N, b->nc, err)) return -1;
        w->gt_begin[(int)t[0] + 1]++;
    }
    for (int n = 0; n < N; n++) w->gt_begin[n + 1] += w->gt_begin[n];
    int *fill = w->gt_fill;
    for (int n = 0; n < N; n++) fill[n] = w->gt_begin[n];
    for (int i = 0; i < b->n_targets; i++) {
        const float *t = b->targets + 6 * i;
        double cx = t[2] * (double)b->img_w, cy = t[3] * (double)b->img_h;
        double bw = t[4] * (double)b->img_w, bh = t[5] * (double)b->img_h;
        w->gt[fill[(int)t[0]]++] = (Gt){ cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2, (int)t[1], i };
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
        const Anchor *an = &w->anchor[a];
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
    double s = sigmoid(logits_at(b, n, &w->anchor[a])[4 * R + g->cls]);
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
    int best[TOPK], zero[TOPK], nb = 0, nz = 0, k = w->A < TOPK ? w->A : TOPK;
    double bm[TOPK];
    unsigned char zin[TOPK];
    if (!(g->x1 + g->y1 + g->x2 + g->y2 > 0)) return 0;   // mask_gt: padding-like rows never match
    for (int a = 0; a < w->A; a++) {
        int in = in_box(g, &w->anchor[a]);
        double u, t = in ? align_metric(w, b, n, g, a, &u) : 0;
        if (t > 0 && (nb < k || t > bm[nb - 1])) {
            int p = nb < k ? nb++ : k - 1;
            for (; p > 0 && bm[p - 1] < t; p--) { bm[p] = bm[p - 1]; best[p] = best[p - 1]; }
            bm[p] = t;
            best[p] = a;
        } else if (t <= 0 && nz < k) {
            zin[nz] = (unsigned char)in;
            zero[nz++] = a;
        }
    }
    int count = 0;
    for (int i = 0; i < nb; i++) out[count++] = best[i];
    for (int i = 0; i < k - nb && i < nz; i++)
        if (zin[i]) out[count++] = zero[i];
    return count;
}

// best_gt: the conflict rule of select_highest_overlaps: argmax of the overlap over all gts of the
// image (not only those that picked the anchor), ties to the lowest index.
static int best_gt(LossWork *w, const LossBatch *b, int n, int a) {
    int best = -1;
    double bu = -1;
    for (int j = w->gt_begin[n]; j < w->gt_begin[n + 1]; j++) {
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
    for (int j = w->gt_begin[n]; j < w->gt_begin[n + 1]; j++) {
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
    if (check_maps(b, &A, err)) return -1;
    if (b->n_targets < 0 || (b->n_targets > 0 && !b->targets))
        return err_set(err, "loss: %d targets without data", b->n_targets);
    work_reserve(w, N, A, b->n_targets);
    w->N = N; w->A = A; w->G = b->n_targets;
    make_anchors(w, b);
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
        double wl;
        int left = dfl_split(dist[k], &wl);
        s->dfl += loss_dfl_side(x + k * R, dist[k]) * wgt / 4;
        if (!g) continue;
        for (int i = 0; i < R; i++) {
            double dce = p[k][i] - (i == left ? wl : 0) - (i == left + 1 ? 1 - wl : 0);
            g[k * R + i] = (float)(p[k][i] * (i - e[k]) * de[k] + kd * dce);
        }
    }
}

void loss_compute(LossWork *w, const LossBatch *b, double tss_norm, double batch_mult,
                  Map grad[LOSS_LEVELS], LossOut *out) {
    Sums s = { 0, 0, 0, GAIN_BOX * batch_mult / tss_norm, GAIN_CLS * batch_mult / tss_norm,
               GAIN_DFL * batch_mult / tss_norm };
    for (int n = 0; n < w->N; n++)
        for (int a = 0; a < w->A; a++) {
            const Anchor *an = &w->anchor[a];
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
