// model_grads.h: test helper: the head maps' gradients (main and auxiliary) set to uniform values in [-1, 1),
// standing for the loss's part of a backward (any gradient will do where a test compares two backwards).
#pragma once
#include "core/base/util.h"
#include "core/spec/model.h"

static inline void random_head_grads(Model *m, int N, Rng *r) {
    for (int l = 0; l < m->n_levels; l++) {
        int heads[2] = { m->head[l], m->n_aux ? m->aux[l] : -1 };
        for (int k = 0; k < 2; k++) {
            if (heads[k] < 0) continue;
            Map g = model_grad(m, heads[k], N);
            for (size_t p = 0; p < map_pixels(g); p++)
                for (int c = 0; c < g.C; c++) g.data[p * g.ld + c] = (float)rng_uniform(r, -1, 1);
        }
    }
}
