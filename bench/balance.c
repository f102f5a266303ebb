// balance.c: how evenly the devices of a data-parallel run share the work, in each mode of the
// driver (core/devices/multi.h): 1 device; N devices with reduce=device0; loss_on=device0 (PyTorch
// DataParallel's way); reduce=sharded; an odd batch (N*b - 1: 127 on 2 GPUs); split=auto; and the
// real loader with too few workers (data starvation). Per device: micro-batch, ms per step in each
// phase, idle at the barrier, peak memory, utilisation (NVML, when present); per configuration:
// images/s, scaling against 1 device, imbalance (device 0 over the mean of the others).
//   make bench/balance && ./bench/balance                       every GPU (else cpu:2), gelan-s 640, 64/device, bf16
//   ./bench/balance device=0,1 imgsz=640 batch=64 steps=20 warmup=5 precision=bf16
//   ./bench/balance device=cpu:2 imgsz=64 batch=4 steps=2       a check on the CPU
//   YT_TEST_SAME_GPU=1 ./bench/balance device=0,0 imgsz=64 batch=4 steps=2   two devices on one GPU: the
//                                                               accounting on real CUDA (times are not 2 GPUs')
// Other keys: cfg=cfg/s.ini workers=1 (the starved run) csv=bench/balance.csv png=bench/balance.png.
// Several processes (core/README.md, Several machines): the same under mpirun, e.g.
//   mpirun -np 2 --bind-to none ./bench/balance device=0,1,2,3,4,5,6,7 base=IPS
// batch stays per device (the global batch is batch x devices x processes); rank 0 prints every
// process's devices (p<rank> GPU <id>) and the images/s of them all, and with base= (the images/s of the
// same configuration in one process, from a run without mpirun) the scaling against one process. The
// loader's run (few workers) is left out under several processes.
// batch is per device. Inputs and targets are random and, after warm-up, stay on the devices (the
// GPU-only step, as bench/step and anchors.md measure it); the starved run feeds the real loader.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg/config.h"
#include "core/procs/comm.h"
#include "core/devices/multi.h"
#include "core/train/step.h"
#include "core/procs/procs.h"
#include "core/devices/nvml.h"
#include "core/train/train.h"
#include "gpu/device.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "io/plot_bars.h"
#include "io/synth.h"
#ifdef USE_CUDA
#include <cuda_runtime.h>
#endif

typedef struct {
    char device[64], cfg[256], precision[16], csv[256], png[256];
    int  imgsz, batch, steps, warmup, workers;
    double base;              // images/s of one process (base=), for the scaling of several
} Options;

typedef struct {             // one configuration
    const char *name, *reduce, *loss_on, *split;
    int  all_devices, batch_minus, loader, sync_bn;
} Setup;

typedef struct {
    int    ok, n_dev;
    char   why[1024], dev_name[MULTI_MAX][32];
    MultiDevStats dev[MULTI_MAX];   // summed over the timed steps
    double util[MULTI_MAX];         // mean %, or -1
    double ips, data_wait;          // images/s; seconds waiting for the loader per step
    int    steps;
    char   host[64];
} Result;

static const Setup SETUPS[] = {
    { "1 device",        "device0", "local",   "even", 0, 0, 0, 0 },
    { "reduce=device0",  "device0", "local",   "even", 1, 0, 0, 0 },
    { "loss_on=device0", "device0", "device0", "even", 1, 0, 0, 0 },
    { "reduce=sharded",  "sharded", "local",   "even", 1, 0, 0, 0 },
    { "odd batch",       "device0", "local",   "even", 1, 1, 0, 0 },
    { "split=auto",      "device0", "local",   "auto", 1, 0, 0, 0 },
    { "sync_bn=1",       "device0", "local",   "even", 1, 0, 0, 1 },   // SyncBatchNorm: the BN sums' host waits
    { "few workers",     "device0", "local",   "even", 1, 0, 1, 0 },
};
enum { N_SETUPS = sizeof SETUPS / sizeof SETUPS[0], AUTO_STEPS = 7 };   // split=auto decides after 6 steps

