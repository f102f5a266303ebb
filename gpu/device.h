// device.h: one GPU's context (stream, cuBLAS handle, arenas, the input's copy stream and staging
// buffers), CUDA error checking ending in core/base/fatal.h's device_fatal, and the list of GPUs present.
// Includable from C; everything but gpu_list needs a CUDA build (USE_CUDA).
#pragma once
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#ifdef USE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

#include "core/spec/gpu_info.h"
#include "core/base/fatal.h"   // device_fatal, which checkCuda and checkCublas end in

// Fill up to `max` entries; returns the number of GPUs visible (0 without CUDA or driver).
int gpu_list(GpuInfo *out, int max);

#ifdef USE_CUDA
#include "core/base/util.h"

// CUDA 12.0 is the oldest toolkit the build is written for (cuBLAS's compute types, bf16 GEMMs,
// -arch=native); 12.x and 13.x use the same runtime calls here.
#if defined(CUDART_VERSION) && CUDART_VERSION < 12000
#error "yolotrain needs CUDA 12.0 or newer (nvcc --version); set NVCC= for a CPU-only build"
#endif

// ---- checking: a failed CUDA or cuBLAS call is a bug or a dead GPU (print the call, device_fatal) --
#define checkCuda(e)   check_cuda_((e), #e, __FILE__, __LINE__)
#define checkCublas(e) check_cublas_((e), #e, __FILE__, __LINE__)
static inline void check_cuda_(cudaError_t e, const char *expr, const char *file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "%s:%d: %s: %s\n", file, line, expr, cudaGetErrorString(e));
    device_fatal(cudaGetErrorString(e));
}
static inline void check_cublas_(cublasStatus_t s, const char *expr, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "%s:%d: %s: %s\n", file, line, expr, cublasGetStatusString(s));
    device_fatal(cublasGetStatusString(s));
}
// After every kernel launch. A SYNC_DEBUG build waits for the kernel, so a fault names it.
#ifdef SYNC_DEBUG
#define checkLaunch(dev) do { checkCuda(cudaGetLastError()); \
                              checkCuda(cudaStreamSynchronize((dev)->stream)); } while (0)
#else
#define checkLaunch(dev) checkCuda(cudaGetLastError())
#endif

// ---- arenas and the device context: one context and one arena set per device ----------------
// Arena: one cudaMalloc, handed out front to back by arena_take. `name` appears in errors.
typedef struct { char *base; size_t size, used; const char *name; } Arena;

// GEMM precision of the conv twins: FP32 is the reference (TF32 off); TF32 uses the tensor cores'
// float32 mode; BF16 rounds both GEMM operands to bf16 and accumulates in fp32.
typedef enum { GPU_FP32, GPU_TF32, GPU_BF16 } GpuPrecision;

// ARENA_INPUT holds the two uint8 staging buffers of the input (device_input_arena_bytes); a plan
// that gives it 0 bytes leaves the input to be staged in scratch, synchronously, as before. ARENA_AUG
// holds augment=gpu's two stages of the samples' decoded tiles (augment_stage_bytes_gpu); 0: none, the
// tiles go through scratch.
enum { ARENA_PARAMS, ARENA_GRADS, ARENA_OPTIM, ARENA_ACTS, ARENA_SCRATCH, ARENA_INPUT, ARENA_AUG, ARENA_COUNT };

// One uint8 batch share copied ahead of its step (gpu/input.cu): the copy runs on the device's copy
// stream while the previous step computes; the step's conversion waits for `copied` on the GPU.
typedef struct {
    uint8_t       *buf;       // (cap) device memory, in the input arena
    size_t         cap;
    const uint8_t *host;      // the host bytes it holds or is receiving; NULL when free
    size_t         n;         // bytes
    cudaEvent_t    copied;    // recorded on copy_stream after the copy
    cudaEvent_t    used;      // recorded on stream after the conversion that read buf
} InputStage;

