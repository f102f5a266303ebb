// test_dataset.c: data.yaml and [data] descriptions, image listing and label validation on tiny
// datasets written to a scratch folder, strict mode and min_items, and coco128's exact numbers.
#include "test/test.h"

#include <errno.h>

#include "io/check.h"
#include "io/dataset.h"
#include "io/image.h"

// ---- writing tiny datasets ---------------------------------------------------------------------
static void mkdirs(const char *path) {           // mkdir -p of path's folder
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        mkdir(buf, 0755);
        *p = '/';
    }
}

static const char *at(const char *dir, const char *rel) {   // dir/rel, in one of 8 rotating buffers
    static char buf[8][4096];
    static int i;
    i = (i + 1) % 8;
    size_t a = strlen(dir), b = strlen(rel);
    if (a + b + 2 > sizeof buf[i]) { printf("path too long: %s/%s\n", dir, rel); exit(1); }
    memcpy(buf[i], dir, a);
    buf[i][a] = '/';
    memcpy(buf[i] + a + 1, rel, b + 1);
    return buf[i];
}

// A fresh scratch folder, removed at exit (mkdtemp: test_tmpdir's snprintf trips -Werror=format-
// truncation in gcc 12 at -O2).
static char scratch_dirs[16][4096];
static int n_scratch;

static void scratch_remove(void) {
    char cmd[4200];
    for (int i = 0; i < n_scratch; i++)
        if (snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch_dirs[i]) < (int)sizeof cmd && system(cmd))
            printf("could not remove %s\n", scratch_dirs[i]);
}

static const char *scratch(const char *tag) {
    const char *t = getenv("TMPDIR");
    char *dir = scratch_dirs[n_scratch];
    if (n_scratch == 16 || snprintf(dir, sizeof scratch_dirs[0], "%s/yt-test-%s-XXXXXX",
                                   t && *t ? t : "/tmp", tag) >= (int)sizeof scratch_dirs[0] ||
        !mkdtemp(dir)) {
        printf("cannot create a scratch folder for %s\n", tag);
        exit(1);
    }
    if (n_scratch++ == 0) atexit(scratch_remove);
    return dir;
}

static void put(const char *dir, const char *rel, const char *text) {
    const char *path = at(dir, rel);
    mkdirs(path);
    FILE *f = fopen(path, "wb");
    if (!f) { printf("cannot write %s\n", path); exit(1); }
    fputs(text, f);
    fclose(f);
}

static void put_png(const char *dir, const char *rel, int w, int h) {
    const char *path = at(dir, rel);
    mkdirs(path);
    Image im = image_new(w, h, 128);
    Err err;
    if (image_save_png(path, &im, &err) != 0) { printf("%s\n", err.msg); exit(1); }
    image_free(&im);
}

// ---- opening a split with its report captured ----------------------------------------------------
typedef struct { int rc; Dataset ds; Err err; char *report; } Opened;

static Opened open_split(const char *yaml, const Config *cfg, const char *split, DatasetOptions opt) {
    Opened o = {0};
    size_t n;
    FILE *f = open_memstream(&o.report, &n);
    opt.report = f;
    o.rc = dataset_open(yaml, cfg, split, &opt, &o.ds, &o.err);
    fclose(f);
    return o;
}

static void opened_free(Opened *o) {
    if (o->rc == 0) dataset_free(&o->ds);
    free(o->report);
}

static const char *has(const char *text, const char *needle) {
    return text && needle && strstr(text, needle) ? text : NULL;
}
#define CHECK_HAS(text, needle) \
    CHECK(has((text), (needle)), "'%s' missing from:\n%s", (needle), (text) ? (text) : "(nothing)")

static const Sample *find(const Dataset *ds, const char *name) {   // by the image's file name
    for (int i = 0; i < ds->n; i++) {
        const char *slash = strrchr(ds->s[i].image, '/');
        if (!strcmp(slash ? slash + 1 : ds->s[i].image, name)) return &ds->s[i];
    }
    return NULL;
}

static Config *config_new(const char *ini) {   // by hand: config_load is not what is tested here
    Config *cfg = calloc(1, sizeof *cfg);
    snprintf(cfg->file, sizeof cfg->file, "%s", ini);
    return cfg;
}

static void data_kv(Config *cfg, const char *key, const char *value) {
    int i = cfg->n_data_kv++;
    snprintf(cfg->data_kv[i].key, sizeof cfg->data_kv[i].key, "%s", key);
    snprintf(cfg->data_kv[i].value, sizeof cfg->data_kv[i].value, "%s", value);
    memcpy(cfg->data_kv[i].at.file, cfg->file, sizeof cfg->file);
    cfg->data_kv[i].at.line = i + 2;           // as if under "[data]" on line 1
}

