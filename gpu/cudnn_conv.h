// cudnn_conv.h: convolutions through cuDNN 9's graph (backend) API, the implicit-GEMM path that
// replaces im2col + cuBLAS where cuDNN takes the shape (gpu/conv.cu decides and falls back).
// The library is opened at run time (dlopen), so a build made with cuDNN's headers still runs
// without it: cudnn_conv_available says once why not and conv.cu keeps its GEMM path.
// Legend: N batch, C channels in, K channels out, H,W in, P,Q out, R,S kernel, G groups.
//
// Layouts: maps are NHWC with a pixel stride (ld, so channel slices of concat buffers work), the
// filter is (K, R, S, C/G) ("KRSC"). Every op is out = alpha * conv + beta * out with alpha 1.
// Only numerically deterministic engines are used (no NONDETERMINISTIC, FFT, Winograd,
// down-converted inputs or reduced-precision reductions), one per shape, chosen by cuDNN's
// when the shape is first met and kept: by timing the heuristics' first few once per machine, the choice
// kept in a file every later run reads (gpu/cudnn_conv.c), or (YT_CUDNN_TUNE=0) the heuristics' first.
// Runs that share the file give the same bits.
#pragma once
#include <stddef.h>

#include "core/spec/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CUDNN_FWD, CUDNN_DGRAD, CUDNN_WGRAD } CudnnConvKind;

// One operand: device pointer, pixel stride (maps; ignored for the filter), bf16 or fp32 elements.
typedef struct { void *p; int ld; int bf16; } CudnnOperand;

// 1 when the library could be opened and YT_CONV is not "gemm"; the first call decides and, when
// it is not, prints one line saying why. Thread-safe.
int cudnn_conv_available(void);

// Per-device state (handle bound to the device's stream, the plan cache); NULL when unavailable.
// Create and free on the device's own thread (its current device).
void *cudnn_conv_ctx_new(void *stream);
void  cudnn_conv_ctx_free(void *ctx);

// Run one convolution of kind `kind`:
//   FWD:   y  = conv(x, w)          + beta * y     (x, w in; y out)
//   DGRAD: dx = conv_bwd_data(dy, w) + beta * dx   (x is dx, out; y is dy, in)
//   WGRAD: dw = conv_bwd_filter(x, dy) + beta * dw (w is dw, out; y is dy, in)
// tensor_cores: 0 excludes engines that use tensor cores (precision=fp32, TF32 off).
// ws/ws_cap: workspace; an engine needing more is skipped. Returns 0 when run, -1 when no
// deterministic engine takes this shape and these types (the caller falls back; nothing queued).
int cudnn_conv_run(void *ctx, CudnnConvKind kind, const ConvDims *d, CudnnOperand x, CudnnOperand w,
                   CudnnOperand y, float beta, int tensor_cores, void *ws, size_t ws_cap);

// Plans made, shapes refused and the host seconds spent making them so far on ctx (seconds may be
// NULL; bench/step, bench/conv_gpu and the tests print them).
void cudnn_conv_stats(void *ctx, int *plans, int *refused, double *seconds);

// For tests: the process's engine choices forgotten, as in a new process (the engine file is read again),
// and the number of shape classes this process has timed.
void cudnn_conv_tune_forget(void);
int  cudnn_conv_tune_timed(void);

#ifdef __cplusplus
}
#endif
