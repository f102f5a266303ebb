// test_loss.c: the detection loss against the known answers of yolo-training.md section 7, hand-made
// assigner cases, a finite-difference gradient check, and the gelan-s reference step (fixture).
#include "core/spec/loss.h"
#include "io/safetensors.h"
#include "test/test.h"

#define R LOSS_REG_MAX

// ---- helpers ----------------------------------------------------------------------------------
// Scene: three head maps for an image size, with every logit set to `fill` (box) / `cls` (classes).
typedef struct { float *data[LOSS_LEVELS], *grad[LOSS_LEVELS]; LossBatch b; Map g[LOSS_LEVELS]; } Scene;

static void scene_make(Scene *s, int N, int img, int nc, float box_fill, float cls_fill) {
    memset(s, 0, sizeof *s);
    int C = 4 * R + nc;
    for (int l = 0; l < LOSS_LEVELS; l++) {
        int H = img >> (3 + l);
        size_t n = (size_t)N * H * H * C;
        s->data[l] = malloc(n * sizeof(float));
        s->grad[l] = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) s->data[l][i] = (int)(i % C) < 4 * R ? box_fill : cls_fill;
        s->b.head[l] = map_make(s->data[l], N, H, H, C);
        s->g[l] = map_make(s->grad[l], N, H, H, C);
    }
    s->b.nc = nc;
    s->b.img_h = s->b.img_w = img;
}

static void scene_free(Scene *s) {
    for (int l = 0; l < LOSS_LEVELS; l++) { free(s->data[l]); free(s->grad[l]); }
}

// set_dist: box logits of one side so the DFL expectation is d (mass on floor(d) and floor(d) + 1).
static void set_dist(float *x, double d) {
    int left = (int)d;
    double f = d - left;
    for (int i = 0; i < R; i++) x[i] = -1e4f;
    x[left] = f < 1 ? (float)log(1 - f) : -1e4f;
    if (left + 1 < R) x[left + 1] = f > 0 ? (float)log(f) : -1e4f;
}

// set_box: the anchor at pixel centre (px, py) of level l predicts the pixel box b (x1,y1,x2,y2).
static float *anchor_logits(Scene *s, int n, int l, double px, double py) {
    double stride = 8 << l;
    return map_at(s->b.head[l], n, (int)(py / stride), (int)(px / stride));
}
static void set_box(Scene *s, int n, int l, double px, double py, const double b[4]) {
    double stride = 8 << l;
    float *x = anchor_logits(s, n, l, px, py);
    double d[4] = { px - b[0], py - b[1], b[2] - px, b[3] - py };
    for (int k = 0; k < 4; k++) set_dist(x + k * R, d[k] / stride);
}

// anchor index of the pixel centre (px, py) at level l of an img x img input
static int anchor_index(int img, int l, double px, double py) {
    int a = 0;
    for (int k = 0; k < l; k++) a += (img >> (3 + k)) * (img >> (3 + k));
    int W = img >> (3 + l), stride = 8 << l;
    return a + (int)(py / stride) * W + (int)(px / stride);
}

// target row from a pixel box
static void target_px(float *row, int img_idx, int cls, double x1, double y1, double x2, double y2, int img) {
    row[0] = (float)img_idx; row[1] = (float)cls;
    row[2] = (float)((x1 + x2) / 2 / img); row[3] = (float)((y1 + y2) / 2 / img);
    row[4] = (float)((x2 - x1) / img);     row[5] = (float)((y2 - y1) / img);
}

static double softplus(double x) { return fmax(x, 0) + log1p(exp(-fabs(x))); }

static int count_fg(const LossWork *w, int N, int A, int row) {
    int c = 0;
    for (int n = 0; n < N; n++)
        for (int a = 0; a < A; a++) c += row < 0 ? loss_target(w, n, a, NULL) >= 0 : loss_target(w, n, a, NULL) == row;
    return c;
}

