// val.c: one validation pass (YOLOv9 val.py run() during and after training): forward in evaluation
// mode, val losses, decode + NMS per image, boxes back to original pixels, matching, AP.
// Legend: N images per batch, S letterbox side, A anchors, nc classes, D detections of an image.
#include "core/val.h"

#include "io/picture.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/loss.h"
#include "io/loader.h"
#include "io/synth.h"

ValOptions val_options(const Config *cfg) {
    return (ValOptions){ .batch = cfg->batch, .workers = cfg->workers, .imgsz = cfg->imgsz,
                         .nms = nms_val_options(), .losses = 1, .verbose = 0, .out = stdout };
}

void val_result_free(ValResult *r) { metrics_free(&r->m); }

void val_scale_boxes(Det *d, int n, int S, int w0, int h0, const LetterboxInfo *lb) {
    double r0 = (double)S / (w0 > h0 ? w0 : h0);      // augment_load_resize: int() of h0 * r0
    int h = r0 == 1 ? h0 : (int)(h0 * r0);
    if (h < 1) h = 1;
    float gain = (float)(lb->r * h / h0), pw = (float)lb->padw, ph = (float)lb->padh;
    for (int i = 0; i < n; i++) {
        d[i].x1 = fminf(fmaxf((d[i].x1 - pw) / gain, 0.0f), (float)w0);
        d[i].x2 = fminf(fmaxf((d[i].x2 - pw) / gain, 0.0f), (float)w0);
        d[i].y1 = fminf(fmaxf((d[i].y1 - ph) / gain, 0.0f), (float)h0);
        d[i].y2 = fminf(fmaxf((d[i].y2 - ph) / gain, 0.0f), (float)h0);
    }
}

// Scratch for one pass, sized for the model's largest batch and the letterbox side.
typedef struct {
    float    *input;             // (N, S, S, 3)
    float    *boxes, *scores;    // (A, 4), (A, nc)
    Det      *det, *gt;          // (max_det), (labels of one image)
    int       gt_cap;
    LossWork *lw;
    Map       head[LOSS_LEVELS]; // the head maps of the batch, in host memory
    float    *head_host;         // their copy when the model runs on a GPU
    double    t_pre, t_infer, t_nms;
} ValWork;

// Point w->head at the batch's head maps, copied to the host when the model lives on a GPU
// (decoding, NMS and the val losses run on the CPU).
static void heads_to_host(Model *m, ValWork *w, int n) {
    size_t off = 0;
    for (int l = 0; l < m->n_levels; l++) {
        Map h = model_value(m, m->head[l], n);
        if (m->on_device) {
            m->be->download(m->be_ctx, w->head_host + off, h.data, map_pixels(h) * h.ld);
            h.data = w->head_host + off;
            off += map_pixels(h) * h.ld;
        }
        w->head[l] = h;
    }
}

// The labels of image i of the batch: normalised to S, to pixels, xyxy, then to the original image.
static int batch_labels(ValWork *w, const Batch *b, int i, int w0, int h0) {
    int n = 0;
    for (int k = 0; k < b->nt; k++) {
        const float *t = b->targets + (size_t)k * 6;
        if ((int)t[0] != i) continue;
        if (n == w->gt_cap) w->gt_cap = 2 * n + 16, w->gt = xrealloc(w->gt, sizeof *w->gt * w->gt_cap);
        float cx = t[2] * b->S, cy = t[3] * b->S, bw = t[4] * b->S, bh = t[5] * b->S;
        w->gt[n++] = (Det){ cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2, 1.0f, (int)t[1] };
    }
    val_scale_boxes(w->gt, n, b->S, w0, h0, &b->info[i]);
    return n;
}

// The detections of image i (letterbox pixels) with confidence > 0.25 as target rows normalised to S,
// appended to rows (for the picture of predictions); returns the new count.
static int prediction_rows(const Det *d, int nd, int i, int S, float *rows, int n, int cap) {
    for (int k = 0; k < nd && n < cap; k++) {
        if (d[k].conf <= 0.25f) continue;
        float *r = rows + 6 * n++;
        r[0] = i; r[1] = d[k].cls;
        r[2] = (d[k].x1 + d[k].x2) / 2 / S; r[3] = (d[k].y1 + d[k].y2) / 2 / S;
        r[4] = (d[k].x2 - d[k].x1) / S; r[5] = (d[k].y2 - d[k].y1) / S;
    }
    return n;
}

