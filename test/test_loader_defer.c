// test_loader_defer.c: the loader's defer_decode (issue 37's GPU decode, loader side). JPEG sources a device can
// decode are only read: their bytes and stored size go with the batch, in a second pinned arena; PNG, EXIF-rotated
// and larger sources are decoded on the host, and the device's veto sends a file there too. The targets are those
// of the same batches without defer_decode, and the host twin (augment_sample_pixels, the CPU backend's
// augment_batch) gives their pixels byte for byte. With cache=ram the cache keeps the deferred files' bytes (and
// the other sources decoded): the same batches as without the cache, no file read after the first epoch. Data:
// the synthetic set with a PNG and a rotated JPEG put in; coco128 (skipped when absent). Legend: N batch, SIDE
// the sample side.
#include <limits.h>
#include <stdint.h>

#include "core/spec/backend.h"
#include "io/loader.h"
#include "io/synth.h"
#include "test/synth_batch.h"
#include "test/test.h"
#include "test/fake_pins.h"

#define N_IMAGES 20
#define SIDE     96
#define PNG_AT   1            // the synthetic image re-saved as PNG
#define ROT_AT   2            // the synthetic image given EXIF orientation 6 (rotate 90)
#define VETO_AT  4            // the image test_device_veto's predicate refuses
#define SMALL    48           // a side at which about half the synthetic JPEGs are larger than their tiles

static Dataset ds;
static char dir[PATH_MAX];
static char png_path[PATH_MAX + 16], rot_path[PATH_MAX + 16];

// An APP1 segment holding a big-endian TIFF block whose IFD0 has one entry: orientation o.
static size_t exif_app1(uint8_t *seg, int o) {
    static const uint8_t tiff[] = { 'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1,       // header, IFD0 at 8, 1 entry
                                    0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 0, 0, 0, // 0x0112 SHORT x1, value below
                                    0, 0, 0, 0 };                             // no next IFD
    size_t n = 2 + 6 + sizeof tiff;                                           // length field counts itself
    seg[0] = 0xFF, seg[1] = 0xE1, seg[2] = (uint8_t)(n >> 8), seg[3] = (uint8_t)n;
    memcpy(seg + 4, "Exif\0\0", 6);
    memcpy(seg + 10, tiff, sizeof tiff);
    seg[10 + 19] = (uint8_t)o;                                               // the entry's value, big-endian
    return 2 + n;
}

// The file at src with an orientation segment after its SOI, written to dst.
static int write_rotated(const char *src, const char *dst, int o) {
    uint8_t *b, seg[64];
    size_t n;
    Err err;
    if (image_read_file(src, &b, &n, &err)) { printf("    %s\n", err.msg); return -1; }
    size_t k = exif_app1(seg, o);
    FILE *f = fopen(dst, "wb");
    int rc = !f || fwrite(b, 1, 2, f) != 2 || fwrite(seg, 1, k, f) != k || fwrite(b + 2, 1, n - 2, f) != n - 2;
    if (f && fclose(f)) rc = 1;
    free(b);
    return rc ? -1 : 0;
}

// The synthetic set of test_loader, with image PNG_AT re-saved as a PNG and ROT_AT as a rotated JPEG.
static int make_dataset(void) {
    snprintf(dir, sizeof dir, "%s", test_tmpdir("loader_defer"));
    SynthConfig c = synth_defaults();
    c.n_train = N_IMAGES, c.n_val = 0, c.min_side = 60, c.max_side = 180, c.seed = 3;
    if (synth_dataset(dir, &c, &ds)) return -1;
    Image im;
    Err err;
    snprintf(png_path, sizeof png_path, "%s/as.png", dir);
    snprintf(rot_path, sizeof rot_path, "%s/rotated.jpg", dir);
    if (image_load(ds.s[PNG_AT].image, &im, &err) || image_save_png(png_path, &im, &err)) {
        printf("    %s\n", err.msg);
        return -1;
    }
    image_free(&im);
    if (write_rotated(ds.s[ROT_AT].image, rot_path, 6)) return -1;
    free(ds.s[PNG_AT].image), free(ds.s[ROT_AT].image);             // synth_dataset's names, malloc'd
    ds.s[PNG_AT].image = png_path, ds.s[ROT_AT].image = rot_path;
    return 0;
}

