// test_musgd.c: the YOLO26 optimizer: optimizer=auto and the parameter groups, bf16 rounding, Newton-Schulz
// against known values (diagonal inputs) and a double-precision reference, and two MuSGD steps on a
// small parameter set against values computed by hand (scalar recurrences); two AdamW steps likewise.
#include "core/spec/musgd.h"
#include "core/base/util.h"
#include "test/test.h"

static const double A_ = 3.4445f, B_ = -4.7750f, C_ = 2.0315f;   // the float constants, in double

// ---- auto and groups --------------------------------------------------------------------------
static void test_auto(void) {
    MuAuto a = musgd_auto(118287, 16, 100, 80);   // COCO: ceil(118287/64) = 1849 -> 184900 iterations
    CHECK(!strcmp(a.name, "MuSGD") && a.lr == 0.01 && a.momentum == 0.9 && a.warmup_bias_lr == 0,
          "COCO: %s %g %g", a.name, a.lr, a.momentum);
    a = musgd_auto(128, 16, 100, 80);              // coco128: 2 * 100 = 200 iterations
    CHECK(!strcmp(a.name, "AdamW") && a.lr == 0.000119 && a.momentum == 0.9, "coco128: %s %.9g", a.name, a.lr);
    a = musgd_auto(64 * 100, 16, 100, 80);         // exactly 10000: not above
    CHECK(!strcmp(a.name, "AdamW"), "10000 iterations: %s", a.name);
    a = musgd_auto(64 * 100 + 1, 16, 100, 80);
    CHECK(!strcmp(a.name, "MuSGD"), "10100 iterations: %s", a.name);
    a = musgd_auto(128 * 100 + 1, 128, 50, 3);      // batch above nbs divides by the batch: 101 * 50
    CHECK(!strcmp(a.name, "AdamW") && a.lr == 0.001429, "batch 128: %s %.9g", a.name, a.lr);
}

static void test_groups(void) {
    struct { const char *name; int ndim, norm, muon, want; } c[] = {
        { "model.23.cv3.0.0.0.conv.weight", 4, 0, 1, MU_MUON_HI },
        { "model.23.one2one_cv3.1.2.weight", 4, 0, 1, MU_MUON_HI },
        { "model.23.cv3.0.0.0.bn.weight", 1, 1, 1, MU_BN_HI },
        { "model.23.one2one_cv3.2.2.bias", 1, 0, 1, MU_BIAS_HI },
        { "model.23.cv2.0.2.bias", 1, 0, 1, MU_BIAS },
        { "model.23.cv2.0.0.conv.weight", 4, 0, 1, MU_MUON },
        { "model.0.conv.weight", 4, 0, 1, MU_MUON },
        { "model.0.conv.weight", 4, 0, 0, MU_WEIGHT },
        { "model.13.m.0.cv3.bn.weight", 1, 1, 1, MU_BN },      // cv3 without 23
        { "model.0.bn.bias", 1, 1, 1, MU_BIAS },
        { "model.0.bn.weight", 1, 1, 1, MU_BN },
        { "model.23.cv3.0.0.0.conv.weight", 4, 0, 0, MU_WEIGHT_HI },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int g = musgd_group(c[i].name, c[i].ndim, c[i].norm, c[i].muon);
        CHECK(g == c[i].want, "%s (muon %d): group %d, want %d", c[i].name, c[i].muon, g, c[i].want);
    }
    CHECK(musgd_group_decays(MU_MUON) && musgd_group_decays(MU_MUON_HI) && musgd_group_decays(MU_WEIGHT) &&
          !musgd_group_decays(MU_BN) && !musgd_group_decays(MU_BIAS_HI), "decaying groups");
    CHECK(musgd_group_lr_scale(MU_MUON_HI) == 3 && musgd_group_lr_scale(MU_BIAS) == 1, "lr x3 on -hi");
    int shape4[4] = { 8, 4, 3, 3 }, shape2[2] = { 6, 2 };
    MuParam p = musgd_param(NULL, NULL, shape4, 4, MU_MUON);
    CHECK(p.n == 288 && p.r == 8 && p.c == 36 && p.shape_scale == 1, "conv view %d x %d, scale %g", p.r, p.c,
          p.shape_scale);
    p = musgd_param(NULL, NULL, shape2, 2, MU_MUON);
    CHECK(p.r == 6 && p.c == 2 && fabs(p.shape_scale - sqrt(3)) < 1e-15, "matrix scale %g", p.shape_scale);
}

