// loss.cu: the YOLOv9 loss on the GPU, the twin of core/spec/loss.c (same formulas, in double). The
// assigner runs as kernels: decode, one block per gt for its top 10, per-anchor conflict rule and
// normalisation; then the loss terms and d total / d head (=). Sums are deterministic: a fixed grid
// of PARTS blocks writes partials, one block adds them in a fixed order; atomics are integer only.
// Legend: N batch, A anchors, G targets, nc classes, C = 4R + nc channels, R = 16 DFL bins.
#include <limits.h>
#include <math.h>
#include <string.h>

#include "gpu/kernel_util.h"
#include "gpu/loss.h"
#include "gpu/loss_common.cuh"

#define R        LOSS_REG_MAX
#define TOPK     10
#define TAL_EPS  1e-9           // assigner: in-box margin and normalisation
#define DIST_MAX (R - 1 - 0.01) // bbox2dist clamp: 14.99
#define GAIN_BOX 7.5
#define GAIN_CLS 0.5
#define GAIN_DFL 1.5

enum { SUM_CLS, SUM_BOX, SUM_DFL, N_SUMS };    // compute phase; the assign phase uses 0 (tss), 1 (fg)
// the results block (w->sums, copied to w->sums_host): the compute sums, the assignment's target-score
// sum and foreground count, and the normaliser the compute used
enum { RES_TSS = N_SUMS, RES_FG, RES_NORM, N_RES };

typedef struct { double x1, y1, x2, y2; int cls, row, img, pad; } GtBox;   // pixels; row in targets

// The three head maps (and their gradients, data NULL when not wanted) with the anchor layout.
typedef struct {
    Map head[LOSS_LEVELS], grad[LOSS_LEVELS];
    int start[LOSS_LEVELS + 1];   // first anchor of each level; start[LOSS_LEVELS] = A
    double stride[LOSS_LEVELS];
} Heads;

// part: (N_SUMS*PARTS), sums: (N_RES), sums_host: N_RES + 1 (the last a host normaliser on its way in)
struct GpuLossWork : WorkBase<GtBox> {
    double *pbox;                   // (N*A*4) detached predicted box in pixels
    int *npos, *asg;                // (N*A) gts that picked the anchor; assigned gt or -1
    double *tm, *um, *score;        // (N*A) metric and overlap with the final gt; target score
    unsigned long long *gmax_t, *gmax_u;   // (G) per gt, max over its positives (as double bits)
};

// ---- device math: as core/spec/loss.c, term for term ----------------------------------------------

// dfl_decode: softmax p of R logits and the expectation Σ i·p_i (loss_dfl_decode)
__device__ static double dfl_decode(const float *x, double p[R]) {
    double m = x[0], sum = 0, e = 0;
    for (int i = 1; i < R; i++) m = fmax(m, (double)x[i]);
    for (int i = 0; i < R; i++) sum += p[i] = exp(x[i] - m);
    for (int i = 0; i < R; i++) e += i * (p[i] /= sum);
    return e;
}

__device__ static int dfl_split(double t, double *wl) { return box_dfl_split(t, DIST_MAX, wl); }

__device__ static double dfl_side(const float *x, double t) {
    double m = x[0], s = 0, wl;
    for (int i = 1; i < R; i++) m = fmax(m, (double)x[i]);
    for (int i = 0; i < R; i++) s += exp(x[i] - m);
    double lse = m + log(s);
    int left = dfl_split(t, &wl);
    return wl * (lse - x[left]) + (1 - wl) * (lse - x[left + 1]);
}

// ---- anchors and boxes --------------------------------------------------------------------------
__device__ static Anchor anchor_of(const Heads &h, int a) { return anchor_at(h.start, h.head, h.stride, a); }

__device__ static int in_box(const GtBox *g, const Anchor &an) {
    double x = an.x * an.stride, y = an.y * an.stride;
    return fmin(fmin(x - g->x1, y - g->y1), fmin(g->x2 - x, g->y2 - y)) > TAL_EPS;
}

// overlap and align_metric are not inlined: the top-k phases and the conflict rule must see the
// same bits for the same pair (inlined copies may contract multiply-adds differently).
__device__ __noinline__ static double overlap(const GtBox *g, const double *pb) {
    double gb[4] = { g->x1, g->y1, g->x2, g->y2 };
    return fmax(box_ciou(gb, pb, NULL), 0.0);
}

