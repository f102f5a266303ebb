// grad_plan.c: where each activation gradient lives. Backward needs the gradient of a value only
// from the first node that adds into it (its last consumer, walking the nodes backwards) to the
// node that produced it; gradients whose lifetimes do not meet share memory. Only values have
// gradients (the pre-BN maps z do not), so the gradient arena is a fraction of the activations'.
// Legend: B an owned buffer (a value with parent -1; slices share their parent's), T backward
// time: node i runs at T = n_nodes - 1 - i; T = -1 is the loss, before any node.
#include <stdlib.h>
#include <string.h>

#include "core/spec/model.h"
#include "core/base/switches.h"

typedef struct { int v; int t0, t1; size_t floats, offset; } Life;   // live over [t0, t1]

static int owner(const Model *m, int v) { return m->values[v].parent < 0 ? v : m->values[v].parent; }

static size_t buffer_floats(const Model *m, int v) {
    return ((size_t)m->max_n * m->vh[v] * m->vw[v] * m->values[v].C + 15) & ~(size_t)15;
}

// Does node nd's backward run (core/spec/model_run.c node_backward)? A detach, or a non-conv node reading a
// value without gradient, does nothing; a conv still owes its weight gradients. One that runs reads dy
// (and OP_ATTN's dv) and makes node_writes' writes.
static int runs_backward(const Model *m, const Node *nd) {
    int conv = nd->op == OP_CONV || nd->op == OP_REPCONV;
    return nd->op != OP_DETACH && (conv || !m->values[nd->in].no_grad);
}

// widen B's lifetime to include time t
static void touch(Life *life, const Model *m, int v, int t) {
    Life *l = &life[owner(m, v)];
    if (t < l->t0) l->t0 = t;
    if (t > l->t1) l->t1 = t;
}

static int by_size_desc(const void *a, const void *b) {
    const Life *x = *(const Life *const *)a, *y = *(const Life *const *)b;
    return x->floats < y->floats ? 1 : x->floats > y->floats ? -1 : x->v - y->v;
}

// Lowest offset at which l fits beside the already placed buffers whose lifetimes meet its own.
static size_t first_fit(Life **placed, int n_placed, const Life *l) {
    size_t at = 0;
    for (int moved = 1; moved;) {
        moved = 0;
        for (int k = 0; k < n_placed; k++) {
            const Life *p = placed[k];
            if (p->t1 < l->t0 || l->t1 < p->t0) continue;                     // never live together
            if (p->offset + p->floats <= at || at + l->floats <= p->offset) continue;   // apart
            at = p->offset + p->floats;
            moved = 1;
        }
    }
    return at;
}

// ---- writes instead of additions ----------------------------------------------------------
// A gradient buffer zeroed at the start of its life costs a pass over it, and the first op to add
// into it reads those zeros back. Walking backward in time, plan_fresh_writes marks a node's write
// "fresh" (Model.grad_fresh, bit FRESH_*) when it is the first to reach every channel of its region,
// and then the op writes its sum instead of adding it (Map.fresh): 0 + s = s, the same value (a -0
// sum stays -0 where the addition gave +0). A buffer still needs zeroing when some channel's first
// write comes from an op that only adds (pooling, upsampling, attention, the loss), when a write
// covers channels of which some were written and some not, or when a read reaches a channel nothing
// wrote; then every write to it adds, as before. YT_GRAD_FRESH=0 plans
// every write as an addition into zeroed buffers (the old plan, kept to compare against).
typedef struct { int v, capable, bit; } Write;

// A conv (not depthwise) with BN: the unit whose backward goes through the backend's fused conv + BN forms
static int conv_with_bn(const Node *nd) { return nd->op == OP_CONV && nd->cv.bn_w >= 0 && !unit_is_dw(&nd->cv); }

