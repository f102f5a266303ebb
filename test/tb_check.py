#!/usr/bin/env python3
"""tb_check.py: check a yolotrain run folder's TensorBoard event files.

    python3 test/tb_check.py RUN_DIR [RUN_DIR ...] [--need-tensorboard]

For each run folder:
  1. framing, in plain Python: every record of every events.out.tfevents.* file has a valid length,
     masked CRC-32C of the length and masked CRC-32C of the data; the first record is file_version
     "brain.Event:2" (decoded by hand);
  2. with the `tensorboard` package: its EventAccumulator (the reader of tensorboard's event
     processing, size guidance 0 = keep everything) and its plugin_event_accumulator (what the
     TensorBoard UI serves, after data_compat) load the folder; the 13 scalar tags are there, with
     the steps and values of results.csv (0-based epochs, values to results.csv's 5 digits), and the
     pictures (train_batch0, val_batch0_labels, val_batch0_pred, results) as PNG images of the sizes
     their headers give.
Without tensorboard installed part 2 is skipped (and says so), unless --need-tensorboard, which makes
that a failure. Exit status 0 when every check passed, 1 otherwise.
"""
import glob
import os
import struct
import sys

TAGS = ["train/box_loss", "train/cls_loss", "train/dfl_loss", "metrics/precision", "metrics/recall",
        "metrics/mAP_0.5", "metrics/mAP_0.5:0.95", "val/box_loss", "val/cls_loss", "val/dfl_loss",
        "x/lr0", "x/lr1", "x/lr2"]
L1 = {"train/dfl_loss": "train/l1_loss", "val/dfl_loss": "val/l1_loss"}   # reg_max 1 models (YOLO26)
IMAGES = ["train_batch0", "val_batch0_labels", "val_batch0_pred", "results"]

failures = 0


def ok(msg):
    print("    ok " + msg)


def fail(msg):
    global failures
    failures += 1
    print("    FAIL " + msg)


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(b, i):
    v = s = 0
    while True:
        v |= (b[i] & 0x7F) << s
        s += 7
        i += 1
        if not b[i - 1] & 0x80:
            return v, i


def check_framing(path):
    b = open(path, "rb").read()
    i = n = 0
    first = None
    while i < len(b):
        if len(b) - i < 16:
            return fail("%s: %d stray bytes at the end" % (path, len(b) - i))
        length, = struct.unpack_from("<Q", b, i)
        c1, = struct.unpack_from("<I", b, i + 8)
        if c1 != masked(b[i:i + 8]):
            return fail("%s: record %d: bad length checksum" % (path, n))
        data = b[i + 12:i + 12 + length]
        c2, = struct.unpack_from("<I", b, i + 12 + length)
        if c2 != masked(data):
            return fail("%s: record %d: bad data checksum" % (path, n))
        if first is None:
            first = data
        i += 16 + length
        n += 1
    # the first Event: field 3 (file_version), wire type 2
    j, version = 0, None
    while first is not None and j < len(first):
        key, j = varint(first, j)
        if key & 7 == 1:
            j += 8
        elif key & 7 == 0:
            _, j = varint(first, j)
        elif key & 7 == 2:
            ln, j = varint(first, j)
            if key >> 3 == 3:
                version = first[j:j + ln].decode()
            j += ln
        else:
            break
    if version != "brain.Event:2":
        return fail("%s: first record's file_version is %r" % (path, version))
    ok("%s: %d records, both checksums of each valid, file_version brain.Event:2" % (os.path.basename(path), n))


def read_csv(run):
    rows = [[c.strip() for c in line.split(",")] for line in open(os.path.join(run, "results.csv"))]
    head = rows[0]
    return head, [[float(x) for x in r] for r in rows[1:] if len(r) == len(head)]


def close(a, b):
    return abs(a - b) <= 1e-6 + 1e-4 * abs(b)


def check_with_tensorboard(run, head, rows):
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0, ea.IMAGES: 0})
    acc.Reload()
    tags = acc.Tags()
    epochs = [int(r[0]) for r in rows]
    for t in TAGS:
        name = t if t in tags["scalars"] else L1.get(t, t)
        if name not in tags["scalars"]:
            fail("%s: scalar %s missing (has %s)" % (run, t, tags["scalars"]))
            continue
        ev = acc.Scalars(name)
        steps = [e.step for e in ev]
        if steps != epochs:
            fail("%s: %s at steps %s, results.csv has epochs %s" % (run, name, steps, epochs))
            continue
        col = head.index(t)
        bad = [(e.step, e.value, r[col]) for e, r in zip(ev, rows) if not close(e.value, r[col])]
        if bad:
            fail("%s: %s differs from results.csv (step, event, csv): %s" % (run, name, bad[:3]))
        else:
            ok("%s: steps %s, values = results.csv" % (name, steps))
    for t in IMAGES:
        if t not in tags["images"]:
            fail("%s: image %s missing (has %s)" % (run, t, tags["images"]))
            continue
        for im in acc.Images(t):
            png = im.encoded_image_string
            if png[:8] != b"\x89PNG\r\n\x1a\n":
                fail("%s: image %s step %d is not a PNG" % (run, t, im.step))
                continue
            w, h = struct.unpack(">II", png[16:24])
            if (w, h) != (im.width, im.height):
                fail("%s: image %s: PNG is %dx%d, the summary says %dx%d" % (run, t, w, h, im.width, im.height))
            else:
                ok("image %s step %d: PNG %dx%d" % (t, im.step, w, h))
    # what the UI serves: data_compat turns simple_value into scalar-plugin tensors, images into tensors
    pacc = pea.EventAccumulator(run, size_guidance={pea.TENSORS: 0})
    pacc.Reload()
    ptags = pacc.Tags()["tensors"]
    plugins = {t: pacc.SummaryMetadata(t).plugin_data.plugin_name for t in ptags}
    for t in TAGS:
        name = t if t in plugins else L1.get(t, t)
        if plugins.get(name) != "scalars":
            fail("%s: %s is not a scalars-plugin series in the UI's reader (%s)" % (run, name, plugins.get(name)))
            continue
        vals = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in pacc.Tensors(name)]
        if len(vals) != len(rows) or not all(close(v, r[head.index(t)]) for v, r in zip(vals, rows)):
            fail("%s: %s in the UI's reader: %s" % (run, name, vals))
    for t in IMAGES:
        if plugins.get(t) != "images":
            fail("%s: %s is not an images-plugin series in the UI's reader (%s)" % (run, t, plugins.get(t)))
    ok("the UI's reader (plugin_event_accumulator): %d scalar and %d image series" %
       (sum(p == "scalars" for p in plugins.values()), sum(p == "images" for p in plugins.values())))


def main(argv):
    need = "--need-tensorboard" in argv
    runs = [a for a in argv if not a.startswith("--")]
    if not runs:
        print(__doc__)
        return 2
    try:
        import tensorboard
        have = tensorboard.__version__
    except ImportError:
        have = None
    for run in runs:
        print("%s:" % run)
        files = sorted(glob.glob(os.path.join(run, "events.out.tfevents.*")))
        if not files:
            fail("%s: no events.out.tfevents.* file" % run)
            continue
        for f in files:
            check_framing(f)
        head, rows = read_csv(run)
        if have:
            print("  tensorboard %s:" % have)
            check_with_tensorboard(run, head, rows)
        elif need:
            fail("the tensorboard package is not installed")
        else:
            print("  skip: the tensorboard package is not installed here; its reader was not run")
    print("tb_check: %s" % ("all passed" if not failures else "%d failed" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
