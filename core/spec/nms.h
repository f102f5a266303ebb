// nms.h: the inference head (DFL decode of the raw head maps into pixel boxes and class scores) and
// YOLOv9's non_max_suppression (reference §1.3, §5.1). Legend: A anchors (P3, P4, P5, each row-major),
// nc classes, R = 16 DFL bins, D detections kept.
#pragma once
#include "core/spec/tensor.h"

typedef struct Det { float x1, y1, x2, y2, conf; int cls; } Det;   // a box in pixels, its score and class

typedef struct NmsOptions {
    float conf_thres;   // a (box, class) pair is a candidate when its score is > conf_thres
    float iou_thres;    // a box is suppressed when its IoU with a kept box of its class is > iou_thres
    int   max_det;      // keep at most this many after NMS
    int   max_nms;      // at most this many candidates, the highest scores, enter NMS
    int   multi_label;  // 1: every class over conf_thres is a candidate (when nc > 1); 0: the best class
    int   agnostic;     // 1: one NMS over all classes
} NmsOptions;

#define NMS_MAX_WH 7680.0f   // class offset: boxes of different classes never overlap

NmsOptions nms_val_options(void);      // validation: 0.001, 0.7, 300, 30000, multi-label, class-aware
NmsOptions nms_detect_options(void);   // detect.py: 0.25, 0.45, 1000, 30000, best class, class-aware

// nms_anchors: A = sum over levels of H_l*W_l.
int  nms_anchors(const Map head[], int n_levels);

// nms_decode: image n of the head maps (N, H_l, W_l, 4R + nc) with strides[l] into boxes (A, 4) xyxy in
// input pixels and scores (A, nc) = sigmoid(class logits) (core/spec/fexp.h: expf as glibc, also on a GPU). Per side the distance is the DFL expectation
// sum_i i*softmax(logits)_i; with anchor (col + 0.5, row + 0.5) the box is (ax-l, ay-t, ax+r, ay+b) in cells.
// As the reference it passes through xywh*stride (DDetect's output) and back to xyxy (the NMS input), in
// float, so the corners carry the same rounding.
void nms_decode(const Map head[], const int strides[], int n_levels, int n, int nc, float *boxes,
                float *scores);

// nms_run: candidates, sort by score (stable, descending: equal scores keep anchor-then-class order,
// where torch's order is implementation-defined), top max_nms, then greedy NMS (torchvision ops.nms) on
// boxes offset by cls*NMS_MAX_WH. Writes at most max_det detections to out in descending score order
// and returns their count. The reference's per-batch time limit is not applied.
int  nms_run(const float *boxes, const float *scores, int A, int nc, const NmsOptions *o, Det *out);

// nms_run_fast (core/spec/nms_fast.c): nms_run's detections bit for bit (same order, same ties), with a radix
// sort and per-class suppression; test_nms_fast holds it to nms_run. Validation and detect use it.
int  nms_run_fast(const float *boxes, const float *scores, int A, int nc, const NmsOptions *o, Det *out);

// nms_iou: intersection over union as torchvision's nms computes it (no eps; 0 for two empty boxes).
float nms_iou(const float a[4], const float b[4]);
