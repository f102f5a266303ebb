// val.h: validation as YOLOv9's val.py runs it: the model in evaluation mode (BN running statistics)
// over a dataset split in rect batches (sorted by aspect ratio, each letterboxed to its own shape),
// NMS (or YOLO26's NMS-free top-k), boxes mapped back to the original images, then P, R, mAP50 and
// mAP50-95 overall and per class (core/eval/metrics.h), and the val losses. Batches may be spread over
// several models (one per device); the numbers do not depend on how.
// Legend: N images per batch, S load size (long side), H,W a batch's letterbox, A anchors, nc classes.
#pragma once
#include <stdint.h>
#include <stdio.h>

#include "cfg/config.h"
#include "core/eval/metrics.h"
#include "core/spec/model.h"
#include "core/spec/nms.h"
#include "core/spec/topk26.h"
#include "io/augment.h"
#include "io/dataset.h"

struct Trainer;
struct Drawer;
typedef struct ValCache ValCache;

#define VAL_PROGRESS_QUIET 5.0   // seconds a pass runs before its first line where out is not a terminal

typedef struct {
    int        batch;     // N: images per validation batch (rect shapes follow it); each model runs
                          // a batch in chunks it was built for, so any N works with any model
    int        workers;   // decoding threads per device
    int        imgsz;     // S: images are loaded with long side S; a multiple of 32, <= the model's imgsz
    int        rect;      // 1: rect batches (§3.9); 0: every image letterboxed to S x S, dataset order
    double     pad;       // rect padding in strides: 0.5 as val.py and train.py's val loader
    NmsOptions nms;       // nms_val_options(); end-to-end models use its conf_thres and max_det (top-k)
    int        losses;    // 1: also the val box/cls/dfl losses (DFL heads; 0 for an end-to-end model)
    double     gain_box, gain_cls, gain_l1;   // YOLO26's loss gains: the config's [hyp] box, cls, dfl, as
                          // the reference's validator uses the training hyperparameters
    int        verbose;   // 1: per-class rows in the table
    FILE      *out;       // where the table goes; NULL: nowhere
    int        progress;  // 1: a progress bar on out while the pass runs (core/base/progress.h): redrawn in place
                          //   on a terminal, erased before the table; elsewhere a line each tenth of the pass or
    double     progress_quiet;   // PROGRESS_PERIOD seconds, from progress_quiet seconds into it (a short pass: none)
    const char *picture_dir;  // where val_batch0_labels.jpg / _pred.jpg go; NULL: no pictures
    const char *plots_dir;    // where the confusion matrix and the PR/F1/P/R curves go (core/eval/plots.h); NULL: none
    ValCache  *cache;         // keeps the loaded (letterboxed) batches between passes (val_cache_new; training):
                              //   a later pass copies them instead of decoding the images again; NULL: none
    struct Drawer *drawer;    // the pictures and plots are drawn by its thread (core/eval/drawer.h): the pass only
                              //   copies their data; NULL: drawn in the pass
    const volatile int *stop; // non-NULL and set (a signal, during training): no new batch starts,
                              //   and the pass returns -1 with "stopped" in err
    const char *save_dir; // save_json / save_txt write there (core/eval/val_save.c); a pass of one process
    int        save_json, save_txt, save_conf;   // save_conf: label rows end with the score (val.py --save-conf)
    int        rank, ranks;   // a pass shared by the processes of a run (core/procs/comm.h; ranks > 1): this one
                          // runs batches b with b % ranks == rank (rank 0 has batch 0, the pictures'), then
                          // every process gets every batch's results and the same ValResult; only rank 0
                          // prints and draws. Every process must call with the same options. 0, 0: alone
    int        host_post; // 1: decode, NMS and losses on the host even for a model on a device (tests);
                          // 0: on the device through the backend when it can (the same detections)
} ValOptions;

typedef struct {
    Metrics m;            // mp, mr, map50, map; per class
    double  fitness;      // 0.1 * mAP50 + 0.9 * mAP50-95
    double  box, cls, dfl;   // mean over batches of the loss items (0 unless losses)
    double  seconds;      // wall time of the whole evaluation
    int     dev_nms, dev_loss;   // batches whose detections / losses the device computed
    int     ran;          // batches this process ran (all of them when it is alone)
} ValResult;

// Defaults from a config: batch cfg->batch, cfg->workers, cfg->imgsz, rect with pad 0.5,
// nms_val_options(), losses on, verbose off, out stdout with progress (quiet for VAL_PROGRESS_QUIET seconds).
ValOptions val_options(const Config *cfg);
// What train.py's val loader uses during training: the same with batch 2 * cfg->batch.
ValOptions val_options_train(const Config *cfg);

