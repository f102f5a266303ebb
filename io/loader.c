// loader.c: see loader.h. Workers claim samples one at a time in epoch order, write each straight into
// its slot of the ring and the worker that finishes a batch gathers its targets, so the bytes never
// depend on which worker did what. Legend: N batch, S side, T_max target rows one image may bring.
#include "io/loader.h"
#include "core/base/memlimit.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#define CACHE_MARGIN 0.10   // YOLOv9's: refuse unless bytes * (1 + margin) < available
#define PAGE         4096

typedef struct {             // a grow-only host buffer of a slot, page-locked through cfg pinning
    uint8_t *base;
    size_t   cap, used;
    int      pinned;
} HostArena;

typedef struct {
    Batch  b;
    int    id;              // batch number held, -1 when free
    int    filled;          // samples written
    int    ready, handed;   // all written; given to the consumer
    float *stage;           // (N, T_max, 5) each image's boxes, gathered into b.targets when complete
    int   *stage_n;         // (N)
    int    pinned;          // b.images is page-locked (loader_pin_buffers)
    int    first;           // cfg.share: the batch position of b's first image (else 0)
    // cfg.defer_pixels: b.aug's samples, their tiles (N, AUG_MAX_SOURCES) and every sample's copy of its decoded
    // sources in one arena (tile_arena), so a device uploads a batch's sources with one copy. Workers reserve
    // each sample's bytes in the order they finish (tile.used, under arena_lock held to write) and copy into
    // them holding it to read, so a growth (grow-only, page-locked through cfg pinning) never moves bytes
    // mid-copy; tile_off keeps each tile's offset, made into pointers once the batch is complete.
    // cfg.defer_decode: the deferred sources' file bytes likewise, in the second arena (jpeg, offsets in
    // jpeg_off; a source is deferred when its jpegs entry has len > 0), under the same lock.
    AugSample *aug;
    Image     *tiles;
    size_t    *tile_off;    // (N, AUG_MAX_SOURCES)
    HostArena  tile;
    AugJpeg   *jpegs;       // (N, AUG_MAX_SOURCES) defer_decode, else NULL
    size_t    *jpeg_off;    // (N, AUG_MAX_SOURCES)
    HostArena  jpeg;
    pthread_rwlock_t arena_lock;
} Slot;

// Each image loaded once, by whichever worker needs it first, under its lock: decoded and long-side resized; or,
// with defer_decode, a file a device will decode kept as its bytes (jpeg[i], owned here; img[i] then has the host
// path's size and px NULL). What a worker gets from it are views, never freed by the worker.
typedef struct {
    pthread_mutex_t *lock;  // (n)
    Image           *img;   // (n) px NULL until loaded (or kept as bytes)
    AugJpeg         *jpeg;  // (n) len > 0: kept as bytes
    uint8_t         *failed;// (n)
} Cache;

struct Loader {
    LoaderConfig    cfg;
    const Dataset  *ds;
    SampleSource    src;
    Cache          *cache;
    atomic_uchar   *bad;          // (n) 1 once an image failed to load: replaced from then on
    atomic_int      n_bad;
    int             t_max;
    int             n_slots;
    Slot           *slot;
    int            *order;        // (n) this epoch's samples
    int            *rect_order;   // (n) rect training: the fixed order, else NULL
    int           (*rect_shape)[2];   // (batches) rect training: each batch's {h, w}, else NULL
    // the rest is guarded by mu
    pthread_mutex_t mu;
    pthread_cond_t  work;         // workers: a sample to claim, a slot freed, or stop
    pthread_cond_t  done;         // consumer and loader_start_epoch: a batch ready, or workers idle
    int             active, stop, gen, busy;
    int             epoch, n_batches, next_sample, next_batch;
    int             finished;     // samples finished this epoch
    double          t_start, t_last, wait_s;
    int             n_threads;
    pthread_t      *threads;
    LoaderPinning   pinning;      // how b.images were pinned, to unpin them at close
};

// ---- sources: where a sample's long-side-resized image and boxes come from ----

// A decoded image (consumed) resized so its long side is S (augment_sample_decode resizes deferred ones alike).
static void keep_resized(const Loader *l, Image *raw, Image *out) {
    if ((raw->w > raw->h ? raw->w : raw->h) == l->cfg.aug.img_size) {   // r = 1: the decoded image as it is
        *out = *raw;
        return;
    }
    *out = augment_load_resize(raw, l->cfg.aug.img_size, l->cfg.train);
    image_free(raw);
}

static int load_resized(const Loader *l, int i, Image *out, Err *err) {
    Image raw;
    if (image_load(l->ds->s[i].image, &raw, err)) return -1;
    keep_resized(l, &raw, out);
    return 0;
}

