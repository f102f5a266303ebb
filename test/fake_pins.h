// fake_pins.h: page-locking hooks for the loader's tests (io/loader.h's LoaderPinning) that only count: each
// pin records the buffer as live, each unpin must name a live one (else the test fails), so a test can ask
// whether a buffer is pinned now and whether every pin was undone. Include after test/test.h.
#pragma once
#include <stddef.h>

typedef struct { int pins, unpins, n_live; const void *live[64]; } FakePins;

static int fake_pin(void *p, size_t bytes, void *arg) {
    FakePins *f = arg;
    f->pins++;
    if (f->n_live < 64) f->live[f->n_live++] = p;
    return 0;
}

static void fake_unpin(void *p, void *arg) {
    FakePins *f = arg;
    f->unpins++;
    for (int k = 0; k < f->n_live; k++)
        if (f->live[k] == p) { f->live[k] = f->live[--f->n_live]; return; }
    CHECK(0, "unpinned %p, which was not pinned", p);
}

static int pinned_live(const FakePins *f, const void *p) {
    for (int k = 0; k < f->n_live; k++) if (f->live[k] == p) return 1;
    return 0;
}
