// Folds constant scale and shift around a float Conv into its weights and bias.
// After the conv:
//   y = (conv(x, W) + b) * s + t  =  conv(x, W * s) + (b * s + t)
// for any chain of Mul and Add with constant float operands that are scalars or
// per-output-channel ([C, 1, ..., 1], with or without leading 1s). Before a conv
// without padding, with scalars a, c:
//   conv(x * a + c, W) + b  =  conv(x, W * a) + (b + c * sum(W[o]))
// (padding would pad x * a + c with zeros, not with c: such convs are left alone).
// Paddle's PP-LCNet/PP-OCR blocks (a "learnable affine" after each conv and after
// each activation) are this; ONNX Runtime's ConvMulFusion/ConvAddFusion do the
// first. The chain after a one-group ConvTranspose folds the same way (PP-OCR's
// detection head adds the upsampling's bias as its own Add). Run after FoldBatchNormIntoConv and before FuseConvPostOps
// (which then fuses the activation that follows). Rounding: the product is formed in double and rounded once, so
// results differ from the unfused graph by float rounding only (tested at 1e-5 relative).
#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "rewrite/passes.h"

namespace seqto::rewrite {

namespace {

// The per-channel values of a constant Mul/Add operand that broadcasts along the
// output channels of a conv whose output has `rank` dims and `oc` channels, or empty
// when it does not (it would broadcast over other dims or grow the output).
std::vector<double> PerChannel(const ir::Graph& g, const std::string& name, int64_t rank, int64_t oc) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end() || it->second.dtype() != DType::kFloat32) return {};
  const Tensor& t = it->second;
  if (t.rank() > rank) return {};
  const std::vector<double> v = t.ToDoubles();
  if (t.numel() == 1) return std::vector<double>(static_cast<size_t>(oc), v[0]);
  // [.., C, 1, ..., 1] aligned to the output's trailing dims: C must sit at dim 1.
  const int64_t channel_dim = t.rank() - (rank - 1);
  if (channel_dim < 0 || t.dim(channel_dim) != oc) return {};
  for (int64_t d = 0; d < t.rank(); ++d)
    if (d != channel_dim && t.dim(d) != 1) return {};
  return v;
}

bool FloatConv(const ir::Graph& g, const ir::Node& n) {
  if (n.op_type != "Conv" || !n.domain.empty() || n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  auto w = g.initializers.find(n.inputs[1]);
  if (w == g.initializers.end() || w->second.dtype() != DType::kFloat32 || w->second.rank() < 3) return false;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    auto b = g.initializers.find(n.inputs[2]);
    if (b == g.initializers.end() || b->second.dtype() != DType::kFloat32 || b->second.numel() != w->second.dim(0))
      return false;
  }
  return true;
}

// A ConvTranspose with one group and a constant float weight [C, M, k...] (and bias
// [M]): its output channels are W's dim 1, so only the chain after it folds (into
// W[:, o] and B[o]); a text detector's upsampling head adds its bias that way.
bool FloatConvTranspose(const ir::Graph& g, const ir::Node& n) {
  if (n.op_type != "ConvTranspose" || !n.domain.empty() || n.inputs.size() < 2 || n.outputs.size() != 1) return false;
  auto group = n.attr_int("group", 1);
  if (!group || *group != 1) return false;
  auto w = g.initializers.find(n.inputs[1]);
  if (w == g.initializers.end() || w->second.dtype() != DType::kFloat32 || w->second.rank() < 3) return false;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    auto b = g.initializers.find(n.inputs[2]);
    if (b == g.initializers.end() || b->second.dtype() != DType::kFloat32 || b->second.numel() != w->second.dim(1))
      return false;
  }
  return true;
}

// No implicit zeros: pads absent or all 0, auto_pad NOTSET or VALID.
bool Unpadded(const ir::Node& conv) {
  auto auto_pad = conv.attr_string("auto_pad", "NOTSET");
  auto pads = conv.attr_ints("pads");
  if (!auto_pad || (*auto_pad != "NOTSET" && *auto_pad != "VALID") || !pads) return false;
  return std::all_of(pads->begin(), pads->end(), [](int64_t p) { return p == 0; });
}

// A one-element float constant of rank below `rank` (the conv input's): the other
// operand then has the conv input's shape itself.
std::optional<double> ScalarOperand(const ir::Graph& g, const std::string& name, int64_t rank) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end() || it->second.dtype() != DType::kFloat32 || it->second.numel() != 1 ||
      it->second.rank() >= rank)
    return std::nullopt;
  return it->second.ToDoubles()[0];
}