// defer_decode: whether a device decodes the file whose bytes are buf[0, n) (see LoaderConfig.defer_decode).
static int deferrable(const Loader *l, const uint8_t *buf, size_t n, const char *path, ImageInfo *info) {
    Err e;                                       // a header that does not parse: the host decode reports it
    int S = l->cfg.aug.img_size;
    size_t max = l->cfg.defer_max_pixels ? l->cfg.defer_max_pixels : (size_t)4 * S * S;
    if (image_info_mem(buf, n, path, info, &e) || strcmp(info->format, "JPEG")) return 0;
    if ((info->channels != 1 && info->channels != 3) || (info->orientation >= 2 && info->orientation <= 8)) return 0;
    if ((size_t)info->w * (size_t)info->h > max) return 0;
    return !l->cfg.device_takes || l->cfg.device_takes(l->cfg.device_ctx, buf, n);
}

// defer_decode: image i read whole; a JPEG a device will decode becomes *out of the host path's size with px
// NULL and *jpeg its bytes (malloc'd, the caller's), anything else is decoded and resized here (*jpeg zero).
// For the RAM cache (cached = 1) a file larger than the tile it decodes to is decoded instead, so that no image
// holds more than loader_cache_bytes counted for it and cache_open's check stays an upper bound.
static int read_or_defer(const Loader *l, int i, int cached, Image *out, AugJpeg *jpeg, Err *err) {
    const char *path = l->ds->s[i].image;
    uint8_t *buf;
    size_t n;
    ImageInfo info;
    *jpeg = (AugJpeg){ 0 };
    if (image_read_file(path, &buf, &n, err)) return -1;
    if (deferrable(l, buf, n, path, &info)) {
        *out = (Image){ 0, 0, NULL };
        augment_load_size(info.w, info.h, l->cfg.aug.img_size, &out->w, &out->h);
        if (!cached || n <= (size_t)out->w * out->h * 3) {
            *jpeg = (AugJpeg){ buf, n, info.w, info.h, path };
            return 0;
        }
    }
    Image raw;
    int rc = image_decode_mem(buf, n, path, &raw, err);
    free(buf);
    if (rc == 0) keep_resized(l, &raw, out);
    return rc;
}

// Image i from the cache, loaded on first use. jpeg: NULL, or (defer_decode) where a file kept as bytes goes, as
// read_or_defer decides once for the run: *out and *jpeg are views into the cache (never freed by the worker).
static int cache_load(Loader *l, int i, Image *out, AugJpeg *jpeg, Err *err) {
    Cache *c = l->cache;
    int rc = 0;
    pthread_mutex_lock(&c->lock[i]);
    if (!c->img[i].px && !c->jpeg[i].len && !c->failed[i]) {
        rc = jpeg ? read_or_defer(l, i, 1, &c->img[i], &c->jpeg[i], err) : load_resized(l, i, &c->img[i], err);
        c->failed[i] = rc != 0;
    } else if (c->failed[i]) {
        rc = err_set(err, "%s: unreadable (cached failure)", l->ds->s[i].image);
    }
    pthread_mutex_unlock(&c->lock[i]);
    if (rc == 0 && !jpeg && c->jpeg[i].len)     // defer_decode is settled before the first epoch loads any
        die("loader: image %d is cached as file bytes but asked for decoded", i);
    if (rc == 0) *out = c->img[i];   // a view: only read, never freed by put
    if (rc == 0 && jpeg) *jpeg = c->jpeg[i];
    return rc;
}

// The first failure of an image is reported (once, by whichever worker meets it); from then on the
// next readable index stands in for it, so a file that vanishes mid-run never stops training. jpeg: NULL, or
// (defer_decode) where a deferred source's bytes go (read_or_defer; with the cache, a view of its copy).
static int source_find(Loader *l, int index, Image *img, AugJpeg *jpeg, Box **boxes, int *nbox, Err *err) {
    int n = l->ds->n;
    for (int k = 0; k < n; k++) {
        int j = (index + k) % n;
        if (atomic_load(&l->bad[j])) continue;
        Err e;
        int rc = l->cache ? cache_load(l, j, img, jpeg, &e)
                 : jpeg   ? read_or_defer(l, j, 0, img, jpeg, &e) : load_resized(l, j, img, &e);
        if (rc == 0) {
            *boxes = l->ds->s[j].box;
            *nbox = l->ds->s[j].nbox;
            return 0;
        }
        if (!atomic_exchange(&l->bad[j], 1)) {
            atomic_fetch_add(&l->n_bad, 1);
            fprintf(l->cfg.report ? l->cfg.report : stderr,
                    "warning: %s; using another image in its place from now on\n", e.msg);
        }
    }
    return err_set(err, "every one of the %d images failed to load; check the dataset folder", n);
}

static int source_get(void *ctx, int index, Image *img, Box **boxes, int *nbox, Err *err) {
    return source_find(ctx, index, img, NULL, boxes, nbox, err);
}

static void source_put(void *ctx, int index, Image *img, Box *boxes) {
    Loader *l = ctx;
    if (!l->cache) image_free(img);   // boxes belong to the Dataset
}

// A deferred source's bytes given back: without a cache they are the worker's (read_or_defer's malloc), freed;
// with one, a view of the cache's copy, which lives until loader_close.
static void jpeg_put(const Loader *l, AugJpeg *jpeg) {
    if (!l->cache) free((void *)jpeg->data);
    jpeg->data = NULL;
}

