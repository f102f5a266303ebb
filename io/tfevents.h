// tfevents.h: TensorBoard event files, written in C (no Python, no protobuf library). A file is a
// sequence of TFRecords, each: uint64 length, masked CRC32C of those 8 bytes, the data, masked CRC32C
// of the data (all little-endian). Each record's data is a protobuf `Event` (event.proto of
// tensorflow/core/util): wall_time 1 (double), step 2 (int64), then one of file_version 3 (the first
// record: "brain.Event:2"), summary 5 (`Summary`: repeated value 1, each a tag 1 and a simple_value 2
// (float) or an image 4: height 1, width 2, colorspace 3, encoded_image_string 4) or session_log 7
// (status 1: START = 1). io/pb.c encodes them.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/base/util.h"
#include "io/image.h"

uint32_t crc32c(const void *p, size_t n);               // CRC-32C (Castagnoli), as TFRecord uses
uint32_t crc32c_masked(const void *p, size_t n);        // rotated right 15 bits, plus 0xa282ead8
// One TFRecord around data[0..n) appended to f: 0, or -1 when a write fails (errno says why).
int      tfrecord_write(FILE *f, const void *data, size_t n);

typedef struct TfEvents TfEvents;
// Create DIR/events.out.tfevents.<10-digit Unix time>.<host>.<pid>.<n> (the name TensorBoard's own
// writer gives; n = 0, or the next free number) with its first record, file_version "brain.Event:2".
// NULL with err on failure.
TfEvents   *tfevents_open(const char *dir, Err *err);
const char *tfevents_path(const TfEvents *ev);
// One scalar (stored as float, as add_scalar does). Records are flushed by tfevents_flush.
void        tfevents_scalar(TfEvents *ev, const char *tag, double value, int64_t step);
// An image summary holding im as PNG (RGB, colorspace 3), as add_image(..., dataformats="HWC").
void        tfevents_image(TfEvents *ev, const char *tag, const Image *im, int64_t step);
// The same for a picture file (JPEG or PNG) the run wrote; 0, or -1 with err when it cannot be read.
int         tfevents_image_file(TfEvents *ev, const char *tag, const char *path, int64_t step, Err *err);
// SessionLog START at step: TensorBoard drops the points of earlier files at steps >= step (what a
// resumed run redoes), as SummaryWriter(purge_step=step) does.
void        tfevents_restart(TfEvents *ev, int64_t step);
void        tfevents_flush(TfEvents *ev);
// Flush and close; 0, or -1 when any write failed (a note was printed at the first failure).
int         tfevents_close(TfEvents *ev);
