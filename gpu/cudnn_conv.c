// cudnn_conv.c: convolutions through cuDNN 9's backend API (cudnn_conv.h says what and why).
// A plan is built the first time a shape (dims, strides, types, alignment, beta) is met: the
// operation graph of one convolution, cuDNN's heuristics (mode A, then the fallback list), and of the
// engine configurations that are deterministic, finalize and fit the workspace, the one chosen for the
// shape's class: timed once per machine and kept in a file (below), or with YT_CUDNN_TUNE=0 the first. Plans
// live in a hash table per device; each keeps its last variant pack, which is rebuilt only when the
// pointers change (they do not, step after step, since the memory plan is fixed).
// The library is reached through dlopen/dlsym, so the binary does not depend on it.
#include "gpu/cudnn_conv.h"

#ifdef USE_CUDNN
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cudnn_graph.h>

#include "core/base/switches.h"
#include "core/base/util.h"
#include "gpu/device.h"

// ---- the library, opened once ------------------------------------------------------------------
static struct {
    int ok;
    size_t version;
    const char *(*error_string)(cudnnStatus_t);
    cudnnStatus_t (*create)(cudnnHandle_t *);
    cudnnStatus_t (*destroy)(cudnnHandle_t);
    cudnnStatus_t (*set_stream)(cudnnHandle_t, cudaStream_t);
    cudnnStatus_t (*create_desc)(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t *);
    cudnnStatus_t (*destroy_desc)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*finalize)(cudnnBackendDescriptor_t);
    cudnnStatus_t (*set_attr)(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t, cudnnBackendAttributeType_t,
                              int64_t, const void *);
    cudnnStatus_t (*get_attr)(cudnnBackendDescriptor_t const, cudnnBackendAttributeName_t,
                              cudnnBackendAttributeType_t, int64_t, int64_t *, void *);
    cudnnStatus_t (*execute)(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t);
} lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void lib_open(void) {
    if (switch_is(SW_CONV, "gemm")) {
        fprintf(stderr, "convolutions: im2col + cuBLAS (YT_CONV=gemm)\n");
        return;
    }
    const char *names[] = { "libcudnn_graph.so.9", "libcudnn.so.9" };
    void *h = NULL;
    for (int i = 0; i < 2 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "convolutions: cuDNN 9 not found (%s); using im2col + cuBLAS. Install cuDNN 9 or put its "
                        "lib/ folder on LD_LIBRARY_PATH for the faster path\n", dlerror());
        return;
    }
#define SYM(field, name) *(void **)&lib.field = dlsym(h, name)
    SYM(error_string, "cudnnGetErrorString");
    SYM(create, "cudnnCreate");
    SYM(destroy, "cudnnDestroy");
    SYM(set_stream, "cudnnSetStream");
    SYM(create_desc, "cudnnBackendCreateDescriptor");
    SYM(destroy_desc, "cudnnBackendDestroyDescriptor");
    SYM(finalize, "cudnnBackendFinalize");
    SYM(set_attr, "cudnnBackendSetAttribute");
    SYM(get_attr, "cudnnBackendGetAttribute");
    SYM(execute, "cudnnBackendExecute");
#undef SYM
    size_t (*get_version)(void);
    *(void **)&get_version = dlsym(h, "cudnnGetVersion");
    if (!get_version || !lib.error_string || !lib.create || !lib.destroy || !lib.set_stream || !lib.create_desc ||
        !lib.destroy_desc || !lib.finalize || !lib.set_attr || !lib.get_attr || !lib.execute) {
        fprintf(stderr, "convolutions: the cuDNN library found lacks the backend API; using im2col + cuBLAS\n");
        return;
    }
    lib.version = get_version();
    if (lib.version < 90000) {
        fprintf(stderr, "convolutions: cuDNN %zu is older than 9.0; using im2col + cuBLAS\n", lib.version);
        return;
    }
    lib.ok = 1;
}

int cudnn_conv_available(void) {
    pthread_once(&lib_once, lib_open);
    return lib.ok;
}

// A failed cuDNN call while building a plan only means "not this engine"; while executing one
// it is a broken GPU or a bug.
static int failed(cudnnStatus_t s) { return s != CUDNN_STATUS_SUCCESS; }

static void check_exec(cudnnStatus_t s, const char *what) {
    if (!failed(s)) return;
    fprintf(stderr, "cuDNN: %s: %s\n", what, lib.error_string(s));
    device_fatal(lib.error_string(s));
}

// ---- plan cache --------------------------------------------------------------------------------
// Everything a plan depends on. Zeroed before filling, so it can be hashed and compared bytewise.
typedef struct {
    int kind;
    ConvDims d;
    int x_ld, y_ld, x_bf16, w_bf16, y_bf16;
    int align[3];            // bytes (16, 8, 4, 2) the x, w, y pointers are aligned to
    int tensor_cores;
    float beta;
} PlanKey;

