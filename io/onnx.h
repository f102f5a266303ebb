// onnx.h: write ONNX models without generated code: io/pb.h's protobuf encoder and the handful of
// ONNX messages an exported detector needs (ModelProto, GraphProto, NodeProto, AttributeProto,
// TensorProto, ValueInfoProto), field numbers from onnx/onnx.proto.
// A message is built in its own Pb and then appended to its parent as a length-delimited field.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "core/base/util.h"
#include "io/pb.h"

enum { ONNX_FLOAT = 1, ONNX_INT64 = 7 };       // TensorProto.DataType

// A NodeProto: op_type, name, inputs ("" = an omitted optional input) and outputs; add attributes
// with onnx_attr_*, then onnx_add_node moves it into the graph.
void onnx_node(Pb *node, const char *op, const char *name, const char *const *in, int n_in,
               const char *const *out, int n_out);
void onnx_attr_int(Pb *node, const char *name, int64_t v);
void onnx_attr_float(Pb *node, const char *name, float v);
void onnx_attr_ints(Pb *node, const char *name, const int64_t *v, int n);
void onnx_attr_str(Pb *node, const char *name, const char *s);
void onnx_add_node(Pb *graph, Pb *node);       // appends and frees node

// A constant tensor (dtype ONNX_FLOAT or ONNX_INT64; data holds numel(dims) little-endian elements).
void onnx_initializer(Pb *graph, const char *name, int dtype, const int64_t *dims, int ndim, const void *data);
// A graph input (field 11) or output (12): dims[i] < 0 is the symbolic dimension "batch".
enum { ONNX_INPUT = 11, ONNX_OUTPUT = 12 };
void onnx_value_info(Pb *graph, int field, const char *name, int dtype, const int64_t *dims, int ndim);

// Wrap the graph (named `name`) in a ModelProto (IR version 8, the default domain at `opset`) and
// write it to path through path.tmp and a rename, so a failed write leaves path as it was.
int onnx_write(const char *path, Pb *graph, const char *name, int opset, Err *err);
