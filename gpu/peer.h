// peer.h: what the multi-device driver (core/devices/multi.c) needs from CUDA beyond the backend table:
// peer access with a self-test, buffers outside the memory plan's arenas (shards, device 0's
// batch outputs), and the first pending error of a device. Includable from C.
#pragma once
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef USE_CUDA
// Enable peer access between every pair of the n GPUs `ids` that supports it, then copy a known
// pattern ids[0] -> ids[k] -> ids[0] for every k and compare it on the host. Returns 1 when every
// pair has peer access and the pattern came back intact, 0 when copies must be staged through
// host memory (why: in `report`, one line, for the start-up plan). An id named twice (two devices on
// one GPU, YT_TEST_SAME_GPU) needs no access: cudaMemcpyPeer between equal ids is a device-to-device copy.
int    peer_setup(const int *ids, int n, char *report, size_t size);
// n floats of GPU `id`'s memory, zeroed; NULL when it has no room. Called at start only.
float *peer_alloc(int id, size_t n_floats);
void   peer_free(int id, float *p);
// Give `dev` an optimizer arena of `bytes` (one cudaMalloc, freed by device_free) when its plan
// gave it none: a replica that owns a shard under reduce=sharded. 0, or -1 when it does not fit.
int    peer_optim_arena(void *dev, size_t bytes);
// 0, or -1 with the pending CUDA error of the calling thread's device as text (cleared if it can be).
int    peer_check(char *msg, size_t size);
#endif

#ifdef __cplusplus
}
#endif
