// val.c: one validation pass (YOLOv9 val.py run() during and after training): rect batches, forward in
// evaluation mode on one or several models (a thread each), val losses, per-image detections, boxes
// back to original pixels, matching, then AP over the batches merged in order. The batches may also be
// shared by the processes of a run (ValOptions.ranks), each running its own on its models.
// Legend: N images per batch, S load size, H,W a batch's shape, A anchors, nc classes, D detections.
#include "core/eval/val.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base/progress.h"
#include "core/procs/comm.h"
#include "core/devices/infer_devices.h"
#include "core/spec/loss.h"
#include "core/spec/loss26.h"
#include "core/train/outdir.h"
#include "core/eval/plots.h"
#include "core/trainer/trainer.h"
#include "io/picture.h"
#include "io/synth.h"

ValOptions val_options(const Config *cfg) {
    return (ValOptions){ .batch = cfg->batch, .workers = cfg->workers, .imgsz = cfg->imgsz, .rect = 1, .pad = 0.5,
                         .nms = nms_val_options(), .losses = 1, .verbose = 0, .out = stdout, .progress = 1,
                         .progress_quiet = VAL_PROGRESS_QUIET,
                         .gain_box = cfg->hyp.box, .gain_cls = cfg->hyp.cls, .gain_l1 = cfg->hyp.dfl };
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
// Each model has a thread that runs batches on it (forward, detections, losses) and a helper thread that
// loads the next batch's images while it does, and matches the last batch's detections to its labels:
// two slots go round, so the device does not wait for the host's decoding and matching (when the
// detections come from the device; the host's own decode needs the head maps, so then the model's
// thread matches too).

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
    int              next, step, max_h, max_w, failed, stopped;   // next batch of this process's, its stride
    Err              err;
    double           t_pre, t_infer, t_loss, t_nms, t_metrics, t_plots;   // seconds each stage took (summed)
    int              dev_nms, dev_loss;   // batches done on the device
    int              ran;                 // batches this process ran
    int             *ran_by;              // (ranks) several processes: the batches each ran
    Progress         prog;                // the progress bar over this process.s images (ValOptions.progress; rank 0 prints)
    int              images, images_done, drawn;   // this process's images, those run, 1: a bar is on the terminal
    ValSave          save;                // save_json / save_txt (under mu)
    pthread_mutex_t  mu;
} Pass;

enum { SLOT_FREE, SLOT_LOADED, SLOT_RAN };

typedef struct {              // one batch in flight
    ValBatch  vb;
    Det      *det;            // (batch, max_det) what the backend picked
    int      *nd;             // (batch)
    int       b, state, dev_ok, matched;
} Slot;

typedef struct {              // one model's scratch
    Pass      *p;
    Model     *m;
    Slot       slot[2];
    int        loads_done;    // the helper claimed no further batch (under mu)
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    ValImages  img;           // per-image decode, NMS and matching over threads
    LossWork  *lw;
    Loss26Work *lw26;         // end-to-end heads (YOLO26)
    float     *heads;         // host copy of the batch's head maps, level after level
    Map        head[4];
    void      *nms;           // the backend's decode + NMS work (a DFL model on a GPU); NULL: on the host
    void      *topk;          // the backend's top-k work (an end-to-end model on a GPU); NULL: on the host
    void      *vloss;         // the backend's validation-loss work (a model on a GPU); NULL: on the host
    int        vloss_ok;      // 1: this batch's head maps were kept there for the losses
    void     **tm;            // (3 * n_tm) backend timers per chunk: before its forward, after it, after its
    int        n_tm;          //   detections
    double     t_infer, t_nms;   // this batch's seconds on the backend
    const uint8_t *pref;      // the bytes of the next slot's first chunk, prefetched; NULL: none pending
    size_t     pref_n;
} Worker;

static int max_det_of(const Worker *w) { return w->p->o->nms.max_det > 0 ? w->p->o->nms.max_det : 0; }

// The backend picks the detections of the chunk just run (images c0..c0+cn-1 of the batch).
static void chunk_detect(Worker *w, Slot *s, int c0, int cn) {
    Model *m = w->m;
    Map h[3];
    for (int l = 0; l < 3; l++) h[l] = model_value(m, m->head[l], cn);
    int D = max_det_of(w);
    const NmsOptions *no = &w->p->o->nms;
    if (w->topk) {
        Topk26Opts to = { .max_det = no->max_det, .agnostic = no->agnostic, .conf = no->conf_thres };
        m->be->val.topk_detect(m->be_ctx, w->topk, h, s->vb.H, cn, &to, s->det + (size_t)c0 * D, s->nd + c0);
    } else {
        m->be->val.nms_detect(m->be_ctx, w->nms, h, m->strides, cn, s->det + (size_t)c0 * D, s->nd + c0);
    }
}