static LoaderConfig config(int S, int defer) {
    LoaderConfig c = { .batch = 6, .workers = 2, .seed = 11, .train = 1, .defer_pixels = 1, .defer_decode = defer,
                       .mem_available = (size_t)1 << 30 };
    c.aug = (AugParams){ .img_size = S, .hsv_h = 0.015, .hsv_s = 0.7, .hsv_v = 0.4, .degrees = 10, .translate = 0.1,
                         .scale = 0.9, .shear = 2, .perspective = 2e-4, .flipud = 0.5, .fliplr = 0.5, .mosaic = 1,
                         .mixup = 0.5 };
    return c;
}

// ---- checks on one deferred batch ---------------------------------------------------------------------

typedef struct {
    int sources, deferred, wrong_rule, wrong_bytes, outside, wrong_targets, wrong_pixels, wrong_floats;
    const Dataset *d;
    size_t max_pixels;         // the rule's limit (config's defer_max_pixels, or 4·S·S)
    int veto;                  // a dataset index the device refuses, or -1
    int replaced;              // 1: some file is missing, so a source may come from another index than its recipe's
} Tally;

// Whether source j must be deferred: a JPEG of 1 or 3 components, not rotated, small enough, not vetoed.
static int should_defer(const Tally *t, int j) {
    ImageInfo info;
    Err err;
    if (image_info(t->d->s[j].image, &info, &err)) return 0;
    return !strcmp(info.format, "JPEG") && (info.channels == 1 || info.channels == 3) &&
           (info.orientation < 2 || info.orientation > 8) && (size_t)info.w * info.h <= t->max_pixels && j != t->veto;
}

// Each source of each sample: deferred as the rule says, its bytes the file's and inside the jpeg arena, its
// tile without pixels and of the host path's size.
static void check_sources(const Batch *b, Tally *t) {
    for (int i = 0; i < b->n; i++) {
        const AugSample *a = &b->aug[i];
        int idx[AUG_MAX_SOURCES], m = a->grey ? 0 : augment_recipe_sources(&a->r, idx);
        for (int k = 0; k < m; k++, t->sources++) {
            const AugJpeg *j = a->jpeg ? &a->jpeg[k] : NULL;
            int deferred = j && j->data;
            t->deferred += deferred;
            if (t->replaced) continue;           // the source may be another index's file
            t->wrong_rule += deferred != should_defer(t, idx[k]);
            if (!deferred) continue;
            uint8_t *file;
            size_t n;
            Err err;
            ImageInfo info;
            int tw, th;
            if (image_read_file(t->d->s[idx[k]].image, &file, &n, &err) || image_info(t->d->s[idx[k]].image, &info, &err)) {
                t->wrong_bytes++;
                continue;
            }
            augment_load_size(info.w, info.h, a->r.s, &tw, &th);
            t->wrong_bytes += n != j->len || memcmp(file, j->data, n) || j->w != info.w || j->h != info.h ||
                              a->tiles[k].px || a->tiles[k].w != tw || a->tiles[k].h != th;
            t->outside += j->data < b->jpeg_arena || j->data + j->len > b->jpeg_arena + b->jpeg_bytes;
            free(file);
        }
    }
}

// The deferred batch d against the same batch made without defer_decode (h): same targets; the host twin's
// pixels (augment_sample_pixels) equal h's, and so do the CPU backend's augment_batch floats.
static void check_same(const Batch *d, const Batch *h, Tally *t) {
    t->wrong_targets += d->n != h->n || d->nt != h->nt || memcmp(d->index, h->index, d->n * sizeof(int)) ||
                        memcmp(d->targets, h->targets, (size_t)d->nt * 6 * sizeof(float));
    if (d->n != h->n) return;
    size_t px = (size_t)d->h * d->w * 3;
    uint8_t *want = xmalloc(px), *got = xmalloc(px);
    float *f = xmalloc(px * d->n * sizeof(float));
    AugScratch scratch = { 0 };
    backend_cpu.dev.augment_batch(NULL, d->aug, d->n, d->h, d->w, f);
    for (int i = 0; i < d->n; i++) {
        augment_sample_pixels(&h->aug[i], &scratch, &(Image){ h->w, h->h, want });
        augment_sample_pixels(&d->aug[i], &scratch, &(Image){ d->w, d->h, got });
        t->wrong_pixels += memcmp(want, got, px) != 0;
        size_t bad = 0;
        for (size_t k = 0; k < px; k++) bad += f[i * px + k] != want[k] / 255.0f;
        t->wrong_floats += bad != 0;
    }
    augment_scratch_free(&scratch);
    free(want), free(got), free(f);
}

