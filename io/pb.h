// pb.h: a small protobuf encoder (no generated code, no libprotobuf), shared by the ONNX export
// (io/onnx.c) and the TensorBoard event writer (io/tfevents.c). Wire format: each field is a key
// varint (number << 3 | wire type: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32) and its value;
// repeated scalars are written one key per element (the unpacked form every parser accepts).
// A message is built in its own Pb and appended to its parent as a length-delimited field (pb_msg).
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct { unsigned char *b; size_t n, cap; } Pb;

void pb_put(Pb *p, const void *s, size_t n);                 // raw bytes
void pb_varint(Pb *p, uint64_t v);
void pb_key(Pb *p, int field, int wire);
void pb_int(Pb *p, int field, int64_t v);                    // int32/int64/enum: wire type 0
void pb_float(Pb *p, int field, float v);                    // fixed32, little-endian
void pb_double(Pb *p, int field, double v);                  // fixed64, little-endian
void pb_bytes(Pb *p, int field, const void *s, size_t n);    // bytes, string or a message's bytes
void pb_str(Pb *p, int field, const char *s);
void pb_msg(Pb *p, int field, Pb *child);                    // appends child, then frees it
void pb_free(Pb *p);
