// dataset.c: see dataset.h. In order: listing image files; reading and checking label files;
// dataset_open, which validates every image of a split and prints the summary. The description (a
// data.yaml, or the INI [data] keys) is io/data_yaml.c.
#include "io/dataset.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/readfile.h"
#include "io/annot.h"
#include "io/image.h"
#include "io/strlist.h"

#define COORD_TOL      0.01f   // Ultralytics accepts coordinates in [-0.01, 1.01]; we clip them to [0,1]
#define MIN_IMAGE_SIDE 10      // the reference drops images under 10 px a side (verify_image_label)

const char *const dataset_reason_name[DS_N_REASONS] = {
    "unsupported image format", "unreadable or corrupt image", "unreadable label file",
    "bad class id", "wrong number of values", "not a number", "coordinates out of bounds",
    "fewer than min_items labels",
};

static const char *const image_exts[] = {"bmp", "dng", "jpeg", "jpg", "mpo", "png", "tif", "tiff",
                                         "webp", "pfm", NULL};
static const char *const decoded_exts[] = {"jpeg", "jpg", "mpo", "png", NULL};   // mpo is JPEG

// ---- helpers (StrList, str_fmt, path_dir, path_join: io/strlist.h) ------------------------------
// The extension after the last '.' of the file name, "" when there is none.
static const char *path_ext(const char *path) {
    const char *base = strrchr(path, '/');
    const char *dot = strrchr(base ? base + 1 : path, '.');
    return dot ? dot + 1 : "";
}

static int ext_in(const char *path, const char *const *exts) {
    const char *ext = path_ext(path);
    for (int i = 0; exts[i]; i++)
        if (!strcasecmp(ext, exts[i])) return 1;
    return 0;
}

// img2label_paths: the last "/images/" becomes "/labels/" and the extension ".txt". A relative path
// may also start with "images/" (the reference's paths are absolute, so they always have the slash).
static char *label_path(const char *image) {
    const char *seg = NULL;
    for (const char *p = strstr(image, "images/"); p; p = strstr(p + 1, "images/"))
        if (p == image || p[-1] == '/') seg = p;
    char *s = seg ? str_fmt("%.*slabels/%s", (int)(seg - image), image, seg + 7) : xstrdup(image);
    const char *ext = path_ext(s);   // listed images always have one
    int keep = *ext ? (int)(ext - 1 - s) : (int)strlen(s);
    char *out = str_fmt("%.*s.txt", keep, s);
    free(s);
    return out;
}

// ---- the report stream -------------------------------------------------------------------------
typedef enum { SAY_WARN, SAY_EXCLUDE, SAY_NOTE } SayKind;

typedef struct {
    FILE *f;
    int   n_warnings;
    char  first[768];       // the first exclusion message, for the strict-mode error
} Report;

