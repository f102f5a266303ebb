// detect.c: inference on image files (YOLOv9 detect.py): letterbox (auto: padded to a multiple of 32),
// forward in evaluation mode, decode, NMS (conf 0.25, iou 0.45, best class; YOLO26's end-to-end head:
// top-k, no NMS, core/eval/val_decode.c), boxes back to the image,
// then drawn pictures and label files under runs/detect/NAME; several devices take every n-th image,
// a thread each. Legend: A anchors, nc classes, S the model's imgsz.
#include "core/eval/detect.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/devices/infer_devices.h"
#include "core/spec/model.h"
#include "core/train/outdir.h"
#include "core/eval/val.h"
#include "io/augment.h"
#include "io/dataset.h"
#include "io/image.h"
#include "io/text.h"
#include "io/pt.h"
#include "io/strlist.h"
#include "io/synth.h"

// ---- arguments -----------------------------------------------------------------------------

static int parse_float(const char *key, const char *v, float lo, float hi, float *out, Err *err) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi))
        return err_set(err, "command line: %s=%s: expected a number in [%g, %g]", key, v, lo, hi);
    *out = (float)x;
    return 0;
}

static int parse_flag(const char *key, const char *v, int *out, Err *err) {
    static const char *const yes[] = { "1", "true", "yes", "on" }, *const no[] = { "0", "false", "no", "off" };
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) { *out = 1; return 0; }
        if (!strcasecmp(v, no[i])) { *out = 0; return 0; }
    }
    return err_set(err, "command line: %s=%s: expected 0 or 1", key, v);
}

// One of our keys at argv[i] ("key=v", "--key=v" or "--key v"; '-' reads as '_'; the flag nosave alone
// means 1; save_conf is the config's [val] save_conf, which val reads too): *used = arguments consumed
// (0: not ours).
static int take_one(int argc, char **argv, int i, DetectOptions *o, int *used, Err *err) {
    static const char *const keys[] = { "source", "conf", "iou", "nosave" };
    const char *a = argv[i], *s = !strncmp(a, "--", 2) ? a + 2 : a;
    char name[32];
    size_t at = strcspn(s, "=");
    *used = 0;
    if (at >= sizeof name) return 0;
    snprintf(name, sizeof name, "%.*s", (int)at, s);
    for (char *p = name; *p; p++) if (*p == '-') *p = '_';
    if (!strcmp(name, "conf_thres") || !strcmp(name, "iou_thres")) name[at - 6] = 0;   // detect.py's spellings
    for (int k = 0; k < 4; k++) {
        if (strcmp(name, keys[k])) continue;
        if (!s[at] && s == a) return 0;           // a bare word "source" is no key
        const char *v = s[at] ? s + at + 1 : i + 1 < argc ? argv[i + 1] : NULL;
        if (k >= 3) {                              // a flag: the next argument only when it is 0 or 1
            if (!s[at] && (!v || (strcmp(v, "0") && strcmp(v, "1")))) { *used = 1; v = "1"; }
            else *used = s[at] ? 1 : 2;
            return parse_flag(keys[k], v, &o->nosave, err);
        }
        if (!v || !*v) return err_set(err, "command line: %s needs a value, e.g. %s=images/", keys[k], keys[k]);
        *used = s[at] ? 1 : 2;
        if (k == 0) { snprintf(o->source, sizeof o->source, "%s", v); return 0; }
        return parse_float(keys[k], v, 0, 1, k == 1 ? &o->nms.conf_thres : &o->nms.iou_thres, err);
    }
    return 0;
}

int detect_take_args(int *argc, char **argv, DetectOptions *o, Err *err) {
    memset(o, 0, sizeof *o);
    o->nms = nms_detect_options();
    int n = 0;
    for (int i = 0; i < *argc;) {
        int used;
        if (take_one(*argc, argv, i, o, &used, err)) return -1;
        if (!used) argv[n++] = argv[i++];
        else i += used;
    }
    *argc = n;
    return 0;
}

