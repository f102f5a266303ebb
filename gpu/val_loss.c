// val_loss.c: the validation losses of a model on a GPU: a batch's head maps gathered on the device
// from its forward chunks (packed, ld = C), then the GPU loss (gpu/loss.h) without gradients, so the
// maps never travel to the host. Legend: N images of the batch, A anchors, C = 4R + nc channels.
#include <stdlib.h>

#include "core/backend.h"
#include "gpu/loss.h"
#include "gpu/val_loss.h"

struct ValLossGpu {
    int          max_n, max_targets, nc, A, N, h[LOSS_LEVELS], w[LOSS_LEVELS];
    GpuLossWork *lw;
    float       *buf;   // (max_n * A * C): level after level, each (N, H_l, W_l, C)
};

ValLossGpu *val_loss_gpu_new(Device *dev, int max_n, int max_targets, int nc, int A) {
    GpuLossWork *lw = loss_work_new_gpu(dev, max_n, max_targets, nc, A);
    if (!lw) return NULL;
    ValLossGpu *v = xcalloc(1, sizeof *v);
    v->max_n = max_n; v->nc = nc; v->A = A; v->lw = lw;
    v->max_targets = max_targets;
    if (!(v->buf = device_try_alloc((size_t)max_n * A * (4 * LOSS_REG_MAX + nc) * sizeof(float)))) {
        val_loss_gpu_free(v);                 // out of memory: the host takes the losses
        return NULL;
    }
    return v;
}

int val_loss_gpu_fits(const ValLossGpu *v, int max_n, int max_targets, int nc, int A) {
    return v && max_n <= v->max_n && max_targets <= v->max_targets && nc == v->nc && A <= v->A;
}

void val_loss_gpu_free(ValLossGpu *v) {
    if (!v) return;
    loss_work_free_gpu(v->lw);
    if (v->buf) cudaFree(v->buf);
    free(v);
}

// Level l of a batch of N images starts after the N images of the levels before it.
static size_t level_offset(const ValLossGpu *v, int N, int l) {
    size_t off = 0, C = 4 * LOSS_REG_MAX + v->nc;
    for (int k = 0; k < l; k++) off += (size_t)N * v->h[k] * v->w[k] * C;
    return off;
}

void val_loss_gpu_stage(Device *dev, ValLossGpu *v, const Map head[LOSS_LEVELS], int n0, int N) {
    int A = 0, C = 4 * LOSS_REG_MAX + v->nc;
    for (int l = 0; l < LOSS_LEVELS; l++) A += head[l].H * head[l].W;
    if (N > v->max_n || A > v->A || head[0].C != C || n0 + head[0].N > N)
        die("val_loss_gpu_stage: images %d..%d of %d, %d anchors, %d channels: work for %d images of %d anchors",
            n0, n0 + head[0].N, N, A, head[0].C, v->max_n, v->A);
    v->N = N;
    for (int l = 0; l < LOSS_LEVELS; l++) {
        v->h[l] = head[l].H; v->w[l] = head[l].W;
        size_t pixels = map_pixels(head[l]), per = (size_t)head[l].H * head[l].W;
        float *dst = v->buf + level_offset(v, N, l) + (size_t)n0 * per * C;
        checkCuda(cudaMemcpy2DAsync(dst, C * sizeof(float), head[l].data, head[l].ld * sizeof(float), C * sizeof(float),
                                    pixels, cudaMemcpyDeviceToDevice, dev->stream));
    }
}

int val_loss_gpu_eval(Device *dev, ValLossGpu *v, const LossBatch *b, LossOut *out, Err *err) {
    LossBatch g = *b;
    int C = 4 * LOSS_REG_MAX + v->nc;
    for (int l = 0; l < LOSS_LEVELS; l++)
        g.head[l] = (Map){ v->buf + level_offset(v, v->N, l), v->N, v->h[l], v->w[l], C, C, 0 };
    return loss_forward_backward_gpu(dev, v->lw, &g, NULL, out, err);
}
