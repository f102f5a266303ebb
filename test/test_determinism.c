// test_determinism.c: the same seed and config give the same run to the bit: run after run, each in
// a fresh process, and whatever the number of loader workers; on the CPU, and on a GPU when there is
// one; and on a GPU with the gradient plan's fresh writes or without them (YT_GRAD_FRESH=0), with
// the weights rounded to bf16 once a pass or once a convolution (YT_WEIGHTS_ONCE=0, =unpermuted), and with
// the fused forms of a RepConv and of a residual addition or without them (YT_FUSE=0), with the residual
// gradients aliased or not (YT_GRAD_ALIAS=0), with the recorded kernels launched programmatically or
// not (YT_PDL=0), and with some gradients stored as bf16 or all fp32 (YT_GRAD_BF16=0). augment=gpu (the
// step makes the pixels) gives augment=cpu's bits where the host decodes; where a GPU decodes the JPEGs
// (nvJPEG) it repeats to the bit for one loader worker or three, the files read each epoch or kept in the
// RAM cache (cache=ram).
// On a GPU every run shares one cuDNN engine file (YT_CUDNN_ENGINES): the first run times each new kind of
// convolution and writes its choices there, the later ones read them, so the first run's bits are repeated too.
// Compared: results.csv (per-epoch losses, metrics, learning rates), the EMA weights and the
// whole training state (weights, gradients, momentum), byte for byte but for the wall time it records.
#include "test/test.h"

#include <fcntl.h>
#include <sys/wait.h>

#include "cfg/config.h"
#include "core/train/train.h"
#include "io/synth.h"
#ifdef USE_CUDA
#include "gpu/device.h"
#endif

enum { P = 4096 };
static char root[P], data_yaml[P + 32];

// Train gelan-t for 2 epochs (mosaic, then without) in a fresh child process: runs/NAME. A child
// also keeps CUDA out of this process, where it would not survive the next fork.
static const char *child_env;   // "NAME=value" set in the child (a fast path's switch); NULL: none
static const char *child_cfg = "cfg/t.ini";
static const char *child_data;  // data= of the child: NULL, the synthetic set of make_data
static char *child_more[3];     // further overrides ("augment=gpu", ...), NULL-ended

static int train_in_child(const char *name, int workers, const char *device) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (child_env) putenv((char *)child_env), switches_reload();   // the registry was read before the fork
        int out = open("/dev/null", O_WRONLY);
        if (out < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0) _exit(99);
        static Config cfg;
        Err err;
        char d[P + 64], p[P + 64], n[300], w[32], dev[64];
        snprintf(d, sizeof d, "data=%s", child_data ? child_data : data_yaml);
        snprintf(p, sizeof p, "project=%s/runs", root);
        snprintf(n, sizeof n, "name=%s", name);
        snprintf(w, sizeof w, "workers=%d", workers);
        snprintf(dev, sizeof dev, "device=%s", device);
        char *ov[13] = { d, p, n, w, dev, "imgsz=64", "batch=4", "epochs=2", "close_mosaic=1", "seed=3" };
        int n_ov = 10;
        for (int k = 0; k < 3 && child_more[k]; k++) ov[n_ov++] = child_more[k];
        if (config_load(child_cfg, n_ov, ov, &cfg, &err)) _exit(97);
        _exit(train_run(&cfg));
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void compare(const char *a, const char *b) {
    static const char *files[] = { "results.csv", "weights/last.safetensors", "weights/last_state.safetensors" };
    for (int i = 0; i < 3; i++) {
        char x[P + 128], y[P + 128];
        snprintf(x, sizeof x, "%s/runs/%s/%s", root, a, files[i]);
        snprintf(y, sizeof y, "%s/runs/%s/%s", root, b, files[i]);
        CHECK(i == 2 ? same_state(x, y) : same_file(x, y), "%s differs between run %s and run %s", files[i], a, b);
    }
}

#ifdef USE_CUDA
// A GPU run named `name` of child_cfg with one fast path switched by `env` ("NAME=value"), compared with the
// run `ref` byte for byte; -1 (after a failed check) when the run itself failed.
static int same_with(const char *env, const char *name, const char *ref) {
    child_env = env;
    int rc = train_in_child(name, 1, "0");
    child_env = NULL;
    if (rc) { CHECK(0, "the GPU run with %s failed: status %d", env, rc); return -1; }
    compare(ref, name);
    return 0;
}
#endif

static int make_data(void) {
    if (data_yaml[0]) return 0;
    snprintf(root, sizeof root, "%s", test_tmpdir("determinism"));
    char sd[P + 16];
    snprintf(sd, sizeof sd, "%s/synth", root);
    snprintf(data_yaml, sizeof data_yaml, "%s/data.yaml", sd);
    SynthConfig sc = synth_defaults();
    sc.n_train = 12; sc.n_val = 4; sc.min_side = 64; sc.max_side = 96; sc.threads = 1;
    Err err;
    if (synth_generate(sd, &sc, &err)) { printf("    %s\n", err.msg); data_yaml[0] = 0; return -1; }
    return 0;
}

