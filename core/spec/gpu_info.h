// gpu_info.h: what a backend reports of each GPU present (Backend.dev.device_list): core/devices/infer_devices.c
// prints it when device= names one that is not there.
#pragma once
#include <stddef.h>

typedef struct GpuInfo { int id; char name[256]; size_t mem_bytes; char bus_id[32]; int cc_major, cc_minor; } GpuInfo;