// ---- bf16 and Newton-Schulz -------------------------------------------------------------------
static void test_bf16(void) {
    CHECK(bf16_round(1.0f) == 1.0f && bf16_round(-2.5f) == -2.5f, "exact values");
    CHECK(bf16_round(1.0f + 0x1p-8f) == 1.0f, "tie to even (down)");
    CHECK(bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f, "tie to even (up)");
    CHECK(bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f, "above the tie");
    CHECK(bf16_round(3.4445f) == 3.4375f, "3.4445 -> %.9g", bf16_round(3.4445f));
    CHECK(isnan(bf16_round(NAN)) && isinf(bf16_round(INFINITY)), "NaN and inf");
}

// the five quintic steps on one singular value, in double
static double ns_scalar(double s) {
    for (int i = 0; i < 5; i++) s = A_ * s + B_ * s * s * s + C_ * s * s * s * s * s;
    return s;
}

// the same on one normalised bf16 entry, rounding every tensor result to bf16 as the GEMM path does;
// a product of two bf16 values is exact in fp32, so a diagonal input follows it bit for bit
static double ns_scalar_bf16(float x) {
    for (int i = 0; i < 5; i++) {
        float a = bf16_round(x * x), t = bf16_round((float)C_ * a), b1 = bf16_round(t * a);
        float b = bf16_round(bf16_round((float)B_ * a) + b1), z = bf16_round(b * x);
        x = bf16_round(bf16_round((float)A_ * x) + z);
    }
    return x;
}

// a diagonal r x c matrix keeps its singular vectors: NS maps each d_i/||d|| by the scalar quintic
static void test_ns_diagonal(void) {
    for (int tall = 0; tall < 2; tall++) {
        int r = tall ? 5 : 3, c = tall ? 3 : 5;
        float G[15] = {0}, X[15], ws[64];
        double d[3] = { 3, 1, 0.5 }, norm = sqrt(9 + 1 + 0.25);
        for (int i = 0; i < 3; i++) G[i * c + i] = (float)d[i];
        float nb = bf16_round(bf16_round((float)norm) + 1e-7f);   // 3, 1, 0.5 are exact in bf16
        for (int bf = 0; bf < 2; bf++) {
            musgd_newton_schulz(G, r, c, bf, X, ws);
            for (int i = 0; i < r && i < c; i++)   // bf16 strays ~5% from the exact map (0.781 vs 0.745)
                CHECK(!bf || fabs(X[i * c + i] - ns_scalar(d[i] / norm)) < 0.1, "bf16 near the exact map");
            for (int i = 0; i < r; i++)
                for (int j = 0; j < c; j++) {
                    double want = i != j ? 0
                                : bf   ? ns_scalar_bf16(bf16_round((float)d[i] / nb))
                                       : ns_scalar(d[i] / norm);
                    double tol = bf ? 0 : 2e-6;
                    CHECK(fabs(X[i * c + j] - want) <= tol, "%dx%d bf16 %d: X[%d][%d] = %.7g, want %.7g", r, c, bf,
                          i, j, X[i * c + j], want);
                }
        }
    }
}

// c (rows, cols) = a (rows, k) @ b, b (k, cols) or, when bt, b^T with b stored (cols, k); double
static void matmul_d(const double *a, const double *b, int bt, int rows, int cols, int k, double *c) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            double s = 0;
            for (int t = 0; t < k; t++) s += a[i * k + t] * (bt ? b[j * k + t] : b[t * cols + j]);
            c[i * cols + j] = s;
        }
}

