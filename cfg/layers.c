// layers.c: the [backbone]/[head] rows, written as in YOLOv9's model yaml:
//   <index> = <from>, <number>, <module>, [<args>]      e.g.  11 = [-1, 6], 1, Concat, [1]
// parsed and checked for structure (indices, references, module, arg count). Channels are the
// model builder's business (core/spec/model.c).
#include "cfg/parts.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

// The known modules: how many numeric args each takes, whether a last word arg may follow
// (nn.Upsample's mode), and whether the args are one nested list (list = 1: CBLinear's output widths,
// CBFuse's slice indices, written [[64, 128]] as in the yaml). Add a module here and in core/spec/model.c.
typedef struct { const char *name; int min_args, max_args, word; const char *args; int list; } Module;
static const Module modules[] = {
    { "Conv",         1, 5, 0, "[c2, k, s, p, g]", 0 },
    { "ELAN1",        3, 3, 0, "[c2, c3, c4]", 0 },
    { "AConv",        1, 1, 0, "[c2]", 0 },
    { "ADown",        1, 1, 0, "[c2]", 0 },
    { "Silence",      0, 0, 0, "[] (the image, passed on)", 0 },
    { "CBLinear",     1, 8, 0, "[[c2, ...]]: the widths of its outputs, e.g. [[64, 128]]", 1 },
    { "CBFuse",       1, 7, 0, "[[i, ...]]: which output of each CBLinear input, e.g. [[0, 0, 0]]", 1 },
    { "RepNCSPELAN4", 3, 4, 0, "[c2, c3, c4, c5]", 0 },
    { "SPPELAN",      2, 2, 0, "[c2, c3]", 0 },
    { "Upsample",     2, 2, 1, "[size, scale, 'mode'], e.g. [None, 2, 'nearest']", 0 },
    { "Concat",       0, 1, 0, "[dim]", 0 },
    { "DDetect",      1, 1, 0, "[nc]", 0 },
    { "DualDDetect",  1, 1, 0, "[nc]", 0 },      // PGI training: auxiliary levels, then main levels
    { "C3k2",         1, 4, 0, "[c2, c3k, e, attn], e.g. [256, False, 0.25]", 0 },   // YOLO26 (ultralytics)
    { "SPPF",         1, 4, 0, "[c2, k, n, shortcut]", 0 },
    { "C2PSA",        1, 2, 0, "[c2, e]", 0 },
    { "Detect",       1, 2, 0, "[nc, end2end], e.g. [nc, True]", 0 },
};
enum { N_MODULES = sizeof modules / sizeof modules[0] };

#define ROW_FORM "write <index> = <from>, <number>, <module>, [<args>], e.g. 11 = [-1, 6], 1, Concat, [1]"

typedef struct {
    const char *p;          // the next character of the row
    char why[400];          // the problem and what is allowed, when a step fails
} Cursor;

static int fail(Cursor *c, const char *why) {
    snprintf(c->why, sizeof c->why, "%s", why);
    return -1;
}

static void skip_space(Cursor *c) {
    while (isspace((unsigned char)*c->p)) c->p++;
}

static int expect(Cursor *c, char ch, const char *what) {
    skip_space(c);
    if (*c->p != ch) {
        snprintf(c->why, sizeof c->why, "expected '%c' %s; " ROW_FORM, ch, what);
        return -1;
    }
    c->p++;
    return 0;
}

static int read_int(Cursor *c, int *out, const char *what) {
    skip_space(c);
    char *end;
    long v = strtol(c->p, &end, 10);
    if (end == c->p || v < -100000 || v > 100000 || (*end && !strchr(" \t,]", *end))) {
        snprintf(c->why, sizeof c->why, "%s is not an integer; " ROW_FORM, what);
        return -1;
    }
    c->p = end;
    *out = (int)v;
    return 0;
}

// <from>: an integer or a bracketed list of them
static int read_from(Cursor *c, LayerSpec *l) {
    skip_space(c);
    if (*c->p != '[') { l->n_from = 1; return read_int(c, &l->from[0], "from"); }
    c->p++;
    for (l->n_from = 0;; ) {
        if (l->n_from == CFG_MAX_FROM) return fail(c, "too many inputs in from; at most 8");
        if (read_int(c, &l->from[l->n_from++], "a from entry")) return -1;
        skip_space(c);
        if (*c->p == ']') { c->p++; return 0; }
        if (expect(c, ',', "between from entries")) return -1;
    }
}

static int read_module(Cursor *c, LayerSpec *l) {
    skip_space(c);
    if (!strncmp(c->p, "nn.", 3)) c->p += 3;
    size_t len = 0;
    while (isalnum((unsigned char)c->p[len]) || c->p[len] == '_') len++;
    if (len == 0 || len >= sizeof l->module) return fail(c, "expected a module name; " ROW_FORM);
    snprintf(l->module, sizeof l->module, "%.*s", (int)len, c->p);
    c->p += len;
    return 0;
}

