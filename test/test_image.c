// test_image.c: io/image.h: JPEG and PNG decode of every colour layout (files made here with libjpeg
// and libpng), rejection of truncated, empty, foreign and oversized files, probe, encode round
// trips, resize against double-precision references, drawing with guard bytes, coco128 files.
#include "io/image.h"
#include "test/test.h"

#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

static const char *tmp;   // test_tmpdir("img"), set in main

static const char *tmp_path(const char *name) {
    static char buf[8][4096];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) { printf("cannot write %s\n", path); exit(1); }
    fclose(f);
}

static uint8_t *read_bytes(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) { printf("cannot read %s\n", path); exit(1); }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    rewind(f);
    uint8_t *p = malloc(*n);
    if (fread(p, 1, *n, f) != *n) { printf("short read %s\n", path); exit(1); }
    fclose(f);
    return p;
}

// A smooth test picture, which JPEG (with 4:2:0 chroma) keeps close.
static Image make_picture(int w, int h) {
    Image im = image_new(w, h, 0);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = im.px + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(255 * x / (w - 1));
            p[1] = (uint8_t)(255 * y / (h - 1));
            p[2] = (uint8_t)(128 + 100 * sin(x / 9.0) * cos(y / 7.0));
        }
    return im;
}

static Image make_random(int w, int h, uint64_t seed) {
    Image im = image_new(w, h, 0);
    Rng r = rng_for(seed, 0, 0);
    for (size_t i = 0; i < (size_t)w * h * 3; i++) im.px[i] = (uint8_t)rng_int(&r, 256);
    return im;
}

static int px_at(const Image *im, int x, int y, int c) { return im->px[((size_t)y * im->w + x) * 3 + c]; }

// Writes a PNG of any layout with libpng. data: packed rows as PNG stores them (16-bit big-endian).
typedef struct {
    int w, h, type, depth, interlace;
    const uint8_t *data;
    const png_color *pal; int npal;
    const uint8_t *trns; int ntrns;
} PngSpec;

static void write_png(const char *path, const PngSpec *s) {
    FILE *f = fopen(path, "wb");
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_init_io(png, f);
    png_set_IHDR(png, info, s->w, s->h, s->depth, s->type, s->interlace, 0, 0);
    if (s->pal) png_set_PLTE(png, info, s->pal, s->npal);
    if (s->trns) png_set_tRNS(png, info, s->trns, s->ntrns, NULL);
    png_write_info(png, info);
    int channels = s->type == 0 || s->type == 3 ? 1 : s->type == 4 ? 2 : s->type == 2 ? 3 : 4;
    size_t rowbytes = ((size_t)s->w * channels * s->depth + 7) / 8;
    png_bytep rows[64];
    for (int y = 0; y < s->h; y++) rows[y] = (png_bytep)s->data + y * rowbytes;
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(f);
}

// Writes a JPEG with libjpeg: comps 1 (gray), 3 (RGB) or 4 (CMYK, with libjpeg's Adobe marker).
static void write_jpeg(const char *path, int w, int h, int comps, const uint8_t *data, int quality,
                       int progressive) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    FILE *f = fopen(path, "wb");
    jpeg_stdio_dest(&c, f);
    c.image_width = w; c.image_height = h; c.input_components = comps;
    c.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 3 ? JCS_RGB : JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    if (progressive) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = (JSAMPROW)data + (size_t)c.next_scanline * w * comps;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    fclose(f);
}

static double mean_abs_diff(const Image *a, const Image *b, int *max) {
    double s = 0;
    *max = 0;
    for (size_t i = 0; i < (size_t)a->w * a->h * 3; i++) {
        int d = abs(a->px[i] - b->px[i]);
        s += d;
        if (d > *max) *max = d;
    }
    return s / ((double)a->w * a->h * 3);
}

// Loads `path`, checks probe and image_info agree with the decoded size.
static int load_checked(const char *path, Image *im) {
    Err e;
    int rc = image_load(path, im, &e);
    CHECK(rc == 0, "%s", e.msg);
    if (rc) return -1;
    int w, h;
    CHECK(image_probe(path, &w, &h, &e) == 0, "%s", e.msg);
    CHECK(w == im->w && h == im->h, "%s: probe %dx%d, decode %dx%d", path, w, h, im->w, im->h);
    return 0;
}

