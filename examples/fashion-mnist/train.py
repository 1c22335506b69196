#!/usr/bin/python3
"""Train the two small Fashion-MNIST CNNs bundled with seqto and export them to ONNX.

Deterministic: fixed seeds, torch.use_deterministic_algorithms(True), CPU only,
a fixed thread count (2), no DataLoader workers, and shuffling/augmentation drawn
from a seeded torch.Generator. Two runs on the same machine and torch build give
the same accuracy and byte-identical .onnx files.

Data: the Debian package `dataset-fashion-mnist` (idx files, gzipped or not),
parsed with numpy; no torchvision needed.

Preprocessing (the models expect it; see README.md):
    x = pixel / 255            (uint8 -> float32 in [0, 1])
    x = (x - 0.2860) / 0.3530  (Fashion-MNIST training-set mean / std)
    layout NCHW, shape [N, 1, 28, 28], float32

Outputs, next to this script unless --out says otherwise:
    mobilenetv2.onnx, resnet.onnx   opset 13, input 'input' [batch,1,28,28],
                                    output 'logits' [batch,10], BatchNormalization unfused
    metrics.json                    float top-1 on the 10000 test images, params, preprocess, seed
    sample_input.npy                first 8 test images, preprocessed, float32 [8,1,28,28]
    sample_labels.npy               their labels, int64 [8]

Usage: /usr/bin/python3 train.py [--data DIR] [--out DIR] [--epochs N] [--only NAME]
"""

import argparse
import gzip
import json
import os
import random
import struct
import sys
import time

import numpy as np

# Passive OpenMP waits: much faster when the 2 cores are shared with other jobs; no effect on results.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

SEED = 20240501
THREADS = 2
MEAN = 0.2860
STD = 0.3530
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


# ----------------------------------------------------------------------------- data

def read_idx(path):
    """Read an idx file (optionally gzipped) into a numpy array."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype_code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype_code != 0x08:
        raise ValueError(f"{path}: not a uint8 idx file")
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    arr = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if arr.size != int(np.prod(dims)):
        raise ValueError(f"{path}: expected {int(np.prod(dims))} values, found {arr.size}")
    return arr.reshape(dims)


def find_idx(data_dir, stem):
    for name in (stem, stem + ".gz"):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    raise FileNotFoundError(f"{data_dir}: no {stem}[.gz] (apt-get install dataset-fashion-mnist)")


def load_split(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(find_idx(data_dir, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(find_idx(data_dir, f"{prefix}-labels-idx1-ubyte"))
    return images, labels.astype(np.int64)


def preprocess(images_u8):
    """uint8 [N,28,28] -> float32 [N,1,28,28], x/255 then (x-MEAN)/STD."""
    x = images_u8.astype(np.float32) / np.float32(255.0)
    x = (x - np.float32(MEAN)) / np.float32(STD)
    return x[:, None, :, :].astype(np.float32)


# ----------------------------------------------------------------------------- models

def conv_bn(cin, cout, k, stride=1, groups=1):
    return [nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout)]


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1 linear project."""

    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers = []
        if expand != 1:
            layers += conv_bn(cin, hidden, 1) + [nn.ReLU6()]
        layers += conv_bn(hidden, hidden, 3, stride, groups=hidden) + [nn.ReLU6()]
        layers += conv_bn(hidden, cout, 1)  # linear bottleneck: no activation
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        y = self.conv(x)
        return x + y if self.use_res else y


