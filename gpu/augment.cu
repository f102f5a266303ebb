// augment.cu: the device twin of io/augment.c's augment_apply_pixels (issue 37): a training sample's
// bytes from its recipe (drawn on the host) and its decoded uint8 sources; augment=gpu's micro-batch in
// one launch from its tiles, copied as one span of the loader's tile arena (ahead, on the copy stream). Same
// integer and fixed-point arithmetic as the CPU path, byte for byte: OpenCV's 1/32 px bilinear warp
// (positions as warpAffine / warpPerspective compute them), image_resize's INTER_LINEAR for a letterbox
// body, mixup's truncated blend, HSV through the same folded tables, then the flips. Every double and
// float operation is written as its correctly rounded intrinsic (__dmul_rn, __fadd_rn, ...), so nvcc
// fuses none into an FMA the CPU does not make.
// out = (no accumulation). Legend: W,H output size; (x,y) output pixel; (sx,sy) top-left source tap;
// w,h and ow,oh a resize's input and output sizes; 1/32 px = one "tab".
#include <limits.h>

#include "gpu/kernel_util.h"
#include "gpu/nvjpeg.h"
#include "core/base/switches.h"

#define PAD_VALUE 114
#define TAB_BITS  5
#define TAB_SIZE  (1 << TAB_BITS)
#define AB_BITS   10
#define COEF_BITS 11

// One warp as the kernel reads it: the inverse matrix and the plane's pieces in device memory.
struct DevPiece { const uint8_t *px; size_t stride; int x0, y0, x1, y1; };
struct DevWarp {
    double   Mi[9];
    int      affine, n, w, h;
    DevPiece piece[AUG_PLANE_PIECES];
};
struct DevAug {
    DevWarp             warp[2];
    int                 mixup, hsv, flipud, fliplr, W, H;
    double              mix_r, mix_q;     // r and 1 − r, as augment_mixup_apply computes them
    const AugHsvTables *t;                // device memory; NULL without HSV
};

// ---- kernels ---------------------------------------------------------------------------------------

// OpenCV's saturate_cast<int>(double) (the CPU's sat_round): round half to even, clamped.
__device__ static inline int sat_round_d(double v) {
    if (v >= (double)INT_MAX) return INT_MAX;
    if (v <= (double)INT_MIN) return INT_MIN;
    return __double2int_rn(v);
}

// The source position of output (x, y) in 1/32 px, as io/augment_warp.c's warp_row_affine and
// warp_row_perspective compute it.
__device__ static inline void warp_position(const DevWarp &w, int x, int y, int *X, int *Y) {
    const double *Mi = w.Mi;
    if (w.affine) {
        int round_delta = (1 << AB_BITS) / TAB_SIZE / 2;
        int X0 = sat_round_d(__dmul_rn(__dadd_rn(__dmul_rn(Mi[1], (double)y), Mi[2]), 1 << AB_BITS)) + round_delta;
        int Y0 = sat_round_d(__dmul_rn(__dadd_rn(__dmul_rn(Mi[4], (double)y), Mi[5]), 1 << AB_BITS)) + round_delta;
        int adelta = sat_round_d(__dmul_rn(__dmul_rn(Mi[0], (double)x), 1 << AB_BITS));
        int bdelta = sat_round_d(__dmul_rn(__dmul_rn(Mi[3], (double)x), 1 << AB_BITS));
        *X = (X0 + adelta) >> (AB_BITS - TAB_BITS);
        *Y = (Y0 + bdelta) >> (AB_BITS - TAB_BITS);
        return;
    }
    double W = __dadd_rn(__dadd_rn(__dmul_rn(Mi[6], (double)x), __dmul_rn(Mi[7], (double)y)), Mi[8]);
    W = W != 0 ? __ddiv_rn(TAB_SIZE, W) : 0;
    *X = sat_round_d(__dmul_rn(__dadd_rn(__dadd_rn(__dmul_rn(Mi[0], (double)x), __dmul_rn(Mi[1], (double)y)), Mi[2]), W));
    *Y = sat_round_d(__dmul_rn(__dadd_rn(__dadd_rn(__dmul_rn(Mi[3], (double)x), __dmul_rn(Mi[4], (double)y)), Mi[5]), W));
}

// The plane's pixel at (x, y): its piece's, PAD_VALUE elsewhere (io/augment_warp.c's plane_pixel).
__device__ static inline const uint8_t *plane_pixel_d(const DevWarp &w, int x, int y, const uint8_t *pad) {
    if ((unsigned)x >= (unsigned)w.w || (unsigned)y >= (unsigned)w.h) return pad;
    for (int k = 0; k < w.n; k++) {
        const DevPiece &p = w.piece[k];
        if (x >= p.x0 && x < p.x1 && y >= p.y0 && y < p.y1)
            return p.px + (size_t)(y - p.y0) * p.stride + (size_t)(x - p.x0) * 3;
    }
    return pad;
}

