// act_plan.c: the activation arena's layout and storage types (model.h, model_plan_storage). Under
// bf16 GEMMs every conv operand is rounded to bfloat16 anyway, so a map that only GEMMs, depthwise
// convs, BN and the data-movement ops (pools, upsample, copy, add) touch can be stored rounded: half the
// memory and half the traffic of every kernel that reads or writes it. The images, the head maps the
// loss reads, and maps that an op without bf16 support (attention, detach, a conv with a bias) reads or
// writes stay fp32. The CPU's plan (model_plan_recompute) stays fp32 and fits a memory budget instead: values
// no backward reads left unkept, then pre-BN maps recomputed, then values checkpointed.
#include <stdlib.h>
#include <string.h>

#include "core/spec/model.h"
#include "core/base/util.h"

static int owner(const Model *m, int v) { return v < 0 || m->values[v].parent < 0 ? v : m->values[v].parent; }

static int is_gemm_unit(const ConvUnit *u) { return u->w >= 0 && !unit_is_dw(u); }
static int is_conv_unit(const ConvUnit *u) { return u->w >= 0; }   // a GEMM or a depthwise conv

// Can node nd write a bf16 map to its output? Fused BN + SiLU units and RepConv (BN into fp32
// temporaries, SiLU into the output) write through the BN/SiLU kernels; the rest are elementwise.
static int writes_bf16(const Node *nd) {
    switch (nd->op) {
    case OP_CONV:    return nd->act && nd->cv.bn_w >= 0 && is_conv_unit(&nd->cv);
    case OP_REPCONV: return nd->act && is_gemm_unit(&nd->cv) && is_gemm_unit(&nd->cv2);
    case OP_MAXPOOL: case OP_AVGPOOL: case OP_UPSAMPLE: case OP_COPY: case OP_ADD: return 1;
    default:         return 0;
    }
}

// Can node nd read bf16 maps as its inputs (forward and backward)?
static int reads_bf16(const Node *nd) {
    switch (nd->op) {
    case OP_CONV:    return is_conv_unit(&nd->cv);
    case OP_REPCONV: return is_gemm_unit(&nd->cv) && is_gemm_unit(&nd->cv2);
    case OP_MAXPOOL: case OP_AVGPOOL: case OP_UPSAMPLE: case OP_COPY: case OP_ADD: return 1;
    default:         return 0;
    }
}

// Which owned buffers may be bf16: none read by the loss or the input; every writer and reader able.
static void choose_values(Model *m, int bf16) {
    for (int v = 0; v < m->n_values; v++) m->values[v].bf16 = bf16 && m->values[v].parent < 0;
    if (!bf16) return;
    m->values[owner(m, m->input)].bf16 = 0;
    for (int l = 0; l < m->n_levels; l++) {
        m->values[owner(m, m->head[l])].bf16 = 0;
        if (l < m->n_aux) m->values[owner(m, m->aux[l])].bf16 = 0;
    }
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        if (!writes_bf16(nd)) {
            m->values[owner(m, nd->out)].bf16 = 0;
            if (nd->out2 >= 0) m->values[owner(m, nd->out2)].bf16 = 0;
        }
        if (!reads_bf16(nd)) {
            m->values[owner(m, nd->in)].bf16 = 0;
            if (nd->in2 >= 0) m->values[owner(m, nd->in2)].bf16 = 0;
        }
    }
    for (int v = 0; v < m->n_values; v++)          // slices mirror their owner
        if (m->values[v].parent >= 0) m->values[v].bf16 = m->values[m->values[v].parent].bf16;
}

// floats a buffer of n elements takes, 64-byte aligned
static size_t room(size_t n, int half) { return ((half ? (n + 1) / 2 : n) + 15) & ~(size_t)15; }

// ---- the CPU's checkpointing: values the backward computes again (Value.regen) ----------------------
// A checkpointed value lives in a shared region while the forward needs it (its first writer to its last
// reader) and, where the backward reads it, again from the backward time its writers run once more (the
// first backward time that reads it) to the last: the region packs them so that no two whose lives cross
// share floats. A node's backward reads its input where it is a conv, a pool's argmax or the attention.

static int reads_x_backward(const Node *nd) {
    return nd->op == OP_CONV || nd->op == OP_REPCONV || nd->op == OP_MAXPOOL || nd->op == OP_ATTN;
}

