// synth_batch.h: the built-in synthetic set in memory. synth_batch: one batch, for the step tests that
// feed a Trainer directly (test_multi, test_procs, test_gpu_train): n images rendered at s x s as
// floats in [0, 1], (n, s, s, 3), and their target rows (image, class, cx, cy, w, h normalised to s).
// synth_dataset: a Dataset of the generated set, for the loader tests (test_loader, test_batch_shapes).
#pragma once
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/dataset.h"
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

// The synthetic training set of c (n_train images, c's sides and seed) generated into dir, and a
// Dataset built straight from its rendering (no label parsing involved): the images' paths, sizes and
// boxes. The Dataset's arrays are the test's to keep. 0, or -1 with the reason printed.
static inline int synth_dataset(const char *dir, const SynthConfig *c, Dataset *ds) {
    Err err;
    if (synth_generate(dir, c, &err)) { printf("    %s\n", err.msg); return -1; }
    ds->n = c->n_train, ds->nc = SYNTH_NC, ds->names = (char **)synth_names;
    ds->s = calloc(c->n_train, sizeof *ds->s);
    for (int i = 0; i < c->n_train; i++) {
        Sample *s = &ds->s[i];
        Image im;
        SynthObject o[SYNTH_MAX_OBJECTS];
        s->nbox = synth_render(c, 0, i, &im, o);
        s->w = im.w, s->h = im.h;
        image_free(&im);
        size_t len = strlen(dir) + 32;
        s->image = malloc(len);
        snprintf(s->image, len, "%s/images/train/%06d.jpg", dir, i);
        s->box = calloc(s->nbox + 1, sizeof *s->box);
        for (int k = 0; k < s->nbox; k++)
            s->box[k] = (Box){ o[k].cls, 0.5f * (o[k].x1 + o[k].x2) / s->w, 0.5f * (o[k].y1 + o[k].y2) / s->h,
                               (float)(o[k].x2 - o[k].x1) / s->w, (float)(o[k].y2 - o[k].y1) / s->h };
    }
    return 0;
}