// Up to max_batches batches of epochs 0 (mosaic) and 1 (mosaic closed: letterbox) with and without defer_decode,
// in lockstep, checked batch by batch. Returns the batches compared.
static int compare_runs(const Dataset *d, LoaderConfig c, int max_batches, Tally *t, const LoaderPinning *pins) {
    LoaderConfig ch = c;
    ch.defer_decode = 0;
    Loader *ld, *lh;
    Err err;
    if (loader_open(&c, d, &ld, &err)) { CHECK(0, "%s", err.msg); return 0; }
    if (loader_open(&ch, d, &lh, &err)) { CHECK(0, "%s", err.msg); loader_close(ld); return 0; }
    if (pins) loader_pin_buffers(ld, pins);
    int batches = 0;
    for (int e = 0; e < 2; e++) {
        loader_start_epoch(ld, e, e == 0), loader_start_epoch(lh, e, e == 0);
        Batch *bd, *bh;
        for (int k = 0; k < max_batches && loader_next(ld, &bd) && loader_next(lh, &bh); k++, batches++) {
            check_sources(bd, t);
            check_same(bd, bh, t);
            loader_release(ld, bd), loader_release(lh, bh);
        }
    }
    loader_close(ld), loader_close(lh);
    return batches;
}

static void report(const char *what, int batches, const Tally *t) {
    printf("    %s: %d batches, %d sources, %d deferred\n", what, batches, t->sources, t->deferred);
    CHECK(t->wrong_rule == 0, "%s: %d of %d sources deferred against the rule", what, t->wrong_rule, t->sources);
    CHECK(t->wrong_bytes == 0 && t->outside == 0, "%s: %d deferred sources with the wrong bytes, size or tile, %d "
          "outside the jpeg arena", what, t->wrong_bytes, t->outside);
    CHECK(t->wrong_targets == 0, "%s: %d batches' targets differ from those without defer_decode", what,
          t->wrong_targets);
    CHECK(t->wrong_pixels == 0 && t->wrong_floats == 0, "%s: %d samples' host-twin pixels, %d samples' CPU-backend "
          "floats differ from those without defer_decode", what, t->wrong_pixels, t->wrong_floats);
}

// ---- tests ----------------------------------------------------------------------------------------------

// The synthetic set (JPEGs, a PNG, a rotated JPEG): the rule, the bytes, the targets and the twin's pixels, with
// the default limit (every JPEG fits) and a limit under the larger images (those go to the host).
static void test_synthetic(void) {
    for (int v = 0; v < 2; v++) {
        Tally t = { .d = &ds, .veto = -1 };
        LoaderConfig c = config(SIDE, 1);
        c.defer_max_pixels = v ? 120 * 120 : 0;
        t.max_pixels = v ? c.defer_max_pixels : (size_t)4 * SIDE * SIDE;
        int batches = compare_runs(&ds, c, 4, &t, NULL);
        report(v ? "limit 120x120" : "default limit", batches, &t);
        CHECK(batches >= 4 && t.deferred > 0 && t.deferred < t.sources, "%d batches, %d of %d sources deferred: "
              "expected some of each", batches, t.deferred, t.sources);
    }
}

