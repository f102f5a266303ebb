// backend.h: the ops one model executor (core/spec/model_run.c) needs, as a table of functions, so the
// same node walk drives the CPU reference ops (core/devices/backend_cpu.c) or their CUDA twins
// (gpu/backend_gpu.c). ctx is the backend's state: NULL for the CPU, the Device for a GPU.
// Contracts are those of core/spec/ops.h (outputs =, gradients +=); pointers live in the backend's memory.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "cfg/config.h"
#include "core/spec/gpu_info.h"
#include "core/spec/loss.h"
#include "core/spec/loss26.h"
#include "core/spec/musgd.h"
#include "core/spec/ops.h"
#include "core/spec/ops26.h"
#include "core/base/util.h"   // Err
#include "io/augment.h"       // AugRecipe, Image

// A trainable tensor as the optimizer sees it: weights, gradients, element count, and its group:
// 0 biases (no decay), 1 conv weights (decay), 2 BN weights (no decay), -1 fixed (the DFL
// projection: never updated, decayed or clipped; g may be NULL).
typedef struct { float *w, *g; size_t n; int group; } ParamSlot;

// A BN's parameters, the batch statistics its forward saved, and its parameter gradients (+=).
typedef struct { const float *gamma, *beta, *mean, *invstd; float *dgamma, *dbeta; } BnSaved;

// The validation entries' types (core/spec/nms.h, core/spec/loss.h), by tag: their headers stay out of every
// file that includes this one.
struct Det;
struct NmsOptions;
struct LossBatch;
struct LossOut;
struct Topk26Opts;
struct Model;

enum { BACKEND_FAULT_ERROR, BACKEND_FAULT_STICKY, BACKEND_FAULT_HANG };   // Backend.dev.inject_fault's kinds

// The table comes in sub-tables by concern, each filled by name (designated initialisers), so no two slots
// of one type can swap in a backend's table unseen: ops (every backend states each), unit and fused
// (optional fused forms: NULL, the executor composes the form from ops, so each composition is written once),
// dev (memory, events, timers, recordings, the device itself), loss, optim, val (validation) and comm
// (several processes). test/test_backend_ops.c checks every ops, unit and fused entry of every backend
// present against the plain CPU functions.

