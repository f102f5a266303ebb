// pt.c: see pt.h. Three steps: the zip (io/zip.c), a restricted pickle machine that builds plain values
// from data.pkl, and a walk of the model object to state-dict names. The machine knows the opcodes of
// protocol 2 that torch.save writes (the checkpoints of yolov9 and Ultralytics use 31 of them) and
// nothing else; GLOBAL only records a name, and REDUCE/NEWOBJ of a name make an opaque object, except
// for the three names that matter: torch._utils._rebuild_tensor_v2 and _rebuild_parameter (tensors)
// and collections.OrderedDict (a dict). Storages come from persistent ids
// ('storage', torch.HalfStorage, '<key>', 'cpu', numel) and are the entries <dir>/data/<key>.
#include "io/pt.h"


#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "io/zip.h"

#define PT_MAX_DEPTH 64        // module nesting; the models here nest 6 deep
#define PT_MAX_NAME  256       // a state-dict name

// ---- values ------------------------------------------------------------------------------------
typedef enum { V_MARK, V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_TUPLE, V_LIST, V_DICT, V_GLOBAL, V_OBJ,
               V_STORAGE, V_TENSOR } Kind;
static const char *kind_name[] = { "mark", "None", "bool", "int", "float", "str", "tuple", "list", "dict",
                                   "global", "object", "storage", "tensor" };

typedef struct Value Value;
struct Value {
    Kind     kind;
    int      busy;                  // on the walk's current path: seeing it again is a cycle
    int64_t  i;                     // INT, BOOL; STORAGE: numel
    char    *s;                     // STR, GLOBAL ("module.name"), STORAGE: its zip entry
    Value  **item;                  // TUPLE, LIST; DICT: key, value, key, value, ...
    int      n, cap;
    Value   *call, *args, *state;   // OBJ: the class or function, its arguments, what BUILD gave it
    // STORAGE and TENSOR
    StDtype  dtype;
    const unsigned char *data;      // STORAGE: its entry's bytes; TENSOR: the first element
    int      ndim;
    int64_t  shape[ST_MAX_DIMS];
    int64_t  stride[ST_MAX_DIMS];   // TENSOR, in elements; every element lies inside the storage
    int      contiguous;            // TENSOR: row-major, so its bytes can be used in place
};

typedef struct {
    const char *path;
    const unsigned char *p, *end, *begin;
    const Zip *zip;
    const char *dir;                // the archive's folder: "<dir>/data/<key>"
    Value **pool; int n_pool, cap_pool;   // every value made, freed together
    Value **stack; int sp, cap_stack;
    Value **memo; size_t n_memo;
    int n_tensors;                  // tensors rebuilt: what bounds the state dict the walk may list
    Err *err;
} Machine;

static Value *make(Machine *m, Kind k) {
    if (m->n_pool == m->cap_pool) {
        m->cap_pool = m->cap_pool ? 2 * m->cap_pool : 1024;
        m->pool = xrealloc(m->pool, m->cap_pool * sizeof *m->pool);
    }
    Value *v = xcalloc(1, sizeof *v);
    v->kind = k;
    return m->pool[m->n_pool++] = v;
}

static void add(Value *c, Value *x) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 4;
        c->item = xrealloc(c->item, c->cap * sizeof *c->item);
    }
    c->item[c->n++] = x;
}

static void machine_free(Machine *m) {
    for (int i = 0; i < m->n_pool; i++) { free(m->pool[i]->s); free(m->pool[i]->item); free(m->pool[i]); }
    free(m->pool);
    free(m->stack);
    free(m->memo);
}

static int fail(Machine *m, const char *what) {
    return err_set(m->err, "%s: data.pkl byte %td: %s; the file is not a PyTorch checkpoint this reader takes "
                   "(it never runs code from a file)", m->path, m->p - m->begin, what);
}

// ---- the stack -------------------------------------------------------------------------------
static void push(Machine *m, Value *v) {
    if (m->sp == m->cap_stack) {
        m->cap_stack = m->cap_stack ? 2 * m->cap_stack : 256;
        m->stack = xrealloc(m->stack, m->cap_stack * sizeof *m->stack);
    }
    m->stack[m->sp++] = v;
}

static Value *pop(Machine *m) {
    if (m->sp == 0 || m->stack[m->sp - 1]->kind == V_MARK) { fail(m, "stack underflow"); return NULL; }
    return m->stack[--m->sp];
}

