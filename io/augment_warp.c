// augment_warp.c: OpenCV's warpAffine/warpPerspective (INTER_LINEAR, constant border 114) on 3-channel
// uint8 images, reading from a Plane so a mosaic or a letterbox is warped straight from its tiles.
// Legend: W,H output size; (x,y) output pixel; (sx,sy) top-left source tap; 1/32 px = one "tab".
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

// OpenCV's saturate_cast<int>(double): round half to even, clamped to the int range.
static int sat_round(double v) {
    if (v >= INT_MAX) return INT_MAX;
    if (v <= INT_MIN) return INT_MIN;
    return (int)lrint(v);
}

// ---- planes ----------------------------------------------------------------------------------------

Plane augment_plane_of(const Image *im) {
    Plane pl = { .w = im->w, .h = im->h };
    augment_plane_add(&pl, im->px, (size_t)im->w * 3, 0, 0, im->w, im->h);
    return pl;
}

void augment_plane_add(Plane *pl, const uint8_t *px, size_t stride, int x0, int y0, int x1, int y1) {
    if (x1 <= x0 || y1 <= y0) return;       // an empty crop shows nothing
    if (pl->n == AUG_PLANE_PIECES) die("augment_plane_add: more than %d pieces", AUG_PLANE_PIECES);
    if (pl->n == 0) pl->x0 = x0, pl->y0 = y0, pl->x1 = x1, pl->y1 = y1;
    pl->x0 = imin(pl->x0, x0), pl->y0 = imin(pl->y0, y0), pl->x1 = imax(pl->x1, x1), pl->y1 = imax(pl->y1, y1);
    pl->piece[pl->n++] = (Piece){ px, stride, x0, y0, x1, y1 };
}

// The pixel at (x, y): a piece's, PAD_VALUE elsewhere (between the pieces as outside the plane).
static const uint8_t *plane_pixel(const Plane *pl, int x, int y) {
    static const uint8_t pad[3] = { PAD_VALUE, PAD_VALUE, PAD_VALUE };
    if ((unsigned)x >= (unsigned)pl->w || (unsigned)y >= (unsigned)pl->h) return pad;
    for (int k = 0; k < pl->n; k++) {
        const Piece *p = &pl->piece[k];
        if (x >= p->x0 && x < p->x1 && y >= p->y0 && y < p->y1)
            return p->px + (size_t)(y - p->y0) * p->stride + (size_t)(x - p->x0) * 3;
    }
    return pad;
}

// Whether piece p holds all four taps (sx..sx+1, sy..sy+1): then they are read from its memory directly.
static int piece_holds(const Piece *p, int sx, int sy) {
    return (unsigned)(sx - p->x0) < (unsigned)(p->x1 - p->x0 - 1) &&
           (unsigned)(sy - p->y0) < (unsigned)(p->y1 - p->y0 - 1);
}

// Whether any tap of the 2x2 at (sx, sy) lies on a piece inside the plane; if none the pixel is PAD_VALUE.
static int plane_touches(const Plane *pl, int sx, int sy) {
    if (sx + 1 < 0 || sy + 1 < 0 || sx >= pl->w || sy >= pl->h) return 0;
    for (int k = 0; k < pl->n; k++) {
        const Piece *p = &pl->piece[k];
        if (sx + 1 >= p->x0 && sx < p->x1 && sy + 1 >= p->y0 && sy < p->y1) return 1;
    }
    return 0;
}

// ---- source positions ------------------------------------------------------------------------------
// Every output pixel gets a source position in 1/32 px (X, Y) exactly as OpenCV computes it.

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

// ---- sampling --------------------------------------------------------------------------------------
// 4 integer taps whose weights are products of (32 − f) and f; (Σ w·v + 512) >> 10 equals OpenCV's 15-bit
// table arithmetic because those weights are exact.

static inline void blend4(const uint8_t *p00, const uint8_t *p01, const uint8_t *p10, const uint8_t *p11,
                   int fx, int fy, uint8_t *restrict dst) {
    int w00 = (TAB_SIZE - fx) * (TAB_SIZE - fy), w01 = fx * (TAB_SIZE - fy);
    int w10 = (TAB_SIZE - fx) * fy, w11 = fx * fy;
    // three channels written out: -O2 does not unroll a loop of 3
    dst[0] = (uint8_t)((p00[0] * w00 + p01[0] * w01 + p10[0] * w10 + p11[0] * w11 + 512) >> 10);
    dst[1] = (uint8_t)((p00[1] * w00 + p01[1] * w01 + p10[1] * w10 + p11[1] * w11 + 512) >> 10);
    dst[2] = (uint8_t)((p00[2] * w00 + p01[2] * w01 + p10[2] * w10 + p11[2] * w11 + 512) >> 10);
}