// The ops of core/spec/ops.h and core/spec/ops26.h, one slot each; every backend states all of them.
typedef struct BackendOps {
    void (*conv_forward)(void *ctx, const ConvDims *d, Map x, const float *w, const float *b, Map y, float *ws);
    void (*conv_backward)(void *ctx, const ConvDims *d, Map x, const float *w, Map dy, Map dx, float *dw,
                          float *db, float *ws);
    void (*bn_forward_train)(void *ctx, Map z, const float *gamma, const float *beta, float eps, float momentum,
                             float *running_mean, float *running_var, float *mean, float *invstd, Map u);
    void (*bn_forward_eval)(void *ctx, Map z, const float *gamma, const float *beta, float eps,
                            const float *running_mean, const float *running_var, Map u);
    void (*bn_backward)(void *ctx, Map z, const float *gamma, const float *mean, const float *invstd, Map du,
                        Map dz, float *dgamma, float *dbeta);
    // u = (z - mean) * invstd * gamma + beta with saved batch statistics (backward recomputes BN outputs)
    void (*bn_apply)(void *ctx, Map z, const float *gamma, const float *beta, const float *mean,
                     const float *invstd, Map u);
    // BN in evaluation mode inside training (the units of frozen YOLO26 layers; core/spec/ops.h's
    // bn_frozen_*): the saved statistics from the running ones (C of them), and the backward from du
    // with those statistics held constant: dz (=), dgamma, dbeta (+=).
    void (*bn_frozen_stats)(void *ctx, int C, const float *running_mean, const float *running_var, float eps,
                            float *mean, float *invstd);
    void (*bn_frozen_backward)(void *ctx, Map z, const float *gamma, const float *mean, const float *invstd, Map du,
                               Map dz, float *dgamma, float *dbeta);
    // SyncBatchNorm (--sync-bn, several devices): core/spec/ops.h's bn_forward_train_sync_cpu and
    // bn_backward_sync_cpu contracts; sync's sums are host doubles, so a device waits for its own sums
    // before calling it (these passes are not recorded). z, u, du, dz may be bf16 on a device.
    void (*bn_forward_train_sync)(void *ctx, Map z, const float *gamma, const float *beta, float eps, float momentum,
                                  float *running_mean, float *running_var, float *mean, float *invstd, Map u,
                                  const BnSync *sync);
    void (*bn_backward_sync)(void *ctx, Map z, const float *gamma, const float *mean, const float *invstd, Map du,
                             Map dz, float *dgamma, float *dbeta, const BnSync *sync);
    void (*silu_forward)(void *ctx, Map u, Map y);
    void (*silu_backward)(void *ctx, Map u, Map dy, Map du);
    void (*add_forward)(void *ctx, Map a, Map b, Map y);
    void (*copy_map)(void *ctx, Map src, Map dst);
    void (*accumulate_map)(void *ctx, Map src, Map dst);
    void (*maxpool_forward)(void *ctx, Map x, int k, int stride, int pad, Map y);
    void (*maxpool_backward)(void *ctx, Map x, int k, int stride, int pad, Map dy, Map dx);
    void (*avgpool_forward)(void *ctx, Map x, int k, int stride, int pad, Map y);
    void (*avgpool_backward)(void *ctx, int k, int stride, int pad, Map dy, Map dx);
    void (*upsample_forward)(void *ctx, Map x, int factor, Map y);
    void (*upsample_backward)(void *ctx, int factor, Map dy, Map dx);
    // multi_scale: y = x resized bilinearly to y's H x W (core/spec/ops.h resize_bilinear_cpu), fp32 maps
    void (*resize_bilinear)(void *ctx, Map x, Map y);
    // YOLO26 (core/spec/ops26.h contracts): the depthwise convolution (units with groups == C == K) and
    // the attention core; ws holds attn_workspace_floats (the CPU's; a GPU takes its own scratch). The
    // detach op is copy_map forward and nothing backward.
    void (*dwconv_forward)(void *ctx, const DwDims *d, Map x, const float *w, const float *b, Map y);
    void (*dwconv_backward)(void *ctx, const DwDims *d, Map x, const float *w, Map dy, Map dx, float *dw,
                            float *db);
    void (*attn_forward)(void *ctx, const AttnDims *d, Map qkv, Map y, Map v, float *p);
    void (*attn_backward)(void *ctx, const AttnDims *d, Map qkv, const float *p, Map dy, Map dv, Map dqkv,
                          float *ws);
    // A forward pass (and the backward after it) is about to read the weights state[0, n) (in ctx's
    // memory): a backend whose GEMMs take them rounded to bf16 rounds them all here, in one launch,
    // instead of once per convolution call (NULL: nothing to do).
    void (*prepare_weights)(void *ctx, const float *state, size_t n);
} BackendOps;

// Fused forms of a conv + BN (+ SiLU) unit, each an optional slot: NULL, the executor (core/spec/model_run.c)
// composes the same result from the ops, bit for bit on the CPU, which states none of them; a GPU's keep
// what the composition would write out (and, under bf16, keep dz as bf16 for its convolution).
typedef struct BackendUnit {
    // Forward: y = silu(BN_train(z)) (=). Composed: BN into y (into fp32 scratch first when y is bf16),
    // then the SiLU.
    void (*bn_silu_forward_train)(void *ctx, Map z, const float *gamma, const float *beta, float eps,
                                  float momentum, float *running_mean, float *running_var, float *mean,
                                  float *invstd, Map y);
    // y = silu(BN_eval(z)) (=) in one pass, bit for bit bn_forward_eval then silu_forward with the BN
    // output held in fp32 between them (evaluation's conv + BN + SiLU units: one launch and one pass over
    // the map fewer on a GPU).
    void (*bn_silu_forward_eval)(void *ctx, Map z, const float *gamma, const float *beta, float eps,
                                 const float *running_mean, const float *running_var, Map y);
    // Forward of a whole conv + BN + SiLU unit in training: z = conv(x, w) (=, no bias), then y = silu(BN_train(z))
    // (=) with bn's batch statistics saved and its running ones updated. Composed: conv_forward into z, then
    // bn_silu_forward_train (or its composition). A GPU under bf16 takes the statistics from a 1x1 convolution's
    // own epilogue (gpu/conv_bn.cu), so no pass re-reads z for them; its sums are added in another order than
    // the composition's, so the statistics agree within rounding, not to the bit. The GPU's table has the slot only
    // with YT_CONV_STATS=1 (core/devices/backends.c).
    void (*conv_bn_silu_forward_train)(void *ctx, const ConvDims *d, Map x, const float *w, Map z, const BnTrain *bn,
                                       float eps, float momentum, Map y, float *ws);
    // Backward, from dy (the gradient at y): dgamma, dbeta, dw (+=) and dx (+=; none when dx.data is NULL);
    // tmp and dz, of z's shape, are the backend's to use for du and dz (a GPU recomputes du; under bf16 it
    // keeps dz as bf16).
    void (*conv_bn_silu_backward)(void *ctx, const ConvDims *d, Map x, const float *w, Map z, const BnSaved *bn,
                                  Map dy, Map tmp, Map dz, Map dx, float *dw, float *ws);
    // The backward of a conv + BN unit from du, the gradient at the BN output (a RepConv branch, a
    // conv without activation): dgamma, dbeta, dw (+=), dx (+=; none when dx.data is NULL); dz, of
    // z's shape, is the backend's to use (a GPU under bf16 keeps it as bf16 for its convolution).
    void (*conv_bn_backward)(void *ctx, const ConvDims *d, Map x, const float *w, Map z, const BnSaved *bn, Map du,
                             Map dz, Map dx, float *dw, float *ws);
} BackendUnit;