// Print "file:line: message" (line 0: "file: message"; line -1: msg names the file itself), count it.
static void say(Report *r, SayKind kind, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void say(Report *r, SayKind kind, const char *file, int line, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char where[32] = "";
    if (line > 0) snprintf(where, sizeof where, ":%d", line);
    if (line < 0) fprintf(r->f, "%s\n", msg);        // msg names the file (and line) itself
    else fprintf(r->f, "%s%s: %s\n", file, where, msg);
    if (kind == SAY_WARN) r->n_warnings++;
    if (kind == SAY_EXCLUDE && !r->first[0])
        snprintf(r->first, sizeof r->first, "%.400s%s%s%.300s", line < 0 ? "" : file,
                 where, line < 0 ? "" : ": ", msg);
}

// ---- listing image files -----------------------------------------------------------------------
typedef struct { dev_t dev; ino_t ino; } DirId;

typedef struct {
    StrList images;           // image files found
    StrList folders;          // folders listed (their labels folders are scanned for orphans)
    DirId  *seen;             // (n_seen) folders visited: a symlink loop ends at the second visit
    int     n_seen, cap_seen;
    AnnSet  ann;              // images described by COCO or VOC files, with their boxes (io/annot.h)
    Report *r;
} Lister;

static int lister_first_visit(Lister *L, const struct stat *st) {
    for (int i = 0; i < L->n_seen; i++)
        if (L->seen[i].dev == st->st_dev && L->seen[i].ino == st->st_ino) return 0;
    if (L->n_seen == L->cap_seen) {
        L->cap_seen = L->cap_seen ? 2 * L->cap_seen : 16;
        L->seen = xrealloc(L->seen, (size_t)L->cap_seen * sizeof *L->seen);
    }
    L->seen[L->n_seen++] = (DirId){st->st_dev, st->st_ino};
    return 1;
}

// Every image file under dir, following symlinks; hidden entries are skipped, as glob("**/*.*") does.
static void list_folder(Lister *L, const char *dir, const struct stat *st) {
    if (!lister_first_visit(L, st)) {
        say(L->r, SAY_WARN, dir, 0, "folder reached a second time (a symlink loop or a second link); "
            "listed once");
        return;
    }
    DIR *dp = opendir(dir);
    if (!dp) { say(L->r, SAY_WARN, dir, 0, "cannot read folder: %s", strerror(errno)); return; }
    strlist_push(&L->folders, xstrdup(dir));
    for (struct dirent *e; (e = readdir(dp)); ) {
        if (e->d_name[0] == '.') continue;
        char *path = path_join(dir, e->d_name);
        struct stat es;
        if (stat(path, &es) != 0) {
            if (ext_in(path, image_exts))
                say(L->r, SAY_WARN, path, 0, "cannot read: %s", strerror(errno));
        } else if (S_ISDIR(es.st_mode)) {
            list_folder(L, path, &es);
        } else if (ext_in(path, image_exts)) {
            strlist_push(&L->images, path);
            continue;
        }
        free(path);
    }
    closedir(dp);
}

// A list file: one image path a line, relative ones resolved against the list file's folder.
static int list_file(Lister *L, const char *file, const Where *at, Err *err) {
    StrList entries = {0}, written = {0};
    int *lines = NULL;
    Err e;
    if (list_file_read(file, "image list", &entries, &lines, &written, &e))
        return err_set(err, "%s:%d: %s", at->file, at->line, e.msg);
    for (int i = 0; i < entries.n; i++) {
        if (ext_in(entries.v[i], image_exts)) { strlist_push(&L->images, entries.v[i]); continue; }
        say(L->r, SAY_WARN, file, lines[i], "'%s' is not an image file name (bmp dng jpeg jpg mpo png tif tiff webp "
            "pfm); ignored", written.v[i]);
        free(entries.v[i]);
    }
    free(entries.v);
    strlist_free(&written);
    free(lines);
    return 0;
}

// A COCO .json or a VOC root: its images join the list, their boxes L->ann (io/coco.c, io/voc.c).
static int annot_list(Lister *L, const DataSpec *d, int k, const char *src, AnnKind kind, Err *err) {
    int first = L->ann.n;
    int rc = kind == ANN_COCO ? coco_read(src, d->images[k], d->names, d->nc, &L->ann, err)
                              : voc_read(src, dataset_split_key[k], d->names, d->nc, &L->ann, err);
    if (rc != 0) return -1;
    for (int i = first; i < L->ann.n; i++) strlist_push(&L->images, xstrdup(L->ann.v[i].image));
    return 0;
}

// The annotation sources' messages, then one entry per image file: a second description is ignored.
static void annot_dedupe(Lister *L) {
    AnnSet *a = &L->ann;
    for (int i = 0; i < a->warnings.n; i++) say(L->r, SAY_WARN, a->warnings.v[i], -1, "%s", a->warnings.v[i]);
    for (int i = 0; i < a->notes.n; i++) fprintf(L->r->f, "note: %s\n", a->notes.v[i]);
    annset_sort(a);
    int n = 0;
    for (int i = 0; i < a->n; i++) {
        if (n > 0 && !strcmp(a->v[n - 1].image, a->v[i].image)) {
            say(L->r, SAY_WARN, a->v[i].file, a->v[i].line, "%s is also described at %s:%d; this description is "
                "ignored", a->v[i].image, a->v[n - 1].file, a->v[n - 1].line);
            for (int j = 0; j < a->v[i].nbox; j++) free(a->v[i].box[j].why);
            free(a->v[i].box); free(a->v[i].image); free(a->v[i].file); free(a->v[i].problem);
            continue;
        }
        a->v[n++] = a->v[i];
    }
    a->n = n;
}

// All images of split k, sorted by path (string order, like the reference), each path once.
static int split_list(const DataSpec *d, int k, Lister *L, Err *err) {
    const Where *at = &d->at[k];
    for (int i = 0; i < d->n_src[k]; i++) {
        const char *src = d->src[k][i];
        struct stat st;
        if (stat(src, &st) != 0)
            return err_set(err, "%s:%d: %s: %s: %s (relative paths resolve against the folder of %s, "
                           "or against its path: key)", at->file, at->line, dataset_split_key[k], src,
                           strerror(errno), d->file);
        AnnKind kind = annot_kind(src);
        if (kind == ANN_COCO && S_ISDIR(st.st_mode)) kind = ANN_NONE;
        if (kind != ANN_NONE) { if (annot_list(L, d, k, src, kind, err) != 0) return -1; }
        else if (S_ISDIR(st.st_mode)) list_folder(L, src, &st);
        else if (list_file(L, src, at, err) != 0) return -1;
    }
    annot_dedupe(L);
    StrList *im = &L->images;
    strlist_sort(im);
    int n = 0;
    for (int i = 0; i < im->n; i++) {
        if (n > 0 && !strcmp(im->v[n - 1], im->v[i])) {
            say(L->r, SAY_WARN, im->v[i], 0, "listed more than once; kept once");
            free(im->v[i]);
        } else {
            im->v[n++] = im->v[i];
        }
    }
    im->n = n;
    if (n == 0 && d->n_src[k] == 1 && annot_kind(d->src[k][0]) != ANN_NONE)
        return err_set(err, "%s:%d: %s: %s lists no images", at->file, at->line, dataset_split_key[k], d->src[k][0]);
    if (n == 0)
        return err_set(err, "%s:%d: %s: no images found in %s (formats: bmp dng jpeg jpg mpo png tif "
                       "tiff webp pfm)", at->file, at->line, dataset_split_key[k],
                       d->n_src[k] ? d->src[k][0] : "an empty list");
    return 0;
}

// ---- label files -------------------------------------------------------------------------------
typedef struct { int line, first, nf; } RowSpan;   // tokens [first, first+nf) of one written row

typedef struct {
    char    *buf;
    char   **tok;  int n_tok, cap_tok;
    RowSpan *row;  int n_row, cap_row;
} LabelText;

typedef struct { float v[5]; int line; } Row;      // class, cx, cy, w, h as float32 (np.float32)

static void label_text_free(LabelText *t) {
    free(t->buf); free(t->tok); free(t->row);
    memset(t, 0, sizeof *t);
}

// Split into rows of whitespace-separated tokens. Lines end in \n, \r\n or \r; a UTF-8 BOM and
// blank lines are skipped; line numbers count every line, as an editor shows them.
static void label_text_split(LabelText *t, size_t n) {
    char *p = t->buf + (n >= 3 && !memcmp(t->buf, "\xEF\xBB\xBF", 3) ? 3 : 0), *end = t->buf + n;
    for (int line = 1; p < end; line++) {
        char *eol = p;
        while (eol < end && *eol != '\n' && *eol != '\r') eol++;
        char *next = eol + (eol < end && *eol == '\r' && eol + 1 < end && eol[1] == '\n' ? 2 : 1);
        *eol = 0;
        RowSpan r = {line, t->n_tok, 0};
        char *save = NULL;
        for (char *s = strtok_r(p, " \t\v\f", &save); s; s = strtok_r(NULL, " \t\v\f", &save), r.nf++) {
            if (t->n_tok == t->cap_tok) {
                t->cap_tok = t->cap_tok ? 2 * t->cap_tok : 64;
                t->tok = xrealloc(t->tok, (size_t)t->cap_tok * sizeof *t->tok);
            }
            t->tok[t->n_tok++] = s;
        }
        if (r.nf > 0) {
            if (t->n_row == t->cap_row) {
                t->cap_row = t->cap_row ? 2 * t->cap_row : 16;
                t->row = xrealloc(t->row, (size_t)t->cap_row * sizeof *t->row);
            }
            t->row[t->n_row++] = r;
        }
        p = next;
    }
}

// 0 read, 1 no such file (a background image), -1 unreadable, special or not text (why in err).
static int label_text_read(const char *path, LabelText *t, Err *err) {
    memset(t, 0, sizeof *t);
    TextFile text;
    if (rf_text_read(path, "label file", &text, err)) return errno == ENOENT ? 1 : -1;
    t->buf = text.buf;
    label_text_split(t, text.n);
    return 0;
}

typedef struct {            // what checking one split needs
    Report  r;
    int     nc;
    const char *nc_from;    // where nc came from, for messages
    int     decode;         // 1: every image is decoded, not only its header read
    char  **decode_err;     // with decode: the decoder's message for image i of the list, NULL when it
                            //   decodes (decode_all); i = the image being checked
    int     i;
    int     n_polygons;     // usable label files of polygons (read as their boxes)
    const AnnSet *ann;      // the images described by COCO or VOC files (sorted), their boxes
} Checker;

static int row_count_ok(Checker *c, const char *file, const RowSpan *rs, int polygons) {
    if (!polygons && rs->nf < 5)
        say(&c->r, SAY_EXCLUDE, file, rs->line, "%d value%s; a row is: class cx cy w h", rs->nf,
            rs->nf == 1 ? "" : "s");
    else if (!polygons && rs->nf == 6)
        say(&c->r, SAY_EXCLUDE, file, rs->line, "6 values; a row is: class cx cy w h (5 values), or a "
            "polygon: class x1 y1 x2 y2 x3 y3 ...");
    else if (polygons && (rs->nf < 3 || (rs->nf - 1) % 2))
        say(&c->r, SAY_EXCLUDE, file, rs->line, "%d values in a polygon file (a row has more than 6): "
            "a polygon row is class x1 y1 x2 y2 ... (x y pairs)", rs->nf);
    else
        return 1;
    return 0;
}

// A decimal number as the reference's float() reads a label: [+-]digits[.digits][e[+-]digits].
// strtod alone would also take hexadecimal (0x1, 0x0.8p0), "inf" and "nan".
static int is_decimal(const char *s) {
    if (*s == '+' || *s == '-') s++;
    int digits = 0;
    while (*s >= '0' && *s <= '9') s++, digits++;
    if (*s == '.') for (s++; *s >= '0' && *s <= '9'; s++) digits++;
    if (!digits) return 0;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (*s < '0' || *s > '9') return 0;
        while (*s >= '0' && *s <= '9') s++;
    }
    return *s == 0;
}

