// augment.c: YOLOv9's training-sample augmentation (reference §3.3-§3.8) on RGB images in memory.
// Box arithmetic mirrors the reference's numpy dtypes: float32 labels, float64 warp of the corners.
// Legend: s img_size; W,H output size; (x,y) output pixel, (sx,sy) source pixel; 1/32 px = one "tab".
#include "io/augment.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PAD_VALUE 114        // the reference's grey for letterbox borders, the mosaic canvas and warps
#define TAB_BITS  5          // OpenCV INTER_BITS: bilinear positions are quantised to 1/32 px
#define TAB_SIZE  (1 << TAB_BITS)
#define AB_BITS   10         // OpenCV's fixed point for the affine row increments
#define WARP_TILE 64         // output tile side of the warp

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }
static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

// Python's round() on floats: half to even (rint in the default rounding mode).
static int round_even(double v) { return (int)rint(v); }

// OpenCV's saturate_cast<int>(double): round half to even, clamped to the int range.
static int sat_round(double v) {
    if (v >= INT_MAX) return INT_MAX;
    if (v <= INT_MIN) return INT_MIN;
    return (int)lrint(v);
}

static Image image_copy(const Image *src) {
    Image im = image_new(src->w, src->h, 0);
    memcpy(im.px, src->px, (size_t)src->w * src->h * 3);
    return im;
}

// ---- load_image and letterbox ---------------------------------------------------------------------

Image augment_load_resize(const Image *src, int img_size, int augment) {
    double r = (double)img_size / imax(src->w, src->h);
    if (r == 1) return image_copy(src);
    int w = imax(1, (int)(src->w * r)), h = imax(1, (int)(src->h * r));   // int() truncates, as the reference
    return image_resize(src, w, h, !augment && r < 1);
}

Image augment_letterbox(const Image *src, int new_w, int new_h, int scaleup, int stride, LetterboxInfo *info) {
    double r = fmin((double)new_h / src->h, (double)new_w / src->w);
    if (!scaleup) r = fmin(r, 1.0);
    int uw = round_even(src->w * r), uh = round_even(src->h * r);
    int dw = new_w - uw, dh = new_h - uh;
    if (stride > 0) { dw = (dw % stride + stride) % stride; dh = (dh % stride + stride) % stride; }
    double hw = dw / 2.0, hh = dh / 2.0;
    LetterboxInfo lb = { .r = r, .padw = hw, .padh = hh,
                         .top = round_even(hh - 0.1), .bottom = round_even(hh + 0.1),
                         .left = round_even(hw - 0.1), .right = round_even(hw + 0.1) };
    Image body = (uw == src->w && uh == src->h) ? image_copy(src) : image_resize(src, uw, uh, 0);
    Image out = image_new(uw + lb.left + lb.right, uh + lb.top + lb.bottom, PAD_VALUE);
    for (int y = 0; y < uh; y++)
        memcpy(out.px + ((size_t)(y + lb.top) * out.w + lb.left) * 3, body.px + (size_t)y * uw * 3,
               (size_t)uw * 3);
    image_free(&body);
    if (info) *info = lb;
    return out;
}

void augment_boxes_to_pixels(const Box *in, int n, double w, double h, double padw, double padh,
                             BoxXyxy *out) {
    float fw = (float)w, fh = (float)h, pw = (float)padw, ph = (float)padh;   // numpy: float32 labels
    for (int i = 0; i < n; i++) {
        const Box *b = &in[i];
        out[i] = (BoxXyxy){ b->cls, fw * (b->cx - b->w / 2) + pw, fh * (b->cy - b->h / 2) + ph,
                                    fw * (b->cx + b->w / 2) + pw, fh * (b->cy + b->h / 2) + ph };
    }
}

// ---- the warp ----------------------------------------------------------------------------------------
// OpenCV's warpAffine/warpPerspective with INTER_LINEAR and a constant border, written for 3 channels:
// every output pixel gets a source position in 1/32 px (X, Y), then 4 integer taps whose weights are
// products of (32 − f) and f; (Σ w·v + 512) >> 10 equals OpenCV's 15-bit table arithmetic because
// those weights are exact. Checked equal to cv2 4.6 warpAffine/warpPerspective (OpenCV ≥ 4.11 rewrote
// its warps in float and may differ from both by a level).

