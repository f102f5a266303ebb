// model_run.c: runs the model's node list on its backend (the CPU reference ops or the CUDA twins),
// forward (training or evaluation BN; a unit with bn_frozen keeps evaluation BN in training, its
// running statistics saved as the batch ones would be) and backward. Backward recomputes each BN output and its SiLU from the stored pre-BN map z instead of
// keeping them (less activation memory); under the CPU's checkpointing plan it also runs the writers of the
// values not kept again (replay_at). Every gradient accumulates (+=), so slices and values read
// by several nodes just work.
#include <string.h>

#include "core/spec/backend.h"
#include "core/spec/model.h"

static const float BN_EPS = 1e-3f, BN_MOMENTUM = 0.03f;

// Value v in an arena where its owner (itself, or the value it is a slice of) starts at `base`;
// bf16: stored as the owner's storage plan says (activations: Value.bf16; gradients: Model.grad_bf16).
static Map arena_view(const Model *m, float *base, int v, int n, int bf16) {
    const Value *val = &m->values[v];
    const Value *own = &m->values[val->parent < 0 ? v : val->parent];
    float *data = bf16 ? (float *)((uint16_t *)base + val->c0) : base + val->c0;
    Map x = { data, n, m->vh[v], m->vw[v], val->C, own->C, bf16, 0 };
    return x;
}

static int owner_of(const Model *m, int v) { return m->values[v].parent < 0 ? v : m->values[v].parent; }

Map model_value(const Model *m, int v, int n) {
    const Value *own = &m->values[owner_of(m, v)];
    return arena_view(m, m->act + own->offset, v, n, own->bf16);
}
Map model_grad(const Model *m, int v, int n) {
    int o = owner_of(m, v);
    return arena_view(m, m->dact + m->grad_offset[o], v, n, m->grad_bf16 && m->grad_bf16[o]);
}

// Zero the gradients whose life starts at backward time t (core/spec/grad_plan.c).
static void zero_grads_from(Model *m, int t, int n) {
    for (int k = m->zero_first[t + 1]; k < m->zero_first[t + 2]; k++) {
        Map g = model_grad(m, m->zero_list[k], n);
        if (g.bf16) die("zero_grads_from: value %d's gradient is bf16 and planned for zeroing", m->zero_list[k]);
        m->be->dev.zero(m->be_ctx, g.data, map_floats(g));
    }
}

static float *P(const Model *m, int i) { return i < 0 ? NULL : m->state + m->params[i].offset; }
static float *G(const Model *m, int i) { return i < 0 ? NULL : m->grad + m->params[i].offset; }

static ConvDims unit_dims(const Model *m, const ConvUnit *u, int in, int n) {
    return conv_dims(n, u->d.C, m->vh[in], m->vw[in], u->d.K, u->d.R, u->d.stride, u->d.pad, u->d.groups);
}

// z (pre-BN conv output) of a unit, contiguous (N,P,Q,K): stored, or in its recompute buffer
static Map unit_z(const Model *m, const ConvUnit *u, const ConvDims *d) {
    Map z = map_make(u->z_recompute ? m->zre[u->z_recompute - 1] : m->act + u->z, d->N, d->P, d->Q, d->K);
    z.bf16 = u->z_bf16;
    return z;
}

// A depthwise unit's dims for the depthwise ops, from the unit's.
static DwDims unit_dw(const ConvDims *d) { return dw_dims(d->N, d->C, d->H, d->W, d->R, d->stride); }

static void unit_conv(Model *m, const ConvUnit *cu, const ConvDims *d, Map x, const float *b, Map y) {
    if (!unit_is_dw(cu)) { m->be->ops.conv_forward(m->be_ctx, d, x, P(m, cu->w), b, y, m->ws); return; }
    DwDims dd = unit_dw(d);
    m->be->ops.dwconv_forward(m->be_ctx, &dd, x, P(m, cu->w), b, y);
}

// A unit whose training BN takes the whole batch's statistics across devices (Model.bn_sync): the backend's
// fused forms, which make their own sums, step aside for it.
static int unit_bn_synced(const Model *m, const ConvUnit *cu) { return m->bn_sync && cu->bn_w >= 0 && !cu->bn_frozen; }

static BnTrain unit_bn_train(Model *m, const ConvUnit *cu) {
    float *mean = m->stats + cu->stats;
    return (BnTrain){ P(m, cu->bn_w), P(m, cu->bn_b), P(m, cu->bn_mean), P(m, cu->bn_var), mean, mean + cu->d.K };
}

