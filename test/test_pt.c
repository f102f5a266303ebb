// test_pt.c: the .pt reader. The two checkpoints of ../shared/fixtures/pt/ (yolov9 gelan-s, Ultralytics
// YOLO26-s) hold exactly the fixtures' param/ tensors rounded to fp16; hand-made small checkpoints
// (a zip writer and pickle bytes below) check names, refusals and their messages.
#include "io/pt.h"
#include "core/spec/model.h"
#include "core/base/util.h"
#include "core/eval/val.h"
#include "test/test.h"

#include <stdint.h>

// ---- a small writer of stored zips and pickles --------------------------------------------------
typedef struct { unsigned char b[1 << 16]; size_t n; } Bytes;

static void put(Bytes *o, const void *p, size_t n) { memcpy(o->b + o->n, p, n); o->n += n; }
static void put_le(Bytes *o, uint64_t v, int n) { for (int i = 0; i < n; i++) o->b[o->n++] = (unsigned char)(v >> 8 * i); }
static void put_str(Bytes *o, const char *s) { put(o, s, strlen(s)); }
#define PUT(o, lit) put(o, lit, sizeof lit - 1)   // a literal that may hold NUL bytes
static void put_uni(Bytes *o, const char *s) { put_str(o, "X"); put_le(o, strlen(s), 4); put_str(o, s); }  // BINUNICODE

typedef struct { const char *name; const Bytes *data; int method; } Entry;

// A zip of the entries (stored, or claiming `method`), with plain 32-bit end records.
static const char *write_zip(const char *file, const Entry *e, int n) {
    static Bytes z;
    static char path[4300];
    size_t local[8];
    z.n = 0;
    for (int i = 0; i < n; i++) {
        local[i] = z.n;
        put_le(&z, 0x04034b50, 4); put_le(&z, 20, 2); put_le(&z, 0, 2); put_le(&z, e[i].method, 2);
        put_le(&z, 0, 4); put_le(&z, 0, 4); put_le(&z, e[i].data->n, 4); put_le(&z, e[i].data->n, 4);
        put_le(&z, strlen(e[i].name), 2); put_le(&z, 0, 2); put_str(&z, e[i].name);
        put(&z, e[i].data->b, e[i].data->n);
    }
    size_t cd = z.n;
    for (int i = 0; i < n; i++) {
        put_le(&z, 0x02014b50, 4); put_le(&z, 20, 2); put_le(&z, 20, 2); put_le(&z, 0, 2); put_le(&z, e[i].method, 2);
        put_le(&z, 0, 4); put_le(&z, 0, 4); put_le(&z, e[i].data->n, 4); put_le(&z, e[i].data->n, 4);
        put_le(&z, strlen(e[i].name), 2); put_le(&z, 0, 2); put_le(&z, 0, 2); put_le(&z, 0, 2); put_le(&z, 0, 2);
        put_le(&z, 0, 4); put_le(&z, local[i], 4); put_str(&z, e[i].name);
    }
    size_t cdlen = z.n - cd;
    put_le(&z, 0x06054b50, 4); put_le(&z, 0, 4); put_le(&z, n, 2); put_le(&z, n, 2);
    put_le(&z, cdlen, 4); put_le(&z, cd, 4); put_le(&z, 0, 2);
    static const char *dir;
    if (!dir) dir = test_tmpdir("pt");
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    fwrite(z.b, 1, z.n, f);
    fclose(f);
    return path;
}

