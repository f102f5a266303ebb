// coco.c: a COCO instances .json as a dataset split (annot.h). The file is read once with the JSON
// cursor (io/json.c), keeping of each image its id, file_name and size, of each category its id and
// name, of each annotation its image, category, bbox and iscrowd; then the boxes are grouped by image.
#include "io/annot.h"
#include "io/dataset.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/json.h"

typedef struct { double id; char *file_name; double w, h; int line; } CocoImage;
typedef struct { double id; char *name, *super; int line; } CocoCat;
typedef struct {
    double image_id, category_id, b[4], id;
    int    has_image, has_cat, has_id, nb, crowd, line;
    int    reason;                 // -1, or why the bbox is unusable (DS_BAD_COUNT, DS_NOT_NUMBER)
} CocoAnn;

typedef struct {
    CocoImage *im;  int n_im;
    CocoCat   *cat; int n_cat;
    CocoAnn   *ann; int n_ann;
} Coco;

static void coco_free(Coco *k) {
    for (int i = 0; i < k->n_im; i++) free(k->im[i].file_name);
    for (int i = 0; i < k->n_cat; i++) free(k->cat[i].name), free(k->cat[i].super);
    free(k->im); free(k->cat); free(k->ann);
    memset(k, 0, sizeof *k);
}

#define GROW(p, n) ((n) & ((n) - 1) ? (p) : xrealloc((p), (size_t)((n) ? 2 * (n) : 1) * sizeof *(p)))

// An id or a size: a number with no fraction.
static int json_whole(JsonCur *c, const char *what, double *v) {
    if (json_number(c, v)) return -1;
    if (*v != floor(*v) || fabs(*v) > 9e15) return json_fail(c, "%s: %.17g is not a whole number", what, *v);
    return 0;
}

static int read_image(JsonCur *c, CocoImage *im) {
    char key[32];
    int has_id = 0;
    im->line = c->line;
    if (json_object(c)) return -1;
    for (int r; (r = json_key(c, key, sizeof key)) != 0; ) {
        if (r < 0) return -1;
        if (!strcmp(key, "id")) { if (json_whole(c, "id", &im->id)) return -1; has_id = 1; }
        else if (!strcmp(key, "file_name")) { free(im->file_name); if (json_string(c, &im->file_name)) return -1; }
        else if (!strcmp(key, "width")) { if (json_whole(c, "width", &im->w)) return -1; }
        else if (!strcmp(key, "height")) { if (json_whole(c, "height", &im->h)) return -1; }
        else if (json_skip(c)) return -1;
    }
    if (!has_id || !im->file_name || !im->file_name[0])
        return err_set(c->err, "%s:%d: an entry of \"images\" without %s; each image needs \"id\" and \"file_name\"",
                       c->file, im->line, has_id ? "a file_name" : "an id");
    return 0;
}

static int read_category(JsonCur *c, CocoCat *cat) {
    char key[32];
    int has_id = 0;
    cat->line = c->line;
    if (json_object(c)) return -1;
    for (int r; (r = json_key(c, key, sizeof key)) != 0; ) {
        if (r < 0) return -1;
        if (!strcmp(key, "id")) { if (json_whole(c, "id", &cat->id)) return -1; has_id = 1; }
        else if (!strcmp(key, "name")) { free(cat->name); if (json_string(c, &cat->name)) return -1; }
        else if (!strcmp(key, "supercategory") && json_peek(c) == '"') {
            free(cat->super);
            if (json_string(c, &cat->super)) return -1;
        }
        else if (json_skip(c)) return -1;
    }
    if (!has_id || !cat->name)
        return err_set(c->err, "%s:%d: an entry of \"categories\" without %s; each category needs \"id\" and \"name\"",
                       c->file, cat->line, has_id ? "a name" : "an id");
    return 0;
}

