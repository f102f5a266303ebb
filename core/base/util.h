// util.h: errors, checked allocation, timing and a small deterministic RNG shared by every part.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

// Err: a message for the user. Library functions return 0 on success, or -1 after err_set() has
// written what went wrong, where (file:line) and what to do. Callers print it and decide; only
// main() turns an error into an exit status (2 for bad input, 1 for failures of the machine).
typedef struct { char msg[1024]; } Err;
int err_set(Err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// die: an internal error that is never the user's fault (a broken invariant): message and exit(1).
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// Checked allocation; the counter lets a test assert that a loop allocates nothing.
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
size_t alloc_count(void);

double now_seconds(void);        // monotonic clock
// Host waits for a device: a stream synchronisation or a blocking copy back. Every backend's
// blocking call notes one, so a test can hold a training step to its one wait.
void host_wait_note(void);
long host_wait_count(void);
size_t mem_available_bytes(void); // MemAvailable of /proc/meminfo, 0 if unknown
int make_dirs(const char *path);  // mkdir -p; 0, or -1 with errno set

// Rng: splitmix64-seeded xoshiro128+-style generator. rng_for(seed, a, b) gives an independent
// stream per (seed, epoch, index), so results do not depend on thread count or order.
typedef struct { uint64_t s[2]; } Rng;
Rng      rng_for(uint64_t seed, uint64_t a, uint64_t b);
uint64_t rng_u64(Rng *r);
double   rng_uniform(Rng *r, double lo, double hi);   // [lo, hi)
int      rng_int(Rng *r, int n);                      // [0, n)
double   rng_normal(Rng *r);

// yaml_quoted: the YAML quoted scalar that starts at s ('...' where '' is a quote; "..." where \"
// and \\ are a quote and a backslash) into out; *end just after its closing quote. Returns 0, or -1
// when s does not start with a quote or the quote is not closed.
int yaml_quoted(const char *s, char *out, size_t n, const char **end);
