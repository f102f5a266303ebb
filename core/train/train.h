// train.h: the run around the Trainer (core/train/train.c: per-epoch logging, validation and checkpoints
// under runs/train/NAME). The Trainer itself, the step, is core/trainer/trainer.h.
#pragma once
#include "core/train/outdir.h"
#include "core/trainer/trainer.h"

// ---- the run (core/train/train.c) -------------------------------------------------------------------
// `yolotrain CONFIG`: the whole run. Returns the process exit status. With cfg->resume set to a
// run folder it continues that run from weights/last_state.safetensors.
int  train_run(Config *cfg);
// `yolotrain resume=FOLDER|1 [overrides]`: reload the run's args.ini, apply the overrides (argv), go on.
int  train_resume(Config *cfg, int argc, char **argv);
