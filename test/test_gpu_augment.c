// test_gpu_augment.c: the device twin of augment_apply_pixels (gpu/augment.cu, issue 37) gives the CPU's
// bytes exactly: on recipes drawn from random hyper-parameters (mosaic, mixup, letterbox with and without
// a resize of its body, the exact halving, affine and perspective warps, HSV, flips) over noise tiles of
// random sizes, and on coco128 samples decoded on the host. The backend table's CPU slot is the CPU apply
// (every build); the GPU tests skip without CUDA or a GPU.
// Legend: s img_size; W,H a sample's size; tiles: a recipe's decoded sources.
#include <limits.h>
#include <math.h>
#include <string.h>

#include "core/spec/backend.h"
#include "io/augment.h"
#include "io/dataset.h"
#include "io/image.h"
#include "io/loader.h"
#include "test/synth_batch.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "cfg/config.h"
#include "gpu/model_gpu.h"
#include "gpu/ops.h"
#endif

#define CPU_TESTS(X) X(test_cpu_slot_is_apply) X(test_cpu_batch_slot)
#define GPU_TESTS(X) X(test_random_recipes) X(test_letterbox_bodies) X(test_backend_slot) X(test_coco128_samples) \
                     X(test_batch_synthetic) X(test_batch_coco128) \
                     X(test_batch_deferred) X(test_plan_counts_tile_stages)
// acts: the batch tests' input; aug: two tile stages of 32 MiB
#define GPU_ARENAS { 0, 0, 0, (size_t)64 << 20, (size_t)256 << 20, 0, (size_t)64 << 20 }

// ---- shared by both builds ---------------------------------------------------------------------------

enum { N_TILES = 12 };

// Noise tiles, long side s, the other side random; every third has flat-colour rows (grey and not), so
// HSV's grey shortcut and saturated colours are met.
static void make_tiles(Image *t, int s, Rng *rng) {
    for (int i = 0; i < N_TILES; i++) {
        int other = 3 + rng_int(rng, s - 2), w = i % 2 ? s : other, h = i % 2 ? other : s;
        t[i] = image_new(w, h, 0);
        for (size_t k = 0; k < (size_t)w * h * 3; k++) t[i].px[k] = (uint8_t)rng_int(rng, 256);
        for (int y = 0; y < h && i % 3 == 0; y += 3) {
            uint8_t c[3] = { (uint8_t)rng_int(rng, 256), (uint8_t)rng_int(rng, 256), (uint8_t)rng_int(rng, 256) };
            if (y % 2) c[1] = c[2] = c[0];
            for (int x = 0; x < w; x++) memcpy(t[i].px + ((size_t)y * w + x) * 3, c, 3);
        }
    }
}

// Random hyper-parameters: every augmentation on or off, geometry from none to strong.
static AugParams random_params(int s, Rng *rng) {
    AugParams p = { .img_size = s };
    p.mosaic = rng_int(rng, 3) ? 0.6 : 0, p.mixup = rng_int(rng, 2) ? 0.6 : 0;
    p.degrees = rng_int(rng, 2) ? rng_uniform(rng, 0, 45) : 0;
    p.shear = rng_int(rng, 3) ? 0 : rng_uniform(rng, 0, 10);
    p.perspective = rng_int(rng, 3) ? 0 : rng_uniform(rng, 0, 1e-3);
    p.translate = rng_uniform(rng, 0, 0.3), p.scale = rng_uniform(rng, 0, 0.9);
    if (rng_int(rng, 4)) p.hsv_h = 0.015, p.hsv_s = 0.7, p.hsv_v = 0.4;
    p.flipud = 0.5, p.fliplr = 0.5;
    return p;
}

// The recipe's sources from tiles (indices drawn from 0..N_TILES-1).
static int recipe_tiles(const AugRecipe *r, const Image *all, Image *tiles) {
    int idx[8], m = augment_recipe_sources(r, idx);
    for (int k = 0; k < m; k++) tiles[k] = all[idx[k]];
    return m;
}

