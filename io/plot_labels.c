// plot_labels.c: labels.jpg as YOLOv9's plot_labels draws it (see plot.h): 2 x 2 panels without
// spines: instances per class (bars in the class colours), the first 1000 boxes drawn about the
// centre of a 2000 x 2000 square, and seaborn's 2-D histograms (50 x 50 bins, colour scale capped where
// 90% of the counts lie: pmax=0.9) of the centres and the sizes. Legend: n boxes, B = 50 bins.
#include "io/plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/plot_axes.h"
#include "io/text.h"

enum { B = 50, SQUARE = 2000, MAX_RECTS = 1000 };

// Ultralytics' Colors palette (the class colours of every picture)
static const uint8_t PALETTE[20][3] = {
    { 255, 56, 56 }, { 255, 157, 151 }, { 255, 112, 31 }, { 255, 178, 29 }, { 207, 210, 49 },
    { 72, 249, 10 }, { 146, 204, 23 }, { 61, 219, 134 }, { 26, 147, 52 }, { 0, 212, 187 },
    { 44, 153, 168 }, { 0, 194, 255 }, { 52, 69, 147 }, { 100, 115, 255 }, { 0, 24, 236 },
    { 132, 56, 255 }, { 82, 0, 133 }, { 203, 56, 255 }, { 255, 149, 200 }, { 255, 55, 199 },
};
static const uint8_t INK[3] = { 0, 0, 0 };

static void class_histogram(Image *im, Axes *cell, const float *box, int n, int nc, char *const *names, int font) {
    int *count = xcalloc(nc + 1, sizeof *count), top = 1;
    for (int i = 0; i < n; i++) { int c = (int)box[5 * i]; if (c >= 0 && c < nc) count[c]++; }
    for (int c = 0; c < nc; c++) if (count[c] > top) top = count[c];
    double ymin, ymax;
    axes_autoscale(0, top, &ymin, &ymax);
    Axes a = axes_make(im, cell->x0, cell->y0, cell->w, cell->h, -0.5 - 0.04 * nc, nc - 0.5 + 0.04 * nc, 0, ymax);
    a.hide_spines = 1;
    for (int c = 0; c < nc; c++)
        plot_fill(im, (int)axes_px(&a, c - 0.4), (int)axes_py(&a, count[c]), (int)axes_px(&a, c + 0.4), (int)axes_py(&a, 0),
                  PALETTE[c % 20]);
    axes_frame(&a, 0, 5, font);                   // y ticks only: the class names go below instead
    for (int c = 0; names && nc < 30 && c < nc; c++) {
        int w, h, x = (int)axes_px(&a, c);
        text_measure(names[c], font, &w, &h);
        text_draw(im, x - h / 2, a.y0 + a.h + plot_pt(4), names[c], font, INK, 1);
    }
    if (!(names && nc < 30)) axes_labels(&a, NULL, "classes", NULL, font);
    int w, h;
    text_measure("instances", font, &w, &h);
    text_draw(im, a.x0 - plot_pt(40) - h, a.y0 + a.h / 2 - w / 2, "instances", font, INK, 1);
    free(count);
}

// The first MAX_RECTS boxes about the centre of a SQUARE x SQUARE white square, 1 px outlines in the
// class colour, shown shrunk into the cell (imshow; axis off).
static void rectangles(Image *im, const Axes *cell, const float *box, int n) {
    int side = cell->w < cell->h ? cell->w : cell->h, ox = cell->x0 + (cell->w - side) / 2, oy = cell->y0 + (cell->h - side) / 2;
    double s = (double)side / SQUARE;
    for (int i = 0; i < n && i < MAX_RECTS; i++) {
        const float *b = box + 5 * i;
        double x1 = (0.5 - b[3] / 2) * SQUARE * s, x2 = (0.5 + b[3] / 2) * SQUARE * s;
        double y1 = (0.5 - b[4] / 2) * SQUARE * s, y2 = (0.5 + b[4] / 2) * SQUARE * s;
        const uint8_t *c = PALETTE[((int)b[0] % 20 + 20) % 20];
        int cl = ox, ct = oy, cr = ox + side, cb = oy + side;
        plot_segment(im, ox + x1, oy + y1, ox + x2, oy + y1, 1, c, cl, ct, cr, cb);
        plot_segment(im, ox + x1, oy + y2, ox + x2, oy + y2, 1, c, cl, ct, cr, cb);
        plot_segment(im, ox + x1, oy + y1, ox + x1, oy + y2, 1, c, cl, ct, cr, cb);
        plot_segment(im, ox + x2, oy + y1, ox + x2, oy + y2, 1, c, cl, ct, cr, cb);
    }
}

