// bench/loader.c: augmented training samples per second of io/loader against worker count, with and
// without cache=ram. The consumer does no work, so this is the loader's ceiling. CPU ms per sample
// (process CPU time of later epochs / samples) holds even on a busy machine: 1000 / it per core.
//   make benches && ./bench/loader [DATA.yaml] [imgsz] [batch] [epochs]
//   defaults: ../shared/data/coco128/data.yaml 640 16 3 (hyp.scratch-high: mosaic 1, mixup 0.15)
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "io/loader.h"

typedef struct { double first, rest, wait_ms, cpu_ms; } Result;   // samples/s: first, later epochs

static double cpu_seconds(void) {
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static AugParams scratch_high(int img_size) {
    return (AugParams){ .img_size = img_size, .hsv_h = 0.015, .hsv_s = 0.7, .hsv_v = 0.4,
                        .translate = 0.1, .scale = 0.9, .fliplr = 0.5, .mosaic = 1, .mixup = 0.15 };
}

static int measure(const Dataset *ds, int workers, int cache, int img_size, int batch, int epochs, Result *r) {
    LoaderConfig c = { .batch = batch, .workers = workers, .train = 1, .cache_ram = cache,
                       .aug = scratch_high(img_size) };
    Loader *l;
    Err err;
    if (loader_open(&c, ds, &l, &err)) { fprintf(stderr, "%s\n", err.msg); return -1; }
    double rest = 0, wait = 0, cpu = 0;
    int batches = 0;
    for (int e = 0; e < epochs; e++) {
        loader_start_epoch(l, e, 1);
        double t = now_seconds(), c0 = cpu_seconds();
        Batch *b;
        while (loader_next(l, &b)) loader_release(l, b), batches += e > 0;
        double sps = ds->n / (now_seconds() - t);
        if (e == 0) r->first = sps;
        else rest += sps / (epochs - 1), wait += loader_stats(l).wait_s, cpu += cpu_seconds() - c0;
    }
    r->rest = epochs > 1 ? rest : r->first;
    r->wait_ms = batches ? 1e3 * wait / batches : 0;
    r->cpu_ms = epochs > 1 ? 1e3 * cpu / ((double)ds->n * (epochs - 1)) : 0;
    loader_close(l);
    return 0;
}

int main(int argc, char **argv) {
    const char *yaml = argc > 1 ? argv[1] : "../shared/data/coco128/data.yaml";
    int img_size = argc > 2 ? atoi(argv[2]) : 640, batch = argc > 3 ? atoi(argv[3]) : 16;
    int epochs = argc > 4 ? atoi(argv[4]) : 3, ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    Dataset ds;
    Err err;
    DatasetOptions opt = { .quiet = 1 };
    if (dataset_open(yaml, NULL, "train", &opt, &ds, &err)) { fprintf(stderr, "%s\n", err.msg); return 2; }
    printf("%s: %d images, imgsz %d, batch %d, %d epochs, %d CPUs\n", yaml, ds.n, img_size, batch, epochs, ncpu);
    printf("| workers | cache | samples/s epoch 1 | samples/s later | wait per batch (ms) | CPU ms per sample |\n");
    printf("|--------:|:------|------------------:|----------------:|--------------------:|------------------:|\n");
    int counts[32], n = 0;
    for (int w = 1; w < ncpu && n < 31; w *= 2) counts[n++] = w;
    counts[n++] = ncpu;
    for (int cache = 0; cache < 2; cache++)
        for (int i = 0; i < n; i++) {
            Result r = { 0 };
            if (measure(&ds, counts[i], cache, img_size, batch, epochs, &r)) return 1;
            printf("| %7d | %-5s | %17.1f | %15.1f | %19.1f | %17.1f |\n", counts[i], cache ? "ram" : "off",
                   r.first, r.rest, r.wait_ms, r.cpu_ms);
            fflush(stdout);
        }
    dataset_free(&ds);
    return 0;
}