// The CPU apply into fresh memory.
static Image cpu_apply(const AugRecipe *r, const Image *tiles) {
    Image out = { 0 };
    AugScratch scratch = { 0 };
    augment_apply_pixels(r, tiles, &scratch, &out);
    augment_scratch_free(&scratch);
    return out;
}

// The CPU backend's augment slot is augment_apply_pixels (the loader's path on machines without a GPU).
static void test_cpu_slot_is_apply(void) {
    Rng g = rng_for(21, 0, 0);
    Image all[N_TILES];
    make_tiles(all, 64, &g);
    int bad = 0;
    for (int k = 0; k < 40; k++) {
        AugParams p = random_params(64, &g);
        AugRecipe r;
        Rng d = rng_for(22, 0, (uint64_t)k);
        augment_draw(&p, N_TILES, k % N_TILES, 64, 64, &d, &r);
        Image tiles[8];
        recipe_tiles(&r, all, tiles);
        Image want = cpu_apply(&r, tiles), got = image_new(want.w, want.h, 1);
        backend_cpu.dev.augment(NULL, &r, tiles, got.px);
        bad += memcmp(want.px, got.px, (size_t)want.w * want.h * 3) != 0;
        image_free(&want); image_free(&got);
    }
    CHECK(bad == 0, "%d of 40 samples differ between the CPU slot and augment_apply_pixels", bad);
    for (int i = 0; i < N_TILES; i++) image_free(&all[i]);
}

// ---- augment=gpu's batches (the loader's defer_pixels) ----------------------------------------------

// The loader's augment=gpu batches: hyp.scratch-high plus rotation, shear, perspective and flips up-down,
// mixup at 0.5 so it comes often; batch 6 of side s.
static LoaderConfig batch_config(int s, int cache) {
    LoaderConfig c = { .batch = 6, .workers = 2, .seed = 11, .train = 1, .defer_pixels = 1, .cache_ram = cache,
                       .mem_available = (size_t)1 << 30 };
    c.aug = (AugParams){ .img_size = s, .hsv_h = 0.015, .hsv_s = 0.7, .hsv_v = 0.4, .degrees = 10, .translate = 0.1,
                         .scale = 0.9, .shear = 2, .perspective = 2e-4, .flipud = 0.5, .fliplr = 0.5, .mosaic = 1,
                         .mixup = 0.5 };
    return c;
}

// The synthetic set of test_loader (20 images of 60-180 px) in a scratch folder; 0 or -1.
static int synth_set(Dataset *ds) {
    SynthConfig c = synth_defaults();
    c.n_train = 20, c.n_val = 0, c.min_side = 60, c.max_side = 180, c.seed = 3;
    return synth_dataset(test_tmpdir("gpu_augment"), &c, ds);
}

static void synth_free(Dataset *ds) {          // synth_dataset's arrays (its names are static)
    for (int i = 0; i < ds->n; i++) free(ds->s[i].image), free(ds->s[i].box);
    free(ds->s);
}

// The CPU backend's augment_batch: each sample's bytes (augment_sample_pixels, a grey one included) / 255.0f,
// as upload_u8 of the bytes the loader would have made.
static void test_cpu_batch_slot(void) {
    Dataset ds;
    if (synth_set(&ds)) { CHECK(0, "no synthetic set"); return; }
    LoaderConfig c = batch_config(96, 0);
    Loader *l;
    Err err;
    CHECK(loader_open(&c, &ds, &l, &err) == 0, "%s", err.msg);
    if (t_failed_now) { synth_free(&ds); return; }
    loader_start_epoch(l, 0, 1);
    Batch *b;
    CHECK(loader_next(l, &b) && b->aug, "no batch with recipes");
    if (!t_failed_now) {
        AugSample s[7];
        memcpy(s, b->aug, 6 * sizeof *s);
        s[6] = (AugSample){ .grey = 1 };
        size_t px = (size_t)96 * 96 * 3;
        float *got = xmalloc(7 * px * sizeof(float)), *want = xmalloc(7 * px * sizeof(float));
        uint8_t *u = xmalloc(px);
        backend_cpu.dev.augment_batch(NULL, s, 7, 96, 96, got);
        AugScratch scratch = { 0 };
        for (int i = 0; i < 7; i++) {
            augment_sample_pixels(&s[i], &scratch, &(Image){ 96, 96, u });
            for (size_t k = 0; k < px; k++) want[i * px + k] = u[k] / 255.0f;
            CHECK(i < 6 || u[0] == 114, "the grey sample's first byte is %d", u[0]);
        }
        augment_scratch_free(&scratch);
        CHECK(memcmp(got, want, 7 * px * sizeof(float)) == 0, "the CPU backend's augment_batch differs from the samples' bytes / 255");
        free(got), free(want), free(u);
        loader_release(l, b);
    }
    loader_close(l);
    synth_free(&ds);
}

