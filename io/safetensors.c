// safetensors.c: see safetensors.h. The header is parsed by a small strict JSON reader that accepts
// only what the format uses: one object of tensor entries {dtype, shape, data_offsets} and __metadata__.
#include "io/safetensors.h"
#include "core/base/readfile.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER (100u << 20)   // the reference implementation's limit

static const struct { const char *name; size_t size; } dtypes[] = {
    [ST_F64] = {"F64", 8}, [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2},
    [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4}, [ST_I16] = {"I16", 2}, [ST_I8] = {"I8", 1},
    [ST_U8] = {"U8", 1},   [ST_BOOL] = {"BOOL", 1},
};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

size_t st_dtype_size(StDtype d) { return dtypes[d].size; }
const char *st_dtype_name(StDtype d) { return dtypes[d].name; }

size_t st_numel(const StTensor *t) {
    size_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
    return n;
}

// ---- JSON reader ------------------------------------------------------------------------------
typedef struct {
    const char *s, *end, *begin;
    const char *path;
    Err *err;
} Json;

static int json_fail(Json *j, const char *what) {
    return err_set(j->err, "%s: header byte %td: %s; the file is not valid safetensors",
                   j->path, j->s - j->begin, what);
}

static void json_ws(Json *j) {
    while (j->s < j->end && (*j->s == ' ' || *j->s == '\t' || *j->s == '\n' || *j->s == '\r')) j->s++;
}

static int json_expect(Json *j, char c) {
    json_ws(j);
    if (j->s >= j->end || *j->s != c) {
        char msg[32];
        snprintf(msg, sizeof msg, "expected '%c'", c);
        return json_fail(j, msg);
    }
    j->s++;
    return 0;
}

static int json_peek(Json *j, char c) {
    json_ws(j);
    return j->s < j->end && *j->s == c;
}

static void put_utf8(char **o, unsigned cp) {
    unsigned char *p = (unsigned char *)*o;
    if (cp < 0x80) *p++ = (unsigned char)cp;
    else if (cp < 0x800) { *p++ = 0xC0 | cp >> 6; *p++ = 0x80 | (cp & 63); }
    else if (cp < 0x10000) { *p++ = 0xE0 | cp >> 12; *p++ = 0x80 | (cp >> 6 & 63); *p++ = 0x80 | (cp & 63); }
    else { *p++ = 0xF0 | cp >> 18; *p++ = 0x80 | (cp >> 12 & 63); *p++ = 0x80 | (cp >> 6 & 63);
           *p++ = 0x80 | (cp & 63); }
    *o = (char *)p;
}

static int json_hex4(Json *j, unsigned *cp) {
    if (j->end - j->s < 4) return json_fail(j, "truncated \\u escape");
    *cp = 0;
    for (int i = 0; i < 4; i++) {
        char c = *j->s++;
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (v < 0) return json_fail(j, "bad \\u escape");
        *cp = *cp << 4 | (unsigned)v;
    }
    return 0;
}

// json_string: a quoted string with escapes, returned as a new NUL-terminated UTF-8 string.
static int json_string(Json *j, char **out) {
    if (json_expect(j, '"')) return -1;
    char *buf = xmalloc((size_t)(j->end - j->s) + 1), *o = buf;   // escapes never grow the text
    while (j->s < j->end && *j->s != '"') {
        unsigned char c = (unsigned char)*j->s++;
        if (c < 0x20) { free(buf); return json_fail(j, "control character in a string"); }
        if (c != '\\') { *o++ = (char)c; continue; }
        if (j->s >= j->end) break;
        char e = *j->s++;
        unsigned cp;
        switch (e) {
        case '"': case '\\': case '/': *o++ = e; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u':
            if (json_hex4(j, &cp)) { free(buf); return -1; }
            if (cp >= 0xD800 && cp < 0xDC00) {   // a surrogate pair
                unsigned lo;
                if (j->end - j->s < 6 || j->s[0] != '\\' || j->s[1] != 'u') {
                    free(buf); return json_fail(j, "unpaired surrogate in \\u escape");
                }
                j->s += 2;
                if (json_hex4(j, &lo)) { free(buf); return -1; }
                if (lo < 0xDC00 || lo > 0xDFFF) { free(buf); return json_fail(j, "bad surrogate pair"); }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp < 0xE000) {
                free(buf); return json_fail(j, "unpaired surrogate in \\u escape");
            }
            if (cp == 0) { free(buf); return json_fail(j, "NUL character in a string"); }
            put_utf8(&o, cp);
            break;
        default: free(buf); return json_fail(j, "bad escape in a string");
        }
    }
    if (j->s >= j->end) { free(buf); return json_fail(j, "unterminated string"); }
    j->s++;
    *o = 0;
    *out = buf;
    return 0;
}

