// musgd.cu: the CUDA twins of core/spec/musgd.c's MuSGD and AdamW steps. Elementwise updates are
// multi-tensor kernels over parameter tables uploaded once; Newton-Schulz runs on batches of Muon
// matrices of one shape, packed as bf16 in scratch, through strided-batched cuBLAS GEMMs (bf16
// operands, fp32 accumulation and output) whose results a kernel rounds to bf16 where the CPU rounds.
// fp32 ops use the explicitly rounded intrinsics, so nvcc cannot contract them differently from the
// CPU twin. Updates write w, the state buffers and g (= 0) in place.
// Legend: n floats of a tensor; r x c a Muon matrix, m x nw its wide orientation (m = min(r, c),
// nw = max(r, c): transposed when r > c); k matrices of a batch; b chunk index.
#include <cuda_bf16.h>

#include "gpu/kernel_util.h"
#include "gpu/musgd.h"

typedef __nv_bfloat16 bf16;

enum { MU_CHUNK = 4096, NORM_THREADS = 1024, NS_STEPS = 5 };
static const size_t GRID_CAP = 4096;                  // blocks of the chunk loops
static const size_t BATCH_FLOATS = (size_t)1 << 20;   // one NS batch at most (a larger matrix: alone)
static constexpr float NS_A = 3.4445f, NS_B = -4.7750f, NS_C = 2.0315f;

// One parameter as the kernels read it (56 bytes: the tables fit musgd.h's 128 bytes a parameter).
struct MuSlot {
    float *w, *g;    // (n) parameter and gradient
    float *a, *b;    // state: MuSGD s (SGD momentum) and m (Muon momentum, NULL off muon groups);
                     // AdamW m (exp_avg) and v (exp_avg_sq)
    size_t n;
    int group;       // MU_*
    float scale;     // (float)shape_scale
    size_t chunk0;   // MU_CHUNK chunks of the slots before this one
};
static_assert(sizeof(MuSlot) <= 64, "musgd.h promises at most 128 bytes of tables a parameter");

// Muon slots [first, first + k) of the batch-ordered table, each an r x c matrix.
struct NsBatch { int first, k, r, c; };

struct GpuMuSgd {
    int adamw;             // 1: AdamW, else MuSGD
    int l2;                // with adamw: Adam (the decay added to the gradient), as AdamW.l2
    double muon, sgd;      // MuSGD's weights
    const MuSlot *all;     // device, parameter order
    int n_params;
    size_t chunks;
    const MuSlot *muon_slots;   // device, the Muon parameters' slots in batch order
    NsBatch *batches;      // host
    int n_batches;
    long steps;            // AdamW's t of the last step
};

// Per-step scalars, per group where the CPU twin computes them per parameter.
struct SgdHyper  { float alpha[MU_GROUPS], wd[MU_GROUPS], beta; };
struct MuonHyper { float alpha[MU_GROUPS]; };
struct AdamHyper { float decay[MU_GROUPS], l2[MU_GROUPS], step[MU_GROUPS], w1, b2, w2, bc2s, eps; };

// The bf16 buffers of one NS batch (k matrices) in scratch: Y the iterate (k, m, nw), A the Gram
// matrix, T = c*A, B the polynomial (k, m, m); fp32 GEMM results G32 (k, m, m) and Z32 (k, m, nw).
struct NsScratch { bf16 *Y, *A, *T, *B; float *G32, *Z32; };

// ---- device helpers ------------------------------------------------------------------------

__device__ static inline float bf16r(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// torch.lerp in fp32, as core/spec/musgd.c's lerpf
__device__ static inline float lerp_rn(float self, float end, float w) {
    float d = __fsub_rn(end, self);
    return fabsf(w) < 0.5f ? __fmaf_rn(w, d, self) : __fmaf_rn(-d, __fsub_rn(1.0f, w), end);
}

// Offset of element e = i*c + j of an r x c matrix in its wide orientation.
__device__ static inline size_t wide_at(size_t e, int r, int c) {
    return r <= c ? e : (e % c) * r + e / c;
}

// The slot of chunk b: the last one with chunk0 <= b (an empty slot shares its chunk0 with the next
// one, so it is never picked).
__device__ static int slot_of_chunk(const MuSlot *t, int n, size_t b) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t[mid].chunk0 <= b) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// ---- kernels: elementwise updates over every parameter -------------------------------------

