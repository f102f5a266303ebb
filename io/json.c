// json.c: see json.h. RFC 8259 text read with a cursor: white space and line counting, then the
// structural calls (objects, arrays), the scalars, and json_skip for what the caller does not need.
#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/readfile.h"

int json_file_read(const char *path, char **buf, size_t *n, Err *err) {
    *buf = NULL;
    *n = 0;
    int fd = rf_open(path, "annotation file", err);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return err_set(err, "%s: %s", path, strerror(e));
    }
    if (st.st_size < 0 || (size_t)st.st_size > JSON_MAX_BYTES) {
        close(fd);
        return err_set(err, "%s: larger than 4 GB; not an annotation file", path);
    }
    size_t size = (size_t)st.st_size, got = 0;
    char *b = xmalloc(size + 1);
    while (got < size) {
        ssize_t r = read(fd, b + got, size - got);
        if (r <= 0) {
            int e = errno;
            close(fd);
            free(b);
            return err_set(err, "%s: cannot read: %s", path, r < 0 ? strerror(e) : "the file shrank while read");
        }
        got += (size_t)r;
    }
    close(fd);
    b[size] = 0;
    *buf = b;
    *n = size;
    return 0;
}

void json_begin(JsonCur *c, const char *file, const char *text, size_t n, Err *err) {
    memset(c, 0, sizeof *c);
    c->file = file;
    c->start = c->p = text;
    c->end = text + n;
    c->line = 1;
    c->err = err;
    if (n >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) c->p += 3;   // a UTF-8 byte-order mark
}

int json_fail(JsonCur *c, const char *fmt, ...) {
    if (c->failed) return -1;
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(c->err, "%s:%d: (byte %zu) %s", c->file, c->line, (size_t)(c->p - c->start), msg);
    c->failed = 1;
    return -1;
}

static void skip_ws(JsonCur *c) {
    for (; c->p < c->end; c->p++) {
        if (*c->p == '\n') c->line++;
        else if (*c->p != ' ' && *c->p != '\t' && *c->p != '\r') break;
    }
}

// What the cursor sees, for messages.
static const char *found(const JsonCur *c) {
    if (c->p >= c->end) return "the end of the file";
    switch (*c->p) {
    case '{': return "an object";
    case '[': return "an array";
    case '"': return "a string";
    case 't': case 'f': return "true/false";
    case 'n': return "null";
    default: return (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) ? "a number" : "a character that starts no JSON value";
    }
}

int json_peek(JsonCur *c) {
    if (c->failed) return 0;
    skip_ws(c);
    if (c->p >= c->end) return 0;
    switch (*c->p) {
    case '{': case '[': case '"': case 't': case 'f': return *c->p;
    case 'n': return '0';
    default: return (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) ? 'n' : 0;
    }
}

static int open_nested(JsonCur *c, char ch, const char *what) {
    if (c->failed) return -1;
    skip_ws(c);
    if (c->p >= c->end || *c->p != ch) return json_fail(c, "expected %s, found %s", what, found(c));
    if (c->depth >= JSON_MAX_DEPTH) return json_fail(c, "nested deeper than %d levels", JSON_MAX_DEPTH);
    c->p++;
    c->first[c->depth++] = 1;
    return 0;
}

int json_object(JsonCur *c) { return open_nested(c, '{', "an object"); }
int json_array(JsonCur *c)  { return open_nested(c, '[', "an array"); }

// Before the next element of the innermost object or array: 1 when there is one, 0 after its close.
static int next_element(JsonCur *c, char close) {
    if (c->failed) return -1;
    skip_ws(c);
    if (c->p < c->end && *c->p == close) {
        c->p++;
        c->depth--;
        return 0;
    }
    if (!c->first[c->depth - 1]) {
        if (c->p >= c->end || *c->p != ',')
            return json_fail(c, "expected ',' or '%c', found %s", close, found(c));
        c->p++;
        skip_ws(c);
        if (c->p < c->end && *c->p == close) return json_fail(c, "a comma before '%c'", close);
    }
    c->first[c->depth - 1] = 0;
    return 1;
}

int json_key(JsonCur *c, char *key, size_t n) {
    int r = next_element(c, '}');
    if (r != 1) return r;
    char *k;
    if (json_peek(c) != '"') return json_fail(c, "expected a key (a string), found %s", found(c));
    if (json_string(c, &k)) return -1;
    snprintf(key, n, "%s", k);
    free(k);
    skip_ws(c);
    if (c->p >= c->end || *c->p != ':') return json_fail(c, "expected ':' after the key \"%s\"", key);
    c->p++;
    return 1;
}

int json_item(JsonCur *c) { return next_element(c, ']'); }

int json_number(JsonCur *c, double *v) {
    if (json_peek(c) != 'n') return c->failed ? -1 : json_fail(c, "expected a number, found %s", found(c));
    const char *s = c->p;
    if (*s == '-') s++;
    if (*s == '0') s++;
    else if (*s >= '1' && *s <= '9') while (s < c->end && *s >= '0' && *s <= '9') s++;
    else return json_fail(c, "a '-' without digits");
    if (*s == '.') {
        if (!(s[1] >= '0' && s[1] <= '9')) return json_fail(c, "a '.' without digits after it");
        for (s++; *s >= '0' && *s <= '9'; s++) {}
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        if (!(*s >= '0' && *s <= '9')) return json_fail(c, "an exponent without digits");
        while (*s >= '0' && *s <= '9') s++;
    }
    // the text is NUL-terminated (json_file_read), so strtod stops at s or before
    char *end;
    *v = strtod(c->p, &end);
    if (end != s || !isfinite(*v)) return json_fail(c, "a number out of range");
    c->p = s;
    return 0;
}

