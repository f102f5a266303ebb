// test_corrupt.c: one dataset holding every kind of broken file we know of (truncated, empty and fake
// images, a 100000x100000 header, bad label values, loops) beside good ones, CMYK and 16-bit included:
// dataset_open must name each problem, keep exactly the good images, count right, fail under strict,
// and the training loader must get through an epoch of what was kept.
#include "test/test.h"

#include <errno.h>
#include <jpeglib.h>
#include <png.h>
#include <zlib.h>

#include "io/dataset.h"
#include "io/image.h"
#include "io/loader.h"

// ---- writing files -------------------------------------------------------------------------------
static char root[4096];

static const char *at(const char *rel) {   // root/rel, in one of 8 rotating buffers
    static char buf[8][4200];
    static int i;
    i = (i + 1) % 8;
    if (snprintf(buf[i], sizeof buf[i], "%s/%s", root, rel) >= (int)sizeof buf[i]) {
        printf("path too long: %s/%s\n", root, rel);
        exit(1);
    }
    return buf[i];
}

static void mkdirs(const char *path) {     // mkdir -p of path's folder
    char buf[4200];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; (p = strchr(p, '/')); p++) {
        *p = 0;
        mkdir(buf, 0755);
        *p = '/';
    }
}

static FILE *create(const char *rel) {
    const char *path = at(rel);
    mkdirs(path);
    FILE *f = fopen(path, "wb");
    if (!f) { printf("cannot write %s: %s\n", path, strerror(errno)); exit(1); }
    return f;
}

static void put(const char *rel, const void *data, size_t n) {
    FILE *f = create(rel);
    if (fwrite(data, 1, n, f) != n || fclose(f) != 0) { printf("cannot write %s\n", rel); exit(1); }
}

static void put_text(const char *rel, const char *text) { put(rel, text, strlen(text)); }

static void put_image(const char *rel, int w, int h) {     // RGB gradient; JPEG or PNG by extension
    const char *path = at(rel);
    mkdirs(path);
    Image im = image_new(w, h, 0);
    for (int i = 0; i < w * h * 3; i++) im.px[i] = (uint8_t)(i * 7);
    Err err;
    size_t n = strlen(rel);
    int rc = !strcmp(rel + n - 4, ".png") ? image_save_png(path, &im, &err)
                                          : image_save_jpeg(path, &im, 90, &err);
    if (rc) { printf("%s\n", err.msg); exit(1); }
    image_free(&im);
}

static void put_cmyk_jpeg(const char *rel, int w, int h) {   // Adobe CMYK, as print workflows write
    FILE *f = create(rel);
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr jerr;
    c.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&c);
    jpeg_stdio_dest(&c, f);
    c.image_width = (JDIMENSION)w;
    c.image_height = (JDIMENSION)h;
    c.input_components = 4;
    c.in_color_space = JCS_CMYK;
    jpeg_set_defaults(&c);
    jpeg_set_colorspace(&c, JCS_CMYK);
    jpeg_start_compress(&c, TRUE);
    uint8_t *row = malloc((size_t)w * 4);
    while (c.next_scanline < c.image_height) {
        for (int i = 0; i < w * 4; i++) row[i] = (uint8_t)(i * 5 + c.next_scanline * 3);
        jpeg_write_scanlines(&c, &row, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    fclose(f);
}

static void put_png16(const char *rel, int w, int h) {       // 16 bits a sample, RGBA
    FILE *f = create(rel);
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) { printf("libpng failed writing %s\n", rel); exit(1); }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 16, PNG_COLOR_TYPE_RGB_ALPHA,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    uint8_t *row = malloc((size_t)w * 8);
    for (int y = 0; y < h; y++) {
        for (int i = 0; i < w * 8; i++) row[i] = (uint8_t)(i * 3 + y);
        png_write_row(png, row);
    }
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    free(row);
    fclose(f);
}

static long file_size(const char *rel) {
    struct stat st;
    return stat(at(rel), &st) == 0 ? (long)st.st_size : -1;
}

