// augment.h: one training or validation sample as YOLOv9's LoadImagesAndLabels.__getitem__ makes it
// (reference §3.3-§3.8): long-side load, letterbox, 4-image mosaic, random perspective, mixup, HSV, flips.
// Legend: s img_size (640); W,H output width and height; boxes in pixels are xyxy, normalised ones cxcywh.
#pragma once
#include "core/base/util.h"
#include "io/dataset.h"
#include "io/image.h"

typedef struct { int cls; float x1, y1, x2, y2; } BoxXyxy;   // pixels of one image (float32 as the reference)

// The hyper-parameters augmentation reads (copied from Hyp; names as in hyp.scratch-high.yaml).
typedef struct {
    int    img_size;                  // s: long side of loaded images, side of a training sample
    double hsv_h, hsv_s, hsv_v;       // HSV gains: 0.015 0.7 0.4
    double degrees, translate, scale, shear, perspective;   // 0 0.1 0.9 0 0
    double flipud, fliplr;            // probabilities: 0 0.5
    double mosaic, mixup;             // probabilities: 1 0.15 (mixup only happens inside mosaic)
    int    close_mosaic;              // 1: mosaic, and so mixup, off (the last close_mosaic epochs)
    int    rect;                      // 1: rect training (§3.9): no mosaic (so no mixup, and no draw for
                                      // it), letterbox to the output's shape (its batch's) instead of s×s
} AugParams;

// Where samples come from: a RAM cache or a decoder. get() gives the image resized so its long side is
// img_size (augment_load_resize: augment=1 for training, 0 for validation) and its normalised boxes. The
// result is only read, never written. put() hands both back when done; if put is NULL they are owned by
// the caller and freed with image_free() and free(). get() may be called from several threads at once.
typedef struct {
    int    n;                         // samples, indices 0..n-1
    void  *ctx;
    int  (*get)(void *ctx, int index, Image *img, Box **boxes, int *nbox, Err *err);
    void (*put)(void *ctx, int index, Image *img, Box *boxes);
} SampleSource;

// ---- the two entry points -------------------------------------------------------------------------
// Training sample (§3.8, YOLOv9 order): with probability mosaic (and close_mosaic == 0) a 4-image mosaic
// (partners drawn uniformly from src with rng) then maybe mixup with a second mosaic; otherwise letterbox to
// s×s and random_perspective with border 0. Then boxes clipped to [0, W-1e-3]×[0, H-1e-3] and
// normalised, HSV, flip up-down, flip left-right. Copy-paste is a no-op: it needs polygon segments and our
// labels are boxes. On success *out (s×s) and *boxes (*n entries, NULL when 0) belong to the caller
// (image_free, free). Returns 0, or -1 with err from src->get.
int augment_train_sample(const AugParams *p, const SampleSource *src, int index, Rng *rng,
                         Image *out, Box **boxes, int *n, Err *err);
// The same bytes and boxes written into out->px (s×s, the caller's memory, e.g. a batch slot), with the
// big temporaries in scratch: one per thread, reused across samples, so a sample allocates only its boxes
// (large malloc/free pairs cost page faults that serialise threads). out->w and out->h must be s, or
// with p->rect the batch shape (each side at most s).
typedef struct { Image mix; } AugScratch;      // the mixup partner; grown on demand
int augment_train_sample_into(const AugParams *p, const SampleSource *src, int index, Rng *rng,
                              AugScratch *scratch, Image *out, Box **boxes, int *n, Err *err);
void augment_scratch_free(AugScratch *scratch);

// ---- a training sample as draws and their application ----------------------------------------------
// augment_train_sample is augment_draw (every random draw, in the reference's order, into a plain recipe)
// then augment_apply (no randomness: the recipe and the source images give the bytes and boxes). The
// recipe is what a device needs to make the sample from the decoded sources (issue 37).
typedef struct {
    int    idx[4];                    // sources: a mosaic's 4 tiles (quadrants 0..3), a letterbox's idx[0]
    int    xc, yc;                    // mosaic centre on the 2s×2s canvas
    double M[9], scale;               // random_perspective's forward matrix (row-major) and drawn scale
} AugWarp;

