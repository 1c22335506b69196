#!/usr/bin/python3
"""Builds QDQ (int8) versions of benchmark models with seqto's own quantizer.

    /usr/bin/python3 tools/make_qdq_bench_models.py --seqto BUILD/seqto MODELS_DIR
        [--models resnet50,mobilenetv2,squeezenet,vit] [--samples 4] [--seed 0]
    /usr/bin/python3 tools/make_qdq_bench_models.py --seqto BUILD/seqto --model SRC.onnx=DST.onnx
        [--shape 3x48x320] [--per-tensor] [--opset 11] [--samples 4] [--seed 0]

The first form: for each MODELS_DIR/<model>.onnx (tools/make_bench_models.py output)
writes MODELS_DIR/<model>_qdq.onnx. The second quantizes any float model (the model
suite's PP-OCR and ImageNet models, bench/model_suite): --shape gives the input's
dimensions after the batch where the model leaves them open, --opset first converts
the model with ONNX's version converter (for opset-9 models that seqto cannot upgrade
itself; the converted float model is written next to DST as <DST stem>_float.onnx).

Static QDQ quantization, per-channel int8 weights (per-tensor with --per-tensor),
uint8 activations, MinMax ranges calibrated on --samples random inputs (uniform in
[-1, 1], fixed seed; saved next to the output as calib_<name>.npy). The ranges only
need to be plausible: the models exist to time int8 inference (seqto's QDQ fusion
against the unfused float path and ONNX Runtime), not accuracy.
Needs onnx and numpy (Debian's python3-onnx, python3-numpy) and the seqto executable.
"""

import argparse
import os
import subprocess
import sys

import numpy as np
import onnx


def input_shape(path, shape=None):
    """The single input's dimensions after the batch dimension (`shape` fills open ones)."""
    model = onnx.load(path, load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    if len(inputs) != 1:
        raise SystemExit(f"{path}: expected one input, found {len(inputs)}")
    dims = inputs[0].type.tensor_type.shape.dim[1:]
    if shape is not None:
        if len(shape) != len(dims):
            raise SystemExit(f"{path}: --shape has {len(shape)} dimensions, input '{inputs[0].name}' has "
                             f"{len(dims)} after the batch")
        return shape
    if any(not d.HasField("dim_value") for d in dims):
        raise SystemExit(f"{path}: input '{inputs[0].name}' needs known dimensions after the batch (give --shape)")
    return [d.dim_value for d in dims]


def convert_opset(src, dst, opset):
    from onnx import version_converter
    try:
        model = version_converter.convert_version(onnx.load(src), opset)
        onnx.checker.check_model(model)
    except Exception as e:  # the converter raises RuntimeError or its own assertion types
        raise SystemExit(f"make_qdq_bench_models: {src}: converting to opset {opset} failed: {e}")
    tmp = dst + ".tmp"
    onnx.save(model, tmp)
    os.replace(tmp, dst)


def quantize(seqto, src, dst, samples, seed, shape=None, per_tensor=False, opset=None):
    stem = os.path.splitext(os.path.basename(dst))[0]
    out_dir = os.path.dirname(dst) or "."
    os.makedirs(out_dir, exist_ok=True)
    if opset is not None:
        converted = os.path.join(out_dir, stem + "_float.onnx")
        convert_opset(src, converted, opset)
        src = converted
    calib = os.path.join(out_dir, "calib_" + stem.removesuffix("_qdq") + ".npy")
    rng = np.random.default_rng(seed)
    data = rng.uniform(-1.0, 1.0, size=[samples] + input_shape(src, shape)).astype(np.float32)
    np.save(calib, data)
    cmd = [seqto, "quantize", src, "-o", dst, "--calib-data", calib, "--batch", "1"]
    if not per_tensor:
        cmd.append("--per-channel")
    result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout)
        raise SystemExit(f"make_qdq_bench_models: quantizing {src} failed")
    print(f"wrote {dst}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models_dir", nargs="?")
    parser.add_argument("--seqto", required=True, help="the seqto executable")
    parser.add_argument("--models", default="resnet50,mobilenetv2,squeezenet,vit")
    parser.add_argument("--model", metavar="SRC=DST", help="quantize one model file SRC into DST")
    parser.add_argument("--shape", help="with --model: input dimensions after the batch, e.g. 3x48x320")
    parser.add_argument("--per-tensor", action="store_true", help="with --model: per-tensor weights")
    parser.add_argument("--opset", type=int, help="with --model: convert to this opset first")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.model:
        src, sep, dst = args.model.partition("=")
        if not sep or not src or not dst:
            raise SystemExit(f"make_qdq_bench_models: --model '{args.model}' is not SRC=DST")
        shape = None
        if args.shape:
            try:
                shape = [int(d) for d in args.shape.split("x")]
            except ValueError:
                raise SystemExit(f"make_qdq_bench_models: --shape '{args.shape}' is not like 3x48x320")
        quantize(args.seqto, src, dst, args.samples, args.seed, shape, args.per_tensor, args.opset)
        return
    if not args.models_dir:
        raise SystemExit("make_qdq_bench_models: give MODELS_DIR or --model SRC=DST")
    for name in filter(None, args.models.split(",")):
        src = os.path.join(args.models_dir, name + ".onnx")
        quantize(args.seqto, src, os.path.join(args.models_dir, name + "_qdq.onnx"), args.samples, args.seed)


if __name__ == "__main__":
    main()
