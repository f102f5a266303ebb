// loss_common.cuh: what the two detection losses' CUDA twins (gpu/loss.cu for YOLOv9, gpu/loss26.cu
// for YOLO26) share beyond core/spec/box.h (CIoU, sigmoid: the CPU's own text) and core/spec/loss_host.h (the
// host-side checks): the fixed-order block and partial sums that keep them deterministic, the
// assigner's tie rule, and the allocation and one-block layout of their work buffers. Internal to
// those two files (everything static).
#pragma once
#include <math.h>

#include "core/spec/box.h"
#include "core/spec/loss_host.h"   // the host-side checks and target grouping both twins share with the CPU
#include "gpu/kernel_util.h"

enum { PARTS = 1024, WARPS = THREADS / 32 };   // partial-sum blocks; warps per block

// CIoU and its gradient, the sigmoid and the DFL split are core/spec/box.h's (box_*): the CPU twins' own text.

// An anchor: its level, cell and centre (x, y in cells: col + 0.5, row + 0.5), and the level's stride.
typedef struct { int level, row, col; double x, y, stride; } Anchor;

// Anchor a of the levels' maps (maps[l]: any map of level l), whose first anchors are start[l].
__device__ static Anchor anchor_at(const int *start, const Map *maps, const double *stride, int a) {
    int l = a < start[1] ? 0 : a < start[2] ? 1 : 2, p = a - start[l], W = maps[l].W;
    Anchor an = { l, p / W, p % W, p % W + 0.5, p / W + 0.5, stride[l] };
    return an;
}

// the channels of image n at anchor an's cell of map m
__device__ static float *pixel(Map m, int n, const Anchor &an) {
    return m.data + (((size_t)n * m.H + an.row) * m.W + an.col) * m.ld;
}

// the sum of v over a block of THREADS threads, in a fixed order; every thread gets it
__device__ static double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// t desc, anchor asc: the assigner's order of candidates (ties to the lower anchor)
__device__ static int ranks_before(double t1, int a1, double t2, int a2) {
    return t1 > t2 || (t1 == t2 && a1 < a2);
}

// The assigner's top k (k <= KMAX) of one gt over anchors [0, A): the k best by ranks_before with
// metric(a) > 0. Each thread keeps its own best k over its strided anchors, then k rounds of a block
// argmax take the heads; thread 0 calls pick(a) for each, best first. Returns how many were picked.
template <int KMAX, class Metric, class Pick>
__device__ static int block_topk(int A, int k, Metric metric, Pick pick) {
    __shared__ double sh_t[THREADS];
    __shared__ int sh_a[THREADS];
    int tid = threadIdx.x, ln = 0;
    double lt[KMAX];
    int la[KMAX];
    for (int a = tid; a < A; a += THREADS) {
        double t = metric(a);
        if (!(t > 0) || (ln == k && !(t > lt[k - 1]))) continue;
        int p = ln < k ? ln++ : k - 1;
        for (; p > 0 && lt[p - 1] < t; p--) { lt[p] = lt[p - 1]; la[p] = la[p - 1]; }
        lt[p] = t;
        la[p] = a;
    }
    int head = 0, nb = 0;
    for (; nb < k; nb++) {
        sh_t[tid] = head < ln ? lt[head] : -1;
        sh_a[tid] = head < ln ? la[head] : INT_MAX;
        __syncthreads();
        for (int s = THREADS / 2; s > 0; s >>= 1) {
            if (tid < s && ranks_before(sh_t[tid + s], sh_a[tid + s], sh_t[tid], sh_a[tid])) {
                sh_t[tid] = sh_t[tid + s];
                sh_a[tid] = sh_a[tid + s];
            }
            __syncthreads();
        }
        double bt = sh_t[0];
        int ba = sh_a[0];
        __syncthreads();
        if (!(bt > 0)) break;
        if (head < ln && la[head] == ba) head++;
        if (tid == 0) pick(ba);
    }
    return nb;
}

