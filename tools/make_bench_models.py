#!/usr/bin/python3
"""Builds the two ImageNet-size CNNs that seqto benchmarks and interop tests use.

    /usr/bin/python3 tools/make_bench_models.py OUT_DIR [--seed S] [--check]

writes OUT_DIR/resnet50.onnx (ResNet-50 style: bottleneck blocks [3, 4, 6, 3]) and
OUT_DIR/mobilenetv2.onnx (MobileNetV2 style, width 1.0). Both take 'input'
float32[N, 3, 224, 224] (N symbolic) and give 'logits' float32[N, 1000]; opset 13;
BatchNormalization left unfused (so the models exercise seqto's BN folding); every
node is named. Weights are random (He-style initialisation, fixed seed), so the
models are reproducible and contain no third-party weights. Needs only onnx and
numpy (Debian's python3-onnx and python3-numpy). The files are build products:
CMake generates them in <build>/bench/models; never commit them.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13


class Builder:
    """Accumulates nodes and initializers of one graph."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.shared = {}

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def const(self, name, value, dtype=np.float32):
        """A constant initializer (a float32 scalar by default) shared by every node that uses it."""
        if name not in self.shared:
            self.shared[name] = self.init(name, np.array(value, dtype=dtype))
        return name

    def scalar_index(self, j):
        """A 0-d int64 initializer (Gather with it drops the axis; init() would make it 1-d)."""
        name = f'index_{j}'
        if name not in self.shared:
            self.inits.append(numpy_helper.from_array(np.array(j, dtype=np.int64), name))
            self.shared[name] = name
        return name

    def linear(self, x, name, cin, cout):
        """A transformer's nn.Linear as exporters write it: MatMul by W^T, then Add bias."""
        w = self.rng.normal(0.0, 0.02, size=(cin, cout)).astype(np.float32)
        b = self.rng.normal(0.0, 0.01, size=cout).astype(np.float32)
        y = self.node('MatMul', name + '.matmul', [x, self.init(name + '.weight', w)])
        return self.node('Add', name + '.add', [y, self.init(name + '.bias', b)])

    def layer_norm(self, x, name, dim, eps=1e-6):
        """LayerNorm over the last axis, written out as exporters do below opset 17:
        ReduceMean, Sub, Pow, ReduceMean, Add eps, Sqrt, Div, then Mul gamma, Add beta."""
        mean = self.node('ReduceMean', name + '.mean', [x], axes=[-1], keepdims=1)
        d = self.node('Sub', name + '.sub', [x, mean])
        sq = self.node('Pow', name + '.pow', [d, self.const('two', 2.0)])
        var = self.node('ReduceMean', name + '.var', [sq], axes=[-1], keepdims=1)
        std = self.node('Sqrt', name + '.sqrt', [self.node('Add', name + '.add_eps', [var, self.const('ln_eps', eps)])])
        y = self.node('Div', name + '.div', [d, std])
        gamma = self.rng.uniform(0.8, 1.2, size=dim).astype(np.float32)
        beta = self.rng.normal(0.0, 0.02, size=dim).astype(np.float32)
        y = self.node('Mul', name + '.mul', [y, self.init(name + '.weight', gamma)])
        return self.node('Add', name + '.add', [y, self.init(name + '.bias', beta)])

    def gelu(self, x, name):
        """Exact GELU as exporters write it: x * 0.5 * (1 + Erf(x / sqrt(2)))."""
        e = self.node('Erf', name + '.erf', [self.node('Div', name + '.div', [x, self.const('sqrt2', np.sqrt(2.0))])])
        y = self.node('Mul', name + '.mul', [x, self.node('Add', name + '.add', [e, self.const('one', 1.0)])])
        return self.node('Mul', name + '.half', [y, self.const('half', 0.5)])

    def node(self, op, name, inputs, **attrs):
        out = name + '_out'
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def conv(self, x, name, cin, cout, k, stride=1, group=1, bias=False, pad=None):
        fan_in = (cin // group) * k * k
        w = self.rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(cout, cin // group, k, k)).astype(np.float32)
        inputs = [x, self.init(name + '.weight', w)]
        if bias:
            inputs.append(self.init(name + '.bias', self.rng.normal(0.0, 0.01, size=cout).astype(np.float32)))
        if pad is None:
            pad = (k - 1) // 2
        return self.node('Conv', name, inputs, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad, pad, pad, pad], dilations=[1, 1], group=group)

    def bn(self, x, name, c, gamma_scale=1.0):
        r = self.rng
        scale = (gamma_scale * r.uniform(0.8, 1.2, size=c)).astype(np.float32)
        bias = r.normal(0.0, 0.05, size=c).astype(np.float32)
        mean = r.normal(0.0, 0.05, size=c).astype(np.float32)
        var = r.uniform(0.8, 1.2, size=c).astype(np.float32)
        inputs = [x] + [self.init(f'{name}.{p}', a) for p, a in
                        (('weight', scale), ('bias', bias), ('running_mean', mean), ('running_var', var))]
        return self.node('BatchNormalization', name, inputs, epsilon=1e-5, momentum=0.9)

    def relu(self, x, name):
        return self.node('Relu', name, [x])

    def relu6(self, x, name):
        return self.node('Clip', name, [x, self.const('relu6_min', 0.0), self.const('relu6_max', 6.0)])

    def head(self, x, cin, classes=1000):
        x = self.node('GlobalAveragePool', 'avgpool', [x])
        x = self.node('Flatten', 'flatten', [x], axis=1)
        w = self.rng.normal(0.0, np.sqrt(1.0 / cin), size=(classes, cin)).astype(np.float32)
        b = self.rng.normal(0.0, 0.01, size=classes).astype(np.float32)
        self.nodes.append(helper.make_node('Gemm', [x, self.init('fc.weight', w), self.init('fc.bias', b)],
                                           ['logits'], name='fc', alpha=1.0, beta=1.0, transB=1))

    def model(self, graph_name, doc):
        inp = helper.make_tensor_value_info('input', TensorProto.FLOAT, ['N', 3, 224, 224])
        out = helper.make_tensor_value_info('logits', TensorProto.FLOAT, ['N', 1000])
        graph = helper.make_graph(self.nodes, graph_name, [inp], [out], initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid('', OPSET)],
                              producer_name='seqto-make_bench_models', doc_string=doc)
        m.ir_version = 8
        return m


