// model_gpu.h: a built model moved onto one GPU: its memory planned from the model (parameters,
// gradients, optimizer state, activations, op scratch), allocated once, and the state uploaded.
// Afterwards model_forward / model_backward run the CUDA twins (gpu/backend_gpu.c).
#pragma once
#include "core/spec/model.h"
#include "gpu/device.h"

#ifdef USE_CUDA
extern const Backend backend_gpu;

typedef struct {                 // bytes per arena, and the parts of the activation arena
    size_t arena[ARENA_COUNT];
    size_t acts, grads_of_acts, stats, temps;
    size_t augment;              // of the scratch arena: augmentation's (augment_scratch_bytes_gpu)
} GpuPlan;

// The memory a model needs on a GPU at its planned batch and size; the optimizer arena holds
// optim_states copies of the state (the master's momentum buffers, EMA and gradient receive
// buffer: 3; a replica: 0) and the optimizer's slot table.
GpuPlan model_gpu_plan(const Model *m, GpuPrecision prec, int optim_states);
// The precision [train] precision names: "fp32", "tf32", else bf16 (the config checked the value).
GpuPrecision gpu_precision(const char *name);
void    model_gpu_print_plan(const GpuPlan *p, int id, FILE *f);
// Allocate `plan` (NULL: model_gpu_plan(m, prec, 2)) on GPU `id` (refusing with the numbers and a suggestion when it does not fit), upload
// the state, and switch m to the GPU backend. dev must outlive m; model_free(m) leaves dev alone:
// free it with device_free after. Returns 0, or -1 with err.
int     model_to_gpu(Model *m, Device *dev, int id, const GpuPlan *plan, GpuPrecision prec, Err *err);
// Copy the state (weights and BN buffers) between the GPU and a host array of m->n_state floats.
void    model_gpu_download_state(const Model *m, float *host);
void    model_gpu_upload_state(Model *m, const float *host);
#endif
