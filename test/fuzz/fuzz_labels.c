// fuzz_labels.c: libFuzzer target for label-file parsing and checking. A scratch dataset holds one
// 16x16 PNG; each input becomes its label file and dataset_open validates the split (io/dataset.c has
// no per-line entry point). What it keeps must obey the label rules. Build and run: run.sh.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/dataset.h"
#include "io/image.h"

#define NC 3

static char root[4096], yaml[4200], label[4200];
static FILE *sink;                      // the report stream: /dev/null

static void root_remove(void) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

static void put(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) { perror(path); abort(); }
}

// root/{data.yaml, images/x.png, labels/}, made once per process and removed at exit.
static void dataset_make(void) {
    const char *t = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/fuzz_labels-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(root)) { perror(root); abort(); }
    atexit(root_remove);
    char dir[4200], png[4300];
    snprintf(dir, sizeof dir, "%s/images", root);
    mkdir(dir, 0755);
    snprintf(png, sizeof png, "%s/x.png", dir);
    snprintf(dir, sizeof dir, "%s/labels", root);
    mkdir(dir, 0755);
    snprintf(label, sizeof label, "%s/x.txt", dir);
    snprintf(yaml, sizeof yaml, "%s/data.yaml", root);
    const char *text = "train: images\nval: images\nnames: [a, b, c]\n";
    put(yaml, text, strlen(text));
    Image im = image_new(16, 16, 90);
    Err err;
    if (image_save_png(png, &im, &err) != 0) { fprintf(stderr, "%s\n", err.msg); abort(); }
    image_free(&im);
    sink = fopen("/dev/null", "w");
    if (!sink) abort();
}

// A kept image has boxes with a class in [0, NC), centres in [0,1] and sizes in (0,1].
static void check_kept(const Dataset *ds) {
    int sum = 0;
    for (int r = 0; r < DS_N_REASONS; r++) sum += ds->excluded_by[r];
    if (sum != ds->n_excluded || ds->n + ds->n_excluded != ds->n_listed) abort();
    for (int i = 0; i < ds->n; i++)
        for (int j = 0; j < ds->s[i].nbox; j++) {
            const Box *b = &ds->s[i].box[j];
            if (b->cls < 0 || b->cls >= NC) abort();
            if (!(b->cx >= 0 && b->cx <= 1 && b->cy >= 0 && b->cy <= 1)) abort();
            if (!(b->w > 0 && b->w <= 1 && b->h > 0 && b->h <= 1)) abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!root[0]) dataset_make();
    put(label, data, size);
    DatasetOptions opt = {.report = sink, .quiet = size % 2};
    Dataset ds;
    Err err;
    if (dataset_open(yaml, NULL, "train", &opt, &ds, &err) == 0) {
        check_kept(&ds);
        dataset_free(&ds);
    }
    return 0;
}
