// Fuses what follows a float Conv into the convolution itself, as oneDNN post-ops:
//   Conv -> Add(other) [-> activation]   becomes FusedConv(X, W, B, other)
//   Conv -> activation                   becomes FusedConv(X, W, B)
// with activation one of Relu, Clip (constant bounds), LeakyRelu, and then
//   ... -> QuantizeLinear -> DequantizeLinear (one constant scale and zero point,
//          the quantized value read by the DequantizeLinear only)
// as the fake quantization `output_fake_quant` = [scale, lo, hi]: what a 16-bit
// activation between two float convs is (the tuner's int16_activations groups;
// oneDNN has no 16-bit convolution), computed in cache instead of a quantizing and
// a dequantizing pass over the tensor. Same values as the two ops.
// Each fusion saves a full pass over the activation tensor; ONNX Runtime does the
// same for activations.
// The result is seqto's internal op com.seqto.FusedConv (see ops/nn/conv.cc): it
// only ever lives inside a Session, never in a saved model.
//
// Not fused: a pointwise conv into the depthwise 3x3 conv after it (oneDNN's
// append_dw post-op, MobileNetV2's expansions). Measured with oneDNN 2.6.3 (AVX-512,
// f32, NHWC as the channels-last pass runs them, both convs with Clip(0, 6)): only
// the 16->96 conv at 112x112 into a stride-2 depthwise conv, on 1 thread, gets a
// fused kernel (jit_1x1): 527 us against 635 us for the two convs (medians of 600
// interleaved runs). Every other pair of MobileNetV2 (stride 2 at 56x56, 28x28,
// 14x14, every stride-1 pair) and every pair on 2 threads gets ref_fused_convolution,
// which runs the same two kernels one after the other and gains nothing; nChw16c
// gains nothing once its reorders from and to NHWC are counted. So the fusion could
// save about 0.1 ms of MobileNetV2's 8 ms, on 1 thread only.
#include <cmath>
#include <limits>
#include <set>

#include "rewrite/passes.h"

