// device.cu: CUDA checks and GPU enumeration.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "gpu/device.h"
}

extern "C" int gpu_list(GpuInfo *out, int max) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    for (int i = 0; i < n && i < max; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) return i;
        out[i].id = i;
        snprintf(out[i].name, sizeof out[i].name, "%s", p.name);
        out[i].mem_bytes = p.totalGlobalMem;
        out[i].cc_major = p.major;
        out[i].cc_minor = p.minor;
        if (cudaDeviceGetPCIBusId(out[i].bus_id, sizeof out[i].bus_id, i) != cudaSuccess)
            snprintf(out[i].bus_id, sizeof out[i].bus_id, "?");
    }
    return n;
}
