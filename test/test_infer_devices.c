// test_infer_devices.c: `yolotrain val` and `yolotrain detect` on the devices device= names (issue #7
// item 2). CPU: device=cpu:2 (two CPU devices, the images split between them) gives the same val
// metrics and losses, bit for bit, and the same detect files, byte for byte, as device=cpu; bad device
// strings are refused with exit status 2. GPU (skipped without CUDA or a GPU; precision=fp32, TF32 off):
// device=0 matches device=cpu within rounding (label rows matched with tolerance, val losses rtol 1e-3),
// device=0,1 matches device=0 exactly. gelan-t at 64 px, random weights whose class biases are raised
// so that boxes pass conf 0.25, over 5 synthetic val images. Legend: S image side, nc classes.
#include "test/test.h"

#include <dirent.h>
#include <fcntl.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"   // the scratch paths here are short
#endif

#include "core/eval/detect.h"
#include "core/devices/infer_devices.h"
#include "core/eval/val.h"
#include "io/synth.h"
#ifdef USE_CUDA
#include "gpu/device.h"
#endif

enum { P = 4096, S = 64 };
#define WEIGHT_GAIN 2.6f   // more saturates the scores at 1, less leaves every score at 0.5
#define CLASS_BIAS 0.0f   // scores about 0.5: above conf 0.25, apart by more than fp32 rounding

static char dir[P], data_arg[P + 8], weights_arg[P + 16], project_arg[P + 16], source[P];

// stdout to /dev/null while the commands print their tables and per-image lines; quiet(0) restores it.
static void quiet(int on) {
    static int saved = -1;
    fflush(stdout);
    if (on) {
        int fd = open("/dev/null", O_WRONLY);
        saved = dup(1);
        dup2(fd, 1);
        close(fd);
    } else if (saved >= 0) {
        dup2(saved, 1);
        close(saved);
        saved = -1;
    }
}

// The config as the command line gives it; a device string config_load rejects is refused there (the
// command then exits with status 2 before val_run or detect_run), so callers count it as status 2.
static int load_cfg(Config *cfg, const char *device, const char *precision, const char *name) {
    char dev[64], prec[64], nm[64];
    snprintf(dev, sizeof dev, "device=%s", device);
    snprintf(prec, sizeof prec, "precision=%s", precision);
    snprintf(nm, sizeof nm, "name=%s", name);
    char *argv[] = { "imgsz=64", "batch=2", "workers=1", data_arg, weights_arg, project_arg, dev, prec, nm };
    Err err;
    return config_load("cfg/t.ini", 9, argv, cfg, &err);
}

// The synthetic set and gelan-t weights (class biases +2: random features then score about 0.9).
static int make_data(void) {
    snprintf(dir, sizeof dir, "%s", test_tmpdir("infer-devices"));
    snprintf(data_arg, sizeof data_arg, "data=%s/data.yaml", dir);
    snprintf(weights_arg, sizeof weights_arg, "weights=%s/w.safetensors", dir);
    snprintf(project_arg, sizeof project_arg, "project=%s/runs", dir);
    snprintf(source, sizeof source, "%s/images/val", dir);
    SynthConfig sc = synth_defaults();
    sc.n_train = 1; sc.n_val = 5; sc.min_side = 64; sc.max_side = 120; sc.threads = 1;
    Err err;
    if (synth_generate(dir, &sc, &err)) { printf("    %s\n", err.msg); return -1; }
    Config *cfg = calloc(1, sizeof *cfg);
    Model m;
    int rc = load_cfg(cfg, "cpu", "fp32", "x");
    if (rc) printf("    cannot load cfg/t.ini\n");
    if (!rc) config_set_nc(cfg, SYNTH_NC);
    if (!rc && (rc = model_build(cfg, 1, S, &m, &err)) != 0) printf("    %s\n", err.msg);
    if (!rc) {
        model_init_weights(&m, 7);
        for (int i = 0; i < m.n_params; i++) {     // He-like gain, so features survive the depth
            const ParamInfo *p = &m.params[i];
            float *x = m.state + p->offset;
            for (size_t k = 0; k < p->n; k++)
                if (p->kind == PK_WEIGHT) x[k] *= WEIGHT_GAIN;
                else if (strstr(p->name, ".cv3.") && strstr(p->name, ".2.bias")) x[k] = CLASS_BIAS;
                else if (strstr(p->name, ".cv2.") && strstr(p->name, ".2.bias")) x[k] = -0.6f * (k % 16);   // short boxes
        }
        if ((rc = model_save(&m, cfg->weights, &err)) != 0) printf("    %s\n", err.msg);
        model_free(&m);
    }
    free(cfg);
    return rc;
}

