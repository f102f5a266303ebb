// comm.c: the processes of a run (core/procs/comm.h): which transport, and the one-process case.
#include "core/procs/comm.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef USE_MPI
extern const CommOps comm_mpi;   // core/procs/comm_mpi.c
static const CommOps *const BUILT = &comm_mpi;
#else
static const CommOps *const BUILT = NULL;
#endif

static const CommOps *ops;       // NULL: one process
static void (*abort_hook)(void);

void comm_set_abort_hook(void (*fn)(void)) { abort_hook = fn; }
static int rank_, size_ = 1, inited;
static char host_[64];

int comm_built(void) { return BUILT != NULL; }

// A launcher's count of processes above 1 (one process, as under an sbatch script without srun, never
// starts MPI: a singleton MPI_Init may look for a launcher that is not there).
int comm_launched(void) {
    static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS" };
    for (size_t k = 0; k < sizeof vars / sizeof vars[0]; k++)
        if (getenv(vars[k]) && atoi(getenv(vars[k])) > 1) return 1;
    return 0;
}

int comm_init(Err *err) {
    if (inited) return 0;
    inited = 1;
    if (gethostname(host_, sizeof host_)) snprintf(host_, sizeof host_, "?");
    host_[sizeof host_ - 1] = 0;
    if (!BUILT || !comm_launched()) return 0;
    int r, s;
    if (BUILT->init(&r, &s, host_, sizeof host_, err)) return -1;
    ops = BUILT;
    rank_ = r;
    size_ = s;
    return 0;
}

void comm_finalize(void) {
    if (ops) ops->finalize();
    ops = NULL;
    rank_ = 0;
    size_ = 1;
    inited = 0;
}

int comm_rank(void) { return rank_; }
int comm_size(void) { return size_; }
int comm_threads_serialized(void) { return !ops || size_ < 2 || ops->serialized(); }
const char *comm_host(void) {
    if (!host_[0] && gethostname(host_, sizeof host_)) snprintf(host_, sizeof host_, "?");
    return host_;
}

void comm_sum_floats(float *p, size_t n) { if (ops && size_ > 1 && n) ops->sum_floats(p, n); }

// As floats they would lose bits: gathered whole, then added in rank order on every rank.
void comm_sum_doubles(double *p, size_t n) {
    if (!ops || size_ < 2 || !n) return;
    double *all = xmalloc(sizeof(double) * n * size_);
    ops->allgather(p, all, sizeof(double) * n);
    for (size_t i = 0; i < n; i++) {
        double s = all[i];
        for (int r = 1; r < size_; r++) s += all[(size_t)r * n + i];
        p[i] = s;
    }
    free(all);
}

void comm_allgather(const void *mine, void *all, size_t bytes) {
    if (ops && size_ > 1) ops->allgather(mine, all, bytes);
    else memcpy(all, mine, bytes);
}

void *comm_allgatherv(const void *mine, size_t n, size_t *bytes) {
    int P = ops ? size_ : 1;
    uint64_t n64 = n, *all64 = xmalloc(sizeof(uint64_t) * P);   // the counts first
    comm_allgather(&n64, all64, sizeof n64);
    size_t total = 0;
    for (int r = 0; r < P; r++) bytes[r] = all64[r], total += bytes[r];
    free(all64);
    char *all = xmalloc(total + 1);
    if (ops && size_ > 1) ops->allgatherv(mine, all, bytes);
    else if (n) memcpy(all, mine, n);
    return all;
}

void comm_bcast(void *p, size_t bytes) { if (ops && size_ > 1) ops->bcast(p, bytes); }
void comm_barrier(void) { if (ops && size_ > 1) ops->barrier(); }

int comm_wait_limit(const char *env, double *limit_s, Err *err) {
    *limit_s = 600;
    if (!env) return 0;
    char *end;
    double v = strtod(env, &end);
    while (*end == ' ') end++;
    if (end == env || *end || !(v >= 0) || v > 1e9) {
        err_set(err, "YT_NCCL_TIMEOUT=%s: not a number of seconds (0 or more; 0 waits forever)", env);
        return -1;
    }
    *limit_s = v;
    return 0;
}

int comm_wait_expired(double waited_s, double limit_s) { return limit_s > 0 && waited_s >= limit_s; }

void comm_abort(int code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (size_ > 1) fprintf(stderr, "yolotrain: rank %d of %d (host %s): %s; stopping every rank\n", rank_, size_,
                           comm_host(), msg);
    else fprintf(stderr, "yolotrain: %s\n", msg);
    fflush(stderr);
    fflush(stdout);
    void (*hook)(void) = abort_hook;
    abort_hook = NULL;                             // once, even if the hook fails into here again
    if (hook) hook();
    if (ops && size_ > 1) ops->abort(code);
    exit(code);
}
