// dataset.h: a YOLO-layout detection dataset: image files paired with label files, described by an
// Ultralytics-style data.yaml or an INI [data] section, validated before use.
#pragma once
#include <stdio.h>

#include "cfg/config.h"
#include "core/base/util.h"

typedef struct { int cls; float cx, cy, w, h; } Box;   // normalised to the image, centre and size

typedef struct {
    char *image;        // path of the image file
    char *label;        // path of its label file (may not exist: a background image)
    int   w, h;         // image size from its header
    int   channels;     // colour components stored in the file (1 gray, 2 gray+alpha, 3, 4)
    int   nbox;
    Box  *box;          // (nbox): file order, or np.unique order when the file had duplicate rows
    int   has_id;       // 1: the image's id in its COCO file is id (save_json writes it as the image_id)
    long long id;
} Sample;

// Why an image was left out; each excluded image is counted under the first reason found.
typedef enum {
    DS_UNSUPPORTED,     // not JPEG/PNG (bmp, tif, webp, ...): our decoders read only those two
    DS_BAD_IMAGE,       // unreadable or corrupt image, or smaller than 10 px
    DS_BAD_LABEL_FILE,  // label file unreadable
    DS_BAD_CLASS,       // class id not an integer in [0, nc)
    DS_BAD_COUNT,       // wrong number of values on a row
    DS_NOT_NUMBER,      // NaN, inf or not a number
    DS_OUT_OF_BOUNDS,   // a coordinate outside [0,1] by more than 0.01
    DS_MIN_ITEMS,       // fewer than min_items labels (an option, never fatal under strict)
    DS_N_REASONS
} DatasetReason;
extern const char *const dataset_reason_name[DS_N_REASONS];

typedef struct {
    int     n;          // samples kept after validation
    Sample *s;          // (n), sorted by image path
    int     nc;
    char  **names;      // nc class names
    int     n_excluded, n_background, n_warnings;
    // what validation found (check prints these)
    int     n_listed;             // image files found, before validation
    int     n_instances;          // boxes over kept samples
    int    *class_count;          // (nc) instances per class over kept samples
    long long *category_id;       // (nc) a COCO dataset's category id of each class (save_json), or NULL
    int     n_gray;               // kept samples whose file has one colour component
    int     n_orphan_labels;      // label files with no image (ignored, not a warning)
    int     n_duplicates;         // duplicate label rows dropped (each also a warning)
    int     n_zero_boxes;         // zero-width or zero-height boxes dropped, their images kept (warnings)
    int     excluded_by[DS_N_REASONS];
} Dataset;

typedef struct {
    int   strict;       // 1: an excluded image makes dataset_open fail (after reporting all of them);
                        // implies decode
    int   decode;       // 1: decode every image (not only its header): a damaged one is excluded
    int   min_items;    // > 0: drop images with fewer labels (YOLOv9 --min-items); not a problem
    int   nc;           // > 0: validate class ids against this (the model's nc) instead of the names
    int   quiet;        // 1: no summary line (problems are still reported)
    int   single_cls;   // 1: every label's class becomes 0, nc 1, names ['item'] (kept when the data has
                        // one name), as train.py --single-cls; class ids are still checked against the
                        // data's names (not opt->nc) first, as Ultralytics' label check
    double fraction;    // 0 < f < 1: only the first round(f * n) of the sorted image list, before
                        // validation (Ultralytics' fraction=, Python's round: half to even); else all
    FILE *report;       // where problems and the summary go; NULL = stderr
} DatasetOptions;

// Where the splits of a dataset live, read from a data.yaml or an INI [data] section; all paths
// resolved. Relative paths resolve against `path:` (itself relative to the describing file's folder)
// or, without it, against that file's folder (for [data] keys: the INI's folder, cfg->file); never
// against the current directory, which Ultralytics also tries. Entries of a .txt list resolve
// against the list file's folder (Ultralytics does so only for entries starting with "./").
enum { DS_TRAIN, DS_VAL, DS_TEST, DS_N_SPLITS };
extern const char *const dataset_split_key[DS_N_SPLITS];   // "train", "val", "test" (io/data_yaml.c)
int dataset_split_index(const char *key);                  // DS_* of a split key, -1 for none
typedef struct {
    char  *file;                    // the yaml or INI it came from (for messages)
    int    nc;
    char **names;                   // (nc)
    char **src[DS_N_SPLITS];        // folders or list files, resolved
    int    n_src[DS_N_SPLITS];
    Where  at[DS_N_SPLITS];         // where each split's key is written; line 0: absent
    char  *images[DS_N_SPLITS];     // train_images: ...: the folder a COCO split's file_names resolve in, or NULL
    char  *download_note;           // for a download: key, the line saying what to fetch, or NULL
} DataSpec;

// Read a data.yaml (yaml != NULL), else cfg->data when set, else cfg's [data] keys. A split may also
// name a COCO .json or a VOC root (io/annot.h); without names: the classes come from those files
// (COCO categories in id order, VOC object names sorted); train_images: etc. only beside a .json. `names` may be
// a list or a {0: a, 1: b} mapping (an INI: "a, b" or "[a, b]", quoted as YAML quotes); `nc`, when given, must equal the
// number of names; `train` and `val` are required; unknown yaml keys are ignored. A relative `path:`
// resolves from the description's folder, and when no folder is there, from the current directory
// (yolov9's habit); when neither exists the error names both. `download:` gives download_note:
// yolotrain does not download, and the URLs it names (dataset_open reports it once per file).
// Returns 0, or -1 with err naming file:line.
int  dataspec_read(const char *yaml, const Config *cfg, DataSpec *out, Err *err);
void dataspec_free(DataSpec *d);
// dataspec_root: the folder a config's [data] section resolves its splits from (its `path`, found as
// dataspec_read finds it, else the config's folder), absolute; NULL with err when it has no such folder.
char *dataspec_root(const Config *cfg, Err *err);

// List and validate one split ("train", "val" or "test"). A COCO .json or VOC source gives its images
// and their boxes (io/coco.c, io/voc.c), checked as label rows are, each problem as "file:line: reason"
// of the annotation file; the rest below is the YOLO layout. Images: files with extensions bmp dng
// jpeg jpg mpo png tif tiff webp pfm (any case) found recursively in folders (hidden entries skipped,
// symlinks followed, each folder once) and in list files; sorted by path (string order, like the
// reference); a path listed twice is kept once. Each pairs with the label at its path with the last
// /images/ replaced by /labels/ and the extension by .txt; a missing or empty label file makes a
// background image. Only JPEG and PNG are decoded: other formats are excluded as unsupported.
// Every problem goes to opt->report as "file:line: reason" (labels) or "file: reason" (images) and
// the image is excluded; duplicate label rows are dropped instead, with a warning, and such a file's
// rows become np.unique's sorted order. Rows with more than 6 values make the whole file polygons,
// each turned into its bounding box (the points themselves are not kept). Coordinates within 0.01
// outside [0,1] are clipped, with a warning. Label files in the labels folder of a listed image
// folder that match no image are reported and counted, not warned about (list files choose subsets
// on purpose, so their folders are not scanned). A summary line follows unless opt->quiet.
// opt may be NULL (defaults). Returns 0, or -1 with err: bad description, no images, nothing usable,
// no labels at all in "train", or (strict) any exclusion other than min_items. On -1, *out holds
// nothing to free.
int  dataset_open(const char *yaml, const Config *cfg, const char *split,
                  const DatasetOptions *opt, Dataset *out, Err *err);
void dataset_free(Dataset *ds);
