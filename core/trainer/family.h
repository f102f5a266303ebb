// family.h: what differs between the model families the trainer trains, as one table the step
// (core/trainer/trainer.c) calls without asking which family it has: gelan and yolov9 (DDetect heads, a dual
// head's auxiliary branch, SGD; core/trainer/family_gelan.c) and YOLO26 (the end-to-end head's two branches
// weighted by ProgLoss, MuSGD/AdamW/SGD over eight groups; core/trainer/family_yolo26.c). Checkpoints need no entry:
// both families keep their optimizer state in t->sgd's buffer (YOLO26: its whole block, n_train its
// size) and the step count in t->sgd.steps, which core/train/checkpoint.c saves as they are.
// Legend: tss the local target-score sums (main, aux) in the trainer's backend memory; norm t->scal[SC_NORM..].
#pragma once
#include "cfg/config.h"
#include "core/spec/loss.h"

struct Trainer;

typedef struct Family {
    const char *name;            // "gelan", "yolo26"
    double host_states;          // copies of the state the CPU's memory check counts (weights, optimizer, EMA)
    // What the family refuses in cfg (-1 with a message naming the key and what to use instead).
    int  (*check)(const Config *cfg, Err *err);
    // Its loss work on the trainer's backend (master and replicas); -1 when a device has no room.
    int  (*init)(struct Trainer *t, const Config *cfg, Err *err);
    // The master's optimizer over t->slots for nb batches per epoch: state, schedule (t->sgd, t->sched).
    void (*optimizer_init)(struct Trainer *t, const Config *cfg, int nb);
    void (*free)(struct Trainer *t);
    // The step's loss phases, queued: the assignment (local sums into tss[0], tss[1]), the loss
    // normalised by t->scal[SC_NORM..] with its gradient into the head maps, and the items after the
    // step's wait (t->items_mult: the batch_mult of the compute).
    int  (*assign)(struct Trainer *t, double *tss, Err *err);
    void (*compute)(struct Trainer *t, double batch_mult);
    void (*items)(struct Trainer *t, LossOut *out);
    // The optimizer part of iteration i of `epoch` (schedule; when it steps: clip, step, EMA); t->lr
    // the rates logged. lr_at: those rates without advancing the schedule (a resumed run).
    void (*update)(struct Trainer *t, int epoch, int i);
    void (*lr_at)(struct Trainer *t, int epoch, int i);
    // An epoch ended, on one device (trainer_end_epoch, core/train/step.h, runs it on the master, then each replica).
    void (*end_epoch)(struct Trainer *t);
} Family;

extern const Family family_gelan;    // core/trainer/family_gelan.c
extern const Family family_yolo26;   // core/trainer/family_yolo26.c