// The piece the previous pixel used, in locals (fields of a struct the compiler keeps in registers):
// all 4 taps of (sx, sy) are on it when (unsigned)(sx − x0) < w1 and (unsigned)(sy − y0) < h1.
typedef struct { const uint8_t *px; size_t stride; int x0, y0; unsigned w1, h1; } Held;

static Held held_of(const Piece *p) {
    return (Held){ p->px, p->stride, p->x0, p->y0, (unsigned)(p->x1 - p->x0 - 1), (unsigned)(p->y1 - p->y0 - 1) };
}

// One output row: most pixels have all 4 taps on the piece of their neighbour (the fast path), the rest
// find their piece, or are PAD_VALUE when they touch none, or gather their taps one by one (piece edges).
static void sample_row(const Plane *pl, const int *X, const int *Y, int x0, int x1, uint8_t *restrict dst) {
    Held c = held_of(&pl->piece[0]);       // pl->n >= 1: augment_warp_plane fills a plane without pieces
    for (int x = x0; x < x1; x++, dst += 3) {
        int sx = X[x] >> TAB_BITS, sy = Y[x] >> TAB_BITS;
        int fx = X[x] & (TAB_SIZE - 1), fy = Y[x] & (TAB_SIZE - 1);
        if ((unsigned)(sx - c.x0) >= c.w1 || (unsigned)(sy - c.y0) >= c.h1) {
            if (sx + 1 < pl->x0 || sy + 1 < pl->y0 || sx >= pl->x1 || sy >= pl->y1) {   // beyond every piece
                dst[0] = dst[1] = dst[2] = PAD_VALUE;
                continue;
            }
            int k = 0;
            while (k < pl->n && !piece_holds(&pl->piece[k], sx, sy)) k++;
            if (k == pl->n) {
                if (!plane_touches(pl, sx, sy)) dst[0] = dst[1] = dst[2] = PAD_VALUE;
                else blend4(plane_pixel(pl, sx, sy), plane_pixel(pl, sx + 1, sy), plane_pixel(pl, sx, sy + 1),
                            plane_pixel(pl, sx + 1, sy + 1), fx, fy, dst);
                continue;
            }
            c = held_of(&pl->piece[k]);
        }
        const uint8_t *a = c.px + (size_t)(sy - c.y0) * c.stride + (size_t)(sx - c.x0) * 3, *b = a + c.stride;
        blend4(a, a + 3, b, b + 3, fx, fy, dst);
    }
}

int augment_warp_inverse(const double M[9], double Mi[9]) {
    int affine = M[6] == 0 && M[7] == 0 && M[8] == 1;
    if (affine) affine_invert(M, Mi);
    else        mat3_invert(M, Mi);
    return affine;
}

void augment_warp_plane(const Plane *plane, const double M[9], Image *out) {
    int W = out->w, H = out->h;
    if (plane->n == 0) {                    // nothing to show: all PAD_VALUE, as a blank canvas warps
        memset(out->px, PAD_VALUE, (size_t)W * H * 3);
        return;
    }
    double Mi[9];
    int affine = augment_warp_inverse(M, Mi);
    int *buf = xmalloc(sizeof(int) * 4 * (size_t)W);
    int *X = buf, *Y = buf + W, *adelta = buf + 2 * W, *bdelta = buf + 3 * W;   // (W) each
    for (int x = 0; x < W && affine; x++) {
        adelta[x] = sat_round(Mi[0] * x * (1 << AB_BITS));
        bdelta[x] = sat_round(Mi[3] * x * (1 << AB_BITS));
    }
    // Tiles of WARP_TILE² output pixels read a compact source patch even under rotation (as OpenCV's blocks).
    for (int ty = 0; ty < H; ty += WARP_TILE)
        for (int tx = 0; tx < W; tx += WARP_TILE) {
            int x1 = imin(tx + WARP_TILE, W);
            for (int y = ty; y < imin(ty + WARP_TILE, H); y++) {
                if (affine) warp_row_affine(Mi, y, adelta, bdelta, tx, x1, X, Y);
                else        warp_row_perspective(Mi, y, tx, x1, X, Y);
                sample_row(plane, X, Y, tx, x1, out->px + ((size_t)y * W + tx) * 3);
            }
        }
    free(buf);
}

Image augment_warp(const Image *src, const double M[9], int out_w, int out_h) {
    Image out = image_new(out_w, out_h, PAD_VALUE);
    Plane pl = augment_plane_of(src);
    augment_warp_plane(&pl, M, &out);
    return out;
}