typedef struct {
    int     s, w, h;                  // img_size; output width and height
    int     mosaic, mixup;            // mixup (only inside mosaic): blend with a second mosaic, warp[1]
    AugWarp warp[2];
    double  mix_r;                    // mixup's ratio: out = trunc(a·r + b·(1 − r))
    int     hsv;                      // 1: augment_hsv_apply with hsv_r
    double  hsv_r[3];
    int     flipud, fliplr;
} AugRecipe;

// The draws of a training sample `index` of a source of n_src samples, for a w×h output (s×s, or with
// p->rect the batch shape): exactly those augment_train_sample makes, in its order.
void augment_draw(const AugParams *p, int n_src, int index, int w, int h, Rng *rng, AugRecipe *r);
// The sources a recipe reads, in order (a mosaic's 4 tiles, then the mixup partner's 4): returns the count.
#define AUG_MAX_SOURCES 8
int  augment_recipe_sources(const AugRecipe *r, int idx[AUG_MAX_SOURCES]);
// src->get of the n sources idx into img, b, nb; on failure those got are handed back and it returns -1 with err.
int  augment_sources_get(const SampleSource *src, const int *idx, int n, Image *img, Box **b, int *nb, Err *err);
// The pixels alone: tiles[k] is the image src->get gives for source k of augment_recipe_sources. out is
// r->w × r->h, the caller's memory; scratch holds the mixup partner.
void augment_apply_pixels(const AugRecipe *r, const Image *tiles, AugScratch *scratch, Image *out);
// The boxes alone (normalised to the output, flipped as the pixels): from each tile's size and boxes
// (tb[k], nb[k] of source k). *boxes (*n entries, NULL when 0) belongs to the caller (free).
void augment_apply_boxes(const AugRecipe *r, const Image *tiles, Box *const *tb, const int *nb,
                         Box **boxes, int *n);
// Both, getting the sources from src (and putting them back). out as augment_train_sample_into, or with
// out->px NULL allocated (image_free). Returns 0, or -1 with err from src->get.
int  augment_apply(const AugRecipe *r, const SampleSource *src, AugScratch *scratch, Image *out,
                   Box **boxes, int *n, Err *err);

// A source a device decodes (the loader's defer_decode, issue 37): a JPEG of 1 or 3 components whose EXIF
// orientation changes nothing, so its pixels are the file's stored w×h. data[0, len) is the whole file, host
// memory in the batch's jpeg arena (Batch.jpeg_arena), valid while the batch is held; name is the file's
// path (the Dataset's), for messages. data NULL: a source decoded on the host (its tile has pixels).
typedef struct { const uint8_t *data; size_t len; int w, h; const char *name; } AugJpeg;

// A training sample whose pixels are made later, by a device (augment=gpu, issue 37): its recipe and its
// sources (tiles[k] is source k of augment_recipe_sources, n_tiles of them; host memory that lives as long
// as the batch holding it). grey: no source could be loaded, the sample is grey 114 (the loader's stand-in)
// and has no tiles. arena: the one host buffer every decoded tile lies in, arena_bytes long (the loader's
// Batch.tile_arena), so a device may copy the span a run of samples uses at once; NULL: tiles anywhere.
// jpeg: NULL when every source is decoded; else (n_tiles) entries, and a tile whose jpeg[k].data is set has
// px NULL and the size augment_load_size gives its stored size (the tile it stands for once decoded).
typedef struct {
    AugRecipe      r;
    const Image   *tiles;
    int            n_tiles, grey;
    const uint8_t *arena;
    size_t         arena_bytes;
    const AugJpeg *jpeg;
} AugSample;
// Its pixels on the host into out (w×h the recipe's size: a mismatch is a bug and dies): grey, or
// augment_apply_pixels (of augment_sample_decode's tiles when some are deferred); scratch as there.
void augment_sample_pixels(const AugSample *s, AugScratch *scratch, Image *out);
// The host twin of a device's decode: tiles_out[k] (n_tiles) is s->tiles[k] (a view) for a source decoded on the
// host, else jpeg[k] decoded (image_decode_mem) and long-side resized as the loader resizes a loaded image, the
// same bytes. A deferred source that fails to decode (its header was read, its data is damaged) becomes a
// grey 114 tile of its size: returns -1 with err naming the first such file, else 0. Free with
// augment_sample_decoded_free.
int  augment_sample_decode(const AugSample *s, Image *tiles_out, Err *err);
void augment_sample_decoded_free(const AugSample *s, Image *tiles);

