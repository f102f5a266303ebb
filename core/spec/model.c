// model.c: builds the detector from the config's layer table. Each module (YOLOv9's, and YOLO26's from
// ultralytics) is expanded into primitive nodes (conv+BN+SiLU, depthwise conv, RepConvN, pools, upsample,
// copy, add, attention, detach) whose parameters carry the
// PyTorch state-dict names of the reference, so weights load from and save to PyTorch directly.
// Concats inside modules cost nothing: producers write into their channel slice (core/spec/tensor.h: Map.ld).
#include "core/spec/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    Model           *m;
    const Config    *cfg;
    const LayerSpec *spec;    // the config row being expanded (for error messages)
    Err             *err;
    int              cap_params, cap_values, cap_nodes;
    int              layer;   // index of the config layer being expanded
    int              max_hw;  // planned input size
    int             *vh, *vw; // planned spatial size per value (filled as values are made)
    int              split[CFG_MAX_LAYERS][CFG_MAX_ARGS + 1];   // CBLinear layer i's output j is channels
    int              n_split[CFG_MAX_LAYERS];                   // [split[i][j], split[i][j+1]); 0: not one
} Builder;

enum { NAME_LEN = sizeof(((ParamInfo *)0)->name) };

// namef: a parameter or module name; the reference's names are far shorter than NAME_LEN
static void namef(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void namef(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, NAME_LEN, fmt, ap);
    va_end(ap);
    if (n >= NAME_LEN) die("parameter name too long: %s...", out);
}

// ---- parameters and values -----------------------------------------------------------------

static int add_param(Builder *b, const char *name, ParamKind kind, int ndim, const int *shape) {
    Model *m = b->m;
    if (m->n_params == b->cap_params) {
        b->cap_params = b->cap_params ? 2 * b->cap_params : 256;
        m->params = xrealloc(m->params, b->cap_params * sizeof *m->params);
    }
    ParamInfo *p = &m->params[m->n_params];
    memset(p, 0, sizeof *p);
    namef(p->name, "%s", name);
    p->kind = kind;
    p->ndim = ndim;
    p->n = 1;
    for (int i = 0; i < ndim; i++) { p->shape[i] = shape[i]; p->n *= shape[i]; }
    // 64-byte aligned tensors; BN buffers in their own region (placed after the parameters once the
    // model is built), so averaging them across devices is one contiguous operation
    size_t *end = kind == PK_RUNNING_MEAN || kind == PK_RUNNING_VAR ? &m->n_buffers : &m->n_state;
    p->offset = *end;
    *end += (p->n + 15) & ~(size_t)15;
    m->layers[b->layer].params += kind == PK_RUNNING_MEAN || kind == PK_RUNNING_VAR ? 0 : p->n;
    return m->n_params++;
}

static int grow_values(Builder *b) {
    Model *m = b->m;
    if (m->n_values == b->cap_values) {
        b->cap_values = b->cap_values ? 2 * b->cap_values : 256;
        m->values = xrealloc(m->values, b->cap_values * sizeof *m->values);
        b->vh = xrealloc(b->vh, b->cap_values * sizeof *b->vh);
        b->vw = xrealloc(b->vw, b->cap_values * sizeof *b->vw);
    }
    return m->n_values++;
}

// A value with its own buffer of C channels at planned spatial size h x w.
static int new_value(Builder *b, int C, int h, int w) {
    int v = grow_values(b);
    Value *val = &b->m->values[v];
    val->C = C; val->stride = b->max_hw / (h ? h : 1); val->parent = -1; val->c0 = 0; val->no_grad = 0; val->bf16 = 0; val->regen = 0;
    val->offset = b->m->n_act;
    b->m->n_act += ((size_t)b->m->max_n * h * w * C + 15) & ~(size_t)15;
    b->vh[v] = h; b->vw[v] = w;
    return v;
}

static int slice_value(Builder *b, int parent, int c0, int C) {
    int v = grow_values(b);
    Value *val = &b->m->values[v];
    while (b->m->values[parent].parent >= 0) {       // slices always refer to the owning value
        c0 += b->m->values[parent].c0;
        parent = b->m->values[parent].parent;
    }
    *val = b->m->values[parent];
    val->C = C; val->parent = parent; val->c0 = c0;
    b->vh[v] = b->vh[parent]; b->vw[v] = b->vw[parent];
    return v;
}

static Node *add_node(Builder *b, OpKind op, int in, int out) {
    Model *m = b->m;
    if (m->n_nodes == b->cap_nodes) {
        b->cap_nodes = b->cap_nodes ? 2 * b->cap_nodes : 256;
        m->nodes = xrealloc(m->nodes, b->cap_nodes * sizeof *m->nodes);
    }
    Node *n = &m->nodes[m->n_nodes++];
    memset(n, 0, sizeof *n);
    n->op = op; n->in = in; n->in2 = -1; n->out = out; n->out2 = -1; n->layer = b->layer;
    n->cv.w = n->cv.b = n->cv.bn_w = n->cv.bn_b = n->cv.bn_mean = n->cv.bn_var = -1;
    n->cv2 = n->cv;
    return n;
}

// ---- convolutions ---------------------------------------------------------------------------

static int conv_out(int h, int k, int s) { return (h + 2 * (k / 2) - k) / s + 1; }

// Fill a ConvUnit: weight "<name>.weight" (K, C/g, k, k), and either BN "<bn>.{weight,bias,...}" or
// a bias "<name>.bias". The pre-BN output z and the batch statistics get arena space.
static void conv_unit(Builder *b, ConvUnit *u, const char *wname, const char *bn, int bias,
                      int C, int K, int k, int s, int g, int in_h, int in_w) {
    Model *m = b->m;
    char name[NAME_LEN];
    int ws[4] = { K, C / g, k, k }, ks[1] = { K };
    namef(name, "%s.weight", wname);
    u->w = add_param(b, name, PK_WEIGHT, 4, ws);
    u->d = conv_dims(m->max_n, C, in_h, in_w, K, k, s, k / 2, g);
    m->layers[b->layer].flops += 2.0 * u->d.P * u->d.Q * K * (C / g) * k * k;   // one image
    size_t wsz = conv_workspace_floats(&u->d);
    if (wsz > m->n_ws) m->n_ws = wsz;
    if (bias) {
        namef(name, "%s.bias", wname);
        u->b = add_param(b, name, PK_BIAS, 1, ks);
    }
    if (bn) {
        namef(name, "%s.weight", bn);       u->bn_w = add_param(b, name, PK_BN_WEIGHT, 1, ks);
        namef(name, "%s.bias", bn);         u->bn_b = add_param(b, name, PK_BIAS, 1, ks);
        namef(name, "%s.running_mean", bn); u->bn_mean = add_param(b, name, PK_RUNNING_MEAN, 1, ks);
        namef(name, "%s.running_var", bn);  u->bn_var = add_param(b, name, PK_RUNNING_VAR, 1, ks);
        u->z = m->n_act;
        m->n_act += ((size_t)m->max_n * u->d.P * u->d.Q * K + 15) & ~(size_t)15;
        u->stats = m->n_stats;
        m->n_stats += 2 * (size_t)K;
    }
}

