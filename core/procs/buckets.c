// buckets.c: the gradient buckets of a backward (core/procs/buckets.h).
#include "core/procs/buckets.h"

#include <stdlib.h>

#include "core/base/util.h"

// The trainable offsets of node i's parameters: [*lo, *hi), or *lo > *hi when it has none.
static void node_params(const Model *m, const Node *nd, size_t *lo, size_t *hi) {
    *lo = (size_t)-1; *hi = 0;
    for (int u = 0; u < 2; u++) {
        const ConvUnit *cu = u ? &nd->cv2 : &nd->cv;
        if (nd->op != OP_CONV && nd->op != OP_REPCONV) continue;
        int idx[4] = { cu->w, cu->b, cu->bn_w, cu->bn_b };
        for (int q = 0; q < 4; q++) {
            if (idx[q] < 0) continue;
            const ParamInfo *p = &m->params[idx[q]];
            if (p->offset < *lo) *lo = p->offset;
            if (p->offset + p->n > *hi) *hi = p->offset + p->n;
        }
    }
}

int buckets_plan(const Model *m, size_t floats, Bucket *b, int max) {
    int n = m->n_nodes, nb = 0;
    size_t *below_max = xcalloc(n + 1, sizeof *below_max), lo, hi;   // max end over nodes < i
    for (int i = 0; i < n; i++) {
        node_params(m, &m->nodes[i], &lo, &hi);
        below_max[i + 1] = below_max[i] > hi ? below_max[i] : hi;
    }
    size_t top = m->buffers, from = (size_t)-1;
    for (int i = n - 1; i > 0 && nb < max - 1; i--) {
        node_params(m, &m->nodes[i], &lo, &hi);
        if (lo < from) from = lo;                  // the lowest offset of nodes i..n-1
        if (from <= top && top - from >= floats && below_max[i] <= from)
            b[nb++] = (Bucket){ i, from, top }, top = from;
    }
    b[nb++] = (Bucket){ 0, 0, top };
    free(below_max);
    return nb;
}
