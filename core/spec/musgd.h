// musgd.h: the optimizers Ultralytics 8.4.14 picks for YOLO26 (yolo26.md section 3): the optimizer=auto
// rule, the eight parameter groups of build_optimizer, and MuSGD (optim/muon.py): a Muon step
// (momentum, Newton-Schulz orthogonalisation in bf16) plus a nesterov SGD step on every matrix
// parameter, plain nesterov SGD on the rest; and AdamW, auto's pick for short runs (torch.optim.AdamW).
// CPU reference, fp32 state, PyTorch's rounding order.
// Legend: n floats of one tensor; r x c the Muon matrix view (out channels x the rest); r <= c inside NS.
#pragma once
#include <stddef.h>

// ---- optimizer=auto (BaseTrainer.build_optimizer) ------------------------------------------
typedef struct {
    const char *name;     // "MuSGD" or "AdamW"
    double lr, momentum;  // auto ignores the user's lr0 and momentum
    double warmup_bias_lr;   // forced to 0.0 in both branches (issue #23637, unfixed at 8.4.14)
} MuAuto;
// iterations = ceil(n_images / max(batch, 64)) * epochs; MuSGD(lr 0.01, momentum 0.9) above 10000,
// else AdamW(lr round(0.002*5/(4+nc), 6), momentum 0.9).
MuAuto musgd_auto(long n_images, int batch, int epochs, int nc);

// ---- parameter groups ------------------------------------------------------------------------
// Group index in the reference's order: [weight-hi, weight, bn-hi, bn, bias-hi, bias, muon-hi, muon].
// "-hi" groups hold the parameters whose name matches (?=.*23)(?=.*cv3)|proto\.semseg (the YOLO26
// Detect classification branches cv3 and one2one_cv3) and train at 3x the learning rate.
enum { MU_WEIGHT_HI, MU_WEIGHT, MU_BN_HI, MU_BN, MU_BIAS_HI, MU_BIAS, MU_MUON_HI, MU_MUON, MU_GROUPS };
// The group of a parameter by its state-dict name, dimension count and whether its module is a norm
// layer: ndim >= 2 -> muon (when use_muon), "bias" in the name -> bias, norm weight -> bn, else weight.
int musgd_group(const char *name, int ndim, int is_norm, int use_muon);
int musgd_group_decays(int group);       // 1 for weight and muon groups: weight decay applies
double musgd_group_lr_scale(int group);  // 3 for the -hi groups, else 1 (times the schedule's lr)

// ---- Newton-Schulz ---------------------------------------------------------------------------
float bf16_round(float x);   // float -> bfloat16 -> float, round to nearest even (NaN stays NaN)
// zeropower_via_newtonschulz5: X = G / (||G||_F + 1e-7), transposed when r > c, then five steps
// A = X X^T; B = b A + (c A) A; X = a X + B X with (a,b,c) = (3.4445, -4.7750, 2.0315), transposed
// back. bf16 = 1 rounds every tensor result to bfloat16 as PyTorch does on the bf16 copy (GEMMs
// accumulate in fp32); bf16 = 0 keeps fp32 (for tests). G, X: (r, c) row-major; X may not alias G.
// ws: musgd_ns_workspace_floats(r, c) floats.
size_t musgd_ns_workspace_floats(int r, int c);
void   musgd_newton_schulz(const float *G, int r, int c, int bf16, float *X, float *ws);

// ---- MuSGD -----------------------------------------------------------------------------------
typedef struct {
    float *w, *g;    // (n) parameter and its gradient
    size_t n;
    int group;       // MU_*
    int r, c;        // Muon view: r = shape[0], c = n / r (muon groups)
    double shape_scale;   // sqrt(max(1, shape[-2]/shape[-1])): 1 for every 4-D conv weight
} MuParam;
// A parameter of PyTorch shape `shape` (ndim entries, outermost first) in `group`.
MuParam musgd_param(float *w, float *g, const int *shape, int ndim, int group);

typedef struct {
    MuParam *p;          // borrowed, n_params
    int      n_params;
    double   muon, sgd;  // the MuSGD weights: (0.2, 1.0) at 8.4.14
    float   *m;          // Muon momentum buffers (muon groups), packed in parameter order, zeros
    float   *s;          // SGD momentum buffers (every parameter), packed, zeros
    float   *ws;         // Newton-Schulz and update scratch for the largest Muon matrix
} MuSgd;

void musgd_init(MuSgd *o, MuParam *p, int n_params, double muon, double sgd);
void musgd_free(MuSgd *o);

typedef struct {
    double lr[MU_GROUPS];   // per group, -hi scale already applied (the schedule interpolates each)
    double momentum;        // also Muon's beta (warmup moves it from 0.8)
    double weight_decay;    // for groups that decay: wd * batch * accumulate / 64
} MuStep;
// One optimizer step of every parameter, then zero its gradient. Muon groups: m = lerp(m, g, 1-beta),
// u = lerp(g, m, beta), p -= lr*muon * NS_bf16(u as r x c) * shape_scale, then the SGD step below with
// the updated p. Every group: g' = g + wd*p, s = beta*s + g', p -= lr*sgd*(g' + beta*s) (sgd factor
// 1 for non-Muon groups).
void musgd_step(MuSgd *o, const MuStep *st);

// ---- AdamW (auto's choice at <= 10000 iterations) -----------------------------------------------
// torch.optim.AdamW, single-tensor path: p *= 1 - lr*wd; m = lerp(m, g, 1-beta1);
// v = beta2*v + (1-beta2) g^2; p -= lr/(1-beta1^t) * m / (sqrt(v)/sqrt(1-beta2^t) + eps), with
// betas (momentum, 0.999), eps 1e-8, wd only on decaying groups. The groups are musgd_group(...,
// use_muon = 0). MuStep.momentum is beta1: the reference's warmup moves only groups that carry a
// "momentum" key, which AdamW's do not, so a caller matching it passes the constant momentum.
// l2 = 1 makes it torch.optim.Adam instead (gelan's optimizer=Adam, train.py smart_optimizer): the
// decay is added to the gradient first, g' = g + wd*p (fmaf, as SGD's), no decoupled decay, then the
// same moments and update with g'.
enum { OPT26_KIND_SGD = 0, OPT26_KIND_ADAMW = 1, OPT26_KIND_ADAM = 2 };   // Backend.optim.opt26_new's kind
typedef struct {
    MuParam *p;          // borrowed, n_params
    int      n_params;
    float   *m, *v;      // exp_avg, exp_avg_sq: packed in parameter order, zeros
    long     steps;      // t of the last step
    int      l2;         // 1: Adam (L2 decay in the gradient), 0: AdamW (decoupled)
} AdamW;

void adamw_init(AdamW *o, MuParam *p, int n_params);
void adamw_free(AdamW *o);
void adamw_step(AdamW *o, const MuStep *st);   // one step of every parameter, then zero its gradient