namespace seqto::rewrite {

namespace {

// Reads a Clip bound: attribute (opset < 11) or constant scalar input (opset >= 11).
bool ClipBound(const ir::Graph& g, const ir::Node& clip, int input, const char* attr, float def, float& out) {
  out = def;
  if (clip.has_attr(attr)) {
    auto v = clip.attr_float(attr, def);
    if (!v) return false;
    out = *v;
  }
  if (static_cast<int>(clip.inputs.size()) > input && !clip.inputs[input].empty()) {
    auto it = g.initializers.find(clip.inputs[input]);
    if (it == g.initializers.end() || it->second.dtype() != DType::kFloat32 || it->second.numel() != 1) return false;
    out = it->second.data<float>()[0];
  }
  return true;
}

// Describes `node` as a fusable activation: sets name and params, or returns false.
bool AsActivation(const ir::Graph& g, const ir::Node& node, std::string& name, std::vector<float>& params) {
  if (!node.domain.empty() || node.inputs.empty() || node.outputs.size() != 1) return false;
  if (node.op_type == "Relu") {
    name = "Relu";
    params = {};
    return true;
  }
  if (node.op_type == "LeakyRelu") {
    auto alpha = node.attr_float("alpha", 0.01f);
    if (!alpha) return false;
    name = "LeakyRelu";
    params = {*alpha};
    return true;
  }
  if (node.op_type == "Clip") {
    float lo, hi;
    if (!ClipBound(g, node, 1, "min", std::numeric_limits<float>::lowest(), lo) ||
        !ClipBound(g, node, 2, "max", std::numeric_limits<float>::max(), hi))
      return false;
    name = "Clip";
    params = {lo, hi};
    return true;
  }
  return false;
}

// The quantized range of a QuantizeLinear's output type (its zero point's).
bool QuantRange(DType t, double& lo, double& hi) {
  switch (t) {
    case DType::kUInt8:
      lo = 0, hi = 255;
      return true;
    case DType::kInt8:
      lo = -128, hi = 127;
      return true;
    case DType::kUInt16:
      lo = 0, hi = 65535;
      return true;
    case DType::kInt16:
      lo = -32768, hi = 32767;
      return true;
    default:
      return false;
  }
}

bool IsQdqNode(const ir::Node& n, const char* op) {
  return n.op_type == op && (n.domain.empty() || n.domain == "com.microsoft") && n.inputs.size() == 3 &&
         n.outputs.size() == 1 && !n.has_attr("block_size");
}

// q -> dq, both with the same constant scalar float32 scale and zero point, as
// FusedConv's output_fake_quant [scale, lo, hi]; empty when they are not that.
std::vector<float> FakeQuantOf(const ir::Graph& g, const ir::Node& q, const ir::Node& dq) {
  if (!IsQdqNode(q, "QuantizeLinear") || !IsQdqNode(dq, "DequantizeLinear") || dq.inputs[0] != q.outputs[0]) return {};
  const auto constant = [&](const std::string& name) -> const Tensor* {
    auto it = g.initializers.find(name);
    return it != g.initializers.end() && it->second.numel() == 1 ? &it->second : nullptr;
  };
  const Tensor *qs = constant(q.inputs[1]), *qz = constant(q.inputs[2]);
  const Tensor *ds = constant(dq.inputs[1]), *dz = constant(dq.inputs[2]);
  double lo, hi;
  if (!qs || !qz || !ds || !dz || qs->dtype() != DType::kFloat32 || ds->dtype() != DType::kFloat32 ||
      qz->dtype() != dz->dtype() || !QuantRange(qz->dtype(), lo, hi))
    return {};
  const float scale = qs->data<float>()[0];
  const double zp = qz->ToDoubles()[0];
  if (ds->data<float>()[0] != scale || dz->ToDoubles()[0] != zp || !(scale > 0) || !std::isfinite(scale)) return {};
  return {scale, static_cast<float>(lo - zp), static_cast<float>(hi - zp)};
}

bool IsFloatConv(const ir::Graph& g, const ir::Node& n) {
  if (n.op_type != "Conv" || !n.domain.empty() || n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  // Only convs with a constant float weight: the fused kernel is the fast float path.
  auto w = g.initializers.find(n.inputs[1]);
  return w != g.initializers.end() && w->second.dtype() == DType::kFloat32;
}

}  // namespace

GraphPatch FuseConvPostOps(const ir::Graph& g, const OptimizeOptions& options) {
  GraphPatch patch;
  const UseMap uses(g);
  std::set<std::string> claimed;  // nodes already fused into some conv
  auto sole_consumer = [&](const std::string& value) -> const ir::Node* {
    if (!uses.SingleUse(value) || options.keep_values.count(value)) return nullptr;
    const ir::Node* n = &g.nodes[uses.consumers.at(value)[0]];
    return claimed.count(n->name) ? nullptr : n;
  };
  for (const ir::Node& conv : g.nodes) {
    if (!IsFloatConv(g, conv)) continue;
    ir::Node fused = conv;
    fused.domain = "com.seqto";
    fused.op_type = "FusedConv";
    fused.inputs.resize(3);  // X, W, B ("" when absent), then the optional sum operand
    std::string tail = conv.outputs[0];
    std::vector<std::string> removed;

    const ir::Node* next = sole_consumer(tail);
    if (next && next->op_type == "Add" && next->domain.empty() && next->inputs.size() == 2 &&
        next->inputs[0] != next->inputs[1] && !next->has_attr("broadcast")) {
      fused.inputs.push_back(next->inputs[0] == tail ? next->inputs[1] : next->inputs[0]);
      removed.push_back(next->name);
      tail = next->outputs[0];
      next = sole_consumer(tail);
    }
    std::string activation;
    std::vector<float> params;
    if (next && AsActivation(g, *next, activation, params)) {
      fused.attributes["activation"].type = ir::Attribute::Type::kString;
      fused.attributes["activation"].s = activation;
      fused.attributes["activation_params"].type = ir::Attribute::Type::kFloats;
      fused.attributes["activation_params"].floats = params;
      removed.push_back(next->name);
      tail = next->outputs[0];
      next = sole_consumer(tail);
    }
    // (After a LeakyRelu the fake quantization stays unfused: see FusedConv's
    // FakeQuantBounds.)
    if (next && activation != "LeakyRelu") {
      const ir::Node* dq = sole_consumer(next->outputs.empty() ? std::string() : next->outputs[0]);
      if (std::vector<float> fq = dq ? FakeQuantOf(g, *next, *dq) : std::vector<float>(); !fq.empty()) {
        fused.attributes["output_fake_quant"].type = ir::Attribute::Type::kFloats;
        fused.attributes["output_fake_quant"].floats = fq;
        removed.push_back(next->name);
        removed.push_back(dq->name);
        tail = dq->outputs[0];
      }
    }
    if (removed.empty()) continue;
    fused.outputs[0] = tail;
    for (const auto& name : removed) {
      patch.RemoveNode(name);
      claimed.insert(name);
    }
    patch.ReplaceNode(std::move(fused));
  }
  return patch;
}

}  // namespace seqto::rewrite