// the iteration in double on the wide orientation, as the definition reads
static void ns_ref(const double *G, int r, int c, double *X) {
    int m = r <= c ? r : c, n = r <= c ? c : r;
    double *Y = malloc(sizeof(double) * m * n), *Z = malloc(sizeof(double) * m * n), ss = 0;
    double *A = malloc(sizeof(double) * m * m), *B = malloc(sizeof(double) * m * m);
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            Y[r <= c ? i * c + j : j * r + i] = G[i * c + j];
            ss += G[i * c + j] * G[i * c + j];
        }
    for (int k = 0; k < m * n; k++) Y[k] /= sqrt(ss) + 1e-7;
    for (int step = 0; step < 5; step++) {
        matmul_d(Y, Y, 1, m, m, n, A);                                     // A = X X^T
        matmul_d(A, A, 0, m, m, m, B);
        for (int k = 0; k < m * m; k++) B[k] = B_ * A[k] + C_ * B[k];       // B = b A + c A A
        matmul_d(B, Y, 0, m, n, m, Z);
        for (int k = 0; k < m * n; k++) Y[k] = A_ * Y[k] + Z[k];            // X = a X + B X
    }
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) X[i * c + j] = Y[r <= c ? i * c + j : j * r + i];
    free(Y); free(Z); free(A); free(B);
}

// extreme eigenvalues of the symmetric m x m matrix M = X X^T (X wide) by power iteration
static void gram_eig_range(const double *X, int m, int n, double *lo, double *hi) {
    double *M = calloc((size_t)m * m, sizeof(double)), v[64], w[64];
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) for (int k = 0; k < n; k++) M[i * m + j] += X[i * n + k] * X[j * n + k];
    for (int pass = 0; pass < 2; pass++) {   // pass 1 on 2I - M gives 2 - lambda_min
        for (int i = 0; i < m; i++) v[i] = 1.0 / (i + 1);
        double lam = 0;
        for (int it = 0; it < 500; it++) {
            double nn = 0;
            for (int i = 0; i < m; i++) {
                w[i] = 0;
                for (int j = 0; j < m; j++) w[i] += (pass ? (i == j) * 2.0 - M[i * m + j] : M[i * m + j]) * v[j];
                nn += w[i] * w[i];
            }
            lam = sqrt(nn);
            for (int i = 0; i < m; i++) v[i] = w[i] / lam;
        }
        if (pass) *lo = 2 - lam; else *hi = lam;
    }
    free(M);
}

static void test_ns_random(void) {
    Rng r = rng_for(9, 0, 0);
    int shapes[3][2] = { { 8, 20 }, { 20, 8 }, { 7, 7 } };
    for (int s = 0; s < 3; s++) {
        int R = shapes[s][0], C = shapes[s][1], n = R * C;
        float *G = malloc(n * sizeof(float)), *X = malloc(n * sizeof(float));
        float *ws = malloc(musgd_ns_workspace_floats(R, C) * sizeof(float));
        double *Gd = malloc(n * sizeof(double)), *Xd = malloc(n * sizeof(double)), *Xw = malloc(n * sizeof(double));
        for (int i = 0; i < n; i++) Gd[i] = G[i] = (float)rng_normal(&r);
        ns_ref(Gd, R, C, Xd);
        for (int bf = 0; bf < 2; bf++) {
            musgd_newton_schulz(G, R, C, bf, X, ws);
            double worst = 0;
            for (int i = 0; i < n; i++) worst = fmax(worst, fabs(X[i] - Xd[i]));
            // fp32: rounding only (measured 4e-7..7e-7); bf16: 8-bit mantissas through 15 GEMMs
            // (measured 0.021..0.036 on entries of size ~0.3; the diagonal test pins bf16 exactly)
            double tol = bf ? 8e-2 : 5e-6;
            CHECK(worst <= tol, "%dx%d bf16 %d: max |X - ref| %.3g > %.3g", R, C, bf, worst, tol);
        }
        int m = R < C ? R : C, w = R < C ? C : R;   // singular values of the result: X X^T near I
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) Xw[R <= C ? i * C + j : j * R + i] = Xd[i * C + j];
        double lo, hi;
        gram_eig_range(Xw, m, w, &lo, &hi);
        CHECK(lo > 0.3 && hi < 1.5, "%dx%d: singular values^2 in [%.3f, %.3f]", R, C, lo, hi);
        free(G); free(X); free(ws); free(Gd); free(Xd); free(Xw);
    }
}