// ---- options ---------------------------------------------------------------------------------

static int parse_options(int argc, char **argv, Options *o, int n_gpus) {
    *o = (Options){ .imgsz = 640, .batch = 64, .steps = 10, .warmup = 3, .workers = 1 };
    snprintf(o->device, sizeof o->device, "%s", n_gpus >= 2 ? "" : "cpu:2");
    snprintf(o->cfg, sizeof o->cfg, "cfg/s.ini");
    snprintf(o->precision, sizeof o->precision, "bf16");
    snprintf(o->csv, sizeof o->csv, "bench/balance.csv");
    snprintf(o->png, sizeof o->png, "bench/balance.png");
    for (int i = 1; i < argc; i++) {
        char *eq = strchr(argv[i], '=');
        if (!eq) { fprintf(stderr, "balance: %s: write key=value (see the header of bench/balance.c)\n", argv[i]); return -1; }
        *eq = 0;
        const char *k = argv[i], *v = eq + 1;
        int *num = !strcmp(k, "imgsz") ? &o->imgsz : !strcmp(k, "batch") ? &o->batch : !strcmp(k, "steps") ? &o->steps
                 : !strcmp(k, "warmup") ? &o->warmup : !strcmp(k, "workers") ? &o->workers : NULL;
        struct { const char *key; char *dst; size_t size; } strs[] = {
            { "device", o->device, sizeof o->device }, { "cfg", o->cfg, sizeof o->cfg },
            { "precision", o->precision, sizeof o->precision }, { "csv", o->csv, sizeof o->csv }, { "png", o->png, sizeof o->png } };
        int found = 0;
        for (int j = 0; j < 5 && !num; j++)
            if (!strcmp(k, strs[j].key)) { snprintf(strs[j].dst, strs[j].size, "%s", v); found = 1; }
        if (num) *num = atoi(v);
        else if (found) continue;
        else if (!strcmp(k, "base")) o->base = atof(v);
        else { fprintf(stderr, "balance: unknown key %s\n", k); return -1; }
    }
    if (o->imgsz < 32 || o->batch < 1 || o->steps < 1 || o->warmup < 0) { fprintf(stderr, "balance: bad sizes\n"); return -1; }
    return 0;
}

// ---- one configuration ----------------------------------------------------------------------

static void random_batch(Trainer *t, int n, int S, float *targets, int *nt, Rng *r) {
    for (size_t i = 0; i < (size_t)n * S * S * 3; i++) t->input[i] = (float)rng_uniform(r, 0, 1);
    *nt = 0;
    for (int b = 0; b < n; b++)
        for (int k = 0; k < 6; k++, (*nt)++) {
            float *row = targets + 6 * *nt;
            row[0] = b; row[1] = rng_int(r, t->m.nc);
            row[4] = (float)rng_uniform(r, 0.05, 0.4); row[5] = (float)rng_uniform(r, 0.05, 0.4);
            row[2] = (float)rng_uniform(r, row[4] / 2, 1 - row[4] / 2);
            row[3] = (float)rng_uniform(r, row[5] / 2, 1 - row[5] / 2);
        }
}

static int load_config(const Options *o, const Setup *s, const char *device, int B, Config *cfg, Err *err) {
    char ov[9][300];
    snprintf(ov[0], sizeof ov[0], "batch=%d", B);
    snprintf(ov[1], sizeof ov[1], "imgsz=%d", o->imgsz);
    snprintf(ov[2], sizeof ov[2], "device=%s", device);
    snprintf(ov[3], sizeof ov[3], "reduce=%s", s->reduce);
    snprintf(ov[4], sizeof ov[4], "loss_on=%s", s->loss_on);
    snprintf(ov[5], sizeof ov[5], "split=%s", s->split);
    snprintf(ov[6], sizeof ov[6], "precision=%s", o->precision);
    snprintf(ov[7], sizeof ov[7], "workers=%d", o->workers);
    snprintf(ov[8], sizeof ov[8], "sync_bn=%d", s->sync_bn);
    char *argv[9];
    for (int i = 0; i < 9; i++) argv[i] = ov[i];
    return config_load(o->cfg, 9, argv, cfg, err);
}

