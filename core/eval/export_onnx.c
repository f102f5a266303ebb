// export_onnx.c: a built model as an ONNX graph (opset 17) for inference, see export.h. Legend: B batch
// (symbolic with dynamic=1), C channels, A anchors, nc classes, R reg_max.
//
// Our graph writes concat inputs straight into channel slices of one buffer and reads splits as
// slices; ONNX has no such aliasing, so every node gets its own output tensor and a read of a value
// is rebuilt from the tensors written into its channel range (Slice where a read covers part of a
// write, Concat where it spans several). BN is folded into the convolution before it (eval mode:
// running statistics), a RepConvN's 3x3 and 1x1 branches into one 3x3 convolution, and SiLU is
// x * sigmoid(x). The head then decodes as the references' exports do:
//   DDetect (yolov9 Detect.forward, export): (B, 4 + nc, A): DFL boxes as xywh in pixels, sigmoid scores.
//   YOLO26 end-to-end (Ultralytics Detect.postprocess): (B, 300, 6): x1 y1 x2 y2 score class, the top
//   300 anchors by best score, then the top 300 (anchor, class) pairs among them. Both TopKs rank the
//   logits (the sigmoid is monotone, so the same top k) and the Sigmoid runs on the 300 kept: the
//   order then does not rest on a runtime's sigmoid tail (onnxruntime's CPU Sigmoid is a rational
//   approximation good to ~3e-8 absolute, 0 below about -16.6, and not even monotone there), and
//   equal scores (the sigmoid rounds to 1.0f above ~16.6) rank by logit, as core/spec/topk26.c does.
#include "core/eval/export.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/spec/model.h"
#include "io/onnx.h"

#define OPSET 17
#define NAME 48
static const float BN_EPS = 1e-3f;   // as core/spec/model_run.c (the references set eps=1e-3 on every BN)

typedef struct { int owner, c0, C; char name[NAME]; } Write;   // a tensor holding channels of a value

typedef struct {
    const Model *m;
    Pb g;
    Write *w; int n_w;
    int tmp;                  // counter for intermediate names
} Ex;

static const char *fresh(Ex *e, char *buf, const char *what) {
    snprintf(buf, NAME, "%s_%d", what, e->tmp++);
    return buf;
}

static void node(Ex *e, const char *op, const char *const *in, int n_in, const char *out, Pb *attrs_into) {
    char name[NAME];
    Pb n;
    onnx_node(&n, op, fresh(e, name, op), in, n_in, &out, 1);
    if (attrs_into) *attrs_into = n;
    else onnx_add_node(&e->g, &n);
}

static void const_i64(Ex *e, char *name, const int64_t *v, int n) {
    fresh(e, name, "k");
    int64_t dims[1] = { n };
    onnx_initializer(&e->g, name, ONNX_INT64, dims, 1, v);
}

static void const_f32(Ex *e, char *name, const float *v, const int64_t *dims, int ndim) {
    fresh(e, name, "c");
    onnx_initializer(&e->g, name, ONNX_FLOAT, dims, ndim, v);
}

// y = x[:, lo:hi] along axis
static void slice(Ex *e, const char *x, int axis, int64_t lo, int64_t hi, const char *y) {
    char s[NAME], t[NAME], a[NAME];
    int64_t ax = axis;
    const_i64(e, s, &lo, 1); const_i64(e, t, &hi, 1); const_i64(e, a, &ax, 1);
    const char *in[] = { x, s, t, a };
    node(e, "Slice", in, 4, y, NULL);
}

static void concat(Ex *e, const char *const *in, int n, int axis, const char *y) {
    Pb nd;
    node(e, "Concat", in, n, y, &nd);
    onnx_attr_int(&nd, "axis", axis);
    onnx_add_node(&e->g, &nd);
}

static void binary(Ex *e, const char *op, const char *a, const char *b, const char *y) {
    const char *in[] = { a, b };
    node(e, op, in, 2, y, NULL);
}

static void unary(Ex *e, const char *op, const char *x, const char *y) { node(e, op, &x, 1, y, NULL); }

static void reshape(Ex *e, const char *x, const int64_t *shape, int n, const char *y) {
    char s[NAME];
    const_i64(e, s, shape, n);
    binary(e, "Reshape", x, s, y);
}

static void silu(Ex *e, const char *x, const char *y) {
    char s[NAME];
    unary(e, "Sigmoid", x, fresh(e, s, "sig"));
    binary(e, "Mul", x, s, y);
}

