// backend_gpu.c: the CUDA twins (gpu/ops.h) behind the Backend table; ctx is the Device.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/backend.h"
#include "core/base/switches.h"
#include "gpu/comm_nccl.h"
#include "gpu/device.h"
#include "gpu/graph_pdl.h"
#include "gpu/loss.h"
#include "gpu/loss26.h"
#include "gpu/musgd.h"
#include "gpu/nms.h"
#include "gpu/topk26.h"
#include "gpu/val_loss.h"
#include "gpu/ops.h"
#include "gpu/ops26.h"
#include "gpu/optim.h"
#include "gpu/peer.h"
#include "gpu/train_gpu.h"

#define DEV ((Device *)ctx)

static void conv_fwd(void *ctx, const ConvDims *d, Map x, const float *w, const float *b, Map y, float *ws) {
    conv_forward_gpu(DEV, d, x, w, b, y);
}
static void conv_bwd(void *ctx, const ConvDims *d, Map x, const float *w, Map dy, Map dx, float *dw, float *db,
                     float *ws) {
    conv_backward_gpu(DEV, d, x, w, dy, dx, dw, db);
}
static void bn_train(void *ctx, Map z, const float *g, const float *b, float eps, float mom, float *rm, float *rv,
                     float *mean, float *invstd, Map u) {
    bn_forward_train_gpu(DEV, z, g, b, eps, mom, rm, rv, mean, invstd, u);
}
static void bn_eval(void *ctx, Map z, const float *g, const float *b, float eps, const float *rm, const float *rv,
                    Map u) {
    bn_forward_eval_gpu(DEV, z, g, b, eps, rm, rv, u);
}
static void bn_bwd(void *ctx, Map z, const float *g, const float *mean, const float *invstd, Map du, Map dz,
                   float *dg, float *db) {
    bn_backward_gpu(DEV, z, g, mean, invstd, du, dz, dg, db);
}
static void bn_apply(void *ctx, Map z, const float *g, const float *b, const float *mean, const float *invstd,
                     Map u) {
    bn_apply_gpu(DEV, z, g, b, mean, invstd, u);
}
static void bn_train_sync(void *ctx, Map z, const float *g, const float *b, float eps, float mom, float *rm, float *rv,
                          float *mean, float *invstd, Map u, const BnSync *sync) {
    bn_forward_train_sync_gpu(DEV, z, g, b, eps, mom, rm, rv, mean, invstd, u, sync);
}
static void bn_bwd_sync(void *ctx, Map z, const float *g, const float *mean, const float *invstd, Map du, Map dz,
                        float *dg, float *db, const BnSync *sync) {
    bn_backward_sync_gpu(DEV, z, g, mean, invstd, du, dz, dg, db, sync);
}
static void bn_silu_eval(void *ctx, Map z, const float *g, const float *b, float eps, const float *rm, const float *rv,
                         Map y) {
    bn_silu_forward_eval_gpu(DEV, z, g, b, eps, rm, rv, y);
}
static void bn_silu_train(void *ctx, Map z, const float *g, const float *b, float eps, float mom, float *rm,
                          float *rv, float *mean, float *invstd, Map y) {
    Map none = { 0 };
    bn_silu_forward_train_gpu(DEV, z, g, b, eps, mom, rm, rv, mean, invstd, none, y);
}
static void conv_bn_silu_train(void *ctx, const ConvDims *d, Map x, const float *w, Map z, const BnTrain *bn,
                               float eps, float mom, Map y, float *ws) {
    conv_bn_silu_forward_train_gpu(DEV, d, x, w, z, bn, eps, mom, y);
}
static void conv_bn_silu_bwd(void *ctx, const ConvDims *d, Map x, const float *w, Map z, const BnSaved *bn,
                             Map dy, Map tmp, Map dz, Map dx, float *dw, float *ws) {
    if (DEV->precision == GPU_BF16) {   // dz as the bf16 GEMM operand, in dz's own memory
        bn_silu_backward_bf16_gpu(DEV, z, bn->gamma, bn->beta, bn->mean, bn->invstd, dy, dz.data, bn->dgamma,
                                  bn->dbeta);
        conv_backward_bf16dy_gpu(DEV, d, x, w, dz.data, dx, dw);
        return;
    }
    bn_silu_backward_gpu(DEV, z, bn->gamma, bn->beta, bn->mean, bn->invstd, dy, dz, bn->dgamma, bn->dbeta);
    conv_backward_gpu(DEV, d, x, w, dz, dx, dw, NULL);
}
static void conv_bn_bwd(void *ctx, const ConvDims *d, Map x, const float *w, Map z, const BnSaved *bn, Map du,
                        Map dz, Map dx, float *dw, float *ws) {
    if (DEV->precision == GPU_BF16 && z.ld == z.C) {   // dz as the bf16 operand, in dz's own memory
        bn_backward_bf16_gpu(DEV, z, bn->gamma, bn->mean, bn->invstd, du, dz.data, bn->dgamma, bn->dbeta);
        conv_backward_bf16dy_gpu(DEV, d, x, w, dz.data, dx, dw);
        return;
    }
    bn_backward_gpu(DEV, z, bn->gamma, bn->mean, bn->invstd, du, dz, bn->dgamma, bn->dbeta);
    conv_backward_gpu(DEV, d, x, w, dz, dx, dw, NULL);
}
// The fused forms of a RepConv and of a residual addition (Backend.fused; YT_FUSE=0 takes them out of the
// table, core/devices/backends.c, and the executor composes them from the ops)
static void bn_silu_add_train(void *ctx, Map z, const BnTrain *b, float eps, float mom, Map a, Map y, Map out) {
    bn_silu_add_forward_train_gpu(DEV, z, b, eps, mom, a, y, out);
}
static void repconv_train(void *ctx, Map z1, const BnTrain *b1, Map z2, const BnTrain *b2, float eps, float mom,
                          Map u, Map tmp, Map y) {
    repconv_forward_train_gpu(DEV, z1, b1, z2, b2, eps, mom, y);
}
static void repconv_silu_bwd(void *ctx, Map z1, const BnSaved *b1, Map z2, const BnSaved *b2, Map dy, Map tmp,
                             Map du) {
    repconv_silu_backward_gpu(DEV, z1, b1->gamma, b1->beta, b1->mean, b1->invstd, z2, b2->gamma, b2->beta, b2->mean,
                              b2->invstd, dy, du);
}
// One launch for both branches under bf16 (contiguous z); else the two branches' conv_bn_backward
static void repconv_bn_bwd(void *ctx, const ConvDims *d1, const float *w1, Map z1, const BnSaved *bn1, float *dw1,
                           Map dx1, const ConvDims *d2, const float *w2, Map z2, const BnSaved *bn2, float *dw2, Map dx2,
                           Map x, Map du, Map dz, float *ws) {
    if (DEV->precision == GPU_BF16 && z1.ld == z1.C && z2.ld == z2.C) {
        ConvBnBranch b1 = { d1, w1, dw1, z1, dx1, bn1->gamma, bn1->mean, bn1->invstd, bn1->dgamma, bn1->dbeta };
        ConvBnBranch b2 = { d2, w2, dw2, z2, dx2, bn2->gamma, bn2->mean, bn2->invstd, bn2->dgamma, bn2->dbeta };
        repconv_bn_backward_bf16_gpu(DEV, &b1, &b2, x, du, dz.data);
        return;
    }
    conv_bn_bwd(ctx, d1, x, w1, z1, bn1, du, dz, dx1, dw1, ws);
    conv_bn_bwd(ctx, d2, x, w2, z2, bn2, du, dz, dx2, dw2, ws);
}
static void silu_fwd(void *ctx, Map u, Map y) { silu_forward_gpu(DEV, u, y); }
static void silu_bwd(void *ctx, Map u, Map dy, Map du) { silu_backward_gpu(DEV, u, dy, du); }
static void add_fwd(void *ctx, Map a, Map b, Map y) { add_forward_gpu(DEV, a, b, y); }
static void copy(void *ctx, Map s, Map d) { copy_map_gpu(DEV, s, d); }
static void accumulate(void *ctx, Map s, Map d) { accumulate_map_gpu(DEV, s, d); }
static void maxpool_fwd(void *ctx, Map x, int k, int s, int p, Map y) { maxpool_forward_gpu(DEV, x, k, s, p, y); }
static void maxpool_bwd(void *ctx, Map x, int k, int s, int p, Map dy, Map dx) {
    maxpool_backward_gpu(DEV, x, k, s, p, dy, dx);
}
static void avgpool_fwd(void *ctx, Map x, int k, int s, int p, Map y) { avgpool_forward_gpu(DEV, x, k, s, p, y); }
static void avgpool_bwd(void *ctx, int k, int s, int p, Map dy, Map dx) { avgpool_backward_gpu(DEV, k, s, p, dy, dx); }
static void upsample_fwd(void *ctx, Map x, int f, Map y) { upsample_forward_gpu(DEV, x, f, y); }
static void resize_fwd(void *ctx, Map x, Map y) { resize_bilinear_gpu(DEV, x, y); }
static void upsample_bwd(void *ctx, int f, Map dy, Map dx) { upsample_backward_gpu(DEV, f, dy, dx); }
// The slots and their momentum buffers as one device table, so each optimizer op is one or two launches.
static void *prepare(void *ctx, const ParamSlot *slots, int n, float *buf) {
    GpuSlot *hs = xcalloc(n, sizeof *hs);
    for (int k = 0; k < n; k++) {
        hs[k] = (GpuSlot){ slots[k].w, slots[k].g, slots[k].group >= 0 ? buf : NULL, slots[k].n, slots[k].group, 0 };
        if (slots[k].group >= 0) buf += slots[k].n;
    }
    GpuSlots *p = xmalloc(sizeof *p);
    *p = optim_slots_upload(DEV, &DEV->optim, hs, n);
    free(hs);
    return p;
}
static double sumsq(void *ctx, const void *p) { return grad_sumsq_slots_gpu(DEV, *(const GpuSlots *)p); }
static void scale(void *ctx, const void *p, float f) { grad_scale_slots_gpu(DEV, *(const GpuSlots *)p, f); }
static void sgd(void *ctx, const void *p, const float lr[3], float mu, float wd, int first) {
    sgd_apply_slots_gpu(DEV, *(const GpuSlots *)p, lr, mu, wd, first);
}
static void ema(void *ctx, float *e, const float *x, size_t n, double d) { ema_update_gpu(DEV, e, x, n, d); }
static void scale_n(void *ctx, float *p, size_t n, float f) { grad_scale_gpu(DEV, p, n, f); }
static void sync(void *ctx) { device_sync(DEV); }
static void bind(void *ctx) { checkCuda(cudaSetDevice(DEV->id)); }
// Equal ids (two devices on one GPU, a test hook): the same call is a device-to-device copy.
static void pull(void *ctx, float *dst, void *src_ctx, const float *src, size_t n) {
    checkCuda(cudaMemcpyPeerAsync(dst, DEV->id, src, ((Device *)src_ctx)->id, n * sizeof(float), DEV->stream));
}
static void zero(void *ctx, float *p, size_t n) {
    checkCuda(cudaMemsetAsync(p, 0, n * sizeof(float), DEV->stream));
}
static void upload(void *ctx, float *dst, const float *src, size_t n) {
    checkCuda(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice, DEV->stream));
    device_sync(DEV);    // src may be reused by the caller at once
}
static void upload_u8(void *ctx, float *dst, const uint8_t *src, size_t n) { upload_u8_gpu(DEV, dst, src, n); }
static void augment(void *ctx, const AugRecipe *r, const Image *tiles, uint8_t *host_out) {
    augment_pixels_gpu(DEV, r, tiles, host_out);
}
static void augment_batch(void *ctx, const AugSample *s, int n, int h, int w, float *dst) {
    augment_batch_gpu(DEV, s, n, h, w, dst);
}
static void download(void *ctx, float *dst, const float *src, size_t n) {
    checkCuda(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, DEV->stream));
    device_sync(DEV);
}

