// ops.h: the CPU reference ops of the model, forward and backward. Each op has plain loops that
// are the specification; conv also has a CBLAS (OpenBLAS) GEMM path checked against the loops.
// CUDA twins (gpu/*.cu) keep the same contracts with a Device* first.
// Conventions: outputs of forward are written (=); gradients of inputs and parameters
// accumulate (+=) unless a comment says "=", so a tensor read by several consumers gets the sum.
// A NULL output (or Map with data NULL) means "not needed": skip it.
#pragma once
#include "core/spec/tensor.h"

// ---- convolution --------------------------------------------------------------------------
// x (N,H,W,C) * w (K, C/groups, R, S) [PyTorch layout] + b (K, may be NULL) -> y (N,P,Q,K)
typedef struct { int N, C, H, W, K, R, S, stride, pad, groups, P, Q; } ConvDims;
ConvDims conv_dims(int N, int C, int H, int W, int K, int k, int stride, int pad, int groups);
size_t   conv_workspace_floats(const ConvDims *d);   // scratch the GEMM path needs (im2col)
void conv_forward_cpu(const ConvDims *d, Map x, const float *w, const float *b, Map y, float *ws);
void conv_backward_cpu(const ConvDims *d, Map x, const float *w, Map dy,
                       Map dx, float *dw, float *db, float *ws);  // dx, dw, db +=
// plain-loop references (slow; the tests compare the GEMM path against them)
void conv_forward_ref(const ConvDims *d, Map x, const float *w, const float *b, Map y);
void conv_backward_ref(const ConvDims *d, Map x, const float *w, Map dy, Map dx, float *dw, float *db);

// ---- batch normalisation over the N*H*W pixels of each channel ----------------------------
// Training: batch mean and biased variance normalise; running stats move by momentum with the
// unbiased variance (PyTorch semantics). mean/invstd (C) are saved for backward.
void bn_forward_train_cpu(Map z, const float *gamma, const float *beta, float eps, float momentum,
                          float *running_mean, float *running_var, float *mean, float *invstd, Map u);
// One training BN's parameters, running statistics (updated) and saved statistics (written), for the
// fused forms that take two (core/spec/backend.h repconv_forward_train).
typedef struct { const float *gamma, *beta; float *running_mean, *running_var, *mean, *invstd; } BnTrain;
void bn_forward_eval_cpu(Map z, const float *gamma, const float *beta, float eps,
                         const float *running_mean, const float *running_var, Map u);
// u = (z - mean) * invstd * gamma + beta (=) with saved statistics: a training BN's output recomputed
void bn_apply_cpu(Map z, const float *gamma, const float *beta, const float *mean, const float *invstd, Map u);
// du -> dz (=), dgamma, dbeta (+=); training-mode statistics (mean, invstd from the forward)
void bn_backward_cpu(Map z, const float *gamma, const float *mean, const float *invstd, Map du,
                     Map dz, float *dgamma, float *dbeta);
// Evaluation-mode BN inside training (a frozen layer of Ultralytics' freeze: its BatchNorm.eval()): the
// running statistics normalise and stay as they are. bn_frozen_stats: mean = running_mean, invstd =
// 1/sqrt(running_var + eps) (C), saved for bn_apply and the backward. bn_frozen_backward: the
// statistics are constants, so dz = du·gamma·invstd (=; dz may alias du), without bn_backward's
// batch-mean terms; dgamma += Σ du·xhat, dbeta += Σ du as bn_backward_cpu.
void bn_frozen_stats_cpu(int C, const float *running_mean, const float *running_var, float eps, float *mean,
                         float *invstd);
void bn_frozen_backward_cpu(Map z, const float *gamma, const float *mean, const float *invstd, Map du,
                            Map dz, float *dgamma, float *dbeta);

// Synchronised BN (SyncBatchNorm: --sync-bn with several devices): the statistics of the whole batch, which
// several devices hold in parts. BnSync's sum makes v[0, n) (host doubles) the sum of every device's v, added
// in device order, so each device gets the same doubles; every device calls it in the same order (one device
// alone: v unchanged).
typedef struct BnSync { void (*sum)(void *arg, double *v, int n); void *arg; } BnSync;
// bn_forward_train's contract over the whole batch: [M, Σz] summed (M: this device's pixels), the mean, then
// Σ(z - mean)² summed (two passes, as bn_forward_train_cpu's), var = that / ΣM; mean and invstd saved as floats
// (both required) and u = bn_apply_cpu's formula with them, so a replay is bn_apply; running statistics with
// ΣM's unbiased variance. With one device it saves bn_forward_train_cpu's statistics and running statistics.
void bn_forward_train_sync_cpu(Map z, const float *gamma, const float *beta, float eps, float momentum,
                               float *running_mean, float *running_var, float *mean, float *invstd, Map u,
                               const BnSync *sync);
// bn_backward_cpu over the whole batch: [M, Σdu, Σdu·xhat] summed; dz (=) from the sums of them all;
// dgamma, dbeta += this device's own sums (the devices' gradients are added later, as every other).
// With one device: bn_backward_cpu's bits.
void bn_backward_sync_cpu(Map z, const float *gamma, const float *mean, const float *invstd, Map du, Map dz,
                          float *dgamma, float *dbeta, const BnSync *sync);

// ---- elementwise --------------------------------------------------------------------------
void silu_forward_cpu(Map u, Map y);              // y = u * sigmoid(u); y may alias u
void silu_backward_cpu(Map u, Map dy, Map du);     // du = dy * silu'(u)  (=)
void add_forward_cpu(Map a, Map b, Map y);         // y = a + b
void copy_map_cpu(Map src, Map dst);               // dst = src
void accumulate_map_cpu(Map src, Map dst);         // dst += src
void zero_map_cpu(Map m);

// ---- pooling and resampling ---------------------------------------------------------------
// max pool, k x k, stride, pad; padding never wins (acts as -inf). Backward routes dy to the
// first maximum in scan order (PyTorch's choice on ties).
void maxpool_forward_cpu(Map x, int k, int stride, int pad, Map y);
void maxpool_backward_cpu(Map x, int k, int stride, int pad, Map dy, Map dx);   // dx +=
// average pool, k x k, stride, pad, count_include_pad, floor mode
void avgpool_forward_cpu(Map x, int k, int stride, int pad, Map y);
void avgpool_backward_cpu(int k, int stride, int pad, Map dy, Map dx);          // dx +=
// nearest-neighbour upsampling by an integer factor
void upsample_forward_cpu(Map x, int factor, Map y);
void upsample_backward_cpu(int factor, Map dy, Map dx);                           // dx +=
// bilinear resize of fp32 maps to y's H x W (core/spec/resize.c): F.interpolate(mode="bilinear",
// align_corners=False) as PyTorch's upsample_bilinear2d computes it, no fused multiply-adds. No backward:
// it resizes the images (multi_scale). resize_taps: output index i's lower source index, the step to
// the upper one (0 at the edge) and their weights, for in -> out samples.
void resize_bilinear_cpu(Map x, Map y);
void resize_taps(int in, int out, int i, int *lo, int *step, float *w_lo, float *w_hi);
