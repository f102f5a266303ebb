// test_plot.c: the run's plots. results.png from results.csv; the PR/F1/P/R curve figure; the confusion
// matrix; labels.jpg; text through FreeType and the bitmap fallback: each file has the reference's size,
// and pixels differ from the background where lines, cells and text belong (so a plot with nothing
// drawn fails). Then a 2-epoch CPU run on a small synthetic set writes every plot into its folder.
#include "test/test.h"

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cfg/config.h"
#include "core/train/train.h"
#include "io/image.h"
#include "io/plot.h"
#include "io/plot_axes.h"
#include "io/synth.h"
#include "io/text.h"

static const uint8_t *at(const Image *im, int x, int y) { return im->px + 3 * ((size_t)y * im->w + x); }

// Pixels in [x0, x1) x [y0, y1) of exactly rgb (tol 0), or within tol per channel.
static int count_rgb(const Image *im, int x0, int y0, int x1, int y1, int r, int g, int b, int tol) {
    int n = 0;
    for (int y = y0; y < y1 && y < im->h; y++)
        for (int x = x0; x < x1 && x < im->w; x++) {
            const uint8_t *p = at(im, x, y);
            n += abs(p[0] - r) <= tol && abs(p[1] - g) <= tol && abs(p[2] - b) <= tol;
        }
    return n;
}

static int count_dark(const Image *im, int x0, int y0, int x1, int y1) {   // text and spines
    int n = 0;
    for (int y = y0; y < y1 && y < im->h; y++)
        for (int x = x0; x < x1 && x < im->w; x++) { const uint8_t *p = at(im, x, y); n += p[0] < 100 && p[1] < 100 && p[2] < 100; }
    return n;
}

static int load(const char *path, Image *im) {
    Err err;
    if (image_load(path, im, &err)) { CHECK(0, "%s", err.msg); return -1; }
    return 0;
}

static void test_results_png(void) {
    const char *dir = test_tmpdir("plot");
    char csv[4200], png[4200];
    snprintf(csv, sizeof csv, "%s/results.csv", dir);
    snprintf(png, sizeof png, "%s/results.png", dir);
    FILE *f = fopen(csv, "w");
    fprintf(f, "%20s\n", "epoch,...");
    for (int e = 0; e < 5; e++) {
        fprintf(f, "%20d", e);
        for (int c = 1; c < 14; c++) fprintf(f, ",%20.5g", c < 4 || (c > 7 && c < 11) ? 5.0 - e : 0.1 * e);
        fprintf(f, "\n");
    }
    fclose(f);
    Err err;
    CHECK(plot_results(csv, png, &err) == 0, "%s", err.msg);
    Image im;
    if (load(png, &im)) return;
    CHECK(im.w == 1800 && im.h == 900, "size %dx%d (12 x 6 inches at 150 dpi)", im.w, im.h);
    int curves = 0, smooth = 0, ticks = 0;
    for (int k = 0; k < 10; k++) {                 // panels of 360 x 450: curve C0, smooth C1, tick labels
        int ox = (k % 5) * 360, oy = (k / 5) * 450;
        curves += count_rgb(&im, ox, oy, ox + 360, oy + 450, 31, 119, 180, 0) > 100;
        smooth += count_rgb(&im, ox, oy, ox + 360, oy + 450, 255, 127, 14, 0) > 20;
        ticks += count_dark(&im, ox + 4, oy + 60, ox + 60, oy + 380) > 30;   // the y tick labels' column
    }
    CHECK(curves == 10 && smooth == 10 && ticks == 10, "panels with a curve %d, smooth line %d, tick labels %d of 10",
          curves, smooth, ticks);
    CHECK(count_dark(&im, 360 + 200, 45, 720, 110) > 50, "no legend in panel 2");
    image_free(&im);
}

