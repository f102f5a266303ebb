// synth.h: the built-in synthetic detection dataset: six classes of shapes on textured backgrounds,
// written as real JPEG files with YOLO labels and a data.yaml, the same bytes for the same config.
#pragma once
#include <stdint.h>
#include "core/base/util.h"
#include "io/image.h"

#define SYNTH_DIR         "data/synth"         // default folder, relative to the working directory
#define SYNTH_SMALL_NAME  "synth-small"        // data= naming the small-image set ...
#define SYNTH_SMALL_DIR   "data/synth-small"   // ... made here
#define SYNTH_NC          6
#define SYNTH_MAX_OBJECTS 8                    // at most placed per image (some may be dropped as hidden)

extern const char *const synth_names[SYNTH_NC];   // circle square triangle ring cross star

typedef struct {
    int      n_train, n_val;       // images per split (512, 128)
    int      min_side, max_side;   // each image side drawn uniformly in [min, max] pixels (256, 480)
    int      max_objects;          // shapes placed per image: 1 + uniform [0, max_objects) (8, at most 8)
    int      min_diameter;         // shape diameters log-uniform from this many pixels (12) ...
    double   max_diameter;         // ... to this share of the image's short side (0.4)
    uint64_t seed;                 // 0
    int      threads;              // writer threads; 0 = online CPUs
} SynthConfig;

// One labelled object: its class, flat colour and tight pixel box of its visible part
// (x1,y1 inclusive top-left pixel edge, x2,y2 exclusive bottom-right edge).
typedef struct { int cls; uint8_t rgb[3]; int x1, y1, x2, y2; } SynthObject;

SynthConfig synth_defaults(void);
// The small-image set (data=synth-small: cfg/quick.ini, test_learn_map): 512 train and 64 val images of 128-160 px,
// up to 4 shapes of 20 px and up, so that at imgsz 96 the smallest are still 12 px.
SynthConfig synth_small(void);
// The folder of the built-in set data= names: "" the default set (SYNTH_DIR), "synth-small" the small one
// (SYNTH_SMALL_DIR); NULL for any other value (a data.yaml).
const char *synth_builtin_dir(const char *data);
// Render image `index` of split 0 (train) or 1 (val) in memory, before JPEG encoding: *out gets a new
// image (image_free it), obj[] its labelled objects in label-file order; returns their count.
int synth_render(const SynthConfig *c, int split, int index, Image *out,
                 SynthObject obj[SYNTH_MAX_OBJECTS]);
// (Re)generate the dataset under dir: images/{train,val}/NNNNNN.jpg, labels/{train,val}/NNNNNN.txt,
// data.yaml and a completion marker written last. Our own numbered files beyond the new counts
// are removed. Returns 0, or -1 with err naming the path that could not be written.
int synth_generate(const char *dir, const SynthConfig *c, Err *err);
// Generate a built-in set's folder (synth_small() for SYNTH_SMALL_DIR, else synth_defaults()) unless it already
// holds a completed dataset. Returns 0 or -1.
int synth_ensure(const char *dir, Err *err);
