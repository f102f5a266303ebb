// test_loader.c: the threaded batch loader gives the same bytes for any worker count, covers every
// sample once per epoch, survives an image that breaks mid-run, refuses a RAM cache that cannot fit,
// and closes promptly mid-epoch. Data: a small synthetic set. Legend: N batch, SIDE the sample side.
#include <limits.h>
#include <stdint.h>

#include "io/loader.h"
#include "io/picture.h"
#include "io/synth.h"
#include "test/synth_batch.h"
#include "test/test.h"
#include "test/fake_pins.h"

#define N_IMAGES 20
#define SIDE     96
#define PIN_SYNTH 0xbf03a806194f3ec1ull         // test_pinned_batches
#define PIN_COCO  0x0d9dc930771eb016ull
#define PIN_RECT  0x163e4d3ca2dd9df7ull

static Dataset ds;
static char data_dir[PATH_MAX];

// A Dataset built straight from the synthetic set's rendering (no label parsing involved).
static int make_dataset(void) {
    snprintf(data_dir, sizeof data_dir, "%s", test_tmpdir("loader"));
    SynthConfig c = synth_defaults();
    c.n_train = N_IMAGES, c.n_val = 0, c.min_side = 60, c.max_side = 180, c.seed = 3;
    return synth_dataset(data_dir, &c, &ds);
}

static LoaderConfig config(int workers, int train) {
    LoaderConfig c = { .batch = 6, .workers = workers, .seed = 11, .train = train };
    c.aug = (AugParams){ .img_size = SIDE, .hsv_h = 0.015, .hsv_s = 0.7, .hsv_v = 0.4, .translate = 0.1,
                         .scale = 0.9, .fliplr = 0.5, .mosaic = 1, .mixup = 0.5 };
    return c;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t batch_hash(const Batch *b) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &b->n, sizeof b->n), h = fnv(h, &b->nt, sizeof b->nt);
    h = fnv(h, b->images, (size_t)b->n * b->S * b->S * 3);
    h = fnv(h, b->targets, (size_t)b->nt * 6 * sizeof(float));
    return fnv(h, b->index, (size_t)b->n * sizeof(int));
}

// Run epochs 0..n_epochs-1 (mosaic off in the last one) and hash every batch into out.
static int run_epochs(const LoaderConfig *c, int n_epochs, uint64_t *out, int max_out) {
    Loader *l;
    Err err;
    if (loader_open(c, &ds, &l, &err)) { printf("    %s\n", err.msg); return -1; }
    int k = 0;
    for (int e = 0; e < n_epochs; e++) {
        loader_start_epoch(l, e, e < n_epochs - 1);
        Batch *b;
        while (loader_next(l, &b)) {
            if (k < max_out) out[k++] = batch_hash(b);
            loader_release(l, b);
        }
    }
    loader_close(l);
    return k;
}

static void test_same_bytes_for_any_worker_count(void) {
    uint64_t h[3][16];
    int n[3];
    for (int w = 1; w <= 3; w++) {
        LoaderConfig c = config(w, 1);
        c.prefetch = w == 3 ? 2 : 0;
        n[w - 1] = run_epochs(&c, 2, h[w - 1], 16);
    }
    CHECK(n[0] == 8, "%d batches in 2 epochs of %d images by 6, expected 8", n[0], N_IMAGES);
    for (int w = 2; w <= 3; w++) {
        CHECK(n[w - 1] == n[0], "workers=%d: %d batches, workers=1: %d", w, n[w - 1], n[0]);
        for (int k = 0; k < n[0] && k < n[w - 1]; k++)
            CHECK(h[w - 1][k] == h[0][k], "workers=%d: batch %d differs from workers=1", w, k);
    }
    LoaderConfig c = config(2, 1);
    c.seed = 12;
    uint64_t other[16];
    run_epochs(&c, 2, other, 16);
    CHECK(other[0] != h[0][0], "seed 12 gave the same first batch as seed 11");
}