// sgd_apply of core/spec/musgd.c: g' = g + wd*p; s = s*beta + g' (two roundings); p += alpha*(g' + beta*s)
__global__ void musgd_sgd_kernel(const MuSlot *t, int n_slots, size_t chunks, SgdHyper h) {
    pdl_entry();
    for (size_t b = blockIdx.x; b < chunks; b += gridDim.x) {
        MuSlot s = t[slot_of_chunk(t, n_slots, b)];
        size_t lo = (b - s.chunk0) * MU_CHUNK, hi = lo + MU_CHUNK < s.n ? lo + MU_CHUNK : s.n;
        float alpha = h.alpha[s.group], wd = h.wd[s.group];
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            float d = wd != 0.0f ? __fmaf_rn(wd, s.w[i], s.g[i]) : s.g[i];
            float sv = __fadd_rn(__fmul_rn(s.a[i], h.beta), d);
            s.a[i] = sv;
            s.w[i] = __fmaf_rn(alpha, __fmaf_rn(h.beta, sv, d), s.w[i]);
            s.g[i] = 0.0f;
        }
    }
}

// adamw_step's element: decoupled decay (Adam: the decay into the gradient), then the moments and
// the bias-corrected update
__global__ void adamw_kernel(const MuSlot *t, int n_slots, size_t chunks, AdamHyper h) {
    pdl_entry();
    for (size_t b = blockIdx.x; b < chunks; b += gridDim.x) {
        MuSlot s = t[slot_of_chunk(t, n_slots, b)];
        size_t lo = (b - s.chunk0) * MU_CHUNK, hi = lo + MU_CHUNK < s.n ? lo + MU_CHUNK : s.n;
        float decay = h.decay[s.group], l2 = h.l2[s.group], step = h.step[s.group];
        for (size_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
            float g = s.g[i], w = s.w[i];
            if (l2 != 0.0f) g = __fmaf_rn(l2, w, g);
            else w = __fmul_rn(w, decay);
            float m = lerp_rn(s.a[i], g, h.w1);
            float v = __fmaf_rn(h.w2, __fmul_rn(g, g), __fmul_rn(s.b[i], h.b2));
            float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), h.bc2s), h.eps);
            s.a[i] = m;
            s.b[i] = v;
            s.w[i] = __fmaf_rn(step, __fdiv_rn(m, denom), w);
            s.g[i] = 0.0f;
        }
    }
}

// ---- kernels: Muon ---------------------------------------------------------------------------

// For the k matrices of a batch: m = lerp(m, g, 1-beta); u = lerp(g, m, beta); Y = bf16(u), wide.
__global__ void muon_momentum_kernel(const MuSlot *t, int k, int r, int c, float beta, float w1,
                                     bf16 *Y) {
    pdl_entry();
    size_t rc = (size_t)r * c;
    GRID_STRIDE(idx, rc * k) {
        size_t j = idx / rc, e = idx % rc;
        float g = t[j].g[e], m = lerp_rn(t[j].b[e], g, w1);
        t[j].b[e] = m;
        Y[j * rc + wide_at(e, r, c)] = __float2bfloat16_rn(lerp_rn(g, m, beta));
    }
}

// w += alpha[group] * X, X the bf16 update read back from its wide orientation; a shape scale
// other than 1 multiplies it first, rounded to bf16 again (X *= scale on the bf16 tensor).
__global__ void muon_apply_kernel(const MuSlot *t, int k, int r, int c, const bf16 *Y, MuonHyper h) {
    pdl_entry();
    size_t rc = (size_t)r * c;
    GRID_STRIDE(idx, rc * k) {
        size_t j = idx / rc, e = idx % rc;
        float x = __bfloat162float(Y[j * rc + wide_at(e, r, c)]), scale = t[j].scale;
        if (scale != 1.0f) x = bf16r(__fmul_rn(x, scale));
        t[j].w[e] = __fmaf_rn(h.alpha[t[j].group], x, t[j].w[e]);
    }
}

// musgd_newton_schulz_gpu's input and output: (k, r, c) fp32 <-> bf16 wide, and back to fp32
__global__ void ns_pack_kernel(const float *G, int k, int r, int c, bf16 *Y) {
    pdl_entry();
    size_t rc = (size_t)r * c;
    GRID_STRIDE(idx, rc * k) Y[idx / rc * rc + wide_at(idx % rc, r, c)] = __float2bfloat16_rn(G[idx]);
}

