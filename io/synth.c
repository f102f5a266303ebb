// synth.c: see synth.h. Image `index` of a split depends on rng_for(seed, split, index) only, so any
// thread count writes the same bytes. Legend: W,H image size; r a shape's circumradius in pixels.
#include "io/synth.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const synth_names[SYNTH_NC] = { "circle", "square", "triangle", "ring", "cross", "star" };
enum { CIRCLE, SQUARE, TRIANGLE, RING, CROSS, STAR };

#define MIN_VISIBLE  0.6    // labelled (and drawn) only if this share of the shape is in view
#define MIN_PIXELS   20     // ... and at least this many pixels are
#define MAX_OVERLAP  0.3    // a new box may cover at most this share of the smaller box
#define MIN_CONTRAST 100    // L1 distance of an object's colour from the background at its centre
#define JPEG_QUALITY 90
#define MARKER       ".synth-complete"

typedef struct {
    int cls;
    double cx, cy, r, cos_t, sin_t;
    double poly[10][2];     // outline in unit-circle coordinates (polygon classes)
    int n_poly;
    uint8_t rgb[3];
} Shape;

typedef struct { int x0, y0, w, h; uint8_t *cov; } Mask;   // cov (h,w): sub-samples inside, 0..4

SynthConfig synth_defaults(void) {
    SynthConfig c = { .n_train = 512, .n_val = 128, .min_side = 256, .max_side = 480, .max_objects = 8,
                      .min_diameter = 12, .max_diameter = 0.4, .seed = 0 };
    return c;
}

SynthConfig synth_small(void) {
    SynthConfig c = synth_defaults();
    c.n_train = 512, c.n_val = 64, c.min_side = 128, c.max_side = 160;
    c.max_objects = 4, c.min_diameter = 20;
    return c;
}

const char *synth_builtin_dir(const char *data) {
    return !data[0] ? SYNTH_DIR : !strcmp(data, SYNTH_SMALL_NAME) ? SYNTH_SMALL_DIR : NULL;
}

// ---- geometry ----

static void shape_outline(Shape *s) {
    s->n_poly = 0;
    if (s->cls == SQUARE)
        for (int k = 0; k < 4; k++) {
            double a = M_PI / 4 + k * M_PI / 2;
            s->poly[s->n_poly][0] = cos(a), s->poly[s->n_poly++][1] = sin(a);
        }
    if (s->cls == TRIANGLE)
        for (int k = 0; k < 3; k++) {
            double a = -M_PI / 2 + k * 2 * M_PI / 3;
            s->poly[s->n_poly][0] = cos(a), s->poly[s->n_poly++][1] = sin(a);
        }
    if (s->cls == STAR)
        for (int k = 0; k < 10; k++) {
            double a = -M_PI / 2 + k * M_PI / 5, rad = k % 2 ? 0.42 : 1.0;
            s->poly[s->n_poly][0] = rad * cos(a), s->poly[s->n_poly++][1] = rad * sin(a);
        }
}

static int in_polygon(const double (*p)[2], int n, double u, double v) {   // crossing number
    int in = 0;
    for (int i = 0, j = n - 1; i < n; j = i++)
        if ((p[i][1] > v) != (p[j][1] > v) &&
            u < (p[j][0] - p[i][0]) * (v - p[i][1]) / (p[j][1] - p[i][1]) + p[i][0])
            in = !in;
    return in;
}

static int shape_contains(const Shape *s, double x, double y) {
    double dx = x - s->cx, dy = y - s->cy;
    double u = (dx * s->cos_t + dy * s->sin_t) / s->r, v = (-dx * s->sin_t + dy * s->cos_t) / s->r;
    double d2 = u * u + v * v;
    switch (s->cls) {
    case CIRCLE: return d2 <= 1;
    case RING:   return d2 <= 1 && d2 >= 0.55 * 0.55;
    case CROSS:  return (fabs(u) <= 1 && fabs(v) <= 0.3) || (fabs(u) <= 0.3 && fabs(v) <= 1);
    default:     return in_polygon((const double (*)[2])s->poly, s->n_poly, u, v);
    }
}

