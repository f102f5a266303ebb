// grad_plan.c: where each activation gradient lives. Backward needs the gradient of a value only
// from the first node that adds into it (its last consumer, walking the nodes backwards) to the
// node that produced it; gradients whose lifetimes do not meet share memory. Only values have
// gradients (the pre-BN maps z do not), so the gradient arena is a fraction of the activations'.
// Legend: B an owned buffer (a value with parent -1; slices share their parent's), T backward
// time: node i runs at T = n_nodes - 1 - i; T = -1 is the loss, before any node.
#include <stdlib.h>

#include "core/model.h"

typedef struct { int v; int t0, t1; size_t floats, offset; } Life;   // live over [t0, t1]

static int owner(const Model *m, int v) { return m->values[v].parent < 0 ? v : m->values[v].parent; }

static size_t buffer_floats(const Model *m, int v) {
    return ((size_t)m->max_n * m->vh[v] * m->vw[v] * m->values[v].C + 15) & ~(size_t)15;
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

void model_plan_grads(Model *m) {
    int nv = m->n_values, nn = m->n_nodes;
    Life *life = xcalloc((size_t)nv, sizeof *life);
    for (int v = 0; v < nv; v++) life[v] = (Life){ v, nn, -2, 0, 0 };
    for (int l = 0; l < m->n_levels; l++) {        // the loss writes the head maps' gradients
        touch(life, m, m->head[l], -1);
        if (m->n_aux) touch(life, m, m->aux[l], -1);
    }
    for (int i = 0; i < nn; i++) {
        const Node *nd = &m->nodes[i];
        int t = nn - 1 - i;
        // as node_backward: a detach, or a non-conv node reading a value without gradient, does nothing
        int conv = nd->op == OP_CONV || nd->op == OP_REPCONV;
        if (nd->op == OP_DETACH || (m->values[nd->in].no_grad && !conv)) continue;
        touch(life, m, nd->out, t);                // reads dy
        if (nd->out2 >= 0) touch(life, m, nd->out2, t);       // and OP_ATTN's dv
        if (!m->values[nd->in].no_grad) touch(life, m, nd->in, t);   // adds into dx (not the images', nor
                                                   // a detached value's)
        if (nd->op == OP_ADD) touch(life, m, nd->in2, t);
    }
    Life **order = xmalloc((size_t)nv * sizeof *order);
    int n = 0;
    for (int v = 0; v < nv; v++) {
        if (m->values[v].parent >= 0 || life[v].t1 < life[v].t0) continue;   // slices; no gradient
        life[v].floats = buffer_floats(m, v);
        order[n++] = &life[v];
    }
    qsort(order, (size_t)n, sizeof *order, by_size_desc);
    m->n_dact = 0;
    for (int k = 0; k < n; k++) {
        order[k]->offset = first_fit(order, k, order[k]);
        if (order[k]->offset + order[k]->floats > m->n_dact) m->n_dact = order[k]->offset + order[k]->floats;
    }
    // offsets, and per backward time the buffers that start there (zeroed before their first use)
    m->grad_offset = xcalloc((size_t)nv, sizeof *m->grad_offset);
    m->zero_first = xcalloc((size_t)nn + 2, sizeof *m->zero_first);
    m->zero_list = xmalloc(((size_t)n + 1) * sizeof *m->zero_list);
    for (int k = 0; k < n; k++) {
        m->grad_offset[order[k]->v] = order[k]->offset;
        m->zero_first[order[k]->t0 + 2]++;        // counts at index t0 + 2, prefix-summed below
    }
    for (int t = 0; t <= nn; t++) m->zero_first[t + 1] += m->zero_first[t];
    int *fill = xcalloc((size_t)nn + 1, sizeof *fill);
    for (int v = 0; v < nv; v++) {                // value order, so the lists do not depend on qsort
        if (m->values[v].parent >= 0 || life[v].t1 < life[v].t0) continue;
        int t = life[v].t0 + 1;
        m->zero_list[m->zero_first[t] + fill[t]++] = v;
    }
    free(fill);
    free(order);
    free(life);
}

void model_free_grad_plan(Model *m) {
    free(m->grad_offset);
    free(m->zero_first);
    free(m->zero_list);
    m->grad_offset = NULL;
    m->zero_first = m->zero_list = NULL;
}