// val_evaluate: run m (its current state; evaluation-mode BN) over every image of ds. The table is
// printed to o->out. Returns 0 with *r filled (val_result_free it), or -1 with err (unreadable images
// are reported and count as grey images without labels, not errors; bad sizes are errors).
int  val_evaluate(Model *m, const Dataset *ds, const ValOptions *o, ValResult *r, Err *err);
// The same with the batches spread over n models (the same weights on different devices; one thread
// each, bound to its device): batch b runs on whichever model is free, its results are merged in batch
// order, so r is what val_evaluate on models[0] gives, bit for bit (test_val). One exception: a batch
// whose padded shape does not fit a single image into some model's arenas (a model built for one image
// of imgsz) gets pad 0 instead, so the shapes then depend on the models.
// With o->ranks > 1 every process of the run calls it: a failure or a stop in any process is every
// process's (-1, err naming the process that failed), so none waits for another.
int  val_evaluate_models(Model *const *models, int n, const Dataset *ds, const ValOptions *o, ValResult *r,
                         Err *err);
// The EMA weights of a trainer (core/eval/val_ema.c): one device, t->m runs with state = t->ema; several
// (t->multi), every replica gets the master's EMA for the pass and the master's training weights
// after it (the replicas hold those between steps), so validation uses every device.
int  val_evaluate_ema(struct Trainer *t, const Dataset *ds, const ValOptions *o, ValResult *r, Err *err);
void val_result_free(ValResult *r);

// val_scale_boxes (scale_boxes with the loader's ratio_pad): boxes on a letterboxed sample of an
// original w0 x h0 image loaded with long side S to original pixels: subtract the float pads, divide
// by the gain, clip to the image. As the reference, gain is h/h0 of the long-side resize
// (int-truncated h) times the letterbox ratio (1 for validation), and is used for both axes.
void val_scale_boxes(Det *d, int n, int S, int w0, int h0, const LetterboxInfo *lb);

// ---- rect batches (core/eval/val_rect.c) ---------------------------------------------------------
// The batch shape of LoadImagesAndLabels(rect=True) for aspect ratios h/w in [ar_min, ar_max]:
// ratio [ar_max, 1] when ar_max < 1, [1, 1/ar_min] when ar_min > 1, else [1, 1]; then
// ceil(ratio * S / 32 + pad) * 32 in float64. S = 640, pad 0.5, ar 0.75 gives h 512, w 672.
void val_rect_shape(double ar_min, double ar_max, int S, double pad, int *h, int *w);

typedef struct {
    int     n, batch, n_batches;
    int    *order;        // (n) the dataset index at each position: ascending h/w when rect (stable)
    int   (*shape)[2];    // (n_batches) h, w of each batch's letterbox
    double (*ar)[2];      // (n_batches) the min and max h/w of its images
} ValPlan;

// The positions and shapes of the pass: rect as above, else dataset order and S x S everywhere.
void val_plan(const Dataset *ds, int batch, int S, int rect, double pad, ValPlan *p);
void val_plan_free(ValPlan *p);

// ---- one batch's pixels (core/eval/val_batch.c) ----------------------------------------------------
typedef struct {
    int            n, H, W, S;    // images, letterbox shape, load size
    uint8_t       *images;        // (n, H, W, 3) RGB
    int            nt;
    float         *targets;       // (nt, 6): image in batch, class, cx, cy, w, h normalised to W, H
    int           *index;         // (n) dataset index
    LetterboxInfo *info;          // (n)
    int            cap_n, cap_t;  // room
    size_t         cap_px;
} ValBatch;

// Load batch b of plan p: each image long-side resized to S, letterboxed to the batch shape (scaleup
// off), with `workers` threads. An image that fails to load is reported to stderr and becomes grey
// without labels. The buffers grow as needed (val_batch_free).
void val_batch_load(const Dataset *ds, const ValPlan *p, int b, int S, int workers, ValBatch *vb);
void val_batch_free(ValBatch *vb);

// The batches of passes over one dataset with one plan, kept for the next pass (a training run's
// validations): up to budget_bytes of images, rows and letterbox records, the first batches first; a
// pass with another dataset or plan starts it again. One cache may serve several threads of a pass.
ValCache *val_cache_new(size_t budget_bytes);
void      val_cache_free(ValCache *c);
// What val_batch_load(ds, p, b, ...) loads into vb: from c when it kept batch b of this plan, else
// loaded (and kept when the budget has room). c NULL: val_batch_load.
void      val_batch_get(ValCache *c, const Dataset *ds, const ValPlan *p, int b, int S, int workers, ValBatch *vb);
// Batches copied from c, and loaded, since it was made.
void      val_cache_counts(const ValCache *c, long long *hits, long long *loads);

