// train_tb.h: what a training run logs to TensorBoard (io/tfevents.h) in RUN/events.out.tfevents.*,
// named as the references log it: once per epoch (step = the 0-based epoch, as yolov9's loggers)
// results.csv's 13 values under its column names (train/box_loss ... x/lr2), and the pictures the run
// draws (train_batch0, val_batch0_labels, val_batch0_pred, results) as images. Off with tensorboard=0.
#pragma once
#include "cfg/config.h"
#include "io/tfevents.h"

extern const char *const results_keys[14];     // results.csv's columns: epoch, then the 13 logged values

typedef struct {
    TfEvents *ev;        // NULL: not logging
    int       l1;        // the model has reg_max 1 (YOLO26): its third loss is Ultralytics' l1_loss
} TrainTb;

// Open the event file in dir (tensorboard=1); start_epoch > 0: a resumed run, whose earlier points
// at steps >= start_epoch TensorBoard then drops. A file that cannot be created is a note, not an error.
void train_tb_open(TrainTb *tb, const Config *cfg, const char *dir, int reg_max, int start_epoch);
void train_tb_epoch(TrainTb *tb, int epoch, const double vals[14]);          // results.csv's row
void train_tb_picture(TrainTb *tb, const char *dir, const char *file, int epoch);   // tag: file's stem
void train_tb_close(TrainTb *tb);
