// test_killwrite.c: kill -9 at random moments while a child process writes checkpoints through the
// trainer's own save path (last.safetensors and last_state.safetensors of gelan-t, 50 MB a version).
// After every kill, each file in the folder is a whole version, value for value, or is refused on load
// with a message naming it: the final names never hold a partial file. And every truncation is refused.
#include "test/test.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "cfg/config.h"
#include "core/train/checkpoint.h"
#include "io/safetensors.h"

// Under AddressSanitizer each 50 MB version costs seconds: fewer kills there, since that build looks
// for memory errors on the path, and the plain build samples the kill points.
#if defined(__SANITIZE_ADDRESS__)
#define MIN_KILLS 4
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MIN_KILLS 4
#endif
#endif
#ifndef MIN_KILLS
#define MIN_KILLS 16
#endif

enum { P = 4096 };
static char dir[P], last[P + 64], state[P + 64];
static Trainer writer_t, reader_t;   // the child writes from the first, loads go into the second
static int have_trainers;

// Version v of array `salt` (0 state, 1 grad, 2 ema, 3 momentum) holds base[salt][i] + v: random
// integers plus the version, exact in fp32, so a file that mixes two versions cannot compare equal.
static float *base[4];

static void make_bases(size_t n) {
    Rng rng = rng_for(8, 0, 0);
    for (int s = 0; s < 4; s++) {
        base[s] = xmalloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) base[s][i] = (float)rng_int(&rng, 1 << 20) - (1 << 19);
    }
}

static void fill(float *x, int salt, int64_t v, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = base[salt][i] + (float)v;
}

static size_t count_wrong(const float *x, int salt, int64_t v, size_t begin, size_t end) {
    size_t bad = 0;
    for (size_t i = begin; i < end; i++) bad += x[i] != base[salt][i] + (float)v;
    return bad;
}

static void fill_version(Trainer *t, int64_t v) {
    Model *m = &t->m;
    fill(m->state, 0, v, m->n_state);
    fill(m->grad, 1, v, m->n_state);
    fill(t->ema, 2, v, m->n_state);
    fill(t->sgd.buf, 3, v, t->sgd.n_train);
    m->bn_batches = v;                  // what the weights file says of its version
    t->ema_updates = v;
}

// Both files of version v (already filled in), weights first, as the trainer does at an epoch end.
static int write_version(Trainer *t, int64_t v, Err *err) {
    RunPoint p = { .epoch = (int)v, .best_epoch = -1 };
    return trainer_save(t, last, err) || checkpoint_save(t, &p, state, err);
}

static int setup(void) {
    if (have_trainers) return 0;
    static Config cfg;
    Err err;
    char *ov[] = { "imgsz=64", "batch=1", "device=cpu" };
    if (config_load("cfg/t.ini", 3, ov, &cfg, &err) || trainer_init(&writer_t, &cfg, 4, -1, &err) ||
        trainer_init(&reader_t, &cfg, 4, -1, &err)) {
        printf("    %s\n", err.msg);
        return -1;
    }
    make_bases(writer_t.m.n_state > writer_t.sgd.n_train ? writer_t.m.n_state : writer_t.sgd.n_train);
    // Memory-backed when possible: a kill -9 leaves the page cache as it is, so what a kill can break
    // does not depend on the disk, while each fsync to a real disk would cost a second here.
    struct stat sb;
    const char *shm = "/dev/shm";
    if (stat(shm, &sb) == 0 && S_ISDIR(sb.st_mode) && access(shm, W_OK) == 0) {
        snprintf(dir, sizeof dir, "%s/yt-test-%d-killwrite", shm, (int)getpid());
        if (mkdir(dir, 0755)) snprintf(dir, sizeof dir, "%s", test_tmpdir("killwrite"));
    } else {
        snprintf(dir, sizeof dir, "%s", test_tmpdir("killwrite"));
    }
    snprintf(last, sizeof last, "%s/last.safetensors", dir);
    snprintf(state, sizeof state, "%s/last_state.safetensors", dir);
    have_trainers = 1;
    return 0;
}