// The pickle of {'model': <Module>} where the module has a parameter 'weight' (a 2x3 float tensor
// at offset `offset` of a FloatStorage of `numel` elements) and a child 'bn' with buffer
// 'running_mean' (a 2-element tensor of the same storage); `self_child` adds the module as its own
// child (a cycle). Written as torch.save does: NEWOBJ + BUILD of a state dict.
static void pickle_module(Bytes *p, int offset, int numel, int self_child) {
    p->n = 0;
    PUT(p, "\x80\x02}q\x00(");                                      // PROTO 2, EMPTY_DICT, BINPUT 0, MARK
    put_uni(p, "model");
    put_str(p, "cmy.secret\nModel\nq\x01)\x81q\x02}(");                // GLOBAL, BINPUT, NEWOBJ, {, MARK
    put_uni(p, "_parameters");
    put_str(p, "}");
    put_uni(p, "weight");
    put_str(p, "ctorch._utils\n_rebuild_tensor_v2\nq\x03(");           // the tensor's reduce, MARK
    put_str(p, "(");                                                    // the persistent id tuple
    put_uni(p, "storage");
    put_str(p, "ctorch\nFloatStorage\n");
    put_uni(p, "0");
    put_uni(p, "cpu");
    put_str(p, "K"); put_le(p, numel, 1);
    put_str(p, "tQq\x04");                                              // TUPLE, BINPERSID, BINPUT 4
    put_str(p, "K"); put_le(p, offset, 1);
    PUT(p, "K\x02K\x03\x86K\x03K\x01\x86\x89" "ccollections\nOrderedDict\n)R"); // size, stride, False, (OrderedDict)
    put_str(p, "tR");                                                   // TUPLE, REDUCE
    put_str(p, "s");                                                    // SETITEM into _parameters
    put_uni(p, "_buffers");
    put_str(p, "}");
    put_uni(p, "_modules");
    put_str(p, "}(");
    put_uni(p, "bn");
    put_str(p, "cmy.secret\nBN\n)\x81}(");
    put_uni(p, "_parameters"); put_str(p, "}");
    put_uni(p, "_buffers"); put_str(p, "}");
    put_uni(p, "running_mean");
    PUT(p, "ctorch._utils\n_rebuild_tensor_v2\n(h\x04K\x00K\x02\x85K\x01\x85\x89NtR");
    put_str(p, "s");
    put_uni(p, "_modules"); put_str(p, "}");
    put_str(p, "ub");                                                   // SETITEMS, BUILD
    if (self_child) { put_uni(p, "me"); put_str(p, "h\x02"); }
    put_str(p, "u");                                                    // SETITEMS into _modules
    put_str(p, "ub");                                                   // SETITEMS, BUILD
    put_uni(p, "ema");
    put_str(p, "N");
    put_str(p, "u.");                                                   // SETITEMS, STOP
}

static Bytes storage6(void) {
    Bytes s = { .n = 0 };
    for (int i = 0; i < 8; i++) { float f = (float)i + 0.5f; put(&s, &f, 4); }
    return s;
}

static const char *small_pt(const char *file, const Bytes *pkl, const Bytes *storage) {
    Entry e[2] = { { "ckpt/data.pkl", pkl, 0 }, { "ckpt/data/0", storage, 0 } };
    return write_zip(file, e, 2);
}

static void test_small_checkpoint(void) {
    static Bytes pkl;
    Bytes st = storage6();
    pickle_module(&pkl, 2, 8, 0);
    SafeTensors t;
    Err err = { { 0 } };
    const char *path = small_pt("small.pt", &pkl, &st);
    CHECK(weights_open(path, &t, &err) == 0, "%s", err.msg);
    if (!t.map) return;
    const StTensor *w = st_find(&t, "weight"), *rm = st_find(&t, "bn.running_mean");
    CHECK(t.n == 2, "%d tensors", t.n);
    CHECK(t.n >= 1 && !strcmp(t.tensor[0].name, "weight"), "state-dict order: parameters first");
    CHECK(w && w->ndim == 2 && w->shape[0] == 2 && w->shape[1] == 3 && w->dtype == ST_F32, "weight's shape");
    float v[6];
    CHECK(st_read_f32(&t, "weight", v, 6, &err) == 0 && v[0] == 2.5f && v[5] == 7.5f, "weight starts at offset 2: %g %g",
          v[0], v[5]);
    CHECK(rm && rm->shape[0] == 2 && st_read_f32(&t, "bn.running_mean", v, 2, &err) == 0 && v[0] == 0.5f, "bn buffer");
    CHECK(st_meta(&t, "pt_class") && !strcmp(st_meta(&t, "pt_class"), "my.secret.Model"), "class name kept as a name");
    CHECK(st_meta(&t, "pt_key") && !strcmp(st_meta(&t, "pt_key"), "model"), "ema None -> model");
    st_close(&t);
}

// open must fail and the message must name the file and contain `want`
static void expect_refusal(const char *path, const char *want) {
    SafeTensors t;
    Err err = { { 0 } };
    int rc = weights_open(path, &t, &err);
    CHECK(rc == -1, "%s opened", path);
    CHECK(strstr(err.msg, path) && strstr(err.msg, want), "message '%s' lacks '%s'", err.msg, want);
    if (!rc) st_close(&t);
}

