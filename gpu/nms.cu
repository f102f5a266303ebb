// nms.cu: the CUDA twin of core/spec/nms.c's nms_decode + nms_run for a batch of images, detection for
// detection (test_gpu_nms). Three steps: decode_kernel (one thread per anchor: DFL boxes, class scores,
// the candidate filter, one 64-bit sort key per (anchor, class) pair), one device-wide radix sort of
// every image's keys (CUB), nms_kernel (one block per image: the greedy pass, the block's threads testing the
// later candidates in parallel). The arithmetic mirrors the CPU's operation for operation with the _rn
// intrinsics (no FMA contraction), the class scores through core/spec/fexp.h, the DFL softmax in double.
// The one source of a difference: CUDA's double exp may differ from glibc's in the last bit, which moves
// a box corner (a float) by one ULP about once in 10^8 corners.
// Legend: N images, A anchors, nc classes, R = 16 DFL bins, K = max_nms, D = max_det.
#include <cub/cub.cuh>
#include <stdint.h>

#include "gpu/nms.h"        // first: device.h declares core/base/util.h's functions extern "C"
#include "core/spec/fexp.h"
#include "core/spec/loss.h"
#include "gpu/score_key.cuh"
#include "gpu/pdl.cuh"

#define R LOSS_REG_MAX
#define NMS_THREADS 1024
#define MAX_SHARED_FLAGS 49152

typedef struct { const float *data[3]; int H[3], W[3], ld[3], A0[4]; float stride[3]; } HeadArgs;

struct NmsGpu {
    int         max_n, A, nc, cap_nms, cap_det;   // room: images, anchors, classes, max_nms, max_det
    NmsOptions  o;
    uint64_t   *keys, *sorted;   // (max_n, A * nc): candidate keys, then sorted per image
    float      *boxes;           // (max_n, A, 4) xyxy pixels
    float      *ob;              // (max_n, K, 4) candidate boxes offset by class
    int        *count;           // (max_n) candidates per image
    void       *cub_tmp;
    size_t      cub_bytes;
    Det        *det, *host_det;  // (max_n, D) on the device / pinned host
    int        *nd, *host_nd;    // (max_n)
};

// ---- the CPU's arithmetic, on the device ---------------------------------------------------

// loss_dfl_decode: the softmax expectation sum_i i * p_i in double, in the CPU's order.
__device__ static double dfl_decode(const float *logits) {
    double m = logits[0], sum = 0, e = 0, p[R];
    for (int i = 1; i < R; i++) m = fmax(m, (double)logits[i]);
    for (int i = 0; i < R; i++) { p[i] = exp(__dadd_rn((double)logits[i], -m)); sum = __dadd_rn(sum, p[i]); }
    for (int i = 0; i < R; i++) e = __dadd_rn(e, __dmul_rn((double)i, __ddiv_rn(p[i], sum)));
    return e;
}

// nms.c decode_box: ltrb distances -> xyxy pixels through the reference's xywh detour, in float.
__device__ static void decode_box(const float *logits, float ax, float ay, float stride, float *box) {
    float d[4];
    for (int s = 0; s < 4; s++) d[s] = (float)dfl_decode(logits + s * R);
    float x1 = __fsub_rn(ax, d[0]), y1 = __fsub_rn(ay, d[1]), x2 = __fadd_rn(ax, d[2]), y2 = __fadd_rn(ay, d[3]);
    float cx = __fmul_rn(__fdiv_rn(__fadd_rn(x1, x2), 2.0f), stride);
    float cy = __fmul_rn(__fdiv_rn(__fadd_rn(y1, y2), 2.0f), stride);
    float w = __fmul_rn(__fsub_rn(x2, x1), stride), h = __fmul_rn(__fsub_rn(y2, y1), stride);
    box[0] = __fsub_rn(cx, __fdiv_rn(w, 2.0f)); box[1] = __fsub_rn(cy, __fdiv_rn(h, 2.0f));
    box[2] = __fadd_rn(cx, __fdiv_rn(w, 2.0f)); box[3] = __fadd_rn(cy, __fdiv_rn(h, 2.0f));
}

// nms_iou, operation for operation.
__device__ static float iou(const float *a, const float *b) {
    float w = fmaxf(0.0f, __fsub_rn(fminf(a[2], b[2]), fmaxf(a[0], b[0])));
    float h = fmaxf(0.0f, __fsub_rn(fminf(a[3], b[3]), fmaxf(a[1], b[1])));
    float inter = __fmul_rn(w, h);
    float area_a = __fmul_rn(__fsub_rn(a[2], a[0]), __fsub_rn(a[3], a[1]));
    float area_b = __fmul_rn(__fsub_rn(b[2], b[0]), __fsub_rn(b[3], b[1]));
    return __fdiv_rn(inter, __fsub_rn(__fadd_rn(area_a, area_b), inter));
}

// A candidate's key packs [image n: 8 bits | score: 32 bits, score_key's | place a * nc + c: 24 bits], so
// one device-wide radix sort of every image's keys groups them by image and, within an image, gives the
// CPU's stable sort in its filter order (a segmented sort takes one block per image: slow at 10^5-10^6
// pairs each). Non-candidates get the largest score bits and sort last in their image.
enum { KEY_PLACE_BITS = 24, KEY_IMAGES = 256 };

