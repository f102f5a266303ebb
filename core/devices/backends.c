// backends.c: the backends this build has. The GPU backend (gpu/backend_gpu.c) exists only in a CUDA
// build, so this is the one file of core/ that asks (`make layers` checks that no other does).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/backend.h"
#include "core/base/switches.h"

#ifdef USE_CUDA
extern const Backend backend_gpu;

// The one switch of the GPU's fused forms: YT_FUSE=0 gives its table with Backend.fused cleared, so the
// executor composes them from the ops, as it does for the CPU (to measure what they save; test_determinism
// compares the two runs to the byte).
static Backend gpu_unfused;
static void unfuse(void) {
    gpu_unfused = backend_gpu;
    gpu_unfused.fused = (BackendFused){ 0 };
}

const Backend *backend_gpu_get(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (!switch_is(SW_FUSE, "0")) return &backend_gpu;
    pthread_once(&once, unfuse);
    return &gpu_unfused;
}
#else
const Backend *backend_gpu_get(void) { return NULL; }
#endif

#if defined(USE_CUDA) && defined(USE_CUDNN)
int backend_built_with_cudnn(void) { return 1; }
#else
int backend_built_with_cudnn(void) { return 0; }
#endif