// Device k's times: the driver's, or for one device the trainer's own phase times.
static void device_stats(const Trainer *t, const PhaseTimes *before, int steps, int B, MultiDevStats *s) {
    memset(s, 0, sizeof *s);
    s->forward = t->t.forward - before->forward;
    s->loss = t->t.loss - before->loss;
    s->backward = t->t.backward - before->backward;
    s->update = t->t.optim - before->optim;
    s->steps = steps;
    s->images = steps * B;
    s->mem_bytes = s->peak_bytes = -1;
#ifdef USE_CUDA
    if (t->m.on_device) s->mem_bytes = s->peak_bytes = (double)device_mem_used(t->m.be_ctx);
#endif
}

static void sample_util(const Trainer *t, const DeviceList *devs, const GpuInfo *gpus, Result *r) {
    for (int k = 0; k < devs->n; k++) {
        double u;
        if (devs->gpu[k] < 0 || nvml_sample(gpus[devs->gpu[k]].bus_id, &u, NULL)) { r->util[k] = -1; continue; }
        r->util[k] += u / r->steps;
    }
    (void)t;
}

static void sync_all(const DeviceList *devs) {
#ifdef USE_CUDA
    for (int k = 0; k < devs->n; k++)
        if (devs->gpu[k] >= 0) { cudaSetDevice(devs->gpu[k]); cudaDeviceSynchronize(); }
    if (devs->gpu[0] >= 0) cudaSetDevice(devs->gpu[0]);
#else
    (void)devs;
#endif
}

typedef struct { Dataset ds; Loader *ld; int epoch, open; } Feed;

static int feed_open(Feed *f, Config *cfg, Err *err) {
    memset(f, 0, sizeof *f);
    if (synth_ensure(SYNTH_DIR, err)) return -1;
    snprintf(cfg->data, sizeof cfg->data, "%s/data.yaml", SYNTH_DIR);
    DatasetOptions opt = { .report = stderr };
    if (dataset_open(NULL, cfg, "train", &opt, &f->ds, err)) return -1;
    config_set_nc(cfg, f->ds.nc);
    LoaderConfig lc = loader_config(cfg, 1);
    if (loader_open(&lc, &f->ds, &f->ld, err)) { dataset_free(&f->ds); return -1; }
    loader_start_epoch(f->ld, 0, 1);
    f->open = 1;
    return 0;
}

static Batch *feed_next(Feed *f) {
    Batch *b;
    while (!loader_next(f->ld, &b)) loader_start_epoch(f->ld, ++f->epoch, 1);
    return b;
}

static void feed_close(Feed *f) {
    if (!f->open) return;
    loader_close(f->ld);
    dataset_free(&f->ds);
}

