// device.h: one GPU's context (stream, cuBLAS handle, five arenas), CUDA error checking and the
// list of GPUs present. Includable from C; everything but gpu_list needs a CUDA build (USE_CUDA).
#pragma once
#include <stddef.h>
#ifdef USE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { int id; char name[256]; size_t mem_bytes; char bus_id[32]; int cc_major, cc_minor; } GpuInfo;

// Fill up to `max` entries; returns the number of GPUs visible (0 without CUDA or driver).
int gpu_list(GpuInfo *out, int max);

#ifdef USE_CUDA
#include "core/util.h"

// ---- checking (STYLE.md section 3): a failed CUDA or cuBLAS call is a bug or a dead GPU ------
#define checkCuda(e)   check_cuda_((e), #e, __FILE__, __LINE__)
#define checkCublas(e) check_cublas_((e), #e, __FILE__, __LINE__)
static inline void check_cuda_(cudaError_t e, const char *expr, const char *file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "%s:%d: %s: %s\n", file, line, expr, cudaGetErrorString(e));
    exit(EXIT_FAILURE);
}
static inline void check_cublas_(cublasStatus_t s, const char *expr, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "%s:%d: %s: %s\n", file, line, expr, cublasGetStatusString(s));
    exit(EXIT_FAILURE);
}
// After every kernel launch. A SYNC_DEBUG build waits for the kernel, so a fault names it.
#ifdef SYNC_DEBUG
#define checkLaunch(dev) do { checkCuda(cudaGetLastError()); \
                              checkCuda(cudaStreamSynchronize((dev)->stream)); } while (0)
#else
#define checkLaunch(dev) checkCuda(cudaGetLastError())
#endif

// ---- arenas and the device context (STYLE.md section 5) --------------------------------------
// Arena: one cudaMalloc, handed out front to back by arena_take. `name` appears in errors.
typedef struct { char *base; size_t size, used; const char *name; } Arena;

// GEMM precision of the conv twins: FP32 is the reference (TF32 off); TF32 uses the tensor cores'
// float32 mode; BF16 rounds both GEMM operands to bf16 and accumulates in fp32.
typedef enum { GPU_FP32, GPU_TF32, GPU_BF16 } GpuPrecision;

enum { ARENA_PARAMS, ARENA_GRADS, ARENA_OPTIM, ARENA_ACTS, ARENA_SCRATCH, ARENA_COUNT };

typedef struct {
    int id;                   // cudaSetDevice(id) once, on this device's own thread
    cudaStream_t stream;      // every op of this device runs on it
    cublasHandle_t blas;      // bound to `stream`, with its own preallocated workspace
    void *blas_workspace;
    Arena params, grads, optim, acts, scratch;
    GpuPrecision precision;   // conv GEMMs; GPU_FP32 after device_init
    size_t col_cap_floats;    // im2col chunk bound for convs (a default after device_init)
} Device;

// Select GPU `id`, create its stream and cuBLAS handle, and make one cudaMalloc per arena of
// arena_bytes[ARENA_PARAMS..ARENA_SCRATCH] bytes (0 is allowed). Returns -1 with a message naming
// the sizes and the free memory when they do not fit, or when the GPU cannot be used.
int device_init(Device *dev, int id, const size_t arena_bytes[ARENA_COUNT], Err *err);
// The fields device_init sets before allocating (precision, im2col bound), with no GPU work: a
// planner uses it to ask the op twins how much scratch they will need.
void device_defaults(Device *dev, int id);
void device_free(Device *dev);                 // undoes device_init, in reverse
void device_sync(Device *dev);                 // wait for everything queued on dev->stream
size_t device_mem_used(const Device *dev);     // bytes in use on the GPU (all processes), from the driver

// `bytes` from the arena at an `align`-byte boundary (a power of two). Running out means the
// memory plan was wrong: a bug, so it dies naming the arena and the numbers.
void *arena_take(Arena *a, size_t bytes, size_t align);
void arena_reset(Arena *a);                    // everything taken is free again

// cudaMalloc calls made by this module since the start, so a test can assert that a step loop
// allocates nothing.
size_t gpu_alloc_count(void);
#endif

#ifdef __cplusplus
}
#endif