// ---- sources -------------------------------------------------------------------------------

typedef struct {
    char **path;
    char **stem;                      // (n) the output name of each: the file name without its extension,
    int n, cap;                       //   made unique (x, x_2, ...) when two inputs share one
} PathList;

static void paths_add(PathList *l, const char *p) {
    if (l->n == l->cap) l->cap = 2 * l->cap + 16, l->path = xrealloc(l->path, sizeof *l->path * l->cap);
    l->path[l->n++] = xstrdup(p);
}

static int is_image_name(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot) return 0;
    char ext[8] = { 0 };
    for (int i = 0; i < 7 && dot[1 + i]; i++) ext[i] = (char)tolower((unsigned char)dot[1 + i]);
    return !strcmp(ext, "jpg") || !strcmp(ext, "jpeg") || !strcmp(ext, "png");
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int list_folder(const char *dir, PathList *l, Err *err) {
    DIR *d = opendir(dir);
    if (!d) return err_set(err, "source=%s: cannot open the folder: %s", dir, strerror(errno));
    char p[2 * CFG_PATH];
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.' || !is_image_name(e->d_name)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        paths_add(l, p);
    }
    closedir(d);
    if (l->n > 1) qsort(l->path, l->n, sizeof *l->path, cmp_str);
    return 0;
}

// A .txt list: its entries resolve as those of a data.yaml split's list (io/strlist.h), relative ones
// against the list's folder, whatever the current directory.
static int list_file(const char *txt, PathList *l, Err *err) {
    StrList entries = { 0 };
    int *lines = NULL;
    if (list_file_read(txt, "source list", &entries, &lines, NULL, err)) return -1;   // a FIFO or binary file is refused
    for (int i = 0; i < entries.n; i++) paths_add(l, entries.v[i]);
    strlist_free(&entries);
    free(lines);
    return 0;
}

// source: a folder (its JPEG/PNG files, sorted), a .txt list (one path a line), or one image.
static int list_sources(const char *src, PathList *l, Err *err) {
    struct stat st;
    if (!src[0]) return err_set(err, "detect needs source=IMAGE, source=FOLDER or source=LIST.txt");
    if (stat(src, &st)) return err_set(err, "source=%s: %s", src, strerror(errno));
    size_t n = strlen(src);
    int rc = S_ISDIR(st.st_mode) ? list_folder(src, l, err)
           : n > 4 && !strcmp(src + n - 4, ".txt") ? list_file(src, l, err) : (paths_add(l, src), 0);
    if (!rc && !l->n) rc = err_set(err, "source=%s: no JPEG or PNG images found", src);
    return rc;
}

static char *stem_of(const char *path, int k) {   // "a/x.jpg" -> "x" (k == 1), "x_k" (k > 1)
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path, *dot = strrchr(base, '.');
    int n = dot ? (int)(dot - base) : (int)strlen(base);
    char buf[2 * CFG_PATH];
    if (k > 1) snprintf(buf, sizeof buf, "%.*s_%d", n, base, k);
    else snprintf(buf, sizeof buf, "%.*s", n, base);
    return xstrdup(buf);
}

typedef struct { const char *s; int i; } StemAt;

static int cmp_stem_at(const void *a, const void *b) {
    const StemAt *x = a, *y = b;
    int c = strcmp(x->s, y->s);
    return c ? c : (x->i > y->i) - (x->i < y->i);
}

static int cmp_stem_key(const void *key, const void *e) { return strcmp(key, ((const StemAt *)e)->s); }