// ---- building blocks (section 7, #9-#20) -------------------------------------------------------
static void test_dfl_known(void) {
    float uni[R] = {0}, z[R] = {0};
    double p[R];
    z[3] = 2; z[4] = 1;
    CHECK(close_enough(loss_dfl_decode(uni, p), 7.5, 1e-12, 0), "#9 uniform: %.9f", loss_dfl_decode(uni, p));
    CHECK(close_enough(loss_dfl_decode(z, p), 6.0579, 5e-5, 0), "#9 z3=2,z4=1: %.6f", loss_dfl_decode(z, p));
    CHECK(close_enough(loss_dfl_side(uni, 3.3), log(16), 1e-12, 0), "#13 uniform: %.9f", loss_dfl_side(uni, 3.3));
    CHECK(close_enough(loss_dfl_side(uni, 7.0), 2.7725887, 1e-7, 0), "#13 uniform t=7");
    CHECK(close_enough(loss_dfl_side(z, 3.3), 1.48252, 5e-6, 0), "#13 z, t=3.3: %.6f", loss_dfl_side(z, 3.3));
    // #12 weights, read back through one-hot CE values: logits with distinct CE per bin
    float x[R];
    double ce[R], lse = 0;
    for (int i = 0; i < R; i++) { x[i] = (float)(0.37 * i - 0.02 * i * i); lse += exp(x[i]); }
    for (int i = 0; i < R; i++) ce[i] = log(lse) - x[i];
    CHECK(close_enough(loss_dfl_side(x, 3.3), 0.7 * ce[3] + 0.3 * ce[4], 1e-9, 1e-9), "#12 t=3.3");
    CHECK(close_enough(loss_dfl_side(x, 14.99), 0.01 * ce[14] + 0.99 * ce[15], 1e-9, 1e-9), "#12 t=14.99");
    CHECK(close_enough(loss_dfl_side(x, 0), ce[0], 1e-12, 1e-12), "#12 t=0");
    // #11: distances beyond 14.99 are clamped to it, negative ones to 0
    CHECK(loss_dfl_side(x, 40) == loss_dfl_side(x, 14.99), "#11 clamp high");
    CHECK(loss_dfl_side(x, -3) == loss_dfl_side(x, 0), "#11 clamp low");
}

// IoU and aspect term v as bbox_iou computes them, to hold alpha constant in the numeric derivative
static double iou_ref(const double a[4], const double b[4]) {
    double iw = fmax(fmin(a[2], b[2]) - fmax(a[0], b[0]), 0), ih = fmax(fmin(a[3], b[3]) - fmax(a[1], b[1]), 0);
    return iw * ih / ((a[2] - a[0]) * (a[3] - a[1] + 1e-7) + (b[2] - b[0]) * (b[3] - b[1] + 1e-7) - iw * ih + 1e-7);
}
static double v_ref(const double a[4], const double b[4]) {
    double d = atan((b[2] - b[0]) / (b[3] - b[1] + 1e-7)) - atan((a[2] - a[0]) / (a[3] - a[1] + 1e-7));
    return 4 / (M_PI * M_PI) * d * d;
}
static double alpha_ref(const double a[4], const double b[4]) {
    double v = v_ref(a, b);
    return v / (v - iou_ref(a, b) + 1 + 1e-7);
}

static double ciou4(double a0, double a1, double a2, double a3, double b0, double b1, double b2, double b3) {
    double a[4] = {a0, a1, a2, a3}, b[4] = {b0, b1, b2, b3};
    return loss_ciou(a, b, NULL);
}

static void test_ciou_known(void) {
    CHECK(close_enough(ciou4(0, 0, 10, 10, 0, 0, 10, 10), 0.99999998, 1e-8, 0), "#14 %.10f",
          ciou4(0, 0, 10, 10, 0, 0, 10, 10));
    CHECK(close_enough(ciou4(0, 0, 10, 10, 5, 0, 15, 10), 0.256410, 1e-5, 0), "#15 %.6f",
          ciou4(0, 0, 10, 10, 5, 0, 15, 10));
    CHECK(close_enough(ciou4(0, 0, 10, 10, 0, 0, 20, 10), 0.446752, 1e-5, 0), "#16 %.6f",
          ciou4(0, 0, 10, 10, 0, 0, 20, 10));
    CHECK(close_enough(ciou4(0, 0, 4, 2, 1, 1, 3, 3), 0.157909, 1e-5, 0), "#17 %.6f", ciou4(0, 0, 4, 2, 1, 1, 3, 3));
    CHECK(close_enough(ciou4(0, 0, 10, 10, 20, 20, 30, 30), -0.444444, 1e-5, 0), "#18 %.6f",
          ciou4(0, 0, 10, 10, 20, 20, 30, 30));
    double far = ciou4(0, 0, 10, 0.001, 1e5, 0, 1e5 + 0.001, 10);   // wide flat vs distant tall thin
    CHECK(far < -1.49 && far > -1.5, "#19 wide vs tall: %.4f", far);
    Rng r = rng_for(7, 1, 0);
    for (int i = 0; i < 1000; i++) {   // #19: symmetry, CIoU <= IoU, range (-1.5, 1]
        double a[4], b[4];
        for (int k = 0; k < 2; k++) {
            a[k] = rng_uniform(&r, 0, 50); a[k + 2] = a[k] + rng_uniform(&r, 0.1, 50);
            b[k] = rng_uniform(&r, 0, 50); b[k + 2] = b[k] + rng_uniform(&r, 0.1, 50);
        }
        double c1 = loss_ciou(a, b, NULL), c2 = loss_ciou(b, a, NULL), iou = iou_ref(a, b);
        if (!(fabs(c1 - c2) < 1e-12 && c1 <= iou + 1e-12 && c1 > -1.5 && c1 <= 1)) {
            CHECK(0, "#19 case %d: ciou %g / %g, iou %g", i, c1, c2, iou);
            break;
        }
    }
}

