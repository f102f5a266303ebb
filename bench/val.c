// val.c: validation speed per phase (pre-process, inference, loss, NMS, metrics per image), with the
// decode + NMS + losses where the model runs (a GPU's kernels) and, for comparison, on the host.
//   make benches && ./bench/val                       CPU: gelan-t 320, batch 8, the built-in set
//   ./bench/val CONFIG imgsz batch [device [data.yaml [weights|"" [key=value ...]]]]
//   e.g. ./bench/val cfg/s.ini 640 32 0 ../shared/data/coco128/data.yaml      (conf 0.001, iou 0.7)
//   The [val] keys conf, iou, max_det apply: ./bench/val cfg/t.ini 320 16 cpu "" "" conf=0 stresses NMS.
// Without weights the model's random initial weights are used: every anchor is a candidate at conf
// 0.001, so NMS sees its worst case (max_nms = 30,000 pairs per image, max_det = 300 kept).
// data "": the built-in synthetic set's val split (128 images); weights "": random ones.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/infer_devices.h"
#include "core/val.h"
#include "io/synth.h"

static int random_weights(Config *cfg, const char *path, Err *err) {
    Model m;
    if (model_build(cfg, 1, cfg->imgsz, &m, err)) return -1;
    model_init_weights(&m, 1);
    int rc = model_save(&m, path, err);
    model_free(&m);
    return rc;
}

static void run(InferModels *im, const Dataset *ds, const Config *cfg, int host_post) {
    ValOptions o = val_options(cfg);
    o.host_post = host_post;
    o.nms.conf_thres = (float)cfg->conf; o.nms.iou_thres = (float)cfg->iou; o.nms.max_det = cfg->max_det;
    ValResult r;
    Err err;
    printf("-- post-processing %s\n", host_post ? "on the host" : "where the model runs");
    if (val_evaluate_models(im->ptr, im->n, ds, &o, &r, &err)) { printf("failed: %s\n", err.msg); return; }
    printf("%d images in %.2f s: %.2f ms per image all in; batches on the device: NMS %d, losses %d\n", r.m.images,
           r.seconds, r.seconds * 1e3 / (r.m.images ? r.m.images : 1), r.dev_nms, r.dev_loss);
    val_result_free(&r);
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
    run(&im, &ds, &cfg, 0);
    if (im.devs.gpu[0] >= 0) run(&im, &ds, &cfg, 1);
    infer_models_free(&im);
    dataset_free(&ds);
    return 0;
}
