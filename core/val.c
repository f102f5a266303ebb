// val.c: one validation pass (YOLOv9 val.py run() during and after training): rect batches, forward in
// evaluation mode on one or several models (a thread each), val losses, per-image detections, boxes
// back to original pixels, matching, then AP over the batches merged in order.
// Legend: N images per batch, S load size, H,W a batch's shape, A anchors, nc classes, D detections.
#include "core/val.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/infer_devices.h"
#include "core/loss.h"
#include "core/loss26.h"
#include "io/picture.h"
#include "io/synth.h"

ValOptions val_options(const Config *cfg) {
    return (ValOptions){ .batch = cfg->batch, .workers = cfg->workers, .imgsz = cfg->imgsz, .rect = 1, .pad = 0.5,
                         .nms = nms_val_options(), .losses = 1, .verbose = 0, .out = stdout };
}

ValOptions val_options_train(const Config *cfg) {
    ValOptions o = val_options(cfg);
    o.batch = 2 * cfg->batch;                 // train.py: batch_size // WORLD_SIZE * 2
    return o;
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

// ---- what a model can hold ----------------------------------------------------------------

static int has_attention(const Model *m) {
    for (int i = 0; i < m->n_nodes; i++) if (m->nodes[i].op == OP_ATTN) return 1;
    return 0;
}

// Images of H x W one forward of m may take: its arenas are planned for max_n images of imgsz^2, and
// every activation grows with n*H*W (attention probabilities with n*(H*W)^2), so a rect shape larger
// than imgsz (pad 0.5 makes a square image imgsz + 32) runs in smaller chunks. 0: not even one.
static int chunk_images(const Model *m, int H, int W) {
    double planned = (double)m->imgsz * m->imgsz, hw = (double)H * W;
    double k = hw <= planned ? m->max_n : floor(m->max_n * planned / hw);
    if (has_attention(m) && hw > planned) k = fmin(k, floor(m->max_n * (planned / hw) * (planned / hw)));
    return (int)k;
}

// ---- one batch on one model ---------------------------------------------------------------

typedef struct {              // one batch's share of the result, merged in batch order
    MetricsStats st;
    double       box, cls, dfl;
} BatchOut;

typedef struct {              // the pass, shared by the model threads
    Model *const    *models;
    const Dataset   *ds;
    const ValOptions *o;
    ValPlan          plan;
    BatchOut        *out;
    int              next, max_h, max_w, failed;
    Err              err;
    double           t_pre, t_infer, t_nms;
    pthread_mutex_t  mu;
} Pass;

typedef struct {              // one model's scratch
    Pass      *p;
    Model     *m;
    ValBatch   vb;
    ValDecoder dec;
    LossWork  *lw;
    Loss26Work *lw26;         // end-to-end heads (YOLO26)
    float     *heads;         // host copy of the batch's head maps, level after level
    Map        head[4];
    Det       *gt;
    int        gt_cap;
} Worker;

// Forward batch vb in chunks, each chunk's head maps copied into w->heads (the host), w->head the
// batch's maps there.
static void forward_batch(Worker *w) {
    Model *m = w->m;
    const ValBatch *vb = &w->vb;
    int chunk = chunk_images(m, vb->H, vb->W);
    for (int c0 = 0; c0 < vb->n; c0 += chunk) {
        int cn = vb->n - c0 < chunk ? vb->n - c0 : chunk;
        model_forward_u8(m, vb->images + (size_t)c0 * vb->H * vb->W * 3, cn, vb->H, vb->W, 0);
        size_t off = 0;
        for (int l = 0; l < m->n_levels; l++) {
            Map h = model_value(m, m->head[l], cn);
            size_t per = (size_t)h.H * h.W * h.ld;           // floats per image
            float *dst = w->heads + off + c0 * per;
            if (m->on_device) m->be->download(m->be_ctx, dst, h.data, per * cn);
            else memcpy(dst, h.data, sizeof(float) * per * cn);
            w->head[l] = (Map){ w->heads + off, vb->n, h.H, h.W, h.C, h.ld, 0 };
            off += per * vb->n;
        }
    }
}

// The labels of image i of the batch: normalised to W, H, to pixels, xyxy, then to the original image.
static int batch_labels(Worker *w, int i, int w0, int h0) {
    const ValBatch *b = &w->vb;
    int n = 0;
    for (int k = 0; k < b->nt; k++) {
        const float *t = b->targets + (size_t)k * 6;
        if ((int)t[0] != i) continue;
        if (n == w->gt_cap) w->gt_cap = 2 * n + 16, w->gt = xrealloc(w->gt, sizeof *w->gt * w->gt_cap);
        float cx = t[2] * b->W, cy = t[3] * b->H, bw = t[4] * b->W, bh = t[5] * b->H;
        w->gt[n++] = (Det){ cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2, 1.0f, (int)t[1] };
    }
    val_scale_boxes(w->gt, n, b->S, w0, h0, &b->info[i]);
    return n;
}

// YOLO26: the one-to-one branch's items, as training logs them. Evaluation computes that branch
// only; its loss needs nothing from the other, so the same maps stand in the one-to-many slot too.
static int batch_losses26(Worker *w, BatchOut *out, Err *err) {
    const ValBatch *b = &w->vb;
    int nc = w->m->nc;
    Loss26Batch lb = { .nc = nc, .img_h = b->H, .img_w = b->W, .targets = b->targets, .n_targets = b->nt };
    for (int br = 0; br < L26_BRANCHES; br++)
        for (int l = 0; l < L26_LEVELS; l++) {
            lb.head[br].box[l] = map_slice(w->head[l], 0, 4);
            lb.head[br].cls[l] = map_slice(w->head[l], 4, nc);
        }
    Loss26Weights wt = loss26_weights(0, 1);
    const Head26 *none[L26_BRANCHES] = { NULL, NULL };
    Loss26Out lo;
    if (loss26_forward_backward(w->lw26, &lb, &wt, none, &lo, err)) return -1;
    out->box = lo.br[L26_O2O].box; out->cls = lo.br[L26_O2O].cls; out->dfl = lo.br[L26_O2O].l1;
    return 0;
}

static int batch_losses(Worker *w, BatchOut *out, Err *err) {
    if (w->m->end2end) return batch_losses26(w, out, err);
    const ValBatch *b = &w->vb;
    LossBatch lb = { .nc = w->m->nc, .img_h = b->H, .img_w = b->W, .targets = b->targets, .n_targets = b->nt };
    for (int l = 0; l < LOSS_LEVELS; l++) lb.head[l] = w->head[l];
    LossOut lo;
    if (loss_forward_backward(w->lw, &lb, NULL, &lo, err)) return -1;
    out->box = lo.box; out->cls = lo.cls; out->dfl = lo.dfl;
    return 0;
}

static void batch_stats(Worker *w, int b, BatchOut *out) {
    const ValBatch *vb = &w->vb;
    int picture = w->p->o->picture_dir && b == 0;
    Det **keep = picture ? xcalloc(vb->n, sizeof *keep) : NULL;
    int *kn = picture ? xcalloc(vb->n, sizeof *kn) : NULL;
    metrics_stats_init(&out->st, w->m->nc);
    for (int i = 0; i < vb->n; i++) {
        int nd = val_decode(&w->dec, w->m, w->head, i, vb->H);
        if (picture) {                       // letterbox pixels, before mapping back
            keep[i] = xmalloc(sizeof(Det) * (nd + 1));
            memcpy(keep[i], w->dec.det, sizeof(Det) * nd);
            kn[i] = nd;
        }
        const Sample *s = &w->p->ds->s[vb->index[i]];
        val_scale_boxes(w->dec.det, nd, vb->S, s->w, s->h, &vb->info[i]);
        int ng = batch_labels(w, i, s->w, s->h);
        metrics_stats_add(&out->st, w->dec.det, nd, w->gt, ng);
    }
    if (picture) val_pictures(w->p->ds, w->p->o->picture_dir, vb, (const Det *const *)keep, kn);
    for (int i = 0; picture && i < vb->n; i++) free(keep[i]);
    free(keep); free(kn);
}

// A model's thread: claim the next batch, load, forward, losses, detections, until none is left.
static void *worker_main(void *arg) {
    Worker *w = arg;
    Pass *p = w->p;
    w->m->be->bind(w->m->be_ctx);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        int stop = p->o->stop && *p->o->stop;
        int b = p->failed || stop || p->next == p->plan.n_batches ? -1 : p->next++;
        pthread_mutex_unlock(&p->mu);
        if (b < 0) return NULL;
        double t0 = now_seconds();
        val_batch_load(p->ds, &p->plan, b, p->o->imgsz, p->o->workers, &w->vb);
        double t1 = now_seconds();
        forward_batch(w);
        double t2 = now_seconds();
        Err err;
        int rc = p->o->losses ? batch_losses(w, &p->out[b], &err) : 0;
        if (!rc) batch_stats(w, b, &p->out[b]);
        pthread_mutex_lock(&p->mu);
        p->t_pre += t1 - t0; p->t_infer += t2 - t1; p->t_nms += now_seconds() - t2;
        if (rc && !p->failed) p->failed = 1, p->err = err;
        pthread_mutex_unlock(&p->mu);
    }
}

