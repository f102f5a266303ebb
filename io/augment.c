// augment.c: YOLOv9's training-sample augmentation (reference §3.3-§3.8) on RGB images in memory.
// Box arithmetic mirrors the reference's numpy dtypes: float32 labels, float64 warp of the corners.
// Legend: s img_size; W,H output size; (x,y) output pixel, (sx,sy) source pixel; 1/32 px = one "tab".
#include "io/augment.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PAD_VALUE 114        // the reference's grey for letterbox borders, the mosaic canvas and warps

static int imin(int a, int b) { return a < b ? a : b; }
static int imax(int a, int b) { return a > b ? a : b; }
static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

// Python's round() on floats: half to even (rint in the default rounding mode).
static int round_even(double v) { return (int)rint(v); }

static Image image_copy(const Image *src) {
    Image im = { src->w, src->h, xmalloc((size_t)src->w * src->h * 3) };
    memcpy(im.px, src->px, (size_t)src->w * src->h * 3);
    return im;
}

// ---- load_image and letterbox ---------------------------------------------------------------------

void augment_load_size(int w, int h, int img_size, int *w2, int *h2) {
    double r = (double)img_size / imax(w, h);
    *w2 = w, *h2 = h;
    if (r == 1) return;
    *w2 = imax(1, (int)(w * r)), *h2 = imax(1, (int)(h * r));   // int() truncates, as the reference
}

Image augment_load_resize(const Image *src, int img_size, int augment) {
    double r = (double)img_size / imax(src->w, src->h);
    if (r == 1) return image_copy(src);
    int w, h;
    augment_load_size(src->w, src->h, img_size, &w, &h);
    return image_resize(src, w, h, !augment && r < 1);
}

// letterbox's arithmetic alone: r, the body size (*uw, *uh) and the paddings.
static LetterboxInfo letterbox_geometry(int w, int h, int new_w, int new_h, int scaleup, int stride,
                                        int *uw, int *uh) {
    double r = fmin((double)new_h / h, (double)new_w / w);
    if (!scaleup) r = fmin(r, 1.0);
    *uw = round_even(w * r), *uh = round_even(h * r);
    if (*uw < 1) *uw = 1;                  // a 3x10000 image scaled to 640: a side of 1 px, not 0
    if (*uh < 1) *uh = 1;
    int dw = new_w - *uw, dh = new_h - *uh;
    if (stride > 0) { dw = (dw % stride + stride) % stride; dh = (dh % stride + stride) % stride; }
    double hw = dw / 2.0, hh = dh / 2.0;
    return (LetterboxInfo){ .r = r, .padw = hw, .padh = hh,
                            .top = round_even(hh - 0.1), .bottom = round_even(hh + 0.1),
                            .left = round_even(hw - 0.1), .right = round_even(hw + 0.1) };
}