// 2x2 sub-samples per pixel over a box that holds the shape (the cross reaches 1.044 r).
static Mask shape_mask(const Shape *s) {
    Mask m;
    double R = 1.1 * s->r + 1;
    m.x0 = (int)floor(s->cx - R), m.y0 = (int)floor(s->cy - R);
    m.w = (int)ceil(s->cx + R) - m.x0, m.h = (int)ceil(s->cy + R) - m.y0;
    m.cov = xcalloc((size_t)m.w * m.h, 1);
    for (int y = 0; y < m.h; y++)
        for (int x = 0; x < m.w; x++)
            for (int k = 0; k < 4; k++)
                m.cov[y * m.w + x] += shape_contains(s, m.x0 + x + 0.25 + 0.5 * (k & 1),
                                                     m.y0 + y + 0.25 + 0.5 * (k >> 1));
    return m;
}

// ---- colours and background ----

static void hsv_to_rgb(double h, double s, double v, uint8_t rgb[3]) {
    double c = v * s, hp = h * 6, x = c * (1 - fabs(fmod(hp, 2) - 1)), m = v - c;
    double r = 0, g = 0, b = 0;
    if (hp < 1) r = c, g = x; else if (hp < 2) r = x, g = c; else if (hp < 3) g = c, b = x;
    else if (hp < 4) g = x, b = c; else if (hp < 5) r = x, b = c; else r = c, b = x;
    rgb[0] = (uint8_t)lround(255 * (r + m));
    rgb[1] = (uint8_t)lround(255 * (g + m));
    rgb[2] = (uint8_t)lround(255 * (b + m));
}

static void random_colour(Rng *rng, double s_lo, double v_lo, float out[3]) {
    uint8_t c[3];
    hsv_to_rgb(rng_uniform(rng, 0, 1), rng_uniform(rng, s_lo, 1), rng_uniform(rng, v_lo, 1), c);
    for (int k = 0; k < 3; k++) out[k] = c[k];
}

static void blend(float *px, const float c[3], double a) {
    for (int k = 0; k < 3; k++) px[k] += (float)(a * (c[k] - px[k]));
}

// A gradient between two colours, then distractors that are no class: stripes, soft blobs, thin bars.
static void draw_background(float *img, int W, int H, Rng *rng) {   // img (H,W,3)
    float c0[3], c1[3];
    random_colour(rng, 0, 0.1, c0), random_colour(rng, 0, 0.1, c1);
    double a = rng_uniform(rng, 0, 2 * M_PI), half = 0.5 * hypot(W, H);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            double t = ((x - W / 2.0) * cos(a) + (y - H / 2.0) * sin(a)) / half;
            float *p = img + ((size_t)y * W + x) * 3;
            for (int k = 0; k < 3; k++) p[k] = (float)(c0[k] + (c1[k] - c0[k]) * 0.5 * (t + 1));
        }
    int n_stripes = rng_int(rng, 4);
    for (int i = 0; i < n_stripes; i++) {
        float c[3];
        random_colour(rng, 0, 0, c);
        double ang = rng_uniform(rng, 0, M_PI), period = rng_uniform(rng, 8, 48);
        double duty = rng_uniform(rng, 0.2, 0.5), alpha = rng_uniform(rng, 0.1, 0.35);
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                double ph = fmod(fabs(x * cos(ang) + y * sin(ang)), period) / period;
                if (ph < duty) blend(img + ((size_t)y * W + x) * 3, c, alpha);
            }
    }
    int n_blobs = rng_int(rng, 5), side = W < H ? W : H;
    for (int i = 0; i < n_blobs; i++) {
        float c[3];
        random_colour(rng, 0, 0, c);
        double bx = rng_uniform(rng, 0, W), by = rng_uniform(rng, 0, H);
        double sg = rng_uniform(rng, 8, 0.15 * side), alpha = rng_uniform(rng, 0.3, 0.7);
        int x0 = (int)fmax(0, bx - 3 * sg), x1 = (int)fmin(W, bx + 3 * sg);
        int y0 = (int)fmax(0, by - 3 * sg), y1 = (int)fmin(H, by + 3 * sg);
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) {
                double d2 = (x - bx) * (x - bx) + (y - by) * (y - by);
                blend(img + ((size_t)y * W + x) * 3, c, alpha * exp(-d2 / (2 * sg * sg)));
            }
    }
    int n_bars = rng_int(rng, 3);
    for (int i = 0; i < n_bars; i++) {
        float c[3];
        random_colour(rng, 0, 0, c);
        double bx = rng_uniform(rng, 0, W), by = rng_uniform(rng, 0, H), ang = rng_uniform(rng, 0, M_PI);
        double len = rng_uniform(rng, 0.1, 0.3) * side, wid = rng_uniform(rng, 1, 3);
        int x0 = (int)fmax(0, bx - len - 4), x1 = (int)fmin(W, bx + len + 4);
        int y0 = (int)fmax(0, by - len - 4), y1 = (int)fmin(H, by + len + 4);
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) {
                double u = (x + 0.5 - bx) * cos(ang) + (y + 0.5 - by) * sin(ang);
                double v = -(x + 0.5 - bx) * sin(ang) + (y + 0.5 - by) * cos(ang);
                if (fabs(u) <= len && fabs(v) <= wid) blend(img + ((size_t)y * W + x) * 3, c, 1);
            }
    }
}

