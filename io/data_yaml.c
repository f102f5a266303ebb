// data_yaml.c: the dataset's description (dataset.h: dataspec_read): a data.yaml read through libyaml's
// document API, or the INI [data] keys, each value checked with file:line, then the names and the
// splits' paths resolved.
#include "io/dataset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "core/base/readfile.h"
#include "io/annot.h"
#include "io/strlist.h"

const char *const dataset_split_key[DS_N_SPLITS] = {"train", "val", "test"};
static const char *const images_key[DS_N_SPLITS] = {"train_images", "val_images", "test_images"};

static int images_key_index(const char *key) {
    for (int k = 0; k < DS_N_SPLITS; k++)
        if (!strcmp(key, images_key[k])) return k;
    return -1;
}

// The last part of a path ("../datasets/coco" -> "coco").
static const char *last_part(const char *p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;
    const char *s = p + n;
    while (s > p && s[-1] != '/') s--;
    return *s ? s : p;
}

static void where_set(Where *w, const char *file, int line) {
    snprintf(w->file, sizeof w->file, "%s", file);
    w->line = line;
}

// ---- the description: data.yaml or [data] ------------------------------------------------------
typedef struct {              // the keys as written, before paths are resolved
    char   *root;             // `path:`, or NULL
    Where   root_at;
    char   *download;         // `download:` as written (a URL or a script), or NULL
    Where   download_at;
    long    nc;
    Where   nc_at, names_at;  // line 0: key absent
    StrList names;
    StrList src[DS_N_SPLITS];
    Where   src_at[DS_N_SPLITS];
    char   *images[DS_N_SPLITS];     // train_images: ..., the folder of a COCO split's file_names, or NULL
    Where   images_at[DS_N_SPLITS];
} RawSpec;

static void rawspec_free(RawSpec *r) {
    free(r->root);
    free(r->download);
    strlist_free(&r->names);
    for (int k = 0; k < DS_N_SPLITS; k++) strlist_free(&r->src[k]), free(r->images[k]);
}

int dataset_split_index(const char *key) {
    for (int k = 0; k < DS_N_SPLITS; k++)
        if (!strcmp(key, dataset_split_key[k])) return k;
    return -1;
}

static int yline(const yaml_node_t *n) { return (int)n->start_mark.line + 1; }

static const char *yscalar(const yaml_node_t *n) {
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int ynull(const yaml_node_t *n) {          // "", ~ and null, unquoted
    const char *v = yscalar(n);
    return v && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           (!*v || !strcmp(v, "~") || !strcasecmp(v, "null"));
}

static int parse_nc(const char *s, const Where *at, long *nc, Err *err) {
    char *end;
    errno = 0;
    *nc = s ? strtol(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || *nc <= 0 || *nc > 100000)
        return err_set(err, "%s:%d: nc: '%s' is not a class count (a positive integer)", at->file,
                       at->line, s ? s : "");
    return 0;
}

// train/val/test: a path or a list of paths.
static int yaml_split(yaml_document_t *doc, yaml_node_t *v, const Where *at, StrList *out, Err *err) {
    if (ynull(v)) return 0;
    if (yscalar(v)) { strlist_push(out, xstrdup(yscalar(v))); return 0; }
    if (v->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top; i++) {
            yaml_node_t *e = yaml_document_get_node(doc, *i);
            if (!yscalar(e) || ynull(e)) break;
            strlist_push(out, xstrdup(yscalar(e)));
        }
        if (out->n == v->data.sequence.items.top - v->data.sequence.items.start) return 0;
    }
    return err_set(err, "%s:%d: expected a folder, a .txt list of images, or a list of them",
                   at->file, yline(v));
}

