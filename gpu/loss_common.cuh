// loss_common.cuh: what the two detection losses' CUDA twins (gpu/loss.cu for YOLOv9, gpu/loss26.cu
// for YOLO26) share: CIoU and its gradient, the numerically safe sigmoid, the fixed-order block and
// partial sums that keep them deterministic, the assigner's tie rule, and the one-block layout of
// their work buffers. Internal to those two files (everything static).
#pragma once
#include <math.h>

#include "gpu/kernel_util.h"

#define IOU_EPS 1e-7   // bbox_iou
enum { PARTS = 1024, WARPS = THREADS / 32 };   // partial-sum blocks; warps per block
constexpr double PI = 3.14159265358979323846;

__device__ static double dmin_da(double a, double b) { return a < b ? 1 : a > b ? 0 : 0.5; }

// ciou: loss_ciou of core/loss.c (CIoU of b1, b2; d1 = dCIoU/db1 with alpha constant, may be NULL)
__device__ static double ciou(const double b1[4], const double b2[4], double d1[4]) {
    double w1 = b1[2] - b1[0], h1 = b1[3] - b1[1] + IOU_EPS;
    double w2 = b2[2] - b2[0], h2 = b2[3] - b2[1] + IOU_EPS;
    double iw = fmin(b1[2], b2[2]) - fmax(b1[0], b2[0]), ih = fmin(b1[3], b2[3]) - fmax(b1[1], b2[1]);
    double inter = fmax(iw, 0.0) * fmax(ih, 0.0);
    double uni = w1 * h1 + w2 * h2 - inter + IOU_EPS, iou = inter / uni;
    double cw = fmax(b1[2], b2[2]) - fmin(b1[0], b2[0]), ch = fmax(b1[3], b2[3]) - fmin(b1[1], b2[1]);
    double c2 = cw * cw + ch * ch + IOU_EPS;
    double sx = b2[0] + b2[2] - b1[0] - b1[2], sy = b2[1] + b2[3] - b1[1] - b1[3];
    double rho2 = (sx * sx + sy * sy) / 4;
    double k = 4 / (PI * PI), da = atan(w2 / h2) - atan(w1 / h1), v = k * da * da;
    double alpha = v / (v - iou + (1 + IOU_EPS));
    if (d1) {
        double gx = ih > 0 ? ih : 0, gy = iw > 0 ? iw : 0;
        double di[4] = { iw >= 0 ? -gx * dmin_da(-b1[0], -b2[0]) : 0, ih >= 0 ? -gy * dmin_da(-b1[1], -b2[1]) : 0,
                         iw >= 0 ? gx * dmin_da(b1[2], b2[2]) : 0, ih >= 0 ? gy * dmin_da(b1[3], b2[3]) : 0 };
        double dwh[4] = { -h1, -w1, h1, w1 };
        double dcw[4] = { -dmin_da(b1[0], b2[0]), 0, dmin_da(-b1[2], -b2[2]), 0 };
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

__device__ static double sigmoid(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }

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
