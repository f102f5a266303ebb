// fuzz_datayaml.c: libFuzzer target for data.yaml: each input is the yaml of a scratch dataset (one
// PNG with a label, and a list file) and goes through dataspec_read; when every path it names stays
// inside the scratch folder, dataset_open lists and validates the split too. Build and run: run.sh.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/dataset.h"
#include "io/image.h"

static char root[4096], yaml[4200];
static FILE *sink;                      // the report stream: /dev/null

static void root_remove(void) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
}

static void put(const char *rel, const void *data, size_t n) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) { perror(path); abort(); }
}

// root/{images/a.png, labels/a.txt, list.txt}, made once per process and removed at exit.
static void dataset_make(void) {
    const char *t = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/fuzz_datayaml-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(root)) { perror(root); abort(); }
    atexit(root_remove);
    char dir[4200], png[4300];
    snprintf(dir, sizeof dir, "%s/images", root);
    mkdir(dir, 0755);
    snprintf(png, sizeof png, "%s/a.png", dir);
    snprintf(dir, sizeof dir, "%s/labels", root);
    mkdir(dir, 0755);
    Image im = image_new(16, 16, 90);
    Err err;
    if (image_save_png(png, &im, &err) != 0) { fprintf(stderr, "%s\n", err.msg); abort(); }
    image_free(&im);
    const char *label = "0 0.5 0.5 0.2 0.2\n", *list = "images/a.png\n./images/a.png\nnotes.md\n";
    put("labels/a.txt", label, strlen(label));
    put("list.txt", list, strlen(list));
    snprintf(yaml, sizeof yaml, "%s/data.yaml", root);
    sink = fopen("/dev/null", "w");
    if (!sink) abort();
}

// 1 when every folder or list of the spec is inside root: listing "/" would take all day.
static int spec_contained(const DataSpec *d) {
    size_t n = strlen(root);
    for (int k = 0; k < DS_N_SPLITS; k++)
        for (int i = 0; i < d->n_src[k]; i++) {
            const char *p = d->src[k][i];
            if (strncmp(p, root, n) || (p[n] && p[n] != '/') || strstr(p, "..")) return 0;
        }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!root[0]) dataset_make();
    put("data.yaml", data, size);
    DataSpec d;
    Err err;
    if (dataspec_read(yaml, NULL, &d, &err) != 0) return 0;
    if (d.nc <= 0 || !d.names) abort();
    int contained = spec_contained(&d);
    dataspec_free(&d);
    if (!contained) return 0;
    DatasetOptions opt = {.report = sink, .quiet = 1};
    Dataset ds;
    for (int k = 0; k < 2; k++)
        if (dataset_open(yaml, NULL, k ? "val" : "train", &opt, &ds, &err) == 0) dataset_free(&ds);
    return 0;
}