// names: a list, or a mapping {0: a, 1: b, ...} whose keys are exactly 0..n-1.
static int yaml_names(yaml_document_t *doc, yaml_node_t *v, const char *file, StrList *out,
                      Err *err) {
    if (v->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *i = v->data.sequence.items.start; i < v->data.sequence.items.top; i++) {
            yaml_node_t *e = yaml_document_get_node(doc, *i);
            if (!yscalar(e))
                return err_set(err, "%s:%d: names: each name must be a word", file, yline(e));
            strlist_push(out, xstrdup(yscalar(e)));
        }
        return 0;
    }
    if (v->type != YAML_MAPPING_NODE)
        return err_set(err, "%s:%d: names: expected a list [a, b] or a mapping {0: a, 1: b}", file,
                       yline(v));
    int n = (int)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    for (int i = 0; i < n; i++) strlist_push(out, NULL);
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key), *e = yaml_document_get_node(doc, p->value);
        const char *ks = yscalar(k);
        char *end = NULL;
        long id = ks ? strtol(ks, &end, 10) : -1;
        if (!ks || end == ks || *end || id < 0 || id >= n || out->v[id] || !yscalar(e))
            return err_set(err, "%s:%d: names: '%s' is not a free class index 0..%d (a mapping of %d "
                           "names needs keys 0..%d, each once, each with a name)",
                           file, yline(k), ks ? ks : "?", n - 1, n, n - 1);
        out->v[id] = xstrdup(yscalar(e));
    }
    return 0;
}

// One key of the top-level mapping; download: is kept (say_download), other unknown keys
// (yaml_file, ...) are ignored.
static int yaml_key(yaml_document_t *doc, const char *file, yaml_node_t *k, yaml_node_t *v,
                    RawSpec *raw, Err *err) {
    const char *key = yscalar(k);
    Where at;
    where_set(&at, file, yline(k));
    int split = dataset_split_index(key);
    if (split >= 0) {
        raw->src_at[split] = at;
        return yaml_split(doc, v, &at, &raw->src[split], err);
    }
    int img = images_key_index(key);
    if (img >= 0) {
        if (!yscalar(v) || ynull(v))
            return err_set(err, "%s:%d: %s: expected the folder holding the images of the %s .json", file, at.line,
                           key, dataset_split_key[img]);
        raw->images[img] = xstrdup(yscalar(v));
        raw->images_at[img] = at;
        return 0;
    }
    if (!strcmp(key, "path")) {
        if (!ynull(v) && !yscalar(v))
            return err_set(err, "%s:%d: path: expected a folder", file, at.line);
        if (!ynull(v)) raw->root = xstrdup(yscalar(v));
        raw->root_at = at;
        return 0;
    }
    if (!strcmp(key, "download")) {
        if (yscalar(v) && !ynull(v)) raw->download = xstrdup(yscalar(v));
        raw->download_at = at;
        return 0;
    }
    if (!strcmp(key, "nc")) {
        raw->nc_at = at;
        return parse_nc(yscalar(v), &at, &raw->nc, err);
    }
    if (!strcmp(key, "names")) {
        raw->names_at = at;
        return yaml_names(doc, v, file, &raw->names, err);
    }
    return 0;
}

static int yaml_walk(yaml_document_t *doc, const char *file, RawSpec *raw, Err *err) {
    yaml_node_t *root = yaml_document_get_root_node(doc);
    if (!root || root->type != YAML_MAPPING_NODE)
        return err_set(err, "%s: not a YAML mapping; a data.yaml has keys train, val and names", file);
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
        if (!yscalar(k)) continue;
        for (yaml_node_pair_t *q = root->data.mapping.pairs.start; q < p; q++) {
            const char *prev = yscalar(yaml_document_get_node(doc, q->key));
            if (prev && !strcmp(prev, yscalar(k)))
                return err_set(err, "%s:%d: '%s' given twice (also at line %d); keep one", file,
                               yline(k), prev, yline(yaml_document_get_node(doc, q->key)));
        }
        if (yaml_key(doc, file, k, v, raw, err) != 0) return -1;
    }
    return 0;
}

static int yaml_read(const char *file, RawSpec *raw, Err *err) {
    TextFile text;
    if (rf_text_read(file, "dataset description", &text, err)) return -1;
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text.buf, text.n);
    int rc;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = err_set(err, "%s:%d: YAML syntax error: %s%s%s", file, (int)parser.problem_mark.line + 1,
                     parser.problem ? parser.problem : "?", parser.context ? " " : "",
                     parser.context ? parser.context : "");
    } else {
        rc = yaml_walk(&doc, file, raw, err);
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    rf_text_free(&text);
    return rc;
}

