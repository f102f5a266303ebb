// plots.c: see plots.h. The numbers come from core/ (metrics_curves, confusion_build), the drawing
// from io/plot*.c. As ap_per_class: the PR curve holds the classes that have detections, its bold line
// is their mean and its legend the mean AP50 over every class with labels; the P, R and F1 curves hold
// every class with labels and their bold line is the mean smoothed over 51 points (smooth(f=0.05)),
// labelled with its maximum and where it is. The reference draws the curves only when some detection
// is a true positive; they are drawn here whenever there are labels (all zero otherwise), so a short
// run still shows them. Legend: K classes with labels, X = METRICS_PX points.
#include "core/eval/plots.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/plot.h"

static void note(int rc, const Err *err) { if (rc) fprintf(stderr, "note: %s\n", err->msg); }

static void curve_file(const char *dir, const char *name, char *path, size_t size) { snprintf(path, size, "%s/%s", dir, name); }

// P, R or F1 (y: (K, X)) against confidence.
static void mc_curve(const char *dir, const char *file, const char *ylabel, const MetricsCurves *c, const double *y,
                     char *const *labels, const double *px) {
    double mean[METRICS_PX] = { 0 }, sm[METRICS_PX];
    for (int x = 0; x < METRICS_PX; x++) {
        for (int i = 0; i < c->k; i++) mean[x] += y[(size_t)i * METRICS_PX + x];
        mean[x] /= c->k;
    }
    metrics_smooth(mean, METRICS_PX, 0.05, sm);
    int best = 0;
    for (int x = 1; x < METRICS_PX; x++) if (sm[x] > sm[best]) best = x;
    char label[96], title[64], path[4200];
    snprintf(label, sizeof label, "all classes %.2f at %.3f", sm[best], px[best]);
    snprintf(title, sizeof title, "%s-Confidence Curve", ylabel);
    CurvePlot p = { title, "Confidence", ylabel, px, y, sm, METRICS_PX, c->k, labels, label };
    Err err;
    curve_file(dir, file, path, sizeof path);
    note(plot_curves(path, &p, &err), &err);
}

static void pr_curve(const char *dir, const MetricsCurves *c, char *const *names, const double *px) {
    int n = 0;
    double *y = xmalloc(sizeof *y * ((size_t)c->k * METRICS_PX + 1)), mean[METRICS_PX] = { 0 }, map50 = 0;
    char **labels = xcalloc(c->k + 1, sizeof *labels);
    for (int i = 0; i < c->k; i++) {
        map50 += c->ap[i][0] / c->k;
        if (!c->n_pred[i]) continue;
        memcpy(y + (size_t)n * METRICS_PX, c->pr + (size_t)i * METRICS_PX, sizeof *y * METRICS_PX);
        labels[n] = xmalloc(strlen(names[i]) + 16);
        sprintf(labels[n], "%s %.3f", names[i], c->ap[i][0]);
        n++;
    }
    for (int x = 0; x < METRICS_PX && n; x++) {
        for (int i = 0; i < n; i++) mean[x] += y[(size_t)i * METRICS_PX + x];
        mean[x] /= n;
    }
    char label[64], path[4200];
    snprintf(label, sizeof label, "all classes %.3f mAP@0.5", map50);
    CurvePlot p = { "Precision-Recall Curve", "Recall", "Precision", px, y, n ? mean : NULL, METRICS_PX, n, labels, label };
    Err err;
    curve_file(dir, "PR_curve.png", path, sizeof path);
    note(plot_curves(path, &p, &err), &err);
    for (int i = 0; i < n; i++) free(labels[i]);
    free(labels); free(y);
}

// One of the five validation plots, each on a thread of its own (they share only what they read; the
// text renderer has its own lock), so the five take about as long as the slowest.
typedef struct {
    int                 which;    // 0 confusion matrix, 1 PR, 2 F1, 3 P, 4 R
    const MetricsStats *st;
    const MetricsCurves *c;
    char *const        *names;    // the data's (confusion matrix)
    char *const        *cn;       // the names of the classes with labels (curves)
    const double       *px;
    const char         *dir;
} PlotTask;

static void confusion_plot(const MetricsStats *st, char *const *names, const char *dir) {
    char path[4200];
    Err err;
    ConfusionMatrix cm;
    confusion_build(&cm, st->nc, st->cm, st->n_cm);
    double *norm = xmalloc(sizeof *norm * (size_t)(st->nc + 1) * (st->nc + 1));
    confusion_normalised(&cm, norm);
    snprintf(path, sizeof path, "%s/confusion_matrix.png", dir);
    note(plot_confusion(path, norm, st->nc, names, &err), &err);
    free(norm);
    confusion_free(&cm);
}