// Parse every value of a row into v[] as float32; -1 or the reason the row is bad.
static int row_numbers(Checker *c, const char *file, const LabelText *t, const RowSpan *rs, float *v) {
    for (int i = 0; i < rs->nf; i++) {
        const char *s = t->tok[rs->first + i];
        char *end;
        double x = strtod(s, &end);
        if (end == s || *end) {
            say(&c->r, SAY_EXCLUDE, file, rs->line, "'%s' is not a number", s);
            return DS_NOT_NUMBER;
        }
        if (!isfinite(x) || !isfinite((float)x)) {
            say(&c->r, SAY_EXCLUDE, file, rs->line, "'%s' is not a finite number", s);
            return DS_NOT_NUMBER;
        }
        if (!is_decimal(s)) {
            say(&c->r, SAY_EXCLUDE, file, rs->line, "'%s' is not a decimal number (labels are written "
                "like 0.5 or 1e-3)", s);
            return DS_NOT_NUMBER;
        }
        v[i] = (float)x;
    }
    if (v[0] != floorf(v[0])) {
        say(&c->r, SAY_EXCLUDE, file, rs->line, "class '%s' is not an integer", t->tok[rs->first]);
        return DS_BAD_CLASS;
    }
    if (v[0] < 0 || v[0] >= (float)c->nc) {
        say(&c->r, SAY_EXCLUDE, file, rs->line, "class %s is outside 0..%d (nc = %d, from %s)",
            t->tok[rs->first], c->nc - 1, c->nc, c->nc_from);
        return DS_BAD_CLASS;
    }
    return -1;
}

