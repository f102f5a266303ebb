// strlist.c: see strlist.h.
#include "io/strlist.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/readfile.h"

void strlist_push(StrList *l, char *s) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = s;
}

void strlist_free(StrList *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    *l = (StrList){0};
}

static int str_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void strlist_sort(StrList *l) {
    if (l->n > 1) qsort(l->v, (size_t)l->n, sizeof *l->v, str_cmp);
}

int strlist_has(const StrList *l, const char *s) {
    return l->n > 0 && bsearch(&s, l->v, (size_t)l->n, sizeof *l->v, str_cmp) != NULL;
}

char *str_fmt(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

// The folder part of a path: "a/b.yaml" -> "a", "b.yaml" -> ".", "/b" -> "/".
char *path_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return xstrdup(".");
    if (slash == path) return xstrdup("/");
    return str_fmt("%.*s", (int)(slash - path), path);
}

// dir/rel, or rel alone when it is absolute or dir is "."; leading "./" of rel is dropped so that
// paths print the way users write them.
char *path_join(const char *dir, const char *rel) {
    while (rel[0] == '.' && rel[1] == '/') {
        rel += 2;
        while (*rel == '/') rel++;
    }
    if (!*rel || !strcmp(rel, ".")) return xstrdup(dir);
    if (rel[0] == '/' || !strcmp(dir, ".")) return xstrdup(rel);
    size_t n = strlen(dir);
    return str_fmt("%s%s%s", dir, dir[n - 1] == '/' ? "" : "/", rel);
}

int list_file_read(const char *file, const char *role, StrList *out, int **lines, StrList *written, Err *err) {
    TextFile t;
    if (rf_text_read(file, role, &t, err)) return -1;
    char *dir = path_dir(file);
    size_t pos = 0, len;
    const char *text;
    for (int no = 1; rf_text_line(&t, &pos, &text, &len); no++) {
        if (no == 1 && len >= 3 && !strncmp(text, "\xEF\xBB\xBF", 3)) text += 3, len -= 3;
        while (len && (*text == ' ' || *text == '\t')) text++, len--;
        while (len && (text[len - 1] == ' ' || text[len - 1] == '\t')) len--;
        if (!len) continue;
        char *entry = str_fmt("%.*s", (int)len, text);
        strlist_push(out, path_join(dir, entry));
        if (written) strlist_push(written, entry);
        else free(entry);
        *lines = xrealloc(*lines, (size_t)out->cap * sizeof **lines);
        (*lines)[out->n - 1] = no;
    }
    free(dir);
    rf_text_free(&t);
    return 0;
}