// dCIoU/db1 against central differences of iou - rho2/c2 - alpha0*v with alpha0 fixed at the point
// (the reference computes alpha under no_grad): CIoU(x) + (alpha(x) - alpha0) * v(x).
static void test_ciou_gradient(void) {
    Rng r = rng_for(7, 2, 0);
    int bad = 0;
    for (int i = 0; i < 300; i++) {
        double a[4], b[4], d[4];
        for (int k = 0; k < 2; k++) {
            a[k] = rng_uniform(&r, 0, 20); a[k + 2] = a[k] + rng_uniform(&r, 0.5, 20);
            b[k] = rng_uniform(&r, 0, 20); b[k + 2] = b[k] + rng_uniform(&r, 0.5, 20);
        }
        loss_ciou(a, b, d);
        double alpha0 = alpha_ref(a, b);
        for (int k = 0; k < 4; k++) {
            double h = 1e-6, ap[4], am[4];
            memcpy(ap, a, sizeof ap); memcpy(am, a, sizeof am);
            ap[k] += h; am[k] -= h;
            double fp = loss_ciou(ap, b, NULL) + (alpha_ref(ap, b) - alpha0) * v_ref(ap, b);
            double fm = loss_ciou(am, b, NULL) + (alpha_ref(am, b) - alpha0) * v_ref(am, b);
            double num = (fp - fm) / (2 * h);
            if (!close_enough(d[k], num, 1e-6, 1e-4) && bad++ < 5)
                CHECK(0, "case %d coord %d: analytic %.9g numeric %.9g", i, k, d[k], num);
        }
    }
    CHECK(bad == 0, "%d of 1200 CIoU derivatives off", bad);
}

// ---- whole-loss known answers -----------------------------------------------------------------
// #20 and #23: with every class logit 0 the cls sum is N*A*nc*ln 2 whatever the targets; an empty
// batch gives box = dfl = 0, cls = 0.5 * sum softplus / 1, total = N * cls.
static void test_bce_and_empty(void) {
    Scene s;
    scene_make(&s, 2, 64, 3, 0.0f, 0.0f);
    LossWork *w = loss_work_new();
    LossOut o;
    Err err = {{0}};
    float t[6];
    target_px(t, 1, 2, 10, 12, 40, 50, 64);
    s.b.targets = t; s.b.n_targets = 1;
    CHECK(loss_forward_backward(w, &s.b, s.g, &o, &err) == 0, "%s", err.msg);
    int A = 64 + 16 + 4;
    CHECK(close_enough(o.cls, 0.5 * 2 * A * 3 * log(2) / o.tss, 1e-9, 1e-9), "#20 cls %.9f", o.cls);
    CHECK(o.n_fg > 0 && o.box > 0 && o.dfl > 0, "fg %d box %g dfl %g", o.n_fg, o.box, o.dfl);

    Rng r = rng_for(3, 0, 0);
    double sp = 0;
    for (int l = 0; l < LOSS_LEVELS; l++)
        for (size_t i = 0; i < map_floats(s.b.head[l]); i++) {
            int c = (int)(i % s.b.head[l].C);
            s.data[l][i] = (float)(c < 4 * R ? rng_normal(&r) : 40 * rng_normal(&r));
            if (c == 4 * R) s.data[l][i] = (i / s.b.head[l].C) % 2 ? 100.0f : -100.0f;   // |x| = 100
            if (c >= 4 * R) sp += softplus(s.data[l][i]);
        }
    s.b.n_targets = 0;
    s.b.targets = NULL;
    CHECK(loss_forward_backward(w, &s.b, s.g, &o, &err) == 0, "%s", err.msg);
    CHECK(o.box == 0 && o.dfl == 0 && o.n_fg == 0 && o.tss == 1, "#23 box %g dfl %g fg %d", o.box, o.dfl, o.n_fg);
    CHECK(close_enough(o.cls, 0.5 * sp, 0, 1e-12), "#23 cls %.9g vs %.9g", o.cls, 0.5 * sp);
    CHECK(close_enough(o.total, 2 * o.cls, 0, 1e-15), "#24 total %.9g", o.total);
    int finite = 1, box_zero = 1;
    for (int l = 0; l < LOSS_LEVELS; l++)
        for (size_t i = 0; i < map_floats(s.g[l]); i++) {
            finite &= isfinite(s.grad[l][i]);
            if ((int)(i % s.g[l].C) < 4 * R) box_zero &= s.grad[l][i] == 0;
        }
    CHECK(finite && box_zero, "gradients finite %d, box gradients zero %d", finite, box_zero);
    loss_work_free(w);
    scene_free(&s);
}

