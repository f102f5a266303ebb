// topk26.cu: the CUDA twin of core/spec/topk26.c for a batch of images, detection for detection
// (test_gpu_topk26). Per image, as the CPU: every anchor's best class logit (first maximum) as a sort key,
// a segmented radix sort (CUB) of the anchors, the k*nc (rank, class) pairs of the top k as keys, a second
// sort, then the top k pairs whose score is above conf, boxes decoded for those only. Keys sort by logit
// descending, index ascending (gpu/score_key.cuh), which is the CPU's comparator; the scores of the kept
// logits go through core/spec/fexp.h and the boxes through the _rn intrinsics (no FMA contraction), so both
// sides round alike.
// Legend: N images, A anchors, nc classes, k = min(max_det, A), P = k * nc pairs per image.
#include <cub/cub.cuh>
#include <stdint.h>

#include "gpu/topk26.h"     // first: device.h declares core/base/util.h's functions extern "C"
#include "core/spec/fexp.h"
#include "gpu/score_key.cuh"
#include "gpu/pdl.cuh"

typedef struct { const float *data[3]; int H[3], W[3], ld[3], A0[4]; float stride[3]; } Head26Args;

struct Topk26Gpu {
    int         max_n, A, nc, max_det, max_k;
    uint64_t   *akeys, *asorted;   // (max_n, A) anchors by best score
    uint64_t   *pkeys, *psorted;   // (max_n, max_k * nc) pairs of the top k
    int        *offsets;           // (2, max_n + 1) segment starts of the two sorts
    void       *cub_tmp;
    size_t      cub_bytes;
    Det        *det, *host_det;    // (max_n, max_det) on the device / pinned host
    int        *nd, *host_nd;      // (max_n)
};

// ---- the CPU's arithmetic, on the device ---------------------------------------------------

__device__ static const float *pixel(const Head26Args &h, int n, int a, int *x, int *y, int *l) {
    *l = a < h.A0[1] ? 0 : a < h.A0[2] ? 1 : 2;
    int r = a - h.A0[*l];
    *y = r / h.W[*l]; *x = r % h.W[*l];
    return h.data[*l] + (((size_t)n * h.H[*l] + *y) * h.W[*l] + *x) * h.ld[*l];
}

// topk26.c best_class: the first maximum of the logits
__device__ static float best_class(const float *logit, int nc, int *cls) {
    float s = logit[0];
    *cls = 0;
    for (int c = 1; c < nc; c++)
        if (logit[c] > s) s = logit[c], *cls = c;
    return s;
}

// ---- kernels -------------------------------------------------------------------------------

// One thread per (anchor a, image n): the anchor's key by its best class logit.
__global__ void topk26_anchor_kernel(Head26Args h, int A, int nc, uint64_t *akeys) {
    pdl_entry();
    int a = blockIdx.x * blockDim.x + threadIdx.x, n = blockIdx.y, x, y, l, cls;
    if (a >= A) return;
    const float *px = pixel(h, n, a, &x, &y, &l);
    akeys[(size_t)n * A + a] = score_key(best_class(px + 4, nc, &cls), (uint32_t)a);
}

// One thread per (pair p = i * nc + c, image n), i < k: the logit of class c of the anchor ranked i.
__global__ void topk26_pair_kernel(Head26Args h, int A, int nc, int k, const uint64_t *asorted, uint64_t *pkeys) {
    pdl_entry();
    int p = blockIdx.x * blockDim.x + threadIdx.x, n = blockIdx.y, x, y, l;
    if (p >= k * nc) return;
    int a = (int)(uint32_t)asorted[(size_t)n * A + p / nc];
    const float *px = pixel(h, n, a, &x, &y, &l);
    pkeys[(size_t)n * k * nc + p] = score_key(px[4 + p % nc], (uint32_t)p);
}

