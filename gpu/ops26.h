// ops26.h (gpu): the CUDA twins of core/spec/ops26.h, with a Device* first and the same contracts: forward
// writes (=), backward adds (+=); Map data and every pointer are device memory; each op is queued on
// dev->stream (no host sync) and borrows dev->scratch only while it runs.
#pragma once
#include "gpu/device.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "core/spec/ops26.h"

#ifdef USE_CUDA
// ---- depthwise convolution (gpu/dwconv.cu): direct loops, dx by gather, dw/db by partial sums -------
size_t dwconv_workspace_bytes_gpu(const DwDims *d);   // scratch dwconv_backward_gpu takes
void dwconv_forward_gpu(Device *dev, const DwDims *d, Map x, const float *w, const float *b, Map y);
void dwconv_backward_gpu(Device *dev, const DwDims *d, Map x, const float *w, Map dy, Map dx, float *dw,
                         float *db);   // dx, dw, db +=

// ---- attention core (gpu/attn.cu): strided-batched cuBLAS GEMMs over the heads of one image (fp32,
// TF32 off whatever dev->precision says: these products are ~1% of the model's work) + softmax kernels
size_t attn_workspace_bytes_gpu(const AttnDims *d);   // scratch attn26_backward_gpu takes
void attn26_forward_gpu(Device *dev, const AttnDims *d, Map qkv, Map y, Map v, float *p);
void attn26_backward_gpu(Device *dev, const AttnDims *d, Map qkv, const float *p, Map dy, Map dv, Map dqkv);
#endif

#ifdef __cplusplus
}
#endif
