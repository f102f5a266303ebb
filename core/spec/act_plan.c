// act_plan.c: the activation arena's layout and storage types (model.h, model_plan_storage). Under
// bf16 GEMMs every conv operand is rounded to bfloat16 anyway, so a map that only GEMMs, depthwise
// convs, BN and the data-movement ops (pools, upsample, copy, add) touch can be stored rounded: half the
// memory and half the traffic of every kernel that reads or writes it. The images, the head maps the
// loss reads, and maps that an op without bf16 support (attention, detach, a conv with a bias) reads or
// writes stay fp32.
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

// Lay out the arena (assign = 1 writes the offsets) and return its size in floats, for the storage
// types chosen. The sizes are the planned ones (max_n images of imgsz).
static size_t layout(Model *m, int assign) {
    size_t end = 0;
    for (int v = 0; v < m->n_values; v++) {
        Value *val = &m->values[v];
        if (val->parent >= 0) continue;
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
    return end;
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

int model_plan_recompute(Model *m, size_t max_floats) {
    ZUnit *z = xmalloc(2 * (size_t)m->n_nodes * sizeof *z + 1);
    int n = z_units(m, z), chosen = 0;
    for (int k = 0; k < n; k++) z[k].u->z_recompute = 0;
    size_t act = at_planned_size(m, 0);
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
    return all > 0 ? again / all : 0;
}
