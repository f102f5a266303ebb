// augment.cu: the device twin of io/augment.c's augment_apply_pixels (issue 37): a training sample's
// bytes from its recipe (drawn on the host) and its decoded uint8 sources, uploaded per sample. Same
// integer and fixed-point arithmetic as the CPU path, byte for byte: OpenCV's 1/32 px bilinear warp
// (positions as warpAffine / warpPerspective compute them), image_resize's INTER_LINEAR for a letterbox
// body, mixup's truncated blend, HSV through the same folded tables, then the flips. Every double and
// float operation is written as its correctly rounded intrinsic (__dmul_rn, __fadd_rn, ...), so nvcc
// fuses none into an FMA the CPU does not make.
// out = (no accumulation). Legend: W,H output size; (x,y) output pixel; (sx,sy) top-left source tap;
// w,h and ow,oh a resize's input and output sizes; 1/32 px = one "tab".
#include <limits.h>

#include "gpu/kernel_util.h"

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

// One output pixel: the flips say which pre-flip pixel it shows; that pixel is warp 0 (mixed with warp
// 1), then HSV. Into bytes (out), or into the model's input as byte / 255.0f (outf: gpu/input.cu's
// conversion, the CPU's x / 255.0f).
__global__ void augment_sample_kernel(DevAug a, uint8_t *out, float *outf) {
    pdl_entry();
    GRID_STRIDE(i, (size_t)a.W * a.H) {
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

// A grey sample (the loader's stand-in when no image loads): an affine warp of an empty (0x0) plane, its
// inverse all zeros, puts every tap at (0, 0), outside the plane: PAD_VALUE everywhere.
static void grey_into(Device *dev, int W, int H, float *outf) {
    DevAug a;
    memset(&a, 0, sizeof a);
    a.W = W, a.H = H, a.warp[0].affine = 1;
    size_t n = (size_t)W * H;
    augment_sample_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(a, NULL, outf);
    checkLaunch(dev);
}

extern "C" void augment_batch_gpu(Device *dev, const AugSample *s, int n, int H, int W, float *dst) {
    size_t px = (size_t)H * W * 3;
    for (int i = 0; i < n; i++) {
        int w = W, h = H;
        if (!s[i].grey) augment_recipe_size(&s[i].r, &w, &h);
        if (w != W || h != H) die("augment_batch_gpu: sample %d's recipe makes %dx%d, the batch is %dx%d", i, w, h, W, H);
        if (s[i].grey) grey_into(dev, W, H, dst + i * px);
        else apply_into(dev, &s[i].r, s[i].tiles, NULL, dst + i * px);
    }
}

extern "C" size_t augment_scratch_bytes_gpu(int S) {
    size_t image = ((size_t)S * S * 3 + 255) & ~(size_t)255;
    return (8 + 1 + 1) * image + ((sizeof(AugHsvTables) + 255) & ~(size_t)255);   // tiles, body, out; tables
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