// val_batch0_labels.jpg and val_batch0_pred.jpg: the first batch with its labels, then with the
// model's detections (confidence > 0.25), so a person can see what the metrics measure.
static void batch_pictures(const Dataset *ds, const ValOptions *o, const Batch *b, float *rows, int n_rows) {
    char path[4096];
    Err err;
    snprintf(path, sizeof path, "%s/val_batch0_labels.jpg", o->picture_dir);
    if (picture_batch(b, ds->names, ds->nc, path, &err)) fprintf(stderr, "note: %s\n", err.msg);
    Batch pred = *b;
    pred.targets = rows;
    pred.nt = n_rows;
    snprintf(path, sizeof path, "%s/val_batch0_pred.jpg", o->picture_dir);
    if (picture_batch(&pred, ds->names, ds->nc, path, &err)) fprintf(stderr, "note: %s\n", err.msg);
}

static void batch_stats(Model *m, const Dataset *ds, const ValOptions *o, ValWork *w, const Batch *b,
                        MetricsStats *st) {
    const Map *head = w->head;
    int A = nms_anchors(head, m->n_levels), picture = o->picture_dir && b->number == 0, n_rows = 0;
    enum { ROWS = 4096 };
    float *rows = picture ? xmalloc(sizeof(float) * 6 * ROWS) : NULL;
    for (int i = 0; i < b->n; i++) {
        double t0 = now_seconds();
        nms_decode(head, m->strides, m->n_levels, i, m->nc, w->boxes, w->scores);
        int nd = nms_run(w->boxes, w->scores, A, m->nc, &o->nms, w->det);
        w->t_nms += now_seconds() - t0;
        if (picture) n_rows = prediction_rows(w->det, nd, i, b->S, rows, n_rows, ROWS);
        const Sample *s = &ds->s[b->index[i]];
        val_scale_boxes(w->det, nd, b->S, s->w, s->h, &b->info[i]);
        int ng = batch_labels(w, b, i, s->w, s->h);
        metrics_stats_add(st, w->det, nd, w->gt, ng);
    }
    if (picture) batch_pictures(ds, o, b, rows, n_rows);
    free(rows);
}

static int batch_losses(Model *m, ValWork *w, const Batch *b, ValResult *r, Err *err) {
    LossBatch lb = { .nc = m->nc, .img_h = b->S, .img_w = b->S, .targets = b->targets, .n_targets = b->nt };
    for (int l = 0; l < LOSS_LEVELS; l++) lb.head[l] = w->head[l];
    LossOut lo;
    if (loss_forward_backward(w->lw, &lb, NULL, &lo, err)) return -1;
    r->box += lo.box; r->cls += lo.cls; r->dfl += lo.dfl;
    return 0;
}

static int check_sizes(const Model *m, const ValOptions *o, Err *err) {
    if (o->batch < 1 || o->batch > m->max_n)
        return err_set(err, "validation batch %d: the model was built for at most %d images; lower batch",
                       o->batch, m->max_n);
    if (o->imgsz % 32 || o->imgsz < 32 || o->imgsz > m->imgsz)
        return err_set(err, "validation imgsz %d: must be a multiple of 32 and at most %d (the model's plan)",
                       o->imgsz, m->imgsz);
    if (m->n_levels != LOSS_LEVELS) return err_set(err, "validation needs a %d-level detection head", LOSS_LEVELS);
    return 0;
}

// The loop over the split: loader (validation mode) -> forward -> losses -> per-image stats.
static int evaluate_batches(Model *m, Loader *ld, const Dataset *ds, const ValOptions *o, ValWork *w,
                            MetricsStats *st, ValResult *r, Err *err) {
    int nb = 0, rc = 0;
    Batch *b;
    loader_start_epoch(ld, 0, 0);
    for (double tw = now_seconds(); loader_next(ld, &b); tw = now_seconds()) {
        loader_batch_to_float(b, w->input);
        double t1 = now_seconds();
        model_forward(m, w->input, b->n, b->S, b->S, 0);
        heads_to_host(m, w, b->n);
        w->t_pre += t1 - tw; w->t_infer += now_seconds() - t1;     // pre-process includes the data wait
        if (!rc && o->losses) rc = batch_losses(m, w, b, r, err);
        if (!rc) batch_stats(m, ds, o, w, b, st);
        loader_release(ld, b);
        nb++;
    }
    if (nb) r->box /= nb, r->cls /= nb, r->dfl /= nb;
    return rc;
}

