// util.c: see util.h.
#include "core/base/util.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static atomic_size_t n_allocs;

int err_set(Err *e, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "yolotrain: internal error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

// An allocation that fails is the machine's limit, not a bug: say which limits to look at, exit 1.
static void out_of_memory(size_t n) __attribute__((noreturn));
static void out_of_memory(size_t n) {
    fprintf(stderr, "yolotrain: out of host memory allocating %zu bytes: the memory, the cgroup limit or the "
            "address-space limit (ulimit -v) is reached; lower batch, imgsz or workers, or drop cache=ram\n", n);
    exit(1);
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) out_of_memory(n);
    atomic_fetch_add(&n_allocs, 1);
    return p;
}

void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) out_of_memory(n * size);
    atomic_fetch_add(&n_allocs, 1);
    return p;
}

void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) out_of_memory(n);
    atomic_fetch_add(&n_allocs, 1);
    return q;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

size_t alloc_count(void) { return atomic_load(&n_allocs); }

static atomic_long n_host_waits;
void host_wait_note(void) { atomic_fetch_add(&n_host_waits, 1); }
long host_wait_count(void) { return atomic_load(&n_host_waits); }

double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

size_t mem_available_bytes(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    if (f) fclose(f);
    return (size_t)kb * 1024;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

Rng rng_for(uint64_t seed, uint64_t a, uint64_t b) {
    uint64_t x = seed * 0x100000001b3ull ^ (a + 0x632be59bd9b4e019ull) * 0x9e3779b97f4a7c15ull ^ b;
    Rng r;
    r.s[0] = splitmix64(&x);
    r.s[1] = splitmix64(&x);
    if (!r.s[0] && !r.s[1]) r.s[1] = 1;
    return r;
}

uint64_t rng_u64(Rng *r) {  // xoroshiro128+
    uint64_t s0 = r->s[0], s1 = r->s[1], out = s0 + s1;
    s1 ^= s0;
    r->s[0] = ((s0 << 24) | (s0 >> 40)) ^ s1 ^ (s1 << 16);
    r->s[1] = (s1 << 37) | (s1 >> 27);
    return out;
}

double rng_uniform(Rng *r, double lo, double hi) {
    return lo + (hi - lo) * ((rng_u64(r) >> 11) * 0x1.0p-53);
}

int rng_int(Rng *r, int n) { return n <= 0 ? 0 : (int)((rng_u64(r) >> 11) % (uint64_t)n); }

double rng_normal(Rng *r) {
    double u1 = rng_uniform(r, 0, 1), u2 = rng_uniform(r, 0, 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

int yaml_quoted(const char *s, char *out, size_t n, const char **end) {
    char q = *s;
    if ((q != '\'' && q != '"') || !n) return -1;
    size_t o = 0;
    for (const char *p = s + 1; *p; p++) {
        if (*p == q && q == '\'' && p[1] == '\'') p++;               // '' in '...'
        else if (*p == '\\' && q == '"' && (p[1] == '"' || p[1] == '\\')) p++;
        else if (*p == q) { out[o] = 0; *end = p + 1; return 0; }
        if (o + 1 < n) out[o++] = *p;
    }
    return -1;
}

int make_dirs(const char *path) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return errno = ENAMETOOLONG, -1;
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) && errno != EEXIST) return -1;
        *p = '/';
    }
    return mkdir(buf, 0755) && errno != EEXIST ? -1 : 0;
}
