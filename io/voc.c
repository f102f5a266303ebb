// voc.c: a Pascal VOC tree as a dataset split (annot.h): ROOT/Annotations/ID.xml describes
// ROOT/JPEGImages/ID.jpg; the split's ids come from ROOT/ImageSets/Main/<split>.txt (or the image set
// named), else from every XML file of Annotations/. Boxes are read as Ultralytics' VOC.yaml converts
// them (the centre moved by -1 pixel: VOC counts pixels from 1; objects marked difficult skipped).
#include "io/annot.h"
#include "io/dataset.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/readfile.h"
#include "io/xml.h"

// The root of a source (a VOC root, or ROOT/ImageSets/Main/x.txt) and the image set file, if any.
static void voc_paths(const char *src, const char *split, char **root, char **set) {
    struct stat st;
    if (!stat(src, &st) && S_ISDIR(st.st_mode)) {
        *root = xstrdup(src);
        *set = str_fmt("%s/ImageSets/Main/%s.txt", src, split);
        if (stat(*set, &st) != 0) { free(*set); *set = NULL; }
        return;
    }
    char *main = path_dir(src), *sets = path_dir(main);
    *root = path_dir(sets);
    *set = xstrdup(src);
    free(main); free(sets);
}

typedef struct { char *id; int line; } VocId;

// The ids of the split: the image set's lines (first word of each), else the XML files' stems, sorted.
static int voc_ids(const char *root, const char *set, VocId **ids, int *n, Err *err) {
    *ids = NULL;
    *n = 0;
    if (set) {
        TextFile t;
        if (rf_text_read(set, "VOC image set", &t, err)) return -1;
        size_t pos = 0, len;
        const char *s;
        for (int line = 1; rf_text_line(&t, &pos, &s, &len); line++) {
            size_t a = 0, b;
            while (a < len && (s[a] == ' ' || s[a] == '\t')) a++;
            for (b = a; b < len && s[b] != ' ' && s[b] != '\t'; b++) {}
            if (a == b) continue;
            *ids = xrealloc(*ids, (size_t)(*n + 1) * sizeof **ids);
            (*ids)[(*n)++] = (VocId){strndup(s + a, b - a), line};
        }
        rf_text_free(&t);
        return 0;
    }
    char *dir = path_join(root, "Annotations");
    DIR *dp = opendir(dir);
    if (!dp) { int rc = err_set(err, "%s: cannot read folder: %s", dir, strerror(errno)); free(dir); return rc; }
    StrList stems = {0};
    for (struct dirent *e; (e = readdir(dp)); ) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] != '.' && len > 4 && !strcmp(e->d_name + len - 4, ".xml"))
            strlist_push(&stems, strndup(e->d_name, len - 4));
    }
    closedir(dp);
    free(dir);
    strlist_sort(&stems);
    *ids = xcalloc((size_t)stems.n + 1, sizeof **ids);
    for (int i = 0; i < stems.n; i++) (*ids)[i] = (VocId){stems.v[i], 0};
    *n = stems.n;
    free(stems.v);
    return 0;
}

static void ids_free(VocId *ids, int n) {
    for (int i = 0; i < n; i++) free(ids[i].id);
    free(ids);
}

// An element's text as a number (VOC writes pixels as integers or decimals). 0, or -1.
static int xml_number(const XmlNode *n, double *v) {
    if (!n || !n->text[0]) return -1;
    char *end;
    *v = strtod(n->text, &end);
    return *end || !isfinite(*v) || n->text[0] == 'i' || n->text[0] == 'n' ? -1 : 0;
}

static int name_index(char *const *names, int nc, const char *name) {
    for (int i = 0; i < nc; i++)
        if (!strcmp(names[i], name)) return i;
    return -1;
}

// One <object>: its class by name, its <bndbox> corners. 1 when kept, 0 when skipped (difficult).
static int voc_object(const XmlNode *o, int k, char *const *names, int nc, AnnBox *b) {
    const XmlNode *name = xml_child(o, "name"), *diff = xml_child(o, "difficult"), *bb = xml_child(o, "bndbox");
    double d = 0, v[4];
    b->line = o->line;
    b->reason = -1;
    b->kind = "object";
    b->id = k;
    if (diff && xml_number(diff, &d) == 0 && d == 1) return 0;
    static const char *const corner[4] = {"xmin", "ymin", "xmax", "ymax"};
    if (!name || !name->text[0]) {
        b->reason = DS_BAD_CLASS;
        b->why = xstrdup("no <name>");
    } else if ((b->cls = name_index(names, nc, name->text)) < 0) {
        b->reason = DS_BAD_CLASS;
        b->why = str_fmt("class '%.100s' is not among the dataset's %d names; add it to names: in data.yaml (or drop "
                         "names to take the VOC files' classes)", name->text, nc);
    } else if (!bb) {
        b->reason = DS_BAD_COUNT;
        b->why = str_fmt("%.100s: no <bndbox>", name->text);
    }
    for (int i = 0; i < 4 && !b->why; i++)
        if (xml_number(bb ? xml_child(bb, corner[i]) : NULL, &v[i])) {
            const XmlNode *c = xml_child(bb, corner[i]);
            b->reason = c ? DS_NOT_NUMBER : DS_BAD_COUNT;
            b->why = c ? str_fmt("%.100s: %s '%.40s' is not a number", name->text, corner[i], c->text)
                       : str_fmt("%.100s: <bndbox> has no <%s>", name->text, corner[i]);
        }
    if (!b->why) {   // Ultralytics' convert_box: centre ((xmin + xmax) / 2 - 1), size xmax - xmin
        b->x1 = v[0] - 1; b->y1 = v[1] - 1;
        b->x2 = v[2] - 1; b->y2 = v[3] - 1;
    }
    return 1;
}