// One output name per input, so no result overwrites another's (a/x.jpg and b/x.jpg, or x.jpg and
// x.png, would share labels/x.txt): the first in source order keeps its name, a later one becomes
// x_2, x_3, ... (a name no input has), and says so.
static void paths_name_outputs(PathList *l) {
    int n = l->n;
    char **orig = xcalloc((size_t)n + 1, sizeof *orig);
    char *dup = xcalloc((size_t)n + 1, 1);
    StemAt *by = xmalloc(sizeof *by * ((size_t)n + 1));
    for (int i = 0; i < n; i++) by[i] = (StemAt){ orig[i] = stem_of(l->path[i], 1), i };
    if (n > 1) qsort(by, n, sizeof *by, cmp_stem_at);
    for (int j = 1; j < n; j++) dup[by[j].i] = !strcmp(by[j].s, by[j - 1].s);
    l->stem = xcalloc((size_t)n + 1, sizeof *l->stem);
    for (int i = 0; i < n; i++) {
        if (!dup[i]) { l->stem[i] = xstrdup(orig[i]); continue; }
        char *name = NULL;
        for (int k = 2; !name; k++) {
            name = stem_of(l->path[i], k);
            int taken = bsearch(name, by, n, sizeof *by, cmp_stem_key) != NULL;
            for (int r = 0; r < i && !taken; r++) taken = dup[r] && !strcmp(l->stem[r], name);
            if (taken) { free(name); name = NULL; }
        }
        l->stem[i] = name;
        printf("note: %s shares its name with another input; its results are named %s\n", l->path[i], name);
    }
    for (int i = 0; i < n; i++) free(orig[i]);
    free(orig); free(dup); free(by);
}

static void paths_free(PathList *l) {
    for (int i = 0; i < l->n; i++) { free(l->path[i]); if (l->stem) free(l->stem[i]); }
    free(l->path);
    free(l->stem);
}

// ---- classes ---------------------------------------------------------------------------------

// nc of a weights file: the rows of the first head's class conv bias (DDetect cv3.0.2).
static int weights_nc(const char *path, int *nc, Err *err) {
    SafeTensors st;
    if (weights_open(path, &st, err)) return -1;
    *nc = 0;
    const char *tail = ".cv3.0.2.bias";
    for (int i = 0; i < st.n && !*nc; i++) {
        size_t n = strlen(st.tensor[i].name), t = strlen(tail);
        if (n > t && !strcmp(st.tensor[i].name + n - t, tail) && st.tensor[i].ndim == 1) *nc = (int)st.tensor[i].shape[0];
    }
    st_close(&st);
    return *nc ? 0 : err_set(err, "%s: no detection head (*%s) found: not weights of a YOLO detector", path, tail);
}

// nc names: the dataset's (when configured), the synthetic dataset's (nc 6), or class0.. .
static char **class_names(const Config *cfg, int nc, Err *err) {
    char **names = xcalloc(nc, sizeof *names);
    if ((cfg->data[0] && !synth_builtin_dir(cfg->data)) || cfg->n_data_kv) {   // synth-small: the shapes' names
        DataSpec spec;
        if (dataspec_read(NULL, cfg, &spec, err)) { free(names); return NULL; }
        int ok = spec.nc == nc;
        for (int c = 0; ok && c < nc; c++) names[c] = xstrdup(spec.names[c]);
        if (!ok) err_set(err, "%s names %d classes but the weights have %d", spec.file, spec.nc, nc);
        dataspec_free(&spec);
        if (!ok) { free(names); return NULL; }
        return names;
    }
    char buf[32];
    for (int c = 0; c < nc; c++) {
        snprintf(buf, sizeof buf, "class%d", c);
        names[c] = xstrdup(nc == SYNTH_NC ? synth_names[c] : buf);
    }
    return names;
}

// ---- one image -----------------------------------------------------------------------------

typedef struct {                      // what image i printed, kept until the images before it have printed
    char *line, *error;               // stdout line, stderr message (NULL: none)
    int   done;
} ImageLog;

typedef struct {                      // the run, shared by the device threads
    const PathList *src;
    char          **names;
    const char     *dir;
    ImageLog       *log;              // (src->n)
    const DetectOptions *o;
    int             save_txt;         // write labels/STEM.txt
    int             printed, failed;  // images printed so far (in source order), images that failed
    int             labels;           // label files written
    pthread_mutex_t mu;
} DetectRun;