// Model.residual_add[i], from the graph alone: a layer frozen after the plan (freeze=) keeps its pairs, and
// only the forward's fused form asks for a BN in training mode
static int residual_after(const Model *m, int i) {
    if (i + 1 >= m->n_nodes) return -1;
    const Node *c = &m->nodes[i], *a = &m->nodes[i + 1];
    int v = c->out;
    if (!conv_with_bn(c) || !c->act || a->op != OP_ADD || (a->in == v) == (a->in2 == v) || m->values[v].parent >= 0)
        return -1;
    for (int k = 0; k < m->n_values; k++)
        if (m->values[k].parent == v) return -1;
    for (int k = 0; k < m->n_nodes; k++)
        if (k != i + 1 && (m->nodes[k].in == v || (m->nodes[k].op == OP_ADD && m->nodes[k].in2 == v))) return -1;
    for (int l = 0; l < m->n_levels; l++)
        if (m->head[l] == v || (l < m->n_aux && m->aux[l] == v)) return -1;
    return i + 1;
}

// Model.grad_alias[j], for the residual addition j after a conv (Model.residual_add): its other input r when
// r's gradient can live in the addition's output gradient's buffer, else -1. The addition's backward then
// has nothing to do: the conv reads dy there (dy_of), and the same floats are r's gradient from then on.
// It takes: both values owned, unsliced, of the same shape, with gradients; r neither a head (the loss writes
// those first) nor read by any node after the addition (then the addition's write into r's gradient is the
// first, and nothing writes it before the conv has read dy); and r not the conv's input (its backward would
// write dx over the dy it reads). YT_GRAD_ALIAS=0 plans none.
static int alias_at(const Model *m, int j) {
    if (j < 1 || m->residual_add[j - 1] != j) return -1;
    const Node *a = &m->nodes[j], *c = &m->nodes[j - 1];
    int r = a->in == c->out ? a->in2 : a->in, o = a->out;
    const Value *vr = &m->values[r], *vo = &m->values[o];
    if (vr->parent >= 0 || vo->parent >= 0 || vr->no_grad || vo->no_grad || c->in == r || vr->C != vo->C ||
        m->vh[r] != m->vh[o] || m->vw[r] != m->vw[o])
        return -1;
    for (int k = 0; k < m->n_values; k++)
        if (m->values[k].parent == r || m->values[k].parent == o) return -1;
    for (int l = 0; l < m->n_levels; l++)
        if (m->head[l] == r || (l < m->n_aux && m->aux[l] == r)) return -1;
    for (int k = j + 1; k < m->n_nodes; k++)
        if (m->nodes[k].in == r || (m->nodes[k].op == OP_ADD && m->nodes[k].in2 == r) || m->nodes[k].out2 == r)
            return -1;
    return r;
}

// The gradient node i's backward reads as its dy: its output's, or for a conv whose output only the
// residual addition after it reads, that addition's output's (Model.residual_add).
static int dy_of(const Model *m, int i) { return m->residual_add[i] >= 0 ? m->nodes[i + 1].out : m->nodes[i].out; }

// The writes node i's backward makes (core/spec/model_run.c node_backward and unit_backward), in order.
static int node_writes(const Model *m, const Node *nd, Write w[3]) {
    int n = 0;
    if (!runs_backward(m, nd)) return 0;
    switch (nd->op) {
    case OP_CONV: case OP_REPCONV:
        if (m->values[nd->in].no_grad) return 0;    // weight gradients only
        w[n++] = (Write){ nd->in, 1, FRESH_IN };
        if (nd->op == OP_REPCONV) w[n++] = (Write){ nd->in, 1, FRESH_IN_CV2 };
        break;
    case OP_COPY: w[n++] = (Write){ nd->in, 1, FRESH_IN }; break;
    case OP_ADD: {   // not into a conv's output that only this addition reads: the conv reads dy itself;
                     // not into an input whose gradient lives in dy's buffer (Model.grad_alias)
        int i = (int)(nd - m->nodes), c = i > 0 && m->residual_add[i - 1] == i ? m->nodes[i - 1].out : -1;
        if (nd->in != c && nd->in != m->grad_alias[i]) w[n++] = (Write){ nd->in, 1, FRESH_IN };
        if (nd->in2 != c && nd->in2 != m->grad_alias[i]) w[n++] = (Write){ nd->in2, 1, FRESH_IN2 };
        break;
    }
    default: w[n++] = (Write){ nd->in, 0, 0 }; break;   // pooling, upsampling, attention: they add
    }
    return n;
}

