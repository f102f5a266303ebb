// onnx.c: see onnx.h. The protobuf encoding is io/pb.c's.
#include "io/onnx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// ---- ONNX messages ---------------------------------------------------------------------------
// NodeProto: input 1, output 2, name 3, op_type 4, attribute 5.
void onnx_node(Pb *node, const char *op, const char *name, const char *const *in, int n_in,
               const char *const *out, int n_out) {
    memset(node, 0, sizeof *node);
    for (int i = 0; i < n_in; i++) pb_str(node, 1, in[i]);
    for (int i = 0; i < n_out; i++) pb_str(node, 2, out[i]);
    pb_str(node, 3, name);
    pb_str(node, 4, op);
}

// AttributeProto: name 1, f 2, i 3, s 4, ints 8, type 20 (FLOAT 1, INT 2, STRING 3, INTS 7).
static void attr(Pb *node, Pb *a, int type) {
    pb_int(a, 20, type);
    pb_msg(node, 5, a);
}

void onnx_attr_int(Pb *node, const char *name, int64_t v) {
    Pb a = { 0 };
    pb_str(&a, 1, name);
    pb_int(&a, 3, v);
    attr(node, &a, 2);
}

void onnx_attr_float(Pb *node, const char *name, float v) {
    Pb a = { 0 };
    pb_str(&a, 1, name);
    pb_float(&a, 2, v);
    attr(node, &a, 1);
}

void onnx_attr_ints(Pb *node, const char *name, const int64_t *v, int n) {
    Pb a = { 0 };
    pb_str(&a, 1, name);
    for (int i = 0; i < n; i++) pb_int(&a, 8, v[i]);
    attr(node, &a, 7);
}

void onnx_attr_str(Pb *node, const char *name, const char *s) {
    Pb a = { 0 };
    pb_str(&a, 1, name);
    pb_str(&a, 4, s);
    attr(node, &a, 3);
}

// GraphProto: node 1, name 2, initializer 5, input 11, output 12.
void onnx_add_node(Pb *graph, Pb *node) { pb_msg(graph, 1, node); }

// TensorProto: dims 1, data_type 2, name 8, raw_data 9 (little-endian, as this machine stores it).
void onnx_initializer(Pb *graph, const char *name, int dtype, const int64_t *dims, int ndim, const void *data) {
    Pb t = { 0 };
    size_t n = 1;
    for (int i = 0; i < ndim; i++) { pb_int(&t, 1, dims[i]); n *= (size_t)dims[i]; }
    pb_int(&t, 2, dtype);
    pb_str(&t, 8, name);
    pb_bytes(&t, 9, data, n * (dtype == ONNX_INT64 ? 8 : 4));
    pb_msg(graph, 5, &t);
}

// ValueInfoProto: name 1, type 2. TypeProto: tensor_type 1 { elem_type 1, shape 2 { dim 1 {
// dim_value 1 | dim_param 2 } } }.
void onnx_value_info(Pb *graph, int field, const char *name, int dtype, const int64_t *dims, int ndim) {
    Pb shape = { 0 }, tensor = { 0 }, type = { 0 }, info = { 0 };
    for (int i = 0; i < ndim; i++) {
        Pb d = { 0 };
        if (dims[i] < 0) pb_str(&d, 2, "batch");
        else pb_int(&d, 1, dims[i]);
        pb_msg(&shape, 1, &d);
    }
    pb_int(&tensor, 1, dtype);
    pb_msg(&tensor, 2, &shape);
    pb_msg(&type, 1, &tensor);
    pb_str(&info, 1, name);
    pb_msg(&info, 2, &type);
    pb_msg(graph, field, &info);
}

// ModelProto: ir_version 1, producer_name 2, producer_version 3, graph 7, opset_import 8
// (OperatorSetIdProto: domain 1, version 2).
int onnx_write(const char *path, Pb *graph, const char *name, int opset, Err *err) {
    Pb model = { 0 }, op = { 0 };
    pb_str(graph, 2, name);
    pb_int(&model, 1, 8);
    pb_str(&model, 2, "yolotrain");
    pb_str(&model, 3, "1");
    pb_msg(&model, 7, graph);
    pb_str(&op, 1, "");
    pb_int(&op, 2, opset);
    pb_msg(&model, 8, &op);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    int rc = 0;
    if (!f) rc = err_set(err, "cannot write %s: %s; set out= to a writable place", tmp, strerror(errno));
    else {
        int bad = fwrite(model.b, 1, model.n, f) != model.n;
        bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
        bad |= fclose(f) != 0;
        if (bad) rc = err_set(err, "cannot write %s (disk full?); %s was left as it was", tmp, path);
        else if (rename(tmp, path)) rc = err_set(err, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        if (rc) unlink(tmp);
    }
    pb_free(&model);
    return rc;
}