typedef struct {                      // one device's thread: images k, k + n_dev, k + 2 n_dev, ...
    DetectRun  *run;
    Model      *m;
    int         k, n_dev;
    float      *heads;                // head maps of one image, level after level (host copy of a GPU's)
    ValDecoder  dec;                  // decode + NMS, or the end-to-end top-k
    void       *nms;                  // the backend's decode + NMS (a DFL model on a GPU); NULL: the host's
    void       *topk;                 // the backend's top-k (an end-to-end model on a GPU); NULL: the host's
    int         max_det;              // what the decoder was made for
} Detector;

// Ultralytics' 20-colour palette, one per class modulo 20.
static void class_colour(int c, uint8_t rgb[3]) {
    static const uint32_t hex[20] = { 0xFF3838, 0xFF9D97, 0xFF701F, 0xFFB21D, 0xCFD231, 0x48F90A, 0x92CC17,
        0x3DDB86, 0x1A9334, 0x00D4BB, 0x2C99A8, 0x00C2FF, 0x344593, 0x6473FF, 0x0018EC, 0x8438FF, 0x520085,
        0xCB38FF, 0xFF95C8, 0xFF37C7 };
    uint32_t h = hex[c % 20];
    rgb[0] = (uint8_t)(h >> 16); rgb[1] = (uint8_t)(h >> 8); rgb[2] = (uint8_t)h;
}

static void draw(Image *im, const Det *d, int nd, char *const *names) {
    int lw = (int)fmax(round((im->w + im->h + 3) / 2.0 * 0.003), 2);   // the reference's line width
    int px = lw * 7 > 11 ? lw * 7 : 11;                 // about the height of the reference's cv2 label
    static const uint8_t white[3] = { 255, 255, 255 };
    for (int i = nd - 1; i >= 0; i--) {                 // reversed, as detect.py: best on top
        uint8_t c[3];
        class_colour(d[i].cls, c);
        int x1 = (int)d[i].x1, y1 = (int)d[i].y1, x2 = (int)d[i].x2, y2 = (int)d[i].y2;
        image_draw_rect(im, x1, y1, x2, y2, lw, c);
        char label[160];
        snprintf(label, sizeof label, "%s %.2f", names[d[i].cls], d[i].conf);
        int tw, th, pad = lw / 2 + 1;
        text_measure(label, px, &tw, &th);
        th += 2 * pad;
        text_label(im, x1, y1 >= th ? y1 - th : y1, label, px, white, c, pad, NULL, NULL);
    }
}

int detect_write_labels(const char *path, const Det *d, int nd, int w, int h, int with_conf, Err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return err_set(err, "cannot write %s: %s", path, strerror(errno));
    for (int i = 0; i < nd; i++) {
        fprintf(f, "%d %g %g %g %g", d[i].cls, (d[i].x1 + d[i].x2) / 2 / w, (d[i].y1 + d[i].y2) / 2 / h,
                (d[i].x2 - d[i].x1) / w, (d[i].y2 - d[i].y1) / h);
        if (with_conf) fprintf(f, " %g", d[i].conf);
        fputc('\n', f);
    }
    return fclose(f) ? err_set(err, "cannot write %s: %s", path, strerror(errno)) : 0;
}

// scale_boxes: unpad, unscale, clip to the w0 x h0 image.
static void unletterbox(Det *det, int nd, const LetterboxInfo *lb, int w0, int h0) {
    float r = (float)lb->r, pw = (float)lb->padw, ph = (float)lb->padh;
    for (int i = 0; i < nd; i++) {
        Det *d = &det[i];
        d->x1 = fminf(fmaxf((d->x1 - pw) / r, 0), (float)w0); d->x2 = fminf(fmaxf((d->x2 - pw) / r, 0), (float)w0);
        d->y1 = fminf(fmaxf((d->y1 - ph) / r, 0), (float)h0); d->y2 = fminf(fmaxf((d->y2 - ph) / r, 0), (float)h0);
    }
}