// The inverse of an affine M written as OpenCV's invertAffineTransform, so rounding matches it too.
static void affine_invert(const double M[9], double inv[9]) {
    double D = M[0] * M[4] - M[1] * M[3];
    D = D != 0 ? 1 / D : 0;
    inv[0] = M[4] * D; inv[1] = -M[1] * D; inv[3] = -M[3] * D; inv[4] = M[0] * D;
    inv[2] = -inv[0] * M[2] - inv[1] * M[5];
    inv[5] = -inv[3] * M[2] - inv[4] * M[5];
    inv[6] = 0; inv[7] = 0; inv[8] = 1;
}

// The inverse of a 3x3 row-major matrix (M is never singular here: scale > 0; a singular M maps all to 0).
static void mat3_invert(const double M[9], double inv[9]) {
    double c0 = M[4] * M[8] - M[5] * M[7], c1 = M[5] * M[6] - M[3] * M[8], c2 = M[3] * M[7] - M[4] * M[6];
    double det = M[0] * c0 + M[1] * c1 + M[2] * c2, d = det != 0 ? 1 / det : 0;
    inv[0] = c0 * d; inv[1] = (M[2] * M[7] - M[1] * M[8]) * d; inv[2] = (M[1] * M[5] - M[2] * M[4]) * d;
    inv[3] = c1 * d; inv[4] = (M[0] * M[8] - M[2] * M[6]) * d; inv[5] = (M[2] * M[3] - M[0] * M[5]) * d;
    inv[6] = c2 * d; inv[7] = (M[1] * M[6] - M[0] * M[7]) * d; inv[8] = (M[0] * M[4] - M[1] * M[3]) * d;
}

// Affine rows as OpenCV: per-column increments precomputed in 1/1024 px, so a pixel costs two adds
// and two shifts (>> of a negative int is arithmetic on every compiler we support).
static void warp_row_affine(const double *Mi, int y, const int *adelta, const int *bdelta, int x0, int x1,
                            int *X, int *Y) {
    int round_delta = (1 << AB_BITS) / TAB_SIZE / 2;
    int X0 = sat_round((Mi[1] * y + Mi[2]) * (1 << AB_BITS)) + round_delta;
    int Y0 = sat_round((Mi[4] * y + Mi[5]) * (1 << AB_BITS)) + round_delta;
    for (int x = x0; x < x1; x++) {
        X[x] = (X0 + adelta[x]) >> (AB_BITS - TAB_BITS);
        Y[x] = (Y0 + bdelta[x]) >> (AB_BITS - TAB_BITS);
    }
}

static void warp_row_perspective(const double *Mi, int y, int x0, int x1, int *X, int *Y) {
    for (int x = x0; x < x1; x++) {
        double w = Mi[6] * x + Mi[7] * y + Mi[8];
        w = w != 0 ? TAB_SIZE / w : 0;
        X[x] = sat_round((Mi[0] * x + Mi[1] * y + Mi[2]) * w);
        Y[x] = sat_round((Mi[3] * x + Mi[4] * y + Mi[5]) * w);
    }
}

// One source tap, or the border value outside the image.
static int tap(const Image *src, int sx, int sy, int c) {
    if (sx < 0 || sy < 0 || sx >= src->w || sy >= src->h) return PAD_VALUE;
    return src->px[((size_t)sy * src->w + sx) * 3 + c];
}

static void sample_row(const Image *src, const int *X, const int *Y, int x0, int x1, uint8_t *restrict dst) {
    const uint8_t *px = src->px;            // locals: stores through uint8_t* could alias *src
    int sw = src->w, sh = src->h;
    size_t stride = (size_t)sw * 3;
    for (int x = x0; x < x1; x++, dst += 3) {
        int sx = X[x] >> TAB_BITS, sy = Y[x] >> TAB_BITS;
        int fx = X[x] & (TAB_SIZE - 1), fy = Y[x] & (TAB_SIZE - 1);
        int w00 = (TAB_SIZE - fx) * (TAB_SIZE - fy), w01 = fx * (TAB_SIZE - fy);
        int w10 = (TAB_SIZE - fx) * fy, w11 = fx * fy;
        if ((unsigned)sx < (unsigned)(sw - 1) && (unsigned)sy < (unsigned)(sh - 1)) {
            const uint8_t *p = px + (size_t)sy * stride + (size_t)sx * 3, *q = p + stride;
            for (int c = 0; c < 3; c++)
                dst[c] = (uint8_t)((p[c] * w00 + p[c + 3] * w01 + q[c] * w10 + q[c + 3] * w11 + 512) >> 10);
        } else if (sx >= sw || sx + 1 < 0 || sy >= sh || sy + 1 < 0) {
            dst[0] = dst[1] = dst[2] = PAD_VALUE;
        } else {
            for (int c = 0; c < 3; c++)
                dst[c] = (uint8_t)((tap(src, sx, sy, c) * w00 + tap(src, sx + 1, sy, c) * w01 +
                                    tap(src, sx, sy + 1, c) * w10 + tap(src, sx + 1, sy + 1, c) * w11 + 512) >> 10);
        }
    }
}

