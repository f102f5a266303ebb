// test_annot.c: COCO JSON and Pascal VOC XML datasets (io/coco.c, io/voc.c, io/json.c, io/xml.c).
// The readers on good and malformed text; a converter that writes ../shared/data/coco128 as COCO JSON
// (COCO's annotations/ + train2017/ layout and Roboflow's) and as a VOC tree, whose training-side
// loading must give the YOLO txt set's labels (boxes to 1e-6, classes by name); each form's problems
// named with file:line; and `yolotrain check` and `yolotrain val` giving the same on the three forms.
#include "test/test.h"

#include <errno.h>

#include "cfg/config.h"
#include "core/eval/val.h"
#include "io/annot.h"
#include "io/dataset.h"
#include "io/image.h"
#include "io/json.h"
#include "io/xml.h"

// ---- files -----------------------------------------------------------------------------------------
static void mkdirs(const char *path) {           // mkdir -p of path's folder
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        mkdir(buf, 0755);
        *p = '/';
    }
}

static FILE *create(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static FILE *create(const char *fmt, ...) {
    char path[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    mkdirs(path);
    FILE *f = fopen(path, "wb");
    if (!f) { printf("cannot write %s: %s\n", path, strerror(errno)); exit(1); }
    return f;
}

static void put_png(const char *path, int w, int h) {
    mkdirs(path);
    Image im = image_new(w, h, 128);
    Err err;
    if (image_save_png(path, &im, &err) != 0) { printf("%s\n", err.msg); exit(1); }
    image_free(&im);
}

typedef struct { int rc; Dataset ds; Err err; char *report; } Opened;

static Opened open_split(const char *yaml, const char *split) {
    Opened o = {0};
    size_t n;
    FILE *f = open_memstream(&o.report, &n);
    DatasetOptions opt = {.report = f};
    o.rc = dataset_open(yaml, NULL, split, &opt, &o.ds, &o.err);
    fclose(f);
    return o;
}

static void opened_free(Opened *o) {
    if (o->rc == 0) dataset_free(&o->ds);
    free(o->report);
}

static const char *has(const char *text, const char *needle) {
    return text && strstr(text, needle) ? text : NULL;
}
static const char *shown(const char *text) { return text ? text : "(nothing)"; }
#define CHECK_HAS(text, needle) CHECK(has((text), (needle)), "'%s' missing from:\n%s", (needle), shown(text))

// ---- the readers ---------------------------------------------------------------------------------
static int json_error(const char *text, char *msg, size_t n) {
    Err err = {{0}};
    JsonCur c;
    json_begin(&c, "t.json", text, strlen(text), &err);
    int rc = json_skip(&c) || json_end(&c);
    snprintf(msg, n, "%s", err.msg);
    return rc;
}

static void test_json_reader(void) {
    const char *text = "\xEF\xBB\xBF{\"a\": [1, -2.5e1, true, null, {}],\n \"s\": \"\\u00e9\\ud83d\\ude00\\n\", \"n\": 0}";
    Err err = {{0}};
    JsonCur c;
    json_begin(&c, "t.json", text, strlen(text), &err);
    char key[16], *s = NULL;
    double v = 0, sum = 0;
    int n_keys = 0, b = 0;
    CHECK(json_object(&c) == 0, "%s", err.msg);
    for (int r; (r = json_key(&c, key, sizeof key)) == 1; n_keys++) {
        if (!strcmp(key, "a")) {
            CHECK(json_array(&c) == 0, "%s", err.msg);
            for (int i = 0; json_item(&c) == 1; i++) {
                if (i < 2) { CHECK(json_number(&c, &v) == 0, "%s", err.msg); sum += v; }
                else if (i == 2) CHECK(json_bool(&c, &b) == 0 && b == 1, "%s", err.msg);
                else CHECK(json_skip(&c) == 0, "%s", err.msg);
            }
        } else if (!strcmp(key, "s")) {
            CHECK(json_string(&c, &s) == 0, "%s", err.msg);
        } else {
            CHECK(json_skip(&c) == 0, "%s", err.msg);
        }
    }
    CHECK(json_end(&c) == 0 && n_keys == 3 && sum == -24, "keys %d sum %g: %s", n_keys, sum, err.msg);
    CHECK(s && !strcmp(s, "\xC3\xA9\xF0\x9F\x98\x80\n"), "decoded '%s'", s ? s : "(null)");
    free(s);
    char msg[1024];
    CHECK(json_error("{\"a\": [1, 2,]}", msg, sizeof msg) && strstr(msg, "t.json:1: (byte 12) a comma before ']'"), "%s", msg);
    CHECK(json_error("{\"a\":\n\n 01}", msg, sizeof msg) && strstr(msg, "t.json:3:"), "%s", msg);
    CHECK(json_error("{\"a\": \"x", msg, sizeof msg) && strstr(msg, "never ends"), "%s", msg);
    CHECK(json_error("[1] x", msg, sizeof msg) && strstr(msg, "after the end"), "%s", msg);
    CHECK(json_error("{\"a\" 1}", msg, sizeof msg) && strstr(msg, "expected ':'"), "%s", msg);
    CHECK(json_error("\"\\ud800\"", msg, sizeof msg) && strstr(msg, "surrogate"), "%s", msg);
    CHECK(json_error("1e999", msg, sizeof msg) && strstr(msg, "out of range"), "%s", msg);
    char deep[1200];
    memset(deep, '[', 1000);
    deep[1000] = 0;
    CHECK(json_error(deep, msg, sizeof msg) && strstr(msg, "nested deeper than 256"), "%s", msg);
}

static void test_xml_reader(void) {
    const char *text = "<?xml version=\"1.0\"?>\n<!-- a VOC file -->\n<annotation verified=\"no\">\n"
                       "  <filename>a&amp;b.jpg</filename>\n  <object><name><![CDATA[dog]]></name>\n"
                       "    <bndbox><xmin>1</xmin><ymin>2</ymin><xmax>&#51;</xmax><ymax>&#x34;&#xe9;</ymax></bndbox>\n"
                       "  </object>\n  <empty/>\n</annotation>\n";
    XmlNode root;
    Err err = {{0}};
    CHECK(xml_parse("a.xml", text, strlen(text), &root, &err) == 0, "%s", err.msg);
    if (err.msg[0]) return;
    const XmlNode *fn = xml_child(&root, "filename"), *o = xml_child(&root, "object");
    const XmlNode *bb = o ? xml_child(o, "bndbox") : NULL, *xmax = bb ? xml_child(bb, "xmax") : NULL;
    CHECK(!strcmp(root.name, "annotation") && root.n_child == 3, "%s %d", root.name, root.n_child);
    CHECK(fn && !strcmp(fn->text, "a&b.jpg"), "%s", fn ? fn->text : "no filename");
    CHECK(o && o->line == 5 && !strcmp(xml_child(o, "name")->text, "dog"), "object");
    CHECK(xmax && !strcmp(xmax->text, "3"), "%s", xmax ? xmax->text : "no xmax");
    const XmlNode *ymax = bb ? xml_child(bb, "ymax") : NULL;
    CHECK(ymax && !strcmp(ymax->text, "4\xC3\xA9"), "%s", ymax ? ymax->text : "no ymax");
    xml_free(&root);
    static const char *const bad[][2] = {
        {"<a>\n<b></c></a>", "a.xml:2: an end tag that does not match <b>"},
        {"<a>\n<b>", "a.xml:2: <b> (line 2) is never closed"},
        {"<a x=1></a>", "must be quoted"},
        {"<a>&nope;</a>", "unknown entity"},
        {"<a>&# 5;</a>", "bad character reference"},
        {"<a>&#x110000;</a>", "bad character reference"},
        {"<a></a><b/>", "text after the document element"},
        {"", "no element"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (Err){{0}};
        int rc = xml_parse("a.xml", bad[i][0], strlen(bad[i][0]), &root, &err);
        CHECK(rc == -1 && strstr(err.msg, bad[i][1]), "'%s': %s", bad[i][0], err.msg);
    }
    char deep[1000] = "";
    for (int i = 0; i < 100; i++) strcat(deep, "<a>");
    err = (Err){{0}};
    CHECK(xml_parse("a.xml", deep, strlen(deep), &root, &err) == -1 && strstr(err.msg, "deeper than 64"), "%s", err.msg);
}

// ---- the converter: a YOLO dataset as COCO JSON and as VOC -----------------------------------------
static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

// COCO instances JSON: category ids 2k+1 (gaps, as COCO's 1..90), listed in reverse so that only id
// order maps them to classes; file_names are the images' base names; segmentation and area to skip.
static void write_coco(const Dataset *ds, const char *path) {
    FILE *f = create("%s", path);
    fprintf(f, "{\"info\": {\"description\": \"coco128 as COCO\", \"year\": 2026},\n \"licenses\": [],\n \"images\": [\n");
    for (int i = 0; i < ds->n; i++)
        fprintf(f, "  {\"id\": %d, \"file_name\": \"%s\", \"width\": %d, \"height\": %d}%s\n", i + 10,
                base_name(ds->s[i].image), ds->s[i].w, ds->s[i].h, i + 1 < ds->n ? "," : "");
    fprintf(f, " ],\n \"annotations\": [\n");
    int id = 1;
    for (int i = 0; i < ds->n; i++)
        for (int j = 0; j < ds->s[i].nbox; j++) {
            const Box *b = &ds->s[i].box[j];
            double W = ds->s[i].w, H = ds->s[i].h, x = ((double)b->cx - (double)b->w / 2) * W,
                   y = ((double)b->cy - (double)b->h / 2) * H;
            fprintf(f, "%s  {\"id\": %d, \"image_id\": %d, \"category_id\": %d, \"iscrowd\": 0, \"area\": 1.5, "
                    "\"segmentation\": [[1, 2, 3, 4, 5, 6]], \"bbox\": [%.17g, %.17g, %.17g, %.17g]}", id > 1 ? ",\n" : "",
                    id, i + 10, 2 * b->cls + 1, x, y, (double)b->w * W, (double)b->h * H);
            id++;
        }
    fprintf(f, "\n ],\n \"categories\": [\n");
    for (int k = ds->nc - 1; k >= 0; k--)
        fprintf(f, "  {\"id\": %d, \"name\": \"%s\", \"supercategory\": \"thing\"}%s\n", 2 * k + 1, ds->names[k],
                k ? "," : "");
    fprintf(f, " ]\n}\n");
    fclose(f);
}

// A VOC tree: Annotations/STEM.xml, JPEGImages/STEM.jpg (links), ImageSets/Main/train.txt listing every
// image (val has no list: every XML file). Corners 1-based, as VOC writes them; the first image also
// gets a difficult object, which the reader skips.
static void write_voc(const Dataset *ds, const char *root) {
    FILE *set = create("%s/ImageSets/Main/train.txt", root);
    for (int i = 0; i < ds->n; i++) {
        const Sample *s = &ds->s[i];
        char stem[256];
        snprintf(stem, sizeof stem, "%s", base_name(s->image));
        *strrchr(stem, '.') = 0;
        fprintf(set, "%s\n", stem);
        char link[4400];
        snprintf(link, sizeof link, "%.3000s/JPEGImages/%.255s.jpg", root, stem);
        mkdirs(link);
        char target[4096];
        if (!realpath(s->image, target) || symlink(target, link)) {
            printf("cannot link %s: %s\n", link, strerror(errno));
            exit(1);
        }
        FILE *f = create("%s/Annotations/%s.xml", root, stem);
        fprintf(f, "<annotation>\n\t<folder>VOC2012</folder>\n\t<filename>%s.jpg</filename>\n\t<size>\n\t\t<width>%d</width>"
                "\n\t\t<height>%d</height>\n\t\t<depth>3</depth>\n\t</size>\n", stem, s->w, s->h);
        for (int j = 0; j < s->nbox + (i == 0); j++) {
            Box b = j < s->nbox ? s->box[j] : (Box){0, 0.5f, 0.5f, 0.2f, 0.2f};
            double W = s->w, H = s->h, x1 = ((double)b.cx - (double)b.w / 2) * W, y1 = ((double)b.cy - (double)b.h / 2) * H;
            fprintf(f, "\t<object>\n\t\t<name>%s</name>\n\t\t<pose>Unspecified</pose>\n\t\t<difficult>%d</difficult>\n"
                    "\t\t<bndbox>\n\t\t\t<xmin>%.17g</xmin>\n\t\t\t<ymin>%.17g</ymin>\n\t\t\t<xmax>%.17g</xmax>\n"
                    "\t\t\t<ymax>%.17g</ymax>\n\t\t</bndbox>\n\t</object>\n", ds->names[b.cls], j == s->nbox,
                    x1 + 1, y1 + 1, x1 + (double)b.w * W + 1, y1 + (double)b.h * H + 1);
        }
        fprintf(f, "</annotation>\n");
        fclose(f);
    }
    fclose(set);
}

static void names_yaml(FILE *f, const Dataset *ds) {
    fprintf(f, "names:\n");
    for (int k = 0; k < ds->nc; k++) fprintf(f, "  %d: %s\n", k, ds->names[k]);
}

// tmp/coco/{annotations/instances_train2017.json, train2017 -> coco128's images, data.yaml (train_images:)},
// tmp/rf/{_annotations.coco.json, images -> coco128's images, data.yaml}, tmp/voc/{VOC2012/..., data.yaml
// without names, named.yaml with coco128's}. 0, or -1 when ../shared is absent.
static const char *tmp;
static Dataset yolo;

static int forms_make(void) {
    static int made;
    if (made) return made > 0 ? 0 : -1;
    made = -1;
    const char *shared = shared_dir();
    if (!shared) return -1;
    char yaml[4400], images[4400];
    snprintf(yaml, sizeof yaml, "%s/data/coco128/data.yaml", shared);
    snprintf(images, sizeof images, "%s/data/coco128/images/train2017", shared);
    if (access(yaml, R_OK)) return -1;
    Opened o = open_split(yaml, "train");
    if (o.rc) { printf("    %s\n", o.err.msg); free(o.report); return -1; }
    free(o.report);
    yolo = o.ds;
    tmp = test_tmpdir("annot");
    char path[4400], real[4096];
    if (!realpath(images, real)) return -1;
    write_coco(&yolo, (snprintf(path, sizeof path, "%s/coco/annotations/instances_train2017.json", tmp), path));
    snprintf(path, sizeof path, "%s/coco/train2017", tmp);
    if (symlink(real, path)) return -1;
    FILE *f = create("%s/coco/data.yaml", tmp);
    fprintf(f, "train: annotations/instances_train2017.json\ntrain_images: train2017\n"
               "val: annotations/instances_train2017.json\nval_images: train2017\n");
    fclose(f);
    write_coco(&yolo, (snprintf(path, sizeof path, "%s/rf/train/_annotations.coco.json", tmp), path));
    snprintf(path, sizeof path, "%s/rf/train/images", tmp);
    if (symlink(real, path)) return -1;
    f = create("%s/rf/data.yaml", tmp);
    fprintf(f, "path: .\ntrain: train/_annotations.coco.json\nval: train/_annotations.coco.json\n");
    names_yaml(f, &yolo);
    fclose(f);
    snprintf(path, sizeof path, "%s/voc/VOC2012", tmp);
    write_voc(&yolo, path);
    f = create("%s/voc/data.yaml", tmp);
    fprintf(f, "train: VOC2012\nval: VOC2012\n");
    fclose(f);
    f = create("%s/voc/named.yaml", tmp);
    fprintf(f, "train: VOC2012/ImageSets/Main/train.txt\nval: VOC2012\n");
    names_yaml(f, &yolo);
    fclose(f);
    made = 1;
    return 0;
}

// The same images (by base name) with the same boxes to 1e-6 and the same classes by name.
static void same_labels(const char *form, const Dataset *ds) {
    CHECK(ds->n == yolo.n, "%s: %d images, the YOLO set %d", form, ds->n, yolo.n);
    int worst_i = -1, bad_cls = 0;
    double worst = 0;
    for (int i = 0; i < ds->n && i < yolo.n; i++) {
        const Sample *a = &ds->s[i], *b = &yolo.s[i];
        CHECK(!strcmp(base_name(a->image), base_name(b->image)) && a->nbox == b->nbox && a->w == b->w,
              "%s: image %d: %s with %d boxes, the YOLO set %s with %d", form, i, a->image, a->nbox, b->image, b->nbox);
        for (int j = 0; j < a->nbox && j < b->nbox; j++) {
            const Box *p = &a->box[j], *q = &b->box[j];
            bad_cls += strcmp(ds->names[p->cls], yolo.names[q->cls]) != 0;
            double d = fmax(fmax(fabs(p->cx - q->cx), fabs(p->cy - q->cy)), fmax(fabs(p->w - q->w), fabs(p->h - q->h)));
            if (d > worst) worst = d, worst_i = i;
        }
    }
    CHECK(worst <= 1e-6 && !bad_cls, "%s: largest box difference %g (image %d), %d classes differ", form, worst,
          worst_i, bad_cls);
}

static void test_same_labels(void) {
    if (forms_make()) SKIP("../shared/data/coco128 missing");
    char yaml[4400];
    const char *forms[][2] = {{"coco", "data.yaml"}, {"rf", "data.yaml"}, {"voc", "data.yaml"}, {"voc", "named.yaml"}};
    for (int k = 0; k < 4; k++) {
        snprintf(yaml, sizeof yaml, "%s/%s/%s", tmp, forms[k][0], forms[k][1]);
        for (int split = 0; split < 2; split++) {
            Opened o = open_split(yaml, split ? "val" : "train");
            CHECK(o.rc == 0, "%s: %s\n%s", yaml, o.err.msg, o.report);
            if (o.rc) continue;
            same_labels(yaml, &o.ds);
            CHECK(o.ds.n_warnings == 0 && o.ds.n_excluded == 0, "%s: warnings %d, excluded %d:\n%s", yaml,
                  o.ds.n_warnings, o.ds.n_excluded, o.report);
            if (k < 2 || k == 3) CHECK(o.ds.nc == 80 && !strcmp(o.ds.names[79], "toothbrush"), "%s: nc %d", yaml, o.ds.nc);
            if (k == 2) CHECK(o.ds.nc == 71 && !strcmp(o.ds.names[0], "airplane"), "%s: nc %d, names[0] %s", yaml,
                              o.ds.nc, o.ds.names[0]);
            if (k >= 2) CHECK_HAS(o.report, "1 object marked difficult skipped");
            opened_free(&o);
        }
    }
}

// ---- problems, named where they are ------------------------------------------------------------------
static void test_coco_problems(void) {
    const char *d = test_tmpdir("annot-coco");
    char yaml[4400], json[4400];
    put_png((snprintf(json, sizeof json, "%s/images/a.png", d), json), 40, 30);
    put_png((snprintf(json, sizeof json, "%s/images/b.png", d), json), 40, 30);
    put_png((snprintf(json, sizeof json, "%s/images/c.png", d), json), 40, 30);
    put_png((snprintf(json, sizeof json, "%s/images/e.png", d), json), 40, 30);
    snprintf(json, sizeof json, "%s/x.json", d);
    FILE *f = create("%s", json);
    fprintf(f, "{\"categories\": [{\"id\": 1, \"name\": \"cat\"}, {\"id\": 3, \"name\": \"dog\"}],\n"     // 1
               "\"images\": [\n"                                                                      // 2
               "{\"id\": 1, \"file_name\": \"a.png\", \"width\": 40, \"height\": 30},\n"             // 3
               "{\"id\": 2, \"file_name\": \"b.png\", \"width\": 40, \"height\": 30},\n"             // 4
               "{\"id\": 3, \"file_name\": \"gone.png\", \"width\": 40, \"height\": 30},\n"          // 5
               "{\"id\": 4, \"file_name\": \"c.png\", \"width\": 40, \"height\": 30},\n"             // 6
               "{\"id\": 5, \"file_name\": \"e.png\", \"width\": 80, \"height\": 60}],\n"            // 7
               "\"annotations\": [\n"                                                                 // 8
               "{\"image_id\": 1, \"category_id\": 7, \"bbox\": [1, 1, 10, 10]},\n"                  // 9
               "{\"image_id\": 2, \"category_id\": 3, \"bbox\": [30, 1, 30, 10], \"id\": 12},\n"    // 10
               "{\"image_id\": 4, \"category_id\": 3, \"bbox\": [1, 1, \"10\", 10]},\n"              // 11
               "{\"image_id\": 4, \"category_id\": 1, \"bbox\": [1, 1, 10]},\n"                      // 12
               "{\"image_id\": 5, \"category_id\": 1, \"bbox\": [8, 6, 20, 20]},\n"                  // 13
               "{\"image_id\": 5, \"category_id\": 1, \"bbox\": [8, 6, -4, 20]},\n"                  // 14
               "{\"image_id\": 5, \"category_id\": 3, \"bbox\": [0, 0, 80, 60], \"iscrowd\": 1},\n"  // 15
               "{\"image_id\": 9, \"category_id\": 1, \"bbox\": [1, 1, 1, 1]}]}\n");                 // 16
    fclose(f);
    f = create("%s/data.yaml", d);
    fprintf(f, "train: x.json\nval: x.json\n");
    fclose(f);
    snprintf(yaml, sizeof yaml, "%s/data.yaml", d);
    Opened o = open_split(yaml, "train");
    CHECK(o.rc == 0, "%s\n%s", o.err.msg, o.report);
    CHECK_HAS(o.report, "x.json:9: annotation 1: category_id 7 is not among the 2 categories");
    CHECK_HAS(o.report, "x.json:10: annotation id 12: box x1 y1 x2 y2 = 30 1 60 11 pixels: cx = 1.125 is outside [0, 1]");
    CHECK_HAS(o.report, "x.json:5: image id 3: 'gone.png' is in none of");
    CHECK_HAS(o.report, "x.json:11: annotation 3: bbox holds a value that is not a number");
    CHECK_HAS(o.report, "x.json:12: annotation 4: bbox is not [x, y, width, height] (4 numbers)");
    CHECK_HAS(o.report, "x.json:7: ");
    CHECK_HAS(o.report, "is 40x30, the file says 80x60");
    CHECK_HAS(o.report, "x.json:14: annotation 6: zero-size box");
    CHECK_HAS(o.report, "x.json:16: image_id 9 is not among the images");
    CHECK_HAS(o.report, "1 crowd annotation (iscrowd: 1) skipped");
    if (o.rc == 0) {
        CHECK(o.ds.n == 1 && o.ds.n_excluded == 4 && o.ds.nc == 2 && !strcmp(o.ds.names[1], "dog"),
              "kept %d, excluded %d, nc %d", o.ds.n, o.ds.n_excluded, o.ds.nc);
        CHECK(o.ds.excluded_by[DS_BAD_CLASS] == 1 && o.ds.excluded_by[DS_OUT_OF_BOUNDS] == 1 &&
              o.ds.excluded_by[DS_BAD_IMAGE] == 1 && o.ds.excluded_by[DS_NOT_NUMBER] == 1, "reasons");
        const Box *b = o.ds.n ? o.ds.s[0].box : NULL;   // e.png: 80x60 declared, box 8 6 20 20
        CHECK(b && o.ds.s[0].nbox == 1 && fabsf(b->cx - 0.225f) < 1e-6f && fabsf(b->h - 1.0f / 3) < 1e-6f,
              "e.png's box %g %g %g %g", b ? b->cx : 0, b ? b->cy : 0, b ? b->w : 0, b ? b->h : 0);
    }
    opened_free(&o);
    // the data.yaml's names must agree with the categories; a malformed file names line and byte
    f = create("%s/data.yaml", d);
    fprintf(f, "train: x.json\nval: x.json\nnames: [a, b, c]\n");
    fclose(f);
    o = open_split(yaml, "train");
    CHECK(o.rc == -1 && strstr(o.err.msg, "x.json:1: 2 categories, but the dataset has 3 classes"), "%s", o.err.msg);
    opened_free(&o);
    f = create("%s", json);
    fprintf(f, "{\"images\": [\n  {\"id\": 1, \"file_name\": \"a.png\"}\n  {\"id\": 2}]}\n");
    fclose(f);
    o = open_split(yaml, "train");
    CHECK(o.rc == -1 && strstr(o.err.msg, "x.json:3: (byte 49) expected ',' or ']', found an object"), "%s", o.err.msg);
    opened_free(&o);
    f = create("%s", json);
    fprintf(f, "{\"images\": [{\"id\": 1, \"file_name\": \"a.png\"},\n {\"file_name\": \"b.png\"}], \"categories\": []}");
    fclose(f);
    o = open_split(yaml, "train");
    CHECK(o.rc == -1 && strstr(o.err.msg, "x.json:2: an entry of \"images\" without an id"), "%s", o.err.msg);
    opened_free(&o);
    f = create("%s", json);
    fprintf(f, "{\"images\": [], \"categories\": [{\"id\": 1, \"name\": \"a\"}, {\"id\": 2, \"name\": \"b\"}, "
               "{\"id\": 3, \"name\": \"c\"}]}");
    fclose(f);
    o = open_split(yaml, "train");
    CHECK(o.rc == -1 && strstr(o.err.msg, "data.yaml:1: train: ") && strstr(o.err.msg, "x.json lists no images"), "%s",
          o.err.msg);
    CHECK(!strstr(o.report, "named otherwise"), "%s", o.report);
    opened_free(&o);
    f = create("%s", json);   // names that differ from the categories': one warning
    fprintf(f, "{\"images\": [], \"categories\": [{\"id\": 1, \"name\": \"a\"}, {\"id\": 2, \"name\": \"x\"}, "
               "{\"id\": 3, \"name\": \"c\"}]}");
    fclose(f);
    o = open_split(yaml, "train");
    CHECK_HAS(o.report, "x.json:1: 1 category is named otherwise in data.yaml's names (the first: category id 2 'x' is "
              "class 1, 'b' there)");
    opened_free(&o);
    // train_images: only beside a .json
    f = create("%s/data.yaml", d);
    fprintf(f, "train: images\nval: images\ntrain_images: images\nnames: [a]\n");
    fclose(f);
    o = open_split(yaml, "train");
    CHECK(o.rc == -1 && strstr(o.err.msg, "data.yaml:3: train_images: only for a train split that names a COCO"),
          "%s", o.err.msg);
    opened_free(&o);
}

// Roboflow's export: category 0 is the dataset's name, the supercategory of the real ones, and labels nothing.
static void test_roboflow_category(void) {
    const char *d = test_tmpdir("annot-rf");
    char path[4400];
    put_png((snprintf(path, sizeof path, "%s/train/a.png", d), path), 40, 30);
    FILE *f = create("%s/train/_annotations.coco.json", d);
    fprintf(f, "{\"categories\": [{\"id\": 0, \"name\": \"cells\", \"supercategory\": \"none\"},\n"
               " {\"id\": 1, \"name\": \"Platelets\", \"supercategory\": \"cells\"},\n"
               " {\"id\": 2, \"name\": \"RBC\", \"supercategory\": \"cells\"}],\n"
               " \"images\": [{\"id\": 0, \"file_name\": \"a.png\", \"width\": 40, \"height\": 30}],\n"
               " \"annotations\": [{\"id\": 0, \"image_id\": 0, \"category_id\": 2, \"bbox\": [4, 3, 20, 15]}]}\n");
    fclose(f);
    f = create("%s/data.yaml", d);
    fprintf(f, "train: train/_annotations.coco.json\nval: train/_annotations.coco.json\n");
    fclose(f);
    snprintf(path, sizeof path, "%s/data.yaml", d);
    Opened o = open_split(path, "train");
    CHECK(o.rc == 0, "%s\n%s", o.err.msg, o.report);
    CHECK_HAS(o.report, "category 0 'cells' is the supercategory of all the others and labels nothing");
    if (o.rc == 0)
        CHECK(o.ds.nc == 2 && !strcmp(o.ds.names[0], "Platelets") && o.ds.n == 1 && o.ds.s[0].nbox == 1 &&
              o.ds.s[0].box[0].cls == 1 && fabsf(o.ds.s[0].box[0].cx - 0.35f) < 1e-6f, "nc %d, %s", o.ds.nc, o.ds.names[0]);
    opened_free(&o);
}

static void voc_xml(const char *d, const char *stem, const char *objects) {
    FILE *f = create("%s/VOC/Annotations/%s.xml", d, stem);
    fprintf(f, "<annotation>\n  <filename>%s.png</filename>\n  <size><width>40</width><height>30</height></size>\n%s"
               "</annotation>\n", stem, objects);
    fclose(f);
}

static void test_voc_problems(void) {
    const char *d = test_tmpdir("annot-voc");
    const char *stems[] = {"a", "b", "c", "e", "g"};
    char path[4400], yaml[4400];
    for (int i = 0; i < 5; i++) put_png((snprintf(path, sizeof path, "%s/VOC/JPEGImages/%s.png", d, stems[i]), path), 40, 30);
    const char *obj = "  <object>\n    <name>%s</name>\n    <difficult>%d</difficult>\n"
                      "    <bndbox><xmin>%s</xmin><ymin>2</ymin><xmax>21</xmax><ymax>11</ymax></bndbox>\n  </object>\n";
    char o1[512], o2[512];
    snprintf(o1, sizeof o1, obj, "dog", 0, "1");
    voc_xml(d, "a", o1);                                     // good: dog
    snprintf(o1, sizeof o1, obj, "horse", 0, "1");
    voc_xml(d, "b", o1);                                     // class not among names
    snprintf(o1, sizeof o1, obj, "cat", 0, "x1");
    snprintf(o2, sizeof o2, obj, "dog", 0, "1");
    char both[1100];
    snprintf(both, sizeof both, "%s%s", o2, o1);
    voc_xml(d, "c", both);                                   // object 2: xmin not a number, line 9
    snprintf(o1, sizeof o1, obj, "cat", 1, "1");
    voc_xml(d, "e", o1);                                     // only a difficult object: a background image
    FILE *f = create("%s/VOC/Annotations/g.xml", d);
    fprintf(f, "<annotation>\n<object><name>dog</name></objet>\n</annotation>\n");
    fclose(f);
    f = create("%s/VOC/ImageSets/Main/train.txt", d);
    fprintf(f, "a\nb\nc\ne\ng\nmissing\n");
    fclose(f);
    f = create("%s/data.yaml", d);
    fprintf(f, "train: VOC\nval: VOC\nnames: [cat, dog]\n");
    fclose(f);
    snprintf(yaml, sizeof yaml, "%s/data.yaml", d);
    Opened o = open_split(yaml, "train");
    CHECK(o.rc == 0, "%s\n%s", o.err.msg, o.report);
    CHECK_HAS(o.report, "Annotations/b.xml:4: object 1: class 'horse' is not among the dataset's 2 names");
    CHECK_HAS(o.report, "Annotations/c.xml:9: object 2: cat: xmin 'x1' is not a number");
    CHECK_HAS(o.report, "Annotations/g.xml:2: an end tag that does not match <object> (line 2)");
    CHECK_HAS(o.report, "ImageSets/Main/train.txt:6: 'missing' has no annotation file");
    CHECK_HAS(o.report, "1 object marked difficult skipped");
    if (o.rc == 0) {
        CHECK(o.ds.n == 2 && o.ds.n_excluded == 4 && o.ds.n_background == 1, "kept %d, excluded %d, backgrounds %d",
              o.ds.n, o.ds.n_excluded, o.ds.n_background);
        const Box *b = o.ds.n ? o.ds.s[0].box : NULL;   // a: dog, corners 1 2 21 11 -> centre 10 5.5, size 20 9
        CHECK(b && b->cls == 1 && fabsf(b->cx - 0.25f) < 1e-6f && fabsf(b->cy - 5.5f / 30) < 1e-6f &&
              fabsf(b->w - 0.5f) < 1e-6f && fabsf(b->h - 0.3f) < 1e-6f, "a's box");
    }
    opened_free(&o);
    // without names: the object names of the files, sorted (the unreadable g.xml contributes none)
    f = create("%s/data.yaml", d);
    fprintf(f, "train: VOC\nval: VOC\n");
    fclose(f);
    o = open_split(yaml, "val");
    CHECK(o.rc == 0 && o.ds.nc == 3 && !strcmp(o.ds.names[0], "cat") && !strcmp(o.ds.names[2], "horse"), "%s nc %d",
          o.err.msg, o.ds.nc);
    opened_free(&o);
}

// val save_json=1 on a COCO dataset writes the file's image and category ids, so its results score against
// that file (pycocotools); other forms keep the file stem and the class index.
static void test_save_json_ids(void) {
    if (forms_make()) SKIP("../shared/data/coco128 missing");
    const char *forms[] = {"coco/data.yaml", "voc/named.yaml"};
    for (int k = 0; k < 2; k++) {
        char yaml[4400], dir[4400];
        snprintf(yaml, sizeof yaml, "%s/%s", tmp, forms[k]);
        snprintf(dir, sizeof dir, "%s/save%d", tmp, k);
        Opened o = open_split(yaml, "val");
        CHECK(o.rc == 0, "%s", o.err.msg);
        if (o.rc) { free(o.report); continue; }
        CHECK(!k == !!o.ds.category_id, "%s: category ids %s", yaml, o.ds.category_id ? "kept" : "absent");
        ValSave vs;
        Err err = {{0}};
        CHECK(val_save_open(&vs, dir, 1, 0, &err) == 0, "%s", err.msg);
        vs.category_id = o.ds.category_id;
        Det det = {1, 2, 11, 12, 0.5f, 3};
        val_save_image(&vs, &o.ds.s[2], &det, 1);   // 000000000030.jpg, the third image: COCO id 12
        CHECK(val_save_close(&vs, &err) == 0, "%s", err.msg);
        char path[4500];
        snprintf(path, sizeof path, "%s/predictions.json", dir);
        size_t n;
        char *text = slurp(path, &n);
        const char *want = k ? "{\"image_id\": 30, \"category_id\": 3," : "{\"image_id\": 12, \"category_id\": 7,";
        CHECK(text && strstr(text, want), "%s: '%s' missing from %s", yaml, want, text ? text : "(nothing)");
        free(text);
        opened_free(&o);
    }
}

// The same COCO form described by an INI [data] section (train_images there too) instead of a data.yaml.
static void test_ini_data(void) {
    if (forms_make()) SKIP("../shared/data/coco128 missing");
    FILE *f = create("%s/coco/c.ini", tmp);
    fprintf(f, "[model]\nnc = 80\n[backbone]\n0 = -1, 1, Conv, [16, 3, 2]\n[data]\n"
               "train = annotations/instances_train2017.json\ntrain_images = train2017\n"
               "val = annotations/instances_train2017.json\nval_images = train2017\n");
    fclose(f);
    char path[4400];
    snprintf(path, sizeof path, "%s/coco/c.ini", tmp);
    Config cfg;
    Err err = {{0}};
    int rc = config_load(path, 0, NULL, &cfg, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    Dataset ds;
    DatasetOptions opt = {.report = fopen("/dev/null", "w"), .quiet = 1};
    rc = dataset_open(NULL, &cfg, "val", &opt, &ds, &err);
    if (opt.report) fclose(opt.report);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    same_labels(path, &ds);
    dataset_free(&ds);
}

// ---- the command line: check and val see the same data in every form ------------------------------
static char out[1 << 16];

static int yt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int yt(const char *fmt, ...) {
    char args[8192], cmd[8400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "./yolotrain %s", args);
    return test_shell(cmd, out, sizeof out);
}

// The text of out from the line holding `start` up to (without) `stop` on that line, or "".
static void cut(const char *start, const char *stop, char *dst, size_t n) {
    const char *s = strstr(out, start), *e = s ? strstr(s, stop) : NULL, *nl = s ? strchr(s, '\n') : NULL;
    if (!e || (nl && nl < e)) e = nl;
    snprintf(dst, n, "%.*s", s ? (int)(e ? e - s : (int)strlen(s)) : 0, s ? s : "");
}

// `yolotrain train --help` says what a split of data= may be.
static void test_help(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    int rc = yt("train --help");
    CHECK(rc == 0, "exit %d\n%s", rc, out);
    CHECK_HAS(out, "(a split: image folder, .txt list, COCO .json or VOC root)");
}

static void test_check_cli(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    if (forms_make()) SKIP("../shared/data/coco128 missing");
    const char *forms[] = {"coco/data.yaml", "rf/data.yaml", "voc/named.yaml"};
    for (int k = 0; k < 3; k++) {
        int rc = yt("check data=%s/%s project=%s/check%d", tmp, forms[k], tmp, k);
        CHECK(rc == 0, "%s: exit %d\n%s", forms[k], rc, out);
        CHECK_HAS(out, "images: 128 (of 128 found)");
        CHECK_HAS(out, "instances: 929");
        CHECK_HAS(out, "classes present: 71 of 80");
        char pic[4400];
        snprintf(pic, sizeof pic, "%s/check%d/exp/check_batch.jpg", tmp, k);
        CHECK(!access(pic, R_OK), "%s: no %s\n%s", forms[k], pic, out);
    }
}

static void test_val_same(void) {
    if (access("./yolotrain", X_OK)) SKIP("./yolotrain is not built");
    if (forms_make()) SKIP("../shared/data/coco128 missing");
    char weights[4400];
    snprintf(weights, sizeof weights, "%s/fixtures/pt/real/yolov9_gelan_t_train_best.pt", shared_dir());
    if (access(weights, R_OK)) SKIP("%.200s missing", weights);
    char ref_all[512] = "", ref_loss[512] = "";
    const char *forms[] = {"", "coco/data.yaml", "rf/data.yaml", "voc/named.yaml"};
    for (int k = 0; k < 4; k++) {
        char data[4400], all[512], loss[512];
        if (k) snprintf(data, sizeof data, "%s/%s", tmp, forms[k]);
        else snprintf(data, sizeof data, "%s/data/coco128/data.yaml", shared_dir());
        int rc = yt("val cfg/gelan-t.ini weights=%s data=%s imgsz=64 batch=16 workers=1 device=cpu project=%s/val name=v%d",
                    weights, data, tmp, k);
        CHECK(rc == 0, "%s: exit %d\n%s", data, rc, out);
        cut("   all ", "\n", all, sizeof all);
        cut("val losses:", "; fitness", loss, sizeof loss);   // the losses rest on every box and class
        CHECK(all[0] && strstr(all, " 128 ") && strstr(all, " 929 ") && loss[0], "%s: no results:\n%s", data, out);
        if (!k) { snprintf(ref_all, sizeof ref_all, "%s", all); snprintf(ref_loss, sizeof ref_loss, "%s", loss); continue; }
        CHECK(!strcmp(all, ref_all) && !strcmp(loss, ref_loss), "%s:\n  %s\n  %s\nthe YOLO set:\n  %s\n  %s", data, all, loss,
              ref_all, ref_loss);
    }
}

int main(void) {
    RUN(test_json_reader);
    RUN(test_xml_reader);
    RUN(test_coco_problems);
    RUN(test_roboflow_category);
    RUN(test_voc_problems);
    RUN(test_same_labels);
    RUN(test_ini_data);
    RUN(test_save_json_ids);
    RUN(test_help);
    RUN(test_check_cli);
    RUN(test_val_same);
    if (yolo.n) dataset_free(&yolo);
    return test_summary();
}
