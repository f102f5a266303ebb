// plot_bars.h: a horizontal stacked bar chart as a PNG (bench/balance: the step time of each
// device split into phases).
#pragma once
#include "core/base/util.h"

#define PLOT_BARS_MAX_PARTS 8

typedef struct {
    char   label[64];                    // left of the bar, e.g. "sharded / GPU 1"
    double value[PLOT_BARS_MAX_PARTS];   // the stacked parts, >= 0, in part order
} BarRow;

// One bar per row, parts stacked left to right in the colours of a legend of part_names, a scale
// in `unit` along the bottom. Saved at png via a temporary name and rename. 0, or -1 with err.
int plot_bars(const char *png, const char *title, const char *const *part_names, int n_parts,
              const BarRow *rows, int n_rows, const char *unit, Err *err);