// json_uint: a non-negative integer that fits in int64 (no sign, fraction or exponent).
static int json_uint(Json *j, int64_t *out) {
    json_ws(j);
    if (j->s >= j->end || *j->s < '0' || *j->s > '9') return json_fail(j, "expected a non-negative integer");
    if (*j->s == '0' && j->s + 1 < j->end && j->s[1] >= '0' && j->s[1] <= '9')
        return json_fail(j, "leading zero in a number");
    uint64_t v = 0;
    while (j->s < j->end && *j->s >= '0' && *j->s <= '9') {
        v = v * 10 + (uint64_t)(*j->s++ - '0');
        if (v > (uint64_t)INT64_MAX / 16) return json_fail(j, "integer too large");
    }
    if (j->s < j->end && (*j->s == '.' || *j->s == 'e' || *j->s == 'E'))
        return json_fail(j, "expected an integer");
    *out = (int64_t)v;
    return 0;
}

// json_uint_array: [n0, n1, ...] with at most `max` entries; *count receives their number.
static int json_uint_array(Json *j, int64_t *v, int max, int *count) {
    if (json_expect(j, '[')) return -1;
    *count = 0;
    if (json_peek(j, ']')) { j->s++; return 0; }
    for (;;) {
        if (*count == max) return json_fail(j, "too many entries in an array");
        if (json_uint(j, &v[(*count)++])) return -1;
        if (json_peek(j, ']')) { j->s++; return 0; }
        if (json_expect(j, ',')) return -1;
    }
}

// ---- header -----------------------------------------------------------------------------------
typedef struct { StTensor t; int64_t begin, end; } Entry;

static int parse_dtype(const char *s, StDtype *d) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(s, dtypes[i].name) == 0) { *d = (StDtype)i; return 0; }
    return -1;
}

// parse_entry: {"dtype": "F32", "shape": [..], "data_offsets": [b, e]} in any key order.
static int parse_entry(Json *j, const char *name, Entry *e) {
    int seen = 0, n_off = 0;
    int64_t off[2];
    if (json_expect(j, '{')) return -1;
    while (!json_peek(j, '}')) {
        if (seen && json_expect(j, ',')) return -1;
        char *key;
        if (json_string(j, &key)) return -1;
        int rc = json_expect(j, ':');
        if (rc) {
        } else if (strcmp(key, "dtype") == 0 && !(seen & 1)) {
            char *d = NULL;
            rc = json_string(j, &d);
            if (!rc && parse_dtype(d, &e->t.dtype))
                rc = err_set(j->err, "%s: tensor '%s': unknown dtype \"%s\"", j->path, name, d);
            free(d);
            seen |= 1;
        } else if (strcmp(key, "shape") == 0 && !(seen & 2)) {
            int64_t dims[ST_MAX_DIMS];
            rc = json_uint_array(j, dims, ST_MAX_DIMS, &e->t.ndim);
            for (int i = 0; !rc && i < e->t.ndim; i++) e->t.shape[i] = dims[i];
            seen |= 2;
        } else if (strcmp(key, "data_offsets") == 0 && !(seen & 4)) {
            rc = json_uint_array(j, off, 2, &n_off);
            if (!rc && n_off != 2)
                rc = err_set(j->err, "%s: tensor '%s': data_offsets needs 2 entries", j->path, name);
            seen |= 4;
        } else {
            rc = err_set(j->err, "%s: tensor '%s': unexpected or repeated key \"%s\"", j->path, name, key);
        }
        free(key);
        if (rc) return -1;
    }
    j->s++;
    if (seen != 7)
        return err_set(j->err, "%s: tensor '%s': needs dtype, shape and data_offsets", j->path, name);
    e->begin = off[0];
    e->end = off[1];
    return 0;
}

