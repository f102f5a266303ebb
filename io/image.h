// image.h: 8-bit RGB images in memory; JPEG (libjpeg-turbo) and PNG (libpng) decode and encode;
// resizing and drawing. Pixels are HWC, row-major, 3 bytes per pixel, R G B.
#pragma once
#include <stdint.h>
#include "core/util.h"

typedef struct { int w, h; uint8_t *px; } Image;      // px: w*h*3 bytes, owned

#define IMAGE_MAX_PIXELS (100000000LL)                 // 100 MP: larger headers are refused

Image image_new(int w, int h, uint8_t fill);           // filled with (fill, fill, fill)
void  image_free(Image *im);
// Decode a JPEG or PNG file (detected from its bytes, not its name) into RGB. Grayscale,
// palette, 16-bit, alpha (dropped) and CMYK inputs are converted. Errors name the file and why.
int   image_load(const char *path, Image *out, Err *err);
int   image_decode_mem(const uint8_t *buf, size_t n, const char *name, Image *out, Err *err);
// Read only the size from the header (no full decode).
int   image_probe(const char *path, int *w, int *h, Err *err);
int   image_save_jpeg(const char *path, const Image *im, int quality, Err *err);
int   image_save_png(const char *path, const Image *im, Err *err);
// Resize to (w,h): bilinear (OpenCV INTER_LINEAR pixel-centre convention), or area averaging
// when shrinking with area=1 (INTER_AREA), as the reference's load_image chooses.
Image image_resize(const Image *src, int w, int h, int area);
// Drawing for the pictures other parts write: rectangle outline and a small bitmap-font label.
void  image_draw_rect(Image *im, int x1, int y1, int x2, int y2, int thickness, const uint8_t rgb[3]);
void  image_draw_text(Image *im, int x, int y, const char *text, const uint8_t fg[3], const uint8_t bg[3]);
