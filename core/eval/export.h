// export.h: a model trained the PGI way (yolov9-s: a DualDDetect head fed by an auxiliary branch) to
// its inference form (gelan-s): the layers only the auxiliary head needs are dropped, the rest keep
// their order and are renumbered, and the dual head becomes a DDetect whose cv2/cv3/dfl are the main
// head's cv4/cv5/dfl2 [WongKinYiu/yolov9 README "converted" weights]. Tensor names stay the PyTorch
// state-dict names, so PyTorch's gelan-s, `val` and `detect` load the result.
#pragma once
#include "cfg/config.h"
#include "core/spec/model.h"

// export_config: the inference form of cfg (whose last layer is a DualDDetect) into out: every key
// copied, the layer table reduced as above. map[i] gets layer i's new index, or -1 where dropped.
// Returns 0, or -1 with err when cfg has no DualDDetect head.
int export_config(const Config *cfg, Config *out, int map[CFG_MAX_LAYERS], Err *err);

// export_rename: the inference model's name of tensor `name` of the training model (e.g.
// "model.29.cv4.0.2.bias" -> "model.22.cv2.0.2.bias", "model.29.dfl2.conv.weight" ->
// "model.22.dfl.conv.weight"), written to out (n bytes). Returns 1, or 0 when the tensor is dropped.
int export_rename(const Config *cfg, const int map[CFG_MAX_LAYERS], const char *name, char *out, size_t n);

// export_weights: weights of the model cfg describes (`weights`, safetensors) -> `out`, the inference
// model's weights with every tensor and the BN counter; both models are built, so shapes are checked.
// When ini is not NULL the inference config goes there too, its weights key naming out (so
// `yolotrain val INI` and `detect INI source=...` need nothing else). Returns 0, or -1 with err.
int export_weights(const Config *cfg, const char *weights, const char *out, const char *ini, Err *err);

// export_onnx_model: m (an inference model: DDetect or YOLO26's end-to-end head) as ONNX (opset 17)
// at path: input `images` (batch, 3, imgsz, imgsz) RGB 0-1, BN folded into the convolutions; output0
// (batch, 4 + nc, anchors) (xywh pixels, sigmoid scores; DDetect) or (batch, 300, 6) (x1 y1 x2 y2 score
// class; YOLO26). batch >= 1 fixes the batch dimension, 0 makes it symbolic ("batch"; dynamic=1).
// core/eval/export_onnx.c. Returns 0, or -1 with err.
int export_onnx_model(const Model *m, int imgsz, int batch, const char *path, Err *err);

// run_args_ini: RUN/weights/best.safetensors -> RUN/args.ini (the run's effective config), weights/
// X -> ./args.ini, any other folder's X -> FOLDER/args.ini; whether it exists is the caller's question.
void run_args_ini(const char *weights, char *ini, size_t size);
// weights_usable: weights= names a file that export, val and detect can read: it exists, and it is not
// a run's last_state.safetensors (the training state, for resume=: use last.safetensors or
// best.safetensors). Returns 0, or -1 with err saying which and what to name instead.
int weights_usable(const char *weights, Err *err);
// `yolotrain export weights=FILE [format=safetensors|onnx] [dynamic=1] [out=FILE] [CONFIG.ini]
// [overrides]`: format=onnx writes the inference model as ONNX (a yolov9-s config as gelan-s); the
// default, safetensors, converts yolov9-s weights to gelan-s. The
// config is CONFIG.ini, else the run's args.ini beside weights/. out defaults to the weights' name
// with -converted; the config goes beside it as .ini. A model with no DualDDetect head (gelan, YOLO26) is
// already the inference form: the safetensors export says so and writes nothing (status 0). Missing
// weights and last_state.safetensors (the training state) are said to be so. Returns the exit status:
// 0, or 2 after a message.
int export_run(int argc, char **argv, Config *cfg);