typedef struct {
    PlanKey key;
    int used;                // slot taken
    int ok;                  // 0: no engine takes it (fall back)
    cudnnBackendDescriptor_t plan, pack;
    int64_t ws;              // workspace bytes the plan needs
    int64_t engine;          // cuDNN's global engine index (the verbose log names it)
    void *ptrs[3], *ws_ptr;  // what `pack` was built for
} Plan;

enum { TABLE_SLOTS = 1 << 14 };

typedef struct {
    cudnnHandle_t handle;
    cudaStream_t stream;
    Plan *table;
    int plans, refused;
    double build_seconds;    // host time spent making plans (rect validation meets many shapes)
} Ctx;

static uint64_t key_hash(const PlanKey *k) {
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull;   // FNV-1a
    for (size_t i = 0; i < sizeof *k; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static Plan *slot_of(Ctx *c, const PlanKey *k) {
    for (uint64_t i = key_hash(k), n = 0; n < TABLE_SLOTS; i++, n++) {
        Plan *p = &c->table[i % TABLE_SLOTS];
        if (!p->used || !memcmp(&p->key, k, sizeof *k)) return p;
    }
    return NULL;
}

void *cudnn_conv_ctx_new(void *stream) {
    if (!cudnn_conv_available()) return NULL;
    Ctx *c = calloc(1, sizeof *c);
    if (!c || !(c->table = calloc(TABLE_SLOTS, sizeof *c->table))) die("out of host memory for the cuDNN plans");
    cudnnStatus_t s = lib.create(&c->handle);
    if (failed(s)) {
        fprintf(stderr, "convolutions: cudnnCreate failed (%s); using im2col + cuBLAS\n", lib.error_string(s));
        free(c->table);
        free(c);
        return NULL;
    }
    c->stream = (cudaStream_t)stream;
    check_exec(lib.set_stream(c->handle, c->stream), "cudnnSetStream");
    return c;
}

void cudnn_conv_ctx_free(void *ctx) {
    Ctx *c = ctx;
    if (!c) return;
    for (int i = 0; i < TABLE_SLOTS; i++) {
        if (c->table[i].plan) lib.destroy_desc(c->table[i].plan);
        if (c->table[i].pack) lib.destroy_desc(c->table[i].pack);
    }
    lib.destroy(c->handle);
    free(c->table);
    free(c);
}

void cudnn_conv_stats(void *ctx, int *plans, int *refused, double *seconds) {
    Ctx *c = ctx;
    *plans = c ? c->plans : 0;
    *refused = c ? c->refused : 0;
    if (seconds) *seconds = c ? c->build_seconds : 0.0;
}

// ---- building a plan ---------------------------------------------------------------------------
// Descriptors made while building one plan, destroyed together at the end (the plan keeps what it
// needs by itself).
enum { HELD_MAX = 256 };
typedef struct { cudnnBackendDescriptor_t d[HELD_MAX]; int n; } Held;

static cudnnBackendDescriptor_t held_new(Held *h, cudnnBackendDescriptorType_t t) {
    cudnnBackendDescriptor_t d = NULL;
    if (h->n == HELD_MAX || failed(lib.create_desc(t, &d))) return NULL;
    return h->d[h->n++] = d;
}

static void held_free(Held *h) {
    for (int i = 0; i < h->n; i++) lib.destroy_desc(h->d[i]);
    h->n = 0;
}

#define SET(desc, attr, type, n, val) (!failed(lib.set_attr((desc), (attr), (type), (n), (val))))

enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

// An NHWC map (n, c, h, w) with pixel stride ld, or the KRSC filter, as a cuDNN tensor. cuDNN takes
// dimensions in (N, C, H, W) order whatever the layout; the strides say where each lives.
static cudnnBackendDescriptor_t tensor(Held *h, int64_t uid, int bf16, int align, int64_t n, int64_t c,
                                       int64_t hh, int64_t ww, int64_t ld) {
    cudnnBackendDescriptor_t t = held_new(h, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t dims[4] = { n, c, hh, ww }, strides[4] = { hh * ww * ld, 1, ww * ld, ld }, al = align;
    cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    if (!t || !SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type) ||
        !SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims) ||
        !SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides) ||
        !SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid) ||
        !SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al) || failed(lib.finalize(t)))
        return NULL;
    return t;
}

