// fuzz_exif.c: libFuzzer target for the EXIF reader: the input is an APP1 payload. exif_orientation
// must read only inside it; an orientation it returns is then applied to a 3x2 picture, which must
// keep its pixels (as a multiset) and swap its sides exactly for 5..8. The same bytes spliced as APP1
// into a tiny JPEG go through the decoder, whose size must agree with image_info's. Build and run:
// run.sh.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/exif.h"

// An 8x6 baseline JPEG (libjpeg defaults), made once, into which the input is spliced as APP1.
#include <jpeglib.h>

static unsigned char *tiny;
static unsigned long tiny_n;

static void make_tiny(void) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    unsigned char px[8 * 6 * 3];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (unsigned char)(i * 7);
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &tiny, &tiny_n);
    c.image_width = 8;
    c.image_height = 6;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = px + c.next_scanline * 8 * 3;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
}

static char path[4096];
static void tmp_remove(void) { unlink(path); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int o = exif_orientation(data, size);
    if (o < 0 || o > 0xFFFF) abort();
    Image im = image_new(3, 2, 0);
    for (int i = 0; i < 18; i++) im.px[i] = (uint8_t)(i / 3);   // pixel k holds value k
    exif_orient(&im, o);
    int swap = exif_swaps_sides(o);
    if (im.w != (swap ? 2 : 3) || im.h != (swap ? 3 : 2)) abort();
    int seen = 0;
    for (int i = 0; i < 6; i++) seen |= 1 << im.px[3 * i];
    if (seen != 63) abort();
    image_free(&im);
    if (size > 65533) return 0;                   // does not fit one segment
    if (!tiny) make_tiny();
    size_t n = tiny_n + 4 + size;
    uint8_t *f = malloc(n);
    memcpy(f, tiny, 2);
    f[2] = 0xFF; f[3] = 0xE1; f[4] = (uint8_t)((size + 2) >> 8); f[5] = (uint8_t)(size + 2);
    memcpy(f + 6, data, size);
    memcpy(f + 6 + size, tiny + 2, tiny_n - 2);
    Err err;
    Image dec;
    if (image_decode_mem(f, n, "fuzz", &dec, &err) == 0) {
        if (dec.w != (swap ? 6 : 8) || dec.h != (swap ? 8 : 6)) abort();
        if (!path[0]) {
            const char *t = getenv("TMPDIR");
            snprintf(path, sizeof path, "%s/fuzz_exif-XXXXXX", t && *t ? t : "/tmp");
            int fd = mkstemp(path);
            if (fd < 0) abort();
            close(fd);
            atexit(tmp_remove);
        }
        FILE *fp = fopen(path, "wb");
        if (!fp || fwrite(f, 1, n, fp) != n || fclose(fp) != 0) abort();
        ImageInfo info;
        if (image_info(path, &info, &err) || info.w != dec.w || info.h != dec.h) abort();
        image_free(&dec);
    }
    free(f);
    return 0;
}