// augment=gpu's like of it (gpu/augment.cu): the tiles of a run of samples, one copy of the span of the
// loader's tile arena they use, queued on copy_stream behind the previous step (augment_prefetch_gpu).
typedef struct {
    uint8_t         *buf;     // (cap) device memory, in the aug arena
    size_t           cap;
    const void      *s;       // the samples (AugSample *) whose tiles it holds or is receiving; NULL: free
    int              n;
    const uint8_t   *host;    // the span copied: host bytes [host, host + bytes), or (shared 0) the tiles packed
    size_t           bytes;
    int              shared;  // 1: the span as it lies in the arena; 0: the tiles packed in order
    int              decoded; // the deferred sources (AugSample.jpeg) decoded after r256(bytes)
    int              busy;    // a prefetch is filling it, or a step copies into it (under Device.aug_lock)
    cudaEvent_t      copied;  // recorded on copy_stream after the copy
    cudaEvent_t      used;    // recorded on stream after the kernel that read buf
} AugStage;

// Work a validation pass needs beyond the memory plan (decode + NMS, top-k, the losses' gathered maps) is
// made by the first pass and kept on the Device for the next ones, so later passes allocate nothing; so are
// SyncBatchNorm's sums (gpu/bn_sync.cu), grown when a BN of more channels comes.
enum { DEVICE_KEPT_NMS, DEVICE_KEPT_TOPK, DEVICE_KEPT_VLOSS, DEVICE_KEPT_BNSYNC, DEVICE_KEPT_NVJPEG, DEVICE_KEPT_NVJPEG_PRE, DEVICE_KEPT };

typedef struct {
    int id;                   // cudaSetDevice(id) once, on this device's own thread
    cudaStream_t stream;      // every op of this device runs on it
    cublasHandle_t blas;      // bound to `stream`, with its own preallocated workspace
    void *blas_workspace;
    Arena params, grads, optim, acts, scratch;
    GpuPrecision precision;   // conv GEMMs; GPU_FP32 after device_init
    size_t col_cap_floats;    // im2col chunk bound for convs (a default after device_init)
    Arena input;              // the staging buffers below
    cudaStream_t copy_stream; // host-to-device copies of the next batch, beside `stream`
    InputStage stage[2];      // the batch of the coming step and the one after it
    int stage_next;           // the stage the next prefetch fills (the older of the two)
    Arena aug;                // augment=gpu's tile stages below
    AugStage aug_stage[2];
    int aug_next;             // the aug stage the next prefetch fills
    pthread_mutex_t aug_lock; // the stages' bookkeeping: a prefetch may run on a thread beside the step's
    double *scal;             // (DEVICE_SCALARS) the step's small values on the device (core/trainer/trainer.h SC_*)
    void *cudnn;              // cuDNN handle and plans (gpu/cudnn_conv.h); NULL: convs use im2col + cuBLAS
    // Under GPU_BF16, the weights a pass reads rounded to bf16 once (conv_prepare_weights_gpu): wbf16
    // holds wbf16_n of them, from wbf16_src (0: none; each conv then rounds its own weights)
    void *wbf16;
    size_t wbf16_cap, wbf16_n;
    const float *wbf16_src;
    // The weights the GEMMs read permuted, (K, Cg, R, S) as (K, R, S, Cg) (3x3 convs with Cg > 1): wperm_n
    // segments {start, end, Cg, R·S} in floats of the state, by start; in the params arena (wperm) and on
    // the host (wperm_host). conv_prepare_weights_gpu writes their bf16 copies in that order.
    int *wperm, *wperm_host, wperm_n;
    void *kept[DEVICE_KEPT];  // work kept between passes (gpu/backend_gpu.c: NMS, top-k, losses; gpu/bn_sync.cu)
    void (*kept_free[DEVICE_KEPT])(void *);   // how device_free frees each
} Device;

enum { DEVICE_SCALARS = 256 };