// Fused forms across a RepConv's branches and across a conv and the residual addition after it, optional
// as the unit forms: NULL, the executor composes them (the CPU states none). YT_FUSE=0 turns a GPU's off
// (core/devices/backends.c: its table with this sub-table cleared) to measure what they save.
typedef struct BackendFused {
    // A RepConv in training. Forward, from the two branches' conv outputs z1, z2:
    // y = silu(BN1_train(z1) + BN2_train(z2)) (=), y fp32 or bf16; u (fp32, may be y) and tmp, of z1's shape,
    // are the backend's (the composition's). Backward: du = dy·silu'(BN1(z1) + BN2(z2)) (=) with each
    // BN's saved statistics (as bn_apply); tmp, of z1's shape, is the backend's.
    void (*repconv_forward_train)(void *ctx, Map z1, const BnTrain *bn1, Map z2, const BnTrain *bn2, float eps,
                                  float momentum, Map u, Map tmp, Map y);
    void (*repconv_silu_backward)(void *ctx, Map z1, const BnSaved *bn1, Map z2, const BnSaved *bn2, Map dy,
                                  Map tmp, Map du);
    // Then both branches' conv_bn_backward from that du, as two calls (dx1 and dx2: the same gradient of x,
    // each with its branch's fresh bit); dz, of z1's shape, is the backend's.
    void (*repconv_bn_backward)(void *ctx, const ConvDims *d1, const float *w1, Map z1, const BnSaved *bn1,
                                float *dw1, Map dx1, const ConvDims *d2, const float *w2, Map z2,
                                const BnSaved *bn2, float *dw2, Map dx2, Map x, Map du, Map dz, float *ws);
    // A conv unit's y = silu(BN_train(z)) whose one reader is the residual addition after it (core/spec/model_run.c):
    // out = a + y (=) in the same pass; y need not be written (its storage, bf16 or not, rounds what is added).
    void (*bn_silu_add_forward_train)(void *ctx, Map z, const BnTrain *bn, float eps, float momentum, Map a, Map y,
                                      Map out);
} BackendFused;