// ---- values ----------------------------------------------------------------------------------
static void record(Ex *e, int v, const char *name) {
    const Value *val = &e->m->values[v];
    e->w = xrealloc(e->w, (e->n_w + 1) * sizeof *e->w);
    Write *w = &e->w[e->n_w++];
    w->owner = val->parent < 0 ? v : val->parent;
    w->c0 = val->parent < 0 ? 0 : val->c0;
    w->C = val->C;
    snprintf(w->name, NAME, "%s", name);
}

// The tensor of value v as written so far: the latest writes covering its channel range.
static void read_value(Ex *e, int v, char *out) {
    const Value *val = &e->m->values[v];
    int owner = val->parent < 0 ? v : val->parent, c0 = val->parent < 0 ? 0 : val->c0, C = val->C;
    const char *parts[64];
    char names[64][NAME];
    int n = 0, at = c0;
    while (at < c0 + C) {                          // the newest write holding channel `at`
        int k = e->n_w - 1;
        while (k >= 0 && !(e->w[k].owner == owner && e->w[k].c0 <= at && at < e->w[k].c0 + e->w[k].C)) k--;
        if (k < 0 || n == 64) die("export_onnx: channel %d of value %d was never written", at, v);
        const Write *w = &e->w[k];
        int hi = w->c0 + w->C < c0 + C ? w->c0 + w->C : c0 + C;
        if (at == w->c0 && hi == w->c0 + w->C) snprintf(names[n], NAME, "%s", w->name);
        else slice(e, w->name, 1, at - w->c0, hi - w->c0, fresh(e, names[n], "part"));
        parts[n] = names[n];
        n++;
        at = hi;
    }
    if (n == 1) snprintf(out, NAME, "%s", parts[0]);
    else concat(e, parts, n, 1, fresh(e, out, "cat"));
}

// ---- convolutions ------------------------------------------------------------------------------
static const float *P(const Model *m, int i) { return m->state + m->params[i].offset; }

// w (K, C/groups, R, S) and b (K) of a unit with its BN folded in: w * s, beta - mean * s (+ bias * s)
static void fold(const Model *m, const ConvUnit *u, float *w, float *b) {
    const ConvDims *d = &u->d;
    size_t per = (size_t)(d->C / d->groups) * d->R * d->S;
    for (int k = 0; k < d->K; k++) {
        double s = 1, shift = u->b >= 0 ? P(m, u->b)[k] : 0;
        if (u->bn_w >= 0) {
            s = P(m, u->bn_w)[k] / sqrt((double)P(m, u->bn_var)[k] + BN_EPS);
            shift = P(m, u->bn_b)[k] + (shift - P(m, u->bn_mean)[k]) * s;
        }
        for (size_t j = 0; j < per; j++) w[k * per + j] = (float)(P(m, u->w)[k * per + j] * s);
        b[k] = (float)shift;
    }
}

// A RepConvN: the 1x1 branch (folded) added to the centre of the 3x3 one.
static void fold_rep(const Model *m, const ConvUnit *c3, const ConvUnit *c1, float *w, float *b) {
    const ConvDims *d = &c3->d;
    int cg = d->C / d->groups;
    float *w1 = xmalloc(sizeof(float) * d->K * cg), *b1 = xmalloc(sizeof(float) * d->K);
    fold(m, c3, w, b);
    fold(m, c1, w1, b1);
    for (int k = 0; k < d->K; k++) {
        b[k] += b1[k];
        for (int c = 0; c < cg; c++) w[((size_t)k * cg + c) * d->R * d->S + (d->R / 2) * d->S + d->S / 2] += w1[k * cg + c];
    }
    free(w1); free(b1);
}

static void emit_conv(Ex *e, const Node *nd, const char *x, const char *y) {
    const ConvDims *d = &nd->cv.d;
    int64_t wd[4] = { d->K, d->C / d->groups, d->R, d->S }, bd[1] = { d->K };
    float *w = xmalloc(sizeof(float) * wd[0] * wd[1] * wd[2] * wd[3]), *b = xmalloc(sizeof(float) * d->K);
    if (nd->op == OP_REPCONV) fold_rep(e->m, &nd->cv, &nd->cv2, w, b);
    else fold(e->m, &nd->cv, w, b);
    char wn[NAME], bn[NAME], z[NAME];
    const_f32(e, wn, w, wd, 4);
    const_f32(e, bn, b, bd, 1);
    free(w); free(b);
    const char *in[] = { x, wn, bn };
    Pb c;
    node(e, "Conv", in, 3, nd->act ? fresh(e, z, "conv") : y, &c);
    int64_t k[2] = { d->R, d->S }, s[2] = { d->stride, d->stride }, p[4] = { d->pad, d->pad, d->pad, d->pad };
    onnx_attr_ints(&c, "kernel_shape", k, 2);
    onnx_attr_ints(&c, "strides", s, 2);
    onnx_attr_ints(&c, "pads", p, 4);
    onnx_attr_int(&c, "group", d->groups);
    onnx_add_node(&e->g, &c);
    if (nd->act) silu(e, z, y);
}

