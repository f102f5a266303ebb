// loss26.cu: the YOLO26 end-to-end loss on the GPU, twin of core/spec/loss26.c (same formulas, in double):
// per branch the assigner as kernels, then BCE, CIoU and L1 with d total / d outputs (=). Sums are
// deterministic (PARTS block partials added in a fixed order); atomics are integer only.
// Legend: N batch, A anchors (P3, P4, P5 row-major), G targets, nc classes, l level.
#include <limits.h>
#include <math.h>
#include <string.h>

#include "gpu/kernel_util.h"   // first: it brings core/base/util.h in with C linkage (gpu/device.h)
#include "gpu/loss26.h"
#include "gpu/loss_common.cuh"
extern "C" {
#include "core/spec/loss.h"   // loss_check_target: the CPU twin's row checks and messages
}

#define TOPK_MAX 10
#define TAL_EPS  1e-9   // assigner: in-box margin and normalisation
// E2ELoss: one-to-many top 10; one-to-one top 7, then the best 1 per gt (topk2). The narrowing below
// keeps exactly one anchor per gt, the only topk2 the reference uses besides "none".
static const int TOPK[L26_BRANCHES] = { 10, 7 };

enum { SUM_TSS, SUM_FG, N_ASSIGN_SUMS };        // per branch, assign phase
enum { SUM_BOX, SUM_CLS, SUM_L1, N_TERMS };      // per branch, compute phase
enum { N_SUMS_MAX = L26_BRANCHES * N_TERMS };
// the results block (w->sums, copied to w->sums_host): the compute sums, then the assignment's sums
// (branch k's tss and fg at RES_ASSIGN + k * N_ASSIGN_SUMS), then the normalisers the compute used
enum { RES_ASSIGN = N_SUMS_MAX, RES_NORM = RES_ASSIGN + L26_BRANCHES * N_ASSIGN_SUMS,
       N_RES = RES_NORM + L26_BRANCHES };

// Gt: one target in pixels; in[] is the box of the inside test (STAL-widened for small targets)
typedef struct { double x1, y1, x2, y2, in[4]; int cls, row, img, valid; } Gt;

// One branch's maps (gradient data NULL when not wanted) with the anchor layout.
typedef struct {
    Map box[L26_LEVELS], cls[L26_LEVELS], gbox[L26_LEVELS], gcls[L26_LEVELS];
    int start[L26_LEVELS + 1];   // first anchor of each level; start[L26_LEVELS] = A
    double stride[L26_LEVELS];
    double img[2];               // image width, height in pixels (the L1 term's normalisers)
} Heads;

// One branch's assignment on the device.
typedef struct {
    double *pbox;                          // (N*A*4) detached predicted box in pixels
    int *npos, *asg;                       // (N*A) gts whose top k picked the anchor; assigned gt or -1
    double *tm, *um, *score;               // (N*A) metric and overlap with the final gt; target score
    unsigned long long *gmax_t, *gmax_u;   // (G) per gt, max over its positives (as double bits)
    int *keep;                             // (G) one-to-one: the anchor the gt keeps
} Branch;

// part: (N_SUMS_MAX*PARTS), sums: (N_RES), sums_host: N_RES + L26_BRANCHES (then the host normalisers)
struct GpuLoss26Work : WorkBase<Gt> {
    Branch br[L26_BRANCHES];
};

// ---- anchors and boxes --------------------------------------------------------------------------
__device__ static Anchor anchor_of(const Heads &h, int a) { return anchor_at(h.start, h.box, h.stride, a); }

// candidate: the anchor centre lies strictly inside the gt's (STAL) box, and the gt is valid
__device__ static int candidate(const Gt *g, const Anchor &an) {
    double x = an.x * an.stride, y = an.y * an.stride;
    return g->valid && x - g->in[0] > TAL_EPS && y - g->in[1] > TAL_EPS && g->in[2] - x > TAL_EPS &&
           g->in[3] - y > TAL_EPS;
}

// overlap and align_metric are not inlined: the top-k, the conflict rule and the narrowing must see
// the same bits for the same pair (inlined copies may contract multiply-adds differently).
// overlap: CIoU(gt, pred) clamped at 0 for candidates, 0 elsewhere
__device__ __noinline__ static double overlap(const Gt *g, const Anchor &an, const double *pb) {
    if (!candidate(g, an)) return 0;
    double gb[4] = { g->x1, g->y1, g->x2, g->y2 };
    return fmax(box_ciou(gb, pb, NULL), 0.0);
}