// The device: its memory, order between devices, timers, recordings, and what a trainer needs from it
// beyond the ops (core/trainer/trainer.c, core/devices/multi*.c).
typedef struct BackendDev {
    // wait until everything queued has finished (profiling, handing work between devices)
    void (*sync)(void *ctx);
    // make ctx's device the current one of the calling thread (each device's worker thread does it)
    void (*bind)(void *ctx);
    // dst (in ctx's memory) = n floats of src in src_ctx's memory (another device of this backend;
    // queued behind ctx's earlier work)
    void (*pull)(void *ctx, float *dst, void *src_ctx, const float *src, size_t n);
    // memory of the backend: zero n floats; copy n floats from / to host memory (blocking)
    void (*zero)(void *ctx, float *p, size_t n);
    void (*upload)(void *ctx, float *dst, const float *host, size_t n);
    // dst = n bytes of host memory / 255.0f: a uint8 batch becomes the model's input on the device,
    // a quarter of the float bytes to copy
    void (*upload_u8)(void *ctx, float *dst, const uint8_t *host, size_t n);
    // Augmentation (issue 37): host_out ((h,w,3) uint8 host memory, augment_recipe_size of r) = io/augment.h's
    // augment_apply_pixels of recipe r on its decoded sources `tiles` (host memory), byte for byte. The CPU
    // runs it; a GPU uploads the tiles and makes the sample on the device (gpu/augment.cu, in its scratch
    // arena) and waits for the bytes.
    void (*augment)(void *ctx, const AugRecipe *r, const Image *tiles, uint8_t *host_out);
    // augment=gpu (issue 37): dst ((n,h,w,3) floats in ctx's memory: the model's input) = the bytes of
    // samples s[0..n) (io/augment.h's augment_sample_pixels, each h×w) / 255.0f, as upload_u8 of those bytes
    // gives; queued on ctx's stream (the tiles' host memory stays unchanged until the step's wait). The CPU
    // makes them with augment_sample_pixels; a GPU uploads the samples' tiles (one copy of the span of the
    // loader's tile arena they use, or the copy prefetch_aug queued for exactly s[0..n)) and writes dst in
    // one launch.
    void (*augment_batch)(void *ctx, const AugSample *s, int n, int h, int w, float *dst);
    void (*download)(void *ctx, float *host, const float *src, size_t n);
    // Order between devices without a host wait (the bucketed gradient exchange): an event marks the
    // work queued on ctx so far (record); another device's queue waits for it (wait). The CPU's work
    // is done when queued, so there its events are NULL and both calls do nothing.
    void *(*event_new)(void *ctx);
    void (*event_free)(void *ctx, void *ev);
    void (*event_record)(void *ctx, void *ev);
    void (*event_wait)(void *ctx, void *ev);
    // Timers: timer_record marks the point ctx's queue has reached; timer_seconds is the time between
    // two marks once the device passed both (after the step's wait; 0 when it has not). The CPU's
    // marks are host clock readings.
    void *(*timer_new)(void *ctx);
    void (*timer_free)(void *ctx, void *tm);
    void (*timer_record)(void *ctx, void *tm);
    double (*timer_seconds)(void *ctx, void *from, void *to);
    // Recordings (CUDA Graphs; NULL where the backend has none): rec_begin makes ctx's queue record
    // the work queued on it instead of running it (0; -1 when it will not record: YT_GRAPHS=0, a
    // SYNC_DEBUG build); rec_end stops and returns the recording, ready to replay (*launches: the
    // kernels and copies it holds), or NULL when the work could not be recorded (nothing ran: the
    // caller runs it directly); rec_replay queues the
    // recorded work again, the same kernels with the same arguments; rec_free releases a recording.
    int (*rec_begin)(void *ctx);
    void *(*rec_end)(void *ctx, size_t *launches);
    void (*rec_replay)(void *ctx, void *rec);
    void (*rec_free)(void *ctx, void *rec);
    // Devices, without a ctx: device_list fills up to max GPUs present (their count; the CPU: 0);
    // model_to_device plans m's memory on GPU id at `precision` (a master's plan holds the optimizer's
    // states), prints the plan, allocates it, uploads the state and switches m to this backend (ctx:
    // m->be_ctx); 0, or -1 with err. auto_batch: batch=-1's choice over n GPUs (cfg->batch); plan_bytes:
    // the master's training plan for micro-batches of `micro` images. peer_setup: peer access between the
    // n GPUs ids with its self-test (1: every copy direct, 0: staged through host memory; report says
    // why). host_pin / host_unpin: page-lock a loader buffer (io/loader.h's LoaderPinning; NULL: no need).
    int    (*device_list)(GpuInfo *out, int max);
    int    (*model_to_device)(struct Model *m, int id, const char *precision, int master, Err *err);
    int    (*auto_batch)(Config *cfg, const int *ids, int n, Err *err);
    size_t (*plan_bytes)(const Config *cfg, int micro);
    int    (*peer_setup)(const int *ids, int n, char *report, size_t size);
    int    (*host_pin)(void *p, size_t bytes, void *arg);
    void   (*host_unpin)(void *p, void *arg);
    // A device's memory and failures: device_id (-1 on the CPU); device_close frees the context
    // model_to_device made (after model_free); scalars: the step's small values (core/trainer/trainer.h SC_*) in
    // the device's memory, NULL where host memory serves; take: n floats of the optimizer arena (256-byte
    // aligned, not zeroed; dies when the plan was wrong); reserve: give ctx an optimizer arena of `bytes`
    // when its plan had none (0, or -1: no room); buffer_new / buffer_free: n zeroed floats outside the
    // plan (NULL: no room); prefetch_u8: queue the copy of the next batch's n bytes so the step's
    // upload_u8 of the same bytes only converts; prefetch_aug: the same for augment=gpu, the tiles of samples
    // s[0..n) (one copy of the bytes they span) so the step's augment_batch of the same s and n only waits
    // for it on the device (the CPU's: nothing; tiles must stay unchanged until that step); mem_used: bytes
    // in use on the device (0: not known);
    // usable: 0 once a failure ended the device's context; check: 0, or -1 with the calling thread's
    // pending device error in msg; inject_fault (YT_FAIL_CUDA, YT_GPU_HANG_AT, tests): a failing call
    // through the fatal path (BACKEND_FAULT_ERROR, or BACKEND_FAULT_STICKY: one that ends the context), or
    // BACKEND_FAULT_HANG: the device's queue stops there, as behind a collective whose peer died (the CPU's:
    // nothing).
    int    (*device_id)(void *ctx);
    void   (*device_close)(void *ctx);
    double *(*scalars)(void *ctx);
    float *(*take)(void *ctx, size_t n_floats);
    int    (*reserve)(void *ctx, size_t bytes);
    float *(*buffer_new)(void *ctx, size_t n_floats);
    void   (*buffer_free)(void *ctx, float *p);
    void   (*prefetch_u8)(void *ctx, const uint8_t *host, size_t n);
    void   (*prefetch_aug)(void *ctx, const AugSample *s, int n);
    // decodes_jpeg: 1 when ctx's device decodes JPEG files itself (augment=gpu's samples whose sources the
    // loader left as bytes, AugSample.jpeg; a GPU with nvJPEG), else 0: the loader's workers decode them.
    int    (*decodes_jpeg)(void *ctx);
    size_t (*mem_used)(void *ctx);
    int    (*usable)(void *ctx);
    int    (*check)(void *ctx, char *msg, size_t size);
    void   (*inject_fault)(void *ctx, int kind);
} BackendDev;

