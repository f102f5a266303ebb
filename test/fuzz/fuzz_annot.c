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
#include "test/fuzz/scratch.h"

static char coco_yaml[4200], voc_yaml[4200], json[4200], xml[4200];

static void in_root(char *out, size_t n, const char *rel) { snprintf(out, n, "%s/%s", fuzz_root, rel); }

static void scratch_make(void) {
    fuzz_scratch("fuzz_annot");
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
    fuzz_put(coco_yaml, "train: x.json\nval: x.json\n", 26);
    in_root(voc_yaml, sizeof voc_yaml, "voc.yaml");
    fuzz_put(voc_yaml, "train: VOC\nval: VOC\nnames: [a, b, c]\n", 37);
    in_root(json, sizeof json, "x.json");
    in_root(xml, sizeof xml, "VOC/Annotations/a.xml");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_root[0]) scratch_make();
    if (size < 1) return 0;
    int voc = data[0] & 1;
    fuzz_put(voc ? xml : json, data + 1, size - 1);
    DatasetOptions opt = {.report = fuzz_sink, .quiet = (data[0] >> 1) & 1};
    Dataset ds;
    Err err;
    if (dataset_open(voc ? voc_yaml : coco_yaml, NULL, "train", &opt, &ds, &err) == 0) {
        fuzz_check_kept(&ds, ds.nc);
        dataset_free(&ds);
    }
    return 0;
}
