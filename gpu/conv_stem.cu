// conv_stem.cu: the first convolution of a detector (3 input channels, 3x3, groups 1) done directly,
// forward and weight gradient. Through im2col + GEMM it moved 27-column rows of a 640x640 batch for
// a GEMM too thin to use the tensor cores well; here the 27 patch values of an output pixel are gathered
// once, by one thread, and the product runs where the bf16 operands allow on the tensor cores.
// On a bf16 device (`rnd`) the operands are rounded to bf16, as the GEMM path rounds them, and a warp
// stages 32 pixels' patches (and, for the weight gradient, their dy) in shared memory as bf16 and runs
// mma.sync m16n8k16 with fp32 sums: products are exact, only the order of the fp32 sums is the tensor
// core's. In fp32 and tf32 the operands stay fp32: a thread computes an output pixel's K channels from its
// 27 inputs (forward) and a block sums dy x patch products over a strip staged by all its threads (weight
// gradient), with fmaf in order. Deterministic: the weight gradient sums fixed strips of pixels (set by M
// alone), each strip's partials by one warp or block in a fixed order, the strips in order.
// Legend: N batch, C = 3 channels in, K out, H,W in, P,Q out, J = C*9 patch values, M = N*P*Q.
#include "gpu/mma.cuh"

enum { STEM_C = 3, STEM_J = STEM_C * 9, STEM_TILE = 64, STEM_THREADS = 256, STEM_MAX_STRIPS = 2048 };
// The tensor-core kernels: a warp takes CHUNK pixels at a time, a block has MMA_WARPS warps; the forward's warps
// take FWD_CHUNKS consecutive chunks each. Patch rows hold J padded with zeros to JP = 32 bf16 values; shared
// rows are padded by 8 bf16 (16 bytes) so that ldmatrix's eight row addresses fall in distinct bank groups.
enum { CHUNK = 32, MMA_WARPS = 4, FWD_CHUNKS = 8, JP = 32, ROW_PAD = 8 };
static_assert(STEM_TILE % CHUNK == 0, "a strip is whole chunks");

extern "C" int conv_stem_fits(const ConvDims *d) {
    return d->C == STEM_C && d->R == 3 && d->S == 3 && d->groups == 1 &&
           (d->K == 16 || d->K == 32 || d->K == 64) && (size_t)d->N * d->P * d->Q < (1u << 31);
}

// Values j0 .. j1-1 of output pixel m's patch, in PyTorch's weight order (c, r, s), into row; padding
// reads as 0. The loop unrolls: all 27 a thread, or 7 a thread (the fp32 weight gradient's staging).
__device__ static inline void stem_values(const ConvDims &d, Map x, unsigned m, int j0, int j1, float *row) {
    unsigned pq = m % (unsigned)(d.P * d.Q), n = m / (unsigned)(d.P * d.Q);
    int p = (int)(pq / d.Q), q = (int)(pq % d.Q);
#pragma unroll
    for (int j = j0; j < j1; j++) {
        int c = j / 9, r = j % 9 / 3, s = j % 3, h = p * d.stride - d.pad + r, w = q * d.stride - d.pad + s;
        bool in = h >= 0 && h < d.H && w >= 0 && w < d.W;
        row[j] = in ? map_get(x, (((size_t)n * d.H + h) * d.W + w) * x.ld + c) : 0.0f;
    }
}

// Eight consecutive channels of an output pixel, stored with one 16-byte (bf16) or two 16-byte (fp32)
// writes when the address allows, else one by one.
__device__ static inline void put8(Map y, size_t off, const float *a) {
    bool aligned = (((uintptr_t)y.data + off * (y.bf16 ? 2 : 4)) & 15) == 0;
    if (y.bf16 && aligned) {
        uint4 u = make_uint4(bf16_pack(a[0], a[1]), bf16_pack(a[2], a[3]), bf16_pack(a[4], a[5]), bf16_pack(a[6], a[7]));
        *(uint4 *)((__nv_bfloat16 *)y.data + off) = u;
    } else if (!y.bf16 && aligned) {
        *(float4 *)(y.data + off) = make_float4(a[0], a[1], a[2], a[3]);
        *(float4 *)(y.data + off + 4) = make_float4(a[4], a[5], a[6], a[7]);
    } else {
        for (int i = 0; i < 8; i++) map_put(y, off + i, a[i]);
    }
}

