// train_shapes.c: the input size of each training batch under multi_scale (yolov9 train.py's
// --multi-scale branch; Ultralytics 8.x's preprocess_batch is the same rule), and the size the training
// memory plan is made for. Legend: S imgsz, gs the grid stride (32), sz the drawn size, H,W the
// batch's images, h,w what the model runs at.
#include "core/trainer/trainer.h"

#include <math.h>

enum { GS = 32 };   // gs = max(int(model.stride.max()), 32)

int train_ms_size(uint64_t seed, int epoch, int i, int S) {
    int lo = (int)(S * 0.5), hi = (int)(S * 1.5) + GS;   // random.randrange(lo, hi): [lo, hi)
    Rng rng = rng_for(seed + TRAIN_MS_SALT, (uint64_t)epoch, (uint64_t)i);
    int sz = (lo + rng_int(&rng, hi - lo)) / GS * GS;
    return sz < GS ? GS : sz;                      // imgsz 32 could draw 0 (the reference would fail)
}

void train_ms_shape(int sz, int H, int W, int *h, int *w) {
    double sf = (double)sz / (H > W ? H : W);      // scale factor
    *h = H, *w = W;
    if (sf == 1) return;
    *h = (int)ceil(H * sf / GS) * GS;              // new shape (stretched to gs-multiple)
    *w = (int)ceil(W * sf / GS) * GS;
}

int train_ms_max(int S) {
    int top = ((int)(S * 1.5) + GS - 1) / GS * GS;  // the largest value of randrange, floored to gs
    return top < GS ? GS : top;
}

// Every batch's long side is S (square, or a rect shape: its long side is ceil(S / 32) * 32 = S), so
// the largest input is the largest ceil(S sf / 32) * 32 over the sizes that can be drawn (float64 may
// round S sf up past sz: counted, not assumed away).
int train_plan_size(const Config *cfg) {
    int S = cfg->imgsz, most = S;
    for (int sz = GS; cfg->multi_scale && sz <= train_ms_max(S); sz += GS) {
        int h, w;
        train_ms_shape(sz, S, S, &h, &w);
        if (h > most) most = h;
    }
    return most;
}
