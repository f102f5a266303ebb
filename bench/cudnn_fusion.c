// cudnn_fusion.c: what cuDNN's graph API fuses on this GPU for the convolutions of a gelan-s step,
// before any of it is built into the trainer (issue 34). For each shape it describes the fused
// graphs the BN work would need and reports, per graph: the engines cuDNN's heuristics offer (modes A
// and fallback), which of them are deterministic, which compile at run time, the plan's build time,
// its time per call against the plain convolution's, and its result against a host reference.
//   fwd+genstats   y = conv(x, w); sum, sum of squares of y per channel (cuDNN's GEN_STATS op)
//   fwd+reduce     the same sums as two reduction ops (the generic runtime fusion's epilogue)
//   prologue+fwd   y = conv(silu(x * scale + bias), w) and y's sums: BN-apply + SiLU in the input
//   prologue(relu) the same with ReLU, the activation cuDNN's ConvBNfprop pattern names
//   dgrad+dsilu    du = dsilu(conv_bwd_data(dy, w), z * scale + bias) and sum(du), sum(du * z)
// Run on the GPU machine: ./bench/cudnn_fusion [reps]   (LD_LIBRARY_PATH: cuDNN's and NVRTC's lib/)
// Legend: N batch, C channels in, K out, H,W in, P,Q out, R kernel.
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/util.h"

#if defined(USE_CUDA) && defined(USE_CUDNN)
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>
#include <dlfcn.h>

static struct {
    const char *(*err)(cudnnStatus_t);
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*destroy_desc)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*set)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
                         const void *);
    cudnnStatus_t (*get)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                         int64_t, int64_t *, void *);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
    size_t (*version)(void);
} L;

static cudnnHandle_t handle;
static const char *last_error = "";

static int ok(cudnnStatus_t s, const char *what) {
    if (s == CUDNN_STATUS_SUCCESS) return 1;
    last_error = what;
    return 0;
}
#define SET(d, a, t, n, v) ok(L.set((d), (a), (t), (n), (v)), #a)
#define CK(x)                                                                                                  \
    do {                                                                                                       \
        cudaError_t e_ = (x);                                                                                  \
        if (e_ != cudaSuccess) {                                                                               \
            fprintf(stderr, "CUDA: %s: %s\n", #x, cudaGetErrorString(e_));                                     \
            exit(1);                                                                                           \
        }                                                                                                      \
    } while (0)

// ---- descriptors, all kept until the graph is done ---------------------------------------------
enum { HELD = 512 };
static cudnnBackendDescriptor_t held[HELD];
static int n_held;
static cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t t) {
    cudnnBackendDescriptor_t d = NULL;
    if (n_held == HELD || !ok(L.create_desc(t, &d), "create")) return NULL;
    return held[n_held++] = d;
}
static void release(void) {
    while (n_held) L.destroy_desc(held[--n_held]);
}

typedef enum { BF16, F32 } Type;
// an NHWC map (dims in N, C, H, W order) or, with h = w = 1 and n = 1, a per-channel vector
static cudnnBackendDescriptor_t tensor(int64_t uid, Type t, int64_t n, int64_t c, int64_t h, int64_t w, int virt) {
    cudnnBackendDescriptor_t d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t dims[4] = { n, c, h, w }, str[4] = { h * w * c, 1, w * c, c }, al = 16;
    cudnnDataType_t dt = t == BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    bool v = virt;
    if (!d || !SET(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt) ||
        !SET(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims) ||
        !SET(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str) ||
        !SET(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) ||
        !SET(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al) ||
        !SET(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v) || !ok(L.finalize(d), "tensor"))
        return NULL;
    return d;
}

typedef struct { int N, C, H, W, K, R, stride; const char *what; } Shape;
static int P_of(const Shape *s) { return (s->H + 2 * (s->R / 2) - s->R) / s->stride + 1; }
static int Q_of(const Shape *s) { return (s->W + 2 * (s->R / 2) - s->R) / s->stride + 1; }