static Value *top(Machine *m) {
    if (m->sp == 0 || m->stack[m->sp - 1]->kind == V_MARK) { fail(m, "stack underflow"); return NULL; }
    return m->stack[m->sp - 1];
}

// The values above the topmost mark, popped with it: *first = their index on the stack (still valid
// until the next push).
static int pop_mark(Machine *m, int *first) {
    int k = m->sp - 1;
    while (k >= 0 && m->stack[k]->kind != V_MARK) k--;
    if (k < 0) return fail(m, "no MARK to pop to");
    *first = k + 1;
    int n = m->sp - k - 1;
    m->sp = k;
    return n;
}

// ---- reading arguments -------------------------------------------------------------------------
static int take(Machine *m, size_t n, const unsigned char **out) {
    *out = m->p;
    if ((size_t)(m->end - m->p) < n) return fail(m, "truncated");
    m->p += n;
    return 0;
}

static int take_uint(Machine *m, int n, uint64_t *v) {
    const unsigned char *b;
    if (take(m, n, &b)) return -1;
    *v = 0;
    for (int i = n - 1; i >= 0; i--) *v = *v << 8 | b[i];
    return 0;
}

static int take_line(Machine *m, char *out, size_t size) {
    const unsigned char *nl = memchr(m->p, '\n', m->end - m->p);
    if (!nl || (size_t)(nl - m->p) >= size) return fail(m, "bad GLOBAL name");
    memcpy(out, m->p, nl - m->p);
    out[nl - m->p] = 0;
    m->p = nl + 1;
    return 0;
}

// ---- tensors -----------------------------------------------------------------------------------
static int storage_dtype(const char *global, StDtype *d) {
    static const struct { const char *name; StDtype d; } t[] = {
        { "torch.HalfStorage", ST_F16 }, { "torch.FloatStorage", ST_F32 }, { "torch.DoubleStorage", ST_F64 },
        { "torch.BFloat16Storage", ST_BF16 }, { "torch.LongStorage", ST_I64 }, { "torch.IntStorage", ST_I32 },
        { "torch.ShortStorage", ST_I16 }, { "torch.CharStorage", ST_I8 }, { "torch.ByteStorage", ST_U8 },
        { "torch.BoolStorage", ST_BOOL },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(global, t[i].name)) { *d = t[i].d; return 0; }
    return -1;
}

// ('storage', torch.XStorage, '<key>', '<location>', numel) -> the entry <dir>/data/<key>
static int persistent_load(Machine *m, Value *pid) {
    Value **t = pid->item;
    if (pid->kind != V_TUPLE || pid->n != 5 || t[0]->kind != V_STR || strcmp(t[0]->s, "storage") ||
        t[1]->kind != V_GLOBAL || t[2]->kind != V_STR || t[4]->kind != V_INT || t[4]->i < 0)
        return fail(m, "a persistent id that is not ('storage', type, key, location, numel)");
    Value *s = make(m, V_STORAGE);
    if (storage_dtype(t[1]->s, &s->dtype)) return fail(m, "a storage of an unknown type");
    size_t n = strlen(m->dir) + strlen(t[2]->s) + 8;
    s->s = xmalloc(n);
    snprintf(s->s, n, "%s/data/%s", m->dir, t[2]->s);
    const ZipEntry *e = zip_find(m->zip, s->s);
    if (!e) return err_set(m->err, "%s: storage %.200s is missing from the archive; the file is truncated or corrupt",
                           m->path, s->s);
    s->i = t[4]->i;
    if ((uint64_t)s->i > e->size / st_dtype_size(s->dtype))
        return err_set(m->err, "%s: storage %.200s holds %lld %s elements, which run past its %zu-byte entry; the "
                       "file is truncated or corrupt", m->path, s->s, (long long)s->i, st_dtype_name(s->dtype), e->size);
    s->data = e->data;
    push(m, s);
    return 0;
}

static int int_tuple(const Value *t, int64_t *out, int max) {
    if (t->kind != V_TUPLE || t->n > max) return -1;
    for (int i = 0; i < t->n; i++) {
        if (t->item[i]->kind != V_INT || t->item[i]->i < 0) return -1;
        out[i] = t->item[i]->i;
    }
    return t->n;
}

// Row-major: each dim's stride is the product of the dims after it (dims of size 1 take any stride).
static int row_major(const Value *t) {
    int64_t want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->stride[d] != want) return 0;
        want *= t->shape[d];
    }
    return 1;
}

// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]): any view PyTorch
// writes (transposed, sliced, channels_last, expanded with stride 0) whose elements all lie inside its
// storage. Nothing is copied here: only the tensors the walk lists are gathered (emit).
static Value *rebuild_tensor(Machine *m, const Value *a) {
    Value *t = make(m, V_TENSOR);
    if (a->kind != V_TUPLE || a->n < 4 || a->item[0]->kind != V_STORAGE || a->item[1]->kind != V_INT ||
        (t->ndim = int_tuple(a->item[2], t->shape, ST_MAX_DIMS)) < 0 ||
        int_tuple(a->item[3], t->stride, ST_MAX_DIMS) != t->ndim || a->item[1]->i < 0) {
        fail(m, "_rebuild_tensor_v2 with arguments that are not (storage, offset, size, stride, ...)");
        return NULL;
    }
    const Value *s = a->item[0];
    uint64_t numel = 1, last = (uint64_t)a->item[1]->i, S = (uint64_t)s->i;   // last: the highest element used
    int bad = 0;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t reach;
        bad |= __builtin_mul_overflow(numel, (uint64_t)t->shape[d], &numel) || numel > (uint64_t)1 << 48;
        if (t->shape[d]) bad |= __builtin_mul_overflow((uint64_t)t->shape[d] - 1, (uint64_t)t->stride[d], &reach) ||
                                __builtin_add_overflow(last, reach, &last);
    }
    if (bad || (numel && last >= S)) {
        err_set(m->err, "%s: a tensor runs past the end of its storage %.200s (%lld elements) or has an impossible "
                "size; the file is corrupt", m->path, s->s, (long long)S);
        return NULL;
    }
    t->dtype = s->dtype;
    t->s = xstrdup(s->s);
    t->data = s->data + (size_t)a->item[1]->i * st_dtype_size(s->dtype);
    t->contiguous = row_major(t);
    m->n_tensors++;
    return t;
}

// REDUCE and NEWOBJ: call(args) for the three known names, else an opaque object.
static int apply(Machine *m) {
    Value *args = pop(m), *call = args ? pop(m) : NULL;
    if (!call) return -1;
    if (args->kind != V_TUPLE) return fail(m, "call arguments that are not a tuple");
    const char *f = call->kind == V_GLOBAL ? call->s : "";
    Value *r;
    if (!strcmp(f, "torch._utils._rebuild_tensor_v2")) {
        if (!(r = rebuild_tensor(m, args))) return -1;
    } else if (!strcmp(f, "torch._utils._rebuild_parameter") || !strcmp(f, "torch._utils._rebuild_parameter_with_state")) {
        if (args->n < 1 || args->item[0]->kind != V_TENSOR) return fail(m, "_rebuild_parameter of no tensor");
        r = args->item[0];
    } else if (!strcmp(f, "collections.OrderedDict") && args->n == 0) {
        r = make(m, V_DICT);
    } else {
        r = make(m, V_OBJ);
        r->call = call, r->args = args;
    }
    push(m, r);
    return 0;
}

// ---- the machine -------------------------------------------------------------------------------
static int memo_put(Machine *m, uint64_t idx) {
    Value *v = top(m);
    if (!v) return -1;
    if (idx >= (uint64_t)(m->end - m->begin)) return fail(m, "memo index out of range");   // writers count up
    if (idx >= m->n_memo) {
        size_t n = idx + 1 > 2 * m->n_memo ? idx + 1 : 2 * m->n_memo;
        m->memo = xrealloc(m->memo, n * sizeof *m->memo);
        memset(m->memo + m->n_memo, 0, (n - m->n_memo) * sizeof *m->memo);
        m->n_memo = n;
    }
    m->memo[idx] = v;
    return 0;
}

static int memo_get(Machine *m, uint64_t idx) {
    if (idx >= m->n_memo || !m->memo[idx]) return fail(m, "memo entry that was never put");
    push(m, m->memo[idx]);
    return 0;
}

static int push_int(Machine *m, int64_t i) {
    Value *v = make(m, V_INT);
    v->i = i;
    push(m, v);
    return 0;
}