// ---- other nodes -------------------------------------------------------------------------------
static void emit_pool(Ex *e, const Node *nd, const char *x, const char *y) {
    Pb p;
    node(e, nd->op == OP_MAXPOOL ? "MaxPool" : "AveragePool", &x, 1, y, &p);
    int64_t k[2] = { nd->k, nd->k }, s[2] = { nd->stride, nd->stride }, pad[4] = { nd->pad, nd->pad, nd->pad, nd->pad };
    onnx_attr_ints(&p, "kernel_shape", k, 2);
    onnx_attr_ints(&p, "strides", s, 2);
    onnx_attr_ints(&p, "pads", pad, 4);
    if (nd->op == OP_AVGPOOL) onnx_attr_int(&p, "count_include_pad", 1);   // F.avg_pool2d's default
    onnx_add_node(&e->g, &p);
}

static void emit_upsample(Ex *e, const Node *nd, const char *x, const char *y) {
    char sc[NAME];
    float f[4] = { 1, 1, (float)nd->k, (float)nd->k };
    int64_t dims[1] = { 4 };
    const_f32(e, sc, f, dims, 1);
    const char *in[] = { x, "", sc };
    Pb r;
    node(e, "Resize", in, 3, y, &r);
    onnx_attr_str(&r, "mode", "nearest");                              // torch's nearest: floor(dst / k)
    onnx_attr_str(&r, "coordinate_transformation_mode", "asymmetric");
    onnx_attr_str(&r, "nearest_mode", "floor");
    onnx_add_node(&e->g, &r);
}

// Ultralytics Attention: q, k, v = qkv.view(B, nh, 2kd + hd, T).split([kd, kd, hd], 2);
// y = v @ softmax(q^T k * scale)^T viewed (B, nh*hd, H, W); out2 = v viewed the same way (pe's input).
static void emit_attn(Ex *e, const Node *nd, const char *x, const char *y) {
    const AttnDims *a = &nd->attn;
    int H = e->m->vh[nd->in], W = e->m->vw[nd->in];
    char r[NAME], sp[NAME], q[NAME], k[NAME], v[NAME], qt[NAME], s[NAME], ss[NAME], sc[NAME], p[NAME], pt[NAME], o[NAME];
    int64_t shape[4] = { 0, a->heads, 2 * a->key_dim + a->head_dim, (int64_t)H * W };
    reshape(e, x, shape, 4, fresh(e, r, "qkv"));
    int64_t parts[3] = { a->key_dim, a->key_dim, a->head_dim };
    const_i64(e, sp, parts, 3);
    fresh(e, q, "q"); fresh(e, k, "k"); fresh(e, v, "v");
    const char *in[] = { r, sp }, *outs[] = { q, k, v };
    char nm[NAME];
    Pb n;
    onnx_node(&n, "Split", fresh(e, nm, "Split"), in, 2, outs, 3);
    onnx_attr_int(&n, "axis", 2);
    onnx_add_node(&e->g, &n);
    int64_t perm[4] = { 0, 1, 3, 2 };
    node(e, "Transpose", (const char *[]){ q }, 1, fresh(e, qt, "qt"), &n);
    onnx_attr_ints(&n, "perm", perm, 4);
    onnx_add_node(&e->g, &n);
    binary(e, "MatMul", qt, k, fresh(e, s, "qk"));
    int64_t one[1] = { 1 };
    const_f32(e, sc, &a->scale, one, 1);
    binary(e, "Mul", s, sc, fresh(e, ss, "qks"));
    node(e, "Softmax", (const char *[]){ ss }, 1, fresh(e, p, "attn"), &n);
    onnx_attr_int(&n, "axis", -1);
    onnx_add_node(&e->g, &n);
    node(e, "Transpose", (const char *[]){ p }, 1, fresh(e, pt, "attnt"), &n);
    onnx_attr_ints(&n, "perm", perm, 4);
    onnx_add_node(&e->g, &n);
    binary(e, "MatMul", v, pt, fresh(e, o, "av"));
    int64_t back[4] = { 0, (int64_t)a->heads * a->head_dim, H, W };
    reshape(e, o, back, 4, y);
    char v2[NAME];
    reshape(e, v, back, 4, fresh(e, v2, "v"));
    record(e, nd->out2, v2);
}