static void test_same_seed_same_bits(void) {
    if (make_data()) { CHECK(0, "no data"); return; }
    int a = train_in_child("w1", 1, "cpu"), b = train_in_child("w1again", 1, "cpu"), c = train_in_child("w3", 3, "cpu");
    if (a || b || c) { CHECK(0, "a run failed: status %d, %d, %d", a, b, c); return; }
    compare("w1", "w1again");                      // run after run
    compare("w1", "w3");                           // one loader worker or three
}

// A run of `workers` with the overrides a, b (NULL: none) as `name`, compared with the run `ref`.
static void same_as(const char *ref, const char *name, int workers, const char *device, char *a, char *b) {
    child_more[0] = a, child_more[1] = b, child_more[2] = NULL;
    int rc = train_in_child(name, workers, device);
    child_more[0] = child_more[1] = NULL;
    if (rc) { CHECK(0, "the run %s (%s %s, %d workers) failed: status %d", name, a, b ? b : "", workers, rc); return; }
    compare(ref, name);
}

// augment=gpu (issue 37): the workers only decode and draw, the step makes the pixels through the backend's
// augment_batch (the CPU backend: augment_apply_pixels): the results of augment=cpu to the bit, for one worker
// or three, with the sources in each batch slot's buffers or in the RAM cache, on two CPU devices, under
// multi_scale and rect; the
// train_batch0 picture the same bytes; and on coco128's first 8
// images (long-side resizes from 640 px, mixup partners among them) when ../shared is there.
static void test_augment_gpu_same_bits(void) {
    if (make_data()) { CHECK(0, "no data"); return; }
    if (train_in_child("aug_ref", 1, "cpu")) { CHECK(0, "the augment=cpu run failed"); return; }
    same_as("aug_ref", "aug_w1", 1, "cpu", "augment=gpu", NULL);
    same_as("aug_ref", "aug_w3", 3, "cpu", "augment=gpu", NULL);
    same_as("aug_ref", "aug_w3_ram", 3, "cpu", "augment=gpu", "cache=ram");
    char x[P + 128], y[P + 128];                   // train_batch0.jpg: made on the host from the recipes
    snprintf(x, sizeof x, "%s/runs/aug_ref/train_batch0.jpg", root);
    snprintf(y, sizeof y, "%s/runs/aug_w3/train_batch0.jpg", root);
    CHECK(same_file(x, y), "train_batch0.jpg differs between augment=cpu and augment=gpu");
    // two CPU devices: each makes its micro-batch's pixels (core/devices/multi.c gives each its samples)
    if (train_in_child("aug_cpu2_ref", 1, "cpu:2")) CHECK(0, "the cpu:2 augment=cpu run failed");
    else same_as("aug_cpu2_ref", "aug_cpu2", 3, "cpu:2", "augment=gpu", NULL);
    // multi_scale (the samples made into the raw input, then resized) and rect (letterboxed batch shapes)
    static char *modes[] = { "multi_scale=1", "rect=1" };
    for (int k = 0; k < 2; k++) {
        char ref[32], name[32];
        snprintf(ref, sizeof ref, "aug_ref_%d", k), snprintf(name, sizeof name, "aug_mode_%d", k);
        child_more[0] = modes[k];
        int rc = train_in_child(ref, 1, "cpu");
        child_more[0] = NULL;
        if (rc) CHECK(0, "the %s augment=cpu run failed: status %d", modes[k], rc);
        else same_as(ref, name, 3, "cpu", modes[k], "augment=gpu");
    }
    static char coco[P + 64];
    NEED_COCO128(coco);
    child_data = coco;
    child_more[0] = "fraction=0.0625";
    int rc = train_in_child("coco_ref", 1, "cpu");
    child_more[0] = NULL;
    if (rc) CHECK(0, "the coco128 augment=cpu run failed: status %d", rc);
    else same_as("coco_ref", "coco_aug_w3", 3, "cpu", "fraction=0.0625", "augment=gpu");
    child_data = NULL;
}