// parse_meta: {"key": "value", ...}
static int parse_meta(Json *j, SafeTensors *st) {
    if (json_expect(j, '{')) return -1;
    int cap = 0;
    while (!json_peek(j, '}')) {
        if (st->n_meta && json_expect(j, ',')) return -1;
        char *k, *v;
        if (json_string(j, &k)) return -1;
        if (json_expect(j, ':') || json_string(j, &v)) { free(k); return -1; }
        if (st->n_meta == cap) {
            cap = cap ? 2 * cap : 8;
            st->meta_key = xrealloc(st->meta_key, cap * sizeof(char *));
            st->meta_val = xrealloc(st->meta_val, cap * sizeof(char *));
        }
        st->meta_key[st->n_meta] = k;
        st->meta_val[st->n_meta++] = v;
    }
    j->s++;
    return 0;
}

static int parse_header(Json *j, SafeTensors *st, Entry **entries) {
    int cap = 0, n_keys = 0, have_meta = 0;
    *entries = NULL;
    if (json_expect(j, '{')) return -1;
    while (!json_peek(j, '}')) {
        if (n_keys++ && json_expect(j, ',')) return -1;
        char *name;
        if (json_string(j, &name)) return -1;
        if (json_expect(j, ':')) { free(name); return -1; }
        if (strcmp(name, "__metadata__") == 0) {
            free(name);
            if (have_meta++) return json_fail(j, "__metadata__ given twice");
            if (parse_meta(j, st)) return -1;
            continue;
        }
        if (st->n == cap) {
            cap = cap ? 2 * cap : 64;
            *entries = xrealloc(*entries, cap * sizeof(Entry));
        }
        Entry *e = &(*entries)[st->n++];
        memset(e, 0, sizeof *e);
        e->t.name = name;
        if (parse_entry(j, name, e)) return -1;
    }
    j->s++;
    json_ws(j);   // the reference writer pads the header with spaces
    if (j->s != j->end) return json_fail(j, "trailing characters after the header object");
    return 0;
}

