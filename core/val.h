// val.h: validation as YOLOv9's val.py runs it: the model in evaluation mode (BN running statistics)
// over a dataset split in letterboxed batches, NMS, boxes mapped back to the original images, then
// P, R, mAP50 and mAP50-95 overall and per class (core/metrics.h), and the val losses.
#pragma once
#include <stdio.h>

#include "cfg/config.h"
#include "core/metrics.h"
#include "core/model.h"
#include "core/nms.h"
#include "io/augment.h"
#include "io/dataset.h"

typedef struct {
    int        batch;     // images per forward pass (<= the model's max_n)
    int        workers;   // loader threads
    int        imgsz;     // S: square letterbox side, a multiple of 32, <= the model's imgsz
    NmsOptions nms;       // nms_val_options()
    int        losses;    // 1: also the val box/cls/dfl losses on the letterboxed targets
    int        verbose;   // 1: per-class rows in the table
    FILE      *out;       // where the table goes; NULL: nowhere
    const char *picture_dir;  // where val_batch0_labels.jpg / _pred.jpg go; NULL: no pictures
} ValOptions;

typedef struct {
    Metrics m;            // mp, mr, map50, map; per class
    double  fitness;      // 0.1 * mAP50 + 0.9 * mAP50-95
    double  box, cls, dfl;   // mean over batches of the loss items (0 unless losses)
    double  seconds;      // wall time of the whole evaluation
} ValResult;

// Defaults from a config: batch cfg->batch, cfg->workers, cfg->imgsz, nms_val_options(), losses on,
// verbose off, out stdout.
ValOptions val_options(const Config *cfg);

// val_evaluate: run m (its current state; evaluation-mode BN) over every image of ds, in dataset
// order. The table is printed to o->out. Returns 0 with *r filled (val_result_free it), or -1 with err
// (unreadable images are reported by the loader and skipped, not errors; bad sizes are errors).
int  val_evaluate(Model *m, const Dataset *ds, const ValOptions *o, ValResult *r, Err *err);
void val_result_free(ValResult *r);

// val_scale_boxes (scale_boxes with the loader's ratio_pad): boxes on an S x S letterboxed sample of an
// original w0 x h0 image to original pixels: subtract the float pads, divide by the gain, clip to the
// image. As the reference, gain is h/h0 of the long-side resize (int-truncated h) times the letterbox
// ratio (1 here), and is used for both axes.
void val_scale_boxes(Det *d, int n, int S, int w0, int h0, const LetterboxInfo *lb);

// `yolotrain val CONFIG weights=FILE [data=...]`: the val split of the configured dataset (the built-in
// synthetic one when none is), with per-class rows. device=cpu only. Returns the exit status.
int  val_run(Config *cfg);
