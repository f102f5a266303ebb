// plot_curves.c: PR_curve.png, F1_curve.png, P_curve.png, R_curve.png as YOLOv9's plot_pr_curve and
// plot_mc_curve draw them (see plot.h). Legend: k curves of n points, W,H the figure in pixels.
#include "io/plot.h"

#include <stdlib.h>

#include "io/plot_axes.h"
#include "io/text.h"

enum { MAX_LEGEND = 20 };   // the reference shows a per-class legend below 21 classes

int plot_curves(const char *png, const CurvePlot *c, Err *err) {
    int W = 9 * PLOT_DPI, H = 6 * PLOT_DPI, font = plot_pt(10);
    static const uint8_t grey[3] = { 128, 128, 128 }, blue[3] = { 0, 0, 255 };
    int per_class = c->labels && c->k > 0 && c->k <= MAX_LEGEND;
    LegendEntry *e = xcalloc(c->k + 2, sizeof *e);
    int ne = 0;
    for (int i = 0; per_class && i < c->k; i++) e[ne++] = (LegendEntry){ c->labels[i], PLOT_TAB10[i % 10], plot_pt(1), 0 };
    e[ne++] = (LegendEntry){ c->mean_label, blue, plot_pt(3), 0 };
    int lw, lh;
    plot_legend_size(e, ne, font, &lw, &lh);
    int left = plot_pt(48), top = plot_pt(24), bottom = plot_pt(40), gap = plot_pt(8);
    int aw = W - left - gap - lw - plot_pt(8);
    if (aw < W / 3) aw = W / 3;                   // a very wide legend is cut at the figure's edge
    Image im = image_new(W, H, 255);
    Axes a = axes_make(&im, left, top, aw, H - top - bottom, 0, 1, 0, 1);
    for (int i = 0; i < c->k; i++)
        axes_line(&a, c->x, c->y + (size_t)i * c->n, c->n, plot_pt(1), per_class ? PLOT_TAB10[i % 10] : grey, 0);
    if (c->mean) axes_line(&a, c->x, c->mean, c->n, plot_pt(3), blue, 0);
    axes_frame(&a, 5, 5, font);
    axes_labels(&a, c->title, c->xlabel, c->ylabel, font);
    plot_legend(&im, a.x0 + a.w + gap, a.y0, e, ne, font, NULL);
    int rc = plot_save(&im, png, err);
    image_free(&im);
    free(e);
    return rc;
}
