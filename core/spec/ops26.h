// ops26.h: the CPU reference ops YOLO26 adds to core/spec/ops.h: a depthwise convolution as its own loop
// kernel (DWConv and the attention's positional conv pe), and the core of C2PSA's Attention (yolo26.md
// section 1.3): per-head q/k/v taken from the qkv conv output, softmax(q^T k * scale), v @ attn^T.
// The convs around it (qkv, pe, proj) and their BN are ordinary ops the graph chains:
//   qkv = bn(conv1x1(x)); attn26_forward(qkv) -> y, v; y += bn(dwconv(v)); out = bn(conv1x1(y)).
// Contract as core/spec/ops.h: forward writes (=); gradients accumulate (+=); a NULL pointer (or a Map with
// data NULL) skips that output. Legend: N batch, H,W in, P,Q out, C channels, k kernel, T = H*W tokens,
// nh heads, kd key_dim, hd head_dim.
#pragma once
#include <stddef.h>

#include "core/spec/tensor.h"

// ---- depthwise convolution ---------------------------------------------------------------------
// x (N,H,W,C) * w (C,1,k,k) [PyTorch layout] + b (C, may be NULL) -> y (N,P,Q,C); pad k/2 (autopad),
// P = (H + 2 pad - k)/stride + 1. Zero padding.
typedef struct { int N, C, H, W, k, stride, pad, P, Q; } DwDims;
DwDims dw_dims(int N, int C, int H, int W, int k, int stride);
void dwconv_forward_cpu(const DwDims *d, Map x, const float *w, const float *b, Map y);
void dwconv_backward_cpu(const DwDims *d, Map x, const float *w, Map dy, Map dx, float *dw,
                         float *db);   // dx, dw, db +=

// ---- attention core (ultralytics Attention.forward between qkv and pe) -------------------------
// qkv channels are per-head interleaved: head h owns [h*(2kd+hd), +kd) = q, the next kd = k, the next
// hd = v; outputs use channel h*hd + c. scale = (float)(kd^-0.5), applied after the q^T k product.
typedef struct { int N, H, W, heads, key_dim, head_dim; float scale; } AttnDims;
// Attention(dim, num_heads, attn_ratio): head_dim = dim/nh, key_dim = int(head_dim*attn_ratio).
AttnDims attn_dims(int N, int H, int W, int dim, int heads, double attn_ratio);
int    attn_qkv_channels(const AttnDims *d);     // nh*(2kd+hd)
size_t attn_probs_floats(const AttnDims *d);     // N*nh*T*T: the softmax saved for backward
size_t attn_workspace_floats(const AttnDims *d); // backward scratch: T*T
// qkv (N,H,W,nh(2kd+hd)) -> y (N,H,W,nh*hd) = v @ attn^T per head, v (N,H,W,nh*hd) the v channels
// gathered in output order (the pe conv's input; NULL data skips), p (N,nh,T,T) the probabilities.
// The _cpu twin runs the products as CBLAS GEMMs; the _ref twin is the plain loops it is tested against.
void attn26_forward_cpu(const AttnDims *d, Map qkv, Map y, Map v, float *p);
void attn26_forward_ref(const AttnDims *d, Map qkv, Map y, Map v, float *p);
// dy: gradient of y; dv (may be NULL data): gradient reaching v through pe. dqkv += both, through
// the softmax and the q^T k product. p from the forward; ws: attn_workspace_floats floats.
void attn26_backward_cpu(const AttnDims *d, Map qkv, const float *p, Map dy, Map dv, Map dqkv,
                         float *ws);
void attn26_backward_ref(const AttnDims *d, Map qkv, const float *p, Map dy, Map dv, Map dqkv,
                         float *ws);