// Warp w at output (x, y) into c[3]: 4 taps, integer weights (32 − f)·(32 − g) etc., (Σ + 512) >> 10.
__device__ static inline void warp_pixel(const DevWarp &w, int x, int y, int c[3]) {
    const uint8_t pad[3] = { PAD_VALUE, PAD_VALUE, PAD_VALUE };
    int X, Y;
    warp_position(w, x, y, &X, &Y);
    int sx = X >> TAB_BITS, sy = Y >> TAB_BITS, fx = X & (TAB_SIZE - 1), fy = Y & (TAB_SIZE - 1);
    const uint8_t *p00 = plane_pixel_d(w, sx, sy, pad), *p01 = plane_pixel_d(w, sx + 1, sy, pad);
    const uint8_t *p10 = plane_pixel_d(w, sx, sy + 1, pad), *p11 = plane_pixel_d(w, sx + 1, sy + 1, pad);
    int w00 = (TAB_SIZE - fx) * (TAB_SIZE - fy), w01 = fx * (TAB_SIZE - fy);
    int w10 = (TAB_SIZE - fx) * fy, w11 = fx * fy;
    for (int k = 0; k < 3; k++) c[k] = (p00[k] * w00 + p01[k] * w01 + p10[k] * w10 + p11[k] * w11 + 512) >> 10;
}

// io/augment_hsv.c's hsv_pixel: OpenCV's integer RGB→HSV, then the folded float backward.
__device__ static inline void hsv_pixel_d(int c[3], const AugHsvTables *t) {
    const int shift = 12;
    int r = c[0], g = c[1], b = c[2];
    int v = max(max(r, g), b), diff = v - min(min(r, g), b);
    int s = (diff * t->sdiv[v] + (1 << (shift - 1))) >> shift;
    int h = v == r ? g - b : v == g ? b - r + 2 * diff : r - g + 4 * diff;
    h = (h * t->hdiv[diff] + (1 << (shift - 1))) >> shift;
    h += h < 0 ? 180 : 0;
    float fv = t->v[v];
    uint32_t p = __float2uint_rz(__fmul_rn(__fmul_rn(fv, t->one_minus_s[s]), 255.f));
    float one_minus_sx = __double2float_rn(__dsub_rn(1.0, __dmul_rn((double)t->s[s], (double)t->x[h])));
    uint32_t qt = __float2uint_rz(__fmul_rn(__fmul_rn(fv, one_minus_sx), 255.f));
    uint32_t all = t->v255[v] | p << 8 | qt << 16;
    for (int k = 0; k < 3; k++) c[k] = (uint8_t)(all >> t->shift[h][k]);
}

// One output pixel i: the flips say which pre-flip pixel it shows; that pixel is warp 0 (mixed with warp
// 1), then HSV. Into bytes (out), or into the model's input as byte / 255.0f (outf: gpu/input.cu's
// conversion, the CPU's x / 255.0f).
__device__ static inline void sample_pixel(const DevAug &a, size_t i, uint8_t *out, float *outf) {
    int x = (int)(i % a.W), y = (int)(i / a.W);
    int sx = a.fliplr ? a.W - 1 - x : x, sy = a.flipud ? a.H - 1 - y : y;
    int c[3];
    warp_pixel(a.warp[0], sx, sy, c);
    if (a.mixup) {
        int d[3];
        warp_pixel(a.warp[1], sx, sy, d);
        for (int k = 0; k < 3; k++)
            c[k] = (uint8_t)__double2int_rz(__dadd_rn(__dmul_rn((double)c[k], a.mix_r), __dmul_rn((double)d[k], a.mix_q)));
    }
    if (a.hsv) hsv_pixel_d(c, a.t);
    for (int k = 0; k < 3; k++) {
        if (outf) outf[3 * i + k] = __fdiv_rn((float)(uint8_t)c[k], 255.0f);
        else out[3 * i + k] = (uint8_t)c[k];
    }
}

__global__ void augment_sample_kernel(DevAug a, uint8_t *out, float *outf) {
    pdl_entry();
    GRID_STRIDE(i, (size_t)a.W * a.H) sample_pixel(a, i, out, outf);
}

// A run of samples in one launch: blockIdx.y is the sample, a[blockIdx.y] its descriptor (device memory),
// dst + blockIdx.y · W·H·3 its floats.
__global__ void augment_batch_kernel(const DevAug *a, float *dst) {
    pdl_entry();
    const DevAug &d = a[blockIdx.y];
    size_t px = (size_t)d.W * d.H;
    float *out = dst + blockIdx.y * px * 3;
    GRID_STRIDE(i, px) sample_pixel(d, i, NULL, out);
}

// io/image_resize.c's linear_taps for output o: the first tap i and the weights (a0, a1) in 1/2048.
__device__ static inline void linear_tap_d(int n_in, double step, int clamp, int o, int *i, int *a0, int *a1) {
    float f = __double2float_rn(__dsub_rn(__dmul_rn(o + 0.5, step), 0.5));
    int k = (int)floorf(f);
    f = __fsub_rn(f, (float)k);
    if (clamp && k < 0) { k = 0; f = 0; }
    if (clamp && k >= n_in - 1) { k = n_in - 1; f = 0; }
    *i = k;
    *a0 = (short)__float2int_rn(__fmul_rn(__fsub_rn(1.f, f), 1 << COEF_BITS));
    *a1 = (short)__float2int_rn(__fmul_rn(f, 1 << COEF_BITS));
}