// defer_decode: augment_sources_get with deferral: the m sources idx into tile, jpeg, tb, nb; on failure those
// got are given back and it returns -1 with err.
static int sources_read(Loader *l, const int *idx, int m, Image *tile, AugJpeg *jpeg, Box **tb, int *nb, Err *err) {
    for (int k = 0; k < m; k++) {
        if (source_find(l, idx[k], &tile[k], &jpeg[k], &tb[k], &nb[k], err) == 0) continue;
        while (k--) jpeg_put(l, &jpeg[k]), source_put(l, idx[k], &tile[k], NULL);
        return -1;
    }
    return 0;
}

size_t loader_cache_bytes(const Dataset *ds, int img_size) {
    size_t bytes = 0;
    for (int i = 0; i < ds->n; i++) {   // the sizes augment_load_resize makes
        const Sample *s = &ds->s[i];
        if (s->w < 1 || s->h < 1) {         // size unknown: count a full square
            bytes += (size_t)img_size * img_size * 3;
            continue;
        }
        double r = (double)img_size / (s->w > s->h ? s->w : s->h);
        int w = (int)(s->w * r), h = (int)(s->h * r);
        bytes += (size_t)(w > 1 ? w : 1) * (size_t)(h > 1 ? h : 1) * 3;
    }
    return bytes;
}


// Refuses a cache that may not fit: the decoded estimate, checked before defer_decode is known (it is set once the
// devices exist); with it the cache keeps files no larger than their tiles (read_or_defer), so it stays a bound.
static int cache_open(Loader *l, Err *err) {
    size_t need = loader_cache_bytes(l->ds, l->cfg.aug.img_size);
    size_t have = l->cfg.mem_available ? l->cfg.mem_available : mem_budget(0).bytes;   // ulimit -v, cgroups too
    if (need * (1 + CACHE_MARGIN) >= (double)have)
        return err_set(err, "cache=ram: %d images at imgsz %d need %.2f GB decoded (+%.0f%% margin = %.2f GB) but "
                       "only %.2f GB of memory is available; set cache= (off) or a smaller imgsz (with augment=gpu "
                       "where the GPUs decode JPEGs the cache keeps the files, less, but this upper bound is checked "
                       "before that is known)",
                       l->ds->n, l->cfg.aug.img_size, need / 1e9, 100 * CACHE_MARGIN,
                       need * (1 + CACHE_MARGIN) / 1e9, have / 1e9);
    Cache *c = xcalloc(1, sizeof *c);
    c->lock = xmalloc(l->ds->n * sizeof *c->lock);
    c->img = xcalloc(l->ds->n, sizeof *c->img);
    c->jpeg = xcalloc(l->ds->n, sizeof *c->jpeg);
    c->failed = xcalloc(l->ds->n, 1);
    for (int i = 0; i < l->ds->n; i++) pthread_mutex_init(&c->lock[i], NULL);
    l->cache = c;
    return 0;
}

static void cache_free(Cache *c, int n) {
    if (!c) return;
    for (int i = 0; i < n; i++) {
        pthread_mutex_destroy(&c->lock[i]);
        if (c->img[i].px) image_free(&c->img[i]);
        free((void *)c->jpeg[i].data);
    }
    free(c->lock), free(c->img), free(c->jpeg), free(c->failed), free(c);
}

// ---- one sample ----

static void *page_alloc(size_t bytes);

static void arena_pin(HostArena *a, LoaderPinning pin) {   // under the slot's arena_lock, held to write
    if (a->base && !a->pinned && pin.pin) a->pinned = pin.pin(a->base, a->cap, pin.arg) == 0;
}

static void arena_unpin(Loader *l, HostArena *a) {
    if (a->pinned) l->pinning.unpin(a->base, l->pinning.arg);
    a->pinned = 0;
}

// Under s->arena_lock, held to write: room for `need` bytes in a, the bytes used so far moved along. A quarter
// more than asked, so a batch of larger images than the last grows it once, not per sample.
static void arena_grow(Loader *l, HostArena *a, size_t need) {
    size_t cap = (need + need / 4 + PAGE - 1) & ~(size_t)(PAGE - 1);
    uint8_t *p = page_alloc(cap);
    if (a->base) memcpy(p, a->base, a->used);
    arena_unpin(l, a);
    free(a->base);
    a->base = p, a->cap = cap;
    pthread_mutex_lock(&l->mu);                  // loader_pin_buffers may be setting it
    LoaderPinning pin = l->pinning;
    pthread_mutex_unlock(&l->mu);
    arena_pin(a, pin);
}

// Under s->arena_lock, held to write: `need` bytes of a reserved, returning their offset.
static size_t arena_reserve(Loader *l, HostArena *a, size_t need) {
    size_t at = a->used;
    if (at + need > a->cap) arena_grow(l, a, at + need);
    a->used = at + need;
    return at;
}

