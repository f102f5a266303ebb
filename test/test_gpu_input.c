// test_gpu_input.c: the uint8 input uploaded behind the previous step (issue #6) and the GPU's failure
// paths (issue #8). The loader pins each batch buffer once and unpins it at close (any build). A
// prefetched share converts to the bytes / 255 without a host wait; a share that was not prefetched
// is still right, with or without an input arena; the uploads allocate nothing; a trainer's steps on
// one GPU (and on two) see exactly their shares of prefetched batches and use the prefetched copies; so do
// augment=gpu's steps, from the tiles of the loader's batches (on GPU 0, and as two devices on it).
// Through ./yolotrain: a CUDA error mid-run (YT_FAIL_CUDA) saves last.safetensors, or after a sticky
// error names the intact checkpoints; a plan that does not fit the free memory (YT_GPU_RESERVE_GB) is
// refused naming the plan and the free memory, with exit status 2. These skip without CUDA or a GPU.
// Legend: n bytes of a share, S image side, B batch.
#include "test/test.h"

#include <sys/wait.h>
#include <time.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

#include "cfg/config.h"
#include "core/devices/multi.h"
#include "core/train/step.h"
#include "io/dataset.h"
#include "io/image.h"
#include "io/loader.h"
#include "io/synth.h"
#ifdef USE_CUDA
#include "gpu/device.h"
#include "gpu/ops.h"
#endif

enum { P = 2048 };

static char data_yaml[P], project[P], messages[P];

static int make_data(void) {
    const char *dir = test_tmpdir("gpu-input");
    char sd[P];
    snprintf(sd, sizeof sd, "%s/synth", dir);
    snprintf(data_yaml, sizeof data_yaml, "%s/data.yaml", sd);
    snprintf(project, sizeof project, "%s/runs", dir);
    snprintf(messages, sizeof messages, "%s/messages.txt", dir);
    SynthConfig sc = synth_defaults();
    sc.n_train = 8; sc.n_val = 4; sc.min_side = 64; sc.max_side = 96; sc.threads = 1;
    Err err;
    return synth_generate(sd, &sc, &err);
}

// ---- the loader's pinning hook (any build) ---------------------------------------------------

static int pins, unpins;
static size_t pinned_size;

static int fake_pin(void *p, size_t bytes, void *arg) {   // the second call fails: that buffer stays pageable
    pinned_size = bytes;
    return ++pins == 2 ? -1 : 0;
}

static void fake_unpin(void *p, void *arg) { unpins++; }

static void test_loader_pins_each_buffer_once(void) {
    if (!data_yaml[0] && make_data()) { CHECK(0, "no data"); return; }
    static Config cfg;
    Err err;
    char d[P + 8];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    char *ov[] = { d, "batch=4", "imgsz=64", "workers=1" };
    Dataset ds;
    DatasetOptions opt = { .report = stderr };
    if (config_load("cfg/t.ini", 4, ov, &cfg, &err) || dataset_open(NULL, &cfg, "train", &opt, &ds, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    LoaderConfig lc = loader_config(&cfg, 1);
    Loader *l;
    if (loader_open(&lc, &ds, &l, &err)) { CHECK(0, "%s", err.msg); dataset_free(&ds); return; }
    LoaderPinning pin = { fake_pin, fake_unpin, NULL };
    int first = loader_pin_buffers(l, &pin), slots = pins;
    CHECK(slots >= 2 && first == slots - 1, "%d buffers, %d pinned: want all but the failed one", slots, first);
    CHECK(pinned_size == (size_t)4 * 64 * 64 * 3, "pinned %zu bytes per buffer", pinned_size);
    CHECK(loader_pin_buffers(l, &pin) == slots && pins == slots + 1, "a second call pins only the failed one");
    loader_start_epoch(l, 0, 1);
    Batch *b;
    int batches = 0;
    while (loader_next(l, &b)) { batches++; loader_release(l, b); }
    CHECK(batches == 2, "%d batches from pinned buffers, want 2", batches);
    loader_close(l);
    CHECK(unpins == slots, "loader_close unpinned %d of %d buffers", unpins, slots);
    dataset_free(&ds);
}

#ifdef USE_CUDA
static int have_gpu(void) {
    GpuInfo g[16];
    return gpu_list(g, 16);
}

static uint8_t *pinned_bytes(size_t n, uint32_t seed) {
    uint8_t *p = NULL;
    if (posix_memalign((void **)&p, 4096, n)) return NULL;
    Rng rng = rng_for(seed, 0, 0);
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)rng_int(&rng, 256);
    CHECK(gpu_host_pin(p, n, NULL) == 0, "cudaHostRegister failed");
    return p;
}

static void free_pinned(uint8_t *p) {
    gpu_host_unpin(p, NULL);
    free(p);
}

// Elements of dev's floats d that are not src / 255.0f (the CPU's rounding), once dev's queued work is
// done; -1 on a copy error.
static long wrong_floats(Device *dev, const float *d, const uint8_t *src, size_t n) {
    device_sync(dev);
    float *h = malloc(n * sizeof(float));
    if (!h || cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDefault) != cudaSuccess) { free(h); return -1; }
    long bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != src[i] / 255.0f;
    free(h);
    return bad;
}