// image_resize(src, ow, oh, 0) for ow,oh not the source's size: the exact halving as a 2x2 mean
// ((sum + 2) >> 2), else INTER_LINEAR with 11-bit weights and OpenCV's SIMD rounding of the vertical pass.
__global__ void augment_resize_kernel(const uint8_t *src, int w, int h, uint8_t *dst, int ow, int oh,
                                      double step_x, double step_y) {
    pdl_entry();
    GRID_STRIDE(i, (size_t)ow * oh * 3) {
        int c = (int)(i % 3), ox = (int)(i / 3 % ow), oy = (int)(i / 3 / ow);
        if (2 * ow == w && 2 * oh == h) {
            const uint8_t *p = src + ((size_t)2 * oy * w + 2 * ox) * 3 + c;
            dst[i] = (uint8_t)((p[0] + p[3] + p[(size_t)w * 3] + p[(size_t)w * 3 + 3] + 2) >> 2);
            continue;
        }
        int xi, a0, a1, yi, b0, b1;
        linear_tap_d(w, step_x, 1, ox, &xi, &a0, &a1);
        linear_tap_d(h, step_y, 0, oy, &yi, &b0, &b1);
        int x0 = 3 * xi + c, x1 = 3 * (xi + 1 < w ? xi + 1 : xi) + c;
        int y0 = min(max(yi, 0), h - 1), y1 = min(max(yi + 1, 0), h - 1);
        const uint8_t *r0 = src + (size_t)y0 * w * 3, *r1 = src + (size_t)y1 * w * 3;
        int h0 = r0[x0] * a0 + r0[x1] * a1, h1 = r1[x0] * a0 + r1[x1] * a1;
        dst[i] = (uint8_t)(((((h0 >> 4) * b0) >> 16) + (((h1 >> 4) * b1) >> 16) + 2) >> 2);
    }
}

// ---- launchers -------------------------------------------------------------------------------------

static DevWarp dev_warp(const Plane *pl, const double M[9]) {
    DevWarp w;
    memset(&w, 0, sizeof w);
    w.affine = augment_warp_inverse(M, w.Mi);
    w.n = pl->n, w.w = pl->w, w.h = pl->h;
    for (int k = 0; k < pl->n; k++) {
        const Piece *p = &pl->piece[k];
        w.piece[k] = DevPiece{ p->px, p->stride, p->x0, p->y0, p->x1, p->y1 };
    }
    return w;
}

static uint8_t *upload_take(Device *dev, const void *host, size_t n) {
    uint8_t *d = (uint8_t *)arena_take(&dev->scratch, n ? n : 1, 256);
    if (n) checkCuda(cudaMemcpyAsync(d, host, n, cudaMemcpyHostToDevice, dev->stream));
    return d;
}

// The sample of recipe r into out (bytes) or outf (floats / 255), both device memory of the recipe's
// augment_recipe_size, (H,W,3): the tiles (host memory) are uploaded into dev's scratch, which is given
// back before returning (the work stays queued on dev->stream, in order, so the next sample's uploads land after
// this one's kernel). The tiles are pageable host memory, which cudaMemcpyAsync has copied out before it returns,
// so the caller may reuse them at once; pinned tiles would have to stay until the stream passes their copies.
static void apply_into(Device *dev, const AugRecipe *r, const Image *tiles, uint8_t *out, float *outf) {
    size_t mark = dev->scratch.used;
    int idx[8], m = augment_recipe_sources(r, idx);
    Image dt[8];                                  // the tiles in device memory
    for (int k = 0; k < m; k++)
        dt[k] = Image{ tiles[k].w, tiles[k].h, upload_take(dev, tiles[k].px, (size_t)tiles[k].w * tiles[k].h * 3) };
    DevAug a;
    memset(&a, 0, sizeof a);
    augment_recipe_size(r, &a.W, &a.H);
    if (r->mosaic) {
        for (int k = 0; k < 1 + r->mixup; k++) {
            Plane pl = augment_recipe_plane(r, k, dt);
            a.warp[k] = dev_warp(&pl, r->warp[k].M);
        }
    } else {
        int uw, uh;
        augment_recipe_body(r, &tiles[0], &uw, &uh);
        Image body = dt[0];
        if (uw != tiles[0].w || uh != tiles[0].h) {
            body = Image{ uw, uh, (uint8_t *)arena_take(&dev->scratch, (size_t)uw * uh * 3, 256) };
            double step_x = 1.0 / ((double)uw / tiles[0].w), step_y = 1.0 / ((double)uh / tiles[0].h);
            size_t n = (size_t)uw * uh * 3;
            augment_resize_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(dt[0].px, tiles[0].w, tiles[0].h,
                                                                               body.px, uw, uh, step_x, step_y);
            checkLaunch(dev);
        }
        Plane pl = augment_recipe_plane(r, 0, &body);
        a.warp[0] = dev_warp(&pl, r->warp[0].M);
    }
    a.mixup = r->mixup, a.mix_r = r->mix_r, a.mix_q = 1 - r->mix_r;
    a.flipud = r->flipud, a.fliplr = r->fliplr, a.hsv = r->hsv;
    if (r->hsv) {
        AugHsvTables t;
        augment_hsv_tables(r->hsv_r, &t);
        a.t = (const AugHsvTables *)upload_take(dev, &t, sizeof t);
    }
    size_t n = (size_t)a.W * a.H;
    augment_sample_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(a, out, outf);
    checkLaunch(dev);
    dev->scratch.used = mark;
}

