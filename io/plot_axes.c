// plot_axes.c: see plot_axes.h. Lines are drawn as coverage (the distance of each pixel centre from
// the segment against half the width, a one-pixel ramp), gathered for a whole polyline with max() and
// blended once, so joints do not darken. Legend: (x, y) data, (px, py) pixels.
#include "io/plot_axes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/text.h"

const uint8_t PLOT_TAB10[10][3] = {
    { 31, 119, 180 }, { 255, 127, 14 }, { 44, 160, 44 }, { 214, 39, 40 }, { 148, 103, 189 },
    { 140, 86, 75 }, { 227, 119, 194 }, { 127, 127, 127 }, { 188, 189, 34 }, { 23, 190, 207 },
};
static const uint8_t INK[3] = { 0, 0, 0 }, EDGE[3] = { 204, 204, 204 };

int plot_pt(double points) { return (int)lround(points * PLOT_DPI / 72.0); }

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

void plot_fill(Image *im, int x0, int y0, int x1, int y1, const uint8_t rgb[3]) {
    x0 = clampi(x0, 0, im->w); x1 = clampi(x1, 0, im->w);
    y0 = clampi(y0, 0, im->h); y1 = clampi(y1, 0, im->h);
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) memcpy(im->px + 3 * ((size_t)y * im->w + x), rgb, 3);
}

Axes axes_make(Image *im, int x0, int y0, int w, int h, double xmin, double xmax, double ymin, double ymax) {
    if (!(xmax > xmin)) xmax = xmin + 1;
    if (!(ymax > ymin)) ymax = ymin + 1;
    return (Axes){ im, x0, y0, w, h, xmin, xmax, ymin, ymax, 0 };
}

double axes_px(const Axes *a, double x) { return a->x0 + (x - a->xmin) / (a->xmax - a->xmin) * a->w; }
double axes_py(const Axes *a, double y) { return a->y0 + a->h - (y - a->ymin) / (a->ymax - a->ymin) * a->h; }

void axes_autoscale(double lo, double hi, double *vmin, double *vmax) {
    if (!isfinite(lo) || !isfinite(hi)) lo = 0, hi = 1;
    if (hi - lo <= 1e-12 * fmax(fabs(lo), fabs(hi))) {   // flat: matplotlib widens by 5% of the value
        double d = lo ? 0.05 * fabs(lo) : 0.05;
        lo -= d; hi += d;
    }
    double m = 0.05 * (hi - lo);
    *vmin = lo - m; *vmax = hi + m;
}

int axes_ticks(double lo, double hi, int n, double t[16], int *decimals) {
    if (!(hi > lo) || n < 1) { *decimals = 0; return 0; }
    static const double mult[5] = { 1, 2, 2.5, 5, 10 };
    double raw = (hi - lo) / n, p = pow(10, floor(log10(raw))), step = 10 * p;
    int k = 4;
    for (int i = 0; i < 5; i++) if (mult[i] * p >= raw * (1 - 1e-9)) { step = mult[i] * p; k = i; break; }
    *decimals = (int)fmax(0, -floor(log10(step) + 1e-9)) + (k == 2);
    int c = 0;
    for (double v = ceil(lo / step - 1e-9) * step; v <= hi + 1e-9 * step && c < 16; v += step)
        t[c++] = fabs(v) < 1e-12 * step ? 0 : v;
    return c;
}

void axes_frame(const Axes *a, int nx, int ny, int font) {
    int x1 = a->x0 + a->w, y1 = a->y0 + a->h, tick = plot_pt(3.5), lw = plot_pt(0.8) > 0 ? plot_pt(0.8) : 1;
    if (!a->hide_spines) {
        plot_fill(a->im, a->x0 - lw / 2, a->y0 - lw / 2, x1 + (lw + 1) / 2, a->y0 + (lw + 1) / 2, INK);
        plot_fill(a->im, a->x0 - lw / 2, y1 - lw / 2, x1 + (lw + 1) / 2, y1 + (lw + 1) / 2, INK);
        plot_fill(a->im, a->x0 - lw / 2, a->y0 - lw / 2, a->x0 + (lw + 1) / 2, y1 + (lw + 1) / 2, INK);
        plot_fill(a->im, x1 - lw / 2, a->y0 - lw / 2, x1 + (lw + 1) / 2, y1 + (lw + 1) / 2, INK);
    }
    double t[16];
    int dec, n = axes_ticks(a->xmin, a->xmax, nx, t, &dec);
    char s[64];
    for (int i = 0; i < n; i++) {
        int x = (int)floor(axes_px(a, t[i])), w, h;
        plot_fill(a->im, x - lw / 2, y1, x + (lw + 1) / 2, y1 + tick, INK);
        snprintf(s, sizeof s, "%.*f", dec, t[i]);
        text_measure(s, font, &w, &h);
        text_draw(a->im, x - w / 2, y1 + tick + plot_pt(2), s, font, INK, 0);
    }
    n = axes_ticks(a->ymin, a->ymax, ny, t, &dec);
    for (int i = 0; i < n; i++) {
        int y = (int)floor(axes_py(a, t[i])), w, h;
        plot_fill(a->im, a->x0 - tick, y - lw / 2, a->x0, y + (lw + 1) / 2, INK);
        snprintf(s, sizeof s, "%.*f", dec, t[i]);
        text_measure(s, font, &w, &h);
        text_draw(a->im, a->x0 - tick - plot_pt(2) - w, y - h / 2, s, font, INK, 0);
    }
}