// One thread per image: topk26_select's emit loop over the top k (pairs, or anchors when agnostic).
__global__ void topk26_emit_kernel(Head26Args h, int A, int nc, int k, int agnostic, float conf, const uint64_t *asorted,
                                   const uint64_t *psorted, int D, Det *det, int *nd_out) {
    pdl_entry();
    int n = blockIdx.x;                       // one block of one thread per image: k is at most max_det
    const uint64_t *anchors = asorted + (size_t)n * A, *pairs = psorted + (size_t)n * k * nc;
    Det *out = det + (size_t)n * D;
    int nd = 0;
    for (int j = 0; j < k; j++) {
        uint64_t key = agnostic ? anchors[j] : pairs[j];
        float s = fexp_sigmoid(score_of_key(key));   // topk26_score of the ranked logit
        if (!(s > conf)) continue;
        uint32_t idx = (uint32_t)key;
        int a = agnostic ? (int)idx : (int)(uint32_t)anchors[idx / nc], x, y, l, cls = (int)(idx % nc);
        const float *d = pixel(h, n, a, &x, &y, &l);
        if (agnostic) best_class(d + 4, nc, &cls);
        float ax = __fadd_rn((float)x, 0.5f), ay = __fadd_rn((float)y, 0.5f), st = h.stride[l];
        out[nd++] = Det{ __fmul_rn(__fsub_rn(ax, d[0]), st), __fmul_rn(__fsub_rn(ay, d[1]), st),
                         __fmul_rn(__fadd_rn(ax, d[2]), st), __fmul_rn(__fadd_rn(ay, d[3]), st), s, cls };
    }
    nd_out[n] = nd;
}

__global__ void topk26_offsets_kernel(int *offsets, int n, int per_a, int per_p) {
    pdl_entry();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) offsets[i] = i * per_a, offsets[n + 1 + i] = i * per_p;
}

// ---- launchers -----------------------------------------------------------------------------

static size_t sort_bytes(int items, int segments, const int *offsets, cudaStream_t s) {
    size_t bytes = 0;
    checkCuda(cub::DeviceSegmentedRadixSort::SortKeys(NULL, bytes, (const uint64_t *)NULL, (uint64_t *)NULL, items,
                                                      segments, offsets, offsets + 1, 0, 64, s));
    return bytes;
}

static bool take(void **p, size_t bytes, bool ok) {
    if (ok) *p = device_try_alloc(bytes);
    return ok && *p;
}

extern "C" Topk26Gpu *topk26_gpu_new(Device *dev, int max_n, int A, int nc, int max_det) {
    int max_k = max_det < A ? max_det : A;
    if (max_n < 1 || max_k < 0 || (size_t)max_n * A >= INT32_MAX || (size_t)max_n * max_k * nc >= INT32_MAX) return NULL;
    Topk26Gpu *w = (Topk26Gpu *)xcalloc(1, sizeof *w);
    w->max_n = max_n; w->A = A; w->nc = nc; w->max_det = max_det; w->max_k = max_k;
    size_t anchors = (size_t)max_n * A + 1, pairs = (size_t)max_n * max_k * nc + 1, D = max_det > 0 ? max_det : 1;
    bool ok = take((void **)&w->akeys, anchors * sizeof(uint64_t), true);
    ok = take((void **)&w->asorted, anchors * sizeof(uint64_t), ok);
    ok = take((void **)&w->pkeys, pairs * sizeof(uint64_t), ok);
    ok = take((void **)&w->psorted, pairs * sizeof(uint64_t), ok);
    ok = take((void **)&w->offsets, 2 * (max_n + 1) * sizeof(int), ok);
    ok = take((void **)&w->det, (size_t)max_n * D * sizeof(Det), ok);
    ok = take((void **)&w->nd, (max_n + 1) * sizeof(int), ok);
    if (ok) {
        size_t a = sort_bytes(max_n * A, max_n, w->offsets, dev->stream);
        size_t p = sort_bytes(max_n * max_k * nc, max_n, w->offsets, dev->stream);
        w->cub_bytes = a > p ? a : p;
    }
    ok = take(&w->cub_tmp, w->cub_bytes + 1, ok);
    if (!ok) { topk26_gpu_free(w); return NULL; }
    w->host_det = (Det *)device_host_alloc((size_t)max_n * D * sizeof(Det));
    w->host_nd = (int *)device_host_alloc((max_n + 1) * sizeof(int));
    return w;
}

