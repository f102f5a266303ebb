// train_gpu.h: a trainer's memory plan on one GPU (gpu/train_gpu.c), behind the Backend table's
// model_to_device, auto_batch and plan_bytes. Includable from C.
#pragma once
#include "cfg/config.h"
#include "core/spec/model.h"

// Plan m's memory on GPU `id` at `precision` (a master's plan holds the EMA, momentum and receive
// buffers, and YOLO26's optimizer block and scratch; a replica's and inference's the model's arenas
// only), print the plan, allocate it, upload the state and switch m to the GPU backend. 0, or -1 with err.
int    model_to_device_gpu(Model *m, int id, const char *precision, int master, Err *err);

// batch=-1: cfg->batch becomes n times the largest micro-batch whose training plan (the master's) fits
// in AUTO_BATCH_FRACTION of the free memory of the tightest of the n GPUs (as Ultralytics' AutoBatch; the
// plan is what gets allocated, so the rest is for the CUDA context, cuBLAS and the loss). Returns 0, or
// -1 with err (not even one image fits).
enum { AUTO_BATCH_MAX = 4096 };
#define AUTO_BATCH_FRACTION 0.90
int    trainer_gpu_auto_batch(Config *cfg, const int *gpus, int n, Err *err);
size_t trainer_gpu_plan_bytes(const Config *cfg, int micro);   // the master's training plan, in bytes