void axes_labels(const Axes *a, const char *title, const char *xlabel, const char *ylabel, int font) {
    int w, h, tick = plot_pt(3.5) + plot_pt(2);
    if (title && title[0]) {
        int tf = font * 6 / 5;                     // matplotlib's 'large' title: 12 pt beside 10
        text_measure(title, tf, &w, &h);
        text_draw(a->im, a->x0 + a->w / 2 - w / 2, a->y0 - h - plot_pt(6), title, tf, INK, 0);
    }
    if (xlabel && xlabel[0]) {
        text_measure(xlabel, font, &w, &h);
        text_draw(a->im, a->x0 + a->w / 2 - w / 2, a->y0 + a->h + tick + h + plot_pt(4), xlabel, font, INK, 0);
    }
    if (ylabel && ylabel[0]) {
        int tw;
        text_measure("0.00", font, &tw, &h);       // the widest tick label the plots have
        text_measure(ylabel, font, &w, &h);
        text_draw(a->im, a->x0 - tick - tw - plot_pt(4) - h, a->y0 + a->h / 2 - w / 2, ylabel, font, INK, 1);
    }
}

// ---- lines ---------------------------------------------------------------------------------

typedef struct { int x0, y0, w, h; uint8_t *a; } Mask;   // coverage over a clip rectangle

static void mask_segment(Mask *m, double x0, double y0, double x1, double y1, double width) {
    double r = width / 2, dx = x1 - x0, dy = y1 - y0, l2 = dx * dx + dy * dy;
    int bx0 = clampi((int)floor(fmin(x0, x1) - r - 1), m->x0, m->x0 + m->w);
    int bx1 = clampi((int)ceil(fmax(x0, x1) + r + 1), m->x0, m->x0 + m->w);
    int by0 = clampi((int)floor(fmin(y0, y1) - r - 1), m->y0, m->y0 + m->h);
    int by1 = clampi((int)ceil(fmax(y0, y1) + r + 1), m->y0, m->y0 + m->h);
    for (int py = by0; py < by1; py++)
        for (int px = bx0; px < bx1; px++) {
            double cx = px + 0.5, cy = py + 0.5;
            double t = l2 > 0 ? ((cx - x0) * dx + (cy - y0) * dy) / l2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double d = hypot(cx - (x0 + t * dx), cy - (y0 + t * dy)), cov = r + 0.5 - d;
            if (cov <= 0) continue;
            int v = cov >= 1 ? 255 : (int)(cov * 255);
            uint8_t *p = &m->a[(size_t)(py - m->y0) * m->w + (px - m->x0)];
            if (v > *p) *p = (uint8_t)v;
        }
}

static void mask_blend(Image *im, const Mask *m, const uint8_t rgb[3]) {
    for (int y = 0; y < m->h; y++)
        for (int x = 0; x < m->w; x++) {
            int a = m->a[(size_t)y * m->w + x], X = m->x0 + x, Y = m->y0 + y;
            if (!a || X < 0 || Y < 0 || X >= im->w || Y >= im->h) continue;
            uint8_t *p = im->px + 3 * ((size_t)Y * im->w + X);
            for (int k = 0; k < 3; k++) p[k] = (uint8_t)(p[k] + ((int)rgb[k] - p[k]) * a / 255);
        }
}

static Mask mask_new(int x0, int y0, int w, int h) {
    return (Mask){ x0, y0, w > 0 ? w : 0, h > 0 ? h : 0, xcalloc((size_t)(w > 0 ? w : 0) * (h > 0 ? h : 0) + 1, 1) };
}

