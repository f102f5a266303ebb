// test_synth.c: the synthetic dataset is deterministic, its labels are tight boxes of the drawn
// shapes, and its data.yaml reads back with the expected counts.
#include <dirent.h>
#include <limits.h>
#include <stdint.h>

#include "io/dataset.h"
#include "io/image.h"
#include "io/synth.h"
#include "test/test.h"

static SynthConfig small_config(int threads) {
    SynthConfig c = synth_defaults();
    c.n_train = 12, c.n_val = 4, c.min_side = 64, c.max_side = 200, c.threads = threads, c.seed = 7;
    return c;
}

static long read_file(const char *path, unsigned char **out) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *out = malloc(n ? n : 1);
    if (fread(*out, 1, n, f) != (size_t)n) n = -1;
    fclose(f);
    return n;
}

static const char *file_of(const char *dir, const char *kind, int split, int i, const char *ext) {
    static char buf[4][2 * PATH_MAX];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s/%s/%06d.%s", dir, kind, split ? "val" : "train", i, ext);
    return buf[k];
}

static void test_generation_is_deterministic(void) {
    const char *base = test_tmpdir("synth-det");
    char a[PATH_MAX + 8], b[PATH_MAX + 8];
    snprintf(a, sizeof a, "%s/a", base);
    snprintf(b, sizeof b, "%s/b", base);
    SynthConfig c1 = small_config(1), c3 = small_config(3);
    Err err;
    CHECK(synth_generate(a, &c1, &err) == 0, "%s", err.msg);
    CHECK(synth_generate(b, &c3, &err) == 0, "%s", err.msg);
    for (int split = 0; split < 2; split++)
        for (int i = 0; i < (split ? c1.n_val : c1.n_train); i++) {
            CHECK(same_file(file_of(a, "images", split, i, "jpg"), file_of(b, "images", split, i, "jpg")),
                  "%s differs between 1 and 3 threads", file_of(a, "images", split, i, "jpg"));
            CHECK(same_file(file_of(a, "labels", split, i, "txt"), file_of(b, "labels", split, i, "txt")),
                  "%s differs between 1 and 3 threads", file_of(a, "labels", split, i, "txt"));
        }
    // a different seed gives other pictures
    Image x, y;
    SynthObject o[SYNTH_MAX_OBJECTS];
    SynthConfig c2 = c1;
    c2.seed = 8;
    synth_render(&c1, 0, 0, &x, o), synth_render(&c2, 0, 0, &y, o);
    CHECK(x.w != y.w || x.h != y.h || memcmp(x.px, y.px, (size_t)x.w * x.h * 3) != 0, "seed ignored");
    image_free(&x), image_free(&y);
}