static void test_results_errors(void) {
    Err err;
    CHECK(plot_results("/nonexistent/results.csv", "/tmp/x.png", &err) == -1 && strstr(err.msg, "/nonexistent"),
          "missing file: %s", err.msg);
    const char *dir = test_tmpdir("plot2");
    char csv[4200], png[4200];
    snprintf(csv, sizeof csv, "%s/results.csv", dir);
    snprintf(png, sizeof png, "%s/results.png", dir);
    FILE *f = fopen(csv, "w");
    fclose(f);
    CHECK(plot_results(csv, png, &err) == -1 && strstr(err.msg, "no rows"), "empty file: %s", err.msg);
}

static void test_curves(void) {
    enum { N = 200 };
    double x[N], y[25 * N], mean[N];
    for (int i = 0; i < N; i++) {
        x[i] = i / (N - 1.0);
        mean[i] = 0.5;
        for (int k = 0; k < 25; k++) y[k * N + i] = 0.1 + 0.03 * k + 0.1 * x[i];
    }
    char *labels[3] = { "circle", "square", "звезда" };
    CurvePlot c = { "F1-Confidence Curve", "Confidence", "F1", x, y, mean, N, 3, labels, "all classes 0.50 at 0.123" };
    char png[4200];
    snprintf(png, sizeof png, "%s/F1_curve.png", test_tmpdir("curves"));
    Err err;
    CHECK(plot_curves(png, &c, &err) == 0, "%s", err.msg);
    Image im;
    if (load(png, &im)) return;
    CHECK(im.w == 1350 && im.h == 900, "size %dx%d (9 x 6 inches)", im.w, im.h);
    CHECK(count_rgb(&im, 0, 0, im.w, im.h, 0, 0, 255, 0) > 1000, "no bold blue mean line");
    for (int k = 0; k < 3; k++)
        CHECK(count_rgb(&im, 0, 0, im.w, im.h, PLOT_TAB10[k][0], PLOT_TAB10[k][1], PLOT_TAB10[k][2], 0) > 100, "no curve %d", k);
    CHECK(count_dark(&im, 950, 60, 1350, 300) > 300, "no legend text right of the box");
    CHECK(count_dark(&im, 300, 0, 800, 45) > 100, "no title");
    CHECK(count_dark(&im, 0, 300, 40, 600) > 50, "no y label");
    CHECK(count_dark(&im, 400, 820, 700, 900) > 50, "no x label");
    image_free(&im);
    c.k = 25;                                      // 21 classes and more: grey lines, no per-class legend
    CHECK(plot_curves(png, &c, &err) == 0, "%s", err.msg);
    if (load(png, &im)) return;
    CHECK(count_rgb(&im, 0, 0, im.w, im.h, 128, 128, 128, 0) > 1000 && count_rgb(&im, 0, 0, im.w, im.h, 31, 119, 180, 0) == 0,
          "25 curves: grey, without tab10 colours");
    image_free(&im);
}

static void test_confusion_png(void) {
    double m[16];
    for (int i = 0; i < 16; i++) m[i] = NAN;
    m[0] = 1.0; m[5] = 0.5; m[3 * 4 + 2] = 0.25;   // rows predicted, columns true
    char *names[3] = { "circle", "square", "triangle" };
    char png[4200];
    snprintf(png, sizeof png, "%s/confusion_matrix.png", test_tmpdir("confusion"));
    Err err;
    CHECK(plot_confusion(png, m, 3, names, &err) == 0, "%s", err.msg);
    Image im;
    if (load(png, &im)) return;
    CHECK(im.w == 1800 && im.h == 1350, "size %dx%d (12 x 9 inches)", im.w, im.h);
    int x0 = im.w, y0 = im.h, x1 = 0, y1 = 0;      // the 1.00 cell: the darkest Blues colour
    for (int y = 0; y < im.h; y++)
        for (int x = 0; x < 1400; x++)              // left of the colour bar
            if (count_rgb(&im, x, y, x + 1, y + 1, 8, 48, 107, 0)) { x0 = x < x0 ? x : x0; x1 = x > x1 ? x : x1; y0 = y < y0 ? y : y0; y1 = y > y1 ? y : y1; }
    CHECK(x1 - x0 > 100 && y1 - y0 > 100 && abs((x1 - x0) - (y1 - y0)) < 4, "the 1.00 cell: %d..%d x %d..%d", x0, x1, y0, y1);
    CHECK(count_rgb(&im, x0, y0, x1, y1, 255, 255, 255, 60) > 20, "no annotation in the 1.00 cell");
    CHECK(count_rgb(&im, x1 + 1, y0, x1 + (x1 - x0), y1, 255, 255, 255, 0) > (x1 - x0) * (y1 - y0) / 2,
          "a NAN cell is not blank");
    CHECK(count_dark(&im, 0, y0, x0, y1) > 50, "no tick label left of row 0");
    image_free(&im);
}

