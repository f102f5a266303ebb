// gpu_harness.h: the setup every GPU test file shares. A file defines GPU_TESTS(X) (its tests), maybe
// CPU_TESTS(X) (tests that run in every build, first) and, for its device's arenas, GPU_ARENAS (an
// ARENA_COUNT initializer of bytes; default: none), then includes this after test/test.h:
// - without CUDA in the build, this is the file's main(): every test of GPU_TESTS is a skip ("no CUDA in
//   this build");
// - with CUDA and GPU_OWN_DEVICE defined (a file that makes its own device), nothing more;
// - with CUDA otherwise, `dev` is GPU 0's context, made at the first NEED_GPU(), the first line of every
//   test (a machine without a GPU skips the test; the acts and optim arenas start empty), and GPU_MAIN()
//   after the tests is the file's main: every test (or those named on the command line), then the
//   device freed.
#pragma once

#ifndef CPU_TESTS
#define CPU_TESTS(X)
#endif
#define RUN_CPU(fn) RUN(fn);

#ifndef USE_CUDA
static void skip_no_cuda(void) { SKIP("no CUDA in this build"); }
#define RUN_SKIPPED(fn) test_run_(#fn, skip_no_cuda);
int main(void) {
    CPU_TESTS(RUN_CPU)
    GPU_TESTS(RUN_SKIPPED)
    return test_summary();
}
#elif !defined(GPU_OWN_DEVICE)
#include "gpu/device.h"

#ifndef GPU_ARENAS
#define GPU_ARENAS { 0 }
#endif

static Device dev;
static int dev_state;   // 0 untried, 1 ready, -1 no GPU

static int gpu_ready(void) {
    if (dev_state) return dev_state > 0;
    GpuInfo info;
    Err err;
    size_t bytes[ARENA_COUNT] = GPU_ARENAS;
    dev_state = gpu_list(&info, 1) > 0 && device_init(&dev, 0, bytes, &err) == 0 ? 1 : -1;
    return dev_state > 0;
}
#define NEED_GPU() do { if (!gpu_ready()) SKIP("no GPU"); arena_reset(&dev.acts); arena_reset(&dev.optim); } while (0)

// no arguments: every test; else only the tests named (to run a few under compute-sanitizer)
static int gpu_wanted(const char *name, int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(name, argv[i])) return 1;
    return argc < 2;
}
#define RUN_WANTED(fn) if (gpu_wanted(#fn, argc, argv)) RUN(fn);
// The file's main, after its tests: GPU_MAIN()
#define GPU_MAIN()                                   \
    int main(int argc, char **argv) {                \
        CPU_TESTS(RUN_WANTED)                        \
        GPU_TESTS(RUN_WANTED)                        \
        if (dev_state > 0) device_free(&dev);        \
        return test_summary();                       \
    }
#endif

#ifdef USE_CUDA
#include <cuda_runtime.h>
// The tests' plain cudaMemcpy runs on the legacy stream, which the device's non-blocking streams are not
// ordered with, and a pageable upload may still be in flight when it returns: each copy here waits for
// the work queued before it and is complete when it returns, so a kernel never reads an unfinished
// upload and a download never reads a map a kernel is still writing. (Seen: tests run side by side on
// one GPU read stale inputs.)
static inline cudaError_t harness_memcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(dst, src, bytes, kind);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    return e;
}
#define cudaMemcpy harness_memcpy
#endif
