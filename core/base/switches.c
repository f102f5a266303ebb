// switches.c: see switches.h. The table below is the list; each value is copied out of the environment
// once (the first switch_str of the process, or switches_reload), so every launch, recording and plan
// of a run sees the same values.
#include "core/base/switches.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>   // environ

static const SwitchInfo table[] = {
    [SW_FUSE] = { "YT_FUSE", SWITCH_VARIANT, "1, the fused forms",
        "0: a RepConv's BN, sum and SiLU passes and a conv's SiLU with the residual addition after it as the "
        "separate launches they replace (core/spec/model_run.c, gpu/backend_gpu.c)", "test_determinism" },
    [SW_CONV_STATS] = { "YT_CONV_STATS", SWITCH_VARIANT,
        "0, a 1x1 conv through cuDNN (or cuBLAS), then the BN statistics' pass over z",
        "1: a 1x1 conv's BN statistics from its own epilogue under bf16 (gpu/conv_bn.cu, core/devices/backends.c; "
        "off by default until its tests have run on a GPU)",
        "test_gpu_conv_bn" },
    [SW_GRAD_FRESH] = { "YT_GRAD_FRESH", SWITCH_VARIANT, "1, the gradient plan's fresh writes",
        "0: every gradient buffer zeroed and every write an addition (core/spec/grad_plan.c)",
        "test_determinism, test_grad_plan" },
    [SW_GRAD_ALIAS] = { "YT_GRAD_ALIAS", SWITCH_VARIANT, "1, a residual input's gradient in its addition's buffer",
        "0: each residual input's gradient in a buffer of its own (core/spec/grad_plan.c)",
        "test_determinism, test_grad_plan" },
    [SW_GRAD_BF16] = { "YT_GRAD_BF16", SWITCH_VARIANT, "1, gradients bf16-stored where they are bf16 values",
        "0: every activation gradient fp32 (core/spec/grad_plan.c)", "test_determinism, test_grad_plan" },
    [SW_WEIGHTS_ONCE] = { "YT_WEIGHTS_ONCE", SWITCH_VARIANT, "1, the weights rounded to bf16 once a pass",
        "0: each convolution's weights rounded at every call; unpermuted: only the 3x3 convolutions', in their "
        "columns' order (gpu/conv.cu)", "test_determinism" },
    [SW_PDL] = { "YT_PDL", SWITCH_VARIANT, "1, recorded kernels start before the one they follow ends (Hopper)",
        "0: each recorded kernel starts after its predecessor's end (gpu/graph_pdl.c)", "test_determinism" },
    [SW_GRAPHS] = { "YT_GRAPHS", SWITCH_VARIANT, "1, steps and evaluation forwards replayed as CUDA Graphs",
        "0: launch by launch (gpu/backend_gpu.c)", "test_gpu_train, test_procs" },
    [SW_NCCL_OVERLAP] = { "YT_NCCL_OVERLAP", SWITCH_VARIANT, "1, the sums over processes bucket by bucket beside the backward",
        "0 (in any process): after the backward, in one call (core/procs/procs.c)", "test_procs" },
    [SW_DRAW_SYNC] = { "YT_DRAW_SYNC", SWITCH_VARIANT, "0, pictures and plots drawn by the background drawer",
        "1: drawn on the run's own thread (core/eval/drawer.c)", "test_drawer, test_train_options" },
    [SW_CUDNN_TUNE] = { "YT_CUDNN_TUNE", SWITCH_VARIANT,
        "1, each new shape class's engine timed once per machine among the heuristics' first 8, the choice kept in the "
        "engine file (YT_CUDNN_ENGINES) that every later run reads, so runs sharing it give the same bits",
        "0: cuDNN's heuristics' first deterministic engine for every shape, untimed (gpu/cudnn_conv.c)",
        "test_gpu_ops, test_determinism" },
    [SW_GROUPED_DENSE] = { "YT_GROUPED_DENSE", SWITCH_VARIANT,
        "1, a grouped 1x1 conv of up to 4 groups (the yolov9 head's box branch) as the dense conv with its weight zero "
        "outside each group, the weight gradient in slices of pixels",
        "0: each group's own GEMMs (gpu/conv.cu)", "test_gpu_ops" },

    [SW_CUDNN_VERBOSE] = { "YT_CUDNN_VERBOSE", SWITCH_DIAGNOSTIC, "quiet",
        "set: each convolution shape's cuDNN plan (engine, workspace), or why it fell back, and each 1x1 conv + BN unit's "
        "path (gpu/conv_bn.cu), on stderr", "" },
    [SW_PDL_REPORT] = { "YT_PDL_REPORT", SWITCH_DIAGNOSTIC, "0, quiet",
        "1: per recording, its nodes, kernels and programmatic edges on stderr", "" },
    [SW_GPU_HANG_AT] = { "YT_GPU_HANG_AT", SWITCH_DIAGNOSTIC, "none",
        "STEP: the device's queue stops before that step (a spinning kernel), to try the NCCL watchdog by hand "
        "(core/train/faults.c; test_procs injects the same fault directly)", "" },
    [SW_PROFILE] = { "YT_PROFILE", SWITCH_DIAGNOSTIC, "none",
        "set: bench/step and bench/val time each node of a profiled pass (bench/step: the 15 slowest; all: every node)", "" },
    [SW_VERBOSE] = { "YT_VERBOSE", SWITCH_DIAGNOSTIC, "the failures only",
        "set: the tests print every compared tensor's share of its tolerance", "" },
    [SW_KEEP_TMP] = { "YT_KEEP_TMP", SWITCH_DIAGNOSTIC, "0, a passing test binary removes its scratch folders",
        "1: they stay, named (test/test.h)", "" },

    [SW_STOP_AFTER_STEPS] = { "YT_STOP_AFTER_STEPS", SWITCH_TEST_HOOK, "none",
        "N: the run stops after N steps as on Ctrl-C (core/train/faults.c)",
        "test_resume, test_splits, test_diskfull, test_tfevents, test_train_options, test_procs, test_progress" },
    [SW_SIGNAL_AT] = { "YT_SIGNAL_AT", SWITCH_TEST_HOOK, "none",
        "startup|val|checkpoint|agreed[:HUP|:INT]: SIGTERM (SIGHUP, SIGINT) at that point (core/train/faults.c)",
        "test_signals, test_procs, test_progress" },
    [SW_FAIL_CUDA] = { "YT_FAIL_CUDA", SWITCH_TEST_HOOK, "none",
        "STEP[:sticky]: a CUDA call fails at that step (core/train/faults.c)", "test_faults, test_gpu_input" },
    [SW_NAN_AT_STEP] = { "YT_NAN_AT_STEP", SWITCH_TEST_HOOK, "none",
        "STEP: a weight made NaN before that step (core/train/faults.c)", "test_hostile" },
    [SW_FAIL_DEVICE] = { "YT_FAIL_DEVICE", SWITCH_TEST_HOOK, "none",
        "K: device K of a multi-device run fails from its second step (core/train/faults.c)", "test_faults" },
    [SW_DISK_FREE_MB] = { "YT_DISK_FREE_MB", SWITCH_TEST_HOOK, "statvfs's free space",
        "N: N MB stand in for the free disk space (core/train/faults.c)", "test_diskfull" },
    [SW_GPU_CC] = { "YT_GPU_CC", SWITCH_TEST_HOOK, "the GPU's own",
        "MAJOR.MINOR: the compute capability the build check sees (gpu/device.cu)", "test_gpu_arch" },
    [SW_GPU_RESERVE_GB] = { "YT_GPU_RESERVE_GB", SWITCH_TEST_HOOK, "none",
        "G: G GiB of each GPU taken before the memory plan is checked (gpu/device.cu)", "test_gpu_input" },
    [SW_TEST_SAME_GPU] = { "YT_TEST_SAME_GPU", SWITCH_TEST_HOOK, "0, a GPU named twice is an error",
        "1: device=0,0 gives two devices on one GPU (cfg/devices.c)", "test_gpu_multi" },
    [SW_ONNX_RUNTIME] = { "YT_ONNX_RUNTIME", SWITCH_TEST_HOOK, "numpy, test_onnx runs the exports with its own evaluator",
        "ort: with onnxruntime", "test_onnx" },
    [SW_MEM_AVAILABLE_MB] = { "YT_MEM_AVAILABLE_MB", SWITCH_TEST_HOOK, "/proc/meminfo's MemAvailable",
        "N: N MB stand in for the available memory a CPU run plans for (core/base/memlimit.c)", "test_cpu_plan" },

    [SW_FONT] = { "YT_FONT", SWITCH_USER, "fontconfig, then the usual font paths",
        "FILE: that font first; none: the built-in 5x7 font (io/text.c)", "test_plot" },
    [SW_CONV] = { "YT_CONV", SWITCH_USER, "cuDNN 9 where found",
        "gemm: every convolution through im2col + cuBLAS, as without cuDNN (gpu/cudnn_conv.c)", "" },
    [SW_NCCL] = { "YT_NCCL", SWITCH_USER, "NCCL where found",
        "0: the GPUs' sums over processes through host memory and MPI, as without NCCL (gpu/comm_nccl.c)", "" },
    [SW_NVJPEG] = { "YT_NVJPEG", SWITCH_USER, "nvJPEG where found",
        "0: augment=gpu's JPEG files decoded by the loader's workers, as without nvJPEG (gpu/augment.cu)",
        "test_determinism" },
    [SW_NCCL_TIMEOUT] = { "YT_NCCL_TIMEOUT", SWITCH_USER, "600",
        "S: seconds one wait on the other processes may last before the run stops; 0: forever (gpu/comm_nccl.c)",
        "test_procs" },
    [SW_CUDNN_ENGINES] = { "YT_CUDNN_ENGINES", SWITCH_USER,
        "$XDG_CACHE_HOME/yolotrain/cudnn-engines.txt, else ~/.cache/yolotrain/cudnn-engines.txt",
        "FILE: the cuDNN engine choices kept there; none: no file, so nothing is timed (gpu/cudnn_conv.c)",
        "test_gpu_ops, test_determinism" },
    [SW_SHARED] = { "YT_SHARED", SWITCH_USER, "../shared",
        "DIR: the read-only fixtures and datasets the tests use (test/test.h)", "" },
};
_Static_assert(sizeof table / sizeof table[0] == SW_COUNT, "a table row for every Switch");