// t = score^0.5 * overlap^6 for the gt's class logit; *u receives the overlap
__device__ __noinline__ static double align_metric(const GtBox *g, const double *pb, float logit,
                                                   double *u) {
    *u = overlap(g, pb);
    return pow(box_sigmoid(logit), 0.5) * pow(*u, 6.0);
}

// the metric of gt g at anchor a of its image, 0 outside the box (torch.topk runs on metric*inbox)
__device__ static double metric_in_box(const Heads &h, const GtBox *g, const double *pbox, int a,
                                       int *in) {
    Anchor an = anchor_of(h, a);
    *in = in_box(g, an);
    if (!*in) return 0;
    size_t cell = (size_t)g->img * h.start[LOSS_LEVELS] + a;
    double u;
    return align_metric(g, pbox + 4 * cell, pixel(h.head[an.level], g->img, an)[4 * R + g->cls], &u);
}

// ---- kernels: assignment ----------------------------------------------------------------------

// per cell: the detached predicted box in pixels, and the pick counters cleared
__global__ void decode_kernel(Heads h, int N, int G, double *pbox, int *npos, int *asg,
                              unsigned long long *gmax_t, unsigned long long *gmax_u) {
    pdl_entry();
    int A = h.start[LOSS_LEVELS];
    GRID_STRIDE(i, (size_t)N * A) {
        Anchor an = anchor_of(h, (int)(i % A));
        const float *x = pixel(h.head[an.level], (int)(i / A), an);
        double p[R], l = dfl_decode(x, p), t = dfl_decode(x + R, p);
        double r = dfl_decode(x + 2 * R, p), b = dfl_decode(x + 3 * R, p);
        double *box = pbox + 4 * i;
        box[0] = (an.x - l) * an.stride;  box[1] = (an.y - t) * an.stride;
        box[2] = (an.x + r) * an.stride;  box[3] = (an.y + b) * an.stride;
        npos[i] = 0;
        asg[i] = INT_MAX;   // atomicMin target: the lowest gt that picks the cell
    }
    GRID_STRIDE(j, (size_t)G) gmax_t[j] = gmax_u[j] = 0;
}

__device__ static void pick(int *npos, int *asg, size_t cell, int j) {
    atomicAdd(npos + cell, 1);
    atomicMin(asg + cell, j);
}

// The k best (t desc, anchor asc) with t > 0 (block_topk), each marked as picking gt j.
__device__ static int topk_best(const Heads &h, const GtBox *g, int j, const double *pbox, int k,
                                int *npos, int *asg) {
    int A = h.start[LOSS_LEVELS];
    return block_topk<TOPK>(
        A, k, [&](int a) { int in; return metric_in_box(h, g, pbox, a, &in); },
        [&](int a) { pick(npos, asg, (size_t)g->img * A + a, j); });
}

// The zero-metric fill of the k (block_fill_zero): only anchors inside the box become positives.
__device__ static void topk_fill_zero(const Heads &h, const GtBox *g, int j, const double *pbox,
                                      int need, int *npos, int *asg) {
    int A = h.start[LOSS_LEVELS];
    block_fill_zero(A, need, [&](int a, int *in) { return metric_in_box(h, g, pbox, a, in); },
                    [&](int a) { pick(npos, asg, (size_t)g->img * A + a, j); });
}

// one block per gt: its positives before conflict resolution (select_topk of core/spec/loss.c)
__global__ void topk_kernel(Heads h, const GtBox *gt, const double *pbox, int *npos, int *asg) {
    pdl_entry();
    int j = blockIdx.x, A = h.start[LOSS_LEVELS], k = A < TOPK ? A : TOPK;
    const GtBox *g = gt + j;
    if (!(g->x1 + g->y1 + g->x2 + g->y2 > 0)) return;   // mask_gt: padding-like rows never match
    int nb = topk_best(h, g, j, pbox, k, npos, asg);
    if (nb < k) topk_fill_zero(h, g, j, pbox, k - nb, npos, asg);
}