// defer_pixels: the m decoded tiles are copied into the slot's arena (the decoder's images are given back; a
// RAM cache's are only views, copied too so the arena alone holds the batch's sources); their offsets go to
// tile_off until the batch is complete (slot_arena_done), as the arena may still grow. defer_decode: a
// deferred source (jpeg[k].len > 0) has no pixels; its file bytes go to the jpeg arena (given back here).
static void keep_tiles(Loader *l, Slot *s, int i, Image *tile, AugJpeg *jpeg, const int *idx, int m) {
    size_t need = 0, need_j = 0, *off = s->tile_off + (size_t)i * AUG_MAX_SOURCES;
    size_t *off_j = s->jpeg_off ? s->jpeg_off + (size_t)i * AUG_MAX_SOURCES : NULL;
    for (int k = 0; k < m; k++)
        if (jpeg && jpeg[k].len) need_j += jpeg[k].len;
        else need += (size_t)tile[k].w * tile[k].h * 3;
    pthread_rwlock_wrlock(&s->arena_lock);
    size_t at = arena_reserve(l, &s->tile, need), at_j = need_j ? arena_reserve(l, &s->jpeg, need_j) : 0;
    pthread_rwlock_unlock(&s->arena_lock);
    pthread_rwlock_rdlock(&s->arena_lock);       // others may copy beside it; a growth waits for them
    for (int k = 0; k < m; k++) {
        if (jpeg && jpeg[k].len) {               // the tile stays {w, h, NULL}
            memcpy(s->jpeg.base + at_j, jpeg[k].data, jpeg[k].len);
            jpeg_put(l, &jpeg[k]);               // data: set by slot_arena_done
            off_j[k] = at_j;
            at_j += jpeg[k].len;
            continue;
        }
        size_t bytes = (size_t)tile[k].w * tile[k].h * 3;
        memcpy(s->tile.base + at, tile[k].px, bytes);
        Image kept = { tile[k].w, tile[k].h, NULL };    // px: set by slot_arena_done
        l->src.put(l->src.ctx, idx[k], &tile[k], NULL);   // frees (and clears) the decoder's image
        tile[k] = kept;
        off[k] = at;
        at += bytes;
    }
    pthread_rwlock_unlock(&s->arena_lock);
}

// Under mu, every sample of the batch written: the tiles (and deferred bytes) point into the arenas, which no
// longer move.
static void slot_arena_done(Slot *s) {
    if (!s->aug) return;
    for (int i = 0; i < s->b.n; i++) {
        s->aug[i].arena = s->tile.base, s->aug[i].arena_bytes = s->tile.used;
        for (int k = 0; !s->aug[i].grey && k < s->aug[i].n_tiles; k++) {
            size_t at = (size_t)i * AUG_MAX_SOURCES + k;
            if (s->jpegs && s->jpegs[at].len) s->jpegs[at].data = s->jpeg.base + s->jpeg_off[at];
            else s->tiles[at].px = s->tile.base + s->tile_off[at];
        }
    }
    s->b.tile_arena = s->tile.base, s->b.tile_bytes = s->tile.used;
    s->b.jpeg_arena = s->jpeg.base, s->b.jpeg_bytes = s->jpeg.used;
}

// defer_pixels: sample `index`'s draws (those augment_train_sample_into makes, in its order), its sources
// kept with the batch and its boxes (augment_apply_boxes); the pixels are left to a device. -1 with err
// when a source cannot be loaded (nothing kept).
static int defer_sample(Loader *l, Slot *s, int i, int index, Rng *rng, Box **box, int *n, Err *err) {
    AugSample *a = &s->aug[i];
    Image *tile = s->tiles + (size_t)i * AUG_MAX_SOURCES;
    int idx[AUG_MAX_SOURCES], nb[AUG_MAX_SOURCES];
    Box *tb[AUG_MAX_SOURCES];
    AugJpeg *jpeg = s->jpegs ? s->jpegs + (size_t)i * AUG_MAX_SOURCES : NULL;
    augment_draw(&l->cfg.aug, l->src.n, index, s->b.w, s->b.h, rng, &a->r);
    int m = augment_recipe_sources(&a->r, idx);
    if (jpeg ? sources_read(l, idx, m, tile, jpeg, tb, nb, err) : augment_sources_get(&l->src, idx, m, tile, tb, nb, err))
        return -1;
    augment_apply_boxes(&a->r, tile, tb, nb, box, n);   // the tiles' sizes alone: deferred ones have them
    int deferred = 0;
    for (int k = 0; jpeg && k < m; k++) deferred += jpeg[k].len > 0;
    keep_tiles(l, s, i, tile, jpeg, idx, m);
    a->tiles = tile, a->n_tiles = m, a->grey = 0, a->jpeg = deferred ? jpeg : NULL;
    return 0;
}