#include "test/gpu_harness.h"
#ifdef USE_CUDA

// Device vs CPU on one recipe: 0 when equal, else prints the first differing byte and returns 1.
static int compare(const AugRecipe *r, const Image *tiles, const char *what, int k) {
    Image want = cpu_apply(r, tiles), got = image_new(want.w, want.h, 1);
    augment_pixels_gpu(&dev, r, tiles, got.px);
    size_t n = (size_t)want.w * want.h * 3, i = 0;
    while (i < n && want.px[i] == got.px[i]) i++;
    if (i < n)
        printf("    %s %d (mosaic %d mixup %d hsv %d flips %d%d, %dx%d): byte %zu (x %zu, y %zu) is %d, the CPU's %d\n",
               what, k, r->mosaic, r->mixup, r->hsv, r->flipud, r->fliplr, want.w, want.h, i, i / 3 % want.w,
               i / 3 / want.w, got.px[i], want.px[i]);
    image_free(&want); image_free(&got);
    return i < n;
}

static void test_random_recipes(void) {
    NEED_GPU();
    Rng g = rng_for(31, 0, 0);
    int bad = 0, kinds[3] = { 0 }, persp = 0;
    for (int s = 64; s <= 160; s += 96) {
        Image all[N_TILES];
        make_tiles(all, s, &g);
        for (int k = 0; k < 150; k++) {
            AugParams p = random_params(s, &g);
            AugRecipe r;
            Rng d = rng_for(32, (uint64_t)s, (uint64_t)k);
            augment_draw(&p, N_TILES, k % N_TILES, s, s, &d, &r);
            kinds[r.mosaic + r.mixup]++;
            persp += r.warp[0].M[6] != 0 || r.warp[0].M[7] != 0;
            Image tiles[8];
            recipe_tiles(&r, all, tiles);
            bad += compare(&r, tiles, "recipe", k);
        }
        for (int i = 0; i < N_TILES; i++) image_free(&all[i]);
    }
    CHECK(bad == 0, "%d of 300 samples differ between the device and the CPU", bad);
    CHECK(kinds[0] && kinds[1] && kinds[2] && persp, "letterbox %d, mosaic %d, mixup %d, perspective %d: a kind "
          "never came", kinds[0], kinds[1], kinds[2], persp);
}

// rect training letterboxes to a batch shape smaller than s: the body is resized (INTER_LINEAR, or the
// 2x2 mean for an exact halving) before the warp.
static void test_letterbox_bodies(void) {
    NEED_GPU();
    Rng g = rng_for(41, 0, 0);
    int bad = 0, s = 128;
    Image all[N_TILES];
    make_tiles(all, s, &g);
    image_free(&all[0]);
    all[0] = image_new(s, s / 2, 0);                     // halves exactly into 64x32
    for (size_t i = 0; i < (size_t)s * s / 2 * 3; i++) all[0].px[i] = (uint8_t)rng_int(&g, 256);
    for (int k = 0; k < 60; k++) {
        AugParams p = random_params(s, &g);
        p.rect = 1;
        int w = k % 3 == 0 ? 64 : 32 + 32 * rng_int(&g, 4), h = k % 3 == 0 ? 32 : 32 + 32 * rng_int(&g, 4);
        AugRecipe r;
        Rng d = rng_for(42, 0, (uint64_t)k);
        augment_draw(&p, N_TILES, k % 3 == 0 ? 0 : k % N_TILES, w, h, &d, &r);
        Image tiles[8];
        recipe_tiles(&r, all, tiles);
        bad += compare(&r, tiles, "letterbox", k);
    }
    CHECK(bad == 0, "%d of 60 letterboxed samples differ between the device and the CPU", bad);
    for (int i = 0; i < N_TILES; i++) image_free(&all[i]);
}