static void plot_task(const PlotTask *t) {
    const MetricsCurves *c = t->c;
    switch (t->which) {
    case 0: confusion_plot(t->st, t->names, t->dir); break;
    case 1: pr_curve(t->dir, c, t->cn, t->px); break;
    case 2: mc_curve(t->dir, "F1_curve.png", "F1", c, c->f1, t->cn, t->px); break;
    case 3: mc_curve(t->dir, "P_curve.png", "Precision", c, c->p, t->cn, t->px); break;
    case 4: mc_curve(t->dir, "R_curve.png", "Recall", c, c->r, t->cn, t->px); break;
    }
}

void plots_validation(const MetricsStats *st, char *const *names, const char *dir) {
    MetricsCurves c;
    metrics_curves(st, &c);
    double px[METRICS_PX];
    for (int x = 0; x < METRICS_PX; x++) px[x] = metrics_px(x);
    char **cn = xcalloc(c.k + 1, sizeof *cn), num[32];   // the names of the classes with labels
    for (int i = 0; i < c.k; i++) {
        snprintf(num, sizeof num, "%d", c.cls[i]);
        cn[i] = xstrdup(names ? names[c.cls[i]] : num);
    }
    // one after the other: five threads drawing at once held five canvases, five stacks and malloc
    // arenas, and under ulimit -v one failed allocation ended the whole run (test_hostile)
    int n = c.k ? 5 : 1;                      // the curves only when some class has labels
    for (int k = 0; k < n; k++) {
        PlotTask task = { k, st, &c, names, cn, px, dir };
        plot_task(&task);
    }
    for (int i = 0; i < c.k; i++) free(cn[i]);
    free(cn);
    metrics_curves_free(&c);
}

typedef struct { MetricsStats st; char **names; char dir[4096]; } ValidationJob;

static void validation_job(void *arg) {
    ValidationJob *j = arg;
    plots_validation(&j->st, j->names, j->dir);
    drawer_names_free(j->names, j->st.nc);
    metrics_stats_free(&j->st);
    free(j);
}

void plots_validation_queue(Drawer *d, MetricsStats *st, char *const *names, const char *dir) {
    ValidationJob *j = xcalloc(1, sizeof *j);
    j->st = *st;
    memset(st, 0, sizeof *st);
    j->names = drawer_names(names, j->st.nc);
    snprintf(j->dir, sizeof j->dir, "%s", dir);
    drawer_submit(d, validation_job, j);
}

typedef struct { float *box; int n, nc; char **names; char dir[4096]; } LabelsJob;

static void labels_job(void *arg) {
    LabelsJob *j = arg;
    char path[4200];
    Err err;
    snprintf(path, sizeof path, "%s/labels.jpg", j->dir);
    note(plot_labels(path, j->box, j->n, j->nc, j->names, &err), &err);
    snprintf(path, sizeof path, "%s/labels_correlogram.jpg", j->dir);
    note(plot_labels_correlogram(path, j->box, j->n, &err), &err);
    drawer_names_free(j->names, j->nc);
    free(j->box);
    free(j);
}

void plots_labels_queue(Drawer *d, const Dataset *ds, const char *dir) {
    size_t total = 0;
    for (int i = 0; i < ds->n; i++) total += ds->s[i].nbox;
    float *box = xmalloc(sizeof *box * 5 * (total + 1));
    int n = 0;
    for (int i = 0; i < ds->n; i++)
        for (int k = 0; k < ds->s[i].nbox; k++) {
            const Box *b = &ds->s[i].box[k];
            float *r = box + 5 * (size_t)n++;
            r[0] = (float)b->cls; r[1] = b->cx; r[2] = b->cy; r[3] = b->w; r[4] = b->h;
        }
    LabelsJob *j = xcalloc(1, sizeof *j);
    *j = (LabelsJob){ .box = box, .n = n, .nc = ds->nc, .names = drawer_names(ds->names, ds->nc) };
    snprintf(j->dir, sizeof j->dir, "%s", dir);
    drawer_submit(d, labels_job, j);
}

void plots_labels(const Dataset *ds, const char *dir) { plots_labels_queue(NULL, ds, dir); }
