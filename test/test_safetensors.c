// test_safetensors.c: write/read round trip, every malformed header or range is rejected with a
// message, and the shared gelan-s fixture opens with the expected tensors.
#include "io/safetensors.h"
#include "test/test.h"

#include <stdint.h>

static char tmp_path[4200];

static const char *tmp_file(const char *name) {
    static const char *dir;
    if (!dir) dir = test_tmpdir("safetensors");
    snprintf(tmp_path, sizeof tmp_path, "%s/%s", dir, name);
    return tmp_path;
}

// write_raw: a file made of an 8-byte header length, the header text and `data_len` zero bytes.
static const char *write_raw(const char *name, const char *header, uint64_t claimed_len, size_t data_len) {
    const char *path = tmp_file(name);
    FILE *f = fopen(path, "wb");
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(claimed_len >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
    return path;
}

static void test_round_trip(void) {
    float a[6] = {1, -2.5f, 3, 1e-30f, -0.0f, 7};
    int64_t b[3] = {-1, 0, (int64_t)1 << 40};
    StWriteTensor t[2] = {
        {"model.0.conv.weight", ST_F32, 2, {2, 3}, a},
        {"idx \"quoted\"", ST_I64, 1, {3}, b},
    };
    Err err = {{0}};
    const char *path = tmp_file("rt.safetensors");
    CHECK(st_write(path, t, 2, "{\"format\":\"pt\",\"note\":\"a \\\"b\\\"\"}", &err) == 0, "%s", err.msg);
    SafeTensors st;
    CHECK(st_open(path, &st, &err) == 0, "%s", err.msg);
    if (!st.map) return;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | st.map[i];
    CHECK((8 + hlen) % 8 == 0, "header length %llu not padded to 8", (unsigned long long)hlen);
    CHECK(st.n == 2, "%d tensors", st.n);
    CHECK(strcmp(st.tensor[0].name, "model.0.conv.weight") == 0, "order kept: %s", st.tensor[0].name);
    const StTensor *ta = st_find(&st, "model.0.conv.weight"), *tb = st_find(&st, "idx \"quoted\"");
    CHECK(ta && ta->ndim == 2 && ta->shape[0] == 2 && ta->shape[1] == 3 && ta->dtype == ST_F32, "a");
    CHECK(tb && tb->dtype == ST_I64 && tb->nbytes == 24 && memcmp(tb->data, b, 24) == 0, "b");
    CHECK(st_find(&st, "missing") == NULL, "missing found");
    float got[6];
    CHECK(st_read_f32(&st, "model.0.conv.weight", got, 6, &err) == 0, "%s", err.msg);
    CHECK(memcmp(got, a, sizeof a) == 0, "F32 values differ");
    CHECK(st_read_f32(&st, "idx \"quoted\"", got, 3, &err) == 0 && got[2] == 1099511627776.0f, "I64");
    CHECK(st_read_f32(&st, "model.0.conv.weight", got, 5, &err) == -1, "wrong count accepted");
    CHECK(st_meta(&st, "format") && strcmp(st_meta(&st, "format"), "pt") == 0, "meta format");
    CHECK(st_meta(&st, "note") && strcmp(st_meta(&st, "note"), "a \"b\"") == 0, "meta escapes");
    st_close(&st);
    CHECK(access(tmp_file("rt.safetensors.tmp"), F_OK) != 0, "temporary file left behind");
}

// Conversions from the other float dtypes the reader accepts.
static void test_dtypes(void) {
    // F16 1.0 = 0x3C00, -2.0 = 0xC000, 2^-24 = 0x0001; BF16 1.5 = 0x3FC0; F64 0.25
    unsigned char data[6 + 2 + 8] = {0x00, 0x3C, 0x00, 0xC0, 0x01, 0x00, 0xC0, 0x3F};
    double q = 0.25;
    memcpy(data + 8, &q, 8);
    const char *h = "{\"h\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[0,6]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[6,8]},"
                    "\"d\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[8,16]}}";
    const char *path = tmp_file("dt.safetensors");
    FILE *f = fopen(path, "wb");
    uint64_t n = strlen(h);
    fwrite(&n, 8, 1, f);   // little-endian host
    fwrite(h, 1, n, f);
    fwrite(data, 1, sizeof data, f);
    fclose(f);
    SafeTensors st;
    Err err = {{0}};
    CHECK(st_open(path, &st, &err) == 0, "%s", err.msg);
    if (!st.map) return;
    float v[3];
    CHECK(st_read_f32(&st, "h", v, 3, &err) == 0 && v[0] == 1 && v[1] == -2 && v[2] == 0x1p-24f,
          "F16 %g %g %g", v[0], v[1], v[2]);
    CHECK(st_read_f32(&st, "b", v, 1, &err) == 0 && v[0] == 1.5f, "BF16 %g", v[0]);
    CHECK(st_read_f32(&st, "d", v, 1, &err) == 0 && v[0] == 0.25f, "F64 scalar %g", v[0]);
    st_close(&st);
}

static void expect_reject(const char *what, const char *path, const char *must_mention) {
    SafeTensors st;
    Err err = {{0}};
    int rc = st_open(path, &st, &err);
    CHECK(rc == -1, "%s accepted", what);
    CHECK(err.msg[0] && strstr(err.msg, path), "%s: message does not name the file: '%s'", what, err.msg);
    if (must_mention) CHECK(strstr(err.msg, must_mention), "%s: message lacks '%s': '%s'", what,
                            must_mention, err.msg);
}

static void test_malformed(void) {
    const char *ok = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_reject("header length past the end", write_raw("t1", ok, 4096, 8), "truncated");
    expect_reject("huge header length", write_raw("t2", ok, (uint64_t)1 << 40, 8), "100 MB");
    expect_reject("data cut short", write_raw("t3", ok, strlen(ok), 4), "'a'");
    {
        const char *path = tmp_file("t4");
        FILE *f = fopen(path, "wb");
        fwrite("abc", 1, 3, f);
        fclose(f);
        expect_reject("file shorter than 8 bytes", path, "too short");
    }
    const char *bad_json[] = {
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}",           // unclosed
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],}}",          // trailing comma
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}",                                  // missing key
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",         // negative dim
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}",        // fraction
        "{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}",           // unknown dtype
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}",            // one offset
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}",  // unknown key
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x",        // trailing text
        ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}}"),         // duplicate name
        "{\"__metadata__\":{\"k\":3}}",                                               // non-string meta
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\\x\":{}}",  // bad escape
        "[1,2]",
    };
    for (size_t i = 0; i < sizeof bad_json / sizeof *bad_json; i++) {
        char name[32], what[64];
        snprintf(name, sizeof name, "json%zu", i);
        snprintf(what, sizeof what, "bad JSON case %zu", i);
        expect_reject(what, write_raw(name, bad_json[i], strlen(bad_json[i]), 16), NULL);
    }
    const char *beyond = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    expect_reject("offsets beyond the file", write_raw("t5", beyond, strlen(beyond), 8), "outside");
    const char *overlap = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                          "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}";
    expect_reject("overlapping tensors", write_raw("t6", overlap, strlen(overlap), 12), "overlap");
    const char *size = "{\"a\":{\"dtype\":\"F64\",\"shape\":[2,3],\"data_offsets\":[0,24]}}";
    expect_reject("dtype size x shape != bytes", write_raw("t7", size, strlen(size), 24), "48");
    const char *order = "{\"a\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,4]}}";
    expect_reject("begin after end", write_raw("t8", order, strlen(order), 8), "'a'");
}