Image augment_letterbox(const Image *src, int new_w, int new_h, int scaleup, int stride, LetterboxInfo *info) {
    int uw, uh;
    LetterboxInfo lb = letterbox_geometry(src->w, src->h, new_w, new_h, scaleup, stride, &uw, &uh);
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

// out->px NULL: allocate it w×h; else it must be w×h already (the caller's memory).
static void out_prepare(Image *out, int w, int h) {
    if (!out->px) *out = (Image){ w, h, xmalloc((size_t)w * h * 3) };   // the warp writes every byte
    else if (out->w != w || out->h != h)
        die("augment: a %dx%d sample does not fit its %dx%d output (is imgsz odd?)", w, h, out->w, out->h);
}

// random_perspective of a plane into out. An identity M needs no special case: its warp puts every
// weight on one tap, an exact copy.
static void random_perspective_plane(const Plane *pl, BoxXyxy *boxes, int *n, const AugParams *p, int border,
                                     Rng *rng, Image *out) {
    int W = pl->w + 2 * border, H = pl->h + 2 * border;
    double M[9], scale;
    perspective_matrix(p, pl->w, pl->h, W, H, rng, M, &scale);
    out_prepare(out, W, H);
    augment_warp_plane(pl, M, out);
    *n = transform_boxes(boxes, *n, M, scale, W, H);
}

Image augment_random_perspective(const Image *src, BoxXyxy *boxes, int *n, const AugParams *p, int border,
                                 Rng *rng) {
    Image out = { 0 };
    Plane pl = augment_plane_of(src);
    random_perspective_plane(&pl, boxes, n, p, border, rng, &out);
    return out;
}

// ---- mosaic ------------------------------------------------------------------------------------------

void augment_mosaic_centre(Rng *rng, int s, int *xc, int *yc) {
    *yc = (int)rng_uniform(rng, s / 2.0, 1.5 * s);
    *xc = (int)rng_uniform(rng, s / 2.0, 1.5 * s);
}

// Where quadrant q of a w×h tile goes on the s2×s2 canvas (load_mosaic's x1a, y1a, x2a, y2a): the canvas
// rectangle [x1a, x1a+cw)×[y1a, y1a+ch) shows the tile from (x1b, y1b) on.
typedef struct { int x1a, y1a, x1b, y1b, cw, ch; } MosaicRect;

static MosaicRect mosaic_rect(int w, int h, int s2, int q, int xc, int yc) {
    int x1a, y1a, x2a, y2a, x1b, y1b;
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
    return (MosaicRect){ x1a, y1a, x1b, y1b, imax(cw, 0), imax(ch, 0) };
}

// The tile's boxes shifted with it and clipped to the canvas (empty ones stay for box_candidates).
static void mosaic_boxes(const Box *b, int nb, int w, int h, MosaicRect r, int s2, BoxXyxy *out) {
    augment_boxes_to_pixels(b, nb, w, h, r.x1a - r.x1b, r.y1a - r.y1b, out);
    for (int i = 0; i < nb; i++) {
        out[i].x1 = clampf(out[i].x1, 0, s2); out[i].x2 = clampf(out[i].x2, 0, s2);
        out[i].y1 = clampf(out[i].y1, 0, s2); out[i].y2 = clampf(out[i].y2, 0, s2);
    }
}

void augment_mosaic_place(Image *canvas, const Image *tile, const Box *b, int nb, int q, int xc, int yc,
                          BoxXyxy *out) {
    MosaicRect r = mosaic_rect(tile->w, tile->h, canvas->w, q, xc, yc);
    for (int y = 0; y < r.ch; y++)
        memcpy(canvas->px + ((size_t)(r.y1a + y) * canvas->w + r.x1a) * 3,
               tile->px + ((size_t)(r.y1b + y) * tile->w + r.x1b) * 3, (size_t)r.cw * 3);
    mosaic_boxes(b, nb, tile->w, tile->h, r, canvas->w, out);
}

static void source_put(const SampleSource *src, int index, Image *img, Box *boxes) {
    if (src->put) { src->put(src->ctx, index, img, boxes); return; }
    image_free(img);
    free(boxes);
}

// load_mosaic's draws: the centre, 3 partners, their shuffle, then random_perspective's matrix for the
// 2s×2s canvas warped with border −s/2.
static void draw_mosaic(const AugParams *p, int n_src, int index, Rng *rng, AugWarp *w) {
    int s = p->img_size;
    *w = (AugWarp){ .idx = { index } };
    augment_mosaic_centre(rng, s, &w->xc, &w->yc);
    for (int i = 1; i < 4; i++) w->idx[i] = rng_int(rng, n_src);
    for (int i = 3; i > 0; i--) {                  // random.shuffle: Fisher-Yates from the end
        int j = rng_int(rng, i + 1), t = w->idx[i];
        w->idx[i] = w->idx[j]; w->idx[j] = t;
    }
    int W = 2 * s + 2 * (-s / 2);
    perspective_matrix(p, 2 * s, 2 * s, W, W, rng, w->M, &w->scale);
}

static int mosaic_side(int s) { return 2 * s + 2 * (-s / 2); }

int augment_sources_get(const SampleSource *src, const int *idx, int n, Image *img, Box **b, int *nb, Err *err) {
    for (int k = 0; k < n; k++)
        if (src->get(src->ctx, idx[k], &img[k], &b[k], &nb[k], err)) {
            while (k-- > 0) source_put(src, idx[k], &img[k], b[k]);
            return -1;
        }
    return 0;
}

static void sources_put(const SampleSource *src, const int *idx, int n, Image *img, Box **b) {
    for (int k = 0; k < n; k++) source_put(src, idx[k], &img[k], b[k]);
}

// The mosaic of warp w as a Plane over its 4 tiles (the canvas is never painted).
static Plane mosaic_plane(int s, const AugWarp *w, const Image *tiles) {
    Plane pl = { .w = 2 * s, .h = 2 * s };
    for (int q = 0; q < 4; q++) {
        const Image *t = &tiles[q];
        MosaicRect r = mosaic_rect(t->w, t->h, 2 * s, q, w->xc, w->yc);
        augment_plane_add(&pl, t->px + ((size_t)r.y1b * t->w + r.x1b) * 3, (size_t)t->w * 3,
                          r.x1a, r.y1a, r.x1a + r.cw, r.y1a + r.ch);
    }
    return pl;
}

// The mosaic's boxes in output pixels: shifted with their tiles, warped, filtered (into all, *n kept).
static void mosaic_boxes_warped(int s, const AugWarp *w, const Image *tiles, Box *const *tb, const int *nb,
                                BoxXyxy *all, int *n) {
    int total = 0, W = mosaic_side(s);
    for (int q = 0; q < 4; q++) {
        MosaicRect r = mosaic_rect(tiles[q].w, tiles[q].h, 2 * s, q, w->xc, w->yc);
        mosaic_boxes(tb[q], nb[q], tiles[q].w, tiles[q].h, r, 2 * s, all + total);
        total += nb[q];
    }
    *n = transform_boxes(all, total, w->M, w->scale, W, W);
}

int augment_load_mosaic(const AugParams *p, const SampleSource *src, int index, Rng *rng,
                        Image *out, BoxXyxy **boxes, int *n, Err *err) {
    AugWarp w;
    Image tile[4]; Box *tb[4]; int nb[4];
    draw_mosaic(p, src->n, index, rng, &w);
    if (augment_sources_get(src, w.idx, 4, tile, tb, nb, err)) return -1;
    int W = mosaic_side(p->img_size);
    *out = image_new(W, W, 0);
    Plane pl = mosaic_plane(p->img_size, &w, tile);
    augment_warp_plane(&pl, w.M, out);
    *boxes = xmalloc(sizeof **boxes * (size_t)imax(nb[0] + nb[1] + nb[2] + nb[3], 1));
    mosaic_boxes_warped(p->img_size, &w, tile, tb, nb, *boxes, n);
    sources_put(src, w.idx, 4, tile, tb);
    return 0;
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

// The blend depends only on the two bytes: a 256×256 table costs 65,536 evaluations, not 3 per pixel.
double augment_mixup(Image *im, const Image *im2, Rng *rng) {
    double r = augment_beta(rng, 32, 32);
    augment_mixup_apply(im, im2, r);
    return r;
}

void augment_mixup_apply(Image *im, const Image *im2, double r) {
    double q = 1 - r;
    uint8_t *blend = xmalloc(256 * 256);         // (a, b) at a·256 + b
    for (int a = 0; a < 256; a++)
        for (int b = 0; b < 256; b++) blend[a << 8 | b] = (uint8_t)(a * r + b * q);
    for (size_t i = 0, n = (size_t)im->w * im->h * 3; i < n; i++) im->px[i] = blend[im->px[i] << 8 | im2->px[i]];
    free(blend);
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

// ---- draws: the recipe -----------------------------------------------------------------------------

void augment_draw(const AugParams *p, int n_src, int index, int w, int h, Rng *rng, AugRecipe *r) {
    *r = (AugRecipe){ .s = p->img_size, .w = w, .h = h };
    // no draw once mosaic is closed, or under rect (self.mosaic = augment and not rect)
    r->mosaic = !p->rect && !p->close_mosaic && rng_uniform(rng, 0, 1) < p->mosaic;
    if (r->mosaic) {
        draw_mosaic(p, n_src, index, rng, &r->warp[0]);
        r->mixup = rng_uniform(rng, 0, 1) < p->mixup;
        if (r->mixup) {
            int partner = rng_int(rng, n_src);
            draw_mosaic(p, n_src, partner, rng, &r->warp[1]);
            r->mix_r = augment_beta(rng, 32, 32);
        }
    } else {                                        // letterbox to w×h (a plane of w×h), border 0
        r->warp[0].idx[0] = index;
        perspective_matrix(p, w, h, w, h, rng, r->warp[0].M, &r->warp[0].scale);
    }
    r->hsv = p->hsv_h || p->hsv_s || p->hsv_v;      // augment_hsv's draws
    if (r->hsv) {
        r->hsv_r[0] = rng_uniform(rng, -1, 1) * p->hsv_h + 1;
        r->hsv_r[1] = rng_uniform(rng, -1, 1) * p->hsv_s + 1;
        r->hsv_r[2] = rng_uniform(rng, -1, 1) * p->hsv_v + 1;
    }
    r->flipud = rng_uniform(rng, 0, 1) < p->flipud;
    r->fliplr = rng_uniform(rng, 0, 1) < p->fliplr;
}

int augment_recipe_sources(const AugRecipe *r, int idx[AUG_MAX_SOURCES]) {
    if (!r->mosaic) { idx[0] = r->warp[0].idx[0]; return 1; }
    memcpy(idx, r->warp[0].idx, sizeof r->warp[0].idx);
    if (r->mixup) memcpy(idx + 4, r->warp[1].idx, sizeof r->warp[1].idx);
    return r->mixup ? 8 : 4;
}

// ---- apply: pixels --------------------------------------------------------------------------------

// The letterbox of img to the recipe's w×h (scaleup on, as letterbox(img, shape, auto=False,
// scaleup=self.augment)): *lb and the body size; the plane is w×h.
static LetterboxInfo recipe_letterbox(const AugRecipe *r, const Image *img, int *uw, int *uh) {
    LetterboxInfo lb = letterbox_geometry(img->w, img->h, r->w, r->h, 1, 0, uw, uh);
    if (*uw + lb.left + lb.right != r->w || *uh + lb.top + lb.bottom != r->h)
        die("augment: a %dx%d image letterboxes to %dx%d, not %dx%d", img->w, img->h, *uw + lb.left + lb.right,
            *uh + lb.top + lb.bottom, r->w, r->h);
    return lb;
}

void augment_recipe_size(const AugRecipe *r, int *w, int *h) {
    *w = r->mosaic ? mosaic_side(r->s) : r->w;
    *h = r->mosaic ? mosaic_side(r->s) : r->h;
}

void augment_recipe_body(const AugRecipe *r, const Image *tile, int *uw, int *uh) {
    recipe_letterbox(r, tile, uw, uh);
}

Plane augment_recipe_plane(const AugRecipe *r, int k, const Image *tiles) {
    if (r->mosaic) return mosaic_plane(r->s, &r->warp[k], tiles + 4 * k);
    int uw = tiles[0].w, uh = tiles[0].h;
    // the body's offsets are those of the source it was resized from: the same r->w × r->h letterbox
    int dw = r->w - uw, dh = r->h - uh, left = round_even(dw / 2.0 - 0.1), top = round_even(dh / 2.0 - 0.1);
    Plane pl = { .w = r->w, .h = r->h };
    augment_plane_add(&pl, tiles[0].px, (size_t)uw * 3, left, top, left + uw, top + uh);
    return pl;
}

// Warp k of the recipe (its mosaic, or the letterbox of tiles[0]) into out. The letterbox is not
// painted: the warp reads its body through a Plane.
static void warp_pixels(const AugRecipe *r, int k, const Image *tiles, Image *out) {
    if (r->mosaic) {
        Plane pl = augment_recipe_plane(r, k, tiles);
        augment_warp_plane(&pl, r->warp[k].M, out);
        return;
    }
    int uw, uh;
    augment_recipe_body(r, &tiles[0], &uw, &uh);
    Image body = (uw == tiles[0].w && uh == tiles[0].h) ? tiles[0] : image_resize(&tiles[0], uw, uh, 0);
    Plane pl = augment_recipe_plane(r, 0, &body);
    augment_warp_plane(&pl, r->warp[0].M, out);
    if (body.px != tiles[0].px) image_free(&body);
}

void augment_apply_pixels(const AugRecipe *r, const Image *tiles, AugScratch *scratch, Image *out) {
    int W, H;
    augment_recipe_size(r, &W, &H);
    out_prepare(out, W, H);
    warp_pixels(r, 0, tiles, out);
    if (r->mixup) {
        Image *im2 = &scratch->mix;
        if (im2->w != W || im2->h != H) image_free(im2), *im2 = image_new(W, H, 0);
        warp_pixels(r, 1, tiles, im2);
        augment_mixup_apply(out, im2, r->mix_r);
    }
    if (r->hsv) augment_hsv_apply(out, r->hsv_r);
    if (r->flipud) augment_flip_ud(out, NULL, 0);
    if (r->fliplr) augment_flip_lr(out, NULL, 0);
}

// ---- apply: boxes ---------------------------------------------------------------------------------

void augment_apply_boxes(const AugRecipe *r, const Image *tiles, Box *const *tb, const int *nb,
                         Box **boxes, int *n) {
    int total = 0, kept, W = r->mosaic ? mosaic_side(r->s) : r->w, H = r->mosaic ? W : r->h;
    for (int k = 0, m = r->mosaic ? (r->mixup ? 8 : 4) : 1; k < m; k++) total += nb[k];
    BoxXyxy *px = xmalloc(sizeof *px * (size_t)imax(total, 1));
    if (r->mosaic) {
        mosaic_boxes_warped(r->s, &r->warp[0], tiles, tb, nb, px, &kept);
        if (r->mixup) {                             // the partner's boxes follow the sample's
            int kept2;
            mosaic_boxes_warped(r->s, &r->warp[1], tiles + 4, tb + 4, nb + 4, px + kept, &kept2);
            kept += kept2;
        }
    } else {
        int uw, uh;
        LetterboxInfo lb = recipe_letterbox(r, &tiles[0], &uw, &uh);
        augment_boxes_to_pixels(tb[0], nb[0], lb.r * tiles[0].w, lb.r * tiles[0].h, lb.padw, lb.padh, px);
        kept = transform_boxes(px, nb[0], r->warp[0].M, r->warp[0].scale, W, H);
    }
    *boxes = boxes_normalise(px, kept, W, H);
    *n = kept;
    free(px);
    for (int i = 0; i < kept && r->flipud; i++) (*boxes)[i].cy = 1 - (*boxes)[i].cy;
    for (int i = 0; i < kept && r->fliplr; i++) (*boxes)[i].cx = 1 - (*boxes)[i].cx;
}

int augment_apply(const AugRecipe *r, const SampleSource *src, AugScratch *scratch, Image *out,
                  Box **boxes, int *n, Err *err) {
    int idx[AUG_MAX_SOURCES], nb[AUG_MAX_SOURCES], m = augment_recipe_sources(r, idx);
    Image tile[AUG_MAX_SOURCES]; Box *tb[AUG_MAX_SOURCES];
    if (augment_sources_get(src, idx, m, tile, tb, nb, err)) return -1;
    augment_apply_pixels(r, tile, scratch, out);
    augment_apply_boxes(r, tile, tb, nb, boxes, n);
    sources_put(src, idx, m, tile, tb);
    return 0;
}

// One deferred source as the loader would have loaded it: decoded, then (when its long side is not s)
// augment_load_resize for training. 0, or -1 with err when it does not decode to its header's size.
static int decode_source(const AugJpeg *j, int s, int tw, int th, Image *out, Err *err) {
    Image raw;
    if (image_decode_mem(j->data, j->len, j->name ? j->name : "(deferred JPEG)", &raw, err)) return -1;
    if (raw.w != j->w || raw.h != j->h) {
        err_set(err, "%s: decoded %dx%d, its header said %dx%d", j->name, raw.w, raw.h, j->w, j->h);
        image_free(&raw);
        return -1;
    }
    if (imax(raw.w, raw.h) == s) *out = raw;       // r = 1: the loader keeps the decoded image
    else *out = augment_load_resize(&raw, s, 1), image_free(&raw);
    if (out->w != tw || out->h != th)
        die("augment_sample_decode: %s came out %dx%d, its tile is %dx%d", j->name, out->w, out->h, tw, th);
    return 0;
}

int augment_sample_decode(const AugSample *s, Image *tiles_out, Err *err) {
    int rc = 0;
    for (int k = 0; k < s->n_tiles; k++) {
        const Image *t = &s->tiles[k];
        tiles_out[k] = *t;
        if (!s->jpeg || !s->jpeg[k].data) continue;
        Err e;
        if (decode_source(&s->jpeg[k], s->r.s, t->w, t->h, &tiles_out[k], &e) == 0) continue;
        tiles_out[k] = image_new(t->w, t->h, 114);
        if (rc == 0 && err) *err = e;
        rc = -1;
    }
    return rc;
}

void augment_sample_decoded_free(const AugSample *s, Image *tiles) {
    for (int k = 0; s->jpeg && k < s->n_tiles; k++)
        if (s->jpeg[k].data) image_free(&tiles[k]);
}

void augment_sample_pixels(const AugSample *s, AugScratch *scratch, Image *out) {
    int w, h;
    augment_recipe_size(&s->r, &w, &h);
    if (!s->grey && (out->w != w || out->h != h))
        die("augment_sample_pixels: the recipe makes %dx%d, the output is %dx%d", w, h, out->w, out->h);
    if (s->grey) {
        memset(out->px, 114, (size_t)out->w * out->h * 3);
    } else if (!s->jpeg) {
        augment_apply_pixels(&s->r, s->tiles, scratch, out);
    } else {                                    // some sources are still JPEG bytes: decode them here
        Image tiles[AUG_MAX_SOURCES];
        Err e;
        if (augment_sample_decode(s, tiles, &e))
            fprintf(stderr, "warning: %s; a grey tile stands in for it\n", e.msg);
        augment_apply_pixels(&s->r, tiles, scratch, out);
        augment_sample_decoded_free(s, tiles);
    }
}

// The whole sample into out (see out_prepare); on error out may hold a buffer the caller frees.
static int train_sample(const AugParams *p, const SampleSource *src, int index, Rng *rng, AugScratch *scratch,
                        Image *out, Box **boxes, int *n, Err *err) {
    AugRecipe r;
    int w = p->rect && out->px ? out->w : p->img_size, h = p->rect && out->px ? out->h : p->img_size;
    augment_draw(p, src->n, index, w, h, rng, &r);
    return augment_apply(&r, src, scratch, out, boxes, n, err);
}

int augment_train_sample(const AugParams *p, const SampleSource *src, int index, Rng *rng,
                         Image *out, Box **boxes, int *n, Err *err) {
    AugScratch scratch = { 0 };
    *out = (Image){ 0 };
    int rc = train_sample(p, src, index, rng, &scratch, out, boxes, n, err);
    if (rc) image_free(out);
    augment_scratch_free(&scratch);
    return rc;
}

int augment_train_sample_into(const AugParams *p, const SampleSource *src, int index, Rng *rng,
                              AugScratch *scratch, Image *out, Box **boxes, int *n, Err *err) {
    int fits = p->rect ? out->w >= 32 && out->h >= 32 && out->w <= p->img_size && out->h <= p->img_size
                       : out->w == p->img_size && out->h == p->img_size;
    if (!out->px || !fits)
        die("augment_train_sample_into: output %dx%d, want %dx%d%s", out->w, out->h, p->img_size, p->img_size,
            p->rect ? " or a rect batch shape within it" : "");
    return train_sample(p, src, index, rng, scratch, out, boxes, n, err);
}

void augment_scratch_free(AugScratch *scratch) { image_free(&scratch->mix); }

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