int detect_boxes(ValDecoder *dec, const Model *m, const Map head[], int img_h, const LetterboxInfo *lb,
                 int w0, int h0) {
    int nd = val_decode(dec, m, head, 0, img_h);
    unletterbox(dec->det, nd, lb, w0, h0);
    return nd;
}

// The same on the backend: the model's head maps stay where they are, the kept detections come back.
static int device_boxes(Detector *dt, int img_h, const LetterboxInfo *lb, int w0, int h0) {
    Model *m = dt->m;
    Map head[3];
    for (int l = 0; l < 3; l++) head[l] = model_value(m, m->head[l], 1);
    int nd;
    if (dt->topk) {
        Topk26Opts to = { .max_det = dt->max_det, .agnostic = dt->dec.nms.agnostic, .conf = dt->dec.nms.conf_thres };
        m->be->val.topk_detect(m->be_ctx, dt->topk, head, img_h, 1, &to, dt->dec.det, &nd);
    } else {
        m->be->val.nms_detect(m->be_ctx, dt->nms, head, m->strides, 1, dt->dec.det, &nd);
    }
    unletterbox(dt->dec.det, nd, lb, w0, h0);
    return nd;
}

// The head maps of image 0 in host memory: the model's own on the CPU, copied into dt->heads from a GPU.
static void host_heads(Detector *dt, Map head[]) {
    Model *m = dt->m;
    size_t off = 0;
    for (int l = 0; l < m->n_levels; l++) {
        head[l] = model_value(m, m->head[l], 1);
        if (!m->on_device) continue;
        size_t n = (size_t)head[l].H * head[l].W * head[l].ld;
        m->be->dev.download(m->be_ctx, dt->heads + off, head[l].data, n);
        head[l].data = dt->heads + off;
        off += n;
    }
}

// Letterbox (scale up allowed, padded to a multiple of 32), forward (the bytes / 255 where the model
// runs), then detect_boxes.
static int infer(Detector *dt, const Image *img) {
    Model *m = dt->m;
    LetterboxInfo lb;
    Image lbi = augment_letterbox(img, m->imgsz, m->imgsz, 1, 32, &lb);
    model_forward_u8(m, lbi.px, 1, lbi.h, lbi.w, 0);
    int h = lbi.h;
    image_free(&lbi);
    if (dt->nms || dt->topk) return device_boxes(dt, h, &lb, img->w, img->h);
    Map head[4];
    host_heads(dt, head);
    return detect_boxes(&dt->dec, m, head, h, &lb, img->w, img->h);
}

// One source image: detections, the drawn copy (unless nosave) and, with save_txt, when anything was
// found, its label file (*labelled = 1); line gets what it prints (empty when the image could not be read).
static int detect_one(Detector *dt, const char *path, int i, int n, char *line, size_t size, int *labelled,
                      Err *err) {
    const DetectRun *r = dt->run;
    *labelled = 0;
    const char *dir = dt->run->dir;
    line[0] = 0;
    Image img;
    if (image_load(path, &img, err)) return -1;
    double t0 = now_seconds();
    int nd = infer(dt, &img);
    double ms = (now_seconds() - t0) * 1e3;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path, *dot = strrchr(base, '.');
    const char *stem = dt->run->src->stem[i];
    char out[4 * CFG_PATH];
    snprintf(out, sizeof out, "%s/labels/%s.txt", dir, stem);
    int rc = 0;
    if (nd && r->save_txt) {
        rc = detect_write_labels(out, dt->dec.det, nd, img.w, img.h, r->o->save_conf, err);
        *labelled = !rc;
    }
    if (!r->o->nosave) {
        draw(&img, dt->dec.det, nd, dt->run->names);
        int png = dot && !strcasecmp(dot, ".png");
        snprintf(out, sizeof out, "%s/%s%s", dir, stem, dot ? dot : ".jpg");   // the input's extension
        if (!rc) rc = png ? image_save_png(out, &img, err) : image_save_jpeg(out, &img, 95, err);
    }
    snprintf(line, size, "image %d/%d %s: %dx%d %d detection%s, %.1fms", i + 1, n, path, img.w, img.h, nd, nd == 1 ? "" : "s", ms);
    image_free(&img);
    return rc;
}