// ---- validation -------------------------------------------------------------------------------
static int by_begin(const void *a, const void *b) {
    const Entry *x = *(const Entry *const *)a, *y = *(const Entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}
static int by_name(const void *a, const void *b) {
    return strcmp((*(const StTensor *const *)a)->name, (*(const StTensor *const *)b)->name);
}

// check_entries: sizes match shapes, ranges lie inside the data section and do not overlap.
static int check_entries(const char *path, Entry *e, int n, size_t data_size, Err *err) {
    for (int i = 0; i < n; i++) {
        size_t numel = 1;
        for (int d = 0; d < e[i].t.ndim; d++) {
            if (e[i].t.shape[d] && numel > SIZE_MAX / 16 / (size_t)e[i].t.shape[d])
                return err_set(err, "%s: tensor '%s': shape too large", path, e[i].t.name);
            numel *= (size_t)e[i].t.shape[d];
        }
        if (e[i].begin > e[i].end || (uint64_t)e[i].end > data_size)
            return err_set(err, "%s: tensor '%s': data_offsets [%" PRId64 ", %" PRId64 "] outside the "
                           "%zu-byte data section; the file is truncated or corrupt",
                           path, e[i].t.name, e[i].begin, e[i].end, data_size);
        e[i].t.nbytes = (size_t)(e[i].end - e[i].begin);
        if (e[i].t.nbytes != numel * st_dtype_size(e[i].t.dtype))
            return err_set(err, "%s: tensor '%s': %zu bytes but %s x %zu elements needs %zu",
                           path, e[i].t.name, e[i].t.nbytes, st_dtype_name(e[i].t.dtype), numel,
                           numel * st_dtype_size(e[i].t.dtype));
    }
    const Entry **order = xmalloc((size_t)n * sizeof *order + 1);
    for (int i = 0; i < n; i++) order[i] = &e[i];
    qsort(order, (size_t)n, sizeof *order, by_begin);
    int rc = 0;
    for (int i = 1; i < n && !rc; i++) {
        const Entry *a = order[i - 1], *b = order[i];
        if (b->begin < a->end)
            rc = err_set(err, "%s: tensors '%s' and '%s' overlap in the data section; the file is corrupt",
                         path, a->t.name, b->t.name);
    }
    free(order);
    return rc;
}

int st_index(SafeTensors *st, Err *err) {
    st->by_name = xmalloc((size_t)st->n * sizeof *st->by_name + 1);
    for (int i = 0; i < st->n; i++) st->by_name[i] = &st->tensor[i];
    qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, by_name);
    for (int i = 1; i < st->n; i++)
        if (strcmp(st->by_name[i - 1]->name, st->by_name[i]->name) == 0)
            return err_set(err, "%s: tensor '%s' appears twice", st->path, st->by_name[i]->name);
    return 0;
}

// ---- open / close -----------------------------------------------------------------------------
int st_map(const char *path, SafeTensors *st, Err *err) {
    int fd = rf_open(path, "weights file", err);   // a FIFO or a device is refused, never waited on
    if (fd < 0) return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return err_set(err, "%s: %s", path, strerror(errno));
    }
    st->map_size = (size_t)sb.st_size;
    if (st->map_size == 0) {
        close(fd);
        return err_set(err, "%s: an empty file, not weights", path);
    }
    void *m = mmap(NULL, st->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return err_set(err, "%s: cannot map: %s", path, strerror(errno));
    st->map = m;
    return 0;
}

static int open_parsed(SafeTensors *st, Err *err) {
    const char *path = st->path;
    if (st->map_size < 8)
        return err_set(err, "%s: %zu bytes, too short for a safetensors header", path, st->map_size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | st->map[i];
    if (hlen > ST_MAX_HEADER)
        return err_set(err, "%s: header length %" PRIu64 " exceeds the 100 MB limit; not a safetensors "
                       "file", path, hlen);
    if (hlen > st->map_size - 8)
        return err_set(err, "%s: header length %" PRIu64 " runs past the end of the %zu-byte file; the "
                       "file is truncated", path, hlen, st->map_size);
    const char *h = (const char *)st->map + 8;
    Json j = { h, h + hlen, h, path, err };
    Entry *e = NULL;
    int rc = parse_header(&j, st, &e);
    size_t data_size = st->map_size - 8 - (size_t)hlen;
    if (!rc) rc = check_entries(path, e, st->n, data_size, err);
    st->tensor = xmalloc((size_t)st->n * sizeof(StTensor) + 1);
    for (int i = 0; i < st->n; i++) {
        st->tensor[i] = e[i].t;
        // offsets are only known to lie inside the file once check_entries passed
        st->tensor[i].data = rc ? NULL : st->map + 8 + hlen + e[i].begin;
    }
    free(e);
    if (!rc) rc = st_index(st, err);
    return rc;
}

int st_open(const char *path, SafeTensors *st, Err *err) {
    memset(st, 0, sizeof *st);
    st->path = xstrdup(path);
    if (st_map(path, st, err) || open_parsed(st, err)) {
        st_close(st);
        return -1;
    }
    return 0;
}

void st_close(SafeTensors *st) {
    for (int i = 0; i < st->n; i++) free((char *)st->tensor[i].name);
    for (int i = 0; i < st->n_meta; i++) { free(st->meta_key[i]); free(st->meta_val[i]); }
    if (st->map) munmap(st->map, st->map_size);
    for (int i = 0; i < st->n_owned; i++) free(st->owned[i]);
    free(st->owned);
    free(st->tensor);
    free(st->by_name);
    free(st->meta_key);
    free(st->meta_val);
    free(st->path);
    memset(st, 0, sizeof *st);
}

// ---- lookups ----------------------------------------------------------------------------------
const StTensor *st_find(const SafeTensors *st, const char *name) {
    int lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(name, st->by_name[mid]->name);
        if (c == 0) return st->by_name[mid];
        if (c < 0) hi = mid - 1; else lo = mid + 1;
    }
    return NULL;
}