// bbox: [x, y, width, height]; a wrong count or a value that is no number is the box's problem.
static int read_bbox(JsonCur *c, CocoAnn *a) {
    if (json_peek(c) != '[') { a->reason = DS_BAD_COUNT; return json_skip(c); }
    if (json_array(c)) return -1;
    for (int r; (r = json_item(c)) != 0; ) {
        if (r < 0) return -1;
        if (json_peek(c) != 'n') { if (json_skip(c)) return -1; a->reason = DS_NOT_NUMBER; a->nb++; continue; }
        double v;
        if (json_number(c, &v)) return -1;
        if (a->nb < 4) a->b[a->nb] = v;
        a->nb++;
    }
    if (a->nb != 4 && a->reason < 0) a->reason = DS_BAD_COUNT;
    return 0;
}

static int read_annotation(JsonCur *c, CocoAnn *a) {
    char key[32];
    *a = (CocoAnn){.line = c->line, .reason = -1};
    if (json_object(c)) return -1;
    for (int r; (r = json_key(c, key, sizeof key)) != 0; ) {
        if (r < 0) return -1;
        int rc = 0;
        if (!strcmp(key, "image_id")) rc = json_whole(c, "image_id", &a->image_id), a->has_image = 1;
        else if (!strcmp(key, "category_id")) rc = json_whole(c, "category_id", &a->category_id), a->has_cat = 1;
        else if (!strcmp(key, "bbox")) rc = read_bbox(c, a);
        else if (!strcmp(key, "iscrowd")) rc = json_bool(c, &a->crowd);
        else if (!strcmp(key, "id") && json_peek(c) == 'n') rc = json_number(c, &a->id), a->has_id = 1;
        else rc = json_skip(c);
        if (rc) return -1;
    }
    if (!a->has_image)
        return err_set(c->err, "%s:%d: an entry of \"annotations\" without an image_id", c->file, a->line);
    return 0;
}

// One of the top-level arrays, each element read by the matching reader.
static int read_list(JsonCur *c, const char *key, Coco *k) {
    if (json_array(c)) return -1;
    for (int r; (r = json_item(c)) != 0; ) {
        if (r < 0) return -1;
        int rc;
        if (!strcmp(key, "images")) {
            k->im = GROW(k->im, k->n_im);
            k->im[k->n_im] = (CocoImage){0};
            rc = read_image(c, &k->im[k->n_im]);
            k->n_im++;               // counted even when it failed, so coco_free frees its name
        } else if (!strcmp(key, "categories")) {
            k->cat = GROW(k->cat, k->n_cat);
            k->cat[k->n_cat] = (CocoCat){0};
            rc = read_category(c, &k->cat[k->n_cat]);
            k->n_cat++;
        } else {
            k->ann = GROW(k->ann, k->n_ann);
            rc = read_annotation(c, &k->ann[k->n_ann++]);
        }
        if (rc) return -1;
    }
    return 0;
}

static int coco_parse(const char *path, Coco *k, int *has[3], Err *err) {
    char *text;
    size_t n;
    memset(k, 0, sizeof *k);
    if (json_file_read(path, &text, &n, err)) return -1;
    JsonCur c;
    json_begin(&c, path, text, n, err);
    char key[32];
    int rc = json_peek(&c) == '{' ? json_object(&c)
           : json_fail(&c, "a COCO annotation file is an object {\"images\": [...], \"annotations\": [...], \"categories\": [...]}");
    static const char *const lists[3] = {"images", "annotations", "categories"};
    for (int r; rc == 0 && (r = json_key(&c, key, sizeof key)) != 0; ) {
        if (r < 0) { rc = -1; break; }
        int which = -1;
        for (int i = 0; i < 3; i++) if (!strcmp(key, lists[i])) which = i;
        if (which >= 0 && *has[which])
            rc = json_fail(&c, "\"%s\" given twice; keep one", key);
        else if (which >= 0) *has[which] = c.line, rc = read_list(&c, key, k);
        else rc = json_skip(&c);
    }
    if (rc == 0) rc = json_end(&c);
    free(text);
    if (rc) coco_free(k);
    return rc ? -1 : 0;
}

