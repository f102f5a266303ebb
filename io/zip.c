// zip.c: see zip.h. The central directory at the end of the archive lists every entry (torch.save
// writes the zip64 form of its end records); each entry's local header then says where its bytes
// start. Layouts: PKWARE APPNOTE.TXT sections 4.3.7 (local header), 4.3.12 (central directory),
// 4.3.14-16 (end records), 4.5.3 (zip64 extra field).
#include "io/zip.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { LOCAL = 0x04034b50, CENTRAL = 0x02014b50, END = 0x06054b50, END64 = 0x06064b50, LOCATOR64 = 0x07064b50 };

typedef struct {
    const char *path;
    const unsigned char *buf;
    size_t size;
    Err *err;
} Archive;

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

// n bytes at off lie inside the archive
static int inside(const Archive *a, uint64_t off, uint64_t n) { return off <= a->size && n <= a->size - off; }

static int bad(const Archive *a, const char *what) {
    return err_set(a->err, "%s: %s; the file is truncated or not a PyTorch checkpoint (.pt)", a->path, what);
}

// Where the central directory starts, how long it is and how many entries it lists.
static int find_directory(const Archive *a, uint64_t *off, uint64_t *len, uint64_t *count) {
    if (a->size < 22) return bad(a, "too short for a zip archive");
    size_t lo = a->size > 22 + 65535 ? a->size - 22 - 65535 : 0, e = a->size - 22;
    while (le(a->buf + e, 4) != END) {            // the end record: last, before a comment of <= 64 KiB
        if (e == lo) return bad(a, "no zip end record");
        e--;
    }
    *count = le(a->buf + e + 10, 2), *len = le(a->buf + e + 12, 4), *off = le(a->buf + e + 16, 4);
    if (*count != 0xFFFF && *len != 0xFFFFFFFF && *off != 0xFFFFFFFF) return 0;
    if (e < 20 || le(a->buf + e - 20, 4) != LOCATOR64) return bad(a, "zip64 end record without its locator");
    uint64_t r = le(a->buf + e - 20 + 8, 8);
    if (!inside(a, r, 56) || le(a->buf + r, 4) != END64) return bad(a, "zip64 end record outside the file");
    *count = le(a->buf + r + 32, 8), *len = le(a->buf + r + 40, 8), *off = le(a->buf + r + 48, 8);
    return 0;
}

// The zip64 extra field holds, in this order, each of the three values that is 0xFFFFFFFF above.
static int zip64_values(const Archive *a, const unsigned char *x, size_t n, uint64_t *v[3]) {
    while (n >= 4) {
        size_t id = le(x, 2), len = le(x + 2, 2);
        if (len > n - 4) break;
        if (id == 1) {
            const unsigned char *p = x + 4;
            for (int k = 0; k < 3; k++) {
                if (*v[k] != 0xFFFFFFFF) continue;
                if (p + 8 > x + 4 + len) return bad(a, "short zip64 extra field");
                *v[k] = le(p, 8), p += 8;
            }
            return 0;
        }
        x += 4 + len, n -= 4 + len;
    }
    for (int k = 0; k < 3; k++)
        if (*v[k] == 0xFFFFFFFF) return bad(a, "zip64 sizes without their extra field");
    return 0;
}

// One central directory record at *pos: fill e and advance *pos.
static int read_entry(const Archive *a, uint64_t *pos, uint64_t end, ZipEntry *e) {
    const unsigned char *c = a->buf + *pos;
    if (end - *pos < 46 || le(c, 4) != CENTRAL) return bad(a, "broken zip central directory");
    uint64_t flags = le(c + 8, 2), method = le(c + 10, 2), csize = le(c + 20, 4), usize = le(c + 24, 4);
    uint64_t nlen = le(c + 28, 2), xlen = le(c + 30, 2), clen = le(c + 32, 2), local = le(c + 42, 4);
    if (end - *pos - 46 < nlen + xlen + clen) return bad(a, "zip central directory record runs past its end");
    e->name = xmalloc(nlen + 1);
    memcpy(e->name, c + 46, nlen);
    e->name[nlen] = 0;
    if (strlen(e->name) != nlen) return bad(a, "a zip entry name holds a NUL byte");
    if (zip64_values(a, c + 46 + nlen, xlen, (uint64_t *[3]){ &usize, &csize, &local })) return -1;
    *pos += 46 + nlen + xlen + clen;
    if (flags & 1) return err_set(a->err, "%s: zip entry %s is encrypted; not a PyTorch checkpoint", a->path, e->name);
    if (method != 0 || csize != usize)
        return err_set(a->err, "%s: zip entry %s is compressed (method %u); torch.save stores entries: re-save the "
                       "checkpoint with torch.save, or unzip and re-zip it with `zip -0`", a->path, e->name, (unsigned)method);
    if (!inside(a, local, 30) || le(a->buf + local, 4) != LOCAL) return bad(a, "zip local header outside the file");
    uint64_t start = local + 30 + le(a->buf + local + 26, 2) + le(a->buf + local + 28, 2);
    if (!inside(a, start, usize)) {
        char what[600];
        snprintf(what, sizeof what, "zip entry %.500s runs past the end of the file", e->name);
        return bad(a, what);
    }
    e->data = a->buf + start;
    e->size = usize;
    return 0;
}

static int by_name(const void *x, const void *y) { return strcmp(((const ZipEntry *)x)->name, ((const ZipEntry *)y)->name); }

int zip_read(const char *path, const unsigned char *buf, size_t size, Zip *z, Err *err) {
    Archive a = { path, buf, size, err };
    uint64_t off = 0, len = 0, count = 0;
    memset(z, 0, sizeof *z);
    if (find_directory(&a, &off, &len, &count)) return -1;
    if (!inside(&a, off, len) || count > len / 46) return bad(&a, "zip central directory outside the file");
    z->e = xcalloc(count + 1, sizeof *z->e);
    uint64_t pos = off;
    for (; z->n < (int)count; z->n++)
        if (read_entry(&a, &pos, off + len, &z->e[z->n])) { z->n++; zip_free(z); return -1; }
    qsort(z->e, z->n, sizeof *z->e, by_name);
    for (int i = 1; i < z->n; i++)
        if (!strcmp(z->e[i - 1].name, z->e[i].name)) {
            err_set(err, "%s: zip entry %.500s appears twice; not a PyTorch checkpoint", path, z->e[i].name);
            zip_free(z);
            return -1;
        }
    return 0;
}

const ZipEntry *zip_find(const Zip *z, const char *name) {
    ZipEntry key = { .name = (char *)name };
    return z->n ? bsearch(&key, z->e, z->n, sizeof *z->e, by_name) : NULL;
}

void zip_free(Zip *z) {
    for (int i = 0; i < z->n; i++) free(z->e[i].name);
    free(z->e);
    memset(z, 0, sizeof *z);
}
