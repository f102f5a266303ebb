// comm_mpi.c: core/procs/comm.h over MPI (Open MPI from Debian's libopenmpi-dev, or any MPI 3). Compiled
// to nothing unless the Makefile found mpicc (-DUSE_MPI).
#include "core/procs/comm.h"

#ifdef USE_MPI
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int rank_, size_, we_init, serialized;

static int init(int *rank, int *size, char *host, size_t host_size, Err *err) {
    int up = 0, provided;
    MPI_Initialized(&up);
    if (!up) {
        // The host thread calls MPI, and under sync_bn=1 the device worker that completes a BN sum of several
        // devices, one thread at a time: SERIALIZED is asked; FUNNELED (host thread only) is enough without it.
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
            return err_set(err, "MPI_Init failed: the launcher's environment is set (mpirun/srun) but MPI did not start");
        we_init = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    serialized = provided >= MPI_THREAD_SERIALIZED;
    // A failing collective ends every rank (the default) rather than return to a caller that cannot
    // go on without the others.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char name[MPI_MAX_PROCESSOR_NAME];
    int len = 0;
    if (MPI_Get_processor_name(name, &len) == MPI_SUCCESS && len > 0) snprintf(host, host_size, "%s", name);
    *rank = rank_;
    *size = size_;
    return 0;
}

static void finalize(void) {
    int down = 0;
    MPI_Finalized(&down);
    if (we_init && !down) MPI_Finalize();
    we_init = 0;
}

// Counts of MPI calls are ints: chunks of at most 256M floats (or bytes).
enum { CHUNK = 1 << 28 };

// A reduce-scatter then an all-gather, by hand so the sum is in rank order and every rank ends with
// the same floats (MPI_Allreduce promises neither): rank r adds piece r of every rank's buffer.
static void sum_chunk(float *p, int n) {
    int P = size_, *cnt = malloc(sizeof(int) * 4 * P), *dsp = cnt + P, *rcnt = cnt + 2 * P, *rdsp = cnt + 3 * P;
    for (int r = 0; r < P; r++) {
        int lo = (int)((int64_t)n * r / P), hi = (int)((int64_t)n * (r + 1) / P);
        cnt[r] = hi - lo;
        dsp[r] = lo;
    }
    int mine = cnt[rank_];
    float *in = malloc(sizeof(float) * ((size_t)mine * P + 1));
    for (int r = 0; r < P; r++) { rcnt[r] = mine; rdsp[r] = r * mine; }
    MPI_Alltoallv(p, cnt, dsp, MPI_FLOAT, in, rcnt, rdsp, MPI_FLOAT, MPI_COMM_WORLD);
    float *out = p + dsp[rank_];
    for (int i = 0; i < mine; i++) {
        float s = in[i];
        for (int r = 1; r < P; r++) s += in[(size_t)r * mine + i];
        out[i] = s;
    }
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, p, cnt, dsp, MPI_FLOAT, MPI_COMM_WORLD);
    free(in);
    free(cnt);
}

static void sum_floats(float *p, size_t n) {
    for (size_t at = 0; at < n; at += CHUNK) sum_chunk(p + at, (int)(n - at < CHUNK ? n - at : CHUNK));
}

static void allgather(const void *mine, void *all, size_t bytes) {
    MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
}

// Each rank's block broadcast from it in turn, in chunks of at most CHUNK bytes (MPI counts are ints).
static void allgatherv(const void *mine, void *all, const size_t *bytes) {
    char *at = all;
    for (int r = 0; r < size_; r++) {
        if (r == rank_ && bytes[r]) memcpy(at, mine, bytes[r]);
        for (size_t o = 0; o < bytes[r]; o += CHUNK)
            MPI_Bcast(at + o, (int)(bytes[r] - o < CHUNK ? bytes[r] - o : CHUNK), MPI_BYTE, r, MPI_COMM_WORLD);
        at += bytes[r];
    }
}

static void bcast(void *p, size_t bytes) { MPI_Bcast(p, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD); }
static void barrier(void) { MPI_Barrier(MPI_COMM_WORLD); }

static __attribute__((noreturn)) void abort_all(int code) {
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static int threads_serialized(void) { return serialized; }

const CommOps comm_mpi = { "mpi", init, finalize, sum_floats, allgather, allgatherv, bcast, barrier,
                          abort_all, threads_serialized };
#else
typedef int comm_mpi_not_built;   // an empty file is not C
#endif