static int tuple_of(Machine *m, int n) {          // TUPLE1..3: the top n values
    if (m->sp < n) return fail(m, "stack underflow");
    Value *t = make(m, V_TUPLE);
    for (int i = m->sp - n; i < m->sp; i++) {
        if (m->stack[i]->kind == V_MARK) return fail(m, "stack underflow");
        add(t, m->stack[i]);
    }
    m->sp -= n;
    push(m, t);
    return 0;
}

static int collect(Machine *m, Kind k) {          // TUPLE, LIST, DICT: the values above the mark
    int first, n = pop_mark(m, &first);
    if (n < 0) return -1;
    if (k == V_DICT && n % 2) return fail(m, "DICT of an odd number of values");
    Value *c = make(m, k);
    for (int i = 0; i < n; i++) add(c, m->stack[first + i]);
    push(m, c);
    return 0;
}

static int extend(Machine *m, Kind k, int marked) {   // APPEND(S) to a list, SETITEM(S) to a dict
    int first = m->sp - (k == V_DICT ? 2 : 1), n = m->sp - first;
    if (marked) { if ((n = pop_mark(m, &first)) < 0) return -1; }
    else if (first < 1 || m->stack[first]->kind == V_MARK || m->stack[m->sp - 1]->kind == V_MARK)
        return fail(m, "stack underflow");
    else m->sp = first;
    Value *c = top(m);
    if (!c) return -1;
    if (c->kind != k) return fail(m, k == V_DICT ? "SETITEM on something other than a dict"
                                                 : "APPEND on something other than a list");
    if (k == V_DICT && n % 2) return fail(m, "SETITEMS of an odd number of values");
    for (int i = 0; i < n; i++) add(c, m->stack[first + i]);
    return 0;
}

// BUILD: obj.__setstate__(state), kept as obj->state. A dict's state is its attributes (a state
// dict's OrderedDict carries _metadata, the modules' versions), which no name depends on.
static int build(Machine *m) {
    Value *state = pop(m), *obj = state ? top(m) : NULL;
    if (!obj) return -1;
    if (obj->kind == V_DICT) return 0;
    if (obj->kind != V_OBJ) return fail(m, "BUILD on something other than an object");
    obj->state = state;
    return 0;
}

static int global(Machine *m) {
    char mod[256], name[256];
    if (take_line(m, mod, sizeof mod) || take_line(m, name, sizeof name)) return -1;
    Value *g = make(m, V_GLOBAL);
    size_t n = strlen(mod) + strlen(name) + 2;
    g->s = xmalloc(n);
    snprintf(g->s, n, "%s.%s", mod, name);
    push(m, g);
    return 0;
}

static int unicode(Machine *m) {
    uint64_t n = 0;
    const unsigned char *b;
    if (take_uint(m, 4, &n) || take(m, n, &b)) return -1;
    Value *v = make(m, V_STR);
    v->s = xmalloc(n + 1);
    memcpy(v->s, b, n);
    v->s[n] = 0;
    push(m, v);
    return 0;
}

static int simple(Machine *m, Kind k, int64_t i) {
    Value *v = make(m, k);
    v->i = i;
    push(m, v);
    return 0;
}

static int long1(Machine *m) {                    // a little-endian two's complement int of <= 8 bytes
    uint64_t n = 0, v = 0;
    const unsigned char *b;
    if (take_uint(m, 1, &n) || take(m, n, &b)) return -1;
    if (n > 8) return fail(m, "an integer of more than 64 bits");
    for (int i = (int)n - 1; i >= 0; i--) v = v << 8 | b[i];
    if (n && n < 8 && b[n - 1] & 0x80) v |= ~(uint64_t)0 << (8 * n);
    return push_int(m, (int64_t)v);
}