// ---- objects ----

static double box_overlap(const Shape *a, double cx, double cy, double r) {   // share of the smaller
    double w = fmin(a->cx + a->r, cx + r) - fmax(a->cx - a->r, cx - r);
    double h = fmin(a->cy + a->r, cy + r) - fmax(a->cy - a->r, cy - r);
    if (w <= 0 || h <= 0) return 0;
    double rs = fmin(a->r, r);
    return w * h / (4 * rs * rs);
}

static void pick_colour(Rng *rng, const float *bg, int W, int H, Shape *s) {
    int x = (int)fmin(fmax(s->cx, 0), W - 1), y = (int)fmin(fmax(s->cy, 0), H - 1);
    const float *b = bg + ((size_t)y * W + x) * 3;
    float c[3];
    for (int tries = 0; tries < 20; tries++) {
        random_colour(rng, 0.5, 0.45, c);
        if (fabsf(c[0] - b[0]) + fabsf(c[1] - b[1]) + fabsf(c[2] - b[2]) >= MIN_CONTRAST) break;
    }
    for (int k = 0; k < 3; k++) s->rgb[k] = (uint8_t)c[k];
}

// Diameters log-uniform in [min_diameter px, max_diameter * short side]; centres anywhere in the image.
static int place_shapes(const SynthConfig *c, Rng *rng, const float *bg, int W, int H, Shape *sh) {
    int want = rng_uniform(rng, 0, 1) < 0.04 ? 0 : 1 + rng_int(rng, c->max_objects), n = 0;
    double dmax = c->max_diameter * (W < H ? W : H);
    for (int tries = 0; tries < 50 && n < want; tries++) {
        double r = 0.5 * exp(rng_uniform(rng, log((double)c->min_diameter), log(dmax)));
        double cx = rng_uniform(rng, 0, W), cy = rng_uniform(rng, 0, H);
        int clash = 0;
        for (int i = 0; i < n && !clash; i++) clash = box_overlap(&sh[i], cx, cy, r) > MAX_OVERLAP;
        if (clash) continue;
        Shape *s = &sh[n++];
        s->cls = rng_int(rng, SYNTH_NC);
        s->cx = cx, s->cy = cy, s->r = r;
        double t = s->cls == CIRCLE || s->cls == RING ? 0 : rng_uniform(rng, 0, 2 * M_PI);
        s->cos_t = cos(t), s->sin_t = sin(t);
        shape_outline(s);
        pick_colour(rng, bg, W, H, s);
    }
    return n;
}

