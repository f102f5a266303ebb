// config.c: config_load reads the INI with inih (our line reader strips `#`/`;` comments and counts
// lines, so every key keeps its file:line), then applies command-line overrides and a hyp yaml.
#include "cfg/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cfg/parts.h"
#include "core/base/readfile.h"

static const char *const COMMAND_LINE = "command line";

static void where_set(Where *w, const char *file, int line) {
    snprintf(w->file, sizeof w->file, "%s", file);
    w->line = line;
}

const char *config_where_text(const Where *w, char *buf, size_t n) {
    if (w->line == 0) snprintf(buf, n, "default");
    else if (!strcmp(w->file, COMMAND_LINE)) snprintf(buf, n, "command line argument %d", w->line);
    else snprintf(buf, n, "%s:%d", w->file, w->line);
    return buf;
}

void config_defaults(Config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    Where none = { "", 0 };
    Err err;
    for (int i = 0; i < cfg_n_keys; i++)
        if (key_set(cfg, &cfg_keys[i], cfg_keys[i].def, &none, &err)) die("bad default: %s", err.msg);
}

void config_set_nc(Config *cfg, int nc) {
    cfg->nc = nc;
    for (int l = 0; l < cfg->n_layers; l++)
        for (int i = 0; i < cfg->layers[l].n_args; i++)
            if (cfg->layers[l].nc_mask >> i & 1) cfg->layers[l].args[i] = nc;
}

const char *config_data_get(const Config *cfg, const char *key) {
    for (int i = 0; i < cfg->n_data_kv; i++)
        if (!strcmp(cfg->data_kv[i].key, key)) return cfg->data_kv[i].value;
    return NULL;
}

const Where *config_where(const Config *cfg, const char *key) {
    const char *dot = strchr(key, '.');
    char section[32] = "";
    if (dot && (size_t)(dot - key) < sizeof section) snprintf(section, sizeof section, "%.*s", (int)(dot - key), key);
    if (section_known(section)) key = dot + 1;
    else section[0] = 0;
    if (!strcmp(section, "data")) {
        for (int i = 0; i < cfg->n_data_kv; i++)
            if (!strcmp(cfg->data_kv[i].key, key)) return &cfg->data_kv[i].at;
        return NULL;
    }
    const Key *k = key_find(section[0] ? section : NULL, key);
    return k ? &cfg->key_at[k - cfg_keys] : NULL;
}

// ---- one key from any source