static void test_labels_jpg(void) {
    float box[5 * 300];
    for (int i = 0; i < 300; i++) {
        float *b = box + 5 * i;
        b[0] = (float)(i % 3); b[1] = 0.2f + 0.6f * (i % 17) / 17; b[2] = 0.3f + 0.4f * (i % 13) / 13;
        b[3] = 0.05f + 0.2f * (i % 7) / 7; b[4] = 0.05f + 0.3f * (i % 11) / 11;
    }
    char *names[3] = { "circle", "square", "triangle" };
    char jpg[4200];
    snprintf(jpg, sizeof jpg, "%s/labels.jpg", test_tmpdir("labels"));
    Err err;
    CHECK(plot_labels(jpg, box, 300, 3, names, &err) == 0, "%s", err.msg);
    Image im;
    if (load(jpg, &im)) return;
    CHECK(im.w == 1200 && im.h == 1200, "size %dx%d (8 x 8 inches)", im.w, im.h);
    CHECK(count_rgb(&im, 0, 0, 600, 600, 255, 56, 56, 30) > 2000, "no class 0 bar (Ultralytics red)");
    CHECK(count_rgb(&im, 600, 0, 1200, 600, 255, 255, 255, 40) < 600 * 600 - 500, "no rectangles");
    for (int q = 0; q < 2; q++) {                  // the 2-D histograms: blue cells, tick labels
        int blue = 0;
        for (int y = 640; y < 1150; y++)
            for (int x = q * 600 + 100; x < q * 600 + 580; x++) { const uint8_t *p = at(&im, x, y); blue += p[2] > p[0] + 30; }
        CHECK(blue > 1000, "histogram %d: %d blue pixels", q, blue);
        CHECK(count_dark(&im, q * 600, 1120, q * 600 + 600, 1200) > 50, "histogram %d: no x ticks and label", q);
    }
    CHECK(count_dark(&im, 0, 500, 600, 600) > 100, "no class names under the bars");
    image_free(&im);
}