// conv, then BN (train or eval) into out; without BN the conv (with bias) writes out directly. act: SiLU
// follows, in the backend's fused unit form where it has one (Backend.unit), else composed here: BN into
// out (into fp32 scratch when out is bf16, so the SiLU rounds once), then the SiLU; returns whether it was
// applied (else the caller applies it).
static int unit_forward(Model *m, const ConvUnit *cu, int in, Map out, int n, int train, int act) {
    ConvDims d = unit_dims(m, cu, in, n);
    Map x = model_value(m, in, n);
    const Backend *be = m->be;
    if (cu->bn_w < 0) { unit_conv(m, cu, &d, x, P(m, cu->b), out); return 0; }
    Map z = unit_z(m, cu, &d);
    int synced = train && unit_bn_synced(m, cu);
    if (train && act && unit_bn_trains(cu) && !synced && be->unit.conv_bn_silu_forward_train) {
        BnTrain b = unit_bn_train(m, cu);   // the conv and its BN + SiLU in the backend's one form
        be->unit.conv_bn_silu_forward_train(m->be_ctx, &d, x, P(m, cu->w), z, &b, BN_EPS, BN_MOMENTUM, out, m->ws);
        return 1;
    }
    unit_conv(m, cu, &d, x, NULL, z);
    if (!train && act && be->unit.bn_silu_forward_eval) {   // one pass; a bf16 output is rounded once
        be->unit.bn_silu_forward_eval(m->be_ctx, z, P(m, cu->bn_w), P(m, cu->bn_b), BN_EPS, P(m, cu->bn_mean),
                                      P(m, cu->bn_var), out);
        return 1;
    }
    float *mean = m->stats + cu->stats, *invstd = mean + d.K;
    if (train && act && !cu->bn_frozen && !synced && be->unit.bn_silu_forward_train) {
        be->unit.bn_silu_forward_train(m->be_ctx, z, P(m, cu->bn_w), P(m, cu->bn_b), BN_EPS, BN_MOMENTUM,
                                       P(m, cu->bn_mean), P(m, cu->bn_var), mean, invstd, out);
        return 1;
    }
    int scratch = act && (out.bf16 || (train && cu->bn_frozen));   // a frozen unit's u: tmp_a, as before
    Map u = scratch ? map_make(m->tmp_a, out.N, out.H, out.W, out.C) : out;
    if (!train) {
        be->ops.bn_forward_eval(m->be_ctx, z, P(m, cu->bn_w), P(m, cu->bn_b), BN_EPS, P(m, cu->bn_mean),
                                P(m, cu->bn_var), u);
    } else if (cu->bn_frozen) {   // BatchNorm.eval() in training: the running statistics, left as they are
        be->ops.bn_frozen_stats(m->be_ctx, d.K, P(m, cu->bn_mean), P(m, cu->bn_var), BN_EPS, mean, invstd);
        be->ops.bn_apply(m->be_ctx, z, P(m, cu->bn_w), P(m, cu->bn_b), mean, invstd, u);   // as bn_recompute
    } else if (synced) {
        be->ops.bn_forward_train_sync(m->be_ctx, z, P(m, cu->bn_w), P(m, cu->bn_b), BN_EPS, BN_MOMENTUM,
                                      P(m, cu->bn_mean), P(m, cu->bn_var), mean, invstd, u, m->bn_sync);
    } else {
        be->ops.bn_forward_train(m->be_ctx, z, P(m, cu->bn_w), P(m, cu->bn_b), BN_EPS, BN_MOMENTUM,
                                 P(m, cu->bn_mean), P(m, cu->bn_var), mean, invstd, u);
    }
    if (!act) return 0;
    be->ops.silu_forward(m->be_ctx, u, out);
    return 1;
}

