// Folds constant per-channel scale and shift that follow a float Conv into its
// weights and bias:
//   y = (conv(x, W) + b) * s + t  =  conv(x, W * s) + (b * s + t)
// for any chain of Mul and Add with constant float operands that are scalars or
// per-output-channel ([C, 1, ..., 1], with or without leading 1s). Paddle's
// PP-LCNet/PP-OCR blocks ("learnable affine" after each conv) are this; ONNX
// Runtime's ConvMulFusion/ConvAddFusion do the same. Run after FoldBatchNormIntoConv
// and before FuseConvPostOps (which then fuses the activation that follows).
// Rounding: the product is formed in double and rounded once, so results differ
// from the unfused graph by float rounding only (tested at 1e-5 relative).
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

}  // namespace

GraphPatch FoldConvAffine(const ir::Graph& g, const OptimizeOptions& options) {
  GraphPatch patch;
  const UseMap uses(g);
  for (const ir::Node& conv : g.nodes) {
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.inputs.size() < 2 || conv.outputs.size() != 1) continue;
    auto w_it = g.initializers.find(conv.inputs[1]);
    if (w_it == g.initializers.end() || w_it->second.dtype() != DType::kFloat32 || w_it->second.rank() < 3) continue;
    const Tensor& w = w_it->second;
    const int64_t oc = w.dim(0), rank = w.rank();
    const bool has_bias = conv.inputs.size() > 2 && !conv.inputs[2].empty();
    std::vector<double> scale(static_cast<size_t>(oc), 1.0), shift(static_cast<size_t>(oc), 0.0);
    if (has_bias) {
      auto b = g.initializers.find(conv.inputs[2]);
      if (b == g.initializers.end() || b->second.dtype() != DType::kFloat32 || b->second.numel() != oc) continue;
      shift = b->second.ToDoubles();
    }
    std::string tail = conv.outputs[0];
    std::vector<std::string> removed;
    while (uses.SingleUse(tail) && !options.keep_values.count(tail)) {
      const ir::Node& next = g.nodes[uses.consumers.at(tail)[0]];
      if (!next.domain.empty() || (next.op_type != "Mul" && next.op_type != "Add") || next.inputs.size() != 2 ||
          next.outputs.size() != 1 || next.has_attr("broadcast"))
        break;
      const std::string& other = next.inputs[0] == tail ? next.inputs[1] : next.inputs[0];
      if (other == tail) break;
      const std::vector<double> v = PerChannel(g, other, rank, oc);
      if (v.empty()) break;
      for (int64_t c = 0; c < oc; ++c) {
        if (next.op_type == "Mul") {
          scale[c] *= v[c];
          shift[c] *= v[c];
        } else {
          shift[c] += v[c];
        }
      }
      removed.push_back(next.name);
      tail = next.outputs[0];
    }
    if (removed.empty()) continue;
    const std::string w_name = conv.name + "/affine_folded_weight", b_name = conv.name + "/affine_folded_bias";
    if (g.initializers.count(w_name) || g.initializers.count(b_name)) continue;
    Tensor new_w(DType::kFloat32, w.shape());
    Tensor new_b(DType::kFloat32, {oc});
    const int64_t per_channel = w.numel() / std::max<int64_t>(oc, 1);
    for (int64_t c = 0; c < oc; ++c) {
      for (int64_t k = 0; k < per_channel; ++k)
        new_w.data<float>()[c * per_channel + k] =
            static_cast<float>(static_cast<double>(w.data<float>()[c * per_channel + k]) * scale[c]);
      new_b.data<float>()[c] = static_cast<float>(shift[c]);
    }
    ir::Node fused = conv;
    fused.inputs.resize(3);
    fused.inputs[1] = w_name;
    fused.inputs[2] = b_name;
    fused.outputs[0] = tail;
    patch.SetInitializer(w_name, std::move(new_w));
    patch.SetInitializer(b_name, std::move(new_b));
    patch.ReplaceNode(std::move(fused));
    for (const auto& name : removed) patch.RemoveNode(name);
  }
  return patch;
}

}  // namespace seqto::rewrite