// The backend keeps the chunk's head maps as images c0.. of the batch, for the losses.
static void chunk_keep(Worker *w, int c0, int cn, int N) {
    Model *m = w->m;
    Map h[3];
    for (int l = 0; l < 3; l++) h[l] = model_value(m, m->head[l], cn);
    m->be->val.vloss_stage(m->be_ctx, w->vloss, h, c0, N);
}

static int head_fp32(const Model *m) {       // the backend's NMS reads fp32 head maps
    for (int l = 0; l < m->n_levels; l++) if (model_value(m, m->head[l], 1).bf16) return 0;
    return 1;
}

// Forward the slot's batch in chunks; the backend's detections on each chunk when it has them, and each
// chunk's head maps copied into w->heads (the host) when the host still needs them (losses, host NMS);
// w->head the batch's maps there. The backend's timers mark each chunk's stages (the input's upload
// counts as inference); batch_times reads them.
// The next slot's first chunk, when the helper has loaded it, is prefetched while this batch's last
// chunk runs (its forward then only converts the bytes); worker_main uploads one no batch took.
static void prefetch_next(Worker *w, const Slot *s) {
    const Slot *o = &w->slot[s == &w->slot[0]];
    pthread_mutex_lock(&w->mu);
    int loaded = o->state == SLOT_LOADED;     // and so it stays until this thread runs it
    pthread_mutex_unlock(&w->mu);
    if (!loaded) return;
    const ValBatch *vb = &o->vb;
    int chunk = chunk_images(w->m, vb->H, vb->W), cn = vb->n < chunk ? vb->n : chunk;
    w->pref = vb->images; w->pref_n = (size_t)cn * vb->H * vb->W * 3;
    w->m->be->dev.prefetch_u8(w->m->be_ctx, w->pref, w->pref_n);
}

static void forward_batch(Worker *w, Slot *s) {
    Model *m = w->m;
    const Backend *be = m->be;
    const ValBatch *vb = &s->vb;
    int chunk = chunk_images(m, vb->H, vb->W);
    w->pref = NULL;                           // taken by the first chunk's upload below, if it was this one
    s->dev_ok = (w->nms || w->topk) && head_fp32(m);
    w->vloss_ok = w->vloss && head_fp32(m);
    w->t_infer = w->t_nms = 0;
    int k = 0;
    size_t px = (size_t)vb->H * vb->W * 3;   // bytes per image
    for (int c0 = 0; c0 < vb->n; c0 += chunk, k++) {
        int cn = vb->n - c0 < chunk ? vb->n - c0 : chunk, c1 = c0 + cn;
        void **tm = w->tm + 3 * (k < w->n_tm ? k : w->n_tm - 1);
        be->dev.timer_record(m->be_ctx, tm[0]);
        model_forward_u8(m, vb->images + c0 * px, cn, vb->H, vb->W, 0);
        be->dev.timer_record(m->be_ctx, tm[1]);
        // the next chunk's bytes travel while this one runs (its upload then only converts them)
        if (c1 < vb->n) be->dev.prefetch_u8(m->be_ctx, vb->images + c1 * px, (size_t)(vb->n - c1 < chunk ? vb->n - c1 : chunk) * px);
        else prefetch_next(w, s);
        if (s->dev_ok) chunk_detect(w, s, c0, cn);
        be->dev.timer_record(m->be_ctx, tm[2]);
        if (w->vloss_ok) chunk_keep(w, c0, cn, vb->n);
        size_t off = 0;
        for (int l = 0; l < m->n_levels; l++) {
            Map h = model_value(m, m->head[l], cn);
            size_t per = (size_t)h.H * h.W * h.ld;           // floats per image
            float *dst = w->heads + off + c0 * per;
            if (!m->on_device) memcpy(dst, h.data, sizeof(float) * per * cn);
            else if ((w->p->o->losses && !w->vloss_ok) || !s->dev_ok) be->dev.download(m->be_ctx, dst, h.data, per * cn);
            w->head[l] = (Map){ w->heads + off, vb->n, h.H, h.W, h.C, h.ld, 0, 0 };
            off += per * vb->n;
        }
    }
}

