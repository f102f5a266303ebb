// optim.c: see optim.h. Schedules follow YOLOv9 train.py and utils/general.py (double precision,
// as Python computes them); updates follow torch.optim.SGD, clip_grad_norm_ and ModelEMA in fp32.
#include "core/spec/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/util.h"

// ---- schedule ------------------------------------------------------------------------------

double opt_interp(double x, const double *xp, const double *fp, int n) {
    if (x <= xp[0]) return fp[0];
    if (x >= xp[n - 1]) return fp[n - 1];
    int k = 0;
    while (x >= xp[k + 1]) k++;                 // xp[k] <= x < xp[k+1]
    double slope = (fp[k + 1] - fp[k]) / (xp[k + 1] - xp[k]);
    return slope * (x - xp[k]) + fp[k];         // numpy's order of operations
}

double opt_round_half_even(double x) { return nearbyint(x); }   // default mode: to nearest even

double opt_lr_lambda(LrKind kind, double e, int epochs, double lrf) {
    double E = epochs;
    int half = epochs / 2;                      // Python's steps // 2
    switch (kind) {
    case LR_LINEAR:   return (1 - e / E) * (1.0 - lrf) + lrf;
    case LR_COSINE:   return ((1 - cos(e * M_PI / E)) / 2) * (lrf - 1) + 1;  // one_cycle(1, lrf, E)
    case LR_FLAT_COS: if (e <= half) return 1;                               // one_flat_cycle
                      return ((1 - cos((e - half) * M_PI / half)) / 2) * (lrf - 1) + 1;
    case LR_FIXED:    return 1;
    }
    die("opt_lr_lambda: unknown LrKind %d", (int)kind);
}

int opt_nominal_accumulate(int batch_total) {
    int a = (int)opt_round_half_even((double)OPT_NBS / batch_total);   // 64/128 = 0.5 -> 0
    return a > 1 ? a : 1;
}

double opt_nominal_weight_decay(double wd, int batch_total) {
    // train.py: hyp['weight_decay'] *= batch_size * accumulate / nbs (right side first)
    return wd * ((double)batch_total * opt_nominal_accumulate(batch_total) / OPT_NBS);
}

void opt_schedule_init(OptSchedule *s, const Hyp *h, LrKind kind, int epochs, int nb,
                       int batch_total) {
    if (epochs < 1 || nb < 1 || batch_total < 1)
        die("opt_schedule_init: epochs %d, nb %d, batch %d must be >= 1", epochs, nb, batch_total);
    memset(s, 0, sizeof *s);
    s->lr0 = h->lr0;  s->lrf = h->lrf;  s->momentum = h->momentum;
    s->warmup_momentum = h->warmup_momentum;  s->warmup_bias_lr = h->warmup_bias_lr;
    s->kind = kind;  s->epochs = epochs;  s->nb = nb;  s->batch_total = batch_total;
    int nw = (int)opt_round_half_even(h->warmup_epochs * nb);
    s->nw = nw > 100 ? nw : 100;               // at least 100 iterations, even for tiny datasets
    s->accumulate = opt_nominal_accumulate(batch_total);
    s->weight_decay = opt_nominal_weight_decay(h->weight_decay, batch_total);
    s->last_opt_step = -1;                      // so the first step comes at ni = 0
}

OptStep opt_schedule_next(OptSchedule *s, int epoch, int i) {
    int64_t ni = i + (int64_t)s->nb * epoch;
    double lr = s->lr0 * opt_lr_lambda(s->kind, epoch, s->epochs, s->lrf);   // LambdaLR
    OptStep st = { .accumulate = s->accumulate, .lr = { lr, lr, lr },
                   .momentum = s->momentum, .weight_decay = s->weight_decay };
    if (ni <= s->nw) {
        // Warmup ends at ni = nw exactly on the values above, so they need no memory of it.
        double xi[2] = { 0, s->nw }, x = (double)ni;
        double acc_f[2] = { 1, (double)OPT_NBS / s->batch_total };
        double mom_f[2] = { s->warmup_momentum, s->momentum };
        double acc = opt_round_half_even(opt_interp(x, xi, acc_f, 2));
        st.accumulate = acc > 1 ? (int)acc : 1;
        for (int g = 0; g < 3; g++) {           // bias lr falls from warmup_bias_lr, others rise
            double lr_f[2] = { g == 0 ? s->warmup_bias_lr : 0.0, lr };
            st.lr[g] = opt_interp(x, xi, lr_f, 2);
        }
        st.momentum = opt_interp(x, xi, mom_f, 2);
    }
    st.step = ni - s->last_opt_step >= st.accumulate;
    if (st.step) s->last_opt_step = ni;
    return st;
}

// ---- SGD -----------------------------------------------------------------------------------

size_t sgd_buffer_floats(const ParamSlot *slots, int n_slots) {
    size_t n = 0;
    for (int k = 0; k < n_slots; k++) n += slots[k].group >= 0 ? slots[k].n : 0;
    return n;
}