static int ready(void) { return dir[0] || !make_data(); }

// ---- val ----------------------------------------------------------------------------------------

// The validation of the weights on the models device= gives (as `yolotrain val` builds them).
static int val_on(const char *device, const char *precision, ValResult *r) {
    Config *cfg = calloc(1, sizeof *cfg);
    Err err = { { 0 } };
    Dataset ds;
    DatasetOptions opt = { .quiet = 1 };
    DeviceList devs;
    InferModels im = { 0 };
    int rc = load_cfg(cfg, device, precision, "val") || dataset_open(NULL, cfg, "val", &opt, &ds, &err) ? -1 : 0;
    CHECK(rc == 0, "device=%s: config or data: %s", device, err.msg);
    if (!rc) {
        config_set_nc(cfg, ds.nc);
        quiet(1);
        rc = infer_pick_devices(cfg, "test", &devs) || infer_models_open(cfg, &devs, cfg->batch, &im, &err) ? -1 : 0;
        quiet(0);
        CHECK(rc == 0 && im.n == devs.n, "device=%s: %s", device, err.msg);
        ValOptions o = val_options(cfg);
        o.out = NULL;
        if (!rc) rc = val_evaluate_models(im.ptr, im.n, &ds, &o, r, &err);
        CHECK(rc == 0, "device=%s: %s", device, err.msg);
        infer_models_free(&im);
        dataset_free(&ds);
    }
    free(cfg);
    return rc;
}

static int same_val(const ValResult *a, const ValResult *b) {
    return a->m.mp == b->m.mp && a->m.mr == b->m.mr && a->m.map50 == b->m.map50 && a->m.map == b->m.map &&
           a->box == b->box && a->cls == b->cls && a->dfl == b->dfl;
}

static void test_val_cpu2_same_as_cpu(void) {
    if (!ready()) { CHECK(0, "no data"); return; }
    ValResult one, two;
    if (val_on("cpu", "fp32", &one)) return;
    if (val_on("cpu:2", "fp32", &two)) { val_result_free(&one); return; }
    CHECK(one.m.images == 5 && one.cls > 0, "%d images, cls loss %g", one.m.images, one.cls);
    CHECK(same_val(&one, &two), "cpu vs cpu:2: mAP50 %.17g vs %.17g, box %.17g vs %.17g", one.m.map50, two.m.map50,
          one.box, two.box);
    val_result_free(&one); val_result_free(&two);
}

// `yolotrain val` itself: device=cpu:2 runs (exit 0); a GPU that is not there (val_run: parse_devices)
// and malformed strings (config_load) are user errors (exit 2), as in training.
static int val_status(const char *device) {
    Config *cfg = calloc(1, sizeof *cfg);
    int rc = 2;
    if (!load_cfg(cfg, device, "fp32", "val")) {
        quiet(1);
        rc = val_run(cfg);
        quiet(0);
    }
    free(cfg);
    return rc;
}

static void test_val_run_devices(void) {
    if (!ready()) { CHECK(0, "no data"); return; }
    CHECK(val_status("cpu:2") == 0, "device=cpu:2");
    const char *bad[] = { "99", "0,,1", "[0,1", "cpu:0", "gpu" };
    for (int i = 0; i < 5; i++) CHECK(val_status(bad[i]) == 2, "device=%s: want exit status 2", bad[i]);
}