// #10: the anchor (col 10, row 20) at stride 8 predicting ltrb (2,3,4,5) decodes to pixels
// (68,140,116,204); with that exact gt its overlap is 1 and, being the best, its target score is 1.
static void test_decode_anchor(void) {
    Scene s;
    scene_make(&s, 1, 256, 1, 0.0f, -5.0f);
    float t[6];
    target_px(t, 0, 0, 68, 140, 116, 204, 256);
    s.b.targets = t; s.b.n_targets = 1;
    double box[4] = {68, 140, 116, 204};
    set_box(&s, 0, 0, 84, 164, box);
    anchor_logits(&s, 0, 0, 84, 164)[4 * R] = 5;
    float *x = anchor_logits(&s, 0, 0, 84, 164);
    double p[R];
    CHECK(close_enough(loss_dfl_decode(x, p), 2, 1e-6, 0) && close_enough(loss_dfl_decode(x + 3 * R, p), 5, 1e-6, 0),
          "ltrb not set");
    LossWork *w = loss_work_new();
    double tss, score;
    Err err = {{0}};
    CHECK(loss_assign(w, &s.b, &tss, &err) == 0, "%s", err.msg);
    int a = 20 * 32 + 10;
    CHECK(loss_target(w, 0, a, &score) == 0 && close_enough(score, 1, 1e-6, 0), "#10 target %d score %.9f",
          loss_target(w, 0, a, NULL), score);
    loss_work_free(w);
    scene_free(&s);
}

// #21: one gt with exactly three anchors inside, (score, IoU) = (0.9,0.8), (0.5,0.9), (0.2,0.7).
// Predicted boxes are concentric with the gt, scaled by 1/sqrt(IoU), so CIoU = IoU (same aspect).
static void test_tal_toy(void) {
    Scene s;
    scene_make(&s, 1, 64, 1, 0.0f, -20.0f);
    const double gt[4] = {1, 1, 23, 7}, sc[3] = {0.9, 0.5, 0.2}, iou[3] = {0.8, 0.9, 0.7};
    float t[6];
    target_px(t, 0, 0, gt[0], gt[1], gt[2], gt[3], 64);
    s.b.targets = t; s.b.n_targets = 1;
    for (int i = 0; i < 3; i++) {
        double k = 1 / sqrt(iou[i]), cx = 12, cy = 4, hw = 11 * k, hh = 3 * k;
        double pb[4] = {cx - hw, cy - hh, cx + hw, cy + hh};
        set_box(&s, 0, 0, 4 + 8 * i, 4, pb);
        anchor_logits(&s, 0, 0, 4 + 8 * i, 4)[4 * R] = (float)log(sc[i] / (1 - sc[i]));
    }
    LossWork *w = loss_work_new();
    double tss, got[3], tm[3], mt = 0;
    Err err = {{0}};
    CHECK(loss_assign(w, &s.b, &tss, &err) == 0, "%s", err.msg);
    const double doc[3] = {0.59561, 0.90000, 0.12601};
    for (int i = 0; i < 3; i++) { tm[i] = sqrt(sc[i]) * pow(iou[i], 6); mt = fmax(mt, tm[i]); }
    for (int i = 0; i < 3; i++) {
        CHECK(loss_target(w, 0, anchor_index(64, 0, 4 + 8 * i, 4), &got[i]) == 0, "anchor %d not assigned", i);
        CHECK(close_enough(got[i], doc[i], 1e-5, 0), "#21 anchor %d: %.6f, doc %.5f", i, got[i], doc[i]);
        CHECK(close_enough(got[i], tm[i] * 0.9 / (mt + 1e-9), 2e-6, 0), "#21 anchor %d: %.8f vs %.8f", i, got[i],
              tm[i] * 0.9 / (mt + 1e-9));
    }
    CHECK(count_fg(w, 1, 84, -1) == 3, "%d positives, expected 3", count_fg(w, 1, 84, -1));
    CHECK(close_enough(tss, got[0] + got[1] + got[2], 1e-12, 0), "tss %.9f", tss);
    loss_work_free(w);
    scene_free(&s);
}

