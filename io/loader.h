// loader.h: worker threads that decode, augment and batch samples ahead of the trainer, into a ring
// of batch buffers allocated once. Batches are byte-identical for any worker count (each
// sample's randomness comes from seed, epoch and index).
// Legend: N images per batch, S square sample side (img_size), T target rows of a batch.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cfg/config.h"
#include "core/base/util.h"
#include "io/augment.h"
#include "io/dataset.h"

typedef struct {
    int       batch;          // N (>= 1)
    int       workers;        // threads; 0 (the reference's "load in the main process") = 1
    int       prefetch;       // batch buffers in the ring (>= 2); 0 = max(3, ceil(2·workers/N) + 2)
    uint64_t  seed;
    int       train;          // 1: shuffled, augmented (aug); 0: validation, in order, letterbox only
    AugParams aug;            // aug.img_size is S in both modes; the rest is read when train = 1
    int       cache_ram;      // 1: load each image once, keep it for every epoch: decoded and resized, or with
                              // defer_decode a file a device decodes as its bytes (see defer_decode)
    int       defer_pixels;   // train = 1 (augment=gpu, issue 37): workers only decode and draw; each
                              // batch carries its samples' recipes and sources (Batch.aug), not pixels
    // defer_pixels and train (issue 37, the GPU decode): a JPEG source a device can decode is only read and its
    // header parsed; its bytes go to the batch (Batch.jpeg_arena, AugSample.jpeg) and its tile keeps only the
    // size the host path would give it. Deferred: a JPEG of 1 or 3 components, no EXIF orientation that changes
    // the picture, at most defer_max_pixels stored pixels (0 = 4·S·S), and device_takes(device_ctx, bytes, n)
    // != 0 when that is set (the device's own veto). Every other source (PNG, rotated, CMYK, larger, a header
    // that does not parse) is decoded on the host as without it. With cache_ram the cache keeps a deferred
    // file's bytes (read once, decided once; later epochs touch no file) and the other sources decoded; a file
    // larger than the tile it decodes to is kept decoded (not deferred) so that loader_cache_bytes stays an
    // upper bound. The boxes and recipes are the same as without it.
    int       defer_decode;
    size_t    defer_max_pixels;
    int     (*device_takes)(void *ctx, const uint8_t *data, size_t n);
    void     *device_ctx;
    size_t    mem_available;  // bytes the RAM cache may use; 0 = MemAvailable of /proc/meminfo
    FILE     *report;         // where unreadable images are reported; NULL = stderr
    // rect training (train = 1, aug.rect; core/train/train.c fills both from val_plan with pad 0): every
    // epoch takes the samples in rect_order (n dataset indices, ascending h/w: no shuffle, as the
    // reference turns shuffle off for rect) and batch b is letterboxed to rect_shape[b] = {h, w}.
    // The loader copies both. NULL: shuffled, every batch S x S (with aug.rect too: letterboxed, no mosaic).
    const int *rect_order;
    const int (*rect_shape)[2];
    // Several processes (core/procs/procs.h): each batch of B images is made only in part, the images at
    // positions [first, first + share(B, &first, share_arg)) of the whole batch; Batch.n is that count
    // (0: an empty batch) and its targets count from the share's first image. The bytes of each image
    // are those the whole batch would hold (a sample's randomness comes from its dataset index). NULL:
    // whole batches.
    int     (*share)(int batch_images, int *first, void *arg);
    void     *share_arg;
} LoaderConfig;

typedef struct {
    int            n;         // images in this batch; the last batch of an epoch may have fewer than N
    int            S;
    int            h, w;      // the images' height and width: S x S, or the rect batch shape
    uint8_t       *images;    // (n,h,w,3) RGB, page-aligned
    int            nt;
    float         *targets;   // (nt,6): image in batch, class, cx, cy, w, h, normalised to S
    int           *index;     // (n) dataset index of each image
    LetterboxInfo *info;      // (n) validation: letterbox of the long-side-resized image (see
                              // augment_val_sample); training: zeros
    const AugSample *aug;     // (n) defer_pixels: each image's recipe and decoded sources (in tile_arena),
                              // its pixels not in images (a device makes them: Backend.dev.augment_batch);
                              // NULL: images holds them
    // defer_pixels: every tile of aug lies in tile_arena[0, tile_bytes), the batch slot's one host buffer
    // (with cache=ram too: the cached images are copied in), page-locked once loader_pin_buffers ran, so a
    // device uploads a share with one copy (Backend.dev.prefetch_aug). The samples' tiles are in the order
    // the workers finished them, each sample's tiles together: sample order give or take a few, so the span
    // of samples [a, b) holds few of the others'. Grown (grow-only) when a batch needs more; NULL, 0 without
    // defer_pixels.
    const uint8_t *tile_arena;
    size_t         tile_bytes;
    // defer_decode: the deferred sources' file bytes (AugSample.jpeg[k].data) lie in jpeg_arena[0, jpeg_bytes), a
    // second grow-only host buffer of the slot, pinned and laid out as tile_arena; NULL, 0 without defer_decode.
    const uint8_t *jpeg_arena;
    size_t         jpeg_bytes;
    int            epoch, number;   // number: 0.. within the epoch
    int            slot;      // private to the loader
} Batch;

