// image_jpeg.c: JPEG decode, header read and encode with libjpeg(-turbo). Every libjpeg error, and
// every warning that means missing or damaged pixels, longjmps back here and becomes an Err.
//
// Truncation policy: a file that ends before its pixel data is complete is rejected ("Premature end
// of JPEG file" or "premature end of data segment"). A file whose only loss is the final EOI
// marker (FF D9) is accepted: all pixels are present, and the reference keeps such files too
// (YOLOv9 re-saves them as "corrupt JPEG restored"; we never write into a dataset). Known gap: a
// progressive file cut exactly between two scans decodes, blurred, without an error.
//
// EXIF orientation is applied as cv2.imread applies it (io/exif.c): libjpeg keeps the first APP1
// segment while it reads the header (jpeg_save_markers: no second pass over the file), and the
// header-only path reports the rotated size.
#include "io/image_codec.h"
#include "io/exif.h"

#include <setjmp.h>
#include <stdlib.h>
#include <jpeglib.h>
#include <jerror.h>

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} JpegErr;

static void jerr_exit(j_common_ptr c) {
    JpegErr *e = (JpegErr *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jump, 1);
}

// level < 0 is a warning. Those that mean lost or damaged pixel data are errors; the harmless
// ones (extraneous bytes before a marker, unknown JFIF version, bad ICC marker) pass silently.
static void jerr_emit(j_common_ptr c, int level) {
    if (level >= 0) return;
    switch (c->err->msg_code) {
    case JWRN_JPEG_EOF: case JWRN_HIT_MARKER: case JWRN_HUFF_BAD_CODE: case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
        jerr_exit(c);
        break;
    default:
        c->err->num_warnings++;
    }
}

static struct jpeg_error_mgr *jerr_init(JpegErr *e) {
    struct jpeg_error_mgr *m = jpeg_std_error(&e->pub);
    m->error_exit = jerr_exit;
    m->emit_message = jerr_emit;
    e->msg[0] = 0;
    return m;
}

// A memory source that serves the bytes, then one EOI marker (so a file missing only its EOI
// decodes, see the policy above), then "Premature end of JPEG file" if asked for more.
typedef struct {
    struct jpeg_source_mgr pub;
    int eoi_served;
} MemSource;

static const JOCTET eoi_marker[2] = { 0xFF, JPEG_EOI };

static void src_init(j_decompress_ptr d) { (void)d; }
static void src_term(j_decompress_ptr d) { (void)d; }

static boolean src_fill(j_decompress_ptr d) {
    MemSource *s = (MemSource *)d->src;
    if (s->eoi_served) WARNMS(d, JWRN_JPEG_EOF);
    s->eoi_served = 1;
    s->pub.next_input_byte = eoi_marker;
    s->pub.bytes_in_buffer = 2;
    return TRUE;
}

static void src_skip(j_decompress_ptr d, long n) {
    struct jpeg_source_mgr *s = d->src;
    while (n > (long)s->bytes_in_buffer) {
        n -= (long)s->bytes_in_buffer;
        src_fill(d);
    }
    if (n > 0) {
        s->next_input_byte += n;
        s->bytes_in_buffer -= (size_t)n;
    }
}

static void src_set(j_decompress_ptr d, MemSource *s, const uint8_t *buf, size_t n) {
    s->pub = (struct jpeg_source_mgr){
        .next_input_byte = buf, .bytes_in_buffer = n, .init_source = src_init,
        .fill_input_buffer = src_fill, .skip_input_data = src_skip,
        .resync_to_restart = jpeg_resync_to_restart, .term_source = src_term,
    };
    s->eoi_served = 0;
    d->src = &s->pub;
}

// The EXIF orientation in the first APP1 segment libjpeg kept (0: none), as OpenCV takes it.
static int orientation(j_decompress_ptr d) {
    for (jpeg_saved_marker_ptr m = d->marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1) return exif_orientation(m->data, m->data_length);
    return 0;
}