// Whether the backward may run node nd's training forward again to the same bits: a BN in training (its
// normalisation again from the same z, running statistics untouched) or stateless data movement.
static int replayable(const Node *nd) {
    switch (nd->op) {
    case OP_CONV:    return nd->cv.bn_w >= 0 && !nd->cv.bn_frozen;
    case OP_REPCONV: return nd->cv.bn_w >= 0 && !nd->cv.bn_frozen && nd->cv2.bn_w >= 0 && !nd->cv2.bn_frozen;
    case OP_MAXPOOL: case OP_AVGPOOL: case OP_UPSAMPLE: case OP_COPY: case OP_ADD: return 1;
    default:         return 0;
    }
}

typedef struct { int fs, fe, bs, be, base_bs, base_be; size_t floats, at; } Life;   // forward nodes, backward times

// Whether node i, a writer of a checkpointed value run again at backward time *t, reads checkpointed value x
// (its input k): then x must be there at *t.
static int replay_reads(const Model *m, const Life *L, int i, int k, int *x, int *t) {
    const Node *nd = &m->nodes[i];
    int o = owner(m, nd->out);
    *t = L[o].bs;
    *x = owner(m, k ? nd->in2 : nd->in);
    return m->values[o].regen && *t >= 0 && *x >= 0 && m->values[*x].regen;
}

// The backward times of each checkpointed value: those of the nodes reading it, and those at which the
// values whose writers read it run again. Its first time is a fixed point (it only moves earlier); its last
// follows from the first times found.
static void backward_lives(const Model *m, Life *L) {
    int x, t;
    for (int v = 0; v < m->n_values; v++) L[v].bs = L[v].base_bs, L[v].be = L[v].base_be;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < m->n_nodes; i++)
            for (int k = 0; k < 2; k++)
                if (replay_reads(m, L, i, k, &x, &t) && (L[x].bs < 0 || t < L[x].bs)) L[x].bs = t, changed = 1;
    }
    for (int i = 0; i < m->n_nodes; i++)
        for (int k = 0; k < 2; k++)
            if (replay_reads(m, L, i, k, &x, &t) && t > L[x].be) L[x].be = t;
}

static Life *lives(const Model *m) {
    Life *L = xcalloc(m->n_values, sizeof *L);
    for (int v = 0; v < m->n_values; v++) {
        L[v] = (Life){ m->n_nodes, -1, -1, -1, -1, -1, 0, 0 };
        if (m->values[v].parent < 0) L[v].floats = room((size_t)m->max_n * m->vh[v] * m->vw[v] * m->values[v].C, 0);
    }
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        int ins[2] = { owner(m, nd->in), owner(m, nd->in2) }, outs[2] = { owner(m, nd->out), owner(m, nd->out2) };
        for (int k = 0; k < 2; k++) {
            if (outs[k] >= 0 && i < L[outs[k]].fs) L[outs[k]].fs = i;
            if (outs[k] >= 0 && i > L[outs[k]].fe) L[outs[k]].fe = i;
            if (ins[k] >= 0 && i > L[ins[k]].fe) L[ins[k]].fe = i;
        }
        int t = m->n_nodes - 1 - i, x = ins[0];
        if (!reads_x_backward(nd) || x < 0) continue;
        if (L[x].base_bs < 0 || t < L[x].base_bs) L[x].base_bs = t;
        if (t > L[x].base_be) L[x].base_be = t;
    }
    backward_lives(m, L);
    return L;
}

static int cross(const Life *a, const Life *b) {
    if (a->fs <= b->fe && b->fs <= a->fe) return 1;
    return a->bs >= 0 && b->bs >= 0 && a->bs <= b->be && b->bs <= a->be;
}

typedef struct { size_t floats; int v; } Sized;

static int by_floats_desc(const void *a, const void *b) {   // ties: value order
    const Sized *x = a, *y = b;
    if (x->floats != y->floats) return x->floats > y->floats ? -1 : 1;
    return x->v - y->v;
}

typedef struct { size_t at, end; } Span;

static int by_at(const void *a, const void *b) {
    const Span *x = a, *y = b;
    return (x->at > y->at) - (x->at < y->at);
}