static void test_epoch_covers_every_sample_once(void) {
    LoaderConfig c = config(3, 1);
    Loader *l;
    Err err;
    CHECK(loader_open(&c, &ds, &l, &err) == 0, "%s", err.msg);
    int order[2][N_IMAGES];
    for (int e = 0; e < 2; e++) {
        int seen[N_IMAGES] = { 0 }, k = 0, last = -1, sizes = 0;
        loader_start_epoch(l, e, 1);
        Batch *b;
        while (loader_next(l, &b)) {
            CHECK(b->epoch == e && b->number == last + 1, "batch %d of epoch %d came as %d", last + 1, e, b->number);
            last = b->number;
            sizes = sizes * 10 + b->n;
            for (int i = 0; i < b->n; i++, k++) seen[b->index[i]]++, order[e][k] = b->index[i];
            for (int t = 0; t < b->nt; t++) {
                const float *r = &b->targets[6 * t];
                CHECK(r[0] >= 0 && r[0] < b->n && r[1] >= 0 && r[1] < SYNTH_NC, "row %d: image %g class %g", t, r[0], r[1]);
                CHECK(r[2] >= 0 && r[2] <= 1 && r[3] >= 0 && r[3] <= 1 && r[4] > 0 && r[5] > 0,
                      "row %d: box %g %g %g %g", t, r[2], r[3], r[4], r[5]);
            }
            loader_release(l, b);
        }
        CHECK(sizes == 6662, "batch sizes %d, expected 6,6,6,2 (the last one smaller)", sizes);
        for (int i = 0; i < N_IMAGES; i++) CHECK(seen[i] == 1, "epoch %d: sample %d seen %d times", e, i, seen[i]);
        LoaderStats st = loader_stats(l);
        CHECK(st.epoch == e && st.samples == N_IMAGES && st.samples_per_s > 0 && st.wait_s >= 0,
              "stats: epoch %d samples %d, %.1f/s, wait %.3f s", st.epoch, st.samples, st.samples_per_s, st.wait_s);
    }
    CHECK(memcmp(order[0], order[1], sizeof order[0]) != 0, "epochs 0 and 1 have the same order");
    loader_close(l);
}

// Validation: in order, no randomness, each image letterboxed into SIDE x SIDE with its boxes moved along.
static void test_validation_letterbox(void) {
    LoaderConfig c = config(2, 0);
    Loader *l;
    Err err;
    CHECK(loader_open(&c, &ds, &l, &err) == 0, "%s", err.msg);
    loader_start_epoch(l, 0, 1);
    Batch *b;
    int k = 0;
    while (loader_next(l, &b)) {
        int t = 0;
        for (int i = 0; i < b->n; i++, k++) {
            const Sample *s = &ds.s[k];
            CHECK(b->index[i] == k, "validation image %d is sample %d", k, b->index[i]);
            double r0 = (double)SIDE / (s->w > s->h ? s->w : s->h);
            int w = (int)(s->w * r0), h = (int)(s->h * r0);   // the long-side-resized image
            for (int j = 0; j < s->nbox; j++, t++) {
                const float *row = &b->targets[6 * t];
                double cx = (s->box[j].cx * w + (SIDE - w) / 2.0) / SIDE, cy = (s->box[j].cy * h + (SIDE - h) / 2.0) / SIDE;
                CHECK(row[0] == i && row[1] == s->box[j].cls, "image %d box %d: row %g %g", k, j, row[0], row[1]);
                CHECK(fabs(row[2] - cx) < 2e-3 && fabs(row[3] - cy) < 2e-3, "image %d box %d: centre %g,%g "
                      "expected %g,%g", k, j, row[2], row[3], cx, cy);
            }
            CHECK(b->info[i].r == 1, "image %d: letterbox scale %g", k, b->info[i].r);
        }
        CHECK(t == b->nt, "batch %d: %d rows, expected %d", b->number, b->nt, t);
        loader_release(l, b);
    }
    CHECK(k == N_IMAGES, "%d validation images", k);
    loader_close(l);
}

static void test_batch_to_float(void) {
    LoaderConfig c = config(1, 0);
    Loader *l;
    Err err;
    CHECK(loader_open(&c, &ds, &l, &err) == 0, "%s", err.msg);
    loader_start_epoch(l, 0, 1);
    Batch *b;
    CHECK(loader_next(l, &b) == 1, "no batch");
    size_t n = (size_t)b->n * SIDE * SIDE * 3;
    float *x = malloc(n * sizeof *x);
    loader_batch_to_float(b, x);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += x[i] != b->images[i] / 255.0f;
    CHECK(bad == 0, "%zu values differ from images/255", bad);
    CHECK(((uintptr_t)b->images & 4095) == 0, "batch images not page-aligned");
    free(x);
    loader_release(l, b);
    loader_close(l);
}