// The GPU backend's augment slot gives the CPU slot's bytes.
static void test_backend_slot(void) {
    NEED_GPU();
    Rng g = rng_for(51, 0, 0);
    Image all[N_TILES];
    make_tiles(all, 96, &g);
    AugParams p = { .img_size = 96, .mosaic = 1, .mixup = 1, .translate = 0.1, .scale = 0.5, .hsv_h = 0.015,
                    .hsv_s = 0.7, .hsv_v = 0.4, .fliplr = 0.5 };
    AugRecipe r;
    Rng d = rng_for(52, 0, 0);
    augment_draw(&p, N_TILES, 3, 96, 96, &d, &r);
    Image tiles[8];
    recipe_tiles(&r, all, tiles);
    Image a = image_new(96, 96, 0), b = image_new(96, 96, 1);
    backend_cpu.dev.augment(NULL, &r, tiles, a.px);
    backend_gpu_get()->dev.augment(&dev, &r, tiles, b.px);
    CHECK(memcmp(a.px, b.px, (size_t)96 * 96 * 3) == 0, "the GPU backend's augment slot differs from the CPU's");
    image_free(&a); image_free(&b);
    for (int i = 0; i < N_TILES; i++) image_free(&all[i]);
}

// Real photographs: coco128's first 32 images decoded and long-side resized as the loader does (s = 640),
// 64 training samples with hyp.scratch-high's augmentation plus rotation, shear and perspective.
static void test_coco128_samples(void) {
    NEED_GPU();
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    enum { M = 32, S = 640 };
    Image all[M];
    int n = coco.n < M ? coco.n : M, bad = 0;
    for (int i = 0; i < n; i++) {
        Image raw;
        CHECK(image_load(coco.s[i].image, &raw, &err) == 0, "%s", err.msg);
        if (t_failed_now) return;
        all[i] = augment_load_resize(&raw, S, 1);
        image_free(&raw);
    }
    AugParams p = { .img_size = S, .hsv_h = 0.015, .hsv_s = 0.7, .hsv_v = 0.4, .degrees = 10, .translate = 0.1,
                    .scale = 0.9, .shear = 2, .perspective = 1e-4, .flipud = 0.5, .fliplr = 0.5, .mosaic = 0.8,
                    .mixup = 0.3 };
    for (int k = 0; k < 2 * n; k++) {
        AugRecipe r;
        Rng d = rng_for(61, 0, (uint64_t)k);
        augment_draw(&p, n, k % n, S, S, &d, &r);
        Image tiles[8];
        int idx[8], m = augment_recipe_sources(&r, idx);
        for (int j = 0; j < m; j++) tiles[j] = all[idx[j]];
        bad += compare(&r, tiles, "coco128 sample", k);
    }
    CHECK(bad == 0, "%d of %d coco128 samples differ between the device and the CPU", bad, 2 * n);
    for (int i = 0; i < n; i++) image_free(&all[i]);
    dataset_free(&coco);
}

// How the GPU gets a batch's tiles (gpu/augment.cu): through scratch (no stage), through an aug stage copied
// in the step, prefetched on the copy stream, prefetched as two shares (two devices' on one: the stages in
// turn, each share's span holding bytes of the other's samples), through a stage too small for the batch
// (in runs, a sample larger than it through scratch).
enum { VIA_SCRATCH, VIA_STAGE, VIA_PREFETCH, VIA_SHARES, VIA_SMALL_STAGE, VIA_COUNT };
static const char *VIA_NAMES[VIA_COUNT] = { "scratch", "stage", "prefetched", "two prefetched shares", "small stage" };

