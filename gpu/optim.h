// optim.h (gpu): the CUDA twins of core/spec/optim.h's elementwise updates (SGD, gradient sum of
// squares and scaling, EMA), per tensor and over a whole model's slots in one or two launches.
// Legend: n floats of one tensor; a chunk is OPT_CHUNK floats of one slot, one block's work.
#pragma once
#include "gpu/device.h"

#ifdef __cplusplus
extern "C" {
#endif

#ifdef USE_CUDA
enum { OPT_CHUNK = 4096 };   // fixes the reduction order: results do not depend on the GPU

// One tensor of a multi-tensor op, read by the kernels from device memory. w, g, buf are device
// pointers (n floats each); group as ParamSlot (0..2 trainable, -1 fixed: skipped).
typedef struct {
    float *w, *g, *buf;   // buf: this slot's momentum buffer (only sgd_apply_slots_gpu reads it)
    size_t n;
    int group;
    size_t chunk0;        // chunks of the trainable slots before this one (set by the upload)
} GpuSlot;

// The device copy of a slot array and its chunk count.
typedef struct { const GpuSlot *slots; int n_slots; size_t chunks; } GpuSlots;

// Sets chunk0 of the n_slots host slots, copies them into arena `a` (dev->optim, say) and waits
// for the copy: done once, when the model's slots are laid out.
GpuSlots optim_slots_upload(Device *dev, Arena *a, GpuSlot *slots, int n_slots);
// Scratch bytes grad_sumsq_gpu / grad_sumsq_slots_gpu need for at most n floats in n_slots slots.
size_t optim_workspace_bytes_gpu(size_t n, int n_slots);

// sgd_apply_cpu, bit for bit (the same rounded operations in the same order): w, buf updated, g = 0.
void sgd_apply_gpu(Device *dev, float *w, float *g, float *buf, size_t n, float lr, float mu,
                   float wd, int first);
// The same over every trainable slot: lr[group], and wd for group 1 only (as sgd_step).
void sgd_apply_slots_gpu(Device *dev, GpuSlots s, const float lr[3], float mu, float wd,
                         int first);

// Σ g² in double, as grad_sumsq_cpu up to summation order (fixed: deterministic). Waits for the
// stream once to hand the result back. The slots version sums each trainable slot exactly as
// grad_sumsq_gpu would, then adds those sums in slot order.
double grad_sumsq_gpu(Device *dev, const float *g, size_t n);
double grad_sumsq_slots_gpu(Device *dev, GpuSlots s);
// The step's forms, queued with no wait: the slots' Σ g² into *dst (device memory); then clipping
// from n such sums (added in order; another GPU's through peer copies first): clip_grad_norm's
// total and coef, computed on the device in the same roundings, and g *= coef where coef < 1.
void grad_sumsq_slots_to_gpu(Device *dev, GpuSlots s, double *dst);
void grad_clip_slots_gpu(Device *dev, GpuSlots s, const double *sumsq, int n, float max_norm);
// dst[h] = max(Σ_k src[2k + h], 1) for h = 0, 1: the main and auxiliary loss normalisers from n
// devices' target-score sums (device memory), in device order as the host's sum.
void loss_norm_gpu(Device *dev, const double *src, int n, double *dst);
// dst[h] = src[h] + src[2 + h] + ... over n pairs (pair order; n = 0: 0), h = 0, 1 (dst may be src)
void pair_sum_gpu(Device *dev, const double *src, int n, double *dst);

// g *= s, as grad_scale_cpu (bit for bit); the slots version scales every trainable slot's g.
void grad_scale_gpu(Device *dev, float *g, size_t n, float s);
void grad_scale_slots_gpu(Device *dev, GpuSlots s, float scale);

// ema_update_cpu, bit for bit: ema = ema*d + (1-d)*x in fp32, each operation rounded alone.
void ema_update_gpu(Device *dev, float *ema, const float *x, size_t n, double d);
#endif

#ifdef __cplusplus
}
#endif