static void test_png_roundtrip(void) {
    Image a = make_random(37, 23, 1), b;
    Err e;
    const char *path = tmp_path("rt.png");
    CHECK(image_save_png(path, &a, &e) == 0, "%s", e.msg);
    CHECK(access(tmp_path("rt.png.tmp"), F_OK) != 0, "temporary file left behind");
    if (load_checked(path, &b) == 0) {
        CHECK(b.w == 37 && b.h == 23 && !memcmp(a.px, b.px, 37 * 23 * 3), "PNG round trip not exact");
        image_free(&b);
    }
    CHECK(image_save_png("/nonexistent-dir/x.png", &a, &e) == -1 && strstr(e.msg, "/nonexistent-dir/x.png"),
          "saving into a missing folder: %s", e.msg);
    image_free(&a);
}

static void test_jpeg_roundtrip(void) {
    Image a = make_picture(96, 64), b;
    Err e;
    const char *path = tmp_path("rt.jpg");
    CHECK(image_save_jpeg(path, &a, 95, &e) == 0, "%s", e.msg);
    if (load_checked(path, &b) == 0) {
        int max;
        double mad = mean_abs_diff(&a, &b, &max);
        CHECK(b.w == 96 && b.h == 64 && mad < 2.0 && max < 60, "q95 mean |diff| %.2f, max %d", mad, max);
        image_free(&b);
    }
    image_free(&a);
}

static void test_png_layouts(void) {
    enum { W = 5, H = 3 };
    uint8_t gray[W * H], rgba[W * H * 4], ga[W * H * 2], idx[W * H], rgb16[W * H * 6], bits1[H];
    for (int i = 0; i < W * H; i++) {
        gray[i] = (uint8_t)(i * 17);
        for (int c = 0; c < 4; c++) rgba[4 * i + c] = (uint8_t)(i * 10 + c * 50);
        ga[2 * i] = (uint8_t)(i * 13); ga[2 * i + 1] = (uint8_t)(255 - i);
        idx[i] = (uint8_t)(i % 3);
        for (int c = 0; c < 3; c++) { rgb16[6 * i + 2 * c] = (uint8_t)(i * 7 + c); rgb16[6 * i + 2 * c + 1] = 0xEE; }
    }
    for (int y = 0; y < H; y++) bits1[y] = 0xA8;   // 1-bit gray: 1 0 1 0 1
    png_color pal[3] = { { 10, 20, 30 }, { 200, 100, 0 }, { 1, 2, 3 } };
    uint8_t trns[3] = { 0, 128, 255 };
    struct { const char *name; PngSpec s; } cases[] = {
        { "gray8.png",   { W, H, PNG_COLOR_TYPE_GRAY, 8, 0, gray, NULL, 0, NULL, 0 } },
        { "gray1.png",   { W, H, PNG_COLOR_TYPE_GRAY, 1, 0, bits1, NULL, 0, NULL, 0 } },
        { "ga.png",      { W, H, PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, ga, NULL, 0, NULL, 0 } },
        { "rgba.png",    { W, H, PNG_COLOR_TYPE_RGBA, 8, 0, rgba, NULL, 0, NULL, 0 } },
        { "pal.png",     { W, H, PNG_COLOR_TYPE_PALETTE, 8, 0, idx, pal, 3, trns, 3 } },
        { "rgb16.png",   { W, H, PNG_COLOR_TYPE_RGB, 16, 0, rgb16, NULL, 0, NULL, 0 } },
        { "rgba_i.png",  { W, H, PNG_COLOR_TYPE_RGBA, 8, PNG_INTERLACE_ADAM7, rgba, NULL, 0, NULL, 0 } },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const char *path = tmp_path(cases[k].name);
        write_png(path, &cases[k].s);
        Image im;
        if (load_checked(path, &im)) continue;
        int bad = 0;
        for (int i = 0; i < W * H; i++)
            for (int c = 0; c < 3; c++) {
                int want = k == 0 ? gray[i] : k == 1 ? (i % W % 2 ? 0 : 255) : k == 2 ? ga[2 * i]
                         : k == 3 || k == 6 ? rgba[4 * i + c]
                         : k == 4 ? (c == 0 ? pal[idx[i]].red : c == 1 ? pal[idx[i]].green : pal[idx[i]].blue)
                         : rgb16[6 * i + 2 * c];   // 16-bit: the high byte
                bad += im.px[3 * i + c] != want;
            }
        CHECK(im.w == W && im.h == H && bad == 0, "%s: %d wrong values", cases[k].name, bad);
        image_free(&im);
    }
}

