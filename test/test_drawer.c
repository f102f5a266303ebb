// test_drawer.c: the run's drawing thread (core/eval/drawer.h): jobs run in the order queued, one at a time,
// drawer_wait returns only once every job queued before it ran, drawer_free runs what is still queued,
// and a NULL drawer runs a job at once on the caller's thread.
#include "test/test.h"

#include <pthread.h>
#include <time.h>

#include "core/eval/drawer.h"
#include "core/eval/val.h"
#include "io/picture.h"

static int order[64], n_order, running, overlap;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t caller;
static int on_caller;

typedef struct { int id, sleep_us; } Job;

static void job(void *arg) {
    Job *j = arg;
    pthread_mutex_lock(&mu);
    if (running++) overlap = 1;
    pthread_mutex_unlock(&mu);
    if (j->sleep_us) nanosleep(&(struct timespec){ 0, 1000L * j->sleep_us }, NULL);
    pthread_mutex_lock(&mu);
    order[n_order++] = j->id;
    running--;
    if (pthread_equal(pthread_self(), caller)) on_caller++;
    pthread_mutex_unlock(&mu);
    free(j);
}

static Job *make(int id, int sleep_us) {
    Job *j = malloc(sizeof *j);
    j->id = id; j->sleep_us = sleep_us;
    return j;
}

static void reset(void) { n_order = running = overlap = on_caller = 0; caller = pthread_self(); }

static void test_fifo_and_wait(void) {
    reset();
    Drawer *d = drawer_new();
    CHECK(d != NULL, "no drawer");
    for (int i = 0; i < 20; i++) drawer_submit(d, job, make(i, i % 3 ? 0 : 2000));   // slow and fast jobs mixed
    drawer_wait(d);
    CHECK(n_order == 20, "drawer_wait returned after %d of 20 jobs", n_order);
    for (int i = 0; i < n_order; i++) CHECK(order[i] == i, "job %d ran at place %d", order[i], i);
    CHECK(!overlap, "two jobs ran at once");
    CHECK(on_caller == 0, "%d jobs ran on the caller's thread", on_caller);
    drawer_wait(d);                                    // nothing queued: at once
    for (int i = 20; i < 30; i++) drawer_submit(d, job, make(i, 1000));
    drawer_free(d);                                    // runs what is queued, then ends
    CHECK(n_order == 30, "drawer_free left %d of 10 jobs unrun", 30 - n_order);
    for (int i = 20; i < n_order; i++) CHECK(order[i] == i, "job %d ran at place %d", order[i], i);
}

static void test_sync(void) {
    reset();
    drawer_submit(NULL, job, make(7, 0));
    CHECK(n_order == 1 && order[0] == 7 && on_caller == 1, "a NULL drawer did not run the job at once on the caller");
    drawer_wait(NULL);
    drawer_free(NULL);
    test_switch(SW_DRAW_SYNC, "1");
    CHECK(drawer_for_run() == NULL, "YT_DRAW_SYNC=1 still made a drawer thread");
    test_switch(SW_DRAW_SYNC, "0");
    Drawer *d = drawer_for_run();
    CHECK(d != NULL, "YT_DRAW_SYNC=0 made no drawer");
    drawer_free(d);
    test_switch(SW_DRAW_SYNC, NULL);
}

static void test_names(void) {
    char *names[] = { "a", NULL, "ccc" };
    char **c = drawer_names(names, 3);
    CHECK(c && c[0] != names[0] && !strcmp(c[0], "a") && !c[1] && !strcmp(c[2], "ccc"), "the names' copy");
    drawer_names_free(c, 3);
    CHECK(drawer_names(NULL, 3) == NULL, "no names: NULL");
}