const char *st_meta(const SafeTensors *st, const char *key) {
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta_key[i], key) == 0) return st->meta_val[i];
    return NULL;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = h >> 10 & 31, man = h & 1023;
    float f;
    if (exp == 0) {   // zero or subnormal: man * 2^-24
        f = (float)man * 0x1p-24f;
        return sign ? -f : f;
    }
    uint32_t bits = sign | (exp == 31 ? 0xFFu << 23 | man << 13 : (exp + 112) << 23 | man << 13);
    memcpy(&f, &bits, 4);
    return f;
}

static float element_f32(StDtype d, const unsigned char *p) {
    float f; double g; int64_t i64; int32_t i32; int16_t i16; uint16_t h; uint32_t u;
    switch (d) {
    case ST_I16: memcpy(&i16, p, 2); return i16;
    case ST_I8: return (float)(int8_t)*p;
    case ST_U8: return *p;
    case ST_BOOL: return *p != 0;
    case ST_F32: memcpy(&f, p, 4); return f;
    case ST_F64: memcpy(&g, p, 8); return (float)g;
    case ST_I64: memcpy(&i64, p, 8); return (float)i64;
    case ST_I32: memcpy(&i32, p, 4); return (float)i32;
    case ST_F16: memcpy(&h, p, 2); return half_to_float(h);
    case ST_BF16: memcpy(&h, p, 2); u = (uint32_t)h << 16; memcpy(&f, &u, 4); return f;
    }
    return 0;
}

int st_read_f32(const SafeTensors *st, const char *name, float *out, size_t n, Err *err) {
    const StTensor *t = st_find(st, name);
    if (!t) return err_set(err, "%s: no tensor '%s'", st->path, name);
    StDtype d = t->dtype;
    if (st_numel(t) != n)
        return err_set(err, "%s: tensor '%s' has %zu elements, expected %zu", st->path, name,
                       st_numel(t), n);
    size_t es = st_dtype_size(d);
    if (d == ST_F32) memcpy(out, t->data, n * 4);
    else for (size_t i = 0; i < n; i++) out[i] = element_f32(d, (const unsigned char *)t->data + i * es);
    return 0;
}

// ---- writer -----------------------------------------------------------------------------------
typedef struct { char *s; size_t n, cap; } Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_quoted(Buf *b, const char *s) {
    buf_str(b, "\"");
    for (; *s; s++) {
        char tmp[8];
        if (*s == '"' || *s == '\\') { tmp[0] = '\\'; tmp[1] = *s; buf_put(b, tmp, 2); }
        else if ((unsigned char)*s < 0x20) { snprintf(tmp, sizeof tmp, "\\u%04x", *s); buf_str(b, tmp); }
        else buf_put(b, s, 1);
    }
    buf_str(b, "\"");
}

