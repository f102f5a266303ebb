// readfile.c: see readfile.h.
#include "core/base/readfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a folder";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

int rf_open(const char *path, const char *role, Err *err) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        err_set(err, "%s: cannot open the %s: %s", path, role, strerror(e));
        errno = e;
        return -1;
    }
    struct stat st;
    int e = fstat(fd, &st) != 0 ? errno : 0;
    if (e || !S_ISREG(st.st_mode)) {
        err_set(err, "%s: cannot read the %s: it is %s, not a regular file; name a file", path, role,
                e ? strerror(e) : kind_of(st.st_mode));
        close(fd);
        errno = EINVAL;
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);               // reads of a regular file then behave as usual
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

FILE *rf_fopen(const char *path, const char *role, Err *err) {
    int fd = rf_open(path, role, err);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        err_set(err, "%s: cannot open the %s: %s", path, role, strerror(errno));
        close(fd);
    }
    return f;
}

int rf_check_dir(const char *path, const char *role, Err *err) {
    struct stat st;
    if (stat(path, &st) != 0) return err_set(err, "%s: the %s: %s", path, role, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(err, "%s: the %s is %s, not a folder; name a folder", path, role,
                       S_ISREG(st.st_mode) ? "a file" : kind_of(st.st_mode));
    return 0;
}

int rf_text_check(const char *path, const char *buf, size_t n, Err *err) {
    int line = 1;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || buf[i] == '\n' || buf[i] == '\r') {
            if (i - start > RF_LINE_MAX)
                return err_set(err, "%s:%d: the line is %zu bytes long, over the %d limit; is it a text "
                               "file?", path, line, i - start, RF_LINE_MAX);
            if (i < n && buf[i] == '\r' && i + 1 < n && buf[i + 1] == '\n') i++;
            line++;
            start = i + 1;
        } else if (buf[i] == 0) {
            return err_set(err, "%s:%d: a NUL byte at column %zu: a binary file, not text; name the "
                           "right file or remove the NUL", path, line, i - start + 1);
        }
    }
    return 0;
}

int rf_text_read(const char *path, const char *role, TextFile *t, Err *err) {
    *t = (TextFile){0};
    int fd = rf_open(path, role, err);
    if (fd < 0) return -1;
    size_t cap = 4096, n = 0;
    char *buf = xmalloc(cap + 1);
    for (;;) {
        if (n > RF_TEXT_MAX_BYTES) break;
        if (n == cap) {                        // at most one byte over the limit is ever read
            cap = cap * 2 > RF_TEXT_MAX_BYTES ? RF_TEXT_MAX_BYTES + 1 : cap * 2;
            buf = xrealloc(buf, cap + 1);
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            err_set(err, "%s: cannot read the %s: %s", path, role, strerror(errno));
            close(fd); free(buf);
            return -1;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    if (n > RF_TEXT_MAX_BYTES) {
        free(buf);
        return err_set(err, "%s: the %s is over %zu MB; not a text input yolotrain reads", path, role,
                       RF_TEXT_MAX_BYTES >> 20);
    }
    buf[n] = 0;
    if (rf_text_check(path, buf, n, err)) { free(buf); return -1; }
    t->buf = buf;
    t->n = n;
    return 0;
}

void rf_text_free(TextFile *t) {
    free(t->buf);
    *t = (TextFile){0};
}

int rf_text_line(const TextFile *t, size_t *pos, const char **s, size_t *len) {
    size_t i = *pos;
    if (i >= t->n) return 0;
    size_t e = i;
    while (e < t->n && t->buf[e] != '\n' && t->buf[e] != '\r') e++;
    *s = t->buf + i;
    *len = e - i;
    if (e < t->n && t->buf[e] == '\r' && e + 1 < t->n && t->buf[e + 1] == '\n') e++;
    *pos = e + 1;
    return 1;
}
