// pt.h: PyTorch checkpoints (`torch.save`'s zip format: yolov9's and Ultralytics' .pt files) read into
// the safetensors reader's table of named tensors, so every caller of SafeTensors takes both formats.
// Nothing the file names is imported or run: the pickle is read by a small machine that knows only the
// opcodes checkpoints use and treats every global as an opaque name (see pt.c).
#pragma once
#include "io/safetensors.h"

// pt_open: map `path` (a zip of stored entries: <dir>/data.pkl and <dir>/data/<key> storages) and
// list its model's tensors under their state-dict names ("model.0.conv.weight"): the checkpoint's
// `ema` when present, else its `model` (a pickled nn.Module walked through _modules/_parameters/
// _buffers, or a state dict); a file that is itself a state dict or a module works too. Tensors are
// in their stored dtype (F16 for released weights; st_read_f32 converts): row-major ones point into
// the mapped file, other views (transposed, sliced, channels_last, stride 0) are gathered into
// st->owned; tensors outside the model (optimizer state, attributes) are never read.
// Metadata: "format" = "pt", "pt_key" = "ema" or "model", "pt_class" = the model's class name
// ("models.yolo.DetectionModel") when it is a module. Refused with a message naming the file: a
// zip that is not stored or runs past its end, an opcode outside the set, a storage past its entry,
// a cycle, a file with no model in it, a model that would list more tensors or bytes than the file's
// contents can make (memo references repeating modules). Release with st_close.
int pt_open(const char *path, SafeTensors *st, Err *err);

// weights_open: pt_open for a zip file (it starts with "PK\3\4"), st_open otherwise; a file that is
// something else users mistake for weights (a Git LFS pointer, an HTML page, PyTorch's legacy format, a
// plain pickle, gzip) is refused with a message saying what it is; pt_open names TorchScript archives.
int weights_open(const char *path, SafeTensors *st, Err *err);