// One opcode; 1 after STOP.
static int step(Machine *m) {
    const unsigned char *op;
    uint64_t u;
    if (take(m, 1, &op)) return -1;
    switch (*op) {
    case 0x80: return take_uint(m, 1, &u) ? -1 : u > 5 ? fail(m, "unknown pickle protocol") : 0;   // PROTO
    case '.': return 1;                                                                              // STOP
    case 'c': return global(m);
    case 'R': case 0x81: return apply(m);                                                            // REDUCE, NEWOBJ
    case 'b': return build(m);
    case 'Q': { Value *pid = pop(m); return pid ? persistent_load(m, pid) : -1; }                   // BINPERSID
    case '(': return simple(m, V_MARK, 0);
    case 't': return collect(m, V_TUPLE);
    case ')': return simple(m, V_TUPLE, 0);
    case 0x85: case 0x86: case 0x87: return tuple_of(m, *op - 0x84);                                 // TUPLE1..3
    case ']': return simple(m, V_LIST, 0);
    case 'l': return collect(m, V_LIST);
    case 'a': return extend(m, V_LIST, 0);
    case 'e': return extend(m, V_LIST, 1);
    case '}': return simple(m, V_DICT, 0);
    case 'd': return collect(m, V_DICT);
    case 's': return extend(m, V_DICT, 0);
    case 'u': return extend(m, V_DICT, 1);
    case 'q': return take_uint(m, 1, &u) ? -1 : memo_put(m, u);                                     // BINPUT
    case 'r': return take_uint(m, 4, &u) ? -1 : memo_put(m, u);                                     // LONG_BINPUT
    case 'h': return take_uint(m, 1, &u) ? -1 : memo_get(m, u);                                     // BINGET
    case 'j': return take_uint(m, 4, &u) ? -1 : memo_get(m, u);                                     // LONG_BINGET
    case 'J': return take_uint(m, 4, &u) ? -1 : push_int(m, (int32_t)(uint32_t)u);                  // BININT
    case 'K': return take_uint(m, 1, &u) ? -1 : push_int(m, (int64_t)u);                            // BININT1
    case 'M': return take_uint(m, 2, &u) ? -1 : push_int(m, (int64_t)u);                            // BININT2
    case 0x8a: return long1(m);                                                                      // LONG1
    case 'G': { const unsigned char *b; if (take(m, 8, &b)) return -1; return simple(m, V_FLOAT, 0); }   // BINFLOAT
    case 'X': return unicode(m);                                                                     // BINUNICODE
    case 0x88: return simple(m, V_BOOL, 1);                                                          // NEWTRUE
    case 0x89: return simple(m, V_BOOL, 0);                                                          // NEWFALSE
    case 'N': return simple(m, V_NONE, 0);
    default: {
        char what[96];
        snprintf(what, sizeof what, "opcode 0x%02x, which no PyTorch checkpoint uses", *op);
        m->p--;
        return fail(m, what);
    }
    }
}

static Value *unpickle(Machine *m) {
    int rc;
    while (!(rc = step(m))) {}
    if (rc < 0) return NULL;
    Value *v = pop(m);
    if (v && m->sp) { fail(m, "values left on the stack at STOP"); return NULL; }
    return v;
}

// ---- from the checkpoint to state-dict names ---------------------------------------------------
typedef struct {
    Machine *m;
    SafeTensors *st;                // owns the gathered copies
    StTensor *t; int n, cap;
    long visits;                    // modules walked: a shared child is walked once per path, so bound it
    uint64_t bytes;                 // of the tensors listed so far
} Names;

// What a real checkpoint's model never exceeds: each of its tensors listed about once (a tied weight
// twice), in bytes no more than the file holds. A pickle that repeats modules through memo references,
// or expands a small storage with stride 0, would list far more; it is refused before it costs memory.
#define PT_SLACK_TENSORS 64
#define PT_SLACK_BYTES   ((uint64_t)16 << 20)

static int too_much(Names *w, uint64_t nbytes) {
    uint64_t max_bytes = 2 * (uint64_t)w->st->map_size + PT_SLACK_BYTES;
    if (w->n < 2L * w->m->n_tensors + PT_SLACK_TENSORS && nbytes <= max_bytes - w->bytes) return 0;
    return err_set(w->m->err, "%s: its model would list over %d tensors or %llu MB from %d tensors in a %llu KB file "
                   "(modules repeated through pickle memo references, or views expanded from a small storage): a "
                   "crafted or corrupt file, not a checkpoint this reader takes", w->m->path, w->n,
                   (unsigned long long)((w->bytes + nbytes) >> 20), w->m->n_tensors,
                   (unsigned long long)(w->st->map_size >> 10));
}

// A strided view's elements copied in row-major order into memory the SafeTensors owns.
static const void *gather(Names *w, const Value *v, size_t numel) {
    size_t es = st_dtype_size(v->dtype);
    unsigned char *out = xmalloc(numel * es);
    int64_t idx[ST_MAX_DIMS] = { 0 }, at = 0;      // at: the element's index from v->data
    for (size_t k = 0; k < numel; k++) {
        memcpy(out + k * es, v->data + at * es, es);
        for (int d = v->ndim - 1; d >= 0; d--) {     // the next index, odometer-wise
            at += v->stride[d];
            if (++idx[d] < v->shape[d]) break;
            at -= v->shape[d] * v->stride[d];
            idx[d] = 0;
        }
    }
    SafeTensors *st = w->st;
    st->owned = xrealloc(st->owned, (st->n_owned + 1) * sizeof *st->owned);
    st->owned[st->n_owned++] = out;
    return out;
}

