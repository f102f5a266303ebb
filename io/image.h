// image.h: 8-bit RGB images in memory; JPEG (libjpeg-turbo) and PNG (libpng) decode and encode;
// resizing and drawing. Pixels are HWC, row-major, 3 bytes per pixel, R G B.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "core/base/util.h"

typedef struct { int w, h; uint8_t *px; } Image;      // px: w*h*3 bytes, owned

#define IMAGE_MAX_PIXELS (100000000LL)                 // 100 MP: larger headers are refused

Image image_new(int w, int h, uint8_t fill);           // filled with (fill, fill, fill)
void  image_free(Image *im);
// Decode a JPEG or PNG file (detected from its bytes, not its name) into RGB, the same bytes as
// cv2.imread (BGR reversed) on the same libjpeg-turbo. Grayscale, palette, 16-bit (high byte),
// alpha (dropped) and CMYK inputs are converted. Errors name the file and why; truncated or
// damaged pixel data is an error (a JPEG missing only its final EOI marker is accepted), as are
// empty files, files over 512 MB and headers over IMAGE_MAX_PIXELS (refused before allocating).
// A JPEG's EXIF orientation is applied as cv2.imread applies it (io/exif.h), so a phone photo tagged
// "rotate 90" comes out upright, its sides swapped. On error *out is {0, 0, NULL}.
int   image_load(const char *path, Image *out, Err *err);
int   image_decode_mem(const uint8_t *buf, size_t n, const char *name, Image *out, Err *err);
// Read only the size from the header (no full decode), after the EXIF orientation: the size that
// image_load gives. Refuses what image_load would refuse from
// the header alone: unknown format, zero size, more than IMAGE_MAX_PIXELS.
int   image_probe(const char *path, int *w, int *h, Err *err);
// image_probe plus the number of colour components stored in the file (1 gray, 2 gray+alpha,
// 3 RGB/YCbCr/palette, 4 RGBA/CMYK; a JPEG's 4 is CMYK or YCCK), the format name ("JPEG" or "PNG") and
// a JPEG's EXIF orientation (io/exif.h: 0 none; 2..8 change the picture; always 0 for PNG).
typedef struct { int w, h, channels; const char *format; int orientation; } ImageInfo;
int   image_info(const char *path, ImageInfo *info, Err *err);
// The same from a file already in memory (buf, n bytes; name for messages), e.g. one image_read_file read.
int   image_info_mem(const uint8_t *buf, size_t n, const char *name, ImageInfo *info, Err *err);
// Read an image file whole, with image_load's checks (a regular file of 1 byte to 512 MB): *buf (free
// it) and *n. Returns 0, or -1 with err naming the file ({NULL, 0} then).
int   image_read_file(const char *path, uint8_t **buf, size_t *n, Err *err);
// Save through `path.tmp` and a rename, so readers never see half a file. JPEG: quality 1..100
// (clamped), 4:2:0 chroma. PNG: 8-bit RGB, lossless.
int   image_save_jpeg(const char *path, const Image *im, int quality, Err *err);
int   image_save_png(const char *path, const Image *im, Err *err);
// Resize to (w,h) >= 1: bilinear (OpenCV INTER_LINEAR pixel-centre convention), or area averaging
// when shrinking with area=1 (INTER_AREA), as the reference's load_image chooses. Bit-exact with
// cv2.resize (tested against 4.6); area=1 with either side enlarged gives bilinear, not OpenCV's
// INTER_AREA-enlarge variant (the reference never asks for it).
Image image_resize(const Image *src, int w, int h, int area);
// Drawing for the pictures other parts write: rectangle outline and a small bitmap-font label.
// draw_rect: corners (x1,y1), (x2,y2) inclusive, in either order; the outline is `thickness`
// pixels wide, inside the box; anything outside the image is clipped.
void  image_draw_rect(Image *im, int x1, int y1, int x2, int y2, int thickness, const uint8_t rgb[3]);
// Text in a 5x7 font (6x8 cells), top-left at (x,y), on a box of colour bg (NULL: no box); clipped.
void  image_draw_text(Image *im, int x, int y, const char *text, const uint8_t fg[3], const uint8_t bg[3]);
void  image_draw_text_scaled(Image *im, int x, int y, int scale, const char *text,
                             const uint8_t fg[3], const uint8_t bg[3]);   // scale >= 1: pixel size
void  image_text_size(const char *text, int scale, int *w, int *h);     // the box that draw_text fills