// From the top-most shape down: a shape stays if enough of it is in view and not under a kept
// later one; its box is that visible part. Dropped shapes are never drawn, so every drawn shape
// has a label. Returns the kept count; keep[k] says which.
static int keep_visible(const Mask *m, int n, int W, int H, int *keep, SynthObject *box) {
    uint8_t *taken = xcalloc((size_t)W * H, 1);
    int kept = 0;
    for (int k = n - 1; k >= 0; k--) {
        int total = 0, vis = 0, x1 = W, y1 = H, x2 = -1, y2 = -1;
        for (int y = 0; y < m[k].h; y++)
            for (int x = 0; x < m[k].w; x++) {
                int X = m[k].x0 + x, Y = m[k].y0 + y;
                if (m[k].cov[y * m[k].w + x] < 2) continue;
                total++;
                if (X < 0 || Y < 0 || X >= W || Y >= H || taken[(size_t)Y * W + X]) continue;
                vis++;
                x1 = X < x1 ? X : x1, x2 = X > x2 ? X : x2, y1 = Y < y1 ? Y : y1, y2 = Y > y2 ? Y : y2;
            }
        keep[k] = vis >= MIN_PIXELS && vis >= MIN_VISIBLE * total;
        if (!keep[k]) continue;
        kept++;
        box[k].x1 = x1, box[k].y1 = y1, box[k].x2 = x2 + 1, box[k].y2 = y2 + 1;
        for (int y = 0; y < m[k].h; y++)
            for (int x = 0; x < m[k].w; x++) {
                int X = m[k].x0 + x, Y = m[k].y0 + y;
                if (m[k].cov[y * m[k].w + x] >= 2 && X >= 0 && Y >= 0 && X < W && Y < H)
                    taken[(size_t)Y * W + X] = 1;
            }
    }
    free(taken);
    return kept;
}

static void draw_shape(float *img, int W, int H, const Shape *s, const Mask *m) {
    float c[3] = { s->rgb[0], s->rgb[1], s->rgb[2] };
    for (int y = 0; y < m->h; y++)
        for (int x = 0; x < m->w; x++) {
            int X = m->x0 + x, Y = m->y0 + y, cov = m->cov[y * m->w + x];
            if (cov && X >= 0 && Y >= 0 && X < W && Y < H) blend(img + ((size_t)Y * W + X) * 3, c, cov / 4.0);
        }
}

// Sensor-like noise: a sum of four uniforms per value (near-Gaussian, cheap), then round to bytes.
static void finish_pixels(const float *img, Image *out, Rng *rng) {
    double sigma = rng_uniform(rng, 2, 10) / 0.5774;   // the sum below has std 0.5774
    size_t n = (size_t)out->w * out->h * 3;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = rng_u64(rng);
        double z = ((u & 0xffff) + (u >> 16 & 0xffff) + (u >> 32 & 0xffff) + (u >> 48)) / 65535.0 - 2;
        double v = img[i] + sigma * z;
        out->px[i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : lround(v));
    }
}

int synth_render(const SynthConfig *c, int split, int index, Image *out, SynthObject obj[SYNTH_MAX_OBJECTS]) {
    Rng rng = rng_for(c->seed, (uint64_t)split, (uint64_t)index);
    int W = c->min_side + rng_int(&rng, c->max_side - c->min_side + 1);
    int H = c->min_side + rng_int(&rng, c->max_side - c->min_side + 1);
    float *img = xmalloc((size_t)W * H * 3 * sizeof *img);    // (H,W,3)
    draw_background(img, W, H, &rng);
    Shape sh[SYNTH_MAX_OBJECTS];
    Mask m[SYNTH_MAX_OBJECTS];
    SynthObject box[SYNTH_MAX_OBJECTS];
    int keep[SYNTH_MAX_OBJECTS], n = place_shapes(c, &rng, img, W, H, sh), kept = 0;
    for (int k = 0; k < n; k++) m[k] = shape_mask(&sh[k]);
    keep_visible(m, n, W, H, keep, box);
    for (int k = 0; k < n; k++) {
        if (keep[k]) {
            draw_shape(img, W, H, &sh[k], &m[k]);
            obj[kept] = box[k];
            obj[kept].cls = sh[k].cls;
            memcpy(obj[kept++].rgb, sh[k].rgb, 3);
        }
        free(m[k].cov);
    }
    *out = image_new(W, H, 0);
    finish_pixels(img, out, &rng);
    free(img);
    return kept;
}

