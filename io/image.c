// image.c: Image memory, reading image files whole, telling JPEG from PNG by their first bytes,
// and atomic saving (write `path.tmp`, then rename). The codecs are image_jpeg.c and image_png.c.
#include "io/image.h"
#include "io/image_codec.h"
#include "core/base/readfile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define IMAGE_MAX_FILE_BYTES (512LL << 20)   // larger files are refused before reading

typedef enum { FORMAT_UNKNOWN, FORMAT_JPEG, FORMAT_PNG } Format;

Image image_new(int w, int h, uint8_t fill) {
    if (w < 0 || h < 0) die("image_new: negative size %dx%d", w, h);
    Image im = { w, h, xmalloc((size_t)w * h * 3) };
    memset(im.px, fill, (size_t)w * h * 3);
    return im;
}

void image_free(Image *im) {
    free(im->px);
    im->px = NULL;
    im->w = im->h = 0;
}

int image_check_size(const char *name, long long w, long long h, Err *err) {
    if (w <= 0 || h <= 0)
        return err_set(err, "%s: the header gives an empty image (%lldx%lld); remove the file", name, w, h);
    if (w * h > IMAGE_MAX_PIXELS)
        return err_set(err, "%s: image is %lldx%lld (%.0f megapixels), over the %lld megapixel limit; "
                       "downscale it", name, w, h, w * h / 1e6, IMAGE_MAX_PIXELS / 1000000);
    return 0;
}

static Format format_of(const uint8_t *b, size_t n) {
    if (n >= 2 && b[0] == 0xFF && b[1] == 0xD8) return FORMAT_JPEG;
    if (n >= 4 && !memcmp(b, "\x89PNG", 4)) return FORMAT_PNG;
    return FORMAT_UNKNOWN;
}