// build_header: the JSON text, padded with spaces so that 8 + its length is a multiple of 8.
static int build_header(Buf *h, const StWriteTensor *t, int n, const char *meta_json, Err *err) {
    buf_str(h, "{");
    if (meta_json) {
        SafeTensors probe = {0};
        Json j = { meta_json, meta_json + strlen(meta_json), meta_json, "st_write metadata", err };
        int rc = parse_meta(&j, &probe);
        json_ws(&j);
        if (!rc && j.s != j.end) rc = json_fail(&j, "trailing characters after the metadata object");
        for (int i = 0; i < probe.n_meta; i++) {
            buf_str(h, i ? "," : "\"__metadata__\":{");
            buf_quoted(h, probe.meta_key[i]);
            buf_str(h, ":");
            buf_quoted(h, probe.meta_val[i]);
        }
        if (probe.n_meta) buf_str(h, "}");
        st_close(&probe);
        if (rc) return -1;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].dtype != ST_F32 && t[i].dtype != ST_I64)
            return err_set(err, "st_write: tensor '%s': only F32 and I64 are written", t[i].name);
        if (t[i].ndim < 0 || t[i].ndim > ST_MAX_DIMS)
            return err_set(err, "st_write: tensor '%s': %d dimensions", t[i].name, t[i].ndim);
        uint64_t bytes = st_dtype_size(t[i].dtype);
        char num[64];
        if (h->n > 1) buf_str(h, ",");
        buf_quoted(h, t[i].name);
        buf_str(h, ":{\"dtype\":\"");
        buf_str(h, st_dtype_name(t[i].dtype));
        buf_str(h, "\",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) {
            if (t[i].shape[d] < 0) return err_set(err, "st_write: tensor '%s': negative shape", t[i].name);
            snprintf(num, sizeof num, "%s%" PRId64, d ? "," : "", t[i].shape[d]);
            buf_str(h, num);
            bytes *= (uint64_t)t[i].shape[d];
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + bytes);
        buf_str(h, num);
        off += bytes;
    }
    buf_str(h, "}");
    while ((8 + h->n) % 8) buf_str(h, " ");
    return 0;
}

static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w == 0) errno = EIO;                      // no progress and no reason: call it an I/O error
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

static int write_body(int fd, const Buf *h, const StWriteTensor *t, int n) {
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)((uint64_t)h->n >> (8 * i));
    if (write_all(fd, len, 8) || write_all(fd, h->s, h->n)) return -1;
    for (int i = 0; i < n; i++) {
        size_t bytes = st_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) bytes *= (size_t)t[i].shape[d];
        if (write_all(fd, t[i].data, bytes)) return -1;
    }
    return fsync(fd);   // the data reaches the disk before the rename can make it visible
}

// sync_folder: fsync the folder holding `path`, so the rename itself survives a power loss. Best
// effort: the file is already complete under its name, and some file systems cannot sync a folder.
static void sync_folder(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? xstrdup(path) : xstrdup(".");
    if (slash) dir[slash == path ? 1 : slash - path] = 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) { fsync(fd); close(fd); }
    free(dir);
}

// hint: what a failed write's errno means for the user ("" when strerror says it all).
static const char *hint(int e) {
    return e == ENOSPC ? " (the disk is full)" : e == EDQUOT ? " (the disk quota is used up)"
         : e == EFBIG ? " (the file size limit, ulimit -f, was reached)" : "";
}

int st_write(const char *path, const StWriteTensor *t, int n, const char *meta_json, Err *err) {
    Buf h = {0};
    if (build_header(&h, t, n, meta_json, err)) { free(h.s); return -1; }
    size_t plen = strlen(path);
    char *tmp = xmalloc(plen + 5);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int rc = 0, fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) rc = err_set(err, "cannot create %s: %s; %s was left as it was", tmp, strerror(errno), path);
    else {
        if (write_body(fd, &h, t, n)) {
            int e = errno;
            rc = err_set(err, "cannot write %s: %s%s; %s was left as it was", tmp, strerror(e), hint(e), path);
        }
        if (close(fd) && !rc)
            rc = err_set(err, "cannot write %s: close failed: %s; %s was left as it was", tmp, strerror(errno), path);
        if (!rc && rename(tmp, path))
            rc = err_set(err, "cannot rename %s to %s: %s; %s was left as it was", tmp, path, strerror(errno), path);
        if (rc) unlink(tmp);
        else sync_folder(path);
    }
    free(tmp);
    free(h.s);
    return rc;
}
