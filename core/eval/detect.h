// detect.h: `yolotrain detect`: run a trained model on images (a file, a folder or a .txt list) as
// YOLOv9's detect.py does, writing each image with its boxes drawn and a YOLO-format label file.
#pragma once
#include "cfg/config.h"
#include "core/spec/nms.h"
#include "core/eval/val.h"

#define DETECT_E2E_MAX_DET 300   // an end-to-end (YOLO26) model keeps at most the top 300, as Ultralytics' predict

typedef struct {
    char       source[CFG_PATH];   // an image, a folder of images, or a .txt list of image paths
    NmsOptions nms;                // nms_detect_options() with conf= and iou= applied
    int        save_conf;          // 1: label rows end with the score (detect.py --save-conf); or the config's save_conf
    int        nosave;             // nosave=1: no drawn pictures (detect.py --nosave)
} DetectOptions;

// detect_take_args: take the keys the config does not know (source=, conf=, iou=, nosave=;
// also --key value and --key=value; '-' reads as '_'; --nosave alone means 1) out of
// argv, shifting the rest down and lowering *argc, so config_load sees only its own keys. Returns 0, or -1 with err for a bad number or a missing value. source stays "" when absent.
int detect_take_args(int *argc, char **argv, DetectOptions *o, Err *err);

// detect_run: the model of cfg with cfg->weights (required; nc is read from them) on o->source.
// Class names: the dataset's when data= (or [data]) is given, else the built-in synthetic dataset's
// when nc matches it, else class0, class1, ... Output: runs/detect/NAME (exp, exp2, ...; project= on the
// command line and exist_ok=: core/train/outdir.h) holding the drawn images (same file names; none with
// nosave=1, and no folder with nosave=1 and no save_txt=1) and, with save_txt=1, labels/STEM.txt for
// each image with detections: `cls cx cy w h` rows normalised to the image (`... conf` with save_conf=1), as detect.py --save-txt [--save-conf]. The
// last line counts the label files written. device= as for training (cpu, cpu:N, 0, 0,1, ...;
// core/devices/infer_devices.h): with n devices image i runs on device i % n, one thread each; the files are
// those of one device and the per-image lines print in source order. Returns the exit status (2: a
// user error in the device, weights or source).
int detect_run(Config *cfg, const DetectOptions *o);

// detect_boxes: image 0 of head maps (host memory) of a letterboxed input img_h pixels high into
// dec->det, best first, in pixels of the original w0 x h0 image (unpadded, divided by lb->r, clipped).
// Returns the count. DFL heads: decode + NMS; end-to-end heads: top-k (core/eval/val_decode.c).
int detect_boxes(ValDecoder *dec, const Model *m, const Map head[], int img_h, const LetterboxInfo *lb,
                 int w0, int h0);
// labels/STEM.txt: `cls cx cy w h` rows (with_conf: `cls cx cy w h conf`) normalised to a w x h image,
// '%g' as detect.py writes them. Returns 0, or -1 with err naming the file.
int detect_write_labels(const char *path, const Det *d, int nd, int w, int h, int with_conf, Err *err);
