// step.h: the step over this run's devices and processes (core/train/step.c), on top of what drives them:
// several devices in this process (core/devices/multi.h), several processes (core/procs/procs.h) and the
// one-device Trainer whose phases both run (core/trainer/trainer.h). The run around it is core/train/train.h.
#pragma once
#include "core/trainer/trainer.h"

// The master on devs->gpu[0] and, for several devices, its replicas (core/devices/multi.h); trainer_free
// frees them all.
struct DeviceList;
int  trainer_init_devices(Trainer *t, const Config *cfg, int nb, const struct DeviceList *devs, Err *err);
// One iteration i of `epoch` on n images (n,S,S,3 floats in input) and their target rows
// (img, cls, cx, cy, w, h): forward, loss, backward; then, when the schedule says so, clip the
// gradients to norm 10, take the SGD step and update the EMA. Returns 0, or -1 on bad targets.
// One device alone, several devices (multi_step) or a device of several processes (procs_step_one).
int  trainer_step(Trainer *t, int n, int S, const float *targets, int nt, int epoch, int i,
                  LossOut *out, Err *err);
// The same with the batch given: images_u8 bytes when set, else images floats (both NULL: the batch is
// already in the model's input on its devices, as the benchmarks time the step alone).
int  trainer_step_batch(Trainer *t, const float *images, const uint8_t *images_u8, int n, int S, const float *targets,
                        int nt, int epoch, int i, LossOut *out, Err *err);
// An epoch ended: the family's end_epoch on the master, then on each replica (YOLO26's ProgLoss weights).
void trainer_end_epoch(Trainer *t);