extern "C" void augment_apply_gpu(Device *dev, const AugRecipe *r, const Image *tiles, uint8_t *out) {
    apply_into(dev, r, tiles, out, NULL);
}

// ---- augment=gpu's batches: a run of samples' tiles in one device buffer, one launch ----------------

static size_t r256(size_t n) { return (n + 255) & ~(size_t)255; }
static size_t tile_bytes(const Image *t) { return (size_t)t->w * t->h * 3; }

// The host bytes of samples s[0..n)'s tiles: the span [lo, lo + bytes) of the arena they all lie in
// (shared), else (tiles anywhere) the sum of their sizes, copied tile by tile.
// A device's share of a batch may lie scattered through the arena (the workers' finishing order) with other
// devices' samples between its own: when its span would not fit a stage but its tiles do, it is copied
// packed, tile by tile (span_fit).
struct Span { const uint8_t *lo; size_t bytes, sum; int shared; };

// Source k of s is still JPEG bytes (the loader's defer_decode): the device decodes it (decode_deferred).
static int is_deferred(const AugSample *s, int k) { return s->jpeg && s->jpeg[k].data; }
static int needs_resize(const AugSample *s, int k) {
    return s->jpeg[k].w != s->tiles[k].w || s->jpeg[k].h != s->tiles[k].h;
}

// The device bytes the deferred sources of s[0..n) take: their tiles (temps 0), or the stored-size images of
// those a long-side resize makes their tile from (temps 1), which follow the tiles.
static size_t deferred_part(const AugSample *s, int n, int temps) {
    size_t b = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; !s[i].grey && k < s[i].n_tiles; k++)
            if (is_deferred(&s[i], k))
                b += !temps ? r256(tile_bytes(&s[i].tiles[k]))
                     : needs_resize(&s[i], k) ? r256((size_t)s[i].jpeg[k].w * s[i].jpeg[k].h * 3) : 0;
    return b;
}
static size_t deferred_bytes(const AugSample *s, int n) { return deferred_part(s, n, 0) + deferred_part(s, n, 1); }

static Span span_of(const AugSample *s, int n) {
    Span sp = { NULL, 0, 0, 1 };
    const uint8_t *arena = NULL, *hi = NULL;
    size_t sum = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; !s[i].grey && k < s[i].n_tiles; k++) {
            if (is_deferred(&s[i], k)) continue;  // decoded on the device (deferred_bytes)
            const uint8_t *p = s[i].tiles[k].px, *e = p + tile_bytes(&s[i].tiles[k]);
            sum += tile_bytes(&s[i].tiles[k]);
            if (!s[i].arena || (arena && s[i].arena != arena) || p < s[i].arena || e > s[i].arena + s[i].arena_bytes)
                sp.shared = 0;
            arena = s[i].arena;
            if (!sp.lo || p < sp.lo) sp.lo = p;
            if (!hi || e > hi) hi = e;
        }
    sp.sum = sum;
    sp.bytes = !sp.shared ? sum : sp.lo ? (size_t)(hi - sp.lo) : 0;
    return sp;
}

static Span span_fit(const AugSample *s, int n, size_t cap) {
    Span sp = span_of(s, n);
    if (sp.shared && sp.bytes > cap && sp.sum <= cap) sp.shared = 0, sp.bytes = sp.sum;
    return sp;
}

// Sample s's letterbox body size when it needs a resize (0 otherwise: a mosaic, grey, or the tile as it is).
static size_t body_bytes(const AugSample *s, int *uw, int *uh) {
    if (s->grey || s->r.mosaic) return 0;
    augment_recipe_body(&s->r, &s->tiles[0], uw, uh);
    return *uw != s->tiles[0].w || *uh != s->tiles[0].h ? (size_t)*uw * *uh * 3 : 0;
}

// The scratch of a run of n samples beside its tiles: the descriptors, the HSV tables, the resized bodies.
static size_t run_scratch(const AugSample *s, int n, int deferred) {
    size_t b = r256((size_t)n * sizeof(DevAug));
    for (int i = 0; i < n; i++) {
        int uw, uh;
        b += !s[i].grey && s[i].r.hsv ? r256(sizeof(AugHsvTables)) : 0;
        b += r256(body_bytes(&s[i], &uw, &uh));
    }
    return b + (deferred ? deferred_bytes(s, n) : 0);   // + the deferred sources the run decodes
}

// The longest run from s[0] (at least one sample) whose scratch fits `room`, its tiles with it when
// tile_cap is 0, else its tiles' bytes within tile_cap (SIZE_MAX: already on the device, deferred sources
// decoded).
static int run_end(const AugSample *s, int n, size_t tile_cap, size_t room) {
    int j = 1;
    for (; j < n; j++) {
        size_t tiles = tile_cap == SIZE_MAX ? 0 : span_of(s, j + 1).bytes;
        size_t need = run_scratch(s, j + 1, tile_cap != SIZE_MAX) + (tile_cap ? 0 : r256(tiles)) + 256;   // + alignment
        if ((tile_cap && tile_cap != SIZE_MAX && tiles > tile_cap) || need > room) break;
    }
    return j;
}