// A RepConv in training with the backend's fused form: both convs, then y = silu(BN1(z1) + BN2(z2)) (u and
// tmp are the backend's). Returns 0 (nothing done) where the backend or the units do not allow it.
static int repconv_forward_fused(Model *m, const Node *nd, Map u, Map tmp, Map y, int n) {
    const ConvUnit *c1 = &nd->cv, *c2 = &nd->cv2;
    if (!m->be->fused.repconv_forward_train || !unit_bn_trains(c1) || !unit_bn_trains(c2) || m->bn_sync) return 0;
    ConvDims d1 = unit_dims(m, c1, nd->in, n), d2 = unit_dims(m, c2, nd->in, n);
    Map x = model_value(m, nd->in, n), z1 = unit_z(m, c1, &d1), z2 = unit_z(m, c2, &d2);
    unit_conv(m, c1, &d1, x, NULL, z1);
    unit_conv(m, c2, &d2, x, NULL, z2);
    BnTrain b1 = unit_bn_train(m, c1), b2 = unit_bn_train(m, c2);
    m->be->fused.repconv_forward_train(m->be_ctx, z1, &b1, z2, &b2, BN_EPS, BN_MOMENTUM, u, tmp, y);
    return 1;
}

// u = (z - mean) * invstd * gamma + beta with the batch statistics saved by the forward
static void bn_recompute(const Model *m, const ConvUnit *cu, Map z, Map u) {
    const float *mean = m->stats + cu->stats;
    m->be->ops.bn_apply(m->be_ctx, z, P(m, cu->bn_w), P(m, cu->bn_b), mean, mean + z.C, u);
}

// Whether unit_backward may take a unit's BN and conv to the backend's conv_bn_backward
static int unit_conv_bn(const Model *m, const ConvUnit *cu) { return unit_bn_trains(cu) && cu->b < 0 && !m->bn_sync; }

// A unit's BN parameters, the statistics its forward saved, and its parameter gradients (+=)
static BnSaved unit_bn_saved(Model *m, const ConvUnit *cu) {
    const float *mean = m->stats + cu->stats;
    return (BnSaved){ P(m, cu->bn_w), P(m, cu->bn_b), mean, mean + cu->d.K, G(m, cu->bn_w), G(m, cu->bn_b) };
}

// Backward of one conv unit given du (gradient at the BN output, or at the conv output without BN).
static void unit_backward(Model *m, const ConvUnit *cu, int in, Map du, int n, int fresh) {
    ConvDims d = unit_dims(m, cu, in, n);
    Map x = model_value(m, in, n), dx = model_grad(m, in, n), dz = du;
    if (m->values[in].no_grad) dx.data = NULL;   // no gradient for the images or detached features
    dx.fresh = fresh;                             // the first write into an unzeroed buffer (grad_plan.c)
    if (unit_conv_bn(m, cu) && m->be->unit.conv_bn_backward) {   // BN + conv, fused by the backend
        Map z = unit_z(m, cu, &d);
        BnSaved bn = unit_bn_saved(m, cu);
        m->be->unit.conv_bn_backward(m->be_ctx, &d, x, P(m, cu->w), z, &bn, du, map_make(m->tmp_b, d.N, d.P, d.Q, d.K), dx,
                                G(m, cu->w), m->ws);
        return;
    }
    if (cu->bn_w >= 0) {
        Map z = unit_z(m, cu, &d);
        dz = map_make(m->tmp_b, d.N, d.P, d.Q, d.K);
        const float *mean = m->stats + cu->stats;
        if (cu->bn_frozen)   // the statistics are constants: no batch-mean terms
            m->be->ops.bn_frozen_backward(m->be_ctx, z, P(m, cu->bn_w), mean, mean + d.K, du, dz, G(m, cu->bn_w),
                                      G(m, cu->bn_b));
        else if (m->bn_sync)
            m->be->ops.bn_backward_sync(m->be_ctx, z, P(m, cu->bn_w), mean, mean + d.K, du, dz, G(m, cu->bn_w),
                                        G(m, cu->bn_b), m->bn_sync);
        else
            m->be->ops.bn_backward(m->be_ctx, z, P(m, cu->bn_w), mean, mean + d.K, du, dz, G(m, cu->bn_w),
                               G(m, cu->bn_b));
    }
    if (unit_is_dw(cu)) {
        DwDims dd = unit_dw(&d);
        m->be->ops.dwconv_backward(m->be_ctx, &dd, x, P(m, cu->w), dz, dx, G(m, cu->w), G(m, cu->b));
        return;
    }
    m->be->ops.conv_backward(m->be_ctx, &d, x, P(m, cu->w), dz, dx, G(m, cu->w), G(m, cu->b), m->ws);
}

