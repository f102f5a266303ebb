// test_exif.c: EXIF orientation (io/exif.c) as cv2.imread applies it. JPEGs are made here with
// libjpeg from an asymmetric picture, then an APP1 "Exif" segment holding each of the 8 orientations
// (both byte orders) is spliced in after SOI; the decoded pixels must be the plain decode moved by
// OpenCV's transpose and flip, written here independently of io/exif.c, and the header-only size
// (what the label check uses) and the dataset's sample size must be the rotated ones. Then hostile
// segments: every truncation, offsets outside the segment, OpenCV's quirks (first APP1 only, a
// broken string entry ends the parse, a third byte order read big-endian).
#include "io/exif.h"
#include "io/dataset.h"
#include "test/jpeg_encode.h"
#include "test/test.h"

// ---- pictures and JPEG bytes ----------------------------------------------------------------------
// 40x24, a gradient plus a white block at the top left: no flip or rotation maps it onto itself.
static Image make_picture(void) {
    Image im = image_new(40, 24, 0);
    for (int y = 0; y < im.h; y++)
        for (int x = 0; x < im.w; x++) {
            uint8_t *p = im.px + ((size_t)y * im.w + x) * 3;
            int mark = x < 8 && y < 8;
            p[0] = mark ? 255 : (uint8_t)(6 * x);
            p[1] = mark ? 255 : (uint8_t)(10 * y);
            p[2] = mark ? 255 : 40;
        }
    return im;
}

// ---- EXIF segments --------------------------------------------------------------------------------
typedef struct { uint8_t b[512]; size_t n; int little; } Seg;   // an APP1 payload being built

static void put16(Seg *s, size_t at, unsigned v) {
    s->b[at + !s->little] = (uint8_t)v;
    s->b[at + s->little] = (uint8_t)(v >> 8);
}
static void put32(Seg *s, size_t at, uint32_t v) {
    for (int i = 0; i < 4; i++) s->b[at + (s->little ? i : 3 - i)] = (uint8_t)(v >> 8 * i);
}

// "Exif\0\0", the TIFF header, IFD0 at TIFF offset 8 with `count` entries (tag, type, count, value),
// then a zero next-IFD offset: 6 + 8 + 2 + 12 count + 4 bytes.
typedef struct { unsigned tag, type; uint32_t count, value; } Entry;

static Seg segment(int little, const Entry *e, int count) {
    Seg s = { .little = little };
    memcpy(s.b, "Exif\0\0", 6);
    memcpy(s.b + 6, little ? "II" : "MM", 2);
    put16(&s, 8, 42);
    put32(&s, 10, 8);
    put16(&s, 14, (unsigned)count);
    for (int i = 0; i < count; i++) {
        size_t at = 16 + 12 * (size_t)i;
        put16(&s, at, e[i].tag);
        put16(&s, at + 2, e[i].type);
        put32(&s, at + 4, e[i].count);
        if (e[i].type == 3 && e[i].count == 1) { put32(&s, at + 8, 0); put16(&s, at + 8, e[i].value); }
        else put32(&s, at + 8, e[i].value);
    }
    put32(&s, 16 + 12 * (size_t)count, 0);
    s.n = 16 + 12 * (size_t)count + 4;
    return s;
}

static Seg orientation_segment(int little, int o) {
    Entry e[2] = { { 0x010F, 2, 4, 0x00414243 }, { 0x0112, 3, 1, (uint32_t)o } };   // Make (inline), Orientation
    return segment(little, e, 2);
}

// The JPEG with APP1 segments (payloads p[0..k)) put right after SOI.
static uint8_t *splice(const uint8_t *jpg, size_t n, const Seg *p, int k, size_t *out_n) {
    size_t extra = 0;
    for (int i = 0; i < k; i++) extra += 4 + p[i].n;
    uint8_t *o = malloc(n + extra), *w = o + 2;
    memcpy(o, jpg, 2);
    for (int i = 0; i < k; i++) {
        size_t len = p[i].n + 2;
        *w++ = 0xFF; *w++ = 0xE1; *w++ = (uint8_t)(len >> 8); *w++ = (uint8_t)len;
        memcpy(w, p[i].b, p[i].n);
        w += p[i].n;
    }
    memcpy(w, jpg + 2, n - 2);
    *out_n = n + extra;
    return o;
}

