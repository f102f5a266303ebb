// train_tb.c: see train_tb.h.
#include "core/train/train_tb.h"

#include <string.h>

const char *const results_keys[14] = { "epoch", "train/box_loss", "train/cls_loss", "train/dfl_loss",
                                       "metrics/precision", "metrics/recall", "metrics/mAP_0.5",
                                       "metrics/mAP_0.5:0.95", "val/box_loss", "val/cls_loss", "val/dfl_loss",
                                       "x/lr0", "x/lr1", "x/lr2" };

void train_tb_open(TrainTb *tb, const Config *cfg, const char *dir, int reg_max, int start_epoch) {
    *tb = (TrainTb){ NULL, reg_max == 1 };
    if (!cfg->tensorboard) return;
    Err err;
    tb->ev = tfevents_open(dir, &err);
    if (!tb->ev) { fprintf(stderr, "note: %s; no TensorBoard log for this run\n", err.msg); return; }
    if (start_epoch > 0) tfevents_restart(tb->ev, start_epoch);
    tfevents_flush(tb->ev);
}

void train_tb_epoch(TrainTb *tb, int epoch, const double vals[14]) {
    if (!tb->ev) return;
    for (int i = 1; i < 14; i++) {
        const char *tag = results_keys[i];
        if (tb->l1 && (i == 3 || i == 10)) tag = i == 3 ? "train/l1_loss" : "val/l1_loss";
        tfevents_scalar(tb->ev, tag, vals[i], epoch);
    }
    tfevents_flush(tb->ev);
}

void train_tb_picture(TrainTb *tb, const char *dir, const char *file, int epoch) {
    if (!tb->ev) return;
    char path[4096], tag[256];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    snprintf(tag, sizeof tag, "%s", file);
    char *dot = strrchr(tag, '.');
    if (dot) *dot = 0;
    Err err;
    if (tfevents_image_file(tb->ev, tag, path, epoch, &err)) fprintf(stderr, "note: TensorBoard image: %s\n", err.msg);
    tfevents_flush(tb->ev);
}

void train_tb_close(TrainTb *tb) {
    tfevents_close(tb->ev);
    tb->ev = NULL;
}