// The backend's seconds in the forward and the detections of the batch forward_batch ran (after a wait
// for the device, which the losses or the detections' copy have mostly done already).
static void batch_times(Worker *w, const ValBatch *vb) {
    const Backend *be = w->m->be;
    int chunk = chunk_images(w->m, vb->H, vb->W), chunks = (vb->n + chunk - 1) / chunk;
    be->dev.sync(w->m->be_ctx);
    for (int k = 0; k < chunks && k < w->n_tm; k++) {
        w->t_infer += be->dev.timer_seconds(w->m->be_ctx, w->tm[3 * k], w->tm[3 * k + 1]);
        w->t_nms += be->dev.timer_seconds(w->m->be_ctx, w->tm[3 * k + 1], w->tm[3 * k + 2]);
    }
}

// YOLO26: the one-to-one branch's items, as training logs them. Evaluation computes that branch
// only; its loss needs nothing from the other, so the same maps stand in the one-to-many slot too.
static int batch_losses26(Worker *w, const ValBatch *b, BatchOut *out, Err *err) {
    int nc = w->m->nc;
    Loss26Batch lb = { .nc = nc, .img_h = b->H, .img_w = b->W, .targets = b->targets, .n_targets = b->nt };
    for (int br = 0; br < L26_BRANCHES; br++)
        for (int l = 0; l < L26_LEVELS; l++) {
            lb.head[br].box[l] = map_slice(w->head[l], 0, 4);
            lb.head[br].cls[l] = map_slice(w->head[l], 4, nc);
        }
    Loss26Weights wt = loss26_weights(0, 1);
    wt.box = w->p->o->gain_box, wt.cls = w->p->o->gain_cls, wt.l1 = w->p->o->gain_l1;
    const Head26 *none[L26_BRANCHES] = { NULL, NULL };
    Loss26Out lo;
    if (w->vloss_ok ? w->m->be->val.vloss_eval26(w->m->be_ctx, w->vloss, &lb, &wt, &lo, err)
                    : loss26_forward_backward(w->lw26, &lb, &wt, none, &lo, err)) return -1;
    out->box = lo.br[L26_O2O].box; out->cls = lo.br[L26_O2O].cls; out->dfl = lo.br[L26_O2O].l1;
    return 0;
}

static int batch_losses(Worker *w, const ValBatch *b, BatchOut *out, Err *err) {
    if (w->m->end2end) return batch_losses26(w, b, out, err);
    LossBatch lb = { .nc = w->m->nc, .img_h = b->H, .img_w = b->W, .targets = b->targets, .n_targets = b->nt };
    for (int l = 0; l < LOSS_LEVELS; l++) lb.head[l] = w->head[l];
    LossOut lo;
    if (w->vloss_ok ? w->m->be->val.vloss_eval(w->m->be_ctx, w->vloss, &lb, &lo, err)
                    : loss_forward_backward(w->lw, &lb, NULL, &lo, err)) return -1;
    out->box = lo.box; out->cls = lo.cls; out->dfl = lo.dfl;
    return 0;
}

// Match the slot's detections (the backend's, or decoded here from w->head) to its labels; the
// pictures of batch 0; predictions.json / labels. Seconds into the pass's NMS (host decode) and metrics.
static void batch_stats(Worker *w, Slot *s) {
    const ValBatch *vb = &s->vb;
    Pass *p = w->p;
    BatchOut *out = &p->out[s->b];
    double t0 = now_seconds();
    int picture = p->o->picture_dir && s->b == 0;
    ValImagesIn in = { .m = w->m, .ds = p->ds, .vb = vb, .head = w->head, .dev_det = s->dev_ok ? s->det : NULL,
                       .dev_nd = s->nd, .dev_stride = max_det_of(w), .confusion = p->o->plots_dir != NULL,
                       .keep = picture ? xcalloc(vb->n, sizeof(Det *)) : NULL, .kn = picture ? xcalloc(vb->n, sizeof(int)) : NULL };
    int saving = p->o->save_json || p->o->save_txt;
    if (saving) in.orig = xcalloc(vb->n, sizeof(Det *)), in.on = xcalloc(vb->n, sizeof(int));
    val_images_stats(&w->img, &in, &out->st);
    if (saving) {
        pthread_mutex_lock(&p->mu);
        for (int i = 0; i < vb->n; i++) val_save_image(&p->save, &p->ds->s[vb->index[i]], in.orig[i], in.on[i]);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < vb->n; i++) free(in.orig[i]);
        free(in.orig); free(in.on);
    }
    double t_pic = now_seconds();
    if (picture) val_pictures(p->ds, p->o->picture_dir, vb, (const Det *const *)in.keep, in.kn, p->o->drawer);
    for (int i = 0; picture && i < vb->n; i++) free(in.keep[i]);
    free(in.keep); free(in.kn);
    double dec = s->dev_ok ? 0 : w->img.t_decode, t1 = now_seconds();
    pthread_mutex_lock(&p->mu);
    p->t_nms += dec; p->t_metrics += t_pic - t0 - dec;
    if (picture) p->t_plots += t1 - t_pic;
    pthread_mutex_unlock(&p->mu);
    s->matched = 1;
}