static void test_ram_cache(void) {
    LoaderConfig c = config(2, 1);
    c.cache_ram = 1, c.mem_available = 100000;   // bytes: far too little
    Loader *l = NULL;
    Err err = { "" };
    CHECK(loader_open(&c, &ds, &l, &err) == -1, "a cache larger than the memory was accepted");
    CHECK(strstr(err.msg, "cache=ram") && strstr(err.msg, "GB") && strstr(err.msg, "smaller imgsz") &&
          strstr(err.msg, "upper bound"),
          "refusal message: %s", err.msg);
    size_t need = loader_cache_bytes(&ds, SIDE);
    CHECK(need > 0 && need < (size_t)N_IMAGES * SIDE * SIDE * 3 + 1, "estimate %zu bytes", need);
    uint64_t plain[8], cached[8];
    c.mem_available = 0;    // the real MemAvailable
    int n = run_epochs(&c, 2, cached, 8);
    c.cache_ram = 0;
    run_epochs(&c, 2, plain, 8);
    CHECK(n == 8, "cached: %d batches", n);
    for (int k = 0; k < n; k++) CHECK(cached[k] == plain[k], "batch %d differs with cache=ram", k);
}

static void test_close_mid_epoch(void) {
    for (int hold = 0; hold < 2; hold++) {
        LoaderConfig c = config(3, 1);
        c.batch = 2, c.prefetch = 2;
        Loader *l;
        Err err;
        CHECK(loader_open(&c, &ds, &l, &err) == 0, "%s", err.msg);
        loader_start_epoch(l, 0, 1);
        Batch *b;
        if (hold) CHECK(loader_next(l, &b) == 1, "no batch");   // held, never released
        double t = now_seconds();
        loader_close(l);   // a hang here is caught by the alarm in main
        CHECK(now_seconds() - t < 5, "close took %.1f s", now_seconds() - t);
    }
}

// A file that becomes unreadable between epochs is reported once, by name, and replaced.
static void test_bad_image_mid_run(void) {
    LoaderConfig c = config(2, 1);
    c.report = tmpfile();
    Loader *l;
    Err err;
    CHECK(loader_open(&c, &ds, &l, &err) == 0, "%s", err.msg);
    const char *victim = ds.s[4].image;
    for (int e = 0; e < 3; e++) {
        if (e == 1) {
            FILE *f = fopen(victim, "w");
            if (f) fputs("not an image any more", f), fclose(f);
        }
        loader_start_epoch(l, e, 1);
        Batch *b;
        int images = 0;
        while (loader_next(l, &b)) images += b->n, loader_release(l, b);
        CHECK(images == N_IMAGES, "epoch %d: %d images", e, images);
    }
    CHECK(loader_stats(l).n_bad == 1, "%d bad images counted", loader_stats(l).n_bad);
    loader_close(l);
    char text[4096] = "";
    rewind(c.report);
    size_t len = fread(text, 1, sizeof text - 1, c.report);
    text[len] = 0;
    fclose(c.report);
    int mentions = 0;
    for (const char *p = text; (p = strstr(p, victim)); p++) mentions++;
    CHECK(mentions == 1, "%s reported %d times:\n%s", victim, mentions, text);
}

static void test_picture(void) {
    LoaderConfig c = config(2, 1);
    c.batch = 7;
    Loader *l;
    Err err;
    CHECK(loader_open(&c, &ds, &l, &err) == 0, "%s", err.msg);
    loader_start_epoch(l, 0, 1);
    Batch *b;
    CHECK(loader_next(l, &b) == 1, "no batch");
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/batch.jpg", data_dir);
    CHECK(picture_batch(b, ds.names, ds.nc, NULL, path, &err) == 0, "%s", err.msg);
    Image im;
    CHECK(image_load(path, &im, &err) == 0, "%s", err.msg);
    CHECK(im.w == 3 * SIDE && im.h == 3 * SIDE, "picture %dx%d, expected %dx%d", im.w, im.h, 3 * SIDE, 3 * SIDE);
    image_free(&im);
    loader_release(l, b);
    loader_close(l);
}