// Conv(c1, c2, k, s, g) of the reference: conv without bias, BN, SiLU. Named "<p>.conv", "<p>.bn".
// Writes into value `out` (a slice, say) or a new value when out < 0; returns the output value.
static int conv_bn(Builder *b, const char *p, int in, int out, int K, int k, int s, int g) {
    const Value *x = &b->m->values[in];
    int h = conv_out(b->vh[in], k, s), w = conv_out(b->vw[in], k, s), C = x->C;
    if (out < 0) out = new_value(b, K, h, w);
    Node *n = add_node(b, OP_CONV, in, out);
    n->act = 1;
    char wn[NAME_LEN], bn[NAME_LEN];
    namef(wn, "%s.conv", p);
    namef(bn, "%s.bn", p);
    conv_unit(b, &n->cv, wn, bn, 0, C, K, k, s, g, b->vh[in], b->vw[in]);
    return out;
}

// A plain nn.Conv2d with bias (the head's last 1x1 convs), named "<p>.weight", "<p>.bias".
static int conv_bias(Builder *b, const char *p, int in, int out, int K, int g) {
    Node *n = add_node(b, OP_CONV, in, out);
    conv_unit(b, &n->cv, p, NULL, 1, b->m->values[in].C, K, 1, 1, g, b->vh[in], b->vw[in]);
    return out;
}

// RepConvN in training form: SiLU(BN(conv3x3 x) + BN(conv1x1 x)), names "<p>.conv1", "<p>.conv2".
static int repconv(Builder *b, const char *p, int in, int K) {
    int out = new_value(b, K, b->vh[in], b->vw[in]);
    Node *n = add_node(b, OP_REPCONV, in, out);
    n->act = 1;
    char wn[NAME_LEN], bn[NAME_LEN];
    int C = b->m->values[in].C;
    namef(wn, "%s.conv1.conv", p); namef(bn, "%s.conv1.bn", p);
    conv_unit(b, &n->cv, wn, bn, 0, C, K, 3, 1, 1, b->vh[in], b->vw[in]);
    namef(wn, "%s.conv2.conv", p); namef(bn, "%s.conv2.bn", p);
    conv_unit(b, &n->cv2, wn, bn, 0, C, K, 1, 1, 1, b->vh[in], b->vw[in]);
    return out;
}

static int pool(Builder *b, OpKind op, int in, int out, int k, int s, int pad) {
    int h = (b->vh[in] + 2 * pad - k) / s + 1, w = (b->vw[in] + 2 * pad - k) / s + 1;
    if (out < 0) out = new_value(b, b->m->values[in].C, h, w);
    Node *n = add_node(b, op, in, out);
    n->k = k; n->stride = s; n->pad = pad;
    return out;
}

// ---- the reference's modules (WongKinYiu/yolov9 models/common.py) ---------------------------

// RepNBottleneck: x + Conv3x3(RepConvN(x)), written into `out` (or a new value).
static int rep_bottleneck(Builder *b, const char *p, int in, int out) {
    char q[NAME_LEN];
    int C = b->m->values[in].C;
    namef(q, "%s.cv1", p);
    int r = repconv(b, q, in, C);
    namef(q, "%s.cv2", p);
    int y = conv_bn(b, q, r, -1, C, 3, 1, 1);
    if (out < 0) out = new_value(b, C, b->vh[in], b->vw[in]);
    Node *n = add_node(b, OP_ADD, in, out);
    n->in2 = y;
    return out;
}

// RepNCSP(c1 -> c2, n): cv3(concat[m(cv1 x), cv2 x]), the bottleneck path first.
static int rep_ncsp(Builder *b, const char *p, int in, int c2, int n) {
    char q[NAME_LEN];
    int c_ = c2 / 2, h = b->vh[in], w = b->vw[in];
    int cat = new_value(b, 2 * c_, h, w);
    namef(q, "%s.cv1", p);
    int t = conv_bn(b, q, in, -1, c_, 1, 1, 1);
    namef(q, "%s.cv2", p);
    conv_bn(b, q, in, slice_value(b, cat, c_, c_), c_, 1, 1, 1);
    for (int i = 0; i < n; i++) {
        namef(q, "%s.m.%d", p, i);
        t = rep_bottleneck(b, q, t, i == n - 1 ? slice_value(b, cat, 0, c_) : -1);
    }
    namef(q, "%s.cv3", p);
    return conv_bn(b, q, cat, -1, c2, 1, 1, 1);
}

// ELAN1 (c3, c4 = 0 arguments) and RepNCSPELAN4: a = cv1 x split in halves y0, y1; y2 = cv2(y1);
// y3 = cv3(y2); out = cv4(concat[y0, y1, y2, y3]). `rep` = RepNCSP depth (0 for ELAN1).
static int elan(Builder *b, const char *p, int in, int c2, int c3, int c4, int rep) {
    char q[NAME_LEN], q2[NAME_LEN];
    int h = b->vh[in], w = b->vw[in];
    int cat = new_value(b, c3 + 2 * c4, h, w);
    namef(q, "%s.cv1", p);
    conv_bn(b, q, in, slice_value(b, cat, 0, c3), c3, 1, 1, 1);
    int y = slice_value(b, cat, c3 / 2, c3 / 2);
    for (int i = 0; i < 2; i++) {                   // cv2, cv3
        int dst = slice_value(b, cat, c3 + i * c4, c4);
        if (rep) {
            namef(q, "%s.cv%d.0", p, 2 + i);
            int t = rep_ncsp(b, q, y, c4, rep);
            namef(q2, "%s.cv%d.1", p, 2 + i);
            conv_bn(b, q2, t, dst, c4, 3, 1, 1);
        } else {
            namef(q, "%s.cv%d", p, 2 + i);
            conv_bn(b, q, y, dst, c4, 3, 1, 1);
        }
        y = dst;
    }
    namef(q, "%s.cv4", p);
    return conv_bn(b, q, cat, -1, c2, 1, 1, 1);
}

// SPPELAN: y0 = cv1 x, y1..y3 = chained max-pools 5/1/2, out = cv5(concat[y0..y3]).
static int sppelan(Builder *b, const char *p, int in, int c2, int c3) {
    char q[NAME_LEN];
    int cat = new_value(b, 4 * c3, b->vh[in], b->vw[in]);
    namef(q, "%s.cv1", p);
    int y = conv_bn(b, q, in, slice_value(b, cat, 0, c3), c3, 1, 1, 1);
    for (int i = 1; i < 4; i++) y = pool(b, OP_MAXPOOL, y, slice_value(b, cat, i * c3, c3), 5, 1, 2);
    namef(q, "%s.cv5", p);
    return conv_bn(b, q, cat, -1, c2, 1, 1, 1);
}

static int make_divisible(double x, int d) { return (int)ceil(x / d) * d; }

static int add_values(Builder *b, int x, int y, int out);

// ADown(c1, c2): x = avg_pool(2, s1) x, split in halves a, b; out = concat[cv1 a (3x3 s2),
// cv2(max_pool(3, s2, p1) b) (1x1)], c2/2 channels each.
static int adown(Builder *b, const char *p, int in, int c2) {
    char q[NAME_LEN];
    int C = b->m->values[in].C / 2, c = c2 / 2;
    int x = pool(b, OP_AVGPOOL, in, -1, 2, 1, 0);
    int out = new_value(b, 2 * c, conv_out(b->vh[x], 3, 2), conv_out(b->vw[x], 3, 2));
    namef(q, "%s.cv1", p);
    conv_bn(b, q, slice_value(b, x, 0, C), slice_value(b, out, 0, c), c, 3, 2, 1);
    int mp = pool(b, OP_MAXPOOL, slice_value(b, x, C, C), -1, 3, 2, 1);
    namef(q, "%s.cv2", p);
    conv_bn(b, q, mp, slice_value(b, out, c, c), c, 1, 1, 1);
    return out;
}

