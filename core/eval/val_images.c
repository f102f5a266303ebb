// val_images.c: the per-image half of a validation batch, spread over threads: each image's detections
// (decode + NMS on the host, or those a device already picked), mapped back to the original image, and
// matched to its labels into a MetricsStats of its own; the images' stats are then merged in batch
// order, so the result is the one-thread result bit for bit. Legend: n images, D detections, G labels.
#include "core/eval/val.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void val_images_init(ValImages *v, const Model *m, int threads, int max_h, int max_w, const NmsOptions *o) {
    memset(v, 0, sizeof *v);
    v->threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    v->s = xcalloc(v->threads, sizeof *v->s);
    for (int k = 0; k < v->threads; k++) val_decoder_init(&v->s[k].dec, m, max_h, max_w, o);
}

void val_images_free(ValImages *v) {
    for (int k = 0; k < v->threads; k++) { val_decoder_free(&v->s[k].dec); free(v->s[k].gt); }
    for (int i = 0; i < v->img_cap; i++) metrics_stats_free(&v->img[i]);
    free(v->s); free(v->img);
    memset(v, 0, sizeof *v);
}

// The labels of image i of the batch: normalised to W, H, to pixels, xyxy, then to the original image.
static int batch_labels(const ValBatch *b, int i, int w0, int h0, ValImageScratch *s) {
    int n = 0;
    for (int k = 0; k < b->nt; k++) {
        const float *t = b->targets + (size_t)k * 6;
        if ((int)t[0] != i) continue;
        if (n == s->gt_cap) s->gt_cap = 2 * n + 16, s->gt = xrealloc(s->gt, sizeof *s->gt * s->gt_cap);
        float cx = t[2] * b->W, cy = t[3] * b->H, bw = t[4] * b->W, bh = t[5] * b->H;
        s->gt[n++] = (Det){ cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2, 1.0f, (int)t[1] };
    }
    val_scale_boxes(s->gt, n, b->S, w0, h0, &b->info[i]);
    return n;
}

typedef struct {
    ValImages       *v;
    const ValImagesIn *in;
    int              next;
    pthread_mutex_t  mu;
} Job;

static void one_image(const ValImagesIn *in, ValImageScratch *s, int i, MetricsStats *st) {
    const ValBatch *vb = in->vb;
    double t0 = now_seconds();
    Det *det = s->dec.det;
    int nd;
    if (in->dev_det) {                         // picked on the device already
        nd = in->dev_nd[i];
        memcpy(det, in->dev_det + (size_t)i * in->dev_stride, sizeof(Det) * nd);
    } else nd = val_decode(&s->dec, in->m, in->head, i, vb->H);
    double t1 = now_seconds();
    if (in->keep) {                            // letterbox pixels, before mapping back
        in->keep[i] = xmalloc(sizeof(Det) * (nd + 1));
        memcpy(in->keep[i], det, sizeof(Det) * nd);
        in->kn[i] = nd;
    }
    const Sample *smp = &in->ds->s[vb->index[i]];
    val_scale_boxes(det, nd, vb->S, smp->w, smp->h, &vb->info[i]);
    if (in->orig) {                            // original pixels, for predictions.json / labels
        in->orig[i] = xmalloc(sizeof(Det) * (nd + 1));
        memcpy(in->orig[i], det, sizeof(Det) * nd);
        in->on[i] = nd;
    }
    int ng = batch_labels(vb, i, smp->w, smp->h, s);
    metrics_stats_add(st, det, nd, s->gt, ng);
    s->t_decode += t1 - t0; s->t_match += now_seconds() - t1;
}

static void *thread_main(void *arg) {
    Job *j = ((void **)arg)[0];
    ValImageScratch *s = ((void **)arg)[1];
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int i = j->next < j->in->vb->n ? j->next++ : -1;
        pthread_mutex_unlock(&j->mu);
        if (i < 0) return NULL;
        one_image(j->in, s, i, &j->v->img[i]);
    }
}

void val_images_stats(ValImages *v, const ValImagesIn *in, MetricsStats *out) {
    int n = in->vb->n, nc = in->m->nc;
    if (n > v->img_cap) {
        v->img = xrealloc(v->img, sizeof *v->img * n);
        for (int i = v->img_cap; i < n; i++) metrics_stats_init(&v->img[i], nc);
        v->img_cap = n;
    }
    for (int i = 0; i < n; i++) {
        metrics_stats_free(&v->img[i]);
        metrics_stats_init(&v->img[i], nc);
        v->img[i].no_confusion = !in->confusion;
    }
    double t0 = now_seconds();
    for (int k = 0; k < v->threads; k++) v->s[k].t_decode = v->s[k].t_match = 0;
    Job j = { .v = v, .in = in };
    pthread_mutex_init(&j.mu, NULL);
    int nt = v->threads < n ? v->threads : n > 0 ? n : 1;
    pthread_t th[64];
    void *args[64][2];
    for (int k = 0; k < nt; k++) args[k][0] = &j, args[k][1] = &v->s[k];
    for (int k = 1; k < nt; k++) pthread_create(&th[k], NULL, thread_main, args[k]);
    thread_main(args[0]);                      // this thread is one of them
    for (int k = 1; k < nt; k++) pthread_join(th[k], NULL);
    pthread_mutex_destroy(&j.mu);
    metrics_stats_init(out, nc);
    for (int i = 0; i < n; i++) metrics_stats_merge(out, &v->img[i]);   // batch order
    double dec = 0, match = 0, wall = now_seconds() - t0;
    for (int k = 0; k < v->threads; k++) dec += v->s[k].t_decode, match += v->s[k].t_match;
    v->t_decode = dec + match > 0 ? wall * dec / (dec + match) : 0;      // the wall time, split as the
    v->t_match = wall - v->t_decode;                                     // threads spent it
}
