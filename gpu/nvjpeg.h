// nvjpeg.h: JPEG decoding on the GPU through NVIDIA's nvJPEG (issue 37), opened at run time like cuDNN and
// NCCL, so a binary runs where the library is absent (the host decodes then). The hardware decoder (the
// NVJPG engines of A100 and H100) takes the baseline JPEGs it supports; nvJPEG's GPU-hybrid backend the rest
// it can parse. The pixels are nvJPEG's, not libjpeg-turbo's: close (test_gpu_jpeg measures how close),
// not the same bytes, so the host's decoding stays the reference.
// Legend: n images in a call; w,h a JPEG's size as stored (no EXIF orientation applied).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "io/image.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct NvJpeg NvJpeg;

// A decoder on the calling thread's current device: 0, or -1 with why (the library is absent, or neither
// backend opens). `hardware` 0 asks for the GPU-hybrid backend alone (tests, the benchmark's comparison).
int  nvjpeg_open(int hardware, NvJpeg **out, char *why, size_t size);
void nvjpeg_close(NvJpeg *j);
const char *nvjpeg_backend(const NvJpeg *j);     // "hardware" or "GPU-hybrid"

// Whether j decodes this file's bytes: 1 with its stored size and components (1 grey, 3 colour), else 0
// (not a JPEG nvJPEG parses, 2 or 4 components (CMYK), or a size past `max_pixels`).
int  nvjpeg_takes(NvJpeg *j, const uint8_t *data, size_t n, long max_pixels, int *w, int *h);

// Decode n JPEGs that nvjpeg_takes took (host bytes) into out[k].px, device memory of out[k].w x out[k].h
// RGB bytes (w,h as nvjpeg_takes said), queued on `stream`. 0, or -1 with why and *bad the image (-1: some file
// of a hardware batch). A file whose size nvJPEG reads otherwise than out[k] says is refused before any write.
int  nvjpeg_decode(NvJpeg *j, const uint8_t *const *data, const size_t *len, int n, Image *out, void *stream,
                   int *bad, char *why, size_t size);

#ifdef __cplusplus
}
#endif