static void *event_new(void *ctx) {
    cudaEvent_t ev;
    checkCuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));   // on ctx's device (bound by the caller)
    return ev;
}
static void event_free(void *ctx, void *ev) { checkCuda(cudaEventDestroy((cudaEvent_t)ev)); }
static void event_record(void *ctx, void *ev) { checkCuda(cudaEventRecord((cudaEvent_t)ev, DEV->stream)); }
static void event_wait(void *ctx, void *ev) { checkCuda(cudaStreamWaitEvent(DEV->stream, (cudaEvent_t)ev, 0)); }

static void sumsq_to(void *ctx, const void *p, double *dst) { grad_sumsq_slots_to_gpu(DEV, *(const GpuSlots *)p, dst); }
static void clip(void *ctx, const void *p, const double *ss, int n, float max_norm) {
    grad_clip_slots_gpu(DEV, *(const GpuSlots *)p, ss, n, max_norm);
}
static void loss_norm(void *ctx, const double *src, int n, double *dst) { loss_norm_gpu(DEV, src, n, dst); }
static void *timer_new(void *ctx) {
    cudaEvent_t ev;
    checkCuda(cudaEventCreate(&ev));               // timing on; on ctx's device (bound by the caller)
    return ev;
}
static void timer_free(void *ctx, void *tm) { checkCuda(cudaEventDestroy((cudaEvent_t)tm)); }
static void timer_record(void *ctx, void *tm) { checkCuda(cudaEventRecord((cudaEvent_t)tm, DEV->stream)); }
static double timer_seconds(void *ctx, void *from, void *to) {
    float ms = 0;
    cudaError_t rc = cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to);
    if (rc == cudaErrorNotReady) {
        cudaGetLastError();                        // not passed yet: no figure
        return 0;
    }
    checkCuda(rc);                                 // any other error is the device's: the fatal path
    return ms / 1000.0;
}