// First fit, the largest first: the lowest offset where the k-th value crosses no placed value's floats.
static void place(Life *L, const int *order, int k, Span *busy) {
    Life *a = &L[order[k]];
    int nb = 0;
    for (int j = 0; j < k; j++)
        if (cross(a, &L[order[j]])) busy[nb++] = (Span){ L[order[j]].at, L[order[j]].at + L[order[j]].floats };
    qsort(busy, nb, sizeof *busy, by_at);
    a->at = 0;
    for (int j = 0; j < nb && busy[j].at < a->at + a->floats; j++)
        if (busy[j].end > a->at) a->at = busy[j].end;
}

// The replay lists: at backward time T, the writers of the values whose backward life starts at T, in node order.
static void replay_lists(Model *m, const Life *L) {
    free(m->replay_first); free(m->replay_nodes);
    int n = m->n_nodes, k = 0;
    m->replay_first = xcalloc(n + 1, sizeof(int));
    m->replay_nodes = xcalloc(n + 1, sizeof(int));
    for (int t = 0; t < n; t++) {
        m->replay_first[t] = k;
        for (int i = 0; i < n; i++) {
            int o = owner(m, m->nodes[i].out);
            if (m->values[o].regen && L[o].bs == t) m->replay_nodes[k++] = i;
        }
    }
    m->replay_first[n] = k;
}

// The region of the checkpointed values after the arena's first `base` floats; its size in floats.
static size_t regen_layout(Model *m, size_t base, int assign) {
    Life *L = lives(m);
    int *order = xmalloc(m->n_values * sizeof *order), k = 0;
    Sized *sized = xmalloc((m->n_values + 1) * sizeof *sized);   // qsort (C11), not GNU's qsort_r
    for (int v = 0; v < m->n_values; v++)
        if (m->values[v].parent < 0 && m->values[v].regen) sized[k++] = (Sized){ L[v].floats, v };
    qsort(sized, k, sizeof *sized, by_floats_desc);
    for (int j = 0; j < k; j++) order[j] = sized[j].v;
    free(sized);
    size_t size = 0;
    Span *busy = xmalloc((k + 1) * sizeof *busy);
    for (int j = 0; j < k; j++) {
        place(L, order, j, busy);
        Life *a = &L[order[j]];
        if (a->at + a->floats > size) size = a->at + a->floats;
        if (assign) m->values[order[j]].offset = base + a->at;
    }
    if (assign) replay_lists(m, L);
    free(busy);
    free(order);
    free(L);
    return size;
}

// Lay out the arena (assign = 1 writes the offsets) and return its size in floats, for the storage
// types chosen. The sizes are the planned ones (max_n images of imgsz).
static size_t layout(Model *m, int assign) {
    size_t end = 0;
    for (int v = 0; v < m->n_values; v++) {
        Value *val = &m->values[v];
        if (val->parent >= 0 || val->regen) continue;
        if (assign) val->offset = end;
        end += room((size_t)m->max_n * m->vh[v] * m->vw[v] * val->C, val->bf16);
    }
    for (int i = 0; i < m->n_nodes; i++) {
        Node *nd = &m->nodes[i];
        for (int k = 0; k < 2; k++) {
            ConvUnit *u = k ? &nd->cv2 : &nd->cv;
            if (u->w < 0 || u->bn_w < 0 || (nd->op != OP_CONV && nd->op != OP_REPCONV) || u->z_recompute) continue;
            if (assign) u->z = end;
            end += room((size_t)m->max_n * u->d.P * u->d.Q * u->d.K, u->z_bf16);
        }
        if (nd->op == OP_ATTN) {
            if (assign) nd->probs = end;
            end += room(attn_probs_floats(&nd->attn), 0);
        }
    }
    return end + (m->n_regen ? regen_layout(m, end, assign) : 0);
}

static void choose_units(Model *m, int bf16) {
    for (int i = 0; i < m->n_nodes; i++) {
        Node *nd = &m->nodes[i];
        int conv = nd->op == OP_CONV || nd->op == OP_REPCONV;
        nd->cv.z_bf16 = bf16 && conv && is_conv_unit(&nd->cv);
        nd->cv2.z_bf16 = bf16 && conv && is_conv_unit(&nd->cv2);
    }
}