// align_metric: score^0.5 * overlap^6 for the gt's class logit (0 off-candidate); *u gets the overlap
__device__ __noinline__ static double align_metric(const Gt *g, const Anchor &an, const double *pb,
                                                   float logit, double *u) {
    *u = overlap(g, an, pb);
    if (*u == 0) return 0;
    return pow(box_sigmoid(logit), 0.5) * pow(*u, 6.0);
}

// the metric of gt g at anchor a of its image; *in: a is a candidate of g
__device__ static double metric_at(const Heads &h, const Gt *g, const double *pbox, int a, int *in) {
    Anchor an = anchor_of(h, a);
    *in = candidate(g, an);
    size_t cell = (size_t)g->img * h.start[L26_LEVELS] + a;
    double u;
    return align_metric(g, an, pbox + 4 * cell, pixel(h.cls[an.level], g->img, an)[g->cls], &u);
}

// max of non-negative doubles = max of their bit patterns, so integer atomicMax is exact and
// order-free; + 0.0 turns a -0 (whose bits would win every max) into +0
__device__ static unsigned long long max_bits(double x) {
    return (unsigned long long)__double_as_longlong(x + 0.0);
}
__device__ static double from_bits(unsigned long long b) { return __longlong_as_double((long long)b); }

// ---- kernels: assignment (one branch per launch) -------------------------------------------------

// per cell: the detached predicted box in pixels, and the counters of this assignment cleared
__global__ void decode26_kernel(Heads h, int N, int G, Branch br) {
    pdl_entry();
    int A = h.start[L26_LEVELS];
    GRID_STRIDE(i, (size_t)N * A) {
        Anchor an = anchor_of(h, (int)(i % A));
        const float *d = pixel(h.box[an.level], (int)(i / A), an);
        double *box = br.pbox + 4 * i;
        box[0] = (an.x - d[0]) * an.stride;  box[1] = (an.y - d[1]) * an.stride;
        box[2] = (an.x + d[2]) * an.stride;  box[3] = (an.y + d[3]) * an.stride;
        br.npos[i] = 0;
        br.asg[i] = INT_MAX;   // atomicMin target: the lowest gt that picks the cell
    }
    GRID_STRIDE(j, (size_t)G) {
        br.gmax_t[j] = br.gmax_u[j] = 0;
        br.keep[j] = INT_MAX;
    }
}

__device__ static void pick(const Branch &br, size_t cell, int j) {
    atomicAdd(br.npos + cell, 1);
    atomicMin(br.asg + cell, j);
}

// The k best (t desc, anchor asc) with t > 0 (block_topk), each marked as picking gt j.
__device__ static int topk_best(const Heads &h, const Gt *g, int j, const Branch &br, int k) {
    int A = h.start[L26_LEVELS];
    return block_topk<TOPK_MAX>(
        A, k, [&](int a) { int in; return metric_at(h, g, br.pbox, a, &in); },
        [&](int a) { pick(br, (size_t)g->img * A + a, j); });
}

// The zero-metric fill of the k (block_fill_zero): only candidates become positives.
__device__ static void topk_fill_zero(const Heads &h, const Gt *g, int j, const Branch &br, int need) {
    int A = h.start[L26_LEVELS];
    block_fill_zero(A, need, [&](int a, int *in) { return metric_at(h, g, br.pbox, a, in); },
                    [&](int a) { pick(br, (size_t)g->img * A + a, j); });
}

// one block per gt: its positives before conflict resolution (select_topk of core/spec/loss26.c)
__global__ void topk26_kernel(Heads h, const Gt *gt, Branch br, int topk) {
    pdl_entry();
    int j = blockIdx.x, A = h.start[L26_LEVELS], k = A < topk ? A : topk;
    const Gt *g = gt + j;
    if (!g->valid) return;   // mask_gt: padding-like rows never pick
    int nb = topk_best(h, g, j, br, k);
    if (nb < k) topk_fill_zero(h, g, j, br, k - nb);
}

