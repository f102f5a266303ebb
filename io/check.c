// check.c: see check.h. The numbers come from dataset_open; this file only opens both splits and
// prints them.
#include "io/check.h"
#include "io/picture.h"

#include <string.h>


static void print_classes(const Dataset *ds, FILE *out) {
    int present = 0;
    for (int c = 0; c < ds->nc; c++) {
        if (!ds->class_count[c]) continue;
        fprintf(out, "  %s: %d\n", ds->names[c], ds->class_count[c]);
        present++;
    }
    fprintf(out, "classes present: %d of %d\n", present, ds->nc);
}

static void print_excluded(const Dataset *ds, FILE *out) {
    fprintf(out, "excluded: %d", ds->n_excluded);
    const char *sep = " (";
    for (int r = 0; r < DS_N_REASONS; r++) {
        if (!ds->excluded_by[r]) continue;
        fprintf(out, "%s%s: %d", sep, dataset_reason_name[r], ds->excluded_by[r]);
        sep = ", ";
    }
    fprintf(out, "%s\n", ds->n_excluded ? ")" : "");
}

static void print_split(const Dataset *ds, FILE *out) {
    fprintf(out, "images: %d (of %d found)\n", ds->n, ds->n_listed);
    fprintf(out, "backgrounds (no labels): %d\n", ds->n_background);
    fprintf(out, "instances: %d\n", ds->n_instances);
    print_classes(ds, out);
    print_excluded(ds, out);
    fprintf(out, "warnings: %d (duplicate label rows dropped: %d, zero-size boxes dropped: %d)\n",
            ds->n_warnings, ds->n_duplicates, ds->n_zero_boxes);
    fprintf(out, "label files without an image: %d\n", ds->n_orphan_labels);
    fprintf(out, "grayscale images: %d (expanded to RGB when loaded)\n", ds->n_gray);
}

int check_run(const Config *cfg, FILE *out, CheckPicturePath picture, Err *err) {
    static const char *const splits[2] = {"train", "val"};
    // Class ids are checked against the dataset's names, as training does (the dataset's nc replaces
    // the config's), and val against train's.
    // Every image is decoded: a whole header says nothing of the pixel data behind it.
    DatasetOptions opt = {.strict = cfg->strict, .decode = 1, .min_items = cfg->min_items, .quiet = 1,
                          .report = out};
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        Dataset ds;
        Err e;
        fprintf(out, "== %s\n", splits[i]);    // its problems follow, then the summary
        if (dataset_open(NULL, cfg, splits[i], &opt, &ds, &e) != 0) {
            fprintf(out, "not usable: %s\n", e.msg);
            if (rc == 0) *err = e;
            rc = -1;
            continue;
        }
        print_split(&ds, out);
        if (i == 0) opt.nc = ds.nc;
        char path[4 * CFG_PATH];
        if (i == 0 && picture) {
            if (picture(cfg, path, sizeof path, &e) != 0 || picture_augmented(cfg, &ds, path, &e) != 0) {
                fprintf(out, "picture of augmented samples: %s\n", e.msg);
                if (rc == 0) *err = e;
                rc = -1;
            } else {
                fprintf(out, "augmented training samples drawn with their labels: %s\n", path);
            }
        }
        dataset_free(&ds);
    }
    return rc;
}
