#!/usr/bin/env python3
"""onnx_check.py: check an ONNX file written by `yolotrain export format=onnx`.

    python3 test/onnx_check.py MODEL.onnx [--opset 17] [--batch N|batch] [--run DIR] [--runtime ort|numpy] [--tol 1e-4] [--conf 0.25]

Always (when the onnx module is there): onnx.checker (full check), strict shape inference, the opset, the input `images` (batch, 3, S, S)
and output0's shape; with --batch, both first dimensions must be N (a fixed batch) or the symbolic `batch`. With --run DIR (written by `build/cpu/test/test_onnx dump ...`): runs the model
on DIR/input.bin and compares output0 with our own inference in DIR/expect.bin, element by element:
|onnx - ours| <= tol * max(1, |ours|) (tol absolute for scores, relative for pixel coordinates).
--runtime ort uses onnxruntime (CPU provider); numpy a small evaluator of the operators our exports
use (slow, for machines without onnxruntime). Then the detections both outputs give (as `detect`: conf
0.25, NMS at IoU 0.45 for the (B, 4 + nc, A) layout) must be the same boxes. Prints `ok ...` and exits 0,
or prints why and exits 1.

YOLO26's (B, k, 6) is compared row by row, in order, like everything else: the export ranks the logits
in both TopKs and runs the Sigmoid on the kept pairs only, and core/spec/topk26.c ranks the logits the same
way (ties to the lower index, as ONNX's TopK), so the order depends only on the logits, which the
runtime computes to about 1e-6. The runtime's Sigmoid then changes only score values (onnxruntime's CPU
Sigmoid is a rational approximation good to ~3e-8 absolute, 0 below about -16.6, not monotone there:
ranking its outputs reordered the low-score rows). Two logits nearer than the runtimes' difference
could still swap two rows; the FAIL line then names the near tie rather than hiding it.
"""
import argparse
import sys

import numpy as np

try:                       # the GPU machine may have onnxruntime without the onnx package
    import onnx
    from onnx import numpy_helper
except ImportError:
    onnx = None


def check_file(path, opset, batch=None):
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    ops = {o.domain: o.version for o in m.opset_import}
    if ops.get("", 0) != opset:
        sys.exit(f"FAIL {path}: opset {ops}, want {opset}")
    inp = m.graph.input[0]
    dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
    if inp.name != "images" or len(dims) != 4 or dims[1] != 3 or dims[2] != dims[3]:
        sys.exit(f"FAIL {path}: input {inp.name} {dims}, want images (batch, 3, S, S)")
    out = inferred.graph.output[0]
    odims = [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]
    if batch is not None and not (str(dims[0]) == batch and str(odims[0]) == batch):
        sys.exit(f"FAIL {path}: images {dims} -> {out.name} {odims}: the batch dimension should be {batch}")
    print(f"ok {path}: checker, shape inference, opset {opset}; images {dims} -> {out.name} {odims}")
    return m


# ---- a numpy evaluator of the operators yolotrain's exports use ---------------------------------
def conv(x, w, b, a):
    sh, sw = a.get("strides", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    g = a.get("group", 1)
    x = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])))
    N, C, H, W = x.shape
    K, Cg, R, S = w.shape
    P, Q = (H - R) // sh + 1, (W - S) // sw + 1
    cols = np.lib.stride_tricks.sliding_window_view(x, (R, S), axis=(2, 3))[:, :, ::sh, ::sw]  # N C P Q R S
    out = np.empty((N, K, P, Q), np.float32)
    kg = K // g
    for i in range(g):
        c = cols[:, i * Cg:(i + 1) * Cg]                           # N Cg P Q R S
        out[:, i * kg:(i + 1) * kg] = np.einsum("ncpqrs,kcrs->nkpq", c, w[i * kg:(i + 1) * kg], optimize=True)
    return out + b.reshape(1, -1, 1, 1) if b is not None else out