static void CUDART_CB hold_stream(void *arg) {   // runs on the stream: keeps its later work waiting
    struct timespec t = { 0, 300000000 };
    nanosleep(&t, NULL);
}

static void test_prefetch_converts_without_host_wait(void) {
    if (!have_gpu()) SKIP("no GPU");
    size_t n = (size_t)3 * 37 * 41 * 5 + 7;        // not a multiple of anything
    size_t bytes[ARENA_COUNT] = { 0, 0, 0, 4 * ((n * sizeof(float) + 255) & ~(size_t)255), 1 << 20,
                                  device_input_arena_bytes(n) };
    Device dev;
    Err err;
    if (device_init(&dev, 0, bytes, &err)) { CHECK(0, "%s", err.msg); return; }
    uint8_t *a = pinned_bytes(n, 1), *b = pinned_bytes(n, 2);
    float *da = arena_take(&dev.acts, n * sizeof(float), 256), *db = arena_take(&dev.acts, n * sizeof(float), 256);
    size_t allocs = gpu_alloc_count();
    upload_u8_gpu(&dev, da, a, n);                 // warm-up: the kernel's module is loaded at first use
    checkCuda(cudaLaunchHostFunc(dev.stream, hold_stream, NULL));   // the "current step", 0.3 s long
    device_prefetch_u8(&dev, a, n);
    device_prefetch_u8(&dev, b, n);
    double t0 = now_seconds();
    upload_u8_gpu(&dev, da, a, n);
    upload_u8_gpu(&dev, db, b, n);
    double waited = now_seconds() - t0;
    CHECK(waited < 0.15, "the prefetched uploads waited %.3f s on the host behind a 0.3 s step", waited);
    CHECK(wrong_floats(&dev, da, a, n) == 0 && wrong_floats(&dev, db, b, n) == 0, "prefetched shares are wrong");
    CHECK(!dev.stage[0].host && !dev.stage[1].host, "a prefetched share was not used");
    device_prefetch_u8(&dev, a, n);                // a stale copy, then bytes that were not prefetched
    upload_u8_gpu(&dev, da, b, n);
    CHECK(wrong_floats(&dev, da, b, n) == 0, "an upload that was not prefetched is wrong");
    b[5] ^= 0xff;
    upload_u8_gpu(&dev, db, b, n);                 // the same pointer again, new bytes: copied anew
    CHECK(wrong_floats(&dev, db, b, n) == 0, "changed bytes were not copied again");
    upload_u8_gpu(&dev, db, a, n);
    CHECK(wrong_floats(&dev, db, a, n) == 0, "the stale share's bytes converted wrongly");
    CHECK(gpu_alloc_count() == allocs, "the uploads allocated %zu times", gpu_alloc_count() - allocs);
    device_free(&dev);
    bytes[ARENA_INPUT] = 0;                        // a plan without an input arena: scratch, as before
    bytes[ARENA_SCRATCH] = (n + 255 + (1 << 20)) & ~(size_t)255;
    if (device_init(&dev, 0, bytes, &err)) { CHECK(0, "%s", err.msg); return; }
    da = arena_take(&dev.acts, n * sizeof(float), 256);
    device_prefetch_u8(&dev, a, n);                // no stage: nothing queued
    upload_u8_gpu(&dev, da, a, n);
    CHECK(wrong_floats(&dev, da, a, n) == 0, "without an input arena the upload is wrong");
    device_free(&dev);
    free_pinned(a);
    free_pinned(b);
}

