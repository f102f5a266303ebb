// comm_nccl.h: Backend.comm.comm_sum between the GPUs of several processes (core/procs/comm.h), over NCCL.
#pragma once
#include <stddef.h>

#include "gpu/device.h"

#ifdef __cplusplus
extern "C" {
#endif

// p[0, n) on dev := its sum over the processes, an all-reduce queued on dev->stream. The first call
// for a GPU makes its communicator (rank 0's NCCL unique id broadcast through the process transport), at
// the same point of every process (core/procs/procs.c sums in lockstep). Returns 0, or -1 when NCCL is not
// used (built without it, libnccl.so.2 absent in any process, or YT_NCCL=0): the caller then sums through
// host memory.
int nccl_comm_sum(Device *dev, float *p, size_t n);
// Backend.comm.comm_sum_pairs (core/spec/backend.h): src's n pairs added, every process's sum of them added in rank
// order into dst[0..1] (device memory), queued on dev->stream (an all-gather, then a one-thread kernel);
// 0, or -1 as nccl_comm_sum.
int nccl_comm_sum_pairs(Device *dev, const double *src, int n, double *dst);
// Backend.comm.comm_sum_begin / comm_sum_end: nccl_comm_sum's all-reduce on a stream of the communicator's own,
// forked from dev->stream's work so far (n = 0: only whether NCCL is used), and dev->stream made to wait
// for every one begun since the last end.
int nccl_comm_sum_begin(Device *dev, float *p, size_t n);
void nccl_comm_sum_end(Device *dev);
// 1 when libnccl.so.2 opens here (tests), and the all-reduces queued so far.
int nccl_available(void);
long nccl_calls(void);
// Abort every communicator (ncclCommAbort): a failing process's last act before it ends the others.
void nccl_abort_all(void);

#ifdef __cplusplus
}
#endif