static const char *coord_name(int i, int polygons, char *buf, size_t n) {
    static const char *const box[] = {"cx", "cy", "w", "h"};
    if (!polygons) return box[i];
    snprintf(buf, n, "%c%d", i % 2 ? 'y' : 'x', i / 2 + 1);
    return buf;
}

// Coordinates v[1..n) within [0,1] up to the tolerance, then clipped; -1 or DS_OUT_OF_BOUNDS.
static int row_bounds(Checker *c, const char *file, const RowSpan *rs, int polygons, float *v) {
    int clipped = 0;
    for (int i = 1; i < rs->nf; i++) {
        if (v[i] < -COORD_TOL || v[i] > 1 + COORD_TOL) {
            char name[16];
            say(&c->r, SAY_EXCLUDE, file, rs->line, "%s = %g is outside [0, 1] (by more than the %g "
                "tolerance)", coord_name(i - 1, polygons, name, sizeof name), v[i], COORD_TOL);
            return DS_OUT_OF_BOUNDS;
        }
        if (v[i] < 0 || v[i] > 1) { v[i] = fminf(fmaxf(v[i], 0), 1); clipped = 1; }
    }
    if (clipped)
        say(&c->r, SAY_WARN, file, rs->line, "values up to %g outside [0, 1] clipped", COORD_TOL);
    return -1;
}

// segments2boxes: a polygon's bounding box as cx cy w h, in float32 like the reference.
static void polygon_box(const float *xy, int n_pts, float *box) {
    float x1 = xy[0], y1 = xy[1], x2 = xy[0], y2 = xy[1];
    for (int i = 1; i < n_pts; i++) {
        x1 = fminf(x1, xy[2 * i]); x2 = fmaxf(x2, xy[2 * i]);
        y1 = fminf(y1, xy[2 * i + 1]); y2 = fmaxf(y2, xy[2 * i + 1]);
    }
    box[0] = (x1 + x2) / 2; box[1] = (y1 + y2) / 2; box[2] = x2 - x1; box[3] = y2 - y1;
}

#define ROW_DROPPED (-2)   // a row left out on its own (a zero-size box): the image stays

// One row into out; -1 when good, ROW_DROPPED, else the reason (already reported).
static int row_parse(Checker *c, const char *file, const LabelText *t, const RowSpan *rs,
                     int polygons, Row *out) {
    if (!row_count_ok(c, file, rs, polygons)) return DS_BAD_COUNT;
    float *v = xmalloc((size_t)rs->nf * sizeof *v);
    int reason = row_numbers(c, file, t, rs, v);
    if (reason < 0) reason = row_bounds(c, file, rs, polygons, v);
    if (reason < 0) {
        out->v[0] = v[0];
        out->line = rs->line;
        if (polygons) polygon_box(v + 1, (rs->nf - 1) / 2, out->v + 1);
        else memcpy(out->v + 1, v + 1, 4 * sizeof *v);
        if (out->v[3] <= 0 || out->v[4] <= 0) {   // the reference's box_candidates drops it later
            say(&c->r, SAY_WARN, file, rs->line, "zero-size box (w = %g, h = %g): the box is dropped, "
                "the image kept", out->v[3], out->v[4]);
            reason = ROW_DROPPED;
        }
    }
    free(v);
    return reason;
}

static int row_cmp(const void *a, const void *b) {   // np.unique(axis=0) order, then line
    const Row *x = a, *y = b;
    for (int i = 0; i < 5; i++)
        if (x->v[i] != y->v[i]) return x->v[i] < y->v[i] ? -1 : 1;
    return (x->line > y->line) - (x->line < y->line);
}

// Files with duplicate rows become their unique rows in sorted order (YOLOv9's np.unique); others
// keep their order. Returns the new row count.
static int rows_dedupe(Checker *c, const char *file, Row *rows, int n, int *n_dup) {
    Row *sorted = xmalloc((size_t)(n ? n : 1) * sizeof *sorted);
    memcpy(sorted, rows, (size_t)n * sizeof *rows);
    qsort(sorted, (size_t)n, sizeof *sorted, row_cmp);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && !memcmp(sorted[m - 1].v, sorted[i].v, sizeof sorted[i].v)) {
            say(&c->r, SAY_WARN, file, sorted[i].line, "duplicate of line %d; dropped",
                sorted[m - 1].line);
            (*n_dup)++;
        } else {
            sorted[m++] = sorted[i];
        }
    }
    if (m < n) memcpy(rows, sorted, (size_t)m * sizeof *rows);
    free(sorted);
    return m;
}

// Read and check a label file into s->box; -1 when usable (missing or empty: no boxes), else the
// first reason; every bad row is reported.
static int labels_load(Checker *c, const char *file, Sample *s, int *n_dup, int *n_zero) {
    LabelText t;
    Err e;
    int rc = label_text_read(file, &t, &e);
    if (rc != 0) {
        if (rc < 0) say(&c->r, SAY_EXCLUDE, file, -1, "%s", e.msg);
        label_text_free(&t);
        return rc < 0 ? DS_BAD_LABEL_FILE : -1;
    }
    int polygons = 0;
    for (int i = 0; i < t.n_row; i++) polygons |= t.row[i].nf > 6;
    Row *rows = xmalloc((size_t)(t.n_row ? t.n_row : 1) * sizeof *rows);
    int first = -1, n = 0;
    for (int i = 0; i < t.n_row; i++) {
        int reason = row_parse(c, file, &t, &t.row[i], polygons, &rows[n]);
        if (reason >= 0 && first < 0) first = reason;
        if (reason == ROW_DROPPED) (*n_zero)++;
        else if (reason < 0) n++;
    }
    if (first < 0) {
        c->n_polygons += polygons;
        n = rows_dedupe(c, file, rows, n, n_dup);
        s->nbox = n;
        s->box = xmalloc((size_t)(n ? n : 1) * sizeof *s->box);
        for (int i = 0; i < n; i++)
            s->box[i] = (Box){(int)rows[i].v[0], rows[i].v[1], rows[i].v[2], rows[i].v[3], rows[i].v[4]};
    }
    free(rows);
    label_text_free(&t);
    return first;
}