def resnet50(seed):
    b = Builder(seed)
    x = b.conv('input', 'conv1', 3, 64, 7, stride=2)
    x = b.bn(x, 'bn1', 64)
    x = b.relu(x, 'relu')
    x = b.node('MaxPool', 'maxpool', [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (blocks, width) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512]), start=1):
        cout = width * 4
        for i in range(blocks):
            p = f'layer{stage}.{i}'
            stride = 2 if (i == 0 and stage > 1) else 1
            y = b.relu(b.bn(b.conv(x, p + '.conv1', cin, width, 1), p + '.bn1', width), p + '.relu1')
            y = b.relu(b.bn(b.conv(y, p + '.conv2', width, width, 3, stride=stride), p + '.bn2', width), p + '.relu2')
            # A small last gamma keeps the residual stream from growing block after block.
            y = b.bn(b.conv(y, p + '.conv3', width, cout, 1), p + '.bn3', cout, gamma_scale=0.3)
            if i == 0:
                shortcut = b.bn(b.conv(x, p + '.downsample.0', cin, cout, 1, stride=stride), p + '.downsample.1', cout)
            else:
                shortcut = x
            x = b.relu(b.node('Add', p + '.add', [y, shortcut]), p + '.relu3')
            cin = cout
    b.head(x, cin)
    return b.model('resnet50', 'ResNet-50 style CNN with random weights (seqto benchmark model)')


