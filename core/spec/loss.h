// loss.h: the YOLOv9 detection loss (utils/loss_tal.py ComputeLoss): task-aligned assignment, then BCE
// (cls), CIoU (box) and DFL on the three raw head maps, and the gradient of the total into the maps.
// Legend: N batch, A anchors (P3, P4, P5, each row-major), G targets, nc classes, R = 16 DFL bins.
// Head map channels: 4*R box logits (side*R + bin, sides l,t,r,b), then nc class logits.
#pragma once
#include "core/spec/tensor.h"
#include "core/base/util.h"

#define LOSS_REG_MAX 16   // R: DFL bins per box side
#define LOSS_LEVELS  3    // P3, P4, P5

typedef struct LossBatch {
    Map          head[LOSS_LEVELS];   // (N, H_l, W_l, 4R + nc); stride_l = img_h / H_l = img_w / W_l
    int          nc;
    int          img_h, img_w;        // network input size in pixels; targets are normalised to it
    const float *targets;             // (G, 6) rows: image index, class, cx, cy, w, h (normalised)
    int          n_targets;
} LossBatch;

typedef struct LossOut {
    double box, cls, dfl;   // the logged items: gains 7.5 / 0.5 / 1.5 applied, divided by the normaliser
    double total;           // batch_mult * (box + cls + dfl): the value the gradient is of
    double tss;             // the normaliser used: max(sum of target scores, 1)
    int    n_fg;            // foreground (assigned) anchors
    double tss_aux;         // a dual head (loss_add_aux): the auxiliary head's normaliser, else 0
    int    n_fg_aux;        // and its foreground anchors
} LossOut;

// A dual head (YOLOv9's PGI training, utils/loss_tal_dual.py) has two outputs, the main maps and the
// auxiliary maps, each with its own assignment and its own normaliser. LossNorm carries one value per
// output: the local target-score sums after assignment, or the normalisers max(global sum, 1) for the
// compute phase (several devices sum each over devices, as for a single head). aux = 0 without one.
typedef struct { double main, aux; } LossNorm;

// The auxiliary head's share of the loss: its box, cls and dfl terms count x 0.25.
#define LOSS_AUX_WEIGHT 0.25

// LossWork: the assignment and its scratch, sized on first use and grown only when a larger batch,
// image or target count appears, so a training loop allocates nothing per step.
typedef struct LossWork LossWork;
LossWork *loss_work_new(void);
void      loss_work_free(LossWork *w);

// loss_assign: the task-aligned assigner (topk 10, alpha 0.5, beta 6, YOLOv9 conflict rule) on the
// detached predictions. Writes the local sum of target scores to *tss_local. -1 with a message if a
// target row is invalid (image index outside [0,N), class outside [0,nc), non-finite values) or the map
// sizes do not fit the image size. Tie rule where the reference is unspecified (torch.topk on equal
// alignment metrics): the lower anchor index is taken first.
int loss_assign(LossWork *w, const LossBatch *b, double *tss_local, Err *err);

// loss_compute: the loss for the assignment made by the last loss_assign on the same LossBatch (the
// maps may have changed since: the assignment is detached, as in the reference). tss_norm is the
// normaliser, max(sum of target scores, 1) over every image of the step (several devices: the global
// sum). batch_mult is the "x batch size" factor: N for a single call, the global batch when devices
// each compute a share of a DataParallel-style batch (the shares' totals and items then add up).
// grad (same shapes as head, may be NULL) receives d total / d head maps (=), every channel.
void loss_compute(LossWork *w, const LossBatch *b, double tss_norm, double batch_mult,
                  Map grad[LOSS_LEVELS], LossOut *out);

// loss_forward_backward: loss_assign, then loss_compute with the local normaliser and batch_mult = N.
int loss_forward_backward(LossWork *w, const LossBatch *b, Map grad[LOSS_LEVELS], LossOut *out,
                          Err *err);

// The dual loss, from the two heads' loss_compute calls: the main head's with batch_mult, the auxiliary
// head's with LOSS_AUX_WEIGHT * batch_mult (batch_mult scales the gradient and the total, so that one
// factor weighs both, on the CPU and on the GPU alike). loss_add_aux then adds the auxiliary items
// x LOSS_AUX_WEIGHT and its (already weighted) total into main, and records its normaliser and
// foreground count: main then holds the reference's items and loss.
void loss_add_aux(LossOut *main, const LossOut *aux);

// loss_target: after loss_assign, the target row (index into b->targets) anchor a of image n is
// assigned to, or -1 for background; *score (may be NULL) gets its target score.
int loss_target(const LossWork *w, int n, int a, double *score);

// Building blocks, shared with core/spec/loss26.c and exposed for the tests.
// loss_check_target: target row i (img, cls, cx, cy, w, h) of a batch of N images and nc classes is
// finite with an integer image index in [0,N) and class in [0,nc); else -1 with a message.
int loss_check_target(const float *row, int i, int N, int nc, Err *err);
// loss_bce_logits: Σ_c BCE-with-logits of the nc logits x against a target of `score` at class
// `label` (-1: none) and 0 elsewhere; g (may be NULL) gets k · d sum / d x.
double loss_bce_logits(const float *x, int nc, int label, double score, double k, float *g);
// loss_ciou: CIoU of boxes b1, b2 (x1,y1,x2,y2) as bbox_iou(b1, b2, xywh=False, CIoU=True). If d1 is
// not NULL it receives dCIoU/db1, with alpha held constant (the reference computes it under no_grad).
double loss_ciou(const double b1[4], const double b2[4], double d1[4]);
// loss_dfl_decode: softmax p (R) of R logits and the expectation sum_i i*p_i (a distance in cells).
double loss_dfl_decode(const float *logits, double p[LOSS_REG_MAX]);
// loss_dfl_side: the DFL of one side with target distance t (clamped to [0, R-1-0.01]):
// wl*CE(logits, floor t) + wr*CE(logits, floor t + 1).
double loss_dfl_side(const float *logits, double t);