// ---- hand-made assigner cases -----------------------------------------------------------------
static void test_conflicts(void) {
    LossWork *w = loss_work_new();
    double tss;
    Err err = {{0}};
    Scene s;
    // identical boxes of two classes with equal scores pick the same anchors; every conflict is a
    // tie of overlaps and goes to the lower gt index
    scene_make(&s, 1, 64, 2, 0.0f, 0.0f);
    float t[18];
    target_px(t, 0, 0, 2, 2, 40, 40, 64);
    target_px(t + 6, 0, 1, 2, 2, 40, 40, 64);
    s.b.targets = t; s.b.n_targets = 2;
    CHECK(loss_assign(w, &s.b, &tss, &err) == 0, "%s", err.msg);
    CHECK(count_fg(w, 1, 84, 0) == 10 && count_fg(w, 1, 84, 1) == 0, "identical gts: %d / %d positives",
          count_fg(w, 1, 84, 0), count_fg(w, 1, 84, 1));
    scene_free(&s);

    // the YOLOv9 quirk: anchor X at (20,20) is picked by A and B, and goes to C, which does not contain
    // it (C's edge passes through X) but matches X's predicted box exactly
    scene_make(&s, 1, 64, 1, 0.0f, 0.0f);
    const double box_c[4] = {20, 20, 40, 40};
    target_px(t, 0, 0, 14, 14, 34, 34, 64);        // A
    target_px(t + 6, 0, 0, 16, 16, 36, 30, 64);    // B
    target_px(t + 12, 0, 0, 20, 20, 40, 40, 64);   // C
    s.b.targets = t; s.b.n_targets = 3;
    set_box(&s, 0, 0, 20, 20, box_c);
    CHECK(loss_assign(w, &s.b, &tss, &err) == 0, "%s", err.msg);
    double score;
    int x = anchor_index(64, 0, 20, 20);
    CHECK(loss_target(w, 0, x, &score) == 2, "X assigned to row %d, expected C (2)", loss_target(w, 0, x, NULL));
    CHECK(score > 0.5, "X score %g", score);
    scene_free(&s);
    loss_work_free(w);
}

static void test_small_and_border(void) {
    LossWork *w = loss_work_new();
    LossOut o;
    Err err = {{0}};
    Scene s;
    scene_make(&s, 1, 64, 2, 0.0f, -3.0f);
    float t[12];
    target_px(t, 0, 1, 5, 5, 7, 7, 64);   // between the anchor centres 4 and 12: no anchor inside
    s.b.targets = t; s.b.n_targets = 1;
    CHECK(loss_forward_backward(w, &s.b, s.g, &o, &err) == 0, "%s", err.msg);
    CHECK(o.n_fg == 0 && o.box == 0 && o.dfl == 0 && o.tss == 1, "small box: fg %d box %g", o.n_fg, o.box);
    CHECK(close_enough(o.cls, 0.5 * 84 * 2 * softplus(-3), 0, 1e-12), "small box cls %.9g", o.cls);

    // at the border and beyond it: (0,0,10,10) holds P3 (4,4) and P4 (8,8); (-6.4,20,6.4,30) holds (4,28)
    target_px(t, 0, 0, 0, 0, 10, 10, 64);
    t[6] = 0; t[7] = 1; t[8] = 0.0f; t[9] = 25.0f / 64; t[10] = 0.2f; t[11] = 10.0f / 64;
    s.b.n_targets = 2;
    CHECK(loss_forward_backward(w, &s.b, s.g, &o, &err) == 0, "%s", err.msg);
    CHECK(loss_target(w, 0, anchor_index(64, 0, 4, 4), NULL) == 0, "P3 (4,4) not assigned");
    CHECK(loss_target(w, 0, anchor_index(64, 1, 8, 8), NULL) == 0, "P4 (8,8) not assigned");
    CHECK(loss_target(w, 0, anchor_index(64, 0, 4, 28), NULL) == 1, "P3 (4,28) not assigned");
    CHECK(o.n_fg == 3 && isfinite(o.total) && o.box > 0, "border: fg %d total %g", o.n_fg, o.total);

    // bad rows are rejected with a message
    t[1] = 2;
    CHECK(loss_forward_backward(w, &s.b, s.g, &o, &err) == -1 && strstr(err.msg, "class"), "class 2 of 2: %s",
          err.msg);
    t[1] = 0; t[0] = 1;
    CHECK(loss_forward_backward(w, &s.b, s.g, &o, &err) == -1 && strstr(err.msg, "image"), "image 1 of 1: %s",
          err.msg);
    scene_free(&s);
    loss_work_free(w);
}