// ---- two MuSGD steps by hand ------------------------------------------------------------------
// The Muon parameter's gradient is a positive multiple of G0 (orthonormal rows), so its update is
// x * G0 with x = ns_scalar_bf16 of the normalised entry: zeros stay exact zeros through every GEMM.
static double muon_scalar_bf16(float v) {   // v: the two nonzero entries of the update matrix u
    float x = bf16_round(v), norm = bf16_round(bf16_round((float)sqrt(2.0 * x * x)) + 1e-7f);
    return ns_scalar_bf16(bf16_round(x / norm));
}

static void test_step_by_hand(void) {
    float w1[6] = { 0.5f, -0.2f, 0.1f, 0.3f, 0.4f, -0.6f }, g1[6];
    float w2[2] = { 0.1f, -0.2f }, g2[2], w3[2] = { 1.0f, 0.9f }, g3[2], w4[3] = { 0.2f, -0.3f, 0.7f }, g4[3];
    int s1[4] = { 2, 3, 1, 1 }, s2[1] = { 2 }, s4[1] = { 3 };
    MuParam p[4] = { musgd_param(w1, g1, s1, 4, MU_MUON_HI), musgd_param(w2, g2, s2, 1, MU_BIAS),
                     musgd_param(w3, g3, s2, 1, MU_BN), musgd_param(w4, g4, s4, 1, MU_WEIGHT) };
    MuSgd o;
    musgd_init(&o, p, 4, 0.2, 1.0);
    MuStep st = { { 0 }, 0.9, 5e-4 };
    for (int g = 0; g < MU_GROUPS; g++) st.lr[g] = 0.01 * (g + 1);
    // hand state (double; the Muon scalar in bf16 as the reference computes it)
    double W1[6], W2[2] = { 0.1f, -0.2f }, W3[2] = { 1.0f, 0.9f }, W4[3] = { 0.2f, -0.3f, 0.7f };
    double S1[6] = { 0 }, S2[2] = { 0 }, S3[2] = { 0 }, S4[3] = { 0 }, M1 = 0, beta = 0.9, wd = 5e-4;
    for (int i = 0; i < 6; i++) W1[i] = w1[i];
    const double G0[6] = { 1, 0, 0, 0, 1, 0 };
    for (int step = 0; step < 2; step++) {
        double k = step ? 0.6 : 0.3, G2[2] = { 0.05, -0.4 }, G3[2] = { 0.2, 0.1 }, G4[3] = { -0.1, 0.3, 0.05 };
        for (int i = 0; i < 6; i++) g1[i] = (float)(k * G0[i]);
        for (int i = 0; i < 2; i++) { g2[i] = (float)G2[i] * (step + 1); g3[i] = (float)G3[i]; }
        for (int i = 0; i < 3; i++) g4[i] = (float)G4[i];
        // Muon: m = beta m + (1-beta) g; u = (1-beta) g + beta m; all entries on G0's support
        M1 = beta * M1 + (1 - beta) * (float)k;
        double u = (1 - beta) * (float)k + beta * M1, lr1 = st.lr[MU_MUON_HI];
        double x = muon_scalar_bf16((float)u);
        for (int i = 0; i < 6; i++) {
            W1[i] -= lr1 * 0.2 * x * G0[i];
            double d = g1[i] + wd * W1[i];
            S1[i] = beta * S1[i] + d;
            W1[i] -= lr1 * 1.0 * (d + beta * S1[i]);
        }
        struct { double *W, *S; float *g; int n, group, decay; } plain[3] = {
            { W2, S2, g2, 2, MU_BIAS, 0 }, { W3, S3, g3, 2, MU_BN, 0 }, { W4, S4, g4, 3, MU_WEIGHT, 1 } };
        for (int q = 0; q < 3; q++)
            for (int i = 0; i < plain[q].n; i++) {
                double d = plain[q].g[i] + (plain[q].decay ? wd * plain[q].W[i] : 0);
                plain[q].S[i] = beta * plain[q].S[i] + d;
                plain[q].W[i] -= st.lr[plain[q].group] * (d + beta * plain[q].S[i]);
            }
        musgd_step(&o, &st);
        for (int i = 0; i < 6; i++)
            CHECK(fabs(w1[i] - W1[i]) < 2e-7, "step %d muon w[%d] %.9g vs %.9g", step, i, w1[i], W1[i]);
        for (int i = 0; i < 2; i++) {
            CHECK(fabs(w2[i] - W2[i]) < 2e-7, "step %d bias w[%d] %.9g vs %.9g", step, i, w2[i], W2[i]);
            CHECK(fabs(w3[i] - W3[i]) < 2e-7, "step %d bn w[%d] %.9g vs %.9g", step, i, w3[i], W3[i]);
        }
        for (int i = 0; i < 3; i++)
            CHECK(fabs(w4[i] - W4[i]) < 2e-7, "step %d weight w[%d] %.9g vs %.9g", step, i, w4[i], W4[i]);
        CHECK(g1[0] == 0 && g2[1] == 0 && g4[2] == 0, "gradients zeroed");
    }
    // the Muon update moved the parameter: not only the SGD share
    CHECK(fabs(W1[0] - 0.5) > 0.005, "muon step size %g", W1[0] - 0.5);
    musgd_free(&o);
}