// ---- detect -------------------------------------------------------------------------------------

// `yolotrain detect` on the val images into runs/NAME; returns its exit status.
static int detect_on(const char *device, const char *precision, const char *name) {
    Config *cfg = calloc(1, sizeof *cfg);
    int rc = 2;
    if (!load_cfg(cfg, device, precision, name)) {
        DetectOptions o = { .nms = nms_detect_options(), .save_conf = 1 };
        snprintf(o.source, sizeof o.source, "%s", source);
        cfg->save_txt = 1;
        quiet(1);
        rc = detect_run(cfg, &o);
        quiet(0);
    }
    free(cfg);
    return rc;
}

// Calls fn(a, b) on the label files and the drawn images of runs/A and runs/B, one source image at a
// time; returns the number of label files of A.
static int for_each_output(const char *a, const char *b, void (*fn)(const char *, const char *, int)) {
    DIR *d = opendir(source);
    int labels = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char stem[256], pa[2 * P], pb[2 * P];
        snprintf(stem, sizeof stem, "%s", e->d_name);
        if (strrchr(stem, '.')) *strrchr(stem, '.') = 0;
        snprintf(pa, sizeof pa, "%s/runs/%s/labels/%s.txt", dir, a, stem);
        snprintf(pb, sizeof pb, "%s/runs/%s/labels/%s.txt", dir, b, stem);
        labels += access(pa, F_OK) == 0;
        fn(pa, pb, 1);
        snprintf(pa, sizeof pa, "%s/runs/%s/%s", dir, a, e->d_name);
        snprintf(pb, sizeof pb, "%s/runs/%s/%s", dir, b, e->d_name);
        fn(pa, pb, 0);
    }
    if (d) closedir(d);
    return labels;
}

static void expect_same_bytes(const char *a, const char *b, int label) {
    CHECK(same_file(a, b), "%s and %s differ", a, b);
}

static void test_detect_cpu2_same_files(void) {
    if (!ready()) { CHECK(0, "no data"); return; }
    CHECK(detect_on("cpu", "fp32", "cpu") == 0, "device=cpu");
    CHECK(detect_on("cpu:2", "fp32", "cpu2") == 0, "device=cpu:2");
    int labels = for_each_output("cpu", "cpu2", expect_same_bytes);
    CHECK(labels == 5, "%d label files of 5 images: want boxes on every image", labels);
    CHECK(detect_on("99", "fp32", "bad") == 2 && detect_on("[0,1]]", "fp32", "bad") == 2, "bad devices: want exit 2");
}

// detect.py's --save-txt, --save-conf and --nosave, as `yolotrain detect` reads them from the command
// line; the last line counts the label files written. Returns the status; out gets stdout.
static int detect_cli(const char *name, const char *extra1, const char *extra2, char *out, size_t size) {
    Config *cfg = calloc(1, sizeof *cfg);
    char dev[] = "device=cpu", nm[64], src[P + 16], e1[64], e2[64];
    snprintf(nm, sizeof nm, "name=%s", name);
    snprintf(src, sizeof src, "source=%s", source);
    snprintf(e1, sizeof e1, "%s", extra1);
    snprintf(e2, sizeof e2, "%s", extra2);
    char *argv[] = { "imgsz=64", data_arg, weights_arg, project_arg, dev, nm, src, e1, e2 };
    int argc = 7 + (extra1[0] != 0) + (extra2[0] != 0);
    if (!extra1[0]) argv[7] = e2;
    DetectOptions o;
    Err err;
    int rc = 2;
    if (!detect_take_args(&argc, argv, &o, &err) && !config_load("cfg/t.ini", argc, argv, cfg, &err)) {
        char path[P + 32];
        snprintf(path, sizeof path, "%s/detect-%s.txt", dir, name);
        fflush(stdout);
        int saved = dup(1), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        close(fd);
        rc = detect_run(cfg, &o);
        fflush(stdout);
        dup2(saved, 1);
        close(saved);
        size_t n;
        char *text = slurp(path, &n);
        snprintf(out, size, "%s", text ? text : "");
        free(text);
    } else {
        snprintf(out, size, "%s", err.msg);
    }
    free(cfg);
    return rc;
}

