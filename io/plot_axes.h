// plot_axes.h: what the run's plots are drawn with, in matplotlib's manner: axes boxes mapping data to
// pixels, ticks with labels at "nice" steps, anti-aliased lines, markers, legends, titles, and text
// through io/text.h. Figures are laid out in inches at PLOT_DPI like the references' figsize/dpi.
// Legend: (x, y) data coordinates; (px, py) pixels, y down.
#pragma once
#include <stdint.h>

#include "io/image.h"

#define PLOT_DPI 150

// A length in points (1/72 inch) as pixels at PLOT_DPI: matplotlib's 10 pt tick labels are 21 px.
int plot_pt(double points);

// matplotlib's default colour cycle (tab10), C0..C9.
extern const uint8_t PLOT_TAB10[10][3];

typedef struct {
    Image *im;
    int    x0, y0, w, h;              // the box in pixels, top-left corner and size
    double xmin, xmax, ymin, ymax;    // the data limits the box spans
    int    hide_spines;               // 1: axes_frame draws the ticks only (labels.jpg's panels)
} Axes;

Axes   axes_make(Image *im, int x0, int y0, int w, int h, double xmin, double xmax, double ymin, double ymax);
double axes_px(const Axes *a, double x);
double axes_py(const Axes *a, double y);
// Limits around [lo, hi] as matplotlib's autoscale with 5% margins (a flat series gets +-5% of |lo|).
void   axes_autoscale(double lo, double hi, double *vmin, double *vmax);
// Ticks of about n steps of 1, 2, 2.5 or 5 times a power of ten inside [lo, hi]: returns the count
// (at most 16) with the values in t and how many decimals their labels need in *decimals.
int    axes_ticks(double lo, double hi, int n, double t[16], int *decimals);

// The frame (four spines), the ticks and their labels on the left and bottom (font px), about nx, ny
// intervals. Labels sit outside the box.
void axes_frame(const Axes *a, int nx, int ny, int font);
// Title centred above the box, x label below the tick labels, y label turned, left of them.
void axes_labels(const Axes *a, const char *title, const char *xlabel, const char *ylabel, int font);
// A polyline through n points, `width` pixels wide; dotted: dots of the width, as matplotlib's ':'.
// Clipped to the box.
void axes_line(const Axes *a, const double *x, const double *y, int n, double width, const uint8_t rgb[3],
               int dotted);
void axes_dots(const Axes *a, const double *x, const double *y, int n, double radius, const uint8_t rgb[3]);

// An anti-aliased segment of the given width between pixel positions, blended over the picture, only
// inside the clip rectangle [cx0, cx1) x [cy0, cy1).
void plot_segment(Image *im, double x0, double y0, double x1, double y1, double width, const uint8_t rgb[3],
                  int cx0, int cy0, int cx1, int cy1);
void plot_fill(Image *im, int x0, int y0, int x1, int y1, const uint8_t rgb[3]);   // [x0, x1) x [y0, y1)

// A legend box: one row per entry (a line sample in its colour and width, then its text), top-left at
// (x, y). Returns the box's width; *h its height (may be NULL). n = 0 draws nothing.
typedef struct { const char *text; const uint8_t *rgb; double width; int dotted; } LegendEntry;
int  plot_legend(Image *im, int x, int y, const LegendEntry *e, int n, int font, int *h);
// The same measured only.
void plot_legend_size(const LegendEntry *e, int n, int font, int *w, int *h);

// Save as PNG (a temporary name and a rename); 0 or -1 with err.
int  plot_save(Image *im, const char *path, Err *err);