// The operation graph of one convolution of k's kind, or NULL when cuDNN refuses to describe it.
static cudnnBackendDescriptor_t op_graph(Held *h, cudnnHandle_t handle, const PlanKey *k) {
    const ConvDims *d = &k->d;
    cudnnBackendDescriptor_t x = tensor(h, UID_X, k->x_bf16, k->align[0], d->N, d->C, d->H, d->W, k->x_ld);
    cudnnBackendDescriptor_t w = tensor(h, UID_W, k->w_bf16, k->align[1], d->K, d->C / d->groups, d->R, d->S,
                                        d->C / d->groups);
    cudnnBackendDescriptor_t y = tensor(h, UID_Y, k->y_bf16, k->align[2], d->N, d->K, d->P, d->Q, k->y_ld);
    cudnnBackendDescriptor_t conv = held_new(h, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    if (!x || !w || !y || !conv) return NULL;
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    int64_t dims = 2, pad[2] = { d->pad, d->pad }, stride[2] = { d->stride, d->stride }, dil[2] = { 1, 1 };
    if (!SET(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp) ||
        !SET(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
        !SET(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims) ||
        !SET(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil) ||
        !SET(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride) ||
        !SET(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad) ||
        !SET(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad) || failed(lib.finalize(conv)))
        return NULL;
    static const cudnnBackendDescriptorType_t OP_TYPE[3] = {
        CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
        CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
    };
    // attribute names per kind: alpha, beta, conv, w, x, y (the output is dx or dw for the gradients)
    static const cudnnBackendAttributeName_t ATTR[3][6] = {
        { CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y },
        { CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY },
        { CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY },
    };
    const cudnnBackendAttributeName_t *a = ATTR[k->kind];
    cudnnBackendDescriptor_t op = held_new(h, OP_TYPE[k->kind]);
    float alpha = 1.0f, beta = k->beta;
    if (!op || !SET(op, a[0], CUDNN_TYPE_FLOAT, 1, &alpha) || !SET(op, a[1], CUDNN_TYPE_FLOAT, 1, &beta) ||
        !SET(op, a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv) || !SET(op, a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w) ||
        !SET(op, a[4], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) || !SET(op, a[5], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) ||
        failed(lib.finalize(op)))
        return NULL;
    cudnnBackendDescriptor_t graph = held_new(h, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (!graph || !SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op) ||
        !SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) || failed(lib.finalize(graph)))
        return NULL;
    return graph;
}

// An engine is acceptable when its numerics are deterministic and exact-input (no FFT, Winograd,
// down-converted inputs, reduced-precision reductions), it needs no run-time compilation (plans
// must be cheap to make: rect validation meets new shapes), and it uses tensor cores only where
// the precision allows them.
static int engine_acceptable(Held *h, cudnnBackendDescriptor_t cfg, int tensor_cores, int need_tensor_cores) {
    cudnnBackendDescriptor_t eng = held_new(h, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t n = 0;
    if (!eng || failed(lib.get_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng)))
        return 0;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    if (failed(lib.get_attr(eng, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                            CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n, notes)))
        return 0;
    int uses_tc = 0;
    for (int64_t i = 0; i < n; i++) uses_tc |= notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
    if ((uses_tc && !tensor_cores) || (!uses_tc && need_tensor_cores)) return 0;
    for (int64_t i = 0; i < n; i++) {
        cudnnBackendNumericalNote_t t = notes[i];
        if (t == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS || t == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION ||
            t == CUDNN_NUMERICAL_NOTE_FFT || t == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC ||
            t == CUDNN_NUMERICAL_NOTE_WINOGRAD || t == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 ||
            t == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 || t == CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13)
            return 0;
    }
    cudnnBackendBehaviorNote_t behave[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    if (failed(lib.get_attr(eng, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                            CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, behave)))
        return 0;
    for (int64_t i = 0; i < n; i++)
        if (behave[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return 0;
    return 1;
}

// What names an engine configuration across processes: cuDNN's global index of its engine and its knobs'
// choices (type, value; sorted by type). engine -1: not known. Zeroed before filling (compared bytewise).
enum { KNOBS_MAX = CUDNN_KNOB_TYPE_COUNTS };
typedef struct { int64_t engine; int n; int64_t knob[KNOBS_MAX][2]; } Finger;

static void finger_of(cudnnBackendDescriptor_t cfg, Finger *f) {
    memset(f, 0, sizeof *f);
    f->engine = -1;
    Held h = { .n = 0 };
    cudnnBackendDescriptor_t eng = held_new(&h, CUDNN_BACKEND_ENGINE_DESCRIPTOR), ch[KNOBS_MAX];
    int64_t n = 0, index = -1;
    int ok = eng && !failed(lib.get_attr(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng)) &&
             !failed(lib.get_attr(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index));
    for (int i = 0; i < KNOBS_MAX && ok; i++) ok = (ch[i] = held_new(&h, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR)) != NULL;
    ok = ok && !failed(lib.get_attr(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, KNOBS_MAX, &n,
                                    ch)) && n >= 0 && n <= KNOBS_MAX;
    int64_t knobs = ok ? n : 0;
    for (int64_t i = 0; i < knobs && ok; i++) {
        cudnnBackendKnobType_t type;
        int64_t value = 0, m = 0;
        ok = !failed(lib.get_attr(ch[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &m, &type)) &&
             !failed(lib.get_attr(ch[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &m, &value));
        int j = (int)i;   // insertion by type
        for (; ok && j > 0 && f->knob[j - 1][0] > type; j--) f->knob[j][0] = f->knob[j - 1][0], f->knob[j][1] = f->knob[j - 1][1];
        f->knob[j][0] = type, f->knob[j][1] = value;
    }
    held_free(&h);
    if (!ok) memset(f->knob, 0, sizeof f->knob);
    f->n = ok ? (int)knobs : 0;
    f->engine = ok ? index : -1;
}

enum { MAX_CFGS = 64 };

// An execution plan made from one engine configuration, its workspace and engine index.
typedef struct { cudnnBackendDescriptor_t plan; int64_t ws; Finger fp; } Cand;

// The acceptable engine configurations of heuristics mode `mode` that finalize into plans needing at most
// ws_cap bytes, in the heuristics' order: at most `max` of them into out (the caller owns their plans).
static int plans_from_heuristics(Held *h, cudnnHandle_t handle, cudnnBackendDescriptor_t graph,
                                 cudnnBackendHeurMode_t mode, const PlanKey *k, size_t ws_cap, Cand *out, int max) {
    cudnnBackendDescriptor_t heur = held_new(h, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    if (!heur || !SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph) ||
        !SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) || failed(lib.finalize(heur)))
        return 0;
    int64_t count = 0;
    if (failed(lib.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL)))
        return 0;
    if (count > MAX_CFGS) count = MAX_CFGS;
    if (count < 1 || h->n + 2 * count + 8 > HELD_MAX) return 0;
    cudnnBackendDescriptor_t cfgs[MAX_CFGS];
    for (int64_t i = 0; i < count; i++)
        if (!(cfgs[i] = held_new(h, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))) return 0;
    int64_t got = 0;
    if (failed(lib.get_attr(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs)))
        return 0;
    // where tensor cores are allowed, only configurations that use them: without, the engines the
    // heuristics offered for channel slices and groups ran far slower than im2col + cuBLAS (bench/RESULTS.md)
    int n = 0;
    for (int64_t i = 0; i < got && n < max; i++) {
        if (!engine_acceptable(h, cfgs[i], k->tensor_cores, k->tensor_cores)) continue;
        cudnnBackendDescriptor_t plan = NULL;
        if (failed(lib.create_desc(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan))) return n;
        int64_t m = 0, ws = 0;
        if (SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]) &&
            SET(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) && !failed(lib.finalize(plan)) &&
            !failed(lib.get_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &m, &ws)) &&
            ws >= 0 && (size_t)ws <= ws_cap) {
            out[n] = (Cand){ plan, ws, { 0 } };
            finger_of(cfgs[i], &out[n++].fp);
            continue;
        }
        lib.destroy_desc(plan);
    }
    return n;
}

// ---- choosing among the engines by timing them, once per machine (YT_CUDNN_TUNE) ------------------
// cuDNN's heuristics put first, for channel counts that are not multiples of 64 (gelan-s's 32 and 48),
// engines that convert the tensors' layout around the convolution, and split-K weight gradients with a
// slow reduction. So the first TUNE_MAX acceptable plans of a shape class (the shape without batch and size:
// kind, channels, kernel, stride, groups, types, strides, alignment) are timed on the call's own
// operands when the class is first met outside a stream capture with beta 0 (a trial run then only writes
// what the real run overwrites). The heuristics' first stays unless one runs in at most TUNE_GAIN of its
// time, and then the earliest (in the heuristics' order) within TUNE_NEAR of the fastest is kept.
//
// Timings differ between processes, so a choice is made once per machine and kept in the engine file
// (YT_CUDNN_ENGINES; a line per class: the GPU, the cuDNN version, the class, the engine and its knobs). A
// process reads the choices there before making its own, under the file's lock, and appends each one it makes
// (timed, or the heuristics' first where the class's first call could not be timed) before running it: runs
// that share the file run the same engine configuration for every shape and give the same bits, the first
// run included. Without a file (none, or one that cannot be written) nothing is timed: the heuristics' first
// for every new class, as with YT_CUDNN_TUNE=0. The choices are the process's, shared by its devices.
// An engine needing more workspace than the first plan and TUNE_WS is not timed: the scratch left for the
// workspace differs between call sites, and a plan that does not fit one falls back to the GEMM path there.
enum { TUNE_MAX = 8, TUNE_RUNS = 3, TUNE_CHOICES = 2048, TUNE_WS = 32 << 20, FILE_LINE = 2048,
       FILE_MAX_BYTES = 8 << 20 };
static const double TUNE_GAIN = 0.8, TUNE_NEAR = 1.1;

static struct {
    pthread_mutex_t lock;
    int n;
    struct { PlanKey cls; Finger fp; } choice[TUNE_CHOICES];
    int file_state;           // 0 not looked for yet, 1 read and written, 2 read only, -1 none
    char path[1024], gpu[160];
    long long read_to, lines; // bytes of the file read (whole lines), lines seen
    int bad_said, timed;      // a malformed line reported; classes timed by this process
} tuned = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int tune_on(void) { return !switch_is(SW_CUDNN_TUNE, "0"); }

static const Finger *choice_of(const PlanKey *cls) {
    for (int i = 0; i < tuned.n; i++)
        if (!memcmp(&tuned.choice[i].cls, cls, sizeof *cls)) return &tuned.choice[i].fp;
    return NULL;
}

static void choice_add(const PlanKey *cls, const Finger *fp) {
    if (tuned.n < TUNE_CHOICES && !choice_of(cls)) tuned.choice[tuned.n].cls = *cls, tuned.choice[tuned.n++].fp = *fp;
}

// The file's line for a class, without its newline: "yt-cudnn-engines 1 GPU CUDNN_VERSION KEY ENGINE N T=V ..."
// (KEY: the class's bytes in hex, so a build whose PlanKey differs reads no line of another's).
static void line_of(const PlanKey *cls, const Finger *fp, char *out, size_t size) {
    const unsigned char *b = (const unsigned char *)cls;
    int o = snprintf(out, size, "yt-cudnn-engines 1 %s %zu ", tuned.gpu, lib.version);
    for (size_t i = 0; i < sizeof *cls && o + 3 < (int)size; i++) o += snprintf(out + o, size - o, "%02x", b[i]);
    o += snprintf(out + o, size - o, " %lld %d", (long long)fp->engine, fp->n);
    for (int i = 0; i < fp->n && o < (int)size; i++)
        o += snprintf(out + o, size - o, " %lld=%lld", (long long)fp->knob[i][0], (long long)fp->knob[i][1]);
}

// One line of the file: 1 and the class and choice when it is a line of this GPU and cuDNN version, 0 when it
// belongs to another, -1 when it is not a line of this format.
static int parse_line(char *line, PlanKey *cls, Finger *fp) {
    char *save = NULL, *tok[4 + 3 + KNOBS_MAX];
    int n = 0;
    for (char *t = strtok_r(line, " \t\r", &save); t; t = strtok_r(NULL, " \t\r", &save)) {
        if (n == (int)(sizeof tok / sizeof *tok)) return -1;
        tok[n++] = t;
    }
    if (n < 7 || strcmp(tok[0], "yt-cudnn-engines") || strcmp(tok[1], "1")) return -1;
    char *end;
    long long engine = strtoll(tok[5], &end, 10), knobs = *end ? -1 : strtoll(tok[6], &end, 10);
    if (*end || engine < 0 || knobs < 0 || knobs > KNOBS_MAX || n != 7 + knobs) return -1;
    memset(fp, 0, sizeof *fp);
    fp->engine = engine, fp->n = (int)knobs;
    for (int i = 0; i < fp->n; i++) {
        char *eq = strchr(tok[7 + i], '=');
        if (!eq) return -1;
        *eq = 0;
        fp->knob[i][0] = strtoll(tok[7 + i], &end, 10);
        if (*end || !eq[1]) return -1;
        fp->knob[i][1] = strtoll(eq + 1, &end, 10);
        if (*end) return -1;
    }
    char version[32];
    snprintf(version, sizeof version, "%zu", lib.version);
    if (strcmp(tok[2], tuned.gpu) || strcmp(tok[3], version)) return 0;
    if (strlen(tok[4]) != 2 * sizeof *cls) return 0;   // another build's class
    unsigned char *b = (unsigned char *)cls;
    for (size_t i = 0; i < sizeof *cls; i++) {
        unsigned v;
        if (sscanf(tok[4] + 2 * i, "%2x", &v) != 1) return -1;
        b[i] = (unsigned char)v;
    }
    return 1;
}

// The lines appended to the file since it was last read (fd open and locked), into the choices. Returns 1
// when the file ends with a newline (or is empty), 0 when its last line is incomplete, -1 when it is not to be
// used (larger than any this program makes).
static int read_new_lines(int fd) {
    struct stat st;
    if (fstat(fd, &st) || st.st_size > FILE_MAX_BYTES) {
        fprintf(stderr, "cuDNN engines: %s is larger than %d MB: not used, so nothing is timed; delete it (it is "
                        "made again)\n", tuned.path, FILE_MAX_BYTES >> 20);
        return -1;
    }
    if (st.st_size < tuned.read_to) tuned.read_to = 0, tuned.lines = 0;   // replaced: read it again
    char buf[FILE_LINE + 1];
    int len = 0;
    ssize_t got;
    off_t at = tuned.read_to;
    while ((got = pread(fd, buf + len, FILE_LINE - len, at)) > 0) {
        at += got, len += (int)got;
        int start = 0;
        for (int i = 0; i < len; i++) {
            if (buf[i] != '\n') continue;
            buf[i] = 0;
            tuned.lines++;
            PlanKey cls;
            Finger fp;
            int r = parse_line(buf + start, &cls, &fp);
            if (r > 0) choice_add(&cls, &fp);
            if (r < 0 && !tuned.bad_said++)
                fprintf(stderr, "cuDNN engines: %s:%lld: not a line of this file's format; ignored (deleting the file "
                                "makes it again)\n", tuned.path, tuned.lines);
            start = i + 1;
        }
        tuned.read_to += start;
        memmove(buf, buf + start, len - start);
        len -= start;
        if (len == FILE_LINE) {   // a line longer than any this program writes: skip to its end
            tuned.read_to += len, len = 0;
            if (!tuned.bad_said++)
                fprintf(stderr, "cuDNN engines: %s: a line too long; ignored\n", tuned.path);
        }
    }
    return len == 0;
}

// Finds the file's path and this GPU's name (once): 0, or -1 when there is no file to use.
static int file_setup(void) {
    if (tuned.file_state) return tuned.file_state < 0 ? -1 : 0;
    tuned.file_state = -1;
    const char *set = switch_str(SW_CUDNN_ENGINES), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (set && !strcmp(set, "none")) return -1;
    if (set && *set) snprintf(tuned.path, sizeof tuned.path, "%s", set);
    else if (xdg && *xdg == '/') snprintf(tuned.path, sizeof tuned.path, "%s/yolotrain/cudnn-engines.txt", xdg);
    else if (home && *home == '/') snprintf(tuned.path, sizeof tuned.path, "%s/.cache/yolotrain/cudnn-engines.txt", home);
    else return -1;
    int dev = 0;
    struct cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return -1;
    int o = 0;
    for (const char *c = prop.name; *c && o < (int)sizeof tuned.gpu - 16; c++)
        tuned.gpu[o++] = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ? *c : '_';
    snprintf(tuned.gpu + o, sizeof tuned.gpu - o, "-sm%d%d", prop.major, prop.minor);
    char dir[sizeof tuned.path];
    snprintf(dir, sizeof dir, "%s", tuned.path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) *slash = 0, make_dirs(dir);   // a failure shows when the file is opened
    tuned.file_state = 1;
    return 0;
}

// Opens and locks the file, reads its new lines; -1 when there is none (the reason said once). *writable: 1
// when choices may be appended.
static int file_open(int *writable) {
    *writable = 0;
    if (file_setup()) return -1;
    int fd = tuned.file_state == 1 ? open(tuned.path, O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
    if (fd >= 0) *writable = 1;
    else {
        if (tuned.file_state == 1)
            fprintf(stderr, "cuDNN engines: cannot write %s (%s): convolutions new to it take cuDNN's heuristics' "
                            "first engine, untimed; set YT_CUDNN_ENGINES to a writable file\n", tuned.path, strerror(errno));
        tuned.file_state = 2;
        fd = open(tuned.path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            tuned.file_state = -1;
            return -1;
        }
    }
    flock(fd, *writable ? LOCK_EX : LOCK_SH);   // advisory; where unsupported, appends stay whole lines
    int whole = read_new_lines(fd);
    if (whole < 0) {
        close(fd);
        tuned.file_state = -1, *writable = 0;
        return -1;
    }
    if (!whole && *writable && write(fd, "\n", 1) != 1) *writable = 0;   // after a torn last line
    return fd;
}

// Appends a choice to the file (open, locked, writable); the bytes it wrote count as read.
static void file_append(int fd, const PlanKey *cls, const Finger *fp) {
    char line[FILE_LINE];
    line_of(cls, fp, line, sizeof line - 1);
    size_t n = strlen(line);
    line[n++] = '\n';
    if (write(fd, line, n) != (ssize_t)n && !tuned.bad_said++)
        fprintf(stderr, "cuDNN engines: cannot append to %s (%s)\n", tuned.path, strerror(errno));
    struct stat st;
    if (!fstat(fd, &st)) tuned.read_to = st.st_size, tuned.lines++;
}

void cudnn_conv_tune_forget(void) {
    pthread_mutex_lock(&tuned.lock);
    tuned.n = 0, tuned.file_state = 0, tuned.read_to = 0, tuned.lines = 0, tuned.bad_said = 0;
    pthread_mutex_unlock(&tuned.lock);
}

int cudnn_conv_tune_timed(void) {
    pthread_mutex_lock(&tuned.lock);
    int n = tuned.timed;
    pthread_mutex_unlock(&tuned.lock);
    return n;
}

// ms of one run of plan `p` on the operands (the mean of TUNE_RUNS after one warm-up); a failed run: -1
static double time_plan(Ctx *c, const Cand *p, void *const ptrs[3], void *ws) {
    int64_t uids[3] = { UID_X, UID_W, UID_Y };
    void *data[3] = { ptrs[0], ptrs[1], ptrs[2] }, *wsp = p->ws ? ws : NULL;
    cudnnBackendDescriptor_t pack = NULL;
    if (failed(lib.create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack))) return -1;
    double ms = -1;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids) &&
        SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, data) &&
        SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp) && !failed(lib.finalize(pack)) &&
        cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess &&
        !failed(lib.execute(c->handle, p->plan, pack))) {
        int ok = cudaEventRecord(e0, c->stream) == cudaSuccess;
        for (int r = 0; r < TUNE_RUNS && ok; r++) ok = !failed(lib.execute(c->handle, p->plan, pack));
        float t = 0;
        if (ok && cudaEventRecord(e1, c->stream) == cudaSuccess && cudaEventSynchronize(e1) == cudaSuccess &&
            cudaEventElapsedTime(&t, e0, e1) == cudaSuccess)
            ms = t / TUNE_RUNS;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    lib.destroy_desc(pack);
    (void)cudaGetLastError();   // a failed trial leaves no error behind for the next launch's check
    return ms;
}

