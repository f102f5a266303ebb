// readfile.h: the one way yolotrain opens a file it reads (config, hyp, data.yaml, list files,
// images, labels, weights, a resume folder's files). A FIFO or a device named where a file belongs
// must not hang or flood a run, so the open never blocks and anything but a regular file is refused.
#pragma once
#include <stddef.h>
#include <stdio.h>

#include "core/base/util.h"

#define RF_TEXT_MAX_BYTES ((size_t)256 << 20)   // a text input larger than this is not one of ours
#define RF_LINE_MAX       (1 << 20)             // longest line of a text input (a label row, a yaml line)

// Open `path` read-only: O_NONBLOCK (a FIFO with no writer opens at once), fstat, refuse what is not
// a regular file, then clear O_NONBLOCK. `role` names what the file is for ("label file"), for the
// message. Returns the descriptor, or -1 with err set and errno kept (ENOENT: there is no such file).
int rf_open(const char *path, const char *role, Err *err);
FILE *rf_fopen(const char *path, const char *role, Err *err);   // the same as a stdio stream

// A folder that a run reads from (resume=): it exists and is a folder. 0, or -1 with err set.
int rf_check_dir(const char *path, const char *role, Err *err);

// A whole text file in memory, NUL-terminated (buf[n] == 0). Refused with file:line: a NUL byte
// (binary data), a line over RF_LINE_MAX, a file over RF_TEXT_MAX_BYTES.
typedef struct { char *buf; size_t n; } TextFile;
int  rf_text_read(const char *path, const char *role, TextFile *t, Err *err);
void rf_text_free(TextFile *t);
// Check text already in memory (the same rules); `path` is for the message.
int  rf_text_check(const char *path, const char *buf, size_t n, Err *err);
// The next line of t from *pos: its start and length without the end of line (\n, \r\n or \r).
// Returns 0 when there is no more.
int  rf_text_line(const TextFile *t, size_t *pos, const char **s, size_t *len);
