// ops.h (gpu): the CUDA twins of core/spec/ops.h. Same argument order and the same = / += contract
// as the CPU twin, with a Device* first; Map data and every pointer are device memory. Each op is
// queued on dev->stream (no host sync) and borrows dev->scratch only for its own duration.
#pragma once
#include "gpu/device.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "core/spec/ops.h"
#include "io/augment.h"

// ---- convolution (gpu/conv.cu): im2col + cuBLAS, or one GEMM for a 1x1 stride-1 conv ---------
// Scratch bytes conv_forward_gpu/conv_backward_gpu need on `dev` (its precision and im2col cap).
size_t conv_workspace_bytes_gpu(const Device *dev, const ConvDims *d);
// Under GPU_BF16 with dev->wbf16 room for n: state[0, n) rounded to bf16 there, in one launch; until
// the next call, a conv whose weights lie in it reads them from there (Backend.ops.prepare_weights).
// Otherwise (or YT_WEIGHTS_ONCE=0) nothing, and each conv rounds its weights itself.
void conv_prepare_weights_gpu(Device *dev, const float *state, size_t n);
void conv_forward_gpu(Device *dev, const ConvDims *d, Map x, const float *w, const float *b, Map y);
void conv_backward_gpu(Device *dev, const ConvDims *d, Map x, const float *w, Map dy, Map dx,
                       float *dw, float *db);   // dx, dw, db +=
// A pointwise conv's weights (K, C) as the pass's bf16 copy holds them (conv_prepare_weights_gpu), or NULL
const void *conv_prepared_weights_gpu(const Device *dev, const ConvDims *d, const float *w);
// The stem (3 channels in, 3x3, groups 1, K 16/32/64) runs as a direct convolution (gpu/conv_stem.cu):
// conv_forward_gpu and conv_backward_gpu's weight gradient take that path by themselves.
int    conv_stem_fits(const ConvDims *d);
size_t conv_stem_workspace_bytes_gpu(const ConvDims *d);
void   conv_stem_forward_gpu(Device *dev, const ConvDims *d, Map x, const float *w, const float *b, Map y);
void   conv_stem_wgrad_gpu(Device *dev, const ConvDims *d, Map x, Map dy, float *dw);   // dw +=
// 1 where the data gradient of conv d comes out rounded to bf16 (cuDNN's, under GPU_BF16): core/spec/grad_plan.c
// stores the gradients such convs alone write as bf16 (model_plan_grad_storage)
int conv_dgrad_bf16_gpu(const ConvDims *d);
// conv_backward_gpu without a bias, under GPU_BF16, with dy given as packed (N*P*Q, K) bf16 values
void conv_backward_bf16dy_gpu(Device *dev, const ConvDims *d, Map x, const float *w,
                              const void *dy16, Map dx, float *dw);

// ---- a 1x1 convolution with its BN statistics in the epilogue (gpu/conv_bn.cu, issue 34) ---------------
// Backend.unit.conv_bn_silu_forward_train: z = conv(x, w) (=, bf16), the BN statistics of the stored z from the
// convolution's tiles (saved and running ones updated), y = silu(BN(z)) (=). Where conv_bn_fits_gpu is 0 (not
// bf16 maps under GPU_BF16, not a 1x1 stride-1 conv of groups 1, C or K not a multiple of 8, unaligned maps),
// conv_forward_gpu then bn_silu_forward_train_gpu.
int conv_bn_fits_gpu(const Device *dev, const ConvDims *d, Map x, Map z);
size_t conv_bn_workspace_bytes_gpu(const ConvDims *d);   // scratch of the fused path for conv d
void conv_bn_silu_forward_train_gpu(Device *dev, const ConvDims *d, Map x, const float *w, Map z, const BnTrain *bn,
                                    float eps, float momentum, Map y);

// ---- batch normalisation (gpu/bn.cu): statistics in double, deterministic ----------------------
size_t bn_workspace_bytes_gpu(Map z);   // scratch the three BN twins need for this map
void bn_forward_train_gpu(Device *dev, Map z, const float *gamma, const float *beta, float eps,
                          float momentum, float *running_mean, float *running_var, float *mean,
                          float *invstd, Map u);