// fp32 operands. y (either storage) = conv(x) (+ b): one thread per output pixel, the weights in shared
// memory; each channel's sum runs over the 27 inputs in order, eight channels at a time, stored together.
template <int K>
__global__ void stem_forward_kernel(ConvDims d, Map x, const float *w, const float *b, Map y) {
    pdl_entry();
    __shared__ float ws[K * STEM_J];
    for (int i = threadIdx.x; i < K * STEM_J; i += blockDim.x) ws[i] = w[i];
    __syncthreads();
    unsigned M = (unsigned)(d.N * d.P) * d.Q;
    for (unsigned m = blockIdx.x * blockDim.x + threadIdx.x; m < M; m += gridDim.x * blockDim.x) {
        float v[STEM_J];
        stem_values(d, x, m, 0, STEM_J, v);
        size_t off = (size_t)m * y.ld;
        for (int k0 = 0; k0 < K; k0 += 8) {
            float acc[8];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                acc[i] = b ? b[k0 + i] : 0.0f;
#pragma unroll
                for (int j = 0; j < STEM_J; j++) acc[i] = fmaf(ws[(k0 + i) * STEM_J + j], v[j], acc[i]);
            }
            put8(y, off + k0, acc);
        }
    }
}

// fp32 operands. part (strips, K*J) = Σ over strip g's pixels of dy(m, k) · patch(m, j), one block a strip.
// Thread t owns k = t / (256 / K) and j = t % (256 / K) + (256 / K)i; a tile of pixels is staged in shared
// memory first.
template <int K>
__global__ void stem_wgrad_kernel(ConvDims d, Map x, Map dy, unsigned per_strip, float *part) {
    pdl_entry();
    __shared__ float xs[STEM_TILE][STEM_J + 1], ds[STEM_TILE][K];
    unsigned M = (unsigned)(d.N * d.P) * d.Q, m0 = blockIdx.x * per_strip;
    unsigned m1 = m0 + per_strip < M ? m0 + per_strip : M;
    const int per_k = STEM_THREADS / K, slots = (STEM_J + per_k - 1) / per_k;   // outputs per thread
    int k = threadIdx.x / per_k, j0 = threadIdx.x % per_k;
    float acc[(STEM_J + STEM_THREADS / K - 1) / (STEM_THREADS / K)] = {};
    for (unsigned t0 = m0; t0 < m1; t0 += STEM_TILE) {
        for (int i = threadIdx.x; i < STEM_TILE * 4; i += blockDim.x) {   // 4 threads a pixel, 7 values each
            unsigned m = t0 + i / 4;
            int j0 = i % 4 * 7, j1 = j0 + 7 < STEM_J ? j0 + 7 : STEM_J;
            if (m < m1) stem_values(d, x, m, j0, j1, xs[i / 4]);
            else for (int j = j0; j < j1; j++) xs[i / 4][j] = 0.0f;
        }
        for (int i = threadIdx.x; i < STEM_TILE * K; i += blockDim.x) {
            unsigned m = t0 + i / K;
            ds[i / K][i % K] = m < m1 ? map_get(dy, (size_t)m * dy.ld + i % K) : 0.0f;
        }
        __syncthreads();
        for (int p = 0; p < STEM_TILE; p++) {
            float g = ds[p][k];
#pragma unroll
            for (int s = 0; s < slots; s++) {
                int j = j0 + s * per_k;
                if (j < STEM_J) acc[s] = fmaf(g, xs[p][j], acc[s]);
            }
        }
        __syncthreads();
    }
    for (int s = 0; s < slots; s++) {
        int j = j0 + s * per_k;
        if (j < STEM_J) part[(size_t)blockIdx.x * K * STEM_J + k * STEM_J + j] = acc[s];
    }
}

