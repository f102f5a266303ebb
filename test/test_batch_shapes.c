// test_batch_shapes.c: the training batches whose shape is not imgsz x imgsz, against the references'
// formulas. rect=1: LoadImagesAndLabels(rect=True, pad=0.0)'s order (ascending h/w, no shuffle) and
// batch shapes, each sample letterboxed to its batch's shape without mosaic. multi_scale=1: train.py's
// sizes (randrange(int(0.5 S), int(1.5 S) + 32) // 32 * 32 per batch, the stretched shape
// ceil(x * sf / 32) * 32 in float64, quirks included), drawn from (seed, epoch, batch), and
// F.interpolate(mode="bilinear", align_corners=False)'s values. Legend: S imgsz, N batch.
#include <limits.h>
#include <math.h>

#include "core/spec/ops.h"
#include "core/train/train.h"
#include "core/eval/val.h"
#include "io/augment.h"
#include "io/image.h"
#include "io/loader.h"
#include "io/synth.h"
#include "test/synth_batch.h"
#include "test/test.h"

#define N_IMAGES 22
#define S        96
#define N        4

static Dataset ds;

// The synthetic set at sides 40..180: aspect ratios from tall to wide (as test_loader builds it).
static int make_dataset(void) {
    static char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", test_tmpdir("shapes"));
    SynthConfig c = synth_defaults();
    c.n_train = N_IMAGES, c.n_val = 0, c.min_side = 40, c.max_side = 180, c.seed = 5;
    return synth_dataset(dir, &c, &ds);
}

static double ar_of(int i) { return (double)ds.s[i].h / ds.s[i].w; }

// rect's plan: ascending h/w, and per batch [max_ar, 1] / [1, 1/min_ar] / [1, 1] * S / 32, ceil, * 32
// (pad 0.0 for training), worked out here from the formula, not from val_rect_shape.
static void test_rect_plan(void) {
    if (!ds.n && make_dataset()) { CHECK(0, "no data"); return; }
    ValPlan p;
    val_plan(&ds, N, S, 1, 0.0, &p);
    int shapes_seen = 0, tall = 0, wide = 0;
    for (int k = 1; k < ds.n; k++)
        CHECK(ar_of(p.order[k - 1]) <= ar_of(p.order[k]), "position %d: h/w %.4f after %.4f", k, ar_of(p.order[k]),
              ar_of(p.order[k - 1]));
    for (int b = 0; b < p.n_batches; b++) {
        double lo = INFINITY, hi = -INFINITY;
        for (int k = b * N; k < ds.n && k < (b + 1) * N; k++) lo = fmin(lo, ar_of(p.order[k])), hi = fmax(hi, ar_of(p.order[k]));
        double rh = hi < 1 ? hi : 1, rw = lo > 1 ? 1 / lo : 1;   // [max_ar, 1], [1, 1/min_ar] or [1, 1]
        int h = (int)ceil(rh * S / 32.0) * 32, w = (int)ceil(rw * S / 32.0) * 32;
        CHECK(p.shape[b][0] == h && p.shape[b][1] == w, "batch %d (h/w %.3f..%.3f): %dx%d, want %dx%d", b, lo, hi,
              p.shape[b][0], p.shape[b][1], h, w);
        CHECK(h <= S && w <= S && (h == S || w == S), "batch %d: %dx%d exceeds imgsz or has no side of imgsz", b, h, w);
        shapes_seen += b == 0 || p.shape[b][0] != p.shape[b - 1][0] || p.shape[b][1] != p.shape[b - 1][1];
        wide += h < S, tall += w < S;
    }
    printf("    %d batches, %d shape changes, %d wide and %d tall batches\n", p.n_batches, shapes_seen, wide, tall);
    CHECK(wide > 0 && tall > 0, "the data should give wide and tall batches (%d, %d)", wide, tall);
    // worked examples: h/w 0.75 at 640 gives 480 x 640 with pad 0 (512 x 672 with val's 0.5)
    int h, w;
    val_rect_shape(0.5, 0.75, 640, 0.0, &h, &w);
    CHECK(h == 480 && w == 640, "h/w 0.75 at 640, pad 0: %dx%d", h, w);
    val_rect_shape(1.25, 2.0, 640, 0.0, &h, &w);
    CHECK(h == 640 && w == 512, "h/w 1.25..2 at 640, pad 0: %dx%d", h, w);
    val_plan_free(&p);
}