static Value *dict_get(const Value *d, const char *key) {
    if (!d || d->kind != V_DICT) return NULL;
    for (int i = 0; i + 1 < d->n; i += 2)
        if (d->item[i]->kind == V_STR && !strcmp(d->item[i]->s, key)) return d->item[i + 1];
    return NULL;
}

static int emit(Names *w, const char *prefix, const char *key, const Value *v) {
    char name[PT_MAX_NAME];
    if (snprintf(name, sizeof name, "%s%s", prefix, key) >= (int)sizeof name)
        return err_set(w->m->err, "%s: a tensor name longer than %d bytes", w->m->path, PT_MAX_NAME);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 256;
        w->t = xrealloc(w->t, w->cap * sizeof *w->t);
    }
    StTensor t = { .dtype = v->dtype, .ndim = v->ndim };
    memcpy(t.shape, v->shape, sizeof t.shape);
    size_t numel = st_numel(&t);
    t.nbytes = numel * st_dtype_size(t.dtype);
    if (too_much(w, t.nbytes)) return -1;
    t.data = v->contiguous || !numel ? v->data : gather(w, v, numel);
    t.name = xstrdup(name);
    w->t[w->n++] = t;
    w->bytes += t.nbytes;
    return 0;
}

// Buffers listed in the module's _non_persistent_buffers_set (a set(list) reduce) are not in a state dict.
static int non_persistent(const Value *state, const char *key) {
    const Value *s = dict_get(state, "_non_persistent_buffers_set");
    if (!s || s->kind != V_OBJ || !s->args || s->args->n < 1 || s->args->item[0]->kind != V_LIST) return 0;
    const Value *l = s->args->item[0];
    for (int i = 0; i < l->n; i++)
        if (l->item[i]->kind == V_STR && !strcmp(l->item[i]->s, key)) return 1;
    return 0;
}

static int walk_tensors(Names *w, const Value *d, const char *prefix, const Value *state) {
    if (!d) return 0;
    if (d->kind != V_DICT) return err_set(w->m->err, "%s: a module's _parameters or _buffers is a %s, not a dict",
                                          w->m->path, kind_name[d->kind]);
    for (int i = 0; i + 1 < d->n; i += 2) {
        const Value *k = d->item[i], *v = d->item[i + 1];
        if (k->kind != V_STR) return err_set(w->m->err, "%s: a tensor key that is not a string", w->m->path);
        if (v->kind == V_NONE || (state && non_persistent(state, k->s))) continue;
        if (v->kind != V_TENSOR)
            return err_set(w->m->err, "%s: %s%s is a %s, not a tensor", w->m->path, prefix, k->s, kind_name[v->kind]);
        if (emit(w, prefix, k->s, v)) return -1;
    }
    return 0;
}

// nn.Module.state_dict(): its parameters, its buffers, then each child's under "<name>.".
static int walk_module(Names *w, Value *obj, const char *prefix, int depth) {
    if (obj->busy) return err_set(w->m->err, "%s: the module %s contains itself (a cycle); the file is corrupt",
                                  w->m->path, *prefix ? prefix : "model");
    if (++w->visits > 4L * w->m->n_pool + 64)
        return err_set(w->m->err, "%s: modules shared so often that walking them would not end", w->m->path);
    if (depth > PT_MAX_DEPTH) return err_set(w->m->err, "%s: modules nested over %d deep", w->m->path, PT_MAX_DEPTH);
    Value *st = obj->state;
    if (!st || st->kind != V_DICT || !dict_get(st, "_modules"))
        return err_set(w->m->err, "%s: %s (%s) is not a torch module: no _modules in its state", w->m->path,
                       *prefix ? prefix : "the model", obj->call && obj->call->kind == V_GLOBAL ? obj->call->s : "?");
    obj->busy = 1;
    int rc = walk_tensors(w, dict_get(st, "_parameters"), prefix, NULL);
    if (!rc) rc = walk_tensors(w, dict_get(st, "_buffers"), prefix, st);
    const Value *mods = dict_get(st, "_modules");
    if (!rc && mods->kind != V_DICT) rc = err_set(w->m->err, "%s: _modules is not a dict", w->m->path);
    for (int i = 0; !rc && i + 1 < mods->n; i += 2) {
        const Value *k = mods->item[i];
        Value *child = mods->item[i + 1];
        char sub[PT_MAX_NAME];
        if (k->kind != V_STR) rc = err_set(w->m->err, "%s: a module key that is not a string", w->m->path);
        else if (child->kind == V_NONE) continue;
        else if (child->kind != V_OBJ) rc = err_set(w->m->err, "%s: module %s%s is a %s", w->m->path, prefix, k->s,
                                                    kind_name[child->kind]);
        else if (snprintf(sub, sizeof sub, "%s%s.", prefix, k->s) >= (int)sizeof sub)
            rc = err_set(w->m->err, "%s: a module name longer than %d bytes", w->m->path, PT_MAX_NAME);
        else rc = walk_module(w, child, sub, depth + 1);
    }
    obj->busy = 0;
    return rc;
}