// An INI list value split as YAML splits the same text: "[a, 'b, c']" or, where commas separate
// without brackets too (names), "a, 'b, c'". A quoted item loses its quotes and keeps its commas; a
// value quoted whole (DataKV.quoted: `names = 'a, b'`) is one item, as a YAML scalar is.
static int ini_list(const char *value, int quoted, int commas, const Where *at, const char *key, StrList *out,
                    Err *err) {
    if (quoted) { if (*value) strlist_push(out, xstrdup(value)); return 0; }
    char *s = xstrdup(value), *p = s, *end = s + strlen(s);
    while (*p == ' ' || *p == '\t') p++;
    while (end > p && (end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
    if (*p == '[' && end > p && end[-1] == ']') { p++; *--end = 0; commas = 1; }
    const char *why = NULL;
    for (char *item = p; item && !why; ) {
        while (*item == ' ' || *item == '\t') item++;
        char *next = NULL;
        if (*item == '\'' || *item == '"') {
            const char *after;
            if (yaml_quoted(item, item, strlen(item) + 1, &after)) { why = "a quote is not closed"; break; }
            next = (char *)after;
            while (*next == ' ' || *next == '\t') next++;
            if (*next && !(commas && *next == ',')) { why = "text follows a closing quote; quote the whole item"; break; }
            next = *next ? next + 1 : NULL;
        } else {
            next = commas ? strchr(item, ',') : NULL;
            if (next) *next++ = 0;
            char *e = item + strlen(item);
            while (e > item && (e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
        }
        if (*item) strlist_push(out, xstrdup(item));
        item = next;
    }
    free(s);
    if (why) return err_set(err, "%s:%d: [data] %s = %s: %s (YAML's quoting: 'a, b' or \"a, b\" is one item)", at->file,
                            at->line, key, value, why);
    return 0;
}

static int ini_read(const Config *cfg, RawSpec *raw, Err *err) {
    for (int i = 0; i < cfg->n_data_kv; i++) {
        const char *key = cfg->data_kv[i].key, *value = cfg->data_kv[i].value;
        const Where *at = &cfg->data_kv[i].at;
        int quoted = cfg->data_kv[i].quoted;
        int split = dataset_split_index(key);
        if (split >= 0) {
            raw->src_at[split] = *at;
            strlist_free(&raw->src[split]);
            if (ini_list(value, quoted, 0, at, key, &raw->src[split], err)) return -1;
        } else if (images_key_index(key) >= 0) {
            int img = images_key_index(key);
            free(raw->images[img]);
            raw->images[img] = value[0] ? xstrdup(value) : NULL;
            raw->images_at[img] = *at;
        } else if (!strcmp(key, "path")) {
            free(raw->root);
            raw->root = value[0] ? xstrdup(value) : NULL;
            raw->root_at = *at;
        } else if (!strcmp(key, "nc")) {
            raw->nc_at = *at;
            if (parse_nc(value, at, &raw->nc, err) != 0) return -1;
        } else if (!strcmp(key, "names")) {
            raw->names_at = *at;
            strlist_free(&raw->names);
            if (ini_list(value, quoted, 1, at, key, &raw->names, err)) return -1;
        } else if (!strcmp(key, "download")) {
            free(raw->download);
            raw->download = value[0] ? xstrdup(value) : NULL;
            raw->download_at = *at;
        } else {
            return err_set(err, "%s:%d: [data]: unknown key '%s'; known: path, train, val, test, nc, "
                           "names, download, train_images, val_images, test_images", at->file, at->line, key);
        }
    }
    return 0;
}

static int is_dir(const char *p) {
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}

// The dataset root: `path:` from the folder of the description (base); a relative one that is no
// folder there is tried from the current directory (yolov9 resolves it from its checkout, where
// users run it). When neither is a folder and a split is relative, the error lists both places.
static int resolve_root(const RawSpec *raw, const char *base, char **root, Err *err) {
    *root = NULL;
    if (!raw->root) { *root = xstrdup(base); return 0; }
    char *from_file = path_join(base, raw->root);
    if (raw->root[0] == '/' || is_dir(from_file)) { *root = from_file; return 0; }
    if (is_dir(raw->root)) { free(from_file); *root = xstrdup(raw->root); return 0; }
    int relative_split = 0;
    for (int k = 0; k < DS_N_SPLITS; k++)
        for (int i = 0; i < raw->src[k].n; i++) relative_split |= raw->src[k].v[i][0] != '/';
    if (!relative_split) { *root = from_file; return 0; }
    char cwd[CFG_PATH] = "the current directory";
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "the current directory");
    int rc = err_set(err, "%s:%d: path: %s: no such folder; tried %s (from the folder of %s) and %s/%s (from "
                     "the current directory); write an absolute path, e.g. path: /data/%s", raw->root_at.file,
                     raw->root_at.line, raw->root, from_file, raw->root_at.file, cwd, raw->root, last_part(raw->root));
    free(from_file);
    return rc;
}

// download: the one line dataset_open prints: yolotrain does not fetch datasets, and the URLs the
// key names (a script's too).
static char *download_note(const RawSpec *raw, const char *root) {
    if (!raw->download) return NULL;
    char urls[1200] = "";
    size_t o = 0;
    int n = 0;
    for (const char *p = raw->download; (p = strstr(p, "http")) && o < sizeof urls - 200;) {
        if (strncmp(p, "http://", 7) && strncmp(p, "https://", 8)) { p += 4; continue; }
        size_t len = strcspn(p, " \t\r\n'\",)]}");
        o += snprintf(urls + o, sizeof urls - o, "%s%.*s", n++ ? ", " : "", (int)(len > 150 ? 150 : len), p);
        p += len;
    }
    return str_fmt("%s:%d: download: yolotrain does not download datasets; fetch %s yourself and unpack it "
                   "so that %s holds the images and labels", raw->download_at.file, raw->download_at.line,
                   n ? urls : "what it names", root);
}

// Without names:, the classes of the first split (train, val, test) whose sources are annotation files:
// a COCO file's categories in id order, or the object names of every VOC source of the dataset, sorted.
// 1 when found (into names), 0 when no source defines classes, -1 with err.
static int annot_spec_names(const DataSpec *d, StrList *names, Err *err) {
    AnnKind kind = ANN_NONE;
    for (int k = 0; k < DS_N_SPLITS && kind == ANN_NONE; k++)
        for (int i = 0; i < d->n_src[k] && kind == ANN_NONE; i++) {
            kind = annot_kind(d->src[k][i]);
            if (kind == ANN_COCO) return coco_names(d->src[k][i], names, err) ? -1 : 1;
        }
    if (kind == ANN_NONE) return 0;
    StrList all = {0};
    for (int k = 0; k < DS_N_SPLITS; k++)
        for (int i = 0; i < d->n_src[k]; i++)
            if (annot_kind(d->src[k][i]) == ANN_VOC && voc_names(d->src[k][i], dataset_split_key[k], &all, err)) {
                strlist_free(&all);
                return -1;
            }
    strlist_sort(&all);
    for (int i = 0; i < all.n; i++)
        if (!names->n || strcmp(names->v[names->n - 1], all.v[i])) strlist_push(names, xstrdup(all.v[i]));
    strlist_free(&all);
    return 1;
}

// The class names: names:, else those of the annotation files, else nc's class_N. nc must agree.
static int spec_names(RawSpec *raw, const char *file, DataSpec *d, Err *err) {
    if (raw->names_at.line && raw->names.n == 0)
        return err_set(err, "%s:%d: names is empty", raw->names_at.file, raw->names_at.line);
    int found = 0;
    if (!raw->names_at.line && (found = annot_spec_names(d, &raw->names, err)) < 0) return -1;
    if (found && !raw->names.n)
        return err_set(err, "%s: no 'names' key and the annotation files name no class: add names: [a, b, ...]", file);
    if (!found && !raw->names_at.line && !raw->nc_at.line)
        return err_set(err, "%s: no 'names' key: add names: [a, b, ...] (or at least nc: N)", file);
    if ((found || raw->names_at.line) && raw->nc_at.line && raw->nc != raw->names.n)
        return err_set(err, "%s:%d: nc: %ld, but %s has %d entries; make them agree or drop nc", raw->nc_at.file,
                       raw->nc_at.line, raw->nc, found ? "the annotation files' class list" : "names", raw->names.n);
    if (!found && !raw->names_at.line)
        for (long i = 0; i < raw->nc; i++) strlist_push(&raw->names, str_fmt("class_%ld", i));
    d->nc = raw->names.n;
    d->names = raw->names.v;
    raw->names = (StrList){0};
    return 0;
}

// A split's image folder (train_images: ...) only where the split names a COCO .json.
static int spec_images(RawSpec *raw, const char *root, DataSpec *d, Err *err) {
    for (int k = 0; k < DS_N_SPLITS; k++) {
        if (!raw->images[k]) continue;
        int coco = 0;
        for (int i = 0; i < d->n_src[k]; i++) coco |= annot_kind(d->src[k][i]) == ANN_COCO;
        if (!coco)
            return err_set(err, "%s:%d: %s: only for a %s split that names a COCO .json (its file_names resolve in this "
                           "folder)", raw->images_at[k].file, raw->images_at[k].line, images_key[k], dataset_split_key[k]);
        d->images[k] = path_join(root, raw->images[k]);
    }
    return 0;
}

// Train and val are present; paths are resolved against `base` (or `path:`); names and nc agree.
static int spec_finish(RawSpec *raw, const char *file, const char *base, DataSpec *d, Err *err) {
    if (!raw->src_at[DS_TRAIN].line || !raw->src_at[DS_VAL].line)
        return err_set(err, "%s: no '%s' key: train and val are required (each a folder, a .txt list "
                       "of images, a COCO .json, a VOC root, or a list of them)", file,
                       raw->src_at[DS_TRAIN].line ? "val" : "train");
    if (raw->names_at.line && raw->nc_at.line && raw->nc != raw->names.n)
        return err_set(err, "%s:%d: nc: %ld, but names (line %d) has %d entries; make them agree or "
                       "drop nc", raw->nc_at.file, raw->nc_at.line, raw->nc, raw->names_at.line,
                       raw->names.n);
    d->file = xstrdup(file);
    char *root;
    if (resolve_root(raw, base, &root, err)) return -1;
    for (int k = 0; k < DS_N_SPLITS; k++) {
        d->at[k] = raw->src_at[k];
        d->n_src[k] = raw->src[k].n;
        d->src[k] = xcalloc((size_t)raw->src[k].n + 1, sizeof(char *));
        for (int i = 0; i < raw->src[k].n; i++) d->src[k][i] = path_join(root, raw->src[k].v[i]);
    }
    d->download_note = download_note(raw, root);
    int rc = spec_images(raw, root, d, err);
    free(root);
    return rc ? -1 : spec_names(raw, file, d, err);
}

char *dataspec_root(const Config *cfg, Err *err) {
    RawSpec raw = {0};
    char *base = path_dir(cfg->file[0] ? cfg->file : "."), *root = NULL, cwd[CFG_PATH];
    if (ini_read(cfg, &raw, err) == 0 && resolve_root(&raw, base, &root, err) == 0 && root[0] != '/') {
        if (getcwd(cwd, sizeof cwd)) {
            char *abs = path_join(cwd, root);
            free(root);
            root = abs;
        } else {
            err_set(err, "cannot read the current directory: %s", strerror(errno));
            free(root);
            root = NULL;
        }
    }
    rawspec_free(&raw);
    free(base);
    return root;
}

int dataspec_read(const char *yaml, const Config *cfg, DataSpec *out, Err *err) {
    memset(out, 0, sizeof *out);
    if (!yaml && cfg && cfg->data[0] && cfg->n_data_kv > 0)
        return err_set(err, "%s:%d: a [data] section and data=%s both describe the dataset; keep one",
                       cfg->data_kv[0].at.file, cfg->data_kv[0].at.line, cfg->data);
    if (!yaml && cfg && cfg->data[0]) yaml = cfg->data;
    if (!yaml && !(cfg && cfg->n_data_kv > 0))
        return err_set(err, "no dataset: set data=FILE.yaml or write a [data] section");
    RawSpec raw = {0};
    const char *file = yaml ? yaml : cfg->file[0] ? cfg->file : "[data]";
    char *base = path_dir(yaml ? yaml : cfg->file[0] ? cfg->file : ".");
    int rc = yaml ? yaml_read(yaml, &raw, err) : ini_read(cfg, &raw, err);
    if (rc == 0) rc = spec_finish(&raw, file, base, out, err);
    rawspec_free(&raw);
    free(base);
    if (rc != 0) dataspec_free(out);
    return rc;
}

void dataspec_free(DataSpec *d) {
    for (int i = 0; d->names && i < d->nc; i++) free(d->names[i]);
    free(d->names);
    for (int k = 0; k < DS_N_SPLITS; k++) {
        for (int i = 0; i < d->n_src[k]; i++) free(d->src[k][i]);
        free(d->src[k]);
        free(d->images[k]);
    }
    free(d->file);
    free(d->download_note);
    memset(d, 0, sizeof *d);
}
