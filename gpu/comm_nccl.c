// comm_nccl.c: the gradient sums of several processes between their GPUs over NCCL (gpu/comm_nccl.h).
// NCCL is opened at run time (dlopen libnccl.so.2, as cuDNN), so a binary built with it runs where the
// library is absent (the sums then go through host memory and MPI). NVLink multicast (NVLS) is left to
// NCCL's settings; the tests set NCCL_NVLS_ENABLE=0.
//
// The watchdog: from the first communicator on, the device's host waits poll (device_set_wait_watch) and
// every 0.1 s ask each communicator for NCCL's asynchronous error; on one, or when a wait has lasted
// YT_NCCL_TIMEOUT seconds (600; 0: forever), the process names itself and what happened, aborts its
// communicators and ends every rank (comm_abort: MPI_Abort), so no rank hangs behind a peer that died
// under a launcher that does not end the others.
#include "gpu/comm_nccl.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/procs/comm.h"
#include "core/base/switches.h"
#include "gpu/optim.h"

#ifdef USE_NCCL
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

static struct {
    ncclResult_t (*get_id)(ncclUniqueId *);
    ncclResult_t (*init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*abort_comm)(ncclComm_t);
    ncclResult_t (*async_error)(ncclComm_t, ncclResult_t *);
    const char *(*error_string)(ncclResult_t);
} fn;

static int loaded = -2;          // -2: not tried; 1: opened here; 0: absent
static int agreed = -2;          // -2: not asked; 1: every process uses NCCL; 0: none does
static long calls;
enum { MAX_COMMS = 64 };
// A GPU's communicator; its pairs' buffer: this process's pair, then every process's (2 + 2P doubles); the
// stream its overlapped sums run on, beside the device's, with the events that fork (ready) and join (done)
// them, and whether sums were begun since the last join.
typedef struct {
    int          gpu;
    ncclComm_t   comm;
    double      *pairs;
    cudaStream_t side;
    cudaEvent_t  ready, done;
    int          open;
} Comm;
static Comm comms[MAX_COMMS];
static int n_comms;