// ---- boxes of COCO and VOC files -----------------------------------------------------------------
// One box as a label row (class cx cy w h normalised by the size W x H, as the references' converters
// write it), checked as a label row is; -1 when good, ROW_DROPPED, else the reason (reported).
static int ann_box(Checker *c, const AnnImage *a, const AnnBox *b, double W, double H, Row *out) {
    if (b->why) {
        say(&c->r, SAY_EXCLUDE, a->file, b->line, "%s %.0f: %s", b->kind, b->id, b->why);
        return b->reason;
    }
    if (b->cls >= c->nc) {
        say(&c->r, SAY_EXCLUDE, a->file, b->line, "%s %.0f: class %d is outside 0..%d (nc = %d, from %s)", b->kind,
            b->id, b->cls, c->nc - 1, c->nc, c->nc_from);
        return DS_BAD_CLASS;
    }
    double v[4] = {(b->x1 + b->x2) / 2 / W, (b->y1 + b->y2) / 2 / H, (b->x2 - b->x1) / W, (b->y2 - b->y1) / H};
    if (!(v[2] > 0 && v[3] > 0)) {   // the converters skip a box of no (or negative) width or height
        say(&c->r, SAY_WARN, a->file, b->line, "%s %.0f: zero-size box (w = %g, h = %g pixels): the box is dropped, the "
            "image kept", b->kind, b->id, b->x2 - b->x1, b->y2 - b->y1);
        return ROW_DROPPED;
    }
    int clipped = 0;
    for (int i = 0; i < 4; i++) {
        static const char *const name[4] = {"cx", "cy", "w", "h"};
        if (!(v[i] >= -COORD_TOL && v[i] <= 1 + COORD_TOL)) {
            say(&c->r, SAY_EXCLUDE, a->file, b->line, "%s %.0f: box x1 y1 x2 y2 = %g %g %g %g pixels: %s = %g is "
                "outside [0, 1] of the %gx%g image (by more than the %g tolerance)", b->kind, b->id, b->x1, b->y1, b->x2,
                b->y2, name[i], v[i], W, H, COORD_TOL);
            return DS_OUT_OF_BOUNDS;
        }
        if (v[i] < 0 || v[i] > 1) { v[i] = fmin(fmax(v[i], 0), 1); clipped = 1; }
    }
    if (clipped)
        say(&c->r, SAY_WARN, a->file, b->line, "%s %.0f: values up to %g outside [0, 1] clipped", b->kind, b->id, COORD_TOL);
    out->v[0] = (float)b->cls;
    for (int i = 0; i < 4; i++) out->v[1 + i] = (float)v[i];
    out->line = b->line;
    if (out->v[3] <= 0 || out->v[4] <= 0) {
        say(&c->r, SAY_WARN, a->file, b->line, "%s %.0f: zero-size box (w = %g, h = %g): the box is dropped, the image "
            "kept", b->kind, b->id, out->v[3], out->v[4]);
        return ROW_DROPPED;
    }
    return -1;
}

// The boxes of an annotated image into s->box, as labels_load reads a label file: -1 when usable, else
// the first reason; every bad box is reported. Sizes: the file's (as the converters scale), else the image's.
static int ann_load(Checker *c, const AnnImage *a, Sample *s, int *n_dup, int *n_zero) {
    if (a->w > 0 && (a->w != s->w || a->h != s->h))
        say(&c->r, SAY_WARN, a->file, a->line, "%s is %dx%d, the file says %dx%d; its boxes are scaled by the file's "
            "size, as the references' converters do", s->image, s->w, s->h, a->w, a->h);
    double W = a->w > 0 ? a->w : s->w, H = a->h > 0 ? a->h : s->h;
    Row *rows = xmalloc((size_t)(a->nbox ? a->nbox : 1) * sizeof *rows);
    int first = -1, n = 0;
    for (int j = 0; j < a->nbox; j++) {
        int reason = ann_box(c, a, &a->box[j], W, H, &rows[n]);
        if (reason >= 0 && first < 0) first = reason;
        if (reason == ROW_DROPPED) (*n_zero)++;
        else if (reason < 0) n++;
    }
    if (first < 0) {
        n = rows_dedupe(c, a->file, rows, n, n_dup);
        s->nbox = n;
        s->box = xmalloc((size_t)(n ? n : 1) * sizeof *s->box);
        for (int i = 0; i < n; i++)
            s->box[i] = (Box){(int)rows[i].v[0], rows[i].v[1], rows[i].v[2], rows[i].v[3], rows[i].v[4]};
    }
    free(rows);
    return first;
}