static const char *const kind_names[] = { "variant", "diagnostic", "test hook", "user setting" };
_Static_assert(sizeof kind_names / sizeof kind_names[0] == SWITCH_N_KINDS, "a name for every SwitchKind");

static char *values[SW_COUNT];   // copies: a later setenv leaves them as read
static pthread_once_t once = PTHREAD_ONCE_INIT;

// libc's strdup, not xstrdup: the first read may come inside a step, whose allocations a test counts.
static void read_all(void) {
    for (int s = 0; s < SW_COUNT; s++) {
        free(values[s]);
        const char *e = getenv(table[s].name);
        values[s] = e ? strdup(e) : NULL;
    }
}

const SwitchInfo *switch_info(Switch s) { return &table[s]; }
const char *switch_kind_name(SwitchKind k) { return kind_names[k]; }

const char *switch_str(Switch s) {
    pthread_once(&once, read_all);
    return values[s];
}

int switch_is(Switch s, const char *value) {
    const char *v = switch_str(s);
    return v && !strcmp(v, value);
}

void switches_reload(void) {
    pthread_once(&once, read_all);
    read_all();
}

// YT_ variables the program once read, and what took their place. Written without the prefix:
// test/switch_check.sh holds every whole YT_ name of the source to a row of the table above.
static const struct { const char *suffix, *instead; } retired[] = {
    { "VAL_CACHE_MB", "set the key val_cache_mb=M (megabytes of validation batches kept; 0: none)" },
    { "BN_SUMS", "its variant is bench/lost/bn_sums_old.patch" },
    { "BN_COMBINE", "its variant is bench/lost/bn_combine_warp.patch" },
    { "BN_LANE_PIXELS", "its variant is bench/lost/bn_lane_pixels.patch" },
    { "BN_FOLD_G", "its variant is bench/lost/bn_fold.patch" },
};

