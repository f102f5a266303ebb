// backend_cpu.c: the CPU reference ops (core/spec/ops.h) behind the Backend table.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/backend.h"
#include "core/procs/comm.h"
#include "core/spec/loss.h"
#include "core/spec/nms.h"
#include "core/spec/optim.h"
#include "core/spec/topk26.h"

static void conv_fwd(void *c, const ConvDims *d, Map x, const float *w, const float *b, Map y, float *ws) {
    conv_forward_cpu(d, x, w, b, y, ws);
}
static void conv_bwd(void *c, const ConvDims *d, Map x, const float *w, Map dy, Map dx, float *dw, float *db,
                     float *ws) {
    conv_backward_cpu(d, x, w, dy, dx, dw, db, ws);
}
static void bn_train(void *c, Map z, const float *g, const float *b, float eps, float mom, float *rm, float *rv,
                     float *mean, float *invstd, Map u) {
    bn_forward_train_cpu(z, g, b, eps, mom, rm, rv, mean, invstd, u);
}
static void bn_eval(void *c, Map z, const float *g, const float *b, float eps, const float *rm, const float *rv,
                    Map u) {
    bn_forward_eval_cpu(z, g, b, eps, rm, rv, u);
}
static void bn_bwd(void *c, Map z, const float *g, const float *mean, const float *invstd, Map du, Map dz,
                   float *dg, float *db) {
    bn_backward_cpu(z, g, mean, invstd, du, dz, dg, db);
}
static void bn_apply(void *c, Map z, const float *g, const float *b, const float *mean, const float *invstd, Map u) {
    bn_apply_cpu(z, g, b, mean, invstd, u);
}
static void silu_fwd(void *c, Map u, Map y) { silu_forward_cpu(u, y); }
static void silu_bwd(void *c, Map u, Map dy, Map du) { silu_backward_cpu(u, dy, du); }
static void add_fwd(void *c, Map a, Map b, Map y) { add_forward_cpu(a, b, y); }
static void copy(void *c, Map s, Map d) { copy_map_cpu(s, d); }
static void accumulate(void *c, Map s, Map d) { accumulate_map_cpu(s, d); }
static void maxpool_fwd(void *c, Map x, int k, int s, int p, Map y) { maxpool_forward_cpu(x, k, s, p, y); }
static void maxpool_bwd(void *c, Map x, int k, int s, int p, Map dy, Map dx) { maxpool_backward_cpu(x, k, s, p, dy, dx); }
static void avgpool_fwd(void *c, Map x, int k, int s, int p, Map y) { avgpool_forward_cpu(x, k, s, p, y); }
static void avgpool_bwd(void *c, int k, int s, int p, Map dy, Map dx) { avgpool_backward_cpu(k, s, p, dy, dx); }
static void upsample_fwd(void *c, Map x, int f, Map y) { upsample_forward_cpu(x, f, y); }
static void resize_fwd(void *c, Map x, Map y) { resize_bilinear_cpu(x, y); }
static void upsample_bwd(void *c, int f, Map dy, Map dx) { upsample_backward_cpu(f, dy, dx); }
static void dw_fwd(void *c, const DwDims *d, Map x, const float *w, const float *b, Map y) {
    dwconv_forward_cpu(d, x, w, b, y);
}
static void dw_bwd(void *c, const DwDims *d, Map x, const float *w, Map dy, Map dx, float *dw, float *db) {
    dwconv_backward_cpu(d, x, w, dy, dx, dw, db);
}
static void attn_fwd(void *c, const AttnDims *d, Map qkv, Map y, Map v, float *p) { attn26_forward_cpu(d, qkv, y, v, p); }
static void attn_bwd(void *c, const AttnDims *d, Map qkv, const float *p, Map dy, Map dv, Map dqkv, float *ws) {
    attn26_backward_cpu(d, qkv, p, dy, dv, dqkv, ws);
}
typedef struct { const ParamSlot *slots; int n; float *buf; } Prepared;
static void *prepare(void *c, const ParamSlot *slots, int n, float *buf) {
    Prepared *p = xmalloc(sizeof *p);
    *p = (Prepared){ slots, n, buf };
    return p;
}
static double sumsq(void *c, const void *h) { const Prepared *p = h; return grad_sumsq_slots_cpu(p->slots, p->n); }
static void scale(void *c, const void *h, float f) { const Prepared *p = h; grad_scale_slots_cpu(p->slots, p->n, f); }
static void sgd(void *c, const void *h, const float lr[3], float mu, float wd, int first) {
    const Prepared *p = h;
    sgd_apply_slots_cpu(p->slots, p->n, p->buf, lr, mu, wd, first);
}
static void ema(void *c, float *e, const float *x, size_t n, double d) { ema_update_cpu(e, x, n, d); }
static void scale_n(void *c, float *p, size_t n, float f) { grad_scale_cpu(p, n, f); }
static void sync(void *c) { host_wait_note(); }   // nothing to wait for; counted as the GPU's
static void bind(void *c) {}
static void pull(void *c, float *dst, void *sc, const float *src, size_t n) { memcpy(dst, src, n * sizeof(float)); }
static void zero(void *c, float *p, size_t n) { memset(p, 0, n * sizeof(float)); }
static void upload(void *c, float *dst, const float *src, size_t n) { memcpy(dst, src, n * sizeof(float)); }
static void download(void *c, float *dst, const float *src, size_t n) {
    host_wait_note();
    memcpy(dst, src, n * sizeof(float));
}
static void upload_u8(void *c, float *dst, const uint8_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = src[i] / 255.0f;
}
static void augment(void *c, const AugRecipe *r, const Image *tiles, uint8_t *host_out) {
    Image out = { 0, 0, host_out };
    augment_recipe_size(r, &out.w, &out.h);
    AugScratch scratch = { 0 };
    augment_apply_pixels(r, tiles, &scratch, &out);
    augment_scratch_free(&scratch);
}