// Writes the folded conv: weights W[o] * scale[o] * in_scale, bias shift[o] +
// in_shift * sum(W[o]) (sums in double).
// A ConvTranspose (`transposed`, no input side: in_scale 1, in_shift 0) scales W[:, o].
void EmitFolded(const ir::Graph& g, const ir::Node& conv, const std::string& input, const std::string& output,
                const std::vector<double>& scale, const std::vector<double>& shift, double in_scale, double in_shift,
                const std::string& suffix, bool transposed, GraphPatch& patch) {
  const Tensor& w = g.initializers.at(conv.inputs[1]);
  const int64_t oc = transposed ? w.dim(1) : w.dim(0), per_channel = w.numel() / std::max<int64_t>(oc, 1);
  Tensor new_w(DType::kFloat32, w.shape());
  Tensor new_b(DType::kFloat32, {oc});
  if (transposed) {
    const int64_t k = per_channel / std::max<int64_t>(w.dim(0), 1);
    for (int64_t i = 0; i < w.numel(); ++i)
      new_w.data<float>()[i] = static_cast<float>(w.data<float>()[i] * scale[i / k % oc]);
    for (int64_t c = 0; c < oc; ++c) new_b.data<float>()[c] = static_cast<float>(shift[c]);
  }
  for (int64_t c = 0; c < oc && !transposed; ++c) {
    double sum = 0;
    for (int64_t k = 0; k < per_channel; ++k) {
      const double v = w.data<float>()[c * per_channel + k];
      sum += v;
      new_w.data<float>()[c * per_channel + k] = static_cast<float>(v * in_scale * scale[c]);
    }
    new_b.data<float>()[c] = static_cast<float>(shift[c] + in_shift * sum * scale[c]);
  }
  ir::Node fused = conv;
  const std::string w_name = conv.name + "/" + suffix + "_weight", b_name = conv.name + "/" + suffix + "_bias";
  fused.inputs.resize(3);
  fused.inputs[0] = input;
  fused.inputs[1] = w_name;
  fused.inputs[2] = b_name;
  fused.outputs[0] = output;
  patch.SetInitializer(w_name, std::move(new_w));
  patch.SetInitializer(b_name, std::move(new_b));
  patch.ReplaceNode(std::move(fused));
}

}  // namespace

GraphPatch FoldConvAffine(const ir::Graph& g, const OptimizeOptions& options) {
  GraphPatch patch;
  const UseMap uses(g);
  std::set<std::string> claimed;  // Mul/Add nodes already folded into some conv
  // A Mul or Add of `value` that alone reads it (and may go), or nullptr.
  auto sole_affine = [&](const std::string& value) -> const ir::Node* {
    if (!uses.SingleUse(value) || options.keep_values.count(value)) return nullptr;
    const ir::Node& n = g.nodes[uses.consumers.at(value)[0]];
    if (!n.domain.empty() || (n.op_type != "Mul" && n.op_type != "Add") || n.inputs.size() != 2 ||
        n.outputs.size() != 1 || n.has_attr("broadcast") || n.inputs[0] == n.inputs[1] || claimed.count(n.name))
      return nullptr;
    return &n;
  };
  auto other_of = [](const ir::Node& n, const std::string& v) { return n.inputs[0] == v ? n.inputs[1] : n.inputs[0]; };
  for (const ir::Node& conv : g.nodes) {
    const bool transposed = FloatConvTranspose(g, conv);
    if (!FloatConv(g, conv) && !transposed) continue;
    const Tensor& w = g.initializers.at(conv.inputs[1]);
    const int64_t oc = transposed ? w.dim(1) : w.dim(0), rank = w.rank();
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    std::vector<double> scale(static_cast<size_t>(oc), 1.0), shift(static_cast<size_t>(oc), 0.0);
    if (has_bias) shift = g.initializers.at(conv.inputs[2]).ToDoubles();

    // Before the conv: x -> (Mul a | Add c)* -> conv, scalars only, no padding.
    std::string input = conv.inputs[0];
    double in_scale = 1, in_shift = 0;
    std::vector<std::string> removed;
    // Each value on the way must be read by the chain alone.
    while (!transposed && Unpadded(conv) && uses.SingleUse(input) && !options.keep_values.count(input)) {
      auto p = uses.producer.find(input);
      if (p == uses.producer.end()) break;
      const ir::Node& n = g.nodes[p->second];
      if (!n.domain.empty() || (n.op_type != "Mul" && n.op_type != "Add") || n.inputs.size() != 2 ||
          n.outputs.size() != 1 || n.has_attr("broadcast") || claimed.count(n.name))
        break;
      std::string x;
      std::optional<double> v;
      for (int i = 0; i < 2 && !v; ++i)
        if ((v = ScalarOperand(g, n.inputs[1 - i], rank))) x = n.inputs[i];
      if (!v || g.initializers.count(x)) break;
      // The conv reads input = x' * in_scale + in_shift, with x' = x * v or x + v.
      if (n.op_type == "Mul")
        in_scale *= *v;
      else
        in_shift += *v * in_scale;
      removed.push_back(n.name);
      input = x;
    }

    // After the conv: conv -> (Mul s | Add t)*, scalars or per output channel.
    std::string tail = conv.outputs[0];
    while (const ir::Node* next = sole_affine(tail)) {
      const std::vector<double> v = PerChannel(g, other_of(*next, tail), rank, oc);
      if (v.empty()) break;
      for (int64_t c = 0; c < oc; ++c) {
        if (next->op_type == "Mul") {
          scale[c] *= v[c];
          shift[c] *= v[c];
        } else {
          shift[c] += v[c];
        }
      }
      removed.push_back(next->name);
      tail = next->outputs[0];
    }
    if (removed.empty()) continue;
    if (g.initializers.count(conv.name + "/affine_folded_weight") ||
        g.initializers.count(conv.name + "/affine_folded_bias"))
      continue;
    for (const auto& name : removed) {
      patch.RemoveNode(name);
      claimed.insert(name);
    }
    EmitFolded(g, conv, input, tail, scale, shift, in_scale, in_shift, "affine_folded", transposed, patch);
  }
  return patch;
}

}  // namespace seqto::rewrite
