// trainer_host.h: the Trainer's phases with their values on the host (tests and inspection: each waits
// for the device), built on core/train.h's queued phases. images: n (S,S,3) floats in host memory;
// images_u8 bytes when set, else images floats (NULL: the batch is already on the device).
// trainer_forward_assign_heads: forward and both assignments, the local target-score sums into *tss;
// trainer_compute_backward_heads: the loss normalised by max(sum, 1) per head output (LossNorm: several
// devices sum tss->main and tss->aux over devices separately), backward, the items into *out. The
// single-normaliser forms are these for the main head; with a dual head (yolov9-s)
// trainer_compute_backward normalises the auxiliary head by its local sum, which is exact on one device only.
#pragma once
#include "core/train.h"

static inline int trainer_forward_assign_heads(Trainer *t, int n, int S, const float *images,
                                               const uint8_t *images_u8, const float *targets, int nt,
                                               LossNorm *tss, Err *err) {
    double v[2] = { 0, 0 };
    int rc = trainer_phase_forward(t, n, S, images, images_u8, targets, nt, err);
    if (!rc) t->m.be->download(t->m.be_ctx, (float *)v, (const float *)(t->scal + SC_TSS), 4);   // 2 doubles
    *tss = (LossNorm){ v[0], v[1] };
    trainer_read_times(t, NULL);
    return rc;
}

static inline int trainer_forward_assign(Trainer *t, int n, int S, const float *images, const uint8_t *images_u8,
                                         const float *targets, int nt, double *tss, Err *err) {
    LossNorm both;
    int rc = trainer_forward_assign_heads(t, n, S, images, images_u8, targets, nt, &both, err);
    *tss = both.main;
    return rc;
}

static inline void trainer_compute_backward_heads(Trainer *t, int n, const LossNorm *norm, double batch_mult,
                                                  LossOut *out) {
    double v[2] = { norm->main, norm->aux };
    t->m.be->upload(t->m.be_ctx, (float *)(t->scal + SC_NORM), (const float *)v, 4);   // 2 doubles
    trainer_phase_backward(t, n, NULL, 0, batch_mult);
    t->m.be->sync(t->m.be_ctx);
    trainer_read_times(t, NULL);
    trainer_phase_items(t, out);
}

// The auxiliary head's local sum is still in scal[SC_TSS + 1], where the assignment left it.
static inline void trainer_compute_backward(Trainer *t, int n, double norm, double batch_mult, LossOut *out) {
    double v[2] = { 0, 0 };
    t->m.be->download(t->m.be_ctx, (float *)v, (const float *)(t->scal + SC_TSS), 4);
    LossNorm both = { norm, v[1] > 1 ? v[1] : 1 };
    trainer_compute_backward_heads(t, n, &both, batch_mult, out);
}