// per cell: the conflict rule (argmax of the overlap over all gts of the image, ties to the lowest
// index), then the metric and overlap with the final gt and the per-gt maxima (max of non-negative
// doubles = max of their bit patterns, so the integer atomicMax is exact and order-free)
__global__ void resolve_kernel(Heads h, int N, const GtBox *gt, const int *gt_begin,
                               const double *pbox, const int *npos, int *asg, double *tm,
                               double *um, unsigned long long *gmax_t,
                               unsigned long long *gmax_u) {
    pdl_entry();
    int A = h.start[LOSS_LEVELS];
    GRID_STRIDE(i, (size_t)N * A) {
        if (npos[i] == 0) { asg[i] = -1; continue; }
        int n = (int)(i / A), j = asg[i];
        const double *pb = pbox + 4 * i;
        if (npos[i] > 1) {
            double bu = -1;
            for (int q = gt_begin[n]; q < gt_begin[n + 1]; q++) {
                double u = overlap(gt + q, pb);
                if (u > bu) { bu = u; j = q; }
            }
        }
        Anchor an = anchor_of(h, (int)(i % A));
        double u, t = align_metric(gt + j, pb, pixel(h.head[an.level], n, an)[4 * R + gt[j].cls], &u);
        asg[i] = j;
        tm[i] = t;
        um[i] = u;
        // + 0.0 turns a -0 (whose bits would win every max) into +0
        atomicMax(gmax_t + j, (unsigned long long)__double_as_longlong(t + 0.0));
        atomicMax(gmax_u + j, (unsigned long long)__double_as_longlong(u + 0.0));
    }
}

// per cell: target score t * max_u / (max_t + eps); partials of Σ score (0) and of fg cells (1)
__global__ void score_kernel(size_t cells, const int *asg, const double *tm,
                             const unsigned long long *gmax_t, const unsigned long long *gmax_u,
                             double *score, double *part) {
    pdl_entry();
    __shared__ double sh[THREADS];
    double tss = 0, fg = 0;
    GRID_STRIDE(i, cells) {
        int j = asg[i];
        double s = 0;
        if (j >= 0) {
            s = tm[i] * __longlong_as_double((long long)gmax_u[j]) /
                (__longlong_as_double((long long)gmax_t[j]) + TAL_EPS);
            fg += 1;
        }
        score[i] = s;
        tss += s;
    }
    tss = block_sum(tss, sh);
    fg = block_sum(fg, sh);
    if (threadIdx.x == 0) { part[blockIdx.x] = tss; part[PARTS + blockIdx.x] = fg; }
}

// ---- kernels: loss terms and gradients --------------------------------------------------------

// One warp per cell, lanes along the channels: BCE over the nc classes (target score only at the
// assigned class) and its gradient; background cells also get zero box gradients.
__global__ void cls_kernel(Heads h, int N, const GtBox *gt, const int *asg, const double *score,
                           const double *norm, double batch_mult, double *part) {
    pdl_entry();
    __shared__ double sh[THREADS];
    double k_cls = GAIN_CLS * batch_mult / *norm;   // the host's expression, on the device's normaliser
    int A = h.start[LOSS_LEVELS], nc = h.head[0].C - 4 * R, lane = threadIdx.x & 31;
    double sum = 0;
    for (size_t i = (size_t)blockIdx.x * WARPS + threadIdx.x / 32; i < (size_t)N * A;
         i += (size_t)gridDim.x * WARPS) {
        int n = (int)(i / A), j = asg[i], label = j >= 0 ? gt[j].cls : -1;
        Anchor an = anchor_of(h, (int)(i % A));
        const float *x = pixel(h.head[an.level], n, an) + 4 * R;
        float *g = h.grad[0].data ? pixel(h.grad[an.level], n, an) : NULL;
        if (g && j < 0)
            for (int c = lane; c < 4 * R; c += 32) g[c] = 0;
        for (int c = lane; c < nc; c += 32) {
            // log(1 + e) rather than log1p, as the CPU twin
            double xc = x[c], z = c == label ? score[i] : 0, e = exp(-fabs(xc)), den = 1 + e;
            sum += fmax(xc, 0.0) - xc * z + log(den);
            if (g) g[4 * R + c] = (float)(k_cls * ((xc >= 0 ? 1 : e) / den - z));
        }
    }
    sum = block_sum(sum, sh);
    if (threadIdx.x == 0) part[SUM_CLS * PARTS + blockIdx.x] = sum;
}

typedef struct { double box, dfl; } BoxSums;