// CBLinear(c1, c2s): one 1x1 nn.Conv2d with bias, "<p>.conv", whose output is split into the widths
// c2s (the builder remembers the split for CBFuse).
static int cblinear(Builder *b, const char *p, int in, const int *c2s, int n) {
    char q[NAME_LEN];
    int *sp = b->split[b->layer];
    sp[0] = 0;
    for (int i = 0; i < n; i++) sp[i + 1] = sp[i] + c2s[i];
    b->n_split[b->layer] = n;
    int out = new_value(b, sp[n], b->vh[in], b->vw[in]);
    namef(q, "%s.conv", p);
    return conv_bias(b, q, in, out, sp[n], 1);
}

// CBFuse(idx): out = sum_i nearest_resize(x_i[idx_i], size of the last input) + the last input; x_i are
// CBLinear outputs at strides that divide the target's, so the resize is an integer upsampling.
static int cbfuse(Builder *b, const int *srcs, const int *in, int n_in, const int *idx) {
    int t = in[n_in - 1], acc = t;
    for (int i = 0; i < n_in - 1; i++) {
        const int *sp = b->split[srcs[i]];
        int v = slice_value(b, in[i], sp[idx[i]], sp[idx[i] + 1] - sp[idx[i]]), f = b->vh[t] / b->vh[v];
        if (f > 1) {
            int u = new_value(b, b->m->values[v].C, b->vh[t], b->vw[t]);
            add_node(b, OP_UPSAMPLE, v, u)->k = f;
            v = u;
        }
        acc = i == 0 ? v : add_values(b, acc, v, -1);
    }
    return add_values(b, acc, t, -1);
}

// DDetect: per level a box branch (3x3, 3x3 g4, 1x1 g4 + bias) named "<p>.<box>.<level>" and a class
// branch (3x3, 3x3, 1x1 + bias) named "<p>.<cls>.<level>", writing into the level's output map
// [64 box logits | nc class logits], whose value ids go to maps[]; then the fixed DFL "<p>.<dfl>".
// Branch widths follow the first input's channels, as the reference computes them per head.
static void ddetect(Builder *b, const char *p, const int *in, int nl, const char *box, const char *cls,
                    const char *dfl, int *maps) {
    Model *m = b->m;
    int nc = m->nc, R = m->reg_max;
    int ch0 = m->values[in[0]].C;
    int c2 = make_divisible(fmax(fmax(ch0 / 4, 4 * R), 16), 4);
    int c3 = ch0 > (2 * nc < 128 ? 2 * nc : 128) ? ch0 : (2 * nc < 128 ? 2 * nc : 128);
    char q[NAME_LEN];
    m->n_levels = nl;
    for (int i = 0; i < nl; i++) {
        int x = in[i], h = b->vh[x], w = b->vw[x];
        int out = new_value(b, 4 * R + nc, h, w);
        namef(q, "%s.%s.%d.0", p, box, i); int t = conv_bn(b, q, x, -1, c2, 3, 1, 1);
        namef(q, "%s.%s.%d.1", p, box, i); t = conv_bn(b, q, t, -1, c2, 3, 1, 4);
        namef(q, "%s.%s.%d.2", p, box, i); conv_bias(b, q, t, slice_value(b, out, 0, 4 * R), 4 * R, 4);
        namef(q, "%s.%s.%d.0", p, cls, i); t = conv_bn(b, q, x, -1, c3, 3, 1, 1);
        namef(q, "%s.%s.%d.1", p, cls, i); t = conv_bn(b, q, t, -1, c3, 3, 1, 1);
        namef(q, "%s.%s.%d.2", p, cls, i); conv_bias(b, q, t, slice_value(b, out, 4 * R, nc), nc, 1);
        maps[i] = out;
        m->strides[i] = b->max_hw / h;
    }
    int shape[4] = { 1, R, 1, 1 };
    namef(q, "%s.%s.conv.weight", p, dfl);
    add_param(b, q, PK_FIXED, 4, shape);
}

// DualDDetect (PGI training): inputs [aux P3..P5, main P3..P5]. The auxiliary head (cv2/cv3, dfl) reads
// the first half, the main head (cv4/cv5, dfl2) the second; the main head is the model's head[].
static int dual_ddetect(Builder *b, const char *p, const int *in, int n_in) {
    int nl = n_in / 2;
    for (int i = 0; i < nl; i++)
        if (b->vh[in[i]] != b->vh[in[nl + i]] || b->vw[in[i]] != b->vw[in[nl + i]])
            return i + 1;
    ddetect(b, p, in, nl, "cv2", "cv3", "dfl", b->m->aux);
    ddetect(b, p, in + nl, nl, "cv4", "cv5", "dfl2", b->m->head);
    b->m->n_aux = nl;
    return 0;
}

// ---- YOLO26's modules (ultralytics nn/modules/block.py, head.py @0df8b0bd; yolo26.md 1.3, 1.4) ----

static int imax(int a, int b) { return a > b ? a : b; }

// Conv(act=False): conv + BN without the SiLU (SPPF's cv1, the attention's qkv/pe/proj, ffn.1).
static int conv_bn_linear(Builder *b, const char *p, int in, int out, int K, int k, int s, int g) {
    out = conv_bn(b, p, in, out, K, k, s, g);
    b->m->nodes[b->m->n_nodes - 1].act = 0;
    return out;
}

// out = x + y, into `out` (a slice, say) or a new value when out < 0
static int add_values(Builder *b, int x, int y, int out) {
    if (out < 0) out = new_value(b, b->m->values[x].C, b->vh[x], b->vw[x]);
    add_node(b, OP_ADD, x, out)->in2 = y;
    return out;
}

// Bottleneck(c1, c2, shortcut, k=(3,3), e): cv2(cv1 x) with hidden int(c2*e), + x when c1 == c2.
static int bottleneck(Builder *b, const char *p, int in, int out, int c2, double e) {
    char q[NAME_LEN];
    namef(q, "%s.cv1", p);
    int t = conv_bn(b, q, in, -1, (int)(c2 * e), 3, 1, 1);
    namef(q, "%s.cv2", p);
    if (b->m->values[in].C != c2) return conv_bn(b, q, t, out, c2, 3, 1, 1);
    return add_values(b, in, conv_bn(b, q, t, -1, c2, 3, 1, 1), out);
}

// C3k(c1, c2, n): cv3(concat[m(cv1 x), cv2 x]), m = n Bottleneck(c_, c_, e=1.0), c_ = c2/2.
static int c3k(Builder *b, const char *p, int in, int out, int c2, int n) {
    char q[NAME_LEN];
    int c_ = c2 / 2;
    int cat = new_value(b, 2 * c_, b->vh[in], b->vw[in]);
    namef(q, "%s.cv1", p);
    int t = conv_bn(b, q, in, -1, c_, 1, 1, 1);
    namef(q, "%s.cv2", p);
    conv_bn(b, q, in, slice_value(b, cat, c_, c_), c_, 1, 1, 1);
    for (int i = 0; i < n; i++) {
        namef(q, "%s.m.%d", p, i);
        t = bottleneck(b, q, t, i == n - 1 ? slice_value(b, cat, 0, c_) : -1, c_, 1.0);
    }
    namef(q, "%s.cv3", p);
    return conv_bn(b, q, cat, out, c2, 1, 1, 1);
}