// Real JPEGs of many sizes (coco128 through dataset_open): full batches with plausible targets,
// then close while the workers are still busy.
static void test_coco128(void) {
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    LoaderConfig c = config(2, 1);
    c.batch = 8;
    Loader *l;
    CHECK(loader_open(&c, &coco, &l, &err) == 0, "%s", err.msg);
    loader_start_epoch(l, 0, 1);
    for (int k = 0; k < 2; k++) {
        Batch *b;
        CHECK(loader_next(l, &b) == 1 && b->n == 8, "batch %d missing or short", k);
        CHECK(b->nt > 8, "batch %d: only %d targets in 8 mosaics of coco128", k, b->nt);
        for (int t = 0; t < b->nt; t++) CHECK(b->targets[6 * t + 1] >= 0 && b->targets[6 * t + 1] < coco.nc,
                                              "row %d: class %g", t, b->targets[6 * t + 1]);
        loader_release(l, b);
    }
    CHECK(loader_stats(l).n_bad == 0, "%d bad images", loader_stats(l).n_bad);
    loader_close(l);
    dataset_free(&coco);
}

// Pinned batches: the bytes and targets of every batch of a few epochs (mosaic, mixup, every
// geometric and colour augmentation, then mosaic closed: the letterbox path), hashed together. The
// values were recorded before augmentation was split into draws (augment_draw) and their application
// (augment_apply): they prove the split changed no byte. coco128 decodes with libjpeg-turbo, so its
// value holds for the decoder the project builds with.
static int pin_defer, pin_cache, pin_deferred;   // test_pinned_deferred: defer_pixels, cache_ram; batches seen so

static LoaderConfig config_all(void) {
    LoaderConfig c = config(2, 1);
    c.aug.degrees = 10, c.aug.shear = 2, c.aug.perspective = 2e-4, c.aug.flipud = 0.5;
    c.defer_pixels = pin_defer, c.cache_ram = pin_cache;
    c.mem_available = (size_t)1 << 30;           // the cache's budget: coco128 at 320 takes 30 MB
    return c;
}

// defer_pixels: the batch holds recipes and sources, not pixels; make them on the host (as the CPU
// backend's augment_batch does, and a device must) into its image buffer, cleared first.
static void pixels_of(Batch *b) {
    if (!pin_defer) return;
    if (!b->aug) { CHECK(0, "batch %d of epoch %d: no recipes with defer_pixels", b->number, b->epoch); return; }
    pin_deferred++;
    size_t px = (size_t)b->h * b->w * 3;
    memset(b->images, 0, px * b->n);
    AugScratch scratch = { 0 };
    for (int i = 0; i < b->n; i++) augment_sample_pixels(&b->aug[i], &scratch, &(Image){ b->w, b->h, b->images + i * px });
    augment_scratch_free(&scratch);
}

static uint64_t epochs_hash(const LoaderConfig *c, const Dataset *d, int n_epochs, int max_batches) {
    Loader *l;
    Err err;
    if (loader_open(c, d, &l, &err)) { printf("    %s\n", err.msg); return 0; }
    uint64_t h = 0xcbf29ce484222325ull;
    for (int e = 0; e < n_epochs; e++) {
        loader_start_epoch(l, e, e < n_epochs - 1);
        Batch *b;
        for (int k = 0; loader_next(l, &b); k++) {
            if (k < max_batches) { pixels_of(b); uint64_t bh = batch_hash(b); h = fnv(h, &bh, sizeof bh); }
            loader_release(l, b);
        }
    }
    loader_close(l);
    return h;
}

static void test_pinned_batches(void) {
    LoaderConfig c = config_all();
    uint64_t h = epochs_hash(&c, &ds, 3, 100);
    printf("    synthetic: %016llx\n", (unsigned long long)h);
    CHECK(h == PIN_SYNTH, "synthetic batches hash %016llx, pinned %016llx: augmentation changed its bytes",
          (unsigned long long)h, (unsigned long long)PIN_SYNTH);
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    c.batch = 8;
    c.aug.img_size = 320;
    h = epochs_hash(&c, &coco, 2, 4);
    printf("    coco128: %016llx\n", (unsigned long long)h);
    CHECK(h == PIN_COCO, "coco128 batches hash %016llx, pinned %016llx: augmentation (or the JPEG decoder) changed "
          "their bytes", (unsigned long long)h, (unsigned long long)PIN_COCO);
    dataset_free(&coco);
}