// ---- the label rules -----------------------------------------------------------------------------
// One image per rule, 16x12 PNGs; names say what their label file holds.
static const struct { const char *name, *label; } rules[] = {
    {"ok1",     "0 0.5 0.5 0.2 0.2\n1 0.3 0.3 0.1 0.1\n"},
    {"floatcls", "1.0 0.5 0.5 0.2 0.2\n"},
    {"halfcls", "1.5 0.5 0.5 0.2 0.2\n"},
    {"bigcls",  "0 0.5 0.5 0.2 0.2\n2 0.5 0.5 0.2 0.2\n"},
    {"negcls",  "-1 0.5 0.5 0.2 0.2\n"},
    {"few",     "\n\n0 0.5 0.5 0.2\n"},
    {"six",     "0 0.1 0.2 0.3 0.4 0.5\n"},
    {"poly",    "0 0.1 0.1 0.5 0.1 0.5 0.6\n1 0.2 0.2 0.4 0.4\n"},
    {"polybad", "0 0.1 0.1 0.5 0.1 0.5 0.6\n1 0.2 0.2 0.4 0.4 0.5\n"},
    {"nan",     "0 nan 0.5 0.2 0.2\n0 0.5 inf 0.2 0.2\n0 0.5 0.5 abc 0.2\n"},
    {"oob",     "0 1.02 0.5 0.2 0.2\n0 0.5 0.5 -0.02 0.1\n"},
    {"clip",    "0 1.005 0.5 0.2 0.2\n"},
    {"zero",    "0 0.5 0.5 0 0.1\n"},
    {"hex",     "0 0x0.8p0 0.5 0.2 0.2\n"},
    {"dup",     "1 0.5 0.5 0.2 0.2\n0 0.3 0.3 0.1 0.1\n1.0 0.50 0.5 0.2 0.2\n"},
    {"order",   "1 0.5 0.5 0.2 0.2\n0 0.3 0.3 0.1 0.1\n"},
    {"crlf",    "\xEF\xBB\xBF" "0 0.5 0.5 0.2 0.2\r\n\r\n1 0.2 0.2 0.1 0.1\r\n"},
    {"crlfbad", "\xEF\xBB\xBF" "0 0.5 0.5 0.2 0.2\r\n\r\n1 0.2 0.2 0.1\r\n"},
    {"empty",   ""},
    {"nolabel", NULL},
    {"dirlabel", NULL},
};

static const char *rules_dataset(void) {
    static char root[4096];
    snprintf(root, sizeof root, "%s", scratch("rules"));
    char rel[256];
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        snprintf(rel, sizeof rel, "images/train/%s.png", rules[i].name);
        put_png(root, rel, 16, 12);
        snprintf(rel, sizeof rel, "labels/train/%s.txt", rules[i].name);
        if (rules[i].label) put(root, rel, rules[i].label);
    }
    mkdir(at(root, "labels/train/dirlabel.txt"), 0755);        // a label that cannot be read
    put_png(root, "images/train/UP.PNG", 20, 20);               // extensions in any case
    put(root, "labels/train/UP.txt", "0 0.5 0.5 0.2 0.2\n");
    put(root, "images/train/pic.bmp", "BM not decoded");       // listed, unsupported
    put(root, "images/train/bad.png", "not a png at all");      // corrupt
    put_png(root, "images/train/tiny.png", 8, 8);              // under 10 px
    put_png(root, "images/train/.hidden.png", 16, 16);         // hidden: not listed
    put(root, "images/train/notes.md", "not an image");
    put(root, "labels/train/ghost.txt", "0 0.5 0.5 0.1 0.1\n"); // no image
    if (symlink("/nonexistent/x.jpg", at(root, "images/train/broken.jpg")) != 0) {
        printf("symlink: %s\n", strerror(errno)); exit(1);
    }
    put(root, "data.yaml", "train: images/train\nval: images/train\nnames: [cat, dog]\n");
    return root;
}

