// exif.h: the EXIF orientation of a JPEG, read and applied as OpenCV's imread does (IMREAD_COLOR
// applies it unless IMREAD_IGNORE_ORIENTATION): the first APP1 segment's payload past its 6-byte
// "Exif\0\0" header is a TIFF block (II little-endian or MM big-endian, 42, the offset of IFD0), and
// IFD0's tag 0x0112 holds 1..8. Every offset in the segment is checked before it is read.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "io/image.h"

// The orientation in an APP1 payload (the bytes after the segment's 2-byte length): its value as
// OpenCV's ExifReader finds it (any 16-bit value; 2..8 change the picture), or 0 when it finds none.
int exif_orientation(const uint8_t *app1, size_t n);
// 1 when orientation swaps width and height (5..8: the transposing ones).
int exif_swaps_sides(int orientation);
// Apply orientation to im as OpenCV's ExifTransform does (2 mirror left-right, 3 rotate 180, 4 mirror
// top-bottom, 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90 counter-clockwise);
// other values leave im as it is. The pixels are replaced (im->px is a new buffer).
void exif_orient(Image *im, int orientation);
