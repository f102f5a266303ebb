// test_tfevents.c: the TensorBoard writer (io/tfevents.c) read back by a small reader written here:
// CRC-32C against published vectors, the TFRecord framing byte by byte, every record's two checksums,
// and a protobuf decode of each Event (wall_time, step, file_version, summary scalars and PNG images,
// session_log). Then a 2-epoch gelan-t run: its event file holds results.csv's values under the
// references' tags at steps 0 and 1, and the pictures it drew; tensorboard=0 writes none; a resumed
// run writes a new file that starts with a SessionLog START at the epoch it redoes.
// test/tb_check.py reads the same files with the tensorboard package's own reader.
#include "io/tfevents.h"
#include "cfg/config.h"
#include "core/train/train.h"
#include "core/train/train_tb.h"
#include "io/synth.h"
#include "test/test.h"
#include "test/synth_run.h"

#include <dirent.h>
#include <time.h>

// ---- a minimal TFRecord + protobuf reader ---------------------------------------------------------
typedef struct { const uint8_t *p, *end; int bad; } Rd;

static uint64_t rd_varint(Rd *r) {
    uint64_t v = 0;
    for (int s = 0; s < 64; s += 7) {
        if (r->p >= r->end) { r->bad = 1; return 0; }
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return v;
    }
    r->bad = 1;
    return 0;
}

static uint64_t rd_fixed(Rd *r, int n) {
    if (r->end - r->p < n) { r->bad = 1; return 0; }
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)r->p[i] << 8 * i;
    r->p += n;
    return v;
}

// Next field: its number and wire type; a length-delimited field's bytes in *sub.
static int rd_field(Rd *r, int *wire, Rd *sub, uint64_t *val) {
    if (r->p >= r->end || r->bad) return 0;
    uint64_t key = rd_varint(r);
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0: *val = rd_varint(r); break;
    case 1: *val = rd_fixed(r, 8); break;
    case 5: *val = rd_fixed(r, 4); break;
    case 2: {
        uint64_t n = rd_varint(r);
        if (n > (uint64_t)(r->end - r->p)) { r->bad = 1; return 0; }
        *sub = (Rd){ r->p, r->p + n, 0 };
        r->p += n;
        break;
    }
    default: r->bad = 1; return 0;
    }
    return r->bad ? 0 : (int)(key >> 3);
}

typedef struct {
    double wall;
    int64_t step;
    char version[32], tag[64];
    int kind;                 // 0 none, 1 scalar, 2 image, 3 session_log
    float value;
    int h, w, colorspace, status;
    const uint8_t *png;
    size_t png_n;
} Ev;

static void parse_value(Rd v, Ev *e) {
    int wire, f;
    Rd sub;
    uint64_t x;
    while ((f = rd_field(&v, &wire, &sub, &x))) {
        if (f == 1 && wire == 2) snprintf(e->tag, sizeof e->tag, "%.*s", (int)(sub.end - sub.p), (const char *)sub.p);
        if (f == 2 && wire == 5) { uint32_t u = (uint32_t)x; memcpy(&e->value, &u, 4); e->kind = 1; }
        if (f == 4 && wire == 2) {
            Rd im = sub;
            e->kind = 2;
            int w2, g;
            Rd s2;
            uint64_t y;
            while ((g = rd_field(&im, &w2, &s2, &y))) {
                if (g == 1) e->h = (int)y;
                if (g == 2) e->w = (int)y;
                if (g == 3) e->colorspace = (int)y;
                if (g == 4) { e->png = s2.p; e->png_n = (size_t)(s2.end - s2.p); }
            }
        }
    }
}

