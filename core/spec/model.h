// model.h: a detector built from the config's layer table: its parameters (PyTorch state-dict names,
// one contiguous float array), its graph of primitive nodes, and the executor (model_run.c) that
// walks the graph on a backend (core/spec/backend.h: the CPU reference ops, or the CUDA twins).
// Legend: N batch, H,W map size, C channels; values are NHWC Maps (core/spec/tensor.h).
#pragma once
#include <stdint.h>

#include "cfg/config.h"
#include "core/spec/backend.h"
#include "core/spec/ops.h"
#include "core/spec/ops26.h"

// ---- parameters ----------------------------------------------------------------------------
typedef enum {
    PK_WEIGHT,        // conv weight: trained, weight decay (optimizer group 1)
    PK_BN_WEIGHT,     // BN gamma: trained, no decay (group 2)
    PK_BIAS,          // BN beta and conv biases: trained, no decay (group 0)
    PK_RUNNING_MEAN,  // BN buffers: not trained, averaged by EMA
    PK_RUNNING_VAR,
    PK_FIXED,         // the DFL projection 0..15: saved, never trained
} ParamKind;

// A forward or backward pass of one shape recorded by the backend (model_run.c's run_pass): training's
// passes in up to MODEL_RECS_TRAIN slots, evaluation forwards (validation, detect) in up to MODEL_RECS_EVAL.
enum { MODEL_RECS_TRAIN = 8, MODEL_RECS_EVAL = 4, MODEL_RECS = MODEL_RECS_TRAIN + MODEL_RECS_EVAL };
typedef struct { int state, kind, n, h, w; void *rec; size_t launches; } ModelRecording;

typedef struct {
    char      name[128];   // e.g. "model.4.cv2.0.m.1.cv1.conv1.conv.weight"
    ParamKind kind;
    int       shape[4], ndim;
    size_t    offset, n;   // floats into Model.state (and Model.grad, same layout)
    int       frozen;      // freeze= names its layer: no update (core/spec/transfer.h freeze_apply)
} ParamInfo;

static inline int param_trainable(ParamKind k) { return k <= PK_BIAS; }
static inline int param_group(ParamKind k) {   // optimizer group: 0 bias, 1 decayed weight, 2 BN weight
    return k == PK_BIAS ? 0 : k == PK_WEIGHT ? 1 : k == PK_BN_WEIGHT ? 2 : -1;
}

// ---- graph ---------------------------------------------------------------------------------
// A value is a feature map: its own buffer, or a channel slice of another value (concat inputs are
// written into their slice directly; a split is a slice). Gradients mirror values exactly.
typedef struct {
    int C, stride;          // channels; spatial size = input size / stride
    int parent, c0;         // slice of value `parent` at channel c0; parent = -1: owns a buffer
    size_t offset;          // owned: floats into the activation (and gradient) arena, for max batch
    int no_grad;            // 1: no gradient flows into it (the images; the outputs of OP_DETACH)
    int bf16;               // owned: stored as bfloat16 (core/spec/act_plan.c); slices read their owner's
    int regen;              // owned, the CPU's plan only: not kept for the backward (activation checkpointing):
                            // it shares a region with others while the forward needs it, and the backward
                            // runs its writers again (Model.replay_*) before it is read (core/spec/act_plan.c)
} Value;

// The gradient writes of a node's backward that Model.grad_fresh marks: into `in` (the conv unit
// cv, the copy, the addition's first operand), RepConv's second unit cv2 into `in`, OP_ADD's `in2`.
enum { FRESH_IN = 1, FRESH_IN_CV2 = 2, FRESH_IN2 = 4 };

typedef enum {
    OP_CONV,      // conv (+ BN + SiLU when bn >= 0), or conv + bias (head outputs)
    OP_REPCONV,   // SiLU(BN(conv3x3 x) + BN(conv1x1 x)): RepConvN in training form
    OP_MAXPOOL, OP_AVGPOOL, OP_UPSAMPLE,
    OP_COPY,      // out = in (a model-level concat input copied into its slice)
    OP_ADD,       // out = in + in2 (residual)
    OP_ATTN,      // the attention core of C2PSA/PSABlock (core/spec/ops26.h): in = qkv, out = y, out2 = v
    OP_DETACH,    // out = in forward; no gradient flows back to in (the one-to-one head's features)
} OpKind;
enum { OP_KINDS = OP_DETACH + 1 };   // how many there are (name tables check their size against it)

