// xml.c: see xml.h. Recursive descent over the text: the prolog (declaration, comments, DOCTYPE),
// then one element: its start tag, its content (text, CDATA, comments, processing instructions,
// child elements) and its end tag, whose name must match.
#include "io/xml.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"   // utf8_put

typedef struct {
    const char *file, *p, *end;
    int line;
    Err *err;
} XmlCur;

static int fail(XmlCur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(XmlCur *c, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(c->err, "%s:%d: %s (not well-formed XML)", c->file, c->line, msg);
}

static void advance(XmlCur *c, size_t n) {
    for (; n && c->p < c->end; n--, c->p++) c->line += *c->p == '\n';
}

static int starts(const XmlCur *c, const char *s) {
    size_t n = strlen(s);
    return (size_t)(c->end - c->p) >= n && !memcmp(c->p, s, n);
}

// Past the next `close` ("-->", "?>", "]]>"); -1 when the text ends first.
static int skip_past(XmlCur *c, const char *close, const char *what) {
    const char *q = strstr(c->p, close);   // text[n] == 0; an inner NUL ends the search: an error
    if (!q || q >= c->end) return fail(c, "%s is never closed", what);
    advance(c, (size_t)(q - c->p) + strlen(close));
    return 0;
}

static void skip_ws(XmlCur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n')) advance(c, 1);
}

static int name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' ||
           ch == '-' || ch == '.' || ch == ':' || (unsigned char)ch >= 0x80;
}

static char *read_name(XmlCur *c) {
    const char *s = c->p;
    while (c->p < c->end && name_char(*c->p)) c->p++;
    if (c->p == s || (*s >= '0' && *s <= '9') || *s == '-' || *s == '.') {
        fail(c, "expected a name");
        return NULL;
    }
    return strndup(s, (size_t)(c->p - s));
}

// Text with its entities decoded, appended to *buf (size *n, capacity *cap).
typedef struct { char *v; size_t n, cap; } Buf;

static void buf_put(Buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap) b->cap = b->cap ? 2 * b->cap : 64;
        b->v = xrealloc(b->v, b->cap);
    }
    memcpy(b->v + b->n, s, n);
    b->n += n;
    b->v[b->n] = 0;
}

static int entity(XmlCur *c, Buf *b) {
    static const char *const names[] = {"lt;", "gt;", "amp;", "quot;", "apos;"};
    static const char chars[] = "<>&\"'";
    c->p++;   // past '&'
    for (int i = 0; i < 5; i++)
        if (starts(c, names[i])) { buf_put(b, &chars[i], 1); advance(c, strlen(names[i])); return 0; }
    if (*c->p == '#') {
        int hex = c->p + 1 < c->end && c->p[1] == 'x';
        char *end;
        const char *digits = c->p + 1 + hex;
        unsigned long u = strtoul(digits, &end, hex ? 16 : 10);
        if (!(*digits >= '0' && *digits <= '9') && !(hex && strchr("abcdefABCDEF", *digits) && *digits)) u = 0;
        if (end == digits || end >= c->end || *end != ';' || u == 0 || u > 0x10FFFF)
            return fail(c, "a bad character reference");
        char o[4];
        buf_put(b, o, utf8_put(o, (unsigned)u));
        advance(c, (size_t)(end - c->p) + 1);
        return 0;
    }
    return fail(c, "an unknown entity (&lt; &gt; &amp; &quot; &apos; and &#N; are known)");
}

// Attributes up to '>' or '/>': names and quoted values, read past. *empty: the tag ends with '/>'.
static int attributes(XmlCur *c, int *empty) {
    for (;;) {
        skip_ws(c);
        if (c->p >= c->end) return fail(c, "a tag that never ends");
        if (*c->p == '>') { advance(c, 1); *empty = 0; return 0; }
        if (starts(c, "/>")) { advance(c, 2); *empty = 1; return 0; }
        char *name = read_name(c);
        if (!name) return -1;
        free(name);
        skip_ws(c);
        if (c->p >= c->end || *c->p != '=') return fail(c, "an attribute without '=\"value\"'");
        advance(c, 1);
        skip_ws(c);
        char q = c->p < c->end ? *c->p : 0;
        if (q != '"' && q != '\'') return fail(c, "an attribute value must be quoted");
        advance(c, 1);
        const char *e = memchr(c->p, q, (size_t)(c->end - c->p));
        if (!e) return fail(c, "an attribute value that never ends");
        advance(c, (size_t)(e - c->p) + 1);
    }
}