// The next batch of this process's share of the pass, or -1 (none left, a failure, a stop signal).
static int claim_batch(Pass *p) {
    pthread_mutex_lock(&p->mu);
    int stop = p->o->stop && *p->o->stop;
    int b = p->failed || stop || p->next >= p->plan.n_batches ? -1 : p->next;
    if (b >= 0) p->next += p->step;
    pthread_mutex_unlock(&p->mu);
    return b;
}

// Wait (under w->mu) while slot s is in state `state`.
static void slot_wait_while(Worker *w, Slot *s, int state) {
    while (s->state == state) pthread_cond_wait(&w->cv, &w->mu);
}

static void slot_set(Worker *w, Slot *s, int state) {
    pthread_mutex_lock(&w->mu);
    s->state = state;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

// Matching of a slot the model's thread ran (unless it matched it itself), then the slot is free.
static void slot_finish(Worker *w, Slot *s) {
    if (!s->matched) batch_stats(w, s);
    slot_set(w, s, SLOT_FREE);
}

// The helper thread: loads batches into the slots in turn, each once the model's thread has run what
// it held and its matching is done.
static void *helper_main(void *arg) {
    Worker *w = arg;
    Pass *p = w->p;
    for (int k = 0;; k ^= 1) {
        Slot *s = &w->slot[k];
        pthread_mutex_lock(&w->mu);
        slot_wait_while(w, s, SLOT_LOADED);
        pthread_mutex_unlock(&w->mu);
        if (s->state == SLOT_RAN) slot_finish(w, s);
        int b = claim_batch(p);
        if (b < 0) {
            Slot *o = &w->slot[k ^ 1];
            pthread_mutex_lock(&w->mu);
            w->loads_done = 1;
            pthread_cond_broadcast(&w->cv);
            slot_wait_while(w, o, SLOT_LOADED);
            pthread_mutex_unlock(&w->mu);
            if (o->state == SLOT_RAN) slot_finish(w, o);
            return NULL;
        }
        double t0 = now_seconds();
        val_batch_get(p->o->cache, p->ds, &p->plan, b, p->o->imgsz, p->o->workers, &s->vb);
        pthread_mutex_lock(&p->mu);
        p->t_pre += now_seconds() - t0;
        pthread_mutex_unlock(&p->mu);
        s->b = b; s->matched = 0;
        slot_set(w, s, SLOT_LOADED);
    }
}

static int pass_writer(const ValOptions *o) { return o->ranks < 2 || o->rank == 0; }

// The pass's progress line after another batch (under p->mu): images done of this process's, their rate,
// the time left; as yolov9's val bar, after the table's header.
static void progress_line(Pass *p) {
    const ValOptions *o = p->o;
    double now = now_seconds(), dt = now - p->prog.t0;
    if (!o->progress || !o->out || !pass_writer(o) || !progress_due(&p->prog, p->images_done, now)) return;
    if (!p->prog.tty && p->images_done == p->images) return;   // the table follows at once
    char bar[96], eta[16];
    progress_bar(bar, sizeof bar, p->images_done, p->images);
    progress_clock(eta, sizeof eta, p->images_done ? dt / p->images_done * (p->images - p->images_done) : 0);
    fprintf(o->out, "%s%22s%11s%11s%11s%11s%11s%11s: %s %.1fimg/s ETA %s%s", p->prog.tty ? "\r" : "", "Class",
            "Images", "Instances", "P", "R", "mAP50", "mAP50-95", bar, dt > 0 ? p->images_done / dt : 0, eta,
            p->prog.tty ? "" : "\n");
    fflush(o->out);
    p->drawn = p->prog.tty;
}

// Start the progress bar: this process's images (its batches b = rank, rank + ranks, ...).
static void progress_start(Pass *p) {
    const ValOptions *o = p->o;
    const ValPlan *pl = &p->plan;
    for (int b = p->next; b < pl->n_batches; b += p->step)
        p->images += (b + 1) * pl->batch < pl->n ? pl->batch : pl->n - b * pl->batch;
    int tty = o->out && isatty(fileno(o->out));
    progress_begin(&p->prog, tty, p->images, 0, now_seconds(), o->progress_quiet);
}

// Forward, detections and losses of one loaded slot (and its matching when the host decodes).
static void run_batch(Worker *w, Slot *s) {
    Pass *p = w->p;
    forward_batch(w, s);
    double t0 = now_seconds();
    Err err;
    int rc = p->o->losses ? batch_losses(w, &s->vb, &p->out[s->b], &err) : 0;
    double t_loss = now_seconds() - t0;
    batch_times(w, &s->vb);
    pthread_mutex_lock(&p->mu);
    p->t_infer += w->t_infer; p->t_nms += w->t_nms; p->t_loss += t_loss;
    if (rc && !p->failed) p->failed = 1, p->err = err;
    p->dev_nms += s->dev_ok; p->dev_loss += w->vloss_ok && p->o->losses;
    p->ran++;
    p->images_done += s->vb.n;
    progress_line(p);
    pthread_mutex_unlock(&p->mu);
    if (!rc && !s->dev_ok) batch_stats(w, s);   // it reads w->head, which the next batch overwrites
}

// A model's thread: run the slots the helper loads, in turn, until it loads no more.
static void *worker_main(void *arg) {
    Worker *w = arg;
    w->m->be->dev.bind(w->m->be_ctx);
    pthread_t helper;
    pthread_create(&helper, NULL, helper_main, w);
    for (int k = 0;; k ^= 1) {
        Slot *s = &w->slot[k];
        pthread_mutex_lock(&w->mu);
        while (s->state != SLOT_LOADED && !w->loads_done) pthread_cond_wait(&w->cv, &w->mu);
        int go = s->state == SLOT_LOADED;
        pthread_mutex_unlock(&w->mu);
        if (!go) break;
        run_batch(w, s);
        slot_set(w, s, SLOT_RAN);
    }
    if (w->pref) {                            // never left pending: its stage would hold stale bytes
        Map in = model_value(w->m, w->m->input, 1);
        w->m->be->dev.upload_u8(w->m->be_ctx, in.data, w->pref, w->pref_n);
    }
    pthread_join(helper, NULL);
    return NULL;
}

static int anchors_of(int h, int w) { return (h / 8) * (w / 8) + (h / 16) * (w / 16) + (h / 32) * (w / 32); }

static void worker_init(Worker *w, Pass *p, Model *m) {
    memset(w, 0, sizeof *w);
    w->p = p; w->m = m;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    val_images_init(&w->img, m, p->o->workers, p->max_h, p->max_w, &p->o->nms);
    m->be->dev.bind(m->be_ctx);                   // the work lives on this model's device
    int A = anchors_of(p->max_h, p->max_w), D = max_det_of(w);
    if (m->on_device && m->n_levels == 3 && !p->o->host_post) {
        int chunk = m->max_n < p->o->batch ? m->max_n : p->o->batch;
        if (m->end2end) w->topk = m->be->val.topk_prepare(m->be_ctx, chunk, A, m->nc, D);
        else w->nms = m->be->val.nms_prepare(m->be_ctx, chunk, A, m->nc, &p->o->nms);
        if (p->o->losses && (!m->end2end || m->be->val.vloss_eval26))
            w->vloss = m->be->val.vloss_prepare(m->be_ctx, p->o->batch, p->ds->n_instances, m->nc, A, m->end2end);
    }
    for (int k = 0; k < 2; k++) {
        w->slot[k].det = xmalloc(sizeof(Det) * ((size_t)p->o->batch * D + 1));
        w->slot[k].nd = xmalloc(sizeof(int) * (p->o->batch + 1));
    }
    w->n_tm = p->o->batch + 1;                // chunks per batch, at most
    w->tm = xmalloc(sizeof(void *) * 3 * w->n_tm);
    for (int k = 0; k < 3 * w->n_tm; k++) w->tm[k] = m->be->dev.timer_new(m->be_ctx);
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
    val_images_free(&w->img);
    Model *m = w->m;
    m->be->dev.bind(m->be_ctx);
    if (w->nms) m->be->val.nms_release(m->be_ctx, w->nms);
    if (w->topk) m->be->val.topk_release(m->be_ctx, w->topk);
    if (w->vloss) m->be->val.vloss_release(m->be_ctx, w->vloss);
    for (int k = 0; k < 3 * w->n_tm; k++) m->be->dev.timer_free(m->be_ctx, w->tm[k]);
    free(w->tm);
    for (int k = 0; k < 2; k++) val_batch_free(&w->slot[k].vb), free(w->slot[k].det), free(w->slot[k].nd);
    loss_work_free(w->lw);
    loss26_work_free(w->lw26);
    free(w->heads);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
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
    if (n > 1) p->models[0]->be->dev.bind(p->models[0]->be_ctx);   // worker_init bound each model's device
    for (int k = 1; k < n; k++) pthread_create(&th[k], NULL, worker_main, &w[k]);
    worker_main(&w[0]);
    for (int k = 1; k < n; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < n; k++) worker_free(&w[k]);
    if (n > 1) p->models[0]->be->dev.bind(p->models[0]->be_ctx);   // the caller's device again
    free(w); free(th);
}

// ---- a pass shared by the processes of a run (ValOptions.ranks > 1) ------------------------
// Each process ran its batches (b % ranks == rank); then every process learns every process's outcome
// (one collective, reached whatever happened), and when all went well gets every batch's results (a
// second), so finish() merges them in batch order in every process, as one process would.

typedef struct {              // one process's outcome, to every process
    int    failed, stopped, ran, dev_nms, dev_loss;
    double t[6];              // t_pre, t_infer, t_loss, t_nms, t_metrics, t_plots
    char   host[64], msg[512];
} Outcome;

// A failure anywhere is every process's, with the first failing process's message; a stop anywhere
// stops all; the stage seconds and device counts are added in rank order (the Speed line's).
static void share_outcome(Pass *p) {
    int P = p->o->ranks, first = -1;
    Outcome mine = { p->failed, p->stopped, p->ran, p->dev_nms, p->dev_loss,
                     { p->t_pre, p->t_infer, p->t_loss, p->t_nms, p->t_metrics, p->t_plots }, "", "" },
            *all = xcalloc(P, sizeof *all);
    snprintf(mine.host, sizeof mine.host, "%s", comm_host());
    if (p->failed) snprintf(mine.msg, sizeof mine.msg, "%.500s", p->err.msg);
    comm_allgather(&mine, all, sizeof mine);
    double t[6] = { 0 };
    p->ran_by = xcalloc(P, sizeof *p->ran_by);
    p->dev_nms = p->dev_loss = 0;
    for (int r = 0; r < P; r++) {
        for (int k = 0; k < 6; k++) t[k] += all[r].t[k];
        p->dev_nms += all[r].dev_nms; p->dev_loss += all[r].dev_loss;
        p->ran_by[r] = all[r].ran;
        p->stopped |= all[r].stopped;
        if (all[r].failed && first < 0) first = r;
    }
    p->t_pre = t[0]; p->t_infer = t[1]; p->t_loss = t[2]; p->t_nms = t[3]; p->t_metrics = t[4]; p->t_plots = t[5];
    if (first >= 0) {
        p->failed = 1;
        err_set(&p->err, "validation failed in process %d of %d (host %s): %s", first, P, all[first].host,
                all[first].msg);
    }
    free(all);
}

// This process's batches as bytes: for each, its number, loss items and stats.
static char *pack_batches(const Pass *p, size_t *n) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, n);
    if (!f) die("validation: no memory for the results of %d batches", p->ran);
    for (int b = p->o->rank; b < p->plan.n_batches; b += p->step) {
        const BatchOut *o = &p->out[b];
        double loss[3] = { o->box, o->cls, o->dfl };
        fwrite(&b, sizeof b, 1, f);
        fwrite(loss, sizeof loss, 1, f);
        metrics_stats_write(&o->st, f);
    }
    if (fclose(f)) die("validation: no memory for the results of %d batches", p->ran);
    return buf;
}