// ---- images ------------------------------------------------------------------------------------
// A JPEG whose last bytes are not the FFD9 end marker was cut short; the reference re-saves such a
// file in place, we never write into a dataset (users.md E2), so it is only a warning.
static int jpeg_truncated(const char *path) {
    FILE *f = rf_fopen(path, "image", NULL);
    if (!f) return 0;
    unsigned char head[2] = {0}, tail[2] = {0};
    int jpeg = fread(head, 1, 2, f) == 2 && head[0] == 0xFF && head[1] == 0xD8;
    int ok = !jpeg || (fseek(f, -2, SEEK_END) == 0 && fread(tail, 1, 2, f) == 2 &&
                       tail[0] == 0xFF && tail[1] == 0xD9);
    fclose(f);
    return !ok;
}

// A PNG with no IEND chunk in its last 4 KB was cut short: libpng's decoder rejects it (it reads up
// to IEND), so it is excluded now rather than failing in the loader. The slack allows trailing bytes.
static int png_truncated(const char *path) {
    static const unsigned char iend[8] = {'I', 'E', 'N', 'D', 0xAE, 0x42, 0x60, 0x82};   // type, CRC
    FILE *f = rf_fopen(path, "image", NULL);
    if (!f) return 0;
    unsigned char head[4] = {0}, tail[4096];
    int png = fread(head, 1, 4, f) == 4 && !memcmp(head, "\x89PNG", 4);
    if (png && fseek(f, -(long)sizeof tail, SEEK_END) != 0) rewind(f);   // under 4 KB: all of it
    size_t n = png ? fread(tail, 1, sizeof tail, f) : 0;
    fclose(f);
    return png && !memmem(tail, n, iend, sizeof iend);
}

// An image.c error, which starts with "path: ", reported as an exclusion (say() names the path itself).
static void say_image_error(Checker *c, const char *path, const char *msg) {
    size_t n = strlen(path);
    int named = !strncmp(msg, path, n) && !strncmp(msg + n, ": ", 2);
    say(&c->r, SAY_EXCLUDE, path, 0, "%s", named ? msg + n + 2 : msg);
}

// The decoder's verdict on the whole file: a header can be whole while the pixel data behind it is
// damaged (a PNG chunk's CRC, a cut zlib stream, a bad filter byte). -1 when it decodes, else reported.
static int image_decodes(Checker *c, const char *path) {
    if (!c->decode_err[c->i]) return -1;
    say_image_error(c, path, c->decode_err[c->i]);
    return DS_BAD_IMAGE;
}

typedef struct { char *const *paths; char **err; int n, next; pthread_mutex_t lock; } DecodeAll;

static void *decode_worker(void *arg) {
    DecodeAll *d = arg;
    for (;;) {
        pthread_mutex_lock(&d->lock);
        int i = d->next++;
        pthread_mutex_unlock(&d->lock);
        if (i >= d->n) return NULL;
        Image im;
        Err e = {{0}};
        if (!ext_in(d->paths[i], decoded_exts)) continue;        // image_check excludes it by name
        if (image_load(d->paths[i], &im, &e) == 0) image_free(&im);
        else d->err[i] = xstrdup(e.msg);
    }
}

// Every image of paths[0..n) decoded on all cores (a COCO-sized split takes minutes on one); the
// verdicts are reported in list order as the split is checked. Returns the (n) messages, NULL = decodes.
static char **decode_all(char *const *paths, int n) {
    DecodeAll d = {.paths = paths, .err = xcalloc((size_t)n + 1, sizeof(char *)), .n = n};
    pthread_mutex_init(&d.lock, NULL);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = cores < 1 ? 1 : cores > 32 ? 32 : (int)cores, started = 0;
    pthread_t th[32];
    for (int k = 0; k < nt && k < n; k++) started += pthread_create(&th[started], NULL, decode_worker, &d) == 0;
    if (!started) decode_worker(&d);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    pthread_mutex_destroy(&d.lock);
    return d.err;
}

// Size and colour components from the header, and with c->decode the pixels; -1 when usable, else the
// reason (reported).
static int image_check(Checker *c, const char *path, Sample *s) {
    if (!ext_in(path, decoded_exts)) {
        say(&c->r, SAY_EXCLUDE, path, 0, "unsupported format .%s: only JPEG and PNG are decoded; "
            "convert it", path_ext(path));
        return DS_UNSUPPORTED;
    }
    Err e = {{0}};
    ImageInfo info;
    if (image_info(path, &info, &e) != 0) {
        say_image_error(c, path, e.msg);
        return DS_BAD_IMAGE;
    }
    s->w = info.w;
    s->h = info.h;
    s->channels = info.channels;
    if (s->w < MIN_IMAGE_SIDE || s->h < MIN_IMAGE_SIDE) {
        say(&c->r, SAY_EXCLUDE, path, 0, "image is %dx%d; images under %d pixels a side are not used",
            s->w, s->h, MIN_IMAGE_SIDE);
        return DS_BAD_IMAGE;
    }
    if (png_truncated(path)) {
        say(&c->r, SAY_EXCLUDE, path, 0, "PNG without its IEND end chunk (truncated); re-export or "
            "remove it");
        return DS_BAD_IMAGE;
    }
    if (c->decode && image_decodes(c, path) >= 0) return DS_BAD_IMAGE;
    if (jpeg_truncated(path))
        say(&c->r, SAY_WARN, path, 0, "JPEG without its end marker (truncated?); used as it is");
    return -1;
}