static cudnnBackendDescriptor_t conv_desc(const Shape *s) {
    cudnnBackendDescriptor_t c = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t nd = 2, pad[2] = { s->R / 2, s->R / 2 }, st[2] = { s->stride, s->stride }, dil[2] = { 1, 1 };
    if (!c || !SET(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) ||
        !SET(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
        !SET(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &nd) ||
        !SET(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil) ||
        !SET(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, st) ||
        !SET(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
        !SET(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad) || !ok(L.finalize(c), "conv"))
        return NULL;
    return c;
}

static cudnnBackendDescriptor_t conv_op(int dgrad, cudnnBackendDescriptor_t cd, cudnnBackendDescriptor_t x,
                                        cudnnBackendDescriptor_t w, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = make(dgrad ? CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR
                                             : CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    float alpha = 1, beta = 0;
    if (!op || !cd || !x || !w || !y) return NULL;
    if (!dgrad) {
        if (!SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha) ||
            !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta) ||
            !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd) ||
            !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w) ||
            !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
            !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y))
            return NULL;
    } else {   // x is dx (out), y is dy (in)
        if (!SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha) ||
            !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta) ||
            !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cd) ||
            !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w) ||
            !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
            !SET(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y))
            return NULL;
    }
    return ok(L.finalize(op), dgrad ? "dgrad op" : "fwd op") ? op : NULL;
}

// y = mode(x, b); for the backward modes (SWISH_BWD) x is the forward input, b is dy, y is dx
static cudnnBackendDescriptor_t pw(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                   cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t p = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    if (!p || !x || !y || !SET(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) ||
        !SET(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec))
        return NULL;
    if (mode == CUDNN_POINTWISE_SWISH_FWD || mode == CUDNN_POINTWISE_SWISH_BWD) {
        float beta = 1;
        if (!SET(p, CUDNN_ATTR_POINTWISE_SWISH_BETA, CUDNN_TYPE_FLOAT, 1, &beta)) return NULL;
    }
    if (!ok(L.finalize(p), "pointwise desc")) return NULL;
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    if (!op || !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p)) return NULL;
    if (mode >= 200 && mode < 300) {
        if (!b || !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
            !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b) ||
            !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y))
            return NULL;
    } else {
        if (!SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
            (b && !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b)) ||
            !SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y))
            return NULL;
    }
    return ok(L.finalize(op), "pointwise op") ? op : NULL;
}

static cudnnBackendDescriptor_t genstats(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t sum,
                                         cudnnBackendDescriptor_t sq) {
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    if (!op || !x || !sum || !sq || !SET(op, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &mode) ||
        !SET(op, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec) ||
        !SET(op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
        !SET(op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum) ||
        !SET(op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq) ||
        !ok(L.finalize(op), "genstats op"))
        return NULL;
    return op;
}

static int deterministic_reduction = 1;
static cudnnBackendDescriptor_t reduce_add(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnReduceTensorOp_t m = CUDNN_REDUCE_TENSOR_ADD;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    bool det = deterministic_reduction;
    if (!r || !x || !y || !SET(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &m) ||
        !SET(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec) ||
        (det && !SET(r, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det)) ||
        !ok(L.finalize(r), "reduction desc"))
        return NULL;
    cudnnBackendDescriptor_t op = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    if (!op || !SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r) ||
        !SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) ||
        !SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) ||
        !ok(L.finalize(op), "reduction op"))
        return NULL;
    return op;
}

static cudnnBackendDescriptor_t graph_of(cudnnBackendDescriptor_t *ops, int n) {
    for (int i = 0; i < n; i++)
        if (!ops[i]) return NULL;
    cudnnBackendDescriptor_t g = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (!g || !SET(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, ops) ||
        !SET(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) || !ok(L.finalize(g), "op graph"))
        return NULL;
    return g;
}

