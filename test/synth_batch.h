// synth_batch.h: one batch of the built-in synthetic set in memory, for the step tests that feed a
// Trainer directly (test_multi, test_procs, test_gpu_train): n images rendered at s x s as floats in
// [0, 1], (n, s, s, 3), and their target rows (image, class, cx, cy, w, h normalised to s).
#pragma once
#include "io/image.h"
#include "io/synth.h"

// Returns the number of target rows written (at most n * SYNTH_MAX_OBJECTS).
static inline int synth_batch(int n, int s, float *images, float *targets) {
    SynthConfig sc = synth_defaults();
    sc.min_side = sc.max_side = s;
    int nt = 0;
    for (int i = 0; i < n; i++) {
        Image im;
        SynthObject obj[SYNTH_MAX_OBJECTS];
        int k = synth_render(&sc, 0, i, &im, obj);
        for (size_t p = 0; p < (size_t)s * s * 3; p++) images[(size_t)i * s * s * 3 + p] = im.px[p] / 255.0f;
        for (int j = 0; j < k; j++) {
            float *r = targets + 6 * nt++;
            r[0] = i; r[1] = obj[j].cls;
            r[2] = (obj[j].x1 + obj[j].x2) / 2.0f / s; r[3] = (obj[j].y1 + obj[j].y2) / 2.0f / s;
            r[4] = (float)(obj[j].x2 - obj[j].x1) / s; r[5] = (float)(obj[j].y2 - obj[j].y1) / s;
        }
        image_free(&im);
    }
    return nt;
}
