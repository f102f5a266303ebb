// confusion.h: the confusion matrix val.py draws (YOLOv9 utils/metrics.py ConfusionMatrix): per image
// with labels, the detections above conf 0.25 matched one to one to labels at IoU > 0.45 (process_batch);
// rows are the predicted class, columns the true class, and index nc is the background: a label no
// detection matched counts in row nc (a missed object), a detection that matched no label in column nc
// (a false alarm). Legend: D detections, G labels, nc classes.
#pragma once
#include "core/spec/nms.h"

#define CONFUSION_CONF 0.25f   // val.py's ConfusionMatrix(nc=nc): conf=0.25, iou_thres=0.45
#define CONFUSION_IOU  0.45f

typedef struct { int pred, truth; } ConfusionCell;   // one count; nc stands for the background

// process_batch for one image (boxes in one pixel frame, classes in [0, nc)): appends the counts it adds
// to *cells (n used, cap room; grown here). As the reference: a pair needs IoU > iou (any classes); with
// several pairs, each detection keeps its highest-IoU label, then each label its highest-IoU detection
// (equal IoUs: the later pair, as numpy's argsort()[::-1]); a label without its detection counts in the
// background row; a detection without a label counts in the background column, but only when the image
// has at least one match (the reference's `if n:`). No labels: nothing is counted (val.py does not call it).
void confusion_image(const Det *det, int nd, const Det *gt, int ng, int nc, float conf, float iou,
                     ConfusionCell **cells, int *n, int *cap);

typedef struct { int nc; double *m; } ConfusionMatrix;   // m: (nc + 1, nc + 1), m[pred * (nc + 1) + truth]

void confusion_build(ConfusionMatrix *cm, int nc, const ConfusionCell *cells, int n);
void confusion_free(ConfusionMatrix *cm);
// What the reference's plot(normalize=True) shows: each column divided by its sum + 1e-9; values under
// 0.005 become NAN (left blank). out: (nc + 1)^2.
void confusion_normalised(const ConfusionMatrix *cm, double *out);
