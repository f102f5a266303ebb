// hyp_yaml.c: hyp=FILE.yaml, a hyp.scratch-high.yaml style mapping of `key: number` lines, read
// with libyaml over the [hyp] keys; every key and value error names the yaml file:line.
#include "cfg/parts.h"
#include "core/base/readfile.h"

#include <errno.h>
#include <string.h>
#include <yaml.h>

#define HYP_FORM "the hyp file holds `key: number` lines as in hyp.scratch-high.yaml"

typedef struct {
    Config     *cfg;
    const char *path;
    Err        *err;
    char        key[128];     // the key whose value comes next, "" while a key is expected
    int         key_line;
} HypRead;

static int at_line(HypRead *h, int line, const char *what) {
    return err_set(h->err, "%s:%d: %s; " HYP_FORM, h->path, line, what);
}

static int on_value(HypRead *h, const char *value, int line) {
    const Key *k = key_find("hyp", h->key);
    if (!k) {
        char hint[600];
        key_suggest("hyp", h->key, hint, sizeof hint);
        return err_set(h->err, "%s:%d: unknown hyp key '%s'; %s", h->path, h->key_line, h->key, hint);
    }
    Where at = { .line = line };
    snprintf(at.file, sizeof at.file, "%s", h->path);
    h->key[0] = 0;
    // command-line overrides win over the file they chose
    if (!strcmp(h->cfg->key_at[k - cfg_keys].file, "command line")) return 0;
    return key_set(h->cfg, k, value, &at, h->err);
}

// One parser event inside the top-level mapping (depth 1). Returns 0, or -1 with err.
static int on_event(HypRead *h, const yaml_event_t *e, int *depth) {
    int line = (int)e->start_mark.line + 1;
    switch (e->type) {
    case YAML_MAPPING_START_EVENT:
        if (*depth == 0) { *depth = 1; return 0; }
        return at_line(h, line, h->key[0] ? "a value is a mapping, not a number" : "a key is a mapping");
    case YAML_SEQUENCE_START_EVENT:
        return at_line(h, line, *depth ? "a value is a list, not a number" : "the file is a list, not a mapping");
    case YAML_ALIAS_EVENT:
        return at_line(h, line, "aliases (*name) are not supported");
    case YAML_MAPPING_END_EVENT:
        *depth = 0;
        return 0;
    case YAML_SCALAR_EVENT: {
        const char *text = (const char *)e->data.scalar.value;
        if (*depth == 0) return *text ? at_line(h, line, "the file is a single value, not a mapping") : 0;
        if (h->key[0]) return on_value(h, text, line);
        if (!*text || strlen(text) >= sizeof h->key) return at_line(h, line, "a key is empty or too long");
        snprintf(h->key, sizeof h->key, "%s", text);
        h->key_line = line;
        return 0;
    }
    default:
        return 0;
    }
}

int hyp_yaml_load(Config *cfg, const char *path, Err *err) {
    TextFile text;
    if (rf_text_read(path, "hyp file (hyp= names a yaml such as hyp.scratch-high.yaml)", &text, err))
        return -1;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) die("libyaml: cannot initialise a parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text.buf, text.n);
    HypRead h = { .cfg = cfg, .path = path, .err = err };
    int depth = 0, rc = 0, done = 0;
    while (!rc && !done) {
        yaml_event_t e;
        if (!yaml_parser_parse(&parser, &e)) {
            rc = err_set(err, "%s:%d: not valid YAML: %s; " HYP_FORM, path,
                         (int)parser.problem_mark.line + 1, parser.problem ? parser.problem : "?");
            break;
        }
        rc = on_event(&h, &e, &depth);
        done = e.type == YAML_STREAM_END_EVENT;
        yaml_event_delete(&e);
    }
    yaml_parser_delete(&parser);
    rf_text_free(&text);
    return rc;
}