// Write sample `index` into image slot i of s: pixels, staged boxes and letterbox info. Training samples
// are made in place (no copy; scratch: the worker's reusable buffers). A sample that cannot be made at
// all (no image of the dataset loads) becomes a grey image without boxes.
static void make_sample(Loader *l, Slot *s, int i, int index, int epoch, AugScratch *scratch) {
    int S = l->cfg.aug.img_size, H = s->b.h, W = s->b.w, n = 0;
    uint8_t *dst = s->b.images + (size_t)i * H * W * 3;
    Image out = { W, H, dst };
    Box *box = NULL;
    Err e;
    LetterboxInfo info = { 0 };
    Rng rng = rng_for(l->cfg.seed, (uint64_t)epoch, (uint64_t)index + 1);
    // validation letterboxes to the square S x S; rect batch shapes (§3.9) are a later refinement
    int defer = s->aug != NULL;
    int rc = defer ? defer_sample(l, s, i, index, &rng, &box, &n, &e)
           : l->cfg.train
           ? augment_train_sample_into(&l->cfg.aug, &l->src, index, &rng, scratch, &out, &box, &n, &e)
           : augment_val_sample(&l->src, index, S, S, &out, &box, &n, &info, &e);
    if (rc) {
        fprintf(l->cfg.report ? l->cfg.report : stderr, "warning: sample %d: %s\n", index, e.msg);
        memset(dst, 114, (size_t)H * W * 3);
        n = 0;
        if (defer) s->aug[i] = (AugSample){ .grey = 1 };
    } else if (defer) {
        if (n > l->t_max) die("loader: sample %d came with %d boxes (at most %d)", index, n, l->t_max);
    } else {
        if (out.w != W || out.h != H || n > l->t_max)
            die("loader: sample %d came out %dx%d with %d boxes (expected %dx%d, at most %d)",
                index, out.w, out.h, n, W, H, l->t_max);
        if (out.px != dst) {
            memcpy(dst, out.px, (size_t)H * W * 3);
            image_free(&out);
        }
    }
    float *st = s->stage + (size_t)i * l->t_max * 5;
    for (int k = 0; k < n; k++) {
        st[5 * k + 0] = (float)box[k].cls;
        st[5 * k + 1] = box[k].cx, st[5 * k + 2] = box[k].cy, st[5 * k + 3] = box[k].w, st[5 * k + 4] = box[k].h;
    }
    free(box);
    s->stage_n[i] = n;
    s->b.index[i] = index;
    s->b.info[i] = info;
}

static void gather_targets(Slot *s, int t_max) {   // stage (N,T_max,5) -> targets (T,6), image order
    int t = 0;
    for (int i = 0; i < s->b.n; i++)
        for (int k = 0; k < s->stage_n[i]; k++, t++) {
            s->b.targets[6 * t] = (float)i;
            memcpy(&s->b.targets[6 * t + 1], &s->stage[((size_t)i * t_max + k) * 5], 5 * sizeof(float));
        }
    s->b.nt = t;
}

// ---- workers ----

typedef struct { Slot *slot; int i, index, epoch, gen; } Claim;

// Under mu, a slot just taken for a batch (of b.n images): this process's share of it (cfg.share). A
// share without images is complete at once.
static void take_share(Loader *l, Slot *s) {
    int first = 0, n = l->cfg.share(s->b.n, &first, l->cfg.share_arg);
    s->first = first;
    s->b.n = n;
    if (n) return;
    gather_targets(s, l->t_max);
    slot_arena_done(s);
    s->ready = 1;
    pthread_cond_broadcast(&l->done);
}

// Under mu: wait for the next sample of the epoch whose batch has (or can take) a slot. 0 on stop.
static int claim(Loader *l, Claim *c) {
    int N = l->cfg.batch;
    for (;;) {
        if (l->stop) return 0;
        if (l->active && l->next_sample < l->ds->n) {
            int b = l->next_sample / N;
            Slot *s = &l->slot[b % l->n_slots];
            if (s->id == -1) {
                s->id = b, s->filled = 0, s->ready = 0, s->tile.used = s->jpeg.used = 0;   // no worker is in it
                s->b.n = l->ds->n - b * N < N ? l->ds->n - b * N : N;
                s->b.epoch = l->epoch, s->b.number = b;
                s->b.h = l->rect_shape ? l->rect_shape[b][0] : l->cfg.aug.img_size;
                s->b.w = l->rect_shape ? l->rect_shape[b][1] : l->cfg.aug.img_size;
                s->first = 0;
                if (l->cfg.share) take_share(l, s);
            }
            if (s->id == b) {
                int j = l->next_sample - b * N;    // the sample's position in the whole batch
                if (j < s->first || j >= s->first + s->b.n) {   // another process's: skip to this one's
                    l->next_sample = j < s->first ? b * N + s->first : (b + 1) * N;
                    continue;
                }
                int k = l->next_sample++;
                *c = (Claim){ s, j - s->first, l->order[k], l->epoch, l->gen };
                l->busy++;
                return 1;
            }
        }
        pthread_cond_wait(&l->work, &l->mu);
    }
}

static void *worker(void *arg) {
    Loader *l = arg;
    Claim c;
    AugScratch scratch = { 0 };
    pthread_mutex_lock(&l->mu);
    while (claim(l, &c)) {
        pthread_mutex_unlock(&l->mu);
        make_sample(l, c.slot, c.i, c.index, c.epoch, &scratch);
        pthread_mutex_lock(&l->mu);
        l->busy--;
        if (c.gen == l->gen) {      // else loader_start_epoch dropped this epoch's work
            l->finished++;
            l->t_last = now_seconds();
            if (++c.slot->filled == c.slot->b.n) {
                gather_targets(c.slot, l->t_max);
                slot_arena_done(c.slot);
                c.slot->ready = 1;
            }
        }
        pthread_cond_broadcast(&l->done);
    }
    pthread_mutex_unlock(&l->mu);
    augment_scratch_free(&scratch);
    return NULL;
}

