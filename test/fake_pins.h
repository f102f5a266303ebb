// fake_pins.h: page-locking hooks for the loader's tests (io/loader.h's LoaderPinning) that only count: each
// pin records the buffer as live, each unpin must name a live one (else the test fails), so a test can ask
// whether a buffer is pinned now and whether every pin was undone. The loader's workers call them at once
// (each growing its slot's arena), so they count under a lock. Include after test/test.h.
#pragma once
#include <pthread.h>
#include <stddef.h>

typedef struct { int pins, unpins, n_live; const void *live[64]; } FakePins;

static pthread_mutex_t fake_pins_lock = PTHREAD_MUTEX_INITIALIZER;

static int fake_pin(void *p, size_t bytes, void *arg) {
    FakePins *f = arg;
    pthread_mutex_lock(&fake_pins_lock);
    f->pins++;
    if (f->n_live < 64) f->live[f->n_live++] = p;
    pthread_mutex_unlock(&fake_pins_lock);
    return 0;
}

static void fake_unpin(void *p, void *arg) {
    FakePins *f = arg;
    int found = 0;
    pthread_mutex_lock(&fake_pins_lock);
    f->unpins++;
    for (int k = 0; k < f->n_live && !found; k++)
        if (f->live[k] == p) f->live[k] = f->live[--f->n_live], found = 1;
    pthread_mutex_unlock(&fake_pins_lock);
    CHECK(found, "unpinned %p, which was not pinned", p);
}

static int pinned_live(const FakePins *f, const void *p) {
    pthread_mutex_lock(&fake_pins_lock);
    int found = 0;
    for (int k = 0; k < f->n_live && !found; k++) found = f->live[k] == p;
    pthread_mutex_unlock(&fake_pins_lock);
    return found;
}