int val_evaluate(Model *m, const Dataset *ds, const ValOptions *o, ValResult *r, Err *err) {
    memset(r, 0, sizeof *r);
    if (check_sizes(m, o, err)) return -1;
    LoaderConfig lc = { .batch = o->batch, .workers = o->workers > 0 ? o->workers : 1, .train = 0,
                        .aug = { .img_size = o->imgsz } };
    Loader *ld;
    if (loader_open(&lc, ds, &ld, err)) return -1;
    double t0 = now_seconds();
    int S = o->imgsz;
    size_t A = (size_t)(S / 8) * (S / 8) + (size_t)(S / 16) * (S / 16) + (size_t)(S / 32) * (S / 32);
    ValWork w = { .input = xmalloc(sizeof(float) * o->batch * S * S * 3), .boxes = xmalloc(sizeof(float) * A * 4),
                  .scores = xmalloc(sizeof(float) * A * m->nc), .det = xmalloc(sizeof(Det) * (o->nms.max_det + 1)),
                  .lw = loss_work_new(),
                  .head_host = m->on_device ? xmalloc(sizeof(float) * o->batch * A * (4 * LOSS_REG_MAX + m->nc)) : NULL };
    MetricsStats st;
    metrics_stats_init(&st, m->nc);
    int rc = evaluate_batches(m, ld, ds, o, &w, &st, r, err);
    loader_close(ld);
    if (!rc) {
        metrics_compute(&st, &r->m);
        r->fitness = metrics_fitness(&r->m);
        r->seconds = now_seconds() - t0;
        if (o->out) {
            metrics_print(&r->m, ds->names, o->verbose, o->out);
            double per = 1e3 / (st.images ? st.images : 1);
            fprintf(o->out, "Speed: %.1fms pre-process, %.1fms inference, %.1fms NMS per image at shape "
                    "(%d, 3, %d, %d)\n", w.t_pre * per, w.t_infer * per, w.t_nms * per, o->batch, S, S);
        }
    }
    metrics_stats_free(&st);
    loss_work_free(w.lw);
    free(w.input); free(w.boxes); free(w.scores); free(w.det); free(w.gt); free(w.head_host);
    return rc;
}

// ---- `yolotrain val` -----------------------------------------------------------------------

// The val split of cfg's dataset (the built-in one when none is configured, as train.c picks it).
static int open_val_data(Config *cfg, Dataset *ds, Err *err) {
    if (!cfg->data[0] && !cfg->n_data_kv) {
        if (synth_ensure(SYNTH_DIR, err)) return -1;
        snprintf(cfg->data, sizeof cfg->data, "%s/data.yaml", SYNTH_DIR);
    }
    DatasetOptions opt = { .strict = cfg->strict, .report = stderr };
    if (dataset_open(NULL, cfg, "val", &opt, ds, err)) return -1;
    if (cfg->nc != ds->nc) config_set_nc(cfg, ds->nc);
    return 0;
}

int val_run(Config *cfg) {
    if (cfg->device[0] && strncmp(cfg->device, "cpu", 3)) {
        fprintf(stderr, "yolotrain val: device=%s: GPU validation is not available yet; use device=cpu\n", cfg->device);
        return 2;
    }
    if (!cfg->weights[0]) { fprintf(stderr, "yolotrain val: name the weights to validate: weights=FILE.safetensors\n"); return 2; }
    Err err;
    Dataset ds;
    if (open_val_data(cfg, &ds, &err)) { fprintf(stderr, "yolotrain val: %s\n", err.msg); return 2; }
    Model m;
    int rc = 2;
    if (model_build(cfg, cfg->batch, cfg->imgsz, &m, &err) == 0) {
        if (model_load(&m, cfg->weights, "", &err) == 0) {
            ValOptions o = val_options(cfg);
            o.verbose = 1;
            ValResult r;
            printf("val: %s on %d images of %s (imgsz %d, batch %d)\n", cfg->weights, ds.n, cfg->data[0] ? cfg->data : "[data]",
                   o.imgsz, o.batch);
            rc = val_evaluate(&m, &ds, &o, &r, &err) ? 2 : 0;
            if (!rc) {
                printf("val losses: box %.4g, cls %.4g, dfl %.4g; fitness %.4g; %.1f s\n", r.box, r.cls, r.dfl,
                       r.fitness, r.seconds);
                val_result_free(&r);
            }
        }
        model_free(&m);
    }
    if (rc) fprintf(stderr, "yolotrain val: %s\n", err.msg);
    dataset_free(&ds);
    return rc;
}
