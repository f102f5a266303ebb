// runlock.c: see runlock.h.
#include "core/base/runlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static void lock_path(const char *dir, char *path, size_t n) { snprintf(path, n, "%s/.lock", dir); }

int run_lock(const char *dir, int *fd, Err *err) {
    char path[4200];
    lock_path(dir, path, sizeof path);
    *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (*fd < 0) return err_set(err, "%s: cannot create the run's lock file: %s", path, strerror(errno));
    if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
        char text[32] = "";
        ssize_t got = pread(*fd, text, sizeof text - 1, 0);
        text[got > 0 ? got : 0] = 0;
        long pid = strtol(text, NULL, 10);
        close(*fd);
        *fd = -1;
        if (errno != EWOULDBLOCK && errno != EAGAIN && pid <= 0)
            return err_set(err, "%s: cannot lock: %s", path, strerror(errno));
        err_set(err, "%s is in use by another run (pid %ld); wait for it to end, or pick another name= "
                "(two runs in one folder would overwrite each other's checkpoints)", dir, pid);
        return 1;
    }
    char text[32];
    int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    int written = ftruncate(*fd, 0) == 0 && pwrite(*fd, text, (size_t)n, 0) == n;
    (void)written;                     // the pid only feeds another run's message: the flock is the lock
    return 0;
}

// The file stays: removing it would let a run that opened it just before lock a file no longer in the
// folder while a third run creates a new one. Emptied, it names no pid.
void run_unlock(const char *dir, int fd) {
    (void)dir;
    if (fd < 0) return;
    int emptied = ftruncate(fd, 0) == 0;
    (void)emptied;
    close(fd);
}