// ---- gradients --------------------------------------------------------------------------------
static void scene_random(Scene *s, Rng *r) {
    for (int l = 0; l < LOSS_LEVELS; l++)
        for (size_t i = 0; i < map_floats(s->b.head[l]); i++)
            s->data[l][i] = (float)((int)(i % s->b.head[l].C) < 4 * R ? 1.5 * rng_normal(r) : rng_normal(r) - 1);
}

static void random_targets(float *t, int n, int N, int nc, Rng *r) {
    for (int i = 0; i < n; i++) {
        double w = rng_uniform(r, 0.1, 0.6), h = rng_uniform(r, 0.1, 0.6);
        t[6 * i] = (float)(i % N); t[6 * i + 1] = (float)rng_int(r, nc);
        t[6 * i + 2] = (float)rng_uniform(r, w / 2, 1 - w / 2); t[6 * i + 3] = (float)rng_uniform(r, h / 2, 1 - h / 2);
        t[6 * i + 4] = (float)w; t[6 * i + 5] = (float)h;
    }
}

static void test_gradient_fd(void) {
    Scene s;
    Rng r = rng_for(11, 0, 0);
    scene_make(&s, 2, 64, 3, 0, 0);
    scene_random(&s, &r);
    float t[5 * 6];
    random_targets(t, 5, 2, 3, &r);
    s.b.targets = t; s.b.n_targets = 5;
    LossWork *w = loss_work_new();
    Err err = {{0}};
    double tss;
    LossOut o;
    CHECK(loss_assign(w, &s.b, &tss, &err) == 0, "%s", err.msg);
    double norm = fmax(tss, 1);
    loss_compute(w, &s.b, norm, 2, s.g, &o);
    CHECK(o.n_fg > 5, "only %d fg anchors", o.n_fg);
    // coordinates: half among the box logits of foreground anchors, half anywhere
    int fg[512], nfg = 0, A = 84, bad = 0, tried = 0;
    for (int n = 0; n < 2; n++)
        for (int a = 0; a < A && nfg < 512; a++) if (loss_target(w, n, a, NULL) >= 0) fg[nfg++] = n * A + a;
    for (int k = 0; k < 200; k++) {
        int cell = k % 2 ? fg[rng_int(&r, nfg)] : rng_int(&r, 2 * A), n = cell / A, a = cell % A;
        int l = a < 64 ? 0 : a < 80 ? 1 : 2, i = a - (l == 0 ? 0 : l == 1 ? 64 : 80), W = 8 >> l;
        int c = k % 2 ? rng_int(&r, 4 * R) : rng_int(&r, 4 * R + 3);
        float *x = map_at(s.b.head[l], n, i / W, i % W) + c, x0 = *x;
        float ana = map_at(s.g[l], n, i / W, i % W)[c];
        float xp = x0 + 1e-3f, xm = x0 - 1e-3f;
        LossOut op, om;
        *x = xp; loss_compute(w, &s.b, norm, 2, NULL, &op);
        *x = xm; loss_compute(w, &s.b, norm, 2, NULL, &om);
        *x = x0;
        double num = (op.total - om.total) / ((double)xp - xm);
        tried++;
        if (!close_enough(ana, num, 1e-4, 1e-2)) {
            if (bad++ < 5) CHECK(0, "n%d a%d c%d: analytic %.7g numeric %.7g", n, a, c, ana, num);
        }
    }
    CHECK(bad == 0, "%d of %d gradient coordinates off", bad, tried);
    loss_work_free(w);
    scene_free(&s);
}