static void put_prefix(const char *rel, const char *from, long n) {   // the first n bytes of `from`
    FILE *f = fopen(at(from), "rb");
    char *buf = malloc((size_t)n);
    if (!f || fread(buf, 1, (size_t)n, f) != (size_t)n) { printf("cannot read %s\n", from); exit(1); }
    fclose(f);
    put(rel, buf, (size_t)n);
    free(buf);
}

// A PNG whose IHDR (CRC included) says 100000 x 100000, followed by a little image data.
static void put_huge_png_header(const char *rel) {
    uint8_t b[33] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                     0, 1, 0x86, 0xa0, 0, 1, 0x86, 0xa0, 8, 2, 0, 0, 0};
    uint32_t crc = (uint32_t)crc32(0, b + 12, 17);
    for (int i = 0; i < 4; i++) b[29 + i] = (uint8_t)(crc >> (24 - 8 * i));
    FILE *f = create(rel);
    fwrite(b, 1, sizeof b, f);
    for (int i = 0; i < 64; i++) fputc(0, f);
    fclose(f);
}

// ---- the dataset ---------------------------------------------------------------------------------
// Each excluded image, the reason it counts under and what its message says ("file:line: ..." for
// labels). Images are under images/train/, labels under labels/train/.
typedef struct { const char *image, *label_text, *named, *says; int line; DatasetReason reason; } Bad;
static const Bad bad[] = {
    {"zero.jpg",      NULL, "zero.jpg",       "empty file",            0, DS_BAD_IMAGE},
    {"zero.png",      NULL, "zero.png",       "empty file",            0, DS_BAD_IMAGE},
    {"cut_head.jpg",  NULL, "cut_head.jpg",   "corrupt or truncated",  0, DS_BAD_IMAGE},
    {"cut.png",       NULL, "cut.png",        "truncated",             0, DS_BAD_IMAGE},
    {"text.jpg",      NULL, "text.jpg",       "not a JPEG or PNG",     0, DS_BAD_IMAGE},
    {"huge.png",      NULL, "huge.png",       "100000x100000",         0, DS_BAD_IMAGE},
    {"nan.png",  "0 nan 0.5 0.2 0.2\n",       "nan.txt",  "'nan' is not a finite number", 1, DS_NOT_NUMBER},
    {"inf.png",  "0 0.5 0.5 0.2 0.2\n0 0.5 -inf 0.2 0.2\n", "inf.txt", "'-inf' is not a finite", 2,
     DS_NOT_NUMBER},
    {"bigf.png", "0 0.5 0.5 1e39 0.2\n",      "bigf.txt", "'1e39' is not a finite number", 1, DS_NOT_NUMBER},
    {"word.png", "\n0 0.5 0.5 wide 0.2\n",    "word.txt", "'wide' is not a number", 2, DS_NOT_NUMBER},
    {"neg.png",  "0 0.5 0.5 -0.3 0.2\n",      "neg.txt",  "w = -0.3 is outside [0, 1]", 1, DS_OUT_OF_BOUNDS},
    {"far.png",  "0 1e30 0.5 0.2 0.2\n",      "far.txt",  "cx = 1e+30 is outside", 1, DS_OUT_OF_BOUNDS},
    {"negcls.png", "-1 0.5 0.5 0.2 0.2\n",    "negcls.txt", "class -1 is outside 0..2", 1, DS_BAD_CLASS},
    {"bigcls.png", "99999999999 0.5 0.5 0.2 0.2\n", "bigcls.txt", "class 99999999999 is outside", 1,
     DS_BAD_CLASS},
    {"extra.png", "0 0.5 0.5 0.2 0.2 0.7\n",  "extra.txt", "6 values", 1, DS_BAD_COUNT},
    {"crlfbad.png", "0 0.5 0.5 0.2 0.2\r\n\r\n1 0.5 0.5 0.2\r\n", "crlfbad.txt", "4 values", 3,
     DS_BAD_COUNT},
    {"dirlabel.png", NULL,                    "dirlabel.txt", "cannot read the label file", 0,
     DS_BAD_LABEL_FILE},
};
#define N_BAD ((int)(sizeof bad / sizeof bad[0]))