// seaborn's pmax: the count at which the cells holding the most counts reach a fraction p of all.
static double pmax_level(const int *h, int cells, double p) {
    int *v = xmalloc(sizeof *v * cells), total = 0;
    for (int i = 0; i < cells; i++) v[i] = h[i], total += h[i];
    for (int i = 1; i < cells; i++) for (int j = i; j > 0 && v[j] > v[j - 1]; j--) { int t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    double level = 1, acc = 0;
    for (int i = 0; i < cells && v[i] > 0; i++) {   // descending: the level where the remainder starts
        acc += v[i];
        level = v[i];
        if (acc >= (1 - p) * total) break;
    }
    free(v);
    return level > 0 ? level : 1;
}

// A B x B histogram of columns (u, v) of box, bins spanning each column's range, in seaborn's
// "light:C0" colours (empty bins left white), with ticks and the two axis labels.
static void histogram2d(Image *im, const Axes *cell, const float *box, int n, int u, int v, const char *xl,
                        const char *yl, int font) {
    float lo[2] = { INFINITY, INFINITY }, hi[2] = { -INFINITY, -INFINITY };
    int col[2] = { u, v };
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) { float x = box[5 * i + col[k]]; lo[k] = fminf(lo[k], x); hi[k] = fmaxf(hi[k], x); }
    if (!n) lo[0] = lo[1] = 0, hi[0] = hi[1] = 1;
    for (int k = 0; k < 2; k++) if (!(hi[k] > lo[k])) hi[k] = lo[k] + 1e-3f;
    int *h = xcalloc(B * B, sizeof *h);
    for (int i = 0; i < n; i++) {
        int bx = (int)((box[5 * i + u] - lo[0]) / (hi[0] - lo[0]) * B), by = (int)((box[5 * i + v] - lo[1]) / (hi[1] - lo[1]) * B);
        h[(by < B ? by : B - 1) * B + (bx < B ? bx : B - 1)]++;
    }
    double vmax = pmax_level(h, B * B, 0.9);
    Axes a = axes_make(im, cell->x0, cell->y0, cell->w, cell->h, lo[0], hi[0], lo[1], hi[1]);
    a.hide_spines = 1;
    static const uint8_t light[3] = { 230, 236, 242 };
    for (int by = 0; by < B; by++)
        for (int bx = 0; bx < B; bx++) {
            int c = h[by * B + bx];
            if (!c) continue;
            double t = c >= vmax ? 1 : c / vmax;
            uint8_t rgb[3];
            for (int k = 0; k < 3; k++) rgb[k] = (uint8_t)lround(light[k] + t * (PLOT_TAB10[0][k] - light[k]));
            double x0 = lo[0] + (hi[0] - lo[0]) * bx / B, x1 = lo[0] + (hi[0] - lo[0]) * (bx + 1) / B;
            double y0 = lo[1] + (hi[1] - lo[1]) * by / B, y1 = lo[1] + (hi[1] - lo[1]) * (by + 1) / B;
            plot_fill(im, (int)axes_px(&a, x0), (int)axes_py(&a, y1), (int)ceil(axes_px(&a, x1)), (int)ceil(axes_py(&a, y0)), rgb);
        }
    axes_frame(&a, 4, 4, font);
    axes_labels(&a, NULL, xl, yl, font);
    free(h);
}

int plot_labels(const char *jpg, const float *box, int n, int nc, char *const *names, Err *err) {
    int W = 8 * PLOT_DPI, font = plot_pt(10), cell = W / 2;
    int longest = 0;                               // room under the class histogram for its names
    for (int c = 0; names && nc < 30 && c < nc; c++) { int w, h; text_measure(names[c], font, &w, &h); if (w > longest) longest = w; }
    Image im = image_new(W, W, 255);
    int l = plot_pt(56), t = plot_pt(10), r = plot_pt(12), b = plot_pt(44);
    Axes c0 = axes_make(&im, l, t, cell - l - r, cell - t - (longest > b ? longest + plot_pt(12) : b), 0, 1, 0, 1);
    Axes c1 = axes_make(&im, cell + plot_pt(8), t, cell - plot_pt(16), cell - t - plot_pt(8), 0, 1, 0, 1);
    Axes c2 = axes_make(&im, l, cell + t, cell - l - r, cell - t - b, 0, 1, 0, 1);
    Axes c3 = axes_make(&im, cell + l, cell + t, cell - l - r, cell - t - b, 0, 1, 0, 1);
    class_histogram(&im, &c0, box, n, nc, names, font);
    rectangles(&im, &c1, box, n);
    histogram2d(&im, &c2, box, n, 1, 2, "x", "y", font);
    histogram2d(&im, &c3, box, n, 3, 4, "width", "height", font);
    int rc = image_save_jpeg(jpg, &im, 95, err);
    image_free(&im);
    return rc;
}
