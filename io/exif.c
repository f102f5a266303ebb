// exif.c: see exif.h. The reader follows OpenCV 4.x's ExifReader (modules/imgcodecs/src/exif.cpp)
// step by step, because which files get rotated must be the same as in the reference:
//  - the TIFF block starts 6 bytes into the first APP1 payload (OpenCV does not look at the "Exif"
//    signature: an XMP segment that comes first gives no orientation there either);
//  - byte order: "II" little-endian, "MM" big-endian, any other pair is read big-endian; the magic
//    number 42 must follow;
//  - IFD0's entries are read in order, and a read outside the block ends the parse (OpenCV throws),
//    keeping what was read before it. OpenCV reads the values of a few tags it knows (strings,
//    rationals), so an entry of those with a bad offset ends the parse before a later orientation;
//    that is reproduced. The first 0x0112 entry counts; its value is the 16 bits at entry + 8,
//    whatever the entry's type and count say.
// The TIFF spec puts IFD entries in tag order, so in well-formed files only tags under 0x0112
// (ImageDescription, Make, Model) can precede it.
#include "io/exif.h"

#include <stdlib.h>
#include <string.h>

typedef struct { const uint8_t *d; size_t n; int little; } Tiff;

// One 16- or 32-bit value at off; 0 when it is not wholly inside the block (OpenCV's throw).
static int get16(const Tiff *t, uint64_t off, uint32_t *v) {
    if (off + 1 >= t->n) return 0;
    const uint8_t *p = t->d + off;
    *v = t->little ? p[0] | p[1] << 8 : p[0] << 8 | p[1];
    return 1;
}

static int get32(const Tiff *t, uint64_t off, uint32_t *v) {
    if (off + 3 >= t->n) return 0;
    const uint8_t *p = t->d + off;
    *v = t->little ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
                   : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
    return 1;
}

// k rationals (two 32-bit values each) at the offset stored in the entry; the offset steps in 32
// bits, wrapping as OpenCV's uint32_t does.
static int rationals(const Tiff *t, uint64_t entry, int k) {
    uint32_t at, v;
    if (!get32(t, entry + 8, &at)) return 0;
    for (int i = 0; i < k; i++, at += 8)
        if (!get32(t, at, &v) || !get32(t, (uint64_t)at + 4, &v)) return 0;
    return 1;
}

// An ASCII value: inline (count <= 4) at position 8 of the block (sic: OpenCV's dataOffset is not
// relative to the entry), else at the stored offset; the whole string must lie inside the block.
static int string_ok(const Tiff *t, uint64_t entry) {
    uint32_t count, at = 8;
    if (!get32(t, entry + 4, &count)) return 0;
    if (count > 4 && !get32(t, entry + 8, &at)) return 0;
    return at <= t->n && (uint64_t)at + count <= t->n;
}

// Read what OpenCV reads of the entry at `entry`: 0 when a read falls outside (the parse ends).
static int entry_ok(const Tiff *t, uint64_t entry, uint32_t tag) {
    uint32_t v;
    switch (tag) {
    case 0x010E: case 0x010F: case 0x0110: case 0x0131: case 0x0132: case 0x8298:   // strings
        return string_ok(t, entry);
    case 0x0112: case 0x0128: case 0x0213:                                           // 16-bit values
        return get16(t, entry + 8, &v);
    case 0x011A: case 0x011B: return rationals(t, entry, 1);   // X/YResolution
    case 0x013E: return rationals(t, entry, 2);                // WhitePoint
    case 0x013F: return rationals(t, entry, 6);                // PrimaryChromaticities
    case 0x0211: return rationals(t, entry, 3);                // YCbCrCoefficients
    case 0x0214: return rationals(t, entry, 6);                // ReferenceBlackWhite
    default:     return 1;                                     // not read
    }
}

int exif_orientation(const uint8_t *app1, size_t n) {
    if (!app1 || n <= 6) return 0;
    Tiff t = { app1 + 6, n - 6, 0 };
    if (t.n > 1 && t.d[0] != t.d[1]) t.little = 0;
    else t.little = t.d[0] == 'I';
    uint32_t magic, ifd, count;
    if (!get16(&t, 2, &magic) || magic != 42 || !get32(&t, 4, &ifd) || !get16(&t, ifd, &count)) return 0;
    uint32_t off = ifd + 2;                                    // uint32_t, as OpenCV's offset
    for (uint32_t i = 0; i < count; i++, off += 12) {
        uint32_t tag, v;
        if (!get16(&t, off, &tag) || !entry_ok(&t, off, tag)) return 0;
        if (tag == 0x0112) return get16(&t, (uint64_t)off + 8, &v) ? (int)v : 0;
    }
    return 0;
}

int exif_swaps_sides(int orientation) { return orientation >= 5 && orientation <= 8; }

// dst (x, y) takes src (sx, sy): OpenCV's transpose then flip, as one mapping per orientation.
void exif_orient(Image *im, int o) {
    if (o < 2 || o > 8) return;
    int w = im->w, h = im->h, swap = exif_swaps_sides(o);
    int W = swap ? h : w, H = swap ? w : h;
    uint8_t *dst = xmalloc((size_t)W * H * 3);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            int sx, sy;
            switch (o) {
            case 2:  sx = w - 1 - x; sy = y;         break;   // flip around the vertical axis
            case 3:  sx = w - 1 - x; sy = h - 1 - y; break;   // rotate 180
            case 4:  sx = x;         sy = h - 1 - y; break;   // flip around the horizontal axis
            case 5:  sx = y;         sy = x;         break;   // transpose
            case 6:  sx = y;         sy = h - 1 - x; break;   // transpose, flip: rotate 90 clockwise
            case 7:  sx = w - 1 - y; sy = h - 1 - x; break;   // transpose, flip both: transverse
            default: sx = w - 1 - y; sy = x;         break;   // 8: rotate 90 counter-clockwise
            }
            memcpy(dst + ((size_t)y * W + x) * 3, im->px + ((size_t)sy * w + sx) * 3, 3);
        }
    free(im->px);
    *im = (Image){ W, H, dst };
}