static void test_refusals(void) {
    static Bytes pkl, bad;
    Bytes st = storage6(), short_st = st;
    short_st.n = 20;                                           // 5 floats, the pickle says 8
    pickle_module(&pkl, 2, 8, 0);
    expect_refusal(small_pt("short.pt", &pkl, &short_st), "run past its 20-byte entry");
    pickle_module(&pkl, 3, 8, 0);                              // offset 3 + 6 elements > 8
    expect_refusal(small_pt("view.pt", &pkl, &st), "runs past the end of its storage");
    pickle_module(&pkl, 2, 8, 1);
    expect_refusal(small_pt("cycle.pt", &pkl, &st), "contains itself");
    pickle_module(&pkl, 2, 8, 0);
    Entry e[2] = { { "ckpt/data.pkl", &pkl, 8 }, { "ckpt/data/0", &st, 0 } };
    expect_refusal(write_zip("deflated.pt", e, 2), "is compressed");
    bad.n = 0;
    put_str(&bad, "\x80\x02" "cos\nsystem\n(");                // os.system('x'): a name, never called...
    put_uni(&bad, "touch pwned");
    put_str(&bad, "tR.");
    expect_refusal(small_pt("system.pt", &bad, &st), "(os.system) is not a torch module");
    CHECK(access("pwned", F_OK) != 0, "the pickle ran a command");
    bad.n = 0;
    put_str(&bad, "\x80\x02" "cos\nsystem\n");                 // ...and INST/OBJ (0x69 'i') are no opcodes here
    put_str(&bad, "i");
    expect_refusal(small_pt("inst.pt", &bad, &st), "opcode 0x69");
    bad.n = 0;
    PUT(&bad, "\x80\x02}q\x00(");
    put_uni(&bad, "epoch");
    put_str(&bad, "K\x01u.");
    expect_refusal(small_pt("nomodel.pt", &bad, &st), "not a model checkpoint");
    bad.n = 0;
    put_str(&bad, "\x80\x02}(");                               // truncated in the middle of a string
    put_uni(&bad, "model");
    bad.n -= 2;
    expect_refusal(small_pt("truncated.pt", &bad, &st), "truncated");
    Entry none[1] = { { "ckpt/other", &st, 0 } };
    expect_refusal(write_zip("nopickle.pt", none, 1), "without <name>/data.pkl");
    // a whole file cut short: the end record is gone
    const char *path = small_pt("cut.pt", &pkl, &st);
    CHECK(truncate(path, 100) == 0, "truncate");
    expect_refusal(path, "no zip end record");
}

// ---- views, state dicts and what a file may make the reader list ----------------------------------
static void put_int(Bytes *p, int v) { put_str(p, "J"); put_le(p, (uint32_t)v, 4); }   // BININT

// _rebuild_tensor_v2((storage, FloatStorage, key, cpu, numel), offset, shape, stride, False, OrderedDict())
static void put_tensor(Bytes *p, const char *key, int numel, int offset, int nd, const int *shape, const int *stride) {
    put_str(p, "ctorch._utils\n_rebuild_tensor_v2\n((");
    put_uni(p, "storage");
    put_str(p, "ctorch\nFloatStorage\n");
    put_uni(p, key);
    put_uni(p, "cpu");
    put_int(p, numel);
    put_str(p, "tQ");
    put_int(p, offset);
    put_str(p, "(");
    for (int d = 0; d < nd; d++) put_int(p, shape[d]);
    put_str(p, "t(");
    for (int d = 0; d < nd; d++) put_int(p, stride[d]);
    PUT(p, "t\x89" "ccollections\nOrderedDict\n)RtR");
}

// torch.save(model.state_dict()): an OrderedDict (REDUCE), its items (SETITEMS), then BUILD of its
// attributes, {'_metadata': OrderedDict({'': {'version': 1}})}.
static void pickle_views(Bytes *p) {
    static const struct { const char *name; int offset, nd, shape[4], stride[4]; } v[] = {
        { "transposed", 0, 2, { 4, 3 }, { 1, 4 } },            // arange(12).reshape(3, 4).t()
        { "sliced", 6, 2, { 2, 3 }, { 5, 1 } },                // arange(20).reshape(4, 5)[1:3, 1:4]
        { "expanded", 0, 2, { 3, 4 }, { 1, 0 } },              // arange(3).reshape(3, 1).expand(3, 4)
        { "channels_last", 0, 4, { 1, 2, 2, 3 }, { 12, 1, 6, 2 } },
        { "step", 1, 1, { 4 }, { 3 } },                        // arange(24)[1:12:3]
        { "contiguous", 20, 2, { 2, 2 }, { 2, 1 } },
    };
    p->n = 0;
    PUT(p, "\x80\x02" "ccollections\nOrderedDict\nq\x00)Rq\x01(");
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        put_uni(p, v[i].name);
        put_tensor(p, "0", 24, v[i].offset, v[i].nd, v[i].shape, v[i].stride);
    }
    put_str(p, "u}(");
    put_uni(p, "_metadata");
    put_str(p, "ccollections\nOrderedDict\n)R(");
    put_uni(p, "");
    put_str(p, "}");
    put_uni(p, "version");
    put_str(p, "K\x01suub.");                       // SETITEM, SETITEMS x 3, BUILD, STOP
}

