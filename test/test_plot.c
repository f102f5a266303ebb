// test_plot.c: results.png is drawn from results.csv: the right size, curves in each panel, and a
// clear error for a missing or empty file.
#include "test/test.h"

#include "io/image.h"
#include "io/plot.h"

static void test_plot_draws_curves(void) {
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
    if (image_load(png, &im, &err)) { CHECK(0, "%s", err.msg); return; }
    CHECK(im.w == 1500 && im.h == 440, "size %dx%d", im.w, im.h);
    int panels_with_curve = 0;                      // the curve colour (31, 119, 180) in each panel
    for (int k = 0; k < 10; k++) {
        int ox = (k % 5) * 300, oy = (k / 5) * 220, found = 0;
        for (int y = oy; y < oy + 220 && !found; y++)
            for (int x = ox; x < ox + 300 && !found; x++) {
                const uint8_t *p = im.px + 3 * ((size_t)y * im.w + x);
                found = p[0] == 31 && p[1] == 119 && p[2] == 180;
            }
        panels_with_curve += found;
    }
    CHECK(panels_with_curve == 10, "%d of 10 panels have a curve", panels_with_curve);
    image_free(&im);
}

static void test_plot_errors(void) {
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

int main(void) {
    RUN(test_plot_draws_curves);
    RUN(test_plot_errors);
    return test_summary();
}
