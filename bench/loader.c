// bench/loader.c: augmented training samples per second of io/loader against worker count, with and
// without cache=ram, and (profile=1) the single-thread CPU cost of each stage of one sample.
//   make benches && ./bench/loader [data=FILE.yaml] [imgsz=640] [batch=16] [epochs=3] [workers=1,2,4,...]
//                                  [cache=off,ram] [augment=cpu,gpu,gpu-decode] [repeat=1] [profile=1]
//   defaults: data=../shared/data/coco128/data.yaml, workers 1,2,4,.. up to the CPU count, both caches;
//   hyp.scratch-high (mosaic 1, mixup 0.15). The consumer does no work, so this is the loader's ceiling.
//   repeat=K lists every image K times (an epoch of coco128 is 4 samples per worker on 32 cores: its
//   start and drain would dominate). Bare arguments are read as data, imgsz, batch, epochs.
//   augment=gpu: the workers only decode and draw (the loader's defer_pixels, train's augment=gpu): what
//   they cost when a device makes the pixels (the consumer makes none, so this is their ceiling too).
//   augment=gpu-decode: the same with the loader's defer_decode: the workers read the JPEGs a device would
//   decode (nvJPEG) and parse their headers only; the decode is left to the device (not timed here). With
//   cache=ram the cache then keeps those files' bytes, not their tiles: after the table, what each mode's cache
//   held (files compressed and tiles decoded, MB; repeat=K holds each image K times) against the decoded estimate.
// CPU ms per sample (process CPU time of later epochs / samples) holds even on a busy machine: 1000 / it
// per core. The profile times with the thread's CPU clock, so it too is robust to other load.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "io/loader.h"

typedef struct {                     // samples/s: first, later epochs; what a RAM cache held at the end
    double first, rest, wait_ms, cpu_ms;
    LoaderCacheHeld held;
} Result;

typedef struct {
    const char *data;
    int img_size, batch, epochs, profile, repeat;
    int workers[32], n_workers;          // n_workers 0: 1, 2, 4, ... and the CPU count
    int cache[2], n_cache;
    int augment[3], n_augment;           // 0 cpu: workers make the pixels; 1 gpu: they decode and draw;
                                         // 2 gpu-decode: they read (defer_decode) and draw
} Options;

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static double thread_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static AugParams scratch_high(int img_size) {
    return (AugParams){ .img_size = img_size, .hsv_h = 0.015, .hsv_s = 0.7, .hsv_v = 0.4,
                        .translate = 0.1, .scale = 0.9, .fliplr = 0.5, .mosaic = 1, .mixup = 0.15 };
}

// ---- throughput of the threaded loader ----

static const char *const augment_names[3] = { "cpu", "gpu", "gpu-decode" };

static int measure(const Dataset *ds, int workers, int cache, int augment, const Options *o, Result *r) {
    LoaderConfig c = { .batch = o->batch, .workers = workers, .train = 1, .cache_ram = cache,
                       .defer_pixels = augment >= 1, .defer_decode = augment == 2, .aug = scratch_high(o->img_size) };
    Loader *l;
    Err err;
    if (loader_open(&c, ds, &l, &err)) { fprintf(stderr, "%s\n", err.msg); return -1; }
    double rest = 0, wait = 0, cpu = 0;
    int batches = 0;
    for (int e = 0; e < o->epochs; e++) {
        loader_start_epoch(l, e, 1);
        double t = now_seconds(), c0 = cpu_seconds();
        Batch *b;
        while (loader_next(l, &b)) loader_release(l, b), batches += e > 0;
        double sps = ds->n / (now_seconds() - t);
        if (e == 0) r->first = sps;
        else rest += sps / (o->epochs - 1), wait += loader_stats(l).wait_s, cpu += cpu_seconds() - c0;
    }
    r->rest = o->epochs > 1 ? rest : r->first;
    r->wait_ms = batches ? 1e3 * wait / batches : 0;
    r->cpu_ms = o->epochs > 1 ? 1e3 * cpu / ((double)ds->n * (o->epochs - 1)) : 0;
    r->held = loader_cache_held(l);
    loader_close(l);
    return 0;
}

