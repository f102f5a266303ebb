// val.c: validation speed per phase (pre-process, inference, loss, NMS, metrics per image), with the
// decode + NMS + losses where the model runs (a GPU's kernels) and, for comparison, on the host.
//   make benches && ./bench/val                       CPU: gelan-t 320, batch 8, the built-in set
//   ./bench/val CONFIG imgsz batch [device [data.yaml [weights|"" [key=value ...]]]]
//   e.g. ./bench/val cfg/s.ini 640 32 0 ../shared/data/coco128/data.yaml      (conf 0.001, iou 0.7)
//   The [val] keys conf, iou, max_det apply: ./bench/val cfg/t.ini 320 16 cpu "" "" conf=0 stresses NMS.
// Without weights the model's random initial weights are used: every anchor is a candidate at conf
// 0.001, so NMS sees its worst case (max_nms = 30,000 pairs per image, max_det = 300 kept).
// data "": the built-in synthetic set's val split (128 images); weights "": random ones.
// The pass runs twice: the first meets every rect shape for the first time (cuDNN makes its plans then, as
// in `yolotrain val`), the second is what each validation during training costs (its batches copied from
// the first's, as training keeps them; val_cache_mb=0: loaded again). Then the forward alone at
// imgsz x imgsz in chunks of the batch (the device's floor), and with YT_PROFILE set a pass with a wait
// after every node: its slowest nodes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/devices/infer_devices.h"
#include "core/base/switches.h"
#include "core/eval/val.h"
#include "io/synth.h"
#ifdef USE_CUDA
#include "gpu/cudnn_conv.h"
#include "gpu/device.h"
static size_t gpu_allocs(void) { return gpu_alloc_count(); }
#else
static size_t gpu_allocs(void) { return 0; }
#endif

static int random_weights(Config *cfg, const char *path, Err *err) {
    Model m;
    if (model_build(cfg, 1, cfg->imgsz, &m, err)) return -1;
    model_init_weights(&m, 1);
    int rc = model_save(&m, path, err);
    model_free(&m);
    return rc;
}

static void plans(const InferModels *im) {
#if defined(USE_CUDA) && defined(USE_CUDNN)
    if (im->devs.gpu[0] < 0) return;
    int made, refused;
    double secs;
    cudnn_conv_stats(((Device *)im->ptr[0]->be_ctx)->cudnn, &made, &refused, &secs);
    printf("  cuDNN so far: %d plans made, %d shapes left to cuBLAS, %.2f s making them\n", made, refused, secs);
#endif
}

// The passes share one ValCache as a training run's validations do (its first pass loads and keeps the
// batches, the later ones copy them); val_cache_mb=0: every pass loads.
static ValCache *cache;

static void run(InferModels *im, const Dataset *ds, const Config *cfg, int host_post, const char *what) {
    ValOptions o = val_options(cfg);
    o.host_post = host_post;
    o.cache = cache;
    o.nms.conf_thres = (float)cfg->conf; o.nms.iou_thres = (float)cfg->iou; o.nms.max_det = cfg->max_det;
    ValResult r;
    Err err;
    printf("-- post-processing %s, %s\n", host_post ? "on the host" : "where the model runs", what);
    size_t allocs = gpu_allocs();
    if (val_evaluate_models(im->ptr, im->n, ds, &o, &r, &err)) { printf("failed: %s\n", err.msg); return; }
    long long kept, loaded;
    val_cache_counts(cache, &kept, &loaded);
    printf("%d images in %.3f s: %.2f ms per image all in; batches on the device: NMS %d, losses %d; %zu device "
           "allocations; kept batches so far: %lld copied, %lld loaded\n", r.m.images, r.seconds,
           r.seconds * 1e3 / (r.m.images ? r.m.images : 1), r.dev_nms, r.dev_loss, gpu_allocs() - allocs, kept, loaded);
    plans(im);
    val_result_free(&r);
}

// The forward alone: batches of the model's max_n grey images of imgsz x imgsz, timed around a wait.
static void forward_only(Model *m, int imgsz, int reps) {
    size_t bytes = (size_t)m->max_n * imgsz * imgsz * 3;
    uint8_t *px = xmalloc(bytes);
    memset(px, 114, bytes);
    model_forward_u8(m, px, m->max_n, imgsz, imgsz, 0);
    m->be->dev.sync(m->be_ctx);
    double t0 = now_seconds();
    for (int i = 0; i < reps; i++) model_forward_u8(m, px, m->max_n, imgsz, imgsz, 0);
    m->be->dev.sync(m->be_ctx);
    double s = now_seconds() - t0;
    printf("-- forward only (upload included), %d x %d images of %d px: %.3f ms per image\n", reps, m->max_n, imgsz,
           s * 1e3 / reps / m->max_n);
    free(px);
}