// A conv unit whose groups == C == K runs the depthwise ops (core/spec/ops26.h), not the GEMM convolution.
typedef struct {        // one conv + optional BN; parameter indices into Model.params (-1: none)
    ConvDims d;          // N is set at run time
    int w, b;            // conv weight, conv bias
    int bn_w, bn_b, bn_mean, bn_var;
    size_t z;            // offset of the pre-BN output (kept for backward) in the activation arena
    size_t stats;        // offset of 2*K floats (batch mean, invstd) in the stats arena
    int z_bf16;          // z stored as bfloat16 (core/spec/act_plan.c)
    int z_recompute;     // 0: z stored at z; 1, 2: not stored: the forward writes it into Model.zre[z_recompute - 1]
                         // and the backward computes it there again (core/spec/act_plan.c model_plan_recompute)
    int bn_frozen;       // BN in evaluation mode in training too (a frozen YOLO26 layer: freeze_apply)
} ConvUnit;

// A depthwise unit (groups == C == K) runs the depthwise ops (core/spec/ops26.h), not a GEMM.
static inline int unit_is_dw(const ConvUnit *u) { return u->d.groups > 1 && u->d.groups == u->d.C && u->d.C == u->d.K; }
// A unit with a BN in training mode after a GEMM convolution: the one the fused forms take (core/spec/backend.h)
static inline int unit_bn_trains(const ConvUnit *u) { return u->bn_w >= 0 && !u->bn_frozen && !unit_is_dw(u); }

typedef struct {
    OpKind   op;
    int      in, in2, out;   // value ids (in2: OP_ADD)
    int      out2;           // OP_ATTN: the second output, v gathered for the positional conv; else -1
    int      act;            // SiLU after (OP_CONV, OP_REPCONV)
    int      k, stride, pad; // pools; k = factor for OP_UPSAMPLE
    ConvUnit cv, cv2;        // OP_CONV uses cv; OP_REPCONV uses cv (3x3) and cv2 (1x1)
    AttnDims attn;           // OP_ATTN: heads, key_dim, head_dim, scale (N, H, W set at run time)
    size_t   probs;          // OP_ATTN: offset of the softmax probabilities (N,nh,T,T) in the activations
    int      layer;          // config layer this node belongs to
    int      train_only;     // 1: feeds only the auxiliary head (skipped by evaluation forwards)
} Node;

typedef struct {         // what `info` prints per config layer
    int    from[CFG_MAX_FROM], n_from;
    char   module[32], args[96];
    size_t params;
    double flops;         // 2 x multiply-adds for one image at the planned size
    int    out;           // output value (-1 for the head)
} LayerInfo;