// The planned sizes in m->vh/vw while f runs; the current ones after.
static size_t at_planned_size(Model *m, int assign) {
    int h = m->vh[m->input], w = m->vw[m->input];
    model_set_size(m, m->imgsz, m->imgsz);
    size_t n = layout(m, assign);
    model_set_size(m, h, w);
    return n;
}

void model_plan_storage(Model *m, int bf16) {
    choose_values(m, bf16);
    choose_units(m, bf16);
    m->n_act = at_planned_size(m, 1);
}

size_t model_act_floats(const Model *m, int bf16) {
    Model copy = *m;                                // the flags are chosen on copies of the tables
    copy.values = xmalloc(m->n_values * sizeof *copy.values);
    copy.nodes = xmalloc(m->n_nodes * sizeof *copy.nodes);
    copy.vh = xmalloc(m->n_values * sizeof *copy.vh);
    copy.vw = xmalloc(m->n_values * sizeof *copy.vw);
    memcpy(copy.values, m->values, m->n_values * sizeof *copy.values);
    memcpy(copy.nodes, m->nodes, m->n_nodes * sizeof *copy.nodes);
    memcpy(copy.vh, m->vh, m->n_values * sizeof *copy.vh);
    memcpy(copy.vw, m->vw, m->n_values * sizeof *copy.vw);
    choose_values(&copy, bf16);
    choose_units(&copy, bf16);
    size_t n = at_planned_size(&copy, 0);
    free(copy.values); free(copy.nodes); free(copy.vh); free(copy.vw);
    return n;
}

// ---- the CPU's plan: recompute z instead of storing it ---------------------------------------------

typedef struct { ConvUnit *u; double cost; size_t floats; } ZUnit;   // multiply-adds per float of z; z's floats

static int by_cost(const void *a, const void *b) {   // ties keep node order (the units sit in node order)
    const ZUnit *x = a, *y = b;
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    return (x->u > y->u) - (x->u < y->u);
}

// The units with a stored z (a BN after the conv), with their cost and size at the planned size.
static int z_units(Model *m, ZUnit *out) {
    int n = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        Node *nd = &m->nodes[i];
        if (nd->op != OP_CONV && nd->op != OP_REPCONV) continue;
        for (int k = 0; k < 2; k++) {
            ConvUnit *u = k ? &nd->cv2 : &nd->cv;
            if (u->w < 0 || u->bn_w < 0) continue;
            const ConvDims *d = &u->d;
            size_t floats = room((size_t)m->max_n * d->P * d->Q * d->K, 0);
            out[n++] = (ZUnit){ u, (double)d->C / d->groups * d->R * d->S, floats };
        }
    }
    return n;
}

// ---- then checkpoint values ---------------------------------------------------------------------------

// Multiply-adds a node's training forward again takes per image: its convolutions whose z is not stored.
static double replay_macs(const Node *nd) {
    double macs = 0;
    for (int k = 0; k < 2; k++) {
        const ConvUnit *u = k ? &nd->cv2 : &nd->cv;
        if ((nd->op != OP_CONV && nd->op != OP_REPCONV) || u->w < 0 || !u->z_recompute) continue;
        macs += (double)u->d.P * u->d.Q * u->d.K * u->d.C / u->d.groups * u->d.R * u->d.S;
    }
    return macs;
}

typedef struct { int v; double cost; size_t floats; } Candidate;   // replay multiply-adds per float

static int by_cheapest(const void *a, const void *b) {   // ties: the larger first, then value order
    const Candidate *x = a, *y = b;
    if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
    if (x->floats != y->floats) return x->floats > y->floats ? -1 : 1;
    return x->v - y->v;
}

