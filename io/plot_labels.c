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

// The range of column u of box (a flat or empty one widened so that bins have a width).
static void column_range(const float *box, int n, int u, float *lo, float *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < n; i++) *lo = fminf(*lo, box[5 * i + u]), *hi = fmaxf(*hi, box[5 * i + u]);
    if (!n) *lo = 0, *hi = 1;
    if (!(*hi > *lo)) *hi = *lo + 1e-3f;
}

// The bin of value x among nb bins over [lo, hi] (the last bin closed, as numpy's).
static int bin_of(float x, float lo, float hi, int nb) {
    int b = (int)((x - lo) / (hi - lo) * nb);
    return b < 0 ? 0 : b < nb ? b : nb - 1;
}

// An nbx x nby histogram of columns (u, v) of box, bins spanning each column's range, in seaborn's
// "light:C0" colours (empty bins left white); ticks (about tx, ty of them; 0: none) and the axis labels.
static void histogram2d_bins(Image *im, const Axes *cell, const float *box, int n, int u, int v, int nbx, int nby,
                             int tx, int ty, const char *xl, const char *yl, int font) {
    float lo[2], hi[2];
    column_range(box, n, u, &lo[0], &hi[0]);
    column_range(box, n, v, &lo[1], &hi[1]);
    int *h = xcalloc((size_t)nbx * nby, sizeof *h);
    for (int i = 0; i < n; i++)
        h[bin_of(box[5 * i + v], lo[1], hi[1], nby) * nbx + bin_of(box[5 * i + u], lo[0], hi[0], nbx)]++;
    double vmax = pmax_level(h, nbx * nby, 0.9);
    Axes a = axes_make(im, cell->x0, cell->y0, cell->w, cell->h, lo[0], hi[0], lo[1], hi[1]);
    a.hide_spines = 1;
    static const uint8_t light[3] = { 230, 236, 242 };
    for (int by = 0; by < nby; by++)
        for (int bx = 0; bx < nbx; bx++) {
            int c = h[by * nbx + bx];
            if (!c) continue;
            double t = c >= vmax ? 1 : c / vmax;
            uint8_t rgb[3];
            for (int k = 0; k < 3; k++) rgb[k] = (uint8_t)lround(light[k] + t * (PLOT_TAB10[0][k] - light[k]));
            double x0 = lo[0] + (hi[0] - lo[0]) * bx / nbx, x1 = lo[0] + (hi[0] - lo[0]) * (bx + 1) / nbx;
            double y0 = lo[1] + (hi[1] - lo[1]) * by / nby, y1 = lo[1] + (hi[1] - lo[1]) * (by + 1) / nby;
            plot_fill(im, (int)axes_px(&a, x0), (int)axes_py(&a, y1), (int)ceil(axes_px(&a, x1)), (int)ceil(axes_py(&a, y0)), rgb);
        }
    axes_frame(&a, tx, ty, font);
    axes_labels(&a, NULL, xl, yl, font);
    free(h);
}