// Rank r's batches from its bytes into p->out; 0, or -1 when they are short.
static int unpack_batches(Pass *p, int r, const char *bytes, size_t n) {
    FILE *f = n ? fmemopen((void *)bytes, n, "rb") : NULL;
    int rc = 0, nc = p->models[0]->nc;
    for (int b = r; !rc && b < p->plan.n_batches; b += p->step) {
        BatchOut *o = &p->out[b];
        int got = -1;
        double loss[3];
        metrics_stats_free(&o->st);
        if (!f || fread(&got, sizeof got, 1, f) != 1 || got != b || fread(loss, sizeof loss, 1, f) != 1 ||
            metrics_stats_read(&o->st, nc, f)) rc = -1;
        else o->box = loss[0], o->cls = loss[1], o->dfl = loss[2];
    }
    if (f) fclose(f);
    return rc;
}

// Every process's batches into p->out of every process. Each reads the same bytes (its own too), so
// all go on or all fail.
static void share_batches(Pass *p) {
    int P = p->o->ranks;
    size_t n, at = 0, *bytes = xcalloc(P, sizeof *bytes);
    char *mine = pack_batches(p, &n), *all = comm_allgatherv(mine, n, bytes);
    for (int r = 0; r < P && !p->failed; at += bytes[r++])
        if (unpack_batches(p, r, all + at, bytes[r]))
            p->failed = 1, err_set(&p->err, "validation: the results of process %d of %d came short (%zu bytes)", r, P,
                                   bytes[r]);
    free(mine); free(all); free(bytes);
}