// The owned values the backward may compute again, not checkpointed yet: written only by replayable nodes, not
// the images, not a head map the loss reads; with what that costs (nothing where no backward reads them).
// unread: only those no backward reads (they need no running again at all).
static int candidates(Model *m, Candidate *c, int unread) {
    unsigned char *ok = xcalloc(m->n_values, 1);
    double *macs = xcalloc(m->n_values, sizeof *macs);
    for (int i = 0; i < m->n_nodes; i++) ok[owner(m, m->nodes[i].out)] = 1;
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        int o = owner(m, nd->out);
        if (!replayable(nd) || nd->out2 >= 0) ok[o] = 0;
        if (nd->out2 >= 0) ok[owner(m, nd->out2)] = 0;
        macs[o] += replay_macs(nd);
    }
    ok[owner(m, m->input)] = 0;
    for (int l = 0; l < m->n_levels; l++) {
        ok[owner(m, m->head[l])] = 0;
        if (l < m->n_aux) ok[owner(m, m->aux[l])] = 0;
    }
    int h = m->vh[m->input], w = m->vw[m->input], n = 0;
    model_set_size(m, m->imgsz, m->imgsz);
    Life *L = lives(m);
    for (int v = 0; v < m->n_values; v++) {
        if (!ok[v] || m->values[v].parent >= 0 || m->values[v].regen || (unread && L[v].base_bs >= 0)) continue;
        double per_image = (double)m->vh[v] * m->vw[v] * m->values[v].C;
        c[n++] = (Candidate){ v, L[v].base_bs >= 0 ? macs[v] / per_image : 0, L[v].floats };
    }
    model_set_size(m, h, w);
    free(L); free(ok); free(macs);
    qsort(c, n, sizeof *c, by_cheapest);
    return n;
}

// Checkpoint the cheapest values, each only where it does not raise the plan, until it fits max_floats (less the
// zre); unread: only values no backward reads. Returns the arena's floats.
static size_t checkpoint(Model *m, size_t max_floats, int unread) {
    Candidate *c = xmalloc((m->n_values + 1) * sizeof *c);
    int n = candidates(m, c, unread);
    size_t zre = m->n_zre[0] + m->n_zre[1], best = at_planned_size(m, 0) + zre;
    for (int k = 0; k < n && best > max_floats; k++) {
        m->values[c[k].v].regen = 1, m->n_regen++;
        size_t now = at_planned_size(m, 0) + zre;
        if (now <= best) best = now;   // alone it only moves; beside others it shares
        else m->values[c[k].v].regen = 0, m->n_regen--;
    }
    free(c);
    return best - zre;
}

int model_plan_recompute(Model *m, size_t max_floats) {
    ZUnit *z = xmalloc(2 * (size_t)m->n_nodes * sizeof *z + 1);
    int n = z_units(m, z), chosen = 0;
    for (int k = 0; k < n; k++) z[k].u->z_recompute = 0;
    for (int v = 0; v < m->n_values; v++) m->values[v].regen = 0;
    m->n_regen = 0;
    free(m->replay_first); free(m->replay_nodes);
    m->replay_first = m->replay_nodes = NULL;
    size_t act = at_planned_size(m, 0);
    if (act > max_floats) act = checkpoint(m, max_floats, 1);   // first what no backward reads: nothing runs again
    qsort(z, n, sizeof *z, by_cost);
    m->n_zre[0] = m->n_zre[1] = 0;
    for (int k = 0; k < n && act + m->n_zre[0] + m->n_zre[1] > max_floats; k++, chosen++) {
        ConvUnit *u = z[k].u;
        int second = 0;                             // a RepConv's 1x1 branch: its z is needed beside the 3x3's
        for (int i = 0; i < m->n_nodes; i++) second |= u == &m->nodes[i].cv2;
        u->z_recompute = second ? 2 : 1;
        act -= z[k].floats;
        if (z[k].floats > m->n_zre[second]) m->n_zre[second] = z[k].floats;   // each buffer: its largest z
    }
    free(z);
    if (act + m->n_zre[0] + m->n_zre[1] > max_floats) checkpoint(m, max_floats, 0);
    m->n_act = at_planned_size(m, 1);
    return chosen;
}

double model_recompute_share(const Model *m) {
    double all = 0, again = 0;
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *nd = &m->nodes[i];
        if (nd->op != OP_CONV && nd->op != OP_REPCONV) continue;
        for (int k = 0; k < 2; k++) {
            const ConvUnit *u = k ? &nd->cv2 : &nd->cv;
            if (u->w < 0) continue;
            const ConvDims *d = &u->d;
            double macs = (double)d->P * d->Q * d->K * d->C / d->groups * d->R * d->S;
            all += 3 * macs;                         // forward, data and weight gradients
            if (u->z_recompute) again += macs;
        }
    }
    for (int k = 0; m->replay_first && k < m->replay_first[m->n_nodes]; k++)   // checkpointed values' writers
        again += replay_macs(&m->nodes[m->replay_nodes[k]]);
    return all > 0 ? again / all : 0;
}
