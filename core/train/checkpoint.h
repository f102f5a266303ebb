// checkpoint.h: the state a run needs to continue exactly (weights, gradients accumulated so far,
// momentum buffers, EMA, counters, where in the epoch it stopped), saved beside the weights as
// weights/last_state.safetensors, written to a temporary name and renamed.
#pragma once
#include "core/trainer/trainer.h"

typedef struct {             // where a run stands
    int    epoch, batch;     // the next batch to run
    double best_fitness;
    int    best_epoch;       // -1: none yet
    double box, cls, dfl;    // the epoch's running loss sums so far, over n batches
    int    n;
    double elapsed;          // seconds the run has trained up to here, over every part before a resume,
    int    elapsed_from;     //   counted from this epoch on (0: the whole run); loaded from a state saved
                             //   without them (an older yolotrain): elapsed -1, elapsed_from its epoch
} RunPoint;

// Write the whole state to path (through path.tmp and a rename, see st_write): on failure path is
// untouched and the message says so.
int checkpoint_save(const Trainer *t, const RunPoint *p, const char *path, Err *err);
// Load into a trainer built from the same config. A file of another model, a truncated or
// corrupt one, is refused with a message naming it; for one that does not open, the message also
// names the intact weights files beside it (last.safetensors, best.safetensors).
int checkpoint_load(Trainer *t, RunPoint *p, const char *path, Err *err);
// The epoch a saved state would continue from (its "epoch" entry), without loading it: 0, or -1
// with err when the file does not open or has no epoch.
int checkpoint_epoch(const char *path, int *epoch, Err *err);
