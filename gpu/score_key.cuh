// score_key.cuh: the 64-bit sort keys of gpu/nms.cu and gpu/topk26.cu: an ascending radix sort of them
// is the CPU's sort by score descending, index ascending on ties (nms_run's stable sort, topk26's qsort).
#pragma once
#include <stdint.h>

// High 32 bits order scores descending (-0 == +0, as the CPU's <, ==), low 32 bits the item's index.
__device__ static inline uint64_t score_key(float s, uint32_t index) {
    if (s == 0.0f) s = 0.0f;
    uint32_t u = __float_as_uint(s);
    u = u >> 31 ? ~u : u | 0x80000000u;
    return (uint64_t)(~u) << 32 | index;
}

// The score a key was made from (+0 for -0).
__device__ static inline float score_of_key(uint64_t key) {
    uint32_t u = ~(uint32_t)(key >> 32);
    return __uint_as_float(u >> 31 ? u & 0x7fffffffu : ~u);
}