// The timed steps of one configuration; per-device sums in r.
static int run_steps(const Options *o, const Setup *s, Trainer *t, const DeviceList *devs, const GpuInfo *gpus,
                     Feed *feed, int B, Result *r, Err *err) {
    int S = o->imgsz, nt = 0, warm = o->warmup + (!strcmp(s->split, "auto") ? AUTO_STEPS : 0);
    float *targets = xmalloc(sizeof(float) * 6 * 6 * (size_t)B);
    Rng rng = rng_for(7, 0, 0);
    if (!feed->open) random_batch(t, B, S, targets, &nt, &rng);
    PhaseTimes before = t->t;
    double t0 = 0, wait = 0;
    int images = 0, rc = 0;
    r->steps = o->steps;
    for (int i = 0; i < warm + o->steps && !rc; i++) {
        if (i == warm) {
            sync_all(devs);
            if (t->multi) multi_reset_stats(t->multi);
            before = t->t;
            t0 = now_seconds();
        }
        LossOut lo;
        if (feed->open) {
            double tw = now_seconds();
            Batch *b = feed_next(feed);
            if (i >= warm) wait += now_seconds() - tw;
            t->input_u8 = b->images;
            t->input_aug = b->aug;                 // augment=gpu: each device makes its share's pixels
            rc = trainer_step(t, b->n, S, b->targets, b->nt, 0, i, &lo, err);
            t->input_u8 = NULL, t->input_aug = NULL;
            images += i >= warm ? b->n : 0;
            loader_release(feed->ld, b);
        } else {
            // after the warm-up the random batch stays on the devices, as bench/step times it
            rc = trainer_step_batch(t, i >= warm ? NULL : t->input, NULL, B, S, targets, nt, 0, i, &lo, err);
            images += i >= warm ? B : 0;
        }
        if (!rc && i >= warm) sample_util(t, devs, gpus, r);
    }
    sync_all(devs);
    double wall = now_seconds() - t0;
    free(targets);
    if (rc) return -1;
    r->ips = images / wall;
    r->data_wait = wait / o->steps;
    r->n_dev = devs->n;
    for (int k = 0; k < devs->n; k++) {
        if (t->multi) r->dev[k] = *multi_stats(t->multi, k);
        else device_stats(t, &before, o->steps, B, &r->dev[k]);
        int again = 0;                             // devices before k on the same GPU (YT_TEST_SAME_GPU)
        for (int j = 0; j < k; j++) again += devs->gpu[k] >= 0 && devs->gpu[j] == devs->gpu[k];
        if (devs->gpu[k] < 0) snprintf(r->dev_name[k], sizeof r->dev_name[k], "cpu %d", k);
        else if (again) snprintf(r->dev_name[k], sizeof r->dev_name[k], "GPU %d.%d", devs->gpu[k], again);
        else snprintf(r->dev_name[k], sizeof r->dev_name[k], "GPU %d", devs->gpu[k]);
    }
    return 0;
}

static void measure(const Options *o, const Setup *s, const DeviceList *all, const GpuInfo *gpus, int n_gpus, Result *r) {
    memset(r, 0, sizeof *r);
    DeviceList devs = *all;
    if (!s->all_devices) devs.n = 1;
    char spec[64];
    if (devs.gpu[0] < 0) snprintf(spec, sizeof spec, "cpu:%d", devs.n);
    else for (int k = 0, len = 0; k < devs.n; k++) len += snprintf(spec + len, sizeof spec - len, "%s%d", k ? "," : "", devs.gpu[k]);
    int B = o->batch * devs.n * comm_size() - s->batch_minus, first, Bl;   // the global batch, this process's share
    static Config cfg;
    Err err;
    Feed feed = { 0 };
    Trainer t;
    snprintf(r->host, sizeof r->host, "%s", comm_host());
    if (load_config(o, s, spec, B, &cfg, &err) || procs_agree(&cfg, 0, 0, devs.n, devs.gpu[0] >= 0, &err) ||
        (s->loader && feed_open(&feed, &cfg, &err)) || trainer_init_devices(&t, &cfg, 1000, &devs, &err)) {
        snprintf(r->why, sizeof r->why, "%s", err.msg);
        feed_close(&feed);
        return;
    }
    procs_share(B, &first, &Bl);
    r->ok = !run_steps(o, s, &t, &devs, gpus, &feed, Bl, r, &err);
    if (!r->ok) snprintf(r->why, sizeof r->why, "%s", err.msg);
    trainer_free(&t);
    feed_close(&feed);
    (void)n_gpus;
}

// ---- the table, the CSV and the chart ----------------------------------------------------------

static double busy_of(const MultiDevStats *d) {
    return d->forward + d->loss + d->backward + d->gather + d->update + d->broadcast;
}

