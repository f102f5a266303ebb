// test.h: the whole test harness. A test file defines `static void test_x(void)` functions and a
// main that calls RUN(test_x) for each, then `return test_summary();`. Each test prints one line:
//   ok   file: name            FAIL file: name (followed by the failed checks)     skip file: name: reason
// test/run.sh adds the lines of every test binary into the final "N passed, N failed, N skipped".
#pragma once
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/base/switches.h"

static int t_pass, t_fail, t_skip;
static int t_failed_now;
static char t_skip_reason[256];

// CHECK(cond, fmt, ...): on failure print where and why, mark the current test failed, go on.
#define CHECK(cond, ...) do { if (!(cond)) { \
    printf("    %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
    printf(__VA_ARGS__); printf("\n"); t_failed_now = 1; } } while (0)
// SKIP(fmt, ...): the test cannot run here (say why), return from it.
#define SKIP(...) do { snprintf(t_skip_reason, sizeof t_skip_reason, __VA_ARGS__); return; } while (0)
#define RUN(fn) test_run_(#fn, fn)

static inline void test_run_(const char *name, void (*fn)(void)) {
    t_failed_now = 0; t_skip_reason[0] = 0;
    fflush(stdout);
    fn();
    if (t_failed_now) { printf("FAIL %s: %s\n", __BASE_FILE__, name); t_fail++; }
    else if (t_skip_reason[0]) { printf("skip %s: %s: %s\n", __BASE_FILE__, name, t_skip_reason); t_skip++; }
    else { printf("ok   %s: %s\n", __BASE_FILE__, name); t_pass++; }
    fflush(stdout);
}

static inline int test_summary(void) {
    printf("# %s: %d passed, %d failed, %d skipped\n", __BASE_FILE__, t_pass, t_fail, t_skip);
    return t_fail ? 1 : 0;
}

// close_enough: |got - ref| <= atol + rtol*|ref|: the tolerance of the CPU-vs-GPU and gradient checks
static inline int close_enough(double got, double ref, double atol, double rtol) {
    return fabs(got - ref) <= atol + rtol * fabs(ref) && !isnan(got);
}

// Sets a YT_ switch (core/base/switches.h) in this process's environment, which its children inherit (value NULL:
// unsets it), and has the registry read it again, so that what this process runs next sees it too.
static inline void test_switch(Switch s, const char *value) {
    if (value) setenv(switch_info(s)->name, value, 1);
    else unsetenv(switch_info(s)->name);
    switches_reload();
}

// The read-only shared folder (fixtures, coco128): $YT_SHARED, else ../shared beside the checkout.
// Returns NULL when it is absent, so tests can SKIP with a reason.
static inline const char *shared_dir(void) {
    static char buf[4096];
    const char *env = switch_str(SW_SHARED);
    snprintf(buf, sizeof buf, "%s", env && *env ? env : "../shared");
    struct stat st;
    return stat(buf, &st) == 0 && S_ISDIR(st.st_mode) ? buf : NULL;
}

// yaml = the shared folder's data/coco128/data.yaml (a char array), or the test skips, saying what is missing.
#define NEED_COCO128(yaml) do { \
        if (!shared_dir()) SKIP("no shared folder (set YT_SHARED)"); \
        if (snprintf(yaml, sizeof yaml, "%s/data/coco128/data.yaml", shared_dir()) >= (int)sizeof yaml || \
            access(yaml, R_OK) != 0) \
            SKIP("no data/coco128/data.yaml in the shared folder"); \
    } while (0)

// A bf16 value held in a float (its low 16 bits zero) as its 16 bits, and back: what a bf16-stored map holds
static inline uint16_t bf16_top_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}
static inline float bf16_from_bits(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

// The shared coco128's train split opened quietly into ds (a Dataset; err, an Err, says why it could not), or a
// skip as NEED_COCO128's; a failure to open it fails the test, which returns.
#define NEED_COCO128_TRAIN(ds, err) do { \
        char coco_yaml_[PATH_MAX + 64]; \
        NEED_COCO128(coco_yaml_); \
        DatasetOptions coco_opt_ = { .quiet = 1, .report = tmpfile() }; \
        CHECK(dataset_open(coco_yaml_, NULL, "train", &coco_opt_, &(ds), &(err)) == 0, "%s", (err).msg); \
        if (coco_opt_.report) fclose(coco_opt_.report); \
        if (t_failed_now) return; \
    } while (0)