// The device images of the run's tiles in buf, (n, AUG_MAX_SOURCES): at their offset from lo in the shared
// arena's span, else packed in order.
static void tiles_on_device(const AugSample *s, int n, const Span *sp, const uint8_t *lo, uint8_t *buf, Image *dt,
                            uint8_t *dbuf) {
    size_t at = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; !s[i].grey && k < s[i].n_tiles; k++) {
            const Image *t = &s[i].tiles[k];
            if (is_deferred(&s[i], k)) {              // decoded into dbuf
                dt[i * AUG_MAX_SOURCES + k] = Image{ t->w, t->h, dbuf };
                dbuf += r256(tile_bytes(t));
                continue;
            }
            dt[i * AUG_MAX_SOURCES + k] = Image{ t->w, t->h, buf + (sp->shared ? (size_t)(t->px - lo) : at) };
            at += tile_bytes(t);
        }
}

// Queue on `stream` the copy of the run's tiles into buf (dt): the span at once, or tile by tile.
static void copy_tiles(const AugSample *s, int n, const Span *sp, uint8_t *buf, const Image *dt, cudaStream_t stream) {
    if (sp->shared) {
        if (sp->bytes) checkCuda(cudaMemcpyAsync(buf, sp->lo, sp->bytes, cudaMemcpyHostToDevice, stream));
        return;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; !s[i].grey && k < s[i].n_tiles; k++)
            if (!is_deferred(&s[i], k))
                checkCuda(cudaMemcpyAsync(dt[i * AUG_MAX_SOURCES + k].px, s[i].tiles[k].px, tile_bytes(&s[i].tiles[k]),
                                          cudaMemcpyHostToDevice, stream));
}

// One run's descriptors (host memory `host`, device copy at dmeta) and its bodies' resizes, queued after the
// tiles. A grey sample (the loader's stand-in when no image loads) is an affine warp of an empty (0x0) plane:
// its inverse all zeros puts every tap at (0, 0), outside the plane, so PAD_VALUE everywhere.
struct Resize { const uint8_t *src; int w, h; uint8_t *dst; int uw, uh; };

static void describe(Device *dev, const AugSample *s, int n, int H, int W, const Image *dt, uint8_t *host,
                     uint8_t *dmeta, Resize *rs) {
    DevAug *a = (DevAug *)host;
    size_t at = r256((size_t)n * sizeof(DevAug));
    for (int i = 0; i < n; i++) {
        const AugRecipe *r = &s[i].r;
        const Image *t = dt + (size_t)i * AUG_MAX_SOURCES;
        memset(&a[i], 0, sizeof a[i]);
        rs[i].dst = NULL;
        a[i].W = W, a[i].H = H, a[i].warp[0].affine = 1;
        if (s[i].grey) continue;
        if (r->mosaic) {
            for (int k = 0; k < 1 + r->mixup; k++) {
                Plane pl = augment_recipe_plane(r, k, t);
                a[i].warp[k] = dev_warp(&pl, r->warp[k].M);
            }
        } else {
            int uw = 0, uh = 0;
            Image body = t[0];
            if (body_bytes(&s[i], &uw, &uh)) {
                body = Image{ uw, uh, (uint8_t *)arena_take(&dev->scratch, (size_t)uw * uh * 3, 256) };
                rs[i] = Resize{ t[0].px, t[0].w, t[0].h, body.px, uw, uh };
            }
            Plane pl = augment_recipe_plane(r, 0, &body);
            a[i].warp[0] = dev_warp(&pl, r->warp[0].M);
        }
        a[i].mixup = r->mixup, a[i].mix_r = r->mix_r, a[i].mix_q = 1 - r->mix_r;
        a[i].flipud = r->flipud, a[i].fliplr = r->fliplr, a[i].hsv = r->hsv;
        if (r->hsv) {
            augment_hsv_tables(r->hsv_r, (AugHsvTables *)(host + at));
            a[i].t = (const AugHsvTables *)(dmeta + at);
            at += r256(sizeof(AugHsvTables));
        }
    }
}

static size_t meta_bytes(const AugSample *s, int n) {
    size_t b = r256((size_t)n * sizeof(DevAug));
    for (int i = 0; i < n; i++) b += !s[i].grey && s[i].r.hsv ? r256(sizeof(AugHsvTables)) : 0;
    return b;
}

// ---- deferred sources (the loader's defer_decode): decoded here -------------------------------------

static void nvjpeg_free_kept(void *p) { nvjpeg_close((NvJpeg *)p); }
static void nothing_kept(void *p) {}
static char no_decoder;                            // dev->kept's mark: nvJPEG did not open on this device

// dev's nvJPEG decoders, opened at their first use (on the calling thread, dev's current device), one for the
// step's thread (DEVICE_KEPT_NVJPEG) and one for the prefetch's (DEVICE_KEPT_NVJPEG_PRE: a decoder's state is
// not shared between threads); NULL when it does not open (said once).
static NvJpeg *device_nvjpeg(Device *dev, int slot) {
    void *k = dev->kept[slot];
    if (k) return k == &no_decoder ? NULL : (NvJpeg *)k;
    NvJpeg *j;
    char why[256];
    if (nvjpeg_open(1, &j, why, sizeof why)) {
        if (slot == DEVICE_KEPT_NVJPEG)
            fprintf(stderr, "note: GPU %d: %s; the JPEGs it was to decode are decoded on the host\n", dev->id, why);
        dev->kept[slot] = &no_decoder, dev->kept_free[slot] = nothing_kept;
        return NULL;
    }
    dev->kept[slot] = j, dev->kept_free[slot] = nvjpeg_free_kept;
    return j;
}

