// infer_devices.c: one model per device for validation and detection: built on the host, weights read
// once and copied to the others, then each GPU model moved onto its GPU with an inference memory plan.
// Legend: N images per forward, S = cfg->imgsz.
#include "core/devices/infer_devices.h"

#include <stdlib.h>
#include <string.h>

int infer_pick_devices(const Config *cfg, const char *prog, DeviceList *devs) {
    GpuInfo gpus[16];
    const Backend *gpu = backend_gpu_get();
    int n = gpu ? gpu->dev.device_list(gpus, 16) : 0;
    Err err;
    if (!parse_devices(cfg->device, n, devs, &err)) return 0;
    fprintf(stderr, "%s: %s; the GPUs found are:%s\n", prog, err.msg, n ? "" : " none (use device=cpu)");
    for (int i = 0; i < n && i < 16; i++)
        fprintf(stderr, "  %d: %s, %.0f GiB, bus %s\n", i, gpus[i].name, gpus[i].mem_bytes / 1073741824.0, gpus[i].bus_id);
    return -1;
}

// m onto GPU id: parameters, activations and scratch for its N x S x S plan; no optimizer state.
static int to_gpu(Model *m, int id, const Config *cfg, Err *err) {
    const Backend *gpu = backend_gpu_get();
    if (!gpu) return err_set(err, "device=%s: this yolotrain was built without CUDA; use device=cpu", cfg->device);
    return gpu->dev.model_to_device(m, id, cfg->precision, 0, err);
}

static int auto_batch_gpu(Config *cfg, const DeviceList *devs, Err *err) {
    const Backend *gpu = backend_gpu_get();
    if (!gpu) return err_set(err, "device=%s: this yolotrain was built without CUDA; use device=cpu", cfg->device);
    return gpu->dev.auto_batch(cfg, devs->gpu, devs->n, err);
}

int infer_auto_batch(Config *cfg, const DeviceList *devs, Err *err) {
    if (cfg->batch != -1) return 0;
    if (devs->gpu[0] >= 0) return auto_batch_gpu(cfg, devs, err);
    cfg->batch = AUTO_BATCH_CPU * devs->n;          // Ultralytics' AutoBatch on the CPU: its default batch
    printf("batch=-1 (auto) sizes the batch for a GPU's memory; on the CPU it is %d%s\n", cfg->batch,
           devs->n > 1 ? " (16 per device)" : "");
    return 0;
}

static void free_model(Model *m) {
    if (!m->on_device) { model_free(m); return; }
    const Backend *be = m->be;
    void *dev = m->be_ctx;
    be->dev.bind(dev);
    model_free(m);
    be->dev.device_close(dev);
}

static void print_devices(const Config *cfg, const DeviceList *devs) {
    if (devs->gpu[0] < 0) {
        if (devs->n == 1) printf("device: cpu\n");
        else printf("devices: %d CPU devices, the images split between them\n", devs->n);
        return;
    }
    printf("device%s: GPU", devs->n > 1 ? "s" : "");
    for (int k = 0; k < devs->n; k++) printf("%s %d", k ? "," : "", devs->gpu[k]);
    printf(" (%s)%s\n", cfg->precision, devs->n > 1 ? ", the images split between them" : "");
}

int infer_models_open(const Config *cfg, const DeviceList *devs, int max_n, InferModels *im, Err *err) {
    memset(im, 0, sizeof *im);
    im->devs = *devs;
    if (max_n < 1)
        return err_set(err, "batch=%d: validation and detection take a positive batch (batch=-1, auto, is for training)",
                       cfg->batch);
    for (int k = 0; k < devs->n; k++) {
        Model *m = &im->models[k];
        if (model_build(cfg, max_n, cfg->imgsz, m, err)) { infer_models_free(im); return -1; }
        m->augment_side = 0;                       // validation and detection make no training samples
        im->ptr[k] = m;
        im->n = k + 1;
        if (k == 0 && model_load(m, cfg->weights, "", err)) { infer_models_free(im); return -1; }
        if (k > 0) memcpy(m->state, im->models[0].state, sizeof(float) * m->n_state);   // read the file once
    }
    for (int k = 0; k < im->n; k++)                 // after the copies: model 0's state must stay on the host
        if (devs->gpu[k] >= 0 && to_gpu(&im->models[k], devs->gpu[k], cfg, err)) { infer_models_free(im); return -1; }
    print_devices(cfg, devs);
    return 0;
}

void infer_models_free(InferModels *im) {
    for (int k = 0; k < im->n; k++) free_model(&im->models[k]);
    im->n = 0;
}