static void worker_init(Worker *w, Pass *p, Model *m) {
    memset(w, 0, sizeof *w);
    w->p = p; w->m = m;
    val_decoder_init(&w->dec, m, p->max_h, p->max_w, &p->o->nms);
    w->lw = loss_work_new();
    if (m->end2end) w->lw26 = loss26_work_new();
    size_t floats = 0;                        // the head maps of a whole batch at the largest shape
    for (int l = 0; l < m->n_levels; l++) {
        int s = m->strides[l], C = m->values[m->head[l]].C;
        floats += (size_t)p->o->batch * (p->max_h / s) * (p->max_w / s) * C;
    }
    w->heads = xmalloc(sizeof(float) * (floats + 1));
}

static void worker_free(Worker *w) {
    val_batch_free(&w->vb);
    val_decoder_free(&w->dec);
    loss_work_free(w->lw);
    loss26_work_free(w->lw26);
    free(w->heads); free(w->gt);
}

// ---- the pass ------------------------------------------------------------------------------

static int check_sizes(Model *const *models, int n, const ValOptions *o, Err *err) {
    for (int k = 0; k < n; k++) {
        const Model *m = models[k];
        if (o->imgsz % 32 || o->imgsz < 32 || o->imgsz > m->imgsz)
            return err_set(err, "validation imgsz %d: must be a multiple of 32 and at most %d (the model's plan)",
                           o->imgsz, m->imgsz);
        if (m->n_levels != LOSS_LEVELS) return err_set(err, "validation needs a %d-level detection head", LOSS_LEVELS);
    }
    if (o->batch < 1) return err_set(err, "validation batch %d: must be at least 1", o->batch);
    return 0;
}