// val_pictures through a drawer draws the bytes the synchronous drawing of the whole batch gives (the
// pass before the drawer: every image and row copied, picture_batch showing the first 16), for a rect
// batch of 20 images (more than the 16 drawn) with labels and detections on all of them.
static void test_val_pictures_same_bytes(void) {
    enum { N = 20, H = 40, W = 56, Q = 56, NT = 3 * N };
    char *names[] = { "cat", "dog", "bird" };
    Dataset ds = { 0 };
    ds.nc = 3; ds.names = names;
    Sample samples[N];                                   // the tiles' file names, drawn on them
    char paths[N][32], *files[N];
    int index[N];
    for (int i = 0; i < N; i++) {
        snprintf(paths[i], sizeof paths[i], "images/val/%03d.jpg", N - i);
        samples[i] = (Sample){ .image = paths[i] };
        index[i] = N - 1 - i;
        files[i] = paths[N - 1 - i];
    }
    ds.s = samples; ds.n = N;
    ValBatch vb = { .n = N, .H = H, .W = W, .S = 64, .nt = NT, .index = index };
    vb.images = malloc((size_t)N * H * W * 3);
    for (size_t k = 0; k < (size_t)N * H * W * 3; k++) vb.images[k] = (uint8_t)(k * 2654435761u >> 24);
    vb.targets = malloc(sizeof(float) * 6 * NT);
    for (int k = 0; k < NT; k++) {
        float *t = vb.targets + 6 * k;
        t[0] = (float)(k % N); t[1] = (float)(k % 3);
        t[2] = 0.3f + 0.01f * (k % 7); t[3] = 0.5f; t[4] = 0.2f + 0.02f * (k % 5); t[5] = 0.3f;
    }
    Det *rows[N], dets[N][4];
    int nd[N];
    for (int i = 0; i < N; i++) {
        nd[i] = 1 + i % 4;
        for (int k = 0; k < nd[i]; k++)
            dets[i][k] = (Det){ .x1 = 4.0f + k, .y1 = 6.0f + i % 5, .x2 = 30.0f + 2 * k, .y2 = 33.0f, .conf = 0.2f + 0.15f * k,
                                .cls = (i + k) % 3 };
        rows[i] = dets[i];
    }
    char dir[4200], want_dir[4300], a[4400], b[4400];
    snprintf(dir, sizeof dir, "%s", test_tmpdir("drawer"));
    snprintf(want_dir, sizeof want_dir, "%s/want", dir);
    mkdir(want_dir, 0755);
    Drawer *d = drawer_new();
    val_pictures(&ds, dir, &vb, (const Det *const *)rows, nd, d);
    memset(vb.images, 0, (size_t)N * H * W * 3);       // the job owns its copies: the batch may change now
    drawer_free(d);
    for (size_t k = 0; k < (size_t)N * H * W * 3; k++) vb.images[k] = (uint8_t)(k * 2654435761u >> 24);
    // the reference: the whole batch on Q x Q canvases, as val_pictures drew it before the drawer
    Batch r = { .n = N, .S = Q };
    r.images = malloc((size_t)N * Q * Q * 3);
    memset(r.images, 114, (size_t)N * Q * Q * 3);
    for (int i = 0; i < N; i++)
        for (int y = 0; y < H; y++)
            memcpy(r.images + (((size_t)i * Q + y) * Q) * 3, vb.images + (((size_t)i * H + y) * W) * 3, (size_t)W * 3);
    float *t = malloc(sizeof(float) * 6 * (NT + 4 * N));
    for (int k = 0; k < NT; k++) {
        const float *s = vb.targets + 6 * k;
        float *o = t + 6 * k;
        o[0] = s[0]; o[1] = s[1]; o[2] = s[2] * W / Q; o[3] = s[3] * H / Q; o[4] = s[4] * W / Q; o[5] = s[5] * H / Q;
    }
    r.targets = t; r.nt = NT;
    Err err;
    snprintf(a, sizeof a, "%s/val_batch0_labels.jpg", want_dir);
    CHECK(picture_batch(&r, names, 3, files, a, &err) == 0, "%s", err.msg);
    r.nt = 0;
    for (int i = 0; i < N; i++)
        for (int k = 0; k < nd[i]; k++) {
            const Det *e = &dets[i][k];
            if (e->conf <= 0.25f) continue;
            float *o = t + 6 * r.nt++;
            o[0] = (float)i; o[1] = (float)e->cls; o[2] = (e->x1 + e->x2) / 2 / Q; o[3] = (e->y1 + e->y2) / 2 / Q;
            o[4] = (e->x2 - e->x1) / Q; o[5] = (e->y2 - e->y1) / Q;
        }
    snprintf(a, sizeof a, "%s/val_batch0_pred.jpg", want_dir);
    CHECK(picture_batch(&r, names, 3, files, a, &err) == 0, "%s", err.msg);
    for (int k = 0; k < 2; k++) {
        const char *f = k ? "val_batch0_pred.jpg" : "val_batch0_labels.jpg";
        snprintf(a, sizeof a, "%s/%s", want_dir, f);
        snprintf(b, sizeof b, "%s/%s", dir, f);
        CHECK(same_file(a, b), "%s drawn by the drawer differs from the synchronous one", f);
    }
    free(r.images); free(t); free(vb.images); free(vb.targets);
}

int main(void) {
    RUN(test_fifo_and_wait);
    RUN(test_sync);
    RUN(test_names);
    RUN(test_val_pictures_same_bytes);
    return test_summary();
}