// ---- bf16 operands on the tensor cores (gpu/mma.cuh; sm_80 and later: only bf16 devices come here) ----

// Output pixel m's patch (zeros unless valid), rounded to bf16 and padded with zeros to JP values, into a
// 16-byte aligned shared row: one index computation, 27 loads in flight, four 16-byte stores.
__device__ static inline void stage_patch(const ConvDims &d, Map x, unsigned m, bool valid, bf16 *row) {
    float v[JP];
    if (valid) stem_values(d, x, m, 0, STEM_J, v);
    else
        for (int j = 0; j < STEM_J; j++) v[j] = 0.0f;
    for (int j = STEM_J; j < JP; j++) v[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < JP / 8; i++) {
        const float *e = v + 8 * i;
        ((uint4 *)row)[i] = make_uint4(bf16_pack(e[0], e[1]), bf16_pack(e[2], e[3]), bf16_pack(e[4], e[5]),
                                       bf16_pack(e[6], e[7]));
    }
}

// Eight dy values at offset off (zeros unless valid), as bf16, into a 16-byte aligned shared slot: a bf16
// map's bits copied in one load where the address allows, else each value read and rounded (the same bits).
__device__ static inline void stage_dy8(Map dy, bool valid, size_t off, bf16 *slot) {
    uint4 u = make_uint4(0, 0, 0, 0);
    const bf16 *src = (const bf16 *)dy.data + off;
    if (valid && dy.bf16 && ((uintptr_t)src & 15) == 0) {
        u = *(const uint4 *)src;
    } else if (valid) {
        float a[8];
        for (int i = 0; i < 8; i++) a[i] = map_get(dy, off + i);
        u = make_uint4(bf16_pack(a[0], a[1]), bf16_pack(a[2], a[3]), bf16_pack(a[4], a[5]), bf16_pack(a[6], a[7]));
    }
    *(uint4 *)slot = u;
}

// bf16 operands. y (either storage) = conv(x) (+ b) as a GEMM on the tensor cores: (pixels, JP) patches times
// W^T (JP, K). A warp takes FWD_CHUNKS chunks of CHUNK consecutive pixels; per chunk each lane stages one
// pixel's patch, the warp runs two 16-pixel m-tiles by K/8 n-tiles by two 16-value steps of J, and the sums
// pass through the same shared rows (as fp32) so that each pixel's K channels are stored 8 at a time.
template <int K>
__global__ void __launch_bounds__(MMA_WARPS * 32)
stem_forward_mma_kernel(ConvDims d, Map x, const float *w, const float *b, Map y) {
    pdl_entry();
    constexpr int NT = K / 8, XR = JP + ROW_PAD, YR = K + ROW_PAD;   // n-tiles; bf16 a patch row, floats an output row
    static_assert(CHUNK * YR * sizeof(float) >= CHUNK * XR * sizeof(bf16), "the output rows cover the patch rows");
    __shared__ __align__(16) float rows[MMA_WARPS][CHUNK * YR];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    bf16 *xs = (bf16 *)rows[warp];   // (CHUNK, XR) the chunk's patches
    float *ys = rows[warp];          // (CHUNK, YR) its outputs, once the patches are in registers
    unsigned wb[2][NT][2];           // W^T as the b operand: step s, n-tile nt: j = 16s + 8h + 2t (+1), k = 8nt + g
    float bias[NT][2];
#pragma unroll
    for (int s = 0; s < 2; s++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int j = 16 * s + 8 * h + 2 * t;
                const float *wk = w + (8 * nt + g) * STEM_J;
                wb[s][nt][h] = bf16_pack(j < STEM_J ? wk[j] : 0.0f, j + 1 < STEM_J ? wk[j + 1] : 0.0f);
            }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        bias[nt][0] = b ? b[8 * nt + 2 * t] : 0.0f;
        bias[nt][1] = b ? b[8 * nt + 2 * t + 1] : 0.0f;
    }
    unsigned M = (unsigned)(d.N * d.P) * d.Q, first = (blockIdx.x * MMA_WARPS + warp) * (unsigned)(FWD_CHUNKS * CHUNK);
    for (int c = 0; c < FWD_CHUNKS; c++) {
        unsigned m0 = first + c * CHUNK;
        if (m0 >= M) break;
        stage_patch(d, x, m0 + lane, m0 + lane < M, xs + lane * XR);
        __syncwarp();
        unsigned a[2][2][4];   // m-tile mt (pixels 16mt ..), step s (j 16s ..)
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int s = 0; s < 2; s++)
                ldsm_x4(xs + (16 * mt + (lane & 7) + (lane >> 3 & 1) * 8) * XR + 16 * s + (lane >> 4 & 1) * 8, a[mt][s]);
        __syncwarp();   // every lane holds its patches: the rows may take the outputs
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                float acc[4] = { bias[nt][0], bias[nt][1], bias[nt][0], bias[nt][1] };
                mma_bf16(acc, a[mt][0], wb[0][nt][0], wb[0][nt][1]);
                mma_bf16(acc, a[mt][1], wb[1][nt][0], wb[1][nt][1]);
                *(float2 *)(ys + (16 * mt + g) * YR + 8 * nt + 2 * t) = make_float2(acc[0], acc[1]);
                *(float2 *)(ys + (16 * mt + g + 8) * YR + 8 * nt + 2 * t) = make_float2(acc[2], acc[3]);
            }
        __syncwarp();
        for (int i = lane; i < CHUNK * NT; i += 32) {
            int p = i / NT, k0 = i % NT * 8;
            if (m0 + p < M) put8(y, (size_t)(m0 + p) * y.ld + k0, ys + p * YR + k0);
        }
        __syncwarp();   // the outputs are stored: the rows may take the next chunk's patches
    }
}