// A RepConv's two branches' backward from du (the gradient at the sum of their BNs) in one backend call, as
// unit_backward twice; 0 (nothing done) where the backend or the units do not allow it.
static int repconv_backward_fused(Model *m, const Node *nd, Map du, int n, int fresh) {
    const ConvUnit *c1 = &nd->cv, *c2 = &nd->cv2;
    if (!m->be->fused.repconv_bn_backward || !unit_conv_bn(m, c1) || !unit_conv_bn(m, c2)) return 0;
    ConvDims d1 = unit_dims(m, c1, nd->in, n), d2 = unit_dims(m, c2, nd->in, n);
    Map x = model_value(m, nd->in, n), dx1 = model_grad(m, nd->in, n);
    if (m->values[nd->in].no_grad) dx1.data = NULL;
    Map dx2 = dx1;
    dx1.fresh = fresh & FRESH_IN, dx2.fresh = fresh & FRESH_IN_CV2;   // as unit_backward's
    BnSaved b1 = unit_bn_saved(m, c1), b2 = unit_bn_saved(m, c2);
    m->be->fused.repconv_bn_backward(m->be_ctx, &d1, P(m, c1->w), unit_z(m, c1, &d1), &b1, G(m, c1->w), dx1, &d2, P(m, c2->w),
                               unit_z(m, c2, &d2), &b2, G(m, c2->w), dx2, x, du, map_make(m->tmp_b, n, d1.P, d1.Q, d1.K),
                               m->ws);
    return 1;
}

// Backward of a conv + BN + SiLU unit from dy at the SiLU output, fused by the backend (tmp_a and
// tmp_b are its scratch for du and dz); without the fused form, node_backward composes it: act_grad,
// then unit_backward.
static void unit_backward_silu(Model *m, const ConvUnit *cu, int in, Map dy, int n, int fresh) {
    ConvDims d = unit_dims(m, cu, in, n);
    Map x = model_value(m, in, n), dx = model_grad(m, in, n), z = unit_z(m, cu, &d);
    if (m->values[in].no_grad) dx.data = NULL;   // no gradient for the images or detached features
    dx.fresh = fresh;
    BnSaved bn = unit_bn_saved(m, cu);
    m->be->unit.conv_bn_silu_backward(m->be_ctx, &d, x, P(m, cu->w), z, &bn, dy, map_make(m->tmp_a, d.N, d.P, d.Q, d.K),
                                      map_make(m->tmp_b, d.N, d.P, d.Q, d.K), dx, G(m, cu->w), m->ws);
}

// Profiling (m->prof set): wait for the backend around each node and add its time.
static double prof_start(Model *m) {
    if (!m->prof) return 0;
    m->be->dev.sync(m->be_ctx);
    return now_seconds();
}

static void prof_stop(Model *m, int node, int backward, double t0) {
    if (!m->prof) return;
    m->be->dev.sync(m->be_ctx);
    m->prof[2 * node + backward] += now_seconds() - t0;
}

// The attention's dims for a batch of n qkv maps x
static AttnDims attn_run_dims(const Node *nd, Map x, int n) {
    AttnDims ad = nd->attn;
    ad.N = n; ad.H = x.H; ad.W = x.W;
    return ad;
}

static void node_forward(Model *m, const Node *nd, int n, int train) {
    const Backend *be = m->be;
    void *ctx = m->be_ctx;
    Map x = model_value(m, nd->in, n), y = model_value(m, nd->out, n);
    {
        switch (nd->op) {
        case OP_CONV:
            if (!unit_forward(m, &nd->cv, nd->in, y, n, train, nd->act) && nd->act) be->ops.silu_forward(ctx, y, y);
            break;
        case OP_REPCONV: {   // the sum in fp32 (tmp_b when y is bf16), rounded once by the SiLU
            Map t = map_make(m->tmp_a, n, y.H, y.W, y.C), u = y.bf16 ? map_make(m->tmp_b, n, y.H, y.W, y.C) : y;
            if (train && repconv_forward_fused(m, nd, u, t, y, n)) break;
            unit_forward(m, &nd->cv, nd->in, u, n, train, 0);
            unit_forward(m, &nd->cv2, nd->in, t, n, train, 0);
            be->ops.accumulate_map(ctx, t, u);
            be->ops.silu_forward(ctx, u, y);
            break;
        }
        case OP_MAXPOOL:  be->ops.maxpool_forward(ctx, x, nd->k, nd->stride, nd->pad, y); break;
        case OP_AVGPOOL:  be->ops.avgpool_forward(ctx, x, nd->k, nd->stride, nd->pad, y); break;
        case OP_UPSAMPLE: be->ops.upsample_forward(ctx, x, nd->k, y); break;
        case OP_COPY:     be->ops.copy_map(ctx, x, y); break;
        case OP_ADD:      be->ops.add_forward(ctx, x, model_value(m, nd->in2, n), y); break;
        case OP_DETACH:   be->ops.copy_map(ctx, x, y); break;
        case OP_ATTN: {
            AttnDims ad = attn_run_dims(nd, x, n);
            be->ops.attn_forward(ctx, &ad, x, y, model_value(m, nd->out2, n), m->act + nd->probs);
            break;
        }
        }
    }
}

