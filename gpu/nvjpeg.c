// nvjpeg.c: gpu/nvjpeg.h through nvJPEG's C API, reached with dlopen/dlsym. The few declarations it needs
// are written here (nvjpeg.h's C ABI as NVIDIA documents it), so no header is needed to build.
// The hardware backend decodes only in batches (nvjpegDecodeBatched), one call per batch of the size it was
// initialised for; images it does not support, and every image when it does not open, go to a GPU-hybrid
// handle one by one (nvjpegDecode). Both write interleaved RGB (NVJPEG_OUTPUT_RGBI) at a pitch of 3w.
#include "gpu/nvjpeg.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/util.h"

typedef int nvjpegStatus_t;                       // 0: NVJPEG_STATUS_SUCCESS
typedef struct nvjpegHandle *nvjpegHandle_t;
typedef struct nvjpegJpegState *nvjpegJpegState_t;
typedef struct nvjpegJpegStream *nvjpegJpegStream_t;
typedef struct { unsigned char *channel[4]; size_t pitch[4]; } nvjpegImage_t;
enum { NVJPEG_BACKEND_GPU_HYBRID = 2, NVJPEG_BACKEND_HARDWARE = 3 };
enum { NVJPEG_OUTPUT_RGBI = 5 };

static struct {
    nvjpegStatus_t (*create_ex)(int backend, void *dev_alloc, void *pinned_alloc, unsigned flags, nvjpegHandle_t *h);
    nvjpegStatus_t (*destroy)(nvjpegHandle_t);
    nvjpegStatus_t (*state_create)(nvjpegHandle_t, nvjpegJpegState_t *);
    nvjpegStatus_t (*state_destroy)(nvjpegJpegState_t);
    nvjpegStatus_t (*image_info)(nvjpegHandle_t, const unsigned char *, size_t, int *n_comp, int *subsampling,
                                 int *widths, int *heights);
    nvjpegStatus_t (*decode)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *, size_t, int format,
                             nvjpegImage_t *, cudaStream_t);
    nvjpegStatus_t (*batched_init)(nvjpegHandle_t, nvjpegJpegState_t, int batch, int max_cpu_threads, int format);
    nvjpegStatus_t (*batched)(nvjpegHandle_t, nvjpegJpegState_t, const unsigned char *const *, const size_t *,
                              nvjpegImage_t *, cudaStream_t);
    nvjpegStatus_t (*stream_create)(nvjpegHandle_t, nvjpegJpegStream_t *);
    nvjpegStatus_t (*stream_destroy)(nvjpegJpegStream_t);
    nvjpegStatus_t (*stream_parse)(nvjpegHandle_t, const unsigned char *, size_t, int save_metadata, int save_stream,
                                   nvjpegJpegStream_t);
    nvjpegStatus_t (*batched_supported)(nvjpegHandle_t, nvjpegJpegStream_t, int *is_supported);
} fn;

