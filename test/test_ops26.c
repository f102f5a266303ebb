// test_ops26.c: the YOLO26 CPU ops: depthwise conv against the grouped conv reference of core/spec/conv.c and
// finite differences; the attention core (loops and GEMM path) against a literal transcription of
// ultralytics Attention.forward (NCHW, view/split as PyTorch does, in double, with pe), finite differences
// of the loops' backward, and the GEMM path against the loops, forward and backward.
// Legend: N batch, C channels, H,W in, P,Q out, k kernel, T tokens, nh heads, kd key_dim, hd head_dim.
#include "core/spec/ops.h"
#include "core/spec/ops26.h"
#include "core/base/util.h"
#include "test/test.h"

// a fresh (N,H,W,C) map as the channel slice [1, 1+C) of a buffer with ld = C + 3, values in [-1, 1)
static Map map_rand(int N, int H, int W, int C, Rng *r) {
    int ld = C + 3;
    float *buf = xmalloc((size_t)N * H * W * ld * sizeof(float));
    for (size_t i = 0; i < (size_t)N * H * W * ld; i++) buf[i] = (float)rng_uniform(r, -1, 1);
    return (Map){ buf + 1, N, H, W, C, ld, 0, 0 };
}
static Map map_zero(int N, int H, int W, int C) {
    int ld = C + 3;
    float *buf = xcalloc((size_t)N * H * W * ld, sizeof(float));
    return (Map){ buf + 1, N, H, W, C, ld, 0, 0 };
}
static void map_free(Map m) { free(m.data - 1); }
static float *vec_rand(size_t n, Rng *r) {
    float *v = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) v[i] = (float)rng_uniform(r, -1, 1);
    return v;
}
static float *elem(Map m, size_t j) { return m.data + (j / m.C) * m.ld + j % m.C; }
static double dot_map(Map a, Map b) {
    double s = 0;
    for (size_t j = 0; j < map_floats(a); j++) s += (double)*elem(a, j) * *elem(b, j);
    return s;
}
static int grad_ok(double ana, double num) { return fabs(ana - num) <= 1e-3 + 1e-2 * fmax(fabs(ana), fabs(num)); }

// ---- depthwise convolution ---------------------------------------------------------------------
static void dw_case(int N, int C, int H, int W, int k, int stride, Rng *r) {
    DwDims d = dw_dims(N, C, H, W, k, stride);
    ConvDims cd = conv_dims(N, C, H, W, C, k, stride, k / 2, C);
    CHECK(cd.P == d.P && cd.Q == d.Q, "sizes %dx%d vs %dx%d", d.P, d.Q, cd.P, cd.Q);
    Map x = map_rand(N, H, W, C, r), y = map_zero(N, d.P, d.Q, C), yr = map_zero(N, d.P, d.Q, C);
    Map dy = map_rand(N, d.P, d.Q, C, r), dx = map_zero(N, H, W, C), dxr = map_zero(N, H, W, C);
    float *w = vec_rand((size_t)C * k * k, r), *b = vec_rand(C, r);
    float *dw = xcalloc((size_t)C * k * k, sizeof(float)), *dwr = xcalloc((size_t)C * k * k, sizeof(float));
    float *db = xcalloc(C, sizeof(float)), *dbr = xcalloc(C, sizeof(float));
    dwconv_forward_cpu(&d, x, w, b, y);
    conv_forward_ref(&cd, x, w, b, yr);
    double worst = 0;
    for (size_t j = 0; j < map_floats(y); j++) worst = fmax(worst, fabs(*elem(y, j) - *elem(yr, j)));
    CHECK(worst < 1e-5, "k%d s%d forward vs grouped conv: %.3g", k, stride, worst);
    int guards = 1;   // the columns outside the slice (zero) are untouched
    for (size_t px = 0; px < map_pixels(y); px++)
        for (int c = -1; c < y.ld - 1; c++) guards &= c >= 0 && c < C ? 1 : y.data[px * y.ld + c] == 0.0f;
    CHECK(guards, "k%d s%d: a write outside the output slice", k, stride);
    dwconv_backward_cpu(&d, x, w, dy, dx, dw, db);
    conv_backward_ref(&cd, x, w, dy, dxr, dwr, dbr);
    worst = 0;
    for (size_t j = 0; j < map_floats(dx); j++) worst = fmax(worst, fabs(*elem(dx, j) - *elem(dxr, j)));
    for (int j = 0; j < C * k * k; j++) worst = fmax(worst, fabs(dw[j] - dwr[j]));
    for (int j = 0; j < C; j++) worst = fmax(worst, fabs(db[j] - dbr[j]));
    CHECK(worst < 1e-5, "k%d s%d backward vs grouped conv: %.3g", k, stride, worst);
    // finite differences of L = sum dy*y over x and w
    int bad = 0;
    for (int t = 0; t < 60; t++) {
        int on_w = t % 2, j = rng_int(r, on_w ? C * k * k : (int)map_floats(x));
        float *p = on_w ? &w[j] : elem(x, j), x0 = *p;
        double ana = on_w ? dw[j] : *elem(dx, j);
        *p = x0 + 1e-2f; dwconv_forward_cpu(&d, x, w, b, y); double lp = dot_map(dy, y);
        *p = x0 - 1e-2f; dwconv_forward_cpu(&d, x, w, b, y); double lm = dot_map(dy, y);
        *p = x0;
        double num = (lp - lm) / 2e-2;
        if (!grad_ok(ana, num) && bad++ < 3)
            printf("    k%d s%d %s: ana %g num %g\n", k, stride, on_w ? "w" : "x", ana, num);
    }
    CHECK(bad == 0, "k%d s%d: %d gradient entries off", k, stride, bad);
    map_free(x); map_free(y); map_free(yr); map_free(dy); map_free(dx); map_free(dxr);
    free(w); free(b); free(dw); free(dwr); free(db); free(dbr);
}