static void dw_fwd(void *ctx, const DwDims *d, Map x, const float *w, const float *b, Map y) {
    dwconv_forward_gpu(DEV, d, x, w, b, y);
}
static void dw_bwd(void *ctx, const DwDims *d, Map x, const float *w, Map dy, Map dx, float *dw, float *db) {
    dwconv_backward_gpu(DEV, d, x, w, dy, dx, dw, db);
}
static void attn_fwd(void *ctx, const AttnDims *d, Map qkv, Map y, Map v, float *p) {
    attn26_forward_gpu(DEV, d, qkv, y, v, p);
}
static void attn_bwd(void *ctx, const AttnDims *d, Map qkv, const float *p, Map dy, Map dv, Map dqkv, float *ws) {
    attn26_backward_gpu(DEV, d, qkv, p, dy, dv, dqkv);   // its scratch is the Device's, not ws
}

// Validation's work stays on the Device between passes (gpu/device.h, DEVICE_KEPT_*): prepare takes the
// kept one when it is large enough (else frees it and makes one), release keeps it for the next pass;
// device_free frees it. So every pass after the first allocates nothing.
static void *kept_take(Device *d, int k) {
    void *p = d->kept[k];
    d->kept[k] = NULL;
    return p;
}
static void kept_put(Device *d, int k, void *p, void (*free_fn)(void *)) {
    if (!p) return;
    if (d->kept[k] && d->kept[k] != p) d->kept_free[k](d->kept[k]);
    d->kept[k] = p;
    d->kept_free[k] = free_fn;
}

