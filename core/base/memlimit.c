// memlimit.c: see memlimit.h.
#include "core/base/memlimit.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/base/switches.h"

static unsigned long long read_number(const char *path) {   // 0 when absent or "max"
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (f) { if (fscanf(f, "%llu", &v) != 1) v = 0; fclose(f); }
    return v;
}

// The cgroup's room: limit - usage, or 0 when there is no limit (or no cgroup memory controller).
static size_t cgroup_room(void) {
    char rel[1200] = "", path[1300];
    FILE *f = fopen("/proc/self/cgroup", "r");
    for (char line[1100]; f && fgets(line, sizeof line, f); )
        if (!strncmp(line, "0::", 3)) { snprintf(rel, sizeof rel, "%s", line + 3); rel[strcspn(rel, "\n")] = 0; }
    if (f) fclose(f);
    unsigned long long limit, used;
    snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", rel);          // v2
    limit = read_number(path);
    if (limit) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", rel);
        used = read_number(path);
    } else {                                                                   // v1 (namespaced mount)
        limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
        used = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    }
    if (!limit || limit >= (1ull << 60)) return 0;                            // "unlimited"
    return limit > used ? (size_t)(limit - used) : 1;
}

// RLIMIT_AS less the address space this process holds (VmSize), or 0 without a limit.
static size_t address_room(size_t reserved) {
    struct rlimit r;
    if (getrlimit(RLIMIT_AS, &r) || r.rlim_cur == RLIM_INFINITY) return 0;
    unsigned long long kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    for (char line[256]; f && fgets(line, sizeof line, f); )
        if (sscanf(line, "VmSize: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    unsigned long long used = kb * 1024 > reserved ? kb * 1024 - reserved : 0;
    return r.rlim_cur > used ? (size_t)(r.rlim_cur - used) : 1;
}

// MemAvailable, or what YT_MEM_AVAILABLE_MB stands in for it (tests of the CPU's memory plan)
static size_t available(void) {
    const char *fake = switch_str(SW_MEM_AVAILABLE_MB);
    char *end;
    double mb = fake ? strtod(fake, &end) : 0;
    return fake && end != fake && mb > 0 ? (size_t)(mb * 1e6) : mem_available_bytes();
}

MemBudget mem_budget(size_t reserved) {
    MemBudget b = { available(), "available memory (MemAvailable)" };
    size_t cg = cgroup_room(), as = address_room(reserved);
    if (cg && (!b.bytes || cg < b.bytes)) b = (MemBudget){ cg, "the cgroup's memory limit less its usage" };
    if (as && (!b.bytes || as < b.bytes)) b = (MemBudget){ as, "the address-space limit (ulimit -v) less what is mapped" };
    return b;
}

static int blas_done;

int blas_reserve(Err *err) {
    if (blas_done) return 0;
    int threads = openblas_get_num_threads();
    if (threads < 1) threads = 1;
    MemBudget b = mem_budget(0);
    size_t margin = 64u << 20;            // room left for what runs before the run's own check
    if (b.bytes) {
        size_t fit = b.bytes > margin ? (b.bytes - margin) / BLAS_BUFFER_BYTES : 0;   // buffers: threads + 1
        if (fit < 2)
            return err_set(err, "%s leaves %.0f MB, and OpenBLAS alone needs %.0f MB for its GEMM buffers; raise the "
                           "limit", b.what, b.bytes / 1e6, (2 * BLAS_BUFFER_BYTES + margin) / 1e6);
        if ((size_t)threads + 1 > fit) {
            printf("note: %s leaves %.0f MB: OpenBLAS runs on %d thread%s instead of %d (each takes a %.0f MB buffer)\n",
                   b.what, b.bytes / 1e6, (int)fit - 1, fit == 2 ? "" : "s", threads, BLAS_BUFFER_BYTES / 1e6);
            threads = (int)fit - 1;
            openblas_set_num_threads(threads);
        }
    }
    enum { N = 512 };                     // large enough that every thread takes part
    float *a = xcalloc((size_t)N * N, sizeof(float)), *c = xcalloc((size_t)N * N, sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, a, N, 0.0f, c, N);
    free(a); free(c);
    blas_done = 1;
    return 0;
}