static void test_dwconv(void) {
    Rng r = rng_for(26, 3, 0);
    dw_case(2, 3, 5, 7, 3, 1, &r);
    dw_case(2, 3, 5, 7, 3, 2, &r);
    dw_case(1, 5, 6, 4, 5, 2, &r);
    dw_case(1, 2, 1, 3, 3, 1, &r);
}

// ---- attention ---------------------------------------------------------------------------------
// Attention.forward from qkv on, written the PyTorch way in NCHW double:
//   q, k, v = qkv.view(B, nh, 2kd+hd, T).split([kd, kd, hd], dim=2)
//   attn = softmax((q^T @ k) * scale, -1); out = (v @ attn^T).view(B, C, H, W) + pe(v.reshape(B, C, H, W))
// pe here: a depthwise k x k conv (no BN) with weights wpe (C,1,3,3). qkv is (B, Ctot, H, W).
static void attention_ref(const AttnDims *d, const double *qkv, const float *wpe, double *out) {
    int B = d->N, nh = d->heads, kd = d->key_dim, hd = d->head_dim, T = d->H * d->W, per = 2 * kd + hd;
    int C = nh * hd;
    double *S = malloc(sizeof(double) * T * T), *v = malloc(sizeof(double) * B * C * T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < nh; h++) {
            const double *base = qkv + ((size_t)b * nh + h) * per * T;   // view(B, nh, per, T)
            const double *q = base, *k = base + kd * T, *vv = base + 2 * kd * T;
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    double s = 0;
                    for (int c = 0; c < kd; c++) s += q[c * T + i] * k[c * T + j];
                    S[i * T + j] = s * d->scale;
                    m = fmax(m, S[i * T + j]);
                }
                for (int j = 0; j < T; j++) sum += S[i * T + j] = exp(S[i * T + j] - m);
                for (int j = 0; j < T; j++) S[i * T + j] /= sum;
            }
            for (int c = 0; c < hd; c++)
                for (int i = 0; i < T; i++) {
                    double s = 0;
                    for (int j = 0; j < T; j++) s += vv[c * T + j] * S[i * T + j];
                    out[((size_t)b * C + h * hd + c) * T + i] = s;   // .view(B, C, H, W): channel h*hd + c
                    v[((size_t)b * C + h * hd + c) * T + i] = vv[c * T + i];
                }
        }
    for (int b = 0; b < B; b++)   // + pe(v)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < d->H; y++)
                for (int x = 0; x < d->W; x++) {
                    double s = 0;
                    for (int r = 0; r < 3; r++)
                        for (int t = 0; t < 3; t++) {
                            int yy = y + r - 1, xx = x + t - 1;
                            if (yy >= 0 && yy < d->H && xx >= 0 && xx < d->W)
                                s += v[((size_t)b * C + c) * T + yy * d->W + xx] * wpe[c * 9 + r * 3 + t];
                        }
                    out[((size_t)b * C + c) * T + y * d->W + x] += s;
                }
    free(S); free(v);
}