// How many of value v's channels `written` holds (written: a flag per channel of v's owner).
static int written_count(const Model *m, char *const *written, int v) {
    const Value *val = &m->values[v];
    int o = owner(m, v), c0 = val->parent < 0 ? 0 : val->c0, k = 0;
    for (int c = 0; c < val->C; c++) k += written[o][c0 + c];
    return k;
}

static void mark_written(const Model *m, char **written, int v) {
    const Value *val = &m->values[v];
    int o = owner(m, v), c0 = val->parent < 0 ? 0 : val->c0;
    for (int c = 0; c < val->C; c++) written[o][c0 + c] = 1;
}

// Plans Model.grad_fresh; returns which owned buffers still need zeroing (a flag per value).
static char *plan_fresh_writes(Model *m) {
    int nv = m->n_values, nn = m->n_nodes;
    const char *e = switch_str(SW_GRAD_FRESH);
    int on = !(e && strcmp(e, "0") == 0);
    char *needs_zero = xcalloc((size_t)nv, 1);
    char **written = xcalloc((size_t)nv, sizeof *written);
    char *aliased = xcalloc((size_t)nv, 1);       // in another value's buffer: zeroed, if at all, as that one
    for (int i = 0; i < nn; i++)
        if (m->grad_alias[i] >= 0) aliased[m->grad_alias[i]] = 1;
    for (int v = 0; v < nv; v++) {
        needs_zero[v] = !on && !aliased[v];
        if (m->values[v].parent < 0) written[v] = xcalloc((size_t)m->values[v].C, 1);
    }
    free(m->grad_fresh);
    m->grad_fresh = xcalloc((size_t)nn, 1);
    for (int l = 0; l < m->n_levels; l++) {        // the loss adds into the head maps' gradients
        int heads[2] = { m->head[l], m->n_aux ? m->aux[l] : -1 };
        for (int k = 0; k < 2; k++)
            if (heads[k] >= 0) needs_zero[owner(m, heads[k])] = 1, mark_written(m, written, heads[k]);
    }
    for (int i = nn - 1; i >= 0; i--) {            // backward time order
        const Node *nd = &m->nodes[i];
        Write w[3];
        int nw = node_writes(m, nd, w);
        if (runs_backward(m, nd)) {               // it reads dy (and OP_ATTN's dv)
            int reads[2] = { dy_of(m, i), nd->out2 };
            for (int k = 0; k < 2; k++)
                if (reads[k] >= 0 && written_count(m, written, reads[k]) < m->values[reads[k]].C)
                    needs_zero[owner(m, reads[k])] = 1;
        }
        if (m->grad_alias[i] >= 0) mark_written(m, written, m->grad_alias[i]);   // dy's floats, whole
        for (int k = 0; k < nw; k++) {
            int had = written_count(m, written, w[k].v), o = owner(m, w[k].v);
            if (had == 0 && w[k].capable) m->grad_fresh[i] |= (unsigned char)w[k].bit;
            else if (had < m->values[w[k].v].C) needs_zero[o] = 1;   // a first write that adds, or a partial one
            mark_written(m, written, w[k].v);
        }
    }
    for (int i = 0; i < nn; i++) {                 // into a zeroed buffer every write adds
        Write w[3];
        int nw = node_writes(m, &m->nodes[i], w);
        for (int k = 0; k < nw; k++)
            if (needs_zero[owner(m, w[k].v)]) m->grad_fresh[i] &= (unsigned char)~w[k].bit;
    }
    for (int v = 0; v < nv; v++) free(written[v]);
    free(written);
    free(aliased);
    return needs_zero;
}