// ---- files ----

static int dirs_for(const char *path, Err *err) {
    if (make_dirs(path)) return err_set(err, "%s: cannot create folder: %s; choose another dataset folder", path, strerror(errno));
    return 0;
}

static int write_labels(const char *path, const SynthObject *obj, int n, int W, int H, Err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return err_set(err, "%s: cannot write: %s", path, strerror(errno));
    for (int k = 0; k < n; k++)
        fprintf(f, "%d %.6f %.6f %.6f %.6f\n", obj[k].cls, 0.5 * (obj[k].x1 + obj[k].x2) / W,
                0.5 * (obj[k].y1 + obj[k].y2) / H, (double)(obj[k].x2 - obj[k].x1) / W,
                (double)(obj[k].y2 - obj[k].y1) / H);
    if (fclose(f) != 0) return err_set(err, "%s: cannot write: %s", path, strerror(errno));
    return 0;
}

static const char *split_name(int split) { return split ? "val" : "train"; }

static int write_one(const char *dir, const SynthConfig *c, int split, int index, Err *err) {
    char img_path[PATH_MAX], lab_path[PATH_MAX];
    snprintf(img_path, sizeof img_path, "%s/images/%s/%06d.jpg", dir, split_name(split), index);
    snprintf(lab_path, sizeof lab_path, "%s/labels/%s/%06d.txt", dir, split_name(split), index);
    Image im;
    SynthObject obj[SYNTH_MAX_OBJECTS];
    int n = synth_render(c, split, index, &im, obj);
    int rc = image_save_jpeg(img_path, &im, JPEG_QUALITY, err);
    if (rc == 0) rc = write_labels(lab_path, obj, n, im.w, im.h, err);
    image_free(&im);
    return rc;
}

typedef struct {
    const char *dir;
    const SynthConfig *c;
    atomic_int next, failed;
    pthread_mutex_t lock;
    Err err;                // the first failure
} Job;

static void *writer(void *arg) {
    Job *j = arg;
    int total = j->c->n_train + j->c->n_val;
    for (int i; !atomic_load(&j->failed) && (i = atomic_fetch_add(&j->next, 1)) < total;) {
        Err e;
        int split = i >= j->c->n_train, index = split ? i - j->c->n_train : i;
        if (write_one(j->dir, j->c, split, index, &e) == 0) continue;
        pthread_mutex_lock(&j->lock);
        if (!atomic_exchange(&j->failed, 1)) j->err = e;
        pthread_mutex_unlock(&j->lock);
    }
    return NULL;
}

// Remove our numbered files (NNNNNN.ext) at or beyond `keep`, left from a larger earlier set.
static void remove_stale(const char *folder, const char *ext, int keep) {
    DIR *d = opendir(folder);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        int idx, len;
        char path[PATH_MAX];
        if (strlen(e->d_name) != 6 + strlen(ext) || strcmp(e->d_name + 6, ext) != 0) continue;
        if (sscanf(e->d_name, "%6d%n", &idx, &len) != 1 || len != 6 || idx < keep) continue;
        snprintf(path, sizeof path, "%s/%s", folder, e->d_name);
        unlink(path);
    }
    closedir(d);
}

static int prepare_dirs(const char *dir, const SynthConfig *c, Err *err) {
    char path[PATH_MAX];
    for (int split = 0; split < 2; split++) {
        int keep = split ? c->n_val : c->n_train;
        snprintf(path, sizeof path, "%s/images/%s", dir, split_name(split));
        if (dirs_for(path, err)) return -1;
        remove_stale(path, ".jpg", keep);
        snprintf(path, sizeof path, "%s/labels/%s", dir, split_name(split));
        if (dirs_for(path, err)) return -1;
        remove_stale(path, ".txt", keep);
    }
    return 0;
}