// The same, fused with SiLU in one pass: y = silu(u); u is also stored unless u.data is NULL (the
// backward can recompute it from z and the saved statistics).
void bn_silu_forward_train_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                               float eps, float momentum, float *running_mean, float *running_var,
                               float *mean, float *invstd, Map u, Map y);
// A RepConv's forward after its two convs: y = silu(BN1_train(z1) + BN2_train(z2)) (=; y fp32 or bf16), the
// two BNs' statistics saved and their running ones updated; bit for bit bn_forward_train_gpu twice,
// accumulate_map_gpu, silu_forward_gpu, in three launches and without storing the fp32 sum.
void repconv_forward_train_gpu(Device *dev, Map z1, const BnTrain *bn1, Map z2, const BnTrain *bn2, float eps,
                               float momentum, Map y);
// A conv unit's y = silu(BN_train(z)) taken by the residual addition after it: out = a + y in the
// normalising pass, y (its storage rounding applied) not written; bit for bit bn_silu_forward_train_gpu
// into y, then add_forward_gpu(a, y, out).
void bn_silu_add_forward_train_gpu(Device *dev, Map z, const BnTrain *bn, float eps, float momentum, Map a, Map y,
                                   Map out);
// y = silu((z - shift)·scale + beta) (=): the normalising pass of bn_silu_forward_train_gpu from a per-channel
// shift and scale made elsewhere (gpu/conv_bn.cu)
void bn_silu_normalise_gpu(Device *dev, Map z, const float *shift, const float *scale, const float *beta, Map y);
void bn_forward_eval_gpu(Device *dev, Map z, const float *gamma, const float *beta, float eps,
                         const float *running_mean, const float *running_var, Map u);
// The same fused with SiLU in one pass: y = silu(u), u never stored (bit for bit the two launches).
void bn_silu_forward_eval_gpu(Device *dev, Map z, const float *gamma, const float *beta, float eps,
                              const float *running_mean, const float *running_var, Map y);
void bn_backward_gpu(Device *dev, Map z, const float *gamma, const float *mean,
                     const float *invstd, Map du, Map dz, float *dgamma, float *dbeta);
// bn_backward_gpu with dz written packed (M, C) as bf16 into dz16 (z contiguous), for
// conv_backward_bf16dy_gpu (the RepConv branches' backward under bf16)
void bn_backward_bf16_gpu(Device *dev, Map z, const float *gamma, const float *mean,
                          const float *invstd, Map du, void *dz16, float *dgamma, float *dbeta);
// The backward of y = silu(BN(z)) from dy in two passes over (z, dy): du = dy·silu'(u) is
// recomputed (as bn_apply_silu_backward_gpu) where needed, never stored; dz (=), dgamma, dbeta (+=).
void bn_silu_backward_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                          const float *mean, const float *invstd, Map dy, Map dz, float *dgamma,
                          float *dbeta);
// The same with dz written packed (M, C) as bf16 into dz16 (z must be contiguous): what
// conv_backward_bf16dy_gpu reads, so dz is neither stored in fp32 nor converted again.
void bn_silu_backward_bf16_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                               const float *mean, const float *invstd, Map dy, void *dz16,
                               float *dgamma, float *dbeta);
// u = (z - mean)·invstd·gamma + beta from saved statistics (=), as the backward recomputes BN
// outputs on the CPU (core/spec/model_run.c bn_recompute), bit for bit.
void bn_apply_gpu(Device *dev, Map z, const float *gamma, const float *beta, const float *mean,
                  const float *invstd, Map u);