// AdamW by the formulas in double: decoupled decay only on the weight group, bias correction by step
static void test_adamw_by_hand(void) {
    float w1[3] = { 0.5f, -0.2f, 0.1f }, g1[3], w2[2] = { 0.3f, -0.4f }, g2[2];
    int s1[1] = { 3 }, s2[1] = { 2 };
    MuParam p[2] = { musgd_param(w1, g1, s1, 1, MU_WEIGHT), musgd_param(w2, g2, s2, 1, MU_BIAS_HI) };
    AdamW o;
    adamw_init(&o, p, 2);
    MuStep st = { { 0 }, 0.9, 5e-4 };
    st.lr[MU_WEIGHT] = 0.001; st.lr[MU_BIAS_HI] = 0.003;
    double W[5] = { 0.5f, -0.2f, 0.1f, 0.3f, -0.4f }, M[5] = { 0 }, V[5] = { 0 };
    for (int t = 1; t <= 2; t++) {
        double G[5] = { 0.1 * t, -0.3, 0.02, 0.5, -0.05 * t };
        for (int i = 0; i < 3; i++) g1[i] = (float)G[i];
        for (int i = 0; i < 2; i++) g2[i] = (float)G[3 + i];
        for (int i = 0; i < 5; i++) {
            double lr = i < 3 ? 0.001 : 0.003, wd = i < 3 ? 5e-4 : 0, g = (float)G[i];
            W[i] *= 1 - lr * wd;
            M[i] = 0.9 * M[i] + 0.1 * g;
            V[i] = 0.999 * V[i] + 0.001 * g * g;
            double mh = M[i] / (1 - pow(0.9, t)), vh = V[i] / (1 - pow(0.999, t));
            W[i] -= lr * mh / (sqrt(vh) + 1e-8);
        }
        adamw_step(&o, &st);
        for (int i = 0; i < 5; i++) {
            float got = i < 3 ? w1[i] : w2[i - 3];
            CHECK(fabs(got - W[i]) < 3e-7, "step %d w[%d] %.9g vs %.9g", t, i, got, W[i]);
        }
        CHECK(g1[0] == 0 && g2[1] == 0, "gradients zeroed");
    }
    CHECK(fabs(w1[0] - 0.5f) > 1e-3, "the first step moves by ~lr: %g", w1[0] - 0.5f);
    adamw_free(&o);
}