// The detection losses on the device, queued.
typedef struct BackendLoss {
    // The detection loss (core/spec/loss.h) on the device, queued: loss_new: its work for up to max_n images,
    // max_targets rows, nc classes and `anchors` per image (NULL: no room); loss_assign: the target-score
    // sum into *tss (ctx's memory); loss_compute: normalised by *norm (ctx's memory), d total / d head
    // into grad (=); loss_items: the items of the last compute, once the device passed it (the step's wait).
    void  *(*loss_new)(void *ctx, int max_n, int max_targets, int nc, int anchors);
    void   (*loss_free)(void *ctx, void *w);
    int    (*loss_assign)(void *ctx, void *w, const LossBatch *b, double *tss, Err *err);
    void   (*loss_compute)(void *ctx, void *w, const LossBatch *b, const double *norm, double batch_mult,
                           Map grad[LOSS_LEVELS]);
    void   (*loss_items)(void *ctx, void *w, double batch_mult, LossOut *out);
    // The same for YOLO26's end-to-end loss (core/spec/loss26.h), both branches: tss[br], norm[br] in ctx's memory.
    void  *(*loss26_new)(void *ctx, int max_n, int max_targets, int nc, int anchors);
    void   (*loss26_free)(void *ctx, void *w);
    int    (*loss26_assign)(void *ctx, void *w, const Loss26Batch *b, double *const tss[L26_BRANCHES], Err *err);
    void   (*loss26_compute)(void *ctx, void *w, const Loss26Batch *b, const Loss26Weights *wt,
                             const double *const norm[L26_BRANCHES], double batch_mult,
                             const Head26 *grad[L26_BRANCHES]);
    void   (*loss26_items)(void *ctx, void *w, const Loss26Weights *wt, double batch_mult, Loss26Out *out);
    // loss_norm: dst[h] = max(Σ_k src[2k + h], 1), h = 0, 1: the main and auxiliary loss normalisers from n
    // devices' target-score sums, added in device order (a step without host waits).
    void   (*loss_norm)(void *ctx, const double *src, int n, double *dst);
} BackendLoss;

