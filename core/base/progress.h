// progress.h: when a progress line is due and how its bar reads, for the training epochs and the validation
// passes. On a terminal the line is redrawn in place at every step; elsewhere (a log file, nohup, a pipe)
// a line is printed each time another tenth of the pass is done or PROGRESS_PERIOD seconds have passed
// since the last one, whichever comes first, so a log shows a long epoch moving.
#pragma once
#include <stddef.h>

#define PROGRESS_PERIOD 60.0   // seconds: the longest silence of a pass where stdout is not a terminal

typedef struct {
    int    tty;         // 1: every step redraws the line in place
    int    total;       // units of the pass (batches or images)
    int    tenths;      // tenths of the pass reported so far (a resumed pass: those reported before)
    double t0, t_last;  // when the pass began, when its last line was due
    double quiet;       // not a terminal: no line before this many seconds into the pass
} Progress;

// A pass of total units beginning at time now with `done` of them done already (a resumed epoch), and
// no line before `quiet` seconds (0: from the first tenth).
void progress_begin(Progress *p, int tty, int total, int done, double now, double quiet);
// 1 when a line is due after `done` units at time now (recorded as given), else 0.
int  progress_due(Progress *p, int done, double now);
// The bar of done out of total in ten cells, as the epoch line draws it: " 45%|████      | 9/20" (the
// length snprintf gives).
int  progress_bar(char *buf, size_t size, int done, int total);
// seconds as m:ss, or h:mm:ss from an hour.
void progress_clock(char *buf, size_t size, double seconds);
