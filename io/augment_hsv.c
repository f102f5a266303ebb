// augment_hsv.c: YOLOv9's augment_hsv (reference §3.7) on uint8 RGB: OpenCV's RGB→HSV, per-channel LUTs,
// HSV→RGB, byte for byte as cv2 4.6 computes them.
// Legend: H in [0,180), S and V in [0,255] (OpenCV's uint8 HSV); r[3] the drawn gains.
#include "io/augment.h"
#include <limits.h>
#include <math.h>
#include <string.h>

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }

// OpenCV's saturate_cast<int>(double): round half to even, clamped to the int range.
static int sat_round(double v) {
    if (v >= INT_MAX) return INT_MAX;
    if (v <= INT_MIN) return INT_MIN;
    return (int)lrint(v);
}

// OpenCV 4.x's uint8 RGB↔HSV: forward, its integer code (12-bit fixed-point division tables); backward,
// its float code, truncating to uint8 as its SIMD path does (OpenCV rounds only in the scalar tail of a
// row, the last width mod 4·lanes pixels; a 640-wide row has none). Checked equal to cv2 4.6 on x86-64.

#define HSV_SHIFT 12

static void hsv_tables(int sdiv[256], int hdiv[256]) {
    sdiv[0] = hdiv[0] = 0;
    for (int i = 1; i < 256; i++) {
        sdiv[i] = sat_round((255 << HSV_SHIFT) / (1.0 * i));
        hdiv[i] = sat_round((180 << HSV_SHIFT) / (6.0 * i));
    }
}

// The backward conversion of a pixel whose LUT'd HSV is (H', S', V'), as OpenCV computes it in float:
//   h = H'·(6/180), sector = (int)h, h −= sector, s = S'/255, v = V'/255,
//   the candidates v, p = v·(1 − s), q = v·(1 − s·h), t = v·(1 − s·(1 − h)), each out = trunc(·255),
//   and the sector picks which goes to r, g, b (odd sectors use q, even ones t, never both).
// 1 − s·x is rounded once, as the fused multiply-subtract the compiler makes of OpenCV's AVX2 code; the
// exact product in double makes this equal to fmaf without its libm call.
// OpenCV clamps to [0, 255] before truncating; no product here reaches 256 or goes below 0 for any
// (H', S', V') (test_hsv_backward_never_clamps), so the cast alone gives the same bytes.
// Folding the LUTs in, every factor is a table over the forward's H, S or V (256 entries each), so a
// pixel costs the integer forward conversion, five float products and three shifts.
// The folded tables (AugHsvTables, io/augment.h): by V, v = V'/255 and v255 = trunc(V'/255 · 255); by S,
// s = S'/255 and one_minus_s = 1 − S'/255 (float, as OpenCV); by H, x = h for odd sectors, 1 − h for even
// ones, and shift: where r, g, b sit in (v255 | p << 8 | q_or_t << 16).
typedef AugHsvTables HsvFold;

static void hsv_fold(const uint8_t lut[3][256], HsvFold *f) {
    // candidate slots: 0 v, 8 p, 16 q-or-t; per sector, the slot of r, g and b
    static const uint8_t slot[6][3] = { {0,16,8}, {16,0,8}, {8,0,16}, {8,16,0}, {16,8,0}, {0,8,16} };
    for (int i = 0; i < 256; i++) {
        f->v[i] = lut[2][i] * (1.f / 255);
        f->v255[i] = (uint8_t)(f->v[i] * 255);
        f->s[i] = lut[1][i] * (1.f / 255);
        f->one_minus_s[i] = 1 - f->s[i];
        float h = lut[0][i] * (6.f / 180);              // H' < 180: OpenCV's fmod is a no-op, floor a cast
        int sector = (int)h;
        h -= (float)sector;
        f->x[i] = sector % 2 ? h : 1 - h;
        for (int c = 0; c < 3; c++) f->shift[i][c] = slot[sector][c];
    }
}

// One pixel in place: OpenCV's integer RGB→HSV (h, s, v before the LUTs), then the folded backward.
static inline void hsv_pixel(uint8_t *restrict px, const int *sdiv, const int *hdiv, const HsvFold *f) {
    int r = px[0], g = px[1], b = px[2];
    int v = imax(imax(r, g), b), diff = v - imin(imin(r, g), b);
    int s = (diff * sdiv[v] + (1 << (HSV_SHIFT - 1))) >> HSV_SHIFT;
    int h = v == r ? g - b : v == g ? b - r + 2 * diff : r - g + 4 * diff;
    h = (h * hdiv[diff] + (1 << (HSV_SHIFT - 1))) >> HSV_SHIFT;
    h += h < 0 ? 180 : 0;
    float fv = f->v[v];
    uint32_t p = (uint32_t)(fv * f->one_minus_s[s] * 255);
    uint32_t qt = (uint32_t)(fv * (float)(1.0 - (double)f->s[s] * f->x[h]) * 255);
    uint32_t all = f->v255[v] | p << 8 | qt << 16;
    px[0] = (uint8_t)(all >> f->shift[h][0]);
    px[1] = (uint8_t)(all >> f->shift[h][1]);
    px[2] = (uint8_t)(all >> f->shift[h][2]);
}

void augment_hsv_luts(const double r[3], uint8_t lut[3][256]) {
    for (int x = 0; x < 256; x++) {
        double h = fmod(x * r[0], 180);
        lut[0][x] = (uint8_t)(h < 0 ? h + 180 : h);          // numpy's % takes the divisor's sign; astype truncates
        lut[1][x] = (uint8_t)fmin(fmax(x * r[1], 0), 255);
        lut[2][x] = (uint8_t)fmin(fmax(x * r[2], 0), 255);
    }
}

void augment_hsv_tables(const double r[3], AugHsvTables *t) {
    uint8_t lut[3][256];
    hsv_tables(t->sdiv, t->hdiv);
    augment_hsv_luts(r, lut);
    hsv_fold(lut, t);
}

void augment_hsv_apply(Image *im, const double r[3]) {
    AugHsvTables t;
    augment_hsv_tables(r, &t);
    const int *sdiv = t.sdiv, *hdiv = t.hdiv;
    const HsvFold fold = t;
    // Grey pixels (r = g = b: the mosaic's and the warp's 114 borders, often a fifth of a sample) have
    // h = s = 0, so their colour depends on v alone: convert each grey once.
    uint8_t grey[256][3];
    for (int v = 0; v < 256; v++) {
        grey[v][0] = grey[v][1] = grey[v][2] = (uint8_t)v;
        hsv_pixel(grey[v], sdiv, hdiv, &fold);
    }
    uint8_t *px = im->px;
    for (size_t i = 0, n = (size_t)im->w * im->h; i < n; i++, px += 3) {
        if (px[0] == px[1] && px[1] == px[2]) memcpy(px, grey[px[0]], 3);
        else hsv_pixel(px, sdiv, hdiv, &fold);
    }
}

void augment_hsv(Image *im, double hgain, double sgain, double vgain, Rng *rng) {
    if (!hgain && !sgain && !vgain) return;
    double r[3] = { rng_uniform(rng, -1, 1) * hgain + 1, rng_uniform(rng, -1, 1) * sgain + 1,
                    rng_uniform(rng, -1, 1) * vgain + 1 };
    augment_hsv_apply(im, r);
}
