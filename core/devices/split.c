// split.c: see split.h.
#include "core/devices/split.h"

#include <math.h>
#include <string.h>
#include <stdlib.h>

int split_weighted(const double *w, const int *cap, int B, int n, int *sizes) {
    double sum = 0, ideal[MULTI_MAX];
    for (int k = 0; k < n; k++) sum += w[k] > 0 ? w[k] : 0;
    if (sum <= 0) return -1;
    int given = 0;
    for (int k = 0; k < n; k++) {
        ideal[k] = w[k] > 0 ? B * w[k] / sum : 0;
        sizes[k] = (int)ideal[k];
        if (cap && sizes[k] > cap[k]) sizes[k] = cap[k];
        given += sizes[k];
    }
    while (given < B) {                                // the remainder, one image at a time
        int best = -1;
        for (int k = 0; k < n; k++) {
            if (w[k] <= 0 || (cap && sizes[k] >= cap[k])) continue;
            if (best < 0 || ideal[k] - sizes[k] > ideal[best] - sizes[best]) best = k;
        }
        if (best < 0) return -1;
        sizes[best]++;
        given++;
    }
    if (!sizes[0] && w[0] > 0 && B > 0 && (!cap || cap[0] > 0)) {   // a small (last, partial) batch: device 0
        int most = 1;                                                 // takes one from the fullest device
        for (int k = 2; k < n; k++) if (sizes[k] > sizes[most]) most = k;
        sizes[most]--, sizes[0]++;
    }
    return sizes[0] ? 0 : -1;
}

int split_batch(const char *split, int B, int n, int *sizes, Err *err) {
    return split_batch_capped(split, B, n, NULL, sizes, err);
}

int split_batch_capped(const char *split, int B, int n, const int *cap, int *sizes, Err *err) {
    memset(sizes, 0, sizeof(int) * n);
    if (!strcmp(split, "even") || !strcmp(split, "auto")) {   // torch.chunk
        int chunk = (B + n - 1) / n, left = B;
        for (int k = 0; k < n && left > 0; k++) { sizes[k] = left < chunk ? left : chunk; left -= sizes[k]; }
        return 0;
    }
    double w[MULTI_MAX], sum = 0;
    const char *p = split;
    for (int k = 0; k < n; k++) {
        char *end;
        w[k] = strtod(p, &end);
        if (end == p || w[k] <= 0) return err_set(err, "split=%s: give %d positive weights, one per device", split, n);
        sum += w[k];
        p = *end == ',' ? end + 1 : end;
    }
    if (*p || sum <= 0) return err_set(err, "split=%s: give %d positive weights, one per device", split, n);
    if (split_weighted(w, cap, B, n, sizes))
        return err_set(err, "split=%s: device 0 gets no image of a batch of %d", split, B);
    return 0;
}

int multi_plan_micro(const char *split, int B, int n, Err *err) {
    int sizes[MULTI_MAX], micro = 0;
    if (split_batch(split, B, n, sizes, err)) return -1;
    for (int k = 0; k < n; k++) micro = sizes[k] > micro ? sizes[k] : micro;
    if (!strcmp(split, "auto")) {
        int more = (int)ceil(1.25 * micro);
        micro = more < B ? more : B;
    }
    return micro;
}

int split_by_speed(const double *rate, const int *cur, const int *cap, int B, int n, int *sizes) {
    if (split_weighted(rate, cap, B, n, sizes)) return 0;
    double t_old = 0, t_new = 0;
    for (int k = 0; k < n; k++) {
        t_old = fmax(t_old, cur[k] / rate[k]);
        t_new = fmax(t_new, sizes[k] / rate[k]);
    }
    return t_new < 0.97 * t_old;                   // a gain under 3% is noise: keep the split
}