static void augment_batch(void *c, const AugSample *s, int n, int h, int w, float *dst) {
    size_t px = (size_t)h * w * 3;
    Image out = { w, h, xmalloc(px) };
    AugScratch scratch = { 0 };
    for (int i = 0; i < n; i++) {
        augment_sample_pixels(&s[i], &scratch, &out);
        upload_u8(c, dst + i * px, out.px, px);
    }
    augment_scratch_free(&scratch);
    free(out.px);
}

// Several processes, the gradient buckets' sums begun during the backward (core/procs/procs.c): the CPU queues
// them (one list: the process has one transport) and does them at the end, in the order begun, through the
// process transport (rank order: the floats of one whole-arena sum). A begin may come from device 0's
// worker thread (the multi-device driver's hook) while the host thread waits; the end runs in the host
// thread, which makes the MPI calls (sync_bn=1's BN sums are the one call a worker makes, in a phase, while the
// host thread waits).
static struct { float **p; size_t *n; int count, cap; } begun;

static int comm_sum_begin(void *c, float *p, size_t n) {
    if (!n) return 0;
    if (begun.count == begun.cap) {
        begun.cap = 2 * begun.cap + 16;
        begun.p = xrealloc(begun.p, sizeof *begun.p * begun.cap);
        begun.n = xrealloc(begun.n, sizeof *begun.n * begun.cap);
    }
    begun.p[begun.count] = p;
    begun.n[begun.count++] = n;
    return 0;
}
static void comm_sum_end(void *c) {
    for (int i = 0; i < begun.count; i++) comm_sum_floats(begun.p[i], begun.n[i]);
    begun.count = 0;
}

static void *event_new(void *ctx) { return NULL; }
static void event_free(void *ctx, void *ev) {}
static void event_record(void *ctx, void *ev) {}
static void event_wait(void *ctx, void *ev) {}

static void sumsq_to(void *c, const void *h, double *dst) { *dst = sumsq(c, h); }
static void clip(void *c, const void *h, const double *ss, int n, float max_norm) {
    double acc = 0;
    for (int k = 0; k < n; k++) acc += ss[k];
    float total = (float)sqrt(acc);
    float coef = 1.0f / (total + 1e-6f) * max_norm;   // as clip_grad_norm: a NaN norm scales by NaN,
    if (!(coef >= 1.0f)) scale(c, h, coef);            // as torch's clamp(max=1) passes it through
}
static void loss_norm(void *c, const double *src, int n, double *dst) {
    for (int h = 0; h < 2; h++) {
        double acc = 0;
        for (int k = 0; k < n; k++) acc += src[2 * k + h];
        dst[h] = acc > 1 ? acc : 1;
    }
}
static void *timer_new(void *c) { return xcalloc(1, sizeof(double)); }
static void timer_free(void *c, void *tm) { free(tm); }
static void timer_record(void *c, void *tm) { *(double *)tm = now_seconds(); }
static double timer_seconds(void *c, void *from, void *to) { return *(double *)to - *(double *)from; }

