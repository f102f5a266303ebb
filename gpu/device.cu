// device.cu: GPU enumeration and the per-device context: streams, cuBLAS handle and the arenas,
// each one cudaMalloc made at init (plan, then allocate: a step allocates nothing); the input's staging
// buffers and their prefetch; host page-locking; the failure probes of a fatal hook.
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/base/switches.h"
#include "gpu/cudnn_conv.h"
#include "gpu/device.h"
#include "gpu/pdl.cuh"

enum { BLAS_WORKSPACE_BYTES = 32 << 20 };   // cuBLAS's recommendation for Hopper
static const size_t IM2COL_CAP_FLOATS = (size_t)1 << 25;   // 128 MiB of fp32 im2col rows

static size_t n_mallocs;   // process-wide count of cudaMalloc calls, for gpu_alloc_count

extern "C" size_t gpu_alloc_count(void) { return n_mallocs; }

static cudaError_t counted_malloc(void **p, size_t bytes) {
    n_mallocs++;
    return cudaMalloc(p, bytes);
}

extern "C" void *device_try_alloc(size_t bytes) {
    void *p = NULL;
    if (counted_malloc(&p, bytes) == cudaSuccess) return p;
    cudaGetLastError();                       // out of memory is not sticky: clear it
    return NULL;
}

extern "C" void *device_host_alloc(size_t bytes) {
    void *p = NULL;
    n_mallocs++;
    checkCuda(cudaMallocHost(&p, bytes ? bytes : 1));
    return p;
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

static Arena *arena_of(Device *dev, int k) {
    Arena *all[ARENA_COUNT] = { &dev->params, &dev->grads, &dev->optim, &dev->acts, &dev->scratch, &dev->input, &dev->aug };
    return all[k];
}

static const char *ARENA_NAMES[ARENA_COUNT] = { "params", "grads", "optim", "acts", "scratch", "input", "augment" };

static double mib(size_t bytes) { return bytes / 1048576.0; }

// The planned arenas must fit in what the GPU has free now; say by how much they do not.
static int check_fits(int id, const size_t bytes[ARENA_COUNT], Err *err) {
    size_t free_b = 0, total_b = 0, want = BLAS_WORKSPACE_BYTES;
    for (int k = 0; k < ARENA_COUNT; k++) want += bytes[k];
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return err_set(err, "GPU %d: cannot read its free memory; check the driver with nvidia-smi",
                       id);
    }
    if (want <= free_b) return 0;
    return err_set(err, "out of GPU memory on GPU %d: the plan needs %.0f MiB (params %.0f, grads "
                   "%.0f, optim %.0f, acts %.0f, scratch %.0f, input %.0f, augment %.0f, cuBLAS %.0f) but %.0f of "
                   "%.0f MiB are free; lower batch or imgsz", id, mib(want), mib(bytes[0]),
                   mib(bytes[1]), mib(bytes[2]), mib(bytes[3]), mib(bytes[4]), mib(bytes[5]), mib(bytes[6]),
                   mib(BLAS_WORKSPACE_BYTES), mib(free_b), mib(total_b));
}

// YT_GPU_RESERVE_GB=G (tests): G GiB of GPU `id` taken before the plan is checked, and kept until
// the process ends, as another process's memory would be. Once per GPU.
static void reserve_for_test(int id) {
    static void *reserved[64];
    const char *g = switch_str(SW_GPU_RESERVE_GB);
    if (!g || id < 0 || id >= 64 || reserved[id]) return;
    size_t bytes = (size_t)(atof(g) * 1073741824.0);
    if (bytes && cudaMalloc(&reserved[id], bytes) != cudaSuccess) cudaGetLastError();   // too much: none
}

