// fuzz_listfile.c: libFuzzer target for image-list files (a data.yaml's `train: list.txt`). A
// scratch dataset holds images/a.png and images/b.png; each input becomes list.txt and dataset_open
// reads it (io/dataset.c: list_file, through core/base/readfile.c's text reader). Whatever the bytes (NUL,
// overlong lines, CR, BOM, paths that escape or repeat), it must return or refuse cleanly, and what
// it keeps is a subset of the two images, each once. Build and run: run.sh.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/dataset.h"
#include "io/image.h"
#include "test/fuzz/scratch.h"

static char yaml[4200], list[4200];

// fuzz_root/{data.yaml, images/a.png, images/b.png}, made once per process and removed at exit.
static void dataset_make(void) {
    fuzz_scratch("fuzz_listfile");
    char dir[4200], png[4300];
    snprintf(dir, sizeof dir, "%s/images", fuzz_root);
    mkdir(dir, 0755);
    Image im = image_new(16, 16, 90);
    Err err;
    for (int i = 0; i < 2; i++) {
        snprintf(png, sizeof png, "%s/%c.png", dir, 'a' + i);
        if (image_save_png(png, &im, &err) != 0) { fprintf(stderr, "%s\n", err.msg); abort(); }
    }
    image_free(&im);
    snprintf(list, sizeof list, "%s/list.txt", fuzz_root);
    snprintf(yaml, sizeof yaml, "%s/data.yaml", fuzz_root);
    const char *text = "train: list.txt\nval: list.txt\nnames: [a, b, c]\n";
    fuzz_put(yaml, text, strlen(text));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_root[0]) dataset_make();
    fuzz_put(list, data, size);
    DatasetOptions opt = {.report = fuzz_sink, .quiet = size % 2};
    Dataset ds;
    Err err;
    if (dataset_open(yaml, NULL, "train", &opt, &ds, &err) == 0) {
        if (ds.n < 1 || ds.n > 2 || ds.n > ds.n_listed) abort();
        for (int i = 0; i < ds.n; i++) {
            struct stat st;
            if (stat(ds.s[i].image, &st) != 0 || !S_ISREG(st.st_mode)) abort();
            if (i > 0 && strcmp(ds.s[i - 1].image, ds.s[i].image) >= 0) abort();   // sorted, each once
        }
        dataset_free(&ds);
    } else if (!err.msg[0]) {
        abort();                                          // a refusal always says why
    }
    return 0;
}
