// conv_stem.cu: the first convolution of a detector (3 input channels, 3x3, groups 1) done directly,
// forward and weight gradient. Through im2col + GEMM it moved 27-column rows of a 640x640 batch for
// a GEMM too thin to use the tensor cores (3.5 TFLOP/s, 10 ms a step); here a thread computes an
// output pixel's K channels from its 27 inputs and stores them 8 at a time (forward), and a block
// sums dy x patch products over a strip of pixels staged by all its threads (weight gradient). Operands are rounded to bf16 on a bf16 device (`rnd`), as the
// GEMM path rounds them; products are summed in fp32; deterministic: fixed strips, sums in order.
// Legend: N batch, C = 3 channels in, K out, H,W in, P,Q out, J = C*9 patch values, M = N*P*Q.
#include "gpu/kernel_util.h"

enum { STEM_C = 3, STEM_J = STEM_C * 9, STEM_TILE = 64, STEM_THREADS = 256, STEM_MAX_STRIPS = 1024 };

extern "C" int conv_stem_fits(const ConvDims *d) {
    return d->C == STEM_C && d->R == 3 && d->S == 3 && d->groups == 1 &&
           (d->K == 16 || d->K == 32 || d->K == 64) && (size_t)d->N * d->P * d->Q < (1u << 31);
}

__device__ static inline float operand(float v, bool rnd) { return rnd ? __bfloat162float(__float2bfloat16(v)) : v; }

// Values j0 .. j1-1 of output pixel m's patch, in PyTorch's weight order (c, r, s), into row; padding
// reads as 0. The forward takes all 27 (the loop unrolls), the weight gradient's staging 7 a thread.
__device__ static inline void stem_values(const ConvDims &d, Map x, unsigned m, int j0, int j1, bool rnd, float *row) {
    unsigned pq = m % (unsigned)(d.P * d.Q), n = m / (unsigned)(d.P * d.Q);
    int p = (int)(pq / d.Q), q = (int)(pq % d.Q);
#pragma unroll
    for (int j = j0; j < j1; j++) {
        int c = j / 9, r = j % 9 / 3, s = j % 3, h = p * d.stride - d.pad + r, w = q * d.stride - d.pad + s;
        bool in = h >= 0 && h < d.H && w >= 0 && w < d.W;
        row[j] = in ? operand(map_get(x, (((size_t)n * d.H + h) * d.W + w) * x.ld + c), rnd) : 0.0f;
    }
}

// y (either storage) = conv(x) (+ b): one thread per output pixel, the weights in shared memory.
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

// y (either storage) = conv(x) (+ b): one thread per output pixel, the weights in shared memory; each
// channel's sum runs over the 27 inputs in order, eight channels at a time, stored together.
template <int K>
__global__ void stem_forward_kernel(ConvDims d, Map x, const float *w, const float *b, bool rnd, Map y) {
    pdl_entry();
    __shared__ float ws[K * STEM_J];
    for (int i = threadIdx.x; i < K * STEM_J; i += blockDim.x) ws[i] = operand(w[i], rnd);
    __syncthreads();
    unsigned M = (unsigned)(d.N * d.P) * d.Q;
    for (unsigned m = blockIdx.x * blockDim.x + threadIdx.x; m < M; m += gridDim.x * blockDim.x) {
        float v[STEM_J];
        stem_values(d, x, m, 0, STEM_J, rnd, v);
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

// part (strips, K*J) = Σ over strip g's pixels of dy(m, k) · patch(m, j). Thread t owns k = t / 8 and
// j = t % 8 + 8i (i < 4); a tile of pixels is staged in shared memory first.
template <int K>
__global__ void stem_wgrad_kernel(ConvDims d, Map x, Map dy, unsigned per_strip, bool rnd, float *part) {
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
            if (m < m1) stem_values(d, x, m, j0, j1, rnd, xs[i / 4]);
            else for (int j = j0; j < j1; j++) xs[i / 4][j] = 0.0f;
        }
        for (int i = threadIdx.x; i < STEM_TILE * K; i += blockDim.x) {
            unsigned m = t0 + i / K;
            ds[i / K][i % K] = m < m1 ? operand(map_get(dy, (size_t)m * dy.ld + i % K), rnd) : 0.0f;
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

// dw (K, C, 3, 3) += Σ_g part[g] in strip order, in double
__global__ void stem_wgrad_combine_kernel(const float *part, int strips, int n, float *dw) {
    pdl_entry();
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= n) return;
    double s = 0.0;
#pragma unroll 8
    for (int g = 0; g < strips; g++) s += part[(size_t)g * n + o];   // loads batched, sums in order
    dw[o] += (float)s;
}

template <int K>
static void stem_forward(Device *dev, const ConvDims *d, Map x, const float *w, const float *b, Map y) {
    size_t M = (size_t)d->N * d->P * d->Q;
    bool rnd = dev->precision == GPU_BF16;
    stem_forward_kernel<K><<<blocks_for(M), THREADS, 0, dev->stream>>>(*d, x, w, b, rnd, y);
    checkLaunch(dev);
}

extern "C" void conv_stem_forward_gpu(Device *dev, const ConvDims *d, Map x, const float *w, const float *b, Map y) {
    if (d->K == 16) stem_forward<16>(dev, d, x, w, b, y);
    else if (d->K == 32) stem_forward<32>(dev, d, x, w, b, y);
    else stem_forward<64>(dev, d, x, w, b, y);
}

// Pixels per strip: a multiple of the tile, strips set by M alone (deterministic on any GPU).
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
    bool rnd = dev->precision == GPU_BF16;
    stem_wgrad_kernel<K><<<strips, STEM_THREADS, 0, dev->stream>>>(*d, x, dy, per, rnd, part);
    checkLaunch(dev);
    stem_wgrad_combine_kernel<<<(n + THREADS - 1) / THREADS, THREADS, 0, dev->stream>>>(part, strips, n, dw);
    checkLaunch(dev);
    dev->scratch.used = mark;
}

extern "C" void conv_stem_wgrad_gpu(Device *dev, const ConvDims *d, Map x, Map dy, float *dw) {
    if (d->K == 16) stem_wgrad<16>(dev, d, x, dy, dw);
    else if (d->K == 32) stem_wgrad<32>(dev, d, x, dy, dw);
    else stem_wgrad<64>(dev, d, x, dy, dw);
}