// A scratch folder for files a test writes: $TMPDIR/yt-test-<pid>-<tag>, created fresh. The folders
// are removed when the binary exits with every test passed; after a failure (or with YT_KEEP_TMP=1) they
// stay, and their paths are printed, for a look at what the test wrote.
static char t_tmpdirs[16][4096];
static int t_ntmpdirs;
static pid_t t_tmpdir_owner;   // a forked child that exit()s must not remove its parent's folders
static inline void test_tmpdir_cleanup_(void) {
    if (getpid() != t_tmpdir_owner) return;
    const char *keep = switch_str(SW_KEEP_TMP);
    for (int i = 0; i < t_ntmpdirs; i++) {
        if (t_fail || (keep && *keep && strcmp(keep, "0") != 0)) { printf("# kept %s\n", t_tmpdirs[i]); continue; }
        char cmd[4200];
        if (snprintf(cmd, sizeof cmd, "rm -rf '%s'", t_tmpdirs[i]) < (int)sizeof cmd && system(cmd) != 0)
            printf("# could not remove %s\n", t_tmpdirs[i]);
    }
    t_ntmpdirs = 0;
}
static inline const char *test_tmpdir(const char *tag) {
    static char buf[4096];
    const char *t = getenv("TMPDIR");
    snprintf(buf, sizeof buf, "%s/yt-test-%d-%s", t && *t ? t : "/tmp", (int)getpid(), tag);
    char cmd[8400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", buf, buf);
    if (system(cmd) != 0) { printf("cannot create %s\n", buf); exit(1); }
    int known = 0;
    for (int i = 0; i < t_ntmpdirs; i++) known |= strcmp(t_tmpdirs[i], buf) == 0;
    if (!known && t_ntmpdirs < 16) {
        if (t_ntmpdirs == 0 && t_tmpdir_owner == 0) { t_tmpdir_owner = getpid(); atexit(test_tmpdir_cleanup_); }
        snprintf(t_tmpdirs[t_ntmpdirs++], sizeof t_tmpdirs[0], "%s", buf);
    }
    return buf;
}

// NCHW (PyTorch, the fixtures) -> NHWC (ours): a new array the caller frees.
static inline float *nchw_to_nhwc(const float *x, int N, int C, int H, int W) {
    float *y = malloc((size_t)N * C * H * W * sizeof(float));
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++)
            for (int h = 0; h < H; h++)
                for (int w = 0; w < W; w++)
                    y[(((size_t)n * H + h) * W + w) * C + c] = x[(((size_t)n * C + c) * H + h) * W + w];
    return y;
}

// The whole file at path, 0-terminated, its length in *n; NULL if it cannot be read. Free it.
static inline char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc(len > 0 ? (size_t)len + 1 : 1);
    *n = len > 0 ? fread(buf, 1, (size_t)len, f) : 0;
    buf[*n] = 0;
    fclose(f);
    return buf;
}

// The number of newlines in the file at path (0 if it cannot be read)
static inline int file_lines(const char *path) {
    size_t n = 0;
    char *buf = slurp(path, &n);
    int lines = 0;
    for (size_t i = 0; buf && i < n; i++) lines += buf[i] == '\n';
    free(buf);
    return lines;
}

// Runs `cmdline 2>&1` through the shell: its output (as much as fits, 0-terminated) in out, the rest read
// and dropped so the command never stops on a full pipe; returns the exit status (-1: not run or killed).
static inline int test_shell(const char *cmdline, char *out, size_t size) {
    size_t len = strlen(cmdline) + 8;
    char *cmd = malloc(len);
    snprintf(cmd, len, "%s 2>&1", cmdline);
    FILE *p = popen(cmd, "r");
    free(cmd);
    out[0] = 0;
    if (!p) return -1;
    size_t n = fread(out, 1, size - 1, p);
    out[n] = 0;
    char sink[4096];
    while (fread(sink, 1, sizeof sink, p) > 0) {}
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

// 1 when both files can be read and hold the same bytes
static inline int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && !memcmp(x, y, na);
    free(x); free(y);
    return same;
}

// A safetensors file's header (*h, *nh: its JSON, the header padding and the value of "elapsed_s" left out)
// and data (*d, *nd); 0, or -1 when it is not one.
static inline int state_parts_(char *x, size_t n, char **h, size_t *nh, const char **d, size_t *nd) {
    uint64_t len = 0;
    if (n < 8) return -1;
    memcpy(&len, x, 8);
    if (len > n - 8) return -1;
    *h = x + 8, *nh = (size_t)len, *d = x + 8 + len, *nd = n - 8 - (size_t)len;
    while (*nh && (*h)[*nh - 1] == ' ') (*nh)--;
    char *v = memmem(*h, *nh, "\"elapsed_s\":\"", 13), *q = v ? memchr(v + 13, '"', *nh - (v + 13 - *h)) : NULL;
    if (q) memmove(v + 13, q, *nh - (q - *h)), *nh -= q - (v + 13);
    return 0;
}

// 1 when two training states (last_state.safetensors) hold the same bytes but for the wall time the run
// took to reach them ("elapsed_s" in the metadata): the same tensors and counters, to the bit.
static inline int same_state(const char *a, const char *b) {
    size_t na = 0, nb = 0, ha, hb, da, db;
    char *x = slurp(a, &na), *y = slurp(b, &nb), *hx, *hy;
    const char *dx, *dy;
    int same = x && y && !state_parts_(x, na, &hx, &ha, &dx, &da) && !state_parts_(y, nb, &hy, &hb, &dy, &db) &&
               ha == hb && da == db && !memcmp(hx, hy, ha) && !memcmp(dx, dy, da);
    free(x); free(y);
    return same;
}
