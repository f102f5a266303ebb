// jpeg_encode.h: an RGB image encoded in memory by libjpeg-turbo, for the tests that make their own JPEG files
// (test_exif, test_gpu_jpeg): at `quality`, colour (libjpeg's defaults: 4:2:0) or grey (one component, libjpeg's
// RGB-to-Y), baseline or progressive (jpeg_simple_progression). libjpeg's own error handler: encoding an image in
// memory fails only on a bug, which ends the test binary. The bytes are freed with free; *n is their count.
#pragma once
#include <stdint.h>
#include <stdio.h>

#include <jpeglib.h>

#include "io/image.h"

static inline uint8_t *jpeg_encode_mem(const Image *im, int quality, int grey, int progressive, size_t *n) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    unsigned char *buf = NULL;
    unsigned long len = 0;
    jpeg_mem_dest(&c, &buf, &len);
    c.image_width = (JDIMENSION)im->w;
    c.image_height = (JDIMENSION)im->h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    if (grey) jpeg_set_colorspace(&c, JCS_GRAYSCALE);
    if (progressive) jpeg_simple_progression(&c);   // (after the colour space: its scans depend on it)
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = im->px + (size_t)c.next_scanline * im->w * 3;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    *n = len;
    return buf;
}
