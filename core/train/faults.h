// faults.h: the fault-injection hooks the tests use to reach a training run's failure paths, all in one
// place, each named by its environment variable; with the variable unset each does nothing. The run
// (core/train/train.c) calls them at the points named. Device-side stand-ins live with their device
// (gpu/device.cu: YT_GPU_RESERVE_GB, YT_GPU_CC).
#pragma once
#include "core/devices/multi.h"

// YT_SIGNAL_AT=startup|val|checkpoint|agreed[:HUP|:INT]: SIGTERM (or SIGHUP, SIGINT) to this process at
// that point (once per process), as a user's kill arriving while the dataset loads, validation runs or
// checkpoints are written, or (agreed) just after the processes of a run agreed at a step's end not to stop.
void   fault_signal_at(const char *where);
// Before step `step` of the run (from 1): YT_FAIL_CUDA=STEP[:sticky] makes a CUDA call fail through
// checkCuda (sticky: one that ends the GPU context; on the CPU the fatal path is entered directly);
// YT_NAN_AT_STEP=STEP makes a weight NaN, as a diverging run's would. YT_GPU_HANG_AT=STEP stops the GPU's
// queue there (a kernel that spins), as behind a collective whose peer died (the NCCL watchdog's tests).
void   fault_before_step(const Trainer *t, int step);
// YT_STOP_AFTER_STEPS=N: the run stops after N steps as on Ctrl-C (the value, 0 when unset).
int    fault_stop_after(void);
// YT_FAIL_DEVICE=K: device K of a multi-device run (mt; NULL: none) fails its backward from the second
// step on, as a device error would (multi_set_fail_hook).
void   fault_device_hook(Multi *mt);
// YT_DISK_FREE_MB=N: stands in for the free bytes statvfs reported (free_bytes, returned when unset).
double fault_disk_free(double free_bytes);