static void test_label_rules(void) {
    const char *root = rules_dataset();
    Opened o = open_split(at(root, "data.yaml"), NULL, "train", (DatasetOptions){0});
    const char *r = o.report;
    CHECK(o.rc == 0, "%s", o.err.msg);
    if (o.rc != 0) { opened_free(&o); return; }
    const Dataset *ds = &o.ds;
    CHECK(ds->n_listed == 25, "%d listed", ds->n_listed);
    CHECK(ds->n == 11, "%d kept", ds->n);
    CHECK(ds->n_excluded == 14, "%d excluded", ds->n_excluded);
    CHECK(ds->excluded_by[DS_BAD_CLASS] == 3, "%d", ds->excluded_by[DS_BAD_CLASS]);
    CHECK(ds->excluded_by[DS_BAD_COUNT] == 4, "%d", ds->excluded_by[DS_BAD_COUNT]);
    CHECK(ds->excluded_by[DS_NOT_NUMBER] == 2, "%d", ds->excluded_by[DS_NOT_NUMBER]);
    CHECK(ds->excluded_by[DS_OUT_OF_BOUNDS] == 1, "%d", ds->excluded_by[DS_OUT_OF_BOUNDS]);
    CHECK(ds->n_zero_boxes == 1, "%d zero-size boxes dropped", ds->n_zero_boxes);
    CHECK(ds->excluded_by[DS_BAD_LABEL_FILE] == 1, "%d", ds->excluded_by[DS_BAD_LABEL_FILE]);
    CHECK(ds->excluded_by[DS_UNSUPPORTED] == 1, "%d", ds->excluded_by[DS_UNSUPPORTED]);
    CHECK(ds->excluded_by[DS_BAD_IMAGE] == 2, "%d", ds->excluded_by[DS_BAD_IMAGE]);
    CHECK(ds->n_warnings == 4, "%d warnings (clip, dup, broken link, zero box)", ds->n_warnings);
    CHECK(ds->n_duplicates == 1, "%d", ds->n_duplicates);
    CHECK(ds->n_orphan_labels == 1, "%d", ds->n_orphan_labels);
    CHECK(ds->n_background == 3, "%d backgrounds (empty, nolabel, zero)", ds->n_background);
    CHECK(ds->n_instances == 13, "%d instances", ds->n_instances);
    CHECK(ds->class_count[0] == 7 && ds->class_count[1] == 6, "%d %d", ds->class_count[0],
          ds->class_count[1]);
    CHECK_HAS(r, "labels/train/halfcls.txt:1: class '1.5' is not an integer");
    CHECK_HAS(r, "labels/train/bigcls.txt:2: class 2 is outside 0..1");
    CHECK_HAS(r, "labels/train/negcls.txt:1: class -1 is outside");
    CHECK_HAS(r, "labels/train/few.txt:3: 4 values");
    CHECK_HAS(r, "labels/train/six.txt:1: 6 values");
    CHECK_HAS(r, "labels/train/polybad.txt:2: 6 values in a polygon file");
    CHECK_HAS(r, "labels/train/nan.txt:1: 'nan' is not a finite number");
    CHECK_HAS(r, "labels/train/nan.txt:2: 'inf' is not a finite number");
    CHECK_HAS(r, "labels/train/nan.txt:3: 'abc' is not a number");
    CHECK_HAS(r, "labels/train/oob.txt:1: cx = 1.02 is outside [0, 1]");
    CHECK_HAS(r, "labels/train/oob.txt:2: w = -0.02 is outside [0, 1]");
    CHECK_HAS(r, "labels/train/clip.txt:1: values up to 0.01 outside [0, 1] clipped");
    CHECK_HAS(r, "labels/train/zero.txt:1: zero-size box (w = 0, h = 0.1): the box is dropped, the image kept");
    CHECK_HAS(r, "labels/train/hex.txt:1: '0x0.8p0' is not a decimal number");
    CHECK_HAS(r, "labels/train/dup.txt:3: duplicate of line 1; dropped");
    CHECK_HAS(r, "labels/train/crlfbad.txt:3: 4 values");
    CHECK_HAS(r, "labels/train/dirlabel.txt: cannot read the label file");
    CHECK_HAS(r, "images/train/pic.bmp: unsupported format .bmp");
    CHECK_HAS(r, "images/train/bad.png: ");
    CHECK_HAS(r, "images/train/tiny.png: image is 8x8");
    CHECK_HAS(r, "images/train/broken.jpg: cannot read");
    CHECK_HAS(r, "labels/train/ghost.txt: label file without an image");
    CHECK_HAS(r, "train: images 11, backgrounds 3, instances 13; excluded 14, warnings 4, "
              "label files without an image 1, zero-size boxes dropped 1\n");
    CHECK(!strstr(r, "hidden") && !strstr(r, "notes.md"), "%s", r);

    const Sample *s = find(ds, "floatcls.png");
    CHECK(s && s->nbox == 1 && s->box[0].cls == 1, "3.0-style class ids are accepted");
    s = find(ds, "poly.png");   // polygons become their bounding boxes (segments2boxes)
    CHECK(s && s->nbox == 2, "poly");
    if (s && s->nbox == 2) {
        CHECK(close_enough(s->box[0].cx, 0.3, 1e-6, 0) && close_enough(s->box[0].cy, 0.35, 1e-6, 0) &&
              close_enough(s->box[0].w, 0.4, 1e-6, 0) && close_enough(s->box[0].h, 0.5, 1e-6, 0),
              "%g %g %g %g", s->box[0].cx, s->box[0].cy, s->box[0].w, s->box[0].h);
        CHECK(s->box[1].cls == 1 && close_enough(s->box[1].cx, 0.3, 1e-6, 0) &&
              close_enough(s->box[1].w, 0.2, 1e-6, 0), "2-point polygon");
    }
    s = find(ds, "clip.png");
    CHECK(s && s->nbox == 1 && s->box[0].cx == 1.0f, "clipped to 1");
    s = find(ds, "dup.png");   // deduplicated and sorted, class first (np.unique)
    CHECK(s && s->nbox == 2 && s->box[0].cls == 0 && s->box[1].cls == 1, "dup");
    s = find(ds, "order.png");  // no duplicates: file order kept
    CHECK(s && s->nbox == 2 && s->box[0].cls == 1 && s->box[1].cls == 0, "order");
    s = find(ds, "crlf.png");
    CHECK(s && s->nbox == 2 && s->box[1].cls == 1 && close_enough(s->box[1].h, 0.1, 1e-7, 0), "crlf");
    s = find(ds, "UP.PNG");
    CHECK(s && s->w == 20 && s->h == 20 && s->nbox == 1 && s->channels == 3, "UP.PNG");
    s = find(ds, "nolabel.png");
    CHECK(s && s->nbox == 0 && s->w == 16 && s->h == 12, "a missing label file: background");
    for (int i = 1; i < ds->n; i++)
        CHECK(strcmp(ds->s[i - 1].image, ds->s[i].image) < 0, "sorted by path");
    CHECK(!strcmp(ds->s[0].image, at(root, "images/train/UP.PNG")), "%s", ds->s[0].image);
    CHECK(!strcmp(ds->s[0].label, at(root, "labels/train/UP.txt")), "%s", ds->s[0].label);
    opened_free(&o);
}