def pool(x, a, kind):
    k = a["kernel_shape"]
    s = a.get("strides", [1, 1])
    p = a.get("pads", [0, 0, 0, 0])
    x = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])), constant_values=-np.inf if kind == "max" else 0)
    v = np.lib.stride_tricks.sliding_window_view(x, k, axis=(2, 3))[:, :, ::s[0], ::s[1]]
    return v.max(axis=(4, 5)) if kind == "max" else v.mean(axis=(4, 5))   # count_include_pad=1


def topk(x, k, axis, largest):
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")  # ties: lower index first
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


def run_numpy(m, images):
    env = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    env["images"] = images
    env[""] = None
    for n in m.graph.node:
        a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
        a = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in a.items()}
        x = [env[i] for i in n.input]
        op = n.op_type
        if op == "Conv": y = [conv(x[0], x[1], x[2] if len(x) > 2 else None, a)]
        elif op == "Sigmoid": y = [1 / (1 + np.exp(-x[0]))]
        elif op in ("Mul", "Add", "Sub"): y = [{"Mul": np.multiply, "Add": np.add, "Sub": np.subtract}[op](x[0], x[1])]
        elif op == "Div": y = [x[0] // x[1] if x[0].dtype == np.int64 else x[0] / x[1]]
        elif op == "Mod": y = [np.mod(x[0], x[1])]
        elif op == "MaxPool": y = [pool(x[0], a, "max")]
        elif op == "AveragePool": y = [pool(x[0], a, "avg")]
        elif op == "Resize":
            f = x[2].astype(int)
            y = [x[0].repeat(f[2], axis=2).repeat(f[3], axis=3)]
        elif op == "Identity": y = [x[0]]
        elif op == "Slice":
            sl = [slice(None)] * x[0].ndim
            sl[int(x[3][0])] = slice(int(x[1][0]), int(x[2][0]))
            y = [x[0][tuple(sl)]]
        elif op == "Concat": y = [np.concatenate(x, axis=a["axis"])]
        elif op == "Reshape":
            s = [x[0].shape[i] if d == 0 else d for i, d in enumerate(x[1])]
            y = [x[0].reshape(s)]
        elif op == "Split": y = np.split(x[0], np.cumsum(x[1])[:-1], axis=a["axis"])
        elif op == "Softmax":
            e = np.exp(x[0] - x[0].max(axis=a["axis"], keepdims=True))
            y = [e / e.sum(axis=a["axis"], keepdims=True)]
        elif op == "ReduceSum": y = [x[0].sum(axis=tuple(x[1]), keepdims=bool(a.get("keepdims", 1)))]
        elif op == "ReduceMax": y = [x[0].max(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))]
        elif op == "Transpose": y = [x[0].transpose(a["perm"])]
        elif op == "MatMul": y = [np.matmul(x[0], x[1])]
        elif op == "TopK": y = list(topk(x[0], int(x[1][0]), a.get("axis", -1), a.get("largest", 1)))
        elif op == "Unsqueeze": y = [np.expand_dims(x[0], tuple(int(i) for i in x[1]))]
        elif op == "Tile": y = [np.tile(x[0], x[1])]
        elif op == "GatherElements": y = [np.take_along_axis(x[0], x[1], axis=a["axis"])]
        elif op == "Cast": y = [x[0].astype(np.float32)]
        else: sys.exit(f"FAIL: the numpy evaluator has no {op}")
        for name, v in zip(n.output, y):
            env[name] = np.asarray(v, dtype=np.float32 if np.asarray(v).dtype.kind == "f" else np.asarray(v).dtype)
    return env[m.graph.output[0].name]