// ---- dataset_open --------------------------------------------------------------------------------
static void dataset_push(Dataset *ds, const Sample *s) {
    if ((ds->n & (ds->n - 1)) == 0)        // capacity doubles at powers of two
        ds->s = xrealloc(ds->s, (size_t)(ds->n ? 2 * ds->n : 1) * sizeof *ds->s);
    ds->s[ds->n++] = *s;
}

// Validate one image and its labels; keep it in ds or count why not.
static void validate_image(Checker *c, const char *path, int min_items, Dataset *ds) {
    const AnnImage *a = c->ann->n ? annset_find(c->ann, path) : NULL;
    Sample s = {.image = xstrdup(path), .label = a ? xstrdup(a->file) : label_path(path), .has_id = a && a->has_id,
                .id = a ? a->id : 0};
    int reason = -1;
    if (a && a->problem) say(&c->r, SAY_EXCLUDE, a->file, -1, "%s", a->problem), reason = a->reason;
    if (reason < 0) reason = image_check(c, path, &s);
    if (reason < 0 && a) reason = ann_load(c, a, &s, &ds->n_duplicates, &ds->n_zero_boxes);
    else if (reason < 0) reason = labels_load(c, s.label, &s, &ds->n_duplicates, &ds->n_zero_boxes);
    if (reason < 0 && s.nbox < min_items) reason = DS_MIN_ITEMS;
    if (reason >= 0) {
        ds->excluded_by[reason]++;
        ds->n_excluded++;
        free(s.image); free(s.label); free(s.box);
        return;
    }
    dataset_push(ds, &s);
}

// Label files in the labels folder of every listed image folder that belong to no listed image.
static void orphans_report(Checker *c, const Lister *L, Dataset *ds) {
    StrList labels = {0}, dirs = {0};
    for (int i = 0; i < L->images.n; i++) strlist_push(&labels, label_path(L->images.v[i]));
    strlist_sort(&labels);
    for (int i = 0; i < L->folders.n; i++) {
        char *probe = str_fmt("%s/x.jpg", L->folders.v[i]);
        char *lab = label_path(probe);
        strlist_push(&dirs, path_dir(lab));
        free(probe); free(lab);
    }
    strlist_sort(&dirs);
    StrList orphans = {0};
    for (int i = 0; i < dirs.n; i++) {
        DIR *dp = (i > 0 && !strcmp(dirs.v[i], dirs.v[i - 1])) ? NULL : opendir(dirs.v[i]);
        for (struct dirent *e; dp && (e = readdir(dp)); ) {
            size_t len = strlen(e->d_name);
            if (e->d_name[0] == '.' || len < 5 || strcmp(e->d_name + len - 4, ".txt")) continue;
            char *path = path_join(dirs.v[i], e->d_name);
            if (strlist_has(&labels, path)) free(path);
            else strlist_push(&orphans, path);
        }
        if (dp) closedir(dp);
    }
    strlist_sort(&orphans);
    for (int i = 0; i < orphans.n; i++)
        say(&c->r, SAY_NOTE, orphans.v[i], 0, "label file without an image; ignored");
    ds->n_orphan_labels = orphans.n;
    strlist_free(&orphans);
    strlist_free(&labels);
    strlist_free(&dirs);
}

static void dataset_count(Dataset *ds) {
    ds->class_count = xcalloc((size_t)ds->nc, sizeof *ds->class_count);
    for (int i = 0; i < ds->n; i++) {
        const Sample *s = &ds->s[i];
        ds->n_background += s->nbox == 0;
        ds->n_gray += s->channels == 1;
        ds->n_instances += s->nbox;
        for (int j = 0; j < s->nbox; j++) ds->class_count[s->box[j].cls]++;
    }
}

static void summary_print(const Dataset *ds, const char *split, int min_items, FILE *f) {
    if (ds->excluded_by[DS_MIN_ITEMS])
        fprintf(f, "%s: %d/%d images filtered from dataset (fewer than min_items = %d labels)\n", split,
                ds->excluded_by[DS_MIN_ITEMS], ds->n_listed, min_items);
    fprintf(f, "%s: images %d, backgrounds %d, instances %d; excluded %d, warnings %d, label files "
            "without an image %d", split, ds->n, ds->n_background, ds->n_instances, ds->n_excluded,
            ds->n_warnings, ds->n_orphan_labels);
    if (ds->n_zero_boxes) fprintf(f, ", zero-size boxes dropped %d", ds->n_zero_boxes);
    fprintf(f, "\n");
}

// copy_paste pastes polygon objects (yolov9's and Ultralytics' copy_paste need segments); polygons are
// read here as their boxes, so on polygon labels the key does nothing: said rather than ignored.
static void copy_paste_note(const Config *cfg, int n_polygons, FILE *f) {
    if (!cfg || cfg->hyp.copy_paste <= 0 || !n_polygons) return;
    fprintf(f, "note: copy_paste = %g has no effect: %d label files of train hold polygons, which yolotrain "
            "reads as their boxes and never pastes (yolov9 does); copy_paste = 0 silences this and trains "
            "the same\n", cfg->hyp.copy_paste, n_polygons);
}

// Failing outcomes once everything is reported: strict exclusions, nothing usable, no labels to train.
static int dataset_verdict(const Dataset *ds, const Checker *c, const char *split, int strict,
                           const DataSpec *d, Err *err) {
    int fatal = ds->n_excluded - ds->excluded_by[DS_MIN_ITEMS];
    if (strict && fatal > 0)
        return err_set(err, "%s: %d image%s excluded and strict = 1; the first: %s (fix the data or "
                       "set strict = 0)", split, fatal, fatal == 1 ? "" : "s", c->r.first);
    if (ds->n == 0)
        return err_set(err, "%s: none of the %d images is usable (see the problems reported above; "
                       "dataset %s)", split, ds->n_listed, d->file);
    if (!strcmp(split, "train") && ds->n_instances == 0)
        return err_set(err, "train: no labels in %d images; training needs labelled images (dataset %s)",
                       ds->n, d->file);
    return 0;
}