static void test_strict_and_min_items(void) {
    const char *root = rules_dataset();
    Opened o = open_split(at(root, "data.yaml"), NULL, "train", (DatasetOptions){.strict = 1});
    CHECK(o.rc == -1, "strict must fail");
    CHECK_HAS(o.err.msg, "14 images excluded and strict = 1");
    CHECK_HAS(o.report, "labels/train/nan.txt:3: 'abc' is not a number");   // everything reported
    CHECK_HAS(o.report, "labels/train/zero.txt:1: zero-size box");
    opened_free(&o);

    o = open_split(at(root, "data.yaml"), NULL, "train", (DatasetOptions){.min_items = 2});
    CHECK(o.rc == 0, "%s", o.err.msg);
    if (o.rc == 0) {
        CHECK(o.ds.n == 5, "%d kept with >= 2 labels", o.ds.n);
        CHECK(o.ds.excluded_by[DS_MIN_ITEMS] == 6, "%d", o.ds.excluded_by[DS_MIN_ITEMS]);
        CHECK_HAS(o.report, "train: 6/25 images filtered from dataset");
    }
    opened_free(&o);

    o = open_split(at(root, "data.yaml"), NULL, "train", (DatasetOptions){.nc = 1});   // the model's nc
    CHECK(o.rc == 0, "%s", o.err.msg);
    if (o.rc == 0) CHECK(o.ds.n == 5 && o.ds.nc == 1, "%d kept, nc %d", o.ds.n, o.ds.nc);
    CHECK_HAS(o.report, "labels/train/ok1.txt:2: class 1 is outside 0..0 (nc = 1, from the model)");
    opened_free(&o);
}

