// xml.h: a small XML reader for annotation files (Pascal VOC): the elements as a tree, each with its
// text and the line it starts on; attributes are read past, not kept. Bounded (nesting deeper than
// XML_MAX_DEPTH is an error); malformed text is an error naming file:line, never a crash.
#pragma once
#include <stddef.h>

#include "core/base/util.h"

#define XML_MAX_DEPTH 64

typedef struct XmlNode {
    char *name;
    char *text;               // the element's own text, entities decoded, white space trimmed
    int   line;               // where its start tag is
    int   n_child;
    struct XmlNode *child;    // (n_child) in document order
} XmlNode;

// Parse text (text[n] == 0) into *root, the document element. 0, or -1 with err "file:line: why".
int  xml_parse(const char *file, const char *text, size_t n, XmlNode *root, Err *err);
void xml_free(XmlNode *node);
// The first child element named `name`, or NULL.
const XmlNode *xml_child(const XmlNode *node, const char *name);