// One RepConv branch's backward: its conv (d, w, dw +=, dx with its fresh bit) and BN (z, saved statistics,
// dgamma, dbeta +=).
typedef struct {
    const ConvDims *d;
    const float *w;
    float *dw;
    Map z, dx;
    const float *gamma, *mean, *invstd;
    float *dgamma, *dbeta;
} ConvBnBranch;
// Both branches' BN and conv backward from du (fp32) under bf16, dz16 (M·C bf16) between them: the two BNs'
// sums and finishes in two launches (four before); bit for bit bn_backward_bf16_gpu and
// conv_backward_bf16dy_gpu per branch. z contiguous.
void repconv_bn_backward_bf16_gpu(Device *dev, const ConvBnBranch *b1, const ConvBnBranch *b2, Map x, Map du,
                                  void *dz16);
// A RepConv's du = dy·silu'(u1 + u2) (=), u1 and u2 recomputed from z1 and z2 as bn_apply_gpu, in one pass:
// bit for bit bn_apply_gpu twice, accumulate_map_gpu, silu_backward_gpu.
void repconv_silu_backward_gpu(Device *dev, Map z1, const float *gamma1, const float *beta1, const float *mean1,
                               const float *invstd1, Map z2, const float *gamma2, const float *beta2,
                               const float *mean2, const float *invstd2, Map dy, Map du);
// du = dy·silu'(u) (=) with u recomputed as bn_apply_gpu, in one pass; du may alias dy or be a
// contiguous temp.
void bn_apply_silu_backward_gpu(Device *dev, Map z, const float *gamma, const float *beta,
                                const float *mean, const float *invstd, Map dy, Map du);
// BN in evaluation mode inside training (core/spec/ops.h bn_frozen_*): the saved statistics from the
// running ones, bit for bit as the CPU; the backward with them constant: dz = du·gamma·invstd (=),
// dgamma, dbeta (+=) as bn_backward_gpu.
void bn_frozen_stats_gpu(Device *dev, int C, const float *running_mean, const float *running_var, float eps,
                         float *mean, float *invstd);
void bn_frozen_backward_gpu(Device *dev, Map z, const float *gamma, const float *mean, const float *invstd,
                            Map du, Map dz, float *dgamma, float *dbeta);
// SyncBatchNorm (gpu/bn_sync.cu): core/spec/ops.h's bn_forward_train_sync_cpu and bn_backward_sync_cpu, in
// their steps. Unlike the ops above they wait on the host for this device's sums before sync->sum (forward
// twice, backward once), so they are never recorded in a CUDA graph. z, u, du, dz may each be bf16-stored;
// dz may alias du (same storage). Their small buffers are kept on the Device (DEVICE_KEPT_BNSYNC).
void bn_forward_train_sync_gpu(Device *dev, Map z, const float *gamma, const float *beta, float eps, float momentum,
                               float *running_mean, float *running_var, float *mean, float *invstd, Map u,
                               const BnSync *sync);
void bn_backward_sync_gpu(Device *dev, Map z, const float *gamma, const float *mean, const float *invstd, Map du,
                          Map dz, float *dgamma, float *dbeta, const BnSync *sync);

// ---- elementwise (gpu/elementwise.cu) ----------------------------------------------------------
// dst (n floats, device) = src (n bytes, host) / 255.0f: a share queued by device_prefetch_u8 is waited
// for on the GPU; any other is copied through a staging buffer and waited for on the host
void upload_u8_gpu(Device *dev, float *dst, const uint8_t *src, size_t n);
void silu_forward_gpu(Device *dev, Map u, Map y);            // y may alias u
void silu_backward_gpu(Device *dev, Map u, Map dy, Map du);  // du = (may alias dy)
void add_forward_gpu(Device *dev, Map a, Map b, Map y);
void copy_map_gpu(Device *dev, Map src, Map dst);            // src, dst must not partly overlap
void accumulate_map_gpu(Device *dev, Map src, Map dst);
void zero_map_gpu(Device *dev, Map m);