// Kept images: name, label text (NULL: none), boxes kept, colour components in the file.
typedef struct { const char *image, *label_text; int nbox, channels; } Good;
static const Good good[] = {
    {"good.jpg",        "0 0.5 0.5 0.2 0.2\n",                        1, 3},
    {"pic.png",         "1 0.3 0.3 0.1 0.1\n2 0.6 0.6 0.2 0.2\n",     2, 3},
    {"cmyk.jpg",        "2 0.5 0.5 0.5 0.5\n",                        1, 4},
    {"deep.png",        "0 0.4 0.4 0.3 0.3\n",                        1, 4},
    {"crlf.png",        "0 0.5 0.5 0.2 0.2\r\n\r\n1 0.2 0.2 0.1 0.1\r\n", 2, 3},
    {"bom.png",         "\xEF\xBB\xBF" "2 0.5 0.5 0.2 0.2\n",          1, 3},
    {"a/same.jpg",      "0 0.5 0.5 0.2 0.2\n",                        1, 3},
    {"b/same.jpg",      "1 0.5 0.5 0.2 0.2\n1 0.2 0.2 0.1 0.1\n",     2, 3},
    {"unlabelled/x.png", NULL,                                         0, 3},   // no labels folder at all
    {"cut_tail.jpg",    "0 0.5 0.5 0.2 0.2\n",                        1, 3},   // decodes at load: fails
};
#define N_GOOD ((int)(sizeof good / sizeof good[0]))

static void write_dataset(void) {
    char rel[256];
    for (int i = 0; i < N_GOOD; i++) {
        snprintf(rel, sizeof rel, "images/train/%s", good[i].image);
        if (!strcmp(good[i].image, "cmyk.jpg")) put_cmyk_jpeg(rel, 24, 20);
        else if (!strcmp(good[i].image, "deep.png")) put_png16(rel, 18, 14);
        else put_image(rel, 32, 24);
        if (!good[i].label_text) continue;
        snprintf(rel, sizeof rel, "labels/train/%.*s.txt", (int)strlen(good[i].image) - 4, good[i].image);
        put_text(rel, good[i].label_text);
    }
    // cut_tail.jpg: its second half is gone; the header is whole, so only decoding can tell
    put_image("scratch/whole.jpg", 64, 48);
    put_prefix("images/train/cut_tail.jpg", "scratch/whole.jpg", file_size("scratch/whole.jpg") / 2);
    put_prefix("images/train/cut_head.jpg", "scratch/whole.jpg", 100);
    put_image("scratch/whole.png", 64, 48);
    put_prefix("images/train/cut.png", "scratch/whole.png", file_size("scratch/whole.png") - 30);
    put("images/train/zero.jpg", "", 0);
    put("images/train/zero.png", "", 0);
    put_text("images/train/text.jpg", "this is not an image\n");
    put_huge_png_header("images/train/huge.png");
    for (int i = 0; i < N_BAD; i++) {
        if (!bad[i].label_text && strcmp(bad[i].image, "dirlabel.png")) continue;
        snprintf(rel, sizeof rel, "images/train/%s", bad[i].image);
        put_image(rel, 16, 16);
        snprintf(rel, sizeof rel, "labels/train/%.*s.txt", (int)strlen(bad[i].image) - 4, bad[i].image);
        if (bad[i].label_text) put_text(rel, bad[i].label_text);
    }
    mkdir(at("labels/train/dirlabel.txt"), 0755);        // a label file that cannot be read, even by root
    if (symlink("..", at("images/train/a/loop")) != 0 ||                 // a folder loop
        symlink("self.jpg", at("images/train/self.jpg")) != 0) {        // a file link loop
        printf("symlink: %s\n", strerror(errno));
        exit(1);
    }
    put_text("data.yaml", "train: images/train\nval: images/train\nnames: [cat, dog, bird]\n");
}