static int loaded = -1;                           // -1: not tried; 1: opened; 0: absent
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void) {
    static const char *const names[] = { "libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so" };
    void *h = NULL;
    for (int i = 0; i < 3 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    loaded = 0;
    if (!h) return;
    *(void **)&fn.create_ex = dlsym(h, "nvjpegCreateEx");
    *(void **)&fn.destroy = dlsym(h, "nvjpegDestroy");
    *(void **)&fn.state_create = dlsym(h, "nvjpegJpegStateCreate");
    *(void **)&fn.state_destroy = dlsym(h, "nvjpegJpegStateDestroy");
    *(void **)&fn.image_info = dlsym(h, "nvjpegGetImageInfo");
    *(void **)&fn.decode = dlsym(h, "nvjpegDecode");
    *(void **)&fn.batched_init = dlsym(h, "nvjpegDecodeBatchedInitialize");
    *(void **)&fn.batched = dlsym(h, "nvjpegDecodeBatched");
    *(void **)&fn.stream_create = dlsym(h, "nvjpegJpegStreamCreate");
    *(void **)&fn.stream_destroy = dlsym(h, "nvjpegJpegStreamDestroy");
    *(void **)&fn.stream_parse = dlsym(h, "nvjpegJpegStreamParse");
    *(void **)&fn.batched_supported = dlsym(h, "nvjpegDecodeBatchedSupported");
    loaded = fn.create_ex && fn.destroy && fn.state_create && fn.state_destroy && fn.image_info && fn.decode &&
             fn.batched_init && fn.batched && fn.stream_create && fn.stream_destroy && fn.stream_parse &&
             fn.batched_supported;
}

struct NvJpeg {
    nvjpegHandle_t     hw, gpu;               // hardware (NULL when it did not open) and GPU-hybrid handles
    nvjpegJpegState_t  hw_state, gpu_state;
    nvjpegJpegStream_t probe;                 // parses a file for batched_supported
    int                hw_batch;              // the batch size hw_state was initialised for (0: none)
    // per call: which images go to the hardware, their pointers and lengths, their destinations
    int               *to_hw;
    const uint8_t    **hw_data;
    size_t            *hw_len;
    nvjpegImage_t     *hw_out;
    int                cap;
};

void nvjpeg_close(NvJpeg *j) {
    if (!j) return;
    if (j->probe) fn.stream_destroy(j->probe);
    if (j->hw_state) fn.state_destroy(j->hw_state);
    if (j->gpu_state) fn.state_destroy(j->gpu_state);
    if (j->hw) fn.destroy(j->hw);
    if (j->gpu) fn.destroy(j->gpu);
    free(j->to_hw), free(j->hw_data), free(j->hw_len), free(j->hw_out);
    free(j);
}

int nvjpeg_open(int hardware, NvJpeg **out, char *why, size_t size) {
    pthread_once(&load_once, load);
    *out = NULL;
    if (!loaded) {
        snprintf(why, size, "nvJPEG (libnvjpeg.so.13 or .12) is not on the library path");
        return -1;
    }
    NvJpeg *j = xcalloc(1, sizeof *j);
    nvjpegStatus_t st;
    if (hardware && fn.create_ex(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &j->hw) == 0) {
        if (fn.state_create(j->hw, &j->hw_state) || fn.stream_create(j->hw, &j->probe)) {
            if (j->probe) fn.stream_destroy(j->probe);
            if (j->hw_state) fn.state_destroy(j->hw_state);
            fn.destroy(j->hw);
            j->hw = NULL, j->hw_state = NULL, j->probe = NULL;
        }
    } else {
        j->hw = NULL;
    }
    if ((st = fn.create_ex(NVJPEG_BACKEND_GPU_HYBRID, NULL, NULL, 0, &j->gpu)) || (st = fn.state_create(j->gpu, &j->gpu_state))) {
        snprintf(why, size, "nvJPEG's GPU-hybrid decoder did not open (status %d)", st);
        nvjpeg_close(j);
        return -1;
    }
    if (!j->probe && fn.stream_create(j->gpu, &j->probe)) j->probe = NULL;
    *out = j;
    return 0;
}

const char *nvjpeg_backend(const NvJpeg *j) { return j->hw ? "hardware" : "GPU-hybrid"; }

int nvjpeg_takes(NvJpeg *j, const uint8_t *data, size_t n, long max_pixels, int *w, int *h) {
    int comp = 0, sub = 0, ws[4] = { 0 }, hs[4] = { 0 };
    if (fn.image_info(j->gpu, data, n, &comp, &sub, ws, hs) || (comp != 1 && comp != 3)) return 0;
    if (ws[0] < 1 || hs[0] < 1 || (long)ws[0] * hs[0] > max_pixels) return 0;
    *w = ws[0], *h = hs[0];
    return 1;
}

// Whether the hardware decodes this file (0 from batched_supported means it does).
static int hw_supports(NvJpeg *j, const uint8_t *data, size_t n) {
    int unsupported = 1;
    if (!j->hw || fn.stream_parse(j->hw, data, n, 0, 0, j->probe)) return 0;
    return fn.batched_supported(j->hw, j->probe, &unsupported) == 0 && unsupported == 0;
}

static void grow(NvJpeg *j, int n) {
    if (n <= j->cap) return;
    j->cap = n;
    j->to_hw = xrealloc(j->to_hw, sizeof *j->to_hw * n);
    j->hw_data = xrealloc(j->hw_data, sizeof *j->hw_data * n);
    j->hw_len = xrealloc(j->hw_len, sizeof *j->hw_len * n);
    j->hw_out = xrealloc(j->hw_out, sizeof *j->hw_out * n);
}

static nvjpegImage_t dest(const Image *im) {
    nvjpegImage_t d;
    memset(&d, 0, sizeof d);
    d.channel[0] = im->px;
    d.pitch[0] = (size_t)im->w * 3;
    return d;
}

int nvjpeg_decode(NvJpeg *j, const uint8_t *const *data, const size_t *len, int n, Image *out, void *stream,
                  int *bad, char *why, size_t size) {
    cudaStream_t s = (cudaStream_t)stream;
    nvjpegStatus_t st;
    int m = 0;
    grow(j, n);
    for (int k = 0; k < n; k++) {
        // nvJPEG writes the size it parses, whatever out[k] holds: a file it reads otherwise than the caller's
        // header parse (damaged, crafted) is refused here, before anything is written
        int comp = 0, sub = 0, ws[4] = { 0 }, hs[4] = { 0 };
        if (fn.image_info(j->gpu, data[k], len[k], &comp, &sub, ws, hs) || ws[0] != out[k].w || hs[0] != out[k].h) {
            *bad = k;
            snprintf(why, size, "nvJPEG reads its size as %dx%d, not %dx%d", ws[0], hs[0], out[k].w, out[k].h);
            return -1;
        }
        j->to_hw[k] = hw_supports(j, data[k], len[k]);
        if (!j->to_hw[k]) continue;
        j->hw_data[m] = data[k], j->hw_len[m] = len[k], j->hw_out[m] = dest(&out[k]);
        m++;
    }
    if (m) {
        if (m != j->hw_batch && (st = fn.batched_init(j->hw, j->hw_state, m, 1, NVJPEG_OUTPUT_RGBI))) {
            *bad = 0;
            snprintf(why, size, "nvJPEG's hardware decoder refused a batch of %d (status %d)", m, st);
            return -1;
        }
        j->hw_batch = m;
        // the hardware backend has been seen to start writing before the stream's earlier work ended: wait for it
        if (cudaStreamSynchronize(s) != cudaSuccess) {
            *bad = 0;
            snprintf(why, size, "the GPU failed before the decode: %s", cudaGetErrorString(cudaGetLastError()));
            return -1;
        }
        if ((st = fn.batched(j->hw, j->hw_state, (const unsigned char *const *)j->hw_data, j->hw_len, j->hw_out, s))) {
            *bad = -1;                             // some file of the batch: nvJPEG does not say which
            snprintf(why, size, "nvJPEG's hardware decoder failed on a batch of %d files (status %d)", m, st);
            return -1;
        }
    }
    for (int k = 0; k < n; k++) {
        if (j->to_hw[k]) continue;
        nvjpegImage_t d = dest(&out[k]);
        if ((st = fn.decode(j->gpu, j->gpu_state, data[k], len[k], NVJPEG_OUTPUT_RGBI, &d, s))) {
            *bad = k;
            snprintf(why, size, "nvJPEG could not decode it (status %d)", st);
            return -1;
        }
    }
    return 0;
}