// Files of runs/NAME/SUB whose names end with ext.
static int count_files(const char *name, const char *sub, const char *ext) {
    char p[2 * P];
    snprintf(p, sizeof p, "%s/runs/%s%s", dir, name, sub);
    DIR *d = opendir(p);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name), k = strlen(ext);
        n += l > k && !strcmp(e->d_name + l - k, ext);
    }
    if (d) closedir(d);
    return n;
}

static void test_detect_save_options(void) {
    if (!ready()) { CHECK(0, "no data"); return; }
    static char out[1 << 16];
    int rc = detect_cli("plain", "", "", out, sizeof out);   // detect.py's defaults: pictures, no labels
    CHECK(rc == 0 && count_files("plain", "", ".jpg") + count_files("plain", "", ".png") == 5, "plain: %d %s", rc, out);
    CHECK(count_files("plain", "/labels", ".txt") == 0 && !strstr(out, "labels saved"), "labels without save_txt: %s", out);
    rc = detect_cli("txt", "--save-txt", "--nosave", out, sizeof out);
    int labels = count_files("txt", "/labels", ".txt");
    CHECK(rc == 0 && labels == 5 && count_files("txt", "", ".jpg") + count_files("txt", "", ".png") == 0,
          "--save-txt --nosave: %d labels, %s", labels, out);
    char want[64];
    snprintf(want, sizeof want, "%d labels saved to ", labels);
    CHECK(strstr(out, want), "the count of label files written: %s", out);
    char p[2 * P];
    snprintf(p, sizeof p, "%s/runs/txt/labels", dir);
    DIR *d = opendir(p);
    struct dirent *e = NULL;
    while (d && (e = readdir(d)) && e->d_name[0] == '.') {}
    if (e) {
        char f[3 * P];
        snprintf(f, sizeof f, "%s/%s", p, e->d_name);
        size_t n;
        char *text = slurp(f, &n);
        int cols = 0;
        for (char *q = text; q && *q && *q != '\n'; q++) cols += (q == text || q[-1] == ' ') && *q != ' ';
        CHECK(cols == 5, "a row without --save-conf has 5 columns, got %d: %s", cols, text ? text : "");
        free(text);
    }
    if (d) closedir(d);
    rc = detect_cli("conf", "save_txt=1", "--save-conf", out, sizeof out);
    snprintf(p, sizeof p, "%s/runs/conf/labels", dir);
    d = opendir(p);
    e = NULL;
    while (d && (e = readdir(d)) && e->d_name[0] == '.') {}
    if (e) {
        char f[3 * P];
        snprintf(f, sizeof f, "%s/%s", p, e->d_name);
        size_t n;
        char *text = slurp(f, &n);
        int cols = 0;
        for (char *q = text; q && *q && *q != '\n'; q++) cols += (q == text || q[-1] == ' ') && *q != ' ';
        CHECK(cols == 6, "a row with --save-conf has 6 columns, got %d: %s", cols, text ? text : "");
        free(text);
    } else {
        CHECK(0, "--save-conf wrote no labels: %s", out);
    }
    if (d) closedir(d);
    // conf=0.99: no image has a box, so no label file, and the count says 0
    rc = detect_cli("none", "save_txt=1", "conf=0.99", out, sizeof out);
    CHECK(rc == 0 && count_files("none", "/labels", ".txt") == 0 && strstr(out, "; 0 labels saved to "),
          "images without detections get no label file and are not counted: %s", out);
}

// ---- GPUs ---------------------------------------------------------------------------------------

static int n_gpus(void) {
#ifdef USE_CUDA
    GpuInfo g[4];
    return gpu_list(g, 4);
#else
    return 0;
#endif
}

typedef struct { int cls; float v[5]; } Row;   // cx cy w h conf

