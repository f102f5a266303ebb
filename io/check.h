// check.h: `yolotrain check`: validate the train and val splits of the configured dataset and print,
// per split, what it holds and what was wrong with it.
#pragma once
#include <stdio.h>

#include "cfg/config.h"
#include "io/dataset.h"

// A picture of augmented training samples, drawn by whoever implements it (the loader); check_run
// calls it after a usable train split when it is set. NULL: no picture.
extern int (*check_picture_hook)(const Config *cfg, const Dataset *train, Err *err);

// Validate train and val of cfg's dataset (data= yaml or [data]) with cfg->strict, cfg->min_items
// and cfg->nc (> 0: the model's class count). Problems, then a summary per split, go to out:
// images, backgrounds, instances, instances per class present ("name: count"), "classes present:
// K of nc", excluded images by reason, warnings, label files without an image, grayscale images.
// Returns 0 when both splits are usable, else -1 with err (the first split's failure).
int check_run(const Config *cfg, FILE *out, Err *err);
