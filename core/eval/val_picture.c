// val_picture.c: the pictures of the first validation batch (labels, predictions), drawn by
// io/picture.c on square canvases: a rect batch's H x W images sit at the top left of Q x Q, Q = max(H, W).
// The pass copies what they show (the first PICTURE_TILES images, the rows, the class names) into a job
// for the run's drawer (core/eval/drawer.h), which draws and encodes them off the pass.
#include "core/eval/val.h"

#include <stdlib.h>
#include <string.h>

#include "core/eval/drawer.h"
#include "io/picture.h"

enum { PICTURE_TILES = 16 };                  // picture_batch draws at most 16 images (4 x 4)

typedef struct {
    Batch  b;                                 // n <= PICTURE_TILES images of Q x Q; targets: the labels
    float *pred;                              // (n_pred, 6) the detections above 0.25
    int    n_pred, nc;
    char **names;
    char  *files[PICTURE_TILES];              // each tile's image file, its name drawn on the tile
    char   dir[4096];
} PictureJob;

static void save(const PictureJob *j, const Batch *b, const char *name) {
    char path[4200];
    Err err;
    snprintf(path, sizeof path, "%s/%s", j->dir, name);
    if (picture_batch(b, j->names, j->nc, j->files, path, &err)) fprintf(stderr, "note: %s\n", err.msg);
}

// One after the other: drawn at once (two threads, two canvases), a run under ulimit -v ran out of
// address space in the drawer and ended (test_hostile).
static void draw_pictures(void *arg) {
    PictureJob *j = arg;
    save(j, &j->b, "val_batch0_labels.jpg");
    Batch p = j->b;
    p.targets = j->pred; p.nt = j->n_pred;
    save(j, &p, "val_batch0_pred.jpg");
    free(j->b.images); free(j->b.targets); free(j->pred);
    for (int i = 0; i < PICTURE_TILES; i++) free(j->files[i]);
    drawer_names_free(j->names, j->nc);
    free(j);
}

void val_pictures(const Dataset *ds, const char *dir, const ValBatch *vb, const Det *const *det, const int *nd,
                  Drawer *drawer) {
    int Q = vb->H > vb->W ? vb->H : vb->W, n = vb->n < PICTURE_TILES ? vb->n : PICTURE_TILES, total = 0;
    for (int i = 0; i < n; i++) total += nd[i];
    PictureJob *j = xcalloc(1, sizeof *j);
    j->b = (Batch){ .n = n, .S = Q };
    j->nc = ds->nc;
    j->names = drawer_names(ds->names, ds->nc);
    for (int i = 0; i < n; i++) j->files[i] = xstrdup(ds->s[vb->index[i]].image);
    snprintf(j->dir, sizeof j->dir, "%s", dir);
    j->b.images = xmalloc((size_t)n * Q * Q * 3 + 1);
    memset(j->b.images, 114, (size_t)n * Q * Q * 3);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < vb->H; y++)
            memcpy(j->b.images + (((size_t)i * Q + y) * Q) * 3, vb->images + (((size_t)i * vb->H + y) * vb->W) * 3,
                   (size_t)vb->W * 3);
    float *rows = j->b.targets = xmalloc(sizeof(float) * 6 * (vb->nt + 1));
    for (int k = 0; k < vb->nt; k++) {       // labels: normalised to W, H -> to Q (images past n are not drawn)
        const float *t = vb->targets + 6 * k;
        if ((int)t[0] >= n) continue;
        float *r = rows + 6 * j->b.nt++;
        r[0] = t[0]; r[1] = t[1];
        r[2] = t[2] * vb->W / Q; r[3] = t[3] * vb->H / Q; r[4] = t[4] * vb->W / Q; r[5] = t[5] * vb->H / Q;
    }
    j->pred = xmalloc(sizeof(float) * 6 * (total + 1));
    for (int i = 0; i < n; i++)
        for (int k = 0; k < nd[i]; k++) {
            const Det *d = &det[i][k];
            if (d->conf <= 0.25f) continue;
            float *r = j->pred + 6 * j->n_pred++;
            r[0] = (float)i; r[1] = (float)d->cls;
            r[2] = (d->x1 + d->x2) / 2 / Q; r[3] = (d->y1 + d->y2) / 2 / Q;
            r[4] = (d->x2 - d->x1) / Q; r[5] = (d->y2 - d->y1) / Q;
        }
    drawer_submit(drawer, draw_pictures, j);
}
