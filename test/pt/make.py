# make.py: writes the crafted .pt files of test/pt/ with PyTorch's own torch.save (run on a machine
# with torch: python3 test/pt/make.py OUTDIR). Each NAME.pt comes with NAME.expected.safetensors holding,
# under the state-dict name the reader must give, the tensor's values made contiguous (same dtype).
# The files are small (a few KB) and kept in git; test_pt reads them.
import collections, json, struct, sys, os, copy
import torch, torch.nn as nn

out = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(out, exist_ok=True)
ST = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
      torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
      torch.bool: "BOOL"}

def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b); off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h)
        for b in blobs: f.write(b)

def save(name, obj, expected, **kw):
    torch.save(obj, os.path.join(out, name + ".pt"), **kw)
    if expected is not None:
        write_safetensors(os.path.join(out, name + ".expected.safetensors"), expected)

torch.manual_seed(0)

# 1. every layout and dtype, in a plain dict of tensors (a state dict as a user might build one)
base = torch.arange(16, dtype=torch.float32)
views = collections.OrderedDict()
views["transposed"] = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
views["sliced"] = torch.arange(20, dtype=torch.float32).reshape(4, 5)[1:3, 1:4]
views["offset"] = torch.arange(10, dtype=torch.float32)[3:8]
views["channels_last"] = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
views["expanded"] = torch.tensor([1.0, 2.0, 3.0]).reshape(3, 1).expand(3, 4)
views["shared_a"] = base[:8].view(2, 4)
views["shared_b"] = base[8:].view(4, 2).t()
views["shared_all"] = base
views["scalar"] = torch.tensor(3.5)
views["empty"] = torch.zeros(0, 3)
views["step_slice"] = torch.arange(30, dtype=torch.float32)[::3]
views["neg_free_permute"] = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4).permute(2, 0, 1)
for dt in [torch.float16, torch.bfloat16, torch.float32, torch.float64]:
    views["d_" + str(dt).split(".")[1]] = (torch.randn(3, 5) * 10).to(dt).t()
views["d_int64"] = torch.arange(-6, 6, dtype=torch.int64).reshape(3, 4).t()
views["d_uint8"] = torch.arange(0, 250, 10, dtype=torch.uint8)[2:20:2]
views["d_bool"] = (torch.arange(12) % 3 == 0).reshape(3, 4).t()
save("views", views, views)

# 2. a module's state dict, as torch.save(model.state_dict()) writes it (an OrderedDict with _metadata)
class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Conv2d(4, 6, 1)
        self.register_buffer("stride", torch.tensor([8.0, 16.0]))
        self.register_buffer("scratch", torch.zeros(2), persistent=False)
        self.anchors = torch.empty(0)   # a plain attribute, as yolov9's and Ultralytics' heads keep them
    def forward(self, x):
        y = self.head(torch.relu(self.bn(self.conv(x))))
        g = torch.arange(6, dtype=torch.float32).reshape(2, 3)
        self.anchors = g.transpose(0, 1)   # what their first eval-mode forward leaves: a transposed view
        return y

m = Tiny()
with torch.no_grad():
    for p in m.parameters(): p.copy_(torch.randn_like(p))
    m.bn.running_mean.copy_(torch.randn(4)); m.bn.running_var.copy_(torch.rand(4) + 0.5)
m.eval(); m(torch.randn(1, 3, 8, 8))
sd = m.state_dict()
save("state_dict", sd, sd)

# 3. the module object itself, channels_last, after a forward (anchors a transposed view)
mc = copy.deepcopy(m).to(memory_format=torch.channels_last)
mc(torch.randn(1, 3, 8, 8).contiguous(memory_format=torch.channels_last))
save("module", mc, mc.state_dict())

# 4. a trainer's checkpoint: model + EMA (fp16) + SGD state + updates; the EMA is what a reader takes
model = copy.deepcopy(m).train()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, nesterov=True)
for _ in range(2):
    opt.zero_grad(); model(torch.randn(2, 3, 8, 8)).sum().backward(); opt.step()
ema = copy.deepcopy(model).eval()
with torch.no_grad():
    for p in ema.parameters(): p.mul_(0.5)
ema(torch.randn(1, 3, 8, 8))
ckpt = {"epoch": 3, "best_fitness": 0.0, "model": copy.deepcopy(model).half(), "ema": copy.deepcopy(ema).half(),
        "updates": 6, "optimizer": opt.state_dict(), "opt": {"imgsz": 64}, "git": None, "date": "2026-12-06"}
save("checkpoint", ckpt, ckpt["ema"].state_dict())
stripped = dict(ckpt, ema=None, optimizer=None, model=ckpt["ema"])
save("checkpoint_stripped", stripped, stripped["model"].state_dict())

# 5. the pre-1.6 format (not a zip), for the message that names it
save("legacy", sd, None, _use_new_zipfile_serialization=False)
print("torch", torch.__version__, "wrote", sorted(os.listdir(out)))
