// plot.h: the run's plots, drawn as the references draw them (io/plot_axes.h does the drawing):
// results.png from results.csv (io/plot.c), the PR / F1 / P / R curves (io/plot_curves.c), the
// confusion matrix (io/plot_confusion.c) and labels.jpg (io/plot_labels.c). Each saves through a
// temporary name and a rename and returns 0, or -1 with err naming the file.
#pragma once
#include "core/base/util.h"

// Read csv (the %20.5g rows train writes) and save ten panels as a PNG at png.
int plot_results(const char *csv, const char *png, Err *err);
// Its two halves: results.csv's rows as numbers (*rows: n_rows x 14, malloc'd), and the
// picture from them (what a background drawer gets: the rows as they were when it was queued).
int plot_results_read(const char *csv, double **rows, int *n_rows, Err *err);
int plot_results_rows(const double *rows, int n_rows, const char *png, Err *err);

// One figure of k curves y (k, n) over x (n) in [0, 1] x [0, 1] (9 x 6 inches): thin lines with a
// legend of `labels` when 0 < k < 21 (tab10 colours), else grey without one; then `mean` (n) bold and
// blue, labelled mean_label; the legend outside the box on the right, as plot_pr_curve / plot_mc_curve.
typedef struct {
    const char   *title, *xlabel, *ylabel;
    const double *x, *y, *mean;
    int           n, k;
    char *const  *labels;               // (k); NULL: no per-curve legend
    const char   *mean_label;
} CurvePlot;
int plot_curves(const char *png, const CurvePlot *c, Err *err);

// The confusion matrix heatmap (12 x 9 inches): m (nc + 1, nc + 1) already normalised (NAN: blank),
// rows predicted, columns true, index nc "background"; names (nc) label the ticks when 0 < nc < 99,
// else numbers; each cell annotated with %.2f when nc < 30; the 'Blues' colour map and its bar.
int plot_confusion(const char *png, const double *m, int nc, char *const *names, Err *err);

// labels.jpg (8 x 8 inches): the class histogram, the first 1000 boxes drawn at the centre, and 50 x 50
// histograms of the box centres (x, y) and sizes (width, height). box: (n, 5) rows of class, cx, cy,
// w, h normalised to the image.
int plot_labels(const char *jpg, const float *box, int n, int nc, char *const *names, Err *err);
// labels_correlogram.jpg, as yolov9's plot_labels draws it with seaborn's pairplot (corner=True,
// kind='hist'): the 50-bin histograms of x, y, width and height on the diagonal, the 2-D histograms of
// each pair below it (pmax 0.9). box as plot_labels. plot_auto_bins: numpy's bins='auto' count for
// column u of box (what seaborn's 2-D histograms use per axis).
int plot_labels_correlogram(const char *jpg, const float *box, int n, Err *err);
int plot_auto_bins(const float *box, int n, int u);
