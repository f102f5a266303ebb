// trainer_host.h: the Trainer's phases with their values on the host (tests and inspection: each waits
// for the device), built on core/trainer/trainer.h's queued phases. images: n (S,S,3) floats in host memory;
// images_u8 bytes when set, else images floats (NULL: the batch is already on the device).
// trainer_forward_assign_heads: forward and both assignments, the local target-score sums into *tss;
// trainer_compute_backward_heads: the loss normalised by max(sum, 1) per head output (LossNorm: several
// devices sum tss->main and tss->aux over devices separately), backward, the items into *out. The
// single-normaliser forms are these for the main head; with a dual head (yolov9-s)
// trainer_compute_backward normalises the auxiliary head by its local sum, which is exact on one device only.
#pragma once
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/train/train.h"

static inline int trainer_forward_assign_heads(Trainer *t, int n, int S, const float *images,
                                               const uint8_t *images_u8, const float *targets, int nt,
                                               LossNorm *tss, Err *err) {
    double v[2] = { 0, 0 };
    int rc = trainer_phase_forward(t, n, S, images, images_u8, targets, nt, err);
    if (!rc) t->m.be->dev.download(t->m.be_ctx, (float *)v, (const float *)(t->scal + SC_TSS), 4);   // 2 doubles
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
    t->m.be->dev.upload(t->m.be_ctx, (float *)(t->scal + SC_NORM), (const float *)v, 4);   // 2 doubles
    trainer_phase_backward(t, n, NULL, 0, batch_mult);
    t->m.be->dev.sync(t->m.be_ctx);
    trainer_read_times(t, NULL);
    trainer_phase_items(t, out);
}

// The auxiliary head's local sum is still in scal[SC_TSS + 1], where the assignment left it.
static inline void trainer_compute_backward(Trainer *t, int n, double norm, double batch_mult, LossOut *out) {
    double v[2] = { 0, 0 };
    t->m.be->dev.download(t->m.be_ctx, (float *)v, (const float *)(t->scal + SC_TSS), 4);
    LossNorm both = { norm, v[1] > 1 ? v[1] : 1 };
    trainer_compute_backward_heads(t, n, &both, batch_mult, out);
}

// ---- micro-batches: the one-device reference the device and process splits are checked against ----

// The rows of images [first, first + size) among targets' nt rows, image indices counted from first,
// into out; returns their count.
static inline int micro_targets(const float *targets, int nt, int first, int size, float *out) {
    int k = 0;
    for (int r = 0; r < nt; r++) {
        int img = (int)targets[6 * r];
        if (img < first || img >= first + size) continue;
        memcpy(out + 6 * k, targets + 6 * r, 6 * sizeof(float));
        out[6 * k++] -= first;
    }
    return k;
}

// trainer_forward_assign of the size images from first (images: S x S floats each) with their rows.
static inline int micro_forward(Trainer *t, int S, const float *images, const float *targets, int nt, int first,
                                int size, double *tss, Err *err) {
    float *tg = malloc(6 * sizeof(float) * (nt > 0 ? nt : 1));
    int k = micro_targets(targets, nt, first, size, tg);
    int rc = trainer_forward_assign(t, size, S, images + (size_t)first * S * S * 3, NULL, tg, k, tss, err);
    free(tg);
    return rc;
}

// One device taking the first n images as one batch: forward, assignment, loss and backward once, so its BN
// statistics and running statistics are the whole batch's (what sync_bn=1 over devices or processes must
// equal; micro_reference's two passes would move the running statistics twice). Returns the target-score sum.
static inline double whole_batch_step(Trainer *t, int S, const float *images, const float *targets, int nt, int n,
                                      LossOut *out) {
    Err err;
    double tss;
    micro_forward(t, S, images, targets, nt, 0, n, &tss, &err);
    trainer_compute_backward(t, n, tss > 1 ? tss : 1, n, out);
    return tss;
}

// One device taking the micro-batches sizes[0..nd) (n images in all, empty ones skipped) one after the
// other with the whole batch's normaliser, which a split over devices or processes must equal: the
// gradients accumulate in t's, the loss items add up in *total. Returns the batch's target-score sum
// (before max(., 1)).
static inline double micro_reference(Trainer *t, int S, const float *images, const float *targets, int nt,
                                     const int *sizes, int nd, int n, LossOut *total) {
    Err err;
    double tss = 0;
    for (int pass = 0; pass < 2; pass++) {             // pass 0: the normaliser; pass 1: loss and backward
        memset(total, 0, sizeof *total);
        for (int k = 0, first = 0; k < nd; first += sizes[k++]) {
            if (!sizes[k]) continue;
            double s;
            micro_forward(t, S, images, targets, nt, first, sizes[k], &s, &err);
            if (pass == 0) { tss += s; continue; }
            LossOut o;
            trainer_compute_backward(t, sizes[k], tss > 1 ? tss : 1, n, &o);
            total->box += o.box; total->cls += o.cls; total->dfl += o.dfl; total->total += o.total;
        }
    }
    return tss;
}

// The gradients g of a split step against the reference ref, over the trainable parameters of m: the
// worst element as a fraction of its tolerance 1e-6 max|ref of its tensor| + 1e-4 |ref| (the two sides
// add the same terms in other orders, so a small difference of large terms differs by their rounding;
// a lost micro-batch or a wrong normaliser moves gradients by more than 1e-2), and into *rel_l2 the
// relative L2 distance.
static inline double grad_worst(const Model *m, const float *g, const float *ref, double *rel_l2) {
    double worst = 0, se = 0, sr = 0;
    for (int q = 0; q < m->n_params; q++) {
        const ParamInfo *pi = &m->params[q];
        if (!param_trainable(pi->kind)) continue;
        double scale = 0;
        for (size_t i = pi->offset; i < pi->offset + pi->n; i++) scale = fmax(scale, fabs(ref[i]));
        for (size_t i = pi->offset; i < pi->offset + pi->n; i++) {
            double e = fabs((double)g[i] - ref[i]);
            worst = fmax(worst, e / (1e-6 * scale + 1e-4 * fabs(ref[i]) + 1e-30));
            se += e * e, sr += (double)ref[i] * ref[i];
        }
    }
    *rel_l2 = sr > 0 ? sqrt(se / sr) : 0;
    return worst;
}

// |a - b| / |b - base| over n floats (base NULL: zeros): a difference measured against the change the
// steps made.
static inline double rel_change(const float *a, const float *b, const float *base, size_t n) {
    double se = 0, sd = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - b[i], d = (double)b[i] - (base ? base[i] : 0);
        se += e * e, sd += d * d;
    }
    return sd > 0 ? sqrt(se / sd) : sqrt(se);
}