// ---- the graphs --------------------------------------------------------------------------------
enum { U_X = 1, U_W, U_Y, U_SUM, U_SQ, U_SCALE, U_BIAS, U_Z, U_DY, U_DU, U_V1, U_V2, U_V3, U_V4, U_V5, U_V6 };
typedef enum { G_PLAIN, G_GENSTATS, G_REDUCE, G_PROLOGUE, G_PROLOGUE_RELU, G_DGRAD_PLAIN, G_DGRAD_DSILU, G_COUNT } Kind;
static const char *KIND_NAME[G_COUNT] = { "fwd", "fwd+genstats", "fwd+reduce", "prologue+fwd+genstats",
                                          "prologue(relu)+fwd+genstats", "dgrad", "dgrad+dsilu+reduce" };

static cudnnBackendDescriptor_t build_graph(Kind kind, const Shape *s) {
    int P = P_of(s), Q = Q_of(s);
    cudnnBackendDescriptor_t cd = conv_desc(s), w = tensor(U_W, BF16, s->K, s->C, s->R, s->R, 0);
    cudnnBackendDescriptor_t ops[8];
    int n = 0;
    switch (kind) {
    case G_PLAIN:
        ops[n++] = conv_op(0, cd, tensor(U_X, BF16, s->N, s->C, s->H, s->W, 0), w,
                           tensor(U_Y, BF16, s->N, s->K, P, Q, 0));
        break;
    case G_GENSTATS: {
        cudnnBackendDescriptor_t y = tensor(U_Y, BF16, s->N, s->K, P, Q, 0);
        ops[n++] = conv_op(0, cd, tensor(U_X, BF16, s->N, s->C, s->H, s->W, 0), w, y);
        ops[n++] = genstats(y, tensor(U_SUM, F32, 1, s->K, 1, 1, 0), tensor(U_SQ, F32, 1, s->K, 1, 1, 0));
        break;
    }
    case G_REDUCE: {
        cudnnBackendDescriptor_t yv = tensor(U_V1, F32, s->N, s->K, P, Q, 1);
        cudnnBackendDescriptor_t y = tensor(U_Y, BF16, s->N, s->K, P, Q, 0);
        cudnnBackendDescriptor_t y2 = tensor(U_V2, F32, s->N, s->K, P, Q, 1);
        ops[n++] = conv_op(0, cd, tensor(U_X, BF16, s->N, s->C, s->H, s->W, 0), w, yv);
        ops[n++] = pw(CUDNN_POINTWISE_IDENTITY, yv, NULL, y);
        ops[n++] = reduce_add(yv, tensor(U_SUM, F32, 1, s->K, 1, 1, 0));
        ops[n++] = pw(CUDNN_POINTWISE_MUL, yv, yv, y2);
        ops[n++] = reduce_add(y2, tensor(U_SQ, F32, 1, s->K, 1, 1, 0));
        break;
    }
    case G_PROLOGUE:
    case G_PROLOGUE_RELU: {
        cudnnBackendDescriptor_t z = tensor(U_Z, BF16, s->N, s->C, s->H, s->W, 0);
        cudnnBackendDescriptor_t v1 = tensor(U_V1, F32, s->N, s->C, s->H, s->W, 1);
        cudnnBackendDescriptor_t v2 = tensor(U_V2, F32, s->N, s->C, s->H, s->W, 1);
        cudnnBackendDescriptor_t v3 = tensor(U_V3, BF16, s->N, s->C, s->H, s->W, 1);
        cudnnBackendDescriptor_t y = tensor(U_Y, BF16, s->N, s->K, P, Q, 0);
        ops[n++] = pw(CUDNN_POINTWISE_MUL, z, tensor(U_SCALE, F32, 1, s->C, 1, 1, 0), v1);
        ops[n++] = pw(CUDNN_POINTWISE_ADD, v1, tensor(U_BIAS, F32, 1, s->C, 1, 1, 0), v2);
        ops[n++] = pw(kind == G_PROLOGUE ? CUDNN_POINTWISE_SWISH_FWD : CUDNN_POINTWISE_RELU_FWD, v2, NULL, v3);
        ops[n++] = conv_op(0, cd, v3, w, y);
        ops[n++] = genstats(y, tensor(U_SUM, F32, 1, s->K, 1, 1, 0), tensor(U_SQ, F32, 1, s->K, 1, 1, 0));
        break;
    }
    case G_DGRAD_PLAIN:   // dx (N, C, H, W) from dy (N, K, P, Q)
        ops[n++] = conv_op(1, cd, tensor(U_Y, BF16, s->N, s->C, s->H, s->W, 0), w,
                           tensor(U_DY, BF16, s->N, s->K, P, Q, 0));
        break;
    case G_DGRAD_DSILU: {   // the map whose gradient dgrad makes is (N, C, H, W): z, u = z*scale+bias
        cudnnBackendDescriptor_t dxv = tensor(U_V1, F32, s->N, s->C, s->H, s->W, 1);
        cudnnBackendDescriptor_t z = tensor(U_Z, BF16, s->N, s->C, s->H, s->W, 0);
        cudnnBackendDescriptor_t v2 = tensor(U_V2, F32, s->N, s->C, s->H, s->W, 1);
        cudnnBackendDescriptor_t u = tensor(U_V3, F32, s->N, s->C, s->H, s->W, 1);
        cudnnBackendDescriptor_t duv = tensor(U_V4, F32, s->N, s->C, s->H, s->W, 1);
        cudnnBackendDescriptor_t du = tensor(U_DU, BF16, s->N, s->C, s->H, s->W, 0);
        cudnnBackendDescriptor_t duz = tensor(U_V5, F32, s->N, s->C, s->H, s->W, 1);
        ops[n++] = conv_op(1, cd, dxv, w, tensor(U_DY, BF16, s->N, s->K, P, Q, 0));
        ops[n++] = pw(CUDNN_POINTWISE_MUL, z, tensor(U_SCALE, F32, 1, s->C, 1, 1, 0), v2);
        ops[n++] = pw(CUDNN_POINTWISE_ADD, v2, tensor(U_BIAS, F32, 1, s->C, 1, 1, 0), u);
        ops[n++] = pw(CUDNN_POINTWISE_SWISH_BWD, u, dxv, duv);
        ops[n++] = pw(CUDNN_POINTWISE_IDENTITY, duv, NULL, du);
        ops[n++] = reduce_add(duv, tensor(U_SUM, F32, 1, s->C, 1, 1, 0));
        ops[n++] = pw(CUDNN_POINTWISE_MUL, duv, z, duz);
        ops[n++] = reduce_add(duz, tensor(U_SQ, F32, 1, s->C, 1, 1, 0));
        break;
    }
    default: return NULL;
    }
    return graph_of(ops, n);
}