// Rect training (aug.rect: no mosaic, each batch letterboxed to its shape) and a missing file (the usual
// warning, another image in its place): the same targets and twin pixels as without defer_decode.
static void test_rect_and_missing(void) {
    static const int shape[4][2] = { { 64, 96 }, { 96, 64 }, { 32, 96 }, { 96, 96 } };
    int order[N_IMAGES];
    for (int i = 0; i < N_IMAGES; i++) order[i] = N_IMAGES - 1 - i;
    Tally t = { .d = &ds, .veto = -1, .max_pixels = (size_t)4 * SIDE * SIDE };
    LoaderConfig c = config(SIDE, 1);
    c.aug.rect = 1, c.rect_order = order, c.rect_shape = shape;
    int batches = compare_runs(&ds, c, 4, &t, NULL);
    report("rect", batches, &t);
    CHECK(batches == 8 && t.deferred > 0, "rect: %d batches, %d deferred", batches, t.deferred);

    Dataset gap = ds;
    gap.s = xmalloc(ds.n * sizeof *gap.s);
    memcpy(gap.s, ds.s, ds.n * sizeof *gap.s);
    char missing[PATH_MAX + 32];
    snprintf(missing, sizeof missing, "%s/no-such-image.jpg", dir);
    gap.s[5].image = missing;
    Tally g = { .d = &gap, .veto = -1, .replaced = 1 };
    c = config(SIDE, 1);
    c.report = tmpfile();
    batches = compare_runs(&gap, c, 4, &g, NULL);
    report("missing file", batches, &g);
    char line[2048] = "";
    rewind(c.report);
    int warned = 0;
    while (fgets(line, sizeof line, c.report)) warned += strstr(line, "no-such-image.jpg") != NULL;
    CHECK(batches == 8 && warned == 2 && g.deferred > 0, "missing file: %d batches, %d warnings naming it (one per "
          "loader), %d deferred", batches, warned, g.deferred);
    fclose(c.report);
    free(gap.s);
}

// coco128 (all JPEG): every JPEG source that fits the rule is deferred, the rest as without it.
static void test_coco128(void) {
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    Tally t = { .d = &coco, .veto = -1, .max_pixels = (size_t)4 * 320 * 320 };
    LoaderConfig c = config(320, 1);
    c.batch = 8;
    int batches = compare_runs(&coco, c, 2, &t, NULL);
    report("coco128", batches, &t);
    CHECK(batches == 4 && t.deferred > 0, "%d batches, %d deferred", batches, t.deferred);
    dataset_free(&coco);
}

// The device's veto: a predicate refusing one file sends it to the host path; the others stay deferred.
static uint8_t *veto_bytes;
static size_t veto_n;
static int veto_calls;

static int device_takes(void *ctx, const uint8_t *data, size_t n) {
    __atomic_add_fetch(&veto_calls, 1, __ATOMIC_RELAXED);
    return !(n == veto_n && !memcmp(data, veto_bytes, n));
}

static void test_device_veto(void) {
    Err err;
    if (image_read_file(ds.s[VETO_AT].image, &veto_bytes, &veto_n, &err)) { CHECK(0, "%s", err.msg); return; }
    Tally t = { .d = &ds, .veto = VETO_AT, .max_pixels = (size_t)4 * SIDE * SIDE };
    LoaderConfig c = config(SIDE, 1);
    c.device_takes = device_takes, c.device_ctx = NULL;
    veto_calls = 0;
    int batches = compare_runs(&ds, c, 4, &t, NULL);
    report("veto", batches, &t);
    CHECK(veto_calls > 0 && t.deferred > 0, "the predicate was called %d times, %d deferred", veto_calls, t.deferred);
    free(veto_bytes);
}

// The jpeg arena is page-locked through the pinning hooks (with the tile arena: when allocated, or by
// loader_pin_buffers when the hooks come after an epoch, late) and unpinned at close; with cache_ram too (its
// deferred sources are copies of the cache's bytes).
static void test_arena_pinned(void) {
    for (int v = 0; v < 3; v++) {
        int cache = v == 1, late = v == 2;
        FakePins f = { 0 };
        LoaderPinning hooks = { fake_pin, fake_unpin, &f };
        LoaderConfig c = config(SIDE, 1);
        c.cache_ram = cache;
        Loader *l;
        Err err;
        if (loader_open(&c, &ds, &l, &err)) { CHECK(0, "%s", err.msg); continue; }
        if (!late) loader_pin_buffers(l, &hooks);
        int batches = 0, with_bytes = 0, unpinned = 0, deferred = 0;
        for (int e = 0; e < 2; e++) {
            if (late && e == 1) loader_pin_buffers(l, &hooks);
            loader_start_epoch(l, e, 1);
            Batch *b;
            while (loader_next(l, &b)) {
                batches++;
                with_bytes += b->jpeg_bytes > 0;
                unpinned += (!late || e == 1) && b->jpeg_bytes && !pinned_live(&f, b->jpeg_arena);
                for (int i = 0; i < b->n; i++) deferred += b->aug[i].jpeg != NULL;
                loader_release(l, b);
            }
        }
        loader_close(l);
        CHECK(batches == 8 && with_bytes == batches && deferred > 0 && unpinned == 0, "cache %d late %d: %d batches, "
              "%d with jpeg bytes, %d deferred samples, %d batches not page-locked", cache, late, batches, with_bytes,
              deferred, unpinned);
        CHECK(f.n_live == 0 && f.unpins == f.pins, "cache %d: %d pinned, %d unpinned after close", cache, f.pins,
              f.unpins);
    }
}

