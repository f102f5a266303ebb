// split.h: how a batch is shared between the devices of one run (split=even|auto|w0,w1,...;
// cfg/README.md): the micro-batch of each device, the largest one a device is built for, and
// split=auto's decision from the measured speeds. Legend: B images of a batch, n devices.
#pragma once
#include "cfg/devices.h"

// Micro-batch sizes for a batch of B images on n devices: "even" (and "auto" before it has
// measured) splits as torch.chunk (chunks of ceil(B/n), the last smaller, trailing devices may get
// none), "w0,w1,..." in proportion to the weights. Returns 0, or -1 with err for a split that
// leaves no image for device 0.
int split_batch(const char *split, int B, int n, int *sizes, Err *err);
// The same within cap[k] images each (the micro-batches the devices were built for): a partial batch
// split by weights stays within the full batch's shares (largest remainder alone need not), and
// device 0 always gets an image of a non-empty batch.
int split_batch_capped(const char *split, int B, int n, const int *cap, int *sizes, Err *err);
// B images in proportion to w[k] >= 0 (largest remainder, ties to the lower k), at most cap[k]
// each (cap may be NULL); when that leaves device 0 none (w[0] > 0, a small batch), it takes one from
// the fullest device. Returns 0, or -1 when the caps cannot hold B or device 0 gets nothing.
int split_weighted(const double *w, const int *cap, int B, int n, int *sizes);
// split=auto's decision: sizes in proportion to the measured speeds rate[k] (images per second),
// within cap; returns 1 when that split's slowest device is expected at least 3% faster than
// with the current split cur, else 0 (keep cur: a smaller gain is noise).
int split_by_speed(const double *rate, const int *cur, const int *cap, int B, int n, int *sizes);
// The largest micro-batch a device may get under `split`: the even or weighted share, and for
// split=auto room for 25% more than the even share (auto moves images to the faster devices).
// trainer_init_devices builds every replica for this many images.
int multi_plan_micro(const char *split, int B, int n, Err *err);