// One phase = two phases; and two images computed as two "devices" with the global normaliser and
// batch_mult = 2 add up to the whole batch (DataParallel equivalence).
static void test_two_phase_and_split(void) {
    Scene s;
    Rng r = rng_for(12, 0, 0);
    scene_make(&s, 2, 64, 3, 0, 0);
    scene_random(&s, &r);
    float t[6 * 6];
    random_targets(t, 6, 2, 3, &r);
    t[6 * 5] = 0;   // image 0 gets four targets, image 1 two
    s.b.targets = t; s.b.n_targets = 6;
    LossWork *w = loss_work_new(), *w1 = loss_work_new();
    Err err = {{0}};
    LossOut o1, o2;
    CHECK(loss_forward_backward(w, &s.b, s.g, &o1, &err) == 0, "%s", err.msg);
    size_t n[LOSS_LEVELS];
    float *g1[LOSS_LEVELS];
    for (int l = 0; l < LOSS_LEVELS; l++) {
        n[l] = map_floats(s.g[l]);
        g1[l] = malloc(n[l] * sizeof(float));
        memcpy(g1[l], s.grad[l], n[l] * sizeof(float));
    }
    double tss;
    CHECK(loss_assign(w, &s.b, &tss, &err) == 0, "%s", err.msg);
    loss_compute(w, &s.b, fmax(tss, 1), 2, s.g, &o2);
    int same = o1.total == o2.total;
    for (int l = 0; l < LOSS_LEVELS; l++) same &= memcmp(g1[l], s.grad[l], n[l] * sizeof(float)) == 0;
    CHECK(same, "two-phase differs: %.12g vs %.12g", o1.total, o2.total);

    // split: each image as its own batch of one
    LossBatch part[2];
    Map gpart[2][LOSS_LEVELS];
    float tp[2][6 * 6];
    int np[2] = {0, 0};
    for (int i = 0; i < 6; i++) {
        int img = (int)t[6 * i];
        memcpy(tp[img] + 6 * np[img], t + 6 * i, 6 * sizeof(float));
        tp[img][6 * np[img]++] = 0;
    }
    double tss_part[2], total = 0, box = 0;
    LossWork *ws[2] = {w, w1};
    for (int d = 0; d < 2; d++) {
        part[d] = s.b;
        for (int l = 0; l < LOSS_LEVELS; l++) {
            Map m = s.b.head[l];
            part[d].head[l] = map_make(m.data + (size_t)d * m.H * m.W * m.ld, 1, m.H, m.W, m.C);
            gpart[d][l] = map_make(s.grad[l] + (size_t)d * m.H * m.W * m.ld, 1, m.H, m.W, m.C);
        }
        part[d].targets = tp[d];
        part[d].n_targets = np[d];
        CHECK(loss_assign(ws[d], &part[d], &tss_part[d], &err) == 0, "%s", err.msg);
    }
    CHECK(close_enough(tss_part[0] + tss_part[1], tss, 1e-12, 1e-12), "tss %.12g + %.12g vs %.12g",
          tss_part[0], tss_part[1], tss);
    for (int d = 0; d < 2; d++) {
        LossOut o;
        loss_compute(ws[d], &part[d], fmax(tss_part[0] + tss_part[1], 1), 2, gpart[d], &o);
        total += o.total;
        box += o.box;
    }
    CHECK(close_enough(total, o1.total, 0, 1e-12) && close_enough(box, o1.box, 0, 1e-12),
          "split total %.12g vs %.12g, box %.12g vs %.12g", total, o1.total, box, o1.box);
    double worst = 0;
    for (int l = 0; l < LOSS_LEVELS; l++)
        for (size_t i = 0; i < n[l]; i++) worst = fmax(worst, fabs(g1[l][i] - s.grad[l][i]));
    CHECK(worst < 1e-7, "split gradients differ by %g", worst);
    for (int l = 0; l < LOSS_LEVELS; l++) free(g1[l]);
    loss_work_free(w);
    loss_work_free(w1);
    scene_free(&s);
}

// ---- the reference step -----------------------------------------------------------------------
// nchw_to_nhwc: a (N, C, H, W) fixture tensor into an NHWC buffer
static int load_head(const SafeTensors *st, const char *name, float **out, Map *m, Err *err) {
    const StTensor *t = st_find(st, name);
    if (!t || t->ndim != 4) return err_set(err, "%s missing or not 4-D", name);
    int N = (int)t->shape[0], C = (int)t->shape[1], H = (int)t->shape[2], W = (int)t->shape[3];
    size_t n = (size_t)N * C * H * W;
    float *nchw = malloc(n * sizeof(float));
    if (st_read_f32(st, name, nchw, n, err)) { free(nchw); return -1; }
    *out = malloc(n * sizeof(float));
    *m = map_make(*out, N, H, W, C);
    for (int b = 0; b < N; b++)
        for (int c = 0; c < C; c++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) map_at(*m, b, y, x)[c] = nchw[(((size_t)b * C + c) * H + y) * W + x];
    free(nchw);
    return 0;
}