// ---- pooling and resampling (gpu/pool.cu); backward passes gather, so they are deterministic ---
void maxpool_forward_gpu(Device *dev, Map x, int k, int stride, int pad, Map y);
void maxpool_backward_gpu(Device *dev, Map x, int k, int stride, int pad, Map dy, Map dx);
size_t maxpool_workspace_bytes_gpu(Map y);   // scratch maxpool_backward_gpu takes (y: the output)
void avgpool_forward_gpu(Device *dev, Map x, int k, int stride, int pad, Map y);
void avgpool_backward_gpu(Device *dev, int k, int stride, int pad, Map dy, Map dx);
void upsample_forward_gpu(Device *dev, Map x, int factor, Map y);
void upsample_backward_gpu(Device *dev, int factor, Map dy, Map dx);
// bilinear resize of fp32 maps (gpu/resize.cu): core/spec/resize.c's resize_bilinear_cpu, bit for bit
void resize_bilinear_gpu(Device *dev, Map x, Map y);

// ---- augmentation (gpu/augment.cu, issue 37): io/augment.h's augment_apply_pixels on the device -----
// out (device memory, augment_recipe_size of r, (H,W,3) uint8) = the sample of recipe r made from its
// decoded sources tiles[0..augment_recipe_sources) (host memory; uploaded into dev->scratch, given back
// before returning); queued on dev->stream, the host memory free to reuse at once.
void augment_apply_gpu(Device *dev, const AugRecipe *r, const Image *tiles, uint8_t *out);
// The same into host memory, waited for (the backend table's dev.augment).
void augment_pixels_gpu(Device *dev, const AugRecipe *r, const Image *tiles, uint8_t *host_out);
// augment=gpu's batch (the backend table's dev.augment_batch): dst (device, (n,H,W,3) floats, the model's
// input) = each sample's bytes / 255.0f, queued on dev->stream: the tiles as augment_prefetch_gpu queued them
// for exactly these s and n (waited for on the device), else copied now (one span of the samples' shared
// arena, through an aug stage, or scratch when none); then one kernel for the samples, each letterbox body
// that needs a resize resized before it. Samples whose tiles (or bodies and tables in scratch) do not fit
// at once are made in runs that do. The tiles must stay unchanged until dev->stream passes the kernel.
void augment_batch_gpu(Device *dev, const AugSample *s, int n, int H, int W, float *dst);
// Queue on dev->copy_stream the copy of samples s[0..n)'s tiles (one span of their shared arena, page-locked
// for the copy to be asynchronous) into the older aug stage, behind the kernel that last read it; nothing
// when there is no stage, the span does not fit it, or the tiles share no arena.
void augment_prefetch_gpu(Device *dev, const AugSample *s, int n);
// 1 when dev decodes the JPEG sources the loader left as bytes (AugSample.jpeg) with nvJPEG (opened here, once:
// a note when it does not open), else 0; augment_batch_gpu decodes them either way (on the host without it).
int  augment_gpu_decodes(Device *dev);
// Tests: dev decodes the deferred sources with nvJPEG (on: opened again; returns whether it opened) or on the
// host (0).
int  augment_nvjpeg_gpu(Device *dev, int on);
// The scratch augmentation takes at most: one sample's at img_size S (its 8 tiles, a letterbox body, the
// bytes of augment_pixels_gpu, the HSV tables), or with max_n > 0 (augment=gpu) the bodies, tables and
// descriptors of max_n samples of side S_aug made at once. The memory plan's room for augmentation.
size_t augment_scratch_bytes_gpu(int S, int S_aug, int max_n);
// ARENA_AUG's bytes for micro-batches of max_n samples at img_size S: two stages of AUG_STAGE_IMAGES S x S
// images a sample (a mosaic's 4 tiles of long side S, mixup's 4 more in some: larger runs go in parts).
enum { AUG_STAGE_IMAGES = 6 };
size_t augment_stage_bytes_gpu(int max_n, int S);
// Tests: cap each aug stage of dev at `bytes` (at most what the plan gave, which SIZE_MAX restores), so
// batches go in runs; 0: the tiles go through scratch.
void augment_stage_cap_gpu(Device *dev, size_t bytes);

#ifdef __cplusplus
}
#endif
