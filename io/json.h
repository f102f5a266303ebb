// json.h: a small JSON reader for annotation files (COCO instances): a cursor over the text that reads
// the values a caller asks for and skips the rest, so a 450 MB file needs no tree in memory.
// Bounded: nesting deeper than JSON_MAX_DEPTH, a string over JSON_MAX_STRING bytes or any malformed
// text is an error naming file:line (byte N); never a crash.
#pragma once
#include <stddef.h>

#include "core/base/util.h"

#define JSON_MAX_DEPTH  256
#define JSON_MAX_STRING (1 << 20)
#define JSON_MAX_BYTES  ((size_t)4 << 30)   // a larger annotation file is not one of ours

typedef struct {
    const char *file;       // for messages
    const char *start, *p, *end;
    int   line;             // line of *p (1-based)
    int   depth;
    unsigned char first[JSON_MAX_DEPTH];   // per open object/array: no element read yet
    Err  *err;              // the first error; every call fails after it
    int   failed;
} JsonCur;

// The whole file in memory (*buf, *n; free(*buf)); 0, or -1 with err naming the file.
int  json_file_read(const char *path, char **buf, size_t *n, Err *err);
// text[n] must be 0 (json_file_read's buffer is).
void json_begin(JsonCur *c, const char *file, const char *text, size_t n, Err *err);

// The type of the next value: '{', '[', '"', 'n' (number), 't'/'f' (true/false), '0' (null), or 0
// at the end of the text or after an error (then err is set).
int json_peek(JsonCur *c);
// Objects: json_object() enters one; json_key() gives each key in turn (1, the key in key[n], cut to
// fit) and 0 after the closing brace; the caller reads or skips the key's value before the next call.
int json_object(JsonCur *c);
int json_key(JsonCur *c, char *key, size_t n);   // 1, 0, or -1 on an error
// Arrays likewise: json_array() enters, json_item() is 1 before each element, 0 after the closing bracket.
int json_array(JsonCur *c);
int json_item(JsonCur *c);
// Scalars: 0, or -1 when the next value is not of the kind (err names what was found).
int json_number(JsonCur *c, double *v);
int json_string(JsonCur *c, char **out);      // decoded (\uXXXX as UTF-8); free(*out)
int json_bool(JsonCur *c, int *v);            // true/false, or a number (0 is false), as COCO writers do
int json_skip(JsonCur *c);                    // any value
// The end of the text: only white space may follow the top value. 0 or -1.
int json_end(JsonCur *c);
// The UTF-8 bytes of code point u (<= 0x10FFFF) into o[0..4); returns how many (io/xml.c uses it too).
size_t utf8_put(char *o, unsigned u);
// Report an error at the cursor ("file:line: (byte N) msg"); returns -1.
int json_fail(JsonCur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
