// nvml.c: the few NVML calls bench/balance and the per-device report need, resolved with dlsym
// from libnvidia-ml.so.1 (see nvml.h). NVML's types are declared here as its header lays them out.
#include "core/devices/nvml.h"

#include <dlfcn.h>
#include <stddef.h>

typedef void *NvmlDevice;
typedef struct { unsigned int gpu, memory; } NvmlUtilization;             // nvmlUtilization_t
typedef struct { unsigned long long total, free, used; } NvmlMemory;       // nvmlMemory_t (v1)

static struct {
    void *lib;
    int   tried, ok;
    int (*init)(void);
    int (*shutdown)(void);
    int (*by_bus)(const char *, NvmlDevice *);
    int (*util)(NvmlDevice, NvmlUtilization *);
    int (*mem)(NvmlDevice, NvmlMemory *);
} nv;

int nvml_open(void) {
    if (nv.tried) return nv.ok;
    nv.tried = 1;
    nv.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!nv.lib) return 0;
    // POSIX lets a data pointer from dlsym become a function pointer; the union says so to C11.
    union { void *p; int (*f0)(void); int (*f1)(const char *, NvmlDevice *); int (*f2)(NvmlDevice, NvmlUtilization *);
            int (*f3)(NvmlDevice, NvmlMemory *); } u;
    u.p = dlsym(nv.lib, "nvmlInit_v2");                       nv.init = u.f0;
    u.p = dlsym(nv.lib, "nvmlShutdown");                      nv.shutdown = u.f0;
    u.p = dlsym(nv.lib, "nvmlDeviceGetHandleByPciBusId_v2");  nv.by_bus = u.f1;
    u.p = dlsym(nv.lib, "nvmlDeviceGetUtilizationRates");     nv.util = u.f2;
    u.p = dlsym(nv.lib, "nvmlDeviceGetMemoryInfo");           nv.mem = u.f3;
    nv.ok = nv.init && nv.shutdown && nv.by_bus && nv.util && nv.mem && nv.init() == 0;
    if (!nv.ok) { dlclose(nv.lib); nv.lib = NULL; }
    return nv.ok;
}

int nvml_sample(const char *bus_id, double *util_pct, double *mem_bytes) {
    NvmlDevice d;
    NvmlUtilization u;
    NvmlMemory m;
    if (!nvml_open() || nv.by_bus(bus_id, &d) || nv.util(d, &u) || nv.mem(d, &m)) return -1;
    if (util_pct) *util_pct = u.gpu;
    if (mem_bytes) *mem_bytes = (double)m.used;
    return 0;
}

void nvml_close(void) {
    if (!nv.ok) return;
    nv.shutdown();
    dlclose(nv.lib);
    nv.lib = NULL;
    nv.ok = nv.tried = 0;
}