// ---- public ----

static void *page_alloc(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, PAGE, bytes ? bytes : 1)) die("out of host memory allocating %zu bytes", bytes);
    return p;
}

// Batch buffers are allocated once here. A GPU build pins b.images after loader_open
// (loader_pin_buffers), so host-to-device copies run asynchronously from them.
static void slots_alloc(Loader *l) {
    int N = l->cfg.batch, S = l->cfg.aug.img_size;
    l->slot = xcalloc(l->n_slots, sizeof *l->slot);
    for (int k = 0; k < l->n_slots; k++) {
        Slot *s = &l->slot[k];
        s->id = -1;
        s->b.S = s->b.h = s->b.w = S, s->b.slot = k;
        s->b.images = page_alloc((size_t)N * S * S * 3);
        s->b.targets = page_alloc((size_t)N * l->t_max * 6 * sizeof(float));
        s->b.index = xcalloc(N, sizeof *s->b.index);
        s->b.info = xcalloc(N, sizeof *s->b.info);
        s->stage = xmalloc((size_t)N * l->t_max * 5 * sizeof(float));
        s->stage_n = xcalloc(N, sizeof *s->stage_n);
        if (!l->cfg.train || !l->cfg.defer_pixels) continue;
        s->b.aug = s->aug = xcalloc(N, sizeof *s->aug);
        s->tiles = xcalloc((size_t)N * AUG_MAX_SOURCES, sizeof *s->tiles);
        s->tile_off = xcalloc((size_t)N * AUG_MAX_SOURCES, sizeof *s->tile_off);
        pthread_rwlock_init(&s->arena_lock, NULL);
        if (!l->cfg.defer_decode) continue;
        s->jpegs = xcalloc((size_t)N * AUG_MAX_SOURCES, sizeof *s->jpegs);
        s->jpeg_off = xcalloc((size_t)N * AUG_MAX_SOURCES, sizeof *s->jpeg_off);
    }
}

// The default ring: 3 batches, or more so that it holds two samples per worker beyond the batch in
// hand; else workers idle behind a straggler (a mixup sample) of the oldest batch. Simulated with the
// measured sample times, 32 workers on a ring of 3 batches of 16 are 81% busy, on 6 batches 100%.
static int default_slots(int workers, int batch) {
    int k = (2 * workers + batch - 1) / batch + 2;
    return k > 3 ? k : 3;
}

static int check_config(const LoaderConfig *c, const Dataset *ds, Err *err) {
    if (ds->n < 1) return err_set(err, "loader: the dataset has no images");
    if (c->batch < 1 || c->workers < 0 || c->aug.img_size < 32 || (c->prefetch && c->prefetch < 2))
        return err_set(err, "loader: batch=%d workers=%d imgsz=%d prefetch=%d: need batch >= 1, "
                       "workers >= 0, imgsz >= 32, prefetch 0 or >= 2", c->batch, c->workers,
                       c->aug.img_size, c->prefetch);
    if (!c->rect_order != !c->rect_shape || (c->rect_order && !c->train))
        return err_set(err, "loader: rect batches need both their order and their shapes, in training");
    for (int b = 0; c->rect_shape && b < (ds->n + c->batch - 1) / c->batch; b++) {
        int h = c->rect_shape[b][0], w = c->rect_shape[b][1];
        if (h < 32 || w < 32 || h > c->aug.img_size || w > c->aug.img_size || h % 32 || w % 32)
            return err_set(err, "loader: rect batch %d has shape %dx%d; each side must be a multiple of 32 "
                           "from 32 to imgsz %d", b, h, w, c->aug.img_size);
    }
    return 0;
}

// Workers allocate and free decoded images of about 1 MB all the time. glibc's defaults hand that memory
// back to the kernel (munmap, or trimming the top of a thread's arena) and fault it in again: about 1,000
// page faults a sample, which threads take in turn on the process's memory-map lock. Keep it instead:
// no mmap below 32 MB, trim past 256 MB. Process-wide, once; harmless to the rest of the program.
#ifdef __GLIBC__
static void malloc_tune(void) {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
}
#endif

static void malloc_keep_memory(void) {
#ifdef __GLIBC__
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, malloc_tune);
#endif
}

