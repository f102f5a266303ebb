// pb.c: see pb.h.
#include "io/pb.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/util.h"

void pb_put(Pb *p, const void *s, size_t n) {
    if (p->n + n > p->cap) {
        p->cap = p->n + n > 2 * p->cap ? p->n + n + 64 : 2 * p->cap;
        p->b = xrealloc(p->b, p->cap);
    }
    if (n) memcpy(p->b + p->n, s, n);
    p->n += n;
}

void pb_varint(Pb *p, uint64_t v) {
    unsigned char b[10];
    int n = 0;
    do { b[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)); v >>= 7; } while (v);
    pb_put(p, b, n);
}

void pb_key(Pb *p, int field, int wire) { pb_varint(p, (uint64_t)field << 3 | wire); }
void pb_int(Pb *p, int field, int64_t v) { pb_key(p, field, 0); pb_varint(p, (uint64_t)v); }

static void put_le(Pb *p, uint64_t u, int n) {
    unsigned char b[8];
    for (int i = 0; i < n; i++) b[i] = (unsigned char)(u >> 8 * i);
    pb_put(p, b, n);
}

void pb_float(Pb *p, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    pb_key(p, field, 5);
    put_le(p, u, 4);
}

void pb_double(Pb *p, int field, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    pb_key(p, field, 1);
    put_le(p, u, 8);
}

void pb_bytes(Pb *p, int field, const void *s, size_t n) {
    pb_key(p, field, 2);
    pb_varint(p, n);
    pb_put(p, s, n);
}

void pb_str(Pb *p, int field, const char *s) { pb_bytes(p, field, s, strlen(s)); }
void pb_msg(Pb *p, int field, Pb *child) { pb_bytes(p, field, child->b, child->n); pb_free(child); }
void pb_free(Pb *p) { free(p->b); memset(p, 0, sizeof *p); }