#define ARG_FORM "args are numbers, None, True, False, nc and, last, one word such as 'nearest'"

// One arg, text t (trimmed): a number, None, True/False (1/0), nc, or the last word ('nearest',
// "nearest" or nearest).
static int set_arg(Cursor *c, LayerSpec *l, const char *t, int last) {
    int i = l->n_args;
    char word[64];
    if (!*t) return fail(c, "an argument is empty; " ROW_FORM);
    if (l->sarg[0]) return fail(c, "a word argument comes last; " ARG_FORM);
    if (isdigit((unsigned char)t[0]) || strchr("+-.", t[0])) {
        char *end;
        l->args[i] = strtod(t, &end);
        if (*end || !isfinite(l->args[i]))
            return snprintf(c->why, sizeof c->why, "'%s' is a malformed number; " ARG_FORM, t), -1;
    } else if (!strcmp(t, "None")) {
        l->args[i] = NAN;
    } else if (!strcmp(t, "True") || !strcmp(t, "False")) {
        l->args[i] = t[0] == 'T';
    } else if (!strcmp(t, "nc")) {
        l->nc_mask |= 1u << i;               // the value is filled in by layer_add / config_set_nc
    } else {
        unquote(t, word, sizeof word);
        for (const char *q = word; *q; q++)
            if (!isalnum((unsigned char)*q) && *q != '_')
                return snprintf(c->why, sizeof c->why, "'%s' is not an argument; " ARG_FORM, t), -1;
        if (!last || !*word || strlen(word) >= sizeof l->sarg)
            return fail(c, "one word argument of 1 to 31 letters may come last; " ARG_FORM);
        memcpy(l->sarg, word, strlen(word) + 1);
        return 0;
    }
    l->n_args++;
    return 0;
}

// A nested list [[a, b, ...]] as the only argument (CBLinear, CBFuse): its integers become the args.
static int read_list(Cursor *c, LayerSpec *l) {
    c->p++;                                          // the inner '['
    l->list = 1;
    for (;;) {
        if (l->n_args == CFG_MAX_ARGS) return fail(c, "too many entries in the list; at most 8");
        int v;
        if (read_int(c, &v, "a list entry")) return -1;
        l->args[l->n_args++] = v;
        skip_space(c);
        if (*c->p == ']') break;
        if (expect(c, ',', "between list entries")) return -1;
    }
    c->p++;
    return expect(c, ']', "after the nested list (it is the only argument)");
}

// [<args>]: comma-separated, quotes respected; or one nested list
static int read_args(Cursor *c, LayerSpec *l) {
    if (expect(c, '[', "to start the args")) return -1;
    skip_space(c);
    if (*c->p == ']') { c->p++; return 0; }
    if (*c->p == '[') return read_list(c, l);
    for (;;) {
        const char *start = c->p;
        char quote = 0, t[128];
        for (; *c->p && (quote || !strchr(",]", *c->p)); c->p++) {
            if (!quote && (*c->p == '\'' || *c->p == '"')) quote = *c->p;
            else if (*c->p == quote) quote = 0;
        }
        if (!*c->p) return fail(c, "the args list has no closing ']'; " ROW_FORM);
        size_t len = (size_t)(c->p - start);
        while (len && isspace((unsigned char)start[len - 1])) len--;
        while (len && isspace((unsigned char)*start)) start++, len--;
        if (l->n_args == CFG_MAX_ARGS) return fail(c, "too many args; at most 8");
        if (len >= sizeof t) return fail(c, "an argument is too long; " ARG_FORM);
        snprintf(t, sizeof t, "%.*s", (int)len, start);
        if (set_arg(c, l, t, *c->p == ']')) return -1;
        if (*c->p++ == ']') return 0;
    }
}

static int parse_row(Cursor *c, LayerSpec *l) {
    if (read_from(c, l) || expect(c, ',', "after from")) return -1;
    if (read_int(c, &l->number, "number") || expect(c, ',', "after number")) return -1;
    if (l->number < 1) return fail(c, "number must be at least 1 (the repeats of the module)");
    if (read_module(c, l) || expect(c, ',', "after the module")) return -1;
    if (read_args(c, l)) return -1;
    skip_space(c);
    return *c->p ? fail(c, "unexpected text after the args; " ROW_FORM) : 0;
}