// data.yaml names the folder by its absolute path: YOLOv9 and Ultralytics resolve a relative
// `path:` against their own roots, not the yaml's folder, so only this form works everywhere.
static int write_yaml(const char *dir, const SynthConfig *c, Err *err) {
    char path[PATH_MAX], abs[PATH_MAX];
    snprintf(path, sizeof path, "%s/data.yaml", dir);
    if (!realpath(dir, abs)) return err_set(err, "%s: cannot resolve: %s", dir, strerror(errno));
    FILE *f = fopen(path, "w");
    if (!f) return err_set(err, "%s: cannot write: %s", path, strerror(errno));
    fprintf(f, "# yolotrain synthetic shapes: %d train / %d val images, sides %d-%d px, up to %d shapes of "
            "%d px to %g of the short side, seed %llu\n", c->n_train, c->n_val, c->min_side, c->max_side,
            c->max_objects, c->min_diameter, c->max_diameter, (unsigned long long)c->seed);
    fprintf(f, "path: %s\ntrain: images/train\nval: images/val\nnames:\n", abs);
    for (int k = 0; k < SYNTH_NC; k++) fprintf(f, "  %d: %s\n", k, synth_names[k]);
    if (fclose(f) != 0) return err_set(err, "%s: cannot write: %s", path, strerror(errno));
    return 0;
}

static int write_marker(const char *dir, const SynthConfig *c, Err *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/" MARKER, dir);
    FILE *f = fopen(path, "w");
    if (!f) return err_set(err, "%s: cannot write: %s", path, strerror(errno));
    fprintf(f, "n_train=%d n_val=%d min_side=%d max_side=%d max_objects=%d min_diameter=%d max_diameter=%g "
            "seed=%llu\n", c->n_train, c->n_val, c->min_side, c->max_side, c->max_objects, c->min_diameter,
            c->max_diameter, (unsigned long long)c->seed);
    return fclose(f) == 0 ? 0 : err_set(err, "%s: cannot write: %s", path, strerror(errno));
}

int synth_generate(const char *dir, const SynthConfig *c, Err *err) {
    if (c->n_train < 1 || c->n_val < 0 || c->min_side < 32 || c->max_side < c->min_side)
        return err_set(err, "synth: n_train=%d n_val=%d sides %d-%d: need n_train >= 1, n_val >= 0, "
                       "32 <= min_side <= max_side", c->n_train, c->n_val, c->min_side, c->max_side);
    if (c->max_objects < 1 || c->max_objects > SYNTH_MAX_OBJECTS || c->min_diameter < 6 ||
        !(c->max_diameter <= 1) || c->min_diameter > c->max_diameter * c->min_side)
        return err_set(err, "synth: max_objects=%d min_diameter=%d max_diameter=%g: need 1 <= max_objects <= %d, "
                       "6 <= min_diameter <= max_diameter * min_side (%d) and max_diameter <= 1", c->max_objects,
                       c->min_diameter, c->max_diameter, SYNTH_MAX_OBJECTS, c->min_side);
    char marker[PATH_MAX];
    snprintf(marker, sizeof marker, "%s/" MARKER, dir);
    if (dirs_for(dir, err)) return -1;
    unlink(marker);     // an interrupted run must not look complete
    if (prepare_dirs(dir, c, err)) return -1;
    Job j = { .dir = dir, .c = c };
    pthread_mutex_init(&j.lock, NULL);
    int nt = c->threads > 0 ? c->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    nt = nt < 1 ? 1 : nt > 64 ? 64 : nt;
    pthread_t th[64];
    for (int t = 0; t < nt; t++)
        if (pthread_create(&th[t], NULL, writer, &j)) die("synth: cannot start a writer thread");
    for (int t = 0; t < nt; t++) pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j.lock);
    if (atomic_load(&j.failed)) {
        if (err) *err = j.err;
        return -1;
    }
    if (write_yaml(dir, c, err) || write_marker(dir, c, err)) return -1;
    return 0;
}

int synth_ensure(const char *dir, Err *err) {
    char marker[PATH_MAX];
    snprintf(marker, sizeof marker, "%s/" MARKER, dir);
    if (access(marker, F_OK) == 0) return 0;
    SynthConfig c = strcmp(dir, SYNTH_SMALL_DIR) ? synth_defaults() : synth_small();
    return synth_generate(dir, &c, err);
}