int loader_open(const LoaderConfig *cfg, const Dataset *ds, Loader **out, Err *err) {
    if (check_config(cfg, ds, err)) return -1;
    malloc_keep_memory();
    Loader *l = xcalloc(1, sizeof *l);
    l->cfg = *cfg, l->ds = ds;
    l->cfg.defer_decode = cfg->defer_decode && cfg->defer_pixels && cfg->train;
    if (cfg->cache_ram && cache_open(l, err)) {
        free(l);
        return -1;
    }
    int max_box = 0;
    for (int i = 0; i < ds->n; i++) max_box = ds->s[i].nbox > max_box ? ds->s[i].nbox : max_box;
    l->t_max = (cfg->train ? 8 : 1) * (max_box ? max_box : 1);   // mosaic 4 images, mixup 4 more
    l->n_slots = cfg->prefetch ? cfg->prefetch : default_slots(cfg->workers ? cfg->workers : 1, cfg->batch);
    l->src = (SampleSource){ ds->n, l, source_get, source_put };
    l->bad = xcalloc(ds->n, sizeof *l->bad);
    l->order = xmalloc(ds->n * sizeof *l->order);
    if (cfg->rect_order) {                         // copies: the caller's plan may go
        int nb = loader_batches(l);
        l->rect_order = xmalloc(ds->n * sizeof *l->rect_order);
        l->rect_shape = xmalloc(nb * sizeof *l->rect_shape);
        memcpy(l->rect_order, cfg->rect_order, ds->n * sizeof *l->rect_order);
        memcpy(l->rect_shape, cfg->rect_shape, nb * sizeof *l->rect_shape);
        l->cfg.rect_order = NULL, l->cfg.rect_shape = NULL;
        l->cfg.aug.rect = 1;                       // no mosaic; letterbox to the batch's shape
    }
    slots_alloc(l);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work, NULL);
    pthread_cond_init(&l->done, NULL);
    int workers = cfg->workers ? cfg->workers : 1;   // the reference's 0 (main process): one thread
    l->threads = xmalloc(workers * sizeof *l->threads);
    for (; l->n_threads < workers; l->n_threads++)
        if (pthread_create(&l->threads[l->n_threads], NULL, worker, l)) break;
    if (l->n_threads == 0) {
        loader_close(l);
        return err_set(err, "loader: cannot start worker threads; lower workers");
    }
    *out = l;
    return 0;
}

void loader_set_defer_decode(Loader *l, int on) {
    pthread_mutex_lock(&l->mu);
    int was = l->cfg.defer_decode;
    if (!l->active && l->epoch == 0 && !l->next_batch)   // before the first epoch: no worker reads it yet
        l->cfg.defer_decode = on && l->cfg.defer_pixels && l->cfg.train;
    for (int k = 0; k < l->n_slots && l->cfg.defer_decode && !was; k++) {
        Slot *s = &l->slot[k];
        if (!s->jpegs) s->jpegs = xcalloc((size_t)l->cfg.batch * AUG_MAX_SOURCES, sizeof *s->jpegs);
        if (!s->jpeg_off) s->jpeg_off = xcalloc((size_t)l->cfg.batch * AUG_MAX_SOURCES, sizeof *s->jpeg_off);
    }
    pthread_mutex_unlock(&l->mu);
}

void loader_close(Loader *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1, l->gen++;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
    for (int t = 0; t < l->n_threads; t++) pthread_join(l->threads[t], NULL);
    for (int k = 0; k < l->n_slots; k++) {
        Slot *s = &l->slot[k];
        if (s->pinned) l->pinning.unpin(s->b.images, l->pinning.arg);
        free(s->b.images), free(s->b.targets), free(s->b.index), free(s->b.info);
        free(s->stage), free(s->stage_n);
        arena_unpin(l, &s->tile), arena_unpin(l, &s->jpeg);
        if (s->aug) pthread_rwlock_destroy(&s->arena_lock);
        free(s->aug), free(s->tiles), free(s->tile_off), free(s->tile.base);
        free(s->jpegs), free(s->jpeg_off), free(s->jpeg.base);
    }
    cache_free(l->cache, l->ds->n);
    pthread_cond_destroy(&l->done), pthread_cond_destroy(&l->work), pthread_mutex_destroy(&l->mu);
    free(l->slot), free(l->threads), free(l->order), free(l->rect_order), free(l->rect_shape);
    free((void *)l->bad), free(l);
}

int loader_batches(const Loader *l) { return (l->ds->n + l->cfg.batch - 1) / l->cfg.batch; }

static void epoch_order(Loader *l, int epoch) {
    int n = l->ds->n;
    for (int i = 0; i < n; i++) l->order[i] = l->rect_order ? l->rect_order[i] : i;
    if (!l->cfg.train || l->rect_order) return;   // rect: shuffle off, as the reference forces it
    Rng rng = rng_for(l->cfg.seed, (uint64_t)epoch, 0);
    for (int i = n - 1; i > 0; i--) {   // Fisher-Yates
        int j = rng_int(&rng, i + 1), t = l->order[i];
        l->order[i] = l->order[j], l->order[j] = t;
    }
}

void loader_start_epoch(Loader *l, int epoch, int mosaic_on) { loader_start_epoch_at(l, epoch, mosaic_on, 0); }