__global__ void ns_unpack_kernel(const bf16 *Y, int k, int r, int c, float *X) {
    pdl_entry();
    size_t rc = (size_t)r * c;
    GRID_STRIDE(idx, rc * k) X[idx] = __bfloat162float(Y[idx / rc * rc + wide_at(idx % rc, r, c)]);
}

// One block per matrix: ||Y||_F in double (per thread in index order, then a fixed tree, so the
// result is deterministic), then Y = bf16(Y / bf16(bf16(||Y||) + 1e-7)) as X.norm() + eps in bf16.
__global__ void ns_normalize_kernel(bf16 *Y, size_t mn) {
    pdl_entry();
    __shared__ double sh[NORM_THREADS];
    bf16 *y = Y + blockIdx.x * mn;
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < mn; i += blockDim.x) {
        double v = __bfloat162float(y[i]);
        acc += v * v;   // exact product: contracting it into an fma changes nothing
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int w = NORM_THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    float norm = bf16r(__fadd_rn(bf16r((float)sqrt(sh[0])), 1e-7f));
    for (size_t i = threadIdx.x; i < mn; i += blockDim.x)
        y[i] = __float2bfloat16_rn(__fdiv_rn(__bfloat162float(y[i]), norm));
}

// A = bf16(X X^T) and T = bf16(c*A), the left factor of (c A) A
__global__ void ns_gram_kernel(const float *G32, size_t n, bf16 *A, bf16 *T) {
    pdl_entry();
    GRID_STRIDE(i, n) {
        float a = bf16r(G32[i]);
        A[i] = __float2bfloat16_rn(a);
        T[i] = __float2bfloat16_rn(__fmul_rn(NS_C, a));
    }
}

// B = bf16(bf16(b*A) + bf16((c A) A))
__global__ void ns_poly_kernel(const float *G32, const bf16 *A, size_t n, bf16 *B) {
    pdl_entry();
    GRID_STRIDE(i, n) {
        float ba = bf16r(__fmul_rn(NS_B, __bfloat162float(A[i])));
        B[i] = __float2bfloat16_rn(__fadd_rn(ba, bf16r(G32[i])));
    }
}

// X = bf16(bf16(a*X) + bf16(B X))
__global__ void ns_update_kernel(const float *Z32, size_t n, bf16 *Y) {
    pdl_entry();
    GRID_STRIDE(i, n) {
        float ay = bf16r(__fmul_rn(NS_A, __bfloat162float(Y[i])));
        Y[i] = __float2bfloat16_rn(__fadd_rn(ay, bf16r(Z32[i])));
    }
}

// ---- Newton-Schulz launchers -----------------------------------------------------------------

static int min_dim(int r, int c) { return r < c ? r : c; }
static int max_dim(int r, int c) { return r < c ? c : r; }

extern "C" size_t musgd_ns_scratch_bytes_gpu(int r, int c, int k) {
    size_t m = (size_t)min_dim(r, c), mnw = (size_t)k * m * max_dim(r, c), mm = (size_t)k * m * m;
    return mnw * (sizeof(bf16) + sizeof(float)) + mm * (3 * sizeof(bf16) + sizeof(float)) + 6 * 256;
}

static NsScratch ns_scratch(Device *dev, int r, int c, int k) {
    size_t m = (size_t)min_dim(r, c), mnw = (size_t)k * m * max_dim(r, c), mm = (size_t)k * m * m;
    NsScratch s;
    s.Y = (bf16 *)scratch_take(dev, sizeof(bf16) * mnw);
    s.A = (bf16 *)scratch_take(dev, sizeof(bf16) * mm);
    s.T = (bf16 *)scratch_take(dev, sizeof(bf16) * mm);
    s.B = (bf16 *)scratch_take(dev, sizeof(bf16) * mm);
    s.G32 = (float *)scratch_take(dev, sizeof(float) * mm);
    s.Z32 = (float *)scratch_take(dev, sizeof(float) * mnw);
    return s;
}