static void emit_node(Ex *e, int i) {
    const Node *nd = &e->m->nodes[i];
    char x[NAME], x2[NAME], y[NAME];
    read_value(e, nd->in, x);
    snprintf(y, NAME, "n%d", i);
    switch (nd->op) {
    case OP_CONV: case OP_REPCONV: emit_conv(e, nd, x, y); break;
    case OP_MAXPOOL: case OP_AVGPOOL: emit_pool(e, nd, x, y); break;
    case OP_UPSAMPLE: emit_upsample(e, nd, x, y); break;
    case OP_COPY: case OP_DETACH: unary(e, "Identity", x, y); break;
    case OP_ADD: read_value(e, nd->in2, x2); binary(e, "Add", x, x2, y); break;
    case OP_ATTN: emit_attn(e, nd, x, y); break;
    }
    record(e, nd->out, y);
}

// ---- heads -------------------------------------------------------------------------------------
// The head maps as (B, C, A), levels after one another; anchors (1, 2, A) centres and strides (1, 1, A).
static void head_maps(Ex *e, char *cat, char *anchors, char *strides, int imgsz) {
    const Model *m = e->m;
    const char *parts[4];
    char names[4][NAME], h[NAME];
    int A = 0;
    for (int l = 0; l < m->n_levels; l++) A += (imgsz / m->strides[l]) * (imgsz / m->strides[l]);
    float *an = xmalloc(sizeof(float) * 2 * A), *st = xmalloc(sizeof(float) * A);
    int a = 0;
    for (int l = 0; l < m->n_levels; l++) {
        int n = imgsz / m->strides[l];
        for (int y = 0; y < n; y++)
            for (int x = 0; x < n; x++, a++) { an[a] = x + 0.5f; an[A + a] = y + 0.5f; st[a] = (float)m->strides[l]; }
        read_value(e, m->head[l], h);
        int64_t shape[3] = { 0, m->values[m->head[l]].C, -1 };
        reshape(e, h, shape, 3, fresh(e, names[l], "level"));
        parts[l] = names[l];
    }
    concat(e, parts, m->n_levels, 2, fresh(e, cat, "heads"));
    int64_t ad[3] = { 1, 2, A }, sd[3] = { 1, 1, A };
    const_f32(e, anchors, an, ad, 3);
    const_f32(e, strides, st, sd, 3);
    free(an); free(st);
}

// DFL: softmax over R bins per side, expectation of 0..R-1 -> (B, 4, A) distances
static void dfl(Ex *e, const char *box, int R, char *dist) {
    char r[NAME], s[NAME], proj[NAME], p[NAME], ax[NAME];
    int64_t shape[4] = { 0, 4, R, -1 };
    reshape(e, box, shape, 4, fresh(e, r, "bins"));
    Pb n;
    node(e, "Softmax", (const char *[]){ r }, 1, fresh(e, s, "soft"), &n);
    onnx_attr_int(&n, "axis", 2);
    onnx_add_node(&e->g, &n);
    float *v = xmalloc(sizeof(float) * R);
    for (int i = 0; i < R; i++) v[i] = (float)i;
    int64_t pd[4] = { 1, 1, R, 1 }, axis = 2;
    const_f32(e, proj, v, pd, 4);
    free(v);
    binary(e, "Mul", s, proj, fresh(e, p, "weighted"));
    const_i64(e, ax, &axis, 1);
    node(e, "ReduceSum", (const char *[]){ p, ax }, 2, fresh(e, dist, "dist"), &n);
    onnx_attr_int(&n, "keepdims", 0);
    onnx_add_node(&e->g, &n);
}

// x1y1 = anchor - lt, x2y2 = anchor + rb (in grid units)
static void corners(Ex *e, const char *dist, const char *anchors, char *x1y1, char *x2y2) {
    char lt[NAME], rb[NAME];
    slice(e, dist, 1, 0, 2, fresh(e, lt, "lt"));
    slice(e, dist, 1, 2, 4, fresh(e, rb, "rb"));
    binary(e, "Sub", anchors, lt, fresh(e, x1y1, "x1y1"));
    binary(e, "Add", anchors, rb, fresh(e, x2y2, "x2y2"));
}