// Attention(dim, heads, attn_ratio 0.5): proj(attn_core(qkv x) + pe(v)), qkv/pe/proj Conv(act=False),
// pe depthwise 3x3. The q^T k and attn v products count in the layer's FLOPs.
static int attention(Builder *b, const char *p, int in, int heads) {
    Model *m = b->m;
    char q[NAME_LEN];
    int C = m->values[in].C, h = b->vh[in], w = b->vw[in];
    AttnDims ad = attn_dims(m->max_n, h, w, C, heads, 0.5);
    namef(q, "%s.qkv", p);
    int qkv = conv_bn_linear(b, q, in, -1, attn_qkv_channels(&ad), 1, 1, 1);
    int y = new_value(b, C, h, w), v = new_value(b, C, h, w);
    Node *n = add_node(b, OP_ATTN, qkv, y);
    n->out2 = v;
    n->attn = ad;
    n->probs = m->n_act;
    m->n_act += (attn_probs_floats(&ad) + 15) & ~(size_t)15;
    if (attn_workspace_floats(&ad) > m->n_ws) m->n_ws = attn_workspace_floats(&ad);
    double T = (double)h * w;
    m->layers[b->layer].flops += 2.0 * heads * T * T * (ad.key_dim + ad.head_dim);
    namef(q, "%s.pe", p);
    int pe = conv_bn_linear(b, q, v, -1, C, 3, 1, C);
    namef(q, "%s.proj", p);
    return conv_bn_linear(b, q, add_values(b, y, pe, -1), -1, C, 1, 1, 1);
}

// PSABlock(c, attn_ratio 0.5, heads): x = x + attn(x); x + ffn(x), ffn = Conv(c,2c,1), Conv(2c,c,1,act=False).
static int psa_block(Builder *b, const char *p, int in, int out, int heads) {
    char q[NAME_LEN];
    int C = b->m->values[in].C;
    namef(q, "%s.attn", p);
    int x = add_values(b, in, attention(b, q, in, heads), -1);
    namef(q, "%s.ffn.0", p);
    int f = conv_bn(b, q, x, -1, 2 * C, 1, 1, 1);
    namef(q, "%s.ffn.1", p);
    return add_values(b, x, conv_bn_linear(b, q, f, -1, C, 1, 1, 1), out);
}

enum { INNER_BOTTLENECK, INNER_C3K, INNER_ATTN };   // C3k2's inner block

// C3k2(c1, c2, n, c3k, e, attn): c = int(c2*e); cv1 x split in halves y0, y1; y_{i+2} = m_i(y_{i+1});
// cv2(concat[y0 .. y_{n+1}]). Inner block: Bottleneck(c, c) (e 0.5), C3k(c, c, 2), or (attn)
// Bottleneck(c, c) then PSABlock(c, heads max(c/64, 1)).
static int c3k2(Builder *b, const char *p, int in, int c2, int n, int inner, double e) {
    char q[NAME_LEN], q2[NAME_LEN];
    int c = (int)(c2 * e);
    int cat = new_value(b, (2 + n) * c, b->vh[in], b->vw[in]);
    namef(q, "%s.cv1", p);
    conv_bn(b, q, in, slice_value(b, cat, 0, 2 * c), 2 * c, 1, 1, 1);
    int y = slice_value(b, cat, c, c);
    for (int i = 0; i < n; i++) {
        int dst = slice_value(b, cat, (2 + i) * c, c);
        namef(q, "%s.m.%d", p, i);
        if (inner == INNER_ATTN) {
            namef(q2, "%s.0", q);
            int t = bottleneck(b, q2, y, -1, c, 0.5);
            namef(q2, "%s.1", q);
            y = psa_block(b, q2, t, dst, imax(c / 64, 1));
        } else {
            y = inner == INNER_C3K ? c3k(b, q, y, dst, c, 2) : bottleneck(b, q, y, dst, c, 0.5);
        }
    }
    namef(q, "%s.cv2", p);
    return conv_bn(b, q, cat, -1, c2, 1, 1, 1);
}

// SPPF(c1, c2, k, n, shortcut) as of 8.4: y0 = cv1 x (BN, no SiLU), y1..yn = chained max-pools k/1/k/2,
// out = cv2(concat[y0..yn]), + x when shortcut and c1 == c2.
static int sppf(Builder *b, const char *p, int in, int c2, int k, int n, int shortcut) {
    char q[NAME_LEN];
    int c1 = b->m->values[in].C, c_ = c1 / 2;
    int cat = new_value(b, (n + 1) * c_, b->vh[in], b->vw[in]);
    namef(q, "%s.cv1", p);
    int y = conv_bn_linear(b, q, in, slice_value(b, cat, 0, c_), c_, 1, 1, 1);
    for (int i = 1; i <= n; i++) y = pool(b, OP_MAXPOOL, y, slice_value(b, cat, i * c_, c_), k, 1, k / 2);
    namef(q, "%s.cv2", p);
    int out = conv_bn(b, q, cat, -1, c2, 1, 1, 1);
    return shortcut && c1 == c2 ? add_values(b, out, in, -1) : out;
}

// C2PSA(c1, c2 = c1, n, e): a, b = split(cv1 x); cv2(concat[a, n PSABlock(b)]), c = int(c1*e),
// heads c/64. `a` is copied into the concat: the blocks' input b must outlive the forward.
static int c2psa(Builder *b, const char *p, int in, int n, double e) {
    char q[NAME_LEN];
    int c1 = b->m->values[in].C, c = (int)(c1 * e), h = b->vh[in], w = b->vw[in];
    namef(q, "%s.cv1", p);
    int t = conv_bn(b, q, in, -1, 2 * c, 1, 1, 1);
    int cat = new_value(b, 2 * c, h, w);
    add_node(b, OP_COPY, slice_value(b, t, 0, c), slice_value(b, cat, 0, c));
    int y = slice_value(b, t, c, c);
    for (int i = 0; i < n; i++) {
        namef(q, "%s.m.%d", p, i);
        y = psa_block(b, q, y, i == n - 1 ? slice_value(b, cat, c, c) : -1, c / 64);
    }
    namef(q, "%s.cv2", p);
    return conv_bn(b, q, cat, -1, c1, 1, 1, 1);
}

