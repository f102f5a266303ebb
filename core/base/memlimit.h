// memlimit.h: how much memory a run may still take. MemAvailable alone is not it: a batch scheduler's
// `ulimit -v` (RLIMIT_AS) or a container's cgroup limit is often far lower, and a run that trusts
// MemAvailable then fails mid-step (or, in OpenBLAS's allocator, spins).
#pragma once
#include <stddef.h>

#include "core/base/util.h"

typedef struct {
    size_t      bytes;   // the least of the limits below; 0: none known
    const char *what;    // which one binds, for messages
} MemBudget;

// min(MemAvailable, cgroup limit - usage (v2 memory.max, v1 limit_in_bytes), RLIMIT_AS - VmSize).
// `reserved`: bytes this process has mapped but not touched yet (a model's arenas): VmSize holds
// them and the others do not, so the address-space room gets them back and one estimate of what the
// run needs compares with every limit alike.
MemBudget mem_budget(size_t reserved);

// OpenBLAS takes a buffer of about 128 MiB per thread on the first GEMM and retries forever when
// malloc fails. Fit its thread count to the budget (fewer threads, said once) and take the buffers
// now, with one GEMM; -1 with err when not even one thread's buffers fit. Later calls do nothing.
#define BLAS_BUFFER_BYTES ((size_t)(128u << 20) + 4096)   // measured: Debian/Ubuntu libopenblas 0.3
// The buffers are then mapped, so mem_budget() no longer counts them as room.
int blas_reserve(Err *err);
