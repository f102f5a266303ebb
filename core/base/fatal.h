// fatal.h: the end of the process on a dead device (core/base/fatal.c). A backend's failed call (gpu/device.h's
// checkCuda and checkCublas) prints the call, then calls device_fatal: it runs the hook set here once (a
// trainer saves its weights and names the intact checkpoints), then exits with status 1. A failure inside
// the hook, or in another thread meanwhile, does not run it again: the same thread exits at once, another
// thread waits for the exit. fn NULL: no hook. Host code, so CPU builds and their tests have it too.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

typedef void (*DeviceFatalHook)(const char *what, void *arg);
void device_set_fatal_hook(DeviceFatalHook fn, void *arg);
void device_fatal(const char *what) __attribute__((noreturn));

#ifdef __cplusplus
}
#endif
