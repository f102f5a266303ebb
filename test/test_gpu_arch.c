// test_gpu_arch.c: what differs from one GPU to another (issue 22). batch=-1 is a value of the batch key
// (0 and -2 are not) and means 16 per CPU device; on a GPU it is the largest batch whose training plan
// fits in 90% of the free memory, and training starts at it. precision=bf16 (and tf32) is refused on a GPU
// of compute capability below 8.0 (YT_GPU_CC stands in for an older GPU's), naming precision=fp32, in
// the library and through ./yolotrain. The GPU parts skip without CUDA or a GPU.
#include "test/test.h"

#include <sys/wait.h>

#include "cfg/config.h"
#include "core/devices/infer_devices.h"
#include "core/devices/multi.h"
#include "core/train/train.h"
#ifdef USE_CUDA
#include "gpu/device.h"
#include "gpu/model_gpu.h"
#include "gpu/train_gpu.h"
#endif

static Config cfg;

static void test_batch_key(void) {
    Err err;
    char *ok[] = { "batch=-1" }, *zero[] = { "batch=0" }, *minus2[] = { "batch=-2" };
    CHECK(config_load("cfg/t.ini", 1, ok, &cfg, &err) == 0 && cfg.batch == -1, "batch=-1: %s", err.msg);
    CHECK(config_load("cfg/t.ini", 1, zero, &cfg, &err) < 0 && strstr(err.msg, "or -1 (auto"), "batch=0: %s", err.msg);
    CHECK(config_load("cfg/t.ini", 1, minus2, &cfg, &err) < 0 && strstr(err.msg, "out of range"), "batch=-2: %s",
          err.msg);
}

static void test_auto_batch_on_cpu(void) {
    Err err;
    char *args[] = { "batch=-1" };
    DeviceList devs;
    if (config_load("cfg/t.ini", 1, args, &cfg, &err) || parse_devices("cpu:2", 0, &devs, &err)) {
        CHECK(0, "%s", err.msg);
        return;
    }
    CHECK(infer_auto_batch(&cfg, &devs, &err) == 0 && cfg.batch == 2 * AUTO_BATCH_CPU, "2 CPU devices: batch %d",
          cfg.batch);
    cfg.batch = 8;
    CHECK(infer_auto_batch(&cfg, &devs, &err) == 0 && cfg.batch == 8, "batch=8 is left alone: %d", cfg.batch);
}

#ifdef USE_CUDA
static int have_gpu(void) {
    GpuInfo g[1];
    return gpu_list(g, 1) > 0;
}

static void test_bf16_needs_ampere(void) {
    if (!have_gpu()) SKIP("no GPU");
    Err err;
    CHECK(device_check(0, GPU_FP32, &err) == 0, "fp32 on GPU 0: %s", err.msg);
    GpuInfo g[1];
    gpu_list(g, 1);
    if (g[0].cc_major >= 8) CHECK(device_check(0, GPU_BF16, &err) == 0, "bf16 on GPU 0 (cc %d.%d): %s", g[0].cc_major,
                                  g[0].cc_minor, err.msg);
    test_switch(SW_GPU_CC, "7.5");
    CHECK(device_check(0, GPU_BF16, &err) < 0 && strstr(err.msg, "compute capability 7.5") &&
          strstr(err.msg, "precision=bf16") && strstr(err.msg, "use precision=fp32"), "bf16 at cc 7.5: %s", err.msg);
    CHECK(device_check(0, GPU_TF32, &err) < 0 && strstr(err.msg, "precision=tf32"), "tf32 at cc 7.5: %s", err.msg);
    CHECK(device_check(0, GPU_FP32, &err) == 0, "fp32 at cc 7.5: %s", err.msg);
    test_switch(SW_GPU_CC, NULL);
}

// The batch chosen fits (a trainer allocates its plan at it) and is the largest within 10% or so: the
// plan of 12% more images does not fit the same budget.
static void test_auto_batch_on_gpu(void) {
    if (!have_gpu()) SKIP("no GPU");
    Err err;
    char *args[] = { "batch=-1", "imgsz=640", "device=0" };
    if (config_load("cfg/s.ini", 3, args, &cfg, &err)) { CHECK(0, "%s", err.msg); return; }
    int gpus[1] = { 0 };
    double budget = AUTO_BATCH_FRACTION * (double)gpu_free_bytes(0);
    if (trainer_gpu_auto_batch(&cfg, gpus, 1, &err)) { CHECK(0, "%s", err.msg); return; }
    int b = cfg.batch;
    double at_b = (double)trainer_gpu_plan_bytes(&cfg, b), above = (double)trainer_gpu_plan_bytes(&cfg, b + b / 8 + 1);
    printf("    gelan-s at 640: batch %d, plan %.2f GiB of a %.2f GiB budget; %d images: %.2f GiB\n", b, at_b / (1 << 30),
           budget / (1 << 30), b + b / 8 + 1, above / (1 << 30));
    CHECK(b >= 1 && at_b <= budget, "batch %d: its plan %.0f bytes is over the budget %.0f", b, at_b, budget);
    CHECK(above > budget, "batch %d is not the largest: %d images plan %.0f bytes, within %.0f", b, b + b / 8 + 1, above,
          budget);
    Trainer t;
    int rc = trainer_init(&t, &cfg, 1, 0, &err);
    CHECK(rc == 0, "training at the auto batch %d: %s", b, err.msg);
    if (!rc) trainer_free(&t);
}

// Through ./yolotrain: the refusal is a clean exit (status 2) with the message.
static void test_bf16_refused_by_yolotrain(void) {
    if (!have_gpu()) SKIP("no GPU");
    struct stat st;
    if (stat("yolotrain", &st)) SKIP("no ./yolotrain (make builds it)");
    const char *dir = test_tmpdir("gpu-arch");
    char cmd[16384], log[4200];
    snprintf(log, sizeof log, "%s/messages.txt", dir);
    snprintf(cmd, sizeof cmd, "YT_GPU_CC=7.0 ./yolotrain cfg/t.ini device=0 precision=bf16 imgsz=64 batch=2 epochs=1 "
             "project=%s/runs >/dev/null 2>%s", dir, log);
    int s = system(cmd), rc = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
    size_t n;
    char *text = slurp(log, &n);
    CHECK(rc == 2, "status %d, want 2", rc);
    CHECK(text && strstr(text, "compute capability 7.0") && strstr(text, "use precision=fp32"), "messages: %s",
          text ? text : "(none)");
    free(text);
}
#else
static void test_bf16_needs_ampere(void) { SKIP("no CUDA in this build"); }
static void test_auto_batch_on_gpu(void) { SKIP("no CUDA in this build"); }
static void test_bf16_refused_by_yolotrain(void) { SKIP("no CUDA in this build"); }
#endif

int main(void) {
    RUN(test_batch_key);
    RUN(test_auto_batch_on_cpu);
    RUN(test_bf16_needs_ampere);
    RUN(test_auto_batch_on_gpu);
    RUN(test_bf16_refused_by_yolotrain);
    return test_summary();
}