// When fewer than k of a gt's anchors have a metric > 0, torch.topk fills its k with zero-metric anchors:
// the lowest indices, as the CPU twins (core/spec/loss_host.h, loss_topk_*), and only those inside the gt's box
// become positives. Anchors [0, A) are scanned in chunks of THREADS in order; a ballot ranks the zero-metric
// ones within each chunk, until `need` are taken. metric(a, &in): the metric, and in whether a is inside;
// pick(a) marks a positive.
template <class Metric, class Pick>
__device__ static void block_fill_zero(int A, int need, Metric metric, Pick pick) {
    __shared__ int sh_warp[WARPS];
    int tid = threadIdx.x, lane = tid & 31, in = 0;
    for (int base = 0, taken = 0; base < A && taken < need; base += THREADS) {
        int a = base + tid;
        double t = a < A ? metric(a, &in) : 1;
        int zero = a < A && t <= 0;
        unsigned m = __ballot_sync(0xffffffffu, zero);
        if (lane == 0) sh_warp[tid >> 5] = __popc(m);
        __syncthreads();
        int before = 0, total = 0;
        for (int q = 0; q < WARPS; q++) { before += q < (tid >> 5) ? sh_warp[q] : 0; total += sh_warp[q]; }
        int rank = taken + before + __popc(m & ((1u << lane) - 1));
        if (zero && in && rank < need) pick(a);
        taken += total;
        __syncthreads();
    }
}

// sums[k] = Σ_p part[k*PARTS + p] in a fixed order, for k < n_sums (one block)
static __global__ void finish_kernel(const double *part, int n_sums, double *sums) {
    __shared__ double sh[THREADS];
    for (int k = 0; k < n_sums; k++) {
        double v = 0;
        for (int p = threadIdx.x; p < PARTS; p += THREADS) v += part[k * PARTS + p];
        v = block_sum(v, sh);
        if (threadIdx.x == 0) sums[k] = v;
    }
}

// the next `bytes` at *off, 256-aligned; with base NULL only the size is counted
static void *place(char *base, size_t *off, size_t bytes) {
    size_t start = (*off + 255) & ~(size_t)255;
    *off = start + bytes;
    return base ? base + start : NULL;
}

// What every loss work holds (T: its target type), on the host side of the C interface's opaque type.
template <class T>
struct WorkBase {
    int max_n, max_targets, nc, max_anchors;
    int N, A, G;                 // of the last assignment
    char *block;                 // the one device allocation, holding every device buffer
    T *gt;                       // (G) grouped by image, each image's targets in input order
    int *gt_begin;               // (N+1) image n owns gt[gt_begin[n] .. gt_begin[n+1])
    double *part, *sums;         // the block partials; the results
    T *gt_host;                  // pinned staging: the targets (max_targets + 1), their image bounds
    int *begin_host, *fill_host; //   (max_n + 1; fill: host scratch), the results (and the host
    double *sums_host;           //   normalisers on their way in)
};

// A loss work W (GpuLossWork, GpuLoss26Work) for up to max_n images, max_targets rows, nc classes and
// max_anchors anchors: its device block of place(w, NULL) bytes on dev, laid out by place(w, block), and
// the staging of its targets (pinned: max_targets + 1 of *w->gt_host), image boundaries (pinned, max_n +
// 1 ints; fill_host: host, the same) and results (pinned, n_sums doubles), every allocation counted
// (gpu_alloc_count). NULL, with nothing allocated, when the GPU has no room for the block; sizes a
// caller cannot mean die naming `who`.
template <class W>
static W *work_new(Device *dev, const char *who, int max_n, int max_targets, int nc, int max_anchors, size_t n_sums,
                   size_t (*place)(W *, char *)) {
    if (max_n < 1 || max_targets < 0 || nc < 1 || max_anchors < 1)
        die("%s: sizes %d images, %d targets, %d classes, %d anchors", who, max_n, max_targets, nc, max_anchors);
    W *w = (W *)xcalloc(1, sizeof *w);
    w->max_n = max_n; w->max_targets = max_targets; w->nc = nc; w->max_anchors = max_anchors;
    checkCuda(cudaSetDevice(dev->id));
    if (!(w->block = (char *)device_try_alloc(place(w, NULL)))) {   // counted (gpu_alloc_count)
        free(w);
        return NULL;
    }
    place(w, w->block);
    w->gt_host = (decltype(w->gt_host))device_host_alloc((size_t)(max_targets + 1) * sizeof *w->gt_host);
    w->begin_host = (int *)device_host_alloc((size_t)(max_n + 1) * sizeof(int));
    w->sums_host = (double *)device_host_alloc(n_sums * sizeof(double));
    w->fill_host = (int *)xmalloc((size_t)(max_n + 1) * sizeof(int));
    return w;
}

template <class W>
static void work_free(W *w) {
    if (!w) return;
    checkCuda(cudaFree(w->block));
    checkCuda(cudaFreeHost(w->gt_host));
    checkCuda(cudaFreeHost(w->begin_host));
    checkCuda(cudaFreeHost(w->sums_host));
    free(w->fill_host);
    free(w);
}
