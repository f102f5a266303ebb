// strlist.h: what the dataset readers (io/dataset.c, io/data_yaml.c) share: a growable list of owned
// strings, and strings and paths built with a format.
#pragma once
#include "core/util.h"

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
