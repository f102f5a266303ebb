// test_gpu_val.c: validation of a model on a GPU with the decode, NMS and losses on the device
// (backend nms_* and vloss_* entries) against the same model with them on the host (host_post = 1):
// the same P, R, mAP50 and mAP50-95 bit for bit (the same head maps, the same detections), losses
// within the GPU loss's tolerance, every batch done on the device; also with batches forwarded in
// chunks; a pass after the first allocates no device memory (the device keeps the work); YOLO26's top-k
// and validation losses on the device (backend topk_* and vloss_eval26 entries) against the host's
// likewise. The second pass replays the recorded evaluation forwards (CUDA Graphs), so "first vs
// second pass" also holds the recordings to the direct run. Without CUDA, or without a GPU, every test
// skips.
#include "core/spec/model.h"
#include "core/eval/val.h"
#include "io/synth.h"
#include "test/test.h"
#ifdef USE_CUDA
#include "gpu/model_gpu.h"
#endif

#define GPU_TESTS(X) X(test_device_post_same) X(test_topk_post_same)

#define GPU_OWN_DEVICE
#include "test/gpu_harness.h"
#ifdef USE_CUDA

static int have_gpu(void) { GpuInfo g[1]; return gpu_list(g, 1) > 0; }

static int same_metrics(const ValResult *a, const ValResult *b, const char *what) {
    const Metrics *x = &a->m, *y = &b->m;
    int same = x->mp == y->mp && x->mr == y->mr && x->map50 == y->map50 && x->map == y->map && x->images == y->images;
    if (!same) printf("    %s: P %.17g/%.17g R %.17g/%.17g mAP50 %.17g/%.17g mAP %.17g/%.17g\n", what, x->mp, y->mp, x->mr,
                      y->mr, x->map50, y->map50, x->map, y->map);
    return same;
}

// A small synthetic val set with big objects (random weights score TPs), a random model of cfg_path at
// imgsz 128 on GPU 0 (fp32, built for 4 images), and the comparisons for batches of 4 and 7 (7: more than
// the model holds, forwarded in chunks).
static void compare_post(const char *cfg_path, const char *name, int want_map) {
    if (!have_gpu()) SKIP("no GPU");
    const char *dir = test_tmpdir(name);
    SynthConfig sc = synth_defaults();
    sc.n_train = 2; sc.n_val = 9; sc.min_side = 100; sc.max_side = 160; sc.threads = 1;
    sc.max_objects = 1; sc.min_diameter = 90; sc.max_diameter = 1.0;   // big objects: random weights score TPs
    Err err;
    if (synth_generate(dir, &sc, &err)) { CHECK(0, "%s", err.msg); return; }
    char data[4200];
    snprintf(data, sizeof data, "data=%s/data.yaml", dir);
    char *argv[] = { "imgsz=128", "batch=4", "workers=2", "precision=fp32", data };
    static Config cfg;
    Dataset ds;
    Model m;
    Device dev;
    DatasetOptions opt = { .quiet = 1 };
    if (config_load(cfg_path, 5, argv, &cfg, &err) || dataset_open(NULL, &cfg, "val", &opt, &ds, &err)) {
        CHECK(0, "%s", err.msg); return;
    }
    config_set_nc(&cfg, ds.nc);
    if (model_build(&cfg, 4, 128, &m, &err)) { CHECK(0, "%s", err.msg); dataset_free(&ds); return; }
    model_init_weights(&m, 1);
    GpuPlan plan = model_gpu_plan(&m, GPU_FP32, 0);
    if (model_to_gpu(&m, &dev, 0, &plan, GPU_FP32, &err)) { CHECK(0, "%s", err.msg); model_free(&m); dataset_free(&ds); return; }
    ValOptions o = val_options(&cfg);
    o.out = stdout; o.nms.conf_thres = 0;     // random weights: keep every candidate, max_det is hit
    for (int batch = 4; batch <= 7; batch += 3) {
        o.batch = batch;
        ValResult dv, again, host;
        o.host_post = 0;
        int ok = val_evaluate(&m, &ds, &o, &dv, &err) == 0;
        size_t allocs = gpu_alloc_count();
        ok = ok && val_evaluate(&m, &ds, &o, &again, &err) == 0;
        CHECK(!ok || gpu_alloc_count() == allocs, "batch %d: the second pass allocated %zu times", batch,
              gpu_alloc_count() - allocs);
        o.host_post = 1;
        ok = ok && val_evaluate(&m, &ds, &o, &host, &err) == 0;
        CHECK(ok, "batch %d: %s", batch, err.msg);
        if (!ok) continue;
        int nb = (ds.n + batch - 1) / batch;
        CHECK(dv.dev_nms == nb && dv.dev_loss == nb && host.dev_nms == 0 && host.dev_loss == 0,
              "batch %d: device batches %d/%d of %d, host run %d", batch, dv.dev_nms, dv.dev_loss, nb, host.dev_nms);
        CHECK(same_metrics(&dv, &host, "device vs host"), "batch %d: metrics differ", batch);
        int recorded = 0;                     // only evaluation forwards ran: every recording is one
        for (int i = 0; i < MODEL_RECS; i++) recorded += m.recs[i].rec != NULL;
        CHECK(recorded > 0, "batch %d: no evaluation forward was recorded", batch);
        CHECK(same_metrics(&dv, &again, "first vs second pass"), "batch %d: metrics differ between passes", batch);
        CHECK(dv.box == again.box && dv.cls == again.cls && dv.dfl == again.dfl, "batch %d: losses differ between passes "
              "(%.17g %.17g %.17g vs %.17g %.17g %.17g)", batch, dv.box, dv.cls, dv.dfl, again.box, again.cls, again.dfl);
        if (want_map) CHECK(dv.m.map50 > 0 && dv.m.mr > 0, "batch %d: mAP50 %g R %g: nothing compared", batch, dv.m.map50, dv.m.mr);
        else printf("    batch %d: mAP50 %g, R %g\n", batch, dv.m.map50, dv.m.mr);
        CHECK(close_enough(dv.box, host.box, 1e-6, 1e-4) && close_enough(dv.cls, host.cls, 1e-6, 1e-4) &&
              close_enough(dv.dfl, host.dfl, 1e-6, 1e-4) && host.cls > 0,
              "batch %d: losses box %.9g/%.9g cls %.9g/%.9g dfl %.9g/%.9g", batch, dv.box, host.box, dv.cls, host.cls,
              dv.dfl, host.dfl);
        val_result_free(&dv); val_result_free(&again); val_result_free(&host);
    }
    model_free(&m);
    device_free(&dev);
    dataset_free(&ds);
}

static void test_device_post_same(void) { compare_post("cfg/t.ini", "gpu-val", 1); }

static void test_topk_post_same(void) { compare_post("cfg/yolo26n.ini", "gpu-val26", 0); }

#define RUN_ONE(fn) RUN(fn);
int main(void) {
    GPU_TESTS(RUN_ONE)
    return test_summary();
}
#endif