// The input arena as two staging buffers, with the copy stream and the events that order them; the aug
// arena likewise.
static void input_init(Device *dev) {
    checkCuda(cudaStreamCreateWithFlags(&dev->copy_stream, cudaStreamNonBlocking));
    pthread_mutex_init(&dev->aug_lock, NULL);
    size_t cap = (dev->input.size / 2) & ~(size_t)255, aug_cap = (dev->aug.size / 2) & ~(size_t)255;
    for (int k = 0; k < 2; k++) {
        InputStage *s = &dev->stage[k];
        s->cap = cap;
        s->buf = cap ? (uint8_t *)arena_take(&dev->input, cap, 256) : NULL;
        checkCuda(cudaEventCreateWithFlags(&s->copied, cudaEventDisableTiming));
        checkCuda(cudaEventCreateWithFlags(&s->used, cudaEventDisableTiming));
        AugStage *a = &dev->aug_stage[k];
        a->cap = aug_cap;
        a->buf = aug_cap ? (uint8_t *)arena_take(&dev->aug, aug_cap, 256) : NULL;
        checkCuda(cudaEventCreateWithFlags(&a->copied, cudaEventDisableTiming));
        checkCuda(cudaEventCreateWithFlags(&a->used, cudaEventDisableTiming));
    }
}

static void input_free(Device *dev) {
    checkCuda(cudaStreamSynchronize(dev->copy_stream));   // no copy may still read host memory
    for (int k = 0; k < 2; k++) {
        checkCuda(cudaEventDestroy(dev->stage[k].copied));
        checkCuda(cudaEventDestroy(dev->stage[k].used));
        checkCuda(cudaEventDestroy(dev->aug_stage[k].copied));
        checkCuda(cudaEventDestroy(dev->aug_stage[k].used));
    }
    checkCuda(cudaStreamDestroy(dev->copy_stream));
    pthread_mutex_destroy(&dev->aug_lock);
}

extern "C" size_t device_input_arena_bytes(size_t max_bytes) {
    return max_bytes ? 2 * ((max_bytes + 255) & ~(size_t)255) : 0;
}

extern "C" void device_defaults(Device *dev, int id) {
    memset(dev, 0, sizeof *dev);
    dev->id = id;
    dev->precision = GPU_FP32;
    dev->col_cap_floats = IM2COL_CAP_FLOATS;
}

// CUDA feeds a process's streams to a GPU through CUDA_DEVICE_MAX_CONNECTIONS hardware queues, 8 unless set,
// shared round robin as streams are made; work on a stream that shares a queue with another waits behind all of
// that stream's queued launches. A step replayed as a CUDA graph queues hundreds, so the next batch's nvJPEG
// decode, beside it on streams of its own, waited for the whole step (bench/RESULTS.md, issue 37). 32, the most
// CUDA takes, set before the process's first CUDA call; a value the user set stays (8 gives the old behaviour).
__attribute__((constructor)) static void more_connections(void) { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0); }

extern "C" int device_init(Device *dev, int id, const size_t arena_bytes[ARENA_COUNT], Err *err) {
    device_defaults(dev, id);
    if (cudaSetDevice(id) != cudaSuccess) {
        cudaGetLastError();
        return err_set(err, "GPU %d cannot be used; list the GPUs with nvidia-smi and pick one", id);
    }
    reserve_for_test(id);
    if (check_fits(id, arena_bytes, err)) return -1;
    checkCuda(cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking));
    checkCublas(cublasCreate(&dev->blas));
    checkCublas(cublasSetStream(dev->blas, dev->stream));
    // Our own workspace, so cuBLAS never allocates inside the step loop.
    checkCuda(counted_malloc(&dev->blas_workspace, BLAS_WORKSPACE_BYTES));
    checkCublas(cublasSetWorkspace(dev->blas, dev->blas_workspace, BLAS_WORKSPACE_BYTES));
    for (int k = 0; k < ARENA_COUNT; k++) {
        Arena *a = arena_of(dev, k);
        a->name = ARENA_NAMES[k];
        a->size = arena_bytes[k];
        if (a->size && counted_malloc((void **)&a->base, a->size) != cudaSuccess) {
            cudaGetLastError();
            err_set(err, "out of GPU memory on GPU %d allocating the %s arena (%.0f MiB); lower "
                    "batch or imgsz", id, a->name, mib(a->size));
            device_free(dev);
            return -1;
        }
    }
    checkCuda(counted_malloc((void **)&dev->scal, DEVICE_SCALARS * sizeof(double)));
    checkCuda(cudaMemset(dev->scal, 0, DEVICE_SCALARS * sizeof(double)));
    input_init(dev);
    dev->cudnn = cudnn_conv_ctx_new(dev->stream);
    return 0;
}

