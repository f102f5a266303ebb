// val_loss.c: the validation losses of a model on a GPU: a batch's head maps gathered on the device
// from its forward chunks (packed, ld = C), then the GPU loss without gradients (gpu/loss.h for DFL
// heads, gpu/loss26.h for YOLO26's one-to-one heads), so the maps never travel to the host.
// Legend: N images of the batch, A anchors, C = 4R + nc channels (R = 16 DFL bins, 1 end-to-end).
#include <math.h>
#include <stdlib.h>

#include "core/spec/backend.h"
#include "gpu/loss.h"
#include "gpu/loss26.h"
#include "gpu/val_loss.h"

struct ValLossGpu {
    int            max_n, max_targets, nc, C, A, N, end2end, h[LOSS_LEVELS], w[LOSS_LEVELS];
    GpuLossWork   *lw;     // DFL heads
    GpuLoss26Work *lw26;   // end2end
    float         *buf;    // (max_n * A * C): level after level, each (N, H_l, W_l, C)
};

ValLossGpu *val_loss_gpu_new(Device *dev, int max_n, int max_targets, int nc, int A, int end2end) {
    ValLossGpu *v = xcalloc(1, sizeof *v);
    v->max_n = max_n; v->nc = nc; v->A = A; v->end2end = end2end;
    v->max_targets = max_targets;
    v->C = end2end ? 4 + nc : 4 * LOSS_REG_MAX + nc;
    if (end2end) v->lw26 = loss26_work_new_gpu(dev, max_n, max_targets, nc, A);
    else v->lw = loss_work_new_gpu(dev, max_n, max_targets, nc, A);
    if (!(end2end ? (void *)v->lw26 : (void *)v->lw) || !(v->buf = device_try_alloc((size_t)max_n * A * v->C * sizeof(float)))) {
        val_loss_gpu_free(v);                 // out of memory: the host takes the losses
        return NULL;
    }
    return v;
}

int val_loss_gpu_fits(const ValLossGpu *v, int max_n, int max_targets, int nc, int A, int end2end) {
    return v && max_n <= v->max_n && max_targets <= v->max_targets && nc == v->nc && A <= v->A && end2end == v->end2end;
}

void val_loss_gpu_free(ValLossGpu *v) {
    if (!v) return;
    if (v->lw) loss_work_free_gpu(v->lw);
    if (v->lw26) loss26_work_free_gpu(v->lw26);
    if (v->buf) cudaFree(v->buf);
    free(v);
}

// Level l of a batch of N images starts after the N images of the levels before it.
static size_t level_offset(const ValLossGpu *v, int N, int l) {
    size_t off = 0;
    for (int k = 0; k < l; k++) off += (size_t)N * v->h[k] * v->w[k] * v->C;
    return off;
}

static Map level_map(const ValLossGpu *v, int l) {
    return (Map){ v->buf + level_offset(v, v->N, l), v->N, v->h[l], v->w[l], v->C, v->C, 0, 0 };
}

void val_loss_gpu_stage(Device *dev, ValLossGpu *v, const Map head[LOSS_LEVELS], int n0, int N) {
    int A = 0, C = v->C;
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
    if (v->end2end) die("val_loss_gpu_eval: the work is for end-to-end heads (val_loss_gpu_eval26)");
    LossBatch g = *b;
    for (int l = 0; l < LOSS_LEVELS; l++) g.head[l] = level_map(v, l);
    return loss_forward_backward_gpu(dev, v->lw, &g, NULL, out, err);
}

// As core/spec/loss26.c's loss26_forward_backward with no gradients: assign (one wait for the sums of
// target scores), then compute with max(sum, 1) and N (one wait for the items).
int val_loss_gpu_eval26(Device *dev, ValLossGpu *v, const Loss26Batch *b, const Loss26Weights *wt, Loss26Out *out,
                        Err *err) {
    if (!v->end2end) die("val_loss_gpu_eval26: the work is for DFL heads (val_loss_gpu_eval)");
    Loss26Batch g = *b;
    for (int br = 0; br < L26_BRANCHES; br++)
        for (int l = 0; l < L26_LEVELS; l++) {
            g.head[br].box[l] = map_slice(level_map(v, l), 0, 4);
            g.head[br].cls[l] = map_slice(level_map(v, l), 4, v->nc);
        }
    double tss[L26_BRANCHES];
    if (loss26_assign_gpu(dev, v->lw26, &g, tss, err)) return -1;
    for (int k = 0; k < L26_BRANCHES; k++) tss[k] = fmax(tss[k], 1);
    loss26_compute_gpu(dev, v->lw26, &g, wt, tss, v->N, NULL, out);
    return 0;
}