// The GPU kernels add floats in a fixed order (integer atomics only, in the loss's assignment), and
// cuBLAS gives the same bits run to run on one GPU model: GPU runs repeat to the bit too.
static void test_same_seed_same_bits_gpu(void) {
#ifndef USE_CUDA
    SKIP("no CUDA in this build");
#else
    fflush(stdout);
    pid_t pid = fork();                            // count the GPUs in a child: see train_in_child
    if (pid == 0) { GpuInfo g[1]; _exit(gpu_list(g, 1) > 0); }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 1)
        SKIP("no GPU");
    if (make_data()) { CHECK(0, "no data"); return; }
    char engines[P + 32];
    snprintf(engines, sizeof engines, "%s/cudnn-engines.txt", root);
    test_switch(SW_CUDNN_ENGINES, engines);        // the children's file, new
    int a = train_in_child("gpu1", 1, "0"), b = train_in_child("gpu3", 3, "0");
    if (a || b) { CHECK(0, "a GPU run failed: status %d, %d", a, b); return; }
    compare("gpu1", "gpu3");
    // the gradient plan's fresh writes (cuDNN's beta 0, its bf16 input gradients copied, not added)
    // against every buffer zeroed and every write an addition (core/spec/grad_plan.c)
    if (same_with("YT_GRAD_FRESH=0", "gpu_zeroed", "gpu1")) return;
    // the weights rounded to bf16 once a pass against once per convolution (gpu/conv.cu), or only the 3x3
    // convs' per convolution
    if (same_with("YT_WEIGHTS_ONCE=0", "gpu_weights_per_conv", "gpu1")) return;
    if (same_with("YT_WEIGHTS_ONCE=unpermuted", "gpu_weights_permuted_per_conv", "gpu1")) return;
    // the fused forms (a RepConv's passes, a conv with the residual addition after it) against the launches
    // they replace (core/spec/model_run.c, gpu/bn.cu)
    if (same_with("YT_FUSE=0", "gpu_unfused", "gpu1")) return;
    // a residual input's gradient in its addition's buffer against one of its own (core/spec/grad_plan.c)
    if (same_with("YT_GRAD_ALIAS=0", "gpu_unaliased", "gpu1")) return;
    // the recorded steps' kernels launched programmatically against after their predecessors' ends
    // (gpu/graph_pdl.c): a kernel that read before it waited would race and, sooner or later, differ
    if (same_with("YT_PDL=0", "gpu_no_pdl", "gpu1")) return;
    // gradients stored as bf16 where they are bf16 values anyway (core/spec/grad_plan.c plan_grad_types) against
    // every gradient fp32
    if (same_with("YT_GRAD_BF16=0", "gpu_grads_fp32", "gpu1")) return;
    // augment=gpu: each step's pixels made on the GPU (gpu/augment.cu) from the workers' recipes, the workers
    // decoding (YT_NVJPEG=0: nvJPEG's pixels are its own, close to libjpeg-turbo's, not the same bytes)
    child_env = "YT_NVJPEG=0";
    same_as("gpu1", "gpu_augment", 1, "0", "augment=gpu", NULL);
    same_as("gpu1", "gpu_augment_w3_ram", 3, "0", "augment=gpu", "cache=ram");
    child_more[0] = "multi_scale=1";               // the samples made into the raw input, resized on the GPU
    int ms = train_in_child("gpu_ms", 1, "0");
    child_more[0] = NULL;
    if (ms) CHECK(0, "the GPU multi_scale run failed: status %d", ms);
    else same_as("gpu_ms", "gpu_ms_augment", 1, "0", "multi_scale=1", "augment=gpu");
    child_env = NULL;
    // and with the GPU decoding the JPEG files where it has nvJPEG: the run trains, twice to the same bits, and
    // again with the RAM cache keeping the files' bytes (every synthetic file is smaller than its tile, so the
    // cache keeps them all as bytes and nvJPEG decodes the same files: io/loader.c read_or_defer)
    child_more[0] = "augment=gpu";
    int d1 = train_in_child("gpu_decode", 1, "0"), d3 = train_in_child("gpu_decode_w3", 3, "0");
    child_more[0] = NULL;
    if (d1 || d3) CHECK(0, "an augment=gpu run decoding on the GPU failed: status %d, %d", d1, d3);
    else {
        compare("gpu_decode", "gpu_decode_w3");
        same_as("gpu_decode", "gpu_decode_w3_ram", 3, "0", "augment=gpu", "cache=ram");
    }
    // YOLO26-n: depthwise convs (fresh too), attention, the detached one-to-one head, MuSGD; YT_FUSE=0 for its
    // bottlenecks' residual additions
    child_cfg = "cfg/yolo26n.ini";
    int e = train_in_child("gpu26", 1, "0");
    if (e) CHECK(0, "a YOLO26-n GPU run failed: status %d", e);
    else if (!same_with("YT_GRAD_FRESH=0", "gpu26_zeroed", "gpu26") && !same_with("YT_FUSE=0", "gpu26_unfused", "gpu26"))
        same_with("YT_GRAD_BF16=0", "gpu26_grads_fp32", "gpu26");
    child_cfg = "cfg/t.ini";
    // augment=gpu on two devices (both on GPU 0: YT_TEST_SAME_GPU), each device's share of the next batch
    // prefetched (its tiles copied, its JPEGs decoded) on a thread of its own beside the step (core/train/train.c's
    // Prefetcher): one loader worker or three, the same bits
    child_env = "YT_TEST_SAME_GPU=1";
    child_more[0] = "augment=gpu";
    int m1 = train_in_child("gpu2_decode", 1, "0,0"), m3 = train_in_child("gpu2_decode_w3", 3, "0,0");
    child_more[0] = NULL;
    child_env = NULL;
    if (m1 || m3) CHECK(0, "an augment=gpu run on device=0,0 failed: status %d, %d", m1, m3);
    else compare("gpu2_decode", "gpu2_decode_w3");
    printf("# %s: %d engine choices\n", engines, file_lines(engines));
    test_switch(SW_CUDNN_ENGINES, NULL);
#endif
}

int main(void) {
    RUN(test_same_seed_same_bits);
    RUN(test_augment_gpu_same_bits);
    RUN(test_same_seed_same_bits_gpu);
    return test_summary();
}