__device__ static uint64_t image_key(int n, float s, uint32_t place, bool cand) {
    uint64_t score = cand ? score_key(s, 0) >> 32 : 0xffffffffull;
    return (uint64_t)n << 56 | score << KEY_PLACE_BITS | place;
}
__device__ static uint32_t key_place(uint64_t key) { return (uint32_t)(key & ((1u << KEY_PLACE_BITS) - 1)); }
__device__ static float key_score(uint64_t key) { return score_of_key((key >> KEY_PLACE_BITS & 0xffffffffull) << 32); }

// ---- kernels -------------------------------------------------------------------------------

// One thread per (anchor a, image n): box, scores, the filter (nms.c candidates), keys.
__global__ void nms_decode_kernel(HeadArgs h, int A, int nc, NmsOptions o, float *boxes, uint64_t *keys, int *count) {
    pdl_entry();
    int a = blockIdx.x * blockDim.x + threadIdx.x, n = blockIdx.y;
    if (a >= A) return;
    int l = a < h.A0[1] ? 0 : a < h.A0[2] ? 1 : 2, r = a - h.A0[l], y = r / h.W[l], x = r % h.W[l];
    const float *px = h.data[l] + (((size_t)n * h.H[l] + y) * h.W[l] + x) * h.ld[l];
    decode_box(px, __fadd_rn((float)x, 0.5f), __fadd_rn((float)y, 0.5f), h.stride[l], boxes + ((size_t)n * A + a) * 4);
    const float *logit = px + 4 * R;
    uint64_t *key = keys + ((size_t)n * A + a) * nc;
    int best = 0, multi = o.multi_label && nc > 1, found = 0;
    float sb = fexp_sigmoid(logit[0]);
    for (int c = 1; c < nc; c++) {            // first maximum, as the CPU
        float s = fexp_sigmoid(logit[c]);
        if (s > sb) sb = s, best = c;
    }
    for (int c = 0; c < nc; c++) {
        float s = fexp_sigmoid(logit[c]);
        int cand = sb > o.conf_thres && s > o.conf_thres && (multi || c == best);
        key[c] = image_key(n, s, (uint32_t)(a * nc + c), cand);
        found += cand;
    }
    if (found) atomicAdd(&count[n], found);
}

// One block per image: the first min(count, K) sorted candidates, offset boxes, then greedy NMS with
// the suppression flags in shared memory. Every thread walks the same sequence of kept candidates.
__global__ void nms_greedy_kernel(const uint64_t *sorted, const float *boxes, const int *count, int A, int nc,
                                  NmsOptions o, float *ob_all, Det *det, int *nd_out) {
    pdl_entry();
    extern __shared__ unsigned char gone[];
    int n = blockIdx.x, K = o.max_nms > 0 ? o.max_nms : 0, m = count[n] < K ? count[n] : K;
    const uint64_t *key = sorted + (size_t)n * A * nc;
    const float *box = boxes + (size_t)n * A * 4;
    float *ob = ob_all + (size_t)n * K * 4;
    for (int j = threadIdx.x; j < m; j += blockDim.x) {
        uint32_t place = key_place(key[j]);
        int a = place / nc, c = place % nc;
        float off = o.agnostic ? 0.0f : __fmul_rn((float)c, NMS_MAX_WH);
        for (int q = 0; q < 4; q++) ob[(size_t)j * 4 + q] = __fadd_rn(box[(size_t)a * 4 + q], off);
        gone[j] = 0;
    }
    __syncthreads();
    int nd = 0;
    Det *out = det + (size_t)n * (o.max_det > 0 ? o.max_det : 0);
    for (int i = 0; i < m && nd < o.max_det; i++) {
        if (gone[i]) continue;                // the same in every thread: set before the last barrier
        if (threadIdx.x == 0) {
            uint32_t place = key_place(key[i]);
            int a = place / nc;
            const float *b = box + (size_t)a * 4;
            out[nd] = Det{ b[0], b[1], b[2], b[3], key_score(key[i]), (int)(place % nc) };
        }
        nd++;
        const float *bi = ob + (size_t)i * 4;
        for (int j = i + 1 + threadIdx.x; j < m; j += blockDim.x)
            if (!gone[j] && iou(bi, ob + (size_t)j * 4) > o.iou_thres) gone[j] = 1;
        __syncthreads();
    }
    if (threadIdx.x == 0) nd_out[n] = nd;
}


// ---- launchers -----------------------------------------------------------------------------

// A counted cudaMalloc that reports failure instead of ending the process: the caller falls back to the host.
static bool take(void **p, size_t bytes, bool ok) {
    if (ok) *p = device_try_alloc(bytes);
    return ok && *p;
}