typedef struct { int A, nc; NmsOptions o; float *boxes, *scores; } NmsCpu;
static void *nms_prepare(void *c, int max_n, int A, int nc, const NmsOptions *o) {
    NmsCpu *w = xmalloc(sizeof *w);
    *w = (NmsCpu){ A, nc, *o, xmalloc(sizeof(float) * 4 * (A + 1)), xmalloc(sizeof(float) * ((size_t)A * nc + 1)) };
    return w;
}
static void nms_release(void *c, void *prep) {
    NmsCpu *w = prep;
    if (w) free(w->boxes), free(w->scores);
    free(w);
}
static void nms_detect(void *c, void *prep, const Map head[3], const int strides[3], int n, Det *out, int *nd) {
    NmsCpu *w = prep;
    int A = nms_anchors(head, 3), D = w->o.max_det > 0 ? w->o.max_det : 0;
    if (A > w->A) die("nms_detect: %d anchors, work for %d", A, w->A);
    for (int i = 0; i < n; i++) {
        nms_decode(head, strides, 3, i, w->nc, w->boxes, w->scores);
        Det *d = xmalloc(sizeof(Det) * ((size_t)A * w->nc + D + 1));   // nms_run_fast's room
        nd[i] = nms_run_fast(w->boxes, w->scores, A, w->nc, &w->o, d);
        memcpy(out + (size_t)i * D, d, sizeof(Det) * nd[i]);
        free(d);
    }
}

// The CPU's validation losses: the chunks' maps gathered in host memory, then loss_forward_backward
// (DFL heads) or loss26_forward_backward (end2end: YOLO26's one-to-one maps in both branches).
typedef struct { int nc, C, A, N, h[3], w[3]; LossWork *lw; Loss26Work *lw26; float *buf; } VlossCpu;
static void *vloss_prepare(void *c, int max_n, int max_targets, int nc, int A, int end2end) {
    VlossCpu *v = xcalloc(1, sizeof *v);
    v->nc = nc; v->A = A; v->C = end2end ? 4 + nc : 4 * LOSS_REG_MAX + nc;
    if (end2end) v->lw26 = loss26_work_new();
    else v->lw = loss_work_new();
    v->buf = xmalloc(sizeof(float) * ((size_t)max_n * A * v->C + 1));
    return v;
}
static void vloss_release(void *c, void *prep) {
    VlossCpu *v = prep;
    if (v) loss_work_free(v->lw), loss26_work_free(v->lw26), free(v->buf);
    free(v);
}
static Map vloss_level(VlossCpu *v, int l) {
    size_t off = 0;
    for (int k = 0; k < l; k++) off += (size_t)v->N * v->h[k] * v->w[k] * v->C;
    return map_make(v->buf + off, v->N, v->h[l], v->w[l], v->C);
}
static void vloss_stage(void *c, void *prep, const Map head[3], int n0, int N) {
    VlossCpu *v = prep;
    v->N = N;
    for (int l = 0; l < 3; l++) v->h[l] = head[l].H, v->w[l] = head[l].W;
    for (int l = 0; l < 3; l++) {
        Map dst = vloss_level(v, l);
        for (int n = 0; n < head[l].N; n++)
            for (int y = 0; y < head[l].H; y++)
                for (int x = 0; x < head[l].W; x++)
                    memcpy(map_at(dst, n0 + n, y, x), map_at(head[l], n, y, x), sizeof(float) * dst.C);
    }
}
static int vloss_eval(void *c, void *prep, const LossBatch *b, LossOut *out, Err *err) {
    VlossCpu *v = prep;
    LossBatch g = *b;
    for (int l = 0; l < 3; l++) g.head[l] = vloss_level(v, l);
    return loss_forward_backward(v->lw, &g, NULL, out, err);
}
static int vloss_eval26(void *c, void *prep, const Loss26Batch *b, const Loss26Weights *wt, Loss26Out *out, Err *err) {
    VlossCpu *v = prep;
    Loss26Batch g = *b;
    for (int br = 0; br < L26_BRANCHES; br++)
        for (int l = 0; l < L26_LEVELS; l++) {
            g.head[br].box[l] = map_slice(vloss_level(v, l), 0, 4);
            g.head[br].cls[l] = map_slice(vloss_level(v, l), 4, v->nc);
        }
    const Head26 *none[L26_BRANCHES] = { NULL, NULL };
    return loss26_forward_backward(v->lw26, &g, wt, none, out, err);
}