static void test_writer_rejects(void) {
    double d[1] = {1};
    StWriteTensor t = {"x", ST_F64, 1, {1}, d};
    Err err = {{0}};
    CHECK(st_write(tmp_file("w1"), &t, 1, NULL, &err) == -1 && err.msg[0], "F64 written");
    t.dtype = ST_F32;
    CHECK(st_write(tmp_file("w2"), &t, 1, "{\"k\":1}", &err) == -1, "bad metadata accepted");
    CHECK(st_write("/nonexistent-dir/x.safetensors", &t, 1, NULL, &err) == -1 && strstr(err.msg, "nonexistent"),
          "unwritable path: %s", err.msg);
}

static void test_fixture(void) {
    const char *dir = shared_dir();
    if (!dir) SKIP("no shared folder (set YT_SHARED)");
    char path[4200];
    snprintf(path, sizeof path, "%s/fixtures/gelan_s_step.safetensors", dir);
    if (access(path, R_OK) != 0) SKIP("fixtures/gelan_s_step.safetensors is absent");
    SafeTensors st;
    Err err = {{0}};
    CHECK(st_open(path, &st, &err) == 0, "%s", err.msg);
    if (!st.map) return;
    CHECK(st.n == 2883, "%d tensors, expected 2883", st.n);
    const StTensor *p3 = st_find(&st, "output/p3");
    CHECK(p3 && p3->ndim == 4 && p3->shape[0] == 4 && p3->shape[1] == 144 && p3->shape[2] == 32 &&
          p3->shape[3] == 32 && p3->dtype == ST_F32, "output/p3 shape");
    const StTensor *w = st_find(&st, "param/model.0.conv.weight");
    CHECK(w && w->ndim == 4 && w->shape[0] == 32 && w->shape[1] == 3 && w->shape[2] == 3, "conv0 shape");
    const StTensor *dfl = st_find(&st, "param/model.22.dfl.conv.weight");
    float proj[16];
    CHECK(dfl && st_read_f32(&st, "param/model.22.dfl.conv.weight", proj, 16, &err) == 0 &&
          proj[0] == 0 && proj[15] == 15, "DFL weights 0..15: %s", err.msg);
    const char *meta = st_meta(&st, "json");
    CHECK(meta && strstr(meta, "\"loss_total\": 51.427001288347206"), "metadata json: %s", meta ? meta : "none");
    int n_i64 = 0;
    for (int i = 0; i < st.n; i++) n_i64 += st.tensor[i].dtype == ST_I64;
    CHECK(n_i64 > 0, "no I64 gradient indices found");
    st_close(&st);
}

int main(void) {
    RUN(test_round_trip);
    RUN(test_dtypes);
    RUN(test_malformed);
    RUN(test_writer_rejects);
    RUN(test_fixture);
    return test_summary();
}