// Adam (torch.optim.Adam, l2 = 1) by the formulas in double: the decay added to the gradient on the
// weight group only, then AdamW's moments and bias correction, no decoupled decay
static void test_adam_by_hand(void) {
    float w1[3] = { 0.5f, -0.2f, 0.1f }, g1[3], w2[2] = { 0.3f, -0.4f }, g2[2];
    int s1[1] = { 3 }, s2[1] = { 2 };
    MuParam p[2] = { musgd_param(w1, g1, s1, 1, MU_WEIGHT), musgd_param(w2, g2, s2, 1, MU_BIAS) };
    AdamW o;
    adamw_init(&o, p, 2);
    o.l2 = 1;
    MuStep st = { { 0 }, 0.937, 0.05 };                // a large decay: its place in the formula shows
    st.lr[MU_WEIGHT] = 0.01; st.lr[MU_BIAS] = 0.02;
    double W[5] = { 0.5f, -0.2f, 0.1f, 0.3f, -0.4f }, M[5] = { 0 }, V[5] = { 0 };
    for (int t = 1; t <= 3; t++) {
        double G[5] = { 0.1 * t, -0.3, 0.02, 0.5, -0.05 * t };
        for (int i = 0; i < 3; i++) g1[i] = (float)G[i];
        for (int i = 0; i < 2; i++) g2[i] = (float)G[3 + i];
        for (int i = 0; i < 5; i++) {
            double lr = i < 3 ? 0.01 : 0.02, wd = i < 3 ? 0.05 : 0, g = (float)G[i] + wd * W[i];
            M[i] = 0.937 * M[i] + 0.063 * g;
            V[i] = 0.999 * V[i] + 0.001 * g * g;
            double mh = M[i] / (1 - pow(0.937, t)), vh = V[i] / (1 - pow(0.999, t));
            W[i] -= lr * mh / (sqrt(vh) + 1e-8);
        }
        adamw_step(&o, &st);
        for (int i = 0; i < 5; i++) {
            float got = i < 3 ? w1[i] : w2[i - 3];
            CHECK(fabs(got - W[i]) < 1e-6, "step %d w[%d] %.9g vs %.9g", t, i, got, W[i]);
        }
        CHECK(g1[0] == 0 && g2[1] == 0, "gradients zeroed");
    }
    // AdamW on the same inputs differs (decoupled decay): the mode matters
    float a1[3] = { 0.5f, -0.2f, 0.1f }, h1[3] = { 0.1f, -0.3f, 0.02f };
    MuParam q = musgd_param(a1, h1, s1, 1, MU_WEIGHT);
    AdamW d;
    adamw_init(&d, &q, 1);
    adamw_step(&d, &st);
    float b1[3] = { 0.5f, -0.2f, 0.1f }, k1[3] = { 0.1f, -0.3f, 0.02f };
    MuParam r = musgd_param(b1, k1, s1, 1, MU_WEIGHT);
    AdamW e;
    adamw_init(&e, &r, 1);
    e.l2 = 1;
    adamw_step(&e, &st);
    CHECK(a1[2] != b1[2], "Adam and AdamW give the same step: %.9g", a1[2]);
    adamw_free(&d);
    adamw_free(&e);
    adamw_free(&o);
}

int main(void) {
    RUN(test_auto);
    RUN(test_groups);
    RUN(test_bf16);
    RUN(test_ns_diagonal);
    RUN(test_ns_random);
    RUN(test_step_by_hand);
    RUN(test_adamw_by_hand);
    RUN(test_adam_by_hand);
    return test_summary();
}