// bf16 operands. part (strips, K*J) = Σ over strip g's pixels of dy(m, k) · patch(m, j), one warp a strip, as
// a GEMM on the tensor cores whose reduction runs over pixels: D (JP, K) += patches^T (JP, 16 pixels) · dy
// (16 pixels, K). Per chunk of CHUNK pixels each lane stages one pixel's patch and the warp its dy rows, both
// (pixel, value) in shared memory, which ldmatrix .trans turns into the operands.
template <int K>
__global__ void __launch_bounds__(MMA_WARPS * 32)
stem_wgrad_mma_kernel(ConvDims d, Map x, Map dy, unsigned per_strip, unsigned strips, float *part) {
    pdl_entry();
    constexpr int NT = K / 8, XR = JP + ROW_PAD, DR = K + ROW_PAD;   // n-tiles; bf16 a patch row, a dy row
    __shared__ __align__(16) bf16 xs_all[MMA_WARPS][CHUNK * XR], ds_all[MMA_WARPS][CHUNK * DR];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    unsigned strip = blockIdx.x * MMA_WARPS + warp;
    if (strip >= strips) return;
    bf16 *xs = xs_all[warp], *ds = ds_all[warp];
    unsigned M = (unsigned)(d.N * d.P) * d.Q, m0 = strip * per_strip, m1 = m0 + per_strip < M ? m0 + per_strip : M;
    float acc[2][NT][4] = {};   // m-tile mt, n-tile nt: j = 16mt + g (+8), k = 8nt + 2t (+1)
    for (unsigned c0 = m0; c0 < m1; c0 += CHUNK) {
        stage_patch(d, x, c0 + lane, c0 + lane < m1, xs + lane * XR);
        for (int i = lane; i < CHUNK * NT; i += 32) {
            int p = i / NT, k0 = i % NT * 8;
            stage_dy8(dy, c0 + p < m1, (size_t)(c0 + p) * dy.ld + k0, ds + p * DR + k0);
        }
        __syncwarp();
#pragma unroll
        for (int p0 = 0; p0 < CHUNK; p0 += 16) {   // 16 pixels a step: the mma's reduction
            unsigned a[2][4], bq[NT / 2][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
                ldsm_x4_trans(xs + (p0 + (lane & 7) + (lane >> 4 & 1) * 8) * XR + 16 * mt + (lane >> 3 & 1) * 8, a[mt]);
#pragma unroll
            for (int np = 0; np < NT / 2; np++)   // n-tiles 2np and 2np + 1
                ldsm_x4_trans(ds + (p0 + (lane & 7) + (lane >> 3 & 1) * 8) * DR + 16 * np + (lane >> 4 & 1) * 8, bq[np]);
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++) mma_bf16(acc[mt][nt], a[mt], bq[nt / 2][nt % 2 * 2], bq[nt / 2][nt % 2 * 2 + 1]);
        }
        __syncwarp();   // the operands are in registers: the rows may take the next chunk
    }
    float *out = part + (size_t)strip * K * STEM_J;
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int j = 16 * mt + g + e / 2 * 8, k = 8 * nt + 2 * t + e % 2;
                if (j < STEM_J) out[k * STEM_J + j] = acc[mt][nt][e];
            }
}