static int hex4(const char *s, unsigned *u) {
    *u = 0;
    for (int i = 0; i < 4; i++) {
        char h = s[i];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return -1;
        *u = *u * 16 + (unsigned)d;
    }
    return 0;
}

size_t utf8_put(char *o, unsigned u) {
    if (u < 0x80) { o[0] = (char)u; return 1; }
    if (u < 0x800) { o[0] = (char)(0xC0 | u >> 6); o[1] = (char)(0x80 | (u & 63)); return 2; }
    if (u < 0x10000) {
        o[0] = (char)(0xE0 | u >> 12); o[1] = (char)(0x80 | ((u >> 6) & 63)); o[2] = (char)(0x80 | (u & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | u >> 18); o[1] = (char)(0x80 | ((u >> 12) & 63));
    o[2] = (char)(0x80 | ((u >> 6) & 63)); o[3] = (char)(0x80 | (u & 63));
    return 4;
}

// \uXXXX, with a surrogate pair; *s after the escape. 0 or -1.
static int unicode_escape(JsonCur *c, const char **s, unsigned *u) {
    if (*s + 5 > c->end || hex4(*s + 1, u)) return json_fail(c, "\\u needs four hex digits");
    *s += 5;
    if (*u >= 0xD800 && *u < 0xDC00) {
        unsigned lo;
        if (*s + 6 > c->end || (*s)[0] != '\\' || (*s)[1] != 'u' || hex4(*s + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
            return json_fail(c, "a \\u surrogate without its pair");
        *u = 0x10000 + ((*u - 0xD800) << 10) + (lo - 0xDC00);
        *s += 6;
    } else if (*u >= 0xDC00 && *u < 0xE000) {
        return json_fail(c, "a lone \\u surrogate");
    }
    return 0;
}

int json_string(JsonCur *c, char **out) {
    *out = NULL;
    if (json_peek(c) != '"') return c->failed ? -1 : json_fail(c, "expected a string, found %s", found(c));
    const char *s = c->p + 1;
    size_t cap = 64, n = 0;
    char *o = xmalloc(cap);
    for (;;) {
        if (s >= c->end) { free(o); return json_fail(c, "a string that never ends"); }
        if (n + 8 > cap) {
            if (cap > JSON_MAX_STRING) { free(o); return json_fail(c, "a string over %d bytes", JSON_MAX_STRING); }
            o = xrealloc(o, cap *= 2);
        }
        unsigned char ch = (unsigned char)*s;
        if (ch == '"') break;
        if (ch < 0x20) { free(o); return json_fail(c, "a control character (byte %u) inside a string", ch); }
        if (ch != '\\') { o[n++] = (char)ch; s++; continue; }
        const char *esc = "\"\\/bfnrt", *val = "\"\\/\b\f\n\r\t", *k = s + 1 < c->end ? strchr(esc, s[1]) : NULL;
        if (k && s[1]) { o[n++] = val[k - esc]; s += 2; continue; }
        unsigned u;
        if (s + 1 >= c->end || s[1] != 'u') { free(o); return json_fail(c, "an unknown escape in a string"); }
        s++;
        if (unicode_escape(c, &s, &u)) { free(o); return -1; }
        n += utf8_put(o + n, u);
    }
    o[n] = 0;
    c->p = s + 1;
    *out = o;
    return 0;
}

static int word(JsonCur *c, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n)) return json_fail(c, "expected %s", w);
    c->p += n;
    return 0;
}

int json_bool(JsonCur *c, int *v) {
    int t = json_peek(c);
    double d;
    if (t == 't') { *v = 1; return word(c, "true"); }
    if (t == 'f') { *v = 0; return word(c, "false"); }
    if (t == 'n' && json_number(c, &d) == 0) { *v = d != 0; return 0; }
    return c->failed ? -1 : json_fail(c, "expected true, false or a number, found %s", found(c));
}

int json_skip(JsonCur *c) {
    char key[8];
    double d;
    char *s;
    switch (json_peek(c)) {
    case '{':
        if (json_object(c)) return -1;
        for (int r; (r = json_key(c, key, sizeof key)) != 0; )
            if (r < 0 || json_skip(c)) return -1;
        return 0;
    case '[':
        if (json_array(c)) return -1;
        for (int r; (r = json_item(c)) != 0; )
            if (r < 0 || json_skip(c)) return -1;
        return 0;
    case '"': if (json_string(c, &s)) return -1; free(s); return 0;
    case 't': return word(c, "true");
    case 'f': return word(c, "false");
    case '0': return word(c, "null");
    case 'n': return json_number(c, &d);
    default: return c->failed ? -1 : json_fail(c, "expected a value, found %s", found(c));
    }
}

int json_end(JsonCur *c) {
    if (c->failed) return -1;
    skip_ws(c);
    return c->p < c->end ? json_fail(c, "text after the end of the JSON value") : 0;
}