// split (B, C, A) into its first `a` and remaining `b` channels
static void split2(Ex *e, const char *x, int a, int b, char *first, char *second) {
    char sp[NAME], nm[NAME];
    int64_t parts[2] = { a, b };
    const_i64(e, sp, parts, 2);
    fresh(e, first, "box"); fresh(e, second, "cls");
    const char *in[] = { x, sp }, *outs[] = { first, second };
    Pb n;
    onnx_node(&n, "Split", fresh(e, nm, "Split"), in, 2, outs, 2);
    onnx_attr_int(&n, "axis", 1);
    onnx_add_node(&e->g, &n);
}

static void head_ddetect(Ex *e, int imgsz, const char *out) {
    const Model *m = e->m;
    char cat[NAME], anchors[NAME], strides[NAME], box[NAME], cls[NAME], dist[NAME], x1y1[NAME], x2y2[NAME];
    char sum[NAME], half[NAME], c[NAME], wh[NAME], xywh[NAME], px[NAME], sig[NAME];
    head_maps(e, cat, anchors, strides, imgsz);
    split2(e, cat, 4 * m->reg_max, m->nc, box, cls);
    dfl(e, box, m->reg_max, dist);
    corners(e, dist, anchors, x1y1, x2y2);
    float h = 0.5f;
    int64_t one[1] = { 1 };
    const_f32(e, half, &h, one, 1);
    binary(e, "Add", x1y1, x2y2, fresh(e, sum, "sum"));
    binary(e, "Mul", sum, half, fresh(e, c, "centre"));
    binary(e, "Sub", x2y2, x1y1, fresh(e, wh, "wh"));
    concat(e, (const char *[]){ c, wh }, 2, 1, fresh(e, xywh, "xywh"));
    binary(e, "Mul", xywh, strides, fresh(e, px, "pixels"));
    unary(e, "Sigmoid", cls, fresh(e, sig, "scores"));
    concat(e, (const char *[]){ px, sig }, 2, 1, out);
}

// y = GatherElements(x (B, N, C), index (B, k, 1) repeated to (B, k, C), axis 1)
static void gather_rows(Ex *e, const char *x, const char *index, int C, char *y) {
    char rep[NAME], shape[NAME];
    int64_t s[3] = { 1, 1, C };
    const_i64(e, shape, s, 3);
    binary(e, "Tile", index, shape, fresh(e, rep, "rep"));
    Pb n;
    node(e, "GatherElements", (const char *[]){ x, rep }, 2, fresh(e, y, "rows"), &n);
    onnx_attr_int(&n, "axis", 1);
    onnx_add_node(&e->g, &n);
}

static void topk(Ex *e, const char *x, int k, char *values, char *indices) {
    char kk[NAME], nm[NAME];
    int64_t kv = k;
    const_i64(e, kk, &kv, 1);
    fresh(e, values, "topv"); fresh(e, indices, "topi");
    const char *in[] = { x, kk }, *outs[] = { values, indices };
    Pb n;
    onnx_node(&n, "TopK", fresh(e, nm, "TopK"), in, 2, outs, 2);
    onnx_attr_int(&n, "axis", -1);
    onnx_attr_int(&n, "largest", 1);
    onnx_attr_int(&n, "sorted", 1);
    onnx_add_node(&e->g, &n);
}