// ---- engines -----------------------------------------------------------------------------------
typedef struct { int offered, det, rtc, finalized; int64_t ws, engine; double build_s; int notes_nd; } EngineReport;

// the first configuration (heuristics mode A, then fallback) that finalizes: deterministic ones first
static cudnnBackendDescriptor_t pick_plan(cudnnBackendDescriptor_t g, int need_det, EngineReport *r) {
    cudnnBackendHeurMode_t modes[2] = { CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK };
    for (int m = 0; m < 2; m++) {
        cudnnBackendDescriptor_t heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        if (!heur || !SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g) ||
            !SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[m]) || !ok(L.finalize(heur), "heur"))
            continue;
        int64_t count = 0;
        if (!ok(L.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL), "heur n"))
            continue;
        if (count > 32) count = 32;
        cudnnBackendDescriptor_t cfg[32];
        for (int64_t i = 0; i < count; i++) cfg[i] = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        int64_t got = 0;
        if (!count || !ok(L.get(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfg),
                          "heur results"))
            continue;
        r->offered += (int)got;
        for (int64_t i = 0; i < got; i++) {
            cudnnBackendDescriptor_t eng = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
            int64_t k = 0, idx = -1;
            if (!ok(L.get(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k, &eng), "eng"))
                continue;
            L.get(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &k, &idx);
            cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
            cudnnBackendBehaviorNote_t beh[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
            int64_t nn = 0, nb = 0;
            L.get(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn,
                  notes);
            L.get(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nb, beh);
            int nd = 0, rtc = 0, bad = 0;
            for (int64_t j = 0; j < nn; j++) {
                nd |= notes[j] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
                bad |= notes[j] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
                       notes[j] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION || notes[j] == CUDNN_NUMERICAL_NOTE_FFT ||
                       notes[j] == CUDNN_NUMERICAL_NOTE_WINOGRAD;
            }
            for (int64_t j = 0; j < nb; j++) rtc |= beh[j] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
            r->det += !nd && !bad;
            r->rtc += rtc;
            r->notes_nd += nd;
            if ((nd || bad) && need_det) continue;
            cudnnBackendDescriptor_t plan = make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            double t0 = now_seconds();
            int64_t ws = 0;
            if (plan && SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]) &&
                SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) &&
                ok(L.finalize(plan), "plan") &&
                ok(L.get(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &k, &ws), "ws")) {
                r->finalized = 1;
                r->ws = ws;
                r->engine = idx;
                r->build_s = now_seconds() - t0;
                return plan;
            }
        }
    }
    return NULL;
}