static int throughput(const Dataset *ds, const Options *o) {
    char held[3][256] = { "", "", "" };  // per augment mode: what cache=ram held (the same for every worker count)
    printf("| augment    | workers | cache | samples/s epoch 1 | samples/s later | wait per batch (ms) | CPU ms per sample |\n");
    printf("|:-----------|--------:|:------|------------------:|----------------:|--------------------:|------------------:|\n");
    for (int a = 0; a < o->n_augment; a++)
        for (int c = 0; c < o->n_cache; c++)
            for (int i = 0; i < o->n_workers; i++) {
                Result r = { 0 };
                if (measure(ds, o->workers[i], o->cache[c], o->augment[a], o, &r)) return 1;
                printf("| %-10s | %7d | %-5s | %17.1f | %15.1f | %19.1f | %17.2f |\n", augment_names[o->augment[a]],
                       o->workers[i], o->cache[c] ? "ram" : "off", r.first, r.rest, r.wait_ms, r.cpu_ms);
                fflush(stdout);
                if (o->cache[c])
                    snprintf(held[o->augment[a]], sizeof held[0], "cache=ram, augment=%s: %d files kept compressed "
                             "(%.1f MB), %d decoded tiles (%.1f MB): %.1f MB in all", augment_names[o->augment[a]],
                             r.held.n_jpeg, r.held.jpeg_bytes / 1e6, r.held.n_tiles, r.held.tile_bytes / 1e6,
                             (r.held.jpeg_bytes + r.held.tile_bytes) / 1e6);
            }
    int any = 0;
    for (int a = 0; a < 3; a++)
        if (held[a][0]) printf("%s%s\n", any++ ? "" : "\n", held[a]);
    if (any) printf("the decoded estimate (loader_cache_bytes, cache_open's check): %.1f MB\n",
                    loader_cache_bytes(ds, o->img_size) / 1e6);
    return 0;
}

// ---- profile: one thread, CPU ms of each stage ----

typedef struct { Image *img; const Dataset *ds; } Ram;

static int ram_get(void *ctx, int i, Image *img, Box **b, int *n, Err *err) {
    Ram *r = ctx;
    *img = r->img[i], *b = r->ds->s[i].box, *n = r->ds->s[i].nbox;
    return 0;
}

static void ram_put(void *ctx, int i, Image *img, Box *b) {}