extern "C" void topk26_gpu_free(Topk26Gpu *w) {
    if (!w) return;
    cudaFree(w->akeys); cudaFree(w->asorted); cudaFree(w->pkeys); cudaFree(w->psorted); cudaFree(w->offsets);
    cudaFree(w->det); cudaFree(w->nd); cudaFree(w->cub_tmp);
    if (w->host_det) cudaFreeHost(w->host_det);
    if (w->host_nd) cudaFreeHost(w->host_nd);
    free(w);
}

extern "C" int topk26_gpu_fits(const Topk26Gpu *w, int max_n, int A, int nc, int max_det) {
    return w && max_n <= w->max_n && A <= w->A && nc == w->nc && max_det <= w->max_det;
}

static Head26Args head_args(const Map head[3], int img_h) {
    Head26Args h;
    h.A0[0] = 0;
    for (int l = 0; l < 3; l++) {
        h.data[l] = head[l].data; h.H[l] = head[l].H; h.W[l] = head[l].W; h.ld[l] = head[l].ld;
        h.stride[l] = (float)img_h / head[l].H;                 // topk26_decode's stride, in float
        h.A0[l + 1] = h.A0[l] + head[l].H * head[l].W;
    }
    return h;
}

extern "C" void topk26_gpu_detect(Device *dev, Topk26Gpu *w, const Map head[3], int img_h, int n, const Topk26Opts *o,
                                  Det *out, int *nd) {
    Head26Args h = head_args(head, img_h);
    int A = h.A0[3], nc = w->nc, D = o->max_det > 0 ? o->max_det : 0, k = D < A ? D : A;
    if (n > w->max_n || A > w->A || head[0].C != 4 + nc || head[0].bf16 || o->max_det > w->max_det)
        die("topk26_gpu_detect: %d images of %d anchors, %d channels, max_det %d: work for %d of %d, max_det %d", n, A,
            head[0].C, o->max_det, w->max_n, w->A, w->max_det);
    if (n < 1) return;
    if (k < 1) { memset(nd, 0, sizeof(int) * n); return; }
    cudaStream_t s = dev->stream;
    size_t bytes = w->cub_bytes;
    topk26_offsets_kernel<<<(n + 256) / 256, 256, 0, s>>>(w->offsets, n, A, k * nc);
    checkLaunch(dev);
    topk26_anchor_kernel<<<dim3((A + 127) / 128, n), 128, 0, s>>>(h, A, nc, w->akeys);
    checkLaunch(dev);
    checkCuda(cub::DeviceSegmentedRadixSort::SortKeys(w->cub_tmp, bytes, w->akeys, w->asorted, n * A, n, w->offsets,
                                                      w->offsets + 1, 0, 64, s));
    if (!o->agnostic) {
        topk26_pair_kernel<<<dim3((k * nc + 127) / 128, n), 128, 0, s>>>(h, A, nc, k, w->asorted, w->pkeys);
        checkLaunch(dev);
        int *po = w->offsets + n + 1;
        checkCuda(cub::DeviceSegmentedRadixSort::SortKeys(w->cub_tmp, bytes, w->pkeys, w->psorted, n * k * nc, n, po,
                                                          po + 1, 0, 64, s));
    }
    topk26_emit_kernel<<<n, 1, 0, s>>>(h, A, nc, k, o->agnostic, o->conf, w->asorted, w->psorted, D, w->det, w->nd);
    checkLaunch(dev);
    checkCuda(cudaMemcpyAsync(w->host_nd, w->nd, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    checkCuda(cudaMemcpyAsync(w->host_det, w->det, (size_t)n * D * sizeof(Det), cudaMemcpyDeviceToHost, s));
    checkCuda(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i++) {
        nd[i] = w->host_nd[i];
        memcpy(out + (size_t)i * D, w->host_det + (size_t)i * D, sizeof(Det) * nd[i]);
    }
}
