// plot.h: results.png from a run's results.csv (the loss and metric curves).
#pragma once
#include "core/util.h"

// Read csv (the %20.5g rows train writes) and save ten panels as a PNG at png (temporary name and
// rename). Returns 0, or -1 with err naming the file.
int plot_results(const char *csv, const char *png, Err *err);