// ---- OpenCV's primitives, written out: the expected pictures --------------------------------------
static Image transpose(const Image *a) {
    Image t = image_new(a->h, a->w, 0);
    for (int y = 0; y < t.h; y++)
        for (int x = 0; x < t.w; x++) memcpy(t.px + ((size_t)y * t.w + x) * 3, a->px + ((size_t)x * a->w + y) * 3, 3);
    return t;
}

static Image flip(const Image *a, int code) {      // cv::flip: 0 around the x axis, 1 the y axis, -1 both
    Image f = image_new(a->w, a->h, 0);
    for (int y = 0; y < a->h; y++)
        for (int x = 0; x < a->w; x++) {
            int sx = code != 0 ? a->w - 1 - x : x, sy = code != 1 ? a->h - 1 - y : y;
            memcpy(f.px + ((size_t)y * a->w + x) * 3, a->px + ((size_t)sy * a->w + sx) * 3, 3);
        }
    return f;
}

// loadsave.cpp's ExifTransform.
static Image expected(const Image *a, int o) {
    static const int flip_after[9] = { 9, 9, 1, -1, 0, 9, 1, -1, 0 };   // 9: none
    Image t = o >= 5 ? transpose(a) : image_new(a->w, a->h, 0);
    if (o < 5) memcpy(t.px, a->px, (size_t)a->w * a->h * 3);
    if (o < 1 || o > 8 || flip_after[o] == 9) return t;
    Image f = flip(&t, flip_after[o]);
    image_free(&t);
    return f;
}

static int same(const Image *a, const Image *b) {
    return a->w == b->w && a->h == b->h && !memcmp(a->px, b->px, (size_t)a->w * a->h * 3);
}

// Where the white block's centre (4, 4 in the stored picture) is in im: 0 top-left, 1 top-right,
// 2 bottom-left, 3 bottom-right; -1 when no corner is white.
static int white_corner(const Image *im) {
    for (int k = 0; k < 4; k++) {
        int x = k & 1 ? im->w - 5 : 4, y = k & 2 ? im->h - 5 : 4;
        const uint8_t *p = im->px + ((size_t)y * im->w + x) * 3;
        if (p[0] > 240 && p[1] > 240 && p[2] > 240) return k;
    }
    return -1;
}

static const char *tmp;

static const char *write_file(const char *name, const uint8_t *b, size_t n) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n || fclose(f)) { printf("cannot write %s\n", path); exit(1); }
    return path;
}

// ---- tests ----------------------------------------------------------------------------------------
// All 8 orientations, both byte orders: pixels, image_info's size, and the semantics (where the
// top-left block of the stored picture shows up when displayed).
static void test_eight_orientations(void) {
    static const int corner[9] = { 0, 0, 1, 3, 2, 0, 1, 3, 2 };
    Image pic = make_picture();
    size_t n;
    uint8_t *jpg = jpeg_encode_mem(&pic, 95, 0, 0, &n);
    Image plain;
    Err err;
    CHECK(image_decode_mem(jpg, n, "plain", &plain, &err) == 0, "%s", err.msg);
    for (int little = 0; little < 2; little++)
        for (int o = 1; o <= 8; o++) {
            Seg s = orientation_segment(little, o);
            CHECK(exif_orientation(s.b, s.n) == o, "%s %d: read %d", little ? "II" : "MM", o, exif_orientation(s.b, s.n));
            size_t m;
            uint8_t *f = splice(jpg, n, &s, 1, &m);
            Image got, want = expected(&plain, o);
            if (image_decode_mem(f, m, "oriented", &got, &err)) { CHECK(0, "orientation %d: %s", o, err.msg); continue; }
            CHECK(same(&got, &want), "orientation %d (%s): %dx%d, expected %dx%d or other pixels", o,
                  little ? "II" : "MM", got.w, got.h, want.w, want.h);
            CHECK(white_corner(&got) == corner[o], "orientation %d: the top-left block is at corner %d, not %d", o,
                  white_corner(&got), corner[o]);
            ImageInfo info;
            const char *path = write_file("o.jpg", f, m);
            CHECK(image_info(path, &info, &err) == 0, "%s", err.msg);
            CHECK(info.w == got.w && info.h == got.h && info.orientation == o, "orientation %d: image_info %dx%d "
                  "orientation %d, decoded %dx%d", o, info.w, info.h, info.orientation, got.w, got.h);
            ImageInfo mem;                        // the same header from the bytes in memory (the loader's defer_decode)
            CHECK(image_info_mem(f, m, "oriented", &mem, &err) == 0 && mem.w == info.w && mem.h == info.h &&
                  mem.orientation == o && mem.channels == info.channels && !strcmp(mem.format, "JPEG"),
                  "orientation %d: image_info_mem %dx%d orientation %d", o, mem.w, mem.h, mem.orientation);
            Image loaded;
            CHECK(image_load(path, &loaded, &err) == 0 && same(&loaded, &got), "orientation %d: image_load differs", o);
            image_free(&loaded);
            image_free(&got);
            image_free(&want);
            free(f);
        }
    image_free(&plain);
    image_free(&pic);
    free(jpg);
}