// ---- data --------------------------------------------------------------------------------------
static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint64_t rng = 88172645463325252ull;
static float uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1;
}
static void *dev_bf16(size_t n, float scale, uint16_t **host) {
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; i++) h[i] = to_bf16(uniform() * scale);
    void *d;
    CK(cudaMalloc(&d, n * 2));
    CK(cudaMemcpy(d, h, n * 2, cudaMemcpyHostToDevice));
    if (host) *host = h;
    else free(h);
    return d;
}
static void *dev_f32(size_t n, const float *h) {
    void *d;
    CK(cudaMalloc(&d, n * 4 + 16));
    if (h) CK(cudaMemcpy(d, h, n * 4, cudaMemcpyHostToDevice));
    else CK(cudaMemset(d, 0, n * 4));
    return d;
}

static cudnnBackendDescriptor_t pack_of(int64_t *uids, void **ptrs, int n, void *ws) {
    cudnnBackendDescriptor_t p = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    if (!p || !SET(p, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids) ||
        !SET(p, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs) ||
        !SET(p, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws) || !ok(L.finalize(p), "pack"))
        return NULL;
    return p;
}

static double time_plan(cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack, int reps, int *failed) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    *failed = !ok(L.execute(handle, plan, pack), "execute");
    CK(cudaDeviceSynchronize());
    if (*failed) return 0;
    CK(cudaEventRecord(a, 0));
    for (int i = 0; i < reps; i++) L.execute(handle, plan, pack);
    CK(cudaEventRecord(b, 0));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / reps;
}

