// backends.c: the backends this build has. The GPU backend (gpu/backend_gpu.c) exists only in a CUDA
// build, so this is the one file of core/ that asks (`make layers` checks that no other does).
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/backend.h"
#include "core/base/switches.h"

#ifdef USE_CUDA
extern const Backend backend_gpu;

// The switches of the GPU's fused forms: YT_FUSE=0 gives its table with Backend.fused cleared, and the unit slot
// conv_bn_silu_forward_train is there only with YT_CONV_STATS=1 (correct, and slower: bench/RESULTS.md); without them the executor
// composes those forms from the ops, as it does for the CPU (to measure what they save; test_determinism compares
// YT_FUSE=0 runs to the byte, test_gpu_conv_bn the convolution with its statistics against the composition).
static Backend gpu_variant;
static void make_variant(void) {
    gpu_variant = backend_gpu;
    if (switch_is(SW_FUSE, "0")) gpu_variant.fused = (BackendFused){ 0 };
    if (!switch_is(SW_CONV_STATS, "1")) gpu_variant.unit.conv_bn_silu_forward_train = NULL;
}

const Backend *backend_gpu_get(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    if (!switch_is(SW_FUSE, "0") && switch_is(SW_CONV_STATS, "1")) return &backend_gpu;
    pthread_once(&once, make_variant);
    return &gpu_variant;
}
#else
const Backend *backend_gpu_get(void) { return NULL; }
#endif

#if defined(USE_CUDA) && defined(USE_CUDNN)
int backend_built_with_cudnn(void) { return 1; }
#else
int backend_built_with_cudnn(void) { return 0; }
#endif
