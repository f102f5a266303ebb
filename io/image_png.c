// image_png.c: PNG decode, header read and encode with libpng. Errors longjmp back here and become
// an Err; warnings (e.g. "iCCP: known incorrect sRGB profile") are dropped, not printed.
// Any PNG becomes 8-bit RGB: palette expanded, gray copied to R,G,B, 16-bit cut to its high byte
// and alpha dropped (not composited), as cv2.imread(IMREAD_COLOR) does.
#include "io/image_codec.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <png.h>

typedef struct { char msg[256]; } PngErr;

static void png_err_fn(png_structp png, png_const_charp msg) {
    PngErr *e = png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_warn_fn(png_structp png, png_const_charp msg) { (void)png; (void)msg; }

typedef struct { const uint8_t *p; size_t n, pos; } PngSource;

static void png_read_mem(png_structp png, png_bytep dst, size_t len) {
    PngSource *s = png_get_io_ptr(png);
    if (len > s->n - s->pos) png_error(png, "file ends early (truncated)");
    memcpy(dst, s->p + s->pos, len);
    s->pos += len;
}

// Ask libpng for 8-bit RGB whatever the file holds.
static void png_want_rgb8(png_structp png, png_infop info) {
    int type = png_get_color_type(png, info);
    if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);
    if (!(type & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
    png_set_strip_alpha(png);            // also the alpha that a tRNS chunk would add
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
}

int image_png_decode(const uint8_t *buf, size_t n, const char *name, Image *out, Err *err) {
    PngErr pe = { "" };
    PngSource src = { buf, n, 0 };
    uint8_t *volatile px = NULL;
    png_bytep *volatile rows = NULL;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &pe, png_err_fn, png_warn_fn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) die("libpng: cannot create read structures");
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        free(px);
        free(rows);
        return err_set(err, "%s: corrupt or truncated PNG: %s; re-export or remove it", name, pe.msg);
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_WARN_DISCARD);   // a bad IDAT CRC fails the decode
    png_read_info(png, info);
    int w = (int)png_get_image_width(png, info), h = (int)png_get_image_height(png, info);
    if (image_check_size(name, w, h, err)) {
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    png_want_rgb8(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 3) png_error(png, "unsupported pixel layout");
    px = xmalloc((size_t)w * h * 3);
    rows = xmalloc((size_t)h * sizeof *rows);
    for (int y = 0; y < h; y++) rows[y] = px + (size_t)y * w * 3;
    png_read_image(png, rows);
    png_read_end(png, NULL);             // checks the chunks after the pixels: truncation is an error
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    *out = (Image){ w, h, px };
    return 0;
}

// The size from IHDR, which the PNG format requires to be the first chunk: bytes 16..23.
int image_png_info(FILE *f, const char *name, ImageInfo *info, Err *err) {
    static const int channels_of_type[7] = { 1, 0, 3, 3, 2, 0, 4 };
    uint8_t b[33];
    if (fread(b, 1, sizeof b, f) != sizeof b)
        return err_set(err, "%s: PNG file too short for its header (truncated); remove it", name);
    if (memcmp(b, "\x89PNG\r\n\x1a\n", 8) || memcmp(b + 12, "IHDR", 4))
        return err_set(err, "%s: corrupt PNG: bad signature or no IHDR chunk; re-export or remove it", name);
    uint32_t w = png_get_uint_32(b + 16), h = png_get_uint_32(b + 20);
    int type = b[25];
    if (type > 6 || channels_of_type[type] == 0)
        return err_set(err, "%s: corrupt PNG: colour type %d; re-export or remove it", name, type);
    *info = (ImageInfo){ (int)(w > INT32_MAX ? INT32_MAX : w), (int)(h > INT32_MAX ? INT32_MAX : h),
                         channels_of_type[type], "PNG", 0 };
    return 0;
}

// 8-bit RGB, not interlaced, zlib's default compression.
int image_png_write(FILE *f, const char *name, const Image *im, int quality, Err *err) {
    (void)quality;
    PngErr pe = { "" };
    png_bytep *volatile rows = NULL;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &pe, png_err_fn, png_warn_fn);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) die("libpng: cannot create write structures");
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(rows);
        return err_set(err, "%s: cannot write PNG: %s", name, pe.msg);
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)im->w, (png_uint_32)im->h, 8, PNG_COLOR_TYPE_RGB,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    rows = xmalloc((size_t)im->h * sizeof *rows);
    for (int y = 0; y < im->h; y++) rows[y] = im->px + (size_t)y * im->w * 3;
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    return 0;
}