// One branch of the end-to-end Detect, per level into a map [4*reg_max box | nc class logits]: box
// "<p>.<box>.<l>" Conv 3x3, Conv 3x3, 1x1 + bias; class "<p>.<cls>.<l>" (non-legacy) DWConv 3x3, Conv 1x1,
// DWConv 3x3, Conv 1x1, 1x1 + bias. Widths c2 = max(16, ch0/4, 4 reg_max), c3 = max(ch0, min(nc, 100)).
static void detect26_branch(Builder *b, const char *p, const int *in, int nl, const char *box,
                            const char *cls, int *maps) {
    Model *m = b->m;
    int nc = m->nc, R = m->reg_max, ch0 = m->values[in[0]].C;
    int c2 = imax(imax(16, ch0 / 4), 4 * R), c3 = imax(ch0, nc < 100 ? nc : 100);
    char q[NAME_LEN];
    for (int i = 0; i < nl; i++) {
        int x = in[i], C = m->values[x].C;
        int out = new_value(b, 4 * R + nc, b->vh[x], b->vw[x]);
        namef(q, "%s.%s.%d.0", p, box, i);   int t = conv_bn(b, q, x, -1, c2, 3, 1, 1);
        namef(q, "%s.%s.%d.1", p, box, i);   t = conv_bn(b, q, t, -1, c2, 3, 1, 1);
        namef(q, "%s.%s.%d.2", p, box, i);   conv_bias(b, q, t, slice_value(b, out, 0, 4 * R), 4 * R, 1);
        namef(q, "%s.%s.%d.0.0", p, cls, i); t = conv_bn(b, q, x, -1, C, 3, 1, C);
        namef(q, "%s.%s.%d.0.1", p, cls, i); t = conv_bn(b, q, t, -1, c3, 1, 1, 1);
        namef(q, "%s.%s.%d.1.0", p, cls, i); t = conv_bn(b, q, t, -1, c3, 3, 1, c3);
        namef(q, "%s.%s.%d.1.1", p, cls, i); t = conv_bn(b, q, t, -1, c3, 1, 1, 1);
        namef(q, "%s.%s.%d.2", p, cls, i);   conv_bias(b, q, t, slice_value(b, out, 4 * R, nc), nc, 1);
        maps[i] = out;
        m->strides[i] = b->max_hw / b->vh[x];
    }
}

// Detect(end2end): the one-to-many branch (cv2/cv3, m->aux) on the inputs, the one-to-one branch
// (one2one_cv2/one2one_cv3, m->head) on detached copies of them, so only the one-to-many loss trains
// the backbone and neck.
static void detect26(Builder *b, const char *p, const int *in, int nl) {
    Model *m = b->m;
    int det[4];
    m->n_levels = nl;
    detect26_branch(b, p, in, nl, "cv2", "cv3", m->aux);
    for (int i = 0; i < nl; i++) {
        det[i] = new_value(b, m->values[in[i]].C, b->vh[in[i]], b->vw[in[i]]);
        m->values[det[i]].no_grad = 1;
        add_node(b, OP_DETACH, in[i], det[i]);
    }
    detect26_branch(b, p, det, nl, "one2one_cv2", "one2one_cv3", m->head);
    m->n_aux = nl;
    m->end2end = 1;
}

// ---- the layer table ------------------------------------------------------------------------

static int fail(Builder *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Builder *b, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(b->err, "%s:%d: layer %d (%s): %s", b->spec->at.file, b->spec->at.line,
                   b->spec->index, b->spec->module, msg);
}

// Argument i as a positive integer channel count, scaled by width_multiple like the reference.
static int arg_int(Builder *b, int i, int *out) {
    double v = b->spec->args[i];
    if (i >= b->spec->n_args || !isfinite(v) || v < 1 || v != floor(v) || v > 65536)
        return fail(b, "argument %d must be a positive integer", i + 1);
    *out = (int)v;
    return 0;
}

static int need_args(Builder *b, int lo, int hi) {
    if (b->spec->n_args < lo || b->spec->n_args > hi)
        return fail(b, "%s takes %d to %d arguments", b->spec->module, lo, hi);
    return 0;
}

static int is_module26(const char *mod) {
    return !strcmp(mod, "C3k2") || !strcmp(mod, "SPPF") || !strcmp(mod, "C2PSA") || !strcmp(mod, "Detect");
}

// Argument i as 0/1 (False/True), or `def` when absent.
static int arg_flag(Builder *b, int i, int def, int *out) {
    *out = def;
    if (i >= b->spec->n_args) return 0;
    double v = b->spec->args[i];
    if (v != 0 && v != 1) return fail(b, "argument %d must be True or False", i + 1);
    *out = (int)v;
    return 0;
}

// Argument i as a fraction in (0, 1], or `def` when absent.
static int arg_fraction(Builder *b, int i, double def, double *out) {
    *out = i < b->spec->n_args ? b->spec->args[i] : def;
    if (!(*out > 0 && *out <= 1)) return fail(b, "argument %d must be a fraction in (0, 1]", i + 1);
    return 0;
}

// The repeats column scaled as the reference's parse_model does: max(round(n * depth), 1) when n > 1
// (Python's round: halves to even, as nearbyint in the default rounding mode).
static int repeats(Builder *b) {
    double dm = b->cfg->depth_multiple > 0 ? b->cfg->depth_multiple : 1.0;
    int n = b->spec->number;
    return n > 1 ? imax((int)nearbyint(n * dm), 1) : n;
}

// The YOLO26 modules: C3k2 [c2, c3k, e, attn], SPPF [c2, k, n, shortcut], C2PSA [c2, e] (c2 scaled by
// width into c2 here), Detect [nc, end2end].
static int build_layer26(Builder *b, const int *in, int n_in, int c2, int *out) {
    const LayerSpec *s = b->spec;
    const char *mod = s->module;
    Model *m = b->m;
    char p[NAME_LEN];
    namef(p, "model.%d", s->index);
    int x = in[0], C = m->values[x].C;
    if (strcmp(mod, "Detect") && n_in != 1) return fail(b, "%s takes one input, got %d", mod, n_in);
    if (!strcmp(mod, "C3k2")) {
        int k3, attn;
        double e;
        if (need_args(b, 1, 4) || arg_flag(b, 1, 0, &k3) || arg_fraction(b, 2, 0.5, &e) || arg_flag(b, 3, 0, &attn))
            return -1;
        if ((int)(c2 * e) < 2) return fail(b, "c2 * e = %g leaves no hidden channels", c2 * e);
        *out = c3k2(b, p, x, c2, repeats(b), attn ? INNER_ATTN : k3 ? INNER_C3K : INNER_BOTTLENECK, e);
    } else if (!strcmp(mod, "SPPF")) {
        int k = s->n_args > 1 ? (int)s->args[1] : 5, n = s->n_args > 2 ? (int)s->args[2] : 3, sc;
        if (need_args(b, 1, 4) || arg_flag(b, 3, 0, &sc)) return -1;
        if (k < 1 || k % 2 == 0 || k > 15) return fail(b, "pool size %d must be odd, 1 to 15", k);
        if (n < 1 || n > 6) return fail(b, "pool count %d must be 1 to 6", n);
        *out = sppf(b, p, x, c2, k, n, sc);
    } else if (!strcmp(mod, "C2PSA")) {
        double e;
        if (need_args(b, 1, 2) || arg_fraction(b, 1, 0.5, &e)) return -1;
        if (c2 != C) return fail(b, "C2PSA keeps its channels: c2 = %d must equal the input's %d", c2, C);
        if ((int)(C * e) < 64 || (int)(C * e) % 64)
            return fail(b, "C2PSA's hidden width int(c1 * e) = %d must be a multiple of 64 (heads of 64)", (int)(C * e));
        *out = c2psa(b, p, x, repeats(b), e);
    } else {
        int e2e;
        if (need_args(b, 1, 2) || arg_flag(b, 1, 0, &e2e)) return -1;
        if (!e2e || m->reg_max != 1)
            return fail(b, "only the end-to-end Detect of YOLO26 is supported: write [nc, True] and reg_max = 1 "
                           "in [model]");
        if (n_in < 1 || n_in > 4) return fail(b, "%s takes 1 to 4 input maps, got %d", mod, n_in);
        detect26(b, p, in, n_in);
        *out = -1;
    }
    return 0;
}

