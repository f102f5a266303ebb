// plots.h: the plots a run folder gets from its data (core/eval/plots.c): labels.jpg and
// labels_correlogram.jpg from the training labels at the start, and from a validation's statistics confusion_matrix.png and PR_curve.png,
// F1_curve.png, P_curve.png, R_curve.png (YOLOv9 val.py with plots=True). A plot that fails is a
// note on stderr, never an error of the run.
#pragma once
#include "core/eval/metrics.h"
#include "core/eval/drawer.h"
#include "io/dataset.h"

// The five validation plots into dir; names (nc) may be NULL.
void plots_validation(const MetricsStats *st, char *const *names, const char *dir);
// The same as a job of drawer d (core/eval/drawer.h; NULL: now): it takes *st (left empty here, nothing to
// free) and copies names (nc of them, or NULL) and dir.
void plots_validation_queue(Drawer *d, MetricsStats *st, char *const *names, const char *dir);
// labels.jpg and labels_correlogram.jpg into dir from every box of ds.
void plots_labels(const Dataset *ds, const char *dir);
// The same as a job of drawer d (NULL: now); the boxes and names are copied.
void plots_labels_queue(Drawer *d, const Dataset *ds, const char *dir);