// Letterbox geometry: the scale r, the float half-paddings the labels move by, and the integer borders.
typedef struct { double r, padw, padh; int top, bottom, left, right; } LetterboxInfo;

// Validation sample: the loaded image letterboxed to (shape_w, shape_h) with scaleup off and no
// randomness (§3.9 rect); boxes clipped and normalised to the output. info (may be NULL) maps predictions
// back. Ownership and errors as augment_train_sample.
int augment_val_sample(const SampleSource *src, int index, int shape_w, int shape_h,
                       Image *out, Box **boxes, int *n, LetterboxInfo *info, Err *err);

// ---- the steps, each usable alone ------------------------------------------------------------------
// load_image's resize (§3.3): r = s/max(w,h); if r != 1 resize to (int(w·r), int(h·r)) with INTER_LINEAR
// when augmenting or enlarging, INTER_AREA otherwise. Always returns a new image.
Image augment_load_resize(const Image *src, int img_size, int augment);
// The size augment_load_resize gives a w×h image (*w2, *h2; w×h itself when r = 1).
void  augment_load_size(int w, int h, int img_size, int *w2, int *h2);

// letterbox (§3.4): r = min(new_h/h, new_w/w) (≤ 1 unless scaleup), new_unpad = round-half-even(w·r, h·r),
// padding dw = new_w − unpad_w (mod stride when stride > 0, YOLOv9's auto) split as round(dw/2 ∓ 0.1),
// colour 114, INTER_LINEAR. Returns a new image of (unpad_w + dw, unpad_h + dh); info as above.
Image augment_letterbox(const Image *src, int new_w, int new_h, int scaleup, int stride, LetterboxInfo *info);

// xywhn2xyxy: normalised boxes of a w×h image to pixels, shifted by (padw, padh), in float32.
void augment_boxes_to_pixels(const Box *in, int n, double w, double h, double padw, double padh,
                             BoxXyxy *out);

// The mosaic centre (§3.5): yc then xc, each int(U(s/2, 3s/2)).
void augment_mosaic_centre(Rng *rng, int s, int *xc, int *yc);
// Copy `tile` into quadrant q (0 top-left, 1 top-right, 2 bottom-left, 3 bottom-right) of the 2s×2s
// canvas around (xc, yc), cropping it to fit; its boxes go to out (nb entries, shifted with the tile,
// clipped to [0, 2s]; empty ones are kept for box_candidates to remove).
void augment_mosaic_place(Image *canvas, const Image *tile, const Box *b, int nb, int q, int xc, int yc,
                          BoxXyxy *out);
// load_mosaic: the 4-tile mosaic of index and 3 partners (shuffled), then random_perspective with border
// −s/2, giving s×s. *boxes (*n entries) belongs to the caller (free). Returns 0 or -1 (err from get).
int augment_load_mosaic(const AugParams *p, const SampleSource *src, int index, Rng *rng,
                        Image *out, BoxXyxy **boxes, int *n, Err *err);

// random_perspective (§3.6): draws M = T·S·R·P·C (draw order: perspective x, y, angle, scale, shear x,
// y, translate x, y), warps src to (w + 2·border) × (h + 2·border) (bilinear, border 114; a copy when
// border is 0 and M is the identity), moves the boxes (4 corners, min/max, clip to [0,W]×[0,H]) and keeps
// those that pass box_candidates, compacting boxes[0..*n). Returns the new image.
Image augment_random_perspective(const Image *src, BoxXyxy *boxes, int *n, const AugParams *p, int border,
                                 Rng *rng);
// The warp alone: dst(x,y) = src(M⁻¹·(x,y,1)), M a row-major 3×3 forward matrix (affine when its last row
// is 0 0 1). Bilinear with OpenCV's fixed point (1/32 px positions, integer weights), outside pixels 114.
Image augment_warp(const Image *src, const double M[9], int out_w, int out_h);

