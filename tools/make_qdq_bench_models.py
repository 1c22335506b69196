#!/usr/bin/python3
"""Builds QDQ (int8) versions of the benchmark CNNs with seqto's own quantizer.

    /usr/bin/python3 tools/make_qdq_bench_models.py --seqto BUILD/seqto MODELS_DIR
        [--models resnet50,mobilenetv2] [--samples 4] [--seed 0]

For each MODELS_DIR/<model>.onnx (tools/make_bench_models.py output) writes
MODELS_DIR/<model>_qdq.onnx: static QDQ quantization, per-channel int8 weights,
uint8 activations, MinMax ranges calibrated on --samples random inputs (uniform in
[-1, 1], fixed seed; saved as MODELS_DIR/calib_<model>.npy). The weights are random,
so the ranges only need to be plausible: the models exist to time int8 inference
(seqto's QDQ fusion against the unfused float path and ONNX Runtime), not accuracy.
Needs numpy (Debian's python3-numpy) and the seqto executable.
"""

import argparse
import os
import subprocess
import sys

import numpy as np
import onnx


def input_shape(path):
    """The single input's dimensions after the batch dimension."""
    model = onnx.load(path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise SystemExit(f"{path}: expected one input, found {len(inputs)}")
    dims = inputs[0].type.tensor_type.shape.dim[1:]
    if any(not d.HasField("dim_value") for d in dims):
        raise SystemExit(f"{path}: input '{inputs[0].name}' needs known dimensions after the batch")
    return [d.dim_value for d in dims]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models_dir")
    parser.add_argument("--seqto", required=True, help="the seqto executable")
    parser.add_argument("--models", default="resnet50,mobilenetv2")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    for name in filter(None, args.models.split(",")):
        src = os.path.join(args.models_dir, name + ".onnx")
        dst = os.path.join(args.models_dir, name + "_qdq.onnx")
        calib = os.path.join(args.models_dir, "calib_" + name + ".npy")
        rng = np.random.default_rng(args.seed)
        data = rng.uniform(-1.0, 1.0, size=[args.samples] + input_shape(src)).astype(np.float32)
        np.save(calib, data)
        cmd = [args.seqto, "quantize", src, "-o", dst, "--calib-data", calib, "--per-channel", "--batch", "1"]
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            sys.stderr.write(result.stdout)
            raise SystemExit(f"make_qdq_bench_models: quantizing {src} failed")
        print(f"wrote {dst}")


if __name__ == "__main__":
    main()
