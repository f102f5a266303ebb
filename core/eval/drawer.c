// drawer.c: see drawer.h. A singly linked FIFO under one mutex; the thread sleeps on a condition
// variable until a job comes or the drawer ends; drawer_wait sleeps until `done` reaches the number
// of jobs queued when it was called.
#include "core/eval/drawer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/switches.h"
#include "core/base/util.h"

typedef struct Job { DrawJob run; void *arg; struct Job *next; } Job;

struct Drawer {
    pthread_t       th;
    pthread_mutex_t mu;
    pthread_cond_t  cv;         // a job came, a job finished, or the end
    Job            *head, *tail;
    long long       queued, done;
    int             quit;
};

static void *drawer_main(void *p) {
    Drawer *d = p;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->head && !d->quit) pthread_cond_wait(&d->cv, &d->mu);
        if (!d->head) break;                  // quit with nothing left
        Job *j = d->head;
        d->head = j->next;
        if (!d->head) d->tail = NULL;
        pthread_mutex_unlock(&d->mu);
        j->run(j->arg);
        free(j);
        pthread_mutex_lock(&d->mu);
        d->done++;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

Drawer *drawer_new(void) {
    Drawer *d = xcalloc(1, sizeof *d);
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->th, NULL, drawer_main, d)) {   // no thread: draw synchronously
        pthread_cond_destroy(&d->cv);
        pthread_mutex_destroy(&d->mu);
        free(d);
        return NULL;
    }
    return d;
}

void drawer_submit(Drawer *d, DrawJob run, void *arg) {
    if (!d) { run(arg); return; }
    Job *j = xmalloc(sizeof *j);
    *j = (Job){ run, arg, NULL };
    pthread_mutex_lock(&d->mu);
    if (d->tail) d->tail->next = j;
    else d->head = j;
    d->tail = j;
    d->queued++;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

void drawer_wait(Drawer *d) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    long long target = d->queued;
    while (d->done < target) pthread_cond_wait(&d->cv, &d->mu);
    pthread_mutex_unlock(&d->mu);
}

void drawer_free(Drawer *d) {
    if (!d) return;
    pthread_mutex_lock(&d->mu);
    d->quit = 1;                              // the thread runs what is queued, then ends
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->th, NULL);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

Drawer *drawer_for_run(void) {
    const char *s = switch_str(SW_DRAW_SYNC);
    return s && strcmp(s, "0") && s[0] ? NULL : drawer_new();
}

char **drawer_names(char *const *names, int nc) {
    if (!names) return NULL;
    char **v = xcalloc(nc + 1, sizeof *v);
    for (int i = 0; i < nc; i++) v[i] = names[i] ? xstrdup(names[i]) : NULL;
    return v;
}

void drawer_names_free(char **names, int nc) {
    for (int i = 0; names && i < nc; i++) free(names[i]);
    free(names);
}
