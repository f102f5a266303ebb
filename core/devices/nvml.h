// nvml.h: GPU utilisation and memory in use from NVML, loaded at run time with dlopen, so nothing
// links against the driver's library and a machine without it just reports "n/a".
#pragma once

// Load libnvidia-ml.so.1 and initialise it once. Returns 1 when NVML answers, 0 when it is absent.
int  nvml_open(void);
// GPU with PCI bus id `bus_id` (as gpu_list gives it; CUDA and NVML number GPUs differently):
// utilisation in % over the driver's last sample period, and memory in use in bytes (either may be
// NULL). Returns 0, or -1 when NVML is absent or does not know the GPU.
int  nvml_sample(const char *bus_id, double *util_pct, double *mem_bytes);
void nvml_close(void);
