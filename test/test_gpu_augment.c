// test_gpu_augment.c: the device twin of augment_apply_pixels (gpu/augment.cu, issue 37) gives the CPU's
// bytes exactly: on recipes drawn from random hyper-parameters (mosaic, mixup, letterbox with and without
// a resize of its body, the exact halving, affine and perspective warps, HSV, flips) over noise tiles of
// random sizes, and on coco128 samples decoded on the host. The backend table's CPU slot is the CPU apply
// (every build); the GPU tests skip without CUDA or a GPU.
// Legend: s img_size; W,H a sample's size; tiles: a recipe's decoded sources.
#include <limits.h>
#include <string.h>

#include "core/spec/backend.h"
#include "io/augment.h"
#include "io/dataset.h"
#include "io/image.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/ops.h"
#endif

#define CPU_TESTS(X) X(test_cpu_slot_is_apply)
#define GPU_TESTS(X) X(test_random_recipes) X(test_letterbox_bodies) X(test_backend_slot) X(test_coco128_samples)
#define GPU_ARENAS { 0, 0, 0, 0, (size_t)256 << 20 }

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
    char yaml[PATH_MAX + 64];
    NEED_COCO128(yaml);
    Dataset coco;
    Err err;
    DatasetOptions opt = { .quiet = 1, .report = tmpfile() };
    CHECK(dataset_open(yaml, NULL, "train", &opt, &coco, &err) == 0, "%s", err.msg);
    fclose(opt.report);
    if (t_failed_now) return;
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

GPU_MAIN()
#endif
