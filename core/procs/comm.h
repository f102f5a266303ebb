// comm.h: the processes of one run (core/README.md). A run started by mpirun or srun is P
// processes, each with today's thread-per-device driver over its own devices (core/devices/multi.h); they
// join through a small transport: rank and size, a sum of floats every rank gets bit for bit the
// same, a gather of a few bytes from each rank, a broadcast from rank 0, and an abort that stops
// every rank. core/procs/comm_mpi.c implements it over MPI (built when the Makefile finds mpicc, -DUSE_MPI)
// and is used only when a launcher started several processes (OMPI_COMM_WORLD_SIZE, PMI_SIZE or
// SLURM_STEP_NUM_TASKS above 1); otherwise, or without MPI at build time, the run is one process (rank
// 0 of 1) and nothing here does anything. Device buffers reach the transport through the backend's
// comm_sum when it has one (NCCL, gpu/), else through host memory (core/procs/procs.c).
#pragma once
#include <stddef.h>

#include "core/base/util.h"

typedef struct {
    const char *name;                                     // "mpi"
    int  (*init)(int *rank, int *size, char *host, size_t host_size, Err *err);
    void (*finalize)(void);
    // every rank: p[i] := sum over ranks of p[i], in rank order (the same floats on every rank)
    void (*sum_floats)(float *p, size_t n);
    // all (size x bytes) := every rank's `mine`, in rank order
    void (*allgather)(const void *mine, void *all, size_t bytes);
    // all := every rank's `mine` (bytes[r] from rank r, any sizes), back to back in rank order
    void (*allgatherv)(const void *mine, void *all, const size_t *bytes);
    void (*bcast)(void *p, size_t bytes);                 // from rank 0
    void (*barrier)(void);
    void (*abort)(int code) __attribute__((noreturn));    // every rank ends
    int  (*serialized)(void);                             // 1: any thread may call, one at a time
} CommOps;

// Join the other processes when a launcher started several and the build has MPI; 0, or -1 with err
// (MPI there but failing to start). Idempotent.
int  comm_init(Err *err);
void comm_finalize(void);
int  comm_rank(void);             // 0 without MPI
int  comm_size(void);             // 1 without MPI
const char *comm_host(void);      // this process's host name
int  comm_built(void);            // 1 when this yolotrain was built with MPI
// 1 when a launcher's variables say this process is one of several (whether or not MPI is built in)
int  comm_launched(void);
// 1 when a thread other than the host thread may call the transport, one thread at a time (MPI_THREAD_SERIALIZED:
// sync_bn=1's sums of several devices per process); one process: 1.
int  comm_threads_serialized(void);
void comm_sum_floats(float *p, size_t n);
void comm_sum_doubles(double *p, size_t n);   // in rank order, the same doubles on every rank
void comm_allgather(const void *mine, void *all, size_t bytes);
// Every rank's n bytes at mine (n may differ between ranks), back to back in rank order, in a new buffer
// (free it) that every rank gets; bytes (comm_size() of them) receives each rank's n. One process: a copy.
void *comm_allgatherv(const void *mine, size_t n, size_t *bytes);
void comm_bcast(void *p, size_t bytes);
void comm_barrier(void);
// Print "yolotrain: rank R (host H): MESSAGE" on stderr and end every rank (MPI_Abort, after the hook
// below); one process: exit(code).
void comm_abort(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
// A device transport's last act before comm_abort ends the processes (NCCL: ncclCommAbort of its
// communicators, so no GPU is left inside a collective); NULL: none.
void comm_set_abort_hook(void (*fn)(void));
// The watchdog of a device transport's collectives (gpu/comm_nccl.c): the seconds a host wait behind them
// may last before the process ends every rank, from YT_NCCL_TIMEOUT's text `env` (NULL: unset): 600 when
// unset (PyTorch's NCCL default), 0 = wait forever. Returns 0, or -1 with err naming the value.
int  comm_wait_limit(const char *env, double *limit_s, Err *err);
// 1 when a wait of waited_s seconds has passed limit_s (0: never).
int  comm_wait_expired(double waited_s, double limit_s);
