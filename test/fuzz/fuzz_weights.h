// fuzz_weights.h: what the two weight-file fuzz targets share (fuzz_safetensors.c, fuzz_pt.c): the
// input written to one scratch file per process, opened by the reader under test, then every tensor
// of what opened looked up by name and converted with st_read_f32.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"

#define MAX_READ_ELEMENTS (1 << 20)   // converting bigger tensors only costs time

static char path[4096];

static void tmp_remove(void) { unlink(path); }

static const char *tmp_file(void) {     // one scratch file per process, removed at exit
    if (path[0]) return path;
    const char *t = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/fuzz_weights-XXXXXX", t && *t ? t : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) { perror(path); abort(); }
    close(fd);
    atexit(tmp_remove);
    return path;
}

// Every tensor of an opened file is found by its name, lies inside the file or is one the reader
// gathered into memory of its own (a strided view of a .pt), and converts.
static void use_tensors(const SafeTensors *st) {
    for (int i = 0; i < st->n; i++) {
        const StTensor *t = &st->tensor[i];
        if (st_find(st, t->name) != t) abort();
        const unsigned char *p = t->data;
        int gathered = 0;
        for (int k = 0; k < st->n_owned; k++) gathered |= p == st->owned[k];
        if (!gathered && (p < st->map || p + t->nbytes > st->map + st->map_size)) abort();
        size_t n = st_numel(t);
        if (n > MAX_READ_ELEMENTS) continue;
        float *out = malloc(n * sizeof *out + 1);
        Err err;
        st_read_f32(st, t->name, out, n, &err);
        free(out);
    }
    for (int i = 0; i < st->n_meta; i++)
        if (!st_meta(st, st->meta_key[i])) abort();
}

// One input: written to the scratch file, opened with open_file, every tensor used, closed.
static int fuzz_weights(const uint8_t *data, size_t size, int (*open_file)(const char *, SafeTensors *, Err *)) {
    const char *file = tmp_file();
    FILE *f = fopen(file, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) abort();
    SafeTensors st;
    Err err;
    if (open_file(file, &st, &err) == 0) {
        use_tensors(&st);
        st_close(&st);
    }
    return 0;
}