// A deferred source whose header read but whose data is damaged: the twin makes a grey tile and names the file
// (never a crash), and augment_sample_pixels makes the sample of those tiles (with a warning on stderr).
static void test_damaged_bytes(void) {
    LoaderConfig c = config(SIDE, 1);
    Loader *l;
    Err err;
    if (loader_open(&c, &ds, &l, &err)) { CHECK(0, "%s", err.msg); return; }
    loader_start_epoch(l, 0, 1);
    Batch *b;
    int tried = 0;
    while (!tried && loader_next(l, &b)) {
        for (int i = 0; i < b->n && !tried; i++) {
            const AugSample *a = &b->aug[i];
            for (int k = 0; a->jpeg && k < a->n_tiles && !tried; k++) {
                if (!a->jpeg[k].data) continue;
                AugJpeg bad[AUG_MAX_SOURCES];
                memcpy(bad, a->jpeg, a->n_tiles * sizeof *bad);
                bad[k].len = bad[k].len / 2;               // cut inside the entropy-coded data
                AugSample s = *a;
                s.jpeg = bad;
                Image tiles[AUG_MAX_SOURCES];
                Err e = { "" };
                int rc = augment_sample_decode(&s, tiles, &e);
                int grey = 1;
                for (size_t p = 0; p < (size_t)tiles[k].w * tiles[k].h * 3; p++) grey &= tiles[k].px[p] == 114;
                CHECK(rc == -1 && strstr(e.msg, a->jpeg[k].name) && grey && tiles[k].w == a->tiles[k].w,
                      "rc %d, message \"%s\", tile grey %d", rc, e.msg, grey);
                size_t px = (size_t)b->w * b->h * 3;   // augment_sample_pixels makes the sample of those tiles
                Image want = { b->w, b->h, xcalloc(px, 1) }, got = { b->w, b->h, xcalloc(px, 1) };
                AugScratch scratch = { 0 };
                augment_apply_pixels(&s.r, tiles, &scratch, &want);
                augment_sample_pixels(&s, &scratch, &got);
                CHECK(!memcmp(want.px, got.px, px), "augment_sample_pixels of the damaged sample differs from its "
                      "grey-tiled apply");
                augment_scratch_free(&scratch);
                free(want.px), free(got.px);
                augment_sample_decoded_free(&s, tiles);
                tried = 1;
            }
        }
        loader_release(l, b);
    }
    loader_close(l);
    CHECK(tried, "no deferred source met");
}

// ---- cache=ram with defer_decode ----------------------------------------------------------------------------

static int recipe_differs(const AugRecipe *a, const AugRecipe *b) {   // field by field: the struct has padding
    int d = a->s != b->s || a->w != b->w || a->h != b->h || a->mosaic != b->mosaic || a->mixup != b->mixup ||
            a->mix_r != b->mix_r || a->hsv != b->hsv || a->flipud != b->flipud || a->fliplr != b->fliplr;
    for (int k = 0; k < 3; k++) d |= a->hsv_r[k] != b->hsv_r[k];
    for (int w = 0; w < 2; w++) {
        const AugWarp *x = &a->warp[w], *y = &b->warp[w];
        d |= x->xc != y->xc || x->yc != y->yc || x->scale != y->scale || memcmp(x->idx, y->idx, sizeof x->idx);
        for (int k = 0; k < 9; k++) d |= x->M[k] != y->M[k];
    }
    return d;
}