static int is_state_dict(const Value *d) {
    if (!d || d->kind != V_DICT || !d->n) return 0;
    for (int i = 1; i < d->n; i += 2)
        if (d->item[i]->kind != V_TENSOR) return 0;
    return 1;
}

// The checkpoint's model: ema, else model (what Ultralytics' attempt_load_one_weight takes), or the
// whole file when it is a module or a state dict.
static int walk_root(Names *w, Value *root, SafeTensors *st) {
    Value *model = root;
    const char *key = "";
    if (root->kind == V_DICT && !is_state_dict(root)) {
        Value *ema = dict_get(root, "ema"), *mod = dict_get(root, "model");
        if (ema && ema->kind != V_NONE) model = ema, key = "ema";
        else if (mod && mod->kind != V_NONE) model = mod, key = "model";
        else return err_set(w->m->err, "%s: a pickle of a dict without 'model' or 'ema' weights: not a model checkpoint",
                            w->m->path);
    }
    st->meta_key = xcalloc(3, sizeof *st->meta_key);
    st->meta_val = xcalloc(3, sizeof *st->meta_val);
    st->meta_key[0] = xstrdup("format"), st->meta_val[0] = xstrdup("pt");
    st->meta_key[1] = xstrdup("pt_key"), st->meta_val[1] = xstrdup(key);
    st->n_meta = 2;
    if (model->kind == V_OBJ && model->call && model->call->kind == V_GLOBAL) {
        st->meta_key[2] = xstrdup("pt_class"), st->meta_val[2] = xstrdup(model->call->s);
        st->n_meta = 3;
    }
    if (is_state_dict(model)) return walk_tensors(w, model, "", NULL);
    if (model->kind == V_OBJ) return walk_module(w, model, "", 0);
    return err_set(w->m->err, "%s: %s is not a module or a state dict (a pickled %s%s%s): not a model checkpoint",
                   w->m->path, *key ? key : "the pickle", kind_name[model->kind],
                   model->kind == V_OBJ && model->call->kind == V_GLOBAL ? " " : "",
                   model->kind == V_OBJ && model->call->kind == V_GLOBAL ? model->call->s : "");
}

// ---- open -------------------------------------------------------------------------------------
// The archive's data.pkl: the one entry named <dir>/data.pkl.
static const ZipEntry *find_pickle(const Zip *z, const char *path, char *dir, size_t size, Err *err) {
    const ZipEntry *found = NULL;
    for (int i = 0; i < z->n; i++) {
        const char *s = strrchr(z->e[i].name, '/');
        if (!s || strcmp(s, "/data.pkl") || (size_t)(s - z->e[i].name) >= size || strchr(z->e[i].name, '/') != s) continue;
        if (found) { err_set(err, "%s: two data.pkl entries; not a single PyTorch checkpoint", path); return NULL; }
        found = &z->e[i];
        snprintf(dir, size, "%.*s", (int)(s - z->e[i].name), z->e[i].name);
    }
    if (!found) err_set(err, "%s: a zip without <name>/data.pkl: not a PyTorch checkpoint", path);
    return found;
}