static void test_views_state_dict(void) {
    static Bytes pkl, st;
    st.n = 0;
    for (int i = 0; i < 24; i++) { float f = (float)i; put(&st, &f, 4); }
    pickle_views(&pkl);
    SafeTensors t;
    Err err = { { 0 } };
    const char *path = small_pt("views.pt", &pkl, &st);
    int rc = weights_open(path, &t, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(t.n == 6 && st_meta(&t, "pt_class") == NULL, "%d tensors", t.n);
    float v[12], *want;
    float tr[12], sl[6] = { 6, 7, 8, 11, 12, 13 }, ex[12], cl[12], stp[4] = { 1, 4, 7, 10 }, co[4] = { 20, 21, 22, 23 };
    for (int i = 0; i < 4; i++) for (int j = 0; j < 3; j++) tr[i * 3 + j] = (float)(j * 4 + i);
    for (int i = 0; i < 3; i++) for (int j = 0; j < 4; j++) ex[i * 4 + j] = (float)i;
    for (int c = 0; c < 2; c++) for (int h = 0; h < 2; h++) for (int w = 0; w < 3; w++) cl[c * 6 + h * 3 + w] = (float)(6 * h + 2 * w + c);
    const struct { const char *name; float *want; size_t n; } c[] = {
        { "transposed", tr, 12 }, { "sliced", sl, 6 }, { "expanded", ex, 12 }, { "channels_last", cl, 12 },
        { "step", stp, 4 }, { "contiguous", co, 4 },
    };
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        want = c[k].want;
        if (st_read_f32(&t, c[k].name, v, c[k].n, &err)) { CHECK(0, "%s", err.msg); continue; }
        for (size_t i = 0; i < c[k].n; i++)
            if (v[i] != want[i]) { CHECK(0, "%s[%zu] = %g, want %g", c[k].name, i, v[i], want[i]); break; }
    }
    const StTensor *con = st_find(&t, "contiguous");
    CHECK(con && (const unsigned char *)con->data >= t.map && (const unsigned char *)con->data < t.map + t.map_size,
          "a contiguous tensor is used in place");
    CHECK(t.n_owned == 5, "%d views gathered, want 5", t.n_owned);
    st_close(&t);
}

// One module M holding K parameters (one tensor, memo references), M under 90 names of a module that
// is itself under 90 names of the root: 72 KB that would list 90 * 90 * K tensors.
static void pickle_memo_bomb(Bytes *p, int K) {
    static const int one = 1;
    p->n = 0;
    PUT(p, "\x80\x02}(");
    put_uni(p, "model");
    for (int level = 0; level < 3; level++) {
        put_str(p, "cmy\nM\n)\x81}(");
        put_uni(p, "_parameters"); put_str(p, "}");
        if (level == 2) {
            put_str(p, "(");
            for (int k = 0; k < K; k++) {
                char key[16];
                snprintf(key, sizeof key, "p%d", k);
                put_uni(p, key);
                if (k == 0) { put_tensor(p, "0", 1, 0, 1, &one, &one); put_str(p, "q\x07"); }
                else put_str(p, "h\x07");
            }
            put_str(p, "u");
        }
        put_uni(p, "_buffers"); put_str(p, "}");
        put_uni(p, "_modules"); put_str(p, "}");
        if (level < 2) { put_str(p, "("); put_uni(p, "0"); }
    }
    put_str(p, "ub");                                   // the leaf: SETITEMS, BUILD
    for (int level = 1; level >= 0; level--) {
        put_str(p, level ? "q\x06" : "q\x05");           // memoize the finished child
        for (int i = 1; i < 90; i++) {
            char key[8];
            snprintf(key, sizeof key, "%d", i);
            put_uni(p, key);
            put_str(p, level ? "h\x06" : "h\x05");
        }
        put_str(p, "uub");                              // _modules' SETITEMS, the state's SETITEMS, BUILD
    }
    put_str(p, "u.");
}

