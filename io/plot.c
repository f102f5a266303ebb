// plot.c: results.png, the loss and metric curves of a run drawn from its results.csv, ten panels
// as the reference draws them (train losses, precision, recall; val losses, mAP50, mAP50-95): each
// series with dots, its gaussian-smoothed line dotted, ticks on both axes, the legend in panel 2.
#include "io/plot.h"
#include "core/base/readfile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/image.h"
#include "io/plot_axes.h"
#include "io/text.h"

// 12 x 6 inches as the references' figure (2 x 5 panels), at PLOT_DPI.
enum { COLS = 14, CELL_W = 12 * PLOT_DPI / 5, CELL_H = 6 * PLOT_DPI / 2 };

// scipy's gaussian_filter1d(y, sigma) with its defaults (mode 'reflect', truncate 4): the reference's
// "smooth" line.
static void gaussian_smooth(const double *y, int n, double sigma, double *out) {
    int r = (int)(4 * sigma + 0.5);
    double wsum = 0, *w = xmalloc(sizeof *w * (2 * r + 1));
    for (int k = -r; k <= r; k++) wsum += w[k + r] = exp(-0.5 * k * k / (sigma * sigma));
    for (int i = 0; i < n; i++) {
        double acc = 0;
        for (int k = -r; k <= r; k++) {
            int j = ((i + k) % (2 * n) + 2 * n) % (2 * n);   // reflect: ... b a | a b ... z | z y ...
            if (j >= n) j = 2 * n - 1 - j;
            acc += w[k + r] * y[j];
        }
        out[i] = acc / wsum;
    }
    free(w);
}

// Panel k: its series (and the smooth line) over the epochs x, with ticks, its title, and in panel
// 1 the legend, as the reference's ax[1].legend().
static void panel(Image *im, int k, const char *title, const double *x, const double *y, int n) {
    int font = plot_pt(8), cx = (k % 5) * CELL_W, cy = (k / 5) * CELL_H;
    double lo = INFINITY, hi = -INFINITY, *sm = xmalloc(sizeof *sm * n);
    gaussian_smooth(y, n, 3, sm);
    for (int i = 0; i < n; i++) if (isfinite(y[i])) { lo = fmin(lo, y[i]); hi = fmax(hi, y[i]); }
    for (int i = 0; i < n; i++) if (isfinite(sm[i])) { lo = fmin(lo, sm[i]); hi = fmax(hi, sm[i]); }
    double xmin, xmax, ymin, ymax;
    axes_autoscale(x[0], x[n - 1], &xmin, &xmax);
    axes_autoscale(lo, hi, &ymin, &ymax);
    int left = plot_pt(34), top = plot_pt(22), bottom = plot_pt(22), right = plot_pt(8);
    Axes a = axes_make(im, cx + left, cy + top, CELL_W - left - right, CELL_H - top - bottom, xmin, xmax, ymin, ymax);
    axes_frame(&a, 4, 5, font);
    axes_labels(&a, title, NULL, NULL, font);
    const uint8_t *c0 = PLOT_TAB10[0], *c1 = PLOT_TAB10[1];
    axes_line(&a, x, y, n, plot_pt(2), c0, 0);
    axes_dots(&a, x, y, n, plot_pt(2.5), c0);
    axes_line(&a, x, sm, n, plot_pt(2), c1, 1);
    if (k == 1) {
        LegendEntry e[2] = { { "results", c0, plot_pt(2), 0 }, { "smooth", c1, plot_pt(2), 1 } };
        int w, h;
        plot_legend_size(e, 2, font, &w, &h);
        plot_legend(im, a.x0 + a.w - w - plot_pt(4), a.y0 + plot_pt(4), e, 2, font, NULL);
    }
    free(sm);
}

int plot_results_read(const char *csv, double **rows, int *n_rows, Err *err) {
    *rows = NULL; *n_rows = 0;
    FILE *f = rf_fopen(csv, "results file", err);
    if (!f) return -1;
    int n = 0, cap = 256;
    double *v = xmalloc(sizeof(double) * COLS * cap);
    char buf[4096];
    if (!fgets(buf, sizeof buf, f)) n = -1;                  // the header
    while (n >= 0 && fgets(buf, sizeof buf, f)) {
        if (n == cap) { cap *= 2; v = xrealloc(v, sizeof(double) * COLS * cap); }
        char *p = buf;
        for (int c = 0; c < COLS; c++) { v[n * COLS + c] = strtod(p, &p); if (*p == ',') p++; }
        n++;
    }
    fclose(f);
    if (n <= 0) { free(v); return err_set(err, "%s: no rows to plot", csv); }
    *rows = v; *n_rows = n;
    return 0;
}

int plot_results_rows(const double *v, int n, const char *png, Err *err) {
    // columns: 1-3 train losses, 4 P, 5 R, 6 mAP50, 7 mAP50-95, 8-10 val losses
    static const int col[10] = { 1, 2, 3, 4, 5, 8, 9, 10, 6, 7 };
    static const char *name[10] = { "train/box_loss", "train/cls_loss", "train/dfl_loss", "metrics/precision",
                                    "metrics/recall", "val/box_loss", "val/cls_loss", "val/dfl_loss",
                                    "metrics/mAP50", "metrics/mAP50-95" };
    Image im = image_new(5 * CELL_W, 2 * CELL_H, 255);
    double *x = xmalloc(sizeof(double) * n), *y = xmalloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) x[i] = v[i * COLS];
    for (int k = 0; k < 10; k++) {
        for (int i = 0; i < n; i++) y[i] = v[i * COLS + col[k]];
        panel(&im, k, name[k], x, y, n);
    }
    int rc = plot_save(&im, png, err);
    image_free(&im);
    free(x); free(y);
    return rc;
}

int plot_results(const char *csv, const char *png, Err *err) {
    double *v;
    int n;
    if (plot_results_read(csv, &v, &n, err)) return -1;
    int rc = plot_results_rows(v, n, png, err);
    free(v);
    return rc;
}