static int cat_cmp(const void *a, const void *b) {
    double x = ((const CocoCat *)a)->id, y = ((const CocoCat *)b)->id;
    return (x > y) - (x < y);
}

// Categories in id order; a repeated id is an error.
static int cats_sort(const char *path, Coco *k, Err *err) {
    qsort(k->cat, (size_t)k->n_cat, sizeof *k->cat, cat_cmp);
    for (int i = 1; i < k->n_cat; i++)
        if (k->cat[i].id == k->cat[i - 1].id)
            return err_set(err, "%s:%d: category id %.0f is also at line %d; each id once", path, k->cat[i].line,
                           k->cat[i].id, k->cat[i - 1].line);
    return 0;
}

// Roboflow's COCO export puts the dataset's own name first (id 0) as the supercategory of every real
// category, and labels nothing with it: left out, so the classes are the real ones (as its users expect).
// Returns the name left out (owned by the caller), or NULL.
static char *roboflow_drop(Coco *k) {
    if (k->n_cat < 2) return NULL;
    const char *name = k->cat[0].name;
    for (int i = 1; i < k->n_cat; i++)
        if (!k->cat[i].super || strcmp(k->cat[i].super, name)) return NULL;
    for (int j = 0; j < k->n_ann; j++)
        if (k->ann[j].has_cat && k->ann[j].category_id == k->cat[0].id) return NULL;
    char *dropped = str_fmt("%.0f '%s'", k->cat[0].id, name);
    free(k->cat[0].name);
    free(k->cat[0].super);
    memmove(k->cat, k->cat + 1, (size_t)(k->n_cat - 1) * sizeof *k->cat);
    k->n_cat--;
    return dropped;
}

int coco_names(const char *json, StrList *names, Err *err) {
    Coco k;
    int hi = 0, ha = 0, hc = 0, *has[3] = {&hi, &ha, &hc};
    if (coco_parse(json, &k, has, err)) return -1;
    int rc = 0;
    if (!k.n_cat)
        rc = err_set(err, "%s: no \"categories\": the class names come from them, or from names: in data.yaml", json);
    else if (!(rc = cats_sort(json, &k, err))) {
        free(roboflow_drop(&k));
        for (int i = 0; i < k.n_cat; i++) strlist_push(names, xstrdup(k.cat[i].name));
    }
    coco_free(&k);
    return rc;
}

// Where an image's file_name is: images_dir/file_name when a folder is named, else beside the .json,
// then in its images/ subfolder (Roboflow's export). NULL when in none; *tried says where it looked.
static char *image_find(const char *dir, const char *images_dir, const char *name, char *tried, size_t n) {
    struct stat st;
    const char *sub[2] = {images_dir ? images_dir : dir, NULL};
    char *alt = images_dir ? NULL : path_join(dir, "images");
    sub[1] = alt;
    snprintf(tried, n, "%s%s%s", sub[0], alt ? " and " : "", alt ? alt : "");
    for (int i = 0; i < 2 && sub[i]; i++) {
        char *p = path_join(sub[i], name);
        if (!stat(p, &st) && S_ISREG(st.st_mode)) { free(alt); return p; }
        free(p);
    }
    free(alt);
    return NULL;
}

typedef struct { double id; int idx; } IdIdx;
static int ididx_cmp(const void *a, const void *b) {
    double x = ((const IdIdx *)a)->id, y = ((const IdIdx *)b)->id;
    return (x > y) - (x < y);
}
static int id_find(const IdIdx *v, int n, double id) {
    IdIdx key = {id, 0}, *hit = bsearch(&key, v, (size_t)n, sizeof *v, ididx_cmp);
    return hit ? hit->idx : -1;
}

