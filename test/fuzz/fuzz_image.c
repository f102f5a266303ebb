// fuzz_image.c: libFuzzer target for the JPEG and PNG decoders: image_decode_mem on the input bytes,
// and image_info (the header-only path) on the same bytes written to a file. Build and run: run.sh.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/image.h"

static char path[4096];

static void tmp_remove(void) { unlink(path); }

static const char *tmp_file(void) {     // one scratch file per process, removed at exit
    if (path[0]) return path;
    const char *t = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/fuzz_image-XXXXXX", t && *t ? t : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) { perror(path); abort(); }
    close(fd);
    atexit(tmp_remove);
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    Image im;
    Err err;
    int decoded = image_decode_mem(data, size, "fuzz", &im, &err) == 0;
    if (decoded && (im.w <= 0 || im.h <= 0 || !im.px)) abort();   // success means pixels
    if (!decoded && (im.w || im.h || im.px)) abort();             // failure leaves {0, 0, NULL}
    const char *file = tmp_file();
    FILE *f = fopen(file, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    ImageInfo info;
    int probed = image_info(file, &info, &err) == 0;
    // The header-only path refuses no file that decodes, and agrees on its size.
    if (decoded && (!probed || info.w != im.w || info.h != im.h)) {
        fprintf(stderr, "decoded %dx%d, image_info %s %dx%d: %s\n", im.w, im.h,
                probed ? "ok" : "failed", info.w, info.h, probed ? "" : err.msg);
        abort();
    }
    image_free(&im);
    return 0;
}
