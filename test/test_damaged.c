// test_damaged.c: PNG files whose header is whole but whose pixel data is damaged (an IDAT chunk's CRC,
// a zlib stream cut short under a right CRC, a bad row filter byte under a right CRC): the decoder
// refuses each naming the file, `check` decodes what it checks and excludes them, and strict = 1
// stops a training run before it starts, naming the first one.
#include "test/test.h"

#include <zlib.h>

#include "cfg/config.h"
#include "core/train/train.h"
#include "io/check.h"
#include "io/dataset.h"
#include "io/image.h"
#include "test/synth_run.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

enum { W = 24, H = 16, ROW = 3 * W + 1 };   // RGB rows, each led by its filter byte

static uint32_t get32(const uint8_t *p) { return (uint32_t)p[0] << 24 | p[1] << 16 | p[2] << 8 | p[3]; }
static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = (uint8_t)v; }

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    uint8_t *b = malloc(1 << 16);
    *n = f ? fread(b, 1, 1 << 16, f) : 0;
    if (f) fclose(f);
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b, 1, n, f) != n) { printf("cannot write %s\n", path); exit(1); }
    fclose(f);
}

// A whole W x H PNG at path; returns its bytes and where its (only) IDAT chunk starts.
static uint8_t *good_png(const char *path, size_t *n, size_t *idat) {
    Image im = image_new(W, H, 0);
    for (int i = 0; i < W * H * 3; i++) im.px[i] = (uint8_t)(i * 7);
    Err err;
    if (image_save_png(path, &im, &err)) { printf("%s\n", err.msg); exit(1); }
    image_free(&im);
    uint8_t *b = read_all(path, n);
    for (*idat = 8; *idat + 8 < *n && memcmp(b + *idat + 4, "IDAT", 4); *idat += 12 + get32(b + *idat)) {}
    if (*idat + 8 >= *n) { printf("no IDAT in %s\n", path); exit(1); }
    return b;
}

// The PNG of b with its IDAT's data replaced by z (zn bytes) under a right CRC.
static void with_idat(const char *path, const uint8_t *b, size_t n, size_t idat, const uint8_t *z, size_t zn) {
    size_t old = get32(b + idat), tail = n - (idat + 12 + old);
    uint8_t *o = malloc(idat + 12 + zn + tail);
    memcpy(o, b, idat);
    put32(o + idat, (uint32_t)zn);
    memcpy(o + idat + 4, "IDAT", 4);
    memcpy(o + idat + 8, z, zn);
    put32(o + idat + 8 + zn, (uint32_t)crc32(crc32(0, NULL, 0), o + idat + 4, (uInt)zn + 4));
    memcpy(o + idat + 12 + zn, b + idat + 12 + old, tail);
    spit(path, o, idat + 12 + zn + tail);
    free(o);
}

// dir/crc.png, dir/cut.png, dir/filter.png: one damage each, IEND always in place.
static void damaged_pngs(const char *dir) {
    char path[4400];
    size_t n, idat;
    snprintf(path, sizeof path, "%s/crc.png", dir);
    uint8_t *b = good_png(path, &n, &idat);
    size_t len = get32(b + idat);
    b[idat + 8 + len] ^= 1;                              // the CRC's first byte
    spit(path, b, n);
    b[idat + 8 + len] ^= 1;

    snprintf(path, sizeof path, "%s/cut.png", dir);      // half of the zlib stream
    with_idat(path, b, n, idat, b + idat + 8, len / 2);

    uint8_t raw[ROW * H];
    uLongf rn = sizeof raw, zn = compressBound(sizeof raw);
    uint8_t *z = malloc(zn);
    if (uncompress(raw, &rn, b + idat + 8, len) != Z_OK || rn != sizeof raw) { printf("inflate\n"); exit(1); }
    raw[5 * ROW] = 9;                                    // filter types are 0..4
    if (compress(z, &zn, raw, sizeof raw) != Z_OK) { printf("deflate\n"); exit(1); }
    snprintf(path, sizeof path, "%s/filter.png", dir);
    with_idat(path, b, n, idat, z, zn);
    free(z);
    free(b);
}

static const char *const damaged[3] = { "crc.png", "cut.png", "filter.png" };

static void test_decoder_refuses(void) {
    const char *dir = test_tmpdir("damaged-decode");
    damaged_pngs(dir);
    char path[4400];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, damaged[i]);
        Image im;
        Err err = { { 0 } };
        ImageInfo info;
        CHECK(image_info(path, &info, &err) == 0 && info.w == W, "%s: the header is whole", damaged[i]);
        CHECK(image_load(path, &im, &err) != 0, "%s decoded", damaged[i]);
        CHECK(strstr(err.msg, path) && strstr(err.msg, "corrupt"), "%s: %s", damaged[i], err.msg);
    }
}

