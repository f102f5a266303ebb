// annot.c: see annot.h. The set of annotated images the COCO and VOC readers fill, what kind of
// source a split names, and the classes a source defines.
#include "io/annot.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

void annset_free(AnnSet *s) {
    for (int i = 0; i < s->n; i++) {
        AnnImage *a = &s->v[i];
        for (int j = 0; j < a->nbox; j++) free(a->box[j].why);
        free(a->box); free(a->image); free(a->file); free(a->problem);
    }
    free(s->v);
    strlist_free(&s->warnings);
    strlist_free(&s->notes);
    free(s->category_id);
    memset(s, 0, sizeof *s);
}

AnnImage *annset_push(AnnSet *s) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->v = xrealloc(s->v, (size_t)s->cap * sizeof *s->v);
    }
    AnnImage *a = &s->v[s->n++];
    memset(a, 0, sizeof *a);
    return a;
}

// Merge sort by image path: stable, so of two entries for one file the first read stays first.
static void sort_range(AnnImage *v, AnnImage *tmp, int n) {
    if (n < 2) return;
    int h = n / 2;
    sort_range(v, tmp, h);
    sort_range(v + h, tmp, n - h);
    int i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = strcmp(v[j].image, v[i].image) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof *v);
}

void annset_sort(AnnSet *s) {
    AnnImage *tmp = xmalloc((size_t)(s->n ? s->n : 1) * sizeof *tmp);
    sort_range(s->v, tmp, s->n);
    free(tmp);
}

const AnnImage *annset_find(const AnnSet *s, const char *image) {
    int lo = 0, hi = s->n;
    while (lo < hi) {              // the first entry not before image
        int mid = (lo + hi) / 2;
        if (strcmp(s->v[mid].image, image) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->n && !strcmp(s->v[lo].image, image) ? &s->v[lo] : NULL;
}

static int is_dir(const char *p) {
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcasecmp(s + n - m, tail);
}

// A .txt in ROOT/ImageSets/Main/ where ROOT holds Annotations/: a VOC image set.
static int voc_image_set(const char *src) {
    if (!ends_with(src, ".txt")) return 0;
    char *main = path_dir(src), *sets = path_dir(main), *root = path_dir(sets), *ann = path_join(root, "Annotations");
    const char *m = strrchr(main, '/'), *s = strrchr(sets, '/');
    int yes = !strcmp(m ? m + 1 : main, "Main") && !strcmp(s ? s + 1 : sets, "ImageSets") && is_dir(ann);
    free(main); free(sets); free(root); free(ann);
    return yes;
}

AnnKind annot_kind(const char *src) {
    if (ends_with(src, ".json")) return ANN_COCO;
    if (is_dir(src)) {
        char *ann = path_join(src, "Annotations");
        int voc = is_dir(ann);
        free(ann);
        return voc ? ANN_VOC : ANN_NONE;
    }
    return voc_image_set(src) ? ANN_VOC : ANN_NONE;
}

int annot_names(const char *src, AnnKind kind, const char *split, StrList *names, Err *err) {
    if (kind == ANN_COCO) return coco_names(src, names, err);
    if (kind == ANN_VOC) return voc_names(src, split, names, err);
    return 0;
}