// B synthetic images of S x S as one uint8 batch, in page-locked memory.
static uint8_t *synth_batch(int B, int S, int first) {
    size_t per = (size_t)S * S * 3;
    uint8_t *x = NULL;
    if (posix_memalign((void **)&x, 4096, B * per)) return NULL;
    SynthConfig sc = synth_defaults();
    sc.min_side = sc.max_side = S;
    for (int i = 0; i < B; i++) {
        Image im;
        SynthObject obj[SYNTH_MAX_OBJECTS];
        synth_render(&sc, 0, first + i, &im, obj);
        memcpy(x + i * per, im.px, per);
        image_free(&im);
    }
    gpu_host_pin(x, B * per, NULL);
    return x;
}

// Every device's input after a step is its share of x / 255 (scatter's order); -1 when one is not.
static int inputs_are(const Trainer *t, const uint8_t *x, int B, int S) {
    int n = t->multi ? multi_count(t->multi) : 1, first = 0;
    for (int k = 0; k < n; k++) {
        const Trainer *r = t->multi ? multi_replica(t->multi, k) : t;
        int nk = t->multi ? multi_sizes(t->multi)[k] : B;
        if (!nk) continue;
        Map in = model_value(&r->m, r->m.input, nk);
        size_t m = (size_t)nk * S * S * in.ld;
        float *h = malloc(m * sizeof(float));
        int bad = cudaMemcpy(h, in.data, m * sizeof(float), cudaMemcpyDefault) != cudaSuccess;
        for (size_t px = 0; !bad && px < (size_t)nk * S * S; px++)
            for (int c = 0; c < 3; c++) bad |= h[px * in.ld + c] != x[((size_t)first * S * S + px) * 3 + c] / 255.0f;
        free(h);
        if (bad) return -1;
        first += nk;
    }
    return 0;
}