// val_batch0_labels.jpg and val_batch0_pred.jpg in dir (core/eval/val_picture.c): batch vb with its labels,
// then with det[i] (nd[i] detections of image i in letterbox pixels) above confidence 0.25, each image
// on a square canvas, so a person can see what the metrics measure. Failures are printed as notes.
// Drawn by `drawer`'s thread (copies of what they show), or at once when it is NULL.
void val_pictures(const Dataset *ds, const char *dir, const ValBatch *vb, const Det *const *det, const int *nd,
                  struct Drawer *drawer);

// ---- decoding one image's detections (core/eval/val_decode.c) ---------------------------------------
// DFL heads: nms_decode + nms_run_fast (nms_run's detections; o as given). End-to-end heads (m->end2end,
// YOLO26): topk26_decode + topk26_select with o->max_det, o->conf_thres, o->agnostic; no NMS.
typedef struct {
    int         end2end, nc, A;
    NmsOptions  nms;
    float      *boxes, *scores;   // (A, 4), (A, nc)
    Topk26Item *work;
    Det26      *det26;
    Det        *det;              // (max(max_det, A) + 1): the result
} ValDecoder;

// Scratch for models like m at inputs of up to max_h x max_w pixels.
void val_decoder_init(ValDecoder *d, const Model *m, int max_h, int max_w, const NmsOptions *o);
void val_decoder_free(ValDecoder *d);
// Image n of head maps (host memory, m's levels; strides from img_h / H_l) into d->det, best first
// (xyxy pixels of the input); returns the count.
int  val_decode(ValDecoder *d, const Model *m, const Map head[], int n, int img_h);

// ---- a batch's images over threads (core/eval/val_images.c) ----------------------------------------
typedef struct { ValDecoder dec; Det *gt; int gt_cap; double t_decode, t_match; } ValImageScratch;   // a thread's
typedef struct {
    int              threads;
    ValImageScratch *s;           // (threads)
    MetricsStats    *img;         // (img_cap) one image's stats each, merged in batch order
    int              img_cap;
    double           t_decode, t_match;   // the last call's wall seconds: decode + NMS, and matching
} ValImages;

typedef struct {
    const Model    *m;
    const Dataset  *ds;
    const ValBatch *vb;
    const Map      *head;         // the batch's head maps on the host (when dev_det is NULL)
    const Det      *dev_det;      // or: detections a device picked, image i's at i * dev_stride
    const int      *dev_nd;       // (n) their counts
    int             dev_stride;
    Det           **keep;         // NULL, or (n): each image's detections in letterbox pixels (malloc'd)
    int            *kn;           // (n) their counts
    Det           **orig;         // NULL, or (n): the same in original-image pixels (malloc'd)
    int            *on;           // (n) their counts
    int             confusion;    // 1: the confusion matrix's counts too (a pass whose plots draw it)
} ValImagesIn;

void val_images_init(ValImages *v, const Model *m, int threads, int max_h, int max_w, const NmsOptions *o);
void val_images_free(ValImages *v);
// out (initialised here) = the batch's stats as metrics_stats_add over its images in order would give.
void val_images_stats(ValImages *v, const ValImagesIn *in, MetricsStats *out);

// ---- predictions.json and labels/*.txt (core/eval/val_save.c) --------------------------------------
typedef struct {
    FILE *json;
    int   first, txt, conf;         // conf: each labels/*.txt row ends with the score (save_conf)
    char  dir[4096];
    const long long *category_id;   // (nc) a COCO dataset's category ids (Dataset.category_id), or NULL
} ValSave;
// Create dir (and dir/labels when txt), open dir/predictions.json when json; -1 with err.
int  val_save_open(ValSave *s, const char *dir, int json, int txt, Err *err);
// One image's detections d (nd, original-image pixels).
void val_save_image(ValSave *s, const Sample *smp, const Det *d, int nd);
int  val_save_close(ValSave *s, Err *err);

// `yolotrain val CONFIG weights=FILE [data=...]`: the val split of the configured dataset (the built-in
// synthetic one when none is), with per-class rows, on the devices device= names (core/devices/infer_devices.h:
// cpu, cpu:N, 0, 0,1, ...; several take whole batches in turn, val_evaluate_models). Plots (unless
// noplots), predictions.json and labels/ go to runs/val/exp, exp2, ..., named as detect names its
// folder (core/train/outdir.h). Returns the exit status: 2 for a user error (device, weights, data).
int  val_run(Config *cfg);