static int check_module(Cursor *c, const LayerSpec *l) {
    for (int i = 0; i < N_MODULES; i++) {
        const Module *m = &modules[i];
        if (strcmp(m->name, l->module)) continue;
        if (l->sarg[0] && !m->word) {
            snprintf(c->why, sizeof c->why, "%s takes no word argument; its args are %s", m->name, m->args);
            return -1;
        }
        if (l->list != m->list) {
            snprintf(c->why, sizeof c->why, "%s takes %s; its args are %s", m->name,
                     m->list ? "one nested list" : "no nested list", m->args);
            return -1;
        }
        if (l->n_args >= m->min_args && l->n_args <= m->max_args) return 0;
        snprintf(c->why, sizeof c->why, "%s takes %d to %d numeric args %s, not %d", m->name, m->min_args,
                 m->max_args, m->args, l->n_args);
        return -1;
    }
    int o = snprintf(c->why, sizeof c->why, "unknown module %s; known modules:", l->module);
    for (int i = 0; i < N_MODULES; i++)
        o += snprintf(c->why + o, sizeof c->why - o, "%s %s", i ? "," : "", modules[i].name);
    return -1;
}

// Indices count up from 0 across [backbone] then [head]; inputs are earlier layers (or the image).
static int check_place(Cursor *c, const Config *cfg, const char *section, const LayerSpec *l) {
    int n = cfg->n_layers;
    if (l->index < n) {
        snprintf(c->why, sizeof c->why, "layer %d is already defined at line %d; indices count up "
                 "from 0 across [backbone] and [head]", l->index, cfg->layers[l->index].at.line);
        return -1;
    }
    if (l->index > n) {
        snprintf(c->why, sizeof c->why, "expected layer %d here; indices count up from 0 across "
                 "[backbone] and [head], one per row", n);
        return -1;
    }
    if (!strcmp(section, "backbone") && n > cfg->n_backbone)
        return fail(c, "a [backbone] row after [head] rows; write the [backbone] rows first");
    if (n == CFG_MAX_LAYERS) return fail(c, "too many layers; at most 64");
    for (int j = 0; j < l->n_from; j++) {
        int f = l->from[j];
        if ((f < 0 && n + f >= -1) || (f >= 0 && f < n)) continue;
        snprintf(c->why, sizeof c->why, "from %d is not an earlier layer; allowed: -1 (the previous "
                 "layer, the image for layer 0), -k (k layers back, down to the image)%s", f,
                 n ? ", or an absolute index below this one" : "");
        return -1;
    }
    return 0;
}

int layer_add(Config *cfg, const char *section, const char *index, const char *row,
              const Where *at, Err *err) {
    LayerSpec l = { .at = *at };
    Cursor c = { .p = row };
    char *end;
    long idx = strtol(index, &end, 10);
    int rc;
    if (end == index || *end || idx < 0 || idx > 100000) rc = fail(&c, "the index is not a layer number; " ROW_FORM);
    else {
        l.index = (int)idx;
        rc = parse_row(&c, &l);
        if (!rc) rc = check_module(&c, &l);
        if (!rc) rc = check_place(&c, cfg, section, &l);
    }
    if (rc) {
        char w[CFG_PATH + 32];
        return err_set(err, "%s: [%s] %s = %s: %s", config_where_text(at, w, sizeof w), section, index,
                       row, c.why);
    }
    for (int i = 0; i < l.n_args; i++)
        if (l.nc_mask >> i & 1) l.args[i] = cfg->nc;
    cfg->layers[cfg->n_layers++] = l;
    if (!strcmp(section, "backbone")) cfg->n_backbone = cfg->n_layers;
    return 0;
}

void layer_format(const LayerSpec *l, char *buf, size_t n) {
    size_t o = 0;
    o += snprintf(buf + o, n - o, "%s", l->n_from == 1 ? "" : "[");
    for (int j = 0; j < l->n_from && o < n; j++)
        o += snprintf(buf + o, n - o, "%s%d", j ? ", " : "", l->from[j]);
    if (o < n) o += snprintf(buf + o, n - o, "%s, %d, %s, [%s", l->n_from == 1 ? "" : "]", l->number, l->module,
                             l->list ? "[" : "");
    for (int i = 0; i < l->n_args && o < n; i++) {
        const char *sep = i ? ", " : "";
        if (l->nc_mask >> i & 1) o += snprintf(buf + o, n - o, "%snc", sep);
        else if (isnan(l->args[i])) o += snprintf(buf + o, n - o, "%sNone", sep);
        else {
            char num[32];
            number_format(l->args[i], num, sizeof num);
            o += snprintf(buf + o, n - o, "%s%s", sep, num);
        }
    }
    if (l->sarg[0] && o < n) o += snprintf(buf + o, n - o, "%s'%s'", l->n_args ? ", " : "", l->sarg);
    if (o < n) snprintf(buf + o, n - o, "%s]", l->list ? "]" : "");
}