// (1 - CIoU) and DFL of one foreground cell weighted by its score, and the 4R box gradients
// (box_anchor of core/spec/loss.c): the CIoU gradient reaches the logits through the softmax expectation.
__device__ static void box_anchor(const float *x, const Anchor &an, const GtBox *gt, double wgt,
                                  double k_box, double k_dfl, BoxSums *s, float *g) {
    double p[4][R], e[4];
    for (int k = 0; k < 4; k++) e[k] = dfl_decode(x + k * R, p[k]);
    double pb[4] = { an.x - e[0], an.y - e[1], an.x + e[2], an.y + e[3] };
    double tb[4] = { gt->x1 / an.stride, gt->y1 / an.stride, gt->x2 / an.stride, gt->y2 / an.stride };
    double dpb[4], c = box_ciou(pb, tb, dpb);
    s->box += (1 - c) * wgt;
    double kb = k_box * wgt;
    double de[4] = { kb * dpb[0], kb * dpb[1], -kb * dpb[2], -kb * dpb[3] };   // x1 = ax - l, x2 = ax + r
    double dist[4] = { an.x - tb[0], an.y - tb[1], tb[2] - an.x, tb[3] - an.y };
    double kd = k_dfl * wgt / 4;   // mean over the four sides
    for (int k = 0; k < 4; k++) {
        s->dfl += dfl_side(x + k * R, dist[k]) * wgt / 4;
        if (g) box_dfl_grad(p[k], R, e[k], de[k], kd, dist[k], DIST_MAX, g + k * R);
    }
}

// one thread per cell; only foreground cells work
__global__ void box_kernel(Heads h, int N, const GtBox *gt, const int *asg, const double *score,
                           const double *norm, double batch_mult, double *part) {
    pdl_entry();
    __shared__ double sh[THREADS];
    double k_box = GAIN_BOX * batch_mult / *norm, k_dfl = GAIN_DFL * batch_mult / *norm;
    int A = h.start[LOSS_LEVELS];
    BoxSums s = { 0, 0 };
    GRID_STRIDE(i, (size_t)N * A) {
        int j = asg[i], n = (int)(i / A);
        if (j < 0) continue;
        Anchor an = anchor_of(h, (int)(i % A));
        float *g = h.grad[0].data ? pixel(h.grad[an.level], n, an) : NULL;
        box_anchor(pixel(h.head[an.level], n, an), an, gt + j, score[i], k_box, k_dfl, &s, g);
    }
    double box = block_sum(s.box, sh), dfl = block_sum(s.dfl, sh);
    if (threadIdx.x == 0) {
        part[SUM_BOX * PARTS + blockIdx.x] = box;
        part[SUM_DFL * PARTS + blockIdx.x] = dfl;
    }
}

// ---- host: inputs (the checks and the grouping: core/spec/loss_host.c, as the CPU twin) ---------------

// the rows grouped by image in input order, converted to pixel xyxy (host staging)
static int load_targets(GpuLossWork *w, const LossBatch *b, Err *err) {
    int *fill = w->fill_host;
    if (loss_group_targets(b->targets, b->n_targets, w->N, b->nc, w->begin_host, fill, err)) return -1;
    for (int i = 0; i < b->n_targets; i++) {
        const float *t = b->targets + 6 * i;
        double x[4];
        box_target_xyxy(t, b->img_h, b->img_w, x);
        int n = (int)t[0];
        GtBox g = { x[0], x[1], x[2], x[3], (int)t[1], i, n, 0 };
        w->gt_host[fill[n]++] = g;
    }
    return 0;
}

static Heads heads_of(const LossBatch *b, Map grad[LOSS_LEVELS]) {
    Heads h;
    memset(&h, 0, sizeof h);
    for (int l = 0; l < LOSS_LEVELS; l++) {
        h.head[l] = b->head[l];
        if (grad) {
            same_shape_gpu(b->head[l], grad[l], "loss_compute_gpu");
            h.grad[l] = grad[l];
        }
        h.start[l + 1] = h.start[l] + b->head[l].H * b->head[l].W;
        h.stride[l] = (double)b->img_h / b->head[l].H;
    }
    return h;
}

// ---- host: work buffers -----------------------------------------------------------------------