// The CPU's top-k: topk26_decode + topk26_select image by image (what val_decode does on the host).
typedef struct { int A, nc, max_det; float *boxes, *logits; Topk26Item *work; Det26 *det; } TopkCpu;
static void *topk_prepare(void *c, int max_n, int A, int nc, int max_det) {
    TopkCpu *w = xmalloc(sizeof *w);
    *w = (TopkCpu){ A, nc, max_det, xmalloc(sizeof(float) * 4 * (A + 1)), xmalloc(sizeof(float) * ((size_t)A * nc + 1)),
                    xmalloc(sizeof(Topk26Item) * (topk26_work_items(A, nc, max_det) + 1)),
                    xmalloc(sizeof(Det26) * ((max_det < A ? max_det : A) + 1)) };
    return w;
}
static void topk_release(void *c, void *prep) {
    TopkCpu *w = prep;
    if (w) free(w->boxes), free(w->logits), free(w->work), free(w->det);
    free(w);
}
static void topk_detect(void *c, void *prep, const Map head[3], int img_h, int n, const Topk26Opts *o, Det *out, int *nd) {
    TopkCpu *w = prep;
    int A = nms_anchors(head, 3), D = o->max_det > 0 ? o->max_det : 0;
    if (A > w->A || o->max_det > w->max_det) die("topk_detect: %d anchors, max_det %d: work for %d, %d", A, o->max_det, w->A, w->max_det);
    Head26 h;
    for (int l = 0; l < 3; l++) h.box[l] = map_slice(head[l], 0, 4), h.cls[l] = map_slice(head[l], 4, w->nc);
    for (int i = 0; i < n; i++) {
        topk26_decode(&h, i, img_h, w->boxes, w->logits);
        nd[i] = topk26_select(w->boxes, w->logits, A, w->nc, o, w->work, w->det);
        for (int k = 0; k < nd[i]; k++) {
            const Det26 *x = &w->det[k];
            out[(size_t)i * D + k] = (Det){ x->box[0], x->box[1], x->box[2], x->box[3], x->score, x->cls };
        }
    }
}

static void bn_frozen_stats(void *c, int C, const float *rm, const float *rv, float eps, float *mean, float *invstd) {
    bn_frozen_stats_cpu(C, rm, rv, eps, mean, invstd);
}
static void bn_frozen_bwd(void *c, Map z, const float *g, const float *mean, const float *invstd, Map du, Map dz,
                          float *dg, float *db) {
    bn_frozen_backward_cpu(z, g, mean, invstd, du, dz, dg, db);
}
static void bn_train_sync(void *c, Map z, const float *g, const float *b, float eps, float mom, float *rm, float *rv,
                          float *mean, float *invstd, Map u, const BnSync *sync) {
    bn_forward_train_sync_cpu(z, g, b, eps, mom, rm, rv, mean, invstd, u, sync);
}
static void bn_bwd_sync(void *c, Map z, const float *g, const float *mean, const float *invstd, Map du, Map dz,
                        float *dg, float *db, const BnSync *sync) {
    bn_backward_sync_cpu(z, g, mean, invstd, du, dz, dg, db, sync);
}

// ---- what a trainer needs from a device: on the CPU, host memory and the reference loss and optimizers ----

static int device_list(GpuInfo *out, int max) { return 0; }
static int device_id(void *c) { return -1; }
static void device_close(void *c) {}
static double *scalars(void *c) { return NULL; }              // the trainer's own host block
static float *buffer_new(void *c, size_t n) { return xcalloc(n, sizeof(float)); }
static void buffer_free(void *c, float *p) { free(p); }
static void prefetch_u8(void *c, const uint8_t *host, size_t n) {}   // the step converts the bytes
static void prefetch_aug(void *c, const AugSample *s, int n) {}     // the step makes the pixels
static int decodes_jpeg(void *c) { return 0; }                      // the loader's workers decode
static size_t mem_used(void *c) { return 0; }
static int usable(void *c) { return 1; }
static int check(void *c, char *msg, size_t size) { return 0; }
static void inject_fault(void *c, int kind) {}

