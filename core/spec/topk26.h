// topk26.h: NMS-free inference of the YOLO26 end-to-end head (yolo26.md section 4; ultralytics
// Detect.postprocess / get_topk_index and the end2end path of non_max_suppression at 8.4.14): decode
// the one-to-one branch, keep the k = min(max_det, A) anchors of highest best-class score, then the top
// k of their k*nc (anchor, class) pairs (an anchor may appear with several classes), then score > conf.
// Both top-ks rank the logits: the sigmoid is monotone, so they keep what ranking the scores keeps,
// and scores that round to the same float (1.0f for every logit above ~16.6) still rank by logit. The
// ONNX export ranks the same way (core/eval/export_onnx.c), so its order matches ours.
// Legend: A anchors (P3, P4, P5, row-major), nc classes, k = min(max_det, A).
#pragma once
#include <stddef.h>

#include "core/spec/loss26.h"   // Head26

typedef struct { float box[4]; float score; int cls, anchor; } Det26;   // box: x1, y1, x2, y2 pixels
typedef struct { float s; int i; } Topk26Item;                          // work: a logit and its index
typedef struct Topk26Opts {
    int   max_det;    // 300 by default
    int   agnostic;   // 1: one class per anchor (its best), top k anchors
    float conf;       // keep score > conf: 0.25 predict, 0.001 val
} Topk26Opts;

// Work items topk26_select needs for A anchors and nc classes.
size_t topk26_work_items(int A, int nc, int max_det);

// topk26_decode: image n of the (one-to-one) head: boxes (A, 4) = dist2bbox(l,t,r,b) * stride in pixels,
// xyxy; logits (A, nc), the class maps as they are. img_h: the input height (stride_l = img_h / H_l).
void topk26_decode(const Head26 *h, int n, int img_h, float *boxes, float *logits);

// The score of a logit: 1 / (1 + exp(-x)) in float, as torch's sigmoid (core/spec/fexp.h: expf as glibc's,
// so a GPU rounds it alike)
float topk26_score(float logit);

// topk26_select: the detections of one image into out (room for min(max_det, A)), best first, each
// with its score topk26_score(logit); returns their count. Ranked by logit; equal logits go to the
// lower index (torch.topk leaves ties unspecified; ONNX's TopK takes the lower index, as here).
int topk26_select(const float *boxes, const float *logits, int A, int nc, const Topk26Opts *o,
                  Topk26Item *work, Det26 *out);