// One AnnImage per image, in file order; its path found, its problem when it is not.
static int images_add(const char *json, const char *images_dir, const Coco *k, IdIdx *ids, AnnSet *out, Err *err) {
    char *dir = path_dir(json);
    for (int i = 0; i < k->n_im; i++) ids[i] = (IdIdx){k->im[i].id, i};
    qsort(ids, (size_t)k->n_im, sizeof *ids, ididx_cmp);
    for (int i = 1; i < k->n_im; i++)
        if (ids[i].id == ids[i - 1].id) {
            free(dir);
            return err_set(err, "%s:%d: image id %.0f is also at line %d; each id once", json,
                           k->im[ids[i].idx].line, ids[i].id, k->im[ids[i - 1].idx].line);
        }
    for (int i = 0; i < k->n_im; i++) {
        const CocoImage *im = &k->im[i];
        AnnImage *a = annset_push(out);
        char tried[2 * 4096 + 8];
        a->file = xstrdup(json);
        a->line = im->line;
        a->has_id = 1;
        a->id = (long long)im->id;
        a->w = im->w > 0 && im->w < 1e6 ? (int)im->w : 0;
        a->h = im->h > 0 && im->h < 1e6 ? (int)im->h : 0;
        a->image = image_find(dir, images_dir, im->file_name, tried, sizeof tried);
        if (!a->image) {
            a->image = path_join(images_dir ? images_dir : dir, im->file_name);
            a->problem = str_fmt("%s:%d: image id %.0f: '%s' is in none of %s%s", json, im->line, im->id,
                                 im->file_name, tried, images_dir ? "" : " (name the image folder with "
                                 "train_images:/val_images: in data.yaml)");
            a->reason = DS_BAD_IMAGE;
        }
    }
    free(dir);
    return 0;
}

static void box_set(AnnBox *b, const CocoAnn *a, int place, const Coco *k, int nc, const char *json) {
    b->line = a->line;
    b->reason = -1;
    b->kind = a->has_id ? "annotation id" : "annotation";
    b->id = a->has_id ? a->id : place;
    if (a->reason == DS_BAD_COUNT || a->reason == DS_NOT_NUMBER) {
        b->reason = a->reason;
        b->why = xstrdup(a->reason == DS_BAD_COUNT ? "bbox is not [x, y, width, height] (4 numbers)"
                                                    : "bbox holds a value that is not a number");
        return;
    }
    CocoCat key = {.id = a->category_id};
    const CocoCat *cat = a->has_cat ? bsearch(&key, k->cat, (size_t)k->n_cat, sizeof *k->cat, cat_cmp) : NULL;
    if (!cat || cat - k->cat >= nc) {
        b->reason = DS_BAD_CLASS;
        b->why = !a->has_cat ? xstrdup("an annotation without a category_id")
               : !cat ? str_fmt("category_id %.0f is not among the %d categories of %s", a->category_id, k->n_cat, json)
               : str_fmt("category_id %.0f is category %d in id order, outside 0..%d", a->category_id,
                         (int)(cat - k->cat), nc - 1);
        return;
    }
    b->cls = (int)(cat - k->cat);
    b->x1 = a->b[0];
    b->y1 = a->b[1];
    b->x2 = a->b[0] + a->b[2];
    b->y2 = a->b[1] + a->b[3];
}

