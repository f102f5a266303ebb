// image_resize.c: resize 8-bit RGB images as OpenCV's cv::resize does, INTER_LINEAR and INTER_AREA,
// so that images match the cv2-based reference loader. Checked bit-exact against cv2 4.6 on
// random images and sizes (shrinking and enlarging; INTER_AREA shrinking only).
// Legend: w,h source size; ow,oh output size; 3 interleaved channels; "taps" are the source
// pixels and weights that make one output pixel along one axis.
#include "io/image.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define COEF_BITS  11                   // OpenCV INTER_RESIZE_COEF_BITS
#define COEF_SCALE (1 << COEF_BITS)

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// OpenCV computes the source step as 1/(out/in), not in/out; the two differ in the last bit.
static double src_step(int n_in, int n_out) { return 1.0 / ((double)n_out / n_in); }

// Bilinear taps along one axis with OpenCV's pixel-centre mapping f = (o+0.5)*step - 0.5:
// i0[o] = floor(f), weights wt[2o], wt[2o+1] = (1-frac, frac) in 1/2048, rounded to nearest even.
// clamp: past the borders use the edge pixel with weight 1 (OpenCV does this along x only;
// along y it keeps the weights and clamps the row index, which gives the same values).
static void linear_taps(int n_in, int n_out, int clamp, int *i0, short *wt) {
    double step = src_step(n_in, n_out);
    for (int o = 0; o < n_out; o++) {
        float f = (float)((o + 0.5) * step - 0.5);
        int i = (int)floorf(f);
        f -= (float)i;
        if (clamp && i < 0) { i = 0; f = 0; }
        if (clamp && i >= n_in - 1) { i = n_in - 1; f = 0; }
        i0[o] = i;
        wt[2 * o] = (short)lrintf((1.f - f) * COEF_SCALE);
        wt[2 * o + 1] = (short)lrintf(f * COEF_SCALE);
    }
}

typedef struct { int *x0, *x1; short *xw; int ow; } RowTaps;   // x0,x1: byte offsets in a row

// One source row resampled along x: out[3*ox+c] in 1/2048 units.
static void hresize(const uint8_t *restrict src, const RowTaps *t, int *restrict out) {
    for (int ox = 0; ox < t->ow; ox++) {
        const uint8_t *p0 = src + t->x0[ox], *p1 = src + t->x1[ox];
        int a0 = t->xw[2 * ox], a1 = t->xw[2 * ox + 1];
        for (int c = 0; c < 3; c++) out[3 * ox + c] = p0[c] * a0 + p1[c] * a1;
    }
}

// Two resampled rows blended along y with weights (b0, b1) in 1/2048, rounded as OpenCV's SIMD
// path (VResizeLinearVec_32s8u) does: 16-bit products, their high halves, then (sum + 2) >> 2.
// No clamp is needed: r < 256 * 2048 and b0 + b1 = 2048 keep the result within 0..255.
static void vresize(const int *restrict r0, const int *restrict r1, int b0, int b1, int n,
                    uint8_t *restrict dst) {
    for (int i = 0; i < n; i++)
        dst[i] = (uint8_t)(((((r0[i] >> 4) * b0) >> 16) + (((r1[i] >> 4) * b1) >> 16) + 2) >> 2);
}

// INTER_LINEAR with 11-bit fixed-point weights. Each source row is resampled along x once and
// kept while consecutive output rows need it.
static void resize_linear(const Image *src, Image *dst) {
    int w = src->w, h = src->h, ow = dst->w, oh = dst->h;
    int *xi = xmalloc(sizeof(int) * ow * 2), *yi = xmalloc(sizeof(int) * oh);
    short *xw = xmalloc(sizeof(short) * ow * 2), *yw = xmalloc(sizeof(short) * oh * 2);
    int *buf = xmalloc(sizeof(int) * ow * 3 * 2);
    RowTaps t = { xi, xi + ow, xw, ow };
    linear_taps(w, ow, 1, xi, xw);
    linear_taps(h, oh, 0, yi, yw);
    for (int ox = 0; ox < ow; ox++) {
        t.x1[ox] = 3 * (xi[ox] + 1 < w ? xi[ox] + 1 : xi[ox]);
        t.x0[ox] = 3 * xi[ox];
    }
    int *row[2] = { buf, buf + ow * 3 }, have[2] = { -1, -1 };
    for (int oy = 0; oy < oh; oy++) {
        int y0 = clampi(yi[oy], 0, h - 1), y1 = clampi(yi[oy] + 1, 0, h - 1);
        if (y0 != have[0] && y0 == have[1]) {
            int *r = row[0]; row[0] = row[1]; row[1] = r;
            have[0] = have[1]; have[1] = -1;
        }
        if (y0 != have[0]) { hresize(src->px + (size_t)y0 * w * 3, &t, row[0]); have[0] = y0; }
        if (y1 != have[1]) { hresize(src->px + (size_t)y1 * w * 3, &t, row[1]); have[1] = y1; }
        vresize(row[0], row[1], yw[2 * oy], yw[2 * oy + 1], ow * 3, dst->px + (size_t)oy * ow * 3);
    }
    free(xi); free(yi); free(xw); free(yw); free(buf);
}

