// picture.h: a JPEG of a batch's first images in a grid, with their boxes and class names; what
// `yolotrain check` shows and what training writes as train_batch0.jpg.
#pragma once
#include "core/base/util.h"
#include "io/loader.h"

// Draw up to 16 images of b (4x4 at most; the picture is at most 1920 px wide) with each target's
// box in its class colour and its name (names[cls] when cls < nc, else the number) and save it as a
// JPEG at path. files: (b->n) the image file of each tile, whose name (its first 40 characters) is
// written at the tile's top-left as plot_images writes paths[i]; NULL, or a NULL entry: none. Returns 0,
// or -1 with err naming the file.
int picture_batch(const Batch *b, char *const *names, int nc, char *const *files, const char *path, Err *err);

// The first training batch of epoch 0 as the loader augments it with cfg's settings (at most 16
// images), drawn by picture_batch. What `yolotrain check` writes so a person can see that
// augmentation and labels line up.
int picture_augmented(const Config *cfg, const Dataset *train, const char *path, Err *err);