// torch.jit.save's archives (yolov9's export --include torchscript, Ultralytics' format=torchscript)
// hold the model's code beside data.pkl.
static int torchscript(const Zip *z) {
    for (int i = 0; i < z->n; i++) {
        const char *s = strchr(z->e[i].name, '/');
        if (s && (!strncmp(s, "/code/", 6) || !strcmp(s, "/constants.pkl"))) return 1;
    }
    return 0;
}

static int read_model(SafeTensors *st, const Zip *z, Err *err) {
    char dir[256];
    if (torchscript(z))
        return err_set(err, "%s is a TorchScript model (torch.jit.save, an export), not a training checkpoint: use the "
                       ".pt its trainer saved (weights/best.pt) or safetensors", st->path);
    const ZipEntry *pkl = find_pickle(z, st->path, dir, sizeof dir, err);
    if (!pkl) return -1;
    Machine m = { .path = st->path, .p = pkl->data, .end = pkl->data + pkl->size, .begin = pkl->data,
                  .zip = z, .dir = dir, .err = err };
    Names w = { .m = &m, .st = st };
    Value *root = unpickle(&m);
    int rc = root ? walk_root(&w, root, st) : -1;
    if (!rc && !w.n) rc = err_set(err, "%s: the checkpoint's model holds no tensors", st->path);
    st->tensor = w.t;
    st->n = w.n;
    machine_free(&m);
    return rc;
}

int pt_open(const char *path, SafeTensors *st, Err *err) {
    memset(st, 0, sizeof *st);
    st->path = xstrdup(path);
    Zip z;
    if (st_map(path, st, err) || zip_read(path, st->map, st->map_size, &z, err)) { st_close(st); return -1; }
    int rc = read_model(st, &z, err);
    if (!rc) rc = st_index(st, err);
    zip_free(&z);
    if (rc) st_close(st);
    return rc;
}

// What a file that is not weights is, from its first n bytes b: NULL when it may be weights. Users
// get these from a clone without Git LFS, a download link that returned a web page, or old PyTorch.
static const char *impostor(const unsigned char *b, size_t n) {
    static const unsigned char legacy[] = { 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19 };
    if (n >= 9 && b[8] == '{') return NULL;                       // safetensors: a length, then its JSON header
    size_t k = n >= 3 && !memcmp(b, "\xef\xbb\xbf", 3) ? 3 : 0;   // a UTF-8 byte order mark
    while (k < n && strchr(" \t\r\n", b[k])) k++;
    if (n >= 26 && !memcmp(b, "version https://git-lfs.", 24))
        return "a Git LFS pointer (a small text file standing in for the weights), not the weights: run `git lfs "
               "pull` in its repository, or download the file itself";
    if (n - k >= 5 && (!strncasecmp((const char *)b + k, "<!doc", 5) || !strncasecmp((const char *)b + k, "<html", 5) ||
                       !strncasecmp((const char *)b + k, "<?xml", 5)))
        return "an HTML page, not weights (a download that saved a web page: a login page, or a 'blob' link instead "
               "of the raw file); download the file itself";
    if (n >= 14 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5 && !memcmp(b + 2, legacy, sizeof legacy))
        return "a checkpoint in PyTorch's legacy format (torch.save before 1.6, or _use_new_zipfile_serialization="
               "False), which this reader does not take: re-save it with PyTorch >= 1.6, torch.save(torch.load(F), F)";
    if (n >= 262 && !memcmp(b + 257, "ustar", 5))
        return "a tar archive (the tar format of PyTorch before 0.4?), not weights: re-save it with PyTorch >= 1.6";
    if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
        return "a plain Python pickle, not a torch.save checkpoint (a zip) or safetensors: save the model with "
               "torch.save";
    if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) return "gzip-compressed: decompress it first (gunzip)";
    return NULL;
}

int weights_open(const char *path, SafeTensors *st, Err *err) {
    unsigned char head[512] = { 0 };
    int fd = open(path, O_RDONLY | O_NONBLOCK);    // a FIFO must not hang us; st_map says what it is
    ssize_t n = fd >= 0 ? read(fd, head, sizeof head) : -1;
    if (fd >= 0) close(fd);
    if (n >= 4 && !memcmp(head, "PK\3\4", 4)) return pt_open(path, st, err);
    const char *what = n > 0 ? impostor(head, (size_t)n) : NULL;
    if (what) {
        memset(st, 0, sizeof *st);
        return err_set(err, "%s is %s", path, what);
    }
    return st_open(path, st, err);
}