// single_cls (train.py: labels[:, 0] = 0, names {0: 'item'} unless the data has one name) and
// fraction (Ultralytics: im_files[: round(n * fraction)] of the sorted list, round half to even)
static void test_single_cls_and_fraction(void) {
    const char *root = scratch("options");
    const char *img[5] = { "images/t/e.png", "images/t/a.png", "images/t/c.png", "images/t/b.png", "images/t/d.png" };
    const char *lab[5] = { "labels/t/e.txt", "labels/t/a.txt", "labels/t/c.txt", "labels/t/b.txt", "labels/t/d.txt" };
    const char *row[5] = { "2 0.5 0.5 0.2 0.2\n", "1 0.5 0.5 0.2 0.2\n0 0.4 0.4 0.1 0.1\n", "2 0.5 0.5 0.3 0.3\n",
                           "0 0.5 0.5 0.2 0.2\n", "1 0.5 0.5 0.2 0.2\n" };
    for (int i = 0; i < 5; i++) { put_png(root, img[i], 16, 16); put(root, lab[i], row[i]); }
    put(root, "data.yaml", "train: images/t\nval: images/t\nnames: [x, y, z]\n");
    put(root, "one.yaml", "train: images/t\nval: images/t\nnames: [only]\n");

    Opened o = open_split(at(root, "data.yaml"), NULL, "train", (DatasetOptions){.single_cls = 1, .nc = 1});
    CHECK(o.rc == 0, "%s", o.err.msg);
    if (o.rc == 0) {
        CHECK(o.ds.n == 5 && o.ds.nc == 1 && !strcmp(o.ds.names[0], "item"), "%d images, nc %d, %s", o.ds.n, o.ds.nc,
              o.ds.names[0]);
        for (int i = 0; i < o.ds.n; i++)
            for (int j = 0; j < o.ds.s[i].nbox; j++) CHECK(o.ds.s[i].box[j].cls == 0, "%s: class %d", o.ds.s[i].image,
                                                           o.ds.s[i].box[j].cls);
        CHECK(o.ds.n_instances == 6 && o.ds.class_count[0] == 6, "%d instances", o.ds.n_instances);
        CHECK(o.ds.n_excluded == 0, "the model's nc 1 must not exclude classes 1 and 2 under single_cls");
    }
    opened_free(&o);
    // len(names) == 1: the name is kept; classes 1 and 2 are still outside the data's names (excluded)
    o = open_split(at(root, "one.yaml"), NULL, "train", (DatasetOptions){.single_cls = 1});
    CHECK(o.rc == 0, "%s", o.err.msg);
    if (o.rc == 0) CHECK(o.ds.n == 1 && o.ds.nc == 1 && !strcmp(o.ds.names[0], "only"), "%d, %s", o.ds.n, o.ds.names[0]);
    opened_free(&o);

    // round(5 * 0.5) = round(2.5) = 2 (half to even), round(5 * 0.7) = round(3.5) = 4, round(5 * 0.3) = round(1.5) = 2
    static const struct { double f; int n; } frac[] = { { 0.5, 2 }, { 0.7, 4 }, { 0.3, 2 }, { 0.9, 4 }, { 1.0, 5 } };
    for (int k = 0; k < 5; k++) {
        o = open_split(at(root, "data.yaml"), NULL, "train", (DatasetOptions){.fraction = frac[k].f});
        CHECK(o.rc == 0, "%s", o.err.msg);
        if (o.rc == 0) {
            CHECK(o.ds.n == frac[k].n, "fraction %g: %d images, want %d", frac[k].f, o.ds.n, frac[k].n);
            for (int i = 0; i < o.ds.n; i++) {                // the first of the sorted list: a, b, c, d
                char want[8];
                snprintf(want, sizeof want, "%c.png", 'a' + i);
                CHECK(find(&o.ds, want) == &o.ds.s[i], "fraction %g: image %d is not %s", frac[k].f, i, want);
            }
            CHECK(!has(o.report, "label file without an image"), "left-out images' labels are no orphans:\n%s", o.report);
        }
        opened_free(&o);
    }
    o = open_split(at(root, "data.yaml"), NULL, "train", (DatasetOptions){.fraction = 0.05});
    CHECK(o.rc == -1, "round(0.25) = 0 images must fail");
    CHECK_HAS(o.err.msg, "fraction=0.05 keeps none of the 5 images");
    opened_free(&o);
}

// ---- descriptions --------------------------------------------------------------------------------
static const char *forms_dataset(void) {
    static char root[4096];
    snprintf(root, sizeof root, "%s", scratch("forms"));
    put_png(root, "images/a/x2.png", 16, 16);
    put_png(root, "images/a/x1.png", 16, 16);
    put_png(root, "images/b/y1.png", 16, 16);
    put(root, "labels/a/x1.txt", "0 0.5 0.5 0.2 0.2\n");
    put(root, "labels/a/x2.txt", "1 0.5 0.5 0.2 0.2\n");
    put(root, "labels/b/y1.txt", "1 0.5 0.5 0.2 0.2\n0 0.5 0.5 0.1 0.1\n");
    put(root, "b.txt", "./images/b/y1.png\n\nimages/b/y1.png\nREADME\n");
    return root;
}

