// progress.c: see progress.h.
#include "core/base/progress.h"

#include <stdio.h>

void progress_begin(Progress *p, int tty, int total, int done, double now, double quiet) {
    *p = (Progress){ .tty = tty, .total = total > 0 ? total : 1, .t0 = now, .t_last = now, .quiet = quiet };
    p->tenths = 10 * done / p->total;
}

int progress_due(Progress *p, int done, double now) {
    if (p->tty) return 1;
    int tenths = 10 * done / p->total;
    if (now - p->t0 < p->quiet) {              // a short pass says nothing until its end
        p->tenths = tenths;
        return 0;
    }
    if (tenths <= p->tenths && now - p->t_last < PROGRESS_PERIOD) return 0;
    p->tenths = tenths;
    p->t_last = now;
    return 1;
}

int progress_bar(char *buf, size_t size, int done, int total) {
    static const char full[] = "██████████";   // ten cells of three bytes
    if (total < 1) total = 1;
    if (done > total) done = total;
    if (done < 0) done = 0;
    int cells = 10 * done / total;
    return snprintf(buf, size, "%3d%%|%.*s%*s| %d/%d", 100 * done / total, cells * 3, full, 10 - cells, "", done,
                    total);
}

void progress_clock(char *buf, size_t size, double seconds) {
    long s = seconds > 0 ? (long)(seconds + 0.5) : 0;
    if (s >= 3600) snprintf(buf, size, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(buf, size, "%ld:%02ld", s / 60, s % 60);
}
