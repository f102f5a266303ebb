// test_config.c: cfg/ — the shipped s.ini and t.ini, overrides, every error class with its file:line,
// the hyp yaml, config_print round trips, and garbled inputs that must never crash.
#include "test/test.h"

#include <ctype.h>
#include <dirent.h>

#include "cfg/config.h"
#include "core/base/util.h"
#include "io/dataset.h"

static char tmp[4096];
static Config cfg, cfg2;          // large: kept off the stack
static Err err;

// Write `text` to tmp/name; returns the path (a static buffer per slot).
static const char *write_file(const char *name, const char *text) {
    static char paths[4][4200];
    static int slot;
    char *p = paths[slot++ % 4];
    snprintf(p, sizeof paths[0], "%s/%s", tmp, name);
    FILE *f = fopen(p, "wb");
    if (!f) { printf("cannot write %s\n", p); exit(1); }
    fputs(text, f);
    fclose(f);
    return p;
}

// The line number of the first line of `path` that starts with `prefix`, or -1.
static int line_of(const char *path, const char *prefix) {
    FILE *f = fopen(path, "rb");
    char buf[2048];
    for (int line = 1; f && fgets(buf, sizeof buf, f); line++)
        if (!strncmp(buf, prefix, strlen(prefix))) { fclose(f); return line; }
    if (f) fclose(f);
    return -1;
}

static const char HEAD[] = "[model]\nnc = 3\n[backbone]\n0 = -1, 1, Conv, [16, 3, 2]\n";  // 4 lines

static void check_hyp_scratch_high(const Hyp *h) {
    const double want[] = { 0.01, 0.01, 0.937, 0.0005, 3, 0.8, 0.1, 7.5, 0.5, 1.5, 1, 0.7, 1, 0.2, 5, 0,
                            0.015, 0.7, 0.4, 0, 0.1, 0.9, 0, 0, 0, 0.5, 1, 0.15, 0.3 };
    const double got[] = { h->lr0, h->lrf, h->momentum, h->weight_decay, h->warmup_epochs,
                           h->warmup_momentum, h->warmup_bias_lr, h->box, h->cls, h->dfl, h->cls_pw, h->obj,
                           h->obj_pw, h->iou_t, h->anchor_t, h->fl_gamma, h->hsv_h, h->hsv_s, h->hsv_v,
                           h->degrees, h->translate, h->scale, h->shear, h->perspective, h->flipud,
                           h->fliplr, h->mosaic, h->mixup, h->copy_paste };
    CHECK(sizeof want == sizeof got && sizeof got == sizeof *h, "Hyp has %zu fields", sizeof *h / 8);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(got[i] == want[i], "hyp field %zu = %g, want %g", i, got[i], want[i]);
}