// ---- recorded passes ---------------------------------------------------------------------------
// A backend that records (Backend.dev.rec_*: CUDA Graphs) replays a training step's forward and backward:
// the same kernels with the same arguments, so the same bits, queued with one call instead of
// thousands. A shape (n, h, w) runs directly the first time (cuDNN and cuBLAS make their plans then),
// is recorded the second time and replayed from then on; its pointers (weights, arenas, scratch) are
// fixed by the memory plan. Evaluation forwards (validation's chunks, each rect shape its own) are
// recorded as a kind of their own in slots of their own (MODEL_RECS_EVAL), so neither crowds out the
// other: rect and multi_scale training fill training's. Not recorded: the profiler's per-node timing, and a backward with a hook that
// waits (several devices exchange gradient buckets while it runs); one whose hook only queues work (one
// GPU of several processes begins each bucket's sum over NCCL from it) is recorded as a kind of its own,
// beside the same shape's backward without it (the steps that accumulate without summing).
enum { REC_FORWARD, REC_BACKWARD, REC_EVAL, REC_BACKWARD_HOOKED };
enum { REC_FREE, REC_SEEN, REC_READY, REC_NEVER };

// The recording of (kind, n, h, w), or NULL when the shape is new; a new shape takes a free slot
// marked seen, if its group (training or evaluation) has one left.
static ModelRecording *rec_find(Model *m, int kind, int n) {
    int h = m->vh[m->input], w = m->vw[m->input];
    for (int i = 0; i < MODEL_RECS; i++) {
        ModelRecording *r = &m->recs[i];
        if (r->state != REC_FREE && r->kind == kind && r->n == n && r->h == h && r->w == w) return r;
    }
    int same = 0;                                  // slots of kind's group in use
    for (int i = 0; i < MODEL_RECS; i++) same += m->recs[i].state != REC_FREE && (m->recs[i].kind == REC_EVAL) == (kind == REC_EVAL);
    if (same >= (kind == REC_EVAL ? MODEL_RECS_EVAL : MODEL_RECS_TRAIN)) return NULL;
    for (int i = 0; i < MODEL_RECS; i++)
        if (m->recs[i].state == REC_FREE) { m->recs[i] = (ModelRecording){ REC_SEEN, kind, n, h, w, NULL, 0 }; break; }
    return NULL;
}

typedef void (*PassFn)(Model *m, int n);

static void run_pass(Model *m, int kind, int n, PassFn pass) {
    const Backend *be = m->be;
    if (kind == REC_BACKWARD && m->backward_hook) kind = m->hook_queues ? REC_BACKWARD_HOOKED : -1;
    if (m->bn_sync && kind != REC_EVAL) kind = -1;   // the BN sums wait on the host and the other devices
    int recordable = be->dev.rec_begin && !m->prof && kind >= 0;
    ModelRecording *r = recordable ? rec_find(m, kind, n) : NULL;
    if (r && r->state == REC_SEEN) {               // the second time: record, then replay below
        r->state = REC_NEVER;
        if (!be->dev.rec_begin(m->be_ctx)) {
            pass(m, n);
            r->rec = be->dev.rec_end(m->be_ctx, &r->launches);
            if (r->rec) r->state = REC_READY;
        }
    }
    if (r && r->state == REC_READY) be->dev.rec_replay(m->be_ctx, r->rec);
    else pass(m, n);
}

void model_drop_recordings(Model *m) {
    for (int i = 0; i < MODEL_RECS; i++) {
        if (m->recs[i].rec && m->be && m->be->dev.rec_free) m->be->dev.rec_free(m->be_ctx, m->recs[i].rec);
        m->recs[i] = (ModelRecording){ 0 };
    }
}