// The samples of batch a that differ from b's: index, recipe, each source's tile (size, pixels) and deferred bytes
// (length, stored size, bytes); the targets count as one more. The file names may differ (a copy of the set).
static int batch_differs(const Batch *a, const Batch *b) {
    if (a->n != b->n) return 1 + a->n;
    int bad = a->nt != b->nt || memcmp(a->targets, b->targets, (size_t)a->nt * 6 * sizeof(float));
    for (int i = 0; i < a->n; i++) {
        const AugSample *x = &a->aug[i], *y = &b->aug[i];
        int d = a->index[i] != b->index[i] || x->grey != y->grey || x->n_tiles != y->n_tiles ||
                !x->jpeg != !y->jpeg || recipe_differs(&x->r, &y->r);
        for (int k = 0; !d && k < x->n_tiles; k++) {
            const Image *p = &x->tiles[k], *q = &y->tiles[k];
            d |= p->w != q->w || p->h != q->h || !p->px != !q->px ||
                 (p->px && memcmp(p->px, q->px, (size_t)p->w * p->h * 3));
            if (!x->jpeg || d) continue;
            const AugJpeg *u = &x->jpeg[k], *v = &y->jpeg[k];
            d |= u->len != v->len || u->w != v->w || u->h != v->h || !u->data != !v->data ||
                 (u->data && memcmp(u->data, v->data, u->len));
        }
        bad += d;
    }
    return bad;
}

static size_t file_size(const char *path) {
    uint8_t *b;
    size_t n;
    Err err;
    if (image_read_file(path, &b, &n, &err)) return 0;
    free(b);
    return n;
}

// What a cache of d at side S must hold once every image was read: the deferrable files' bytes (those not larger
// than their tile) and the others' tiles, as should_defer and the loader's long-side resize give them.
static LoaderCacheHeld expected_held(const Dataset *d, int S, size_t max_pixels) {
    LoaderCacheHeld h = { 0 };
    Tally t = { .d = d, .veto = -1, .max_pixels = max_pixels };
    for (int i = 0; i < d->n; i++) {
        ImageInfo info;
        Err err;
        int w = 0, h2 = 0;
        if (image_info(d->s[i].image, &info, &err) == 0) {
            int sw = info.orientation >= 5 && info.orientation <= 8 ? info.h : info.w;   // as decoded
            int sh = info.orientation >= 5 && info.orientation <= 8 ? info.w : info.h;
            augment_load_size(sw, sh, S, &w, &h2);
        }
        size_t n = file_size(d->s[i].image), tile = (size_t)w * h2 * 3;
        if (should_defer(&t, i) && n <= tile) h.jpeg_bytes += n, h.n_jpeg++;
        else h.tile_bytes += tile, h.n_tiles++;
    }
    return h;
}

static int held_differs(LoaderCacheHeld a, LoaderCacheHeld b) {
    return a.jpeg_bytes != b.jpeg_bytes || a.tile_bytes != b.tile_bytes || a.n_jpeg != b.n_jpeg || a.n_tiles != b.n_tiles;
}

// Epochs 0 (mosaic) and 1 (closed) of a loader with cache_ram on dc against one without on dn, in lockstep: every
// batch the same (batch_differs), and the cached ones' sources by the rule, with the files' bytes (check_sources on
// dn, the files of the same names). between: NULL, or called after epoch 0. Returns the batches compared; *held is
// the cache's content after epoch 0.
static int cached_runs(const Dataset *dc, const Dataset *dn, LoaderConfig c, Tally *t, int *differ,
                       LoaderCacheHeld *held, void (*between)(void)) {
    LoaderConfig cc = c;
    cc.cache_ram = 1;
    Loader *lc, *ln;
    Err err;
    if (loader_open(&cc, dc, &lc, &err)) { CHECK(0, "%s", err.msg); return 0; }
    if (loader_open(&c, dn, &ln, &err)) { CHECK(0, "%s", err.msg); loader_close(lc); return 0; }
    int batches = 0;
    for (int e = 0; e < 2; e++) {
        if (e == 1) {
            *held = loader_cache_held(lc);
            if (between) between();
        }
        loader_start_epoch(lc, e, e == 0), loader_start_epoch(ln, e, e == 0);
        Batch *bc, *bn;
        while (loader_next(lc, &bc) && loader_next(ln, &bn)) {
            batches++;
            *differ += batch_differs(bc, bn);
            check_sources(bc, t);
            loader_release(lc, bc), loader_release(ln, bn);
        }
    }
    if (loader_stats(lc).n_bad) CHECK(0, "the cached loader met %d bad images", loader_stats(lc).n_bad);
    loader_close(lc), loader_close(ln);
    return batches;
}

