// infer_devices.h: the models of an inference run (`yolotrain val`, `yolotrain detect`) on the devices
// cfg->device names: one model per device, built for a batch, the weights loaded, and moved onto its
// GPU (a memory plan without optimizer state) when the device is one. Legend: N images per forward.
#pragma once
#include "cfg/config.h"
#include "core/spec/model.h"
#include "core/devices/multi.h"

typedef struct {
    int        n;                   // devices, one model each
    DeviceList devs;                // devs.gpu[k]: model k's GPU id, -1 for a CPU device
    Model      models[MULTI_MAX];
    Model     *ptr[MULTI_MAX];      // &models[k] (val_evaluate_models takes these): do not copy the struct
} InferModels;

// cfg->device parsed as training parses it (parse_devices: "" every GPU present, else the CPU; "cpu",
// "cpu:N", "0", "0,1", "[0,1]"). Returns 0, or -1 after printing "PROG: why; the GPUs found are: ..."
// and the GPU list to stderr, as training does.
int  infer_pick_devices(const Config *cfg, const char *prog, DeviceList *devs);

// One model of cfg per device of devs for up to max_n images of cfg->imgsz, each with cfg->weights;
// a GPU model runs at cfg->precision, its memory plan printed to stdout (model_gpu_print_plan), then
// one line naming the devices. A GPU in a build without CUDA is an error. Returns 0, or -1 with err
// (nothing left allocated).
int  infer_models_open(const Config *cfg, const DeviceList *devs, int max_n, InferModels *im, Err *err);
// batch=-1 (auto): on GPUs, the batch whose training plan fits the free memory (Backend.dev.auto_batch,
// gpu/train_gpu.c); on CPU devices AUTO_BATCH_CPU each. Any other batch is left alone. Returns 0, or -1
// with err.
enum { AUTO_BATCH_CPU = 16 };
int  infer_auto_batch(Config *cfg, const DeviceList *devs, Err *err);
// Frees every model and its GPU context.
void infer_models_free(InferModels *im);