static void dataset_names(Dataset *ds, const DataSpec *d, int nc) {
    ds->nc = nc;
    ds->names = xcalloc((size_t)nc, sizeof *ds->names);
    for (int i = 0; i < nc; i++)
        ds->names[i] = i < d->nc ? xstrdup(d->names[i]) : str_fmt("class_%d", i);
}

// single_cls: train.py's `names = {0: 'item'} if single_cls and len(names) != 1`, every class 0
// (LoadImagesAndLabels: labels[i][:, 0] = 0), after the labels were checked against the data's names
static void dataset_single_cls(Dataset *ds) {
    for (int i = 0; i < ds->n; i++)
        for (int j = 0; j < ds->s[i].nbox; j++) ds->s[i].box[j].cls = 0;
    if (ds->nc != 1) {
        for (int i = 0; i < ds->nc; i++) free(ds->names[i]);
        ds->names = xrealloc(ds->names, sizeof *ds->names);
        ds->names[0] = xstrdup("item");
        ds->nc = 1;
    }
}

// fraction: how many of the n sorted images Ultralytics keeps (im_files[: round(n * fraction)]); -1 when none
static int fraction_keep(int n, double fraction, const char *split, Err *err) {
    if (!(fraction > 0 && fraction < 1)) return n;
    int keep = (int)nearbyint(n * fraction);           // the default rounding mode: half to even, as round()
    if (keep <= 0)
        return err_set(err, "%s: fraction=%g keeps none of the %d images; raise fraction (1.0: all)", split,
                       fraction, n);
    return keep;
}

int dataset_open(const char *yaml, const Config *cfg, const char *split,
                 const DatasetOptions *opt, Dataset *out, Err *err) {
    static const DatasetOptions defaults = {0};
    if (!opt) opt = &defaults;
    memset(out, 0, sizeof *out);
    int k = dataset_split_index(split);
    if (k < 0) return err_set(err, "unknown split '%s': use train, val or test", split);
    DataSpec d;
    if (dataspec_read(yaml, cfg, &d, err) != 0) return -1;
    if (!d.at[k].line) {
        err_set(err, "%s: no '%s' key: add %s: FOLDER (or a .txt list of images)", d.file, split, split);
        dataspec_free(&d);
        return -1;
    }
    int model_nc = opt->nc > 0 && !opt->single_cls;   // single_cls: the data's names check the labels
    Checker c = {.r = {.f = opt->report ? opt->report : stderr},
                 .nc = model_nc ? opt->nc : d.nc, .nc_from = model_nc ? "the model" : d.file,
                 .decode = opt->decode || opt->strict};
    static char noted[CFG_PATH];                   // the description whose download: was reported last
    if (d.download_note && strcmp(noted, d.file)) {
        fprintf(c.r.f, "%s\n", d.download_note);
        snprintf(noted, sizeof noted, "%s", d.file);
    }
    Lister L = {.r = &c.r};
    c.ann = &L.ann;
    int rc = split_list(&d, k, &L, err), keep = 0;
    if (rc == 0 && (keep = fraction_keep(L.images.n, opt->fraction, split, err)) < 0) rc = -1;
    if (rc == 0) {
        dataset_names(out, &d, c.nc);
        out->n_listed = keep;
        if (keep < L.images.n && !opt->quiet)
            fprintf(c.r.f, "%s: fraction=%g: the first %d of %d images\n", split, opt->fraction, keep, L.images.n);
        if (c.decode) c.decode_err = decode_all(L.images.v, keep);
        for (c.i = 0; c.i < keep; c.i++) validate_image(&c, L.images.v[c.i], opt->min_items, out);
        for (int i = 0; c.decode_err && i < keep; i++) free(c.decode_err[i]);
        free(c.decode_err);
        orphans_report(&c, &L, out);           // over the whole list: the images left out have their labels
        out->n_warnings = c.r.n_warnings;
        if (opt->single_cls) dataset_single_cls(out);
        if (L.ann.category_id && L.ann.n_cat == out->nc && !opt->single_cls) {   // the classes are the categories
            out->category_id = L.ann.category_id;
            L.ann.category_id = NULL;
        }
        dataset_count(out);
        if (!opt->quiet) summary_print(out, split, opt->min_items, c.r.f);
        if (k == DS_TRAIN) copy_paste_note(cfg, c.n_polygons, c.r.f);
        rc = dataset_verdict(out, &c, split, opt->strict, &d, err);
        if (rc != 0) dataset_free(out);
    }
    strlist_free(&L.images);
    strlist_free(&L.folders);
    annset_free(&L.ann);
    free(L.seen);
    dataspec_free(&d);
    return rc;
}

void dataset_free(Dataset *ds) {
    for (int i = 0; i < ds->n; i++) {
        free(ds->s[i].image); free(ds->s[i].label); free(ds->s[i].box);
    }
    free(ds->s);
    for (int i = 0; ds->names && i < ds->nc; i++) free(ds->names[i]);
    free(ds->names);
    free(ds->class_count);
    free(ds->category_id);
    memset(ds, 0, sizeof *ds);
}