// The bytes samples s[0..n) span in their arena (what one stage copy takes).
static size_t span_bytes(const AugSample *s, int n) {
    const uint8_t *lo = NULL, *hi = NULL;
    for (int i = 0; i < n; i++)
        for (int k = 0; !s[i].grey && k < s[i].n_tiles; k++) {
            const uint8_t *p = s[i].tiles[k].px, *e = p + (size_t)s[i].tiles[k].w * s[i].tiles[k].h * 3;
            lo = !lo || p < lo ? p : lo, hi = !hi || e > hi ? e : hi;
        }
    return lo ? (size_t)(hi - lo) : 0;
}

// The GPU's augment_batch of s[0..n) into d (device), queued the way `via` says; 0, or 1 when a prefetch
// was not used as it should be.
static int gpu_batch(const AugSample *s, int n, int h, int w, float *d, int via) {
    size_t px = (size_t)h * w * 3;
    int half = n / 2, bad = 0;
    augment_stage_cap_gpu(&dev, via == VIA_SCRATCH ? 0 : via == VIA_SMALL_STAGE ? span_bytes(s, n) / 3 : SIZE_MAX);
    if (via == VIA_PREFETCH) augment_prefetch_gpu(&dev, s, n);
    if (via == VIA_SHARES) augment_prefetch_gpu(&dev, s, half), augment_prefetch_gpu(&dev, s + half, n - half);
    int queued = 0;
    for (int k = 0; k < 2; k++) queued += dev.aug_stage[k].s != NULL;
    bad += (via == VIA_PREFETCH && queued != 1) || (via == VIA_SHARES && queued != 2 - (half == 0));
    if (via == VIA_SHARES) {
        augment_batch_gpu(&dev, s, half, h, w, d);
        augment_batch_gpu(&dev, s + half, n - half, h, w, d + half * px);
    } else {
        augment_batch_gpu(&dev, s, n, h, w, d);
    }
    for (int k = 0; k < 2; k++) bad += via >= VIA_PREFETCH && dev.aug_stage[k].s != NULL;   // each used once
    augment_stage_cap_gpu(&dev, SIZE_MAX);
    return bad;
}

// Every batch of `epochs` epochs (the last with mosaic closed: the letterbox path) made by the GPU's
// augment_batch into a device input, every way of getting the tiles (VIA_*), against the CPU backend's,
// float for float; a grey sample added to the first. Returns the samples that differ (printing the first
// byte of each).
static int batches_differ(const Dataset *ds, const LoaderConfig *c, int epochs, const char *what) {
    Loader *l;
    Err err;
    if (loader_open(c, ds, &l, &err)) { CHECK(0, "%s: %s", what, err.msg); return 1; }
    int bad = 0, batches = 0;
    size_t cap = (size_t)(c->batch + 1) * c->aug.img_size * c->aug.img_size * 3;
    float *want = xmalloc(cap * sizeof(float)), *got = xmalloc(cap * sizeof(float));
    float *d = (float *)arena_take(&dev.acts, cap * sizeof(float), 256);
    AugSample *s = xmalloc((c->batch + 1) * sizeof *s);
    for (int e = 0; e < epochs; e++) {
        loader_start_epoch(l, e, e < epochs - 1);
        Batch *b;
        while (loader_next(l, &b)) {
            int n = b->n;
            memcpy(s, b->aug, n * sizeof *s);
            if (batches == 0) s[n++] = (AugSample){ .grey = 1 };
            size_t px = (size_t)b->h * b->w * 3;
            backend_cpu.dev.augment_batch(NULL, s, n, b->h, b->w, want);
            for (int via = 0; via < VIA_COUNT; via++) {
                checkCuda(cudaMemset(d, 0xff, n * px * sizeof(float)));   // NaNs: a sample left unwritten differs
                if (gpu_batch(s, n, b->h, b->w, d, via) && bad++ < 5)
                    printf("    %s epoch %d batch %d, %s: the prefetched tiles were not used once\n", what, e, b->number,
                           VIA_NAMES[via]);
                device_sync(&dev);
                checkCuda(cudaMemcpy(got, d, n * px * sizeof(float), cudaMemcpyDeviceToHost));
                for (int i = 0; i < n; i++) {
                    size_t k = 0;
                    while (k < px && want[i * px + k] == got[i * px + k]) k++;
                    if (k == px) continue;
                    const AugRecipe *r = &s[i].r;
                    if (bad++ < 5)
                        printf("    %s epoch %d batch %d sample %d, %s (grey %d mosaic %d mixup %d hsv %d flips %d%d, "
                               "%dx%d): float %zu (x %zu, y %zu) is %.9g, the CPU's %.9g\n", what, e, b->number, i,
                               VIA_NAMES[via], s[i].grey, r->mosaic, r->mixup, r->hsv, r->flipud, r->fliplr, b->w, b->h,
                               k, k / 3 % b->w, k / 3 / b->w, got[i * px + k], want[i * px + k]);
                }
            }
            batches++;
            loader_release(l, b);
        }
    }
    printf("    %s: %d batches compared, %d ways each\n", what, batches, VIA_COUNT);
    loader_close(l);
    free(want), free(got), free(s);
    arena_reset(&dev.acts);
    return bad;
}

