// zip.h: the entries of a zip archive held in memory, as torch.save writes them: stored (not
// compressed) files whose bytes are used in place. Every offset and size is checked against the
// buffer, so a truncated or crafted archive gets a message, never a read outside it.
#pragma once
#include <stddef.h>

#include "core/base/util.h"

typedef struct {
    char                *name;    // NUL-terminated copy of the entry's name
    const unsigned char *data;    // inside the buffer
    size_t               size;
} ZipEntry;

typedef struct {
    ZipEntry *e;                  // (n) sorted by name, for zip_find
    int       n;
} Zip;

// zip_read: list the entries of the archive in buf (size bytes); `path` names it in messages.
// Refuses a missing end record, a central directory or entry outside the buffer, a compressed or
// encrypted entry, two entries of one name. Returns 0, or -1 with err; release with zip_free.
int zip_read(const char *path, const unsigned char *buf, size_t size, Zip *z, Err *err);
const ZipEntry *zip_find(const Zip *z, const char *name);   // NULL when absent
void zip_free(Zip *z);