static void test_memo_bomb(void) {
    static Bytes pkl;
    Bytes st = storage6();
    pickle_memo_bomb(&pkl, 2000);
    CHECK(pkl.n < 40000, "the bomb is %zu bytes", pkl.n);
    expect_refusal(small_pt("bomb.pt", &pkl, &st), "modules repeated through pickle memo references");
    // a stride-0 view of one element as 2^20 x 2^10 floats (4 GB): refused before it is gathered
    pkl.n = 0;
    PUT(&pkl, "\x80\x02}(");
    put_uni(&pkl, "w");
    put_tensor(&pkl, "0", 1, 0, 2, (const int[]){ 1 << 20, 1 << 10 }, (const int[]){ 0, 0 });
    put_str(&pkl, "u.");
    expect_refusal(small_pt("expand.pt", &pkl, &st), "views expanded from a small storage");
}

// Files users mistake for weights are named for what they are.
static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(b, 1, n, f);
    fclose(f);
}

static void test_impostors(void) {
    const char *dir = test_tmpdir("pt-impostors");
    char path[4300];
    static const struct { const char *file, *bytes, *want; size_t n; } c[] = {
        { "lfs.pt", "version https://git-lfs.github.com/spec/v1\noid sha256:4f2a\nsize 20700000\n", "Git LFS pointer", 0 },
        { "page.pt", "\xef\xbb\xbf\n  <!DOCTYPE html>\n<html><head><title>Sign in</title></head></html>\n", "an HTML page", 0 },
        { "legacy.pt", "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.\x80\x02M\xe9\x03.\x80\x02}q\x00.", "legacy format", 27 },
        { "pickle.pt", "\x80\x02}q\x00X\x01\x00\x00\x00" "aK\x01s.", "plain Python pickle", 15 },
        { "model.pt.gz", "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", "gzip", 10 },
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, c[i].file);
        write_bytes(path, c[i].bytes, c[i].n ? c[i].n : strlen(c[i].bytes));
        expect_refusal(path, c[i].want);
    }
    static Bytes pkl, code;
    Bytes st = storage6();
    pickle_module(&pkl, 2, 8, 0);
    code.n = 0;
    put_str(&code, "class Model(Module):\n  pass\n");
    Entry e[3] = { { "m/data.pkl", &pkl, 0 }, { "m/code/__torch__/models/yolo.py", &code, 0 }, { "m/data/0", &st, 0 } };
    expect_refusal(write_zip("script.pt", e, 3), "TorchScript");
}

// ---- the shared checkpoints -------------------------------------------------------------------
#ifdef __SANITIZE_ADDRESS__
#define READ_LIMIT_S 2.0      // ASan slows the pickle machine about tenfold
#else
#define READ_LIMIT_S 0.2      // the issue's target for the 15 MB file
#endif

// float -> IEEE half, round to nearest, ties to even (what torch's .half() does)
static uint16_t to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = x >> 16 & 0x8000, man = x & 0x7fffff;
    int e = (int)(x >> 23 & 0xff);
    if (e == 0xff) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    e = e - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    int shift = 13;
    uint32_t h;
    if (e <= 0) {                                     // subnormal half
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000;
        shift = 14 - e;
        h = 0;
    } else {
        h = (uint32_t)e << 10;
    }
    uint32_t q = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    q += rem > half || (rem == half && (q & 1));
    return (uint16_t)(sign | (h + q));                // a carry out of the mantissa bumps the exponent, as it should
}