// Image i is done: keep its messages, then print every finished image not printed yet in source order.
static void log_image(DetectRun *r, int i, const char *line, const char *error, int labelled) {
    pthread_mutex_lock(&r->mu);
    r->labels += labelled;
    r->log[i] = (ImageLog){ line[0] ? xstrdup(line) : NULL, error ? xstrdup(error) : NULL, 1 };
    if (error) r->failed++;
    for (ImageLog *g; r->printed < r->src->n && (g = &r->log[r->printed])->done; r->printed++) {
        if (g->line) printf("%s\n", g->line);
        if (g->error) fprintf(stderr, "yolotrain detect: %s\n", g->error);
        free(g->line); free(g->error);
    }
    pthread_mutex_unlock(&r->mu);
}

static void *detector_main(void *arg) {
    Detector *dt = arg;
    const PathList *src = dt->run->src;
    dt->m->be->dev.bind(dt->m->be_ctx);
    char line[3 * CFG_PATH];
    for (int i = dt->k; i < src->n; i += dt->n_dev) {
        Err err;
        int labelled;
        int rc = detect_one(dt, src->path[i], i, src->n, line, sizeof line, &labelled, &err);
        log_image(dt->run, i, line, rc ? err.msg : NULL, labelled);
    }
    return NULL;
}

static void detector_init(Detector *dt, DetectRun *r, Model *m, int k, int n_dev, const DetectOptions *o) {
    int S = m->imgsz;
    size_t heads = 0;                                  // one image's head maps at S x S
    for (int l = 0; l < m->n_levels; l++) heads += (size_t)(S / m->strides[l]) * (S / m->strides[l]) * m->values[m->head[l]].C;
    *dt = (Detector){ .run = r, .m = m, .k = k, .n_dev = n_dev, .heads = xmalloc(sizeof(float) * (heads + 1)) };
    NmsOptions no = o->nms;
    if (m->end2end && no.max_det > DETECT_E2E_MAX_DET) no.max_det = DETECT_E2E_MAX_DET;
    dt->max_det = no.max_det;
    val_decoder_init(&dt->dec, m, S, S, &no);
    if (m->on_device && m->n_levels == 3) {   // heads are fp32 (core/spec/act_plan.c)
        int A = (S / 8) * (S / 8) + (S / 16) * (S / 16) + (S / 32) * (S / 32);
        m->be->dev.bind(m->be_ctx);               // the work lives on this model's device
        if (m->end2end) dt->topk = m->be->val.topk_prepare(m->be_ctx, 1, A, m->nc, no.max_det);
        else dt->nms = m->be->val.nms_prepare(m->be_ctx, 1, A, m->nc, &no);
    }
}