// The optimizers' device parts.
typedef struct BackendOptim {
    // the optimizer's elementwise parts (core/spec/optim.c has the formulas) over every slot of group
    // >= 0, prepared once: optim_prepare returns a handle (release it with free) for the slots and
    // their momentum buffers `buf` packed in slot order. Then: sum of squared gradients (double),
    // gradients *= s, and one SGD nesterov step with lr[group], momentum mu, weight decay wd on group 1.
    void *(*optim_prepare)(void *ctx, const ParamSlot *slots, int n_slots, float *buf);
    double (*grad_sumsq)(void *ctx, const void *prep);
    void (*grad_scale)(void *ctx, const void *prep, float s);
    void (*sgd_apply)(void *ctx, const void *prep, const float lr[3], float mu, float wd, int first);
    // A step without host waits (core/trainer/trainer.c, core/devices/multi.c): the values the host used to read back
    // stay in the backend's memory. grad_sumsq_to: Σ g² of prep's slots into *dst (a double, as
    // grad_sumsq). grad_clip: clip_grad_norm from n such sums (added in order): total = sqrt(Σ), coef =
    // 1 / (total + 1e-6) * max_norm in fp32, g *= coef where coef < 1.
    void (*grad_sumsq_to)(void *ctx, const void *prep, double *dst);
    void (*grad_clip)(void *ctx, const void *prep, const double *sumsq, int n, float max_norm);
    // ema <- ema*d; ema <- ema + (1-d)*x (fp32, PyTorch's rounding order)
    void (*ema_update)(void *ctx, float *ema, const float *x, size_t n, double d);
    // p *= s over n floats (averaging across devices)
    void (*scale)(void *ctx, float *p, size_t n, float s);
    // YOLO26's optimizers (core/spec/musgd.h) over params (pointers in ctx's memory): opt26_new makes MuSGD
    // (SGD when no parameter is in a Muon group) or, adamw = OPT26_KIND_ADAMW, AdamW (OPT26_KIND_ADAM:
    // Adam, gelan's optimizer=Adam), with its state block zeroed in
    // *state: [s | m] or [m | v], packed as the CPU twin packs them (what checkpoints save);
    // opt26_step: one step with AdamW's step count `steps`, then zero the gradients; opt26_free frees
    // what opt26_new made (a GPU's state block lies in its optimizer arena).
    void  *(*opt26_new)(void *ctx, MuParam *p, int n_params, int adamw, double muon, double sgd, float **state);
    void   (*opt26_step)(void *ctx, void *opt, const MuStep *st, long steps);
    void   (*opt26_free)(void *ctx, void *opt);
} BackendOptim;