static void check_fixture(const char *pt_name, const char *st_name, const char *cls) {
    const char *sh = shared_dir();
    if (!sh) SKIP("no ../shared");
    char pt_path[4200], st_path[4200];
    snprintf(pt_path, sizeof pt_path, "%s/fixtures/pt/%s", sh, pt_name);
    snprintf(st_path, sizeof st_path, "%s/fixtures/%s", sh, st_name);
    if (access(pt_path, R_OK) || access(st_path, R_OK)) SKIP("%s or %s missing", pt_name, st_name);
    SafeTensors pt, ref;
    Err err = { { 0 } };
    double t0 = now_seconds();
    int rc = weights_open(pt_path, &pt, &err);
    double dt = now_seconds() - t0;
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    printf("    %s: %d tensors read in %.3f s\n", pt_name, pt.n, dt);
    CHECK(dt < READ_LIMIT_S, "reading took %.3f s (limit %.1f)", dt, READ_LIMIT_S);
    CHECK(st_meta(&pt, "pt_class") && !strcmp(st_meta(&pt, "pt_class"), cls), "class %s", st_meta(&pt, "pt_class"));
    CHECK(st_open(st_path, &ref, &err) == 0, "%s", err.msg);
    int n_param = 0, bad = 0;
    for (int i = 0; i < ref.n; i++) {
        const StTensor *r = &ref.tensor[i];
        if (strncmp(r->name, "param/", 6)) continue;
        n_param++;
        const StTensor *p = st_find(&pt, r->name + 6);
        int is_int = strstr(r->name, "num_batches_tracked") != NULL;   // the fixture: shape (1), torch: ()
        int same = p && (p->ndim == r->ndim || (is_int && st_numel(p) == 1));
        for (int d = 0; same && !is_int && d < r->ndim; d++) same = p->shape[d] == r->shape[d];
        if (!same) { if (bad++ < 5) CHECK(0, "%s: missing or another shape in the .pt", r->name); continue; }
        size_t n = st_numel(r);
        float *want = malloc(n * sizeof *want + 1);
        st_read_f32(&ref, r->name, want, n, &err);
        for (size_t k = 0; k < n; k++) {
            int ok;
            if (is_int) { int64_t v; memcpy(&v, (const char *)p->data + 8 * k, 8); ok = p->dtype == ST_I64 && v == (int64_t)want[k]; }
            else { uint16_t h; memcpy(&h, (const char *)p->data + 2 * k, 2); ok = p->dtype == ST_F16 && h == to_half(want[k]); }
            if (!ok) { if (bad++ < 5) CHECK(0, "%s[%zu] differs from the fixture rounded to fp16", r->name, k); break; }
        }
        free(want);
    }
    CHECK(n_param == pt.n, "the fixture has %d param tensors, the .pt %d", n_param, pt.n);
    CHECK(bad == 0, "%d tensors differ", bad);
    st_close(&ref);
    st_close(&pt);
}

static void test_yolov9_gelan_s(void) { check_fixture("gelan_s_yolov9.pt", "gelan_s_step.safetensors", "models.yolo.DetectionModel"); }
static void test_ultralytics_yolo26s(void) {
    check_fixture("yolo26s_ultralytics.pt", "yolo26_s_step.safetensors", "ultralytics.nn.tasks.DetectionModel");
}

// The real checkpoint with bytes flipped in its pickle or cut anywhere: refused or read, never a crash.
static void test_damaged_fixture(void) {
    const char *sh = shared_dir();
    if (!sh) SKIP("no ../shared");
    char src[4200];
    snprintf(src, sizeof src, "%s/fixtures/pt/yolo26s_ultralytics.pt", sh);
    size_t n;
    char *buf = slurp(src, &n);
    if (!buf || n < 200000) { free(buf); SKIP("fixtures/pt/yolo26s_ultralytics.pt missing"); }
    char path[4300];
    snprintf(path, sizeof path, "%s/damaged.pt", test_tmpdir("pt-damaged"));
    Rng r = rng_for(19, 0, 0);
    int refused = 0;
    for (int k = 0; k < 40; k++) {
        char *copy = malloc(n);
        memcpy(copy, buf, n);
        size_t len = n;
        if (k % 2) len = (size_t)rng_int(&r, (int)n);                      // cut short
        else for (int j = 0; j < 4; j++) copy[64 + rng_int(&r, 178000)] ^= (char)(1 + rng_int(&r, 255));  // pickle bytes
        FILE *f = fopen(path, "wb");
        fwrite(copy, 1, len, f);
        fclose(f);
        free(copy);
        SafeTensors t;
        Err err = { { 0 } };
        if (weights_open(path, &t, &err)) { refused++; CHECK(strstr(err.msg, path), "message without the file: %s", err.msg); }
        else st_close(&t);
    }
    CHECK(refused >= 20, "only %d of 40 damaged files refused", refused);
    free(buf);
}


// ---- files torch.save wrote (test/pt/make.py) ------------------------------------------------------
// Each NAME.pt gives exactly the tensors of NAME.expected.safetensors: names, dtypes, shapes, bytes.
static void check_made(const char *name, int *found) {
    char pt[256], ex[256];
    snprintf(pt, sizeof pt, "test/pt/%s.pt", name);
    snprintf(ex, sizeof ex, "test/pt/%s.expected.safetensors", name);
    if (access(pt, R_OK) || access(ex, R_OK)) return;
    ++*found;
    SafeTensors got, want;
    Err err = { { 0 } };
    if (weights_open(pt, &got, &err)) { CHECK(0, "%s", err.msg); return; }
    if (st_open(ex, &want, &err)) { CHECK(0, "%s", err.msg); st_close(&got); return; }
    CHECK(got.n == want.n, "%s: %d tensors, %d expected", pt, got.n, want.n);
    int bad = 0;
    for (int i = 0; i < want.n; i++) {
        const StTensor *w = &want.tensor[i], *g = st_find(&got, w->name);
        int same = g && g->dtype == w->dtype && g->ndim == w->ndim && g->nbytes == w->nbytes;
        for (int d = 0; same && d < w->ndim; d++) same = g->shape[d] == w->shape[d];
        if (same && w->nbytes) same = !memcmp(g->data, w->data, w->nbytes);
        if (!same && bad++ < 5)
            CHECK(0, "%s: %s is %s, or differs in dtype, shape or values", pt, w->name, g ? "there" : "missing");
    }
    st_close(&want);
    st_close(&got);
}