extern "C" NmsGpu *nms_gpu_new(Device *dev, int max_n, int A, int nc, const NmsOptions *o) {
    if (o->max_nms >= MAX_SHARED_FLAGS || (size_t)max_n * A * nc >= INT32_MAX || max_n > KEY_IMAGES ||
        (size_t)A * nc > (1u << KEY_PLACE_BITS))
        return NULL;                          // beyond what the kernels or the keys hold: the host decodes
    NmsGpu *w = (NmsGpu *)xcalloc(1, sizeof *w);
    w->max_n = max_n; w->A = A; w->nc = nc; w->o = *o; w->cap_nms = o->max_nms; w->cap_det = o->max_det;
    size_t pairs = (size_t)max_n * A * nc, K = o->max_nms > 0 ? o->max_nms : 1, D = o->max_det > 0 ? o->max_det : 1;
    bool ok = take((void **)&w->keys, pairs * sizeof(uint64_t), true);
    ok = take((void **)&w->sorted, pairs * sizeof(uint64_t), ok);
    ok = take((void **)&w->boxes, (size_t)max_n * A * 4 * sizeof(float), ok);
    ok = take((void **)&w->ob, (size_t)max_n * K * 4 * sizeof(float), ok);
    ok = take((void **)&w->count, max_n * sizeof(int), ok);
    ok = take((void **)&w->det, (size_t)max_n * D * sizeof(Det), ok);
    ok = take((void **)&w->nd, max_n * sizeof(int), ok);
    if (ok) checkCuda(cub::DeviceRadixSort::SortKeys(NULL, w->cub_bytes, w->keys, w->sorted, (int)pairs, 0, 64,
                                                     dev->stream));
    ok = take(&w->cub_tmp, w->cub_bytes + 1, ok);
    if (!ok) { nms_gpu_free(w); return NULL; }
    w->host_det = (Det *)device_host_alloc((size_t)max_n * D * sizeof(Det));
    w->host_nd = (int *)device_host_alloc(max_n * sizeof(int));
    return w;
}

extern "C" int nms_gpu_fits(const NmsGpu *w, int max_n, int A, int nc, const NmsOptions *o) {
    return w && max_n <= w->max_n && A <= w->A && nc == w->nc && o->max_nms <= w->cap_nms && o->max_det <= w->cap_det;
}

extern "C" void nms_gpu_set_options(NmsGpu *w, const NmsOptions *o) { w->o = *o; }

extern "C" void nms_gpu_free(NmsGpu *w) {
    if (!w) return;
    cudaFree(w->keys); cudaFree(w->sorted); cudaFree(w->boxes); cudaFree(w->ob); cudaFree(w->count);
    cudaFree(w->det); cudaFree(w->nd); cudaFree(w->cub_tmp);
    if (w->host_det) cudaFreeHost(w->host_det);
    if (w->host_nd) cudaFreeHost(w->host_nd);
    free(w);
}

static HeadArgs head_args(const Map head[3], const int strides[3]) {
    HeadArgs h;
    h.A0[0] = 0;
    for (int l = 0; l < 3; l++) {
        h.data[l] = head[l].data; h.H[l] = head[l].H; h.W[l] = head[l].W; h.ld[l] = head[l].ld;
        h.stride[l] = (float)strides[l];
        h.A0[l + 1] = h.A0[l] + head[l].H * head[l].W;
    }
    return h;
}

extern "C" void nms_gpu_detect(Device *dev, NmsGpu *w, const Map head[3], const int strides[3], int n, Det *out,
                               int *nd) {
    HeadArgs h = head_args(head, strides);
    int A = h.A0[3], nc = w->nc, D = w->o.max_det > 0 ? w->o.max_det : 0;
    if (n > w->max_n || A > w->A || head[0].C != 4 * R + nc || head[0].bf16)
        die("nms_gpu_detect: %d images of %d anchors, %d channels: work for %d of %d", n, A, head[0].C, w->max_n, w->A);
    if (n < 1) return;
    size_t per = (size_t)A * nc;
    cudaStream_t s = dev->stream;
    checkCuda(cudaMemsetAsync(w->count, 0, n * sizeof(int), s));
    nms_decode_kernel<<<dim3((A + 127) / 128, n), 128, 0, s>>>(h, A, nc, w->o, w->boxes, w->keys, w->count);
    checkLaunch(dev);
    size_t bytes = w->cub_bytes;
    checkCuda(cub::DeviceRadixSort::SortKeys(w->cub_tmp, bytes, w->keys, w->sorted, (int)(per * n), 0, 64, s));
    int K = w->o.max_nms > 0 ? w->o.max_nms : 0;
    nms_greedy_kernel<<<n, NMS_THREADS, K + 1, s>>>(w->sorted, w->boxes, w->count, A, nc, w->o, w->ob, w->det, w->nd);
    checkLaunch(dev);
    checkCuda(cudaMemcpyAsync(w->host_nd, w->nd, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    if (D) checkCuda(cudaMemcpyAsync(w->host_det, w->det, (size_t)n * D * sizeof(Det), cudaMemcpyDeviceToHost, s));
    checkCuda(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) {
        nd[i] = w->host_nd[i];
        memcpy(out + (size_t)i * D, w->host_det + (size_t)i * D, sizeof(Det) * nd[i]);
    }
}