static void test_jpeg_layouts(void) {
    enum { W = 32, H = 16 };
    uint8_t gray[W * H], cmyk[W * H * 4];
    for (int i = 0; i < W * H; i++) {
        gray[i] = (uint8_t)(i % W < W / 2 ? 60 : 190);
        // Adobe (inverted) CMYK as Photoshop stores it: 255 = no ink.
        static const uint8_t patch[2][4] = { { 255, 128, 40, 200 }, { 30, 255, 255, 255 } };
        memcpy(cmyk + 4 * i, patch[i % W >= W / 2], 4);
    }
    Image im;
    write_jpeg(tmp_path("gray.jpg"), W, H, 1, gray, 100, 0);
    if (load_checked(tmp_path("gray.jpg"), &im) == 0) {
        int bad = 0;
        for (int i = 0; i < W * H; i++)
            for (int c = 0; c < 3; c++) bad += abs(im.px[3 * i + c] - gray[i]) > 2;
        CHECK(bad == 0, "grayscale JPEG: %d values off by more than 2", bad);
        image_free(&im);
    }
    write_jpeg(tmp_path("cmyk.jpg"), W, H, 4, cmyk, 100, 0);
    if (load_checked(tmp_path("cmyk.jpg"), &im) == 0) {
        // OpenCV's inverted-CMYK conversion: v = k - (255 - c) * k / 256.
        static const int want[2][3] = { { 200, 101, 33 }, { 31, 255, 255 } };
        int bad = 0;
        for (int y = 2; y < H - 2; y++)
            for (int x = 2; x < W - 2; x++)
                for (int c = 0; c < 3; c++)
                    if (x < W / 2 - 2 || x >= W / 2 + 2) bad += abs(px_at(&im, x, y, c) - want[x >= W / 2][c]) > 3;
        CHECK(bad == 0, "CMYK JPEG: %d values off by more than 3 (first pixel %d %d %d)", bad,
              im.px[0], im.px[1], im.px[2]);
        image_free(&im);
    }
    Image pic = make_picture(64, 48), b;
    write_jpeg(tmp_path("prog.jpg"), 64, 48, 3, pic.px, 95, 1);
    if (load_checked(tmp_path("prog.jpg"), &b) == 0) {
        int max;
        double mad = mean_abs_diff(&pic, &b, &max);
        CHECK(mad < 2.0, "progressive JPEG: mean |diff| %.2f", mad);
        image_free(&b);
    }
    image_free(&pic);
}

// Cuts `src` to each length in cut[] and checks the load fails naming the file.
static void check_cuts(const char *src, const char *ext, const size_t *cut, int ncut) {
    size_t n;
    uint8_t *all = read_bytes(src, &n);
    for (int k = 0; k < ncut; k++) {
        if (cut[k] >= n) continue;
        char name[64];
        snprintf(name, sizeof name, "cut%zu.%s", cut[k], ext);
        const char *path = tmp_path(name);
        write_bytes(path, all, cut[k]);
        Image im;
        Err e = { "" };
        int rc = image_load(path, &im, &e);
        CHECK(rc == -1 && strstr(e.msg, path), "%s cut at %zu of %zu bytes: rc %d, msg '%s'", ext, cut[k], n,
              rc, e.msg);
        CHECK(im.px == NULL, "failed load left pixels");
        if (rc == 0) image_free(&im);
    }
    free(all);
}