// labels.jpg's panels: B x B bins, ticks on both axes
static void histogram2d(Image *im, const Axes *cell, const float *box, int n, int u, int v, const char *xl,
                        const char *yl, int font) {
    histogram2d_bins(im, cell, box, n, u, v, B, B, 4, 4, xl, yl, font);
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

// ---- labels_correlogram.jpg ---------------------------------------------------------------------
// yolov9's plot_labels: sn.pairplot(x, y, width, height; corner=True, kind='hist', diag_kws bins=50,
// plot_kws pmax=0.9): the lower triangle of a 4 x 4 grid, each variable's histogram (50 bins, seaborn's
// C0 bars at alpha 0.75 with white edges) on the diagonal and the 2-D histograms of each pair below it,
// whose bins per axis follow numpy's 'auto' rule as seaborn's default bins do. Variable names and tick
// labels on the outer row and column only, as a pair grid shares its axes.

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

// np.histogram_bin_edges(bins='auto') over column u: width min(Freedman-Diaconis, Sturges) (Sturges
// alone when the IQR is 0), then ceil(range / width) bins (at least 1; at most 200 here).
int plot_auto_bins(const float *box, int n, int u) {
    float lo, hi;
    column_range(box, n, u, &lo, &hi);
    if (n < 2) return 1;
    float *v = xmalloc(sizeof *v * n);
    for (int i = 0; i < n; i++) v[i] = box[5 * i + u];
    qsort(v, (size_t)n, sizeof *v, cmp_float);
    double range = (double)hi - lo;
    // np.percentile, linear interpolation
    double q[2], at[2] = { 0.25 * (n - 1), 0.75 * (n - 1) };
    for (int k = 0; k < 2; k++) {
        int i = (int)floor(at[k]);
        double f = at[k] - i;
        q[k] = i + 1 < n ? v[i] + f * ((double)v[i + 1] - v[i]) : v[i];
    }
    free(v);
    double sturges = range / (log2((double)n) + 1.0), fd = 2.0 * (q[1] - q[0]) * pow((double)n, -1.0 / 3.0);
    double width = fd > 0 ? fmin(fd, sturges) : sturges;
    double nb = width > 0 ? ceil(range / width) : 1;
    return nb < 1 ? 1 : nb > 200 ? 200 : (int)nb;
}

// Column u's 50-bin histogram as bars over the cell; y from 0 to the tallest bar (5% margin).
static void histogram1d(Image *im, const Axes *cell, const float *box, int n, int u, int tx, const char *xl, int font) {
    enum { NB = 50 };
    float lo, hi;
    column_range(box, n, u, &lo, &hi);
    int h[NB] = { 0 }, top = 1;
    for (int i = 0; i < n; i++) h[bin_of(box[5 * i + u], lo, hi, NB)]++;
    for (int b = 0; b < NB; b++) top = h[b] > top ? h[b] : top;
    double ymin, ymax;
    axes_autoscale(0, top, &ymin, &ymax);
    Axes a = axes_make(im, cell->x0, cell->y0, cell->w, cell->h, lo, hi, 0, ymax);
    a.hide_spines = 1;
    uint8_t bar[3];
    for (int k = 0; k < 3; k++) bar[k] = (uint8_t)lround(255 + 0.75 * (PLOT_TAB10[0][k] - 255));   // alpha 0.75 on white
    for (int b = 0; b < NB; b++) {
        if (!h[b]) continue;
        int x0 = (int)axes_px(&a, lo + (hi - lo) * (double)b / NB), x1 = (int)ceil(axes_px(&a, lo + (hi - lo) * (b + 1.0) / NB));
        plot_fill(im, x0 + 1, (int)axes_py(&a, h[b]), x1 > x0 + 1 ? x1 : x0 + 2, (int)axes_py(&a, 0), bar);   // 1 px white edge
    }
    axes_frame(&a, tx, 0, font);
    axes_labels(&a, NULL, xl, NULL, font);
}

int plot_labels_correlogram(const char *jpg, const float *box, int n, Err *err) {
    static const char *const var[4] = { "x", "y", "width", "height" };   // columns 1..4 of box
    int W = 10 * PLOT_DPI, font = plot_pt(10), l = plot_pt(60), b = plot_pt(50), t = plot_pt(10), r = plot_pt(10);
    int cell = (W - l - r) / 4, gap = plot_pt(8);
    Image im = image_new(W, t + 4 * cell + b - r, 255);
    int bins[4];
    for (int k = 0; k < 4; k++) bins[k] = plot_auto_bins(box, n, k + 1);
    for (int row = 0; row < 4; row++)
        for (int col = 0; col <= row; col++) {
            Axes c = axes_make(&im, l + col * cell + gap / 2, t + row * cell + gap / 2, cell - gap, cell - gap, 0, 1, 0, 1);
            int bottom = row == 3, left = col == 0;
            if (row == col) histogram1d(&im, &c, box, n, col + 1, bottom ? 4 : 0, bottom ? var[col] : NULL, font);
            else histogram2d_bins(&im, &c, box, n, col + 1, row + 1, bins[col], bins[row], bottom ? 4 : 0, left ? 4 : 0,
                                  bottom ? var[col] : NULL, left ? var[row] : NULL, font);
            if (row == 0 && col == 0) {            // the grid's first row label, beside the diagonal histogram
                Axes lab = c;
                axes_labels(&lab, NULL, NULL, var[0], font);
            }
        }
    int rc = image_save_jpeg(jpg, &im, 95, err);
    image_free(&im);
    return rc;
}