// The version a state file holds, after checking every value of it; -1 (and a failed check) if wrong.
static int64_t check_state(const char *path) {
    RunPoint p;
    Err err;
    if (checkpoint_load(&reader_t, &p, path, &err)) { CHECK(0, "%s", err.msg); return -1; }
    Trainer *t = &reader_t;
    int64_t v = p.epoch;
    size_t n = t->m.n_state, bad = count_wrong(t->m.state, 0, v, 0, n) + count_wrong(t->m.grad, 1, v, 0, n) +
                                   count_wrong(t->ema, 2, v, 0, n) + count_wrong(t->sgd.buf, 3, v, 0, t->sgd.n_train);
    CHECK(bad == 0 && t->ema_updates == v, "%s loads as version %lld but %zu values are not that version's",
          path, (long long)v, bad);
    return bad ? -1 : v;
}

// Likewise for a weights file (the EMA of its version, which bn_batches names).
static int64_t check_weights(const char *path) {
    Err err;
    Model *m = &reader_t.m;
    if (model_load(m, path, "", &err)) { CHECK(0, "%s", err.msg); return -1; }
    int64_t v = m->bn_batches;
    size_t bad = 0;
    for (int k = 0; k < m->n_params; k++)
        bad += count_wrong(m->state, 2, v, m->params[k].offset, m->params[k].offset + m->params[k].n);
    CHECK(bad == 0, "%s loads as version %lld but %zu values are not that version's", path, (long long)v, bad);
    return bad ? -1 : v;
}

typedef struct { int partial, whole, none; } TmpSeen;

// A temporary file left by a kill: refused with a message naming it, or a whole newer version.
static void check_tmp(const char *final, int is_state, int64_t at_least, TmpSeen *seen) {
    char tmp[P + 80];
    snprintf(tmp, sizeof tmp, "%s.tmp", final);
    struct stat sb;
    if (stat(tmp, &sb)) { seen->none++; return; }
    SafeTensors st;
    Err err;
    if (st_open(tmp, &st, &err)) {
        CHECK(strstr(err.msg, tmp) != NULL, "the refusal does not name the file: %s", err.msg);
        seen->partial++;
        return;
    }
    st_close(&st);
    int64_t v = is_state ? check_state(tmp) : check_weights(tmp);
    CHECK(v >= at_least, "%s holds version %lld, older than %lld on disk", tmp, (long long)v, (long long)at_least);
    seen->whole++;
}

// Only the two checkpoints and their temporaries may be there.
static void check_names(void) {
    DIR *d = opendir(dir);
    if (!d) { CHECK(0, "cannot list %s", dir); return; }
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        CHECK(!strcmp(n, ".") || !strcmp(n, "..") || !strncmp(n, "last.safetensors", 16) ||
              !strncmp(n, "last_state.safetensors", 22), "unexpected file %s in %s", n, dir);
    }
    closedir(d);
}

static void sleep_seconds(double s) {
    struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

// A writer child: fill version `from`, say so on `ready`, write versions from, from + 1, ... (forever,
// or only `from` when once is set).
static pid_t start_writer(int64_t from, int once, int ready[2]) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid != 0) return pid;
    Err err;
    fill_version(&writer_t, from);                 // touch every page first: copy-on-write costs
    if (write(ready[1], "w", 1) != 1) _exit(4);
    for (int64_t v = from;; fill_version(&writer_t, ++v))
        if (write_version(&writer_t, v, &err) || once) _exit(once ? 0 : 3);
}

// Wait for the writer's "writing now"; 0 when it came.
static int wait_ready(int ready[2]) {
    char c;
    close(ready[1]);
    int rc = read(ready[0], &c, 1) == 1 ? 0 : -1;
    close(ready[0]);
    return rc;
}