// The detection loss: the reference's work, and the items of its last compute (host memory: ready at once).
typedef struct { LossWork *lw; LossOut out; } LossCpu;
static void *cpu_loss_new(void *c, int max_n, int max_targets, int nc, int anchors) {
    LossCpu *w = xcalloc(1, sizeof *w);
    w->lw = loss_work_new();                       // sizes itself on each batch
    return w;
}
static void cpu_loss_free(void *c, void *p) {
    LossCpu *w = p;
    if (w) loss_work_free(w->lw);
    free(w);
}
static int cpu_loss_assign(void *c, void *p, const LossBatch *b, double *tss, Err *err) {
    return loss_assign(((LossCpu *)p)->lw, b, tss, err);
}
static void cpu_loss_compute(void *c, void *p, const LossBatch *b, const double *norm, double batch_mult,
                             Map grad[LOSS_LEVELS]) {
    LossCpu *w = p;
    memset(&w->out, 0, sizeof w->out);
    loss_compute(w->lw, b, *norm, batch_mult, grad, &w->out);
}
static void cpu_loss_items(void *c, void *p, double batch_mult, LossOut *out) { *out = ((LossCpu *)p)->out; }

typedef struct { Loss26Work *lw; Loss26Out out; } Loss26Cpu;
static void *cpu_loss26_new(void *c, int max_n, int max_targets, int nc, int anchors) {
    Loss26Cpu *w = xcalloc(1, sizeof *w);
    w->lw = loss26_work_new();
    return w;
}
static void cpu_loss26_free(void *c, void *p) {
    Loss26Cpu *w = p;
    if (w) loss26_work_free(w->lw);
    free(w);
}
static int cpu_loss26_assign(void *c, void *p, const Loss26Batch *b, double *const tss[L26_BRANCHES], Err *err) {
    double s[L26_BRANCHES] = { 0, 0 };
    int rc = loss26_assign(((Loss26Cpu *)p)->lw, b, s, err);
    for (int br = 0; br < L26_BRANCHES; br++)
        if (tss && tss[br]) *tss[br] = s[br];
    return rc;
}
static void cpu_loss26_compute(void *c, void *p, const Loss26Batch *b, const Loss26Weights *wt,
                               const double *const norm[L26_BRANCHES], double batch_mult,
                               const Head26 *grad[L26_BRANCHES]) {
    Loss26Cpu *w = p;
    double nrm[L26_BRANCHES];
    for (int br = 0; br < L26_BRANCHES; br++) nrm[br] = *norm[br];
    memset(&w->out, 0, sizeof w->out);
    loss26_compute(w->lw, b, wt, nrm, batch_mult, grad, &w->out);
}
static void cpu_loss26_items(void *c, void *p, const Loss26Weights *wt, double batch_mult, Loss26Out *out) {
    *out = ((Loss26Cpu *)p)->out;
}

// YOLO26's optimizers: the reference's, their state lent from one block (MuSGD [s | m: Muon params
// only], AdamW [m | v]) so checkpoints save it as one tensor.
typedef struct { int adamw; MuSgd mu; AdamW adam; float *state; } Opt26Cpu;
static void lend(float **own, float *part) { free(*own); *own = part; }   // the optimizers allocate their own
static void *cpu_opt26_new(void *c, MuParam *p, int n, int adamw, double muon, double sgd, float **state) {
    Opt26Cpu *o = xcalloc(1, sizeof *o);
    size_t n_all = 0, n_muon = 0;
    for (int k = 0; k < n; k++) {
        n_all += p[k].n;
        if (p[k].group >= MU_MUON_HI) n_muon += p[k].n;
    }
    size_t n_opt = adamw ? 2 * n_all : n_all + n_muon;
    o->adamw = adamw;
    o->state = xcalloc(n_opt ? n_opt : 1, sizeof(float));
    if (adamw) {
        adamw_init(&o->adam, p, n);
        o->adam.l2 = adamw == OPT26_KIND_ADAM;
        lend(&o->adam.m, o->state);
        lend(&o->adam.v, o->state + n_all);
    } else {                                       // SGD is MuSGD without Muon groups: torch's SGD, nesterov
        musgd_init(&o->mu, p, n, muon, sgd);
        lend(&o->mu.s, o->state);
        lend(&o->mu.m, o->state + n_all);
    }
    *state = o->state;
    return o;
}
static void cpu_opt26_step(void *c, void *p, const MuStep *st, long steps) {
    Opt26Cpu *o = p;
    if (o->adamw) {
        o->adam.steps = steps;                     // the checkpointed step count drives the bias correction
        adamw_step(&o->adam, st);
    } else {
        musgd_step(&o->mu, st);
    }
}
static void cpu_opt26_free(void *c, void *p) {
    Opt26Cpu *o = p;
    if (!o) return;
    o->mu.m = o->mu.s = o->adam.m = o->adam.v = NULL;   // lent from the block
    musgd_free(&o->mu);
    adamw_free(&o->adam);
    free(o->state);
    free(o);
}

