// strlist.h: what the dataset readers (io/dataset.c, io/data_yaml.c) and detect's sources share: a
// growable list of owned strings, strings and paths built with a format, and image list files.
#pragma once
#include "core/base/util.h"

typedef struct { char **v; int n, cap; } StrList;

void strlist_push(StrList *l, char *s);            // takes ownership of s
void strlist_free(StrList *l);
void strlist_sort(StrList *l);                     // string order, as Python's sorted()
int  strlist_has(const StrList *l, const char *s); // l sorted
// A new string from a printf format (xmalloc: never NULL).
char *str_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// The folder part of a path: "a/b.yaml" -> "a", "b.yaml" -> ".", "/b" -> "/".
char *path_dir(const char *path);
// dir/rel, or rel alone when it is absolute or dir is "."; leading "./" of rel is dropped so that
// paths print the way users write them.
char *path_join(const char *dir, const char *rel);

// The entries of a list file (one image path a line, a data.yaml split's .txt): a UTF-8 byte-order mark,
// blanks around an entry and blank lines dropped; a relative entry joined to the list file's folder
// (path_join: "./" dropped). Appended to out, with each one's line number in *lines (grown to match;
// free it) and, unless written is NULL, the entry as written in written. role names the file in
// errors. Returns 0, or -1 with err (unreadable or not text).
int list_file_read(const char *file, const char *role, StrList *out, int **lines, StrList *written, Err *err);