// relative difference of per-channel sums against double sums of a bf16 map read back
static double sums_error(const void *d_map, size_t pixels, int ch, const float *d_sum, const float *d_sq,
                         const uint16_t *zmul) {
    uint16_t *m = malloc(pixels * ch * 2);
    float *s = malloc(ch * 4), *q = malloc(ch * 4);
    CK(cudaMemcpy(m, d_map, pixels * ch * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(s, d_sum, ch * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(q, d_sq, ch * 4, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int c = 0; c < ch; c++) {
        double a = 0, b = 0, absa = 0, absb = 0;
        for (size_t p = 0; p < pixels; p++) {
            double v = from_bf16(m[p * ch + c]);
            double o = zmul ? from_bf16(zmul[p * ch + c]) : v;
            a += v, b += v * o, absa += fabs(v), absb += fabs(v * o);
        }
        double ea = fabs(s[c] - a) / (absa + 1e-30), eb = fabs(q[c] - b) / (absb + 1e-30);
        if (ea > worst) worst = ea;
        if (eb > worst) worst = eb;
    }
    free(m), free(s), free(q);
    return worst;
}

static double rel_l2(const void *a, const void *b, size_t n) {
    uint16_t *x = malloc(n * 2), *y = malloc(n * 2);
    CK(cudaMemcpy(x, a, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(y, b, n * 2, cudaMemcpyDeviceToHost));
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        double u = from_bf16(x[i]), v = from_bf16(y[i]);
        d += (u - v) * (u - v), r += v * v;
    }
    free(x), free(y);
    return sqrt(d / (r + 1e-30));
}

static void probe(const Shape *s, int reps) {
    int P = P_of(s), Q = Q_of(s);
    size_t nx = (size_t)s->N * s->H * s->W * s->C, ny = (size_t)s->N * P * Q * s->K, nw = (size_t)s->K * s->R * s->R * s->C;
    uint16_t *hz;
    void *x = dev_bf16(nx, 1, NULL), *z = dev_bf16(nx, 2, &hz), *w = dev_bf16(nw, 1.0f / sqrtf(s->C * s->R * s->R), NULL);
    void *y = dev_bf16(ny, 1, NULL), *y2 = dev_bf16(ny, 1, NULL), *dy = dev_bf16(ny, 1, NULL);
    void *dx = dev_bf16(nx, 1, NULL), *du = dev_bf16(nx, 1, NULL), *act = dev_bf16(nx, 1, NULL);
    float *hs = malloc(s->C * 4), *hb = malloc(s->C * 4);
    for (int c = 0; c < s->C; c++) hs[c] = 0.5f + 0.5f * fabsf(uniform()), hb[c] = 0.2f * uniform();
    float *scale = dev_f32(s->C, hs), *bias = dev_f32(s->C, hb);
    int kmax = s->K > s->C ? s->K : s->C;
    float *sum = dev_f32(kmax, NULL), *sq = dev_f32(kmax, NULL);
    size_t ws_cap = (size_t)1 << 30;
    void *ws;
    CK(cudaMalloc(&ws, ws_cap));
    // the prologue's reference input: silu(z * scale + bias) rounded to bf16, as the unfused path stores it
    uint16_t *ha = malloc(nx * 2);
    for (size_t i = 0; i < nx; i++) {
        int c = (int)(i % s->C);
        float u = from_bf16(hz[i]) * hs[c] + hb[c];
        ha[i] = to_bf16(u / (1 + expf(-u)));
    }
    CK(cudaMemcpy(act, ha, nx * 2, cudaMemcpyHostToDevice));
    double plain_fwd = 0, plain_dgrad = 0;
    printf("\n%s: N%d C%d %dx%d -> K%d %dx%d, %dx%d s%d\n", s->what, s->N, s->C, s->H, s->W, s->K, P, Q, s->R, s->R,
           s->stride);
    for (int k = 0; k < G_COUNT; k++) {
        EngineReport r = { 0 };
        last_error = "";
        double t0 = now_seconds();
        cudnnBackendDescriptor_t g = build_graph((Kind)k, s);
        cudnnBackendDescriptor_t plan = g ? pick_plan(g, 1, &r) : NULL;
        if (g && !plan && r.offered) {   // a nondeterministic one, to say what it would cost
            EngineReport r2 = { 0 };
            cudnnBackendDescriptor_t p2 = pick_plan(g, 0, &r2);
            if (p2) printf("  %-28s only a nondeterministic engine (%lld) finalizes\n", KIND_NAME[k], (long long)r2.engine);
        }
        double graph_s = now_seconds() - t0;
        if (!plan) {
            printf("  %-28s %s: offered %d, deterministic %d, run-time compiled %d (%s; %.2f s)\n", KIND_NAME[k],
                   g ? "no plan" : "graph refused", r.offered, r.det, r.rtc, last_error, graph_s);
            release();
            continue;
        }
        int64_t uids[8];
        void *ptrs[8];
        int n = 0;
        uids[n] = U_W, ptrs[n++] = w;
        switch ((Kind)k) {
        case G_PLAIN: uids[n] = U_X, ptrs[n++] = x, uids[n] = U_Y, ptrs[n++] = y2; break;
        case G_GENSTATS:
        case G_REDUCE:
            uids[n] = U_X, ptrs[n++] = x, uids[n] = U_Y, ptrs[n++] = y;
            uids[n] = U_SUM, ptrs[n++] = sum, uids[n] = U_SQ, ptrs[n++] = sq;
            break;
        case G_PROLOGUE:
        case G_PROLOGUE_RELU:
            uids[n] = U_Z, ptrs[n++] = z, uids[n] = U_Y, ptrs[n++] = y, uids[n] = U_SCALE, ptrs[n++] = scale;
            uids[n] = U_BIAS, ptrs[n++] = bias, uids[n] = U_SUM, ptrs[n++] = sum, uids[n] = U_SQ, ptrs[n++] = sq;
            break;
        case G_DGRAD_PLAIN: uids[n] = U_Y, ptrs[n++] = dx, uids[n] = U_DY, ptrs[n++] = dy; break;
        case G_DGRAD_DSILU:
            uids[n] = U_DY, ptrs[n++] = dy, uids[n] = U_Z, ptrs[n++] = z, uids[n] = U_SCALE, ptrs[n++] = scale;
            uids[n] = U_BIAS, ptrs[n++] = bias, uids[n] = U_DU, ptrs[n++] = du, uids[n] = U_SUM, ptrs[n++] = sum;
            uids[n] = U_SQ, ptrs[n++] = sq;
            break;
        default: break;
        }
        cudnnBackendDescriptor_t pack = pack_of(uids, ptrs, n, ws);
        int failed = !pack;
        double ms = pack ? time_plan(plan, pack, reps, &failed) : 0;
        if (failed) {
            printf("  %-28s engine %lld finalized but does not run (%s)\n", KIND_NAME[k], (long long)r.engine, last_error);
            release();
            continue;
        }
        if (k == G_PLAIN) plain_fwd = ms;
        if (k == G_DGRAD_PLAIN) plain_dgrad = ms;
        // two runs, same bits?
        size_t nsum = (size_t)kmax * 4;
        float *s1 = malloc(nsum), *s2 = malloc(nsum);
        CK(cudaMemcpy(s1, sum, nsum, cudaMemcpyDeviceToHost));
        L.execute(handle, plan, pack);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(s2, sum, nsum, cudaMemcpyDeviceToHost));
        int same = !memcmp(s1, s2, nsum);
        free(s1), free(s2);
        double err = -1, err2 = -1;
        const char *what = "";
        if (k == G_GENSTATS || k == G_REDUCE) err = sums_error(y, (size_t)s->N * P * Q, s->K, sum, sq, NULL), what = "sums vs y";
        if (k == G_PROLOGUE) {   // against the plain conv of the unfused path's activation
            EngineReport r3 = { 0 };
            cudnnBackendDescriptor_t g3 = build_graph(G_PLAIN, s), p3 = g3 ? pick_plan(g3, 1, &r3) : NULL;
            int64_t u3[3] = { U_W, U_X, U_Y };
            void *q3[3] = { w, act, y2 };
            cudnnBackendDescriptor_t k3 = p3 ? pack_of(u3, q3, 3, ws) : NULL;
            if (k3 && ok(L.execute(handle, p3, k3), "ref")) {
                CK(cudaDeviceSynchronize());
                err = rel_l2(y, y2, ny), what = "y vs conv(silu(bn(z))) rel L2";
                err2 = sums_error(y, (size_t)s->N * P * Q, s->K, sum, sq, NULL);
            }
        }
        if (k == G_DGRAD_DSILU) err = sums_error(du, (size_t)s->N * s->H * s->W, s->C, sum, sq, hz), what = "sums vs du";
        double base = k >= G_DGRAD_PLAIN ? plain_dgrad : plain_fwd;
        printf("  %-28s %8.3f ms (%.2fx plain)  engine %lld ws %lld MB, offered %d det %d rtc %d, build %.2f s, "
               "repeat %s%s%s",
               KIND_NAME[k], ms, base > 0 ? ms / base : 0, (long long)r.engine, (long long)(r.ws >> 20), r.offered,
               r.det, r.rtc, r.build_s, same ? "same bits" : "DIFFERENT BITS", *what ? ", " : "", what);
        if (err >= 0) printf(" %.2e", err);
        if (err2 >= 0) printf(", sums %.2e", err2);
        printf("\n");
        fflush(stdout);
        release();
    }
    cudaFree(x), cudaFree(z), cudaFree(w), cudaFree(y), cudaFree(y2), cudaFree(dy), cudaFree(dx), cudaFree(du);
    cudaFree(act), cudaFree(scale), cudaFree(bias), cudaFree(sum), cudaFree(sq), cudaFree(ws);
    free(hz), free(ha), free(hs), free(hb);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 10;
    const char *names[] = { "libcudnn_graph.so.9", "libcudnn.so.9" };
    void *h = NULL;
    for (int i = 0; i < 2 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("cudnn_fusion: cuDNN 9 not found (%s)\n", dlerror());
        return 1;
    }
#define SYM(f, n) *(void **)&L.f = dlsym(h, n)
    SYM(err, "cudnnGetErrorString");
    SYM(create, "cudnnCreate");
    SYM(create_desc, "cudnnBackendCreateDescriptor");
    SYM(destroy_desc, "cudnnBackendDestroyDescriptor");
    SYM(finalize, "cudnnBackendFinalize");
    SYM(set, "cudnnBackendSetAttribute");
    SYM(get, "cudnnBackendGetAttribute");
    SYM(execute, "cudnnBackendExecute");
    SYM(version, "cudnnGetVersion");
#undef SYM
    if (!L.create || !L.execute || L.create(&handle) != CUDNN_STATUS_SUCCESS) {
        printf("cudnn_fusion: cuDNN could not be started\n");
        return 1;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("cudnn_fusion: cuDNN %zu on %s (sm_%d%d), %d reps a timing, bf16 maps, fp32 sums\n", L.version(), prop.name,
           prop.major, prop.minor, reps);
    static const Shape SHAPES[] = {
        { 64, 64, 160, 160, 64, 3, 1, "3x3 64->64 @160" },
        { 64, 128, 80, 80, 128, 3, 1, "3x3 128->128 @80" },
        { 64, 128, 80, 80, 128, 1, 1, "1x1 128->128 @80" },
        { 64, 64, 160, 160, 128, 3, 2, "3x3 s2 64->128 @160" },
        { 64, 256, 40, 40, 256, 3, 1, "3x3 256->256 @40" },
        { 64, 512, 20, 20, 256, 1, 1, "1x1 512->256 @20" },
        { 4, 32, 64, 64, 32, 3, 1, "small 3x3 32->32 @64 (correctness)" },
    };
    const char *only = getenv("FUSION_ONLY");
    for (size_t i = 0; i < sizeof SHAPES / sizeof *SHAPES; i++)
        if (!only || atoi(only) == (int)i) probe(&SHAPES[i], reps);
    deterministic_reduction = 0;   // the reductions' determinism flag off, to see what it costs
    printf("\nwithout IS_DETERMINISTIC on the reductions:\n");
    probe(&SHAPES[1], reps);
    return 0;
}

#else
int main(void) {
    printf("cudnn_fusion: built without CUDA and cuDNN's headers; nothing to probe\n");
    return 0;
}
#endif