// CBFuse [[idx...]] from [cblinear layers..., target]: checks what the reference takes for granted.
static int build_cbfuse(Builder *b, const int *in, int n_in, int *out) {
    const LayerSpec *s = b->spec;
    int srcs[CFG_MAX_FROM], idx[CFG_MAX_FROM], t = in[n_in - 1];
    if (n_in < 2 || s->n_args != n_in - 1)
        return fail(b, "CBFuse takes CBLinear layers then the map they are added to (at least 2 inputs), and "
                       "one index per CBLinear input: %d inputs, %d indices", n_in, s->n_args);
    for (int i = 0; i < n_in - 1; i++) {
        srcs[i] = s->from[i] < 0 ? s->index + s->from[i] : s->from[i];
        idx[i] = (int)s->args[i];
        int ns = srcs[i] >= 0 ? b->n_split[srcs[i]] : 0;
        if (!ns) return fail(b, "input %d (layer %d) is not a CBLinear layer", i + 1, srcs[i]);
        if (s->args[i] != idx[i] || idx[i] < 0 || idx[i] >= ns)
            return fail(b, "index %g of input %d must be 0 to %d: layer %d has %d outputs", s->args[i], i + 1,
                        ns - 1, srcs[i], ns);
        const int *sp = b->split[srcs[i]];
        int C = sp[idx[i] + 1] - sp[idx[i]], h = b->vh[in[i]], w = b->vw[in[i]];
        if (C != b->m->values[t].C)
            return fail(b, "output %d of layer %d has %d channels, the last input %d", idx[i], srcs[i], C,
                        b->m->values[t].C);
        if (h > b->vh[t] || b->vh[t] % h || w > b->vw[t] || b->vw[t] % w || b->vh[t] / h != b->vw[t] / w)
            return fail(b, "input %d is %dx%d, which does not scale up to the last input's %dx%d at imgsz %d", i + 1,
                        h, w, b->vh[t], b->vw[t], b->max_hw);
    }
    *out = cbfuse(b, srcs, in, n_in, idx);
    return 0;
}

static int build_layer(Builder *b, const int *in, int n_in, int *out) {
    const LayerSpec *s = b->spec;
    const char *mod = s->module;
    Model *m = b->m;
    char p[NAME_LEN];
    namef(p, "model.%d", s->index);
    double wm = b->cfg->width_multiple > 0 ? b->cfg->width_multiple : 1.0;
    int c[4] = { 0 };
    int head = !strcmp(mod, "DDetect") || !strcmp(mod, "DualDDetect") || !strcmp(mod, "Detect");
    if (head && strcmp(mod, "Detect") && m->reg_max != 16)     // the loss and decode have 16 DFL bins
        return fail(b, "reg_max = %d: %s works with reg_max = 16 (DFL bins) only; set reg_max = 16 in [model] "
                    "(reg_max = 1 is for YOLO26's end-to-end Detect)", m->reg_max, mod);
    if (!strcmp(mod, "Upsample") || !strcmp(mod, "Concat") || head || !strcmp(mod, "Silence") ||
        !strcmp(mod, "CBLinear") || !strcmp(mod, "CBFuse")) {
    } else {
        for (int i = 0; i < s->n_args && i < 4; i++)   // YOLO26 modules: only c2 is a channel count
            if (i == 0 || (strcmp(mod, "Conv") && !is_module26(mod))) { if (arg_int(b, i, &c[i])) return -1; }
        int cap = b->cfg->max_channels;                // as ultralytics: min(c2, max_channels) * width
        c[0] = make_divisible((cap > 0 && c[0] > cap ? cap : c[0]) * wm, 8);
    }
    if (!strcmp(mod, "CBFuse")) return build_cbfuse(b, in, n_in, out);
    if (strcmp(mod, "Concat") && !head && n_in != 1)
        return fail(b, "%s takes one input, got %d", mod, n_in);
    int x = in[0];
    if (!strcmp(mod, "Conv")) {
        if (need_args(b, 1, 5)) return -1;
        int k = s->n_args > 1 ? (int)s->args[1] : 1, st = s->n_args > 2 ? (int)s->args[2] : 1;
        int g = s->n_args > 4 ? (int)s->args[4] : 1;
        if (k < 1 || k % 2 == 0 || k > 15) return fail(b, "kernel size %d must be odd, 1 to 15", k);
        if (st < 1 || st > 8) return fail(b, "stride %d must be 1 to 8", st);
        if (g < 1 || m->values[x].C % g || c[0] % g)
            return fail(b, "groups %d must divide the input (%d) and output (%d) channels", g, m->values[x].C, c[0]);
        *out = conv_bn(b, p, x, -1, c[0], k, st, g);
    } else if (!strcmp(mod, "AConv")) {
        if (need_args(b, 1, 1)) return -1;
        int a = pool(b, OP_AVGPOOL, x, -1, 2, 1, 0);
        char q[NAME_LEN]; namef(q, "%s.cv1", p);
        *out = conv_bn(b, q, a, -1, c[0], 3, 2, 1);
    } else if (!strcmp(mod, "ADown")) {
        if (need_args(b, 1, 1)) return -1;
        if (m->values[x].C % 2) return fail(b, "the input's %d channels must be even (they are split in halves)",
                                            m->values[x].C);
        if (c[0] < 2) return fail(b, "c2 = %d leaves no channels for the halves", c[0]);
        *out = adown(b, p, x, c[0]);
    } else if (!strcmp(mod, "Silence")) {
        *out = x;                                      // the reference's placeholder: its input, unchanged
    } else if (!strcmp(mod, "CBLinear")) {
        int c2s[CFG_MAX_ARGS];
        for (int i = 0; i < s->n_args; i++)            // the reference does not scale these by width
            if (arg_int(b, i, &c2s[i])) return -1;
        *out = cblinear(b, p, x, c2s, s->n_args);
    } else if (!strcmp(mod, "ELAN1") || !strcmp(mod, "RepNCSPELAN4")) {
        int rep = !strcmp(mod, "ELAN1") ? 0 : (s->n_args > 3 ? c[3] : 1);
        if (need_args(b, 3, rep ? 4 : 3)) return -1;
        if (c[1] % 2) return fail(b, "c3 = %d must be even (it is split in halves)", c[1]);
        *out = elan(b, p, x, c[0], c[1], c[2], rep);
    } else if (!strcmp(mod, "SPPELAN")) {
        if (need_args(b, 2, 2)) return -1;
        *out = sppelan(b, p, x, c[0], c[1]);
    } else if (!strcmp(mod, "Upsample")) {
        int f = s->n_args > 1 && isfinite(s->args[1]) ? (int)s->args[1] : 2;
        if (f < 1 || f > 8) return fail(b, "scale factor %d must be 1 to 8", f);
        if (s->sarg[0] && strcmp(s->sarg, "nearest"))
            return fail(b, "mode '%s' is not supported: only 'nearest'", s->sarg);
        *out = new_value(b, m->values[x].C, b->vh[x] * f, b->vw[x] * f);
        add_node(b, OP_UPSAMPLE, x, *out)->k = f;
    } else if (!strcmp(mod, "Concat")) {
        int C = 0;
        for (int i = 0; i < n_in; i++) {
            if (b->vh[in[i]] != b->vh[x] || b->vw[in[i]] != b->vw[x])
                return fail(b, "Concat inputs differ in size: input %d is %dx%d, input 1 is %dx%d at imgsz %d", i + 1, b->vh[in[i]], b->vw[in[i]], b->vh[x], b->vw[x], b->max_hw);
            C += m->values[in[i]].C;
        }
        *out = new_value(b, C, b->vh[x], b->vw[x]);
        for (int i = 0, c0 = 0; i < n_in; c0 += m->values[in[i]].C, i++)
            add_node(b, OP_COPY, in[i], slice_value(b, *out, c0, m->values[in[i]].C));
    } else if (!strcmp(mod, "DDetect")) {
        if (n_in < 1 || n_in > 4) return fail(b, "%s takes 1 to 4 input maps, got %d", mod, n_in);
        ddetect(b, p, in, n_in, "cv2", "cv3", "dfl", m->head);
        *out = -1;
    } else if (!strcmp(mod, "DualDDetect")) {
        if (n_in % 2 || n_in < 2 || n_in > 8)
            return fail(b, "%s takes 2 to 8 input maps, auxiliary levels then as many main levels, got %d", mod, n_in);
        int bad = dual_ddetect(b, p, in, n_in);
        if (bad) return fail(b, "auxiliary input %d and main input %d differ in size at imgsz %d; level i of "
                             "both halves must have the same stride", bad, n_in / 2 + bad, b->max_hw);
        *out = -1;
    } else if (is_module26(mod)) {
        return build_layer26(b, in, n_in, c[0], out);
    } else {
        return fail(b, "unknown module '%s'; known: Conv, AConv, ADown, ELAN1, RepNCSPELAN4, SPPELAN, Silence, "
                       "CBLinear, CBFuse, Upsample, Concat, DDetect, DualDDetect, C3k2, SPPF, C2PSA, Detect", mod);
    }
    return 0;
}