// Labels: one line per rendered object, values in [0,1], and the box region of the saved JPEG
// is largely the object's colour (a wrong or shifted box would hold background instead).
static void check_labels(const char *dir, const SynthConfig *c, int split, int i) {
    Image ref, im;
    SynthObject o[SYNTH_MAX_OBJECTS];
    Err err;
    int n = synth_render(c, split, i, &ref, o);
    const char *lab = file_of(dir, "labels", split, i, "txt");
    FILE *f = fopen(lab, "r");
    CHECK(f != NULL, "%s missing", lab);
    if (!f) return;
    CHECK(image_load(file_of(dir, "images", split, i, "jpg"), &im, &err) == 0, "%s", err.msg);
    CHECK(im.w == ref.w && im.h == ref.h, "size %dx%d vs rendered %dx%d", im.w, im.h, ref.w, ref.h);
    int cls, k = 0;
    float v[4];
    while (fscanf(f, "%d %f %f %f %f", &cls, &v[0], &v[1], &v[2], &v[3]) == 5) {
        for (int j = 0; j < 4; j++) CHECK(v[j] >= 0 && v[j] <= 1, "%s line %d: %g outside [0,1]", lab, k + 1, v[j]);
        CHECK(v[0] - v[2] / 2 >= -1e-6 && v[0] + v[2] / 2 <= 1 + 1e-6, "%s line %d: box leaves the image", lab, k + 1);
        CHECK(v[1] - v[3] / 2 >= -1e-6 && v[1] + v[3] / 2 <= 1 + 1e-6, "%s line %d: box leaves the image", lab, k + 1);
        if (k < n) {
            CHECK(cls == o[k].cls, "%s line %d: class %d, rendered %d", lab, k + 1, cls, o[k].cls);
            int x1 = (int)lround((v[0] - v[2] / 2) * im.w), x2 = (int)lround((v[0] + v[2] / 2) * im.w);
            int y1 = (int)lround((v[1] - v[3] / 2) * im.h), y2 = (int)lround((v[1] + v[3] / 2) * im.h);
            int match = 0;
            for (int y = y1; y < y2; y++)
                for (int x = x1; x < x2; x++) {
                    const uint8_t *p = im.px + ((size_t)y * im.w + x) * 3;
                    match += abs(p[0] - o[k].rgb[0]) + abs(p[1] - o[k].rgb[1]) + abs(p[2] - o[k].rgb[2]) < 75;
                }
            double share = (double)match / ((x2 - x1) * (y2 - y1));
            CHECK(share > 0.25, "%s line %d (%s): only %.0f%% of the box has the shape colour",
                  lab, k + 1, synth_names[cls], 100 * share);
        }
        k++;
    }
    CHECK(k == n, "%s: %d lines, %d objects rendered", lab, k, n);
    fclose(f);
    image_free(&ref), image_free(&im);
}

static void test_labels_match_pixels(void) {
    const char *dir = test_tmpdir("synth-labels");
    SynthConfig c = small_config(2);
    Err err;
    CHECK(synth_generate(dir, &c, &err) == 0, "%s", err.msg);
    for (int split = 0; split < 2; split++)
        for (int i = 0; i < (split ? c.n_val : c.n_train); i++) check_labels(dir, &c, split, i);
}

