// buckets.h: the gradient arena cut into buckets in backward order, so each can be sent while the
// backward computes the ones below it (several devices: core/devices/multi_reduce.c; several processes:
// core/procs/procs.c). Parameters are laid out in node order, so once node `node`'s backward has run,
// grad[lo, hi) of its bucket holds nothing more will add to.
#pragma once
#include <stddef.h>

#include "core/spec/model.h"

enum { BUCKET_FLOATS = 2 << 20, MAX_BUCKETS = 64 };   // 8 MB buckets by default
typedef struct { int node; size_t lo, hi; } Bucket;

// Buckets of about `floats` (at most max), closed only after a node below which no parameter lies
// above the bucket's start, from the top of the trainable parameters down; the last one reaches offset
// 0 at node 0. Together they cover [0, m->buffers). Returns their count.
int buckets_plan(const Model *m, size_t floats, Bucket *b, int max);
