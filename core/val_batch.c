// val_batch.c: the pixels and labels of one validation batch: each image loaded with long side S
// (INTER_AREA when shrinking, as load_image without augmentation) and letterboxed to the batch shape
// with scaleup off (reference §3.3, §3.4), decoded by a few threads. Legend: n images, H,W the shape.
#include "core/val.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "io/image.h"

typedef struct { const Dataset *ds; int S; } Source;

static int source_get(void *ctx, int index, Image *img, Box **boxes, int *nbox, Err *err) {
    const Source *s = ctx;
    Image raw;
    if (image_load(s->ds->s[index].image, &raw, err)) return -1;
    if ((raw.w > raw.h ? raw.w : raw.h) == s->S) *img = raw;   // r = 1: as decoded
    else { *img = augment_load_resize(&raw, s->S, 0); image_free(&raw); }
    *boxes = s->ds->s[index].box;             // the dataset's: put() does not free them
    *nbox = s->ds->s[index].nbox;
    return 0;
}

static void source_put(void *ctx, int index, Image *img, Box *boxes) { image_free(img); }

typedef struct {
    const Dataset *ds;
    ValBatch      *vb;
    const int     *index;       // (n) dataset indices of the batch
    Box          **box;         // (n) per image, normalised to W, H
    int           *nbox;        // (n)
    int            next;        // the next image to claim (under mu)
    pthread_mutex_t mu;
} Job;

static void load_one(Job *j, int i) {
    ValBatch *vb = j->vb;
    Source src_ctx = { j->ds, vb->S };
    SampleSource src = { j->ds->n, &src_ctx, source_get, source_put };
    uint8_t *dst = vb->images + (size_t)i * vb->H * vb->W * 3;
    Image out;
    Err e;
    if (augment_val_sample(&src, j->index[i], vb->W, vb->H, &out, &j->box[i], &j->nbox[i], &vb->info[i], &e)) {
        fprintf(stderr, "warning: val image %s: %s\n", j->ds->s[j->index[i]].image, e.msg);
        memset(dst, 114, (size_t)vb->H * vb->W * 3);
        memset(&vb->info[i], 0, sizeof vb->info[i]);
        vb->info[i].r = 1;
        j->box[i] = NULL, j->nbox[i] = 0;
        return;
    }
    if (out.w != vb->W || out.h != vb->H) die("val_batch_load: image came out %dx%d, not %dx%d", out.w, out.h, vb->W, vb->H);
    memcpy(dst, out.px, (size_t)vb->H * vb->W * 3);
    image_free(&out);
}

static void *worker(void *arg) {
    Job *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int i = j->next < j->vb->n ? j->next++ : -1;
        pthread_mutex_unlock(&j->mu);
        if (i < 0) return NULL;
        load_one(j, i);
    }
}

static void reserve(ValBatch *vb, int n, size_t px) {
    if (n > vb->cap_n) {
        vb->cap_n = n;
        vb->index = xrealloc(vb->index, sizeof *vb->index * n);
        vb->info = xrealloc(vb->info, sizeof *vb->info * n);
    }
    if (px > vb->cap_px) {
        vb->cap_px = px;
        free(vb->images);
        vb->images = xmalloc(px);
    }
}

static void gather_targets(ValBatch *vb, Box **box, const int *nbox) {
    int nt = 0;
    for (int i = 0; i < vb->n; i++) nt += nbox[i];
    if (nt > vb->cap_t) vb->cap_t = nt, vb->targets = xrealloc(vb->targets, sizeof(float) * 6 * nt);
    vb->nt = 0;
    for (int i = 0; i < vb->n; i++)
        for (int k = 0; k < nbox[i]; k++) {
            float *t = vb->targets + 6 * vb->nt++;
            const Box *x = &box[i][k];
            t[0] = (float)i; t[1] = (float)x->cls; t[2] = x->cx; t[3] = x->cy; t[4] = x->w; t[5] = x->h;
        }
}

void val_batch_load(const Dataset *ds, const ValPlan *p, int b, int S, int workers, ValBatch *vb) {
    int first = b * p->batch, n = p->n - first < p->batch ? p->n - first : p->batch;
    vb->n = n; vb->H = p->shape[b][0]; vb->W = p->shape[b][1]; vb->S = S;
    reserve(vb, n, (size_t)n * vb->H * vb->W * 3);
    memcpy(vb->index, p->order + first, sizeof *vb->index * n);
    Job j = { .ds = ds, .vb = vb, .index = vb->index, .box = xcalloc(n, sizeof(Box *)), .nbox = xcalloc(n, sizeof(int)) };
    pthread_mutex_init(&j.mu, NULL);
    int nt = workers < 1 ? 1 : workers > n ? n : workers;
    pthread_t th[64];
    if (nt > 64) nt = 64;
    for (int k = 1; k < nt; k++) pthread_create(&th[k], NULL, worker, &j);
    worker(&j);                                  // this thread is one of them
    for (int k = 1; k < nt; k++) pthread_join(th[k], NULL);
    pthread_mutex_destroy(&j.mu);
    gather_targets(vb, j.box, j.nbox);
    for (int i = 0; i < n; i++) free(j.box[i]);
    free(j.box); free(j.nbox);
}

void val_batch_free(ValBatch *vb) {
    free(vb->images); free(vb->targets); free(vb->index); free(vb->info);
    memset(vb, 0, sizeof *vb);
}
