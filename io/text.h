// text.h: text in pictures and plots through FreeType (USE_FREETYPE builds) with a font found through
// fontconfig (USE_FONTCONFIG) that covers the text's characters, else DejaVu Sans from its Debian path;
// without either, the 5x7 bitmap font of image_draw.c (ASCII only, others as '?'), said once on stderr.
// Text is UTF-8. Sizes are pixel heights of the em square (matplotlib's 10 pt at 150 dpi is 21 px).
#pragma once
#include <stdint.h>

#include "io/image.h"

// The box text_draw fills: width, and height from the font's ascender to its descender.
void text_measure(const char *utf8, int px, int *w, int *h);

// Draw utf8 with its box's top-left corner at (x, y), anti-aliased over what is there (clipped).
// rot90 = 1: turned a quarter counter-clockwise (reads upwards, as a y-axis label); (x, y) is then the
// top-left corner of the turned box, which is h wide and w high.
void text_draw(Image *im, int x, int y, const char *utf8, int px, const uint8_t rgb[3], int rot90);

// A label on a filled box (bg; NULL: none) with `pad` pixels around the text: the class names on
// the pictures of batches and detections. Returns the box's width and height in *bw, *bh (may be NULL).
void text_label(Image *im, int x, int y, const char *utf8, int px, const uint8_t fg[3], const uint8_t bg[3],
                int pad, int *bw, int *bh);

// 1 when a FreeType font is in use (else the bitmap font).
int text_has_font(void);
// 1 when this build draws text through FreeType (USE_FREETYPE), 0: the 5x7 bitmap font only.
int text_built_with_freetype(void);