Image augment_warp(const Image *src, const double M[9], int out_w, int out_h) {
    double Mi[9];
    int affine = M[6] == 0 && M[7] == 0 && M[8] == 1;
    if (affine) affine_invert(M, Mi);
    else        mat3_invert(M, Mi);
    Image out = image_new(out_w, out_h, PAD_VALUE);
    int *buf = xmalloc(sizeof(int) * 4 * (size_t)out_w);
    int *X = buf, *Y = buf + out_w, *adelta = buf + 2 * out_w, *bdelta = buf + 3 * out_w;   // (W) each
    for (int x = 0; x < out_w && affine; x++) {
        adelta[x] = sat_round(Mi[0] * x * (1 << AB_BITS));
        bdelta[x] = sat_round(Mi[3] * x * (1 << AB_BITS));
    }
    // Tiles of WARP_TILE² output pixels read a compact source patch even under rotation (as OpenCV's blocks).
    for (int ty = 0; ty < out_h; ty += WARP_TILE)
        for (int tx = 0; tx < out_w; tx += WARP_TILE) {
            int x1 = imin(tx + WARP_TILE, out_w);
            for (int y = ty; y < imin(ty + WARP_TILE, out_h); y++) {
                if (affine) warp_row_affine(Mi, y, adelta, bdelta, tx, x1, X, Y);
                else        warp_row_perspective(Mi, y, tx, x1, X, Y);
                sample_row(src, X, Y, tx, x1, out.px + ((size_t)y * out_w + tx) * 3);
            }
        }
    free(buf);
    return out;
}

// ---- random_perspective ----------------------------------------------------------------------------

static void mat3_mul(const double A[9], const double B[9], double C[9]) {
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            C[i * 3 + j] = A[i * 3] * B[j] + A[i * 3 + 1] * B[3 + j] + A[i * 3 + 2] * B[6 + j];
}