// Model.grad_bf16: a gradient stored as bf16 holds the same values its fp32 buffer would, where its only
// write is the data gradient of a conv with BN into the whole buffer (fresh: written, not added), which the
// backend rounds to bf16 anyway (Model.dgrad_bf16: on the GPU cuDNN's bf16 data gradient from the bf16 dz
// the BN backward writes; a pointwise conv's GEMM, or a conv without BN with its fp32 dz, gives fp32
// values), and its only reader is the conv + BN + SiLU that made the value (its BN
// backward reads bf16 or fp32 maps alike). So the copy that widened it goes and its reads halve. Not for
// a slice or sliced value, a head, an aliased gradient (others add into those), a value written twice or
// zeroed. YT_GRAD_BF16=0 keeps every gradient fp32.
static void plan_grad_types(Model *m) {
    int nv = m->n_values, nn = m->n_nodes;
    const char *e = switch_str(SW_GRAD_BF16);
    int on = m->dgrad_bf16 && !(e && strcmp(e, "0") == 0);
    free(m->grad_bf16);
    m->grad_bf16 = xcalloc((size_t)nv + 1, 1);
    m->n_grad_bf16 = 0;
    if (!on) return;
    int *writes = xcalloc((size_t)nv, sizeof *writes), *writer = xmalloc((size_t)nv * sizeof *writer);
    char *ok = xcalloc((size_t)nv, 1);
    for (int v = 0; v < nv; v++) ok[v] = m->values[v].parent < 0 && !m->values[v].no_grad, writer[v] = -1;
    for (int v = 0; v < nv; v++)
        if (m->values[v].parent >= 0) ok[m->values[v].parent] = 0;
    for (int l = 0; l < m->n_levels; l++) {
        ok[owner(m, m->head[l])] = 0;
        if (l < m->n_aux) ok[owner(m, m->aux[l])] = 0;
    }
    for (int k = m->zero_first[0]; k < m->zero_first[nn + 1]; k++) ok[m->zero_list[k]] = 0;
    for (int i = 0; i < nn; i++) {
        const Node *nd = &m->nodes[i];
        if (m->grad_alias[i] >= 0) ok[m->grad_alias[i]] = ok[nd->out] = 0;
        if (nd->out2 >= 0) ok[owner(m, nd->out2)] = 0;
        if (!conv_with_bn(nd) || !nd->act || m->residual_add[i] >= 0)
            ok[owner(m, nd->out)] = 0;   // its producer's backward reads the gradient some other way
        if (m->residual_add[i] >= 0) ok[m->nodes[i + 1].out] = 0;
        Write w[3];
        for (int k = 0, nw = node_writes(m, nd, w); k < nw; k++) {
            int o = owner(m, w[k].v);
            writes[o]++;
            writer[o] = conv_with_bn(nd) && w[k].v == o && (m->grad_fresh[i] & w[k].bit) && m->dgrad_bf16(&nd->cv.d)
                            ? i : -1;
        }
    }
    for (int v = 0; v < nv; v++) {
        m->grad_bf16[v] = ok[v] && writes[v] == 1 && writer[v] >= 0;
        m->n_grad_bf16 += m->grad_bf16[v];
    }
    free(writes);
    free(writer);
    free(ok);
}

void model_plan_grad_storage(Model *m, int (*dgrad_bf16)(const ConvDims *d)) {
    m->dgrad_bf16 = dgrad_bf16;
    plan_grad_types(m);
}

