// plot_confusion.c: confusion_matrix.png as YOLOv9's ConfusionMatrix.plot draws it with seaborn's
// heatmap (see plot.h): square cells in matplotlib's 'Blues' from 0 to the largest value, blank
// (white) cells for NAN, %.2f annotations in black or white by the cell's lightness, a colour bar.
// Legend: N = nc + 1 rows and columns, c the cell side in pixels.
#include "io/plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "io/plot_axes.h"
#include "io/text.h"

// matplotlib's Blues: nine stops, linear between them
static const uint8_t BLUES[9][3] = {
    { 247, 251, 255 }, { 222, 235, 247 }, { 198, 219, 239 }, { 158, 202, 225 }, { 107, 174, 214 },
    { 66, 146, 198 }, { 33, 113, 181 }, { 8, 81, 156 }, { 8, 48, 107 },
};
static const uint8_t INK[3] = { 0, 0, 0 }, WHITE[3] = { 255, 255, 255 };

static void blues(double t, uint8_t rgb[3]) {
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    double u = t * 8;
    int i = u >= 8 ? 7 : (int)u;
    double f = u - i;
    for (int k = 0; k < 3; k++) rgb[k] = (uint8_t)lround(BLUES[i][k] + f * (BLUES[i + 1][k] - BLUES[i][k]));
}

static void tick_name(char *s, size_t size, int i, int nc, char *const *names) {
    if (i == nc) snprintf(s, size, "background");
    else if (names && nc < 99) snprintf(s, size, "%s", names[i]);
    else snprintf(s, size, "%d", i);
}

// The heatmap's cells at (x0, y0), side c, with their annotations.
static void cells(Image *im, const double *m, int N, int x0, int y0, int c, double vmax, int annot) {
    int font = plot_pt(8);
    for (int r = 0; r < N; r++)
        for (int k = 0; k < N; k++) {
            double v = m[(size_t)r * N + k];
            if (isnan(v)) continue;
            uint8_t rgb[3];
            blues(v / vmax, rgb);
            plot_fill(im, x0 + k * c, y0 + r * c, x0 + (k + 1) * c, y0 + (r + 1) * c, rgb);
            if (!annot) continue;
            char s[32];
            int w, h;
            snprintf(s, sizeof s, "%.2f", v);
            text_measure(s, font, &w, &h);
            double lum = (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2]) / 255;   // seaborn: dark cells get white
            text_draw(im, x0 + k * c + (c - w) / 2, y0 + r * c + (c - h) / 2, s, font, lum > 0.408 ? INK : WHITE, 0);
        }
}

static void colour_bar(Image *im, int x, int y, int w, int h, double vmax, int font) {
    for (int j = 0; j < h; j++) {
        uint8_t rgb[3];
        blues(1.0 - (j + 0.5) / h, rgb);
        plot_fill(im, x, y + j, x + w, y + j + 1, rgb);
    }
    Axes a = axes_make(im, x, y, w, h, 0, 1, 0, vmax);
    double t[16];
    int dec, n = axes_ticks(0, vmax, 5, t, &dec);
    for (int i = 0; i < n; i++) {
        char s[32];
        int ty = (int)axes_py(&a, t[i]), tw, th;
        snprintf(s, sizeof s, "%.*f", dec, t[i]);
        text_measure(s, font, &tw, &th);
        plot_fill(im, x + w, ty, x + w + plot_pt(3.5), ty + 1, INK);
        text_draw(im, x + w + plot_pt(5.5), ty - th / 2, s, font, INK, 0);
    }
}

int plot_confusion(const char *png, const double *m, int nc, char *const *names, Err *err) {
    int N = nc + 1, W = 12 * PLOT_DPI, H = 9 * PLOT_DPI, font = plot_pt(nc < 50 ? 11 : 9);
    double vmax = 0;
    for (int i = 0; i < N * N; i++) if (!isnan(m[i]) && m[i] > vmax) vmax = m[i];
    if (vmax <= 0) vmax = 1;
    int label_w = 0, th = 0;                      // the longest tick label
    for (int i = 0; i < N; i++) {
        char s[256];
        int w;
        tick_name(s, sizeof s, i, nc, names);
        text_measure(s, font, &w, &th);
        if (w > label_w) label_w = w;
    }
    int top = plot_pt(30), left = label_w + plot_pt(34), bottom = label_w + plot_pt(34), bar = plot_pt(60);
    int side = W - left - bar - plot_pt(40) < H - top - bottom ? W - left - bar - plot_pt(40) : H - top - bottom;
    int c = side / N > 1 ? side / N : 1;
    side = c * N;
    int x0 = left + (W - left - bar - side) / 2, y0 = top;
    Image im = image_new(W, H, 255);
    cells(&im, m, N, x0, y0, c, vmax, nc < 30 && c >= plot_pt(16));
    int tf = font, tick_w = label_w;               // the tick labels' font: smaller where cells are
    if (names && nc < 99 && th > c) {              // smaller than the text (every name is shown)
        tf = c * font / th > 6 ? c * font / th : 6;
        tick_w = 0;
        for (int i = 0; i < N; i++) {
            char s[256];
            int w;
            tick_name(s, sizeof s, i, nc, names);
            text_measure(s, tf, &w, &th);
            if (w > tick_w) tick_w = w;
        }
    }
    int step = names && nc < 99 ? 1 : (th + c - 1) / c;   // every name, or numbers as far apart as they fit
    for (int i = 0; i < N; i += step) {
        char s[256];
        int w, h;
        tick_name(s, sizeof s, i, nc, names);
        text_measure(s, tf, &w, &h);
        text_draw(&im, x0 + i * c + (c - h) / 2, y0 + side + plot_pt(5), s, tf, INK, 1);   // x: turned
        text_draw(&im, x0 - plot_pt(5) - w, y0 + i * c + (c - h) / 2, s, tf, INK, 0);
    }
    Axes a = axes_make(&im, x0, y0, side, side, 0, 1, 0, 1);
    int w, h;
    text_measure("True", font, &w, &h);
    text_draw(&im, x0 + side / 2 - w / 2, y0 + side + tick_w + plot_pt(10), "True", font, INK, 0);
    text_measure("Predicted", font, &w, &h);
    text_draw(&im, x0 - tick_w - plot_pt(12) - h, y0 + side / 2 - w / 2, "Predicted", font, INK, 1);
    axes_labels(&a, "Confusion Matrix", NULL, NULL, font);
    colour_bar(&im, x0 + side + plot_pt(16), y0, plot_pt(14), side, vmax, font);
    int rc = plot_save(&im, png, err);
    image_free(&im);
    return rc;
}
