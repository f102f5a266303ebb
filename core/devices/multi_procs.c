// multi_procs.c: the multi-device driver in a run of several processes (core/procs/procs.h): the step's
// normaliser from every process's target-score sums, and the reduce modes' sums carried across
// processes once each process has reduced its own devices: reduce=device0 sums the master's
// gradients, reduce=sharded each device's shard (every process has the same devices, so the same
// shards); both average the BN running statistics over every device that ran images. The normaliser is
// summed on the devices when the backend carries doubles between processes (NCCL), so the step's end stays
// its one host wait; else (CPU devices, no NCCL) through the host, a second wait.
#include <string.h>

#include "core/devices/multi_impl.h"
#include "core/procs/procs.h"

// Device 0's queue: every device's target-score sums with images (device order, each behind its
// assignment) into its scal[SC_ALL], their sum over every process there by the backend (NCCL), then copied
// into every device's scal[SC_ALL] behind it: no host wait. The host path adds the devices' sums to 0.0
// first, which gives the same doubles (sums of scores are never -0). Returns the batch over every process,
// or -1 (the sums then go through the host) when the backend has no device transport.
static int normaliser_on_devices(Multi *mt, int n) {
    Trainer *m0 = mt->master;
    double *all = m0->scal + SC_ALL;
    int n_all = 0;
    if (!m0->m.be->comm.comm_sum_pairs) return -1;
    m0->m.be->dev.bind(m0->m.be_ctx);
    for (int k = 0; k < mt->n; k++) {
        Job *j = &mt->job[k];
        if (!j->n) continue;
        if (k) mt_wait_for(mt, 0, k, EV_ASSIGNED);
        mt_copy_doubles(mt, m0, all + 2 * n_all++, j->t, j->t->scal + SC_TSS, 2, mt->job[0].stage);
    }
    int N = procs_normaliser_queued(m0, all, n_all, n, all);
    if (N < 0) return -1;
    mt_record(mt, 0, EV_NORM);
    for (int k = 1; k < mt->n; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->dev.bind(t->m.be_ctx);
        mt_wait_for(mt, k, 0, EV_NORM);
        mt_copy_doubles(mt, t, t->scal + SC_ALL, m0, all, 2, mt->job[k].stage);
    }
    m0->m.be->dev.bind(m0->m.be_ctx);
    return N;
}

// After the forward phase: every device's local target-score sums (in device order) plus the other
// processes' into scal[SC_ALL] of every device, and the batch over every process as batch_mult; on the
// devices when the backend carries the sums (NCCL), else through the host (a second host wait).
void mt_procs_normaliser(Multi *mt) {
    double local[2] = { 0, 0 }, global[2];
    int n = 0;
    for (int k = 0; k < mt->n; k++) n += mt->job[k].n;
    if ((mt->batch_mult = normaliser_on_devices(mt, n)) >= 0) return;
    for (int k = 0; k < mt->n; k++) {
        Job *j = &mt->job[k];
        if (!j->n) continue;
        double v[2];
        Trainer *t = j->t;
        t->m.be->dev.bind(t->m.be_ctx);
        t->m.be->dev.download(t->m.be_ctx, (float *)v, (const float *)(t->scal + SC_TSS), 4);   // 2 doubles
        local[0] += v[0];
        local[1] += v[1];
    }
    mt->batch_mult = procs_normaliser(local, n, global);
    for (int k = 0; k < mt->n; k++) {
        Trainer *t = mt->job[k].t;
        t->m.be->dev.bind(t->m.be_ctx);
        t->m.be->dev.upload(t->m.be_ctx, (float *)(t->scal + SC_ALL), (const float *)global, 4);
    }
    mt->master->m.be->dev.bind(mt->master->m.be_ctx);
}