// M = T·S·R·P·C with the reference's draw order; *scale gets the drawn scale for box_candidates.
static void perspective_matrix(const AugParams *p, int in_w, int in_h, int W, int H, Rng *rng,
                               double M[9], double *scale) {
    double C[9] = { 1, 0, -in_w / 2.0, 0, 1, -in_h / 2.0, 0, 0, 1 };
    double P[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
    P[6] = rng_uniform(rng, -p->perspective, p->perspective);
    P[7] = rng_uniform(rng, -p->perspective, p->perspective);
    double a = rng_uniform(rng, -p->degrees, p->degrees) * M_PI / 180;
    double s = rng_uniform(rng, 1 - p->scale, 1 + p->scale);
    double R[9] = { cos(a) * s, sin(a) * s, 0, -sin(a) * s, cos(a) * s, 0, 0, 0, 1 };  // getRotationMatrix2D
    double S[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
    S[1] = tan(rng_uniform(rng, -p->shear, p->shear) * M_PI / 180);
    S[3] = tan(rng_uniform(rng, -p->shear, p->shear) * M_PI / 180);
    double T[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
    T[2] = rng_uniform(rng, 0.5 - p->translate, 0.5 + p->translate) * W;
    T[5] = rng_uniform(rng, 0.5 - p->translate, 0.5 + p->translate) * H;
    double TS[9], TSR[9], TSRP[9];
    mat3_mul(T, S, TS);
    mat3_mul(TS, R, TSR);
    mat3_mul(TSR, P, TSRP);
    mat3_mul(TSRP, C, M);
    *scale = s;
}

int augment_box_candidate(float w1, float h1, double w2, double h2) {
    const double eps = 1e-16;
    double ar = fmax(w2 / (h2 + eps), h2 / (w2 + eps));
    float area1 = w1 * h1 + (float)eps;           // float32 in the reference (box1 = labels·s)
    return w2 > 2 && h2 > 2 && w2 * h2 / area1 > 0.1 && ar < 100;
}

// Warp the 4 corners of every box, take min/max, clip to [0,W]×[0,H], keep the candidates (in place).
static int transform_boxes(BoxXyxy *b, int n, const double M[9], double scale, int W, int H) {
    int kept = 0;
    float fs = (float)scale;
    for (int i = 0; i < n; i++) {
        double cx[4] = { b[i].x1, b[i].x2, b[i].x1, b[i].x2 }, cy[4] = { b[i].y1, b[i].y2, b[i].y2, b[i].y1 };
        double lo_x = INFINITY, lo_y = INFINITY, hi_x = -INFINITY, hi_y = -INFINITY;
        for (int k = 0; k < 4; k++) {
            double x = cx[k] * M[0] + cy[k] * M[1] + M[2], y = cx[k] * M[3] + cy[k] * M[4] + M[5];
            double w = cx[k] * M[6] + cy[k] * M[7] + M[8];
            if (M[6] != 0 || M[7] != 0 || M[8] != 1) { x /= w; y /= w; }
            lo_x = fmin(lo_x, x); hi_x = fmax(hi_x, x); lo_y = fmin(lo_y, y); hi_y = fmax(hi_y, y);
        }
        lo_x = fmin(fmax(lo_x, 0), W); hi_x = fmin(fmax(hi_x, 0), W);
        lo_y = fmin(fmax(lo_y, 0), H); hi_y = fmin(fmax(hi_y, 0), H);
        float w1 = b[i].x2 * fs - b[i].x1 * fs, h1 = b[i].y2 * fs - b[i].y1 * fs;
        if (augment_box_candidate(w1, h1, hi_x - lo_x, hi_y - lo_y))
            b[kept++] = (BoxXyxy){ b[i].cls, (float)lo_x, (float)lo_y, (float)hi_x, (float)hi_y };
    }
    return kept;
}

Image augment_random_perspective(const Image *src, BoxXyxy *boxes, int *n, const AugParams *p, int border,
                                 Rng *rng) {
    int W = src->w + 2 * border, H = src->h + 2 * border;
    double M[9], scale;
    perspective_matrix(p, src->w, src->h, W, H, rng, M, &scale);
    static const double eye[9] = { 1, 0, 0, 0, 1, 0, 0, 0, 1 };
    int identity = 1;
    for (int k = 0; k < 9; k++) identity &= M[k] == eye[k];       // == so that -0.0 counts as 0, as numpy's !=
    Image out = border == 0 && identity ? image_copy(src) : augment_warp(src, M, W, H);
    *n = transform_boxes(boxes, *n, M, scale, W, H);
    return out;
}

// ---- mosaic ------------------------------------------------------------------------------------------

void augment_mosaic_centre(Rng *rng, int s, int *xc, int *yc) {
    *yc = (int)rng_uniform(rng, s / 2.0, 1.5 * s);
    *xc = (int)rng_uniform(rng, s / 2.0, 1.5 * s);
}

void augment_mosaic_place(Image *canvas, const Image *tile, const Box *b, int nb, int q, int xc, int yc,
                          BoxXyxy *out) {
    int w = tile->w, h = tile->h, s2 = canvas->w;
    int x1a, y1a, x2a, y2a, x1b, y1b;       // a: canvas rectangle, b: its top-left in the tile
    switch (q) {
    case 0:  x1a = imax(xc - w, 0); y1a = imax(yc - h, 0); x2a = xc; y2a = yc;
             x1b = w - (x2a - x1a); y1b = h - (y2a - y1a); break;
    case 1:  x1a = xc; y1a = imax(yc - h, 0); x2a = imin(xc + w, s2); y2a = yc;
             x1b = 0; y1b = h - (y2a - y1a); break;
    case 2:  x1a = imax(xc - w, 0); y1a = yc; x2a = xc; y2a = imin(s2, yc + h);
             x1b = w - (x2a - x1a); y1b = 0; break;
    default: x1a = xc; y1a = yc; x2a = imin(xc + w, s2); y2a = imin(s2, yc + h);
             x1b = 0; y1b = 0; break;
    }
    int cw = imin(x2a - x1a, w - x1b), ch = imin(y2a - y1a, h - y1b);   // numpy slices stop at the tile edge
    for (int y = 0; y < ch; y++)
        memcpy(canvas->px + ((size_t)(y1a + y) * s2 + x1a) * 3,
               tile->px + ((size_t)(y1b + y) * w + x1b) * 3, (size_t)imax(cw, 0) * 3);
    augment_boxes_to_pixels(b, nb, w, h, x1a - x1b, y1a - y1b, out);
    for (int i = 0; i < nb; i++) {
        out[i].x1 = clampf(out[i].x1, 0, s2); out[i].x2 = clampf(out[i].x2, 0, s2);
        out[i].y1 = clampf(out[i].y1, 0, canvas->h); out[i].y2 = clampf(out[i].y2, 0, canvas->h);
    }
}

static void source_put(const SampleSource *src, int index, Image *img, Box *boxes) {
    if (src->put) { src->put(src->ctx, index, img, boxes); return; }
    image_free(img);
    free(boxes);
}

int augment_load_mosaic(const AugParams *p, const SampleSource *src, int index, Rng *rng,
                        Image *out, BoxXyxy **boxes, int *n, Err *err) {
    int s = p->img_size, xc, yc, idx[4] = { index };
    augment_mosaic_centre(rng, s, &xc, &yc);
    for (int i = 1; i < 4; i++) idx[i] = rng_int(rng, src->n);
    for (int i = 3; i > 0; i--) {                  // random.shuffle: Fisher-Yates from the end
        int j = rng_int(rng, i + 1), t = idx[i];
        idx[i] = idx[j]; idx[j] = t;
    }
    Image canvas = image_new(2 * s, 2 * s, PAD_VALUE);
    BoxXyxy *all = NULL;
    int total = 0;
    for (int q = 0; q < 4; q++) {
        Image tile; Box *b; int nb;
        if (src->get(src->ctx, idx[q], &tile, &b, &nb, err)) { image_free(&canvas); free(all); return -1; }
        all = xrealloc(all, sizeof *all * (size_t)imax(total + nb, 1));
        augment_mosaic_place(&canvas, &tile, b, nb, q, xc, yc, all + total);
        total += nb;
        source_put(src, idx[q], &tile, b);
    }
    *out = augment_random_perspective(&canvas, all, &total, p, -s / 2, rng);
    image_free(&canvas);
    *boxes = all;
    *n = total;
    return 0;
}

// ---- colour --------------------------------------------------------------------------------------------
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

static void rgb_to_hsv(const uint8_t *px, const int *sdiv, const int *hdiv, uint8_t hsv[3]) {
    int r = px[0], g = px[1], b = px[2];
    int v = imax(imax(r, g), b), diff = v - imin(imin(r, g), b);
    int s = (diff * sdiv[v] + (1 << (HSV_SHIFT - 1))) >> HSV_SHIFT;
    int h = v == r ? g - b : v == g ? b - r + 2 * diff : r - g + 4 * diff;
    h = (h * hdiv[diff] + (1 << (HSV_SHIFT - 1))) >> HSV_SHIFT;
    if (h < 0) h += 180;
    hsv[0] = (uint8_t)h; hsv[1] = (uint8_t)s; hsv[2] = (uint8_t)v;
}

static uint8_t trunc_u8(float v) { return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v); }

// 1 − a·b rounded once, as the fused multiply-subtract the compiler makes of OpenCV's AVX2 code; the
// exact product in double makes this equal to fmaf without its libm call.
static float fused_one_minus(float a, float b) { return (float)(1.0 - (double)a * b); }

// H' < 180 so h·6/180 < 6: OpenCV's fmod is a no-op and its floor a truncation (as in its SIMD path).
static void hsv_to_rgb(const uint8_t hsv[3], uint8_t *restrict px) {
    static const int sector_data[6][3] = { {1,3,0}, {1,0,2}, {3,0,1}, {0,2,1}, {0,1,3}, {2,1,0} };  // b g r
    float h = hsv[0] * (6.f / 180), s = hsv[1] * (1.f / 255), v = hsv[2] * (1.f / 255);
    int sector = (int)h;
    h -= (float)sector;
    float tab[4] = { v, v * (1 - s), v * fused_one_minus(s, h), v * fused_one_minus(s, 1 - h) };
    px[0] = trunc_u8(tab[sector_data[sector][2]] * 255);
    px[1] = trunc_u8(tab[sector_data[sector][1]] * 255);
    px[2] = trunc_u8(tab[sector_data[sector][0]] * 255);
}

void augment_hsv_luts(const double r[3], uint8_t lut[3][256]) {
    for (int x = 0; x < 256; x++) {
        double h = fmod(x * r[0], 180);
        lut[0][x] = (uint8_t)(h < 0 ? h + 180 : h);          // numpy's % takes the divisor's sign; astype truncates
        lut[1][x] = (uint8_t)fmin(fmax(x * r[1], 0), 255);
        lut[2][x] = (uint8_t)fmin(fmax(x * r[2], 0), 255);
    }
}

void augment_hsv_apply(Image *im, const double r[3]) {
    int sdiv[256], hdiv[256];
    uint8_t lut[3][256];
    hsv_tables(sdiv, hdiv);
    augment_hsv_luts(r, lut);
    uint8_t *px = im->px;
    for (size_t i = 0, n = (size_t)im->w * im->h; i < n; i++, px += 3) {
        uint8_t hsv[3];
        rgb_to_hsv(px, sdiv, hdiv, hsv);
        hsv[0] = lut[0][hsv[0]]; hsv[1] = lut[1][hsv[1]]; hsv[2] = lut[2][hsv[2]];
        hsv_to_rgb(hsv, px);
    }
}

void augment_hsv(Image *im, double hgain, double sgain, double vgain, Rng *rng) {
    if (!hgain && !sgain && !vgain) return;
    double r[3] = { rng_uniform(rng, -1, 1) * hgain + 1, rng_uniform(rng, -1, 1) * sgain + 1,
                    rng_uniform(rng, -1, 1) * vgain + 1 };
    augment_hsv_apply(im, r);
}

// ---- flips and mixup -----------------------------------------------------------------------------------

void augment_flip_lr(Image *im, Box *b, int n) {
    for (int y = 0; y < im->h; y++) {
        uint8_t *row = im->px + (size_t)y * im->w * 3, t[3];
        for (int l = 0, r = im->w - 1; l < r; l++, r--) {
            memcpy(t, row + l * 3, 3); memcpy(row + l * 3, row + r * 3, 3); memcpy(row + r * 3, t, 3);
        }
    }
    for (int i = 0; i < n; i++) b[i].cx = 1 - b[i].cx;
}

void augment_flip_ud(Image *im, Box *b, int n) {
    size_t stride = (size_t)im->w * 3;
    uint8_t *tmp = xmalloc(stride > 0 ? stride : 1);
    for (int t = 0, u = im->h - 1; t < u; t++, u--) {
        memcpy(tmp, im->px + t * stride, stride);
        memcpy(im->px + t * stride, im->px + u * stride, stride);
        memcpy(im->px + u * stride, tmp, stride);
    }
    free(tmp);
    for (int i = 0; i < n; i++) b[i].cy = 1 - b[i].cy;
}

// Marsaglia & Tsang (2000), valid for a ≥ 1.
static double gamma_draw(Rng *rng, double a) {
    double d = a - 1.0 / 3, c = 1 / sqrt(9 * d);
    for (;;) {
        double x = rng_normal(rng), v = 1 + c * x;
        if (v <= 0) continue;
        v = v * v * v;
        double u = rng_uniform(rng, 0, 1);
        if (u < 1 - 0.0331 * x * x * x * x) return d * v;
        if (u > 0 && log(u) < 0.5 * x * x + d * (1 - v + log(v))) return d * v;
    }
}

double augment_beta(Rng *rng, double a, double b) {
    double x = gamma_draw(rng, a), y = gamma_draw(rng, b);
    return x / (x + y);
}

double augment_mixup(Image *im, const Image *im2, Rng *rng) {
    double r = augment_beta(rng, 32, 32), q = 1 - r;
    for (size_t i = 0, n = (size_t)im->w * im->h * 3; i < n; i++)
        im->px[i] = (uint8_t)(im->px[i] * r + im2->px[i] * q);
    return r;
}

// ---- the samples ----------------------------------------------------------------------------------------

// xyxy2xywhn(clip=True, eps=1e-3) in float32: clip to [0, W−eps]×[0, H−eps], then normalise.
static Box *boxes_normalise(const BoxXyxy *in, int n, int W, int H) {
    Box *out = n ? xmalloc(sizeof *out * (size_t)n) : NULL;
    float xmax = (float)(W - 1e-3), ymax = (float)(H - 1e-3);
    for (int i = 0; i < n; i++) {
        float x1 = clampf(in[i].x1, 0, xmax), x2 = clampf(in[i].x2, 0, xmax);
        float y1 = clampf(in[i].y1, 0, ymax), y2 = clampf(in[i].y2, 0, ymax);
        out[i] = (Box){ in[i].cls, (x1 + x2) / 2 / (float)W, (y1 + y2) / 2 / (float)H,
                        (x2 - x1) / (float)W, (y2 - y1) / (float)H };
    }
    return out;
}

// load_image → letterbox to s×s (scaleup on) → random_perspective with border 0.
static int load_letterboxed(const AugParams *p, const SampleSource *src, int index, Rng *rng,
                            Image *out, BoxXyxy **boxes, int *n, Err *err) {
    Image img; Box *b; int nb;
    if (src->get(src->ctx, index, &img, &b, &nb, err)) return -1;
    LetterboxInfo lb;
    Image boxed = augment_letterbox(&img, p->img_size, p->img_size, 1, 0, &lb);
    BoxXyxy *px = xmalloc(sizeof *px * (size_t)imax(nb, 1));
    augment_boxes_to_pixels(b, nb, lb.r * img.w, lb.r * img.h, lb.padw, lb.padh, px);
    source_put(src, index, &img, b);
    *out = augment_random_perspective(&boxed, px, &nb, p, 0, rng);
    image_free(&boxed);
    *boxes = px;
    *n = nb;
    return 0;
}

// A mosaic, then maybe mixup with a second mosaic of a random index (labels concatenated).
static int load_mosaic_mixup(const AugParams *p, const SampleSource *src, int index, Rng *rng,
                             Image *out, BoxXyxy **boxes, int *n, Err *err) {
    if (augment_load_mosaic(p, src, index, rng, out, boxes, n, err)) return -1;
    if (!(rng_uniform(rng, 0, 1) < p->mixup)) return 0;
    Image im2; BoxXyxy *b2; int n2;
    if (augment_load_mosaic(p, src, rng_int(rng, src->n), rng, &im2, &b2, &n2, err)) {
        image_free(out); free(*boxes);
        return -1;
    }
    augment_mixup(out, &im2, rng);
    *boxes = xrealloc(*boxes, sizeof **boxes * (size_t)imax(*n + n2, 1));
    memcpy(*boxes + *n, b2, sizeof *b2 * (size_t)n2);
    *n += n2;
    image_free(&im2); free(b2);
    return 0;
}

int augment_train_sample(const AugParams *p, const SampleSource *src, int index, Rng *rng,
                         Image *out, Box **boxes, int *n, Err *err) {
    int mosaic = !p->close_mosaic && rng_uniform(rng, 0, 1) < p->mosaic;   // no draw once mosaic is closed
    BoxXyxy *px; int np;
    int rc = mosaic ? load_mosaic_mixup(p, src, index, rng, out, &px, &np, err)
                    : load_letterboxed(p, src, index, rng, out, &px, &np, err);
    if (rc) return -1;
    *boxes = boxes_normalise(px, np, out->w, out->h);
    *n = np;
    free(px);
    augment_hsv(out, p->hsv_h, p->hsv_s, p->hsv_v, rng);
    if (rng_uniform(rng, 0, 1) < p->flipud) augment_flip_ud(out, *boxes, *n);
    if (rng_uniform(rng, 0, 1) < p->fliplr) augment_flip_lr(out, *boxes, *n);
    return 0;
}

int augment_val_sample(const SampleSource *src, int index, int shape_w, int shape_h,
                       Image *out, Box **boxes, int *n, LetterboxInfo *info, Err *err) {
    Image img; Box *b; int nb;
    if (src->get(src->ctx, index, &img, &b, &nb, err)) return -1;
    LetterboxInfo lb;
    *out = augment_letterbox(&img, shape_w, shape_h, 0, 0, &lb);
    BoxXyxy *px = xmalloc(sizeof *px * (size_t)imax(nb, 1));
    augment_boxes_to_pixels(b, nb, lb.r * img.w, lb.r * img.h, lb.padw, lb.padh, px);
    source_put(src, index, &img, b);
    *boxes = boxes_normalise(px, nb, out->w, out->h);
    *n = nb;
    free(px);
    if (info) *info = lb;
    return 0;
}