def mobilenetv2(seed):
    b = Builder(seed)
    x = b.relu6(b.bn(b.conv('input', 'features.0.conv', 3, 32, 3, stride=2), 'features.0.bn', 32), 'features.0.relu6')
    cin = 32
    index = 1
    # (expansion t, channels c, repeats n, first stride s), width multiplier 1.0
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)]:
        for i in range(n):
            p = f'features.{index}'
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:  # pointwise expansion
                y = b.relu6(b.bn(b.conv(y, p + '.expand', cin, hidden, 1), p + '.expand_bn', hidden), p + '.expand_relu6')
            # depthwise 3x3
            y = b.relu6(b.bn(b.conv(y, p + '.dw', hidden, hidden, 3, stride=stride, group=hidden), p + '.dw_bn', hidden),
                        p + '.dw_relu6')
            # linear bottleneck (no activation)
            y = b.bn(b.conv(y, p + '.project', hidden, c, 1), p + '.project_bn', c,
                     gamma_scale=0.5 if (stride == 1 and cin == c) else 1.0)
            if stride == 1 and cin == c:
                y = b.node('Add', p + '.add', [x, y])
            x = y
            cin = c
            index += 1
    x = b.relu6(b.bn(b.conv(x, f'features.{index}.conv', cin, 1280, 1), f'features.{index}.bn', 1280),
                f'features.{index}.relu6')
    b.head(x, 1280)
    return b.model('mobilenetv2', 'MobileNetV2 style CNN with random weights (seqto benchmark model)')


def squeezenet(seed):
    """SqueezeNet 1.1 layout: fire modules (1x1 squeeze, parallel 1x1 and 3x3 expand, Concat
    on channels), MaxPool with ceil_mode=1, a final 1x1 conv to the classes, GlobalAveragePool."""
    b = Builder(seed)
    x = b.relu(b.conv('input', 'features.0', 3, 64, 3, stride=2, bias=True, pad=0), 'features.1')

    def maxpool(x, name):
        return b.node('MaxPool', name, [x], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 0, 0], ceil_mode=1)

    def fire(x, p, cin, squeeze, expand):
        s = b.relu(b.conv(x, p + '.squeeze', cin, squeeze, 1, bias=True), p + '.squeeze_activation')
        e1 = b.relu(b.conv(s, p + '.expand1x1', squeeze, expand, 1, bias=True), p + '.expand1x1_activation')
        e3 = b.relu(b.conv(s, p + '.expand3x3', squeeze, expand, 3, bias=True), p + '.expand3x3_activation')
        return b.node('Concat', p + '.concat', [e1, e3], axis=1), 2 * expand

    cin = 64
    index = 2
    for layer in ['pool', (16, 64), (16, 64), 'pool', (32, 128), (32, 128), 'pool', (48, 192), (48, 192), (64, 256),
                  (64, 256)]:
        if layer == 'pool':
            x = maxpool(x, f'features.{index}')
        else:
            x, cin = fire(x, f'features.{index}', cin, *layer)
        index += 1
    x = b.relu(b.conv(x, 'classifier.1', cin, 1000, 1, bias=True), 'classifier.2')
    x = b.node('GlobalAveragePool', 'classifier.3', [x])
    b.nodes.append(helper.make_node('Flatten', [x], ['logits'], name='flatten', axis=1))
    return b.model('squeezenet', 'SqueezeNet 1.1 style CNN with random weights (seqto benchmark model)')


