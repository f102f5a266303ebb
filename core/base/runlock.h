// runlock.h: one run per run folder. A run holds an flock() on RUN/.lock, which also holds its pid;
// the kernel drops the lock when the process ends however it ends, so the file a crash leaves behind
// is a stale lock by construction and the next run takes it over.
#pragma once
#include "core/base/util.h"

// Take dir's lock: 0 and *fd (keep it open for the run), 1 when another live run holds it (err names
// its pid), -1 when the lock file cannot be made (err says why).
int  run_lock(const char *dir, int *fd, Err *err);
void run_unlock(const char *dir, int fd);   // empty the lock file (no pid) and let go
