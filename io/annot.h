// annot.h: datasets described by annotation files instead of YOLO label files: a COCO instances
// .json (io/coco.c) and a Pascal VOC tree of XML files (io/voc.c). Each reader lists the images
// with their boxes in pixels; io/dataset.c checks them as it checks YOLO labels, so train, val,
// check and the caches see one Sample list whichever form the data has.
#pragma once
#include "io/strlist.h"   // (not io/dataset.h, which includes this: reasons are its DatasetReason values)

typedef struct {
    int    cls;              // class index (valid unless why)
    double x1, y1, x2, y2;   // corners in pixels of the declared size
    int    line;             // where the box is written
    const char *kind;        // what it is, for messages: "annotation id" (COCO), "annotation" (COCO, an entry
    double id;               //   without an id: its place in the list, from 1) or "object" (VOC, from 1), and id
    char  *why;              // non-NULL: the box is unusable, this says why (the image is excluded)
    int    reason;           // with why: its DatasetReason
} AnnBox;

typedef struct {
    char   *image;           // the image file's path (it may not exist: problem says so)
    char   *file;            // the annotation file describing it (.json or .xml)
    int     line;            // where in it
    int     w, h;            // the declared size; 0: the image's own
    int     has_id;          // COCO: 1, the image's id
    long long id;
    int     nbox;
    AnnBox *box;             // (nbox) in file order
    char   *problem;         // non-NULL: the image is excluded ("file:line: ..."), with reason
    int     reason;
} AnnImage;

typedef struct {
    AnnImage *v;
    int       n, cap;
    StrList   warnings;      // "file:line: ..." lines, counted as warnings
    StrList   notes;         // lines said once, not counted (skipped crowd or difficult objects)
    long long *category_id;  // the first COCO file's category ids in class order (n_cat), else NULL
    int       n_cat;
} AnnSet;

void      annset_free(AnnSet *s);
AnnImage *annset_push(AnnSet *s);        // a zeroed entry
void      annset_sort(AnnSet *s);        // by image path (strcmp), stable
const AnnImage *annset_find(const AnnSet *s, const char *image);   // sorted; NULL when absent

// What a split's source is: ANN_COCO for a .json file, ANN_VOC for a VOC root (a folder holding
// Annotations/) or one of its ImageSets/Main/*.txt lists, else ANN_NONE (YOLO folders and lists).
typedef enum { ANN_NONE, ANN_COCO, ANN_VOC } AnnKind;
AnnKind annot_kind(const char *src);

// The classes the source defines, appended to names: COCO's categories in id order with their names;
// for VOC every object name its XML files use, sorted (VOC's 20 classes come in the order of
// Ultralytics' VOC.yaml). 0, or -1 with err.
int annot_names(const char *src, AnnKind kind, const char *split, StrList *names, Err *err);

// Read a source into out (appended). names (nc) are the dataset's classes: COCO categories map to
// them by id order (the counts must agree), VOC objects by name. images_dir, when not NULL, is the
// folder a COCO file's file_names resolve in (data.yaml's train_images: ...). split picks a VOC
// root's ImageSets/Main/<split>.txt. 0, or -1 with err for a file that cannot be used at all
// (unreadable, malformed, without images); problems of single images or boxes are left in out.
int coco_read(const char *json, const char *images_dir, char *const *names, int nc, AnnSet *out, Err *err);
int coco_names(const char *json, StrList *names, Err *err);
int voc_read(const char *src, const char *split, char *const *names, int nc, AnnSet *out, Err *err);
int voc_names(const char *src, const char *split, StrList *names, Err *err);
