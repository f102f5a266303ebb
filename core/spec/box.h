// box.h: the box maths both detection losses use on the host and the device, one copy compiled by gcc
// (core/spec/loss.c, core/spec/loss26.c) and by nvcc (gpu/loss.cu, gpu/loss26.cu through gpu/loss_common.cuh):
// CIoU and its gradient (bbox_iou(..., CIoU=True)), the numerically safe sigmoid, the DFL bin split and
// the DFL logits' gradient, and a target row's pixel box. Same text on both sides, so the same operations in the same order.
// Legend: a box is x1, y1, x2, y2 in pixels; R DFL bins (reg_max 16).
#pragma once
#include <math.h>

#ifdef __CUDACC__
#define BOX_FN __host__ __device__ static
#else
#define BOX_FN static inline
#endif

#define BOX_IOU_EPS 1e-7                       // bbox_iou's eps
#define BOX_PI 3.14159265358979323846

// d min(a,b)/da: 1, 0 or 1/2 on a tie (PyTorch's minimum/maximum backward splits ties evenly)
BOX_FN double box_dmin_da(double a, double b) { return a < b ? 1 : a > b ? 0 : 0.5; }

// CIoU of b1 and b2; d1 = dCIoU/db1 with alpha held constant (as the reference's no_grad alpha), may be NULL.
BOX_FN double box_ciou(const double b1[4], const double b2[4], double d1[4]) {
    double w1 = b1[2] - b1[0], h1 = b1[3] - b1[1] + BOX_IOU_EPS;
    double w2 = b2[2] - b2[0], h2 = b2[3] - b2[1] + BOX_IOU_EPS;
    double iw = fmin(b1[2], b2[2]) - fmax(b1[0], b2[0]), ih = fmin(b1[3], b2[3]) - fmax(b1[1], b2[1]);
    double inter = fmax(iw, 0.0) * fmax(ih, 0.0);
    double uni = w1 * h1 + w2 * h2 - inter + BOX_IOU_EPS, iou = inter / uni;
    double cw = fmax(b1[2], b2[2]) - fmin(b1[0], b2[0]), ch = fmax(b1[3], b2[3]) - fmin(b1[1], b2[1]);
    double c2 = cw * cw + ch * ch + BOX_IOU_EPS;
    double sx = b2[0] + b2[2] - b1[0] - b1[2], sy = b2[1] + b2[3] - b1[1] - b1[3];
    double rho2 = (sx * sx + sy * sy) / 4;
    double k = 4 / (BOX_PI * BOX_PI), da = atan(w2 / h2) - atan(w1 / h1), v = k * da * da;
    double alpha = v / (v - iou + (1 + BOX_IOU_EPS));
    if (d1) {
        // inter: clamp passes the gradient where its input is >= 0 (PyTorch clamp_min)
        double gx = ih > 0 ? ih : 0, gy = iw > 0 ? iw : 0;
        double di[4] = { iw >= 0 ? -gx * box_dmin_da(-b1[0], -b2[0]) : 0, ih >= 0 ? -gy * box_dmin_da(-b1[1], -b2[1]) : 0,
                         iw >= 0 ?  gx * box_dmin_da(b1[2], b2[2]) : 0,   ih >= 0 ?  gy * box_dmin_da(b1[3], b2[3]) : 0 };
        double dwh[4] = { -h1, -w1, h1, w1 };                    // d(w1*h1)/db1
        double dcw[4] = { -box_dmin_da(b1[0], b2[0]), 0, box_dmin_da(-b1[2], -b2[2]), 0 };   // max(a,b) = -min(-a,-b)
        double dch[4] = { 0, -box_dmin_da(b1[1], b2[1]), 0, box_dmin_da(-b1[3], -b2[3]) };
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

BOX_FN double box_sigmoid(double x) { return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x)); }

// DFL: target distance t (cells) -> its left bin and that bin's weight, as _df_loss computes them;
// dist_max = R - 1 - 0.01.
BOX_FN int box_dfl_split(double t, double dist_max, double *wl) {
    t = fmin(fmax(t, 0.0), dist_max);
    int left = (int)t;
    *wl = (left + 1) - t;
    return left;
}

// The gradient of one side's r DFL logits (YOLOv9's loss, core/spec/loss.c and gpu/loss.cu): p the
// side's softmax over its r bins, e its expectation (the decoded distance), de d total / d e (the
// CIoU gradient through that expectation), kd the DFL's weight, t the target distance (cells) split
// as box_dfl_split does; g[i] = p_i (i - e) de + kd (p_i - the target's weight on bin i).
BOX_FN void box_dfl_grad(const double *p, int r, double e, double de, double kd, double t, double dist_max,
                         float *g) {
    double wl;
    int left = box_dfl_split(t, dist_max, &wl);
    for (int i = 0; i < r; i++) {
        double dce = p[i] - (i == left ? wl : 0) - (i == left + 1 ? 1 - wl : 0);
        g[i] = (float)(p[i] * (i - e) * de + kd * dce);
    }
}

// Target row t (image, class, cx, cy, w, h; normalised) as a pixel box of an img_w x img_h input.
BOX_FN void box_target_xyxy(const float *t, int img_h, int img_w, double b[4]) {
    double cx = t[2] * (double)img_w, cy = t[3] * (double)img_h;
    double bw = t[4] * (double)img_w, bh = t[5] * (double)img_h;
    b[0] = cx - bw / 2; b[1] = cy - bh / 2; b[2] = cx + bw / 2; b[3] = cy + bh / 2;
}

// YOLO26's small-object rule (select_candidates_in_gts): the inside-test box of a target, through
// xywh, each side under the P3 stride s0 replaced by the P4 stride s1, centre kept, only for valid
// targets; back to xyxy.
BOX_FN void box_stal(const double b[4], int valid, double s0, double s1, double in[4]) {
    double cx = (b[0] + b[2]) / 2, cy = (b[1] + b[3]) / 2, w = b[2] - b[0], h = b[3] - b[1];
    if (valid && w < s0) w = s1;
    if (valid && h < s0) h = s1;
    in[0] = cx - w / 2; in[1] = cy - h / 2; in[2] = cx + w / 2; in[3] = cy + h / 2;
}
