// scratch.h: what the dataset fuzz targets share: a scratch folder made once per process and removed at
// exit (fuzz_root), the report stream (fuzz_sink: /dev/null), writing a file, and the label rules every
// image a split keeps must obey.
#pragma once
#include <stdio.h>
#include <stdlib.h>

#include "io/dataset.h"

static char fuzz_root[4096];
static FILE *fuzz_sink;

static inline void fuzz_root_remove(void) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", fuzz_root);
}

// $TMPDIR/NAME-XXXXXX as fuzz_root, and fuzz_sink opened.
static inline void fuzz_scratch(const char *name) {
    const char *t = getenv("TMPDIR");
    snprintf(fuzz_root, sizeof fuzz_root, "%s/%s-XXXXXX", t && *t ? t : "/tmp", name);
    if (!mkdtemp(fuzz_root)) { perror(fuzz_root); abort(); }
    atexit(fuzz_root_remove);
    fuzz_sink = fopen("/dev/null", "w");
    if (!fuzz_sink) abort();
}

static inline void fuzz_put(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) { perror(path); abort(); }
}

// A kept image has boxes with a class in [0, nc), centres in [0,1] and sizes in (0,1]; the counts add up.
static inline void fuzz_check_kept(const Dataset *ds, int nc) {
    int sum = 0;
    for (int r = 0; r < DS_N_REASONS; r++) sum += ds->excluded_by[r];
    if (sum != ds->n_excluded || ds->n + ds->n_excluded != ds->n_listed) abort();
    for (int i = 0; i < ds->n; i++)
        for (int j = 0; j < ds->s[i].nbox; j++) {
            const Box *b = &ds->s[i].box[j];
            if (b->cls < 0 || b->cls >= nc) abort();
            if (!(b->cx >= 0 && b->cx <= 1 && b->cy >= 0 && b->cy <= 1)) abort();
            if (!(b->w > 0 && b->w <= 1 && b->h > 0 && b->h <= 1)) abort();
        }
}