// Batches x then y as the trainer's loop runs them: y's upload queued before x's step.
static void steps_with_prefetch(const char *device) {
    enum { B = 8, S = 64 };
    static Config cfg;
    Err err;
    char dv[64];
    snprintf(dv, sizeof dv, "device=%s", device);
    char *ov[] = { "batch=8", "imgsz=64", "epochs=1", "nc=6", "seed=0", dv };
    if (config_load("cfg/t.ini", 6, ov, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    DeviceList devs;
    if (parse_devices(cfg.device, have_gpu(), &devs, &err)) { CHECK(0, "%s", err.msg); return; }
    Trainer t;
    if (trainer_init_devices(&t, &cfg, 1, &devs, &err)) { CHECK(0, "%s", err.msg); return; }
    uint8_t *x = synth_batch(B, S, 0), *y = synth_batch(B, S, B);
    float targets[6] = { 0, 1, 0.5f, 0.5f, 0.25f, 0.25f };
    LossOut lo;
    multi_prefetch(&t, x, B, S, S);
    multi_prefetch(&t, y, B, S, S);
    int n = t.multi ? multi_count(t.multi) : 1;
    for (int k = 0; k < n; k++) {                  // both batches' shares are on their way
        const Device *d = (t.multi ? multi_replica(t.multi, k) : &t)->m.be_ctx;
        CHECK(d->input.size > 0, "device=%s: device %d has no input arena (model_gpu_plan: ARENA_INPUT)", device, k);
        CHECK(d->stage[0].host && d->stage[1].host, "device=%s: device %d has not both shares queued", device, k);
    }
    size_t allocs = gpu_alloc_count();
    t.input_u8 = x;
    CHECK(!trainer_step(&t, B, S, targets, 1, 0, 0, &lo, &err), "%s", err.msg);
    CHECK(inputs_are(&t, x, B, S) == 0, "device=%s: the first step's inputs are not its batch", device);
    t.input_u8 = y;
    CHECK(!trainer_step(&t, B, S, targets, 1, 0, 1, &lo, &err), "%s", err.msg);
    CHECK(inputs_are(&t, y, B, S) == 0, "device=%s: the second step's inputs are not its batch", device);
    CHECK(gpu_alloc_count() == allocs, "device=%s: the steps allocated", device);
    for (int k = 0; k < n; k++) {                  // a share the step did not find would still be staged
        const Device *d = (t.multi ? multi_replica(t.multi, k) : &t)->m.be_ctx;
        CHECK(!d->stage[0].host && !d->stage[1].host, "device=%s: device %d did not use its prefetched share",
              device, k);
    }
    trainer_free(&t);
    free_pinned(x);
    free_pinned(y);
}

// augment=gpu: the loader's batches (defer_pixels, their tile arenas pinned through gpu_host_pin) as the
// trainer's loop runs them, y's tiles queued (multi_prefetch_aug) before x's step. Each device's input is its
// share of the samples' bytes / 255 (made on the host by augment_sample_pixels), the steps allocate nothing and
// use the prefetched copies (gpu/augment.cu's aug stages).
static void steps_with_prefetch_aug(const char *device) {
    enum { B = 4, S = 64 };
    if (!data_yaml[0] && make_data()) { CHECK(0, "no data"); return; }
    static Config cfg;
    Err err;
    char dv[64], d[P + 8];
    snprintf(dv, sizeof dv, "device=%s", device);
    snprintf(d, sizeof d, "data=%s", data_yaml);
    char *ov[] = { d, "batch=4", "imgsz=64", "epochs=1", "seed=0", "workers=2", "augment=gpu", dv };
    Dataset ds;
    DatasetOptions opt = { .report = stderr };
    if (config_load("cfg/t.ini", 8, ov, &cfg, &err) || dataset_open(NULL, &cfg, "train", &opt, &ds, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    DeviceList devs;
    Trainer t;
    if (parse_devices(cfg.device, have_gpu(), &devs, &err) || trainer_init_devices(&t, &cfg, 1, &devs, &err)) {
        CHECK(0, "%s", err.msg);
        dataset_free(&ds);
        return;
    }
    LoaderConfig lc = loader_config(&cfg, 1);
    Loader *l;
    if (loader_open(&lc, &ds, &l, &err)) { CHECK(0, "%s", err.msg); trainer_free(&t); dataset_free(&ds); return; }
    loader_pin_buffers(l, &(LoaderPinning){ gpu_host_pin, gpu_host_unpin, NULL });
    loader_start_epoch(l, 0, 1);
    Batch *b[2];
    CHECK(loader_next(l, &b[0]) && loader_next(l, &b[1]) && b[0]->aug && b[1]->aug && b[0]->n == B && b[1]->n == B,
          "device=%s: two batches of %d samples with recipes", device, B);
    int n = t.multi ? multi_count(t.multi) : 1;
    size_t px = (size_t)S * S * 3, allocs = 0;
    uint8_t *want = malloc(B * px);
    AugScratch scratch = { 0 };
    for (int step = 0; step < 2 && !t_failed_now; step++) {
        if (step == 0) {
            multi_prefetch_aug(&t, b[0]->aug, B);
            multi_prefetch_aug(&t, b[1]->aug, B);
            for (int k = 0; k < n; k++) {              // both batches' shares are on their way
                const Device *dv_k = (t.multi ? multi_replica(t.multi, k) : &t)->m.be_ctx;
                CHECK(dv_k->aug.size > 0, "device=%s: device %d has no aug arena (model_gpu_plan: ARENA_AUG)", device, k);
                CHECK(dv_k->aug_stage[0].s && dv_k->aug_stage[1].s, "device=%s: device %d has not both shares queued",
                      device, k);
            }
            allocs = gpu_alloc_count();
        }
        for (int i = 0; i < B; i++) augment_sample_pixels(&b[step]->aug[i], &scratch, &(Image){ S, S, want + i * px });
        LossOut lo;
        t.input_u8 = b[step]->images, t.input_aug = b[step]->aug;
        CHECK(!trainer_step(&t, B, S, b[step]->targets, b[step]->nt, 0, step, &lo, &err), "%s", err.msg);
        t.input_u8 = NULL, t.input_aug = NULL;
        CHECK(inputs_are(&t, want, B, S) == 0, "device=%s: step %d's inputs are not its samples' bytes", device, step);
    }
    CHECK(gpu_alloc_count() == allocs, "device=%s: the steps allocated", device);
    for (int k = 0; k < n; k++) {                  // a share the step did not find would still be staged
        const Device *dv_k = (t.multi ? multi_replica(t.multi, k) : &t)->m.be_ctx;
        CHECK(!dv_k->aug_stage[0].s && !dv_k->aug_stage[1].s, "device=%s: device %d did not use its prefetched share",
              device, k);
    }
    augment_scratch_free(&scratch);
    free(want);
    loader_release(l, b[0]), loader_release(l, b[1]);
    trainer_free(&t);
    loader_close(l);
    dataset_free(&ds);
}

static void test_steps_use_prefetched_aug(void) {
    if (!have_gpu()) SKIP("no GPU");
    steps_with_prefetch_aug("0");
    test_switch(SW_TEST_SAME_GPU, "1");            // two devices on GPU 0: each its own stages and copy stream
    steps_with_prefetch_aug("0,0");
    test_switch(SW_TEST_SAME_GPU, NULL);
}

static void test_steps_use_prefetched_batches(void) {
    int n = have_gpu();
    if (!n) SKIP("no GPU");
    steps_with_prefetch("0");
    if (n < 2) SKIP("one GPU: device=0,1 not run");
    steps_with_prefetch("[0, 1]");
}

// ---- through ./yolotrain: a fresh process per run (a fork would share this one's CUDA context) -----

// `env ./yolotrain cfg ... args` with stderr in `messages`; its exit status, or -1 if it did not exit.
static int yolotrain(const char *env, const char *cfg, const char *args) {
    char cmd[6 * P];
    snprintf(cmd, sizeof cmd, "%s ./yolotrain %s data=%s project=%s workers=2 exist_ok=1 %s >/dev/null 2>%s", env,
             cfg, data_yaml, project, args, messages);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int said(const char *what) {
    size_t n;
    char *text = slurp(messages, &n);
    int found = text && strstr(text, what);
    if (!found) printf("    no \"%s\" in the messages:\n%s\n", what, text ? text : "(none)");
    free(text);
    return found;
}

static int ready(void) {
    struct stat st;
    if (stat("yolotrain", &st)) return 0;
    return data_yaml[0] || make_data() == 0;
}

static void test_cuda_error_saves_or_names_checkpoints(void) {
    if (!have_gpu()) SKIP("no GPU");
    if (!ready()) SKIP("no ./yolotrain (make builds it) or no data");
    char last[P + 64], state[P + 64];
    const char *run = "epochs=2 imgsz=64 batch=4 device=0";
    char args[P];
    snprintf(args, sizeof args, "name=cuda %s", run);
    int rc = yolotrain("YT_FAIL_CUDA=3", "cfg/t.ini", args);   // epoch 1's first step
    snprintf(last, sizeof last, "%s/cuda/weights/last.safetensors", project);
    CHECK(rc == 1, "a CUDA error gave status %d, want 1", rc);
    CHECK(said("cudaMalloc") && said("the run stops on a CUDA error") && said("saved the EMA weights") && said(last),
          "the CUDA error's messages");
    snprintf(args, sizeof args, "name=sticky %s", run);
    rc = yolotrain("YT_FAIL_CUDA=3:sticky", "cfg/t.ini", args);
    snprintf(last, sizeof last, "%s/sticky/weights/last.safetensors", project);
    snprintf(state, sizeof state, "%s/sticky/weights/last_state.safetensors", project);
    CHECK(rc == 1, "a sticky CUDA error gave status %d, want 1", rc);
    CHECK(said("can no longer run work") && said("intact:") && said(last) && said(state) && said("the end of epoch 0"),
          "the sticky error's messages do not name the intact checkpoints");
}

static void test_plan_that_does_not_fit(void) {
    if (!have_gpu()) SKIP("no GPU");
    if (!ready()) SKIP("no ./yolotrain (make builds it) or no data");
    size_t free_b = 0, total = 0;
    checkCuda(cudaSetDevice(0));
    checkCuda(cudaMemGetInfo(&free_b, &total));
    double gib = free_b / 1073741824.0 - 2.0;     // 2 GiB left: the context and less than the plan
    if (gib < 4) SKIP("only %.1f GiB free on GPU 0", gib + 2);
    char env[64];
    snprintf(env, sizeof env, "YT_GPU_RESERVE_GB=%.2f", gib);
    int rc = yolotrain(env, "cfg/s.ini", "name=oom epochs=1 imgsz=640 batch=16 device=0");
    CHECK(rc == 2, "a plan that does not fit gave status %d, want 2 (a clean refusal)", rc);
    CHECK(said("out of GPU memory on GPU 0: the plan needs") && said("acts") && said("scratch") && said("are free") &&
          said("lower batch"), "the refusal does not name the plan and the free memory");
}
#else
static void test_prefetch_converts_without_host_wait(void) { SKIP("no CUDA in this build"); }
static void test_steps_use_prefetched_batches(void) { SKIP("no CUDA in this build"); }
static void test_steps_use_prefetched_aug(void) { SKIP("no CUDA in this build"); }
static void test_cuda_error_saves_or_names_checkpoints(void) { SKIP("no CUDA in this build"); }
static void test_plan_that_does_not_fit(void) { SKIP("no CUDA in this build"); }
#endif

int main(void) {
    RUN(test_loader_pins_each_buffer_once);
    RUN(test_prefetch_converts_without_host_wait);
    RUN(test_steps_use_prefetched_batches);
    RUN(test_steps_use_prefetched_aug);
    RUN(test_cuda_error_saves_or_names_checkpoints);
    RUN(test_plan_that_does_not_fit);
    return test_summary();
}
