// safetensors.h: read and write the safetensors format (Hugging Face): an 8-byte little-endian header
// length, a JSON header naming each tensor's dtype, shape and byte range, then the raw little-endian data.
// Shapes are listed outermost first (row-major, as PyTorch stores them).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/base/util.h"

#define ST_MAX_DIMS 8

typedef enum { ST_F64, ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL } StDtype;

typedef struct {
    const char *name;
    StDtype     dtype;
    int         ndim;
    int64_t     shape[ST_MAX_DIMS];
    size_t      nbytes;
    const void *data;    // inside the mapped file (or in `owned`); may be unaligned: read it with st_read_f32 or memcpy
} StTensor;

typedef struct {
    char          *path;
    unsigned char *map;        // the whole file, mapped read-only
    size_t         map_size;
    StTensor      *tensor;     // (n) in header order: iterate with for (i = 0; i < n; i++)
    int            n;
    const StTensor **by_name;  // (n) the tensors sorted by name, for st_find
    char         **meta_key;   // (n_meta) the __metadata__ string map
    char         **meta_val;
    int            n_meta;
    void         **owned;      // (n_owned) copies a reader made (a .pt's strided views gathered), freed by st_close
    int            n_owned;
} SafeTensors;

// st_open: map `path` and parse its header. Rejects (-1, message naming the file and tensor) a short
// file, a header length over 100 MB or past the end, malformed JSON, an unknown dtype, a byte size that
// is not numel * dtype size, ranges past the end of the file or overlapping. On success the caller owns
// *st and releases it with st_close.
int st_open(const char *path, SafeTensors *st, Err *err);
void st_close(SafeTensors *st);
// For readers of other formats that fill a SafeTensors (io/pt.c): st_map maps `path` read-only into
// st->map (refusing a special file or an empty one); st_index builds st_find's index of st->tensor,
// refusing a name that appears twice. -1 with a message naming the file.
int st_map(const char *path, SafeTensors *st, Err *err);
int st_index(SafeTensors *st, Err *err);

const StTensor *st_find(const SafeTensors *st, const char *name);   // NULL when absent
const char     *st_meta(const SafeTensors *st, const char *key);    // NULL when absent
size_t          st_numel(const StTensor *t);
size_t          st_dtype_size(StDtype d);
const char     *st_dtype_name(StDtype d);                           // "F32", ...

// st_read_f32: convert tensor `name` (any dtype: F64 rounded, integers and BOOL as their values) to n floats
// in out. -1 if it is absent or does not hold exactly n elements.
int st_read_f32(const SafeTensors *st, const char *name, float *out, size_t n, Err *err);

// A tensor to write: data holds numel(shape) elements of dtype (ST_F32 or ST_I64), row-major.
typedef struct {
    const char *name;
    StDtype     dtype;
    int         ndim;
    int64_t     shape[ST_MAX_DIMS];
    const void *data;
} StWriteTensor;

// st_write: write n tensors, in the given order, and the optional __metadata__ (a JSON object of
// string values, e.g. "{\"format\":\"pt\"}", or NULL). The header is padded with spaces so the data
// starts 8-byte aligned, as the reference writer does. Written to path.tmp, flushed (fsync), renamed
// over path and the folder synced, so a crash (kill -9, power loss) leaves under `path` either the old
// file or the new one, whole. -1 on bad input or I/O failure (disk full, file size limit): path.tmp is
// removed, path is untouched, and the message says so.
int st_write(const char *path, const StWriteTensor *t, int n, const char *meta_json, Err *err);
