// plot.c: results.png, the loss and metric curves of a run drawn from its results.csv, ten panels
// as the reference draws them (train losses, precision, recall; val losses, mAP50, mAP50-95).
#include "io/plot.h"
#include "core/readfile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/image.h"

enum { COLS = 14, PW = 300, PH = 220 };

static void line(Image *im, int x0, int y0, int x1, int y1, const uint8_t c[3]) {   // Bresenham
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, e = dx + dy;
    for (;;) {
        if (x0 >= 0 && y0 >= 0 && x0 < im->w && y0 < im->h) memcpy(im->px + 3 * ((size_t)y0 * im->w + x0), c, 3);
        if (x0 == x1 && y0 == y1) return;
        int e2 = 2 * e;
        if (e2 >= dy) { e += dy; x0 += sx; }
        if (e2 <= dx) { e += dx; y0 += sy; }
    }
}

// One panel at (ox, oy): a frame, the title, the series y[0..n) scaled to its range, its last value.
static void panel(Image *im, int ox, int oy, const char *title, const double *y, int n) {
    static const uint8_t black[3] = { 0, 0, 0 }, blue[3] = { 31, 119, 180 }, white[3] = { 255, 255, 255 };
    int x0 = ox + 30, y0 = oy + 24, w = PW - 45, h = PH - 48;
    image_draw_rect(im, x0, y0, x0 + w, y0 + h, 1, black);
    image_draw_text(im, ox + 30, oy + 6, title, black, white);
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++) if (isfinite(y[i])) { lo = fmin(lo, y[i]); hi = fmax(hi, y[i]); }
    if (!(hi >= lo)) return;
    if (hi - lo < 1e-12) { hi += 0.5; lo -= 0.5; }
    int px = 0, py = 0;
    for (int i = 0; i < n; i++) {
        int x = x0 + (n > 1 ? (int)((double)i * w / (n - 1)) : w / 2);
        int yy = y0 + h - (int)((y[i] - lo) / (hi - lo) * h);
        if (i) line(im, px, py, x, yy, blue);
        image_draw_rect(im, x - 1, yy - 1, x + 1, yy + 1, 1, blue);
        px = x; py = yy;
    }
    char txt[64];
    snprintf(txt, sizeof txt, "%.4g", hi);
    image_draw_text(im, ox + 2, y0 - 2, txt, black, white);
    snprintf(txt, sizeof txt, "%.4g", lo);
    image_draw_text(im, ox + 2, y0 + h - 8, txt, black, white);
    snprintf(txt, sizeof txt, "last %.4g", y[n - 1]);
    image_draw_text(im, x0, y0 + h + 8, txt, black, white);
}

int plot_results(const char *csv, const char *png, Err *err) {
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
    // columns: 1-3 train losses, 4 P, 5 R, 6 mAP50, 7 mAP50-95, 8-10 val losses
    static const int col[10] = { 1, 2, 3, 4, 5, 8, 9, 10, 6, 7 };
    static const char *name[10] = { "train/box_loss", "train/cls_loss", "train/dfl_loss", "metrics/precision",
                                    "metrics/recall", "val/box_loss", "val/cls_loss", "val/dfl_loss",
                                    "metrics/mAP50", "metrics/mAP50-95" };
    Image im = image_new(5 * PW, 2 * PH, 255);
    double *y = xmalloc(sizeof(double) * n);
    for (int k = 0; k < 10; k++) {
        for (int i = 0; i < n; i++) y[i] = v[i * COLS + col[k]];
        panel(&im, (k % 5) * PW, (k / 5) * PH, name[k], y, n);
    }
    int rc = image_save_png(png, &im, err);
    image_free(&im);
    free(y); free(v);
    return rc;
}