// ---- checking the report -------------------------------------------------------------------------
// 1 when a line of `report` starts with "root/<rel>:<line>: " ("root/<rel>: " for line 0) and holds says.
static int said(const char *report, const char *rel, int line, const char *says) {
    char prefix[4400];
    if (line > 0) snprintf(prefix, sizeof prefix, "%s:%d: ", at(rel), line);
    else snprintf(prefix, sizeof prefix, "%s: ", at(rel));
    size_t n = strlen(prefix);
    for (const char *p = report; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len >= n && !strncmp(p, prefix, n)) {
            char *row = strndup(p, len);
            int hit = strstr(row, says) != NULL;
            free(row);
            if (hit) return 1;
        }
    }
    return 0;
}

typedef struct { int rc; Dataset ds; Err err; char *report; } Opened;

static Opened open_train(int strict) {
    Opened o = {0};
    size_t n;
    FILE *f = open_memstream(&o.report, &n);
    DatasetOptions opt = {.strict = strict, .report = f};
    o.rc = dataset_open(at("data.yaml"), NULL, "train", &opt, &o.ds, &o.err);
    fclose(f);
    return o;
}

static const Sample *find(const Dataset *ds, const char *rel) {
    for (int i = 0; i < ds->n; i++)
        if (!strcmp(ds->s[i].image, at(rel))) return &ds->s[i];
    return NULL;
}

static void check_bad_cases(const Opened *o) {
    char rel[256];
    for (int i = 0; i < N_BAD; i++) {
        snprintf(rel, sizeof rel, "images/train/%s", bad[i].image);
        CHECK(!find(&o->ds, rel), "%s was kept", bad[i].image);
        const char *dir = strstr(bad[i].named, ".txt") ? "labels/train" : "images/train";
        snprintf(rel, sizeof rel, "%s/%s", dir, bad[i].named);
        CHECK(said(o->report, rel, bad[i].line, bad[i].says), "no '%s:%d: ...%s...' in the report:\n%s",
              rel, bad[i].line, bad[i].says, o->report);
    }
}

static void check_good_cases(const Opened *o) {
    char rel[256];
    for (int i = 0; i < N_GOOD; i++) {
        snprintf(rel, sizeof rel, "images/train/%s", good[i].image);
        const Sample *s = find(&o->ds, rel);
        CHECK(s, "%s was excluded", good[i].image);
        if (!s) continue;
        CHECK(s->nbox == good[i].nbox, "%s: %d boxes, expected %d", good[i].image, s->nbox, good[i].nbox);
        CHECK(s->channels == good[i].channels, "%s: %d channels, expected %d", good[i].image,
              s->channels, good[i].channels);
    }
    CHECK(said(o->report, "images/train/cut_tail.jpg", 0, "without its end marker"),
          "no warning for the truncated JPEG:\n%s", o->report);
    CHECK(said(o->report, "images/train/a/loop", 0, "reached a second time"),
          "no warning for the folder loop:\n%s", o->report);
    CHECK(said(o->report, "images/train/self.jpg", 0, "cannot read"),
          "no warning for the file link loop:\n%s", o->report);
}

static void check_counts(const Opened *o) {
    const Dataset *ds = &o->ds;
    int by[DS_N_REASONS] = {0}, instances = 0;
    for (int i = 0; i < N_BAD; i++) by[bad[i].reason]++;
    for (int i = 0; i < N_GOOD; i++) instances += good[i].nbox;
    CHECK(ds->n == N_GOOD, "kept %d images, expected %d", ds->n, N_GOOD);
    CHECK(ds->n_listed == N_GOOD + N_BAD, "listed %d images, expected %d", ds->n_listed, N_GOOD + N_BAD);
    CHECK(ds->n_excluded == N_BAD, "excluded %d, expected %d", ds->n_excluded, N_BAD);
    for (int r = 0; r < DS_N_REASONS; r++)
        CHECK(ds->excluded_by[r] == by[r], "'%s': %d, expected %d", dataset_reason_name[r],
              ds->excluded_by[r], by[r]);
    CHECK(ds->n_background == 1 && ds->n_instances == instances, "backgrounds %d, instances %d",
          ds->n_background, ds->n_instances);
    char line[256];
    snprintf(line, sizeof line, "train: images %d, backgrounds 1, instances %d; excluded %d, warnings %d",
             N_GOOD, instances, N_BAD, ds->n_warnings);
    CHECK(strstr(o->report, line), "no summary '%s' in:\n%s", line, o->report);
    CHECK(ds->n_warnings >= 3, "%d warnings; the truncated JPEG and both loops warn", ds->n_warnings);
}