template <int K>
static void stem_forward(Device *dev, const ConvDims *d, Map x, const float *w, const float *b, Map y) {
    size_t M = (size_t)d->N * d->P * d->Q, per_block = (size_t)MMA_WARPS * FWD_CHUNKS * CHUNK;
    if (dev->precision == GPU_BF16)
        stem_forward_mma_kernel<K><<<(unsigned)((M + per_block - 1) / per_block), MMA_WARPS * 32, 0, dev->stream>>>(
            *d, x, w, b, y);
    else
        stem_forward_kernel<K><<<blocks_for(M), THREADS, 0, dev->stream>>>(*d, x, w, b, y);
    checkLaunch(dev);
}

extern "C" void conv_stem_forward_gpu(Device *dev, const ConvDims *d, Map x, const float *w, const float *b, Map y) {
    if (d->K == 16) stem_forward<16>(dev, d, x, w, b, y);
    else if (d->K == 32) stem_forward<32>(dev, d, x, w, b, y);
    else stem_forward<64>(dev, d, x, w, b, y);
}

// Pixels per strip: a multiple of the tile (and so of CHUNK), strips set by M alone (deterministic on any GPU).
static unsigned strip_pixels(size_t M) {
    size_t per = (M + STEM_MAX_STRIPS - 1) / STEM_MAX_STRIPS;
    per = (per + STEM_TILE - 1) / STEM_TILE * STEM_TILE;
    return (unsigned)(per < STEM_TILE ? STEM_TILE : per);
}

extern "C" size_t conv_stem_workspace_bytes_gpu(const ConvDims *d) {
    size_t M = (size_t)d->N * d->P * d->Q, strips = (M + strip_pixels(M) - 1) / strip_pixels(M);
    return sizeof(float) * strips * d->K * STEM_J + 256;
}

template <int K>
static void stem_wgrad(Device *dev, const ConvDims *d, Map x, Map dy, float *dw) {
    size_t M = (size_t)d->N * d->P * d->Q, mark = dev->scratch.used;
    unsigned per = strip_pixels(M);
    int strips = (int)((M + per - 1) / per), n = K * STEM_J;
    float *part = (float *)scratch_take(dev, sizeof(float) * strips * n);
    if (dev->precision == GPU_BF16)
        stem_wgrad_mma_kernel<K><<<(strips + MMA_WARPS - 1) / MMA_WARPS, MMA_WARPS * 32, 0, dev->stream>>>(
            *d, x, dy, per, (unsigned)strips, part);
    else
        stem_wgrad_kernel<K><<<strips, STEM_THREADS, 0, dev->stream>>>(*d, x, dy, per, part);
    checkLaunch(dev);
    wgrad_combine(dev, part, strips, n, 1.0f, dw);   // gpu/mma.cuh
    dev->scratch.used = mark;
}

extern "C" void conv_stem_wgrad_gpu(Device *dev, const ConvDims *d, Map x, Map dy, float *dw) {
    if (d->K == 16) stem_wgrad<16>(dev, d, x, dy, dw);
    else if (d->K == 32) stem_wgrad<32>(dev, d, x, dy, dw);
    else stem_wgrad<64>(dev, d, x, dy, dw);
}