static int load(void) {
    if (loaded != -2) return loaded;
    loaded = 0;
    if (switch_is(SW_NCCL, "0")) return 0;
    static const char *const names[] = { "libnccl.so.2", "libnccl.so" };
    void *h = NULL;
    for (int i = 0; i < 2 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    *(void **)&fn.get_id = dlsym(h, "ncclGetUniqueId");
    *(void **)&fn.init_rank = dlsym(h, "ncclCommInitRank");
    *(void **)&fn.all_reduce = dlsym(h, "ncclAllReduce");
    *(void **)&fn.all_gather = dlsym(h, "ncclAllGather");
    *(void **)&fn.abort_comm = dlsym(h, "ncclCommAbort");
    *(void **)&fn.async_error = dlsym(h, "ncclCommGetAsyncError");   // NCCL 2.4 and later
    *(void **)&fn.error_string = dlsym(h, "ncclGetErrorString");
    loaded = fn.get_id && fn.init_rank && fn.all_reduce && fn.all_gather && fn.abort_comm && fn.async_error &&
             fn.error_string;
    return loaded;
}

int nccl_available(void) { return load(); }
long nccl_calls(void) { return calls; }

// Every process must take the same road: NCCL only when it opens in all of them (asked once).
static int agree(void) {
    if (agreed != -2) return agreed;
    double ok = load();
    comm_sum_doubles(&ok, 1);
    agreed = (int)ok == comm_size();
    if (!agreed && comm_rank() == 0)
        printf("note: NCCL (libnccl.so.2) is not available in every process: the GPUs' sums go through host memory "
               "and MPI\n");
    return agreed;
}

// ---- the watchdog ----

static double wait_limit = -1;   // YT_NCCL_TIMEOUT's seconds (0: forever), read with the first communicator
static atomic_int firing;        // one thread ends the process; the others keep waiting

// Should ncclCommAbort itself never return, the process still ends.
static void *backstop(void *arg) {
    sleep(15);
    fprintf(stderr, "yolotrain: ncclCommAbort did not return in 15 s; ending this process\n");
    fflush(stderr);
    _exit(1);
    return arg;
}

static void watch(Device *dev, double waited_s) {
    char what[512] = "";
    const char *nccl_says = "no error reported";
    for (int i = 0; i < n_comms; i++) {
        ncclResult_t st = ncclSuccess, r = fn.async_error(comms[i].comm, &st);
        if (r != ncclSuccess) st = r;
        if (st == ncclSuccess) continue;
        nccl_says = fn.error_string(st);
        snprintf(what, sizeof what, "NCCL reported an error on GPU %d's communicator (%s) while the host waited "
                 "%.1f s for GPU %d", comms[i].gpu, nccl_says, waited_s, dev->id);
        break;
    }
    if (!what[0] && comm_wait_expired(waited_s, wait_limit))
        snprintf(what, sizeof what, "no progress in the GPU sums of GPU %d for %.0f s (YT_NCCL_TIMEOUT=%g; NCCL: "
                 "%s): another process has probably died or hangs", dev->id, waited_s, wait_limit, nccl_says);
    if (!what[0] || atomic_exchange(&firing, 1)) return;
    pthread_t t;
    if (!pthread_create(&t, NULL, backstop, NULL)) pthread_detach(t);
    if (comm_size() > 1) comm_abort(1, "%s", what);   // "rank R of P (host H): ...; stopping every rank"
    comm_abort(1, "rank 0 of 1 on host %s: %s; stopping", comm_host(), what);
}

static Comm *comm_for(Device *dev) {
    for (int i = 0; i < n_comms; i++)
        if (comms[i].gpu == dev->id) return &comms[i];
    if (n_comms == MAX_COMMS) comm_abort(1, "NCCL: more than %d GPUs in one process", MAX_COMMS);
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t r = ncclSuccess;
    if (comm_rank() == 0) r = fn.get_id(&id);
    if (r != ncclSuccess) comm_abort(1, "NCCL: ncclGetUniqueId: %s", fn.error_string(r));
    comm_bcast(&id, sizeof id);
    ncclComm_t c;
    checkCuda(cudaSetDevice(dev->id));
    r = fn.init_rank(&c, comm_size(), id, comm_rank());
    if (r != ncclSuccess) comm_abort(1, "NCCL: ncclCommInitRank on GPU %d: %s", dev->id, fn.error_string(r));
    double *pairs = device_try_alloc(sizeof(double) * 2 * (1 + (size_t)comm_size()));   // once per GPU
    if (!pairs) comm_abort(1, "NCCL: no room on GPU %d for the normaliser's %d pairs of doubles", dev->id, comm_size());
    comms[n_comms] = (Comm){ dev->id, c, pairs, NULL, NULL, NULL, 0 };
    int least, greatest;                          // the sums' stream first when blocks free up (as DDP's)
    checkCuda(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    checkCuda(cudaStreamCreateWithPriority(&comms[n_comms].side, cudaStreamNonBlocking, greatest));
    checkCuda(cudaEventCreateWithFlags(&comms[n_comms].ready, cudaEventDisableTiming));
    checkCuda(cudaEventCreateWithFlags(&comms[n_comms].done, cudaEventDisableTiming));
    comm_set_abort_hook(nccl_abort_all);          // a failing process aborts its communicators first
    if (wait_limit < 0) {
        Err err;
        if (comm_wait_limit(switch_str(SW_NCCL_TIMEOUT), &wait_limit, &err)) comm_abort(1, "%s", err.msg);
    }
    device_set_wait_watch(watch);                 // the host waits poll from now on
    return &comms[n_comms++];
}

int nccl_comm_sum(Device *dev, float *p, size_t n) {
    if (!agree()) return -1;
    ncclResult_t r = fn.all_reduce(p, p, n, ncclFloat, ncclSum, comm_for(dev)->comm, dev->stream);
    if (r != ncclSuccess) {
        comm_abort(1, "NCCL: all-reduce of %zu floats on GPU %d: %s", n, dev->id, fn.error_string(r));
    }
    calls++;
    return 0;
}

// This process's pair (src's pairs added on the GPU) to every process, then the P pairs added in rank
// order on the GPU: comm_sum_doubles's order, so the same doubles as the host path, on every process.
int nccl_comm_sum_pairs(Device *dev, const double *src, int n, double *dst) {
    if (!agree()) return -1;
    Comm *c = comm_for(dev);
    pair_sum_gpu(dev, src, n, c->pairs);
    ncclResult_t r = fn.all_gather(c->pairs, c->pairs + 2, 2, ncclFloat64, c->comm, dev->stream);
    if (r != ncclSuccess) comm_abort(1, "NCCL: all-gather of the normaliser on GPU %d: %s", dev->id, fn.error_string(r));
    pair_sum_gpu(dev, c->pairs + 2, comm_size(), dst);
    calls++;
    return 0;
}

// The all-reduce on the communicator's own stream, forked from dev->stream's work so far: NCCL's kernel
// runs beside the backward's. Every sum of the step is begun and joined before the next collective on the
// device's stream (the BN buffers' sum), so each communicator's operations run in one order everywhere.
int nccl_comm_sum_begin(Device *dev, float *p, size_t n) {
    if (!agree()) return -1;
    if (!n) return 0;
    Comm *c = comm_for(dev);
    checkCuda(cudaEventRecord(c->ready, dev->stream));
    checkCuda(cudaStreamWaitEvent(c->side, c->ready, 0));
    ncclResult_t r = fn.all_reduce(p, p, n, ncclFloat, ncclSum, c->comm, c->side);
    if (r != ncclSuccess) comm_abort(1, "NCCL: all-reduce of %zu floats on GPU %d: %s", n, dev->id, fn.error_string(r));
    c->open = 1;
    calls++;
    return 0;
}

void nccl_comm_sum_end(Device *dev) {
    for (int i = 0; i < n_comms; i++) {
        Comm *c = &comms[i];
        if (c->gpu != dev->id || !c->open) continue;
        checkCuda(cudaEventRecord(c->done, c->side));
        checkCuda(cudaStreamWaitEvent(dev->stream, c->done, 0));
        c->open = 0;
    }
}

void nccl_abort_all(void) {
    device_set_wait_watch(NULL);
    for (int i = 0; i < n_comms; i++) fn.abort_comm(comms[i].comm);
    n_comms = 0;
}
#else
int nccl_comm_sum(Device *dev, float *p, size_t n) { return -1; }
int nccl_comm_sum_pairs(Device *dev, const double *src, int n, double *dst) { return -1; }
int nccl_comm_sum_begin(Device *dev, float *p, size_t n) { return -1; }
void nccl_comm_sum_end(Device *dev) {}
int nccl_available(void) { return 0; }
long nccl_calls(void) { return 0; }
void nccl_abort_all(void) {}
#endif