static void test_truncated(void) {
    Image pic = make_picture(64, 48);
    Err e;
    image_save_jpeg(tmp_path("full.jpg"), &pic, 90, &e);
    image_save_png(tmp_path("full.png"), &pic, &e);
    size_t nj, np;
    free(read_bytes(tmp_path("full.jpg"), &nj));
    free(read_bytes(tmp_path("full.png"), &np));
    size_t jcuts[] = { 1, 2, 3, 10, 100, 300, nj / 2, nj - 100, nj - 10, nj - 3 };
    size_t pcuts[] = { 3, 8, 20, 33, 40, np / 2, np - 20, np - 12, np - 1 };
    check_cuts(tmp_path("full.jpg"), "jpg", jcuts, 10);
    check_cuts(tmp_path("full.png"), "png", pcuts, 9);
    // Only the EOI marker missing: every pixel is there, so it decodes (documented policy).
    size_t n;
    uint8_t *all = read_bytes(tmp_path("full.jpg"), &n);
    Image a, b;
    image_decode_mem(all, n, "full", &a, &e);
    int rc = image_decode_mem(all, n - 2, "noeoi", &b, &e);
    CHECK(rc == 0 && b.w == a.w && !memcmp(a.px, b.px, (size_t)a.w * a.h * 3), "JPEG without EOI: %s", e.msg);
    if (rc == 0) image_free(&b);
    image_free(&a);
    free(all);
    image_free(&pic);
}

// Random byte damage must give 0 or -1, never a crash (and under ASan, no bad access).
static void test_corrupt_bytes(void) {
    const char *files[] = { "full.jpg", "full.png", "prog.jpg" };
    Rng r = rng_for(7, 0, 0);
    int fails = 0, n_ok = 0;
    for (int f = 0; f < 3; f++) {
        size_t n;
        uint8_t *orig = read_bytes(tmp_path(files[f]), &n), *buf = malloc(n);
        for (int t = 0; t < 150; t++) {
            memcpy(buf, orig, n);
            for (int k = 0; k < 1 + t % 4; k++) buf[rng_int(&r, (int)n)] = (uint8_t)rng_int(&r, 256);
            Image im;
            Err e = { "" };
            int rc = image_decode_mem(buf, n, files[f], &im, &e);
            if (rc == 0) { n_ok++; image_free(&im); }
            else fails += !strstr(e.msg, files[f]);
        }
        free(orig);
        free(buf);
    }
    CHECK(fails == 0, "%d errors without the file name", fails);
    CHECK(n_ok < 450, "every damaged file decoded: damage not detected");
}

static void test_bad_files(void) {
    Image im;
    Err e = { "" };
    const char *empty = tmp_path("empty.jpg"), *text = tmp_path("notes.jpg");
    write_bytes(empty, "", 0);
    write_bytes(text, "hello, this is text\n", 20);
    CHECK(image_load(empty, &im, &e) == -1 && strstr(e.msg, empty) && strstr(e.msg, "empty"), "%s", e.msg);
    CHECK(image_load(text, &im, &e) == -1 && strstr(e.msg, text) && strstr(e.msg, "not a JPEG or PNG"),
          "%s", e.msg);
    int w, h;
    CHECK(image_probe(text, &w, &h, &e) == -1 && strstr(e.msg, text), "%s", e.msg);
    CHECK(image_load(tmp_path("missing.png"), &im, &e) == -1 && strstr(e.msg, "missing.png"), "%s", e.msg);
    CHECK(image_decode_mem((const uint8_t *)"GIF89a", 6, "x.gif", &im, &e) == -1 && strstr(e.msg, "GIF"),
          "%s", e.msg);
}