static void layer_info(Builder *b, const LayerSpec *s, int out) {
    LayerInfo *li = &b->m->layers[b->layer];
    li->n_from = s->n_from;
    memcpy(li->from, s->from, sizeof li->from);
    snprintf(li->module, sizeof li->module, "%s", s->module);
    int o = s->list ? snprintf(li->args, sizeof li->args, "[") : 0;   // CBLinear, CBFuse: [[...]] in the yaml
    li->args[o] = 0;
    for (int i = 0; i < s->n_args && o < (int)sizeof li->args - 16; i++) {
        if (isnan(s->args[i])) o += snprintf(li->args + o, sizeof li->args - o, "%sNone", i ? ", " : "");
        else o += snprintf(li->args + o, sizeof li->args - o, "%s%g", i ? ", " : "", s->args[i]);
    }
    if (s->sarg[0]) snprintf(li->args + o, sizeof li->args - o, "%s'%s'", o ? ", " : "", s->sarg);
    if (s->list && o < (int)sizeof li->args - 1) snprintf(li->args + o, sizeof li->args - o, "]");
    li->out = out;
}

static int owner(const Model *m, int v) { return m->values[v].parent < 0 ? v : m->values[v].parent; }

// Nodes that only the auxiliary head needs (PGI's branch and the head's cv2/cv3): walking back from
// the main head's maps, a node is needed when something needed reads the buffer it writes.
static void mark_train_only(Model *m) {
    if (!m->n_aux) return;
    unsigned char *need = xcalloc(m->n_values, 1);
    for (int l = 0; l < m->n_levels; l++) need[owner(m, m->head[l])] = 1;
    for (int i = m->n_nodes - 1; i >= 0; i--) {
        Node *nd = &m->nodes[i];
        nd->train_only = !need[owner(m, nd->out)] && !(nd->out2 >= 0 && need[owner(m, nd->out2)]);
        if (nd->train_only) continue;
        need[owner(m, nd->in)] = 1;
        if (nd->in2 >= 0) need[owner(m, nd->in2)] = 1;
    }
    free(need);
}

int model_build(const Config *cfg, int max_n, int imgsz, Model *m, Err *err) {
    memset(m, 0, sizeof *m);
    if (imgsz < 32 || imgsz % 32) return err_set(err, "%s: imgsz=%d must be a positive multiple of 32", cfg->file, imgsz);
    if (cfg->n_layers < 1) return err_set(err, "%s: the model has no layers ([backbone] and [head])", cfg->file);
    m->nc = cfg->nc > 0 ? cfg->nc : 80;
    m->reg_max = cfg->reg_max > 0 ? cfg->reg_max : 16;
    m->max_n = max_n;
    m->imgsz = imgsz;
    m->augment_side = !strcmp(cfg->augment, "gpu") ? cfg->imgsz : 0;
    m->be = &backend_cpu;
    m->bn_batches = 0;
    m->layers = xcalloc(cfg->n_layers, sizeof *m->layers);
    m->n_layers = cfg->n_layers;
    Builder b = { .m = m, .cfg = cfg, .err = err, .max_hw = imgsz };
    m->input = new_value(&b, 3, imgsz, imgsz);
    m->values[m->input].no_grad = 1;
    int *lay = xmalloc(cfg->n_layers * sizeof *lay);
    int rc = 0, have_head = 0;
    for (int i = 0; i < cfg->n_layers && !rc; i++) {
        const LayerSpec *s = &cfg->layers[i];
        b.spec = s; b.layer = i;
        int in[CFG_MAX_FROM], n_in = s->n_from;
        for (int j = 0; j < n_in && !rc; j++) {
            int f = s->from[j] < 0 ? i + s->from[j] : s->from[j];
            if (f < -1 || f >= i || (f >= 0 && lay[f] < 0))
                rc = fail(&b, "from %d does not refer to an earlier layer with an output", s->from[j]);
            else in[j] = f < 0 ? m->input : lay[f];
        }
        if (!rc && have_head) rc = fail(&b, "layers after the detection head are not supported");
        if (!rc) rc = build_layer(&b, in, n_in, &lay[i]);
        if (!rc) { layer_info(&b, s, lay[i]); have_head = lay[i] < 0; }
    }
    if (!rc && !have_head)
        rc = err_set(err, "%s: the model has no detection head: the last layer must be DDetect, DualDDetect or Detect",
                     cfg->file);
    free(lay);
    m->vh = b.vh; m->vw = b.vw;
    if (rc) { model_free(m); return -1; }
    mark_train_only(m);
    model_plan_grads(m);
    m->buffers = m->n_state;                       // the buffer region follows the parameters
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i].kind == PK_RUNNING_MEAN || m->params[i].kind == PK_RUNNING_VAR) m->params[i].offset += m->buffers;
    m->n_state += m->n_buffers;
    for (int i = 0; i < m->n_nodes; i++) {
        const ConvDims *d = &m->nodes[i].cv.d;
        size_t s = (size_t)max_n * d->P * d->Q * d->K;
        if (s > m->n_tmp) m->n_tmp = s;
    }
    // Reserved, not touched: a GPU run frees them unused, a CPU run checks the memory first. A
    // plan too large to reserve at all is the user's batch or imgsz, so it is an error, not a crash.
    m->state = calloc(m->n_state, sizeof(float));
    m->grad = calloc(m->n_state, sizeof(float));
    m->act = calloc(m->n_act, sizeof(float));
    m->dact = calloc(m->n_dact + 1, sizeof(float));
    m->stats = calloc(m->n_stats + 1, sizeof(float));
    m->ws = calloc(m->n_ws + 1, sizeof(float));
    m->tmp_a = calloc(m->n_tmp + 1, sizeof(float));
    m->tmp_b = calloc(m->n_tmp + 1, sizeof(float));
    if (!m->state || !m->grad || !m->act || !m->dact || !m->stats || !m->ws || !m->tmp_a || !m->tmp_b) {
        double gb = model_host_bytes(m) / 1e9;
        model_free(m);
        return err_set(err, "%s: batch %d at imgsz %d needs %.1f GB of memory for the model, which cannot be "
                       "reserved here; lower batch or imgsz", cfg->file, max_n, imgsz, gb);
    }
    model_init_weights(m, 0);
    m->opt_block = m->end2end || !strcmp(cfg->optimizer, "Adam") || !strcmp(cfg->optimizer, "AdamW");
    return 0;
}

