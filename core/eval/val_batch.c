// val_batch.c: the pixels and labels of one validation batch: each image loaded with long side S
// (INTER_AREA when shrinking, as load_image without augmentation) and letterboxed to the batch shape
// with scaleup off (reference §3.3, §3.4), decoded by a few threads. Legend: n images, H,W the shape.
#include "core/eval/val.h"

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

// ---- batches kept between passes ----------------------------------------------------------------
// Entries are written once (by the thread that loaded the batch) and read under the mutex; they go
// only when a pass comes with another dataset or plan (the key), which no pass in flight shares.

typedef struct { int b, n, H, W, S, nt; uint8_t *images; float *targets; int *index; LetterboxInfo *info; } Kept;

struct ValCache {
    pthread_mutex_t mu;
    size_t          budget, used;
    const Dataset  *ds;
    int             batch, n_batches, S;
    Kept           *kept;         // (n_batches) b < 0: not kept
    long long       hits, loads;
};

ValCache *val_cache_new(size_t budget_bytes) {
    ValCache *c = xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->budget = budget_bytes;
    return c;
}

static void cache_clear(ValCache *c) {
    for (int b = 0; b < c->n_batches; b++) {
        Kept *k = &c->kept[b];
        free(k->images); free(k->targets); free(k->index); free(k->info);
    }
    free(c->kept);
    c->kept = NULL; c->n_batches = 0; c->used = 0; c->ds = NULL;
}

void val_cache_free(ValCache *c) {
    if (!c) return;
    cache_clear(c);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void val_cache_counts(const ValCache *c, long long *hits, long long *loads) {
    *hits = c ? c->hits : 0;
    *loads = c ? c->loads : 0;
}

// Under c->mu: batch b's entry when it holds what val_batch_load would load now, else NULL.
static const Kept *cache_find(ValCache *c, const Dataset *ds, const ValPlan *p, int b, int S) {
    if (c->ds != ds || c->batch != p->batch || c->n_batches != p->n_batches || c->S != S) {
        cache_clear(c);                           // another dataset or plan: start again
        c->ds = ds; c->batch = p->batch; c->n_batches = p->n_batches; c->S = S;
        c->kept = xcalloc(p->n_batches + 1, sizeof *c->kept);
        for (int k = 0; k < p->n_batches; k++) c->kept[k].b = -1;
        return NULL;
    }
    const Kept *k = &c->kept[b];
    int first = b * p->batch, n = p->n - first < p->batch ? p->n - first : p->batch;
    if (k->b != b || k->n != n || k->H != p->shape[b][0] || k->W != p->shape[b][1] ||
        memcmp(k->index, p->order + first, sizeof *k->index * n)) return NULL;
    return k;
}

void val_batch_get(ValCache *c, const Dataset *ds, const ValPlan *p, int b, int S, int workers, ValBatch *vb) {
    if (!c) { val_batch_load(ds, p, b, S, workers, vb); return; }
    pthread_mutex_lock(&c->mu);
    const Kept *k = cache_find(c, ds, p, b, S);
    if (k) {                                      // the bytes and rows of the first load
        vb->n = k->n; vb->H = k->H; vb->W = k->W; vb->S = k->S;
        size_t px = (size_t)k->n * k->H * k->W * 3;
        reserve(vb, k->n, px);
        if (k->nt > vb->cap_t) vb->cap_t = k->nt, vb->targets = xrealloc(vb->targets, sizeof(float) * 6 * k->nt);
        memcpy(vb->images, k->images, px);
        if (k->nt) memcpy(vb->targets, k->targets, sizeof(float) * 6 * k->nt);   // vb may have no buffer yet
        memcpy(vb->index, k->index, sizeof *k->index * k->n);
        memcpy(vb->info, k->info, sizeof *k->info * k->n);
        vb->nt = k->nt;
        c->hits++;
        pthread_mutex_unlock(&c->mu);
        return;
    }
    pthread_mutex_unlock(&c->mu);
    val_batch_load(ds, p, b, S, workers, vb);
    size_t px = (size_t)vb->n * vb->H * vb->W * 3, bytes = px + sizeof(float) * 6 * vb->nt +
                (sizeof(int) + sizeof(LetterboxInfo)) * vb->n;
    pthread_mutex_lock(&c->mu);
    c->loads++;
    if (c->ds == ds && b < c->n_batches && c->kept[b].b < 0 && c->used + bytes <= c->budget) {
        Kept *e = &c->kept[b];
        *e = (Kept){ b, vb->n, vb->H, vb->W, vb->S, vb->nt, xmalloc(px + 1), xmalloc(sizeof(float) * 6 * vb->nt + 1),
                     xmalloc(sizeof(int) * vb->n + 1), xmalloc(sizeof(LetterboxInfo) * vb->n + 1) };
        memcpy(e->images, vb->images, px);
        if (vb->nt) memcpy(e->targets, vb->targets, sizeof(float) * 6 * vb->nt);   // none: no buffer
        memcpy(e->index, vb->index, sizeof(int) * vb->n);
        memcpy(e->info, vb->info, sizeof(LetterboxInfo) * vb->n);
        c->used += bytes;
    }
    pthread_mutex_unlock(&c->mu);
}