// Annotations grouped by image (file order kept); crowd ones skipped as Ultralytics' convert_coco.
static void boxes_add(const char *json, const Coco *k, const IdIdx *ids, int nc, AnnSet *out, int base) {
    int *count = xcalloc((size_t)k->n_im + 1, sizeof *count), *at = xcalloc((size_t)k->n_im + 1, sizeof *at);
    int *img = xmalloc((size_t)(k->n_ann + 1) * sizeof *img), n_crowd = 0, n_orphan = 0;
    for (int j = 0; j < k->n_ann; j++) {
        const CocoAnn *a = &k->ann[j];
        img[j] = id_find(ids, k->n_im, a->image_id);
        if (img[j] < 0) {
            if (n_orphan++ < 5)
                strlist_push(&out->warnings, str_fmt("%s:%d: image_id %.0f is not among the images of the file; the "
                                                     "annotation is ignored", json, a->line, a->image_id));
            continue;
        }
        if (a->crowd) { n_crowd++; img[j] = -1; continue; }
        count[img[j]]++;
    }
    if (n_orphan > 5)
        strlist_push(&out->warnings, str_fmt("%s: %d more annotations name no image of the file", json, n_orphan - 5));
    for (int i = 0; i < k->n_im; i++) {
        AnnImage *a = &out->v[base + i];
        a->box = xcalloc((size_t)count[i] + 1, sizeof *a->box);
    }
    for (int j = 0; j < k->n_ann; j++) {
        if (img[j] < 0) continue;
        AnnImage *a = &out->v[base + img[j]];
        box_set(&a->box[at[img[j]]++], &k->ann[j], j + 1, k, nc, json);
        a->nbox++;
    }
    if (n_crowd)
        strlist_push(&out->notes, str_fmt("%s: %d crowd annotation%s (iscrowd: 1) skipped, as Ultralytics' "
                                          "convert_coco does", json, n_crowd, n_crowd == 1 ? "" : "s"));
    free(count); free(at); free(img);
}

// data.yaml's names beside the categories they stand for: a name that differs is worth one warning (the
// classes follow the id order whatever the names say).
static void names_compare(const char *json, const Coco *k, char *const *names, AnnSet *out) {
    int n_diff = 0, first = -1;
    for (int i = 0; i < k->n_cat; i++)
        if (strcmp(k->cat[i].name, names[i]) && n_diff++ == 0) first = i;
    if (n_diff)
        strlist_push(&out->warnings, str_fmt("%s:%d: %d categor%s named otherwise in data.yaml's names (the first: "
                                             "category id %.0f '%s' is class %d, '%s' there); classes follow the id order",
                                             json, k->cat[first].line, n_diff, n_diff == 1 ? "y is" : "ies are",
                                             k->cat[first].id, k->cat[first].name, first, names[first]));
}

int coco_read(const char *json, const char *images_dir, char *const *names, int nc, AnnSet *out, Err *err) {
    Coco k;
    int hi = 0, ha = 0, hc = 0, *has[3] = {&hi, &ha, &hc};
    if (coco_parse(json, &k, has, err)) return -1;
    int rc = cats_sort(json, &k, err);
    char *dropped = rc ? NULL : roboflow_drop(&k);
    if (dropped)
        strlist_push(&out->notes, str_fmt("%s: category %s is the supercategory of all the others and labels nothing "
                                          "(Roboflow's export); it is not a class", json, dropped));
    free(dropped);
    if (!rc && !hi) rc = err_set(err, "%s: no \"images\" list: a COCO instances file lists its images", json);
    if (!rc && k.n_cat != nc)
        rc = err_set(err, "%s:%d: %d categor%s, but the dataset has %d classes (names: %s%s); drop names from "
                     "data.yaml to take the file's, in id order, or make them agree", json, hc, k.n_cat,
                     k.n_cat == 1 ? "y" : "ies", nc,
                     nc > 0 ? names[0] : "", nc > 1 ? ", ..." : "");
    if (!rc) names_compare(json, &k, names, out);
    if (!rc) {
        int base = out->n;
        IdIdx *ids = xmalloc((size_t)(k.n_im + 1) * sizeof *ids);
        rc = images_add(json, images_dir, &k, ids, out, err);
        if (!rc) boxes_add(json, &k, ids, nc, out, base);
        if (!rc && !out->category_id) {
            out->category_id = xmalloc((size_t)(k.n_cat + 1) * sizeof *out->category_id);
            for (int i = 0; i < k.n_cat; i++) out->category_id[i] = (long long)k.cat[i].id;
            out->n_cat = k.n_cat;
        }
        free(ids);
    }
    coco_free(&k);
    return rc;
}