// The synthetic set: sources in the batch slots' buffers and in the RAM cache, square and rect batches
// (letterboxed to their shapes: resized bodies).
static void test_batch_synthetic(void) {
    NEED_GPU();
    Dataset ds;
    if (synth_set(&ds)) { CHECK(0, "no synthetic set"); return; }
    for (int cache = 0; cache < 2; cache++) {
        LoaderConfig c = batch_config(96, cache);
        CHECK(batches_differ(&ds, &c, 2, cache ? "synthetic, cache=ram" : "synthetic") == 0,
              "samples differ between the GPU's augment_batch and the CPU's (cache %d)", cache);
    }
    static const int shape[4][2] = { { 64, 96 }, { 96, 64 }, { 32, 96 }, { 96, 96 } };
    int order[20];
    for (int i = 0; i < 20; i++) order[i] = 19 - i;
    LoaderConfig c = batch_config(96, 0);
    c.aug.rect = 1, c.rect_order = order, c.rect_shape = shape;
    CHECK(batches_differ(&ds, &c, 1, "synthetic, rect") == 0, "rect samples differ between the GPU and the CPU");
    synth_free(&ds);
}

// coco128 at 320 (long-side resizes of real photographs), two epochs of 8-image batches.
static void test_batch_coco128(void) {
    NEED_GPU();
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    LoaderConfig c = batch_config(320, 0);
    c.batch = 8;
    CHECK(batches_differ(&coco, &c, 2, "coco128") == 0, "coco128 samples differ between the GPU and the CPU");
    dataset_free(&coco);
}

// The GPU's memory plan (arithmetic: no GPU needed) under augment=gpu holds two tile stages of the micro-batch
// at the samples' side (cfg imgsz, not the larger multi_scale plan size the model is built for) and a
// micro-batch's run in scratch; under augment=cpu no stage.
static void test_plan_counts_tile_stages(void) {
    enum { N = 4, S = 64, PLAN = 96 };
    for (int gpu = 0; gpu < 2; gpu++) {
        static Config cfg;
        Err err;
        char *ov[] = { "imgsz=64", gpu ? "augment=gpu" : "augment=cpu" };
        Model m;
        if (config_load("cfg/t.ini", 2, ov, &cfg, &err) || model_build(&cfg, N, PLAN, &m, &err)) {
            CHECK(0, "%s", err.msg);
            return;
        }
        GpuPlan p = model_gpu_plan(&m, GPU_FP32, 0);
        size_t stage = (size_t)N * AUG_STAGE_IMAGES * S * S * 3, body = (size_t)S * S * 3;
        if (gpu)
            CHECK(p.arena[ARENA_AUG] == augment_stage_bytes_gpu(N, S) && p.arena[ARENA_AUG] >= 2 * stage &&
                  p.arena[ARENA_AUG] < 2 * stage + 1024 && p.augment >= N * body,
                  "augment=gpu: %zu bytes of tile stages (want 2 x %zu), %zu of scratch for augmentation",
                  p.arena[ARENA_AUG], stage, p.augment);
        else
            CHECK(p.arena[ARENA_AUG] == 0, "augment=cpu: %zu bytes of tile stages", p.arena[ARENA_AUG]);
        model_free(&m);
    }
}

