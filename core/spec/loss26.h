// loss26.h: the YOLO26 end-to-end loss (Ultralytics 8.4.14 E2ELoss, yolo26.md section 2): the same
// detection loss on the one-to-many branch (assigner top-k 10) and the one-to-one branch (top-k 7,
// then 1 per target), weighted by the ProgLoss schedule, and its gradient into both heads' outputs.
// Legend: N batch, A anchors (P3, P4, P5, each row-major), G targets, nc classes, l level.
#pragma once
#include "core/spec/tensor.h"
#include "core/base/util.h"

#define L26_LEVELS 3     // P3, P4, P5

enum { L26_O2M, L26_O2O, L26_BRANCHES };   // branch index: one-to-many, one-to-one

// One branch's head outputs, per level. Raw conv outputs, no activation: box channels are the
// l, t, r, b distances from the anchor centre in cells of that level (reg_max = 1, no DFL). box and
// cls may be slices of one (N,H,W,4+nc) buffer (map_slice) or separate maps.
typedef struct {
    Map box[L26_LEVELS];   // (N, H_l, W_l, 4)
    Map cls[L26_LEVELS];   // (N, H_l, W_l, nc) logits
} Head26;

typedef struct {
    Head26       head[L26_BRANCHES];   // [L26_O2M], [L26_O2O]; same shapes
    int          nc;
    int          img_h, img_w;         // input size in pixels; stride_l = img_h / H_l = img_w / W_l
    const float *targets;              // (G, 6) rows: image index, class, cx, cy, w, h (normalised)
    int          n_targets;
} Loss26Batch;

typedef struct {
    double box, cls, l1;   // gains (hyp box, cls, dfl): 7.5, 0.5, 1.5 by default
    double w[L26_BRANCHES];   // branch weights: ProgLoss, loss26_prog_weights
} Loss26Weights;

typedef struct {
    double box, cls, l1;   // one branch's items: gains applied, divided by its normaliser (not x batch)
    double tss;            // the normaliser used: max(sum of target scores, 1)
    int    n_fg;           // foreground anchors
} Loss26Terms;

typedef struct {
    Loss26Terms br[L26_BRANCHES];
    double total;          // batch_mult * sum_b w[b] * (box + cls + l1)_b: the value the gradient is of
} Loss26Out;

// ProgLoss after `epoch` end-of-epoch updates (epoch is 0-based; E = epochs):
// o2m = 0.1 + 0.7*max(1 - epoch/max(E-1, 1), 0), o2o = max(1 - o2m, 0); 0.8 / 0.2 in epoch 0.
// As in the reference, the caller restarts it at 0 on resume (its counter is not checkpointed).
void loss26_prog_weights(int epoch, int epochs, double w[L26_BRANCHES]);
// The default gains with the ProgLoss weights of `epoch`.
Loss26Weights loss26_weights(int epoch, int epochs);

// Loss26Work: both branches' assignments and scratch, grown only when a larger batch, image or
// target count appears, so a training loop allocates nothing per step.
typedef struct Loss26Work Loss26Work;
Loss26Work *loss26_work_new(void);
void        loss26_work_free(Loss26Work *w);

// loss26_assign: the task-aligned assigner (alpha 0.5, beta 6, STAL for targets under one P3 stride)
// of both branches on the detached outputs; tss_local[b] gets branch b's sum of target scores. -1 with
// a message on a bad target row (image outside [0,N), class outside [0,nc), non-finite) or maps that
// do not fit the image. Ties the reference leaves to torch.topk (equal alignment, in practice 0) go
// to the lower anchor index; such anchors have target score 0 and do not change the loss.
int loss26_assign(Loss26Work *w, const Loss26Batch *b, double tss_local[L26_BRANCHES], Err *err);

// loss26_compute: the loss for the assignment of the last loss26_assign on the same batch (outputs
// may have changed since: the assignment is detached). tss_norm[b] is branch b's normaliser,
// max(sum of target scores, 1) over the whole step (several devices: the global sums); batch_mult is
// the "x batch size" factor (N for a single call, the global batch for a device's share).
// grad[b] (shapes of b->head[b]; NULL skips the branch's gradient) receives d total / d outputs (=),
// every element. The graph feeds the o2o head detached features; that is its business, not ours.
void loss26_compute(Loss26Work *w, const Loss26Batch *b, const Loss26Weights *wt,
                    const double tss_norm[L26_BRANCHES], double batch_mult,
                    const Head26 *grad[L26_BRANCHES], Loss26Out *out);

// loss26_forward_backward: loss26_assign, then loss26_compute with the local normalisers and N.
int loss26_forward_backward(Loss26Work *w, const Loss26Batch *b, const Loss26Weights *wt,
                            const Head26 *grad[L26_BRANCHES], Loss26Out *out, Err *err);

// loss26_target: after loss26_assign, the target row (index into b->targets) that anchor a of image n
// is assigned to in branch br, or -1 for background; *score (may be NULL) gets its target score.
int loss26_target(const Loss26Work *w, int br, int n, int a, double *score);