// labels_correlogram.jpg: numpy's bins='auto' counts (Sturges, or Freedman-Diaconis when narrower), and
// the corner grid: histograms on the diagonal and below it, nothing above it, labels outside.
static void test_labels_correlogram(void) {
    enum { M = 100000 };
    float *box = xcalloc(5 * (size_t)M, sizeof *box);
    for (int i = 0; i < M; i++) box[5 * i + 1] = (float)i / M;
    // i/n, n = 100 (np.arange(100) / 100): Sturges 0.99 / 7.64 beats FD 0.213: ceil(7.64) = 8 bins;
    // n = 1000: Sturges, ceil(10.97) = 11; n = 100000: FD's n^(1/3) = 46.4 -> 47
    for (int i = 0; i < 100; i++) box[5 * i + 2] = (float)i / 100;
    for (int i = 0; i < 1000; i++) box[5 * i + 3] = (float)i / 1000;
    CHECK(plot_auto_bins(box, 100, 2) == 8, "np.arange(100)/100: %d bins, numpy 8", plot_auto_bins(box, 100, 2));
    CHECK(plot_auto_bins(box, 1000, 3) == 11, "np.arange(1000)/1000: %d bins, numpy 11", plot_auto_bins(box, 1000, 3));
    CHECK(plot_auto_bins(box, M, 1) == 47, "np.arange(1e5)/1e5: %d bins, numpy 47", plot_auto_bins(box, M, 1));
    for (int i = 0; i < 100; i++) box[5 * i + 4] = i < 80 ? 0.5f : (float)i / 100;   // IQR 0: Sturges alone
    CHECK(plot_auto_bins(box, 100, 4) == 8, "IQR 0: %d bins, numpy 8 (Sturges)", plot_auto_bins(box, 100, 4));
    for (int i = 0; i < 300; i++) {                // labels as test_labels_jpg's
        float *b = box + 5 * i;
        b[0] = (float)(i % 3); b[1] = 0.2f + 0.6f * (i % 17) / 17; b[2] = 0.3f + 0.4f * (i % 13) / 13;
        b[3] = 0.05f + 0.2f * (i % 7) / 7; b[4] = 0.05f + 0.3f * (i % 11) / 11;
    }
    char jpg[4200];
    snprintf(jpg, sizeof jpg, "%s/labels_correlogram.jpg", test_tmpdir("labels"));
    Err err;
    CHECK(plot_labels_correlogram(jpg, box, 300, &err) == 0, "%s", err.msg);
    free(box);
    Image im;
    if (load(jpg, &im)) return;
    int l = plot_pt(60), t = plot_pt(10), cell = (im.w - l - plot_pt(10)) / 4;
    CHECK(im.w == 1500, "width %d (10 inches)", im.w);
    for (int row = 0; row < 4; row++)
        for (int col = 0; col < 4; col++) {
            int x0 = l + col * cell + 10, y0 = t + row * cell + 10, blue = 0;
            for (int y = y0; y < y0 + cell - 20; y++)
                for (int x = x0; x < x0 + cell - 20; x++) { const uint8_t *p = at(&im, x, y); blue += p[2] > p[0] + 30; }
            if (col > row) CHECK(blue == 0, "cell (%d, %d) above the diagonal has %d blue pixels", row, col, blue);
            else CHECK(blue > 500, "cell (%d, %d): %d blue pixels", row, col, blue);
        }
    CHECK(count_dark(&im, l, im.h - plot_pt(40), im.w, im.h) > 200, "no x tick labels and names along the bottom");
    CHECK(count_dark(&im, 0, t, l - 2, t + 4 * cell) > 200, "no y tick labels and names along the left");
    image_free(&im);
}

static int drawn(const Image *im) { return count_rgb(im, 0, 0, im->w, im->h, 0, 0, 0, 0) < im->w * im->h; }

static void test_text(void) {
    static const uint8_t black[3] = { 0, 0, 0 };
    int w1, h1, w4, h4;
    text_measure("A", 20, &w1, &h1);
    text_measure("AAAA", 20, &w4, &h4);
    CHECK(w4 > 3 * w1 && h1 == h4 && h1 >= 10, "A %dx%d, AAAA %dx%d", w1, h1, w4, h4);
    Image a = image_new(120, 60, 255), b = image_new(120, 60, 255), r = image_new(60, 160, 255);
    text_draw(&a, 5, 5, "Hg", 20, black, 0);
    CHECK(count_dark(&a, 0, 0, 120, 60) > 30, "nothing drawn");
    text_draw(&r, 5, 5, "rotated", 20, black, 1);  // turned: the ink is taller than wide
    int minx = 60, maxx = 0, miny = 160, maxy = 0;
    for (int y = 0; y < 160; y++)
        for (int x = 0; x < 60; x++)
            if (count_dark(&r, x, y, x + 1, y + 1)) { minx = x < minx ? x : minx; maxx = x > maxx ? x : maxx; miny = y < miny ? y : miny; maxy = y > maxy ? y : maxy; }
    CHECK(maxy - miny > 2 * (maxx - minx), "turned text spans %dx%d", maxx - minx, maxy - miny);
    if (text_has_font()) {                          // FreeType: a Cyrillic name is not the bitmap font's '?'
        memset(a.px, 255, 120 * 60 * 3); memset(b.px, 255, 120 * 60 * 3);
        text_draw(&a, 5, 5, "ж", 20, black, 0);
        text_draw(&b, 5, 5, "?", 20, black, 0);
        CHECK(memcmp(a.px, b.px, 120 * 60 * 3) && count_dark(&a, 0, 0, 120, 60) > 10, "ж drawn as ?");
    } else printf("    (no FreeType font here: the Cyrillic check is skipped)\n");
    image_free(&a); image_free(&b); image_free(&r);
}