// Rect training (aug.rect: no mosaic, each batch letterboxed to its shape, a resized body) pinned likewise.
static void test_pinned_rect_batches(void) {
    LoaderConfig c = config_all();
    static const int shape[4][2] = { { 64, 96 }, { 96, 64 }, { 32, 96 }, { 96, 96 } };
    int order[N_IMAGES];
    for (int i = 0; i < N_IMAGES; i++) order[i] = N_IMAGES - 1 - i;
    c.aug.rect = 1, c.rect_order = order, c.rect_shape = shape;
    Loader *l;
    Err err;
    CHECK(loader_open(&c, &ds, &l, &err) == 0, "%s", err.msg);
    uint64_t h = 0xcbf29ce484222325ull;
    loader_start_epoch(l, 0, 1);
    Batch *b;
    while (loader_next(l, &b)) {
        pixels_of(b);
        h = fnv(h, &b->h, sizeof b->h), h = fnv(h, &b->w, sizeof b->w), h = fnv(h, &b->nt, sizeof b->nt);
        h = fnv(h, b->images, (size_t)b->n * b->h * b->w * 3);
        h = fnv(h, b->targets, (size_t)b->nt * 6 * sizeof(float));
        loader_release(l, b);
    }
    loader_close(l);
    printf("    rect: %016llx\n", (unsigned long long)h);
    CHECK(h == PIN_RECT, "rect batches hash %016llx, pinned %016llx: augmentation changed their bytes",
          (unsigned long long)h, (unsigned long long)PIN_RECT);
}

// augment=gpu's batches (defer_pixels: the workers decode and draw, the sources kept with the batch or in
// the RAM cache) made on the host from their recipes: the pinned bytes and targets, every worker count's.
static void test_pinned_deferred(void) {
    pin_defer = 1, pin_deferred = 0;
    for (pin_cache = 0; pin_cache < 2; pin_cache++) {
        printf("    cache_ram=%d\n", pin_cache);
        test_pinned_rect_batches();
        test_pinned_batches();                   // coco128 last: it may skip
    }
    pin_defer = pin_cache = 0;
    if (t_skip_reason[0]) printf("    the coco128 part skipped: %s\n", t_skip_reason);
    t_skip_reason[0] = 0;                        // the synthetic and rect parts ran
    CHECK(pin_deferred > 0, "no deferred batch was seen");
}

// augment=gpu (defer_pixels) when no image loads: every sample is the grey stand-in (AugSample.grey, no tiles,
// no boxes), with and without the RAM cache, so a device makes 114s instead of reading sources that are not there.
static void test_deferred_unreadable(void) {
    Dataset bad = ds;
    bad.s = xcalloc(ds.n, sizeof *bad.s);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/no-such-image.jpg", data_dir);
    for (int i = 0; i < ds.n; i++) bad.s[i] = ds.s[i], bad.s[i].image = path;
    for (int cache = 0; cache < 2; cache++) {
        LoaderConfig c = config(2, 1);
        c.defer_pixels = 1, c.cache_ram = cache, c.mem_available = (size_t)1 << 30, c.report = tmpfile();
        Loader *l;
        Err err;
        if (loader_open(&c, &bad, &l, &err)) { CHECK(0, "cache %d: %s", cache, err.msg); fclose(c.report); continue; }
        loader_start_epoch(l, 0, 1);
        Batch *b;
        int grey = 0, samples = 0, wrong = 0;
        uint8_t px[SIDE * SIDE * 3];
        AugScratch scratch = { 0 };
        while (loader_next(l, &b)) {
            for (int i = 0; i < b->n; i++, samples++) {
                grey += b->aug && b->aug[i].grey && b->aug[i].n_tiles == 0;
                if (!b->aug || b->h != SIDE || b->w != SIDE) continue;
                augment_sample_pixels(&b->aug[i], &scratch, &(Image){ b->w, b->h, px });
                for (size_t k = 0; k < sizeof px; k++) wrong += px[k] != 114;
            }
            CHECK(b->nt == 0, "cache %d: %d boxes from no image", cache, b->nt);
            loader_release(l, b);
        }
        augment_scratch_free(&scratch);
        loader_close(l);
        fclose(c.report);
        CHECK(samples == N_IMAGES && grey == samples && wrong == 0,
              "cache %d: %d of %d samples grey, %d bytes not 114", cache, grey, samples, wrong);
    }
    free(bad.s);
}