static void trim(char *s) {
    size_t n = strlen(s), i = 0;
    while (n && strchr(" \t\r\n", s[n - 1])) s[--n] = 0;
    while (s[i] && strchr(" \t\r\n", s[i])) i++;
    memmove(s, s + i, n - i + 1);
}

static int element(XmlCur *c, XmlNode *node, int depth);

// Content up to the end tag of `node`.
static int content(XmlCur *c, XmlNode *node, int depth, Buf *text) {
    for (;;) {
        if (c->p >= c->end) return fail(c, "<%s> (line %d) is never closed", node->name, node->line);
        if (*c->p == '&') { if (entity(c, text)) return -1; continue; }
        if (*c->p != '<') {
            const char *s = c->p;
            while (c->p < c->end && *c->p != '<' && *c->p != '&') advance(c, 1);
            buf_put(text, s, (size_t)(c->p - s));
            continue;
        }
        if (starts(c, "<!--")) { if (skip_past(c, "-->", "a comment")) return -1; continue; }
        if (starts(c, "<?")) { if (skip_past(c, "?>", "a processing instruction")) return -1; continue; }
        if (starts(c, "<![CDATA[")) {
            advance(c, 9);
            const char *s = c->p, *q = strstr(s, "]]>");
            if (!q || q >= c->end) return fail(c, "a CDATA section is never closed");
            buf_put(text, s, (size_t)(q - s));
            advance(c, (size_t)(q - s) + 3);
            continue;
        }
        if (starts(c, "</")) {
            advance(c, 2);
            char *name = read_name(c);
            if (!name) return -1;
            int same = !strcmp(name, node->name);
            free(name);
            if (!same) return fail(c, "an end tag that does not match <%s> (line %d)", node->name, node->line);
            skip_ws(c);
            if (c->p >= c->end || *c->p != '>') return fail(c, "expected '>' to end the end tag");
            advance(c, 1);
            return 0;
        }
        XmlNode kid = {0};
        if (element(c, &kid, depth + 1)) { xml_free(&kid); return -1; }
        node->child = xrealloc(node->child, (size_t)(node->n_child + 1) * sizeof *node->child);
        node->child[node->n_child++] = kid;
    }
}

static int element(XmlCur *c, XmlNode *node, int depth) {
    if (depth >= XML_MAX_DEPTH) return fail(c, "elements nested deeper than %d", XML_MAX_DEPTH);
    if (c->p >= c->end || *c->p != '<') return fail(c, "expected an element");
    node->line = c->line;
    advance(c, 1);
    if (!(node->name = read_name(c))) return -1;
    int empty = 0;
    if (attributes(c, &empty)) return -1;
    Buf text = {0};
    buf_put(&text, "", 0);
    int rc = empty ? 0 : content(c, node, depth, &text);
    trim(text.v);
    node->text = text.v;
    return rc;
}

// Declaration, comments, processing instructions and a DOCTYPE before or after the element.
static int misc(XmlCur *c) {
    for (;;) {
        skip_ws(c);
        if (starts(c, "<?")) { if (skip_past(c, "?>", "the XML declaration")) return -1; }
        else if (starts(c, "<!--")) { if (skip_past(c, "-->", "a comment")) return -1; }
        else if (starts(c, "<!DOCTYPE")) { if (skip_past(c, ">", "the DOCTYPE")) return -1; }
        else return 0;
    }
}

int xml_parse(const char *file, const char *text, size_t n, XmlNode *root, Err *err) {
    memset(root, 0, sizeof *root);
    XmlCur c = {.file = file, .p = text, .end = text + n, .line = 1, .err = err};
    if (n >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) c.p += 3;
    if (misc(&c)) return -1;
    if (c.p >= c.end) return fail(&c, "no element");
    if (element(&c, root, 0) || misc(&c)) { xml_free(root); return -1; }
    if (c.p < c.end) { xml_free(root); return fail(&c, "text after the document element"); }
    return 0;
}

void xml_free(XmlNode *node) {
    for (int i = 0; i < node->n_child; i++) xml_free(&node->child[i]);
    free(node->child);
    free(node->name);
    free(node->text);
    memset(node, 0, sizeof *node);
}

const XmlNode *xml_child(const XmlNode *node, const char *name) {
    for (int i = 0; i < node->n_child; i++)
        if (!strcmp(node->child[i].name, name)) return &node->child[i];
    return NULL;
}