extern "C" int augment_nvjpeg_gpu(Device *dev, int on) {
    device_sync(dev);
    checkCuda(cudaStreamSynchronize(dev->copy_stream));
    for (int slot = DEVICE_KEPT_NVJPEG; slot <= DEVICE_KEPT_NVJPEG_PRE; slot++) {
        if (dev->kept[slot]) dev->kept_free[slot](dev->kept[slot]);
        dev->kept[slot] = on ? NULL : &no_decoder, dev->kept_free[slot] = nothing_kept;
    }
    return on && device_nvjpeg(dev, DEVICE_KEPT_NVJPEG) != NULL;
}

extern "C" int augment_gpu_decodes(Device *dev) {
    if (switch_is(SW_NVJPEG, "0")) return 0;
    int cur;
    checkCuda(cudaGetDevice(&cur));
    checkCuda(cudaSetDevice(dev->id));
    int ok = device_nvjpeg(dev, DEVICE_KEPT_NVJPEG) != NULL;
    checkCuda(cudaSetDevice(cur));
    return ok;
}

// The deferred sources of s[0..n) into their tiles dt, queued on `stream`: nvJPEG (j) decodes each at its
// stored size, into its tile or, where the loader's long-side resize makes the tile, into `temps` and
// image_resize's linear twin (augment_resize_kernel) from there. Without nvJPEG (j NULL), or when it refuses
// them, the host decodes them (augment_sample_decode: the CPU's bytes) and they are uploaded.
static void decode_deferred(Device *dev, NvJpeg *j, const AugSample *s, int n, const Image *dt, uint8_t *temps,
                            cudaStream_t stream) {
    int m = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; !s[i].grey && k < s[i].n_tiles; k++) m += is_deferred(&s[i], k);
    const uint8_t **data = (const uint8_t **)xmalloc(sizeof *data * m);
    size_t *len = (size_t *)xmalloc(sizeof *len * m);
    Image *out = (Image *)xmalloc(sizeof *out * m);
    int *from = (int *)xmalloc(sizeof *from * m);    // i * AUG_MAX_SOURCES + k of each
    m = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; !s[i].grey && k < s[i].n_tiles; k++) {
            if (!is_deferred(&s[i], k)) continue;
            const AugJpeg *jp = &s[i].jpeg[k];
            const Image *t = &dt[i * AUG_MAX_SOURCES + k];
            data[m] = jp->data, len[m] = jp->len, from[m] = i * AUG_MAX_SOURCES + k;
            out[m] = needs_resize(&s[i], k) ? Image{ jp->w, jp->h, temps } : *t;
            if (needs_resize(&s[i], k)) temps += r256((size_t)jp->w * jp->h * 3);
            m++;
        }
    int bad = -1, done = 0;
    char why[256];
    if (j && nvjpeg_decode(j, data, len, m, out, stream, &bad, why, sizeof why) == 0) {
        done = 1;
        for (int q = 0; q < m; q++) {
            const Image *t = &dt[from[q]];
            if (out[q].px == t->px) continue;
            size_t nb = tile_bytes(t);
            double step_x = 1.0 / ((double)t->w / out[q].w), step_y = 1.0 / ((double)t->h / out[q].h);
            augment_resize_kernel<<<blocks_for(nb), THREADS, 0, stream>>>(out[q].px, out[q].w, out[q].h, t->px,
                                                                                t->w, t->h, step_x, step_y);
            checkLaunch(dev);
        }
    } else if (j) {
        const AugJpeg *jp = NULL;
        for (int q = 0; q < m && bad >= 0; q++) if (q == bad) jp = &s[from[q] / AUG_MAX_SOURCES].jpeg[from[q] % AUG_MAX_SOURCES];
        fprintf(stderr, "note: GPU %d: %s: %s; this run of samples is decoded on the host\n", dev->id,
                jp && jp->name ? jp->name : "a JPEG", why);
    }
    for (int i = 0; i < n && !done; i++) {          // the host's decode, uploaded
        if (s[i].grey || !s[i].jpeg) continue;
        Image tiles[AUG_MAX_SOURCES];
        Err err;
        if (augment_sample_decode(&s[i], tiles, &err)) fprintf(stderr, "warning: %s\n", err.msg);
        for (int k = 0; k < s[i].n_tiles; k++)
            if (is_deferred(&s[i], k))              // pageable: staged before the call returns
                checkCuda(cudaMemcpyAsync(dt[i * AUG_MAX_SOURCES + k].px, tiles[k].px, tile_bytes(&tiles[k]),
                                          cudaMemcpyHostToDevice, stream));
        augment_sample_decoded_free(&s[i], tiles);
    }
    free(data), free(len), free(out), free(from);
}