static void test_yaml_forms(void) {
    const char *root = forms_dataset();
    put(root, "d1.yaml", "# comment\ntrain: images/a\nval: b.txt\nnames:\n  0: cat\n  1: dog\n");
    Opened o = open_split(at(root, "d1.yaml"), NULL, "train", (DatasetOptions){0});
    CHECK(o.rc == 0 && o.ds.n == 2 && o.ds.nc == 2, "%s", o.err.msg);
    if (o.rc == 0) {
        CHECK(!strcmp(o.ds.names[0], "cat") && !strcmp(o.ds.names[1], "dog"), "names mapping");
        CHECK(!strcmp(o.ds.s[0].image, at(root, "images/a/x1.png")), "%s", o.ds.s[0].image);
    }
    opened_free(&o);
    o = open_split(at(root, "d1.yaml"), NULL, "val", (DatasetOptions){0});   // a .txt list
    CHECK(o.rc == 0 && o.ds.n == 1 && o.ds.n_instances == 2, "%s", o.err.msg);
    CHECK_HAS(o.report, "images/b/y1.png: listed more than once; kept once");
    CHECK_HAS(o.report, "b.txt:4: 'README' is not an image file name");
    opened_free(&o);

    put(root, "d2.yaml", "train: [images/a, b.txt]\nval: images/a\nnames: [cat, dog]\n");
    o = open_split(at(root, "d2.yaml"), NULL, "train", (DatasetOptions){0});   // a list of both
    CHECK(o.rc == 0 && o.ds.n == 3, "%s", o.err.msg);
    if (o.rc == 0) CHECK(!strcmp(o.ds.s[2].image, at(root, "images/b/y1.png")), "%s", o.ds.s[2].image);
    opened_free(&o);

    put(root, "cfg/d3.yaml", "path: ..  # root\ntrain:\n  - images/a\nval: images/a\ntest:\n"
        "names: [cat, dog]\ndownload: https://example.com/x.zip\nextra: {a: 1}\n");
    o = open_split(at(root, "cfg/d3.yaml"), NULL, "train", (DatasetOptions){0});   // path: relative
    CHECK(o.rc == 0 && o.ds.n == 2, "%s", o.err.msg);
    if (o.rc == 0)
        CHECK(!strcmp(o.ds.s[0].image, at(root, "cfg/../images/a/x1.png")), "%s", o.ds.s[0].image);
    opened_free(&o);

    static const struct { const char *yaml, *split, *err; } bad[] = {
        {"train: images/a\nval: images/a\nnc: 3\nnames: [cat, dog]\n", "train",
         "e.yaml:3: nc: 3, but names (line 4)"},
        {"val: images/a\nnames: [cat]\n", "val", "e.yaml: no 'train' key"},
        {"train: images/a\nval: images/a\nnames:\n  0: a\n  2: b\n", "train", "e.yaml:5: names: '2'"},
        {"train: images/zzz\nval: images/a\nnames: [a]\n", "train", "e.yaml:1: train: "},
        {"train: [images/a\n", "train", "YAML syntax error"},
        {"train: images/a\nval: images/a\n", "train", "e.yaml: no 'names' key"},
        {"train: images/a\ntrain: images/b\nval: images/a\nnames: [a]\n", "train",
         "e.yaml:2: 'train' given twice"},
        {"train: {a: 1}\nval: images/a\nnames: [a]\n", "train", "e.yaml:1: expected a folder"},
        {"train: images/a\nval: images/a\nnames: [a, b]\n", "test", "e.yaml: no 'test' key"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put(root, "e.yaml", bad[i].yaml);
        o = open_split(at(root, "e.yaml"), NULL, bad[i].split, (DatasetOptions){0});
        CHECK(o.rc == -1, "case %zu must fail", i);
        if (o.rc == -1) CHECK_HAS(o.err.msg, bad[i].err);
        opened_free(&o);
    }
    o = open_split(at(root, "d2.yaml"), NULL, "train", (DatasetOptions){0});   // nc from names
    CHECK(o.rc == 0 && o.ds.nc == 2, "%s", o.err.msg);
    opened_free(&o);
}

// yolov9's data/coco.yaml habit: `path: ../datasets/coco` is relative to where train.py runs. Not a
// folder from the yaml's folder, it is tried from the current directory; when neither is one, the
// error names both places. download: gets one line saying what to fetch.
static void test_yaml_root_and_download(void) {
    const char *root = forms_dataset();
    char cwd[4096], ds_link[4200];
    if (!getcwd(cwd, sizeof cwd)) SKIP("getcwd failed");
    snprintf(ds_link, sizeof ds_link, "%s/ds", root);
    if (symlink(".", ds_link) && errno != EEXIST) SKIP("symlink failed");   // root/ds is the dataset
    put(root, "v9/data/c.yaml", "path: ../ds\ntrain: images/a\nval: images/a\nnames: [cat, dog]\n"
        "download: |\n  from utils.general import download\n  urls = ['https://example.com/c-labels.zip',\n"
        "          'http://images.example.org/zips/train.zip']\n  download(urls)\n");
    if (chdir(at(root, "v9"))) SKIP("chdir failed");
    Opened o = open_split(at(root, "v9/data/c.yaml"), NULL, "train", (DatasetOptions){0});
    CHECK(o.rc == 0 && o.ds.n == 2, "path: from the current directory: %s", o.err.msg);
    if (o.rc == 0) CHECK(!strcmp(o.ds.s[0].image, "../ds/images/a/x1.png"), "%s", o.ds.s[0].image);
    CHECK_HAS(o.report, "c.yaml:5: download: yolotrain does not download datasets; fetch "
              "https://example.com/c-labels.zip, http://images.example.org/zips/train.zip yourself");
    CHECK_HAS(o.report, "so that ../ds holds the images");
    opened_free(&o);
    o = open_split(at(root, "v9/data/c.yaml"), NULL, "val", (DatasetOptions){0});
    CHECK(o.rc == 0 && (!o.report || !strstr(o.report, "download:")), "the download line comes once a file");
    opened_free(&o);
    put(root, "v9/data/d.yaml", "path: ../nowhere\ntrain: images/a\nval: images/a\nnames: [cat, dog]\n");
    o = open_split(at(root, "v9/data/d.yaml"), NULL, "train", (DatasetOptions){0});
    CHECK(o.rc == -1, "a path: found nowhere must fail");
    if (o.rc == -1) {
        CHECK_HAS(o.err.msg, "d.yaml:1: path: ../nowhere: no such folder; tried ");
        CHECK_HAS(o.err.msg, "v9/data/../nowhere (from the folder of");
        CHECK_HAS(o.err.msg, "v9/../nowhere (from the current directory); write an absolute path, e.g. path: /data/nowhere");
    }
    opened_free(&o);
    if (chdir(cwd)) printf("cannot go back to %s\n", cwd);
    // the yaml's own folder still wins over the current directory
    put(root, "v9/data/e.yaml", "path: ..\ntrain: images/a\nval: images/a\nnames: [cat, dog]\n");
    put_png(root, "v9/images/a/z.png", 16, 16);
    put(root, "v9/labels/a/z.txt", "0 0.5 0.5 0.2 0.2\n");
    o = open_split(at(root, "v9/data/e.yaml"), NULL, "train", (DatasetOptions){0});
    CHECK(o.rc == 0 && o.ds.n == 1, "path: from the yaml's folder: %s", o.err.msg);
    opened_free(&o);
}

static void test_ini_data(void) {
    const char *root = forms_dataset();
    Config *cfg = config_new(at(root, "run.ini"));
    data_kv(cfg, "path", ".");
    data_kv(cfg, "train", "[images/a, 'b.txt']");
    data_kv(cfg, "val", "images/a");
    data_kv(cfg, "names", "['cat', \"dog\"]");
    data_kv(cfg, "download", "https://example.com");
    Opened o = open_split(NULL, cfg, "train", (DatasetOptions){0});
    CHECK(o.rc == 0 && o.ds.n == 3, "%s", o.err.msg);
    if (o.rc == 0)
        CHECK(!strcmp(o.ds.names[1], "dog") && !strcmp(o.ds.s[0].image, at(root, "images/a/x1.png")),
              "%s %s", o.ds.names[1], o.ds.s[0].image);
    opened_free(&o);

    cfg->n_data_kv = 3;
    data_kv(cfg, "names", "cat, dog");
    data_kv(cfg, "nc", "3");
    o = open_split(NULL, cfg, "val", (DatasetOptions){0});
    CHECK(o.rc == -1, "nc mismatch must fail");
    CHECK_HAS(o.err.msg, "run.ini:6: nc: 3, but names (line 5) has 2 entries");
    opened_free(&o);

    cfg->n_data_kv = 4;
    data_kv(cfg, "colour", "red");
    o = open_split(NULL, cfg, "val", (DatasetOptions){0});
    CHECK(o.rc == -1, "unknown key must fail");
    CHECK_HAS(o.err.msg, "run.ini:6: [data]: unknown key 'colour'");
    opened_free(&o);

    cfg->n_data_kv = 4;
    snprintf(cfg->data, sizeof cfg->data, "%s", at(root, "d.yaml"));
    o = open_split(NULL, cfg, "val", (DatasetOptions){0});
    CHECK(o.rc == -1, "data= and [data] together must fail");
    CHECK_HAS(o.err.msg, "both describe the dataset");
    opened_free(&o);
    free(cfg);
}

static void test_symlink_loop(void) {
    const char *root = scratch("loop");
    put_png(root, "images/t/a.png", 16, 16);
    put_png(root, "images/t/sub/a.png", 16, 16);       // same name, another folder: both kept
    put(root, "labels/t/a.txt", "0 0.5 0.5 0.2 0.2\n");
    put(root, "labels/t/sub/a.txt", "0 0.5 0.5 0.2 0.2\n0 0.4 0.4 0.2 0.2\n");
    CHECK(symlink("..", at(root, "images/t/sub/loop")) == 0, "symlink: %s", strerror(errno));
    put(root, "data.yaml", "train: images/t\nval: images/t\nnames: [a]\n");
    Opened o = open_split(at(root, "data.yaml"), NULL, "train", (DatasetOptions){0});
    CHECK(o.rc == 0 && o.ds.n == 2 && o.ds.n_instances == 3, "%s", o.err.msg);
    CHECK_HAS(o.report, "images/t/sub/loop: folder reached a second time");
    CHECK(o.rc != 0 || o.ds.n_orphan_labels == 0, "%d", o.ds.n_orphan_labels);
    opened_free(&o);
}

// A JPEG cut before its end marker is used, with a warning (the reference re-saves it in place).
static void test_truncated_jpeg(void) {
    const char *root = scratch("jpeg");
    const char *path = at(root, "images/v/cut.jpg");
    mkdirs(path);
    Image im = image_new(24, 16, 90);
    Err err;
    CHECK(image_save_jpeg(path, &im, 90, &err) == 0, "%s", err.msg);
    image_free(&im);
    struct stat st;
    CHECK(stat(path, &st) == 0 && truncate(path, st.st_size - 2) == 0, "truncate: %s", strerror(errno));
    put(root, "data.yaml", "train: images/v\nval: images/v\nnames: [a]\n");
    Opened o = open_split(at(root, "data.yaml"), NULL, "val", (DatasetOptions){0});
    CHECK(o.rc == 0 && o.ds.n == 1 && o.ds.n_warnings == 1 && o.ds.s[0].w == 24, "%s", o.err.msg);
    CHECK_HAS(o.report, "images/v/cut.jpg: JPEG without its end marker");
    opened_free(&o);
}

static void test_check_run(void) {
    const char *root = forms_dataset();
    put(root, "d.yaml", "train: images/a\nval: b.txt\nnames: [cat, dog, bird]\n");
    Config *cfg = config_new("");
    snprintf(cfg->data, sizeof cfg->data, "%s", at(root, "d.yaml"));
    char *text = NULL;
    size_t n;
    FILE *f = open_memstream(&text, &n);
    Err err;
    int rc = check_run(cfg, f, NULL, &err);
    fclose(f);
    CHECK(rc == 0, "%s", err.msg);
    CHECK_HAS(text, "== train\nimages: 2 (of 2 found)\nbackgrounds (no labels): 0\ninstances: 2\n"
              "  cat: 1\n  dog: 1\nclasses present: 2 of 3\nexcluded: 0\n");
    CHECK_HAS(text, "== val\n");
    free(text);

    put(root, "labels/b/y1.txt", "7 0.5 0.5 0.2 0.2\n");
    cfg->strict = 1;
    f = open_memstream(&text, &n);
    rc = check_run(cfg, f, NULL, &err);
    fclose(f);
    CHECK(rc == -1, "a bad val label under strict must fail");
    CHECK_HAS(text, "labels/b/y1.txt:1: class 7 is outside 0..2");
    CHECK_HAS(err.msg, "val: 1 image excluded and strict = 1");
    free(text);
    free(cfg);
}

// ---- coco128 -------------------------------------------------------------------------------------
static void test_coco128(void) {
    char yaml[CFG_PATH];
    NEED_COCO128(yaml);
    Opened o = open_split(yaml, NULL, "train", (DatasetOptions){.strict = 1});
    CHECK(o.rc == 0, "%s", o.err.msg);
    if (o.rc != 0) { opened_free(&o); return; }
    const Dataset *ds = &o.ds;
    CHECK(ds->n == 128 && ds->n_background == 2 && ds->n_instances == 929, "%d images, %d bg, %d inst",
          ds->n, ds->n_background, ds->n_instances);
    int present = 0;
    for (int c = 0; c < ds->nc; c++) present += ds->class_count[c] > 0;
    CHECK(present == 71 && ds->nc == 80, "%d classes present of %d", present, ds->nc);
    CHECK(ds->class_count[0] == 254 && ds->class_count[2] == 46, "person %d car %d", ds->class_count[0],
          ds->class_count[2]);
    CHECK(ds->n_orphan_labels == 2 && ds->n_excluded == 0 && ds->n_warnings == 0, "%d %d %d",
          ds->n_orphan_labels, ds->n_excluded, ds->n_warnings);
    CHECK(ds->n_gray == 1, "%d grayscale", ds->n_gray);
    CHECK(!strcmp(ds->names[79], "toothbrush"), "%s", ds->names[79]);
    CHECK_HAS(o.report, "labels/train2017/000000000656.txt: label file without an image");
    CHECK_HAS(o.report, "labels/train2017/000000000659.txt: label file without an image");
    const Sample *s = find(ds, "000000000086.jpg");
    CHECK(s && s->channels == 1, "the grayscale one");
    opened_free(&o);

    Config *cfg = config_new("");
    snprintf(cfg->data, sizeof cfg->data, "%s", yaml);
    char *text = NULL;
    size_t n;
    FILE *f = open_memstream(&text, &n);
    Err err;
    CHECK(check_run(cfg, f, NULL, &err) == 0, "%s", err.msg);
    fclose(f);
    CHECK_HAS(text, "images: 128 (of 128 found)\nbackgrounds (no labels): 2\ninstances: 929\n"
              "  person: 254\n");
    CHECK_HAS(text, "classes present: 71 of 80\nexcluded: 0\nwarnings: 0");
    CHECK_HAS(text, "label files without an image: 2\ngrayscale images: 1");
    free(text);
    free(cfg);
}

int main(void) {
    RUN(test_label_rules);
    RUN(test_strict_and_min_items);
    RUN(test_single_cls_and_fraction);
    RUN(test_yaml_forms);
    RUN(test_yaml_root_and_download);
    RUN(test_ini_data);
    RUN(test_symlink_loop);
    RUN(test_truncated_jpeg);
    RUN(test_check_run);
    RUN(test_coco128);
    return test_summary();
}