// The tiles of batch b in its arena: inside, samples disjoint. Returns the bytes the tiles cover.
static size_t arena_tiles_bytes(const Batch *b, int *outside, int *overlaps) {
    size_t total = 0;
    for (int i = 0; i < b->n; i++) {
        const AugSample *a = &b->aug[i];
        size_t lo = SIZE_MAX, hi = 0, bytes = 0;
        for (int k = 0; !a->grey && k < a->n_tiles; k++) {
            size_t n = (size_t)a->tiles[k].w * a->tiles[k].h * 3;
            const uint8_t *p = a->tiles[k].px;
            if (!b->tile_arena || p < b->tile_arena || p + n > b->tile_arena + b->tile_bytes) { (*outside)++; continue; }
            size_t at = (size_t)(p - b->tile_arena);
            lo = at < lo ? at : lo, hi = at + n > hi ? at + n : hi, bytes += n;
        }
        if (!a->grey && (a->arena != b->tile_arena || a->arena_bytes != b->tile_bytes)) (*outside)++;
        if (hi && hi - lo != bytes) (*overlaps)++;      // a sample's tiles are one run of bytes
        for (int j = 0; j < i && hi; j++)               // that no other sample's tiles enter
            for (int k = 0; !b->aug[j].grey && k < b->aug[j].n_tiles; k++) {
                size_t at = (size_t)(b->aug[j].tiles[k].px - b->tile_arena);
                if (at >= lo && at < hi) (*overlaps)++;
            }
        total += bytes;
    }
    return total;
}

// augment=gpu's one host arena per batch slot (Batch.tile_arena), with and without the RAM cache: every
// sample's tiles lie inside [tile_arena, tile_arena + tile_bytes), each sample's together and none overlapping
// another's, so one copy uploads a share; the arena is page-locked through the pinning hooks (before it
// exists too: pinned when allocated, and again when grown) and unpinned before it is freed. late: the hooks
// given after an epoch, when the arenas exist (loader_pin_buffers pins them then).
static void test_deferred_arena(void) {
    for (int v = 0; v < 3; v++) {
        int cache = v == 1, late = v == 2;
        FakePins f = { 0 };
        LoaderConfig c = config(3, 1);
        c.defer_pixels = 1, c.cache_ram = cache, c.mem_available = (size_t)1 << 30;
        Loader *l;
        Err err;
        if (loader_open(&c, &ds, &l, &err)) { CHECK(0, "cache %d: %s", cache, err.msg); continue; }
        LoaderPinning hooks = { fake_pin, fake_unpin, &f };
        int slots_pinned = late ? 0 : loader_pin_buffers(l, &hooks);
        int batches = 0, outside = 0, overlaps = 0, unpinned = 0, short_arena = 0;
        for (int e = 0; e < 2; e++) {
            if (late && e == 1) slots_pinned = loader_pin_buffers(l, &hooks);   // image buffers; + the arenas
            loader_start_epoch(l, e, e == 0);
            Batch *b;
            while (loader_next(l, &b)) {
                batches++;
                size_t bytes = arena_tiles_bytes(b, &outside, &overlaps);
                short_arena += bytes != b->tile_bytes;   // no gaps: the arena holds this batch's tiles alone
                unpinned += (!late || e == 1) && b->tile_bytes && !pinned_live(&f, b->tile_arena);
                loader_release(l, b);
            }
        }
        int pins = f.pins;
        loader_close(l);
        CHECK(batches == 2 * ((N_IMAGES + 5) / 6) && outside == 0 && overlaps == 0 && short_arena == 0,
              "cache %d late %d: %d batches, %d tiles outside the arena, %d overlaps, %d arenas with bytes of no tile",
              cache, late, batches, outside, overlaps, short_arena);
        CHECK(unpinned == 0 && pins > slots_pinned, "cache %d late %d: %d batches' arenas not page-locked (%d pins, %d "
              "of them image buffers)", cache, late, unpinned, pins, slots_pinned);
        CHECK(f.n_live == 0 && f.unpins == f.pins, "cache %d late %d: %d pinned, %d unpinned after close", cache, late,
              f.pins, f.unpins);
    }
}

int main(void) {
    alarm(120);   // a hang (a worker never joined) fails the run instead of stalling CI
    if (make_dataset()) return 1;
    RUN(test_same_bytes_for_any_worker_count);
    RUN(test_epoch_covers_every_sample_once);
    RUN(test_validation_letterbox);
    RUN(test_batch_to_float);
    RUN(test_ram_cache);
    RUN(test_close_mid_epoch);
    RUN(test_picture);
    RUN(test_coco128);
    RUN(test_pinned_batches);
    RUN(test_pinned_rect_batches);
    RUN(test_pinned_deferred);
    RUN(test_deferred_unreadable);
    RUN(test_deferred_arena);
    RUN(test_bad_image_mid_run);   // last: it breaks an image file
    return test_summary();
}