class MobileNetV2Small(nn.Module):
    # (expansion t, output channels c, repeats n, first stride s), as in the paper's table
    # The stem is stride 2 as in MobileNetV2 (28 -> 14); one more stride-2 stage gives 7x7.
    # Expansion 3 (the paper uses 6) keeps CPU training short.
    CFG = [(1, 16, 1, 1),   # 14x14
           (3, 24, 2, 2),   # 14 -> 7
           (3, 32, 2, 1),   # 7x7
           (3, 64, 2, 1),
           (3, 96, 1, 1)]
    HEAD = 192

    def __init__(self, num_classes=10):
        super().__init__()
        layers = conv_bn(1, 16, 3, stride=2) + [nn.ReLU6()]
        cin = 16
        for t, c, n, s in self.CFG:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers += conv_bn(cin, self.HEAD, 1) + [nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(self.HEAD, num_classes)

    def forward(self, x):
        x = self.pool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class BasicBlock(nn.Module):
    """ResNet basic block: 3x3 conv-BN-ReLU, 3x3 conv-BN, add shortcut, ReLU."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:  # strided 1x1 projection shortcut
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = x if self.down is None else self.down(x)
        return F.relu(y + s)


class ResNetSmall(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 16, 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(16), nn.ReLU())
        self.layer1 = BasicBlock(16, 16, 1)   # 28x28
        self.layer2 = BasicBlock(16, 32, 2)   # 14x14
        self.layer3 = BasicBlock(32, 64, 2)   # 7x7
        self.layer4 = BasicBlock(64, 64, 1)   # 7x7
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))
        return self.fc(torch.flatten(self.pool(x), 1))


MODELS = {"mobilenetv2": MobileNetV2Small, "resnet": ResNetSmall}
EPOCHS = {"mobilenetv2": 4, "resnet": 3}  # each about 2-4 minutes on 2 idle cores


# ----------------------------------------------------------------------------- train / eval

def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@torch.no_grad()
def evaluate(model, x, y, batch=1000):
    model.eval()
    correct = 0
    for i in range(0, len(x), batch):
        correct += (model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum().item()
    return correct / len(x)


def train(name, xtr, ytr, xte, yte, epochs, batch=128, lr=3e-3):
    seed_everything(SEED)
    model = MODELS[name]().to(memory_format=torch.channels_last)  # ~25% faster on CPU
    gen = torch.Generator().manual_seed(SEED)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    steps_per_epoch = (len(xtr) + batch - 1) // batch
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, epochs=epochs,
                                                steps_per_epoch=steps_per_epoch,
                                                pct_start=0.2)
    t0 = time.time()
    for epoch in range(epochs):
        model.train()
        perm = torch.randperm(len(xtr), generator=gen)
        total_loss = 0.0
        for i in range(0, len(xtr), batch):
            idx = perm[i:i + batch]
            xb, yb = xtr[idx].contiguous(memory_format=torch.channels_last), ytr[idx]
            flip = torch.rand(len(idx), generator=gen) < 0.5  # horizontal flip augmentation
            xb = torch.where(flip[:, None, None, None], xb.flip(3), xb)
            loss = F.cross_entropy(model(xb), yb, label_smoothing=0.05)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            total_loss += loss.item() * len(idx)
        acc = evaluate(model, xte, yte)
        print(f"[{name}] epoch {epoch + 1}/{epochs} loss {total_loss / len(xtr):.4f} "
              f"test top1 {acc * 100:.2f}% ({time.time() - t0:.0f}s)", flush=True)
    model.eval()
    return model.to(memory_format=torch.contiguous_format), time.time() - t0


def export(model, path):
    import io
    model.eval()
    dummy = torch.zeros(1, 1, 28, 28)
    # TrainingMode.PRESERVE with the model in eval mode exports BatchNormalization in
    # inference form (running statistics, one output). TrainingMode.EVAL would do the
    # same but also runs the exporter's eval peephole pass, which folds every BN into
    # the preceding Conv; seqto's examples want BN as separate nodes.
    buf = io.BytesIO()
    torch.onnx.export(model, dummy, buf,
                      opset_version=13,
                      input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.PRESERVE,
                      do_constant_folding=False,
                      export_params=True)
    data = inline_identity_initializers(buf.getvalue())
    with open(path, "wb") as f:
        f.write(data)
    return data


def inline_identity_initializers(data):
    """Undo the exporter's initializer de-duplication.

    In a ResNet basic block with a projection shortcut, the biases of bn2 and of the
    shortcut's BN get the same gradient (both feed the same Add) from the same zero
    init, so they stay equal, and torch.onnx.export shares them through an Identity
    node (Identity(layerN.bn2.bias) -> layerN.down.1.bias). Give each BN its own
    initializer again so every BatchNormalization reads constants only.
    """
    import onnx
    m = onnx.load_from_string(data)
    inits = {t.name: t for t in m.graph.initializer}
    keep = []
    for node in m.graph.node:
        if node.op_type == "Identity" and node.input[0] in inits:
            t = onnx.TensorProto()
            t.CopyFrom(inits[node.input[0]])
            t.name = node.output[0]
            m.graph.initializer.append(t)
            inits[t.name] = t
        else:
            keep.append(node)
    if len(keep) != len(m.graph.node):
        del m.graph.node[:]
        m.graph.node.extend(keep)
    return m.SerializeToString()


def check_onnx(path):
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    names = [n.name for n in m.graph.node]
    if any(not n for n in names) or len(set(names)) != len(names):
        raise RuntimeError(f"{path}: node names must be unique and non-empty")
    ops = {}
    for n in m.graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    if "BatchNormalization" not in ops:
        raise RuntimeError(f"{path}: BatchNormalization was fused away")
    if [i.name for i in m.graph.input] != ["input"] or [o.name for o in m.graph.output] != ["logits"]:
        raise RuntimeError(f"{path}: expected input 'input' and output 'logits'")
    return m, ops


# ----------------------------------------------------------------------------- numpy check of the exported graph
# onnxruntime's python module isn't packaged in Debian and onnx 1.12 has no reference
# evaluator, so this small numpy interpreter (only the ops these two graphs use) runs the
# exported graph on a few test images and compares it with torch.

def _conv(x, w, b, attrs):
    strides = attrs.get("strides", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    group = attrs.get("group", 1)
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (x.shape[2] - kh) // strides[0] + 1
    ow = (x.shape[3] - kw) // strides[1] + 1
    cols = np.empty((n, c, kh, kw, oh, ow), dtype=np.float64)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = x[:, :, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1]]
    out = np.empty((n, m, oh, ow), dtype=np.float64)
    mg = m // group
    for g in range(group):
        cg_cols = cols[:, g * cg:(g + 1) * cg].reshape(n, cg * kh * kw, oh * ow)
        wg = w[g * mg:(g + 1) * mg].reshape(mg, cg * kh * kw)
        out[:, g * mg:(g + 1) * mg] = np.einsum("ok,nkp->nop", wg, cg_cols).reshape(n, mg, oh, ow)
    if b is not None:
        out += b[None, :, None, None]
    return out


def run_onnx_numpy(model, x):
    from onnx import numpy_helper, helper
    env = {t.name: numpy_helper.to_array(t).astype(np.float64) if numpy_helper.to_array(t).dtype.kind == "f"
           else numpy_helper.to_array(t) for t in model.graph.initializer}
    env["input"] = x.astype(np.float64)
    for node in model.graph.node:
        a = {at.name: helper.get_attribute_value(at) for at in node.attribute}
        ins = [env[i] if i else None for i in node.input]
        op = node.op_type
        if op == "Conv":
            y = _conv(ins[0], ins[1], ins[2] if len(ins) > 2 else None, a)
        elif op == "BatchNormalization":
            xx, s, b, mean, var = ins
            eps = a.get("epsilon", 1e-5)
            sh = (1, -1, 1, 1)
            y = (xx - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + eps) * s.reshape(sh) + b.reshape(sh)
        elif op == "Relu":
            y = np.maximum(ins[0], 0)
        elif op == "Clip":
            lo = ins[1] if len(ins) > 1 and ins[1] is not None else -np.inf
            hi = ins[2] if len(ins) > 2 and ins[2] is not None else np.inf
            y = np.clip(ins[0], lo, hi)
        elif op == "Identity":
            y = ins[0]
        elif op == "Add":
            y = ins[0] + ins[1]
        elif op == "GlobalAveragePool":
            y = ins[0].mean(axis=(2, 3), keepdims=True)
        elif op == "Flatten":
            ax = a.get("axis", 1)
            y = ins[0].reshape(int(np.prod(ins[0].shape[:ax])), -1)
        elif op == "Gemm":
            aa = ins[0].T if a.get("transA", 0) else ins[0]
            bb = ins[1].T if a.get("transB", 0) else ins[1]
            y = a.get("alpha", 1.0) * aa @ bb
            if len(ins) > 2 and ins[2] is not None:
                y = y + a.get("beta", 1.0) * ins[2]
        elif op == "Constant":
            from onnx import numpy_helper as nh
            y = nh.to_array(a["value"])
            y = y.astype(np.float64) if y.dtype.kind == "f" else y
        else:
            raise NotImplementedError(f"numpy check: op {op} (node {node.name})")
        env[node.output[0]] = y
    return env["logits"]


# ----------------------------------------------------------------------------- main

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA, help="folder with the Fashion-MNIST idx files")
    ap.add_argument("--out", default=here, help="output folder (default: next to this script)")
    ap.add_argument("--epochs", type=int, default=0,
                    help=f"epochs (default: {EPOCHS})")
    ap.add_argument("--only", choices=sorted(MODELS), help="train one model only")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N training images (smoke tests)")
    args = ap.parse_args()

    torch.set_num_threads(THREADS)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    seed_everything(SEED)
    os.makedirs(args.out, exist_ok=True)

    xtr_u8, ytr = load_split(args.data, "train")
    if args.limit:
        xtr_u8, ytr = xtr_u8[:args.limit], ytr[:args.limit]
    xte_u8, yte = load_split(args.data, "test")
    xtr, xte = torch.from_numpy(preprocess(xtr_u8)), torch.from_numpy(preprocess(xte_u8))
    ytr, yte = torch.from_numpy(ytr), torch.from_numpy(yte)
    print(f"train {tuple(xtr.shape)}, test {tuple(xte.shape)}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads", flush=True)

    np.save(os.path.join(args.out, "sample_input.npy"), xte[:8].numpy().astype(np.float32))
    np.save(os.path.join(args.out, "sample_labels.npy"), yte[:8].numpy().astype(np.int64))

    metrics_path = os.path.join(args.out, "metrics.json")
    metrics = {}
    if args.only and os.path.exists(metrics_path):
        with open(metrics_path) as f:
            metrics = json.load(f)
    names = [args.only] if args.only else list(MODELS)
    for name in names:
        epochs = args.epochs or EPOCHS[name]
        model, secs = train(name, xtr, ytr, xte, yte, epochs)
        top1 = evaluate(model, xte, yte)
        params = sum(p.numel() for p in model.parameters())
        path = os.path.join(args.out, f"{name}.onnx")
        data = export(model, path)
        onnx_model, ops = check_onnx(path)
        # compare the exported graph (numpy interpreter) with torch on 256 test images
        with torch.no_grad():
            ref = model(xte[:256]).numpy().astype(np.float64)
        got = run_onnx_numpy(onnx_model, xte[:256].numpy())
        max_diff = float(np.abs(got - ref).max())
        agree = float((got.argmax(1) == ref.argmax(1)).mean())
        if max_diff > 1e-3 or agree != 1.0:
            raise RuntimeError(f"{path}: exported graph differs from torch "
                               f"(max |diff| {max_diff:g}, top-1 agreement {agree})")
        print(f"[{name}] params {params}, test top1 {top1 * 100:.2f}%, train {secs:.0f}s, "
              f"onnx {len(data)} bytes, ops {dict(sorted(ops.items()))}, "
              f"numpy-vs-torch max|diff| {max_diff:.2e} on 256 images", flush=True)
        metrics[name] = {
            "top1": round(top1, 4),
            "correct": int(round(top1 * len(xte))),
            "samples": len(xte),
            "params": params,
            "epochs": epochs,
            "onnx": f"{name}.onnx",
            "op_types": dict(sorted(ops.items())),
        }
    metrics["preprocess"] = {
        "scale": 1.0 / 255.0, "mean": MEAN, "std": STD, "layout": "nchw", "color": "gray",
        "shape": [1, 28, 28],
        "formula": "x = (pixel / 255 - 0.2860) / 0.3530",
        "seqto": "--preprocess scale=0.00392157,mean=0.2860,std=0.3530,color=gray,layout=nchw",
    }
    metrics["seed"] = SEED
    metrics["threads"] = THREADS
    metrics["torch"] = torch.__version__
    metrics["classes"] = CLASSES
    with open(metrics_path, "w") as f:
        json.dump(metrics, f, indent=2, sort_keys=False)
        f.write("\n")
    print(f"wrote {metrics_path}")


if __name__ == "__main__":
    sys.exit(main())