void loader_start_epoch_at(Loader *l, int epoch, int mosaic_on, int first_batch) {
    pthread_mutex_lock(&l->mu);
    l->gen++, l->active = 0;
    while (l->busy) pthread_cond_wait(&l->done, &l->mu);   // workers read order and aug unlocked
    epoch_order(l, epoch);
    l->cfg.aug.close_mosaic = !mosaic_on;
    for (int k = 0; k < l->n_slots; k++) l->slot[k].id = -1, l->slot[k].ready = l->slot[k].handed = 0;
    l->epoch = epoch, l->n_batches = loader_batches(l);
    l->next_batch = first_batch < 0 ? 0 : first_batch > l->n_batches ? l->n_batches : first_batch;
    l->next_sample = l->next_batch * l->cfg.batch < l->ds->n ? l->next_batch * l->cfg.batch : l->ds->n;
    l->finished = 0;
    l->wait_s = 0, l->t_start = l->t_last = now_seconds();
    l->active = 1;
    pthread_cond_broadcast(&l->work);
    pthread_mutex_unlock(&l->mu);
}

int loader_next(Loader *l, Batch **b) {
    pthread_mutex_lock(&l->mu);
    if (!l->active) die("loader_next before loader_start_epoch");
    if (l->next_batch == l->n_batches) {
        pthread_mutex_unlock(&l->mu);
        return 0;
    }
    Slot *s = &l->slot[l->next_batch % l->n_slots];
    if (s->handed) die("loader_next: all %d batch buffers are held; release one first", l->n_slots);
    double t0 = now_seconds();
    while (!(s->id == l->next_batch && s->ready)) pthread_cond_wait(&l->done, &l->mu);
    l->wait_s += now_seconds() - t0;
    s->handed = 1;
    l->next_batch++;
    *b = &s->b;
    pthread_mutex_unlock(&l->mu);
    return 1;
}

void loader_release(Loader *l, Batch *b) {
    pthread_mutex_lock(&l->mu);
    Slot *s = &l->slot[b->slot];
    if (s->handed) {   // else a batch of an epoch that loader_start_epoch already dropped
        s->id = -1, s->ready = s->handed = 0;
        pthread_cond_broadcast(&l->work);
    }
    pthread_mutex_unlock(&l->mu);
}

LoaderStats loader_stats(Loader *l) {
    pthread_mutex_lock(&l->mu);
    double dt = l->t_last - l->t_start;
    LoaderStats st = { l->epoch, l->finished, l->wait_s, dt > 0 ? l->finished / dt : 0,
                       atomic_load(&l->n_bad) };
    pthread_mutex_unlock(&l->mu);
    return st;
}

LoaderCacheHeld loader_cache_held(Loader *l) {
    LoaderCacheHeld h = { 0 };
    Cache *c = l->cache;
    for (int i = 0; c && i < l->ds->n; i++) {
        pthread_mutex_lock(&c->lock[i]);         // a worker may be loading it
        if (c->jpeg[i].len) h.jpeg_bytes += c->jpeg[i].len, h.n_jpeg++;
        else if (c->img[i].px) h.tile_bytes += (size_t)c->img[i].w * c->img[i].h * 3, h.n_tiles++;
        pthread_mutex_unlock(&c->lock[i]);
    }
    return h;
}

int loader_pin_buffers(Loader *l, const LoaderPinning *p) {
    size_t bytes = (size_t)l->cfg.batch * l->cfg.aug.img_size * l->cfg.aug.img_size * 3;
    int n = 0;
    pthread_mutex_lock(&l->mu);                  // workers growing a tile arena read it
    l->pinning = *p;
    pthread_mutex_unlock(&l->mu);
    for (int k = 0; k < l->n_slots; k++) {
        Slot *s = &l->slot[k];
        if (!s->pinned) s->pinned = p->pin(s->b.images, bytes, p->arg) == 0;
        n += s->pinned;
        if (!s->aug) continue;
        pthread_rwlock_wrlock(&s->arena_lock);   // those not allocated yet are pinned when they are
        arena_pin(&s->tile, *p), arena_pin(&s->jpeg, *p);
        pthread_rwlock_unlock(&s->arena_lock);
    }
    return n;
}

void loader_batch_to_float(const Batch *b, float *nhwc_out) {
    size_t n = (size_t)b->n * b->h * b->w * 3;
    for (size_t i = 0; i < n; i++) nhwc_out[i] = b->images[i] / 255.0f;   // as imgs.float() / 255
}

LoaderConfig loader_config(const Config *cfg, int train) {
    const Hyp *h = &cfg->hyp;
    LoaderConfig lc = { .batch = cfg->batch, .workers = cfg->workers, .seed = (uint64_t)cfg->seed,
                        .train = train, .cache_ram = !strcmp(cfg->cache, "ram"),
                        .defer_pixels = train && !strcmp(cfg->augment, "gpu") };
    lc.aug = (AugParams){ .img_size = cfg->imgsz, .hsv_h = h->hsv_h, .hsv_s = h->hsv_s, .hsv_v = h->hsv_v,
                          .degrees = h->degrees, .translate = h->translate, .scale = h->scale, .shear = h->shear,
                          .perspective = h->perspective, .flipud = h->flipud, .fliplr = h->fliplr,
                          .mosaic = h->mosaic, .mixup = h->mixup, .rect = train && cfg->rect };
    return lc;   // rect: the caller gives rect_order and rect_shape (core/train/train.c)
}