// Which process ran how many batches (rank order).
static void print_shares(const Pass *p, FILE *f) {
    fprintf(f, "Validation shared by %d processes: batches", p->o->ranks);
    for (int r = 0; r < p->o->ranks; r++) fprintf(f, "%s%d", r ? " + " : " ", p->ran_by[r]);
    fprintf(f, " of %d\n", p->plan.n_batches);
}

static void finish(Pass *p, int nb, ValResult *r, double t0) {
    const ValOptions *o = p->o;
    int writer = pass_writer(o);              // several processes: rank 0 prints and draws
    MetricsStats st;
    metrics_stats_init(&st, p->models[0]->nc);
    for (int b = 0; b < nb; b++) {            // batch order: the numbers do not depend on the threads
        metrics_stats_merge(&st, &p->out[b].st);
        r->box += p->out[b].box; r->cls += p->out[b].cls; r->dfl += p->out[b].dfl;
    }
    if (nb) r->box /= nb, r->cls /= nb, r->dfl /= nb;
    r->dev_nms = p->dev_nms; r->dev_loss = p->dev_loss; r->ran = p->ran;
    int images = st.images;                   // st goes to the plots' job below
    double tm = now_seconds();
    metrics_compute(&st, &r->m);
    p->t_metrics += now_seconds() - tm;       // ap_per_class belongs to the metrics phase
    r->fitness = metrics_fitness(&r->m);
    if (o->plots_dir && writer) {
        double tp = now_seconds();
        plots_validation_queue(o->drawer, &st, p->ds->names, o->plots_dir);   // takes st
        p->t_plots += now_seconds() - tp;
    }
    r->seconds = now_seconds() - t0;
    if (o->out && writer) {
        metrics_print(&r->m, p->ds->names, o->verbose, o->out);
        double per = 1e3 / (images ? images : 1);
        // each stage's own time (the device's by its timers); loading and matching overlap the device's work
        // the val_batch0 pictures and the plots (when asked for): a column of their own; with a drawer
        // (training) the pass's time in it is the copying and queueing, the drawing runs beside the run
        char plots[64] = "";
        if (o->plots_dir || o->picture_dir) snprintf(plots, sizeof plots, ", %.1fms plots", p->t_plots * per);
        fprintf(o->out, "Speed: %.1fms pre-process, %.1fms inference, %.1fms loss, %.1fms %s, %.1fms metrics%s per image "
                "at shape (%d, 3, %d, %d)%s; %.1fms per image all in\n", p->t_pre * per, p->t_infer * per,
                p->t_loss * per, p->t_nms * per, p->models[0]->end2end ? "top-k" : "NMS", p->t_metrics * per, plots,
                o->batch, p->max_h, p->max_w, o->rect ? " (largest rect batch)" : "", r->seconds * per);
        if (o->ranks > 1) print_shares(p, o->out);
    }
    metrics_stats_free(&st);
}