// INTER_AREA at an integer factor (kx,ky): the mean of each block. OpenCV rounds the 2x2 mean as
// (sum + 2) >> 2 (its vectorised fast path) and other sizes as rint(sum * (1.f / area)).
// Columns are summed over the ky rows first, then kx neighbours of the column sums.
static void resize_area_int(const Image *src, Image *dst, int kx, int ky) {
    int n = src->w * 3;
    float inv = 1.f / (float)(kx * ky);
    int *col = xmalloc(sizeof(int) * n);
    for (int oy = 0; oy < dst->h; oy++) {
        memset(col, 0, sizeof(int) * n);
        for (int dy = 0; dy < ky; dy++) {
            const uint8_t *s = src->px + (size_t)(oy * ky + dy) * n;
            for (int i = 0; i < n; i++) col[i] += s[i];
        }
        uint8_t *d = dst->px + (size_t)oy * dst->w * 3;
        for (int ox = 0; ox < dst->w; ox++)
            for (int c = 0; c < 3; c++) {
                const int *p = col + ox * kx * 3 + c;
                int sum = 0;
                for (int dx = 0; dx < kx; dx++) sum += p[3 * dx];
                d[3 * ox + c] = (uint8_t)(kx == 2 && ky == 2 ? (sum + 2) >> 2 : lrintf((float)sum * inv));
            }
    }
    free(col);
}

typedef struct { int o, i; float w; } AreaTap;   // output o takes weight w of source i

// Box-filter taps along one axis: output o covers source [o*step, (o+1)*step); each source pixel
// weighs its overlap / step (OpenCV computeResizeAreaTab, with its 1e-3 tolerance for slivers).
// At most n_in + 2*n_out taps, sorted by o.
static int area_taps(int n_in, int n_out, AreaTap *t) {
    double step = src_step(n_in, n_out);
    int k = 0;
    for (int o = 0; o < n_out; o++) {
        double f1 = o * step, f2 = f1 + step, cell = fmin(step, n_in - f1);
        int i2 = (int)floor(f2) < n_in - 1 ? (int)floor(f2) : n_in - 1;
        int i1 = (int)ceil(f1) < i2 ? (int)ceil(f1) : i2;
        if (i1 - f1 > 1e-3) t[k++] = (AreaTap){ o, i1 - 1, (float)((i1 - f1) / cell) };
        for (int i = i1; i < i2; i++) t[k++] = (AreaTap){ o, i, (float)(1.0 / cell) };
        if (f2 - i2 > 1e-3) t[k++] = (AreaTap){ o, i2, (float)(fmin(fmin(f2 - i2, 1.0), cell) / cell) };
    }
    return k;
}

// INTER_AREA at a non-integer factor: weighted sums in float, rounded to nearest.
static void resize_area_frac(const Image *src, Image *dst) {
    int w = src->w, h = src->h, ow = dst->w, oh = dst->h, n = ow * 3;
    AreaTap *xt = xmalloc(sizeof(AreaTap) * (w + 2 * ow)), *yt = xmalloc(sizeof(AreaTap) * (h + 2 * oh));
    int nx = area_taps(w, ow, xt), ny = area_taps(h, oh, yt);
    float *row = xmalloc(sizeof(float) * n), *acc = xcalloc((size_t)n, sizeof(float));
    int have = -1;
    for (int k = 0; k < ny; k++) {
        if (yt[k].i != have) {                    // resample source row yt[k].i along x
            const uint8_t *s = src->px + (size_t)yt[k].i * w * 3;
            memset(row, 0, sizeof(float) * n);
            for (int j = 0; j < nx; j++)
                for (int c = 0; c < 3; c++) row[3 * xt[j].o + c] += xt[j].w * s[3 * xt[j].i + c];
            have = yt[k].i;
        }
        for (int i = 0; i < n; i++) acc[i] += yt[k].w * row[i];
        if (k + 1 == ny || yt[k + 1].o != yt[k].o) {   // output row yt[k].o is complete
            uint8_t *d = dst->px + (size_t)yt[k].o * n;
            for (int i = 0; i < n; i++) d[i] = (uint8_t)clampi((int)lrintf(acc[i]), 0, 255);
            memset(acc, 0, sizeof(float) * n);
        }
    }
    free(xt); free(yt); free(row); free(acc);
}

// OpenCV takes the integer path when both steps are integers to within DBL_EPSILON.
static void resize_area(const Image *src, Image *dst) {
    double sx = src_step(src->w, dst->w), sy = src_step(src->h, dst->h);
    int kx = (int)lround(sx), ky = (int)lround(sy);
    if (fabs(sx - kx) < DBL_EPSILON && fabs(sy - ky) < DBL_EPSILON) resize_area_int(src, dst, kx, ky);
    else resize_area_frac(src, dst);
}

Image image_resize(const Image *src, int w, int h, int area) {
    if (w <= 0 || h <= 0 || src->w <= 0 || src->h <= 0)
        die("image_resize: bad sizes %dx%d -> %dx%d", src->w, src->h, w, h);
    Image dst = { w, h, xmalloc((size_t)w * h * 3) };   // every byte is written below: no fill
    if (w == src->w && h == src->h) memcpy(dst.px, src->px, (size_t)w * h * 3);
    else if (area && w <= src->w && h <= src->h) resize_area(src, &dst);
    else if (2 * w == src->w && 2 * h == src->h)   // exact halving: bilinear weights are (1/2, 1/2),
        resize_area_int(src, &dst, 2, 2);           // so the 2x2 mean is the same bytes (OpenCV does this too)
    else resize_linear(src, &dst);
    return dst;
}
