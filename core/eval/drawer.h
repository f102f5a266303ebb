// drawer.h: one background thread that draws the run's pictures and plots (core/eval/drawer.c), so the
// training thread and the validation pass only copy what a picture needs and go on. Jobs run one at a
// time in the order they were queued (FIFO): a later job writing the same file, or reading a file an
// earlier one wrote (TensorBoard's copy of a picture), sees that job's result. Each job owns its data
// (copies made when it is queued), so what it draws is what a synchronous call would have drawn, byte
// for byte. A job that fails says so on stderr, as the synchronous call does.
// A NULL drawer runs each job at once on the caller's thread (the synchronous path; YT_DRAW_SYNC=1 in a
// training run; test_drawer compares the two).
#pragma once

typedef struct Drawer Drawer;

// run(arg) draws and then frees arg (and whatever it owns).
typedef void (*DrawJob)(void *arg);

// A drawer with its thread started.
Drawer *drawer_new(void);
// Queue run(arg); with d NULL, run it now.
void drawer_submit(Drawer *d, DrawJob run, void *arg);
// Return once every job queued so far has run (d NULL: at once). Call it before reading what the jobs
// write, and before the data their callers own (not the jobs') goes.
void drawer_wait(Drawer *d);
// Wait, end the thread, free. NULL: nothing.
void drawer_free(Drawer *d);
// A drawer for a training run, or NULL when YT_DRAW_SYNC=1 asks for synchronous drawing.
Drawer *drawer_for_run(void);

// A copy of names (nc strings; NULL stays NULL) for a job to own, and its free.
char **drawer_names(char *const *names, int nc);
void   drawer_names_free(char **names, int nc);