typedef void (*AttnFwd)(const AttnDims *, Map, Map, Map, float *);

// the loops (ref) or the GEMM path (cpu) against the literal transcription, pe included
static void check_literal(const AttnDims *d, AttnFwd fwd, const char *path, Map qkv, Rng *r) {
    int N = d->N, H = d->H, W = d->W, T = H * W, Ct = attn_qkv_channels(d), C = d->heads * d->head_dim;
    Map y = map_zero(N, H, W, C), v = map_zero(N, H, W, C), pe = map_zero(N, H, W, C);
    float *p = xmalloc(attn_probs_floats(d) * sizeof(float)), *wpe = vec_rand((size_t)C * 9, r);
    fwd(d, qkv, y, v, p);
    DwDims dd = dw_dims(N, C, H, W, 3, 1);
    dwconv_forward_cpu(&dd, v, wpe, NULL, pe);
    double *qn = malloc(sizeof(double) * N * Ct * T), *ref = malloc(sizeof(double) * N * C * T), worst = 0;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < Ct; c++)
            for (int t = 0; t < T; t++) qn[((size_t)n * Ct + c) * T + t] = map_at(qkv, n, t / W, t % W)[c];
    attention_ref(d, qn, wpe, ref);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int t = 0; t < T; t++) {
                double got = map_at(y, n, t / W, t % W)[c] + map_at(pe, n, t / W, t % W)[c];
                worst = fmax(worst, fabs(got - ref[((size_t)n * C + c) * T + t]));
            }
    CHECK(worst < 1e-5, "%s N%d %dx%d heads %d (kd %d, hd %d): |ours - literal| %.3g", path, N, H, W, d->heads,
          d->key_dim, d->head_dim, worst);
    map_free(y); map_free(v); map_free(pe);
    free(p); free(wpe); free(qn); free(ref);
}

// finite differences of L = sum ry*y + sum rv*v over qkv for the loops: backward with dy = ry, dv = rv
static void check_fd(const AttnDims *d, Map qkv, Rng *r) {
    int N = d->N, H = d->H, W = d->W, Ct = attn_qkv_channels(d), C = d->heads * d->head_dim, bad = 0;
    Map y = map_zero(N, H, W, C), v = map_zero(N, H, W, C);
    Map ry = map_rand(N, H, W, C, r), rv = map_rand(N, H, W, C, r), dq = map_zero(N, H, W, Ct);
    float *p = xmalloc(attn_probs_floats(d) * sizeof(float)), *ws = xmalloc(attn_workspace_floats(d) * sizeof(float));
    attn26_forward_ref(d, qkv, y, v, p);
    attn26_backward_ref(d, qkv, p, ry, rv, dq, ws);
    for (int t = 0; t < 150; t++) {
        size_t j = (size_t)rng_int(r, (int)map_floats(qkv));
        float *x = elem(qkv, j), x0 = *x;
        *x = x0 + 1e-2f; attn26_forward_ref(d, qkv, y, v, p); double lp = dot_map(ry, y) + dot_map(rv, v);
        *x = x0 - 1e-2f; attn26_forward_ref(d, qkv, y, v, p); double lm = dot_map(ry, y) + dot_map(rv, v);
        *x = x0;
        double num = (lp - lm) / 2e-2, ana = *elem(dq, j);
        if (!grad_ok(ana, num) && bad++ < 3) printf("    qkv channel %zu: ana %g num %g\n", j % Ct, ana, num);
    }
    CHECK(bad == 0, "heads %d: %d of 150 gradient entries off", d->heads, bad);
    map_free(y); map_free(v); map_free(ry); map_free(rv); map_free(dq);
    free(p); free(ws);
}

