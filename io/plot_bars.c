// plot_bars.c: a stacked horizontal bar chart drawn with the image module's rectangles and font
// (see plot_bars.h). Legend: W,H picture size in pixels; x0 where bars start; px per unit.
#include "io/plot_bars.h"

#include <math.h>
#include <stdio.h>

#include "io/image.h"

enum { BAR_H = 18, GAP = 6, LABEL_W = 300, TOP = 56, BOTTOM = 40, W = 1200 };

static const uint8_t PALETTE[PLOT_BARS_MAX_PARTS][3] = {
    { 31, 119, 180 }, { 255, 127, 14 }, { 44, 160, 44 }, { 214, 39, 40 },
    { 148, 103, 189 }, { 140, 86, 75 }, { 180, 180, 180 }, { 23, 190, 207 },
};
static const uint8_t INK[3] = { 0, 0, 0 }, GRID[3] = { 225, 225, 225 };

static void fill(Image *im, int x1, int y1, int x2, int y2, const uint8_t rgb[3]) {
    int t = (x2 - x1 > y2 - y1 ? x2 - x1 : y2 - y1) + 1;     // a thick enough outline is a fill
    image_draw_rect(im, x1, y1, x2, y2, t, rgb);
}

// 1, 2 or 5 times a power of ten: about six grid lines across `max`
static double nice_step(double max) {
    double raw = max / 6, p = pow(10, floor(log10(raw)));
    return raw / p < 2 ? p : raw / p < 5 ? 2 * p : 5 * p;
}

static void draw_legend(Image *im, const char *title, const char *const *names, int n) {
    image_draw_text_scaled(im, 10, 8, 2, title, INK, NULL);
    for (int p = 0, x = LABEL_W; p < n; p++) {
        int tw, th;
        fill(im, x, 36, x + 10, 46, PALETTE[p]);
        image_draw_text(im, x + 14, 38, names[p], INK, NULL);
        image_text_size(names[p], 1, &tw, &th);
        x += tw + 30;
    }
}

int plot_bars(const char *png, const char *title, const char *const *part_names, int n_parts,
              const BarRow *rows, int n_rows, const char *unit, Err *err) {
    if (n_parts > PLOT_BARS_MAX_PARTS) n_parts = PLOT_BARS_MAX_PARTS;
    double max = 0;
    for (int r = 0; r < n_rows; r++) {
        double s = 0;
        for (int p = 0; p < n_parts; p++) s += rows[r].value[p] > 0 ? rows[r].value[p] : 0;
        max = s > max ? s : max;
    }
    if (max <= 0) max = 1;
    int H = TOP + n_rows * (BAR_H + GAP) + BOTTOM, x0 = LABEL_W, span = W - x0 - 20;
    Image im = image_new(W, H, 255);
    double step = nice_step(max), px = span / (ceil(max / step) * step);
    int y_axis = TOP + n_rows * (BAR_H + GAP);
    for (double v = 0; v * px <= span + 0.5; v += step) {
        char tick[32];
        int x = x0 + (int)lround(v * px);
        fill(&im, x, TOP - 2, x, y_axis, GRID);
        snprintf(tick, sizeof tick, "%g", v);
        image_draw_text(&im, x - 4, y_axis + 6, tick, INK, NULL);
    }
    image_draw_text(&im, x0 + span / 2 - 20, y_axis + 22, unit, INK, NULL);
    draw_legend(&im, title, part_names, n_parts);
    for (int r = 0; r < n_rows; r++) {
        int y = TOP + r * (BAR_H + GAP), x = x0;
        image_draw_text(&im, 10, y + 5, rows[r].label, INK, NULL);
        for (int p = 0; p < n_parts; p++) {
            int w = (int)lround((rows[r].value[p] > 0 ? rows[r].value[p] : 0) * px);
            if (w > 0) fill(&im, x, y, x + w - 1, y + BAR_H - 1, PALETTE[p]);
            x += w;
        }
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.png", png);
    int rc = image_save_png(tmp, &im, err);
    image_free(&im);
    if (rc) return -1;
    if (rename(tmp, png)) { remove(tmp); return err_set(err, "%s: cannot rename %s into place", png, tmp); }
    return 0;
}