void plot_segment(Image *im, double x0, double y0, double x1, double y1, double width, const uint8_t rgb[3],
                  int cx0, int cy0, int cx1, int cy1) {
    Mask m = mask_new(cx0, cy0, cx1 - cx0, cy1 - cy0);
    mask_segment(&m, x0, y0, x1, y1, width);
    mask_blend(im, &m, rgb);
    free(m.a);
}

// The box grown by half a line width, so a line along an edge is drawn whole (matplotlib clips to
// the box too, but its lines at 0 and 1 show half their width over the spine).
static Mask axes_mask(const Axes *a, double width) {
    int g = (int)ceil(width / 2) + 1;
    return mask_new(a->x0 - g, a->y0 - g, a->w + 2 * g, a->h + 2 * g);
}

void axes_line(const Axes *a, const double *x, const double *y, int n, double width, const uint8_t rgb[3], int dotted) {
    Mask m = axes_mask(a, width);
    double on = width, period = 2.65 * width, s = 0;   // ':' in matplotlib: dots 1 wide, gaps 1.65
    for (int i = 1; i < n; i++) {
        if (!isfinite(y[i - 1]) || !isfinite(y[i])) continue;
        double x0 = axes_px(a, x[i - 1]), y0 = axes_py(a, y[i - 1]), x1 = axes_px(a, x[i]), y1 = axes_py(a, y[i]);
        if (!dotted) { mask_segment(&m, x0, y0, x1, y1, width); continue; }
        double len = hypot(x1 - x0, y1 - y0);
        for (double u = 0; u < len; u += 0.5, s += 0.5)   // a dot wherever the pattern is on
            if (fmod(s, period) < on) {
                double f = u / len;
                mask_segment(&m, x0 + f * (x1 - x0), y0 + f * (y1 - y0), x0 + f * (x1 - x0), y0 + f * (y1 - y0), width);
            }
    }
    if (n == 1 && isfinite(y[0])) mask_segment(&m, axes_px(a, x[0]), axes_py(a, y[0]), axes_px(a, x[0]), axes_py(a, y[0]), width);
    mask_blend(a->im, &m, rgb);
    free(m.a);
}

void axes_dots(const Axes *a, const double *x, const double *y, int n, double radius, const uint8_t rgb[3]) {
    Mask m = axes_mask(a, 2 * radius);
    for (int i = 0; i < n; i++)
        if (isfinite(y[i])) mask_segment(&m, axes_px(a, x[i]), axes_py(a, y[i]), axes_px(a, x[i]), axes_py(a, y[i]), 2 * radius);
    mask_blend(a->im, &m, rgb);
    free(m.a);
}

// ---- legends -------------------------------------------------------------------------------

void plot_legend_size(const LegendEntry *e, int n, int font, int *w, int *h) {
    int pad = plot_pt(4), sample = plot_pt(20), tw = 0, th = 0, lh = 0;
    for (int i = 0; i < n; i++) {
        int ww, hh;
        text_measure(e[i].text, font, &ww, &hh);
        tw = ww > tw ? ww : tw;
        lh = hh > lh ? hh : lh;
    }
    th = n * (lh + plot_pt(2));
    *w = n ? 2 * pad + sample + pad + tw : 0;
    *h = n ? 2 * pad + th : 0;
}

int plot_legend(Image *im, int x, int y, const LegendEntry *e, int n, int font, int *h) {
    int w, hh, pad = plot_pt(4), sample = plot_pt(20);
    plot_legend_size(e, n, font, &w, &hh);
    if (h) *h = hh;
    if (!n) return 0;
    static const uint8_t white[3] = { 255, 255, 255 };
    plot_fill(im, x, y, x + w, y + hh, white);
    plot_fill(im, x, y, x + w, y + 1, EDGE); plot_fill(im, x, y + hh - 1, x + w, y + hh, EDGE);
    plot_fill(im, x, y, x + 1, y + hh, EDGE); plot_fill(im, x + w - 1, y, x + w, y + hh, EDGE);
    int lh = (hh - 2 * pad) / n;
    for (int i = 0; i < n; i++) {
        int ty = y + pad + i * lh;
        Axes box = axes_make(im, x + pad, ty, sample, lh, 0, 1, 0, 1);
        double xs[2] = { 0, 1 }, ys[2] = { 0.5, 0.5 };
        axes_line(&box, xs, ys, 2, e[i].width, e[i].rgb, e[i].dotted);
        text_draw(im, x + 2 * pad + sample, ty, e[i].text, font, INK, 0);
    }
    return w;
}

int plot_save(Image *im, const char *path, Err *err) { return image_save_png(path, im, err); }
