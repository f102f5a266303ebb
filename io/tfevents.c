// tfevents.c: see tfevents.h. A failed write prints one note and turns the writer off: TensorBoard
// logging never stops a training run.
#include "io/tfevents.h"
#include "io/image_codec.h"
#include "io/pb.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct TfEvents {
    FILE *f;
    int   failed;
    char  path[4096];
};

// ---- CRC-32C and the record framing ---------------------------------------------------------------
// Reflected polynomial 0x82F63B78, bit by bit through a 256-entry table made on first use.
uint32_t crc32c(const void *p, size_t n) {
    static uint32_t table[256];
    static int ready;
    if (!ready) {                                      // idempotent: a race only writes the same values
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++) c = c & 1 ? c >> 1 ^ 0x82F63B78u : c >> 1;
            table[i] = c;
        }
        ready = 1;
    }
    const uint8_t *b = p;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ b[i]) & 0xFF] ^ c >> 8;
    return c ^ 0xFFFFFFFFu;
}

uint32_t crc32c_masked(const void *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return (c >> 15 | c << 17) + 0xa282ead8u;
}

static void le(uint8_t *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> 8 * i);
}

int tfrecord_write(FILE *f, const void *data, size_t n) {
    uint8_t head[12], tail[4];
    le(head, n, 8);
    le(head + 8, crc32c_masked(head, 8), 4);
    le(tail, crc32c_masked(data, n), 4);
    if (fwrite(head, 1, 12, f) != 12 || (n && fwrite(data, 1, n, f) != n) || fwrite(tail, 1, 4, f) != 4) return -1;
    return 0;
}

// ---- events -------------------------------------------------------------------------------------
static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Event{wall_time, step, <what>} with <what> already encoded in `what` (freed), written as one record.
static void emit(TfEvents *ev, int64_t step, Pb *what) {
    Pb e = { 0 };
    pb_double(&e, 1, wall_time());
    if (step) pb_int(&e, 2, step);                     // proto3: a zero field is left out
    pb_put(&e, what->b, what->n);
    pb_free(what);
    if (!ev->failed && tfrecord_write(ev->f, e.b, e.n)) {
        fprintf(stderr, "note: cannot write %s: %s; TensorBoard logging stops for this run\n", ev->path,
                strerror(errno));
        ev->failed = 1;
    }
    pb_free(&e);
}

// Summary{value: [Value{tag, <value>}]} as Event field 5.
static void emit_summary(TfEvents *ev, int64_t step, const char *tag, Pb *value) {
    Pb v = { 0 }, s = { 0 }, what = { 0 };
    pb_str(&v, 1, tag);
    pb_put(&v, value->b, value->n);
    pb_free(value);
    pb_msg(&s, 1, &v);
    pb_msg(&what, 5, &s);
    emit(ev, step, &what);
}

TfEvents *tfevents_open(const char *dir, Err *err) {
    TfEvents *ev = xcalloc(1, sizeof *ev);
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1)) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0;
    for (char *c = host; *c; c++) if (*c == '/') *c = '_';
    long long now = (long long)time(NULL);
    // The last number tells apart two files of one process in one second (a run resumed in-process);
    // "x": never over an existing file.
    for (int uid = 0; uid < 100 && !ev->f; uid++) {
        snprintf(ev->path, sizeof ev->path, "%s/events.out.tfevents.%010lld.%s.%d.%d", dir, now, host, (int)getpid(), uid);
        ev->f = fopen(ev->path, "wbx");
        if (!ev->f && errno != EEXIST) break;
    }
    if (!ev->f) {
        err_set(err, "cannot create %s: %s", ev->path, strerror(errno));
        free(ev);
        return NULL;
    }
    Pb what = { 0 };
    pb_str(&what, 3, "brain.Event:2");
    emit(ev, 0, &what);
    tfevents_flush(ev);
    return ev;
}

const char *tfevents_path(const TfEvents *ev) { return ev->path; }

void tfevents_scalar(TfEvents *ev, const char *tag, double value, int64_t step) {
    if (!ev) return;
    Pb v = { 0 };
    pb_float(&v, 2, (float)value);
    emit_summary(ev, step, tag, &v);
}

void tfevents_image(TfEvents *ev, const char *tag, const Image *im, int64_t step) {
    if (!ev) return;
    char *png = NULL;
    size_t n = 0;
    Err err;
    FILE *m = open_memstream(&png, &n);
    int bad = !m || image_png_write(m, tag, im, 0, &err);
    if (m) fclose(m);
    if (!bad) {
        Pb img = { 0 }, v = { 0 };
        pb_int(&img, 1, im->h);
        pb_int(&img, 2, im->w);
        pb_int(&img, 3, 3);                            // RGB
        pb_bytes(&img, 4, png, n);
        pb_msg(&v, 4, &img);
        emit_summary(ev, step, tag, &v);
    }
    free(png);
}

int tfevents_image_file(TfEvents *ev, const char *tag, const char *path, int64_t step, Err *err) {
    if (!ev) return 0;
    Image im;
    if (image_load(path, &im, err)) return -1;
    tfevents_image(ev, tag, &im, step);
    image_free(&im);
    return 0;
}

void tfevents_restart(TfEvents *ev, int64_t step) {
    if (!ev) return;
    Pb log = { 0 }, what = { 0 };
    pb_int(&log, 1, 1);                                // SessionLog.status = START
    pb_msg(&what, 7, &log);
    emit(ev, step, &what);
}

void tfevents_flush(TfEvents *ev) {
    if (ev && !ev->failed && fflush(ev->f)) {
        fprintf(stderr, "note: cannot write %s: %s; TensorBoard logging stops for this run\n", ev->path,
                strerror(errno));
        ev->failed = 1;
    }
}

int tfevents_close(TfEvents *ev) {
    if (!ev) return 0;
    tfevents_flush(ev);
    int bad = fclose(ev->f) != 0 && !ev->failed;
    if (bad) fprintf(stderr, "note: cannot write %s: %s\n", ev->path, strerror(errno));
    int rc = ev->failed || bad ? -1 : 0;
    free(ev);
    return rc;
}
