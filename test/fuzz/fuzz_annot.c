// fuzz_annot.c: libFuzzer target for COCO JSON and Pascal VOC XML datasets (io/coco.c, io/voc.c,
// io/json.c, io/xml.c). A scratch folder holds a.png beside x.json (COCO) and a VOC tree with
// JPEGImages/a.jpg; an input's first byte picks the form, the rest becomes x.json or Annotations/a.xml,
// and dataset_open validates the split (COCO without names: the file's categories name the classes).
// What it keeps must obey the label rules. Build and run: run.sh.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/dataset.h"
#include "io/image.h"

static char root[4096], coco_yaml[4200], voc_yaml[4200], json[4200], xml[4200];
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

static void in_root(char *out, size_t n, const char *rel) { snprintf(out, n, "%s/%s", root, rel); }

static void scratch_make(void) {
    const char *t = getenv("TMPDIR");
    snprintf(root, sizeof root, "%s/fuzz_annot-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(root)) { perror(root); abort(); }
    atexit(root_remove);
    char p[4200];
    const char *dirs[] = {"VOC", "VOC/Annotations", "VOC/JPEGImages", "VOC/ImageSets"};
    for (int i = 0; i < 4; i++) { in_root(p, sizeof p, dirs[i]); mkdir(p, 0755); }
    Image im = image_new(16, 16, 90);
    Err err;
    in_root(p, sizeof p, "a.png");
    if (image_save_png(p, &im, &err) != 0) { fprintf(stderr, "%s\n", err.msg); abort(); }
    in_root(p, sizeof p, "VOC/JPEGImages/a.jpg");
    if (image_save_jpeg(p, &im, 90, &err) != 0) { fprintf(stderr, "%s\n", err.msg); abort(); }
    image_free(&im);
    in_root(coco_yaml, sizeof coco_yaml, "coco.yaml");
    put(coco_yaml, "train: x.json\nval: x.json\n", 26);
    in_root(voc_yaml, sizeof voc_yaml, "voc.yaml");
    put(voc_yaml, "train: VOC\nval: VOC\nnames: [a, b, c]\n", 37);
    in_root(json, sizeof json, "x.json");
    in_root(xml, sizeof xml, "VOC/Annotations/a.xml");
    sink = fopen("/dev/null", "w");
    if (!sink) abort();
}

// A kept image has boxes with a class in [0, nc), centres in [0,1] and sizes in (0,1].
static void check_kept(const Dataset *ds) {
    int sum = 0;
    for (int r = 0; r < DS_N_REASONS; r++) sum += ds->excluded_by[r];
    if (sum != ds->n_excluded || ds->n + ds->n_excluded != ds->n_listed) abort();
    for (int i = 0; i < ds->n; i++)
        for (int j = 0; j < ds->s[i].nbox; j++) {
            const Box *b = &ds->s[i].box[j];
            if (b->cls < 0 || b->cls >= ds->nc) abort();
            if (!(b->cx >= 0 && b->cx <= 1 && b->cy >= 0 && b->cy <= 1)) abort();
            if (!(b->w > 0 && b->w <= 1 && b->h > 0 && b->h <= 1)) abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!root[0]) scratch_make();
    if (size < 1) return 0;
    int voc = data[0] & 1;
    put(voc ? xml : json, data + 1, size - 1);
    DatasetOptions opt = {.report = sink, .quiet = (data[0] >> 1) & 1};
    Dataset ds;
    Err err;
    if (dataset_open(voc ? voc_yaml : coco_yaml, NULL, "train", &opt, &ds, &err) == 0) {
        check_kept(&ds);
        dataset_free(&ds);
    }
    return 0;
}