// image_info_mem (the loader's header probe of a file it read) agrees with image_info on every layout, and refuses
// what image_info refuses from the bytes, naming the file; image_read_file refuses what image_load refuses.
static void test_info_from_memory(void) {
    const char *files[] = { "gray.jpg", "cmyk.jpg", "prog.jpg", "full.jpg", "full.png" };
    static const int channels[] = { 1, 4, 3, 3, 3 };
    Err e = { "" };
    for (int f = 0; f < 5; f++) {
        uint8_t *b;
        size_t n;
        ImageInfo want, got;
        if (image_read_file(tmp_path(files[f]), &b, &n, &e)) { CHECK(0, "%s", e.msg); continue; }
        CHECK(image_info(tmp_path(files[f]), &want, &e) == 0, "%s", e.msg);
        CHECK(image_info_mem(b, n, files[f], &got, &e) == 0 && got.w == want.w && got.h == want.h &&
              got.channels == want.channels && got.channels == channels[f] && !strcmp(got.format, want.format) &&
              got.orientation == 0, "%s: image_info_mem %dx%d %d channels, image_info %dx%d %d", files[f], got.w,
              got.h, got.channels, want.w, want.h, want.channels);
        for (size_t cut = 1; cut < (f == 4 ? 33 : 200) && cut < n; cut *= 3)   // inside the header (PNG's: 33 bytes)
            CHECK(image_info_mem(b, cut, "cut-header", &got, &e) == -1 && strstr(e.msg, "cut-header"),
                  "%s cut at %zu: %s", files[f], cut, e.msg);
        free(b);
    }
    CHECK(image_info_mem((const uint8_t *)"", 0, "none.jpg", &(ImageInfo){ 0 }, &e) == -1 && strstr(e.msg, "none.jpg") &&
          strstr(e.msg, "empty"), "%s", e.msg);
    CHECK(image_info_mem((const uint8_t *)"GIF89a", 6, "x.gif", &(ImageInfo){ 0 }, &e) == -1 && strstr(e.msg, "GIF"),
          "%s", e.msg);
    uint8_t *b = (uint8_t *)1;
    size_t n = 1;
    CHECK(image_read_file(tmp_path("empty.jpg"), &b, &n, &e) == -1 && !b && !n && strstr(e.msg, "empty.jpg"),
          "%s", e.msg);
    CHECK(image_read_file(tmp_path("missing.png"), &b, &n, &e) == -1 && strstr(e.msg, "missing.png"), "%s", e.msg);
}

static void put_chunk(uint8_t *p, const char *type, const uint8_t *data, uint32_t len) {
    uint8_t be[4] = { len >> 24, len >> 16, len >> 8, len };
    memcpy(p, be, 4);
    memcpy(p + 4, type, 4);
    if (len) memcpy(p + 8, data, len);
    uint32_t crc = (uint32_t)crc32(crc32(0, (const uint8_t *)type, 4), data, len);
    uint8_t cb[4] = { crc >> 24, crc >> 16, crc >> 8, crc };
    memcpy(p + 8 + len, cb, 4);
}

// Headers that claim 10^10 pixels are refused from the header, before any allocation (fast).
static void test_huge_headers(void) {
    uint8_t png[8 + 25 + 12 + 8 + 12] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    uint8_t ihdr[13] = { 0, 1, 0x86, 0xA0, 0, 1, 0x86, 0xA0, 8, 2, 0, 0, 0 };   // 100000 x 100000 RGB
    uint8_t idat[8] = { 0x78, 0x9c, 0, 0, 0, 0, 0, 0 };
    put_chunk(png + 8, "IHDR", ihdr, 13);
    put_chunk(png + 33, "IDAT", idat, 8);
    put_chunk(png + 53, "IEND", NULL, 0);
    const char *pp = tmp_path("huge.png");
    write_bytes(pp, png, sizeof png);
    Image pic = make_picture(32, 32), im;
    Err e = { "" };
    image_save_jpeg(tmp_path("small.jpg"), &pic, 90, &e);
    size_t n;
    uint8_t *jpg = read_bytes(tmp_path("small.jpg"), &n);
    for (size_t i = 0; i + 8 < n; i++)
        if (jpg[i] == 0xFF && jpg[i + 1] == 0xC0) {   // SOF0: length, precision, height, width
            jpg[i + 5] = 0xEA; jpg[i + 6] = 0x60; jpg[i + 7] = 0xEA; jpg[i + 8] = 0x60;   // 60000 x 60000
            break;
        }
    const char *jp = tmp_path("huge.jpg");
    write_bytes(jp, jpg, n);
    free(jpg);
    size_t allocs = alloc_count();
    double t0 = now_seconds();
    int w, h;
    CHECK(image_load(pp, &im, &e) == -1 && strstr(e.msg, pp) && strstr(e.msg, "megapixel"), "%s", e.msg);
    CHECK(image_probe(pp, &w, &h, &e) == -1 && strstr(e.msg, "100000x100000"), "%s", e.msg);
    CHECK(image_load(jp, &im, &e) == -1 && strstr(e.msg, jp) && strstr(e.msg, "megapixel"), "%s", e.msg);
    CHECK(image_probe(jp, &w, &h, &e) == -1 && strstr(e.msg, "60000x60000"), "%s", e.msg);
    double dt = now_seconds() - t0;
    CHECK(dt < 0.5, "refusing huge headers took %.3f s", dt);
    CHECK(alloc_count() - allocs == 2, "expected only the two file buffers, got %zu allocations",
          alloc_count() - allocs);
    image_free(&pic);
}