// Validation on the device: detections and losses, no gradients. On a GPU the work of nms_*, vloss_* and
// topk_* is kept on the device after release for the next pass (freed with it).
typedef struct BackendVal {
    // core/spec/nms.h's nms_decode + nms_run for whole batches of head maps in the backend's memory, detection for
    // detection; only the kept ones reach the host. nms_prepare: work for up to max_n images of A anchors and
    // nc classes under o; NULL when the backend does not do it for o (the caller decodes on the host).
    // nms_detect: images 0..n-1 of head[0..2] (fp32, 64 + nc channels, strides[l] pixels per cell): image
    // i's detections, best first, into out + i * o->max_det (host memory), their count into nd[i].
    void *(*nms_prepare)(void *ctx, int max_n, int A, int nc, const struct NmsOptions *o);
    void (*nms_release)(void *ctx, void *prep);
    void (*nms_detect)(void *ctx, void *prep, const Map head[3], const int strides[3], int n, struct Det *out, int *nd);
    // YOLO26's NMS-free top-k (end-to-end heads): core/spec/topk26.h's topk26_decode + topk26_select for whole
    // batches, detection for detection; only the kept ones reach the host. topk_prepare: work for up to
    // max_n images of A anchors, nc classes, max_det; NULL when it cannot. topk_detect: images 0..n-1 of
    // head[0..2] (fp32 one-to-one maps, 4 + nc channels) of an input img_h high, under o (o->max_det <= the
    // prepared one): image i's detections, best first, into out + i * o->max_det (host memory), their count
    // into nd[i].
    void *(*topk_prepare)(void *ctx, int max_n, int A, int nc, int max_det);
    void (*topk_release)(void *ctx, void *prep);
    void (*topk_detect)(void *ctx, void *prep, const Map head[3], int img_h, int n, const struct Topk26Opts *o,
                        struct Det *out, int *nd);
    // Validation losses: vloss_prepare: work for batches of up to max_n images, max_targets target rows, nc
    // classes, A anchors, of DFL heads (64 + nc channels) or, end2end, YOLO26's one-to-one heads (4 + nc),
    // NULL when it cannot; vloss_stage: keep the head maps of a forward chunk (fp32, head[l].N images) as
    // images n0.. of a batch of N; vloss_eval (DFL): core/spec/loss.h's items over the kept batch (b gives
    // classes, input size and targets); vloss_eval26 (end2end): core/spec/loss26.h's loss26_forward_backward
    // over it with the kept maps in both branches.
    void *(*vloss_prepare)(void *ctx, int max_n, int max_targets, int nc, int A, int end2end);
    void (*vloss_release)(void *ctx, void *prep);
    void (*vloss_stage)(void *ctx, void *prep, const Map head[3], int n0, int N);
    int (*vloss_eval)(void *ctx, void *prep, const struct LossBatch *b, struct LossOut *out, Err *err);
    int (*vloss_eval26)(void *ctx, void *prep, const Loss26Batch *b, const Loss26Weights *wt, Loss26Out *out,
                        Err *err);
} BackendVal;

// Several processes (core/procs/comm.h, core/procs/procs.c). Each slot may be NULL (the CPU states only
// comm_sum_begin and comm_sum_end): the sums go through host memory and the process transport.
typedef struct BackendComm {
    // p[0, n) in ctx's memory := its sum over every process, queued behind ctx's work (NCCL between GPUs).
    // 0 when done; -1: the sum goes through host memory and the process transport.
    int  (*comm_sum)(void *ctx, float *p, size_t n);
    // The step's normaliser without a host wait: local[h] = src[h] + src[2 + h] + ... over n pairs of doubles
    // in ctx's memory (pair order; n = 0: 0), then dst[h] := the processes' local[h] added in rank order, as
    // comm_sum_doubles adds them (core/procs/comm.c: the same doubles on every process), h = 0, 1; queued behind
    // ctx's work (NCCL: an all-gather between the processes' GPUs, then a one-thread sum). 0 when queued;
    // -1: the sums go through host memory and the process transport.
    int  (*comm_sum_pairs)(void *ctx, const double *src, int n, double *dst);
    // The gradients' sums overlapped with the backward: comm_sum_begin queues p[0, n)'s sum over every
    // process (as comm_sum) on a queue of its own beside ctx's, behind the work queued on ctx so far, and
    // returns at once (ctx's later work runs beside it and must not touch p[0, n)); comm_sum_end makes ctx's
    // queue wait for every sum begun since the last end (nothing when none was). Both queue work only, so a
    // recording (rec_begin) can hold them, a begin and its end in the same recording. n = 0: nothing queued,
    // the answer only. 0 when queued; -1 or NULL: no such transport (use comm_sum). The CPU keeps the sums
    // begun and does them, in order, through the process transport at the end (in the host thread: the
    // begins may come from a device's worker thread).
    int  (*comm_sum_begin)(void *ctx, float *p, size_t n);
    void (*comm_sum_end)(void *ctx);
} BackendComm;

typedef struct Backend {
    const char *name;     // "cpu", "cuda"
    BackendOps ops;
    BackendUnit unit;
    BackendFused fused;
    BackendDev dev;
    BackendLoss loss;
    BackendOptim optim;
    BackendVal val;
    BackendComm comm;
} Backend;

extern const Backend backend_cpu;
// The GPU backend when this build has one (core/devices/backends.c, the one place that knows), else NULL.
const Backend *backend_gpu_get(void);
// 1 when the GPU backend of this build uses cuDNN (USE_CUDNN), else 0 (`yolotrain --version`).
int backend_built_with_cudnn(void);