// The rank of the plan to keep among n timed ones (ms[i] < 0: failed or not timed), by the rule above.
static int tune_pick(const double *ms, int n) {
    if (ms[0] < 0) return 0;
    int fastest = 0;
    for (int i = 1; i < n; i++)
        if (ms[i] >= 0 && ms[i] < ms[fastest]) fastest = i;
    if (ms[fastest] > TUNE_GAIN * ms[0]) return 0;
    for (int i = 1; i < n; i++)
        if (ms[i] >= 0 && ms[i] <= TUNE_NEAR * ms[fastest]) return i;
    return fastest;
}

// Whether a call may be timed: output overwritten (beta 0) and the stream not being captured
static int timeable(Ctx *c, const PlanKey *k) {
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    return k->beta == 0.0f && cudaStreamIsCapturing(c->stream, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone;
}

static void say_timings(const PlanKey *k, const Cand *cand, const double *ms, int n, int rank) {
    fprintf(stderr, "cudnn tune %s N%d C%d %dx%d K%d %dx%d s%d x_ld %d y_ld %d:",
            k->kind == CUDNN_FWD ? "fwd" : k->kind == CUDNN_DGRAD ? "dgrad" : "wgrad", k->d.N, k->d.C, k->d.H,
            k->d.W, k->d.K, k->d.R, k->d.S, k->d.stride, k->x_ld, k->y_ld);
    for (int i = 0; i < n; i++)
        fprintf(stderr, " %s%lld %.4f ms ws %lld,", i == rank ? "*" : "", (long long)cand[i].fp.engine, ms[i],
                (long long)cand[i].ws);
    fprintf(stderr, "\n");
}

// Of the n candidates (the heuristics' order), the rank to keep: the first whose configuration is the one
// chosen for the shape's class (in this process or the file), else the one chosen now; rank 0 where none is.
static int choose(Ctx *c, const PlanKey *k, Cand *cand, int n, void *const ptrs[3], void *ws) {
    if (n < 2) return 0;
    PlanKey cls = *k;   // beta left out too: an accumulating call runs the engine its class's fresh ones run
    cls.d.N = cls.d.H = cls.d.W = cls.d.P = cls.d.Q = 0;
    cls.beta = 0;
    pthread_mutex_lock(&tuned.lock);
    const Finger *fp = choice_of(&cls);
    int writable = 0, fd = fp ? -1 : file_open(&writable);
    if (!fp) fp = choice_of(&cls);   // another process's, read just now
    if (!fp && writable && cand[0].fp.engine >= 0) {
        int rank = 0;
        if (timeable(c, k)) {
            double ms[TUNE_MAX];
            int64_t ws_max = cand[0].ws > TUNE_WS ? cand[0].ws : TUNE_WS;   // other call sites may leave less
            for (int i = 0; i < n; i++) ms[i] = cand[i].ws <= ws_max && cand[i].fp.engine >= 0 ? time_plan(c, &cand[i], ptrs, ws) : -1;
            rank = tune_pick(ms, n);
            if (!tuned.timed++)
                fprintf(stderr, "cuDNN engines: timing each new kind of convolution once, the choices kept in %s "
                                "(YT_CUDNN_TUNE=0: cuDNN's heuristics' first, untimed)\n", tuned.path);
            if (switch_str(SW_CUDNN_VERBOSE)) say_timings(k, cand, ms, n, rank);
        }
        file_append(fd, &cls, &cand[rank].fp);
        choice_add(&cls, &cand[rank].fp);
        fp = choice_of(&cls);
    }
    if (fd >= 0) close(fd);   // and unlocked
    int rank = 0;
    for (int i = 0; fp && i < n; i++)
        if (!memcmp(&cand[i].fp, fp, sizeof *fp)) { rank = i; break; }
    pthread_mutex_unlock(&tuned.lock);
    return rank;
}

// The plan for p's shape: the first plan of heuristics mode A (then of the fallback list), or with tuning
// the one choose() keeps of the first TUNE_MAX.
static void build_plan(Ctx *c, Plan *p, size_t ws_cap, void *const ptrs[3], void *ws) {
    double t0 = now_seconds();
    Held h = { .n = 0 };
    Cand cand[TUNE_MAX];
    int n = 0, max = tune_on() ? TUNE_MAX : 1;
    cudnnBackendDescriptor_t graph = op_graph(&h, c->handle, &p->key);
    if (graph) n = plans_from_heuristics(&h, c->handle, graph, CUDNN_HEUR_MODE_A, &p->key, ws_cap, cand, max);
    if (!n) {
        held_free(&h);   // the fallback list gets a fresh set of descriptors
        graph = op_graph(&h, c->handle, &p->key);
        if (graph) n = plans_from_heuristics(&h, c->handle, graph, CUDNN_HEUR_MODE_FALLBACK, &p->key, ws_cap, cand, max);
    }
    held_free(&h);
    int pick = choose(c, &p->key, cand, n, ptrs, ws);
    for (int i = 0; i < n; i++)
        if (i != pick) lib.destroy_desc(cand[i].plan);
    p->plan = n ? cand[pick].plan : NULL;
    p->ws = n ? cand[pick].ws : 0;
    p->engine = n ? cand[pick].fp.engine : -1;
    p->ok = p->plan != NULL;
    if (p->ok) c->plans++;
    else c->refused++;
    c->build_seconds += now_seconds() - t0;
    if (switch_str(SW_CUDNN_VERBOSE)) {
        const ConvDims *d = &p->key.d;
        fprintf(stderr, "cudnn %s N%d C%d %dx%d K%d %dx%d s%d g%d x_ld %d y_ld %d types x%s w%s y%s beta %g: %s "
                        "(engine %lld, workspace %lld)\n",
                p->key.kind == CUDNN_FWD ? "fwd" : p->key.kind == CUDNN_DGRAD ? "dgrad" : "wgrad", d->N, d->C, d->H,
                d->W, d->K, d->R, d->S, d->stride, d->groups, p->key.x_ld, p->key.y_ld, p->key.x_bf16 ? "bf16" : "f32",
                p->key.w_bf16 ? "bf16" : "f32", p->key.y_bf16 ? "bf16" : "f32", p->key.beta,
                p->ok ? "plan" : "no engine", (long long)p->engine, (long long)p->ws);
    }
}

// ---- running -----------------------------------------------------------------------------------
static int align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    return a % 16 == 0 ? 16 : a % 8 == 0 ? 8 : a % 4 == 0 ? 4 : 2;
}

