// musgd.h (gpu): the CUDA twins of core/spec/musgd.h's optimizers for YOLO26: MuSGD (a Muon step with its
// bf16 Newton-Schulz iterations through cuBLAS, plus nesterov SGD) and AdamW, over a model's
// parameters in one GPU's memory. Same formulas and rounding points as the CPU reference; only the
// GEMMs' fp32 accumulation order differs (so Muon updates agree to bf16 noise, the rest bit for bit).
// Includable from C. Legend: n floats of one tensor; r x c the Muon matrix view; k matrices.
#pragma once
#include "gpu/device.h"

#ifdef __cplusplus
extern "C" {
#endif
#include "core/spec/musgd.h"   // C linkage from the .cu too

#ifdef USE_CUDA
// A GPU optimizer over params (w, g device pointers; borrowed, must outlive it). Its state buffers
// are the caller's, in device memory, zeroed by the caller, each at most musgd_state_floats(p, n)
// floats and packed exactly as the CPU twin packs them (so a checkpoint copies them as they are):
// MuSGD's m = MuSgd.m (Muon momentum, the muon-group parameters only, in parameter order) and
// s = MuSgd.s (SGD momentum, every parameter); AdamW's m, v = AdamW.m, AdamW.v (every parameter).
// The parameter tables it keeps (at most 128 * n_params + 512 bytes) come from arena `a` (the
// device's optimizer arena); making one waits for their upload. Newton-Schulz scratch comes from dev->scratch
// during a step and is given back before it returns: musgd_scratch_bytes_gpu is the largest need
// (AdamW needs none), for the memory plan.
typedef struct GpuMuSgd GpuMuSgd;
size_t    musgd_state_floats(const MuParam *p, int n_params);      // sum of the params' n
size_t    musgd_scratch_bytes_gpu(const MuParam *p, int n_params); // the largest step's scratch
GpuMuSgd *musgd_new_gpu(Device *dev, Arena *a, const MuParam *p, int n_params, double muon, double sgd,
                        float *m, float *s);
// l2 = 1: Adam (AdamW.l2 of the CPU twin)
GpuMuSgd *adamw_new_gpu(Device *dev, Arena *a, const MuParam *p, int n_params, float *m, float *v, int l2);
void      musgd_free_gpu(GpuMuSgd *o);                               // host side only
// AdamW's step count t (AdamW.steps of the CPU twin; MuSGD keeps none): saved with a checkpoint
// and set again on resume, before the next step.
long      musgd_steps_gpu(const GpuMuSgd *o);
void      musgd_set_steps_gpu(GpuMuSgd *o, long steps);
// One step of every parameter (musgd_step / adamw_step semantics, whichever o was made for), then
// zero the gradients. Queued on dev->stream; no host wait, no allocation. Muon matrices of one
// shape go through Newton-Schulz together (strided-batched GEMMs).
void      musgd_step_gpu(Device *dev, GpuMuSgd *o, const MuStep *st);

// musgd_newton_schulz(G, r, c, 1, X, ws) on k matrices at once: G, X device (k, r, c) row-major,
// X may not alias G. Scratch from dev->scratch, musgd_ns_scratch_bytes_gpu(r, c, k) bytes.
size_t musgd_ns_scratch_bytes_gpu(int r, int c, int k);
void   musgd_newton_schulz_gpu(Device *dev, const float *G, int r, int c, int k, float *X);
#endif

#ifdef __cplusplus
}
#endif