typedef struct {
    int    epoch;
    int    samples;           // finished this epoch so far
    double wait_s;            // time the trainer spent blocked in loader_next this epoch
    double samples_per_s;     // samples / (latest finish - loader_start_epoch)
    int    n_bad;             // images that failed to load since loader_open (each reported once)
} LoaderStats;

typedef struct Loader Loader;

// The loader settings of a run: batch, workers, seed, cache and the [hyp] augmentation of cfg;
// train = 0 gives validation batches (letterboxed, in order).
LoaderConfig loader_config(const Config *cfg, int train);

// Start cfg->workers threads over ds (which must outlive the loader). With cache_ram, first checks
// that the resized images fit: returns -1 with err stating both numbers when loader_cache_bytes()
// plus a 10% margin exceeds the available memory (with defer_decode an upper bound: files kept as
// bytes take less). Returns 0 with *out set, or -1 with err.
int  loader_open(const LoaderConfig *cfg, const Dataset *ds, Loader **out, Err *err);
// defer_decode decided once the devices exist (they are made after the loader): before the first epoch
// starts; ignored, as in loader_open, without defer_pixels and train.
void loader_set_defer_decode(Loader *l, int on);
// Stop the workers (even mid-epoch: each finishes at most its current sample), join, free all.
void loader_close(Loader *l);
int  loader_batches(const Loader *l);   // batches per epoch: ceil(n / N)
// Begin epoch `epoch`: the order is a Fisher-Yates shuffle from rng_for(seed, epoch, 0) (train),
// rect_order (rect training) or 0..n-1 (validation); sample i draws from rng_for(seed, epoch, i + 1) (+1: stream 0 is the
// shuffle's). mosaic_on = 0 closes mosaic (and so mixup). Work of an unfinished epoch is dropped;
// release every batch first.
void loader_start_epoch(Loader *l, int epoch, int mosaic_on);
// The same, starting at batch first_batch of the epoch (a resumed run): batches before it are skipped
// without being made; the ones after are the same bytes as in an epoch started at 0.
void loader_start_epoch_at(Loader *l, int epoch, int mosaic_on, int first_batch);
// Block until the next batch of the epoch is ready: returns 1 with *b set, 0 when the epoch is done.
// One consumer thread; it may hold at most prefetch - 1 batches while asking for the next.
int  loader_next(Loader *l, Batch **b);
void loader_release(Loader *l, Batch *b);   // its buffer goes back to the workers
LoaderStats loader_stats(Loader *l);
// Bytes the RAM cache would take: every image resized so its long side is img_size (from the sizes
// validation read in the headers). With defer_decode an upper bound (files kept as bytes are at most
// their tile's size).
size_t loader_cache_bytes(const Dataset *ds, int img_size);
// What the RAM cache holds now: files kept as their bytes (defer_decode) and decoded, resized tiles, each
// a count of images and their bytes. Zeros without cache_ram. Safe while the workers run.
typedef struct { size_t jpeg_bytes, tile_bytes; int n_jpeg, n_tiles; } LoaderCacheHeld;
LoaderCacheHeld loader_cache_held(Loader *l);
// Page-locking of the batch image buffers, so a GPU build copies them to the device asynchronously
// (gpu_host_pin / gpu_host_unpin) while io/ stays free of CUDA. pin returns 0, or -1 to leave that
// buffer pageable (copies from it are slower, still right).
typedef struct {
    int  (*pin)(void *p, size_t bytes, void *arg);
    void (*unpin)(void *p, void *arg);
    void  *arg;
} LoaderPinning;
// Pin every image buffer of the ring not pinned yet; loader_close unpins them before freeing. Call
// it before the batches are given to a device. Returns how many image buffers are pinned now. With
// defer_pixels the slots' tile arenas (and jpeg arenas) are pinned too, now or when allocated, and unpinned before a growth
// frees one (its batch was released: a device no longer copies from it) and at close. These host buffers
// are not in the trainer's memory plan (core/trainer/trainer.c counts the model's arenas only).
int  loader_pin_buffers(Loader *l, const LoaderPinning *p);
// The model's input (CPU path): nhwc_out (n,h,w,3) = images / 255.
void loader_batch_to_float(const Batch *b, float *nhwc_out);
