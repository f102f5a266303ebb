// outdir.h: the folder `yolotrain val` and `yolotrain detect` write their results into, named by one
// rule for both, as yolov9's val.py and detect.py name theirs (increment_path).
#pragma once
#include "cfg/config.h"

// outdir_make: BASE/NAME, where BASE is the mode's folder (runs/val, runs/detect) unless project= is
// given on the command line (the INI's project is where training runs go), and NAME is name= (exp),
// then NAME2, NAME3, ... the first that does not exist yet; with exist_ok=1 NAME itself, reused.
// Created, with labels/ inside when `labels`. Returns 0, or -1 with err naming the folder.
int outdir_make(const Config *cfg, const char *base, int labels, char *dir, size_t size, Err *err);