// This process's batches on its n models (every batch when it is alone).
static void run_pass(Pass *p, int n) {
    const ValOptions *o = p->o;
    plan_pass(p, n);
    p->out = xcalloc(p->plan.n_batches + 1, sizeof *p->out);
    progress_start(p);
    int saving = o->save_json || o->save_txt;
    if (saving && val_save_open(&p->save, o->save_dir ? o->save_dir : ".", o->save_json, o->save_txt, &p->err)) p->failed = 1;
    p->save.conf = o->save_conf;
    p->save.category_id = p->ds->category_id;
    if (!p->failed) run_workers(p, n);
    if (p->drawn) fprintf(o->out, "\r\033[K");   // the terminal's bar gives way to the table (or a message)
    if (saving && val_save_close(&p->save, p->failed ? &(Err){ { 0 } } : &p->err)) p->failed = 1;
}

int val_evaluate_models(Model *const *models, int n, const Dataset *ds, const ValOptions *o, ValResult *r, Err *err) {
    memset(r, 0, sizeof *r);
    double t0 = now_seconds();
    int ranks = o->ranks > 1 ? o->ranks : 1;
    Pass p = { .models = models, .ds = ds, .o = o, .next = ranks > 1 ? o->rank : 0, .step = ranks };
    pthread_mutex_init(&p.mu, NULL);
    if (n < 1) p.failed = 1, err_set(&p.err, "validation: no model");
    else if (check_sizes(models, n, o, &p.err)) p.failed = 1;
    else run_pass(&p, n);
    p.stopped = o->stop && *o->stop;
    if (ranks > 1) share_outcome(&p);         // reached by every process, whatever happened in it
    if (ranks > 1 && !p.failed && !p.stopped) share_batches(&p);
    int rc = p.failed ? -1 : 0;
    if (rc) *err = p.err;
    else if (p.stopped) rc = err_set(err, "validation stopped by a signal");
    else finish(&p, p.plan.n_batches, r, t0);
    for (int b = 0; b < p.plan.n_batches; b++) metrics_stats_free(&p.out[b].st);
    free(p.out);
    free(p.ran_by);
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
    const char *synth = cfg->n_data_kv ? NULL : synth_builtin_dir(cfg->data);
    if (synth) {
        if (synth_ensure(synth, err)) return -1;
        snprintf(cfg->data, sizeof cfg->data, "%s/data.yaml", synth);
    }
    DatasetOptions opt = { .strict = cfg->strict, .report = stderr, .single_cls = cfg->single_cls };   // val.py too
    if (dataset_open(NULL, cfg, cfg->val_split[0] ? cfg->val_split : "val", &opt, ds, err)) return -1;
    if (cfg->nc != ds->nc) config_set_nc(cfg, ds->nc);
    return 0;
}