// One Event from a record's bytes; 0 when it does not parse.
static int parse_event(const uint8_t *b, size_t n, Ev *e) {
    memset(e, 0, sizeof *e);
    Rd r = { b, b + n, 0 };
    int wire, f;
    Rd sub;
    uint64_t x;
    while ((f = rd_field(&r, &wire, &sub, &x))) {
        if (f == 1 && wire == 1) memcpy(&e->wall, &x, 8);
        else if (f == 2 && wire == 0) e->step = (int64_t)x;
        else if (f == 3 && wire == 2) snprintf(e->version, sizeof e->version, "%.*s", (int)(sub.end - sub.p), (const char *)sub.p);
        else if (f == 5 && wire == 2) {
            Rd s = sub, v;
            int w2, g;
            uint64_t y;
            while ((g = rd_field(&s, &w2, &v, &y))) if (g == 1 && w2 == 2) parse_value(v, e);   // one value per event here
        } else if (f == 7 && wire == 2) {
            Rd s = sub, v;
            int w2;
            uint64_t y;
            e->kind = 3;
            if (rd_field(&s, &w2, &v, &y) == 1) e->status = (int)y;
        }
    }
    return !r.bad;
}

// Every record of a file (checksums checked); returns the count, -1 on a framing or checksum error.
typedef struct { uint8_t *buf; size_t n; Ev ev[256]; int count; } EvFile;

static int read_events(const char *path, EvFile *out) {
    out->count = 0;
    out->buf = (uint8_t *)slurp(path, &out->n);
    if (!out->buf) return -1;
    size_t at = 0;
    while (at < out->n) {
        if (out->n - at < 16) return -1;
        const uint8_t *h = out->buf + at;
        uint64_t len = 0;
        uint32_t c1 = 0, c2 = 0;
        for (int i = 0; i < 8; i++) len |= (uint64_t)h[i] << 8 * i;
        for (int i = 0; i < 4; i++) c1 |= (uint32_t)h[8 + i] << 8 * i;
        if (c1 != crc32c_masked(h, 8) || len > out->n - at - 16) return -1;
        for (int i = 0; i < 4; i++) c2 |= (uint32_t)h[12 + len + i] << 8 * i;
        if (c2 != crc32c_masked(h + 12, len)) return -1;
        if (out->count == 256 || !parse_event(h + 12, len, &out->ev[out->count++])) return -1;
        at += 16 + len;
    }
    return out->count;
}

static const Ev *find_ev(const EvFile *f, const char *tag, int64_t step) {
    for (int i = 0; i < f->count; i++)
        if (!strcmp(f->ev[i].tag, tag) && f->ev[i].step == step) return &f->ev[i];
    return NULL;
}

// The event files in dir, by name order: up to 4 paths, returns how many.
static int event_files(const char *dir, char paths[4][4096]) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "events.out.tfevents.", 20) && n < 4) snprintf(paths[n++], 4096, "%s/%s", dir, e->d_name);
    if (d) closedir(d);
    for (int i = 1; i < n; i++)                        // sort: the 10-digit time orders them
        for (int j = i; j > 0 && strcmp(paths[j - 1], paths[j]) > 0; j--) {
            char t[4096];
            memcpy(t, paths[j], 4096); memcpy(paths[j], paths[j - 1], 4096); memcpy(paths[j - 1], t, 4096);
        }
    return n;
}

// ---- unit tests -----------------------------------------------------------------------------------
static void test_crc32c_vectors(void) {
    uint8_t b[32];
    CHECK(crc32c("123456789", 9) == 0xE3069283u, "check value %08x", crc32c("123456789", 9));
    CHECK(crc32c("", 0) == 0, "empty");
    memset(b, 0, 32);                                  // RFC 3720 B.4
    CHECK(crc32c(b, 32) == 0x8A9136AAu, "32 zeros: %08x", crc32c(b, 32));
    memset(b, 0xFF, 32);
    CHECK(crc32c(b, 32) == 0x62A8AB43u, "32 0xFF: %08x", crc32c(b, 32));
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
    CHECK(crc32c(b, 32) == 0x46DD794Eu, "0..31: %08x", crc32c(b, 32));
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)(31 - i);
    CHECK(crc32c(b, 32) == 0x113FDB5Cu, "31..0: %08x", crc32c(b, 32));
    uint32_t c = 0xE3069283u;                          // the mask: rotate right 15, add 0xa282ead8
    CHECK(crc32c_masked("123456789", 9) == ((c >> 15 | c << 17) + 0xa282ead8u), "mask");
}