// CMYK as OpenCV converts it (icvCvt_CMYK2BGR_8u_C4C3R), for Adobe files, which store the
// channels inverted (255 = no ink). Files without the Adobe marker store plain CMYK: invert first.
static void cmyk_to_rgb(const uint8_t *cmyk, uint8_t *rgb, int w, int inverted) {
    for (int x = 0; x < w; x++, cmyk += 4, rgb += 3) {
        int k = inverted ? cmyk[3] : 255 - cmyk[3];
        for (int c = 0; c < 3; c++) {
            int v = inverted ? cmyk[c] : 255 - cmyk[c];
            rgb[c] = (uint8_t)(k - ((255 - v) * k >> 8));
        }
    }
}

// Decoder settings are libjpeg's defaults (islow DCT, fancy upsampling), as in OpenCV and PIL,
// so the pixels match cv2.imread built on the same libjpeg-turbo.
int image_jpeg_decode(const uint8_t *buf, size_t n, const char *name, Image *out, Err *err) {
    struct jpeg_decompress_struct d;
    JpegErr je;
    MemSource src;
    uint8_t *volatile px = NULL, *volatile cmyk_row = NULL;
    d.err = jerr_init(&je);
    if (setjmp(je.jump)) {
        jpeg_destroy_decompress(&d);
        free(px);
        free(cmyk_row);
        return err_set(err, "%s: corrupt or truncated JPEG: %s; re-export or remove it", name, je.msg);
    }
    jpeg_create_decompress(&d);
    src_set(&d, &src, buf, n);
    jpeg_save_markers(&d, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&d, TRUE);
    int orient = orientation(&d);
    if (image_check_size(name, d.image_width, d.image_height, err)) {
        jpeg_destroy_decompress(&d);
        return -1;
    }
    int cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
    d.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(&d);
    int w = (int)d.output_width, h = (int)d.output_height;
    px = xmalloc((size_t)w * h * 3);
    if (cmyk) cmyk_row = xmalloc((size_t)w * 4);
    while ((int)d.output_scanline < h) {
        uint8_t *dst = px + (size_t)d.output_scanline * w * 3;
        JSAMPROW row = cmyk ? cmyk_row : dst;
        jpeg_read_scanlines(&d, &row, 1);
        if (cmyk) cmyk_to_rgb(cmyk_row, dst, w, d.saw_Adobe_marker);
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    free(cmyk_row);
    *out = (Image){ w, h, px };
    exif_orient(out, orient);
    return 0;
}

int image_jpeg_info(FILE *f, const char *name, ImageInfo *info, Err *err) {
    struct jpeg_decompress_struct d;
    JpegErr je;
    d.err = jerr_init(&je);
    if (setjmp(je.jump)) {
        jpeg_destroy_decompress(&d);
        return err_set(err, "%s: corrupt or truncated JPEG header: %s; re-export or remove it", name, je.msg);
    }
    jpeg_create_decompress(&d);
    jpeg_stdio_src(&d, f);
    jpeg_save_markers(&d, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&d, TRUE);
    int orient = orientation(&d), swap = exif_swaps_sides(orient);
    *info = (ImageInfo){ (int)(swap ? d.image_height : d.image_width), (int)(swap ? d.image_width : d.image_height),
                         d.num_components, "JPEG", orient };
    jpeg_destroy_decompress(&d);
    return 0;
}

// Baseline JPEG with libjpeg's defaults: 4:2:0 chroma, optimised Huffman tables off.
int image_jpeg_write(FILE *f, const char *name, const Image *im, int quality, Err *err) {
    struct jpeg_compress_struct c;
    JpegErr je;
    c.err = jerr_init(&je);
    if (setjmp(je.jump)) {
        jpeg_destroy_compress(&c);
        return err_set(err, "%s: cannot write JPEG: %s", name, je.msg);
    }
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)im->w;
    c.image_height = (JDIMENSION)im->h;
    c.input_components = 3;
    c.in_color_space = JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality < 1 ? 1 : quality > 100 ? 100 : quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < c.image_height) {
        JSAMPROW row = im->px + (size_t)c.next_scanline * im->w * 3;
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    return 0;
}