// lays every device buffer out in one block (base NULL: sizing only); returns the block's bytes
static size_t work_place(GpuLossWork *w, char *base) {
    size_t off = 0, cells = (size_t)w->max_n * w->max_anchors, G = (size_t)w->max_targets + 1;
    w->gt = (GtBox *)place(base, &off, G * sizeof(GtBox));
    w->gt_begin = (int *)place(base, &off, (size_t)(w->max_n + 1) * sizeof(int));
    w->pbox = (double *)place(base, &off, cells * 4 * sizeof(double));
    w->npos = (int *)place(base, &off, cells * sizeof(int));
    w->asg = (int *)place(base, &off, cells * sizeof(int));
    w->tm = (double *)place(base, &off, cells * sizeof(double));
    w->um = (double *)place(base, &off, cells * sizeof(double));
    w->score = (double *)place(base, &off, cells * sizeof(double));
    w->gmax_t = (unsigned long long *)place(base, &off, G * sizeof(unsigned long long));
    w->gmax_u = (unsigned long long *)place(base, &off, G * sizeof(unsigned long long));
    w->part = (double *)place(base, &off, (size_t)N_SUMS * PARTS * sizeof(double));
    w->sums = (double *)place(base, &off, N_RES * sizeof(double));
    return off;
}

extern "C" GpuLossWork *loss_work_new_gpu(Device *dev, int max_n, int max_targets, int nc, int max_anchors) {
    return work_new(dev, "loss_work_new_gpu", max_n, max_targets, nc, max_anchors, N_RES + 1, work_place);
}

extern "C" void loss_work_free_gpu(GpuLossWork *w) { work_free(w); }

// ---- host: the two phases ---------------------------------------------------------------------

static void assign_launch(Device *dev, GpuLossWork *w, const Heads *h) {
    size_t cells = (size_t)w->N * w->A;
    checkCuda(cudaMemcpyAsync(w->gt, w->gt_host, (size_t)w->G * sizeof(GtBox),
                              cudaMemcpyHostToDevice, dev->stream));
    checkCuda(cudaMemcpyAsync(w->gt_begin, w->begin_host, (size_t)(w->N + 1) * sizeof(int),
                              cudaMemcpyHostToDevice, dev->stream));
    decode_kernel<<<blocks_for(cells), THREADS, 0, dev->stream>>>(*h, w->N, w->G, w->pbox, w->npos,
                                                                  w->asg, w->gmax_t, w->gmax_u);
    checkLaunch(dev);
    if (w->G > 0) {
        topk_kernel<<<w->G, THREADS, 0, dev->stream>>>(*h, w->gt, w->pbox, w->npos, w->asg);
        checkLaunch(dev);
    }
    resolve_kernel<<<blocks_for(cells), THREADS, 0, dev->stream>>>(
        *h, w->N, w->gt, w->gt_begin, w->pbox, w->npos, w->asg, w->tm, w->um, w->gmax_t, w->gmax_u);
    checkLaunch(dev);
    score_kernel<<<PARTS, THREADS, 0, dev->stream>>>(cells, w->asg, w->tm, w->gmax_t, w->gmax_u,
                                                     w->score, w->part);
    checkLaunch(dev);
    finish_kernel<<<1, THREADS, 0, dev->stream>>>(w->part, 2, w->sums + RES_TSS);   // tss, fg
    checkLaunch(dev);
}

extern "C" int loss_assign_gpu_async(Device *dev, GpuLossWork *w, const LossBatch *b, double *tss_dst,
                                     Err *err) {
    int A, N = b->head[0].N;
    if (loss_check_maps(b, &A, err)) return -1;
    if (b->n_targets < 0 || (b->n_targets > 0 && !b->targets))
        return err_set(err, "loss: %d targets without data", b->n_targets);
    if (N > w->max_n || A > w->max_anchors || b->n_targets > w->max_targets || b->nc > w->nc)
        return err_set(err, "loss: %d images, %d anchors, %d targets, %d classes exceed the GPU loss "
                       "work (%d, %d, %d, %d); make it for the largest batch", N, A, b->n_targets,
                       b->nc, w->max_n, w->max_anchors, w->max_targets, w->nc);
    w->N = N; w->A = A; w->G = b->n_targets;
    if (load_targets(w, b, err)) return -1;
    Heads h = heads_of(b, NULL);
    assign_launch(dev, w, &h);
    if (tss_dst)
        checkCuda(cudaMemcpyAsync(tss_dst, w->sums + RES_TSS, sizeof(double), cudaMemcpyDeviceToDevice,
                                  dev->stream));
    return 0;
}