// The label check (dataset_open) keeps the rotated size: an orientation-6 40x24 JPEG is 24x40.
static void test_label_check_size(void) {
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/ds/images' '%s/ds/labels'", tmp, tmp);
    if (system(cmd)) { CHECK(0, "mkdir"); return; }
    Image pic = make_picture();
    size_t n, m;
    uint8_t *jpg = jpeg_encode_mem(&pic, 95, 0, 0, &n);
    for (int o = 1; o <= 8; o++) {
        Seg s = orientation_segment(o & 1, o);
        uint8_t *f = splice(jpg, n, &s, 1, &m);
        char name[64];
        snprintf(name, sizeof name, "ds/images/o%d.jpg", o);
        write_file(name, f, m);
        snprintf(name, sizeof name, "ds/labels/o%d.txt", o);
        write_file(name, (const uint8_t *)"0 0.5 0.5 0.2 0.2\n", 18);
        free(f);
    }
    char yaml[4096];
    snprintf(yaml, sizeof yaml, "%s/ds/data.yaml", tmp);
    FILE *y = fopen(yaml, "w");
    fputs("train: images\nval: images\nnames: [thing]\n", y);
    fclose(y);
    Dataset ds;
    Err err;
    DatasetOptions opt = { .quiet = 1, .report = stdout };
    if (dataset_open(yaml, NULL, "train", &opt, &ds, &err)) { CHECK(0, "%s", err.msg); goto out; }
    CHECK(ds.n == 8, "%d images", ds.n);
    for (int i = 0; i < ds.n; i++) {
        int o = atoi(strrchr(ds.s[i].image, 'o') + 1), swap = o >= 5;
        CHECK(ds.s[i].w == (swap ? 24 : 40) && ds.s[i].h == (swap ? 40 : 24), "%s: %dx%d", ds.s[i].image,
              ds.s[i].w, ds.s[i].h);
    }
    dataset_free(&ds);
out:
    image_free(&pic);
    free(jpg);
}

// Only the first APP1 counts (an XMP packet before the Exif one: no orientation, as in OpenCV);
// a JPEG without APP1 and orientation values outside 1..8 are left as stored.
static void test_first_app1_and_odd_values(void) {
    Image pic = make_picture(), plain, got;
    size_t n, m;
    uint8_t *jpg = jpeg_encode_mem(&pic, 95, 0, 0, &n);
    Err err;
    CHECK(image_decode_mem(jpg, n, "plain", &plain, &err) == 0, "%s", err.msg);
    Seg two[2] = { { .n = 40 }, orientation_segment(1, 6) };
    memcpy(two[0].b, "http://ns.adobe.com/xap/1.0/\0<x:xmpmeta/>", 40);
    uint8_t *f = splice(jpg, n, two, 2, &m);
    CHECK(image_decode_mem(f, m, "xmp first", &got, &err) == 0 && same(&got, &plain), "XMP first: rotated");
    image_free(&got);
    free(f);
    f = splice(jpg, n, two + 1, 1, &m);
    CHECK(image_decode_mem(f, m, "exif", &got, &err) == 0 && got.w == 24, "Exif only: %dx%d", got.w, got.h);
    image_free(&got);
    free(f);
    for (int o = 0; o <= 10; o += 9) {            // 0 and 9
        Seg s = orientation_segment(0, o);
        CHECK(exif_orientation(s.b, s.n) == o, "value %d read as %d", o, exif_orientation(s.b, s.n));
        f = splice(jpg, n, &s, 1, &m);
        CHECK(image_decode_mem(f, m, "odd", &got, &err) == 0 && same(&got, &plain), "orientation %d changed it", o);
        image_free(&got);
        free(f);
    }
    image_free(&plain);
    image_free(&pic);
    free(jpg);
}