// One training epoch over the kept images: every image comes out; the one that fails to decode
// (cut_tail.jpg) is reported by name, once, and another stands in for it.
static void check_loader(const Dataset *ds) {
    char *report = NULL;
    size_t n;
    FILE *f = open_memstream(&report, &n);
    LoaderConfig c = {.batch = 4, .workers = 2, .seed = 3, .train = 1, .report = f};
    c.aug = (AugParams){.img_size = 64, .hsv_h = 0.015, .hsv_s = 0.7, .hsv_v = 0.4, .translate = 0.1,
                        .scale = 0.5, .fliplr = 0.5, .mosaic = 1};
    Loader *l;
    Err err;
    int rc = loader_open(&c, ds, &l, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc == 0) {
        loader_start_epoch(l, 0, 1);
        int images = 0;
        for (Batch *b; loader_next(l, &b); loader_release(l, b)) images += b->n;
        LoaderStats st = loader_stats(l);
        loader_close(l);
        CHECK(images == ds->n, "the epoch gave %d images, expected %d", images, ds->n);
        CHECK(st.n_bad == 1, "%d images failed to load, expected 1 (cut_tail.jpg)", st.n_bad);
    }
    fclose(f);
    CHECK(strstr(report, at("images/train/cut_tail.jpg")), "the loader did not name cut_tail.jpg:\n%s",
          report);
    free(report);
}

static void test_corrupt_dataset(void) {
    write_dataset();
    Opened o = open_train(0);
    CHECK(o.rc == 0, "%s\n%s", o.err.msg, o.report);
    if (o.rc == 0) {
        check_bad_cases(&o);
        check_good_cases(&o);
        check_counts(&o);
        check_loader(&o.ds);
        dataset_free(&o.ds);
    }
    free(o.report);
    // strict: the same problems, then a failure citing the first, before anything could train
    Opened s = open_train(1);
    CHECK(s.rc == -1, "strict = 1 accepted %d excluded images", N_BAD);
    CHECK(strstr(s.err.msg, "strict") && strstr(s.err.msg, "images excluded"), "%s", s.err.msg);
    CHECK(said(s.report, "labels/train/nan.txt", 1, "not a finite number"), "%s", s.report);
    free(s.report);
}

// An image nobody may read (chmod 000). Root reads it anyway (CI runs as root): then skipped.
static void test_unreadable_image(void) {
    put_image("images/train/locked.jpg", 32, 24);
    put_text("labels/train/locked.txt", "0 0.5 0.5 0.2 0.2\n");
    chmod(at("images/train/locked.jpg"), 0);
    if (access(at("images/train/locked.jpg"), R_OK) == 0)
        SKIP("running as root (or with CAP_DAC_OVERRIDE): chmod 000 does not stop reads");
    Opened o = open_train(0);
    CHECK(o.rc == 0, "%s", o.err.msg);
    CHECK(!find(&o.ds, "images/train/locked.jpg"), "the unreadable image was kept");
    CHECK(said(o.report, "images/train/locked.jpg", 0, "cannot open"), "%s", o.report);
    CHECK(o.ds.n == N_GOOD && o.ds.excluded_by[DS_BAD_IMAGE] == 7, "kept %d, bad images %d", o.ds.n,
          o.ds.excluded_by[DS_BAD_IMAGE]);
    if (o.rc == 0) dataset_free(&o.ds);
    free(o.report);
}

int main(void) {
    snprintf(root, sizeof root, "%s", test_tmpdir("corrupt"));
    RUN(test_corrupt_dataset);
    RUN(test_unreadable_image);
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0) printf("could not remove %s\n", root);
    return test_summary();
}