// Conv node c and the residual addition a after it in one: conv, then a's output = its other operand +
// silu(BN_train(z)); c's own output is not written (only a read it).
static void conv_residual_forward(Model *m, const Node *c, const Node *a, int n) {
    ConvDims d = unit_dims(m, &c->cv, c->in, n);
    Map z = unit_z(m, &c->cv, &d);
    unit_conv(m, &c->cv, &d, model_value(m, c->in, n), NULL, z);
    BnTrain b = unit_bn_train(m, &c->cv);
    Map other = model_value(m, a->in == c->out ? a->in2 : a->in, n);
    m->be->fused.bn_silu_add_forward_train(m->be_ctx, z, &b, BN_EPS, BN_MOMENTUM, other, model_value(m, c->out, n),
                                     model_value(m, a->out, n));
}

static void forward_pass(Model *m, int n, int train) {
    if (m->be->ops.prepare_weights) m->be->ops.prepare_weights(m->be_ctx, m->state, m->n_state);   // recorded with the pass
    for (int i = 0; i < m->n_nodes; i++) {
        if (!train && m->nodes[i].train_only) continue;   // the auxiliary head is for training only
        double t0 = prof_start(m);
        const Node *nd = &m->nodes[i];   // a residual pair whose conv's BN trains (not frozen): one pass
        int add = train && m->be->fused.bn_silu_add_forward_train && unit_bn_trains(&nd->cv) && !m->bn_sync
                      ? m->residual_add[i] : -1;
        if (add >= 0) conv_residual_forward(m, &m->nodes[i], &m->nodes[add], n);
        else node_forward(m, &m->nodes[i], n, train);
        prof_stop(m, i, 0, t0);
        if (add >= 0) i = add;   // done with the conv
    }
    zero_grads_from(m, -1, n);                     // the head maps' gradients, which the loss writes
}

static void forward_train(Model *m, int n) { forward_pass(m, n, 1); }
static void forward_eval(Model *m, int n) { forward_pass(m, n, 0); }

static void forward_nodes(Model *m, int n, int train) {
    if (train) {
        run_pass(m, REC_FORWARD, n, forward_train);
        m->bn_batches++;
    } else {
        run_pass(m, REC_EVAL, n, forward_eval);
    }
}

void model_forward(Model *m, const float *images, int n, int h, int w, int train) {
    model_set_size(m, h, w);
    Map in = model_value(m, m->input, n);
    if (images) m->be->dev.upload(m->be_ctx, in.data, images, map_floats(in));
    forward_nodes(m, n, train);
}

void model_forward_u8(Model *m, const uint8_t *images, int n, int h, int w, int train) {
    model_forward_u8_resized(m, images, n, h, w, h, w, train);
}

int model_resize_fits(const Model *m, int n, int H, int W) { return (size_t)n * H * W * 3 <= m->n_tmp; }

// The input from n images of H x W as floats, by the bytes' upload (images) or the device's augmentation
// (aug), resized to the model's h x w when they differ.
static void input_from(Model *m, const uint8_t *images, const AugSample *aug, int n, int H, int W, int h, int w) {
    model_set_size(m, h, w);
    Map in = model_value(m, m->input, n), raw = in;
    if (H != h || W != w) {                        // tmp_a is free until the first node runs
        if (!model_resize_fits(m, n, H, W))
            die("the model input: %d images of %dx%d do not fit the %zu floats of tmp_a", n, H, W, m->n_tmp);
        raw = map_make(m->tmp_a, n, H, W, 3);
    }
    if (aug) m->be->dev.augment_batch(m->be_ctx, aug, n, H, W, raw.data);
    else m->be->dev.upload_u8(m->be_ctx, raw.data, images, map_floats(raw));
    if (raw.data != in.data) m->be->ops.resize_bilinear(m->be_ctx, raw, in);
}

void model_forward_u8_resized(Model *m, const uint8_t *images, int n, int H, int W, int h, int w, int train) {
    input_from(m, images, NULL, n, H, W, h, w);
    forward_nodes(m, n, train);
}

void model_forward_aug(Model *m, const AugSample *aug, int n, int H, int W, int h, int w, int train) {
    input_from(m, NULL, aug, n, H, W, h, w);
    forward_nodes(m, n, train);
}