// A pass with a wait after every node (m->prof): the forward's slowest nodes.
static void profile(InferModels *im, const Dataset *ds, const Config *cfg) {
    Model *m = im->ptr[0];
    m->prof = xcalloc(2 * (size_t)m->n_nodes, sizeof(double));
    ValOptions o = val_options(cfg);
    o.out = NULL;
    ValResult r;
    Err err;
    if (val_evaluate(m, ds, &o, &r, &err)) printf("failed: %s\n", err.msg);
    else val_result_free(&r);
    double total = 0;
    int *order = xmalloc(sizeof(int) * m->n_nodes);
    for (int i = 0; i < m->n_nodes; i++) order[i] = i, total += m->prof[2 * i];
    for (int i = 1; i < m->n_nodes; i++)
        for (int j = i; j > 0 && m->prof[2 * order[j]] > m->prof[2 * order[j - 1]]; j--) { int t = order[j]; order[j] = order[j - 1]; order[j - 1] = t; }
    printf("-- profiled pass (a wait after every node): forward %.2f ms per image; slowest nodes:\n", total * 1e3 / ds->n);
    for (int r2 = 0; r2 < 12 && r2 < m->n_nodes; r2++) {
        const Node *nd = &m->nodes[order[r2]];
        const char *name = nd->cv.w >= 0 && (nd->op == OP_CONV || nd->op == OP_REPCONV) ? m->params[nd->cv.w].name : "-";
        printf("  node %3d op %d %-40.40s %.3f ms per image\n", order[r2], nd->op, name, m->prof[2 * order[r2]] * 1e3 / ds->n);
    }
    free(order); free(m->prof);
    m->prof = NULL;
}

int main(int argc, char **argv) {
    const char *cfg_path = argc > 1 ? argv[1] : "cfg/t.ini", *data = argc > 5 ? argv[5] : "";
    int own_weights = argc > 6 && argv[6][0];
    char imgsz[32], batch[32], device[64], data_kv[4200], weights[4200];
    snprintf(imgsz, sizeof imgsz, "imgsz=%s", argc > 2 ? argv[2] : "320");
    snprintf(batch, sizeof batch, "batch=%s", argc > 3 ? argv[3] : "8");
    snprintf(device, sizeof device, "device=%s", argc > 4 ? argv[4] : "cpu");
    if (!*data) {
        Err e;
        if (synth_ensure(SYNTH_DIR, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
        data = SYNTH_DIR "/data.yaml";
    }
    snprintf(data_kv, sizeof data_kv, "data=%s", data);
    snprintf(weights, sizeof weights, "weights=%s", own_weights ? argv[6] : "/tmp/bench-val-random.safetensors");
    char *args[64] = { imgsz, batch, device, data_kv, weights };
    int n_args = 5;
    for (int i = 7; i < argc && n_args < 64; i++) args[n_args++] = argv[i];
    static Config cfg;
    Err err;
    Dataset ds;
    DatasetOptions opt = { .quiet = 1 };
    if (config_load(cfg_path, n_args, args, &cfg, &err) || dataset_open(NULL, &cfg, "val", &opt, &ds, &err)) {
        fprintf(stderr, "%s\n", err.msg); return 1;
    }
    config_set_nc(&cfg, ds.nc);
    if (!own_weights && random_weights(&cfg, cfg.weights, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    DeviceList devs;
    InferModels im;
    if (infer_pick_devices(&cfg, "bench/val", &devs) || infer_models_open(&cfg, &devs, cfg.batch, &im, &err)) {
        fprintf(stderr, "%s\n", err.msg); return 1;
    }
    printf("%s at %d, batch %d, %d images of %s, conf %g, iou %g, max_det %d\n", cfg_path, cfg.imgsz, cfg.batch, ds.n,
           data, cfg.conf, cfg.iou, cfg.max_det);
    cache = cfg.val_cache_mb > 0 ? val_cache_new((size_t)(cfg.val_cache_mb * 1048576)) : NULL;
    run(&im, &ds, &cfg, 0, "first pass");
    run(&im, &ds, &cfg, 0, "second pass");
    if (im.devs.gpu[0] >= 0) run(&im, &ds, &cfg, 1, "third pass");
    forward_only(im.ptr[0], cfg.imgsz, 5);
    if (switch_str(SW_PROFILE)) profile(&im, &ds, &cfg);
    infer_models_free(&im);
    val_cache_free(cache);
    dataset_free(&ds);
    return 0;
}
