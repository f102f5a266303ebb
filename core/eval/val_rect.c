// val_rect.c: which images form each validation batch and the letterbox shape of each, as YOLOv9's
// LoadImagesAndLabels(rect=True, pad=0.5) decides them (reference §3.9). Legend: n images, N batch,
// S load size, ar = h/w of an original image.
#include "core/eval/val.h"

#include <math.h>
#include <stdlib.h>

void val_rect_shape(double ar_min, double ar_max, int S, double pad, int *h, int *w) {
    double rh = 1, rw = 1;                    // shapes[i] = [h, w] ratios
    if (ar_max < 1) rh = ar_max;
    else if (ar_min > 1) rw = 1 / ar_min;
    *h = (int)ceil(rh * S / 32 + pad) * 32;   // np.ceil(shapes * img_size / stride + pad) * stride
    *w = (int)ceil(rw * S / 32 + pad) * 32;
}

typedef struct { double ar; int i; } ArItem;

static int by_ar(const void *pa, const void *pb) {   // ascending ar; ties: dataset order (stable)
    const ArItem *a = pa, *b = pb;
    if (a->ar != b->ar) return a->ar < b->ar ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

// ar.argsort() (numpy's quicksort leaves ties in an unspecified order; here they keep dataset order)
static void sort_by_ar(const double *ar, int n, int *order) {
    ArItem *it = xmalloc(sizeof *it * (n + 1));
    for (int i = 0; i < n; i++) it[i] = (ArItem){ ar[i], i };
    qsort(it, (size_t)n, sizeof *it, by_ar);
    for (int i = 0; i < n; i++) order[i] = it[i].i;
    free(it);
}

void val_plan(const Dataset *ds, int batch, int S, int rect, double pad, ValPlan *p) {
    int n = ds->n;
    p->n = n; p->batch = batch; p->n_batches = (n + batch - 1) / batch;
    p->order = xmalloc(sizeof *p->order * (n + 1));
    p->shape = xmalloc(sizeof *p->shape * (p->n_batches + 1));
    p->ar = xmalloc(sizeof *p->ar * (p->n_batches + 1));
    double *ar = xmalloc(sizeof *ar * (n + 1));
    for (int i = 0; i < n; i++) ar[i] = (double)ds->s[i].h / ds->s[i].w;
    if (rect) sort_by_ar(ar, n, p->order);
    else for (int i = 0; i < n; i++) p->order[i] = i;
    for (int b = 0; b < p->n_batches; b++) {
        double lo = INFINITY, hi = -INFINITY;
        for (int k = b * batch; k < n && k < (b + 1) * batch; k++)
            lo = fmin(lo, ar[p->order[k]]), hi = fmax(hi, ar[p->order[k]]);
        p->ar[b][0] = lo; p->ar[b][1] = hi;
        if (rect) val_rect_shape(lo, hi, S, pad, &p->shape[b][0], &p->shape[b][1]);
        else p->shape[b][0] = p->shape[b][1] = S;
    }
    free(ar);
}

void val_plan_free(ValPlan *p) {
    free(p->order); free(p->shape); free(p->ar);
    p->order = NULL; p->shape = NULL; p->ar = NULL;
}