// Offsets that point outside the segment, counts that run past it, every truncation: never a read
// outside (ASan in CI), and the result is the value only when OpenCV's reader would find it.
static void test_hostile_segments(void) {
    Seg s = orientation_segment(1, 6);
    for (size_t k = 0; k <= s.n; k++) {
        int o = exif_orientation(s.b, k);
        // the orientation value: payload bytes 36-37 (6 + 8 + 2 + 12 + 8), so 38 bytes are needed
        CHECK(o == (k >= 38 ? 6 : 0), "cut at %zu: %d", k, o);
    }
    CHECK(exif_orientation(NULL, 0) == 0, "NULL");
    Seg bad = s;
    put32(&bad, 10, 0xFFFFFFF0u);                  // IFD0 beyond the end (and near uint32 wrap)
    CHECK(exif_orientation(bad.b, bad.n) == 0, "IFD0 outside");
    bad = s;
    put16(&bad, 14, 0xFFFF);                       // 65535 entries in a 42-byte segment
    CHECK(exif_orientation(bad.b, bad.n) == 6, "orientation before the end of a long IFD: %d", exif_orientation(bad.b, bad.n));
    bad = s;
    put16(&bad, 8, 43);                            // not TIFF
    CHECK(exif_orientation(bad.b, bad.n) == 0, "magic 43");
    Entry long_make[2] = { { 0x010F, 2, 100, 4000 }, { 0x0112, 3, 1, 6 } };   // Make's text outside: parse ends
    bad = segment(1, long_make, 2);
    CHECK(exif_orientation(bad.b, bad.n) == 0, "bad Make offset: %d", exif_orientation(bad.b, bad.n));
    Entry wrap[2] = { { 0x013E, 5, 2, 0xFFFFFFFCu }, { 0x0112, 3, 1, 6 } };   // rational offset at the uint32 edge
    bad = segment(0, wrap, 2);
    CHECK(exif_orientation(bad.b, bad.n) == 0, "white point outside: %d", exif_orientation(bad.b, bad.n));
    Entry other[2] = { { 0x9999, 7, 0xFFFFFFFFu, 0xFFFFFFFFu }, { 0x0112, 3, 1, 8 } };   // unknown tag: not read
    bad = segment(0, other, 2);
    CHECK(exif_orientation(bad.b, bad.n) == 8, "unknown tag before: %d", exif_orientation(bad.b, bad.n));
    Entry twice[2] = { { 0x0112, 3, 1, 3 }, { 0x0112, 3, 1, 6 } };            // the first one counts
    bad = segment(1, twice, 2);
    CHECK(exif_orientation(bad.b, bad.n) == 3, "two orientations: %d", exif_orientation(bad.b, bad.n));
    bad = orientation_segment(0, 5);               // "XY" is neither II nor MM: OpenCV reads big-endian
    memcpy(bad.b + 6, "XY", 2);
    CHECK(exif_orientation(bad.b, bad.n) == 5, "third byte order: %d", exif_orientation(bad.b, bad.n));
    Rng r = rng_for(7, 0, 0);                      // random bytes after a valid header
    for (int i = 0; i < 20000; i++) {
        Seg z = s;
        for (int j = 0; j < 4; j++) z.b[14 + rng_int(&r, (int)(z.n - 14))] = (uint8_t)rng_int(&r, 256);
        int o = exif_orientation(z.b, z.n);
        CHECK(o >= 0 && o <= 0xFFFF, "%d", o);
    }
}

int main(void) {
    tmp = test_tmpdir("exif");
    RUN(test_eight_orientations);
    RUN(test_label_check_size);
    RUN(test_first_app1_and_odd_values);
    RUN(test_hostile_segments);
    return test_summary();
}