static void test_yaml_reads_back(void) {
    const char *dir = test_tmpdir("synth-yaml");
    SynthConfig c = small_config(0);
    Err err;
    CHECK(synth_generate(dir, &c, &err) == 0, "%s", err.msg);
    char yaml[PATH_MAX + 16];
    snprintf(yaml, sizeof yaml, "%s/data.yaml", dir);
    DatasetOptions opt = { .quiet = 1 };
    Dataset tr, va;
    int rc = dataset_open(yaml, NULL, "train", &opt, &tr, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(tr.n == c.n_train && tr.n_excluded == 0, "train: %d kept, %d excluded", tr.n, tr.n_excluded);
    CHECK(tr.nc == SYNTH_NC && !strcmp(tr.names[3], "ring"), "nc %d", tr.nc);
    rc = dataset_open(yaml, NULL, "val", &opt, &va, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc == 0) CHECK(va.n == c.n_val && va.n_excluded == 0, "val: %d kept", va.n);
    dataset_free(&tr);
    if (rc == 0) dataset_free(&va);
}

static int count_files(const char *folder) {
    DIR *d = opendir(folder);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

// ensure keeps a completed folder as it is; generate with fewer images drops the extra files.
static void test_ensure_and_regenerate(void) {
    const char *dir = test_tmpdir("synth-ensure");
    SynthConfig c = small_config(2);
    Err err;
    CHECK(synth_generate(dir, &c, &err) == 0, "%s", err.msg);
    FILE *f = fopen(file_of(dir, "labels", 0, 0, "txt"), "w");   // a mark ensure must not overwrite
    if (f) fputs("mark\n", f), fclose(f);
    CHECK(synth_ensure(dir, &err) == 0, "%s", err.msg);
    unsigned char *buf = NULL;
    long n = read_file(file_of(dir, "labels", 0, 0, "txt"), &buf);
    CHECK(n == 5 && !memcmp(buf, "mark\n", 5), "synth_ensure regenerated a completed folder");
    free(buf);
    c.n_train = 5, c.n_val = 2;
    CHECK(synth_generate(dir, &c, &err) == 0, "%s", err.msg);
    char folder[PATH_MAX + 16];
    snprintf(folder, sizeof folder, "%s/images/train", dir);
    CHECK(count_files(folder) == 5, "%d files in %s after regenerating 5", count_files(folder), folder);
    snprintf(folder, sizeof folder, "%s/labels/val", dir);
    CHECK(count_files(folder) == 2, "%d files in %s after regenerating 2", count_files(folder), folder);
}

// The default set is what training uses: it must take seconds, not minutes.
static void test_default_size_and_speed(void) {
    const char *dir = test_tmpdir("synth-default");
    SynthConfig c = synth_defaults();
    CHECK(c.n_train == 512 && c.n_val == 128, "defaults %d/%d", c.n_train, c.n_val);
    c.n_train = 64, c.n_val = 16;
    Err err;
    double t = now_seconds();
    CHECK(synth_generate(dir, &c, &err) == 0, "%s", err.msg);
    double per_image = (now_seconds() - t) / 80;
    CHECK(per_image < 0.05, "%.1f ms per image: the full set would take %.0f s", 1e3 * per_image, 640 * per_image);
    int objects = 0;
    for (int i = 0; i < 64; i++) {
        Image im;
        SynthObject o[SYNTH_MAX_OBJECTS];
        objects += synth_render(&c, 0, i, &im, o);
        image_free(&im);
    }
    CHECK(objects > 64 * 2 && objects < 64 * SYNTH_MAX_OBJECTS, "%d objects in 64 images", objects);
}

// max_objects, min_diameter and max_diameter shape the scenes: at most that many objects, none
// far below the smallest diameter or above the largest; impossible values are refused.
static void test_object_count_and_size(void) {
    SynthConfig c = small_config(1);
    c.min_side = 128, c.max_side = 160, c.max_objects = 3, c.min_diameter = 24, c.max_diameter = 0.3;
    int most = 0;
    double smallest = 1e9, largest = 0;
    for (int i = 0; i < 40; i++) {
        Image im;
        SynthObject o[SYNTH_MAX_OBJECTS];
        int n = synth_render(&c, 0, i, &im, o);
        most = n > most ? n : most;
        for (int k = 0; k < n; k++) {
            double side = fmax(o[k].x2 - o[k].x1, o[k].y2 - o[k].y1), short_side = fmin(im.w, im.h);
            smallest = fmin(smallest, side);
            largest = fmax(largest, side / short_side);
        }
        image_free(&im);
    }
    CHECK(most >= 2 && most <= 3, "at most %d objects in an image, asked for up to 3", most);
    // a box may lose part of its shape to the border or a shape on top (up to 40%), so keep margins
    CHECK(smallest >= 0.5 * 24, "a box of %.0f px with min_diameter 24", smallest);
    CHECK(largest <= 1.05 * 0.3 + 0.02, "a box of %.2f of the short side with max_diameter 0.3", largest);
    SynthConfig d = synth_defaults();
    CHECK(d.max_objects == 8 && d.min_diameter == 12 && close_enough(d.max_diameter, 0.4, 0, 0),
          "defaults changed: %d objects, %d px to %g", d.max_objects, d.min_diameter, d.max_diameter);
    const char *dir = test_tmpdir("synth-bad");
    Err err;
    SynthConfig bad = c;
    bad.max_objects = SYNTH_MAX_OBJECTS + 1;
    CHECK(synth_generate(dir, &bad, &err) == -1 && strstr(err.msg, "max_objects"), "max_objects 9 accepted");
    bad = c, bad.min_diameter = 50;                  // above 0.3 * 128
    CHECK(synth_generate(dir, &bad, &err) == -1 && strstr(err.msg, "min_diameter"), "min_diameter 50 accepted");
}

int main(void) {
    RUN(test_generation_is_deterministic);
    RUN(test_labels_match_pixels);
    RUN(test_yaml_reads_back);
    RUN(test_ensure_and_regenerate);
    RUN(test_default_size_and_speed);
    RUN(test_object_count_and_size);
    return test_summary();
}