// Where a run's tiles come from: `stage` holds them already (prefetched: wait for its copy; the deferred
// sources decoded after the span, laid out for the samples `all` covers), or they are copied now into `stage`
// (when given) or scratch and the deferred ones decoded into scratch.
struct RunTiles { AugStage *stage; int prefetched; const Span *all; };

// Samples s[0..n) into dst on dev->stream: descriptors first (a pageable copy, which waits for the stream's
// earlier work, so before the tiles' wait), then the tiles, the resizes and the one launch.
static void make_run(Device *dev, const AugSample *s, int n, int H, int W, float *dst, const RunTiles *rt) {
    size_t mark = dev->scratch.used, mb = meta_bytes(s, n);
    Span sp = rt->prefetched ? *rt->all : span_of(s, n);
    uint8_t *host = (uint8_t *)xmalloc(mb), *dmeta = (uint8_t *)arena_take(&dev->scratch, mb, 256);
    uint8_t *buf = rt->stage ? rt->stage->buf : (uint8_t *)arena_take(&dev->scratch, sp.bytes ? sp.bytes : 1, 256);
    size_t db = rt->prefetched ? 0 : deferred_bytes(s, n);
    uint8_t *dbuf = rt->prefetched ? buf + r256(sp.bytes) : db ? (uint8_t *)arena_take(&dev->scratch, db, 256) : NULL;
    Image *dt = (Image *)xcalloc((size_t)n * AUG_MAX_SOURCES, sizeof *dt);
    Resize *rs = (Resize *)xcalloc(n, sizeof *rs);
    tiles_on_device(s, n, &sp, sp.lo, buf, dt, dbuf);
    describe(dev, s, n, H, W, dt, host, dmeta, rs);
    checkCuda(cudaMemcpyAsync(dmeta, host, mb, cudaMemcpyHostToDevice, dev->stream));   // staged before it returns
    free(host);
    if (rt->stage) checkCuda(cudaStreamWaitEvent(dev->stream, rt->stage->copied, 0));   // the prefetch, or a stale one
    if (!rt->prefetched) copy_tiles(s, n, &sp, buf, dt, dev->stream);
    if (db) decode_deferred(dev, device_nvjpeg(dev, DEVICE_KEPT_NVJPEG), s, n, dt, dbuf + deferred_part(s, n, 0), dev->stream);
    for (int i = 0; i < n; i++) {
        if (!rs[i].dst) continue;
        size_t nb = (size_t)rs[i].uw * rs[i].uh * 3;
        double step_x = 1.0 / ((double)rs[i].uw / rs[i].w), step_y = 1.0 / ((double)rs[i].uh / rs[i].h);
        augment_resize_kernel<<<blocks_for(nb), THREADS, 0, dev->stream>>>(rs[i].src, rs[i].w, rs[i].h, rs[i].dst,
                                                                            rs[i].uw, rs[i].uh, step_x, step_y);
        checkLaunch(dev);
    }
    dim3 grid(blocks_for((size_t)W * H), (unsigned)n);
    augment_batch_kernel<<<grid, THREADS, 0, dev->stream>>>((const DevAug *)dmeta, dst);
    checkLaunch(dev);
    if (rt->stage) checkCuda(cudaEventRecord(rt->stage->used, dev->stream));   // a prefetch into it waits for this
    free(dt), free(rs);
    dev->scratch.used = mark;
}

// The aug stage holding the prefetched tiles of exactly s[0..n), or NULL.
static AugStage *prefetched(Device *dev, const AugSample *s, int n, const Span *sp) {
    for (int k = 0; k < 2; k++) {
        AugStage *st = &dev->aug_stage[k];
        if (st->s == s && st->n == n && st->shared == sp->shared && st->host == sp->lo && st->bytes == sp->bytes) return st;
    }
    return NULL;
}

extern "C" void augment_batch_gpu(Device *dev, const AugSample *s, int n, int H, int W, float *dst) {
    size_t px = (size_t)H * W * 3;
    for (int i = 0; i < n; i++) {
        int w = W, h = H;
        if (!s[i].grey) augment_recipe_size(&s[i].r, &w, &h);
        if (w != W || h != H) die("augment_batch_gpu: sample %d's recipe makes %dx%d, the batch is %dx%d", i, w, h, W, H);
    }
    pthread_mutex_lock(&dev->aug_lock);           // a prefetch of the next batch may be running beside
    Span all = span_fit(s, n, dev->aug_stage[0].cap);
    AugStage *pre = n > 0 ? prefetched(dev, s, n, &all) : NULL, *next = &dev->aug_stage[dev->aug_next];
    if (pre || next->busy || !next->buf) next = NULL;   // no stage to copy into: scratch
    else next->busy = 1;
    pthread_mutex_unlock(&dev->aug_lock);
    // a packed share, or deferred sources decoded in the stage, are laid out for the whole set: one run
    if (pre && (!all.shared || pre->decoded) && run_end(s, n, SIZE_MAX, dev->scratch.size - dev->scratch.used) < n)
        pre = NULL;
    for (int i = 0; i < n;) {
        size_t room = dev->scratch.size - dev->scratch.used;
        RunTiles rt = { pre, pre != NULL, &all };
        int m;
        if (pre) {
            m = run_end(s + i, n - i, SIZE_MAX, room);
        } else {                                   // through the stage a prefetch would fill next, or scratch
            m = next ? run_end(s + i, n - i, next->cap, room) : 0;
            if (m && span_of(s + i, m).bytes <= next->cap) rt.stage = next;
            else m = run_end(s + i, n - i, 0, room);   // no stage, or one sample larger than it
        }
        make_run(dev, s + i, m, H, W, dst + i * px, &rt);
        i += m;
    }
    pthread_mutex_lock(&dev->aug_lock);
    if (pre) pre->s = NULL;                        // used once: the loader reuses the samples' memory
    if (next) next->s = NULL, next->busy = 0;      // any stale prefetch it held is overwritten
    pthread_mutex_unlock(&dev->aug_lock);
}