void model_plan_grads(Model *m) {
    int nv = m->n_values, nn = m->n_nodes;
    free(m->residual_add);
    m->residual_add = xmalloc(((size_t)nn + 1) * sizeof *m->residual_add);
    for (int i = 0; i < nn; i++) m->residual_add[i] = residual_after(m, i);
    const char *e = switch_str(SW_GRAD_ALIAS);
    int alias_on = !(e && strcmp(e, "0") == 0);
    free(m->grad_alias);
    m->grad_alias = xmalloc(((size_t)nn + 1) * sizeof *m->grad_alias);
    m->n_grad_alias = 0;
    for (int i = 0; i < nn; i++) {
        m->grad_alias[i] = alias_on ? alias_at(m, i) : -1;
        m->n_grad_alias += m->grad_alias[i] >= 0;
    }
    Life *life = xcalloc((size_t)nv, sizeof *life);
    for (int v = 0; v < nv; v++) life[v] = (Life){ v, nn, -2, 0, 0 };
    for (int l = 0; l < m->n_levels; l++) {        // the loss writes the head maps' gradients
        touch(life, m, m->head[l], -1);
        if (m->n_aux) touch(life, m, m->aux[l], -1);
    }
    for (int i = 0; i < nn; i++) {
        const Node *nd = &m->nodes[i];
        int t = nn - 1 - i;
        if (!runs_backward(m, nd)) continue;
        touch(life, m, dy_of(m, i), t);            // reads dy
        if (nd->out2 >= 0) touch(life, m, nd->out2, t);       // and OP_ATTN's dv
        Write w[3];
        for (int k = 0, nw = node_writes(m, nd, w); k < nw; k++) touch(life, m, w[k].v, t);   // writes dx
    }
    // an aliased input's gradient: one buffer with the addition's output's, live over both lifetimes. A
    // chain of residual blocks aliases each block's input into its output, so the buffer is the last's.
    int *alias_into = xmalloc((size_t)nv * sizeof *alias_into);
    for (int v = 0; v < nv; v++) alias_into[v] = -1;
    for (int i = 0; i < nn; i++)
        if (m->grad_alias[i] >= 0) alias_into[m->grad_alias[i]] = m->nodes[i].out;
    for (int i = nn - 1; i >= 0; i--) {            // the chain's last first: each root is final when reached
        int r = m->grad_alias[i], o = m->nodes[i].out;
        if (r < 0) continue;
        while (alias_into[o] >= 0) o = alias_into[o];
        alias_into[r] = o;
        if (life[r].t0 < life[o].t0) life[o].t0 = life[r].t0;
        if (life[r].t1 > life[o].t1) life[o].t1 = life[r].t1;
    }
    Life **order = xmalloc((size_t)nv * sizeof *order);
    int n = 0;
    for (int v = 0; v < nv; v++) {
        if (m->values[v].parent >= 0 || life[v].t1 < life[v].t0 || alias_into[v] >= 0)
            continue;   // slices; no gradient; in another's buffer
        life[v].floats = buffer_floats(m, v);
        order[n++] = &life[v];
    }
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
    m->n_dact = 0;
    for (int k = 0; k < n; k++) {
        order[k]->offset = first_fit(order, k, order[k]);
        if (order[k]->offset + order[k]->floats > m->n_dact) m->n_dact = order[k]->offset + order[k]->floats;
    }
    // offsets, and per backward time the buffers that start there and need zeroing before their first use
    char *needs_zero = plan_fresh_writes(m);
    m->grad_offset = xcalloc((size_t)nv, sizeof *m->grad_offset);
    m->zero_first = xcalloc((size_t)nn + 2, sizeof *m->zero_first);
    m->zero_list = xmalloc(((size_t)n + 1) * sizeof *m->zero_list);
    for (int v = 0; v < nv; v++)
        if (alias_into[v] >= 0 && needs_zero[v])
            die("grad_plan: the gradient of value %d shares a buffer but needs zeroing", v);   // alias_at's rule
    for (int k = 0; k < n; k++) {
        m->grad_offset[order[k]->v] = order[k]->offset;
        if (needs_zero[order[k]->v]) m->zero_first[order[k]->t0 + 2]++;   // counts at t0 + 2, prefix-summed below
    }
    for (int v = 0; v < nv; v++)
        if (alias_into[v] >= 0) m->grad_offset[v] = m->grad_offset[alias_into[v]];
    for (int t = 0; t <= nn; t++) m->zero_first[t + 1] += m->zero_first[t];
    int *fill = xcalloc((size_t)nn + 1, sizeof *fill);
    for (int v = 0; v < nv; v++) {                // value order, so the lists do not depend on qsort
        if (m->values[v].parent >= 0 || life[v].t1 < life[v].t0 || !needs_zero[v] || alias_into[v] >= 0) continue;
        int t = life[v].t0 + 1;
        m->zero_list[m->zero_first[t] + fill[t]++] = v;
    }
    free(fill);
    free(alias_into);
    free(needs_zero);
    free(order);
    free(life);
    plan_grad_types(m);
}

void model_free_grad_plan(Model *m) {
    free(m->grad_offset);
    free(m->zero_first);
    free(m->zero_list);
    free(m->grad_fresh);
    free(m->residual_add);
    free(m->grad_alias);
    free(m->grad_bf16);
    m->grad_alias = NULL;
    m->grad_bf16 = NULL;
    m->grad_fresh = NULL;
    m->residual_add = NULL;
    m->grad_offset = NULL;
    m->zero_first = m->zero_list = NULL;
}