static int read_rows(const char *path, Row *r, int cap) {
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && n < cap && fscanf(f, "%d %f %f %f %f %f", &r[n].cls, &r[n].v[0], &r[n].v[1], &r[n].v[2], &r[n].v[3],
                                  &r[n].v[4]) == 6) n++;
    if (f) fclose(f);
    return n;
}

// GPU vs CPU label files: the same rows in any order (near-equal scores may swap), each value within
// 1e-3 (fp32 GEMMs summed in another order; '%g' keeps 6 digits).
static void expect_close_rows(const char *cpu, const char *gpu, int label) {
    if (!label) return;                               // the drawn images may differ by a pixel
    static Row a[512], b[512];
    int na = read_rows(cpu, a, 512), nb = read_rows(gpu, b, 512), matched = 0;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++) {
            int ok = a[i].cls == b[j].cls;
            for (int k = 0; ok && k < 5; k++) ok = fabsf(a[i].v[k] - b[j].v[k]) <= 1e-3f;
            if (ok) { matched++; break; }
        }
    CHECK(na > 0 && na == nb && matched == na, "%s: %d rows, %s: %d rows, %d matched", cpu, na, gpu, nb, matched);
}

static void test_gpu_detect_same_as_cpu(void) {
    int n = n_gpus();
    if (!n) SKIP("no CUDA GPU");
    if (!ready()) { CHECK(0, "no data"); return; }
    CHECK(detect_on("cpu", "fp32", "g-cpu") == 0, "device=cpu");
    CHECK(detect_on("0", "fp32", "g-0") == 0, "device=0");
    CHECK(for_each_output("g-cpu", "g-0", expect_close_rows) == 5, "label files");
    if (n < 2) return;
    CHECK(detect_on("0,1", "fp32", "g-01") == 0, "device=0,1");
    for_each_output("g-0", "g-01", expect_same_bytes);
}

static void test_gpu_val_same_as_cpu(void) {
    int n = n_gpus();
    if (!n) SKIP("no CUDA GPU");
    if (!ready()) { CHECK(0, "no data"); return; }
    ValResult c, g, b;
    if (val_on("cpu", "fp32", &c)) return;
    if (!val_on("0", "fp32", &g)) {
        CHECK(close_enough(g.box, c.box, 0, 1e-3) && close_enough(g.cls, c.cls, 0, 1e-3) && close_enough(g.dfl, c.dfl, 0, 1e-3),
              "fp32 val losses: GPU %g %g %g, CPU %g %g %g", g.box, g.cls, g.dfl, c.box, c.cls, c.dfl);
        CHECK(close_enough(g.m.map50, c.m.map50, 0.01, 0) && close_enough(g.m.map, c.m.map, 0.01, 0),
              "mAP50 %g vs %g, mAP50-95 %g vs %g", g.m.map50, c.m.map50, g.m.map, c.m.map);
        ValResult two;
        if (n >= 2 && !val_on("0,1", "fp32", &two)) {
            CHECK(same_val(&g, &two), "device=0 vs 0,1: mAP50 %.17g vs %.17g, box %.17g vs %.17g", g.m.map50, two.m.map50,
                  g.box, two.box);
            val_result_free(&two);
        }
        val_result_free(&g);
    }
    if (!val_on("0", "bf16", &b)) {                  // bf16 GEMM operands: about 3 significant digits
        CHECK(close_enough(b.box, c.box, 0, 3e-2) && close_enough(b.cls, c.cls, 0, 3e-2) && close_enough(b.dfl, c.dfl, 0, 3e-2),
              "bf16 val losses: GPU %g %g %g, CPU %g %g %g", b.box, b.cls, b.dfl, c.box, c.cls, c.dfl);
        val_result_free(&b);
    }
    val_result_free(&c);
}

int main(void) {
    RUN(test_val_cpu2_same_as_cpu);
    RUN(test_val_run_devices);
    RUN(test_detect_cpu2_same_files);
    RUN(test_detect_save_options);
    RUN(test_gpu_detect_same_as_cpu);
    RUN(test_gpu_val_same_as_cpu);
    return test_summary();
}