typedef struct Model {
    int       nc, reg_max, n_levels;
    int       max_n, imgsz;        // planned largest batch and (square) input size
    int       augment_side;        // cfg augment=gpu: the samples' side (cfg imgsz; imgsz above may be multi_scale's
                                   // larger plan), for a GPU's memory plan of their tiles; 0: augment=cpu
    // parameters and their gradients: one array each, same layout
    ParamInfo *params;  int n_params;
    float     *state, *grad;  size_t n_state;
    size_t     buffers, n_buffers; // the BN running statistics: state[buffers .. buffers + n_buffers)
    int64_t   bn_batches;          // num_batches_tracked (the same for every BN)
    // graph
    Value     *values;  int n_values;
    int       *vh, *vw;            // current spatial size per value (model_set_size)
    Node      *nodes;   int n_nodes;
    LayerInfo *layers;  int n_layers;
    int        input;              // value id of the input image (N,S,S,3)
    int        head[4];            // value ids of the head maps, one per level (C = 4*reg_max + nc):
                                   // the main head, the one inference, validation and export use
    int        strides[4];
    int        aux[4], n_aux;      // DualDDetect (PGI training): the auxiliary head maps, same levels
                                   // and strides as head[]; n_aux = 0 for a single head
    int        end2end;            // 1: YOLO26's end-to-end Detect: head[] is the one-to-one branch (fed
                                   // detached features; inference uses it), aux[] the one-to-many one;
                                   // maps are [4 ltrb distances | nc logits], reg_max 1, no DFL
    int        opt_block;          // 1: training's master holds an optimizer state block of 2 floats a
                                   // trainable float (YOLO26; gelan under optimizer=Adam|AdamW), which
                                   // a GPU's memory plan adds (gpu/train_gpu.c)
    // where it runs: the backend and its context (NULL for the CPU; the Device of a GPU)
    const Backend *be;
    void      *be_ctx;
    int        on_device;          // 1: the arenas below belong to the GPU's memory plan
    double    *prof;               // (2 * n_nodes) seconds per node, forward and backward; NULL: off
    // called after each node's backward with the node's index (core/devices/multi.c sends finished gradient
    // buckets from it; core/procs/procs.c begins their sums over the processes); NULL: none. hook_queues: 1 when
    // the hook only queues work on this model's backend queue, the same at every call of a shape (so a
    // recording may hold it: the backward with it is recorded as a kind of its own); 0: it waits on other
    // threads or devices (never recorded).
    void     (*backward_hook)(void *arg, int node);
    void      *backward_arg;
    int        hook_queues;
    // --sync-bn on several devices (core/devices/multi.c sets it for a step's forward and backward): each training
    // BN's statistics and gradient sums are the whole batch's, through bn_sync (ops.h; the fused unit forms step
    // aside for the composed ones, and these passes are not recorded); NULL: this device's part alone.
    const BnSync *bn_sync;
    // activations: arenas sized for (max_n, imgsz), in the backend's memory like state and grad
    float     *act, *dact, *stats, *ws, *tmp_a, *tmp_b;
    size_t     n_act, n_stats, n_ws, n_tmp;   // tmp: two maps the size of the largest conv output
    float     *zre[2];             // where the units that recompute z keep it (n_zre[k] floats; 0: none does): [1]
    size_t     n_zre[2];           // for a RepConv's 1x1 branch (needed beside its 3x3 branch's), [0] for the rest
    int       *replay_first, *replay_nodes;   // the CPU's checkpointing (Value.regen): before the backward of time T
                                   // (node n_nodes-1-T) the nodes replay_nodes[replay_first[T] .. replay_first[T+1])
                                   // run their training forward again, in node order; NULL: none (a GPU's plan)
    int        n_regen;            // how many owned values are Value.regen
    // activation gradients (core/spec/grad_plan.c): an owned value's gradient sits at grad_offset[v] in
    // dact (n_dact floats), shared with gradients never live at the same time; the buffers whose
    // life starts at backward time T (node n_nodes-1-T; T = -1: the loss) are zero_list[zero_first[T+1]
    // .. zero_first[T+2]), zeroed then (those whose first writes all write instead of adding are not)
    size_t    *grad_offset, n_dact;
    int       *zero_first, *zero_list;
    int       *residual_add;       // per node i: the residual addition right after it (an OP_CONV with BN and
                                   // SiLU, not depthwise) that reads its output when nothing else does (no
                                   // other node, slice or head), else -1. The backward reads the addition's
                                   // output gradient for the conv's (the addition passes it on unchanged)
                                   // instead of copying it; where the BN trains (not frozen), the training
                                   // forward may write the sum in the conv's pass (core/spec/model_run.c).
                                   // Planned with the gradients, from the graph alone.
    int       *grad_alias;         // per node j: for the residual addition after such a conv, its other input
                                   // when that input's gradient lives in the buffer of the addition's output
                                   // gradient (core/spec/grad_plan.c alias_at), so the addition copies nothing;
                                   // else -1. n_grad_alias: how many
    int        n_grad_alias;
    unsigned char *grad_bf16;      // per value (owned): its gradient stored as bf16 (core/spec/grad_plan.c
                                   // plan_grad_types: one fresh write by a conv's data gradient that the
                                   // backend rounds to bf16, read only by the conv + BN + SiLU that made the
                                   // value); n_grad_bf16: how many
    int        n_grad_bf16;
    int      (*dgrad_bf16)(const ConvDims *d);   // the backend's rule (model_plan_grad_storage): does this
                                   // conv's data gradient come out rounded to bf16? NULL: none does
    unsigned char *grad_fresh;     // per node, FRESH_* bits: which of its gradient writes are the first
                                   // into buffers left unzeroed, so they write (=) instead of adding
    // recorded passes of training steps (model_run.c): the forward and the backward of each shape
    // (n, input h, w), replayed through Backend.dev.rec_* once the shape was seen
    ModelRecording recs[MODEL_RECS];
} Model;

// Build from the config for inputs of up to max_n images of imgsz x imgsz. Errors (unknown
// module, channel mismatch, bad arguments) name the config file:line.
int  model_build(const Config *cfg, int max_n, int imgsz, Model *m, Err *err);
void model_free(Model *m);
// core/spec/grad_plan.c: plan grad_offset, n_dact and the zero lists from the graph (model_build does it)
void model_plan_grads(Model *m);
// The gradients' storage types, from the backend's rule for which convs' data gradients it rounds to bf16
// (gpu/model_gpu.c: cuDNN's under bf16 GEMMs; NULL: none, every gradient fp32): a gradient whose one write
// is such a data gradient and whose reader takes bf16 (plan_grad_types) is stored rounded, at no loss.
void model_plan_grad_storage(Model *m, int (*dgrad_bf16)(const ConvDims *d));
void model_free_grad_plan(Model *m);
// Fresh weights as the reference initialises them (PyTorch default conv init, BN 1/0, bias_init).
void model_init_weights(Model *m, uint64_t seed);
int  model_find_param(const Model *m, const char *name);
size_t model_count_params(const Model *m);     // as PyTorch counts: trainable + fixed
int    model_count_tensors(const Model *m);    // the state dict's entries: parameters, BN buffers and
                                               // each BN's num_batches_tracked