def vit(seed, depth=6, dim=192, heads=3, patch=16, mlp_ratio=4):
    """A small ViT encoder (DeiT-Tiny width, fewer layers): patch-embedding Conv, learned
    position embedding, pre-norm blocks (written-out LayerNorm, multi-head attention with
    Reshape/Transpose/MatMul/Softmax, exact GELU with Erf, residual Adds), final LayerNorm,
    mean over the tokens (no class token, so no batch-dependent Expand), linear head."""
    b = Builder(seed)
    tokens = (224 // patch) ** 2
    head_dim = dim // heads
    x = b.conv('input', 'patch_embed.proj', 3, dim, patch, stride=patch, bias=True, pad=0)
    x = b.node('Reshape', 'patch_embed.flatten', [x, b.const('shape_n_c_t', [0, dim, -1], np.int64)])
    x = b.node('Transpose', 'patch_embed.transpose', [x], perm=[0, 2, 1])
    pos = b.rng.normal(0.0, 0.02, size=(1, tokens, dim)).astype(np.float32)
    x = b.node('Add', 'pos_embed.add', [x, b.init('pos_embed', pos)])
    for i in range(depth):
        p = f'blocks.{i}'
        y = b.layer_norm(x, p + '.norm1', dim)
        qkv = b.linear(y, p + '.attn.qkv', dim, 3 * dim)
        qkv = b.node('Reshape', p + '.attn.reshape_qkv',
                     [qkv, b.const('shape_qkv', [0, -1, 3, heads, head_dim], np.int64)])
        qkv = b.node('Transpose', p + '.attn.transpose_qkv', [qkv], perm=[2, 0, 3, 1, 4])
        q, k, v = (b.node('Gather', f'{p}.attn.{n}', [qkv, b.scalar_index(j)], axis=0) for j, n in enumerate('qkv'))
        kt = b.node('Transpose', p + '.attn.transpose_k', [k], perm=[0, 1, 3, 2])
        s = b.node('MatMul', p + '.attn.matmul_qk', [q, kt])
        s = b.node('Mul', p + '.attn.scale', [s, b.const('attn_scale', head_dim**-0.5)])
        a = b.node('Softmax', p + '.attn.softmax', [s], axis=-1)
        o = b.node('MatMul', p + '.attn.matmul_av', [a, v])
        o = b.node('Transpose', p + '.attn.transpose_out', [o], perm=[0, 2, 1, 3])
        o = b.node('Reshape', p + '.attn.reshape_out', [o, b.const('shape_n_t_c', [0, -1, dim], np.int64)])
        x = b.node('Add', p + '.add1', [x, b.linear(o, p + '.attn.proj', dim, dim)])
        y = b.layer_norm(x, p + '.norm2', dim)
        y = b.gelu(b.linear(y, p + '.mlp.fc1', dim, mlp_ratio * dim), p + '.mlp.gelu')
        x = b.node('Add', p + '.add2', [x, b.linear(y, p + '.mlp.fc2', mlp_ratio * dim, dim)])
    x = b.layer_norm(x, 'norm', dim)
    x = b.node('ReduceMean', 'pool', [x], axes=[1], keepdims=0)
    w = b.rng.normal(0.0, 0.02, size=(1000, dim)).astype(np.float32)
    bias = b.rng.normal(0.0, 0.01, size=1000).astype(np.float32)
    b.nodes.append(helper.make_node('Gemm', [x, b.init('head.weight', w), b.init('head.bias', bias)], ['logits'],
                                    name='head', alpha=1.0, beta=1.0, transB=1))
    return b.model('vit', f'ViT encoder ({depth} layers, dim {dim}, {heads} heads, patch {patch}) with random '
                   'weights (seqto benchmark model)')


def save(model, path, check):
    if check:
        onnx.checker.check_model(model)
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    tmp = path + '.tmp'
    with open(tmp, 'wb') as f:
        f.write(model.SerializeToString())
    os.replace(tmp, path)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    print(f'{path}: {len(model.graph.node)} nodes, {params / 1e6:.2f}M parameters')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('out_dir', help='folder for the .onnx files')
    parser.add_argument('--seed', type=int, default=20240607, help='random seed for the weights')
    parser.add_argument('--check', action='store_true', help='run the ONNX checker and strict shape inference')
    args = parser.parse_args()
    try:
        os.makedirs(args.out_dir, exist_ok=True)
        save(resnet50(args.seed), os.path.join(args.out_dir, 'resnet50.onnx'), args.check)
        save(mobilenetv2(args.seed + 1), os.path.join(args.out_dir, 'mobilenetv2.onnx'), args.check)
        save(squeezenet(args.seed + 2), os.path.join(args.out_dir, 'squeezenet.onnx'), args.check)
        save(vit(args.seed + 3), os.path.join(args.out_dir, 'vit.onnx'), args.check)
    except (OSError, onnx.checker.ValidationError) as e:
        print(f'make_bench_models: {e}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