extern "C" void device_free(Device *dev) {
    if (!dev->stream) return;
    checkCuda(cudaSetDevice(dev->id));
    checkCuda(cudaStreamSynchronize(dev->stream));
    if (dev->copy_stream) checkCuda(cudaStreamSynchronize(dev->copy_stream));   // a prefetch's decode may still run
    for (int k = 0; k < DEVICE_KEPT; k++)
        if (dev->kept[k]) dev->kept_free[k](dev->kept[k]);
    if (dev->copy_stream) input_free(dev);
    cudnn_conv_ctx_free(dev->cudnn);
    for (int k = ARENA_COUNT - 1; k >= 0; k--) {
        Arena *a = arena_of(dev, k);
        if (a->base) checkCuda(cudaFree(a->base));
        a->base = NULL;
        a->size = a->used = 0;
    }
    if (dev->scal) checkCuda(cudaFree(dev->scal));
    free(dev->wperm_host);
    checkCublas(cublasDestroy(dev->blas));
    checkCuda(cudaFree(dev->blas_workspace));
    checkCuda(cudaStreamDestroy(dev->stream));
    memset(dev, 0, sizeof *dev);
}

static void (*volatile wait_watch)(Device *, double);

static volatile int *hang_release;

// The watch removed (the communicators aborted, which ends NCCL's kernels) also ends an injected hang's.
extern "C" void device_set_wait_watch(void (*watch)(Device *, double)) {
    wait_watch = watch;
    if (!watch && hang_release) *hang_release = 1;
}

extern "C" void device_sync(Device *dev) {
    host_wait_note();
    void (*watch)(Device *, double) = wait_watch;
    if (!watch) {
        checkCuda(cudaStreamSynchronize(dev->stream));
        return;
    }
    double t0 = now_seconds(), next = t0 + DEVICE_WATCH_S;
    const struct timespec nap = { 0, DEVICE_POLL_US * 1000L };
    for (;;) {
        cudaError_t e = cudaStreamQuery(dev->stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) checkCuda(e);
        nanosleep(&nap, NULL);
        double t = now_seconds();
        if (t >= next) {
            watch(dev, t - t0);
            next = t + DEVICE_WATCH_S;
        }
    }
}

extern "C" void *arena_take(Arena *a, size_t bytes, size_t align) {
    if (align == 0 || (align & (align - 1)))
        die("arena_take(%s): alignment %zu is not a power of two", a->name, align);
    size_t start = (a->used + align - 1) & ~(align - 1);
    if (start > a->size || bytes > a->size - start)
        die("arena %s: %zu bytes asked with %zu of %zu used; the memory plan is wrong", a->name,
            bytes, a->used, a->size);
    a->used = start + bytes;
    return a->base + start;
}

extern "C" void arena_reset(Arena *a) { a->used = 0; }

extern "C" size_t gpu_free_bytes(int id) {
    size_t free_b = 0, total = 0;
    int cur = 0;
    if (cudaGetDevice(&cur) != cudaSuccess || cudaSetDevice(id) != cudaSuccess ||
        (reserve_for_test(id), cudaMemGetInfo(&free_b, &total)) != cudaSuccess) {
        cudaGetLastError();
        free_b = 0;
    }
    cudaSetDevice(cur);
    return free_b;
}

// An empty kernel: whether it has an image for the GPU is whether the build has code for it.
__global__ void arch_probe_kernel(void) { pdl_entry(); }

extern "C" int device_check(int id, GpuPrecision prec, Err *err) {
    cudaDeviceProp p;
    int cur = 0;
    if (cudaGetDevice(&cur) != cudaSuccess || cudaGetDeviceProperties(&p, id) != cudaSuccess || cudaSetDevice(id) != cudaSuccess) {
        cudaGetLastError();
        return err_set(err, "GPU %d cannot be used; list the GPUs with nvidia-smi and pick one", id);
    }
    int major = p.major, minor = p.minor;
    const char *fake = switch_str(SW_GPU_CC);
    if (fake && sscanf(fake, "%d.%d", &major, &minor) != 2) major = p.major, minor = p.minor;
    cudaFuncAttributes a;
    int has_code = cudaFuncGetAttributes(&a, arch_probe_kernel) == cudaSuccess;
    cudaGetLastError();
    cudaSetDevice(cur);
    if (!has_code)
        return err_set(err, "GPU %d (%s, compute capability %d.%d): this yolotrain has no code for it; rebuild with "
                       "make clean && make CUDA_ARCH=native (or CUDA_ARCH=%d%d)", id, p.name, p.major, p.minor, p.major,
                       p.minor);
    if (prec != GPU_FP32 && major < 8)
        return err_set(err, "GPU %d (%s) has compute capability %d.%d: precision=%s needs bf16/tf32 tensor cores, "
                       "compute capability 8.0 (Ampere) or newer; use precision=fp32", id, p.name, major, minor,
                       prec == GPU_BF16 ? "bf16" : "tf32");
    return 0;
}