// The plan, with pad 0 for a batch whose padded shape would not fit one image into the models' arenas
// (a model built for a single image of imgsz: the padded square is larger).
static void plan_pass(Pass *p, int n_models) {
    const ValOptions *o = p->o;
    val_plan(p->ds, o->batch, o->imgsz, o->rect, o->pad, &p->plan);
    for (int b = 0; b < p->plan.n_batches; b++) {
        int *s = p->plan.shape[b];
        for (int k = 0; k < n_models; k++)
            if (chunk_images(p->models[k], s[0], s[1]) < 1) val_rect_shape(p->plan.ar[b][0], p->plan.ar[b][1], o->imgsz, 0, &s[0], &s[1]);
        if (s[0] > p->max_h) p->max_h = s[0];
        if (s[1] > p->max_w) p->max_w = s[1];
    }
}

static void run_workers(Pass *p, int n) {
    Worker *w = xcalloc(n, sizeof *w);
    pthread_t *th = xcalloc(n, sizeof *th);
    for (int k = 0; k < n; k++) worker_init(&w[k], p, p->models[k]);
    for (int k = 1; k < n; k++) pthread_create(&th[k], NULL, worker_main, &w[k]);
    worker_main(&w[0]);
    for (int k = 1; k < n; k++) pthread_join(th[k], NULL);
    if (n > 1) p->models[0]->be->bind(p->models[0]->be_ctx);   // the caller's device again
    for (int k = 0; k < n; k++) worker_free(&w[k]);
    free(w); free(th);
}