static void test_record_framing(void) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    CHECK(tfrecord_write(f, "abc", 3) == 0 && tfrecord_write(f, "", 0) == 0, "write");
    fclose(f);
    CHECK(n == 16 + 3 + 16, "%zu bytes", n);
    const uint8_t *b = (const uint8_t *)buf;
    static const uint8_t len3[8] = { 3, 0, 0, 0, 0, 0, 0, 0 };
    CHECK(!memcmp(b, len3, 8), "length is uint64 little-endian");
    uint32_t c = crc32c_masked(len3, 8), d = crc32c_masked("abc", 3);
    CHECK(b[8] == (c & 0xFF) && b[11] == c >> 24, "length checksum");
    CHECK(!memcmp(b + 12, "abc", 3), "data");
    CHECK(b[15] == (d & 0xFF) && b[18] == d >> 24, "data checksum");
    CHECK(b[19] == 0 && b[27] == (crc32c_masked(b + 19, 8) & 0xFF), "the empty record");
    free(buf);
}

static void test_events_decode(void) {
    const char *dir = test_tmpdir("tfev");
    Err err;
    TfEvents *ev = tfevents_open(dir, &err);
    if (!ev) { CHECK(0, "%s", err.msg); return; }
    const char *slash = strrchr(tfevents_path(ev), '/');
    CHECK(slash && !strncmp(slash + 1, "events.out.tfevents.", 20) && strlen(slash + 1) > 31, "name %s", slash);
    Image im = image_new(5, 3, 0);
    for (int i = 0; i < 45; i++) im.px[i] = (uint8_t)(i * 5);
    tfevents_scalar(ev, "train/box_loss", 1.25, 0);
    tfevents_scalar(ev, "metrics/mAP_0.5:0.95", 0.1, 7);
    tfevents_image(ev, "train_batch0", &im, 3);
    tfevents_restart(ev, 2);
    char path[4096];
    snprintf(path, sizeof path, "%s", tfevents_path(ev));
    CHECK(tfevents_close(ev) == 0, "close");
    EvFile f;
    int n = read_events(path, &f);
    CHECK(n == 5, "%d records (checksums or protobuf bad when -1)", n);
    if (n == 5) {
        CHECK(!strcmp(f.ev[0].version, "brain.Event:2") && f.ev[0].step == 0, "first record: %s", f.ev[0].version);
        double now = (double)time(NULL);
        CHECK(fabs(f.ev[0].wall - now) < 60, "wall_time %f", f.ev[0].wall);
        const Ev *a = find_ev(&f, "train/box_loss", 0), *b = find_ev(&f, "metrics/mAP_0.5:0.95", 7);
        CHECK(a && a->kind == 1 && a->value == 1.25f, "box_loss");
        CHECK(b && b->kind == 1 && b->value == 0.1f, "mAP at step 7");
        const Ev *c = find_ev(&f, "train_batch0", 3);
        CHECK(c && c->kind == 2 && c->w == 5 && c->h == 3 && c->colorspace == 3, "image header");
        Image back;
        CHECK(c && c->png && image_decode_mem(c->png, c->png_n, "png", &back, &err) == 0 && back.w == 5 &&
              !memcmp(back.px, im.px, 45), "the PNG holds the pixels");
        if (c && c->png) image_free(&back);
        CHECK(f.ev[4].kind == 3 && f.ev[4].status == 1 && f.ev[4].step == 2, "session_log START at 2");
    }
    free(f.buf);
    image_free(&im);
}

// ---- a training run -------------------------------------------------------------------------------

static int train(const char *name, const char *extra) {
    static Config cfg;
    Err err;
    char d[4400], p[4400], n[300];
    snprintf(d, sizeof d, "data=%s", data_yaml);
    snprintf(p, sizeof p, "project=%s", project);
    snprintf(n, sizeof n, "name=%s", name);
    char *ov[] = { d, p, n, "imgsz=64", "batch=4", "epochs=2", "workers=1", "device=cpu", "close_mosaic=1",
                   "exist_ok=1", (char *)extra };
    if (config_load("cfg/t.ini", extra ? 11 : 10, ov, &cfg, &err)) { printf("    %s\n", err.msg); return -1; }
    return train_run(&cfg);
}