static void test_torch_made(void) {
    static const char *names[] = { "views", "state_dict", "module", "checkpoint", "checkpoint_stripped" };
    int found = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) check_made(names[i], &found);
    if (!access("test/pt/legacy.pt", R_OK)) { found++; expect_refusal("test/pt/legacy.pt", "legacy format"); }
    if (!found) SKIP("test/pt/*.pt not made yet (python3 test/pt/make.py test/pt, with torch)");
}

// ---- the real trainers' checkpoints ------------------------------------------------------------
// ../shared/fixtures/pt/real/: yolov9's best.pt (model, EMA, optimizer), its best_striped.pt and
// Ultralytics' best.pt, as their trainers leave them, with the reference's outputs on two images.
#define REAL_TOL 1e-3   // the fixture README's: the fp16 rounding of the weights, relative

typedef struct { float v[6]; int used; float *score; } Row;   // x, y, w, h or x1, y1, x2, y2; score; class;
                                                              // a DFL head's class scores

static int rows_close(const float *a, const float *b, int n, float scale) {
    for (int k = 0; k < n; k++)
        if (!close_enough(a[k], b[k], REAL_TOL * scale, REAL_TOL)) return 0;
    return 1;
}

// Our rows of image n: every anchor's decoded xywh and its best score (DFL heads), or the top-k rows
// of the end-to-end head; *A their count.
static Row *our_rows(Model *m, int n, int S, int *count) {
    Map head[4];
    for (int l = 0; l < m->n_levels; l++) head[l] = model_value(m, m->head[l], 1);
    NmsOptions o = nms_val_options();
    o.conf_thres = -1;                      // keep every row: the reference's y is not thresholded
    ValDecoder d;
    val_decoder_init(&d, m, S, S, &o);
    int A = nms_anchors(head, m->n_levels), nd = 0;
    Row *r = calloc(A, sizeof *r);
    if (m->end2end) {
        nd = val_decode(&d, m, head, n, S);
        for (int i = 0; i < nd; i++) {
            const Det *t = &d.det[i];
            Row x = { { t->x1, t->y1, t->x2, t->y2, t->conf, (float)t->cls }, 0, NULL };
            r[i] = x;
        }
    } else {
        nms_decode(head, m->strides, m->n_levels, n, m->nc, d.boxes, d.scores);
        for (int a = 0; a < A; a++) {
            const float *b = d.boxes + 4 * a;
            Row x = { { (b[0] + b[2]) / 2, (b[1] + b[3]) / 2, b[2] - b[0], b[3] - b[1], 0, 0 }, 0, malloc(m->nc * sizeof(float)) };
            memcpy(x.score, d.scores + (size_t)a * m->nc, m->nc * sizeof(float));
            r[a] = x;
        }
        nd = A;
    }
    val_decoder_free(&d);
    *count = nd;
    return r;
}