extern "C" int loss_assign_gpu(Device *dev, GpuLossWork *w, const LossBatch *b, double *tss_local,
                               Err *err) {
    *tss_local = 0;
    if (loss_assign_gpu_async(dev, w, b, NULL, err)) return -1;
    checkCuda(cudaMemcpyAsync(w->sums_host + RES_TSS, w->sums + RES_TSS, 2 * sizeof(double),
                              cudaMemcpyDeviceToHost, dev->stream));
    device_sync(dev);
    *tss_local = w->sums_host[RES_TSS];
    return 0;
}

extern "C" void loss_compute_gpu_async(Device *dev, GpuLossWork *w, const LossBatch *b, const double *norm,
                                       double batch_mult, Map grad[LOSS_LEVELS]) {
    Heads h = heads_of(b, grad);
    if (h.start[LOSS_LEVELS] != w->A || b->head[0].N != w->N)
        die("loss_compute_gpu: the batch (%d images, %d anchors) is not the one assigned (%d, %d)",
            b->head[0].N, h.start[LOSS_LEVELS], w->N, w->A);
    cls_kernel<<<PARTS, THREADS, 0, dev->stream>>>(h, w->N, w->gt, w->asg, w->score, norm, batch_mult, w->part);
    checkLaunch(dev);
    box_kernel<<<PARTS, THREADS, 0, dev->stream>>>(h, w->N, w->gt, w->asg, w->score, norm, batch_mult, w->part);
    checkLaunch(dev);
    finish_kernel<<<1, THREADS, 0, dev->stream>>>(w->part, N_SUMS, w->sums);
    checkLaunch(dev);
    if (norm != w->sums + RES_NORM)
        checkCuda(cudaMemcpyAsync(w->sums + RES_NORM, norm, sizeof(double), cudaMemcpyDeviceToDevice,
                                  dev->stream));
    checkCuda(cudaMemcpyAsync(w->sums_host, w->sums, N_RES * sizeof(double), cudaMemcpyDeviceToHost,
                              dev->stream));
}

extern "C" void loss_items_gpu(const GpuLossWork *w, double batch_mult, LossOut *out) {
    double tss_norm = w->sums_host[RES_NORM];
    memset(out, 0, sizeof *out);
    out->box = GAIN_BOX * w->sums_host[SUM_BOX] / tss_norm;
    out->cls = GAIN_CLS * w->sums_host[SUM_CLS] / tss_norm;
    out->dfl = GAIN_DFL * w->sums_host[SUM_DFL] / tss_norm;
    out->total = batch_mult * (out->box + out->cls + out->dfl);
    out->tss = tss_norm;
    out->n_fg = (int)w->sums_host[RES_FG];
}

extern "C" void loss_compute_gpu(Device *dev, GpuLossWork *w, const LossBatch *b, double tss_norm,
                                 double batch_mult, Map grad[LOSS_LEVELS], LossOut *out) {
    w->sums_host[N_RES] = tss_norm;                // pinned; read by the copy before the wait below
    checkCuda(cudaMemcpyAsync(w->sums + RES_NORM, w->sums_host + N_RES, sizeof(double), cudaMemcpyHostToDevice,
                              dev->stream));
    loss_compute_gpu_async(dev, w, b, w->sums + RES_NORM, batch_mult, grad);
    device_sync(dev);
    loss_items_gpu(w, batch_mult, out);
}

extern "C" int loss_forward_backward_gpu(Device *dev, GpuLossWork *w, const LossBatch *b,
                                         Map grad[LOSS_LEVELS], LossOut *out, Err *err) {
    double tss;
    if (loss_assign_gpu(dev, w, b, &tss, err)) return -1;
    loss_compute_gpu(dev, w, b, fmax(tss, 1), b->head[0].N, grad, out);
    return 0;
}

extern "C" void loss_targets_gpu(Device *dev, const GpuLossWork *w, int *row, double *score) {
    size_t cells = (size_t)w->N * w->A;
    checkCuda(cudaMemcpyAsync(row, w->asg, cells * sizeof(int), cudaMemcpyDeviceToHost, dev->stream));
    if (score)
        checkCuda(cudaMemcpyAsync(score, w->score, cells * sizeof(double), cudaMemcpyDeviceToHost,
                                  dev->stream));
    device_sync(dev);
    for (size_t i = 0; i < cells; i++) row[i] = row[i] >= 0 ? w->gt_host[row[i]].row : -1;
}