// results.csv's row `epoch` (0-based), 14 values; 0 when it is there.
static int csv_row(const char *run, int epoch, double v[14]) {
    char path[4600], line[1024];
    snprintf(path, sizeof path, "%s/results.csv", run);
    FILE *f = fopen(path, "r");
    int found = 0;
    while (f && fgets(line, sizeof line, f)) {
        char *s = line;
        for (int i = 0; i < 14; i++) { v[i] = strtod(s, &s); if (*s == ',') s++; }
        if (line[0] != ' ' || strstr(line, "epoch")) continue;
        if ((int)v[0] == epoch) found = 1;
        if (found) break;
    }
    if (f) fclose(f);
    return found ? 0 : -1;
}

static void test_training_run(void) {
    if (synth_run_data("tfrun", 8)) { CHECK(0, "no data"); return; }
    CHECK(train("on", NULL) == 0, "the run failed");
    char run[4500], files[4][4096];
    snprintf(run, sizeof run, "%s/on", project);
    int nf = event_files(run, files);
    CHECK(nf == 1, "%d event files in %s", nf, run);
    if (nf != 1) return;
    EvFile f;
    int n = read_events(files[0], &f);
    CHECK(n > 0, "unreadable: %s", files[0]);
    for (int epoch = 0; n > 0 && epoch < 2; epoch++) {
        double v[14];
        if (csv_row(run, epoch, v)) { CHECK(0, "no results.csv row %d", epoch); continue; }
        for (int i = 1; i < 14; i++) {
            const Ev *e = find_ev(&f, results_keys[i], epoch);
            CHECK(e && e->kind == 1 && close_enough(e->value, v[i], 1e-6, 1e-4), "%s at %d: %g, results.csv %g",
                  results_keys[i], epoch, e ? e->value : NAN, v[i]);
        }
    }
    static const char *const pictures[][2] = { { "train_batch0", "0" }, { "val_batch0_labels", "0" },
                                               { "val_batch0_pred", "1" }, { "results", "1" } };
    for (int i = 0; n > 0 && i < 4; i++) {
        const Ev *e = find_ev(&f, pictures[i][0], atoi(pictures[i][1]));
        CHECK(e && e->kind == 2 && e->w > 0 && e->png_n > 8 && !memcmp(e->png, "\x89PNG", 4), "image %s at %s",
              pictures[i][0], pictures[i][1]);
    }
    free(f.buf);
    // tensorboard=0: no event file
    CHECK(train("off", "tensorboard=0") == 0, "the run without TensorBoard failed");
    snprintf(run, sizeof run, "%s/off", project);
    CHECK(event_files(run, files) == 0, "tensorboard=0 wrote an event file");
    // a stopped run resumed (in this process, likely in the same second: the file name's last number
    // differs): a second file, which starts with SessionLog START at the redone epoch
    test_switch(SW_STOP_AFTER_STEPS, "3");             // epoch 1, after its first batch
    CHECK(train("resumed", NULL) == 0, "the stopped run failed");
    test_switch(SW_STOP_AFTER_STEPS, NULL);
    static Config cfg;
    Err err;
    char r[4500];
    snprintf(r, sizeof r, "resume=%s/resumed", project);
    char *ov[] = { r };
    CHECK(config_load(NULL, 1, ov, &cfg, &err) == 0, "%s", err.msg);
    CHECK(train_resume(&cfg, 1, ov) == 0, "resume failed");
    snprintf(run, sizeof run, "%s/resumed", project);
    nf = event_files(run, files);
    CHECK(nf == 2, "%d event files after resume", nf);
    if (nf == 2 && (n = read_events(files[1], &f)) > 1) {
        CHECK(f.ev[1].kind == 3 && f.ev[1].status == 1 && f.ev[1].step == 1, "the resumed file's second record: "
              "kind %d step %lld", f.ev[1].kind, (long long)f.ev[1].step);
        CHECK(find_ev(&f, "x/lr0", 1) && !find_ev(&f, "x/lr0", 0), "the resumed file logs epoch 1 only");
        free(f.buf);
    } else CHECK(0, "the resumed run's file: %d records", n);
}

int main(void) {
    RUN(test_crc32c_vectors);
    RUN(test_record_framing);
    RUN(test_events_decode);
    RUN(test_training_run);
    return test_summary();
}