// With every random augmentation at its identity (no scale, translation, rotation, colour or flips)
// and mosaic and mixup at probability 1, a rect batch holds exactly load_image then letterbox(img,
// batch shape, auto=False, scaleup=True): no mosaic happened. Two epochs give the same order.
static void test_rect_loader(void) {
    if (!ds.n && make_dataset()) { CHECK(0, "no data"); return; }
    ValPlan p;
    val_plan(&ds, N, S, 1, 0.0, &p);
    LoaderConfig c = { .batch = N, .workers = 2, .seed = 7, .train = 1, .rect_order = p.order,
                       .rect_shape = (const int (*)[2])p.shape };
    c.aug = (AugParams){ .img_size = S, .mosaic = 1, .mixup = 1, .rect = 1 };
    Loader *ld;
    Err err;
    if (loader_open(&c, &ds, &ld, &err)) { CHECK(0, "%s", err.msg); val_plan_free(&p); return; }
    int differ = 0, boxes = 0, own = 0;
    for (int epoch = 0; epoch < 2; epoch++) {
        loader_start_epoch(ld, epoch, 1);
        Batch *b;
        for (int nb = 0; loader_next(ld, &b); nb++) {
            CHECK(b->h == p.shape[nb][0] && b->w == p.shape[nb][1], "epoch %d batch %d: %dx%d, plan %dx%d", epoch, nb,
                  b->h, b->w, p.shape[nb][0], p.shape[nb][1]);
            for (int k = 0; k < b->n; k++) {
                int i = b->index[k];
                CHECK(i == p.order[nb * N + k], "epoch %d batch %d image %d: dataset index %d, rect order %d", epoch,
                      nb, k, i, p.order[nb * N + k]);
                if (epoch) continue;
                Image raw, lb;
                if (image_load(ds.s[i].image, &raw, &err)) { CHECK(0, "%s", err.msg); continue; }
                Image resized = augment_load_resize(&raw, S, 1);
                lb = augment_letterbox(&resized, b->w, b->h, 1, 0, NULL);
                CHECK(lb.w == b->w && lb.h == b->h, "letterbox %dx%d", lb.w, lb.h);
                if (lb.w == b->w && lb.h == b->h)
                    differ += memcmp(lb.px, b->images + (size_t)k * b->h * b->w * 3, (size_t)b->h * b->w * 3) != 0;
                image_free(&raw); image_free(&resized); image_free(&lb);
                own += ds.s[i].nbox;
            }
            if (!epoch) boxes += b->nt;
            loader_release(ld, b);
        }
    }
    printf("    %d boxes in the batches, %d in the images' label files\n", boxes, own);
    CHECK(differ == 0, "%d samples differ from load_image + letterbox to the batch shape", differ);
    CHECK(boxes <= own && boxes > own / 2, "%d boxes for %d labels: a mosaic would bring its partners' boxes", boxes, own);
    loader_close(ld);
    val_plan_free(&p);
}

// train.py's sizes: multiples of 32 in [int(0.5 S) // 32 * 32, (int(1.5 S) + 31) // 32 * 32], each
// drawn, the same for the same (seed, epoch, batch), and the stretched shapes as Python computes them.
static void test_multi_scale_sizes(void) {
    enum { SZ = 640, DRAWS = 4000 };
    int hits[64] = { 0 }, lo = 1 << 30, hi = 0, bad = 0;
    for (int i = 0; i < DRAWS; i++) {
        int sz = train_ms_size(3, i / 100, i % 100, SZ);
        bad += sz % 32 != 0 || sz < 320 || sz > 960;
        if (sz >= 0 && sz / 32 < 64) hits[sz / 32]++;
        lo = sz < lo ? sz : lo, hi = sz > hi ? sz : hi;
    }
    int sizes = 0, fewest = DRAWS;
    for (int k = 0; k < 64; k++)
        if (hits[k]) sizes++, fewest = hits[k] < fewest ? hits[k] : fewest;
    printf("    imgsz 640: %d sizes from %d to %d, the rarest drawn %d times of %d\n", sizes, lo, hi, fewest, DRAWS);
    CHECK(bad == 0 && lo == 320 && hi == 960 && sizes == 21, "%d bad draws; sizes %d..%d, %d of them", bad, lo, hi, sizes);
    CHECK(fewest > DRAWS / 21 / 2, "a size is drawn %d times in %d (uniform: %d)", fewest, DRAWS, DRAWS / 21);
    CHECK(train_ms_size(3, 5, 7, SZ) == train_ms_size(3, 5, 7, SZ), "the same (seed, epoch, batch) drew differently");
    int same = 0;
    for (int i = 0; i < 50; i++) same += train_ms_size(3, 0, i, SZ) == train_ms_size(4, 0, i, SZ);
    CHECK(same < 25, "another seed drew the same size %d times in 50", same);
    CHECK(train_ms_max(640) == 960 && train_ms_max(96) == 160 && train_ms_max(608) == 928, "largest sizes %d %d %d",
          train_ms_max(640), train_ms_max(96), train_ms_max(608));
    // (sz, H, W) -> (h, w) from Python's math.ceil(x * (sz / max(H, W)) / 32) * 32, when sf != 1
    static const int cases[][5] = {
        { 320, 480, 640, 256, 320 }, { 960, 480, 640, 736, 960 }, { 352, 640, 640, 352, 352 },
        { 608, 384, 640, 384, 608 }, { 640, 640, 640, 640, 640 }, { 640, 480, 640, 480, 640 },
        { 672, 608, 608, 704, 704 },   // 608 * (672 / 608) = 672.0000000000001: the reference stretches to 704
        { 224, 800, 800, 256, 256 },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int h, w;
        train_ms_shape(cases[k][0], cases[k][1], cases[k][2], &h, &w);
        CHECK(h == cases[k][3] && w == cases[k][4], "sz %d, %dx%d: %dx%d, want %dx%d", cases[k][0], cases[k][1],
              cases[k][2], h, w, cases[k][3], cases[k][4]);
    }
    static Config cfg;
    cfg.imgsz = 640;
    CHECK(train_plan_size(&cfg) == 640, "no multi_scale: the plan is for imgsz");
    cfg.multi_scale = 1;
    CHECK(train_plan_size(&cfg) == 960, "multi_scale at 640: the plan is for %d, want 960", train_plan_size(&cfg));
}