static void nms_free(void *p) { nms_gpu_free(p); }
static void *nms_prepare(void *ctx, int max_n, int A, int nc, const NmsOptions *o) {
    NmsGpu *w = kept_take(DEV, DEVICE_KEPT_NMS);
    if (nms_gpu_fits(w, max_n, A, nc, o)) { nms_gpu_set_options(w, o); return w; }
    nms_gpu_free(w);
    return nms_gpu_new(DEV, max_n, A, nc, o);
}
static void nms_release(void *ctx, void *prep) { kept_put(DEV, DEVICE_KEPT_NMS, prep, nms_free); }
static void nms_detect(void *ctx, void *prep, const Map head[3], const int strides[3], int n, Det *out, int *nd) {
    nms_gpu_detect(DEV, prep, head, strides, n, out, nd);
}

static void vloss_free(void *p) { val_loss_gpu_free(p); }
static void *vloss_prepare(void *ctx, int max_n, int max_targets, int nc, int A, int end2end) {
    ValLossGpu *v = kept_take(DEV, DEVICE_KEPT_VLOSS);
    if (val_loss_gpu_fits(v, max_n, max_targets, nc, A, end2end)) return v;
    val_loss_gpu_free(v);
    return val_loss_gpu_new(DEV, max_n, max_targets, nc, A, end2end);
}
static void vloss_release(void *ctx, void *prep) { kept_put(DEV, DEVICE_KEPT_VLOSS, prep, vloss_free); }
static void vloss_stage(void *ctx, void *prep, const Map head[3], int n0, int N) {
    val_loss_gpu_stage(DEV, prep, head, n0, N);
}
static int vloss_eval(void *ctx, void *prep, const LossBatch *b, LossOut *out, Err *err) {
    return val_loss_gpu_eval(DEV, prep, b, out, err);
}
static int vloss_eval26(void *ctx, void *prep, const Loss26Batch *b, const Loss26Weights *wt, Loss26Out *out, Err *err) {
    return val_loss_gpu_eval26(DEV, prep, b, wt, out, err);
}