// device 0 over the mean of the others: busy time and peak memory (-1: not measurable)
static void imbalance(const Result *r, double *time_ratio, double *mem_ratio) {
    double t = 0, m = 0;
    int nm = 0;
    for (int k = 1; k < r->n_dev; k++) {
        t += busy_of(&r->dev[k]);
        if (r->dev[k].peak_bytes > 0) { m += r->dev[k].peak_bytes; nm++; }
    }
    *time_ratio = r->n_dev > 1 && t > 0 ? busy_of(&r->dev[0]) / (t / (r->n_dev - 1)) : -1;
    *mem_ratio = nm && r->dev[0].peak_bytes > 0 ? r->dev[0].peak_bytes / (m / nm) : -1;
}

static const char *fmt(char *buf, double v, const char *f) {
    if (v < 0) snprintf(buf, 16, "n/a");
    else snprintf(buf, 16, f, v);
    return buf;
}

static double o_base;     // Options.base, for the table

static void print_table(const Result *all, int P, FILE *csv) {
    printf("\n%-16s %-6s %5s %7s %7s %7s %7s %7s %7s %7s %7s %9s %5s | %8s %6s %6s %6s\n", "config", "device", "micro",
           "fwd", "loss", "bwd", "gather", "update", "bcast", "idle", "data", "peak GiB", "util", "img/s", "scale",
           "imb.t", "imb.mem");
    printf("%-16s %-6s %5s %7s (ms per step) %45s %5s |\n", "", "", "", "", "", "%");
    fprintf(csv, "config,device,micro_batch,forward_ms,loss_ms,backward_ms,gather_ms,update_ms,broadcast_ms,idle_ms,"
                 "data_wait_ms,peak_mem_gib,util_pct,images_per_s,scaling,imbalance_time,imbalance_mem\n");
    // all[p * N_SETUPS + c]: process p's result of setup c; images/s are every process's added up
    double base = 0;
    for (int p = 0; p < P && all[0].ok; p++) base += all[p * N_SETUPS].ips;
    if (o_base > 0) base = o_base;                  // against one process: base= names its images/s
    for (int c = 0; c < N_SETUPS * P; c++) {
        const Result *r = &all[(c % P) * N_SETUPS + c / P];
        int first_row = c % P == 0;
        double ips = 0;
        for (int p = 0; p < P; p++) ips += all[p * N_SETUPS + c / P].ips;
        if (!r->ok) { if (first_row) printf("%-16s not run: %s\n", SETUPS[c / P].name, r->why); continue; }
        double it, im;
        imbalance(r, &it, &im);
        for (int k = 0; k < r->n_dev; k++) {
            char dev[48];
            if (P > 1) snprintf(dev, sizeof dev, "p%d %s", c % P, r->dev_name[k]);
            else snprintf(dev, sizeof dev, "%s", r->dev_name[k]);
            const MultiDevStats *d = &r->dev[k];
            double per = 1000.0 / (d->steps ? d->steps : 1);
            char a[16], b[16], x[16], y[16], z[16], w[16];
            fmt(a, d->peak_bytes < 0 ? -1 : d->peak_bytes / 1073741824, "%.2f");
            fmt(b, r->util[k], "%.0f");
            printf("%-16s %-6s %5.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %7.1f %9s %5s", k || !first_row ? "" :
                   SETUPS[c / P].name, dev, d->steps ? (double)d->images / d->steps : 0, d->forward * per, d->loss * per,
                   d->backward * per, d->gather * per, d->update * per, d->broadcast * per, d->idle * per,
                   r->data_wait * 1000, a, b);
            fmt(x, base > 0 ? ips / base : -1, "%.2fx");
            fmt(y, it, "%.2f");
            fmt(z, im, "%.2f");
            if (!k && first_row) printf(" | %8.1f %6s %6s %6s\n", ips, x, y, z);
            else printf(" |\n");
            fmt(w, base > 0 ? ips / base : -1, "%.3f");
            fprintf(csv, "%s,%s,%.2f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%s,%s,%.2f,%s,%s,%s\n", SETUPS[c / P].name,
                    dev, d->steps ? (double)d->images / d->steps : 0, d->forward * per, d->loss * per,
                    d->backward * per, d->gather * per, d->update * per, d->broadcast * per, d->idle * per,
                    r->data_wait * 1000, a, b, ips, w, y, z);
        }
    }
}

