// peer.cu: peer access between the GPUs of a run, checked by a round trip of a known pattern, and
// the few buffers the multi-device driver allocates outside the arenas (see peer.h).
// Legend: n floats; ids are CUDA device ordinals.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/device.h"
#include "gpu/peer.h"

enum { TEST_FLOATS = 1 << 16 };   // 256 KB: crosses more than one page of a peer mapping

static int enable_pair(int a, int b) {
    int ok = 0;
    if (cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || !ok) return 0;
    checkCuda(cudaSetDevice(a));
    cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();   // fine: enabled before
    else if (e != cudaSuccess) { cudaGetLastError(); return 0; }
    return 1;
}

// ids[0] -> ids[k] -> ids[0]; 1 when the pattern comes back unchanged
static int round_trip(int id0, int idk, const float *pattern, float *back) {
    float *a, *b, *c;
    checkCuda(cudaSetDevice(id0));
    checkCuda(cudaMalloc(&a, TEST_FLOATS * sizeof(float)));
    checkCuda(cudaMalloc(&c, TEST_FLOATS * sizeof(float)));
    checkCuda(cudaSetDevice(idk));
    checkCuda(cudaMalloc(&b, TEST_FLOATS * sizeof(float)));
    checkCuda(cudaMemcpy(a, pattern, TEST_FLOATS * sizeof(float), cudaMemcpyHostToDevice));
    checkCuda(cudaMemcpyPeer(b, idk, a, id0, TEST_FLOATS * sizeof(float)));
    checkCuda(cudaMemcpyPeer(c, id0, b, idk, TEST_FLOATS * sizeof(float)));
    checkCuda(cudaMemcpy(back, c, TEST_FLOATS * sizeof(float), cudaMemcpyDeviceToHost));
    checkCuda(cudaFree(b));
    checkCuda(cudaSetDevice(id0));
    checkCuda(cudaFree(a));
    checkCuda(cudaFree(c));
    return !memcmp(pattern, back, TEST_FLOATS * sizeof(float));
}

int peer_setup(const int *ids, int n, char *report, size_t size) {
    int access = 1, intact = 1, len = 0;
    for (int a = 0; a < n; a++)   // two devices on one GPU (a test hook) copy within it: no access to enable
        for (int b = 0; b < n; b++)
            if (ids[a] != ids[b] && !enable_pair(ids[a], ids[b])) access = 0;
    float *pattern = (float *)xmalloc(TEST_FLOATS * sizeof(float)), *back = (float *)xmalloc(TEST_FLOATS * sizeof(float));
    for (int i = 0; i < TEST_FLOATS; i++) pattern[i] = (float)i * 0.5f - 1000.0f;
    for (int k = 1; k < n; k++)
        if (!round_trip(ids[0], ids[k], pattern, back)) {
            intact = 0;
            len += snprintf(report + len, len < (int)size ? size - len : 0, "GPU %d -> %d -> %d corrupted the test "
                            "pattern; ", ids[0], ids[k], ids[0]);
        }
    free(pattern); free(back);
    checkCuda(cudaSetDevice(ids[0]));
    int peer = access && intact;
    int one_gpu = 1;
    for (int k = 1; k < n; k++) one_gpu &= ids[k] == ids[0];
    snprintf(report + len, len < (int)size ? size - len : 0, "%s", peer && one_gpu ? "device-to-device copies (one GPU, "
             "self-test passed)" : peer ? "peer-to-peer copies (access on, self-test passed)"
             : access ? "host-staged copies (the peer self-test failed)"
                      : "host-staged copies (no peer access between these GPUs)");
    return peer;
}

float *peer_alloc(int id, size_t n_floats) {
    float *p = NULL;
    checkCuda(cudaSetDevice(id));
    if (cudaMalloc(&p, (n_floats ? n_floats : 1) * sizeof(float)) != cudaSuccess) { cudaGetLastError(); return NULL; }
    checkCuda(cudaMemset(p, 0, n_floats * sizeof(float)));
    return p;
}

void peer_free(int id, float *p) {
    if (!p) return;
    checkCuda(cudaSetDevice(id));
    checkCuda(cudaFree(p));
}

int peer_check(char *msg, size_t size) {
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return 0;
    snprintf(msg, size, "%s", cudaGetErrorString(e));
    return -1;
}

int peer_optim_arena(void *d, size_t bytes) {
    Device *dev = (Device *)d;
    if (dev->optim.size) return 0;                    // planned already (device 0)
    checkCuda(cudaSetDevice(dev->id));
    if (cudaMalloc((void **)&dev->optim.base, bytes) != cudaSuccess) { cudaGetLastError(); return -1; }
    dev->optim.size = bytes;
    dev->optim.used = 0;
    dev->optim.name = "optimizer (shard)";
    return 0;
}