// Files of dir ending in ".txt" (val.py counts labels/*.txt the same way).
static int count_txt(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        n += e->d_name[0] != '.' && len > 4 && !strcmp(e->d_name + len - 4, ".txt");
    }
    if (d) closedir(d);
    return n;
}

// The last line, as detect's: the folder and what was written into it.
static void print_saved(const ValOptions *o, const char *dir) {
    char what[160] = "", labels[4 * CFG_PATH] = "";
    if (o->save_json || o->plots_dir)
        snprintf(what, sizeof what, " (%s%s%s)", o->save_json ? "predictions.json" : "", o->save_json && o->plots_dir ? ", " : "",
                 o->plots_dir ? "confusion_matrix.png, PR_curve.png, F1_curve.png, P_curve.png, R_curve.png" : "");
    if (o->save_txt) {
        char sub[3 * CFG_PATH];
        snprintf(sub, sizeof sub, "%s/labels", dir);
        int n = count_txt(sub);
        snprintf(labels, sizeof labels, "; %d label%s saved to %s", n, n == 1 ? "" : "s", sub);
    }
    printf("Results saved to %s%s%s\n", dir, what, labels);
}

// The pass over ds on the models of im, with the table and the losses on stdout; the files go to
// runs/val/exp, exp2, ... by detect's naming rule (core/train/outdir.h).
static int val_on_models(Config *cfg, const Dataset *ds, InferModels *im, Err *err) {
    ValOptions o = val_options(cfg);
    o.verbose = 1;
    o.nms.conf_thres = (float)cfg->conf; o.nms.iou_thres = (float)cfg->iou; o.nms.max_det = cfg->max_det;
    char dir[2 * CFG_PATH + 16];
    if (outdir_make(cfg, "runs/val", cfg->save_txt, dir, sizeof dir, err)) return -1;
    o.save_json = cfg->save_json; o.save_txt = cfg->save_txt; o.save_conf = cfg->save_conf; o.save_dir = dir;
    if (!cfg->noplots) o.plots_dir = dir;       // val.py's plots: confusion matrix, PR/F1/P/R curves
    ValResult r;
    printf("val: %s on %d images of %s (imgsz %d, batch %d)\n", cfg->weights, ds->n, cfg->data[0] ? cfg->data : "[data]",
           o.imgsz, o.batch);
    if (val_evaluate_models(im->ptr, im->n, ds, &o, &r, err)) return -1;
    printf("val losses: box %.4g, cls %.4g, dfl %.4g; fitness %.4g; %.1f s\n", r.box, r.cls, r.dfl, r.fitness, r.seconds);
    print_saved(&o, dir);
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
