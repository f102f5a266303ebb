// val_picture.c: the pictures of the first validation batch (labels, predictions), drawn by
// io/picture.c on square canvases: a rect batch's H x W images sit at the top left of Q x Q, Q = max(H, W).
#include "core/val.h"

#include <stdlib.h>
#include <string.h>

#include "io/picture.h"

static void save(const Dataset *ds, Batch *b, const char *dir, const char *name) {
    char path[4096];
    Err err;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (picture_batch(b, ds->names, ds->nc, path, &err)) fprintf(stderr, "note: %s\n", err.msg);
}

void val_pictures(const Dataset *ds, const char *dir, const ValBatch *vb, const Det *const *det, const int *nd) {
    int Q = vb->H > vb->W ? vb->H : vb->W, total = 0;
    for (int i = 0; i < vb->n; i++) total += nd[i];
    Batch b = { .n = vb->n, .S = Q, .index = vb->index, .info = vb->info };
    b.images = xmalloc((size_t)vb->n * Q * Q * 3);
    memset(b.images, 114, (size_t)vb->n * Q * Q * 3);
    for (int i = 0; i < vb->n; i++)
        for (int y = 0; y < vb->H; y++)
            memcpy(b.images + (((size_t)i * Q + y) * Q) * 3, vb->images + (((size_t)i * vb->H + y) * vb->W) * 3,
                   (size_t)vb->W * 3);
    float *rows = xmalloc(sizeof(float) * 6 * (vb->nt + total + 1));
    for (int k = 0; k < vb->nt; k++) {       // labels: normalised to W, H -> to Q
        const float *t = vb->targets + 6 * k;
        float *r = rows + 6 * k;
        r[0] = t[0]; r[1] = t[1];
        r[2] = t[2] * vb->W / Q; r[3] = t[3] * vb->H / Q; r[4] = t[4] * vb->W / Q; r[5] = t[5] * vb->H / Q;
    }
    b.targets = rows; b.nt = vb->nt;
    save(ds, &b, dir, "val_batch0_labels.jpg");
    b.nt = 0;
    for (int i = 0; i < vb->n; i++)
        for (int k = 0; k < nd[i]; k++) {
            const Det *d = &det[i][k];
            if (d->conf <= 0.25f) continue;
            float *r = rows + 6 * b.nt++;
            r[0] = (float)i; r[1] = (float)d->cls;
            r[2] = (d->x1 + d->x2) / 2 / Q; r[3] = (d->y1 + d->y2) / 2 / Q;
            r[4] = (d->x2 - d->x1) / Q; r[5] = (d->y2 - d->y1) / Q;
        }
    save(ds, &b, dir, "val_batch0_pred.jpg");
    free(b.images); free(rows);
}