static void draw_chart(const Result *res, const char *png) {
    static const char *parts[] = { "forward", "loss", "backward", "gather", "update", "broadcast", "idle", "data wait" };
    BarRow rows[N_SETUPS * MULTI_MAX];
    int n = 0;
    for (int c = 0; c < N_SETUPS; c++) {
        const Result *r = &res[c];
        for (int k = 0; r->ok && k < r->n_dev; k++) {
            const MultiDevStats *d = &r->dev[k];
            double per = 1000.0 / (d->steps ? d->steps : 1);
            BarRow *b = &rows[n++];
            snprintf(b->label, sizeof b->label, "%s / %s", SETUPS[c].name, r->dev_name[k]);
            double v[8] = { d->forward * per, d->loss * per, d->backward * per, d->gather * per, d->update * per,
                            d->broadcast * per, d->idle * per, r->data_wait * 1000 };
            memcpy(b->value, v, sizeof v);
        }
    }
    Err err;
    if (plot_bars(png, "bench/balance: time per step and device", parts, 8, rows, n, "ms per step", &err))
        fprintf(stderr, "balance: %s\n", err.msg);
    else printf("wrote %s\n", png);
}

int main(int argc, char **argv) {
    GpuInfo gpus[MULTI_MAX];
#ifdef USE_CUDA
    int n_gpus = gpu_list(gpus, MULTI_MAX);
#else
    int n_gpus = 0;
#endif
    Options o;
    if (parse_options(argc, argv, &o, n_gpus)) return 2;
    Err cerr;
    if (comm_init(&cerr)) { fprintf(stderr, "balance: %s\n", cerr.msg); return 2; }
    int P = comm_size(), me = comm_rank();
    o_base = o.base;
    DeviceList devs;
    Err err;
    if (parse_devices(o.device, n_gpus, &devs, &err)) { fprintf(stderr, "balance: %s\n", err.msg); return 2; }
    int nvml = nvml_open();
    if (!me) printf("bench/balance: %s, imgsz %d, %d images per device, %s, %d warm-up + %d timed steps, %d device%s%s; NVML %s\n",
                    o.cfg, o.imgsz, o.batch, o.precision, o.warmup, o.steps, devs.n, devs.n > 1 ? "s" : "",
                    P > 1 ? " per process" : "", nvml ? "found" : "absent (utilisation n/a)");
    if (P > 1 && !me) printf("%d processes (rank 0 on %s); the global batch is %d images per device x devices x %d\n", P,
                             comm_host(), o.batch, P);
    Result res[N_SETUPS];
    for (int c = 0; c < N_SETUPS; c++) {
        if (SETUPS[c].all_devices && devs.n < 2) { memset(&res[c], 0, sizeof res[c]); snprintf(res[c].why, sizeof res[c].why, "one device"); continue; }
        if (SETUPS[c].loader && P > 1) { memset(&res[c], 0, sizeof res[c]); snprintf(res[c].why, sizeof res[c].why, "several processes"); continue; }
        if (!me) printf("\n== %s ==\n", SETUPS[c].name);
        fflush(stdout);
        measure(&o, &SETUPS[c], &devs, gpus, n_gpus, &res[c]);
    }
    Result *all = xmalloc(sizeof(Result) * N_SETUPS * P);
    comm_allgather(res, all, sizeof res);          // every process's devices, for rank 0's table
    if (me) { free(all); nvml_close(); comm_finalize(); return 0; }
    for (int p = 0; P > 1 && p < P; p++) printf("p%d: process %d on %s\n", p, p, all[p * N_SETUPS].host);
    FILE *csv = fopen(o.csv, "w");
    if (!csv) { fprintf(stderr, "balance: cannot write %s\n", o.csv); return 1; }
    print_table(all, P, csv);
    fclose(csv);
    printf("wrote %s\n", o.csv);
    draw_chart(res, o.png);
    free(all);
    nvml_close();
    comm_finalize();
    return 0;
}