static int profile(const Dataset *ds, const Options *o) {
    int S = o->img_size, n = ds->n;
    Ram ram = { calloc(n, sizeof(Image)), ds };
    Err err;
    double t = 0;
    for (int pass = 0; pass < 2; pass++) {       // the first reads the files into the page cache
        if (pass == 1) t = thread_seconds();
        for (int i = 0; i < n; i++) {
            Image raw;
            if (image_load(ds->s[i].image, &raw, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
            if (pass == 1) image_free(&ram.img[i]);
            ram.img[i] = augment_load_resize(&raw, S, 1);
            image_free(&raw);
        }
    }
    double load_ms = 1e3 * (thread_seconds() - t) / n;
    SampleSource src = { n, &ram, ram_get, ram_put };
    AugParams p = scratch_high(S);
    AugScratch scratch = { 0 };
    Image out = image_new(S, S, 0), mix = image_new(S, S, 0);
    int reps = o->epochs;
    double sample = 0, mosaic = 0, hsv = 0, flip = 0, mixup = 0;
    for (int e = 0; e < reps; e++)
        for (int i = 0; i < n; i++) {
            Rng rng = rng_for(1, (uint64_t)e, (uint64_t)i);
            Box *b; BoxXyxy *bx; int nb;
            t = thread_seconds();
            augment_train_sample_into(&p, &src, i, &rng, &scratch, &out, &b, &nb, &err);
            sample += thread_seconds() - t, free(b);
            Image m;
            t = thread_seconds();
            augment_load_mosaic(&p, &src, i, &rng, &m, &bx, &nb, &err);
            mosaic += thread_seconds() - t, free(bx);
            double r[3] = { 0.99, 1.3, 0.8 };
            t = thread_seconds();
            augment_hsv_apply(&m, r);
            hsv += thread_seconds() - t;
            t = thread_seconds();
            augment_flip_lr(&m, NULL, 0);
            flip += thread_seconds() - t;
            t = thread_seconds();
            augment_mixup(&m, &out, &rng);
            mixup += thread_seconds() - t;
            image_free(&m);
        }
    double k = 1e3 / ((double)n * reps), tiles = 4 * (1 + p.mixup);   // tiles decoded per sample uncached
    printf("profile: %d images x %d reps, imgsz %d, one thread, CPU ms\n", n, reps, S);
    printf("| stage | ms |\n|:--|--:|\n");
    printf("| decode + resize, per image | %.2f |\n| mosaic + warp (alloc incl.) | %.2f |\n", load_ms, mosaic * k);
    printf("| hsv | %.2f |\n| flip lr | %.2f |\n| mixup blend | %.2f |\n", hsv * k, flip * k, mixup * k);
    printf("| **sample, cache=ram** | **%.2f** |\n", sample * k);
    printf("| **sample, no cache** (+ %.1f decodes) | **%.2f** |\n", tiles, sample * k + tiles * load_ms);
    printf("linear prediction for 32 threads: %.0f samples/s cache=ram, %.0f without\n",
           32e3 / (sample * k), 32e3 / (sample * k + tiles * load_ms));
    for (int i = 0; i < n; i++) image_free(&ram.img[i]);
    image_free(&out), image_free(&mix), augment_scratch_free(&scratch), free(ram.img);
    return 0;
}

// ---- command line ----

static int parse_list(const char *v, int *out, int max) {
    int n = 0;
    for (char *end; *v && n < max; v = *end ? end + 1 : end) {
        out[n++] = (int)strtol(v, &end, 10);
        if (end == v || out[n - 1] < 1) return -1;
    }
    return n;
}

static int parse(int argc, char **argv, Options *o) {
    *o = (Options){ .data = "../shared/data/coco128/data.yaml", .img_size = 640, .batch = 16, .epochs = 3,
                    .cache = { 0, 1 }, .n_cache = 2, .augment = { 0, 1, 2 }, .n_augment = 3, .repeat = 1 };
    static const char *positional[] = { "data", "imgsz", "batch", "epochs" };
    for (int i = 1, bare = 0; i < argc; i++) {
        char *v = strchr(argv[i], '=');
        if (v) *v++ = 0;
        else if (bare < 4) v = argv[i], argv[i] = (char *)positional[bare++];
        else { fprintf(stderr, "%s: expected key=value\n", argv[i]); return -1; }
        if (!strcmp(argv[i], "data")) o->data = v;
        else if (!strcmp(argv[i], "imgsz")) o->img_size = atoi(v);
        else if (!strcmp(argv[i], "batch")) o->batch = atoi(v);
        else if (!strcmp(argv[i], "epochs")) o->epochs = atoi(v);
        else if (!strcmp(argv[i], "profile")) o->profile = atoi(v);
        else if (!strcmp(argv[i], "repeat")) o->repeat = atoi(v);
        else if (!strcmp(argv[i], "workers")) {
            if ((o->n_workers = parse_list(v, o->workers, 32)) < 0) { fprintf(stderr, "bad workers=%s\n", v); return -1; }
        } else if (!strcmp(argv[i], "cache")) {
            o->n_cache = 0;
            for (char *t = strtok(v, ","); t; t = strtok(NULL, ","))
                if (o->n_cache < 2) o->cache[o->n_cache++] = !strcmp(t, "ram");
            if (o->n_cache == 0) { fprintf(stderr, "cache=: name off, ram or both\n"); return -1; }
        } else if (!strcmp(argv[i], "augment")) {
            o->n_augment = 0;
            for (char *t = strtok(v, ","); t; t = strtok(NULL, ",")) {
                int k = 0;
                while (k < 3 && strcmp(t, augment_names[k])) k++;
                if (k == 3) { fprintf(stderr, "augment=%s: cpu, gpu or gpu-decode\n", t); return -1; }
                if (o->n_augment < 3) o->augment[o->n_augment++] = k;
            }
            if (o->n_augment == 0) { fprintf(stderr, "augment=: name cpu, gpu, gpu-decode or several\n"); return -1; }
        } else { fprintf(stderr, "unknown key %s\n", argv[i]); return -1; }
    }
    if (o->n_workers == 0) {
        int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
        for (int w = 1; w < ncpu && o->n_workers < 31; w *= 2) o->workers[o->n_workers++] = w;
        o->workers[o->n_workers++] = ncpu;
    }
    return o->img_size >= 32 && o->batch >= 1 && o->epochs >= 1 && o->repeat >= 1 ? 0 : -1;
}

int main(int argc, char **argv) {
    Options o;
    if (parse(argc, argv, &o)) return 2;
    Dataset ds;
    Err err;
    DatasetOptions opt = { .quiet = 1 };
    if (dataset_open(o.data, NULL, "train", &opt, &ds, &err)) { fprintf(stderr, "%s\n", err.msg); return 2; }
    Dataset rep = ds;                    // the samples listed repeat times (shallow copies)
    rep.n = ds.n * o.repeat, rep.s = malloc(sizeof *rep.s * (size_t)rep.n);
    for (int i = 0; i < rep.n; i++) rep.s[i] = ds.s[i % ds.n];
    printf("%s: %d images x %d, imgsz %d, batch %d, %d epochs, %ld CPUs\n", o.data, ds.n, o.repeat, o.img_size,
           o.batch, o.epochs, sysconf(_SC_NPROCESSORS_ONLN));
    int rc = o.profile ? profile(&ds, &o) : throughput(&rep, &o);
    free(rep.s);
    dataset_free(&ds);
    return rc;
}