// k column-major GEMMs C_j = op(A_j) B_j (fp32 out) of bf16 operands, fp32 accumulation; A_j = A + j*sa.
static void gemm_bf16(Device *dev, cublasOperation_t ta, int M, int N, int K, const bf16 *A, int lda,
                      long long sa, const bf16 *B, int ldb, long long sb, float *C, int ldc, long long sc,
                      int k) {
    const float one = 1.0f, zero = 0.0f;
    checkCublas(cublasGemmStridedBatchedEx(dev->blas, ta, CUBLAS_OP_N, M, N, K, &one, A, CUDA_R_16BF, lda, sa,
                                           B, CUDA_R_16BF, ldb, sb, &zero, C, CUDA_R_32F, ldc, sc, k,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// The five steps on k wide matrices s->Y (k, m, nw), already normalised. Row-major products in
// cuBLAS's column-major terms (a row-major matrix is its transpose column-major):
//   A = X X^T   column-major  A   = (X^T)^T X^T      (symmetric)
//   (c A) A     column-major  ... = A^T (c A)^T
//   B X         column-major  (B X)^T = X^T B^T
static void ns_iterate(Device *dev, int m, int nw, int k, const NsScratch *s) {
    long long mnw = (long long)m * nw, mm = (long long)m * m;
    size_t n_mm = (size_t)k * mm, n_mnw = (size_t)k * mnw;
    for (int step = 0; step < NS_STEPS; step++) {
        gemm_bf16(dev, CUBLAS_OP_T, m, m, nw, s->Y, nw, mnw, s->Y, nw, mnw, s->G32, m, mm, k);
        ns_gram_kernel<<<blocks_for(n_mm), THREADS, 0, dev->stream>>>(s->G32, n_mm, s->A, s->T);
        checkLaunch(dev);
        gemm_bf16(dev, CUBLAS_OP_N, m, m, m, s->A, m, mm, s->T, m, mm, s->G32, m, mm, k);
        ns_poly_kernel<<<blocks_for(n_mm), THREADS, 0, dev->stream>>>(s->G32, s->A, n_mm, s->B);
        checkLaunch(dev);
        gemm_bf16(dev, CUBLAS_OP_N, nw, m, m, s->Y, nw, mnw, s->B, m, mm, s->Z32, nw, mnw, k);
        ns_update_kernel<<<blocks_for(n_mnw), THREADS, 0, dev->stream>>>(s->Z32, n_mnw, s->Y);
        checkLaunch(dev);
    }
}

// Normalise each of the k packed matrices s->Y, then iterate.
static void ns_run(Device *dev, int r, int c, int k, const NsScratch *s) {
    int m = min_dim(r, c), nw = max_dim(r, c);
    ns_normalize_kernel<<<k, NORM_THREADS, 0, dev->stream>>>(s->Y, (size_t)m * nw);
    checkLaunch(dev);
    ns_iterate(dev, m, nw, k, s);
}

extern "C" void musgd_newton_schulz_gpu(Device *dev, const float *G, int r, int c, int k, float *X) {
    size_t mark = dev->scratch.used, n = (size_t)k * r * c;
    NsScratch s = ns_scratch(dev, r, c, k);
    ns_pack_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(G, k, r, c, s.Y);
    checkLaunch(dev);
    ns_run(dev, r, c, k, &s);
    ns_unpack_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(s.Y, k, r, c, X);
    checkLaunch(dev);
    dev->scratch.used = mark;
}

// ---- tables and batches ----------------------------------------------------------------------

static size_t chunks_of(size_t n) { return (n + MU_CHUNK - 1) / MU_CHUNK; }

static unsigned chunk_grid(size_t chunks) {
    return chunks < 1 ? 1u : chunks > GRID_CAP ? (unsigned)GRID_CAP : (unsigned)chunks;
}

static int is_muon(const MuParam *p) { return p->group >= MU_MUON_HI && p->n > 0; }

// The Muon parameters grouped by shape (r, c) in parameter order, at most BATCH_FLOATS floats a
// batch (a larger matrix goes alone): order[] gets their indices in batch order, out[] the batches
// (both at most n_params long). Returns the batch count.
static int plan_batches(const MuParam *p, int n_params, int *order, NsBatch *out) {
    char *taken = (char *)xcalloc(n_params > 0 ? n_params : 1, 1);
    int n_batches = 0, placed = 0;
    for (int i = 0; i < n_params; i++) {
        if (taken[i] || !is_muon(&p[i])) continue;
        NsBatch b = { placed, 0, p[i].r, p[i].c };
        size_t floats = 0;
        for (int j = i; j < n_params; j++) {
            if (taken[j] || !is_muon(&p[j]) || p[j].r != b.r || p[j].c != b.c) continue;
            if (b.k > 0 && floats + p[j].n > BATCH_FLOATS) break;
            floats += p[j].n;
            taken[j] = 1;
            order[placed++] = j;
            b.k++;
        }
        out[n_batches++] = b;
    }
    free(taken);
    return n_batches;
}

extern "C" size_t musgd_state_floats(const MuParam *p, int n_params) {
    size_t n = 0;
    for (int k = 0; k < n_params; k++) n += p[k].n;
    return n;
}

extern "C" size_t musgd_scratch_bytes_gpu(const MuParam *p, int n_params) {
    int *order = (int *)xmalloc(sizeof(int) * (n_params > 0 ? n_params : 1));
    NsBatch *b = (NsBatch *)xmalloc(sizeof(NsBatch) * (n_params > 0 ? n_params : 1));
    int n_batches = plan_batches(p, n_params, order, b);
    size_t most = 0;
    for (int i = 0; i < n_batches; i++) {
        size_t need = musgd_ns_scratch_bytes_gpu(b[i].r, b[i].c, b[i].k);
        if (need > most) most = need;
    }
    free(order);
    free(b);
    return most;
}

// A host table into arena `a`; waits for the copy (`t` is the caller's temporary).
static const MuSlot *table_upload(Device *dev, Arena *a, const MuSlot *t, int n) {
    MuSlot *d = (MuSlot *)arena_take(a, sizeof(MuSlot) * (n > 0 ? n : 1), 256);
    if (n > 0)
        checkCuda(cudaMemcpyAsync(d, t, sizeof(MuSlot) * n, cudaMemcpyHostToDevice, dev->stream));
    device_sync(dev);
    return d;
}

// The slots of every parameter in parameter order, with state a + offset and, for muon groups when
// b_muon_only, b + offset among the Muon parameters (else b + offset among all).
static MuSlot *slots_make(const MuParam *p, int n_params, float *a, float *b, int b_muon_only,
                          size_t *chunks) {
    MuSlot *t = (MuSlot *)xcalloc(n_params > 0 ? n_params : 1, sizeof(MuSlot));
    size_t off = 0, off_b = 0;
    *chunks = 0;
    for (int k = 0; k < n_params; k++) {
        const MuParam *q = &p[k];
        if (q->group < 0 || q->group >= MU_GROUPS || (size_t)q->r * q->c != q->n)
            die("musgd (gpu): parameter %d: group %d, %d x %d view of %zu floats", k, q->group, q->r, q->c,
                q->n);
        int has_b = !b_muon_only || q->group >= MU_MUON_HI;
        t[k] = MuSlot{ q->w, q->g, a + off, has_b ? b + off_b : NULL, q->n, q->group, (float)q->shape_scale,
                       *chunks };
        off += q->n;
        if (has_b) off_b += q->n;
        *chunks += chunks_of(q->n);
    }
    return t;
}

static GpuMuSgd *opt_new(Device *dev, Arena *a, const MuParam *p, int n_params, int adamw, float *sa,
                         float *sb) {
    GpuMuSgd *o = (GpuMuSgd *)xcalloc(1, sizeof *o);
    o->adamw = adamw;
    o->n_params = n_params;
    MuSlot *all = slots_make(p, n_params, sa, sb, !adamw, &o->chunks);
    o->all = table_upload(dev, a, all, n_params);
    if (!adamw) {
        int *order = (int *)xmalloc(sizeof(int) * (n_params > 0 ? n_params : 1));
        o->batches = (NsBatch *)xmalloc(sizeof(NsBatch) * (n_params > 0 ? n_params : 1));
        o->n_batches = plan_batches(p, n_params, order, o->batches);
        int n_muon = o->n_batches ? o->batches[o->n_batches - 1].first + o->batches[o->n_batches - 1].k : 0;
        MuSlot *muon = (MuSlot *)xmalloc(sizeof(MuSlot) * (n_muon > 0 ? n_muon : 1));
        for (int i = 0; i < n_muon; i++) muon[i] = all[order[i]];
        o->muon_slots = table_upload(dev, a, muon, n_muon);
        free(muon);
        free(order);
    }
    free(all);
    return o;
}

extern "C" GpuMuSgd *musgd_new_gpu(Device *dev, Arena *a, const MuParam *p, int n_params, double muon,
                                   double sgd, float *m, float *s) {
    GpuMuSgd *o = opt_new(dev, a, p, n_params, 0, s, m);
    o->muon = muon;
    o->sgd = sgd;
    return o;
}

extern "C" GpuMuSgd *adamw_new_gpu(Device *dev, Arena *a, const MuParam *p, int n_params, float *m,
                                   float *v, int l2) {
    GpuMuSgd *o = opt_new(dev, a, p, n_params, 1, m, v);
    o->l2 = l2;
    return o;
}

extern "C" long musgd_steps_gpu(const GpuMuSgd *o) { return o->steps; }
extern "C" void musgd_set_steps_gpu(GpuMuSgd *o, long steps) { o->steps = steps; }

extern "C" void musgd_free_gpu(GpuMuSgd *o) {
    if (!o) return;
    free(o->batches);
    free(o);
}

// ---- steps -----------------------------------------------------------------------------------

// muon_apply of core/spec/musgd.c for every Muon parameter, a batch of one shape at a time
static void muon_steps(Device *dev, GpuMuSgd *o, const MuStep *st) {
    float beta = (float)st->momentum, w1 = (float)(1 - (double)beta);
    MuonHyper h;
    for (int g = 0; g < MU_GROUPS; g++) h.alpha[g] = (float)-(st->lr[g] * o->muon);
    for (int i = 0; i < o->n_batches; i++) {
        const NsBatch *b = &o->batches[i];
        const MuSlot *t = o->muon_slots + b->first;
        size_t mark = dev->scratch.used, n = (size_t)b->k * b->r * b->c;
        NsScratch s = ns_scratch(dev, b->r, b->c, b->k);
        muon_momentum_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(t, b->k, b->r, b->c, beta, w1, s.Y);
        checkLaunch(dev);
        ns_run(dev, b->r, b->c, b->k, &s);
        muon_apply_kernel<<<blocks_for(n), THREADS, 0, dev->stream>>>(t, b->k, b->r, b->c, s.Y, h);
        checkLaunch(dev);
        dev->scratch.used = mark;
    }
}

// Every parameter's nesterov SGD step; Muon parameters after their Muon update (stream order).
static void sgd_steps(Device *dev, GpuMuSgd *o, const MuStep *st) {
    SgdHyper h;
    h.beta = (float)st->momentum;
    for (int g = 0; g < MU_GROUPS; g++) {
        h.alpha[g] = (float)-(st->lr[g] * (g >= MU_MUON_HI ? o->sgd : 1.0));
        h.wd[g] = musgd_group_decays(g) ? (float)st->weight_decay : 0.0f;
    }
    musgd_sgd_kernel<<<chunk_grid(o->chunks), THREADS, 0, dev->stream>>>(o->all, o->n_params, o->chunks, h);
    checkLaunch(dev);
}

// adamw_step's scalars (bias corrections in double on the host, as the CPU twin), then one launch
static void adamw_steps(Device *dev, GpuMuSgd *o, const MuStep *st) {
    const double beta1 = st->momentum, beta2 = 0.999, eps = 1e-8;
    long t = ++o->steps;
    double bc1 = 1 - pow(beta1, (double)t), bc2_sqrt = sqrt(1 - pow(beta2, (double)t));
    AdamHyper h = {};                              // by name: the arrays are filled below
    h.w1 = (float)(1 - beta1);
    h.b2 = (float)beta2;
    h.w2 = (float)(1 - beta2);
    h.bc2s = (float)bc2_sqrt;
    h.eps = (float)eps;
    for (int g = 0; g < MU_GROUPS; g++) {
        double lr = st->lr[g], wd = musgd_group_decays(g) ? st->weight_decay : 0;
        h.decay[g] = o->l2 ? 1.0f : (float)(1 - lr * wd);
        h.l2[g] = o->l2 ? (float)wd : 0.0f;
        h.step[g] = (float)-(lr / bc1);
    }
    adamw_kernel<<<chunk_grid(o->chunks), THREADS, 0, dev->stream>>>(o->all, o->n_params, o->chunks, h);
    checkLaunch(dev);
}

extern "C" void musgd_step_gpu(Device *dev, GpuMuSgd *o, const MuStep *st) {
    if (o->n_params == 0) return;
    if (o->adamw) {
        adamw_steps(dev, o, st);
        return;
    }
    muon_steps(dev, o, st);
    sgd_steps(dev, o, st);
}