// Recordings: stream capture in this thread's mode, so other devices' threads are not affected.
static int rec_begin(void *ctx) {
#ifdef SYNC_DEBUG
    return -1;                                     // each launch waits: nothing to record
#else
    if (switch_is(SW_GRAPHS, "0")) return -1;
    return cudaStreamBeginCapture(DEV->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess ? 0 : -1;
#endif
}
static void *rec_end(void *ctx, size_t *launches) {
    cudaGraph_t g = NULL;
    cudaGraphExec_t e = NULL;
    cudaError_t rc = cudaStreamEndCapture(DEV->stream, &g);
    *launches = 0;
    if (rc == cudaSuccess) rc = cudaGraphGetNodes(g, NULL, launches);
    if (rc == cudaSuccess) {   // consecutive kernels of ours overlap their launches (gpu/graph_pdl.c)
        size_t kernels = 0;
        long pdl = graph_pdl_edges(g, DEV->id, &kernels);
        const char *r = switch_str(SW_PDL_REPORT);
        if (r && strcmp(r, "0") != 0)
            fprintf(stderr, "GPU %d: recorded %zu nodes, %zu kernels, %ld programmatic edges\n", DEV->id, *launches,
                    kernels, pdl);
        rc = cudaGraphInstantiate(&e, g, 0);
    }
    if (g) cudaGraphDestroy(g);
    if (rc != cudaSuccess) {
        fprintf(stderr, "GPU %d: could not record the step (%s); it runs without CUDA Graphs\n", DEV->id,
                cudaGetErrorString(rc));
        cudaGetLastError();
        return NULL;
    }
    return e;
}
static void rec_replay(void *ctx, void *rec) { checkCuda(cudaGraphLaunch((cudaGraphExec_t)rec, DEV->stream)); }
static void rec_free(void *ctx, void *rec) { cudaGraphExecDestroy((cudaGraphExec_t)rec); }
static void bn_frozen_stats(void *ctx, int C, const float *rm, const float *rv, float eps, float *mean,
                            float *invstd) {
    bn_frozen_stats_gpu(DEV, C, rm, rv, eps, mean, invstd);
}
static void bn_frozen_bwd(void *ctx, Map z, const float *g, const float *mean, const float *invstd, Map du, Map dz,
                          float *dg, float *db) {
    bn_frozen_backward_gpu(DEV, z, g, mean, invstd, du, dz, dg, db);
}

static void topk_free(void *p) { topk26_gpu_free(p); }
static void *topk_prepare(void *ctx, int max_n, int A, int nc, int max_det) {
    Topk26Gpu *w = kept_take(DEV, DEVICE_KEPT_TOPK);
    if (topk26_gpu_fits(w, max_n, A, nc, max_det)) return w;
    topk26_gpu_free(w);
    return topk26_gpu_new(DEV, max_n, A, nc, max_det);
}
static void topk_release(void *ctx, void *prep) { kept_put(DEV, DEVICE_KEPT_TOPK, prep, topk_free); }
static void topk_detect(void *ctx, void *prep, const Map head[3], int img_h, int n, const Topk26Opts *o, Det *out,
                        int *nd) {
    topk26_gpu_detect(DEV, prep, head, img_h, n, o, out, nd);
}

// ---- what a trainer needs from the GPU: its memory, input path, failures, loss and YOLO26 optimizers ----

static int device_id(void *ctx) { return DEV->id; }
static int comm_sum(void *ctx, float *p, size_t n) { return nccl_comm_sum(DEV, p, n); }
static int comm_sum_pairs(void *ctx, const double *src, int n, double *dst) {
    return nccl_comm_sum_pairs(DEV, src, n, dst);
}
static int comm_sum_begin(void *ctx, float *p, size_t n) { return nccl_comm_sum_begin(DEV, p, n); }
static void comm_sum_end(void *ctx) { nccl_comm_sum_end(DEV); }
static void device_close(void *ctx) {
    device_free(DEV);
    free(DEV);
}
static double *scalars(void *ctx) { return DEV->scal; }
static float *take(void *ctx, size_t n) { return arena_take(&DEV->optim, n * sizeof(float), 256); }
static int reserve(void *ctx, size_t bytes) { return peer_optim_arena(DEV, bytes); }
static float *buffer_new(void *ctx, size_t n) { return peer_alloc(DEV->id, n); }
static void buffer_free(void *ctx, float *p) { peer_free(DEV->id, p); }
static void prefetch_u8(void *ctx, const uint8_t *host, size_t n) { device_prefetch_u8(DEV, host, n); }
static void prefetch_aug(void *ctx, const AugSample *s, int n) { augment_prefetch_gpu(DEV, s, n); }
static int decodes_jpeg(void *ctx) { return augment_gpu_decodes(DEV); }
static size_t mem_used(void *ctx) { return device_mem_used(DEV); }
static int usable(void *ctx) { return device_usable(DEV); }
static int check(void *ctx, char *msg, size_t size) { return peer_check(msg, size); }
static void inject_fault(void *ctx, int kind) {
    if (kind == BACKEND_FAULT_HANG) device_inject_hang(DEV);
    else device_inject_fault(DEV, kind == BACKEND_FAULT_STICKY);
}

static void *gpu_loss_new(void *ctx, int max_n, int max_targets, int nc, int anchors) {
    return loss_work_new_gpu(DEV, max_n, max_targets, nc, anchors);
}
static void gpu_loss_free(void *ctx, void *w) { loss_work_free_gpu(w); }
static int gpu_loss_assign(void *ctx, void *w, const LossBatch *b, double *tss, Err *err) {
    return loss_assign_gpu_async(DEV, w, b, tss, err);
}
static void gpu_loss_compute(void *ctx, void *w, const LossBatch *b, const double *norm, double batch_mult,
                             Map grad[LOSS_LEVELS]) {
    loss_compute_gpu_async(DEV, w, b, norm, batch_mult, grad);
}
static void gpu_loss_items(void *ctx, void *w, double batch_mult, LossOut *out) { loss_items_gpu(w, batch_mult, out); }

static void *gpu_loss26_new(void *ctx, int max_n, int max_targets, int nc, int anchors) {
    return loss26_work_new_gpu(DEV, max_n, max_targets, nc, anchors);
}
static void gpu_loss26_free(void *ctx, void *w) { loss26_work_free_gpu(w); }
static int gpu_loss26_assign(void *ctx, void *w, const Loss26Batch *b, double *const tss[L26_BRANCHES], Err *err) {
    return loss26_assign_gpu_async(DEV, w, b, tss, err);
}
static void gpu_loss26_compute(void *ctx, void *w, const Loss26Batch *b, const Loss26Weights *wt,
                               const double *const norm[L26_BRANCHES], double batch_mult,
                               const Head26 *grad[L26_BRANCHES]) {
    loss26_compute_gpu_async(DEV, w, b, wt, norm, batch_mult, grad);
}
static void gpu_loss26_items(void *ctx, void *w, const Loss26Weights *wt, double batch_mult, Loss26Out *out) {
    loss26_items_gpu(w, wt, batch_mult, out);
}

// The state block (m and s, or m and v, n_all floats each) zeroed in the optimizer arena beside the EMA.
static void *gpu_opt26_new(void *ctx, MuParam *p, int n, int adamw, double muon, double sgd, float **state) {
    size_t n_all = musgd_state_floats(p, n);
    float *s = arena_take(&DEV->optim, 2 * n_all * sizeof(float), 256);
    zero(ctx, s, 2 * n_all);
    *state = s;
    if (adamw) return adamw_new_gpu(DEV, &DEV->optim, p, n, s, s + n_all, adamw == OPT26_KIND_ADAM);
    return musgd_new_gpu(DEV, &DEV->optim, p, n, muon, sgd, s + n_all, s);
}
static void gpu_opt26_step(void *ctx, void *o, const MuStep *st, long steps) {
    musgd_set_steps_gpu(o, steps);                 // the checkpointed count: AdamW's t
    musgd_step_gpu(DEV, o, st);
}
static void gpu_opt26_free(void *ctx, void *o) { musgd_free_gpu(o); }

static void prepare_weights(void *ctx, const float *state, size_t n) { conv_prepare_weights_gpu(DEV, state, n); }

const Backend backend_gpu = {
    .name = "cuda",
    .ops = {
        .conv_forward = conv_fwd, .conv_backward = conv_bwd,
        .bn_forward_train = bn_train, .bn_forward_eval = bn_eval, .bn_backward = bn_bwd, .bn_apply = bn_apply,
        .bn_frozen_stats = bn_frozen_stats, .bn_frozen_backward = bn_frozen_bwd,
        .bn_forward_train_sync = bn_train_sync, .bn_backward_sync = bn_bwd_sync,
        .silu_forward = silu_fwd, .silu_backward = silu_bwd, .add_forward = add_fwd,
        .copy_map = copy, .accumulate_map = accumulate,
        .maxpool_forward = maxpool_fwd, .maxpool_backward = maxpool_bwd,
        .avgpool_forward = avgpool_fwd, .avgpool_backward = avgpool_bwd,
        .upsample_forward = upsample_fwd, .upsample_backward = upsample_bwd, .resize_bilinear = resize_fwd,
        .dwconv_forward = dw_fwd, .dwconv_backward = dw_bwd, .attn_forward = attn_fwd, .attn_backward = attn_bwd,
        .prepare_weights = prepare_weights,
    },
    .unit = {
        .bn_silu_forward_train = bn_silu_train, .bn_silu_forward_eval = bn_silu_eval,
        .conv_bn_silu_forward_train = conv_bn_silu_train, .conv_bn_silu_backward = conv_bn_silu_bwd, .conv_bn_backward = conv_bn_bwd,
    },
    .fused = {
        .repconv_forward_train = repconv_train, .repconv_silu_backward = repconv_silu_bwd,
        .repconv_bn_backward = repconv_bn_bwd, .bn_silu_add_forward_train = bn_silu_add_train,
    },
    .dev = {
        .sync = sync, .bind = bind, .pull = pull, .zero = zero, .upload = upload, .upload_u8 = upload_u8, .augment = augment,
        .augment_batch = augment_batch,
        .download = download,
        .event_new = event_new, .event_free = event_free, .event_record = event_record, .event_wait = event_wait,
        .timer_new = timer_new, .timer_free = timer_free, .timer_record = timer_record,
        .timer_seconds = timer_seconds,
        .rec_begin = rec_begin, .rec_end = rec_end, .rec_replay = rec_replay, .rec_free = rec_free,
        .device_list = gpu_list, .model_to_device = model_to_device_gpu, .auto_batch = trainer_gpu_auto_batch,
        .plan_bytes = trainer_gpu_plan_bytes, .peer_setup = peer_setup, .host_pin = gpu_host_pin,
        .host_unpin = gpu_host_unpin,
        .device_id = device_id, .device_close = device_close, .scalars = scalars, .take = take, .reserve = reserve,
        .buffer_new = buffer_new, .buffer_free = buffer_free, .prefetch_u8 = prefetch_u8, .prefetch_aug = prefetch_aug,
        .decodes_jpeg = decodes_jpeg,
        .mem_used = mem_used,
        .usable = usable, .check = check, .inject_fault = inject_fault,
    },
    .loss = {
        .loss_new = gpu_loss_new, .loss_free = gpu_loss_free, .loss_assign = gpu_loss_assign,
        .loss_compute = gpu_loss_compute, .loss_items = gpu_loss_items,
        .loss26_new = gpu_loss26_new, .loss26_free = gpu_loss26_free, .loss26_assign = gpu_loss26_assign,
        .loss26_compute = gpu_loss26_compute, .loss26_items = gpu_loss26_items,
        .loss_norm = loss_norm,
    },
    .optim = {
        .optim_prepare = prepare, .grad_sumsq = sumsq, .grad_scale = scale, .sgd_apply = sgd,
        .grad_sumsq_to = sumsq_to, .grad_clip = clip, .ema_update = ema, .scale = scale_n,
        .opt26_new = gpu_opt26_new, .opt26_step = gpu_opt26_step, .opt26_free = gpu_opt26_free,
    },
    .val = {
        .nms_prepare = nms_prepare, .nms_release = nms_release, .nms_detect = nms_detect,
        .topk_prepare = topk_prepare, .topk_release = topk_release, .topk_detect = topk_detect,
        .vloss_prepare = vloss_prepare, .vloss_release = vloss_release, .vloss_stage = vloss_stage,
        .vloss_eval = vloss_eval, .vloss_eval26 = vloss_eval26,
    },
    .comm = {
        .comm_sum = comm_sum, .comm_sum_pairs = comm_sum_pairs,
        .comm_sum_begin = comm_sum_begin, .comm_sum_end = comm_sum_end,
    },
};
