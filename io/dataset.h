// dataset.h: a YOLO-layout detection dataset: image files paired with label files, described by an
// Ultralytics-style data.yaml or an INI [data] section, validated before use.
#pragma once
#include "core/util.h"

typedef struct { int cls; float cx, cy, w, h; } Box;   // normalised to the image, centre and size

typedef struct {
    char *image;        // path of the image file
    char *label;        // path of its label file (may not exist: a background image)
    int   w, h;         // image size from its header
    int   nbox;
    Box  *box;
} Sample;

typedef struct {
    int     n;          // samples kept after validation
    Sample *s;
    int     nc;
    char  **names;      // nc class names
    int     n_excluded, n_background, n_warnings;
} Dataset;

void dataset_free(Dataset *ds);