// du = dy * silu'(u) with u the recomputed pre-activation of a conv (or RepConv) node
static Map act_grad(Model *m, const Node *nd, Map dy, int n) {
    const ConvUnit *cu = &nd->cv;
    ConvDims d = unit_dims(m, cu, nd->in, n);
    Map u = map_make(m->tmp_a, n, d.P, d.Q, d.K);
    const ConvUnit *c2 = &nd->cv2;
    if (nd->op == OP_REPCONV && m->be->fused.repconv_silu_backward && cu->bn_w >= 0 && c2->bn_w >= 0) {   // one pass
        ConvDims d2 = unit_dims(m, c2, nd->in, n);
        BnSaved b1 = unit_bn_saved(m, cu), b2 = unit_bn_saved(m, c2);
        m->be->fused.repconv_silu_backward(m->be_ctx, unit_z(m, cu, &d), &b1, unit_z(m, c2, &d2), &b2,
                                     dy, map_make(m->tmp_b, n, d2.P, d2.Q, d2.K), u);
        return u;
    }
    bn_recompute(m, cu, unit_z(m, cu, &d), u);
    if (nd->op == OP_REPCONV) {
        ConvDims d2 = unit_dims(m, &nd->cv2, nd->in, n);
        Map u2 = map_make(m->tmp_b, n, d2.P, d2.Q, d2.K);
        bn_recompute(m, &nd->cv2, unit_z(m, &nd->cv2, &d2), u2);
        m->be->ops.accumulate_map(m->be_ctx, u2, u);
    }
    m->be->ops.silu_backward(m->be_ctx, u, dy, u);   // elementwise: du may alias u
    return u;
}

// A unit whose z the plan does not store (model_plan_recompute): the forward's convolution again, the same bits.
static void z_again(Model *m, const ConvUnit *cu, int in, int n) {
    if (!cu->z_recompute) return;
    ConvDims d = unit_dims(m, cu, in, n);
    unit_conv(m, cu, &d, model_value(m, in, n), NULL, unit_z(m, cu, &d));
}

static void node_backward(Model *m, const Node *nd, int n) {
    const Backend *be = m->be;
    void *ctx = m->be_ctx;
    if (nd->op == OP_DETACH) return;               // the gradient stops here
    int conv = nd->op == OP_CONV || nd->op == OP_REPCONV;
    if (m->values[nd->in].no_grad && !conv) return;  // nothing to pass back (grad_plan.c plans the same);
                                                     // convs still owe their weight gradients
    int i = (int)(nd - m->nodes), fresh = m->grad_fresh[i];   // which writes write instead of adding (grad_plan.c)
    int add = m->residual_add[i];                 // a conv whose output only this addition reads: its dy
    Map dy = model_grad(m, add >= 0 ? m->nodes[add].out : nd->out, n), x = model_value(m, nd->in, n);
    Map dx = model_grad(m, nd->in, n);
    int skip = nd->op == OP_ADD && i > 0 && m->residual_add[i - 1] == i ? m->nodes[i - 1].out : -1;
    int same = m->grad_alias[i];                  // an input whose gradient is dy's floats (grad_plan.c)
    {
        switch (nd->op) {
        case OP_CONV: case OP_REPCONV: {
            z_again(m, &nd->cv, nd->in, n);
            if (nd->op == OP_REPCONV) z_again(m, &nd->cv2, nd->in, n);
            if (!nd->act) { unit_backward(m, &nd->cv, nd->in, dy, n, fresh & FRESH_IN); break; }
            if (nd->op == OP_CONV && nd->cv.bn_w >= 0 && !unit_is_dw(&nd->cv) && !nd->cv.bn_frozen && !m->bn_sync &&
                m->be->unit.conv_bn_silu_backward) {
                unit_backward_silu(m, &nd->cv, nd->in, dy, n, fresh & FRESH_IN);
                break;
            }
            Map du = act_grad(m, nd, dy, n);      // in tmp_a; unit_backward keeps dz in tmp_b (composed: the
                                                  // same ops as the backend's fused forms, in this order)
            if (nd->op == OP_REPCONV && repconv_backward_fused(m, nd, du, n, fresh)) break;
            unit_backward(m, &nd->cv, nd->in, du, n, fresh & FRESH_IN);
            if (nd->op == OP_REPCONV) unit_backward(m, &nd->cv2, nd->in, du, n, fresh & FRESH_IN_CV2);
            break;
        }
        case OP_MAXPOOL:  be->ops.maxpool_backward(ctx, x, nd->k, nd->stride, nd->pad, dy, dx); break;
        case OP_AVGPOOL:  be->ops.avgpool_backward(ctx, nd->k, nd->stride, nd->pad, dy, dx); break;
        case OP_UPSAMPLE: be->ops.upsample_backward(ctx, nd->k, dy, dx); break;
        case OP_COPY: (fresh & FRESH_IN ? be->ops.copy_map : be->ops.accumulate_map)(ctx, dy, dx); break;
        case OP_ADD:   // not into the conv output that only it reads (skip): that conv's backward reads dy;
                       // nor into an input whose gradient dy already is (same)
            if (nd->in != skip && nd->in != same) (fresh & FRESH_IN ? be->ops.copy_map : be->ops.accumulate_map)(ctx, dy, dx);
            if (nd->in2 != skip && nd->in2 != same)
                (fresh & FRESH_IN2 ? be->ops.copy_map : be->ops.accumulate_map)(ctx, dy, model_grad(m, nd->in2, n));
            break;
        case OP_DETACH: break;
        case OP_ATTN: {
            AttnDims ad = attn_run_dims(nd, x, n);
            be->ops.attn_backward(ctx, &ad, x, m->act + nd->probs, dy, model_grad(m, nd->out2, n), dx, m->ws);
            break;
        }
        }
    }
}

