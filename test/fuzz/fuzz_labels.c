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
#include "test/fuzz/scratch.h"

#define NC 3

static char yaml[4200], label[4200];

// fuzz_root/{data.yaml, images/x.png, labels/}, made once per process and removed at exit.
static void dataset_make(void) {
    fuzz_scratch("fuzz_labels");
    char dir[4200], png[4300];
    snprintf(dir, sizeof dir, "%s/images", fuzz_root);
    mkdir(dir, 0755);
    snprintf(png, sizeof png, "%s/x.png", dir);
    snprintf(dir, sizeof dir, "%s/labels", fuzz_root);
    mkdir(dir, 0755);
    snprintf(label, sizeof label, "%s/x.txt", dir);
    snprintf(yaml, sizeof yaml, "%s/data.yaml", fuzz_root);
    const char *text = "train: images\nval: images\nnames: [a, b, c]\n";
    fuzz_put(yaml, text, strlen(text));
    Image im = image_new(16, 16, 90);
    Err err;
    if (image_save_png(png, &im, &err) != 0) { fprintf(stderr, "%s\n", err.msg); abort(); }
    image_free(&im);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_root[0]) dataset_make();
    fuzz_put(label, data, size);
    DatasetOptions opt = {.report = fuzz_sink, .quiet = size % 2};
    Dataset ds;
    Err err;
    if (dataset_open(yaml, NULL, "train", &opt, &ds, &err) == 0) {
        fuzz_check_kept(&ds, NC);
        dataset_free(&ds);
    }
    return 0;
}