// The device's batch of deferred samples against the CPU twin's at side S (coco128 at 640 is each JPEG's stored
// size; at 320 a resize makes each tile): mean |d| per sample at most 2 levels, under 3% of the values more
// than 16 levels off (nvJPEG's IDCT and chroma upsampling are not libjpeg-turbo's). 0 when within.
static int deferred_close(const Dataset *ds, int S) {
    LoaderConfig c = batch_config(S, 0);
    c.batch = 4, c.defer_decode = 1;
    Loader *l;
    Err err;
    if (loader_open(&c, ds, &l, &err)) { CHECK(0, "%s", err.msg); return 1; }
    size_t px = (size_t)S * S * 3;
    float *want = xmalloc(4 * px * sizeof(float)), *got = xmalloc(4 * px * sizeof(float));
    float *d = (float *)arena_take(&dev.acts, 4 * px * sizeof(float), 256);
    int bad = 0, deferred = 0;
    loader_start_epoch(l, 0, 1);
    Batch *b;
    for (int batches = 0; batches < 3 && loader_next(l, &b); batches++) {
        for (int i = 0; i < b->n; i++) deferred += b->aug[i].jpeg != NULL;
        backend_cpu.dev.augment_batch(NULL, b->aug, b->n, b->h, b->w, want);
        augment_batch_gpu(&dev, b->aug, b->n, b->h, b->w, d);
        device_sync(&dev);
        checkCuda(cudaMemcpy(got, d, b->n * px * sizeof(float), cudaMemcpyDeviceToHost));
        for (int i = 0; i < b->n; i++) {
            double sum = 0;
            size_t far = 0;
            for (size_t k = 0; k < px; k++) {
                double e = fabs((double)got[i * px + k] - want[i * px + k]) * 255;
                sum += e, far += e > 16;
            }
            printf("    %d px, batch %d sample %d: mean |d| %.3f levels, %.3f%% more than 16 off\n", S, batches, i,
                   sum / px, 100.0 * far / px);
            bad += sum / px > 2 || far > px * 3 / 100;
        }
        loader_release(l, b);
    }
    CHECK(deferred > 0, "no sample came with deferred sources at %d px", S);
    loader_close(l);
    free(want), free(got);
    arena_reset(&dev.acts);
    return bad;
}

// coco128 with the loader's defer_decode (the workers leave the JPEGs as bytes): decoded by the device's host
// fallback, the CPU twin's bytes exactly, every way test_batch_coco128 checks; decoded by nvJPEG, close to them.
static void test_batch_deferred(void) {
    NEED_GPU();
    Dataset coco;
    Err err;
    NEED_COCO128_TRAIN(coco, err);
    LoaderConfig c = batch_config(320, 0);
    c.batch = 8, c.defer_decode = 1;
    augment_nvjpeg_gpu(&dev, 0);
    CHECK(batches_differ(&coco, &c, 1, "coco128, deferred, the host's decode") == 0,
          "deferred samples decoded on the host differ between the GPU and the CPU");
    if (augment_nvjpeg_gpu(&dev, 1)) {
        for (int S = 640; S >= 320 && !t_failed_now; S -= 320)
            CHECK(deferred_close(&coco, S) == 0, "nvJPEG-decoded samples at %d px are further from the CPU's than allowed", S);
    } else {
        printf("    no nvJPEG here: the device's own decode not compared\n");
    }
    dataset_free(&coco);
}

GPU_MAIN()
#endif