void model_free(Model *m) {
    model_drop_recordings(m);
    if (!m->on_device) {
        free(m->state); free(m->grad);
        free(m->act); free(m->dact); free(m->stats); free(m->ws); free(m->tmp_a); free(m->tmp_b);
        free(m->zre[0]); free(m->zre[1]);
    }
    free(m->replay_first); free(m->replay_nodes);
    free(m->params); free(m->values); free(m->nodes); free(m->layers); free(m->vh); free(m->vw);
    model_free_grad_plan(m);
    memset(m, 0, sizeof *m);
}

int model_find_param(const Model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}

size_t model_count_params(const Model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++)
        if (param_trainable(m->params[i].kind) || m->params[i].kind == PK_FIXED) n += m->params[i].n;
    return n;
}

int model_count_tensors(const Model *m) {
    int n = m->n_params;
    for (int i = 0; i < m->n_params; i++) n += m->params[i].kind == PK_RUNNING_VAR;   // num_batches_tracked
    return n;
}

size_t model_host_bytes(const Model *m) {
    return sizeof(float) * (2 * m->n_state + m->n_act + m->n_dact + m->n_stats + m->n_ws + 2 * m->n_tmp + m->n_zre[0] +
                            m->n_zre[1]);
}

int model_reserve_act(Model *m) {
    free(m->act); free(m->zre[0]); free(m->zre[1]);
    m->act = calloc(m->n_act, sizeof(float));
    for (int k = 0; k < 2; k++) m->zre[k] = m->n_zre[k] ? calloc(m->n_zre[k], sizeof(float)) : NULL;
    return !m->act || (m->n_zre[0] && !m->zre[0]) || (m->n_zre[1] && !m->zre[1]) ? -1 : 0;
}

double model_flops(const Model *m, int imgsz) {
    double f = 0;
    for (int i = 0; i < m->n_layers; i++) f += m->layers[i].flops;
    double r = (double)imgsz / m->imgsz;
    return f * r * r;
}

void model_set_size(Model *m, int h, int w) {
    m->vh[m->input] = h; m->vw[m->input] = w;
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *n = &m->nodes[i];
        int x = owner(m, n->in), y = owner(m, n->out), H = m->vh[x], W = m->vw[x];
        switch (n->op) {
        case OP_CONV: case OP_REPCONV:
            H = (H + 2 * n->cv.d.pad - n->cv.d.R) / n->cv.d.stride + 1;
            W = (W + 2 * n->cv.d.pad - n->cv.d.S) / n->cv.d.stride + 1;
            break;
        case OP_MAXPOOL: case OP_AVGPOOL:
            H = (H + 2 * n->pad - n->k) / n->stride + 1;
            W = (W + 2 * n->pad - n->k) / n->stride + 1;
            break;
        case OP_UPSAMPLE: H *= n->k; W *= n->k; break;
        case OP_COPY: case OP_ADD: case OP_DETACH: break;
        case OP_ATTN: m->vh[owner(m, n->out2)] = H; m->vw[owner(m, n->out2)] = W; break;
        }
        m->vh[y] = H; m->vw[y] = W;
    }
    for (int v = 0; v < m->n_values; v++) { m->vh[v] = m->vh[owner(m, v)]; m->vw[v] = m->vw[owner(m, v)]; }
}

// 1 when value v is one of the head's (or auxiliary head's) output maps.
static int is_head_map(const Model *m, int v) {
    for (int l = 0; l < m->n_levels; l++)
        if (v == m->head[l] || (l < m->n_aux && v == m->aux[l])) return 1;
    return 0;
}

// ---- initial weights ------------------------------------------------------------------------

// PyTorch's default conv init (kaiming_uniform with a = sqrt(5): U(+-1/sqrt(fan_in)), the same
// bound for biases), BN gamma 1, beta 0, running_var 0.9 and one tracked batch (the reference's
// stride probe ran one train-mode forward), then DDetect's bias_init.
void model_init_weights(Model *m, uint64_t seed) {
    Rng r = rng_for(seed, 0x1d17, 0);
    for (int i = 0; i < m->n_params; i++) {
        ParamInfo *p = &m->params[i];
        float *x = m->state + p->offset;
        size_t fan_in = p->ndim == 4 ? (size_t)p->shape[1] * p->shape[2] * p->shape[3] : 1;
        if (p->kind == PK_BIAS && i > 0 && m->params[i - 1].kind == PK_WEIGHT)
            fan_in = (size_t)m->params[i - 1].shape[1] * m->params[i - 1].shape[2] * m->params[i - 1].shape[3];
        double bound = 1.0 / sqrt((double)fan_in);
        for (size_t j = 0; j < p->n; j++) {
            switch (p->kind) {
            case PK_WEIGHT:       x[j] = (float)rng_uniform(&r, -bound, bound); break;
            case PK_BN_WEIGHT:    x[j] = 1.0f; break;
            case PK_BIAS:         x[j] = (i > 0 && m->params[i - 1].kind == PK_WEIGHT) ? (float)rng_uniform(&r, -bound, bound) : 0.0f; break;
            case PK_RUNNING_MEAN: x[j] = 0.0f; break;
            case PK_RUNNING_VAR:  x[j] = m->end2end ? 1.0f : 0.9f; break;
            case PK_FIXED:        x[j] = (float)j; break;
            }
        }
    }
    m->bn_batches = m->end2end ? 0 : 1;   // YOLO26's stride probe runs in eval mode
    // bias_init: box logits 1.0 (end-to-end: distances 2.0), class logits ln(5 / nc / (640 / stride)^2)
    for (int i = 0; i < m->n_nodes; i++) {
        const Node *n = &m->nodes[i];
        if (n->op != OP_CONV || n->cv.b < 0 || !is_head_map(m, owner(m, n->out))) continue;   // not CBLinear
        const Value *v = &m->values[n->out];
        float *bias = m->state + m->params[n->cv.b].offset;
        for (int k = 0; k < n->cv.d.K; k++)
            bias[k] = v->c0 == 0 ? (m->end2end ? 2.0f : 1.0f) : (float)log(5.0 / m->nc / pow(640.0 / v->stride, 2));
    }
}