// A warp source without its pixels copied: a w×h plane of grey 114 showing up to 4 non-overlapping
// rectangles of other images (a mosaic's tiles, a letterbox's body). Warping it gives the bytes of
// painting that canvas and warping the canvas, without painting it. Start from (Plane){ .w = w, .h = h }
// and add pieces with augment_plane_add.
#define AUG_PLANE_PIECES 4
typedef struct { const uint8_t *px; size_t stride; int x0, y0, x1, y1; } Piece;   // px: pixel (x0,y0)
typedef struct {
    int   w, h, n;
    Piece piece[AUG_PLANE_PIECES];
    int   x0, y0, x1, y1;             // the pieces' bounding box (kept by augment_plane_add)
} Plane;
Plane augment_plane_of(const Image *im);          // one piece: the whole image
// Show [x0,x1)×[y0,y1) of the plane from px (rows stride bytes apart); inside the plane, not overlapping
// the other pieces; an empty rectangle adds nothing.
void  augment_plane_add(Plane *pl, const uint8_t *px, size_t stride, int x0, int y0, int x1, int y1);
// augment_warp of a plane into out (its w×h the output size; memory the caller's).
void  augment_warp_plane(const Plane *pl, const double M[9], Image *out);
// The pieces of augment_apply_pixels, for its device twin (gpu/augment.cu), which must compute the same:
// the output size (*w, *h); the letterbox body size of tiles[0] (*uw, *uh: a resize with image_resize's
// INTER_LINEAR when they differ from its size); and the Plane warp k reads (a mosaic's 4 tiles from
// tiles[4k], or the letterbox body `tiles[0]` already resized to *uw × *uh). The plane is built with
// pointer arithmetic alone: the images' px may be device memory.
void  augment_recipe_size(const AugRecipe *r, int *w, int *h);
void  augment_recipe_body(const AugRecipe *r, const Image *tile, int *uw, int *uh);
Plane augment_recipe_plane(const AugRecipe *r, int k, const Image *tiles);
// The warp's inverse as augment_warp_plane computes it (affine: OpenCV's invertAffineTransform, else the
// 3×3 inverse); returns 1 when M is affine.
int   augment_warp_inverse(const double M[9], double Mi[9]);
// box_candidates with wh_thr 2, ar_thr 100, area_thr 0.1, eps 1e-16, strict comparisons. w1, h1: the
// pre-warp size times the drawn scale (float32 as the reference computes it); w2, h2: after the warp.
int augment_box_candidate(float w1, float h1, double w2, double h2);

// augment_hsv (§3.7): r = U(−1,1)³·(hgain, sgain, vgain) + 1, then augment_hsv_apply; nothing at all
// (no draws either) when every gain is 0.
void augment_hsv(Image *im, double hgain, double sgain, double vgain, Rng *rng);
// RGB→HSV (OpenCV uint8: H in [0,180)), LUTs H' = trunc((x·r0) mod 180), S',V' = trunc(clip(x·r1|2, 0, 255)),
// HSV→RGB, in place.
void augment_hsv_apply(Image *im, const double r[3]);
void augment_hsv_luts(const double r[3], uint8_t lut[3][256]);
// The tables augment_hsv_apply uses for gains r (its device twin reads them): the forward's division
// tables, and the backward folded with the LUTs (see io/augment_hsv.c).
typedef struct {
    int      sdiv[256], hdiv[256];
    float    v[256], s[256], one_minus_s[256], x[256];
    uint8_t  v255[256], shift[256][3];
} AugHsvTables;
void augment_hsv_tables(const double r[3], AugHsvTables *t);

// Flips in place; boxes are normalised (cx → 1−cx, cy → 1−cy).
void augment_flip_lr(Image *im, Box *b, int n);
void augment_flip_ud(Image *im, Box *b, int n);

// mixup: im = trunc(im·r + im2·(1−r)) with r ~ Beta(32,32) drawn here and returned; same-size images.
double augment_mixup(Image *im, const Image *im2, Rng *rng);
void   augment_mixup_apply(Image *im, const Image *im2, double r);    // the blend alone, for a given r
// Beta(a, b) from two Marsaglia–Tsang gamma draws (a, b ≥ 1).
double augment_beta(Rng *rng, double a, double b);
