// fatal.c: the end of the process on a dead device (gpu/device.h's checkCuda and checkCublas call
// device_fatal): the registered hook (the trainer's: save `last`, name the intact checkpoints) runs
// once, on the first failing thread; any other failing thread waits for the exit. Host code, so CPU
// builds and their tests have it too.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/base/fatal.h"

static pthread_mutex_t fatal_mu = PTHREAD_MUTEX_INITIALIZER;
static DeviceFatalHook fatal_fn;
static void *fatal_arg;
static int fatal_entered;                          // guarded by fatal_mu
static pthread_t fatal_thread;                     // the thread running the hook

void device_set_fatal_hook(DeviceFatalHook fn, void *arg) {
    pthread_mutex_lock(&fatal_mu);
    fatal_fn = fn;
    fatal_arg = arg;
    pthread_mutex_unlock(&fatal_mu);
}

void device_fatal(const char *what) {
    pthread_mutex_lock(&fatal_mu);
    int first = !fatal_entered, again = fatal_entered && pthread_equal(fatal_thread, pthread_self());
    if (first) { fatal_entered = 1; fatal_thread = pthread_self(); }
    DeviceFatalHook fn = fatal_fn;
    void *arg = fatal_arg;
    pthread_mutex_unlock(&fatal_mu);
    if (first) {
        if (fn) fn(what, arg);
        exit(EXIT_FAILURE);
    }
    if (again) {                                   // the hook itself failed: it ran once, that is all
        fprintf(stderr, "yolotrain: a second error (%s) while handling the first; stopping\n", what);
        exit(EXIT_FAILURE);
    }
    for (;;) pause();                              // another thread runs the hook, then ends the process
}