// YT_FONT=none: the bitmap font with its 6x8 cells (image_draw.c). In a child forked before this
// process draws any text (the font is chosen once per process), so this test runs first.
static void test_text_bitmap_fallback(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        test_switch(SW_FONT, "none");
        Image c = image_new(100, 30, 0);
        static const uint8_t white[3] = { 255, 255, 255 };
        text_draw(&c, 2, 2, "ok?", 11, white, 0);
        int w, h;
        text_measure("ok?", 11, &w, &h);
        _exit(text_has_font() == 0 && drawn(&c) && w == 19 && h == 9 ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "YT_FONT=none did not give the bitmap font");
}

// A 2-epoch run of gelan-t on the CPU over a small built-in synthetic set: every plot is in the folder.
static void test_run_writes_plots(void) {
    const char *dir = test_tmpdir("plotrun");
    char sd[4200], yaml[4300], project[4200];
    snprintf(sd, sizeof sd, "%s/synth", dir);
    snprintf(yaml, sizeof yaml, "data=%s/data.yaml", sd);
    snprintf(project, sizeof project, "project=%s/runs", dir);
    SynthConfig sc = synth_defaults();
    sc.n_train = 8; sc.n_val = 4; sc.min_side = 64; sc.max_side = 80; sc.threads = 1;
    Err err;
    if (synth_generate(sd, &sc, &err)) { CHECK(0, "%s", err.msg); return; }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char log[4300];
        snprintf(log, sizeof log, "%s/run.log", dir);
        FILE *f = fopen(log, "w");
        if (!f) _exit(99);
        dup2(fileno(f), 1); dup2(fileno(f), 2);
        static Config cfg;
        char *ov[] = { yaml, project, "name=exp", "imgsz=64", "batch=4", "epochs=2", "workers=1", "device=cpu" };
        int rc = config_load("cfg/t.ini", 8, ov, &cfg, &err) ? 98 : train_run(&cfg);
        fflush(stdout); fflush(stderr);
        _exit(rc);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the run failed (see %s/run.log)", dir);
    static const struct { const char *name; int w, h; } want[] = {
        { "labels.jpg", 1200, 1200 }, { "results.png", 1800, 900 }, { "confusion_matrix.png", 1800, 1350 },
        { "PR_curve.png", 1350, 900 }, { "F1_curve.png", 1350, 900 }, { "P_curve.png", 1350, 900 },
        { "R_curve.png", 1350, 900 },
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        char path[4400];
        int w, h;
        snprintf(path, sizeof path, "%s/runs/exp/%s", dir, want[i].name);
        CHECK(image_probe(path, &w, &h, &err) == 0 && w == want[i].w && h == want[i].h, "%s: %s %dx%d", want[i].name,
              access(path, F_OK) ? "missing" : "size", w, h);
    }
}

int main(void) {
    RUN(test_text_bitmap_fallback);
    RUN(test_results_png);
    RUN(test_results_errors);
    RUN(test_curves);
    RUN(test_confusion_png);
    RUN(test_labels_jpg);
    RUN(test_labels_correlogram);
    RUN(test_text);
    RUN(test_run_writes_plots);
    return test_summary();
}