static void test_fixture(void) {
    const char *dir = shared_dir();
    if (!dir) SKIP("no shared folder (set YT_SHARED)");
    char path[4200];
    snprintf(path, sizeof path, "%s/fixtures/gelan_s_step.safetensors", dir);
    if (access(path, R_OK) != 0) SKIP("fixtures/gelan_s_step.safetensors is absent");
    SafeTensors st;
    Err err = {{0}};
    if (st_open(path, &st, &err)) { CHECK(0, "%s", err.msg); return; }
    LossBatch b = { .nc = 80, .img_h = 256, .img_w = 256 };
    float *data[LOSS_LEVELS] = {0}, *grad[LOSS_LEVELS] = {0};
    Map g[LOSS_LEVELS];
    const char *names[LOSS_LEVELS] = {"output/p3", "output/p4", "output/p5"};
    int ok = 1;
    for (int l = 0; l < LOSS_LEVELS && ok; l++) {
        ok = load_head(&st, names[l], &data[l], &b.head[l], &err) == 0;
        if (ok) { grad[l] = malloc(map_floats(b.head[l]) * sizeof(float)); g[l] = b.head[l]; g[l].data = grad[l]; }
    }
    const StTensor *tt = st_find(&st, "input/targets");
    ok = ok && tt && tt->ndim == 2 && tt->shape[1] == 6;
    CHECK(ok, "fixture tensors: %s", err.msg);
    if (ok) {
        float *targets = malloc(st_numel(tt) * sizeof(float));
        st_read_f32(&st, "input/targets", targets, st_numel(tt), &err);
        b.targets = targets;
        b.n_targets = (int)tt->shape[0];
        LossWork *w = loss_work_new();
        LossOut o;
        double t0 = now_seconds();
        CHECK(loss_forward_backward(w, &b, g, &o, &err) == 0, "%s", err.msg);
        double ms = 1e3 * (now_seconds() - t0);
        const double ref_total = 51.427001288347206;
        const double ref[3] = {2.8486366842849162, 5.71923929979859, 4.2888743380032945};
        printf("    gelan-s step: total %.12f (ref %.12f), box %.12f (%.12f), cls %.12f (%.12f), "
               "dfl %.12f (%.12f); %d fg, tss %.6f, %.1f ms\n", o.total, ref_total, o.box, ref[0], o.cls, ref[1],
               o.dfl, ref[2], o.n_fg, o.tss, ms);
        CHECK(close_enough(o.total, ref_total, 0, 1e-5), "total %.12f vs %.12f", o.total, ref_total);
        CHECK(close_enough(o.box, ref[0], 0, 1e-5), "box %.12f vs %.12f", o.box, ref[0]);
        CHECK(close_enough(o.cls, ref[1], 0, 1e-5), "cls %.12f vs %.12f", o.cls, ref[1]);
        CHECK(close_enough(o.dfl, ref[2], 0, 1e-5), "dfl %.12f vs %.12f", o.dfl, ref[2]);
        loss_work_free(w);
        free(targets);
    }
    for (int l = 0; l < LOSS_LEVELS; l++) { free(data[l]); free(grad[l]); }
    st_close(&st);
}

// Time of one assignment + loss + gradient at B=16, 640x640 (8400 anchors), 8 targets per image,
// and a check that a second call allocates nothing.
static void test_speed_640(void) {
    Scene s;
    Rng r = rng_for(13, 0, 0);
    scene_make(&s, 16, 640, 80, 0, 0);
    scene_random(&s, &r);
    float t[128 * 6];
    random_targets(t, 128, 16, 80, &r);
    s.b.targets = t; s.b.n_targets = 128;
    LossWork *w = loss_work_new();
    LossOut o;
    Err err = {{0}};
    CHECK(loss_forward_backward(w, &s.b, s.g, &o, &err) == 0, "%s", err.msg);
    size_t allocs = alloc_count();
    double t0 = now_seconds();
    CHECK(loss_forward_backward(w, &s.b, s.g, &o, &err) == 0, "%s", err.msg);
    double ms = 1e3 * (now_seconds() - t0);
    CHECK(alloc_count() == allocs, "the second call allocated %zu times", alloc_count() - allocs);
    CHECK(isfinite(o.total) && o.n_fg > 0, "total %g fg %d", o.total, o.n_fg);
    printf("    B=16 640x640 (8400 anchors, 128 targets): %.1f ms, %d fg\n", ms, o.n_fg);
    loss_work_free(w);
    scene_free(&s);
}

int main(void) {
    RUN(test_dfl_known);
    RUN(test_ciou_known);
    RUN(test_ciou_gradient);
    RUN(test_bce_and_empty);
    RUN(test_decode_anchor);
    RUN(test_tal_toy);
    RUN(test_conflicts);
    RUN(test_small_and_border);
    RUN(test_gradient_fd);
    RUN(test_two_phase_and_split);
    RUN(test_fixture);
    RUN(test_speed_640);
    return test_summary();
}