// per cell: the conflict rule (argmax of the overlap over all gts of the image, first maximum), then
// the metric and overlap with the final gt, and each gt's max metric. For the one-to-one branch that
// max over all positives is the metric of the one the narrowing keeps, so it is final either way.
__global__ void resolve26_kernel(Heads h, int N, const Gt *gt, const int *gt_begin, Branch br) {
    pdl_entry();
    int A = h.start[L26_LEVELS];
    GRID_STRIDE(i, (size_t)N * A) {
        if (br.npos[i] == 0) { br.asg[i] = -1; continue; }
        int n = (int)(i / A), j = br.asg[i];
        Anchor an = anchor_of(h, (int)(i % A));
        const double *pb = br.pbox + 4 * i;
        if (br.npos[i] > 1) {
            double bu = -1;
            for (int q = gt_begin[n]; q < gt_begin[n + 1]; q++) {
                double u = overlap(gt + q, an, pb);
                if (u > bu) { bu = u; j = q; }
            }
        }
        double u, t = align_metric(gt + j, an, pb, pixel(h.cls[an.level], n, an)[gt[j].cls], &u);
        br.asg[i] = j;
        br.tm[i] = t;
        br.um[i] = u;
        atomicMax(br.gmax_t + j, max_bits(t));
    }
}

// one-to-one narrowing, first half: per gt the lowest anchor whose metric is the gt's maximum
// (narrow of core/spec/loss26.c with topk2 = 1: largest metric, ties to the lower anchor index)
__global__ void narrow_kernel(size_t cells, int A, Branch br) {
    pdl_entry();
    GRID_STRIDE(i, cells) {
        int j = br.asg[i];
        if (j >= 0 && max_bits(br.tm[i]) == br.gmax_t[j]) atomicMin(br.keep + j, (int)(i % A));
    }
}

// the narrowing's second half (narrow != 0: the rest become background), then each gt's max overlap
// over the positives it keeps
__global__ void keep_kernel(size_t cells, int A, int narrow, Branch br) {
    pdl_entry();
    GRID_STRIDE(i, cells) {
        int j = br.asg[i];
        if (j < 0) continue;
        if (narrow && br.keep[j] != (int)(i % A)) { br.asg[i] = -1; continue; }
        atomicMax(br.gmax_u + j, max_bits(br.um[i]));
    }
}

// per cell: target score t * max_u / (max_t + eps); partials of Σ score and of fg cells
__global__ void score26_kernel(size_t cells, Branch br, double *part_tss, double *part_fg) {
    pdl_entry();
    __shared__ double sh[THREADS];
    double tss = 0, fg = 0;
    GRID_STRIDE(i, cells) {
        int j = br.asg[i];
        double s = 0;
        if (j >= 0) {
            s = br.tm[i] * from_bits(br.gmax_u[j]) / (from_bits(br.gmax_t[j]) + TAL_EPS);
            fg += 1;
        }
        br.score[i] = s;
        tss += s;
    }
    tss = block_sum(tss, sh);
    fg = block_sum(fg, sh);
    if (threadIdx.x == 0) { part_tss[blockIdx.x] = tss; part_fg[blockIdx.x] = fg; }
}

// ---- kernels: loss terms and gradients (one branch per launch) -----------------------------------