// The real checkpoint loads into `ini` and our eval forward gives the reference's output/y.
static void check_real(const char *name, const char *ini) {
    const char *sh = shared_dir();
    if (!sh) SKIP("no ../shared");
    char pt[4200], ex[4200];
    snprintf(pt, sizeof pt, "%s/fixtures/pt/real/%s.pt", sh, name);
    snprintf(ex, sizeof ex, "%s/fixtures/pt/real/%s.expected.safetensors", sh, name);
    if (access(pt, R_OK) || access(ex, R_OK)) SKIP("fixtures/pt/real/%s.pt or its expected outputs missing", name);
    static Config cfg;
    SafeTensors ref;
    Model m;
    Err err = { { 0 } };
    if (config_load(ini, 0, NULL, &cfg, &err) || st_open(ex, &ref, &err)) { CHECK(0, "%s", err.msg); return; }
    const StTensor *x = st_find(&ref, "input/images"), *y = st_find(&ref, "output/y");
    if (!x || !y || x->ndim != 4 || y->ndim != 3) { CHECK(0, "%s lacks input/images or output/y", ex); st_close(&ref); return; }
    int N = (int)x->shape[0], S = (int)x->shape[2], R = (int)y->shape[1], C = (int)y->shape[2];
    float *nchw = malloc(st_numel(x) * sizeof(float)), *nhwc = malloc(st_numel(x) * sizeof(float));
    float *want = malloc(st_numel(y) * sizeof(float));
    st_read_f32(&ref, "input/images", nchw, st_numel(x), &err);
    st_read_f32(&ref, "output/y", want, st_numel(y), &err);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < S * S; p++) nhwc[((size_t)n * S * S + p) * 3 + c] = nchw[((size_t)n * 3 + c) * S * S + p];
    SafeTensors pt_st;                      // the head's transposed anchors/strides and the optimizer state
    if (!weights_open(pt, &pt_st, &err)) {  // are outside the state dict: nothing is gathered
        CHECK(pt_st.n_owned == 0, "%d tensors copied", pt_st.n_owned);
        st_close(&pt_st);
    }
    int rc = model_build(&cfg, N, S, &m, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (!rc) {
        CHECK((rc = model_load(&m, pt, "", &err)) == 0, "%s", err.msg);
        if (!rc) model_forward(&m, nhwc, N, S, S, 0);
        int bad = 0, rows = 0;
        for (int n = 0; !rc && n < N; n++) {
            int nd;
            Row *got = our_rows(&m, n, S, &nd);
            const float *w = want + (size_t)n * R * C;
            if (m.end2end) {                // y: (k, 6) rows; tied scores may come in another order
                CHECK(nd == R, "image %d: %d rows, the reference %d", n, nd, R);
                for (int i = 0; i < R; i++, rows++) {
                    int j = 0;
                    while (j < nd && (got[j].used || got[j].v[5] != w[i * C + 5] || !rows_close(got[j].v, w + i * C, 5, S))) j++;
                    if (j < nd) got[j].used = 1;
                    else if (bad++ < 3) CHECK(0, "image %d row %d (%g %g %g %g %g %g) not among ours", n, i, w[i * C],
                                             w[i * C + 1], w[i * C + 2], w[i * C + 3], w[i * C + 4], w[i * C + 5]);
                }
            } else {                        // y: (4 + nc, A): xywh pixels, then the class scores
                CHECK(nd == C && R == 4 + m.nc, "%d anchors, %d channels; the reference (%d, %d)", nd, 4 + m.nc, R, C);
                for (int a = 0; a < nd && a < C; a++, rows++) {
                    float wb[4] = { w[a], w[C + a], w[2 * C + a], w[3 * C + a] };
                    int ok = rows_close(got[a].v, wb, 4, S);
                    for (int c = 0; c < m.nc; c++) ok &= close_enough(got[a].score[c], w[(4 + c) * C + a], REAL_TOL, REAL_TOL);
                    if (!ok && bad++ < 3) CHECK(0, "image %d anchor %d box (%g %g %g %g), the reference (%g %g %g %g)", n, a,
                                                got[a].v[0], got[a].v[1], got[a].v[2], got[a].v[3], wb[0], wb[1], wb[2], wb[3]);
                }
            }
            for (int i = 0; i < nd; i++) free(got[i].score);
            free(got);
        }
        if (!rc) printf("    %s: %d rows of %d images compared, %d differ\n", name, rows, N, bad);
        CHECK(bad == 0, "%d rows differ beyond %g", bad, REAL_TOL);
        model_free(&m);
    }
    free(nchw); free(nhwc); free(want);
    st_close(&ref);
}

static void test_real_yolov9_best(void) { check_real("yolov9_gelan_t_train_best", "cfg/gelan-t.ini"); }
static void test_real_yolov9_striped(void) { check_real("yolov9_gelan_t_train_best_striped", "cfg/gelan-t.ini"); }
static void test_real_ultralytics_best(void) { check_real("ultralytics_yolo26n_train_best", "cfg/yolo26n.ini"); }

int main(void) {
    RUN(test_small_checkpoint);
    RUN(test_refusals);
    RUN(test_views_state_dict);
    RUN(test_memo_bomb);
    RUN(test_impostors);
    RUN(test_torch_made);
    RUN(test_yolov9_gelan_s);
    RUN(test_ultralytics_yolo26s);
    RUN(test_damaged_fixture);
    RUN(test_real_yolov9_best);
    RUN(test_real_yolov9_striped);
    RUN(test_real_ultralytics_best);
    return test_summary();
}
