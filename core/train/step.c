// step.c: the step over this run's devices and processes (core/train/step.h): the choice between one device
// alone (the Trainer's phases, core/trainer/trainer.c), several devices in this process (core/devices/multi.c)
// and a device of several processes (core/procs/procs.c), and the start and the epoch's end over them.
#include "core/train/step.h"

#include "core/devices/multi.h"
#include "core/procs/procs.h"
#include "core/trainer/family.h"

int trainer_init_devices(Trainer *t, const Config *cfg, int nb, const DeviceList *devs, Err *err) {
    if (cfg->sync_bn && procs_active() && devs->n > 1 && !comm_threads_serialized())
        return err_set(err, "sync_bn=1 with %d devices in each of several processes needs an MPI with "
                            "MPI_THREAD_SERIALIZED (the device that completes a BN sum calls it); this one has less: "
                            "run one device per process or leave sync_bn off", devs->n);
    if (devs->n == 1 && cfg->sync_bn && !procs_active())
        printf("sync_bn=1: one device's BN already normalises over the whole batch; nothing to synchronise\n");
    if (devs->n == 1) {
        if (trainer_init(t, cfg, nb, devs->gpu[0], err)) return -1;
        t->sync_bn = cfg->sync_bn && procs_active();
        return 0;
    }
    int micro = multi_plan_micro(cfg->split, cfg->batch, devs->n, err);
    if (micro < 0) return -1;
    if (trainer_init_master(t, cfg, nb, devs->gpu[0], micro, err)) return -1;
    if (multi_init(t, cfg, devs, micro, err)) { trainer_free(t); return -1; }
    return 0;
}

int trainer_step(Trainer *t, int n, int S, const float *targets, int nt, int epoch, int i,
                 LossOut *out, Err *err) {
    return trainer_step_batch(t, t->input_u8 ? NULL : t->input, t->input_u8, n, S, targets, nt, epoch, i, out, err);
}

int trainer_step_batch(Trainer *t, const float *images, const uint8_t *images_u8, int n, int S, const float *targets,
                       int nt, int epoch, int i, LossOut *out, Err *err) {
    if (t->multi) {
        int rc = multi_step(t->multi, images, images_u8, n, S, targets, nt, epoch, i, out, err);
        if (rc && procs_active()) comm_abort(1, "%s", err->msg);   // the other processes wait on this one
        return rc;
    }
    if (procs_active()) return procs_step_one(t, images, images_u8, n, S, targets, nt, epoch, i, out, err);
    if (trainer_phase_forward(t, n, S, images, images_u8, targets, nt, err)) {
        t->m.be->dev.sync(t->m.be_ctx);                    // the forward read the batch: done before it goes back
        return -1;
    }
    trainer_phase_backward(t, n, t->scal + SC_TSS, 1, n);
    trainer_update(t, epoch, i);
    t->m.be->dev.sync(t->m.be_ctx);                        // the step's one host wait
    trainer_read_times(t, NULL);
    trainer_phase_items(t, out);
    return 0;
}

void trainer_end_epoch(Trainer *t) {
    t->fam->end_epoch(t);
    if (!t->multi) return;
    for (int k = 1; k < multi_count(t->multi); k++) {
        Trainer *r = multi_replica_mut(t->multi, k);
        r->fam->end_epoch(r);
    }
}