// ---- the CPU's checkpointing (Value.regen, core/spec/act_plan.c) ------------------------------------
// A value the plan does not keep is computed again before the backward first reads it: its writers run their
// training forward once more, in node order, from kept values or ones run again just before. A BN normalises
// the same z with the statistics computed again by the forward's own code (the saved float statistics round
// what it used), the running statistics and the saved batch statistics untouched: the same bits. A GPU's plan
// never checkpoints (replay_first NULL).

// A unit's BN output into out, as the training forward wrote it; z computed again where it is not stored.
static void unit_replay(Model *m, const ConvUnit *cu, int in, Map out, int n) {
    ConvDims d = unit_dims(m, cu, in, n);
    Map z = unit_z(m, cu, &d);
    if (cu->z_recompute) unit_conv(m, cu, &d, model_value(m, in, n), NULL, z);
    if (unit_bn_synced(m, cu)) { bn_recompute(m, cu, z, out); return; }   // the synced forward's own formula
    m->be->ops.bn_forward_train(m->be_ctx, z, P(m, cu->bn_w), P(m, cu->bn_b), BN_EPS, BN_MOMENTUM, NULL, NULL, NULL,
                                NULL, out);
}

// node_forward's training path on the CPU (no fused forms), without touching any statistics.
static void node_replay(Model *m, const Node *nd, int n) {
    Map y = model_value(m, nd->out, n);
    switch (nd->op) {
    case OP_CONV:
        unit_replay(m, &nd->cv, nd->in, y, n);
        if (nd->act) m->be->ops.silu_forward(m->be_ctx, y, y);
        break;
    case OP_REPCONV: {
        Map t = map_make(m->tmp_a, n, y.H, y.W, y.C);
        unit_replay(m, &nd->cv, nd->in, y, n);
        unit_replay(m, &nd->cv2, nd->in, t, n);
        m->be->ops.accumulate_map(m->be_ctx, t, y);
        m->be->ops.silu_forward(m->be_ctx, y, y);
        break;
    }
    default: node_forward(m, nd, n, 1); break;   // data movement (act_plan.c replayable)
    }
}

static void replay_at(Model *m, int t, int n) {
    if (!m->replay_first) return;
    if (m->on_device) die("replay_at: checkpointing is the CPU's plan; a device's plan never asks for it");
    for (int k = m->replay_first[t]; k < m->replay_first[t + 1]; k++) node_replay(m, &m->nodes[m->replay_nodes[k]], n);
}

static void backward_pass(Model *m, int n) {
    for (int i = m->n_nodes - 1; i >= 0; i--) {
        double t0 = prof_start(m);
        replay_at(m, m->n_nodes - 1 - i, n);
        zero_grads_from(m, m->n_nodes - 1 - i, n);
        node_backward(m, &m->nodes[i], n);
        prof_stop(m, i, 1, t0);
        if (m->backward_hook) m->backward_hook(m->backward_arg, i);
    }
}

void model_backward(Model *m, int n) { run_pass(m, REC_BACKWARD, n, backward_pass); }

void model_zero_grad(Model *m) { m->be->dev.zero(m->be_ctx, m->grad, m->n_state); }