// An error for a file that is neither JPEG nor PNG, naming the format when it is a common one.
static int unknown_format(const char *name, const uint8_t *b, size_t n, Err *err) {
    static const struct { const char *magic; size_t len; const char *what; } known[] = {
        { "BM", 2, "a BMP image" }, { "GIF8", 4, "a GIF image" }, { "II*\0", 4, "a TIFF image" },
        { "MM\0*", 4, "a TIFF image" }, { "RIFF", 4, "a RIFF (WebP?) file" },
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (n >= known[i].len && !memcmp(b, known[i].magic, known[i].len))
            return err_set(err, "%s: %s; only JPEG and PNG are read: convert it", name, known[i].what);
    if (n == 0) return err_set(err, "%s: empty file (0 bytes); remove it", name);
    char head[3 * 8 + 1] = "";
    for (size_t i = 0; i < n && i < 8; i++) snprintf(head + 3 * i, 4, "%02x ", b[i]);
    return err_set(err, "%s: not a JPEG or PNG image (first bytes %s); convert or remove it", name, head);
}

int image_decode_mem(const uint8_t *buf, size_t n, const char *name, Image *out, Err *err) {
    *out = (Image){ 0, 0, NULL };
    switch (format_of(buf, n)) {
    case FORMAT_JPEG: return image_jpeg_decode(buf, n, name, out, err);
    case FORMAT_PNG:  return image_png_decode(buf, n, name, out, err);
    default:          return unknown_format(name, buf, n, err);
    }
}

// Open `path` for reading and check its size: a regular file of 1 byte .. IMAGE_MAX_FILE_BYTES.
static FILE *open_image_file(const char *path, size_t *n, Err *err) {
    FILE *f = rf_fopen(path, "image", err);     // a FIFO or a device is refused, never waited on
    if (!f) return NULL;
    struct stat st;
    const char *why = NULL;
    if (fstat(fileno(f), &st) != 0) why = strerror(errno);
    else if (st.st_size == 0) why = "empty file (0 bytes); remove it";
    else if (st.st_size > IMAGE_MAX_FILE_BYTES) why = "file is larger than 512 MB; not an image to train on";
    if (why) { err_set(err, "%s: %s", path, why); fclose(f); return NULL; }
    *n = (size_t)st.st_size;
    return f;
}

int image_read_file(const char *path, uint8_t **buf, size_t *n, Err *err) {
    *buf = NULL, *n = 0;
    size_t size;
    FILE *f = open_image_file(path, &size, err);
    if (!f) return -1;
    uint8_t *b = xmalloc(size);
    size_t got = fread(b, 1, size, f);
    fclose(f);
    if (got != size) {
        free(b);
        return err_set(err, "%s: read %zu of %zu bytes; the file changed or the disk failed", path, got, size);
    }
    *buf = b, *n = size;
    return 0;
}

int image_load(const char *path, Image *out, Err *err) {
    *out = (Image){ 0, 0, NULL };
    uint8_t *buf;
    size_t n;
    if (image_read_file(path, &buf, &n, err)) return -1;
    int rc = image_decode_mem(buf, n, path, out, err);
    free(buf);
    return rc;
}

// The header of the file f (at offset 0; `name` in messages), whichever format its first bytes say.
static int info_of(FILE *f, const char *name, ImageInfo *info, Err *err) {
    uint8_t head[8];
    size_t got = fread(head, 1, sizeof head, f);
    rewind(f);
    Format fmt = format_of(head, got);
    int rc = fmt == FORMAT_JPEG ? image_jpeg_info(f, name, info, err)
           : fmt == FORMAT_PNG  ? image_png_info(f, name, info, err)
           : unknown_format(name, head, got, err);
    return rc ? rc : image_check_size(name, info->w, info->h, err);
}

int image_info(const char *path, ImageInfo *info, Err *err) {
    *info = (ImageInfo){ 0, 0, 0, NULL, 0 };
    size_t n;
    FILE *f = open_image_file(path, &n, err);
    if (!f) return -1;
    int rc = info_of(f, path, info, err);
    fclose(f);
    return rc;
}

// The bytes as a read-only stream (fmemopen), so both codecs' header readers serve files and memory alike.
int image_info_mem(const uint8_t *buf, size_t n, const char *name, ImageInfo *info, Err *err) {
    *info = (ImageInfo){ 0, 0, 0, NULL, 0 };
    if (n == 0) return unknown_format(name, buf, n, err);
    FILE *f = fmemopen((void *)buf, n, "rb");
    if (!f) return err_set(err, "%s: cannot read its header from memory: %s", name, strerror(errno));
    int rc = info_of(f, name, info, err);
    fclose(f);
    return rc;
}

int image_probe(const char *path, int *w, int *h, Err *err) {
    ImageInfo info;
    int rc = image_info(path, &info, err);
    *w = info.w;
    *h = info.h;
    return rc;
}

typedef int (*ImageWriter)(FILE *f, const char *name, const Image *im, int quality, Err *err);

// Write through `path.tmp` and rename, so a reader never sees a half-written image.
static int save_atomic(const char *path, const Image *im, int quality, ImageWriter write, Err *err) {
    if (im->w <= 0 || im->h <= 0 || !im->px)
        return err_set(err, "%s: cannot save an empty %dx%d image", path, im->w, im->h);
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return err_set(err, "%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return err_set(err, "%s: cannot create: %s", tmp, strerror(errno));
    int rc = write(f, path, im, quality, err);
    if (fclose(f) != 0 && rc == 0)
        rc = err_set(err, "%s: write failed: %s; check free disk space", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0)
        rc = err_set(err, "%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
    if (rc != 0) remove(tmp);
    return rc;
}

int image_save_jpeg(const char *path, const Image *im, int quality, Err *err) {
    return save_atomic(path, im, quality, image_jpeg_write, err);
}

int image_save_png(const char *path, const Image *im, Err *err) {
    return save_atomic(path, im, 0, image_png_write, err);
}
