// Folds inference-mode BatchNormalization into the Conv that feeds it:
//   y = s * (conv(x, W) + b - mean) + beta,  s = scale / sqrt(var + eps)
//     = conv(x, s * W) + (s * (b - mean) + beta)
#include <cmath>

#include "rewrite/passes.h"

namespace seqto::rewrite {

namespace {

const Tensor* FloatInitializer(const ir::Graph& g, const std::string& name, int64_t numel) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end() || it->second.dtype() != DType::kFloat32) return nullptr;
  if (numel >= 0 && it->second.numel() != numel) return nullptr;
  return &it->second;
}

}  // namespace

GraphPatch FoldBatchNormIntoConv(const ir::Graph& g, const OptimizeOptions& options) {
  GraphPatch patch;
  const UseMap uses(g);
  for (const ir::Node& bn : g.nodes) {
    if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.inputs.size() != 5) continue;
    if (bn.outputs.size() > 1) {
      bool extra = false;
      for (size_t i = 1; i < bn.outputs.size(); ++i) extra |= !bn.outputs[i].empty();
      if (extra) continue;  // training-mode outputs requested
    }
    if (auto training = bn.attr_int("training_mode", 0); !training || *training != 0) continue;
    const std::string& conv_out = bn.inputs[0];
    auto prod = uses.producer.find(conv_out);
    if (prod == uses.producer.end() || !uses.SingleUse(conv_out) || options.keep_values.count(conv_out)) continue;
    const ir::Node& conv = g.nodes[prod->second];
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.inputs.size() < 2 || conv.outputs.size() != 1) continue;
    const Tensor* w = FloatInitializer(g, conv.inputs[1], -1);
    if (!w || w->rank() < 3) continue;
    const int64_t oc = w->dim(0);
    const Tensor* b =
        conv.inputs.size() > 2 && !conv.inputs[2].empty() ? FloatInitializer(g, conv.inputs[2], oc) : nullptr;
    if (conv.inputs.size() > 2 && !conv.inputs[2].empty() && !b) continue;
    const Tensor* scale = FloatInitializer(g, bn.inputs[1], oc);
    const Tensor* beta = FloatInitializer(g, bn.inputs[2], oc);
    const Tensor* mean = FloatInitializer(g, bn.inputs[3], oc);
    const Tensor* var = FloatInitializer(g, bn.inputs[4], oc);
    if (!scale || !beta || !mean || !var) continue;
    auto eps = bn.attr_float("epsilon", 1e-5f);
    if (!eps) continue;

    Tensor new_w(DType::kFloat32, w->shape());
    Tensor new_b(DType::kFloat32, {oc});
    const int64_t per_channel = w->numel() / std::max<int64_t>(oc, 1);
    for (int64_t c = 0; c < oc; ++c) {
      const double s = scale->data<float>()[c] / std::sqrt(static_cast<double>(var->data<float>()[c]) + *eps);
      for (int64_t k = 0; k < per_channel; ++k)
        new_w.data<float>()[c * per_channel + k] = static_cast<float>(w->data<float>()[c * per_channel + k] * s);
      const double bias = b ? b->data<float>()[c] : 0.0;
      new_b.data<float>()[c] = static_cast<float>((bias - mean->data<float>()[c]) * s + beta->data<float>()[c]);
    }
    ir::Node fused = conv;
    const std::string w_name = conv.name + "/bn_folded_weight", b_name = conv.name + "/bn_folded_bias";
    if (g.initializers.count(w_name) || g.initializers.count(b_name)) continue;
    fused.inputs.resize(3);
    fused.inputs[1] = w_name;
    fused.inputs[2] = b_name;
    fused.outputs[0] = bn.outputs[0];
    patch.SetInitializer(w_name, std::move(new_w));
    patch.SetInitializer(b_name, std::move(new_b));
    patch.ReplaceNode(std::move(fused));
    patch.RemoveNode(bn.name);
  }
  return patch;
}

}  // namespace seqto::rewrite