static void head_end2end(Ex *e, int imgsz, int max_det, const char *out) {
    const Model *m = e->m;
    int nc = m->nc, A = 0;
    for (int l = 0; l < m->n_levels; l++) A += (imgsz / m->strides[l]) * (imgsz / m->strides[l]);
    int k = max_det < A ? max_det : A;
    char cat[NAME], anchors[NAME], strides[NAME], box[NAME], cls[NAME], x1y1[NAME], x2y2[NAME], xyxy[NAME];
    char px[NAME], boxes[NAME], logits[NAME], best[NAME], v1[NAME], i1[NAME], i1u[NAME];
    char b1[NAME], s1[NAME], flat[NAME], v2[NAME], i2[NAME], ncn[NAME], anc[NAME], cl[NAME], clf[NAME];
    char anu[NAME], b2[NAME], sig[NAME], vu[NAME], clu[NAME], axis2[NAME];
    head_maps(e, cat, anchors, strides, imgsz);
    split2(e, cat, 4, nc, box, cls);
    corners(e, box, anchors, x1y1, x2y2);
    concat(e, (const char *[]){ x1y1, x2y2 }, 2, 1, fresh(e, xyxy, "xyxy"));
    binary(e, "Mul", xyxy, strides, fresh(e, px, "pixels"));
    int64_t perm[3] = { 0, 2, 1 }, axis = -1;
    Pb n;
    node(e, "Transpose", (const char *[]){ px }, 1, fresh(e, boxes, "boxes"), &n);   // (B, A, 4)
    onnx_attr_ints(&n, "perm", perm, 3);
    onnx_add_node(&e->g, &n);
    node(e, "Transpose", (const char *[]){ cls }, 1, fresh(e, logits, "logits"), &n); // (B, A, nc)
    onnx_attr_ints(&n, "perm", perm, 3);
    onnx_add_node(&e->g, &n);
    node(e, "ReduceMax", (const char *[]){ logits }, 1, fresh(e, best, "best"), &n);  // opset 17: axes attribute
    onnx_attr_ints(&n, "axes", &axis, 1);
    onnx_attr_int(&n, "keepdims", 0);
    onnx_add_node(&e->g, &n);
    topk(e, best, k, v1, i1);                                      // (B, k) anchors by best logit
    const_i64(e, axis2, &axis, 1);
    binary(e, "Unsqueeze", i1, axis2, fresh(e, i1u, "anchor_idx"));   // (B, k, 1)
    gather_rows(e, boxes, i1u, 4, b1);
    gather_rows(e, logits, i1u, nc, s1);
    int64_t fshape[2] = { 0, -1 };
    reshape(e, s1, fshape, 2, fresh(e, flat, "pairs"));            // (B, k * nc)
    topk(e, flat, k, v2, i2);
    int64_t ncv = nc;
    const_i64(e, ncn, &ncv, 1);
    binary(e, "Div", i2, ncn, fresh(e, anc, "which"));             // int64 division: floor for >= 0
    binary(e, "Mod", i2, ncn, fresh(e, cl, "class"));
    binary(e, "Unsqueeze", anc, axis2, fresh(e, anu, "which_u"));
    gather_rows(e, b1, anu, 4, b2);
    unary(e, "Sigmoid", v2, fresh(e, sig, "score"));              // (B, k): the kept pairs' scores
    binary(e, "Unsqueeze", sig, axis2, fresh(e, vu, "score_u"));
    node(e, "Cast", (const char *[]){ cl }, 1, fresh(e, clf, "classf"), &n);
    onnx_attr_int(&n, "to", ONNX_FLOAT);
    onnx_add_node(&e->g, &n);
    binary(e, "Unsqueeze", clf, axis2, fresh(e, clu, "class_u"));
    concat(e, (const char *[]){ b2, vu, clu }, 3, 2, out);
}

int export_onnx_model(const Model *m, int imgsz, int batch, const char *path, Err *err) {
    if (m->n_levels < 1 || (m->end2end && m->reg_max != 1))
        return err_set(err, "%s: this model's head cannot be exported to ONNX", path);
    if (batch < 0) return err_set(err, "%s: batch %d", path, batch);
    Ex e = { .m = m };
    int64_t B = batch ? batch : -1;                // -1: the symbolic "batch" (io/onnx.h)
    int64_t in_dims[4] = { B, 3, imgsz, imgsz };
    onnx_value_info(&e.g, ONNX_INPUT, "images", ONNX_FLOAT, in_dims, 4);
    record(&e, m->input, "images");
    model_set_size((Model *)m, imgsz, imgsz);     // the sizes the attention's reshapes need
    for (int i = 0; i < m->n_nodes; i++)
        if (!m->nodes[i].train_only) emit_node(&e, i);
    int A = 0;
    for (int l = 0; l < m->n_levels; l++) A += (imgsz / m->strides[l]) * (imgsz / m->strides[l]);
    if (m->end2end) {
        head_end2end(&e, imgsz, 300, "output0");
        int64_t od[3] = { B, A < 300 ? A : 300, 6 };
        onnx_value_info(&e.g, ONNX_OUTPUT, "output0", ONNX_FLOAT, od, 3);
    } else {
        head_ddetect(&e, imgsz, "output0");
        int64_t od[3] = { B, 4 + m->nc, A };
        onnx_value_info(&e.g, ONNX_OUTPUT, "output0", ONNX_FLOAT, od, 3);
    }
    free(e.w);
    int rc = onnx_write(path, &e.g, m->end2end ? "yolo26" : "gelan", OPSET, err);
    pb_free(&e.g);
    return rc;
}