// A dataset of two good PNGs and the three damaged ones, every image labelled.
static const char *damaged_dataset(const char *tag) {
    static char root[4400];
    char path[4500];
    snprintf(root, sizeof root, "%s", test_tmpdir(tag));
    snprintf(path, sizeof path, "mkdir -p '%s/images/t' '%s/labels/t'", root, root);
    if (system(path)) exit(1);
    snprintf(path, sizeof path, "%s/images/t", root);
    damaged_pngs(path);
    static const char *const names[5] = { "crc", "cut", "filter", "good1", "good2" };
    for (int i = 0; i < 5; i++) {
        size_t n, idat;
        if (i >= 3) {
            snprintf(path, sizeof path, "%s/images/t/%s.png", root, names[i]);
            free(good_png(path, &n, &idat));
        }
        snprintf(path, sizeof path, "%s/labels/t/%s.txt", root, names[i]);
        spit(path, (const uint8_t *)"0 0.5 0.5 0.2 0.2\n", 18);
    }
    snprintf(path, sizeof path, "%s/data.yaml", root);
    const char *yaml = "train: images/t\nval: images/t\nnames: [a]\n";
    spit(path, (const uint8_t *)yaml, strlen(yaml));
    return root;
}

static void test_check_decodes(void) {
    const char *root = damaged_dataset("damaged-check");
    static Config cfg;
    snprintf(cfg.data, sizeof cfg.data, "%s/data.yaml", root);
    char *text = NULL;
    size_t n;
    FILE *f = open_memstream(&text, &n);
    Err err;
    int rc = check_run(&cfg, f, NULL, &err);
    fclose(f);
    CHECK(rc == 0, "the two good images are usable: %s", err.msg);
    CHECK(text && strstr(text, "images: 2 (of 5 found)"), "%s", text);
    CHECK(text && strstr(text, "excluded: 3 (unreadable or corrupt image: 3)"), "%s", text);
    for (int i = 0; i < 3; i++)
        CHECK(text && strstr(text, damaged[i]), "%s is not named in:\n%s", damaged[i], text);
    free(text);
}

static void test_strict_dataset_stops(void) {
    const char *root = damaged_dataset("damaged-strict");
    char yaml[4500];
    snprintf(yaml, sizeof yaml, "%s/data.yaml", root);
    char *text = NULL;
    size_t n;
    FILE *f = open_memstream(&text, &n);
    DatasetOptions opt = { .strict = 1, .report = f };
    Dataset ds;
    Err err = { { 0 } };
    int rc = dataset_open(yaml, NULL, "train", &opt, &ds, &err);
    fclose(f);
    CHECK(rc == -1, "strict = 1 accepted three damaged images");
    if (rc == 0) dataset_free(&ds);
    CHECK(strstr(err.msg, "3 images excluded and strict = 1") && strstr(err.msg, "images/t/crc.png"),
          "%s", err.msg);
    free(text);
}

// train_run with strict = 1 on the synthetic set plus one damaged PNG ends before the first epoch with
// an error (it trained on a substitute before), writing no weights.
static void test_strict_training_stops(void) {
    if (synth_run_data("damaged-train", 4)) { CHECK(0, "no data"); return; }
    char dir[4500], d[4500], p[4500];
    snprintf(dir, sizeof dir, "%.*s/synth/images/train", (int)(strlen(project) - 5), project);
    damaged_pngs(dir);
    snprintf(d, sizeof d, "data=%s", data_yaml);
    snprintf(p, sizeof p, "project=%s", project);
    char *ov[] = { d, p, "name=s", "imgsz=64", "batch=4", "epochs=1", "workers=1", "device=cpu", "strict=1" };
    static Config cfg;
    Err err;
    if (config_load("cfg/t.ini", 9, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(train_run(&cfg) != 0, "the run trained with damaged images under strict = 1");
    char last[4700];
    snprintf(last, sizeof last, "%s/s/weights/last.safetensors", project);
    CHECK(access(last, F_OK) != 0, "%s was written", last);
}

int main(void) {
    RUN(test_decoder_refuses);
    RUN(test_check_decodes);
    RUN(test_strict_dataset_stops);
    RUN(test_strict_training_stops);
    return test_summary();
}