size_t model_host_bytes(const Model *m);       // the arenas model_build reserves (touched when run on the CPU)
int    model_reserve_act(Model *m);            // the host activation arena and zre again, for n_act and n_zre
                                               // (after model_plan_recompute); -1 when they cannot be reserved
double model_flops(const Model *m, int imgsz); // 2 x MACs for one image of imgsz x imgsz
void model_print_info(const Model *m, const Config *cfg, FILE *f);

// Weights in safetensors with PyTorch state-dict names (prefix "" or e.g. "param/").
int  model_load(Model *m, const char *path, const char *prefix, Err *err);
int  model_save(const Model *m, const char *path, Err *err);
// Values on their way into the model (host copies, n_state floats laid out as m->state, or another
// array of n when not): refuse NaN or Inf naming path, the tensor (`what`, or the parameter at that
// offset) and the index, so broken weights never train to a NaN loss. Every reader calls it.
int  model_check_finite(const Model *m, const float *v, size_t n, const char *path, const char *what, Err *err);

// core/spec/act_plan.c: the activation arena's layout. bf16 = 1 (a GPU running bf16 GEMMs) stores the
// pre-BN maps z of GEMM convolutions, and every value whose writers and readers all take bf16 maps,
// as bfloat16: what the GEMMs would round them to anyway, at half the memory and traffic. bf16 = 0
// is the layout model_build made (everything fp32). model_act_floats: n_act that layout would need.
void   model_plan_storage(Model *m, int bf16);
size_t model_act_floats(const Model *m, int bf16);
// The CPU's plan (its maps stay fp32: it is the reference). When n_act + n_zre[0] + n_zre[1] would pass
// max_floats, the pre-BN maps z of conv units are recomputed by the backward (one more convolution forward each,
// the same bits) instead of stored, the cheapest first (fewest multiply-adds per float of z: C/groups x R x S),
// until the arena fits or every z is recomputed; before them the values no backward reads are not kept (they
// share a region by their forward lives: nothing runs again). Where even that does not fit, values are checkpointed
// (Value.regen: not kept; the backward runs their writers again from the nearest kept values, once each), the
// cheapest per float first, each kept only where it does not raise the plan, until it fits or none is left. Sets
// the units' z_recompute, the values' regen, the replay lists, n_act (with the offsets) and n_zre; returns how many
// units recompute z (m->n_regen: how many values are not kept, those no backward reads and those checkpointed;
// the replay lists say which are run again). The caller reserves the arenas again
// (model_reserve_act). A GPU's plan (model_plan_storage) never checkpoints.
int    model_plan_recompute(Model *m, size_t max_floats);
// The fraction of a training step's multiply-adds the recomputation adds (0: none planned).
double model_recompute_share(const Model *m);

// Set the input size (h, w multiples of 32, at most imgsz) and propagate every value's size.
void model_set_size(Model *m, int h, int w);

// Run time (model_run.c), for a batch of n <= max_n images at the size set last. Pointers of the
// views are in the backend's memory.
Map  model_value(const Model *m, int v, int n);   // activation view
Map  model_grad(const Model *m, int v, int n);    // gradient view
// images_nhwc: (n,h,w,3) floats in host memory, or NULL: the batch an earlier call uploaded is still
// in the model's input (benchmarks of the step alone). Training mode uses batch statistics in BN and
// updates the running ones; it also zeroes the activation gradients for the next backward.
// Evaluation mode computes the main head only (nodes that feed only m->aux are skipped).
void model_forward(Model *m, const float *images_nhwc, int n, int h, int w, int train);
// The same from a uint8 batch (n,h,w,3), divided by 255 on the model's device.
void model_forward_u8(Model *m, const uint8_t *images_nhwc, int n, int h, int w, int train);
// The same from a uint8 batch of H x W images that the model's device resizes to h x w (multi_scale:
// F.interpolate bilinear, core/spec/resize.c) before the forward; H x W = h x w is model_forward_u8. The
// bytes become floats in tmp_a first: model_resize_fits says whether n images of H x W fit there.
void model_forward_u8_resized(Model *m, const uint8_t *images_nhwc, int n, int H, int W, int h, int w, int train);
// The same from n training samples made by the backend (augment=gpu: Backend.dev.augment_batch writes
// their pixels into the input, H x W, resized to h x w when they differ), the bytes of making them on the host.
void model_forward_aug(Model *m, const AugSample *aug, int n, int H, int W, int h, int w, int train);
int  model_resize_fits(const Model *m, int n, int H, int W);
// d loss / d head maps must be in model_grad(head[i]) (and model_grad(aux[i])); accumulates parameter
// gradients into m->grad (callers zero it per optimizer step) and writes input gradients nowhere.
void model_backward(Model *m, int n);
// Release the backend's recordings of training passes (model_run.c); before the device goes.
void model_drop_recordings(Model *m);
void model_zero_grad(Model *m);
