// fexp.h: fexp(x), expf computed the same way, bit for bit, on the CPU and in CUDA kernels, for the class
// scores of the DFL decode (core/spec/nms.c and gpu/nms.cu must round alike: CUDA's expf and glibc's differ in
// the last bit for about 1 argument in 15,000). The algorithm is glibc's own expf (ARM optimized-routines,
// sysdeps/ieee754/flt-32/e_expf.c without FMA): x*32/ln2 = k + r, exp(x) = 2^(k/32) * p(r) with a
// 32-entry table and a cubic, in double; error < 0.502 ULP. Every operation is a single correctly
// rounded IEEE operation (no contraction: core/ builds as C11, CUDA uses the _rn intrinsics).
#pragma once
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define FEXP_FN static __device__ __forceinline__
#define FEXP_MUL(a, b) __dmul_rn(a, b)
#define FEXP_ADD(a, b) __dadd_rn(a, b)
#else
#define FEXP_FN static inline
#define FEXP_MUL(a, b) ((a) * (b))
#define FEXP_ADD(a, b) ((a) + (b))
#endif

// 2^(i/32) as double bits, less i << 47 (the exponent the integer part of k adds back)
#define FEXP_TABLE { \
    0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull, \
    0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull, \
    0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull, \
    0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull, \
    0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull, \
    0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull, \
    0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull, \
    0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull }

FEXP_FN float fexp(float x) {
#ifdef __CUDACC__
    const uint64_t T[32] = FEXP_TABLE;
#else
    static const uint64_t T[32] = FEXP_TABLE;
#endif
    if (x != x) return x + x;                               // NaN
    if (x > 0x1.62e42ep6f) return __builtin_inff();         // overflow (and +inf)
    if (x < -0x1.9fe368p6f) return 0.0f;                    // underflow (and -inf)
    const double inv_ln2_n = 0x1.71547652b82fep+5, shift = 0x1.8p+52;
    const double c0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32, c1 = 0x1.ebfce50fac4f3p-3 / 32 / 32,
                 c2 = 0x1.62e42ff0c52d6p-1 / 32;
    double z = FEXP_MUL(inv_ln2_n, (double)x);
    double kd = FEXP_ADD(z, shift);                         // round z to an integer k (ties to even)
    uint64_t ki, t;
    memcpy(&ki, &kd, sizeof ki);
    kd = FEXP_ADD(kd, -shift);
    double r = FEXP_ADD(z, -kd);                            // |r| <= 1/2
    t = T[ki % 32] + (ki << 47);
    double s;
    memcpy(&s, &t, sizeof s);                               // 2^(k/32)
    double p = FEXP_ADD(FEXP_MUL(c0, r), c1), r2 = FEXP_MUL(r, r), y = FEXP_ADD(FEXP_MUL(c2, r), 1.0);
    y = FEXP_ADD(FEXP_MUL(p, r2), y);
    return (float)FEXP_MUL(y, s);
}

// The class score: sigmoid in float, 1 / (1 + fexp(-x)), in that order on both sides.
FEXP_FN float fexp_sigmoid(float x) {
#ifdef __CUDACC__
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, fexp(-x)));
#else
    return 1.0f / (1.0f + fexp(-x));
#endif
}