// The parsed XML of one id; -1 with a problem message when it cannot be read.
static int voc_xml(const char *path, XmlNode *root, char **problem) {
    TextFile t;
    Err e;
    if (rf_text_read(path, "VOC annotation", &t, &e)) { *problem = xstrdup(e.msg); return -1; }
    int rc = xml_parse(path, t.buf, t.n, root, &e);
    rf_text_free(&t);
    if (!rc && strcmp(root->name, "annotation")) {
        xml_free(root);
        e = (Err){{0}};
        err_set(&e, "%s:1: the root element is <%s>; a VOC file's is <annotation>", path, root->name ? root->name : "?");
        rc = -1;
    }
    if (rc) *problem = xstrdup(e.msg);
    return rc;
}

// JPEGImages/ID.jpg, else JPEGImages/<filename> of the XML.
static char *voc_image(const char *root, const char *id, const XmlNode *x) {
    struct stat st;
    char *p = str_fmt("%s/JPEGImages/%s.jpg", root, id);
    const XmlNode *fn = x ? xml_child(x, "filename") : NULL;
    if (stat(p, &st) == 0 || !fn || !fn->text[0] || strchr(fn->text, '/')) return p;
    char *q = str_fmt("%s/JPEGImages/%s", root, fn->text);
    if (stat(q, &st) == 0) { free(p); return q; }
    free(q);
    return p;
}

static void voc_entry(const char *root, const VocId *id, const char *set, char *const *names, int nc, AnnSet *out,
                      int *n_difficult) {
    AnnImage *a = annset_push(out);
    char *xml = str_fmt("%s/Annotations/%s.xml", root, id->id);
    XmlNode x = {0};
    int ok = voc_xml(xml, &x, &a->problem) == 0;
    a->image = voc_image(root, id->id, ok ? &x : NULL);
    a->file = xml;
    a->line = ok ? x.line : 0;
    if (!ok) {
        a->reason = DS_BAD_LABEL_FILE;
        if (set && access(xml, F_OK) != 0) {
            free(a->problem);
            a->problem = str_fmt("%s:%d: '%s' has no annotation file %s", set, id->line, id->id, xml);
        }
        return;
    }
    const XmlNode *size = xml_child(&x, "size");
    double w = 0, h = 0;
    if (size && !xml_number(xml_child(size, "width"), &w) && !xml_number(xml_child(size, "height"), &h) &&
        w >= 1 && h >= 1 && w < 1e6 && h < 1e6)
        a->w = (int)w, a->h = (int)h;
    a->box = xcalloc((size_t)x.n_child + 1, sizeof *a->box);
    for (int i = 0, k = 0; i < x.n_child; i++) {
        if (strcmp(x.child[i].name, "object")) continue;
        if (voc_object(&x.child[i], ++k, names, nc, &a->box[a->nbox])) a->nbox++;
        else (*n_difficult)++;
    }
    xml_free(&x);
}

int voc_read(const char *src, const char *split, char *const *names, int nc, AnnSet *out, Err *err) {
    char *root, *set;
    voc_paths(src, split, &root, &set);
    char *jpeg = path_join(root, "JPEGImages");
    struct stat st;
    int rc = stat(jpeg, &st) || !S_ISDIR(st.st_mode)
           ? err_set(err, "%s: a VOC root (it holds Annotations/) without JPEGImages/", root) : 0;
    VocId *ids = NULL;
    int n = 0, n_difficult = 0;
    if (!rc) rc = voc_ids(root, set, &ids, &n, err);
    for (int i = 0; !rc && i < n; i++) voc_entry(root, &ids[i], set, names, nc, out, &n_difficult);
    if (n_difficult)
        strlist_push(&out->notes, str_fmt("%s: %d object%s marked difficult skipped, as Ultralytics' VOC.yaml "
                                          "converts VOC", set ? set : root, n_difficult, n_difficult == 1 ? "" : "s"));
    ids_free(ids, n);
    free(jpeg); free(root); free(set);
    return rc;
}

int voc_names(const char *src, const char *split, StrList *names, Err *err) {
    char *root, *set;
    voc_paths(src, split, &root, &set);
    VocId *ids = NULL;
    int n = 0;
    StrList all = {0};
    int rc = voc_ids(root, set, &ids, &n, err);
    for (int i = 0; !rc && i < n; i++) {
        char *xml = str_fmt("%s/Annotations/%s.xml", root, ids[i].id), *problem = NULL;
        XmlNode x;
        if (voc_xml(xml, &x, &problem) == 0) {
            for (int j = 0; j < x.n_child; j++) {
                const XmlNode *nm = strcmp(x.child[j].name, "object") ? NULL : xml_child(&x.child[j], "name");
                if (nm && nm->text[0]) strlist_push(&all, xstrdup(nm->text));
            }
            xml_free(&x);
        }
        free(problem);
        free(xml);
    }
    strlist_sort(&all);
    for (int i = 0; i < all.n; i++)
        if (!names->n || strcmp(names->v[names->n - 1], all.v[i])) strlist_push(names, xstrdup(all.v[i]));
    strlist_free(&all);
    ids_free(ids, n);
    free(root); free(set);
    return rc;
}
