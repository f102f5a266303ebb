// device.h: CUDA error checking and the list of GPUs present (name, memory, PCI bus id).
#pragma once
#include <stddef.h>

typedef struct { int id; char name[256]; size_t mem_bytes; char bus_id[32]; int cc_major, cc_minor; } GpuInfo;

// Fill up to `max` entries; returns the number of GPUs visible (0 without CUDA or driver).
int gpu_list(GpuInfo *out, int max);