static void test_kill_during_writes(void) {
    if (setup()) { CHECK(0, "cannot build gelan-t"); return; }
    Err err;
    fill_version(&writer_t, 1);
    if (write_version(&writer_t, 1, &err)) { CHECK(0, "%s", err.msg); return; }
    int ready[2], status;                          // one version in a child: the range of kill times
    if (pipe(ready)) { CHECK(0, "pipe failed"); return; }
    pid_t pid = start_writer(1, 1, ready);
    wait_ready(ready);
    double t0 = now_seconds();
    waitpid(pid, &status, 0);
    double t_write = now_seconds() - t0;
    int64_t on_state = 1, on_weights = 1;           // the versions under the final names
    TmpSeen seen = { 0 };
    Rng rng = rng_for(8, 1, 0);
    int kills = 0;
    for (double start = now_seconds(); kills < MIN_KILLS || (kills < 300 && now_seconds() - start < 8); kills++) {
        if (pipe(ready)) { CHECK(0, "pipe failed"); return; }
        pid = start_writer(on_state + 1, 0, ready);   // weights may be at on_state + 1 already: same bytes
        if (pid < 0) { CHECK(0, "fork failed"); return; }
        if (wait_ready(ready) == 0) sleep_seconds(rng_uniform(&rng, 0, 1.5 * t_write));
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status), "the writer exited with status %d before the kill", WEXITSTATUS(status));
        int64_t vs = check_state(state), vw = check_weights(last);
        CHECK(vs >= on_state && vw >= on_weights, "a checkpoint went back: state %lld -> %lld, weights %lld -> %lld",
              (long long)on_state, (long long)vs, (long long)on_weights, (long long)vw);
        CHECK(vw == vs || vw == vs + 1, "weights version %lld beside state version %lld", (long long)vw,
              (long long)vs);
        check_tmp(last, 0, vw, &seen);
        check_tmp(state, 1, vs, &seen);
        check_names();
        if (t_failed_now) break;
        on_state = vs;
        on_weights = vw;
    }
    printf("# %d kills (a write took %.3f s): %d partial temporaries refused, %d whole ones, %d times none\n",
           kills, t_write, seen.partial, seen.whole, seen.none);
    CHECK(seen.partial + seen.whole > 0 || kills < 16, "no kill landed during a write in %d tries", kills);
}

static int descending(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x < y) - (x > y);
}

// Cut a copy of `path` shorter and shorter: every length up to 64 bytes, around the end of the header
// and the end of the file, and 300 random ones between. st_open refuses each, naming the file.
static void check_cuts(const char *path, Rng *rng) {
    struct stat sb;
    if (stat(path, &sb)) { CHECK(0, "%s is missing", path); return; }
    char cut[P + 64], cmd[3 * P];
    snprintf(cut, sizeof cut, "%s/cut.safetensors", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, cut);
    if (system(cmd)) { CHECK(0, "cannot copy %s", path); return; }
    SafeTensors st;
    Err err;
    if (st_open(cut, &st, &err)) { CHECK(0, "the whole copy is refused: %s", err.msg); return; }
    long long data = 8, size = sb.st_size, len[500];
    for (int i = 7; i >= 0; i--) data += (long long)st.map[i] << 8 * i;   // where the data section starts
    st_close(&st);
    int n = 0;
    for (int i = 0; i < 64; i++) len[n++] = i;
    for (int i = -16; i < 16; i++) len[n++] = data + i;
    for (int i = 1; i <= 16; i++) len[n++] = size - i;
    while (n < 400) len[n++] = (long long)rng_uniform(rng, 0, (double)size);
    qsort(len, n, sizeof *len, descending);
    int refused = 0;
    for (int i = 0; i < n; i++) {
        if (truncate(cut, len[i])) { CHECK(0, "truncate failed"); break; }
        if (st_open(cut, &st, &err)) refused += strstr(err.msg, cut) != NULL;
        else st_close(&st);
    }
    CHECK(refused == n, "%s: %d of %d truncated copies loaded or were refused without naming the file", path,
          n - refused, n);
    unlink(cut);
}

static void test_every_truncation_is_refused(void) {
    if (setup()) { CHECK(0, "cannot build gelan-t"); return; }
    Err err;
    fill_version(&writer_t, 1000);
    if (write_version(&writer_t, 1000, &err)) { CHECK(0, "%s", err.msg); return; }
    Rng rng = rng_for(8, 2, 0);
    check_cuts(state, &rng);
    check_cuts(last, &rng);
}

int main(void) {
    RUN(test_kill_during_writes);
    RUN(test_every_truncation_is_refused);
    if (have_trainers) {                            // /dev/shm is memory: leave nothing behind
        char cmd[P + 32];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) printf("# could not remove %s\n", dir);
    }
    return test_summary();
}