// (a), (c), (d): two epochs with cache=ram are the batches without the cache (recipes, targets, tile bytes,
// deferred bytes); after the first, the cache holds the JPEGs as their files' bytes and the PNG and the rotated
// JPEG decoded (the tiles the host path makes: compared with the uncached loader's), far below the estimate.
static void test_cache_keeps_bytes(void) {
    Tally t = { .d = &ds, .veto = -1, .max_pixels = (size_t)4 * SIDE * SIDE };
    LoaderCacheHeld held = { 0 };
    int differ = 0, batches = cached_runs(&ds, &ds, config(SIDE, 1), &t, &differ, &held, NULL);
    report("cache=ram", batches, &t);
    LoaderCacheHeld want = expected_held(&ds, SIDE, (size_t)4 * SIDE * SIDE);
    size_t estimate = loader_cache_bytes(&ds, SIDE);
    printf("    cache=ram: %d files kept as bytes (%zu), %d decoded (%zu); estimate %zu\n", held.n_jpeg,
           held.jpeg_bytes, held.n_tiles, held.tile_bytes, estimate);
    CHECK(batches == 8 && differ == 0 && t.deferred > 0, "%d batches, %d samples differ from those without the cache, "
          "%d deferred", batches, differ, t.deferred);
    CHECK(!held_differs(held, want) && want.n_jpeg == N_IMAGES - 2 && want.n_tiles == 2, "the cache holds %d files "
          "(%zu bytes) and %d tiles (%zu); expected %d (%zu) and %d (%zu)", held.n_jpeg, held.jpeg_bytes, held.n_tiles,
          held.tile_bytes, want.n_jpeg, want.jpeg_bytes, want.n_tiles, want.tile_bytes);
    CHECK(2 * (held.jpeg_bytes + held.tile_bytes) < estimate, "the cache holds %zu bytes, not far below the decoded "
          "estimate %zu", held.jpeg_bytes + held.tile_bytes, estimate);
}

// (b): a copy of the set whose files are deleted after the first epoch: the second epoch is the same batches, with
// no warning (no file read).
static Dataset copy;

static void delete_copy(void) {
    for (int i = 0; i < copy.n; i++)
        if (remove(copy.s[i].image)) CHECK(0, "cannot remove %s", copy.s[i].image);
}

static void test_cache_no_reads(void) {
    const char *to = test_tmpdir("loader_defer_copy");
    copy = ds;
    copy.s = xmalloc(ds.n * sizeof *copy.s);
    for (int i = 0; i < ds.n; i++) {
        copy.s[i] = ds.s[i];
        const char *base = strrchr(ds.s[i].image, '/');
        char *path = xmalloc(strlen(to) + strlen(base) + 1);
        sprintf(path, "%s%s", to, base);
        uint8_t *b;
        size_t n;
        Err err;
        FILE *f = NULL;
        if (image_read_file(ds.s[i].image, &b, &n, &err) == 0) {
            f = fopen(path, "wb");
            CHECK(f && fwrite(b, 1, n, f) == n, "cannot write %s", path);
            free(b);
        }
        if (f) fclose(f);
        copy.s[i].image = path;
    }
    LoaderConfig c = config(SIDE, 1);
    c.report = tmpfile();
    Tally t = { .d = &ds, .veto = -1, .max_pixels = (size_t)4 * SIDE * SIDE };
    LoaderCacheHeld held = { 0 };
    int differ = 0, batches = cached_runs(&copy, &ds, c, &t, &differ, &held, delete_copy);
    report("files deleted", batches, &t);
    long warned = ftell(c.report);
    FILE *gone = fopen(copy.s[0].image, "rb");
    CHECK(!gone && batches == 8 && differ == 0 && warned == 0 && held.n_jpeg + held.n_tiles == N_IMAGES,
          "files %s, %d batches, %d samples differ, %ld bytes of warnings, %d of %d images cached after epoch 0",
          gone ? "still there" : "deleted", batches, differ, warned, held.n_jpeg + held.n_tiles, N_IMAGES);
    if (gone) fclose(gone);
    fclose(c.report);
    for (int i = 0; i < copy.n; i++) free(copy.s[i].image);
    free(copy.s);
}

