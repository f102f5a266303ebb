// devices.c: see devices.h.
#include "cfg/devices.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/switches.h"

static void trim(const char **a, const char **b) {   // the text [*a, *b) less its outer spaces
    while (*a < *b && **a == ' ') (*a)++;
    while (*b > *a && (*b)[-1] == ' ') (*b)--;
}

// device= as written less an outer pair of quotes and one of brackets, with the spaces next to
// commas and ends gone ("[0, 1]" -> "0,1"; "0 1" keeps its space, an error later). Returns 0, or
// -1 with err for brackets or quotes anywhere else.
static int unwrap_devices(const char *spec, char *buf, size_t size, Err *err) {
    const char *a = spec, *b = spec + strlen(spec);
    trim(&a, &b);
    if (b - a >= 2 && (*a == '\'' || *a == '"') && b[-1] == *a) a++, b--;
    trim(&a, &b);
    if (a < b && (*a == '[' || *a == '(')) {
        char close = *a == '[' ? ']' : ')';
        if (b - a < 2 || b[-1] != close)
            return err_set(err, "device=%s: the %c is not closed by a %c at the end; write device=[0,1] or "
                           "device=0,1", spec, *a, close);
        a++, b--;
        trim(&a, &b);
        if (a == b)
            return err_set(err, "device=%s: no device inside the brackets; write device=[0,1] or device=0,1", spec);
    }
    if ((size_t)(b - a) >= size) return err_set(err, "device=%.40s...: too long", spec);
    size_t k = 0;
    for (const char *p = a; p < b; p++) {
        if (strchr("[]()'\"", *p))
            return err_set(err, "device=%s: brackets go around the whole list, once: device=[0,1] or device=0,1",
                           spec);
        const char *q = p;
        while (q < b && *q == ' ') q++;
        if (*p == ' ' && (!k || buf[k - 1] == ',' || q == b || *q == ',')) continue;
        buf[k++] = *p;
    }
    buf[k] = 0;
    if (!strcmp(buf, "cuda")) snprintf(buf, size, "0");                  // Ultralytics' device=cuda: GPU 0
    else if (!strncmp(buf, "cuda:", 5)) memmove(buf, buf + 5, k - 4);    // cuda:0 -> 0, cuda:0,1 -> 0,1
    return 0;
}

// YT_TEST_SAME_GPU=1 (a test hook, not a user setting): a GPU named again is one more device on it,
// with its own stream, handles and arenas, so the multi-device path runs on a machine with one GPU.
static int same_gpu_twice_for_tests(void) {
    const char *e = switch_str(SW_TEST_SAME_GPU);
    return e && !strcmp(e, "1");
}

int parse_devices(const char *spec, int n_gpus, DeviceList *out, Err *err) {
    char buf[256];
    if (unwrap_devices(spec, buf, sizeof buf, err)) return -1;
    memset(out, 0, sizeof *out);
    if (!strncmp(buf, "cpu", 3)) {
        long n = buf[3] == ':' ? strtol(buf + 4, NULL, 10) : buf[3] ? -1 : 1;
        if (n < 1 || n > MULTI_MAX)
            return err_set(err, "device=%s: write cpu or cpu:N with N from 1 to %d", spec, MULTI_MAX);
        out->n = (int)n;
        for (int i = 0; i < n; i++) out->gpu[i] = -1;
        return 0;
    }
    if (!buf[0]) {                                     // every GPU present, else the CPU
        out->n = n_gpus ? (n_gpus < MULTI_MAX ? n_gpus : MULTI_MAX) : 1;
        for (int i = 0; i < out->n; i++) out->gpu[i] = n_gpus ? i : -1;
        return 0;
    }
    for (char *p = buf; *p;) {
        char *end;
        long id = strtol(p, &end, 10);
        if (end == p || (*end && *end != ','))
            return err_set(err, "device=%s: write GPU ids separated by commas (device=0,1), cpu or cpu:N", spec);
        if (id < 0 || id >= n_gpus)
            return err_set(err, "device=%s: there is no GPU %ld (%d GPU%s found)", spec, id, n_gpus, n_gpus == 1 ? "" : "s");
        for (int i = 0; i < out->n && !same_gpu_twice_for_tests(); i++)
            if (out->gpu[i] == id) return err_set(err, "device=%s: GPU %ld is named twice", spec, id);
        if (out->n == MULTI_MAX) return err_set(err, "device=%s: at most %d devices", spec, MULTI_MAX);
        out->gpu[out->n++] = (int)id;
        p = *end ? end + 1 : end;
        if (*end && !*p)
            return err_set(err, "device=%s: an id is missing after the last comma; write device=0,1", spec);
    }
    return 0;
}
