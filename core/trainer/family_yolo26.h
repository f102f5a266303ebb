// family_yolo26.h: the YOLO26 side of the trainer (yolo26.md sections 2.2 and 3): the end-to-end loss of both
// branches weighted by ProgLoss, the optimizer `optimizer=` picks over the reference's eight parameter
// groups, and each group's warmup and schedule. They are the YOLO26 row of the family table (core/trainer/family.h).
// Legend: N batch; br branch (L26_O2M, L26_O2O); groups MU_* (core/spec/musgd.h); ni = i + nb*epoch.
#pragma once
#include "core/spec/loss26.h"
#include "core/spec/musgd.h"
#include "core/trainer/trainer.h"

typedef enum { OPT26_MUSGD, OPT26_ADAMW, OPT26_SGD, OPT26_ADAM } Opt26Kind;

// What optimizer=auto|MuSGD|AdamW|Adam|SGD resolves to (BaseTrainer.build_optimizer at 8.4.14: Adam is
// torch.optim.Adam(groups, lr, betas=(momentum, 0.999)) over the same eight groups as AdamW, the decayed
// groups' weight_decay added to the gradient (L2), none on BN weights and biases).
typedef struct {
    Opt26Kind kind;
    const char *name;        // "MuSGD", "AdamW", "Adam", "SGD"
    double lr0, momentum;    // the constructor's: auto's own, else hyp lr0 and momentum
    double warmup_bias_lr;   // auto forces 0
    int    use_muon;         // MuSGD: every ndim >= 2 parameter goes to a Muon group
} Opt26Choice;

typedef struct Train26 {
    Opt26Choice opt;
    double    muon, sgd;            // MuSGD's weights (0.2, 1.0)
    MuParam  *params;  int n_params;   // every trainable tensor, in model order
    int       group_count[MU_GROUPS];
    size_t    group_floats[MU_GROUPS];
    // The optimizer's state as one block, so a checkpoint saves it as it saves SGD's momentum
    // (Trainer.sgd.buf / n_train point at it): MuSGD [s: every param | m: Muon params, packed],
    // AdamW and Adam [m | v], SGD [s]. n_opt floats are saved; the block may be longer (a GPU's m is n_all).
    float    *state;  size_t n_opt;
    void     *optimizer;            // the backend's optimizer over `state` (Backend.optim.opt26_new)
    // loss
    int       prog_updates;         // ProgLoss updates (epoch ends) of this process: not checkpointed
    int       epochs;
    Loss26Weights wt;               // gains and the branch weights in force
    void     *loss;                 // the backend's loss work (Backend.loss.loss26_new)
    Loss26Batch lb;                 // the batch of the iteration in progress
    Head26    grad[L26_BRANCHES];
    double    lr[MU_GROUPS];        // the last iteration's learning rates
} Train26;

// Refuse what YOLO26 cannot train with: reduce=sharded and loss_on=device0 split or gather the
// gelan-s SGD and loss. -1 with a message saying what to use instead.
int  train26_check(const Config *cfg, Err *err);
// The loss side for t->m (end2end), master or replica: t->y26. -1 when a GPU lacks the memory.
int  train26_init(Trainer *t, const Config *cfg, Err *err);
// The master's optimizer (after train26_init and the trainer's slots): resolves optimizer= (a YOLO26
// config left at the default SGD means the reference's default, auto) for nb batches per epoch of
// cfg->batch images, builds the groups, takes the state block, points t->sgd at it (clipping, and
// checkpoints), sets t->sched (accumulate, when to step). Prints the choice as the reference does.
void train26_optimizer_init(Trainer *t, const Config *cfg, int nb);
void train26_free(Trainer *t);

Opt26Choice train26_choose(const Config *cfg, long n_images, int nc);
// The group of parameter p of a model (musgd_group with the model's names and kinds).
int  train26_group(const ParamInfo *p, int use_muon);
// Every trainable tensor of m as MuParam (pointers into m->state and m->grad), in model order, into
// out (room for m->n_params); returns the count.
int  train26_params(const Model *m, int use_muon, MuParam *out);

// The phases core/trainer/trainer.c runs (multi-device: on every device). tss: main = the one-to-one branch's
// target-score sum, aux = the one-to-many one's, so core/devices/multi.c sums them over devices unchanged.
// out: box, cls, dfl are the one-to-one branch's items (the reference logs L_o2o), total the whole
// weighted loss; tss, n_fg the one-to-one branch's, tss_aux, n_fg_aux the one-to-many's.
int  train26_assign(Trainer *t, double *tss, Err *err);    // tss[0] one-to-one, tss[1] one-to-many (t's memory)
void train26_compute(Trainer *t, double batch_mult);       // normalised by t->scal[SC_NORM..] (same order)
void train26_items(Trainer *t, LossOut *out);              // after the step's wait

// The learning rates and momentum of iteration i of `epoch` (yolo26.md 3.5): warmup over ni <= nw
// from warmup_bias_lr (bias groups) or 0 to initial_lr*lf(epoch), momentum from warmup_momentum to
// hyp.momentum (kept after warmup; AdamW's beta1 stays the constructor's); wd the nominal one.
MuStep train26_schedule(const Train26 *y, const OptSchedule *s, int epoch, int i);
// The optimizer part of an iteration: schedule; when it steps: clip to norm 10, the optimizer
// step (zeroes the gradients), EMA. t->lr gets [bias, weight (Muon), BN] group rates.
void train26_update(Trainer *t, int epoch, int i);
// The learning rates of iteration (epoch, i) into t->lr, the schedule untouched (a resumed run).
void train26_lr_at(Trainer *t, int epoch, int i);
// An epoch ended: one ProgLoss update of t (trainer_end_epoch, core/train/step.h, runs it on every device).
void train26_end_epoch(Trainer *t);


