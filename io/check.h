// check.h: `yolotrain check`: validate the train and val splits of the configured dataset and print,
// per split, what it holds and what was wrong with it.
#pragma once
#include <stdio.h>

#include "cfg/config.h"
#include "io/dataset.h"


// Validate train and val of cfg's dataset (data= yaml or [data]), every image decoded, with
// cfg->strict, cfg->min_items and cfg->nc (> 0: the model's class count). Problems, then a summary per split, go to out:
// images, backgrounds, instances, instances per class present ("name: count"), "classes present:
// K of nc", excluded images by reason, warnings, label files without an image, grayscale images.
// Returns 0 when both splits are usable, else -1 with err (the first split's failure).
// picture: called once the train split has opened, to make the folder for the JPEG of augmented
// training samples (io/picture.h) and write its path into path; NULL: no picture. A dataset that cannot
// be opened so leaves no folder behind.
typedef int (*CheckPicturePath)(const Config *cfg, char *path, size_t n, Err *err);
int check_run(const Config *cfg, FILE *out, CheckPicturePath picture, Err *err);