static void finish(Pass *p, int nb, ValResult *r, double t0) {
    const ValOptions *o = p->o;
    MetricsStats st;
    metrics_stats_init(&st, p->models[0]->nc);
    for (int b = 0; b < nb; b++) {            // batch order: the numbers do not depend on the threads
        metrics_stats_merge(&st, &p->out[b].st);
        r->box += p->out[b].box; r->cls += p->out[b].cls; r->dfl += p->out[b].dfl;
    }
    if (nb) r->box /= nb, r->cls /= nb, r->dfl /= nb;
    metrics_compute(&st, &r->m);
    r->fitness = metrics_fitness(&r->m);
    r->seconds = now_seconds() - t0;
    if (o->out) {
        metrics_print(&r->m, p->ds->names, o->verbose, o->out);
        double per = 1e3 / (st.images ? st.images : 1);
        fprintf(o->out, "Speed: %.1fms pre-process, %.1fms inference, %.1fms %s per image at shape (%d, 3, %d, %d)%s\n",
                p->t_pre * per, p->t_infer * per, p->t_nms * per, p->models[0]->end2end ? "top-k" : "NMS", o->batch,
                p->max_h, p->max_w, o->rect ? " (largest rect batch)" : "");
    }
    metrics_stats_free(&st);
}

int val_evaluate_models(Model *const *models, int n, const Dataset *ds, const ValOptions *o, ValResult *r, Err *err) {
    memset(r, 0, sizeof *r);
    if (n < 1 || check_sizes(models, n, o, err)) return n < 1 ? err_set(err, "validation: no model") : -1;
    double t0 = now_seconds();
    Pass p = { .models = models, .ds = ds, .o = o };
    pthread_mutex_init(&p.mu, NULL);
    plan_pass(&p, n);
    p.out = xcalloc(p.plan.n_batches + 1, sizeof *p.out);
    run_workers(&p, n);
    int rc = p.failed ? -1 : 0;
    if (rc) *err = p.err;
    else if (o->stop && *o->stop) rc = err_set(err, "validation stopped by a signal");
    else finish(&p, p.plan.n_batches, r, t0);
    for (int b = 0; b < p.plan.n_batches; b++) metrics_stats_free(&p.out[b].st);
    free(p.out);
    val_plan_free(&p.plan);
    pthread_mutex_destroy(&p.mu);
    return rc;
}

int val_evaluate(Model *m, const Dataset *ds, const ValOptions *o, ValResult *r, Err *err) {
    return val_evaluate_models(&m, 1, ds, o, r, err);
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

// The pass over ds on the models of im, with the table and the losses on stdout.
static int val_on_models(Config *cfg, const Dataset *ds, InferModels *im, Err *err) {
    ValOptions o = val_options(cfg);
    o.verbose = 1;
    ValResult r;
    printf("val: %s on %d images of %s (imgsz %d, batch %d)\n", cfg->weights, ds->n, cfg->data[0] ? cfg->data : "[data]",
           o.imgsz, o.batch);
    if (val_evaluate_models(im->ptr, im->n, ds, &o, &r, err)) return -1;
    printf("val losses: box %.4g, cls %.4g, dfl %.4g; fitness %.4g; %.1f s\n", r.box, r.cls, r.dfl, r.fitness, r.seconds);
    val_result_free(&r);
    return 0;
}

int val_run(Config *cfg) {
    if (!cfg->weights[0]) { fprintf(stderr, "yolotrain val: name the weights to validate: weights=FILE.safetensors\n"); return 2; }
    DeviceList devs;
    if (infer_pick_devices(cfg, "yolotrain val", &devs)) return 2;
    Err err;
    Dataset ds;
    if (open_val_data(cfg, &ds, &err)) { fprintf(stderr, "yolotrain val: %s\n", err.msg); return 2; }
    InferModels im;                             // each device takes whole batches of cfg->batch images
    int rc = infer_models_open(cfg, &devs, cfg->batch, &im, &err) || val_on_models(cfg, &ds, &im, &err) ? 2 : 0;
    infer_models_free(&im);
    if (rc) fprintf(stderr, "yolotrain val: %s\n", err.msg);
    dataset_free(&ds);
    return rc;
}