// Every source image on the models of im, image i on model i % n, one thread per model.
static int detect_all(InferModels *im, char **names, const char *dir, const PathList *src, const DetectOptions *o,
                      int save_txt) {
    int n = im->n;
    DetectRun r = { .src = src, .names = names, .dir = dir, .log = xcalloc(src->n, sizeof(ImageLog)), .o = o,
                    .save_txt = save_txt };
    pthread_mutex_init(&r.mu, NULL);
    Detector *dt = xcalloc(n, sizeof *dt);
    pthread_t *th = xcalloc(n, sizeof *th);
    for (int k = 0; k < n; k++) detector_init(&dt[k], &r, im->ptr[k], k, n, o);
    for (int k = 1; k < n; k++) pthread_create(&th[k], NULL, detector_main, &dt[k]);
    detector_main(&dt[0]);
    for (int k = 1; k < n; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < n; k++) {
        free(dt[k].heads); val_decoder_free(&dt[k].dec);
        Model *m = dt[k].m;
        if (dt[k].nms || dt[k].topk) m->be->dev.bind(m->be_ctx);
        if (dt[k].nms) m->be->val.nms_release(m->be_ctx, dt[k].nms);
        if (dt[k].topk) m->be->val.topk_release(m->be_ctx, dt[k].topk);
    }
    if (n > 1) im->ptr[0]->be->dev.bind(im->ptr[0]->be_ctx);
    int failed = r.failed;
    char pictures[64] = "", labels[3 * CFG_PATH] = "";   // as detect.py: "N labels saved to DIR/labels"
    if (!o->nosave) snprintf(pictures, sizeof pictures, " (%d images)", src->n - failed);
    if (save_txt) snprintf(labels, sizeof labels, "; %d label%s saved to %s/labels", r.labels, r.labels == 1 ? "" : "s", dir);
    if (!dir[0])                                       // nosave=1 and no labels: no folder was made
        printf("Done: %d image%s, nothing saved (nosave=1)%s\n", src->n - failed, src->n - failed == 1 ? "" : "s",
               failed ? "; some images failed, see above" : "");
    else printf("Results saved to %s%s%s%s\n", dir, pictures, labels, failed ? "; some images failed, see above" : "");
    free(dt); free(th); free(r.log);
    pthread_mutex_destroy(&r.mu);
    return failed ? 1 : 0;
}

// nc from the weights, then one model per device of devs for single images.
static int setup_models(Config *cfg, const DeviceList *devs, InferModels *im, Err *err) {
    int nc;
    memset(im, 0, sizeof *im);
    if (!cfg->weights[0]) return err_set(err, "detect needs weights=FILE (.safetensors or .pt)");
    if (!cfg->n_layers) return err_set(err, "detect needs a model config, e.g. yolotrain detect cfg/s.ini weights=...");
    if (weights_nc(cfg->weights, &nc, err)) return -1;
    if (cfg->nc != nc) config_set_nc(cfg, nc);
    return infer_models_open(cfg, devs, 1, im, err);
}

int detect_run(Config *cfg, const DetectOptions *o) {
    DeviceList devs;
    if (infer_pick_devices(cfg, "yolotrain detect", &devs)) return 2;
    Err err;
    PathList src = { 0 };
    InferModels im;
    if (list_sources(o->source, &src, &err) || setup_models(cfg, &devs, &im, &err)) {
        fprintf(stderr, "yolotrain detect: %s\n", err.msg);
        paths_free(&src);
        return 2;
    }
    paths_name_outputs(&src);
    char dir[2 * CFG_PATH + 16] = "";
    int nc = im.models[0].nc;
    char **names = class_names(cfg, nc, &err);
    int rc = !names ? 2 : (!o->nosave || cfg->save_txt) && outdir_make(cfg, "runs/detect", cfg->save_txt, dir,
                                                                     sizeof dir, &err) ? 1 : 0;
    if (rc) fprintf(stderr, "yolotrain detect: %s\n", err.msg);
    DetectOptions with = *o;
    with.save_conf |= cfg->save_conf;                  // the config's [val] save_conf (--save-conf)
    const Where *w = config_where(cfg, "max_det");      // --max-det; a config's (a run's args.ini: val's 300)
    if (w && !strcmp(w->file, "command line")) with.nms.max_det = cfg->max_det;   // is not detect's 1000
    if (!rc) rc = detect_all(&im, names, dir, &src, &with, cfg->save_txt);
    for (int c = 0; names && c < nc; c++) free(names[c]);
    free(names);
    infer_models_free(&im);
    paths_free(&src);
    return rc;
}