static void test_s_ini(void) {
    int rc = config_load("cfg/s.ini", 0, NULL, &cfg, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(cfg.n_layers == 23 && cfg.n_backbone == 9, "%d layers, %d in the backbone", cfg.n_layers, cfg.n_backbone);
    CHECK(cfg.nc == 80 && cfg.reg_max == 16 && cfg.depth_multiple == 1 && cfg.width_multiple == 1, "nc %d", cfg.nc);
    const LayerSpec *l = cfg.layers;
    CHECK(!strcmp(l[0].module, "Conv") && l[0].n_args == 3 && l[0].args[0] == 32 && l[0].args[1] == 3
          && l[0].args[2] == 2 && l[0].n_from == 1 && l[0].from[0] == -1 && l[0].number == 1, "layer 0");
    CHECK(!strcmp(l[4].module, "RepNCSPELAN4") && l[4].n_args == 4 && l[4].args[3] == 3, "layer 4");
    CHECK(!strcmp(l[10].module, "Upsample") && l[10].n_args == 2 && isnan(l[10].args[0]) && l[10].args[1] == 2
          && !strcmp(l[10].sarg, "nearest"), "layer 10: %s", l[10].module);
    CHECK(l[11].n_from == 2 && l[11].from[0] == -1 && l[11].from[1] == 6 && !strcmp(l[11].module, "Concat"), "layer 11");
    CHECK(l[22].n_from == 3 && l[22].from[2] == 21 && !strcmp(l[22].module, "DDetect") && l[22].args[0] == 80
          && l[22].nc_mask == 1, "layer 22");
    for (int i = 0; i < cfg.n_layers; i++) CHECK(l[i].index == i && !l[i].sarg[0] == (i != 10 && i != 13), "layer %d", i);
    CHECK(l[12].at.line == line_of("cfg/s.ini", "12 =") && !strcmp(l[12].at.file, "cfg/s.ini"), "line %d", l[12].at.line);
    check_hyp_scratch_high(&cfg.hyp);
    CHECK(cfg.epochs == 300 && cfg.batch == 64 && cfg.imgsz == 640 && cfg.workers == 8 && cfg.seed == 0, "train");
    CHECK(!cfg.data[0] && !cfg.device[0] && !cfg.cache[0] && !strcmp(cfg.precision, "bf16"), "data '%s'", cfg.data);
    CHECK(!strcmp(cfg.reduce, "device0") && !strcmp(cfg.loss_on, "local") && !strcmp(cfg.split, "even"), "parallel");
    const Where *w = config_where(&cfg, "lr0"), *w2 = config_where(&cfg, "hyp.lr0");
    CHECK(w && w == w2 && w->line == line_of("cfg/s.ini", "lr0 =") && !strcmp(w->file, "cfg/s.ini"), "where lr0");
    CHECK(!config_where(&cfg, "nope") && !config_where(&cfg, "train.lr0"), "unknown keys have no Where");
    char buf[64];
    snprintf(buf, sizeof buf, "cfg/s.ini:%d", line_of("cfg/s.ini", "imgsz ="));
    char got[CFG_PATH + 32];
    CHECK(!strcmp(config_where_text(config_where(&cfg, "imgsz"), got, sizeof got), buf), "%s", got);
}

static void test_t_ini(void) {
    int rc = config_load("cfg/t.ini", 0, NULL, &cfg, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    const LayerSpec *l = cfg.layers;
    CHECK(cfg.n_layers == 23 && l[0].args[0] == 16 && l[8].args[0] == 128 && l[9].args[1] == 64
          && l[21].args[2] == 64 && l[22].args[0] == 80, "gelan-t channels");
    CHECK(!strcmp(cfg.device, "cpu") && cfg.imgsz == 256 && cfg.batch == 16 && cfg.epochs == 30 && cfg.workers == 2,
          "device %s imgsz %d", cfg.device, cfg.imgsz);
    check_hyp_scratch_high(&cfg.hyp);
}

static void test_defaults(void) {
    int rc = config_load(NULL, 0, NULL, &cfg, &err);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(cfg.n_layers == 0 && cfg.epochs == 300 && cfg.batch == 64 && cfg.imgsz == 640 && cfg.workers == 8
          && cfg.patience == 100 && cfg.close_mosaic == 15 && cfg.save_period == -1 && cfg.reg_max == 16, "ints");
    CHECK(!strcmp(cfg.project, "runs/train") && !strcmp(cfg.name, "exp") && !strcmp(cfg.optimizer, "auto")
          && !strcmp(cfg.precision, "bf16") && !strcmp(cfg.split, "even"), "strings");
    check_hyp_scratch_high(&cfg.hyp);
    char got[64];
    CHECK(config_where(&cfg, "mosaic")->line == 0 && !strcmp(config_where_text(config_where(&cfg, "mosaic"), got,
          sizeof got), "default"), "%s", got);
}

static void test_overrides(void) {
    char *argv[] = { "epochs=5", "--batch", "8", "--imgsz=320", "hyp.lr0=0.02", "train.name=foo",
                     "--exist-ok", "true", "data.path=/x", "--device=0,1", "nc=7" };
    int argc = sizeof argv / sizeof argv[0];
    int rc = config_load("cfg/s.ini", argc, argv, &cfg, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(cfg.epochs == 5 && cfg.batch == 8 && cfg.imgsz == 320 && cfg.hyp.lr0 == 0.02 && cfg.exist_ok == 1,
          "epochs %d batch %d imgsz %d", cfg.epochs, cfg.batch, cfg.imgsz);
    CHECK(!strcmp(cfg.name, "foo") && !strcmp(cfg.device, "0,1") && config_data_get(&cfg, "path")
          && !strcmp(config_data_get(&cfg, "path"), "/x") && !config_data_get(&cfg, "val"), "strings");
    CHECK(cfg.nc == 7 && cfg.layers[22].args[0] == 7, "nc %d reaches DDetect: %g", cfg.nc, cfg.layers[22].args[0]);
    const Where *w = config_where(&cfg, "batch");
    CHECK(w && !strcmp(w->file, "command line") && w->line == 2, "batch from %s:%d", w ? w->file : "?", w ? w->line : 0);
    w = config_where(&cfg, "data.path");
    CHECK(w && !strcmp(w->file, "command line") && w->line == 9, "data.path from line %d", w ? w->line : 0);
    config_set_nc(&cfg, 12);
    CHECK(cfg.layers[22].args[0] == 12 && cfg.layers[0].args[0] == 32, "config_set_nc");
}

typedef struct { const char *text, *arg, *where, *says; } Bad;

static void test_errors(void) {
    static const Bad bad[] = {
        { "[modle]\nnc = 3\n", NULL, ":1:", "unknown section" },
        { "[model\nnc = 3\n", NULL, ":1:", "[name] alone" },
        { "nc = 3\n[model]\n", NULL, ":1:", "before any section" },
        { "[hyp]\nlr = 0.1\n", NULL, ":2:", "lr0" },
        { "[train]\nepochs = 3\n\nepochs = 4\n", NULL, ":4:", "already set at line 2" },
        { "[train]\nepochs = 3x\n", NULL, ":2:", "not an integer" },
        { "[train]\nworkers = 99999999999999\n", NULL, ":2:", "out of range" },
        { "[train]\n# batch\nbatch = -4\n", NULL, ":3:", "from 1 to" },
        { "[train]\nimgsz = 650\n", NULL, ":2:", "640 or 672" },
        { "[train]\nimgsz = 16\n", NULL, ":2:", "out of range" },
        { "[train]\nprecision = fp16\n", NULL, ":2:", "bf16, tf32, fp32" },
        { "[train]\ncache = disk\n", NULL, ":2:", "\"\", ram, none" },
        { "[hyp]\nlr0 = 0.0.1\n", NULL, ":2:", "not a number" },
        { "[hyp]\nmosaic = 1.5\n", NULL, ":2:", "from 0 to 1" },
        { "[train]\nrect = maybe\n", NULL, ":2:", "0 or 1" },
        { "[train]\ndevice = 0 1\n", NULL, ":2:", "device=0,1" },
        { "[parallel]\nsplit = 3,,1\n", NULL, ":2:", "even, auto" },
        { "[parallel]\nreduce = all\n", NULL, ":2:", "device0, sharded" },
        { "[train]\njust words\n", NULL, ":2:", "key = value" },
        { "[data]\npath = /a\npath = /b\n", NULL, ":3:", "already set" },
        // layer rows, after the 4 lines of HEAD
        { "2 = -1, 1, Conv, [8]\n", NULL, ":5:", "expected layer 1" },
        { "0 = -1, 1, Conv, [8]\n", NULL, ":5:", "already defined at line 4" },
        { "1 = 1, 1, Conv, [8]\n", NULL, ":5:", "not an earlier layer" },
        { "1 = [-1, 3], 1, Concat, [1]\n", NULL, ":5:", "not an earlier layer" },
        { "1 = -3, 1, Conv, [8]\n", NULL, ":5:", "not an earlier layer" },
        { "1 = -1, 1, Conv2, [8]\n", NULL, ":5:", "known modules: Conv" },
        { "1 = -1, 1, ELAN1, [8, 8]\n", NULL, ":5:", "ELAN1 takes 3 to 3 numeric args" },
        { "1 = -1, 1, Conv, [8, 'same']\n", NULL, ":5:", "Conv takes no word" },
        { "1 = -1, 1, Upsample, [None, 'nearest', 2]\n", NULL, ":5:", "may come last" },
        { "1 = -1, 1, Conv, [8, 3x, 2]\n", NULL, ":5:", "malformed number" },
        { "1 = -1, 1, Conv, [8, 3, 2\n", NULL, ":5:", "no closing ']'" },
        { "1 = -1, 1, Conv, 8\n", NULL, ":5:", "expected '['" },
        { "1 = -1 1, Conv, [8]\n", NULL, ":5:", "expected ','" },
        { "1 = [-1 6], 1, Concat, [1]\n", NULL, ":5:", "expected ','" },
        { "1 = -1, 0, Conv, [8]\n", NULL, ":5:", "at least 1" },
        { "x = -1, 1, Conv, [8]\n", NULL, ":5:", "not a layer number" },
        { "1 = -1, 1, Conv, [8], extra\n", NULL, ":5:", "unexpected text" },
        { "1 = -1, 1, Upsample, [None, 2, 'a', 'b']\n", NULL, ":5:", "may come last" },
        { "1 = -1, 1, Upsample, [None, 2, near-est]\n", NULL, ":5:", "not an argument" },
        { "[head]\n1 = -1, 1, Conv, [8]\n[backbone]\n2 = -1, 1, Conv, [8]\n", NULL, ":8:", "rows first" },
        // overrides
        { "", "lr=0.1", "command line argument 1", "hyp.lr0" },
        { "", "imgsz=100", "command line argument 1", "96 or 128" },
        { "", "backbone.1=-1, 1, Conv, [8]", "command line argument 1", "only be written in the INI" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[4096], name[32], where[4200];
        int layer_row = isdigit((unsigned char)bad[i].text[0]) || bad[i].text[0] == 'x' || !strncmp(bad[i].text, "[head]", 6);
        snprintf(text, sizeof text, "%s%s", layer_row ? HEAD : "", bad[i].text);
        snprintf(name, sizeof name, "bad%zu.ini", i);
        const char *path = write_file(name, text);
        char *argv[] = { (char *)bad[i].arg };
        err.msg[0] = 0;
        int rc = config_load(path, bad[i].arg ? 1 : 0, argv, &cfg, &err);
        snprintf(where, sizeof where, "%s%s", bad[i].where[0] == ':' ? path : "", bad[i].where);
        CHECK(rc == -1 && strstr(err.msg, where) && strstr(err.msg, bad[i].says),
              "case %zu (%s): rc %d, message: %s", i, bad[i].says, rc, err.msg);
    }
}

static void test_command_line_errors(void) {
    char *a1[] = { "--device", "0", "1" };
    int rc = config_load("cfg/s.ini", 3, a1, &cfg, &err);
    CHECK(rc == -1 && strstr(err.msg, "argument 3") && strstr(err.msg, "device=0,1"), "%s", err.msg);
    char *a2[] = { "epochs=3", "--epochs" };
    rc = config_load("cfg/s.ini", 2, a2, &cfg, &err);
    CHECK(rc == -1 && strstr(err.msg, "--epochs needs a value"), "%s", err.msg);
    char *a3[] = { "fast" };
    rc = config_load("cfg/s.ini", 1, a3, &cfg, &err);
    CHECK(rc == -1 && strstr(err.msg, "'fast' is not key=value"), "%s", err.msg);
    char *a4[] = { "--bacth", "8" };
    rc = config_load("cfg/s.ini", 2, a4, &cfg, &err);
    CHECK(rc == -1 && strstr(err.msg, "train.batch"), "%s", err.msg);
    rc = config_load("no/such.ini", 0, NULL, &cfg, &err);
    CHECK(rc == -1 && strstr(err.msg, "no/such.ini: cannot open"), "%s", err.msg);
}

static void test_comments_and_long_lines(void) {
    char names[1200] = "names = [";
    for (int i = 0; i < 80; i++) snprintf(names + strlen(names), sizeof names - strlen(names), "%sclass_%d", i ? ", " : "", i);
    strcat(names, "]   # eighty\n");
    char text[4096];
    snprintf(text, sizeof text, "# top comment\n; another\n[ train ]   # section comment\nname = run#1 ; inline\n"
             "project = \"a # b\"  # the quotes keep their #\n[data]\n%spath: /data\n", names);
    const char *path = write_file("comments.ini", text);
    int rc = config_load(path, 0, NULL, &cfg, &err);
    CHECK(rc == 0, "%s", err.msg);
    const char *got = config_data_get(&cfg, "names");
    CHECK(!strcmp(cfg.name, "run#1") && !strcmp(cfg.project, "a # b"), "name '%s' project '%s'", cfg.name, cfg.project);
    CHECK(got && strlen(got) > 600 && !strcmp(got + strlen(got) - 9, "class_79]"), "names: %.40s", got ? got : "NULL");
    CHECK(got && config_where(&cfg, "data.names")->line == 7 && !strcmp(config_data_get(&cfg, "path"), "/data"), "where");

    char long_line[1200];
    memset(long_line, 'a', sizeof long_line);
    memcpy(long_line, "name = ", 7);
    long_line[1001] = 0;                           // 1001 characters
    snprintf(text, sizeof text, "[train]\nepochs = 1\n%s\n", long_line);
    path = write_file("long.ini", text);
    rc = config_load(path, 0, NULL, &cfg, &err);
    char where[4200];
    snprintf(where, sizeof where, "%s:3:", path);
    CHECK(rc == -1 && strstr(err.msg, where) && strstr(err.msg, "1000"), "%s", err.msg);
    long_line[1000] = 0;                           // exactly the limit: too long for `name`, not for the line
    snprintf(text, sizeof text, "[train]\n%s\n", long_line);
    rc = config_load(write_file("limit.ini", text), 0, NULL, &cfg, &err);
    CHECK(rc == -1 && strstr(err.msg, "at most 255 characters"), "%s", err.msg);
}

static void print_to(const Config *c, const char *name, char *out, size_t n) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    config_print(c, f);
    fclose(f);
    f = fopen(path, "rb");
    size_t got = fread(out, 1, n - 1, f);
    out[got] = 0;
    fclose(f);
}

// cfg printed as args.ini, loaded back into cfg2 and printed again: the same text after line 1
// (which names the file read) and the same layers. a gets the first printout. 0 when it loaded back.
static int round_trip(const char *what, char *a, char *b, size_t n) {
    char path[4200];
    print_to(&cfg, "args.ini", a, n);
    snprintf(path, sizeof path, "%s/args.ini", tmp);
    int rc = config_load(path, 0, NULL, &cfg2, &err);
    CHECK(rc == 0, "%s printed does not load: %s", what, err.msg);
    if (rc) return -1;
    print_to(&cfg2, "args2.ini", b, n);
    char *body_a = strchr(a, '\n'), *body_b = strchr(b, '\n');
    CHECK(body_a && body_b && !strcmp(body_a, body_b), "%s: printed configs differ:\n%s\n----\n%s", what, a, b);
    CHECK(cfg2.n_layers == cfg.n_layers, "%s: %d layers, then %d", what, cfg.n_layers, cfg2.n_layers);
    for (int i = 0; i < cfg.n_layers && i < cfg2.n_layers; i++) {
        LayerSpec x = cfg.layers[i], y = cfg2.layers[i];
        memset(&x.at, 0, sizeof x.at);
        memset(&y.at, 0, sizeof y.at);
        CHECK(x.n_args == y.n_args && x.nc_mask == y.nc_mask && !strcmp(x.sarg, y.sarg)
              && !strcmp(x.module, y.module) && !memcmp(x.from, y.from, sizeof x.from), "%s: layer %d", what, i);
        for (int j = 0; j < x.n_args; j++)
            CHECK(x.args[j] == y.args[j] || (isnan(x.args[j]) && isnan(y.args[j])), "%s: layer %d arg %d", what, i, j);
    }
    return 0;
}

static void test_round_trip(void) {
    static char a[65536], b[65536];
    char *argv[] = { "data.names=[a, b]", "data.train=images/train", "weights=w.safetensors", "cache=ram",
                     "lr0=0.0123456789", "split=3,1", "seed=7", "nc=0", "data.val=\"\"",
                     "project=runs/a #1", "name= padded " };
    int rc = config_load("cfg/s.ini", sizeof argv / sizeof argv[0], argv, &cfg, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc || round_trip("cfg/s.ini", a, b, sizeof a)) return;
    CHECK(!memcmp(&cfg.hyp, &cfg2.hyp, sizeof cfg.hyp) && cfg2.seed == 7 && !strcmp(cfg2.split, "3,1")
          && !strcmp(cfg2.cache, "ram") && !strcmp(cfg2.project, "runs/a #1") && !strcmp(cfg2.name, " padded ")
          && cfg2.nc == 0 && cfg2.n_layers == 23 && cfg2.n_backbone == 9 && cfg2.n_data_kv == 3,
          "fields after the round trip");
}

// Every shipped config, and whole numbers that "%g" writes shortest in exponent form (80 as 8e+01,
// 160 as 1.6e+02), print as digits and read back: [[80, 16]] lists take integers only, and args.ini is
// read by people (fuzz_config found 8e+01 refused on reload).
static void test_round_trip_numbers(void) {
    static char a[65536], b[65536], names[40][300];
    snprintf(names[0], sizeof names[0], "%s", write_file("numbers.ini",
        "[model]\nnc = 3\n[backbone]\n0 = -1, 1, Silence, []\n1 = 0, 1, CBLinear, [[80, 160]]\n"
        "2 = [1, 0], 1, CBFuse, [[0]]\n3 = -1, 1, Conv, [120, 3, 2]\n[head]\n4 = -1, 1, Conv, [1000, 1, 1]\n"));
    int n = 1;
    DIR *d = opendir("cfg");
    for (struct dirent *e; d && (e = readdir(d)) && n < 40;) {
        size_t len = strlen(e->d_name);
        if (len > 4 && len < 250 && !strcmp(e->d_name + len - 4, ".ini"))
            snprintf(names[n++], sizeof names[0], "cfg/%s", e->d_name);
    }
    if (d) closedir(d);
    CHECK(n - 1 >= 17, "%d configs found in cfg/", n - 1);
    for (int i = 0; i < n; i++) {
        int rc = config_load(names[i], 0, NULL, &cfg, &err);
        CHECK(rc == 0, "%s: %s", names[i], err.msg);
        if (rc || round_trip(names[i], a, b, sizeof a)) continue;
        CHECK(!strstr(a, "e+"), "%s prints a number in exponent form:\n%s", names[i], a);
        if (i == 0)
            CHECK(strstr(a, "[[80, 160]]") && strstr(a, "[120, 3, 2]") && strstr(a, "[1000, 1, 1]"), "%s", a);
    }
}

static void test_hyp_yaml(void) {
    const char *yaml = write_file("hyp.yaml", "# my hyp\nlr0: 0.02  # faster\nmosaic: 0.5\n"
                                  "dfl: 0.7\ndfl: 1.25\n");   // duplicate keys: the last wins, as in PyYAML
    char arg[4300], arg2[] = "lr0=0.03";
    snprintf(arg, sizeof arg, "hyp=%s", yaml);
    char *argv[] = { arg, arg2 };
    int rc = config_load("cfg/s.ini", 1, argv, &cfg, &err);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(cfg.hyp.lr0 == 0.02 && cfg.hyp.mosaic == 0.5 && cfg.hyp.dfl == 1.25 && cfg.hyp.mixup == 0.15, "hyp values");
    const Where *w = config_where(&cfg, "mosaic");
    CHECK(w && !strcmp(w->file, yaml) && w->line == 3, "mosaic from %s:%d", w ? w->file : "?", w ? w->line : 0);
    rc = config_load("cfg/s.ini", 2, argv, &cfg, &err);
    CHECK(rc == 0 && cfg.hyp.lr0 == 0.03 && cfg.hyp.mosaic == 0.5, "the command line wins: lr0 %g", cfg.hyp.lr0);

    static const struct { const char *text, *where, *says; } bad[] = {
        { "lr0: 0.01\nmomentum: 0.9\nlabel_smoothing: 0.1\n", ":3:", "unknown hyp key 'label_smoothing'" },
        { "lr0: 0.01\nlrf: [1, 2]\n", ":2:", "a list" },
        { "lr0: 0.01\nlrf: fast\n", ":2:", "not a number" },
        { "lr0: 0.01\nlrf: \"2\n", ":3:", "not valid YAML" },
        { "- 1\n- 2\n", ":1:", "a list" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char name[32], where[4300];
        snprintf(name, sizeof name, "bad%zu.yaml", i);
        yaml = write_file(name, bad[i].text);
        snprintf(arg, sizeof arg, "--hyp=%s", yaml);
        rc = config_load("cfg/s.ini", 1, argv, &cfg, &err);
        snprintf(where, sizeof where, "%s%s", yaml, bad[i].where);
        CHECK(rc == -1 && strstr(err.msg, where) && strstr(err.msg, bad[i].says), "case %zu: %s", i, err.msg);
    }
    snprintf(arg, sizeof arg, "hyp=%s/missing.yaml", tmp);
    rc = config_load("cfg/s.ini", 1, argv, &cfg, &err);
    CHECK(rc == -1 && strstr(err.msg, "missing.yaml: cannot open"), "%s", err.msg);
}

// yolov9's and Ultralytics' command lines: bare boolean flags never take the next argument,
// their spellings map to our keys, model= / --cfg name the config file.
static void test_flags_and_aliases(void) {
    char *a1[] = { "--exist-ok", "device=cpu", "--cos-lr", "--strict", "0", "--batch-size", "4", "--img", "320" };
    int rc = config_load("cfg/s.ini", 9, a1, &cfg, &err);
    CHECK(rc == 0, "%s", err.msg);
    CHECK(cfg.exist_ok == 1 && cfg.cos_lr == 1 && cfg.strict == 0, "flags: exist_ok %d cos_lr %d strict %d",
          cfg.exist_ok, cfg.cos_lr, cfg.strict);
    CHECK(!strcmp(cfg.device, "cpu"), "--exist-ok took the next argument: device '%s'", cfg.device);
    CHECK(cfg.batch == 4 && cfg.imgsz == 320, "batch %d imgsz %d", cfg.batch, cfg.imgsz);
    char *a2[] = { "--cfg", "cfg/t.ini", "--img-size", "256", "--device", "0,1", "--exist-ok" };   // flag last
    rc = config_load(NULL, 7, a2, &cfg, &err);
    CHECK(rc == 0 && !strcmp(cfg.file, "cfg/t.ini") && cfg.n_layers > 0 && cfg.imgsz == 256 && cfg.exist_ok,
          "--cfg: rc %d file '%s' %s", rc, cfg.file, err.msg);
    CHECK(!strcmp(cfg.device, "0,1"), "device '%s'", cfg.device);
    char *a3[] = { "model=cfg/s.ini", "--cache", "imgsz=320", "device=[0,1]", "--resume" };
    rc = config_load(NULL, 5, a3, &cfg, &err);
    CHECK(!strcmp(cfg.cache, "ram"), "bare --cache: '%s'", cfg.cache);
    CHECK(rc == 0 && !strcmp(cfg.file, "cfg/s.ini") && cfg.imgsz == 320 && !strcmp(cfg.device, "[0,1]"),
          "model=: rc %d file '%s' %s", rc, cfg.file, err.msg);
    CHECK(!strcmp(cfg.resume, "1"), "bare --resume: '%s'", cfg.resume);
    char *a4[] = { "--resume", "runs/train/exp3", "--exist-ok=0" };
    rc = config_load("cfg/s.ini", 3, a4, &cfg, &err);
    CHECK(rc == 0 && !strcmp(cfg.resume, "runs/train/exp3") && cfg.exist_ok == 0, "--resume DIR: '%s'", cfg.resume);
    char *a5[] = { "model=cfg/t.ini" };
    rc = config_load("cfg/s.ini", 1, a5, &cfg, &err);
    CHECK(rc == -1 && strstr(err.msg, "already cfg/s.ini"), "two configs: %s", err.msg);
    char *a6[] = { "--exst-ok", "device=cpu" };
    rc = config_load("cfg/s.ini", 2, a6, &cfg, &err);
    CHECK(rc == -1 && strstr(err.msg, "unknown key") && strstr(err.msg, "exist_ok"), "misspelt flag: %s", err.msg);
    char *a8[] = { "--noval", "--noplots", "--single-cls", "device=cpu" };   // item 6's flags, bare
    rc = config_load("cfg/s.ini", 4, a8, &cfg, &err);
    CHECK(rc == 0 && cfg.noval == 1 && cfg.noplots == 1 && cfg.single_cls == 1 && !strcmp(cfg.device, "cpu"),
          "bare --noval --noplots --single-cls: %s", err.msg);
    char *a7[] = { "--batch-size", "--exist-ok" };
    rc = config_load("cfg/s.ini", 2, a7, &cfg, &err);
    CHECK(rc == -1 && strstr(err.msg, "needs a value"), "a key that is no flag: %s", err.msg);
}

// Truncated and garbled versions of s.ini: every load returns 0 or -1 with a message, never crashes.
static void test_garbled(void) {
    static char orig[16384], text[16384 + 64];
    FILE *f = fopen("cfg/s.ini", "rb");
    if (!f) SKIP("cfg/s.ini missing");
    size_t n = fread(orig, 1, sizeof orig - 1, f);
    fclose(f);
    static const char junk[] = "[]=,#;'\"\n -0123456789.xnN\t:\\\x01\xff";
    int n_ok = 0, n_err = 0;
    for (int v = 0; v < 300; v++) {
        Rng r = rng_for(42, (uint64_t)v, 0);
        size_t len = v < 100 ? (size_t)rng_int(&r, (int)n) : n;   // truncations, then edits
        memcpy(text, orig, len);
        for (int e = 0; v >= 100 && e < 1 + rng_int(&r, 8); e++) {
            size_t at = (size_t)rng_int(&r, (int)len);
            int kind = rng_int(&r, 3);
            char c = junk[rng_int(&r, (int)sizeof junk - 1)];
            if (kind == 0) text[at] = c;
            else if (kind == 1) { memmove(text + at + 1, text + at, len - at); text[at] = c; len++; }
            else { memmove(text + at, text + at + 1, len - at - 1); len--; }
        }
        text[len] = 0;
        const char *path = write_file("garbled.ini", text);
        err.msg[0] = 0;
        int rc = config_load(path, 0, NULL, &cfg, &err);
        if (rc == 0) n_ok++;
        else { n_err++; CHECK(rc == -1 && err.msg[0], "variant %d: rc %d, message '%s'", v, rc, err.msg); }
    }
    CHECK(n_ok > 0 && n_err > 0, "%d loaded, %d rejected", n_ok, n_err);
}

// The names a description gives, joined by '|' (or "error: ..." with the message), from an INI
// [data] (yaml NULL, the INI at ini) or a data.yaml.
static void names_of(const char *yaml, const Config *c, char *out, size_t n) {
    DataSpec d;
    if (dataspec_read(yaml, c, &d, &err)) { snprintf(out, n, "error: %s", err.msg); return; }
    out[0] = 0;
    for (int i = 0; i < d.nc; i++) snprintf(out + strlen(out), n - strlen(out), "%s%s", i ? "|" : "", d.names[i]);
    dataspec_free(&d);
}

// A [data] value quoted as YAML quotes splits as YAML splits it: a quoted comma is no separator and the
// quotes go; a value quoted whole is one name. Where the text is YAML too, data.yaml gives the same
// names; the INI printed (args.ini) and read back keeps them.
static void test_data_quotes(void) {
    static const struct { const char *value, *names; int yaml; } cases[] = {
        { "[ 'a', \"b, c\" ]",       "a|b, c",      1 },
        { "'a, b'",                  "a, b",        0 },
        { "\"x,y\"",                 "x,y",         0 },
        { "a, 'b, c'",               "a|b, c",      0 },
        { "'a', 'b'",                "a|b",         0 },
        { "['it''s', \"q\\\"x\"]",    "it's|q\"x",   1 },
        { "[a, b]",                  "a|b",         1 },
        { "a, b",                    "a|b",         0 },
        { "'it''s #1'  # a comment", "it's #1",     0 },
        { "['a, b]",                 "error: ",     0 },
        { "['a' b, c]",              "error: ",     0 },
    };
    static char text[4096], got[4096], yaml_got[4096], again[4096], dump[65536];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text, "%s[data]\ntrain = x\nval = x\nnames = %s\n", HEAD, cases[i].value);
        const char *ini = write_file("quotes.ini", text);
        int rc = config_load(ini, 0, NULL, &cfg, &err);
        CHECK(rc == 0, "names = %s: %s", cases[i].value, err.msg);
        if (rc) continue;
        names_of(NULL, &cfg, got, sizeof got);
        int want_error = !strncmp(cases[i].names, "error: ", 7);
        if (want_error) {
            char where[4200];
            snprintf(where, sizeof where, "%s:%d: [data] names", ini, 8);
            CHECK(strstr(got, where) != NULL, "names = %s: want an error at %s, got %s", cases[i].value, where, got);
            continue;
        }
        CHECK(!strcmp(got, cases[i].names), "names = %s: got '%s', want '%s'", cases[i].value, got, cases[i].names);
        if (cases[i].yaml) {
            snprintf(text, sizeof text, "train: x\nval: x\nnames: %s\n", cases[i].value);
            names_of(write_file("quotes.yaml", text), NULL, yaml_got, sizeof yaml_got);
            CHECK(!strcmp(got, yaml_got), "names: %s: INI '%s', YAML '%s'", cases[i].value, got, yaml_got);
        }
        print_to(&cfg, "quotes_args.ini", dump, sizeof dump);
        char path[4200];
        snprintf(path, sizeof path, "%s/quotes_args.ini", tmp);
        rc = config_load(path, 0, NULL, &cfg2, &err);
        if (!rc) names_of(NULL, &cfg2, again, sizeof again);
        CHECK(rc == 0 && !strcmp(again, got), "names = %s printed and read back: '%s' (%s)", cases[i].value,
              rc ? err.msg : again, rc ? "" : dump);
    }
    // a split: a quoted comma stays in the path, a bracketed list splits
    snprintf(text, sizeof text, "%s[data]\ntrain = ['my, images', \"b\"]\nval = 'v, w'\nnames = a\n", HEAD);
    int rc = config_load(write_file("quotes2.ini", text), 0, NULL, &cfg, &err);
    DataSpec d;
    if (!rc) rc = dataspec_read(NULL, &cfg, &d, &err);
    CHECK(rc == 0, "%s", err.msg);
    if (rc) return;
    CHECK(d.n_src[DS_TRAIN] == 2 && d.n_src[DS_VAL] == 1 && strstr(d.src[DS_TRAIN][0], "/my, images")
          && strstr(d.src[DS_VAL][0], "/v, w"), "splits: %d %s, %d %s", d.n_src[DS_TRAIN], d.src[DS_TRAIN][0],
          d.n_src[DS_VAL], d.src[DS_VAL][0]);
    dataspec_free(&d);
}

// One schema for help and docs: every key's help is its row's last argument in cfg/schema.c, and the
// help's mode tables name only keys the schema has (a mode's own default only for a key it reads).
static void test_help_tables(void) {
    char why[512] = "";
    CHECK(config_help_check(why, sizeof why) == 0, "%s", why);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "%s", test_tmpdir("cfg"));
    RUN(test_s_ini);
    RUN(test_t_ini);
    RUN(test_defaults);
    RUN(test_overrides);
    RUN(test_errors);
    RUN(test_command_line_errors);
    RUN(test_comments_and_long_lines);
    RUN(test_round_trip);
    RUN(test_round_trip_numbers);
    RUN(test_hyp_yaml);
    RUN(test_garbled);
    RUN(test_flags_and_aliases);
    RUN(test_data_quotes);
    RUN(test_help_tables);
    return test_summary();
}
