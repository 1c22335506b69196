// Constant nodes become initializers. Exporters such as Paddle2ONNX emit every
// weight as a Constant node; the other passes (and the kernels' prepacking) only
// see constants that are initializers, so without this a Conv's BatchNormalization
// never folds and no activation fuses. ONNX Runtime folds them the same way.
#include "rewrite/passes.h"

namespace seqto::rewrite {

namespace {

// The tensor a Constant node holds (its only attribute), or an undefined tensor for
// attribute kinds that are not modelled (sparse_value, strings).
Tensor ConstantValue(const ir::Node& n) {
  if (n.attributes.size() != 1) return {};
  const auto& [key, a] = *n.attributes.begin();
  using Type = ir::Attribute::Type;
  if (key == "value" && a.type == Type::kTensor) return a.t;
  if (key == "value_float" && a.type == Type::kFloat) return Tensor::Scalar<float>(a.f);
  if (key == "value_int" && a.type == Type::kInt) return Tensor::Scalar<int64_t>(a.i);
  if (key == "value_floats" && a.type == Type::kFloats)
    return Tensor::FromVector<float>({static_cast<int64_t>(a.floats.size())}, a.floats);
  if (key == "value_ints" && a.type == Type::kInts)
    return Tensor::FromVector<int64_t>({static_cast<int64_t>(a.ints.size())}, a.ints);
  return {};
}

}  // namespace

GraphPatch LiftConstants(const ir::Graph& g, const OptimizeOptions& options) {
  GraphPatch patch;
  std::set<std::string> outputs;
  for (const auto& o : g.outputs) outputs.insert(o.name);
  for (const ir::Node& n : g.nodes) {
    if (!(n.domain.empty() || n.domain == "ai.onnx") || n.op_type != "Constant" || n.outputs.size() != 1) continue;
    // A graph output or an observed value stays what the model says it is.
    const std::string& out = n.outputs[0];
    if (out.empty() || outputs.count(out) || options.keep_values.count(out) || g.initializers.count(out)) continue;
    Tensor t = ConstantValue(n);
    if (!t.defined()) continue;
    patch.SetInitializer(out, std::move(t));
    patch.RemoveNode(n.name);
  }
  return patch;
}

}  // namespace seqto::rewrite