static double max_diff(Map a, Map b, double *maxref) {
    double w = 0;
    for (size_t j = 0; j < map_floats(a); j++) {
        w = fmax(w, fabs(*elem(a, j) - *elem(b, j)));
        *maxref = fmax(*maxref, fabs(*elem(b, j)));
    }
    return w;
}

// the GEMM path against the loops: y, v, the probabilities, and dqkv onto the same random prior
static void check_gemm_path(const AttnDims *d, Map qkv, Rng *r) {
    int N = d->N, H = d->H, W = d->W, Ct = attn_qkv_channels(d), C = d->heads * d->head_dim;
    size_t np = attn_probs_floats(d);
    Map y[2], v[2], dq[2], dy = map_rand(N, H, W, C, r), dv = map_rand(N, H, W, C, r);
    float *p[2], *ws = xmalloc(attn_workspace_floats(d) * sizeof(float));
    for (int k = 0; k < 2; k++) {
        y[k] = map_zero(N, H, W, C); v[k] = map_zero(N, H, W, C); dq[k] = map_zero(N, H, W, Ct);
        p[k] = xmalloc(np * sizeof(float));
        for (size_t j = 0; j < map_floats(dq[k]); j++) *elem(dq[k], j) = (float)(j % 7) * 0.25f;   // += prior
    }
    attn26_forward_cpu(d, qkv, y[0], v[0], p[0]);
    attn26_forward_ref(d, qkv, y[1], v[1], p[1]);
    attn26_backward_cpu(d, qkv, p[0], dy, dv, dq[0], ws);
    attn26_backward_ref(d, qkv, p[1], dy, dv, dq[1], ws);
    double my = 0, mv = 0, mq = 0, wp = 0;
    double wy = max_diff(y[0], y[1], &my), wv = max_diff(v[0], v[1], &mv), wq = max_diff(dq[0], dq[1], &mq);
    for (size_t j = 0; j < np; j++) wp = fmax(wp, fabs(p[0][j] - p[1][j]));
    CHECK(wy <= 1e-5 * my && wv == 0 && wp <= 1e-6 && wq <= 1e-5 * mq,
          "heads %d GEMM vs loops: y %.3g, v %.3g, p %.3g, dqkv %.3g (of %.3g)", d->heads, wy, wv, wp, wq, mq);
    for (int k = 0; k < 2; k++) { map_free(y[k]); map_free(v[k]); map_free(dq[k]); free(p[k]); }
    map_free(dy); map_free(dv); free(ws);
}

static void attn_case(int N, int H, int W, int dim, int heads, Rng *r) {
    AttnDims d = attn_dims(N, H, W, dim, heads, 0.5);
    Map qkv = map_rand(N, H, W, attn_qkv_channels(&d), r);
    check_literal(&d, attn26_forward_ref, "loops", qkv, r);
    check_literal(&d, attn26_forward_cpu, "gemm", qkv, r);
    check_fd(&d, qkv, r);
    check_gemm_path(&d, qkv, r);
    map_free(qkv);
}

static void test_attention(void) {
    Rng r = rng_for(26, 4, 0);
    attn_case(2, 3, 5, 8, 2, &r);    // hd 4, kd 2, interleaved heads
    attn_case(1, 4, 3, 12, 3, &r);   // 3 heads, hd 4, kd 2
    attn_case(1, 2, 2, 6, 1, &r);    // one head, hd 6, kd 3
    attn_case(1, 6, 7, 128, 2, &r);  // hd 64, kd 32: the GEMMs' blocked paths
    AttnDims s = attn_dims(16, 20, 20, 256, 4, 0.5);   // YOLO26-s at 640: both attention sites
    CHECK(s.head_dim == 64 && s.key_dim == 32 && attn_qkv_channels(&s) == 512 && s.scale == (float)pow(32, -0.5),
          "YOLO26-s dims: hd %d kd %d qkv %d", s.head_dim, s.key_dim, attn_qkv_channels(&s));
}

int main(void) {
    RUN(test_dwconv);
    RUN(test_attention);
    return test_summary();
}