extern "C" size_t device_mem_used(const Device *dev) {
    size_t free_b = 0, total = 0;
    checkCuda(cudaSetDevice(dev->id));
    checkCuda(cudaMemGetInfo(&free_b, &total));
    return total - free_b;
}

// ---- the next batch's upload ---------------------------------------------------------------

extern "C" void device_prefetch_u8(Device *dev, const uint8_t *host, size_t n) {
    InputStage *s = &dev->stage[dev->stage_next];
    if (!s->buf || !n || n > s->cap) return;
    int cur;
    checkCuda(cudaGetDevice(&cur));
    checkCuda(cudaSetDevice(dev->id));
    checkCuda(cudaStreamWaitEvent(dev->copy_stream, s->used, 0));   // the last step's conversion read buf
    checkCuda(cudaMemcpyAsync(s->buf, host, n, cudaMemcpyHostToDevice, dev->copy_stream));
    checkCuda(cudaEventRecord(s->copied, dev->copy_stream));
    checkCuda(cudaSetDevice(cur));
    s->host = host;
    s->n = n;
    dev->stage_next ^= 1;                          // now the stage of the coming step: free once it ran
}

extern "C" int gpu_host_pin(void *p, size_t bytes, void *arg) {
    if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) == cudaSuccess) return 0;
    cudaGetLastError();                            // pageable memory still works, only slower
    return -1;
}

extern "C" void gpu_host_unpin(void *p, void *arg) {
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

// ---- failures -------------------------------------------------------------------------------

extern "C" int device_usable(Device *dev) {
    if (cudaSetDevice(dev->id) != cudaSuccess) return 0;
    cudaGetLastError();                            // clears a pending error that is not sticky
    return cudaDeviceSynchronize() == cudaSuccess && cudaGetLastError() == cudaSuccess;
}

__global__ void fault_kernel(int *bad) { pdl_entry(); *bad = 1; }

// Spins until *release (host memory) is set, or about 120 s of the GPU's clock pass, so a test that goes
// wrong still frees the GPU.
__global__ void hang_kernel(volatile int *release) {
    pdl_entry();
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (!*release && t - t0 < 120000000000ull);
}

extern "C" void device_inject_hang(Device *dev) {
    checkCuda(cudaSetDevice(dev->id));
    if (!hang_release) {
        void *p = NULL;
        checkCuda(cudaHostAlloc(&p, sizeof(int), cudaHostAllocMapped));
        hang_release = (volatile int *)p;
    }
    *hang_release = 0;
    int *d = NULL;
    checkCuda(cudaHostGetDevicePointer((void **)&d, (void *)hang_release, 0));
    hang_kernel<<<1, 1, 0, dev->stream>>>(d);
    checkLaunch(dev);
}

__global__ void spin_kernel(unsigned long long ns) {
    pdl_entry();
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    while (t - t0 < ns);
}

extern "C" void device_queue_spins(Device *dev, void *stream, int launches, int blocks, double seconds) {
    checkCuda(cudaSetDevice(dev->id));
    for (int i = 0; i < launches; i++) {
        spin_kernel<<<blocks, 128, 0, (cudaStream_t)stream>>>((unsigned long long)(seconds * 1e9));
        checkLaunch(dev);
    }
}

extern "C" void device_inject_fault(Device *dev, int sticky) {
    checkCuda(cudaSetDevice(dev->id));
    if (sticky) {
        fault_kernel<<<1, 1, 0, dev->stream>>>((int *)16);   // an illegal address ends the context
        checkCuda(cudaStreamSynchronize(dev->stream));
    }
    void *p = NULL;
    checkCuda(cudaMalloc(&p, (size_t)1 << 62));   // 4 EiB: an out-of-memory error, not sticky
    cudaFree(p);
}