static void test_resize_constant(void) {
    Image a = image_new(37, 29, 173);
    int sizes[][2] = { { 13, 7 }, { 64, 64 }, { 37, 10 }, { 18, 14 }, { 100, 3 }, { 1, 1 } };
    for (int k = 0; k < 6; k++)
        for (int area = 0; area < 2; area++) {
            Image b = image_resize(&a, sizes[k][0], sizes[k][1], area);
            int bad = 0;
            for (size_t i = 0; i < (size_t)b.w * b.h * 3; i++) bad += b.px[i] != 173;
            CHECK(bad == 0, "%dx%d area=%d: %d pixels changed", b.w, b.h, area, bad);
            image_free(&b);
        }
    image_free(&a);
}

// Double-precision bilinear with the same pixel-centre mapping and border clamping.
static double linear_ref(const Image *im, int ow, int oh, int ox, int oy, int c) {
    double fx = (ox + 0.5) * im->w / ow - 0.5, fy = (oy + 0.5) * im->h / oh - 0.5;
    double x = fx < 0 ? 0 : fx > im->w - 1 ? im->w - 1 : fx, y = fy < 0 ? 0 : fy > im->h - 1 ? im->h - 1 : fy;
    int x0 = (int)x, y0 = (int)y, x1 = x0 + 1 < im->w ? x0 + 1 : x0, y1 = y0 + 1 < im->h ? y0 + 1 : y0;
    double ax = x - x0, ay = y - y0;
    return (1 - ay) * ((1 - ax) * px_at(im, x0, y0, c) + ax * px_at(im, x1, y0, c))
         + ay * ((1 - ax) * px_at(im, x0, y1, c) + ax * px_at(im, x1, y1, c));
}

// Double-precision box filter: output (ox,oy) averages source [ox*sx, (ox+1)*sx) x [oy*sy, ...).
static double area_ref(const Image *im, int ow, int oh, int ox, int oy, int c) {
    double sx = (double)im->w / ow, sy = (double)im->h / oh, sum = 0;
    for (int y = (int)(oy * sy); y < im->h && y < (oy + 1) * sy; y++)
        for (int x = (int)(ox * sx); x < im->w && x < (ox + 1) * sx; x++) {
            double wx = fmin(x + 1, (ox + 1) * sx) - fmax(x, ox * sx);
            double wy = fmin(y + 1, (oy + 1) * sy) - fmax(y, oy * sy);
            sum += wx * wy * px_at(im, x, y, c);
        }
    return sum / (sx * sy);
}

static void test_resize_vs_reference(void) {
    Image a = make_random(41, 27, 3);
    int sizes[][2] = { { 20, 13 }, { 17, 9 }, { 64, 50 }, { 41, 60 }, { 8, 27 }, { 123, 81 }, { 14, 9 } };
    for (int k = 0; k < 7; k++)
        for (int area = 0; area < 2; area++) {
            int ow = sizes[k][0], oh = sizes[k][1];
            int box = area && ow <= a.w && oh <= a.h;
            Image b = image_resize(&a, ow, oh, area);
            double worst = 0;
            for (int y = 0; y < oh; y++)
                for (int x = 0; x < ow; x++)
                    for (int c = 0; c < 3; c++) {
                        double ref = box ? area_ref(&a, ow, oh, x, y, c) : linear_ref(&a, ow, oh, x, y, c);
                        worst = fmax(worst, fabs(px_at(&b, x, y, c) - ref));
                    }
            CHECK(worst <= 1.0, "41x27 -> %dx%d %s: worst |diff| %.3f", ow, oh, box ? "area" : "linear", worst);
            image_free(&b);
        }
    image_free(&a);
}