// The CPU states only what it implements: no fused forms (the executor composes them from these ops),
// recordings or device-side sums between processes.
const Backend backend_cpu = {
    .name = "cpu",
    .ops = {
        .conv_forward = conv_fwd, .conv_backward = conv_bwd,
        .bn_forward_train = bn_train, .bn_forward_eval = bn_eval, .bn_backward = bn_bwd, .bn_apply = bn_apply,
        .bn_frozen_stats = bn_frozen_stats, .bn_frozen_backward = bn_frozen_bwd,
        .bn_forward_train_sync = bn_train_sync, .bn_backward_sync = bn_bwd_sync,
        .silu_forward = silu_fwd, .silu_backward = silu_bwd, .add_forward = add_fwd,
        .copy_map = copy, .accumulate_map = accumulate,
        .maxpool_forward = maxpool_fwd, .maxpool_backward = maxpool_bwd,
        .avgpool_forward = avgpool_fwd, .avgpool_backward = avgpool_bwd,
        .upsample_forward = upsample_fwd, .upsample_backward = upsample_bwd, .resize_bilinear = resize_fwd,
        .dwconv_forward = dw_fwd, .dwconv_backward = dw_bwd, .attn_forward = attn_fwd, .attn_backward = attn_bwd,
    },
    .dev = {
        .sync = sync, .bind = bind, .pull = pull, .zero = zero, .upload = upload, .upload_u8 = upload_u8, .augment = augment,
        .augment_batch = augment_batch,
        .download = download,
        .event_new = event_new, .event_free = event_free, .event_record = event_record, .event_wait = event_wait,
        .timer_new = timer_new, .timer_free = timer_free, .timer_record = timer_record,
        .timer_seconds = timer_seconds,
        .device_list = device_list, .device_id = device_id, .device_close = device_close, .scalars = scalars,
        .buffer_new = buffer_new, .buffer_free = buffer_free, .prefetch_u8 = prefetch_u8, .prefetch_aug = prefetch_aug,
        .decodes_jpeg = decodes_jpeg,
        .mem_used = mem_used,
        .usable = usable, .check = check, .inject_fault = inject_fault,
    },
    .loss = {
        .loss_new = cpu_loss_new, .loss_free = cpu_loss_free, .loss_assign = cpu_loss_assign,
        .loss_compute = cpu_loss_compute, .loss_items = cpu_loss_items,
        .loss26_new = cpu_loss26_new, .loss26_free = cpu_loss26_free, .loss26_assign = cpu_loss26_assign,
        .loss26_compute = cpu_loss26_compute, .loss26_items = cpu_loss26_items,
        .loss_norm = loss_norm,
    },
    .optim = {
        .optim_prepare = prepare, .grad_sumsq = sumsq, .grad_scale = scale, .sgd_apply = sgd,
        .grad_sumsq_to = sumsq_to, .grad_clip = clip, .ema_update = ema, .scale = scale_n,
        .opt26_new = cpu_opt26_new, .opt26_step = cpu_opt26_step, .opt26_free = cpu_opt26_free,
    },
    .val = {
        .nms_prepare = nms_prepare, .nms_release = nms_release, .nms_detect = nms_detect,
        .topk_prepare = topk_prepare, .topk_release = topk_release, .topk_detect = topk_detect,
        .vloss_prepare = vloss_prepare, .vloss_release = vloss_release, .vloss_stage = vloss_stage,
        .vloss_eval = vloss_eval, .vloss_eval26 = vloss_eval26,
    },
    .comm = { .comm_sum_begin = comm_sum_begin, .comm_sum_end = comm_sum_end },
};
