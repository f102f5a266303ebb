// devices.h: the device= key (cfg/README.md): which devices a run uses, as the config gives
// them. The CPU is one device (cpu) or several (cpu:N, the multi-device path on CPU devices); GPUs are
// named by their ids.
#pragma once
#include "core/base/util.h"

#define MULTI_MAX 16             // devices of one run at most

typedef struct DeviceList {      // the devices of a run
    int n;
    int gpu[MULTI_MAX];          // GPU ids, or -1 for CPU devices (device=cpu:N)
} DeviceList;

// Parse device=: "" (every GPU, else the CPU), "cpu", "cpu:N", "0", "0,1", "[0,1]", "[0, 1]",
// "(0,1)", optionally quoted; Ultralytics' "cuda" (GPU 0), "cuda:0" and "cuda:0,1" (the ids after
// it). Unknown, repeated or absent ids, and brackets that do not enclose the whole list once ("[0,1", "0,1]", "[[0,1]]", "[]"), are errors. n_gpus: GPUs visible. With the test
// hook YT_TEST_SAME_GPU=1, a repeated id is another device on the same GPU (device=0,0: two replicas).
int parse_devices(const char *spec, int n_gpus, DeviceList *out, Err *err);