// loss_on=device0: device 0's sums of this process's batch (scal[SC_TSS]) with the others' into
// scal[SC_ALL]; returns the batch over every process.
int mt_procs_normaliser_d0(Multi *mt, int B) {
    Trainer *m0 = mt->master;
    double local[2], global[2];
    int N = procs_normaliser_queued(m0, m0->scal + SC_TSS, 1, B, m0->scal + SC_ALL);
    if (N >= 0) return N;
    m0->m.be->dev.download(m0->m.be_ctx, (float *)local, (const float *)(m0->scal + SC_TSS), 4);
    N = procs_normaliser(local, B, global);
    m0->m.be->dev.upload(m0->m.be_ctx, (float *)(m0->scal + SC_ALL), (const float *)global, 4);
    return N;
}

// loss_on=device0 with no image in this process: zero sums; returns the batch over every process.
int mt_procs_normaliser_empty(Multi *mt) {
    Trainer *m0 = mt->master;
    double zero[2] = { 0, 0 }, global[2];
    int N = procs_normaliser_queued(m0, m0->scal + SC_TSS, 0, 0, m0->scal + SC_ALL);   // no pair: zeros
    if (N >= 0) return N;
    N = procs_normaliser(zero, 0, global);
    m0->m.be->dev.upload(m0->m.be_ctx, (float *)(m0->scal + SC_ALL), (const float *)global, 4);   // as the others hold
    return N;
}

// After this process's reduction (workers parked): the sums across processes.
void mt_procs_reduce(Multi *mt) {
    int used = mt_used_devices(mt);
    if (!mt->sharded) {
        Trainer *m0 = mt->master;
        Model *m = &m0->m;
        m->be->dev.bind(m->be_ctx);
        if (mt->procs_overlap) m->be->comm.comm_sum_end(m->be_ctx);   // the buckets' sums, begun by mt_gather's pulls
        procs_mean_buffers(m0, m->state + m->buffers, m->n_buffers, used);
        if (mt->procs_reduce && !mt->procs_overlap) procs_sum(m0, m->grad, m->buffers);
        return;
    }
    for (int k = 0; k < mt->n; k++) {              // the same order in every process
        Shard *sh = &mt->shard[k];
        Trainer *t = mt->job[k].t;
        Model *m = &t->m;
        size_t blo = sh->lo > m->buffers ? sh->lo : m->buffers;
        size_t bhi = sh->hi < m->buffers + m->n_buffers ? sh->hi : m->buffers + m->n_buffers;
        size_t ghi = sh->hi < m->buffers ? sh->hi : m->buffers;
        m->be->dev.bind(m->be_ctx);
        procs_mean_buffers(t, m->state + blo, bhi > blo ? bhi - blo : 0, used);
        if (mt->procs_reduce) {
            procs_sum(t, m->grad + sh->lo, ghi > sh->lo ? ghi - sh->lo : 0);
            if (sh->has_sgd) m->be->optim.grad_sumsq_to(m->be_ctx, sh->sgd.prep, t->scal + SC_SUMSQ);   // of the sum
        }
        mt_record(mt, k, EV_REDUCED);             // the update phase waits for this too
    }
    mt->master->m.be->dev.bind(mt->master->m.be_ctx);
}

// reduce=sharded across processes needs the same shards everywhere: as many devices in every process.
int mt_procs_check(Multi *mt, Err *err) {
    int P = comm_size(), mine[2] = { mt->n, (int)mt->master->m.n_state }, all[2 * MULTI_MAX * 64];
    if (P > MULTI_MAX * 64) return err_set(err, "%d processes: at most %d", P, MULTI_MAX * 64);
    comm_allgather(mine, all, sizeof mine);
    for (int r = 0; r < P; r++)
        if (mt->sharded && all[2 * r] != mt->n)
            return err_set(err, "reduce=sharded over %d processes needs as many devices in each (the shards are the same "
                           "in every process): rank %d has %d, rank %d %d; use reduce=device0 or the same device count",
                           P, r, all[2 * r], comm_rank(), mt->n);
    return 0;
}
