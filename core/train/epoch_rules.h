// epoch_rules.h: the decisions a training run takes at an epoch's edges, as yolov9's train.py and
// Ultralytics take them: which validation is the best (best weights, patience), when mosaic closes,
// which epochs keep their own weights. Epochs count from 0, as in both references.
#pragma once

// 1 when a validation of `fitness` is the best so far: yolov9 saves best.pt when `best_fitness == fi`
// after `if fi > best_fitness`, and EarlyStopping resets on `fitness >= best_fitness`, so a tie counts
// (a from-scratch run's first epochs at fitness 0 included). best_epoch < 0: none yet, always best.
int epoch_is_best(double fitness, double best_fitness, int best_epoch);

// 1 when patience (> 0) ends the run after `epoch`: EarlyStopping's `epoch - best_epoch >= patience`.
int epoch_patience_stops(int epoch, int best_epoch, int patience);

// The epoch mosaic closes at: `epoch == epochs - close_mosaic` in both references, so a run of fewer
// epochs than close_mosaic (or close_mosaic 0) never closes it. -1: never.
int epoch_mosaic_close_at(int epochs, int close_mosaic);

// 1 while mosaic is on at `epoch`: before the closing epoch. A run resumed past it trains closed, as
// Ultralytics' resume does.
int epoch_mosaic_on(int epoch, int epochs, int close_mosaic);

// 1 when save_period (> 0) keeps `epoch`'s weights as weights/epoch{epoch}: yolov9's
// `epoch % save_period == 0`, so epochs 0, N, 2N, ...
int epoch_period_save(int epoch, int save_period);
