// transfer.h: starting a run from weights trained elsewhere, as yolov9's train.py and Ultralytics do:
// every tensor whose name and shape match is taken, the rest keep a fresh model's values ("Transferred
// N/M items from FILE"), and `freeze` keeps chosen layers' parameters fixed.
#pragma once
#include <stdint.h>

#include "core/spec/model.h"
#include "io/safetensors.h"

// model_transfer: fresh weights (model_init_weights with seed), then every tensor of `path` (.pt or
// safetensors) whose state-dict name and shape match one of the model's. M counts the model's
// state-dict items as PyTorch does (parameters, BN buffers and num_batches_tracked), N those taken.
// verbose: print "Transferred N/M items from FILE". Fewer than half taken: -1 with a message that
// says what the file seems to hold and which config fits it.
int model_transfer(Model *m, const char *path, uint64_t seed, int verbose, Err *err);

// weights_describe: what a weights file seems to hold ("a gelan model (DDetect head at layer 22, nc
// 80; cfg/gelan-s.ini), 1339 tensors; yolov9's models.yolo.DetectionModel"), from its tensor names and
// metadata, with weights_config's config.
void weights_describe(const SafeTensors *st, char *buf, size_t size);
// weights_config: the config of cfg/ (relative to the working folder) whose model has exactly the
// file's tensor names and shapes, at the nc of its head ("cfg/yolo26n.ini"), or NULL. It builds the
// family's models in turn (about a second each for the largest): for messages, not for loading.
const char *weights_config(const SafeTensors *st);

// freeze_mask: frozen[i] = 1 for each layer i that cfg->freeze names ("": none; N: layers 0..N-1,
// yolov9's --freeze N; [i,j,...] or i,j,...: those layers). -1 with a message naming the key when a
// listed layer is past the model's or nothing would be left to train.
int freeze_mask(const Config *cfg, const Model *m, unsigned char frozen[CFG_MAX_LAYERS], Err *err);
// freeze_apply: mark the frozen layers' parameters (ParamInfo.frozen: no update, decay or share in the
// clipping norm), and for YOLO26 (Ultralytics' freeze) their BN units as evaluation-mode in training
// too (ConvUnit.bn_frozen: running statistics normalise and stay); gelan and yolov9 keep training BN,
// as yolov9's train.py does.
void freeze_apply(Model *m, const unsigned char frozen[CFG_MAX_LAYERS]);
// 1 when parameter `name` ("model.<i>. ...") belongs to a frozen layer
int param_frozen(const unsigned char frozen[CFG_MAX_LAYERS], const char *name);
