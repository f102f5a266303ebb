// faults.c: see faults.h.
#include "core/train/faults.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/fatal.h"
#include "core/base/switches.h"

void fault_signal_at(const char *where) {
    static int done;
    const char *at = switch_str(SW_SIGNAL_AT);
    size_t n = strlen(where);
    if (done || !at || strncmp(at, where, n) || (at[n] && at[n] != ':')) return;
    done = 1;
    raise(!strcmp(at + n, ":HUP") ? SIGHUP : !strcmp(at + n, ":INT") ? SIGINT : SIGTERM);
}

static void fail_cuda(const Trainer *t, int step) {
    const char *spec = switch_str(SW_FAIL_CUDA);
    if (!spec || atoi(spec) != step) return;
    fprintf(stderr, "YT_FAIL_CUDA=%s: a CUDA error injected at step %d\n", spec, step);
    t->m.be->dev.inject_fault(t->m.be_ctx, strstr(spec, "sticky") ? BACKEND_FAULT_STICKY : BACKEND_FAULT_ERROR);
    device_fatal("injected");
}

static void nan_weight(const Trainer *t, int step) {
    const char *at = switch_str(SW_NAN_AT_STEP);
    if (!at || atoi(at) != step) return;
    float nan = NAN;
    t->m.be->dev.upload(t->m.be_ctx, t->m.state, &nan, 1);
}

// The device's queue stops before this step's work (the GPU's: a kernel that spins; the CPU's: nothing),
// as behind a collective whose peer died: the step's host wait never returns unless the NCCL watchdog
// (gpu/comm_nccl.c) ends the process.
static void hang_gpu(const Trainer *t, int step) {
    const char *at = switch_str(SW_GPU_HANG_AT);
    if (!at || atoi(at) != step) return;
    fprintf(stderr, "YT_GPU_HANG_AT=%s: the device's queue stops at step %d\n", at, step);
    t->m.be->dev.inject_fault(t->m.be_ctx, BACKEND_FAULT_HANG);
}

void fault_before_step(const Trainer *t, int step) {
    fail_cuda(t, step);
    hang_gpu(t, step);
    nan_weight(t, step);
}

int fault_stop_after(void) {
    const char *sa = switch_str(SW_STOP_AFTER_STEPS);
    return sa ? atoi(sa) : 0;
}

static int fail_device;

static int device_fails(int device, const char *phase, void *arg) {
    static int backward_calls;
    return device == *(const int *)arg && !strcmp(phase, "backward") && ++backward_calls >= 2;
}

void fault_device_hook(Multi *mt) {
    const char *fd = switch_str(SW_FAIL_DEVICE);
    if (!fd || !mt) return;
    fail_device = atoi(fd);
    multi_set_fail_hook(mt, device_fails, &fail_device);
}

double fault_disk_free(double free_bytes) {
    const char *fake = switch_str(SW_DISK_FREE_MB);
    return fake ? atof(fake) * 1e6 : free_bytes;
}
