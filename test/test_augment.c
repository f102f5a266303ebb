// test_augment.c: io/augment against the reference's numbers (§3.4-§3.7, §7 #29-#33) and against
// the pixels: synthetic images of coloured rectangles whose boxes must still frame their colour.
// Legend: s sample side; class k is drawn in colour COLOURS[k] on a dark background.
#include "io/augment.h"
#include "test/test.h"

static const uint8_t COLOURS[6][3] = { {255,0,0}, {0,255,0}, {0,0,255}, {255,255,0}, {255,0,255}, {0,255,255} };
static const uint8_t BACKGROUND = 40;

// ---- a synthetic dataset: images of 2-3 filled rectangles, held in memory ---------------------------

#define N_SYN 6
typedef struct { Image img[N_SYN]; Box box[N_SYN][3]; int nbox[N_SYN]; int gets, puts; } Synth;

static void fill_rect(Image *im, int x1, int y1, int x2, int y2, const uint8_t rgb[3]) {
    for (int y = y1; y < y2; y++)
        for (int x = x1; x < x2; x++) memcpy(im->px + ((size_t)y * im->w + x) * 3, rgb, 3);
}

// Rectangle k of an image: a box with its pixels; sizes vary with the index, none overlap.
static void synth_make(Synth *sy, int s) {
    memset(sy, 0, sizeof *sy);
    for (int i = 0; i < N_SYN; i++) {
        int w = i % 2 ? s : s * 3 / 4, h = i % 2 ? s * 2 / 3 : s;   // long side s, landscape or portrait
        sy->img[i] = image_new(w, h, BACKGROUND);
        sy->nbox[i] = 2 + i % 2;
        for (int k = 0; k < sy->nbox[i]; k++) {
            int cls = (i + k) % 6;
            int x1 = w / 10 + k * w * 3 / 10, y1 = h / 8 + (k % 2) * h / 3;
            int x2 = x1 + w / 5 + i * w / 100, y2 = y1 + h / 4 + 5 * k;   // within 0.95w, 0.75h
            fill_rect(&sy->img[i], x1, y1, x2, y2, COLOURS[cls]);
            sy->box[i][k] = (Box){ cls, (x1 + x2) / 2.f / w, (y1 + y2) / 2.f / h,
                                   (float)(x2 - x1) / w, (float)(y2 - y1) / h };
        }
    }
}

static void synth_free(Synth *sy) { for (int i = 0; i < N_SYN; i++) image_free(&sy->img[i]); }

// A RAM-cache-like source: views into the synthetic images, handed back through put.
static int synth_get(void *ctx, int index, Image *img, Box **boxes, int *nbox, Err *err) {
    Synth *sy = ctx;
    *img = sy->img[index];
    *boxes = sy->box[index];
    *nbox = sy->nbox[index];
    sy->gets++;
    return 0;
}
static void synth_put(void *ctx, int index, Image *img, Box *boxes) { ((Synth *)ctx)->puts++; }

static SampleSource synth_source(Synth *sy) {
    return (SampleSource){ .n = N_SYN, .ctx = sy, .get = synth_get, .put = synth_put };
}

static AugParams params_geometry(int s) {     // hyp.scratch-high geometry; colour, mixup off
    return (AugParams){ .img_size = s, .translate = 0.1, .scale = 0.9, .fliplr = 0.5, .flipud = 0.5,
                        .mosaic = 1.0 };
}

// ---- reference implementations: the plain code the fast paths in io/ must equal byte for byte --------

#define PAD 114

// OpenCV's saturate_cast<int>(double).
static int sat_round_ref(double v) { return v >= INT32_MAX ? INT32_MAX : v <= INT32_MIN ? INT32_MIN : (int)lrint(v); }

// warpAffine/warpPerspective, INTER_LINEAR, border 114, one whole image; per pixel from scratch.
static Image warp_ref(const Image *src, const double M[9], int out_w, int out_h) {
    double Mi[9];
    if (M[6] == 0 && M[7] == 0 && M[8] == 1) {             // invertAffineTransform
        double D = M[0] * M[4] - M[1] * M[3];
        D = D != 0 ? 1 / D : 0;
        Mi[0] = M[4] * D; Mi[1] = -M[1] * D; Mi[3] = -M[3] * D; Mi[4] = M[0] * D;
        Mi[2] = -Mi[0] * M[2] - Mi[1] * M[5]; Mi[5] = -Mi[3] * M[2] - Mi[4] * M[5];
        Mi[6] = 0; Mi[7] = 0; Mi[8] = 1;
    } else {
        double c0 = M[4] * M[8] - M[5] * M[7], c1 = M[5] * M[6] - M[3] * M[8], c2 = M[3] * M[7] - M[4] * M[6];
        double det = M[0] * c0 + M[1] * c1 + M[2] * c2, d = det != 0 ? 1 / det : 0;
        Mi[0] = c0 * d; Mi[1] = (M[2] * M[7] - M[1] * M[8]) * d; Mi[2] = (M[1] * M[5] - M[2] * M[4]) * d;
        Mi[3] = c1 * d; Mi[4] = (M[0] * M[8] - M[2] * M[6]) * d; Mi[5] = (M[2] * M[3] - M[0] * M[5]) * d;
        Mi[6] = c2 * d; Mi[7] = (M[1] * M[6] - M[0] * M[7]) * d; Mi[8] = (M[0] * M[4] - M[1] * M[3]) * d;
    }
    int affine = M[6] == 0 && M[7] == 0 && M[8] == 1;
    Image out = image_new(out_w, out_h, 0);
    for (int y = 0; y < out_h; y++)
        for (int x = 0; x < out_w; x++) {
            int X, Y;                                       // source position in 1/32 px
            if (affine) {                                   // OpenCV: 1/1024 px increments, then >> 5
                int X0 = sat_round_ref((Mi[1] * y + Mi[2]) * 1024) + 16, Y0 = sat_round_ref((Mi[4] * y + Mi[5]) * 1024) + 16;
                X = (X0 + sat_round_ref(Mi[0] * x * 1024)) >> 5;
                Y = (Y0 + sat_round_ref(Mi[3] * x * 1024)) >> 5;
            } else {
                double w = Mi[6] * x + Mi[7] * y + Mi[8];
                w = w != 0 ? 32 / w : 0;
                X = sat_round_ref((Mi[0] * x + Mi[1] * y + Mi[2]) * w);
                Y = sat_round_ref((Mi[3] * x + Mi[4] * y + Mi[5]) * w);
            }
            int sx = X >> 5, sy = Y >> 5, fx = X & 31, fy = Y & 31;
            int w4[4] = { (32 - fx) * (32 - fy), fx * (32 - fy), (32 - fx) * fy, fx * fy };
            for (int c = 0; c < 3; c++) {
                int sum = 512;
                for (int k = 0; k < 4; k++) {
                    int tx = sx + k % 2, ty = sy + k / 2;
                    int v = tx < 0 || ty < 0 || tx >= src->w || ty >= src->h ? PAD : src->px[((size_t)ty * src->w + tx) * 3 + c];
                    sum += v * w4[k];
                }
                out.px[((size_t)y * out_w + x) * 3 + c] = (uint8_t)(sum >> 10);
            }
        }
    return out;
}