// One warp per cell, lanes along the classes: BCE against the target score at the assigned class (0
// elsewhere) and its gradient (loss_bce_logits); background cells also get zero box gradients.
// k_cls = gain * (w[b] * batch_mult / norm): wbm is the host's w[b] * batch_mult, as core/spec/loss26.c
__global__ void cls26_kernel(Heads h, int N, int nc, const Gt *gt, Branch br, const double *norm, double wbm,
                             double gain, double *part) {
    pdl_entry();
    __shared__ double sh[THREADS];
    double k_cls = gain * (wbm / *norm);
    int A = h.start[L26_LEVELS], lane = threadIdx.x & 31;
    double sum = 0;
    for (size_t i = (size_t)blockIdx.x * WARPS + threadIdx.x / 32; i < (size_t)N * A;
         i += (size_t)gridDim.x * WARPS) {
        int n = (int)(i / A), j = br.asg[i], label = j >= 0 ? gt[j].cls : -1;
        Anchor an = anchor_of(h, (int)(i % A));
        const float *x = pixel(h.cls[an.level], n, an);
        float *g = h.gcls[0].data ? pixel(h.gcls[an.level], n, an) : NULL;
        if (h.gbox[0].data && j < 0 && lane < 4) pixel(h.gbox[an.level], n, an)[lane] = 0;
        for (int c = lane; c < nc; c += 32) {
            // log(1 + e) rather than log1p, as the CPU twin
            double xc = x[c], z = c == label ? br.score[i] : 0, e = exp(-fabs(xc)), den = 1 + e;
            sum += fmax(xc, 0.0) - xc * z + log(den);
            if (g) g[c] = (float)(k_cls * ((xc >= 0 ? 1 : e) / den - z));
        }
    }
    sum = block_sum(sum, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = sum;
}

typedef struct { double box, l1; } BoxSums;

// (1 - CIoU) in cells and the L1 term on distances normalised by the image size, both weighted by
// the target score (box_anchor of core/spec/loss26.c); d: the raw l, t, r, b; g (may be NULL): d total / d d
__device__ static void box_anchor(const float *d, const Anchor &an, const Gt *gt, double wgt, const Heads &h,
                                  double k_box, double k_l1, BoxSums *s, float *g) {
    double st = an.stride;
    double pb[4] = { an.x - d[0], an.y - d[1], an.x + d[2], an.y + d[3] };
    double tb[4] = { gt->x1 / st, gt->y1 / st, gt->x2 / st, gt->y2 / st };
    double dpb[4], c = box_ciou(pb, tb, dpb);
    s->box += (1 - c) * wgt;
    double kb = k_box * wgt, kl = k_l1 * wgt / 4;   // /4: mean over the sides
    double dbox[4] = { kb * dpb[0], kb * dpb[1], -kb * dpb[2], -kb * dpb[3] };   // x1 = ax - l, x2 = ax + r
    double dist[4] = { an.x - tb[0], an.y - tb[1], tb[2] - an.x, tb[3] - an.y };   // bbox2dist, no clamp
    double l1 = 0;
    for (int k = 0; k < 4; k++) {
        double size = h.img[k % 2], p = d[k] * st / size, t = dist[k] * st / size;
        l1 += fabs(p - t);
        if (g) g[k] = (float)(dbox[k] + kl * ((p > t) - (p < t)) * st / size);   // sign(0) = 0, as torch
    }
    s->l1 += l1 / 4 * wgt;
}

// one thread per cell; only foreground cells work
__global__ void box26_kernel(Heads h, int N, const Gt *gt, Branch br, const double *norm, double wbm,
                             double gain_box, double gain_l1, double *part_box, double *part_l1) {
    pdl_entry();
    __shared__ double sh[THREADS];
    double f = wbm / *norm, k_box = gain_box * f, k_l1 = gain_l1 * f;
    int A = h.start[L26_LEVELS];
    BoxSums s = { 0, 0 };
    GRID_STRIDE(i, (size_t)N * A) {
        int j = br.asg[i], n = (int)(i / A);
        if (j < 0) continue;
        Anchor an = anchor_of(h, (int)(i % A));
        float *g = h.gbox[0].data ? pixel(h.gbox[an.level], n, an) : NULL;
        box_anchor(pixel(h.box[an.level], n, an), an, gt + j, br.score[i], h, k_box, k_l1, &s, g);
    }
    double box = block_sum(s.box, sh), l1 = block_sum(s.l1, sh);
    if (threadIdx.x == 0) { part_box[blockIdx.x] = box; part_l1[blockIdx.x] = l1; }
}

// ---- host: inputs (the checks and the grouping: core/spec/loss_host.c, as the CPU twin) ---------------

// the rows grouped by image in input order, converted to pixel xyxy, the STAL box (box_stal) beside
static int load_targets(GpuLoss26Work *w, const Loss26Batch *b, Err *err) {
    int *fill = w->fill_host;
    if (loss_group_targets(b->targets, b->n_targets, w->N, b->nc, w->begin_host, fill, err)) return -1;
    double s0 = (double)b->img_h / b->head[L26_O2M].box[0].H, s1 = (double)b->img_h / b->head[L26_O2M].box[1].H;
    for (int i = 0; i < b->n_targets; i++) {
        const float *t = b->targets + 6 * i;
        double x[4];
        box_target_xyxy(t, b->img_h, b->img_w, x);
        int n = (int)t[0];
        Gt g = { x[0], x[1], x[2], x[3], { 0, 0, 0, 0 }, (int)t[1], i, n, 0 };
        g.valid = g.x1 + g.y1 + g.x2 + g.y2 > 0;   // mask_gt
        box_stal(x, g.valid, s0, s1, g.in);
        w->gt_host[fill[n]++] = g;
    }
    return 0;
}

// branch br's maps; grad (may be NULL) its gradient maps, checked against the outputs' shapes
static Heads heads_of(const Loss26Batch *b, int br, const Head26 *grad) {
    Heads h;
    memset(&h, 0, sizeof h);
    for (int l = 0; l < L26_LEVELS; l++) {
        h.box[l] = b->head[br].box[l];
        h.cls[l] = b->head[br].cls[l];
        if (grad) {
            same_shape_gpu(h.box[l], grad->box[l], "loss26_compute_gpu (box)");
            same_shape_gpu(h.cls[l], grad->cls[l], "loss26_compute_gpu (class)");
            h.gbox[l] = grad->box[l];
            h.gcls[l] = grad->cls[l];
        }
        h.start[l + 1] = h.start[l] + h.box[l].H * h.box[l].W;
        h.stride[l] = (double)b->img_h / h.box[l].H;
    }
    h.img[0] = b->img_w;
    h.img[1] = b->img_h;
    return h;
}

// ---- host: work buffers -------------------------------------------------------------------------

static void branch_place(Branch *br, char *base, size_t *off, size_t cells, size_t G) {
    br->pbox = (double *)place(base, off, cells * 4 * sizeof(double));
    br->npos = (int *)place(base, off, cells * sizeof(int));
    br->asg = (int *)place(base, off, cells * sizeof(int));
    br->tm = (double *)place(base, off, cells * sizeof(double));
    br->um = (double *)place(base, off, cells * sizeof(double));
    br->score = (double *)place(base, off, cells * sizeof(double));
    br->gmax_t = (unsigned long long *)place(base, off, G * sizeof(unsigned long long));
    br->gmax_u = (unsigned long long *)place(base, off, G * sizeof(unsigned long long));
    br->keep = (int *)place(base, off, G * sizeof(int));
}

// lays every device buffer out in one block (base NULL: sizing only); returns the block's bytes
static size_t work_place(GpuLoss26Work *w, char *base) {
    size_t off = 0, cells = (size_t)w->max_n * w->max_anchors, G = (size_t)w->max_targets + 1;
    w->gt = (Gt *)place(base, &off, G * sizeof(Gt));
    w->gt_begin = (int *)place(base, &off, (size_t)(w->max_n + 1) * sizeof(int));
    for (int k = 0; k < L26_BRANCHES; k++) branch_place(&w->br[k], base, &off, cells, G);
    w->part = (double *)place(base, &off, (size_t)N_SUMS_MAX * PARTS * sizeof(double));
    w->sums = (double *)place(base, &off, N_RES * sizeof(double));
    return off;
}

extern "C" GpuLoss26Work *loss26_work_new_gpu(Device *dev, int max_n, int max_targets, int nc,
                                              int max_anchors) {
    return work_new(dev, "loss26_work_new_gpu", max_n, max_targets, nc, max_anchors, N_RES + L26_BRANCHES,
                    work_place);
}

extern "C" void loss26_work_free_gpu(GpuLoss26Work *w) { work_free(w); }

// ---- host: the two phases -----------------------------------------------------------------------

// branch k's assignment kernels; its tss and fg partials go to sums 2k and 2k + 1
static void assign_branch(Device *dev, GpuLoss26Work *w, int k, const Heads *h) {
    size_t cells = (size_t)w->N * w->A;
    const Branch &br = w->br[k];
    cudaStream_t s = dev->stream;
    decode26_kernel<<<blocks_for(cells), THREADS, 0, s>>>(*h, w->N, w->G, br);
    checkLaunch(dev);
    if (w->G > 0) {
        topk26_kernel<<<w->G, THREADS, 0, s>>>(*h, w->gt, br, TOPK[k]);
        checkLaunch(dev);
    }
    resolve26_kernel<<<blocks_for(cells), THREADS, 0, s>>>(*h, w->N, w->gt, w->gt_begin, br);
    checkLaunch(dev);
    int narrow = k == L26_O2O;
    if (narrow) {
        narrow_kernel<<<blocks_for(cells), THREADS, 0, s>>>(cells, w->A, br);
        checkLaunch(dev);
    }
    keep_kernel<<<blocks_for(cells), THREADS, 0, s>>>(cells, w->A, narrow, br);
    checkLaunch(dev);
    double *part = w->part + (size_t)k * N_ASSIGN_SUMS * PARTS;
    score26_kernel<<<PARTS, THREADS, 0, s>>>(cells, br, part + SUM_TSS * PARTS, part + SUM_FG * PARTS);
    checkLaunch(dev);
}

extern "C" int loss26_assign_gpu_async(Device *dev, GpuLoss26Work *w, const Loss26Batch *b,
                                       double *const tss_dst[L26_BRANCHES], Err *err) {
    int A;
    if (loss26_check_maps(b, &A, err)) return -1;
    if (b->n_targets < 0 || (b->n_targets > 0 && !b->targets))
        return err_set(err, "loss26: %d targets without data", b->n_targets);
    int N = b->head[L26_O2M].box[0].N;
    if (N > w->max_n || A > w->max_anchors || b->n_targets > w->max_targets || b->nc > w->nc)
        return err_set(err, "loss26: %d images, %d anchors, %d targets, %d classes exceed the GPU loss "
                       "work (%d, %d, %d, %d); make it for the largest batch", N, A, b->n_targets,
                       b->nc, w->max_n, w->max_anchors, w->max_targets, w->nc);
    w->N = N; w->A = A; w->G = b->n_targets;
    if (load_targets(w, b, err)) return -1;
    checkCuda(cudaMemcpyAsync(w->gt, w->gt_host, (size_t)w->G * sizeof(Gt), cudaMemcpyHostToDevice,
                              dev->stream));
    checkCuda(cudaMemcpyAsync(w->gt_begin, w->begin_host, (size_t)(N + 1) * sizeof(int),
                              cudaMemcpyHostToDevice, dev->stream));
    for (int k = 0; k < L26_BRANCHES; k++) {
        Heads h = heads_of(b, k, NULL);
        assign_branch(dev, w, k, &h);
    }
    finish_kernel<<<1, THREADS, 0, dev->stream>>>(w->part, L26_BRANCHES * N_ASSIGN_SUMS, w->sums + RES_ASSIGN);
    checkLaunch(dev);
    for (int k = 0; tss_dst && k < L26_BRANCHES; k++)
        if (tss_dst[k])
            checkCuda(cudaMemcpyAsync(tss_dst[k], w->sums + RES_ASSIGN + k * N_ASSIGN_SUMS + SUM_TSS, sizeof(double),
                                      cudaMemcpyDeviceToDevice, dev->stream));
    return 0;
}

extern "C" int loss26_assign_gpu(Device *dev, GpuLoss26Work *w, const Loss26Batch *b,
                                 double tss_local[L26_BRANCHES], Err *err) {
    for (int k = 0; k < L26_BRANCHES; k++) tss_local[k] = 0;
    if (loss26_assign_gpu_async(dev, w, b, NULL, err)) return -1;
    checkCuda(cudaMemcpyAsync(w->sums_host + RES_ASSIGN, w->sums + RES_ASSIGN,
                              L26_BRANCHES * N_ASSIGN_SUMS * sizeof(double), cudaMemcpyDeviceToHost, dev->stream));
    device_sync(dev);
    for (int k = 0; k < L26_BRANCHES; k++) tss_local[k] = w->sums_host[RES_ASSIGN + k * N_ASSIGN_SUMS + SUM_TSS];
    return 0;
}

extern "C" void loss26_compute_gpu_async(Device *dev, GpuLoss26Work *w, const Loss26Batch *b,
                                         const Loss26Weights *wt, const double *const norm[L26_BRANCHES],
                                         double batch_mult, const Head26 *grad[L26_BRANCHES]) {
    for (int k = 0; k < L26_BRANCHES; k++) {
        Heads h = heads_of(b, k, grad ? grad[k] : NULL);
        if (h.start[L26_LEVELS] != w->A || b->head[k].box[0].N != w->N || b->nc > w->nc)
            die("loss26_compute_gpu: the batch (%d images, %d anchors) is not the one assigned (%d, %d)",
                b->head[k].box[0].N, h.start[L26_LEVELS], w->N, w->A);
        double wbm = wt->w[k] * batch_mult;        // f = wbm / norm in the kernels, as core/spec/loss26.c
        double *part = w->part + (size_t)k * N_TERMS * PARTS;
        cls26_kernel<<<PARTS, THREADS, 0, dev->stream>>>(h, w->N, b->nc, w->gt, w->br[k], norm[k], wbm, wt->cls,
                                                       part + SUM_CLS * PARTS);
        checkLaunch(dev);
        box26_kernel<<<PARTS, THREADS, 0, dev->stream>>>(h, w->N, w->gt, w->br[k], norm[k], wbm, wt->box, wt->l1,
                                                       part + SUM_BOX * PARTS, part + SUM_L1 * PARTS);
        checkLaunch(dev);
    }
    finish_kernel<<<1, THREADS, 0, dev->stream>>>(w->part, N_SUMS_MAX, w->sums);
    checkLaunch(dev);
    for (int k = 0; k < L26_BRANCHES; k++)
        if (norm[k] != w->sums + RES_NORM + k)
            checkCuda(cudaMemcpyAsync(w->sums + RES_NORM + k, norm[k], sizeof(double), cudaMemcpyDeviceToDevice,
                                      dev->stream));
    checkCuda(cudaMemcpyAsync(w->sums_host, w->sums, N_RES * sizeof(double), cudaMemcpyDeviceToHost, dev->stream));
}

extern "C" void loss26_items_gpu(const GpuLoss26Work *w, const Loss26Weights *wt, double batch_mult,
                                 Loss26Out *out) {
    out->total = 0;
    for (int k = 0; k < L26_BRANCHES; k++) {
        const double *s = w->sums_host + k * N_TERMS, tss = w->sums_host[RES_NORM + k];
        Loss26Terms *t = &out->br[k];
        t->box = s[SUM_BOX] * (wt->box / tss);
        t->cls = s[SUM_CLS] * (wt->cls / tss);
        t->l1 = s[SUM_L1] * (wt->l1 / tss);
        t->tss = tss;
        t->n_fg = (int)w->sums_host[RES_ASSIGN + k * N_ASSIGN_SUMS + SUM_FG];
        out->total += batch_mult * wt->w[k] * (t->box + t->cls + t->l1);
    }
}

extern "C" void loss26_compute_gpu(Device *dev, GpuLoss26Work *w, const Loss26Batch *b,
                                   const Loss26Weights *wt, const double tss_norm[L26_BRANCHES],
                                   double batch_mult, const Head26 *grad[L26_BRANCHES], Loss26Out *out) {
    const double *norm[L26_BRANCHES];
    for (int k = 0; k < L26_BRANCHES; k++) {
        w->sums_host[N_RES + k] = tss_norm[k];     // pinned; read by the copy before the wait below
        norm[k] = w->sums + RES_NORM + k;
    }
    checkCuda(cudaMemcpyAsync(w->sums + RES_NORM, w->sums_host + N_RES, L26_BRANCHES * sizeof(double),
                              cudaMemcpyHostToDevice, dev->stream));
    loss26_compute_gpu_async(dev, w, b, wt, norm, batch_mult, grad);
    device_sync(dev);
    loss26_items_gpu(w, wt, batch_mult, out);
}

extern "C" void loss26_targets_gpu(Device *dev, const GpuLoss26Work *w, int br, int *row, double *score) {
    size_t cells = (size_t)w->N * w->A;
    checkCuda(cudaMemcpyAsync(row, w->br[br].asg, cells * sizeof(int), cudaMemcpyDeviceToHost, dev->stream));
    if (score)
        checkCuda(cudaMemcpyAsync(score, w->br[br].score, cells * sizeof(double), cudaMemcpyDeviceToHost,
                                  dev->stream));
    device_sync(dev);
    for (size_t i = 0; i < cells; i++) row[i] = row[i] >= 0 ? w->gt_host[row[i]].row : -1;
}