// The memory bound: at side SMALL (the limit raised so every JPEG fits the rule) some files are larger than the
// tile they decode to; those are kept decoded, so no image holds more than loader_cache_bytes counts. The pixels are
// still those without the cache (the host twin decodes a deferred source as the loader does).
static void test_cache_larger_files(void) {
    LoaderConfig c = config(SMALL, 1);
    c.defer_max_pixels = (size_t)1 << 20;
    LoaderConfig cc = c;
    cc.cache_ram = 1;
    Loader *l;
    Err err;
    if (loader_open(&cc, &ds, &l, &err)) { CHECK(0, "%s", err.msg); return; }
    loader_start_epoch(l, 0, 1);
    Batch *b;
    while (loader_next(l, &b)) loader_release(l, b);
    LoaderCacheHeld held = loader_cache_held(l), want = expected_held(&ds, SMALL, c.defer_max_pixels);
    loader_close(l);
    printf("    side %d: %d files kept as bytes (%zu), %d decoded (%zu); estimate %zu\n", SMALL, held.n_jpeg,
           held.jpeg_bytes, held.n_tiles, held.tile_bytes, loader_cache_bytes(&ds, SMALL));
    CHECK(!held_differs(held, want) && want.n_tiles > 2 && want.n_jpeg > 0, "the cache holds %d files (%zu bytes) and "
          "%d tiles (%zu); expected %d (%zu) and %d (%zu), some of each beyond the PNG and the rotated one", held.n_jpeg,
          held.jpeg_bytes, held.n_tiles, held.tile_bytes, want.n_jpeg, want.jpeg_bytes, want.n_tiles, want.tile_bytes);
    CHECK(held.jpeg_bytes + held.tile_bytes <= loader_cache_bytes(&ds, SMALL), "the cache holds %zu bytes, over the "
          "estimate %zu", held.jpeg_bytes + held.tile_bytes, loader_cache_bytes(&ds, SMALL));
    Tally t = { .d = &ds, .veto = -1 };   // the rule is the cache's here: check_same's pixels only
    t.replaced = 1;
    int batches = compare_runs(&ds, cc, 4, &t, NULL);
    CHECK(batches == 8 && t.wrong_targets == 0 && t.wrong_pixels == 0 && t.wrong_floats == 0, "%d batches, %d targets, "
          "%d pixels, %d floats differ from the host path's", batches, t.wrong_targets, t.wrong_pixels, t.wrong_floats);
}

// (d) on coco128 at 640 (every JPEG fits the rule): the cache holds the files' bytes, a fraction of the estimate.
static void test_cache_coco128(void) {
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    LoaderConfig c = config(640, 1);
    c.batch = 16, c.cache_ram = 1, c.aug.mixup = 0;
    Loader *l;
    if (loader_open(&c, &coco, &l, &err)) { CHECK(0, "%s", err.msg); dataset_free(&coco); return; }
    loader_start_epoch(l, 0, 1);
    Batch *b;
    while (loader_next(l, &b)) loader_release(l, b);
    LoaderCacheHeld held = loader_cache_held(l), want = expected_held(&coco, 640, (size_t)4 * 640 * 640);
    loader_close(l);
    size_t estimate = loader_cache_bytes(&coco, 640);
    printf("    coco128 at 640: %d files kept as bytes (%.1f MB), %d decoded (%.1f MB); estimate %.1f MB\n",
           held.n_jpeg, held.jpeg_bytes / 1e6, held.n_tiles, held.tile_bytes / 1e6, estimate / 1e6);
    CHECK(!held_differs(held, want) && held.n_jpeg > 0, "the cache holds %d files (%zu bytes) and %d tiles (%zu); "
          "expected %d (%zu) and %d (%zu)", held.n_jpeg, held.jpeg_bytes, held.n_tiles, held.tile_bytes, want.n_jpeg,
          want.jpeg_bytes, want.n_tiles, want.tile_bytes);
    CHECK(3 * (held.jpeg_bytes + held.tile_bytes) < estimate, "%zu bytes held against the estimate %zu",
          held.jpeg_bytes + held.tile_bytes, estimate);
    dataset_free(&coco);
}

int main(void) {
    alarm(300);   // a hang (a worker never joined) fails the run instead of stalling CI
    if (make_dataset()) return 1;
    RUN(test_synthetic);
    RUN(test_device_veto);
    RUN(test_rect_and_missing);
    RUN(test_arena_pinned);
    RUN(test_damaged_bytes);
    RUN(test_cache_keeps_bytes);
    RUN(test_cache_no_reads);
    RUN(test_cache_larger_files);
    RUN(test_coco128);
    RUN(test_cache_coco128);
    return test_summary();
}
