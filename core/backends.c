// backends.c: the backends this build has. The GPU backend (gpu/backend_gpu.c) exists only in a CUDA
// build, so this is the one file of core/ that asks (`make layers` checks that no other does).
#include "core/backend.h"

#ifdef USE_CUDA
extern const Backend backend_gpu;
const Backend *backend_gpu_get(void) { return &backend_gpu; }
#else
const Backend *backend_gpu_get(void) { return NULL; }
#endif

#if defined(USE_CUDA) && defined(USE_CUDNN)
int backend_built_with_cudnn(void) { return 1; }
#else
int backend_built_with_cudnn(void) { return 0; }
#endif