// Select GPU `id`, create its streams and cuBLAS handle, and make one cudaMalloc per arena of
// arena_bytes[ARENA_PARAMS..ARENA_AUG] bytes (0 is allowed). Returns -1 with a message naming
// the sizes and the free memory when they do not fit, or when the GPU cannot be used.
// YT_GPU_RESERVE_GB=G (tests): first cudaMalloc G GiB that stay taken, so the plan's failure
// message can be seen on a large GPU.
int device_init(Device *dev, int id, const size_t arena_bytes[ARENA_COUNT], Err *err);
// The ARENA_INPUT bytes for uint8 batch shares of up to max_bytes (two staging buffers).
size_t device_input_arena_bytes(size_t max_bytes);
// The fields device_init sets before allocating (precision, im2col bound), with no GPU work: a
// planner uses it to ask the op twins how much scratch they will need.
void device_defaults(Device *dev, int id);
void device_free(Device *dev);                 // undoes device_init, in reverse
void device_sync(Device *dev);                 // wait for everything queued on dev->stream (a host wait)
// While a watch is set (gpu/comm_nccl.c sets one with its first NCCL communicator), device_sync polls
// instead of blocking: the stream asked every DEVICE_POLL_US, and about every DEVICE_WATCH_S the watch
// called with the seconds this wait has lasted (it ends the process when a collective cannot finish).
// NULL (every one-process run): a blocking cudaStreamSynchronize, as before.
enum { DEVICE_POLL_US = 100 };
#define DEVICE_WATCH_S 0.1
void device_set_wait_watch(void (*watch)(Device *dev, double waited_s));
// A kernel on dev->stream that spins, so the stream stops there as behind a collective whose peer died
// (YT_GPU_HANG_AT, the watchdog's tests), until the watch is removed (device_set_wait_watch(NULL): the
// communicators aborted, as ncclCommAbort ends NCCL's kernels) or about 120 s pass.
void device_inject_hang(Device *dev);
// Tests: `launches` kernels on `stream` (a cudaStream_t of dev's GPU) of `blocks` blocks of 128 threads, each block
// spinning `seconds`: work queued as a recorded step queues it.
void device_queue_spins(Device *dev, void *stream, int launches, int blocks, double seconds);
size_t device_mem_used(const Device *dev);     // bytes in use on the GPU (all processes), from the driver
size_t gpu_free_bytes(int id);                 // bytes free on GPU id now, from the driver (0: unusable)
// Whether GPU `id` can train or infer at `prec`: this build has code for its architecture (CUDA_ARCH in
// the Makefile; else the message names the make command), and bf16 or tf32 GEMMs need compute
// capability 8.0 (Ampere) or newer (else the message says to use precision=fp32). YT_GPU_CC=M.m (tests)
// stands in for the GPU's compute capability. Returns 0, or -1 with err.
int device_check(int id, GpuPrecision prec, Err *err);

// `bytes` from the arena at an `align`-byte boundary (a power of two). Running out means the
// memory plan was wrong: a bug, so it dies naming the arena and the numbers.
void *arena_take(Arena *a, size_t bytes, size_t align);
void arena_reset(Arena *a);                    // everything taken is free again

// cudaMalloc calls made by this module since the start, so a test can assert that a step loop
// allocates nothing.
size_t gpu_alloc_count(void);
// A counted cudaMalloc for work a caller can do without: NULL (the error cleared) when out of memory.
void *device_try_alloc(size_t bytes);
// A counted cudaMallocHost (page-locked host memory); dies when it fails.
void *device_host_alloc(size_t bytes);

// ---- the next batch's upload, overlapped with the current step (issue #6) ----------------------
// Queue the copy of n bytes of host memory (page-locked: gpu_host_pin; else the copy is slower
// but still right) into dev's next staging buffer on its copy stream, and return at once; the
// host bytes must stay unchanged until a step of dev has used them and synchronised. A later
// upload_u8_gpu(dev, dst, host, n) of the same bytes then waits for the copy on the GPU and only
// converts. No-op without an input arena or when n exceeds a staging buffer. Any thread; the
// calling thread's current device is left as it was.
void device_prefetch_u8(Device *dev, const uint8_t *host, size_t n);
// Page-lock a host buffer for every GPU (cudaHostRegister, portable) / undo it; 0 or -1. The
// signatures of io/loader.h's LoaderPinning, arg unused.
int  gpu_host_pin(void *p, size_t bytes, void *arg);
void gpu_host_unpin(void *p, void *arg);

// ---- failures -------------------------------------------------------------------------------
// 1 when dev's GPU still runs work: no sticky error (an illegal address, a launch failure) has
// ended its context. Makes no checked call, so a fatal hook can use it.
int  device_usable(Device *dev);
// YT_FAIL_CUDA (tests): a CUDA call on dev that fails through checkCuda: an allocation far too large
// (out of memory, not sticky), or with sticky = 1 a kernel that writes to a bad address, which ends
// the GPU context.
void device_inject_fault(Device *dev, int sticky);
#endif

#ifdef __cplusplus
}
#endif