def detections(out, conf=0.25, iou=0.45):
    """What detect keeps from output0, per image: sorted (class, x1, y1, x2, y2).
    (B, 4 + nc, A): best class per anchor over conf, class-aware greedy NMS; (B, 300, 6): score over conf."""
    kept = []
    for o in out:
        if o.shape[-1] == 6:
            kept.append(sorted((int(r[5]), *r[:4]) for r in o if r[4] > conf))
            continue
        xywh, sc = o[:4].T, o[4:].T
        boxes = np.concatenate([xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], 1)
        cls, best = sc.argmax(1), sc.max(1)
        idx = [i for i in np.argsort(-best, kind="stable") if best[i] > conf]
        keep = []
        for i in idx:
            def overlap(j):
                a, b = boxes[i], boxes[j]
                w = max(0, min(a[2], b[2]) - max(a[0], b[0])); h = max(0, min(a[3], b[3]) - max(a[1], b[1]))
                u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
                return w * h / u if u > 0 else 0
            if all(cls[j] != cls[i] or overlap(j) <= iou for j in keep):
                keep.append(i)
        kept.append(sorted((int(cls[i]), *boxes[i]) for i in keep))
    return kept


def near_tie(rows, r):
    """Whether row r of our (k, 6) output has a neighbour of (nearly) the same score, by logit."""
    logit = lambda p: np.log(np.float64(p) / max(1 - np.float64(p), 1e-300)) if 0 < p else -np.inf
    for q in (r - 1, r + 1):
        if 0 <= q < len(rows) and abs(logit(rows[r][4]) - logit(rows[q][4])) <= 1e-5:
            return f"  rows {min(r, q)} and {max(r, q)} are a near tie (scores {rows[r][4]:.9g}, {rows[q][4]:.9g})"
    return f"  row {r} has no near tie with its neighbours: a wrong selection or order"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--batch", help="the batch dimension both images and output0 must have: N or batch (symbolic)")
    ap.add_argument("--run")
    ap.add_argument("--runtime", default="ort", choices=["ort", "numpy"])
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--conf", type=float, default=0.25, help="detection threshold for the box comparison")
    args = ap.parse_args()
    if onnx is None and args.runtime == "numpy":
        sys.exit("FAIL: the numpy runtime needs the onnx module (Debian: python3-onnx)")
    if onnx is None:
        print(f"skip {args.model}: checker and shape inference (no onnx module here)")
    m = check_file(args.model, args.opset, args.batch) if onnx is not None else None
    if not args.run:
        return
    shape = [int(v) for v in open(f"{args.run}/shape.txt").read().split()]   # B S then the output's dims
    images = np.fromfile(f"{args.run}/input.bin", np.float32).reshape(shape[0], 3, shape[1], shape[1])
    expect = np.fromfile(f"{args.run}/expect.bin", np.float32).reshape(shape[2:])
    if args.runtime == "ort":
        import onnxruntime as ort
        s = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
        got = s.run(None, {"images": images})[0]
    else:
        got = run_numpy(m, images)
    if got.shape != expect.shape:
        sys.exit(f"FAIL {args.model}: output {got.shape}, ours {expect.shape}")
    dg, de = detections(got, args.conf), detections(expect, args.conf)
    same = all(len(a) == len(b) and all(x[0] == y[0] and np.allclose(x[1:], y[1:], rtol=1e-3, atol=1e-3)
                                        for x, y in zip(a, b)) for a, b in zip(dg, de))
    print(f"{'ok' if same else 'FAIL'} {args.model}: detections at conf {args.conf} (NMS iou 0.45 where needed): "
          f"{sum(map(len, dg))} from onnx, {sum(map(len, de))} ours, {'the same' if same else 'different'}")
    err = np.abs(got - expect) / np.maximum(1, np.abs(expect))
    worst = np.unravel_index(np.argmax(err), err.shape)
    print(f"{'ok' if err.max() <= args.tol else 'FAIL'} {args.model} on {args.run} ({args.runtime}): output {got.shape}, "
          f"max error {err.max():.3g} at {worst}: onnx {got[worst]:.6g}, ours {expect[worst]:.6g}")
    if err.max() > args.tol and expect.shape[-1] == 6:
        print(near_tie(expect[worst[0]], worst[1]))
    sys.exit(0 if err.max() <= args.tol and same else 1)


if __name__ == "__main__":
    main()