// OpenCV's uint8 RGB→HSV (integer, 12-bit division tables) and HSV→RGB (float, truncating), per pixel.
static void rgb_to_hsv_ref(const uint8_t *px, uint8_t hsv[3]) {
    int r = px[0], g = px[1], b = px[2];
    int v = r > g ? r : g, mn = r < g ? r : g;
    v = b > v ? b : v, mn = b < mn ? b : mn;
    int diff = v - mn;
    int sdiv = v ? sat_round_ref((255 << 12) / (1.0 * v)) : 0, hdiv = diff ? sat_round_ref((180 << 12) / (6.0 * diff)) : 0;
    int s = (diff * sdiv + (1 << 11)) >> 12;
    int h = v == r ? g - b : v == g ? b - r + 2 * diff : r - g + 4 * diff;
    h = (h * hdiv + (1 << 11)) >> 12;
    if (h < 0) h += 180;
    hsv[0] = (uint8_t)h; hsv[1] = (uint8_t)s; hsv[2] = (uint8_t)v;
}

static uint8_t trunc_u8_ref(float v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

static void hsv_to_rgb_ref(const uint8_t hsv[3], uint8_t *px) {
    static const int sector_data[6][3] = { {1,3,0}, {1,0,2}, {3,0,1}, {0,2,1}, {0,1,3}, {2,1,0} };  // b g r
    float h = hsv[0] * (6.f / 180), s = hsv[1] * (1.f / 255), v = hsv[2] * (1.f / 255);
    int sector = (int)h;
    h -= (float)sector;
    float tab[4] = { v, v * (1 - s), v * (float)(1.0 - (double)s * h), v * (float)(1.0 - (double)s * (1 - h)) };
    px[0] = trunc_u8_ref(tab[sector_data[sector][2]] * 255);
    px[1] = trunc_u8_ref(tab[sector_data[sector][1]] * 255);
    px[2] = trunc_u8_ref(tab[sector_data[sector][0]] * 255);
}

static void hsv_apply_ref(Image *im, const double r[3]) {
    uint8_t lut[3][256];
    augment_hsv_luts(r, lut);
    for (size_t i = 0, n = (size_t)im->w * im->h; i < n; i++) {
        uint8_t hsv[3];
        rgb_to_hsv_ref(im->px + 3 * i, hsv);
        hsv[0] = lut[0][hsv[0]]; hsv[1] = lut[1][hsv[1]]; hsv[2] = lut[2][hsv[2]];
        hsv_to_rgb_ref(hsv, im->px + 3 * i);
    }
}

static Image noise_image(Rng *rng, int w, int h) {
    Image im = image_new(w, h, 0);
    for (size_t i = 0; i < (size_t)w * h * 3; i++) im.px[i] = (uint8_t)rng_int(rng, 256);
    return im;
}

static size_t count_diff(const Image *a, const Image *b) {
    if (a->w != b->w || a->h != b->h) return (size_t)-1;
    size_t d = 0;
    for (size_t i = 0; i < (size_t)a->w * a->h * 3; i++) d += a->px[i] != b->px[i];
    return d;
}

// ---- checking boxes against pixels -------------------------------------------------------------------

static int near_colour(const uint8_t *p, const uint8_t *c, int tol) {
    return abs(p[0] - c[0]) <= tol && abs(p[1] - c[1]) <= tol && abs(p[2] - c[2]) <= tol;
}

// Every box of at least 6 px: its centre pixel has its class colour, and the pixels of that colour in a
// window around it span the box within 2 px. With rotation or shear a box cut by the image edge is the
// clipped box of all 4 corners, wider than what is left in view, so then `whole_only` skips those.
// Returns the number of boxes checked.
static int check_boxes_frame_colour(const Image *im, const Box *b, int n, int whole_only, const char *what) {
    int checked = 0;
    for (int i = 0; i < n; i++) {
        double x1 = (b[i].cx - b[i].w / 2) * im->w, x2 = (b[i].cx + b[i].w / 2) * im->w;
        double y1 = (b[i].cy - b[i].h / 2) * im->h, y2 = (b[i].cy + b[i].h / 2) * im->h;
        if (x2 - x1 < 6 || y2 - y1 < 6) continue;
        if (whole_only && (x1 < 0.5 || y1 < 0.5 || x2 > im->w - 1.5 || y2 > im->h - 1.5)) continue;
        const uint8_t *c = COLOURS[b[i].cls];
        int cx = (int)(b[i].cx * im->w), cy = (int)(b[i].cy * im->h);
        const uint8_t *p = im->px + ((size_t)cy * im->w + cx) * 3;
        CHECK(near_colour(p, c, 60), "%s: box %d class %d centre (%d,%d) is (%d,%d,%d)", what, i, b[i].cls,
              cx, cy, p[0], p[1], p[2]);
        int wx1 = (int)fmax(0, x1 - 4), wx2 = (int)fmin(im->w, x2 + 4);
        int wy1 = (int)fmax(0, y1 - 4), wy2 = (int)fmin(im->h, y2 + 4);
        int rx1 = INT32_MAX, ry1 = INT32_MAX, rx2 = -1, ry2 = -1;
        for (int y = wy1; y < wy2; y++)
            for (int x = wx1; x < wx2; x++)
                if (near_colour(im->px + ((size_t)y * im->w + x) * 3, c, 60)) {
                    if (x < rx1) rx1 = x;
                    if (x > rx2) rx2 = x;
                    if (y < ry1) ry1 = y;
                    if (y > ry2) ry2 = y;
                }
        CHECK(fabs(rx1 - x1) <= 2 && fabs(rx2 + 1 - x2) <= 2 && fabs(ry1 - y1) <= 2 && fabs(ry2 + 1 - y2) <= 2,
              "%s: box %d (%.1f,%.1f,%.1f,%.1f) but its colour spans (%d,%d,%d,%d)", what, i, x1, y1, x2, y2,
              rx1, ry1, rx2 + 1, ry2 + 1);
        checked++;
    }
    return checked;
}

// ---- letterbox and load ------------------------------------------------------------------------------

static void test_letterbox_reference_numbers(void) {     // §7 #32
    Image im = image_new(1280, 720, 200);
    LetterboxInfo lb;
    Image out = augment_letterbox(&im, 640, 640, 1, 0, &lb);
    CHECK(out.w == 640 && out.h == 640, "size %dx%d", out.w, out.h);
    CHECK(lb.r == 0.5 && lb.top == 140 && lb.bottom == 140 && lb.left == 0 && lb.right == 0,
          "r %g top %d bottom %d left %d right %d", lb.r, lb.top, lb.bottom, lb.left, lb.right);
    CHECK(lb.padw == 0 && lb.padh == 140, "pads %g %g", lb.padw, lb.padh);
    CHECK(out.px[(139 * 640 + 5) * 3] == 114 && out.px[(140 * 640 + 5) * 3] == 200 &&
          out.px[(499 * 640 + 5) * 3] == 200 && out.px[(500 * 640 + 5) * 3] == 114, "border rows");
    image_free(&out);
    out = augment_letterbox(&im, 640, 640, 1, 32, &lb);   // auto: dh = 280 mod 32 = 24
    CHECK(out.w == 640 && out.h == 384 && lb.top == 12 && lb.bottom == 12, "auto %dx%d top %d bottom %d",
          out.w, out.h, lb.top, lb.bottom);
    image_free(&out);
    image_free(&im);
}

static void test_letterbox_odd_cases(void) {
    Image im = image_new(100, 51, 9);
    LetterboxInfo lb;
    Image out = augment_letterbox(&im, 64, 64, 1, 0, &lb);   // r 0.64: 64×round(32.64)=33, dh 31
    CHECK(out.w == 64 && out.h == 64 && lb.top == 15 && lb.bottom == 16 && lb.padh == 15.5,
          "odd dh: %dx%d top %d bottom %d padh %g", out.w, out.h, lb.top, lb.bottom, lb.padh);
    Box b = { 1, 0.5f, 0.5f, 1, 1 };
    BoxXyxy px;
    augment_boxes_to_pixels(&b, 1, lb.r * im.w, lb.r * im.h, lb.padw, lb.padh, &px);
    CHECK(px.x1 == 0 && px.x2 == 64 && close_enough(px.y1, 15.5, 1e-5, 0) &&
          close_enough(px.y2, 15.5 + 0.64 * 51, 1e-4, 0), "labels move by the float half-padding: %g %g %g %g",
          px.x1, px.y1, px.x2, px.y2);
    image_free(&out); image_free(&im);

    int ws[2] = { 101, 103 }, expect[2] = { 50, 52 };   // 50.5 and 51.5: Python rounds half to even
    for (int i = 0; i < 2; i++) {
        im = image_new(ws[i], 60, 9);
        out = augment_letterbox(&im, 64, 30, 1, 0, &lb);
        int unpad = 64 - lb.left - lb.right;
        CHECK(lb.r == 0.5 && unpad == expect[i], "w %d: unpad %d, want %d", ws[i], unpad, expect[i]);
        image_free(&out); image_free(&im);
    }

    im = image_new(100, 50, 9);                          // scaleup off keeps small images at r = 1
    out = augment_letterbox(&im, 640, 640, 0, 0, &lb);
    CHECK(lb.r == 1 && lb.left == 270 && lb.right == 270 && lb.top == 295 && lb.bottom == 295 &&
          out.px[(295 * 640 + 270) * 3] == 9 && out.px[(294 * 640 + 270) * 3] == 114,
          "no scaleup: r %g l %d r %d t %d b %d", lb.r, lb.left, lb.right, lb.top, lb.bottom);
    image_free(&out);
    out = augment_letterbox(&im, 640, 640, 1, 0, &lb);
    CHECK(lb.r == 6.4 && out.w == 640 && out.h == 640 && lb.top == 160, "scaleup r %g top %d", lb.r, lb.top);
    image_free(&out); image_free(&im);
}

static void test_load_resize(void) {
    Image im = image_new(300, 200, 7);
    Image out = augment_load_resize(&im, 640, 1);
    CHECK(out.w == 640 && out.h == 426, "300x200 -> %dx%d, want 640x426 (int truncates)", out.w, out.h);
    image_free(&out);
    out = augment_load_resize(&im, 300, 0);
    CHECK(out.w == 300 && out.h == 200 && out.px != im.px && out.px[0] == 7, "r = 1 copies");
    image_free(&out); image_free(&im);
    im = image_new(720, 1280, 7);
    out = augment_load_resize(&im, 640, 0);
    CHECK(out.w == 360 && out.h == 640, "720x1280 -> %dx%d", out.w, out.h);
    image_free(&out); image_free(&im);
}

// ---- mosaic -----------------------------------------------------------------------------------------

static void test_mosaic_centre_range(void) {    // §7 #29
    Rng rng = rng_for(1, 2, 3);
    int lo = 1 << 30, hi = -1;
    for (int i = 0; i < 20000; i++) {
        int xc, yc;
        augment_mosaic_centre(&rng, 640, &xc, &yc);
        lo = xc < lo ? xc : lo; lo = yc < lo ? yc : lo;
        hi = xc > hi ? xc : hi; hi = yc > hi ? yc : hi;
    }
    CHECK(lo >= 320 && hi < 960 && lo < 330 && hi > 950, "centres span [%d, %d], want within [320, 960)", lo, hi);
}

static void test_mosaic_place_quadrants(void) {
    int s = 64, xc = 50, yc = 70;
    Image canvas = image_new(2 * s, 2 * s, 114);
    int sizes[4][2] = { {64, 48}, {40, 64}, {64, 64}, {30, 64} };
    for (int q = 0; q < 4; q++) {
        Image tile = image_new(sizes[q][0], sizes[q][1], 0);
        fill_rect(&tile, 0, 0, tile.w, tile.h, COLOURS[q]);
        Box whole = { q, 0.5f, 0.5f, 1, 1 };
        BoxXyxy b;
        augment_mosaic_place(&canvas, &tile, &whole, 1, q, xc, yc, &b);
        int ex1 = q % 2 ? xc : xc - tile.w, ey1 = q < 2 ? yc - tile.h : yc;
        float want[4] = { fmaxf(ex1, 0), fmaxf(ey1, 0), fminf(ex1 + tile.w, 2 * s), fminf(ey1 + tile.h, 2 * s) };
        CHECK(b.x1 == want[0] && b.y1 == want[1] && b.x2 == want[2] && b.y2 == want[3],
              "quadrant %d box (%g,%g,%g,%g) want (%g,%g,%g,%g)", q, b.x1, b.y1, b.x2, b.y2,
              want[0], want[1], want[2], want[3]);
        image_free(&tile);
    }
    int probe[4][2] = { {xc - 1, yc - 1}, {xc, yc - 1}, {xc - 1, yc}, {xc, yc} };
    for (int q = 0; q < 4; q++) {
        const uint8_t *p = canvas.px + ((size_t)probe[q][1] * canvas.w + probe[q][0]) * 3;
        CHECK(near_colour(p, COLOURS[q], 0), "quadrant %d missing at its corner of the centre", q);
    }
    CHECK(canvas.px[((size_t)(yc + 10) * canvas.w + xc + 35) * 3] == 114, "canvas beyond the tiles keeps 114");
    image_free(&canvas);
}

static void test_mosaic_output_and_boxes(void) {
    int s = 320;
    Synth sy;
    synth_make(&sy, s);
    SampleSource src = synth_source(&sy);
    AugParams p = params_geometry(s);
    int checked = 0;
    for (int seed = 0; seed < 8; seed++) {
        Rng rng = rng_for(7, 0, (uint64_t)seed);
        Image out; BoxXyxy *b; int n; Err err;
        CHECK(augment_load_mosaic(&p, &src, seed % N_SYN, &rng, &out, &b, &n, &err) == 0, "mosaic");
        CHECK(out.w == s && out.h == s, "mosaic is %dx%d, want %dx%d", out.w, out.h, s, s);
        Box *nb = xmalloc(sizeof *nb * (size_t)(n + 1));
        for (int i = 0; i < n; i++) {
            CHECK(b[i].x1 >= 0 && b[i].x2 <= s && b[i].y1 >= 0 && b[i].y2 <= s && b[i].x2 - b[i].x1 > 2 &&
                  b[i].y2 - b[i].y1 > 2, "box %d outside or too small", i);
            nb[i] = (Box){ b[i].cls, (b[i].x1 + b[i].x2) / 2 / s, (b[i].y1 + b[i].y2) / 2 / s,
                           (b[i].x2 - b[i].x1) / s, (b[i].y2 - b[i].y1) / s };
        }
        checked += check_boxes_frame_colour(&out, nb, n, 0, "mosaic");
        free(nb); free(b); image_free(&out);
    }
    CHECK(checked >= 10, "only %d boxes checked", checked);
    CHECK(sy.gets == 32 && sy.puts == 32, "get %d put %d, want 32 each", sy.gets, sy.puts);
    synth_free(&sy);
}

// ---- random_perspective ------------------------------------------------------------------------------

// One image, one transform family at a time: the boxes must still frame their rectangles.
static void check_perspective(const char *what, AugParams p, int border) {
    int s = 256, checked = 0;
    Synth sy;
    synth_make(&sy, s);
    for (int seed = 0; seed < 6; seed++) {
        Rng rng = rng_for(3, 1, (uint64_t)seed);
        int i = seed % N_SYN, n = sy.nbox[i];
        BoxXyxy px[3];
        augment_boxes_to_pixels(sy.box[i], n, sy.img[i].w, sy.img[i].h, 0, 0, px);
        Image out = augment_random_perspective(&sy.img[i], px, &n, &p, border, &rng);
        CHECK(out.w == sy.img[i].w + 2 * border && out.h == sy.img[i].h + 2 * border, "%s: size", what);
        Box nb[3];
        for (int k = 0; k < n; k++)
            nb[k] = (Box){ px[k].cls, (px[k].x1 + px[k].x2) / 2 / out.w, (px[k].y1 + px[k].y2) / 2 / out.h,
                           (px[k].x2 - px[k].x1) / out.w, (px[k].y2 - px[k].y1) / out.h };
        checked += check_boxes_frame_colour(&out, nb, n, p.degrees != 0 || p.shear != 0 || p.perspective != 0, what);
        image_free(&out);
    }
    CHECK(checked >= 6, "%s: only %d boxes checked", what, checked);
    synth_free(&sy);
}

static void test_perspective_scale(void)     { check_perspective("scale", (AugParams){ .scale = 0.5 }, 0); }
static void test_perspective_translate(void) { check_perspective("translate", (AugParams){ .translate = 0.2 }, 0); }
static void test_perspective_rotate(void)    { check_perspective("rotate", (AugParams){ .degrees = 40 }, 0); }
static void test_perspective_shear(void)     { check_perspective("shear", (AugParams){ .shear = 10 }, 0); }
static void test_perspective_border(void)    { check_perspective("border", (AugParams){ .scale = 0.2 }, -32); }
static void test_perspective_warp(void)      { check_perspective("perspective", (AugParams){ .perspective = 2e-4 }, 0); }

static void test_perspective_identity_copies(void) {
    Image im = image_new(31, 17, 5);
    im.px[100] = 250;
    BoxXyxy b = { 2, 1, 2, 20, 15 };
    int n = 1;
    Rng rng = rng_for(0, 0, 0);
    Image out = augment_random_perspective(&im, &b, &n, &(AugParams){ 0 }, 0, &rng);
    CHECK(out.w == 31 && out.h == 17 && memcmp(out.px, im.px, 31 * 17 * 3) == 0, "identity M must copy");
    CHECK(n == 1 && b.x1 == 1 && b.y1 == 2 && b.x2 == 20 && b.y2 == 15, "identity M keeps the box");
    image_free(&out); image_free(&im);
}

static void test_warp_translation_exact(void) {
    Image im = image_new(9, 7, 0);
    for (int i = 0; i < 9 * 7 * 3; i++) im.px[i] = (uint8_t)(i * 37);
    double M[9] = { 1, 0, 2, 0, 1, -1, 0, 0, 1 };         // integer shift: dst(x,y) = src(x-2, y+1)
    Image out = augment_warp(&im, M, 9, 7);
    int bad = 0;
    for (int y = 0; y < 7; y++)
        for (int x = 0; x < 9; x++)
            for (int c = 0; c < 3; c++) {
                int sx = x - 2, sy = y + 1;
                int want = sx >= 0 && sy < 7 ? im.px[(sy * 9 + sx) * 3 + c] : 114;
                bad += out.px[(y * 9 + x) * 3 + c] != want;
            }
    CHECK(bad == 0, "%d values differ from an exact integer shift", bad);
    image_free(&out);
    double half[9] = { 1, 0, 0.5, 0, 1, 0, 0, 0, 1 };    // half a pixel: the mean of two neighbours
    out = augment_warp(&im, half, 9, 7);
    int a = im.px[(3 * 9 + 3) * 3], b = im.px[(3 * 9 + 4) * 3];
    CHECK(out.px[(3 * 9 + 4) * 3] == (a + b + 1) / 2, "half-pixel shift %d, want (%d+%d+1)/2",
          out.px[(3 * 9 + 4) * 3], a, b);
    image_free(&out); image_free(&im);
}

static void test_box_candidates(void) {
    CHECK(augment_box_candidate(10, 10, 10, 10), "an unchanged box stays");
    CHECK(!augment_box_candidate(10, 10, 2, 10), "w2 = 2 px is too small (strict)");
    CHECK(!augment_box_candidate(10, 10, 10, 2), "h2 = 2 px is too small (strict)");
    CHECK(augment_box_candidate(10, 10, 2.01, 10), "w2 = 2.01 px stays");
    CHECK(!augment_box_candidate(100, 100, 31, 31), "9.6%% of the area is dropped");
    CHECK(augment_box_candidate(100, 100, 32, 32), "10.2%% of the area stays");
    CHECK(!augment_box_candidate(10, 10, 2.5, 4), "exactly 10%% of the area is dropped (strict)");
    CHECK(!augment_box_candidate(300, 3, 300, 3), "aspect 100 is dropped (strict)");
    CHECK(augment_box_candidate(299, 3, 299, 3), "aspect 99.7 stays");
    CHECK(augment_box_candidate(0, 0, 10, 10), "a zero-area original keeps a real box (eps 1e-16)");
}

// ---- colour ----------------------------------------------------------------------------------------

static void test_hsv_zero_gains_identity(void) {
    Image im = image_new(16, 16, 0);
    for (int i = 0; i < 16 * 16 * 3; i++) im.px[i] = (uint8_t)(i * 91 + 7);
    Image ref = image_new(16, 16, 0);
    memcpy(ref.px, im.px, 16 * 16 * 3);
    Rng rng = rng_for(1, 1, 1), before = rng;
    augment_hsv(&im, 0, 0, 0, &rng);
    CHECK(memcmp(im.px, ref.px, 16 * 16 * 3) == 0, "gains 0 must not change the image");
    CHECK(rng.s[0] == before.s[0] && rng.s[1] == before.s[1], "gains 0 draw nothing");
    double one[3] = { 1, 1, 1 };                          // r = 1: only the uint8 round trip remains
    augment_hsv_apply(&im, one);
    int worst = 0;
    for (int i = 0; i < 16 * 16 * 3; i++) worst = abs(im.px[i] - ref.px[i]) > worst ? abs(im.px[i] - ref.px[i]) : worst;
    CHECK(worst <= 4, "HSV round trip off by %d levels", worst);
    image_free(&im); image_free(&ref);
}

static void test_hsv_luts(void) {   // §7 #33
    uint8_t lut[3][256];
    double r[3] = { 1.5, 2.0, 0.999 };
    augment_hsv_luts(r, lut);
    CHECK(lut[0][120] == 0 && lut[0][179] == 88 && lut[0][60] == 90 && lut[0][121] == 1,
          "hue wraps mod 180: %d %d %d %d", lut[0][120], lut[0][179], lut[0][60], lut[0][121]);
    CHECK(lut[1][127] == 254 && lut[1][128] == 255 && lut[1][255] == 255, "saturation clips at 255");
    CHECK(lut[2][255] == 254 && lut[2][100] == 99, "value truncates (254.745 -> 254, 99.9 -> 99)");
    double neg[3] = { -0.5, -1, 1 };
    augment_hsv_luts(neg, lut);
    CHECK(lut[0][3] == 178 && lut[1][9] == 0, "negative gains: hue %d (want 178), sat %d", lut[0][3], lut[1][9]);
}

static void test_hsv_pixels(void) {
    Image im = image_new(3, 1, 0);
    memcpy(im.px, (uint8_t[]){ 255, 0, 0, 0, 255, 0, 0, 0, 255 }, 9);
    double r[3] = { 1.5, 1, 1 };                          // H: red 0 -> 0, green 60 -> 90 (cyan), blue 120 -> 0
    augment_hsv_apply(&im, r);
    // Cyan's G is 254 as in cv2: 90·(6/180 in float) is just past sector 3 and OpenCV truncates.
    uint8_t want[9] = { 255, 0, 0, 0, 254, 255, 255, 0, 0 };
    CHECK(memcmp(im.px, want, 9) == 0, "got %d,%d,%d %d,%d,%d %d,%d,%d", im.px[0], im.px[1], im.px[2],
          im.px[3], im.px[4], im.px[5], im.px[6], im.px[7], im.px[8]);
    double dark[3] = { 1, 1, 0.5 };
    augment_hsv_apply(&im, dark);
    CHECK(im.px[0] == 127 && im.px[1] == 0, "V 255·0.5 truncates to 127, got %d", im.px[0]);
    image_free(&im);
}

// ---- flips, mixup -------------------------------------------------------------------------------------

static void test_flips(void) {
    Image im = image_new(5, 3, 0);
    im.px[0] = 10;                                        // top-left red
    Box b = { 0, 0.2f, 0.25f, 0.1f, 0.1f };
    augment_flip_lr(&im, &b, 1);
    CHECK(im.px[4 * 3] == 10 && im.px[0] == 0 && close_enough(b.cx, 0.8, 1e-6, 0), "left-right");
    augment_flip_ud(&im, &b, 1);
    CHECK(im.px[(2 * 5 + 4) * 3] == 10 && close_enough(b.cy, 0.75, 1e-6, 0) && b.w == 0.1f, "up-down");
    image_free(&im);
}

static void test_mixup_beta(void) {
    Rng rng = rng_for(5, 0, 0);
    double sum = 0, sum2 = 0, lo = 1, hi = 0;
    int n = 20000;
    for (int i = 0; i < n; i++) {
        double r = augment_beta(&rng, 32, 32);
        sum += r; sum2 += r * r;
        lo = fmin(lo, r); hi = fmax(hi, r);
    }
    double mean = sum / n, var = sum2 / n - mean * mean;  // Beta(32,32): mean 0.5, var 1/260
    CHECK(lo > 0 && hi < 1 && fabs(mean - 0.5) < 0.003 && fabs(var - 1 / 260.0) < 0.0004,
          "r in (%g, %g), mean %g, var %g (want 0.5, %g)", lo, hi, mean, var, 1 / 260.0);
    Image a = image_new(4, 4, 200), b = image_new(4, 4, 100);
    double r = augment_mixup(&a, &b, &rng);
    CHECK(a.px[7] == (uint8_t)(200 * r + 100 * (1 - r)), "blend truncates: %d for r %g", a.px[7], r);
    image_free(&a); image_free(&b);
}

// ---- whole samples -------------------------------------------------------------------------------------

static void test_train_sample_boxes_and_flips(void) {
    int s = 320, checked = 0, n_mixup_labels = 0;
    Synth sy;
    synth_make(&sy, s);
    SampleSource src = synth_source(&sy);
    for (int mosaic = 0; mosaic < 2; mosaic++)
        for (int seed = 0; seed < 10; seed++) {
            AugParams p = params_geometry(s);
            p.mosaic = mosaic;
            Rng rng = rng_for(11, (uint64_t)mosaic, (uint64_t)seed);
            Image out; Box *b; int n; Err err;
            CHECK(augment_train_sample(&p, &src, seed % N_SYN, &rng, &out, &b, &n, &err) == 0, "sample");
            CHECK(out.w == s && out.h == s, "sample is %dx%d", out.w, out.h);
            for (int i = 0; i < n; i++)
                CHECK(b[i].cx - b[i].w / 2 >= -1e-6 && b[i].cx + b[i].w / 2 <= 1 + 1e-6 &&
                      b[i].cy - b[i].h / 2 >= -1e-6 && b[i].cy + b[i].h / 2 <= 1 + 1e-6, "box %d outside", i);
            checked += check_boxes_frame_colour(&out, b, n, 0, mosaic ? "train mosaic" : "train letterbox");
            free(b); image_free(&out);
        }
    CHECK(checked >= 20, "only %d boxes checked", checked);

    AugParams p = params_geometry(s);                     // mixup always: labels of two mosaics
    p.mixup = 1;
    p.hsv_h = 0.015; p.hsv_s = 0.7; p.hsv_v = 0.4;
    for (int seed = 0; seed < 4; seed++) {
        Rng rng = rng_for(12, 0, (uint64_t)seed), ref = rng;
        Image m1; BoxXyxy *b1; int n1; Err err;
        rng_uniform(&ref, 0, 1);                          // the sample's mosaic draw, then its first mosaic
        augment_load_mosaic(&p, &src, 1, &ref, &m1, &b1, &n1, &err);
        Image out; Box *b; int n;
        augment_train_sample(&p, &src, 1, &rng, &out, &b, &n, &err);
        n_mixup_labels += n > n1;
        free(b); free(b1); image_free(&out); image_free(&m1);
    }
    CHECK(n_mixup_labels >= 3, "mixup should append the partner's labels (%d of 4 samples did)", n_mixup_labels);
    CHECK(sy.gets == sy.puts, "get %d put %d", sy.gets, sy.puts);
    synth_free(&sy);
}

static void test_close_mosaic(void) {
    int s = 160;
    Synth sy;
    synth_make(&sy, s);
    SampleSource src = synth_source(&sy);
    AugParams p = params_geometry(s);
    p.close_mosaic = 1;
    p.mixup = 1;
    Rng rng = rng_for(1, 2, 3);
    Image out; Box *b; int n; Err err;
    CHECK(augment_train_sample(&p, &src, 0, &rng, &out, &b, &n, &err) == 0, "sample");
    CHECK(sy.gets == 1, "closed mosaic loads one image, loaded %d", sy.gets);
    free(b); image_free(&out);
    synth_free(&sy);
}

static void test_determinism(void) {
    int s = 320;
    Synth sy;
    synth_make(&sy, s);
    SampleSource src = synth_source(&sy);
    AugParams p = { .img_size = s, .hsv_h = 0.015, .hsv_s = 0.7, .hsv_v = 0.4, .degrees = 5, .translate = 0.1,
                    .scale = 0.9, .shear = 2, .fliplr = 0.5, .mosaic = 1, .mixup = 0.5 };
    Image out[3]; Box *b[3]; int n[3]; Err err;
    uint64_t seeds[3] = { 9, 9, 10 };
    for (int k = 0; k < 3; k++) {
        Rng rng = rng_for(seeds[k], 4, 2);
        augment_train_sample(&p, &src, 2, &rng, &out[k], &b[k], &n[k], &err);
    }
    CHECK(n[0] == n[1] && memcmp(out[0].px, out[1].px, (size_t)s * s * 3) == 0 &&
          (n[0] == 0 || memcmp(b[0], b[1], sizeof(Box) * (size_t)n[0]) == 0), "same seed, different sample");
    CHECK(memcmp(out[0].px, out[2].px, (size_t)s * s * 3) != 0, "different seeds gave the same sample");
    for (int k = 0; k < 3; k++) { free(b[k]); image_free(&out[k]); }
    synth_free(&sy);
}

static void test_val_sample(void) {
    Synth sy;
    synth_make(&sy, 256);
    SampleSource src = synth_source(&sy);
    Image out; Box *b; int n; LetterboxInfo lb; Err err;
    CHECK(augment_val_sample(&src, 1, 256, 256, &out, &b, &n, &lb, &err) == 0, "val sample");
    CHECK(out.w == 256 && out.h == 256 && lb.r == 1 && lb.top == 43 && lb.bottom == 43 && n == sy.nbox[1],
          "256x170 in 256x256: %dx%d r %g top %d bottom %d n %d", out.w, out.h, lb.r, lb.top, lb.bottom, n);
    CHECK(check_boxes_frame_colour(&out, b, n, 0, "val") == n, "every val box checked");
    free(b); image_free(&out);
    synth_free(&sy);
}

// ---- the fast paths equal the references -----------------------------------------------------------

// Random images, sizes and matrices (rotation, scale down to 0.05, shear, translation, perspective,
// identity), output larger and smaller than the source: augment_warp gives warp_ref's bytes.
static void test_warp_matches_ref(void) {
    Rng rng = rng_for(5, 5, 5);
    int bad_cases = 0;
    for (int k = 0; k < 300; k++) {
        int w = 1 + rng_int(&rng, 90), h = 1 + rng_int(&rng, 90), ow = 1 + rng_int(&rng, 120), oh = 1 + rng_int(&rng, 120);
        Image im = noise_image(&rng, w, h);
        double a = rng_uniform(&rng, -3.2, 3.2), sc = exp(rng_uniform(&rng, log(0.05), log(4)));
        double M[9] = { cos(a) * sc, sin(a) * sc + rng_uniform(&rng, -0.3, 0.3), rng_uniform(&rng, -60, 60),
                        -sin(a) * sc, cos(a) * sc, rng_uniform(&rng, -60, 60), 0, 0, 1 };
        if (k % 3 == 1) M[6] = rng_uniform(&rng, -2e-3, 2e-3), M[7] = rng_uniform(&rng, -2e-3, 2e-3);
        if (k % 10 == 9) { double id[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 }; memcpy(M, id, sizeof M); }
        Image got = augment_warp(&im, M, ow, oh), want = warp_ref(&im, M, ow, oh);
        size_t d = count_diff(&got, &want);
        if (d) {
            bad_cases++;
            if (bad_cases < 4) printf("    case %d: %dx%d -> %dx%d, %zu bytes differ\n", k, w, h, ow, oh, d);
        }
        image_free(&got); image_free(&want); image_free(&im);
    }
    CHECK(bad_cases == 0, "%d of 300 warps differ from the reference", bad_cases);
}

// Every one of the 2^24 colours, under several gains (identity, the hyp's range, wrapping hue,
// saturation and value clipped, negative): augment_hsv_apply gives hsv_apply_ref's bytes.
static void test_hsv_matches_ref_all_colours(void) {
    Image all = image_new(4096, 4096, 0), ref = image_new(4096, 4096, 0);
    double gains[5][3] = { {1, 1, 1}, {0.985, 1.7, 0.6}, {1.015, 0.3, 1.4}, {1.9, 2.5, 3}, {-0.5, 0.2, 0.01} };
    for (int g = 0; g < 5; g++) {
        for (int i = 0; i < 1 << 24; i++)
            all.px[3 * i] = (uint8_t)(i >> 16), all.px[3 * i + 1] = (uint8_t)(i >> 8), all.px[3 * i + 2] = (uint8_t)i;
        memcpy(ref.px, all.px, (size_t)3 << 24);
        augment_hsv_apply(&all, gains[g]);
        hsv_apply_ref(&ref, gains[g]);
        size_t d = count_diff(&all, &ref), first = 0;
        while (d && all.px[first] == ref.px[first]) first++;
        CHECK(d == 0, "gains %g %g %g: %zu bytes differ, first colour #%06zx gives %d, reference %d", gains[g][0],
              gains[g][1], gains[g][2], d, first / 3, all.px[first], ref.px[first]);
    }
    image_free(&all); image_free(&ref);
}

// The fast HSV→RGB truncates without clamping: that is exact only if no (H', S', V') the LUTs can give
// makes a channel of OpenCV's float formula leave [0, 256). Checked for all 180·256·256 of them.
static void test_hsv_backward_never_clamps(void) {
    long outside = 0;
    for (int H = 0; H < 180; H++)
        for (int S = 0; S < 256; S++)
            for (int V = 0; V < 256; V++) {
                float h = H * (6.f / 180), s = S * (1.f / 255), v = V * (1.f / 255);
                h -= (float)(int)h;
                float tab[4] = { v, v * (1 - s), v * (float)(1.0 - (double)s * h), v * (float)(1.0 - (double)s * (1 - h)) };
                for (int k = 0; k < 4; k++) outside += !(tab[k] * 255 >= 0 && tab[k] * 255 < 256);
            }
    CHECK(outside == 0, "%ld channel values outside [0, 256)", outside);
}

// A source of noise tiles of random sizes, some far smaller than s (so the canvas has gaps).
typedef struct { Image img[8]; Box box[8][2]; } Noise;

static int noise_get(void *ctx, int index, Image *img, Box **boxes, int *nbox, Err *err) {
    Noise *z = ctx;
    *img = z->img[index], *boxes = z->box[index], *nbox = 2;
    return 0;
}

static void noise_put(void *ctx, int index, Image *img, Box *boxes) {}   // views: nothing to free

static void noise_make(Noise *z, int s, Rng *rng) {
    for (int i = 0; i < 8; i++) {
        int w = i % 3 == 2 ? 3 + rng_int(rng, s / 2) : s, h = i % 2 ? 3 + rng_int(rng, s) : s;
        z->img[i] = noise_image(rng, w, h);
        z->box[i][0] = (Box){ 1, 0.5f, 0.5f, 0.5f, 0.5f };
        z->box[i][1] = (Box){ 2, 0.25f, 0.7f, 0.3f, 0.4f };
    }
}

// The mosaic warped straight from its tiles equals painting the canvas (augment_mosaic_place) and warping
// it; the letterbox likewise; same boxes, same draws.
static void test_mosaic_and_letterbox_planes_match_painting(void) {
    Rng g = rng_for(8, 8, 8);
    int s = 96, bad = 0;
    Noise z;
    noise_make(&z, s, &g);
    SampleSource src = { .n = 8, .ctx = &z, .get = noise_get, .put = noise_put };
    for (int k = 0; k < 40; k++) {
        AugParams p = { .img_size = s, .translate = 0.3, .scale = 0.95, .degrees = k % 2 ? 30 : 0,
                        .shear = k % 4 == 1 ? 5 : 0, .perspective = k % 3 == 2 ? 1e-3 : 0 };
        Rng a = rng_for(9, 1, (uint64_t)k), b = a;
        Image out; BoxXyxy *bo; int n; Err err;
        augment_load_mosaic(&p, &src, k % 8, &a, &out, &bo, &n, &err);
        int xc, yc, idx[4] = { k % 8 }, total = 0;
        augment_mosaic_centre(&b, s, &xc, &yc);
        for (int i = 1; i < 4; i++) idx[i] = rng_int(&b, 8);
        for (int i = 3; i > 0; i--) { int j = rng_int(&b, i + 1), t = idx[i]; idx[i] = idx[j]; idx[j] = t; }
        Image canvas = image_new(2 * s, 2 * s, PAD);
        BoxXyxy all[8];
        for (int q = 0; q < 4; q++, total += 2) augment_mosaic_place(&canvas, &z.img[idx[q]], z.box[idx[q]], 2, q, xc, yc, all + total);
        Image want = augment_random_perspective(&canvas, all, &total, &p, -s / 2, &b);
        bad += count_diff(&out, &want) != 0 || n != total || memcmp(bo, all, sizeof *bo * (size_t)n) != 0 ||
               a.s[0] != b.s[0] || a.s[1] != b.s[1];
        free(bo); image_free(&out); image_free(&want); image_free(&canvas);

        p.close_mosaic = 1;                                   // letterbox path: colour and flips off
        a = rng_for(9, 2, (uint64_t)k), b = a;
        Box *nb;
        augment_train_sample(&p, &src, k % 8, &a, &out, &nb, &n, &err);
        LetterboxInfo lb;
        const Image *im = &z.img[k % 8];
        Image boxed = augment_letterbox(im, s, s, 1, 0, &lb);
        BoxXyxy px[2];
        int np = 2;
        augment_boxes_to_pixels(z.box[k % 8], 2, lb.r * im->w, lb.r * im->h, lb.padw, lb.padh, px);
        want = augment_random_perspective(&boxed, px, &np, &p, 0, &b);
        rng_uniform(&b, 0, 1), rng_uniform(&b, 0, 1);         // the two flip draws
        bad += count_diff(&out, &want) != 0 || n != np || a.s[0] != b.s[0] || a.s[1] != b.s[1];
        free(nb); image_free(&out); image_free(&want); image_free(&boxed);
    }
    CHECK(bad == 0, "%d of 80 samples differ from painting the canvas", bad);
    for (int i = 0; i < 8; i++) image_free(&z.img[i]);
}

// augment_train_sample_into (caller's memory, reused scratch) gives augment_train_sample's bytes and boxes.
static void test_train_sample_into(void) {
    Rng g = rng_for(4, 4, 4);
    int s = 64, bad = 0;
    Noise z;
    noise_make(&z, s, &g);
    SampleSource src = { .n = 8, .ctx = &z, .get = noise_get, .put = noise_put };
    AugParams p = { .img_size = s, .hsv_h = 0.015, .hsv_s = 0.7, .hsv_v = 0.4, .translate = 0.1, .scale = 0.9,
                    .fliplr = 0.5, .flipud = 0.5, .mosaic = 0.8, .mixup = 0.5 };
    AugScratch scratch = { 0 };
    Image into = image_new(s, s, 0);
    for (int k = 0; k < 30; k++) {
        Rng a = rng_for(2, 0, (uint64_t)k), b = a;
        Image out; Box *b1, *b2; int n1, n2; Err err;
        augment_train_sample(&p, &src, k % 8, &a, &out, &b1, &n1, &err);
        augment_train_sample_into(&p, &src, k % 8, &b, &scratch, &into, &b2, &n2, &err);
        bad += count_diff(&out, &into) != 0 || n1 != n2 || (n1 && memcmp(b1, b2, sizeof *b1 * (size_t)n1) != 0);
        free(b1); free(b2); image_free(&out);
    }
    CHECK(bad == 0, "%d of 30 samples differ", bad);
    image_free(&into); augment_scratch_free(&scratch);
    for (int i = 0; i < 8; i++) image_free(&z.img[i]);
}

// A training sample is its draws (augment_draw) then their application (augment_apply): the same bytes,
// boxes and rng state as augment_train_sample, with the draws all made before any source is read; the
// pixels and the boxes each come from the recipe and the tiles alone.
static void test_recipe_draw_then_apply(void) {
    Rng g = rng_for(5, 5, 5);
    int s = 64, bad = 0, kinds[3] = { 0 };
    Noise z;
    noise_make(&z, s, &g);
    SampleSource src = { .n = 8, .ctx = &z, .get = noise_get, .put = noise_put };
    AugScratch scratch = { 0 };
    for (int k = 0; k < 60; k++) {
        AugParams p = { .img_size = s, .hsv_h = 0.015, .hsv_s = 0.7, .hsv_v = 0.4, .translate = 0.1, .scale = 0.9,
                        .degrees = k % 3 ? 10 : 0, .shear = k % 4 ? 2 : 0, .perspective = k % 5 ? 0 : 1e-3,
                        .fliplr = 0.5, .flipud = 0.5, .mosaic = 0.7, .mixup = 0.5, .close_mosaic = k % 7 == 6 };
        Rng a = rng_for(3, 1, (uint64_t)k), b = a;
        Image want, got = { 0 }, again = { 0 }; Box *bw, *bg, *bp; int nw, ng, np; Err err;
        augment_train_sample(&p, &src, k % 8, &a, &want, &bw, &nw, &err);
        AugRecipe r;
        augment_draw(&p, src.n, k % 8, s, s, &b, &r);
        bad += a.s[0] != b.s[0] || a.s[1] != b.s[1];          // every draw, and only those
        kinds[r.mosaic + r.mixup]++;
        augment_apply(&r, &src, &scratch, &got, &bg, &ng, &err);
        bad += count_diff(&want, &got) != 0 || nw != ng || (nw && memcmp(bw, bg, sizeof *bw * (size_t)nw) != 0);
        int idx[8], nb[8], m = augment_recipe_sources(&r, idx);
        bad += m != (r.mosaic ? (r.mixup ? 8 : 4) : 1) || idx[0] != (r.mosaic ? r.warp[0].idx[0] : k % 8);
        Image tiles[8]; Box *tb[8];
        for (int i = 0; i < m; i++) tiles[i] = z.img[idx[i]], tb[i] = z.box[idx[i]], nb[i] = 2;
        augment_apply_pixels(&r, tiles, &scratch, &again);
        augment_apply_boxes(&r, tiles, tb, nb, &bp, &np);
        bad += count_diff(&want, &again) != 0 || np != nw || (nw && memcmp(bw, bp, sizeof *bw * (size_t)nw) != 0);
        free(bw); free(bg); free(bp); image_free(&want); image_free(&got); image_free(&again);
    }
    CHECK(bad == 0, "%d differences between augment_train_sample and augment_draw + augment_apply", bad);
    CHECK(kinds[0] && kinds[1] && kinds[2], "letterbox %d, mosaic %d, mixup %d: a kind never came", kinds[0],
          kinds[1], kinds[2]);
    augment_scratch_free(&scratch);
    for (int i = 0; i < 8; i++) image_free(&z.img[i]);
}

int main(void) {
    (void)shared_dir;   // test.h defines it static (not inline); these tests make their own images
    RUN(test_letterbox_reference_numbers);
    RUN(test_letterbox_odd_cases);
    RUN(test_load_resize);
    RUN(test_mosaic_centre_range);
    RUN(test_mosaic_place_quadrants);
    RUN(test_mosaic_output_and_boxes);
    RUN(test_perspective_scale);
    RUN(test_perspective_translate);
    RUN(test_perspective_rotate);
    RUN(test_perspective_shear);
    RUN(test_perspective_border);
    RUN(test_perspective_warp);
    RUN(test_perspective_identity_copies);
    RUN(test_warp_translation_exact);
    RUN(test_box_candidates);
    RUN(test_hsv_zero_gains_identity);
    RUN(test_hsv_luts);
    RUN(test_hsv_pixels);
    RUN(test_flips);
    RUN(test_mixup_beta);
    RUN(test_train_sample_boxes_and_flips);
    RUN(test_close_mosaic);
    RUN(test_determinism);
    RUN(test_val_sample);
    RUN(test_warp_matches_ref);
    RUN(test_hsv_matches_ref_all_colours);
    RUN(test_hsv_backward_never_clamps);
    RUN(test_mosaic_and_letterbox_planes_match_painting);
    RUN(test_train_sample_into);
    RUN(test_recipe_draw_then_apply);
    return test_summary();
}