static void build_pack(Ctx *c, Plan *p, void *const ptrs[3], void *ws) {
    if (p->pack) lib.destroy_desc(p->pack);
    p->pack = NULL;
    int64_t uids[3] = { UID_X, UID_W, UID_Y };
    void *data[3] = { ptrs[0], ptrs[1], ptrs[2] };
    cudnnBackendDescriptor_t pack = NULL;
    check_exec(lib.create_desc(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack), "variant pack");
    check_exec(lib.set_attr(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids), "variant pack ids");
    check_exec(lib.set_attr(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, data),
               "variant pack pointers");
    check_exec(lib.set_attr(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws),
               "variant pack workspace");
    check_exec(lib.finalize(pack), "variant pack");
    p->pack = pack;
    memcpy(p->ptrs, data, sizeof data);
    p->ws_ptr = ws;
}

int cudnn_conv_run(void *ctx, CudnnConvKind kind, const ConvDims *d, CudnnOperand x, CudnnOperand w,
                   CudnnOperand y, float beta, int tensor_cores, void *ws, size_t ws_cap) {
    Ctx *c = ctx;
    if (!c) return -1;
    PlanKey k;
    memset(&k, 0, sizeof k);
    k.kind = kind;
    k.d = *d;
    k.x_ld = x.ld, k.y_ld = y.ld;
    k.x_bf16 = x.bf16, k.w_bf16 = w.bf16, k.y_bf16 = y.bf16;
    k.align[0] = align_of(x.p), k.align[1] = align_of(w.p), k.align[2] = align_of(y.p);
    k.tensor_cores = tensor_cores;
    k.beta = beta;
    Plan *p = slot_of(c, &k);
    if (!p) return -1;   // table full: the GEMM path for the shapes beyond
    void *ptrs[3] = { x.p, w.p, y.p };
    if (!p->used) {
        p->used = 1;
        p->key = k;
        build_plan(c, p, ws_cap, ptrs, ws);
    }
    if (!p->ok || (size_t)p->ws > ws_cap) return -1;
    void *wsp = p->ws ? ws : NULL;
    if (!p->pack || memcmp(ptrs, p->ptrs, sizeof ptrs) || wsp != p->ws_ptr) build_pack(c, p, ptrs, wsp);
    check_exec(lib.execute(c->handle, p->plan, p->pack), "cudnnBackendExecute");
    return 0;
}

#else   // built without cuDNN's headers: the GEMM path only

int cudnn_conv_available(void) { return 0; }
void *cudnn_conv_ctx_new(void *stream) { return NULL; }
void cudnn_conv_ctx_free(void *ctx) {}
int cudnn_conv_run(void *ctx, CudnnConvKind kind, const ConvDims *d, CudnnOperand x, CudnnOperand w,
                   CudnnOperand y, float beta, int tensor_cores, void *ws, size_t ws_cap) {
    return -1;
}
void cudnn_conv_stats(void *ctx, int *plans, int *refused, double *seconds) {
    *plans = *refused = 0;
    if (seconds) *seconds = 0.0;
}
void cudnn_conv_tune_forget(void) {}
int cudnn_conv_tune_timed(void) { return 0; }
#endif