// PyTorch's bilinear values: 2x2 -> 4x4 and 4x4 -> 2x2 (exact in fp32), 1x3 -> 1x5, and a random map
// of odd sizes against the formula in double.
static void test_resize_values(void) {
    float a[4] = { 0, 1, 2, 3 }, up[16];
    resize_bilinear_cpu(map_make(a, 1, 2, 2, 1), map_make(up, 1, 4, 4, 1));
    static const float want_up[16] = { 0, 0.25f, 0.75f, 1, 0.5f, 0.75f, 1.25f, 1.5f, 1.5f, 1.75f, 2.25f, 2.5f,
                                       2, 2.25f, 2.75f, 3 };
    CHECK(!memcmp(up, want_up, sizeof up), "2x2 -> 4x4: %g %g %g %g / %g %g %g %g ...", up[0], up[1], up[2], up[3],
          up[4], up[5], up[6], up[7]);
    float b[16], down[4];
    for (int i = 0; i < 16; i++) b[i] = (float)i;
    resize_bilinear_cpu(map_make(b, 1, 4, 4, 1), map_make(down, 1, 2, 2, 1));
    CHECK(down[0] == 2.5f && down[1] == 4.5f && down[2] == 10.5f && down[3] == 12.5f, "4x4 -> 2x2: %g %g %g %g",
          down[0], down[1], down[2], down[3]);
    float r[3] = { 0, 10, 20 }, r5[5];
    resize_bilinear_cpu(map_make(r, 1, 1, 3, 1), map_make(r5, 1, 1, 5, 1));
    static const double want5[5] = { 0, 4, 10, 16, 20 };   // sources 0 (clamped), 0.4, 1.0, 1.6, 2.2 (-> 2)
    for (int i = 0; i < 5; i++) CHECK(fabs(r5[i] - want5[i]) < 1e-5, "1x3 -> 1x5 [%d]: %.9g, want %g", i, r5[i], want5[i]);
    enum { NN = 2, H = 7, W = 5, C = 3, P = 11, Q = 3 };
    static float x[NN * H * W * 4], y[NN * P * Q * C];
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)((i * 37 % 101) / 100.0);
    Map xm = map_make(x, NN, H, W, C);
    xm.ld = 4;                                     // a channel slice: the pixel stride is not C
    resize_bilinear_cpu(xm, map_make(y, NN, P, Q, C));
    double worst = 0;
    for (int n = 0; n < NN; n++)
        for (int p = 0; p < P; p++)
            for (int q = 0; q < Q; q++)
                for (int c = 0; c < C; c++) {
                    double sy = fmax((double)H / P * (p + 0.5) - 0.5, 0), sx = fmax((double)W / Q * (q + 0.5) - 0.5, 0);
                    int y0 = (int)sy, x0 = (int)sx, y1 = y0 < H - 1 ? y0 + 1 : y0, x1 = x0 < W - 1 ? x0 + 1 : x0;
                    double ly = sy - y0, lx = sx - x0;
#define X(yy, xx) (double)x[((n * H + (yy)) * W + (xx)) * 4 + c]
                    double v = (1 - ly) * ((1 - lx) * X(y0, x0) + lx * X(y0, x1)) + ly * ((1 - lx) * X(y1, x0) + lx * X(y1, x1));
#undef X
                    worst = fmax(worst, fabs(v - y[((n * P + p) * Q + q) * C + c]));
                }
    printf("    7x5 -> 11x3 (ld 4): largest difference from the formula in double %.3g\n", worst);
    CHECK(worst < 2e-6, "bilinear values off by %g", worst);
}

int main(void) {
    RUN(test_rect_plan);
    RUN(test_rect_loader);
    RUN(test_multi_scale_sizes);
    RUN(test_resize_values);
    return test_summary();
}