// The tiles of s[0..n) into the next stage on the copy stream, behind the step now running: the span (or the
// share's tiles packed), then the deferred sources decoded after it by the prefetch's own nvJPEG decoder, so
// the decode too runs beside the step (without nvJPEG the host decodes them here). Nothing when they do not fit
// a stage: the step does it all then.
extern "C" void augment_prefetch_gpu(Device *dev, const AugSample *s, int n) {
    pthread_mutex_lock(&dev->aug_lock);
    AugStage *st = &dev->aug_stage[dev->aug_next];
    Span sp = span_fit(s, n, st->cap);
    size_t dtiles = deferred_part(s, n, 0);
    if (!st->buf || n < 1 || st->busy || sp.bytes > st->cap || r256(sp.bytes) + deferred_bytes(s, n) > st->cap) {
        pthread_mutex_unlock(&dev->aug_lock);     // the step copies them
        return;
    }
    st->s = NULL, st->busy = 1;                    // filled outside the lock
    dev->aug_next ^= 1;                            // now the stage of the coming step: free once it ran
    pthread_mutex_unlock(&dev->aug_lock);
    int cur;
    checkCuda(cudaGetDevice(&cur));
    checkCuda(cudaSetDevice(dev->id));
    NvJpeg *j = dtiles ? device_nvjpeg(dev, DEVICE_KEPT_NVJPEG_PRE) : NULL;   // NULL: decode_deferred's host path
    checkCuda(cudaStreamWaitEvent(dev->copy_stream, st->used, 0));   // the last kernel that read buf
    Image *dt = (Image *)xcalloc((size_t)n * AUG_MAX_SOURCES, sizeof *dt);
    uint8_t *dbuf = st->buf + r256(sp.bytes);
    tiles_on_device(s, n, &sp, sp.lo, st->buf, dt, dbuf);
    copy_tiles(s, n, &sp, st->buf, dt, dev->copy_stream);
    if (dtiles) decode_deferred(dev, j, s, n, dt, dbuf + dtiles, dev->copy_stream);
    free(dt);
    checkCuda(cudaEventRecord(st->copied, dev->copy_stream));
    checkCuda(cudaSetDevice(cur));
    pthread_mutex_lock(&dev->aug_lock);
    st->s = s, st->n = n, st->host = sp.lo, st->bytes = sp.bytes, st->shared = sp.shared, st->decoded = dtiles > 0;
    st->busy = 0;
    pthread_mutex_unlock(&dev->aug_lock);
}

extern "C" void augment_stage_cap_gpu(Device *dev, size_t bytes) {
    size_t planned = (dev->aug.size / 2) & ~(size_t)255;   // as input_init split the arena
    for (int k = 0; k < 2; k++) dev->aug_stage[k].cap = dev->aug_stage[k].buf && bytes < planned ? bytes : planned;
}

extern "C" size_t augment_stage_bytes_gpu(int max_n, int S) {
    return 2 * r256((size_t)max_n * AUG_STAGE_IMAGES * S * S * 3);
}

extern "C" size_t augment_scratch_bytes_gpu(int S, int S_aug, int max_n) {
    size_t image = r256((size_t)S * S * 3), tables = r256(sizeof(AugHsvTables));
    size_t one = (8 + 1 + 1) * image + tables;     // augment_pixels_gpu's sample: tiles, body, out; tables
    size_t body = r256((size_t)S_aug * S_aug * 3);
    size_t run = max_n > 0 ? r256((size_t)max_n * sizeof(DevAug)) + (size_t)max_n * (body + tables) : 0;
    // + one sample's deferred sources (the loader's defer_decode: at most 4 S² stored pixels each), so a run of
    // one always fits; longer runs take what the step's scratch has free
    if (max_n > 0) run += AUG_MAX_SOURCES * (body + r256((size_t)4 * S_aug * S_aug * 3));
    return one > run ? one : run;                  // never at once: the step's runs, or the backend's dev.augment
}

// The same into host memory (the backend table's augment slot): waits for the bytes.
extern "C" void augment_pixels_gpu(Device *dev, const AugRecipe *r, const Image *tiles, uint8_t *host_out) {
    int W, H;
    augment_recipe_size(r, &W, &H);
    size_t n = (size_t)W * H * 3, mark = dev->scratch.used;
    uint8_t *out = (uint8_t *)arena_take(&dev->scratch, n, 256);
    augment_apply_gpu(dev, r, tiles, out);
    checkCuda(cudaMemcpyAsync(host_out, out, n, cudaMemcpyDeviceToHost, dev->stream));
    device_sync(dev);
    dev->scratch.used = mark;
}