void switches_warn_unknown(FILE *f) {
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "YT_", 3)) continue;
        size_t n = strcspn(*e, "=");
        int known = 0;
        for (int s = 0; s < SW_COUNT && !known; s++) known = strlen(table[s].name) == n && !strncmp(table[s].name, *e, n);
        if (known) continue;
        const char *instead = NULL;
        for (size_t r = 0; r < sizeof retired / sizeof retired[0] && !instead; r++)
            if (strlen(retired[r].suffix) == n - 3 && !strncmp(*e + 3, retired[r].suffix, n - 3)) instead = retired[r].instead;
        if (instead) fprintf(f, "yolotrain: %.*s is no longer read: %s\n", (int)n, *e, instead);
        else fprintf(f, "yolotrain: %.*s is not a yolotrain switch and changes nothing (yolotrain switches lists them)\n",
                     (int)n, *e);
    }
}

void switches_print(FILE *f) {
    for (int k = 0; k < SWITCH_N_KINDS; k++) {
        fprintf(f, "%ss:\n", kind_names[k]);
        for (int s = 0; s < SW_COUNT; s++) {
            const SwitchInfo *i = &table[s];
            if (i->kind != (SwitchKind)k) continue;
            const char *v = switch_str((Switch)s);
            if (v) fprintf(f, "  %-20s = %s (default: %s)\n", i->name, v, i->unset);
            else fprintf(f, "  %-20s unset (default: %s)\n", i->name, i->unset);
            fprintf(f, "      %s\n", i->selects);
            if (i->test[0]) fprintf(f, "      pinned by %s\n", i->test);
        }
    }
}