static void test_resize_area_blocks(void) {
    Image a = image_new(4, 4, 0);
    for (int y = 0; y < 4; y++)
        for (int x = 0; x < 4; x++)
            for (int c = 0; c < 3; c++) a.px[(y * 4 + x) * 3 + c] = (uint8_t)(x * 40 + y * 8 + c + ((x + y) % 2 ? 0 : 4));
    Image b = image_resize(&a, 2, 2, 1);
    int bad = 0;
    for (int y = 0; y < 2; y++)
        for (int x = 0; x < 2; x++)
            for (int c = 0; c < 3; c++) {
                int sum = 0;
                for (int k = 0; k < 4; k++) sum += px_at(&a, 2 * x + k % 2, 2 * y + k / 2, c);
                bad += sum % 4 != 0 || px_at(&b, x, y, c) != sum / 4;
            }
    CHECK(bad == 0, "4x4 -> 2x2 area: %d pixels differ from the block means", bad);
    image_free(&b);
    a.px[0] = 2; a.px[3] = 0; a.px[12] = 0; a.px[15] = 0;   // block sum 2: mean 0.5 rounds up, as OpenCV
    b = image_resize(&a, 2, 2, 1);
    CHECK(b.px[0] == 1, "2x2 mean 0.5 gave %d, OpenCV gives 1", b.px[0]);
    image_free(&b);
    image_free(&a);
}

// Draws into an image that sits inside a larger buffer; the bytes around it must not change.
static void test_draw_rect(void) {
    enum { W = 20, H = 10, GUARD = 64 };
    uint8_t *buf = malloc(W * H * 3 + 2 * GUARD);
    memset(buf, 0xAB, W * H * 3 + 2 * GUARD);
    Image im = { W, H, buf + GUARD };
    memset(im.px, 0, W * H * 3);
    const uint8_t red[3] = { 255, 0, 0 };
    image_draw_rect(&im, 2, 1, 8, 6, 1, red);
    int bad = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int on_edge = (x == 2 || x == 8) && y >= 1 && y <= 6;
            on_edge |= (y == 1 || y == 6) && x >= 2 && x <= 8;
            bad += px_at(&im, x, y, 0) != (on_edge ? 255 : 0) || px_at(&im, x, y, 1) != 0;
        }
    CHECK(bad == 0, "1-pixel rectangle: %d pixels wrong", bad);
    memset(im.px, 0, W * H * 3);
    image_draw_rect(&im, 15, 7, 10, 2, 2, red);          // corners in either order, thickness 2
    CHECK(px_at(&im, 10, 2, 0) == 255 && px_at(&im, 11, 3, 0) == 255 && px_at(&im, 12, 4, 0) == 0 &&
          px_at(&im, 15, 7, 0) == 255 && px_at(&im, 14, 6, 0) == 255 && px_at(&im, 9, 2, 0) == 0,
          "thick rectangle pixels wrong");
    image_draw_rect(&im, -100, -50, 300, 200, 7, red);   // far outside on every side
    image_draw_rect(&im, -5, -5, 3, 3, 30, red);
    image_draw_text_scaled(&im, -7, -3, 2, "clip me", red, red);
    image_draw_text(&im, W - 3, H - 4, "edge", red, red);
    int guard_bad = 0;
    for (int i = 0; i < GUARD; i++) guard_bad += buf[i] != 0xAB || buf[GUARD + W * H * 3 + i] != 0xAB;
    CHECK(guard_bad == 0, "%d guard bytes written outside the image", guard_bad);
    free(buf);
}