void sgd_init(Sgd *o, const ParamSlot *slots, int n_slots, const Backend *be, void *ctx, float *buf) {
    memset(o, 0, sizeof *o);
    o->slots = slots;  o->n_slots = n_slots;
    o->be = be;  o->ctx = ctx;
    for (int k = 0; k < n_slots; k++) {
        int g = slots[k].group;
        if (g < -1 || g > 2) die("sgd_init: slot %d has group %d (want -1..2)", k, g);
        if (g >= 0 && (!slots[k].w || !slots[k].g)) die("sgd_init: slot %d lacks w or g", k);
    }
    o->n_train = sgd_buffer_floats(slots, n_slots);
    o->own_buf = !buf;
    o->buf = buf ? buf : xcalloc(o->n_train, sizeof(float));
    o->prep = be->optim.optim_prepare(ctx, slots, n_slots, o->buf);
}

void sgd_free(Sgd *o) {
    if (o->own_buf) free(o->buf);
    free(o->prep);
    memset(o, 0, sizeof *o);
}

// PyTorch's grad.add(param, alpha=wd) and friends are one fused multiply-add per element
// (vec::fmadd on the CPU, contracted a + alpha*b on CUDA), hence fmaf; buf*mu is rounded alone.
void sgd_apply_cpu(float *w, float *g, float *buf, size_t n, float lr, float mu, float wd,
                   int first) {
    for (size_t i = 0; i < n; i++) {
        float d = g[i];
        if (wd != 0.0f) d = fmaf(wd, w[i], d);              // g <- g + wd*p
        float b = d;                                       // first step: buf <- g
        if (!first) { b = buf[i] * mu; b += d; }           // buf <- mu*buf + g, rounded twice
        buf[i] = b;
        d = fmaf(mu, b, d);                                // nesterov: g <- g + mu*buf
        w[i] = fmaf(-lr, d, w[i]);                         // p <- p - lr*g
        g[i] = 0.0f;                                       // zero_grad
    }
}

void sgd_step(Sgd *o, const OptStep *st) {
    float lr[3] = { (float)st->lr[0], (float)st->lr[1], (float)st->lr[2] };
    o->be->optim.sgd_apply(o->ctx, o->prep, lr, (float)st->momentum, (float)st->weight_decay, o->steps == 0);
    o->steps++;
}

// The CPU backend's slot loop (backend_cpu.c): wd applies to group 1 only.
void sgd_apply_slots_cpu(const ParamSlot *slots, int n_slots, float *buf, const float lr[3], float mu,
                         float wd, int first) {
    for (int k = 0; k < n_slots; k++) {
        const ParamSlot *p = &slots[k];
        if (p->group < 0) continue;
        sgd_apply_cpu(p->w, p->g, buf, p->n, lr[p->group], mu, p->group == 1 ? wd : 0.0f, first);
        buf += p->n;
    }
}

// ---- gradient clipping ---------------------------------------------------------------------

double grad_sumsq_cpu(const float *g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return s;
}

void grad_scale_cpu(float *g, size_t n, float s) {
    for (size_t i = 0; i < n; i++) g[i] *= s;
}

double grad_sumsq_slots_cpu(const ParamSlot *slots, int n_slots) {
    double ss = 0;
    for (int k = 0; k < n_slots; k++)
        if (slots[k].group >= 0) ss += grad_sumsq_cpu(slots[k].g, slots[k].n);
    return ss;
}

void grad_scale_slots_cpu(const ParamSlot *slots, int n_slots, float s) {
    for (int k = 0; k < n_slots; k++)
        if (slots[k].group >= 0) grad_scale_cpu(slots[k].g, slots[k].n, s);
}

float clip_grad_norm(const Sgd *o, float max_norm) {
    // PyTorch takes the norm of per-tensor fp32 norms; a double sum is that up to fp32 rounding.
    float total = (float)sqrt(o->be->optim.grad_sumsq(o->ctx, o->prep));
    float coef = 1.0f / (total + 1e-6f) * max_norm;   // max_norm / t is t.reciprocal() * max_norm
    if (coef >= 1.0f) return total;                    // clamp(max=1): scaling by 1 changes nothing
    o->be->optim.grad_scale(o->ctx, o->prep, coef);
    return total;
}

void clip_grad_norm_queued(const Sgd *o, float max_norm, double *sumsq) {
    o->be->optim.grad_sumsq_to(o->ctx, o->prep, sumsq);
    o->be->optim.grad_clip(o->ctx, o->prep, sumsq, 1, max_norm);
}

// ---- EMA -----------------------------------------------------------------------------------

double ema_decay(int64_t updates) { return 0.9999 * (1 - exp(-(double)updates / 2000)); }

void ema_update_cpu(float *ema, const float *x, size_t n, double d) {
    float keep = (float)d, take = (float)(1.0 - d);     // Python scalars become fp32 operands
    for (size_t i = 0; i < n; i++) {
        float t = take * x[i];                  // (1 - d) * msd[k]: its own rounded tensor
        ema[i] = ema[i] * keep;                 // v *= d
        ema[i] = ema[i] + t;                    // v += ...
    }
}
