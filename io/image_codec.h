// image_codec.h: private to io/: the JPEG (image_jpeg.c) and PNG (image_png.c) codecs behind the
// file functions of image.h. `name` is the file name used in error messages.
#pragma once
#include <stdio.h>
#include "io/image.h"

int image_jpeg_decode(const uint8_t *buf, size_t n, const char *name, Image *out, Err *err);
int image_jpeg_info(FILE *f, const char *name, ImageInfo *info, Err *err);      // f at offset 0
int image_jpeg_write(FILE *f, const char *name, const Image *im, int quality, Err *err);

int image_png_decode(const uint8_t *buf, size_t n, const char *name, Image *out, Err *err);
int image_png_info(FILE *f, const char *name, ImageInfo *info, Err *err);       // f at offset 0
int image_png_write(FILE *f, const char *name, const Image *im, int quality, Err *err);

// 0 if a w x h image may be decoded, else -1 naming the file (zero size, or > IMAGE_MAX_PIXELS).
int image_check_size(const char *name, long long w, long long h, Err *err);