static void test_draw_text(void) {
    Image im = image_new(40, 20, 0);
    const uint8_t fg[3] = { 255, 255, 255 }, bg[3] = { 0, 0, 200 };
    int w, h;
    image_text_size("I|", 1, &w, &h);
    CHECK(w == 13 && h == 9, "text box %dx%d, want 13x9", w, h);
    image_draw_text(&im, 3, 2, "I|", fg, bg);
    // Box corners are background; '|' (glyph 2) is a full column at x = 3 + 1 + 6 + 2, rows 3..9.
    CHECK(px_at(&im, 3, 2, 2) == 200 && px_at(&im, 15, 10, 2) == 200 && px_at(&im, 16, 2, 2) == 0,
          "background box wrong");
    int col = 0;
    for (int y = 3; y < 10; y++) col += px_at(&im, 12, y, 0) == 255;
    CHECK(col == 7 && px_at(&im, 12, 10, 0) == 0 && px_at(&im, 11, 5, 0) == 0, "'|' column has %d of 7 pixels", col);
    image_free(&im);
    im = image_new(40, 20, 0);
    image_draw_text_scaled(&im, 0, 0, 2, "|", fg, NULL);   // scale 2: a 2-pixel-wide column
    CHECK(px_at(&im, 6, 4, 0) == 255 && px_at(&im, 7, 4, 0) == 255 && px_at(&im, 5, 4, 0) == 0 &&
          px_at(&im, 0, 0, 2) == 0, "scaled text wrong");
    image_free(&im);
}

static void test_coco_decode(void) {
    const char *sd = shared_dir();
    if (!sd) SKIP("no shared folder");
    char path[4200];
    snprintf(path, sizeof path, "%s/data/coco128/images/train2017/000000000009.jpg", sd);
    if (access(path, R_OK) != 0) SKIP("%.200s missing", path);
    Image im;
    if (load_checked(path, &im)) return;
    CHECK(im.w == 640 && im.h == 480, "size %dx%d, want 640x480", im.w, im.h);
    image_free(&im);
}

// coco128 holds exactly one grayscale JPEG; image_info finds it and the decode is RGB with R=G=B.
static void test_coco_grayscale(void) {
    const char *sd = shared_dir();
    if (!sd) SKIP("no shared folder");
    char dir[4200], path[4500], gray_path[4500] = "";
    snprintf(dir, sizeof dir, "%s/data/coco128/images/train2017", sd);
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "ls '%s' 2>/dev/null", dir);
    FILE *ls = popen(cmd, "r");
    if (!ls) SKIP("cannot list %.200s", dir);
    int n_files = 0, n_gray = 0;
    char name[256];
    while (fgets(name, sizeof name, ls)) {
        name[strcspn(name, "\n")] = 0;
        snprintf(path, sizeof path, "%s/%s", dir, name);
        ImageInfo info;
        Err e;
        n_files++;
        CHECK(image_info(path, &info, &e) == 0, "%s", e.msg);
        if (info.channels == 1) { n_gray++; snprintf(gray_path, sizeof gray_path, "%s", path); }
    }
    pclose(ls);
    if (n_files == 0) SKIP("%.200s is empty or missing", dir);
    CHECK(n_files == 128 && n_gray == 1, "%d files, %d grayscale", n_files, n_gray);
    Image im;
    if (!gray_path[0] || load_checked(gray_path, &im)) return;
    int bad = 0;
    for (size_t i = 0; i < (size_t)im.w * im.h; i++) bad += im.px[3 * i] != im.px[3 * i + 1] || im.px[3 * i] != im.px[3 * i + 2];
    CHECK(bad == 0, "%s: %d pixels not gray", gray_path, bad);
    image_free(&im);
}

int main(void) {
    tmp = test_tmpdir("img");
    RUN(test_png_roundtrip);
    RUN(test_jpeg_roundtrip);
    RUN(test_png_layouts);
    RUN(test_jpeg_layouts);
    RUN(test_truncated);
    RUN(test_corrupt_bytes);
    RUN(test_bad_files);
    RUN(test_info_from_memory);
    RUN(test_huge_headers);
    RUN(test_resize_constant);
    RUN(test_resize_vs_reference);
    RUN(test_resize_area_blocks);
    RUN(test_draw_rect);
    RUN(test_draw_text);
    RUN(test_coco_decode);
    RUN(test_coco_grayscale);
    return test_summary();
}