// A [data] key: free-form, interpreted by io/dataset.c.
static int data_set(Config *cfg, const char *key, const char *value, const Where *at, Err *err) {
    char w[CFG_PATH + 32];
    config_where_text(at, w, sizeof w);
    int i = 0;
    while (i < cfg->n_data_kv && strcmp(cfg->data_kv[i].key, key)) i++;
    if (i == 32) return err_set(err, "%s: [data] %s: too many [data] keys; at most 32", w, key);
    static const char word[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_";
    if (!*key || strlen(key) >= sizeof cfg->data_kv[i].key || key[strspn(key, word)])
        return err_set(err, "%s: [data] '%s': a key is a word of 1 to 63 letters, digits or '_'", w, key);
    size_t max = CFG_LINE_MAX - strlen(key) - 5;     // config_print's `key = "value"` must read back
    if (strlen(value) > max)
        return err_set(err, "%s: [data] %s: the value is too long; at most %zu characters", w, key, max);
    if (i < cfg->n_data_kv && !strcmp(cfg->data_kv[i].at.file, at->file) && strcmp(at->file, COMMAND_LINE))
        return err_set(err, "%s: [data] %s: already set at line %d; give each key once", w, key,
                       cfg->data_kv[i].at.line);
    snprintf(cfg->data_kv[i].key, sizeof cfg->data_kv[i].key, "%s", key);
    const char *end;                                 // 'a, b' is one scalar; 'a', 'b' stays a list
    char *v = cfg->data_kv[i].value;
    int whole = !yaml_quoted(value, v, sizeof cfg->data_kv[i].value, &end) && !*end;
    if (!whole) snprintf(v, sizeof cfg->data_kv[i].value, "%s", value);
    cfg->data_kv[i].quoted = whole && *v;            // '' is the empty value, as an empty line is
    cfg->data_kv[i].at = *at;
    if (i == cfg->n_data_kv) cfg->n_data_kv++;
    return 0;
}

int config_data_set(Config *cfg, const char *key, const char *value, Err *err) {
    Where at = { .line = 0 };
    snprintf(at.file, sizeof at.file, "%s", COMMAND_LINE);
    return data_set(cfg, key, value, &at, err);
}

// Set `name` of `section` (a known section) from a file or the command line.
static int entry_set(Config *cfg, const char *section, const char *name, const char *value,
                     const Where *at, Err *err) {
    char w[CFG_PATH + 32], hint[600];
    config_where_text(at, w, sizeof w);
    if (!strcmp(section, "backbone") || !strcmp(section, "head")) {
        if (!strcmp(at->file, COMMAND_LINE))
            return err_set(err, "%s: %s.%s: layer rows can only be written in the INI file", w, section, name);
        return layer_add(cfg, section, name, value, at, err);
    }
    if (!strcmp(section, "data")) return data_set(cfg, name, value, at, err);
    const Key *k = key_find(section, name);
    if (!k) {
        key_suggest(section, name, hint, sizeof hint);
        return err_set(err, "%s: [%s] %s = %s: unknown key; %s", w, section, name, value, hint);
    }
    const Where *prev = &cfg->key_at[k - cfg_keys];
    if (prev->line && !strcmp(prev->file, at->file) && strcmp(at->file, COMMAND_LINE))
        return err_set(err, "%s: [%s] %s = %s: already set at line %d; give each key once", w, section,
                       name, value, prev->line);
    return key_set(cfg, k, value, at, err);
}

// ---- the INI file

typedef struct {
    Config     *cfg;
    const char *path;
    TextFile    text;                         // the whole file, checked for NUL bytes
    size_t      pos;                          // where the next line starts
    Err        *err;
    int         failed;
    int         line;                         // the line inih is handling now
    int         long_line;                    // a line whose value was too long for inih's buffer:
    char        long_value[CFG_LINE_MAX + 1]; //   inih got "key =", the value waits here
} IniRead;

static int read_fail(IniRead *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int read_fail(IniRead *r, const char *fmt, ...) {
    char what[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    err_set(r->err, "%s:%d: %s", r->path, r->line, what);
    r->failed = 1;
    return 0;
}

// Cut a `#` or `;` comment: at the line start or after whitespace, and outside quotes (YAML's: ''
// and \" do not close them).
static void strip_comment(char *s) {
    char quote = 0;
    for (char *p = s; *p; p++) {
        if (quote) {
            if ((quote == '\'' && p[0] == '\'' && p[1] == '\'') || (quote == '"' && p[0] == '\\' && p[1])) p++;
            else if (*p == quote) quote = 0;
            continue;
        }
        int after_space = p == s || isspace((unsigned char)p[-1]);
        if ((*p == '#' || *p == ';') && after_space) { *p = 0; return; }
        if ((*p == '\'' || *p == '"') && (p == s || strchr(" \t=,[:", p[-1]))) quote = *p;
    }
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    return s;
}

// Check a "[section]" line and rewrite it as "[name]" (inih keeps inner spaces); 1 when fine.
static int section_line(IniRead *r, char *s) {
    const char *close = strchr(s, ']');
    if (!close || close[1]) return read_fail(r, "%s: a section line is [name] alone; sections are [model], "
                                             "[backbone], [head], [train], [parallel], [hyp], [data]", s);
    char name[32];
    size_t len = (size_t)(close - s - 1);
    snprintf(name, sizeof name, "%.*s", (int)(len < sizeof name ? len : sizeof name - 1), s + 1);
    if (len >= sizeof name || !section_known(trim(name)))
        return read_fail(r, "%s: unknown section; sections are [model], [backbone], [head], [train], "
                         "[parallel], [hyp], [data]", s);
    sprintf(s, "[%s]", trim(name));                  // never longer than the line it replaces
    return 1;
}

// Hand inih a value-less "key =" and keep the value, for lines longer than inih's buffer.
static char *long_line(IniRead *r, char *s, char *str, int num) {
    size_t key_len = strcspn(s, "=:");
    if (!s[key_len] || (int)key_len > num - 4)
        return read_fail(r, "%.60s...: a line this long must be `key = value`", s), NULL;
    snprintf(r->long_value, sizeof r->long_value, "%s", trim(s + key_len + 1));
    r->long_line = r->line;
    snprintf(str, num, "%.*s=", (int)key_len, s);
    return str;
}

// inih's reader: called once per line, before the handler runs for that line. Leading blanks are
// trimmed, so inih's indented continuation lines never apply.
static char *read_line(char *str, int num, void *stream) {
    IniRead *r = stream;
    char raw[CFG_LINE_MAX + 1];
    const char *line;
    size_t n;
    if (r->failed || !rf_text_line(&r->text, &r->pos, &line, &n)) return NULL;
    r->line++;
    if (n > CFG_LINE_MAX) {
        read_fail(r, "the line is longer than %d characters; shorten it", CFG_LINE_MAX);
        return NULL;
    }
    memcpy(raw, line, n);
    raw[n] = 0;
    char *s = raw;
    if (r->line == 1 && !strncmp(s, "\xEF\xBB\xBF", 3)) s += 3;   // a UTF-8 byte-order mark
    strip_comment(s);
    s = trim(s);
    if (*s == '[' && !section_line(r, s)) return NULL;
    if ((int)strlen(s) > num - 3) return long_line(r, s, str, num);
    snprintf(str, num, "%s", s);
    return str;
}

static int on_key(void *user, const char *section, const char *name, const char *value) {
    IniRead *r = user;
    if (r->failed) return 0;
    if (r->long_line == r->line) value = r->long_value;
    Where at;
    where_set(&at, r->path, r->line);
    if (!*section) {
        err_set(r->err, "%s:%d: %s = %s: a key before any section; put it under [model], [train], "
                "[parallel], [hyp] or [data]", r->path, r->line, name, value);
        r->failed = 1;
        return 0;
    }
    if (entry_set(r->cfg, section, name, value, &at, r->err)) r->failed = 1;
    return !r->failed;
}

static int ini_read(Config *cfg, const char *path, Err *err) {
    IniRead r = { .cfg = cfg, .path = path, .err = err };
    if (rf_text_read(path, "config", &r.text, err)) return -1;
    int bad = ini_parse_stream(read_line, &r, on_key, &r);
    rf_text_free(&r.text);
    if (r.failed) return -1;
    if (bad > 0) return err_set(err, "%s:%d: not `key = value`, a [section] or a comment", path, bad);
    return 0;
}

// ---- command-line overrides

// yolov9 train.py's, val.py's and Ultralytics' spellings of our keys ('-' already read as '_'). "model"
// (also yolov9's --cfg) names the config file itself: config_load takes it before the overrides.
static const struct { const char *from, *to; } key_alias[] = {
    { "batch_size", "batch" }, { "img", "imgsz" }, { "img_size", "imgsz" }, { "cfg", "model" },
    { "conf_thres", "conf" }, { "iou_thres", "iou" },
};

// yolov9's flags that have nothing to do here: accepted (a yes/no value may follow), with one note.
static const struct { const char *name, *note; } noted_flag[] = {
    { "view_img", "--view-img: there is no display here; the pictures are saved to the run folder instead" },
    { "noautoanchor", "--noautoanchor: the model is anchor-free; there are no anchors to check" },
};

static int noted_index(const char *name) {
    for (size_t i = 0; i < sizeof noted_flag / sizeof noted_flag[0]; i++)
        if (!strcmp(name, noted_flag[i].name)) return (int)i;
    return -1;
}

// Keys that are not booleans but still work as a bare flag, and the value the flag means.
static const struct { const char *name, *value; } bare_flag[] = {
    { "resume", "1" },                             // the latest run (train.py's --resume)
    { "cache", "ram" },                            // train.py's bare --cache
};

static int is_bool_word(const char *s) {
    static const char *const w[] = { "0", "1", "true", "false", "yes", "no", "on", "off" };
    for (int i = 0; i < 8; i++) if (!strcasecmp(s, w[i])) return 1;
    return 0;
}

// One override as read from argv: the name ('-' read as '_', an alias mapped), its value, the text
// as written and its position (1-based).
typedef struct { char name[128]; const char *value, *arg; int pos; } Override;

static void name_normalise(const char *s, size_t len, char *name, size_t n) {
    snprintf(name, n, "%.*s", (int)(len < n ? len : n - 1), s);
    for (char *p = name; *p; p++) if (*p == '-') *p = '_';
    for (size_t i = 0; i < sizeof key_alias / sizeof key_alias[0]; i++)
        if (!strcmp(name, key_alias[i].from)) { snprintf(name, n, "%s", key_alias[i].to); break; }
}

// The value a bare --name means when it takes none (a boolean key: "1"), or NULL.
static const char *flag_value(const char *name) {
    const char *dot = strchr(name, '.');
    const Key *k = key_find(NULL, dot ? dot + 1 : name);
    if (k && k->type == KEY_BOOL) return "1";
    for (size_t i = 0; i < sizeof bare_flag / sizeof bare_flag[0]; i++)
        if (!strcmp(name, bare_flag[i].name)) return bare_flag[i].value;
    return noted_index(name) >= 0 ? "1" : NULL;
}

// Read the override at argv[*i] into o and advance *i. A flag (flag_value) takes the next argument
// only when it is a yes/no word (resume: a word that is no option and no key=value); every other
// --key takes the next argument as its value.
static int override_next(int argc, char **argv, int *i, Override *o, Err *err, const Override *prev) {
    const char *a = argv[*i], *eq;
    o->arg = a;
    o->pos = *i + 1;
    (*i)++;
    if (!strncmp(a, "--", 2)) {
        const char *s = a + 2;
        eq = strchr(s, '=');
        name_normalise(s, eq ? (size_t)(eq - s) : strlen(s), o->name, sizeof o->name);
        if (eq) { o->value = eq + 1; return 0; }
        const char *next = *i < argc ? argv[*i] : NULL, *flag = flag_value(o->name);
        if (flag) {
            int takes = next && (!strcmp(o->name, "resume") ? next[0] != '-' && !strchr(next, '=')
                                 : !strcmp(o->name, "cache") ? !strcmp(next, "ram") || !strcmp(next, "none")
                                 : is_bool_word(next));
            o->value = takes ? argv[(*i)++] : flag;
            return 0;
        }
        const char *dot = strchr(o->name, '.');
        if (!key_find(NULL, dot ? dot + 1 : o->name) && strcmp(o->name, "model") && (!dot || strncmp(o->name, "data.", 5))) {
            o->value = "";                           // override_one says: unknown key, and suggests one
            return 0;
        }
        if (!next || !strncmp(next, "--", 2))
            return err_set(err, "command line argument %d: --%s needs a value; write --%s VALUE or "
                           "%s=VALUE", o->pos, s, s, s);
        o->value = argv[(*i)++];
        return 0;
    }
    if ((eq = strchr(a, '='))) {
        name_normalise(a, (size_t)(eq - a), o->name, sizeof o->name);
        o->value = eq + 1;
        return 0;
    }
    if (prev)
        return err_set(err, "command line argument %d: '%s' is not key=value; a value of several parts "
                       "is one argument, commas and no spaces: %s=%s,%s", o->pos, a, prev->name, prev->value, a);
    return err_set(err, "command line argument %d: '%s' is not key=value; write key=value or "
                   "--key value", o->pos, a);
}

// One override: name is a key or section.key.
static int override_one(Config *cfg, const Override *o, Err *err) {
    char section[32] = "";
    Where at;
    where_set(&at, COMMAND_LINE, o->pos);
    const char *dot = strchr(o->name, '.'), *key = o->name;
    if (dot && (size_t)(dot - o->name) < sizeof section) {
        snprintf(section, sizeof section, "%.*s", (int)(dot - o->name), o->name);
        if (section_known(section)) key = dot + 1;
        else section[0] = 0;
    }
    if (section[0]) return entry_set(cfg, section, key, o->value, &at, err);
    const Key *k = key_find(NULL, key);
    if (!k) {
        char hint[600];
        key_suggest(NULL, key, hint, sizeof hint);
        return err_set(err, "command line argument %d: %s: unknown key; %s", o->pos, o->arg, hint);
    }
    return key_set(cfg, k, o->value, &at, err);
}

static int overrides_apply(Config *cfg, int argc, char **argv, Err *err) {
    static int noted[sizeof noted_flag / sizeof noted_flag[0]];   // once a process (export loads twice)
    Override o, prev;
    int have_prev = 0;
    for (int i = 0; i < argc;) {
        if (override_next(argc, argv, &i, &o, err, have_prev ? &prev : NULL)) return -1;
        if (strpbrk(o.value, "\r\n"))      // args.ini could not hold it (config_print writes lines)
            return err_set(err, "command line argument %d: %s: a value cannot hold a line break", o.pos, o.arg);
        if (!strcmp(o.name, "model")) continue;          // the config file: config_load took it
        int k = noted_index(o.name);
        if (k >= 0) {
            if (!is_bool_word(o.value))
                return err_set(err, "command line argument %d: %s: expected --%s alone, or 0 or 1 after it", o.pos,
                               o.arg, o.name);
            int yes = !strcmp(o.value, "1") || !strcasecmp(o.value, "true") || !strcasecmp(o.value, "yes") ||
                      !strcasecmp(o.value, "on");
            if (yes && !noted[k]) {
                noted[k] = 1;
                fprintf(stderr, "yolotrain: %s\n", noted_flag[k].note);
            }
            continue;
        }
        if (override_one(cfg, &o, err)) return -1;
        prev = o, have_prev = 1;
    }
    return 0;
}

int config_model_arg(int argc, char **argv, const char **path, Err *err) {
    Override o;
    int found = 0;
    for (int i = 0; i < argc;) {
        if (override_next(argc, argv, &i, &o, err, NULL)) { err->msg[0] = 0; continue; }  // reported later
        if (strcmp(o.name, "model")) continue;
        if (*path && (found || strcmp(*path, o.value)))
            return err_set(err, "command line argument %d: %s: the model config is already %s; name it once",
                           o.pos, o.arg, *path);
        *path = o.value;
        found = 1;
    }
    return 0;
}

// The installed configs: BIN/../share/yolotrain of the running binary (make install puts them
// there), into dir; 0 when that folder exists.
static int share_dir(char *dir, size_t n) {
    char exe[CFG_PATH];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0 || (size_t)len >= sizeof exe - 1) return -1;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return -1;
    *slash = 0;
    slash = strrchr(exe, '/');                     // BIN's parent: the PREFIX
    if (slash) *slash = 0;
    else snprintf(exe, sizeof exe, ".");
    if (strlen(exe) + 17 > n) return -1;
    memcpy(dir, exe, strlen(exe));
    strcpy(dir + strlen(exe), "/share/yolotrain");
    struct stat st;
    return stat(dir, &st) || !S_ISDIR(st.st_mode) ? -1 : 0;
}

// A config named relative that is not in the current directory is looked for among the installed
// ones: SHARE/cfg/NAME, then SHARE/NAME (so both s.ini and cfg/s.ini find them). found gets the
// file to read (path itself when it exists or nothing else does); looked gets where it looked, and
// names ./cfg/NAME when that exists (`yolotrain t.ini` in the checkout: cfg/t.ini is meant).
static void config_find(const char *path, char *found, size_t n, char *looked, size_t ln) {
    struct stat st;
    char share[CFG_PATH], p[2 * CFG_PATH + 16];
    snprintf(found, n, "%s", path);
    looked[0] = 0;
    if (path[0] == '/' || !stat(path, &st)) return;
    size_t o = 0;
    if (!share_dir(share, sizeof share)) {
        const char *sub[2] = { "cfg/", "" };
        for (int i = 0; i < 2; i++) {
            snprintf(p, sizeof p, "%s/%s%s", share, sub[i], path);
            if (!stat(p, &st) && S_ISREG(st.st_mode) && strlen(p) < n) {
                snprintf(found, n, "%s", p);
                return;
            }
        }
        o = (size_t)snprintf(looked, ln, "; not in the current directory nor in %s/cfg", share);
    }
    snprintf(p, sizeof p, "cfg/%s", path);
    if (o < ln && strncmp(path, "cfg/", 4) && !stat(p, &st) && S_ISREG(st.st_mode))
        snprintf(looked + o, ln - o, "; did you mean %s? (the configs are in cfg/)", p);
}

int config_load(const char *path, int argc, char **argv, Config *cfg, Err *err) {
    config_defaults(cfg);
    if (config_model_arg(argc, argv, &path, err)) return -1;
    if (path) {
        char looked[CFG_PATH + 64];
        config_find(path, cfg->file, sizeof cfg->file, looked, sizeof looked);
        if (ini_read(cfg, cfg->file, err)) {
            if (looked[0] && strlen(err->msg) + strlen(looked) < sizeof err->msg) strcat(err->msg, looked);
            return -1;
        }
    }
    if (overrides_apply(cfg, argc, argv, err)) return -1;
    if (cfg->hyp_file[0] && hyp_yaml_load(cfg, cfg->hyp_file, err)) return -1;
    config_set_nc(cfg, cfg->nc);
    return 0;
}

int config_load_run(const char *ini, int argc, char **argv, Config *cfg, Err *err) {
    config_defaults(cfg);
    snprintf(cfg->file, sizeof cfg->file, "%s", ini);
    if (ini_read(cfg, cfg->file, err)) return -1;
    char hyp[CFG_PATH];
    snprintf(hyp, sizeof hyp, "%s", cfg->hyp_file);
    cfg->hyp_file[0] = 0;                            // [hyp] holds its values: not read again
    if (overrides_apply(cfg, argc, argv, err)) return -1;
    if (cfg->hyp_file[0] && hyp_yaml_load(cfg, cfg->hyp_file, err)) return -1;   // named on the command line
    if (!cfg->hyp_file[0]) snprintf(cfg->hyp_file, sizeof cfg->hyp_file, "%s", hyp);
    config_set_nc(cfg, cfg->nc);
    return 0;
}

// ---- printing

// A [data] value as config_load reads it back: as written when it reads back the same (the INI's own
// lines always do), else in '...' ('' for a quote), the form a quoted value reads back as, so a
// second round trip prints the same text. An empty value is "".
static void data_format(const char *v, int quoted, char *buf, size_t n) {
    char copy[CFG_LINE_MAX + 1];
    snprintf(copy, sizeof copy, "%s", v);
    strip_comment(copy);
    if (!quoted && *v && !strcmp(trim(copy), v)) { snprintf(buf, n, "%s", v); return; }
    if (!*v) { snprintf(buf, n, "\"\""); return; }
    size_t o = 0;
    buf[o++] = '\'';
    for (const char *p = v; *p && o + 3 < n; p++) {
        if (*p == '\'') buf[o++] = '\'';
        buf[o++] = *p;
    }
    buf[o++] = '\'';
    buf[o] = 0;
}

void config_print(const Config *cfg, FILE *f) {
    char value[CFG_LINE_MAX + 1];
    fprintf(f, "# yolotrain configuration%s%s\n", cfg->file[0] ? ", read from " : "", cfg->file);
    for (int s = 0; cfg_sections[s]; s++) {
        const char *sec = cfg_sections[s];
        if (!strcmp(sec, "backbone") || !strcmp(sec, "head")) {
            int head = !strcmp(sec, "head"), lo = head ? cfg->n_backbone : 0;
            int hi = head ? cfg->n_layers : cfg->n_backbone;
            if (lo < hi) fprintf(f, "\n[%s]\n", sec);
            for (int l = lo; l < hi; l++) {
                layer_format(&cfg->layers[l], value, sizeof value);
                fprintf(f, "%d = %s\n", cfg->layers[l].index, value);
            }
        } else if (!strcmp(sec, "data")) {
            if (cfg->n_data_kv) fprintf(f, "\n[data]\n");
            for (int i = 0; i < cfg->n_data_kv; i++) {
                data_format(&cfg->data_kv[i].value[0], cfg->data_kv[i].quoted, value, sizeof value);
                fprintf(f, "%s = %s\n", cfg->data_kv[i].key, value);
            }
        } else {
            fprintf(f, "\n[%s]\n", sec);
            for (int i = 0; i < cfg_n_keys; i++) {
                if (strcmp(cfg_keys[i].section, sec)) continue;
                key_format(cfg, &cfg_keys[i], value, sizeof value);
                fprintf(f, "%s = %s\n", cfg_keys[i].name, value);
            }
        }
    }
}
