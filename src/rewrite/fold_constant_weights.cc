// Folds the dequantization of constant weights into float initializers:
//   DequantizeLinear(integer initializer, scale, zero point) -> float32 initializer
//   Cast(float16 initializer, to = float32)                  -> float32 initializer
// What is left of such a DQ after QDQ fusion is a weight the integer kernels did not
// take: a group kept at higher precision (int16 or float16 fallback) or a float op
// whose weight the quantizer stored as integers. The session would fold it at
// creation anyway, but only after the inference passes ran: folded here, the conv it
// feeds has a constant float weight, so it becomes a FusedConv and runs in the
// channels-last region of its int8 neighbours instead of on NCHW between
// Transposes. The values are computed with the kernels' float32 operations
// ((float)(q - zp) * scale; HalfToFloat), so nothing changes but where they are
// computed.
#include <optional>

#include "rewrite/passes.h"

namespace seqto::rewrite {

namespace {

const Tensor* Initializer(const ir::Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  return it == g.initializers.end() ? nullptr : &it->second;
}

bool IsIntegerWeightType(DType t) {
  return t == DType::kUInt8 || t == DType::kInt8 || t == DType::kUInt16 || t == DType::kInt16 || t == DType::kInt32;
}

// DequantizeLinear of constants, per tensor or per axis; nullopt when the node is
// anything else (a kernel error stays the kernel's).
std::optional<Tensor> FoldDequantize(const ir::Graph& g, const ir::Node& n) {
  if (!(n.domain.empty() || n.domain == "com.microsoft") || n.inputs.size() < 2 || n.outputs.size() != 1) return {};
  auto block = n.attr_int("block_size", 0);
  if (!block || *block != 0) return {};
  const Tensor* q = Initializer(g, n.inputs[0]);
  const Tensor* scale = Initializer(g, n.inputs[1]);
  const Tensor* zp = n.inputs.size() > 2 && !n.inputs[2].empty() ? Initializer(g, n.inputs[2]) : nullptr;
  if (!q || !scale || !IsIntegerWeightType(q->dtype()) || scale->dtype() != DType::kFloat32 || scale->rank() > 1)
    return {};
  if (n.inputs.size() > 2 && !n.inputs[2].empty() &&
      (!zp || zp->dtype() != q->dtype() || zp->numel() != scale->numel()))
    return {};
  int64_t inner = 1, axis_dim = 1;
  if (scale->numel() != 1) {
    auto axis = n.attr_int("axis", 1);
    if (!axis || q->rank() == 0) return {};
    const int64_t a = *axis < 0 ? *axis + q->rank() : *axis;
    if (a < 0 || a >= q->rank() || q->dim(a) != scale->numel()) return {};
    axis_dim = q->dim(a);
    for (int64_t d = a + 1; d < q->rank(); ++d) inner *= q->dim(d);
  }
  const std::vector<int64_t> qv = q->ToInt64s();
  const std::vector<int64_t> zv = zp ? zp->ToInt64s() : std::vector<int64_t>(scale->numel(), 0);
  const float* sv = scale->data<float>();
  Tensor out(DType::kFloat32, q->shape());
  float* o = out.data<float>();
  for (int64_t i = 0; i < q->numel(); ++i) {
    const int64_t a = axis_dim == 1 ? 0 : i / inner % axis_dim;
    o[i] = static_cast<float>(qv[i] - zv[a]) * sv[a];
  }
  return out;
}

// Cast of a float16 constant to float32.
std::optional<Tensor> FoldCast(const ir::Graph& g, const ir::Node& n) {
  if (!n.domain.empty() || n.inputs.size() != 1 || n.outputs.size() != 1) return {};
  auto to = n.attr_int("to", 0);
  const Tensor* x = Initializer(g, n.inputs[0]);
  if (!to || *to != static_cast<int64_t>(DType::kFloat32) || !x || x->dtype() != DType::kFloat16) return {};
  Tensor out(DType::kFloat32, x->shape());
  const uint16_t* in = static_cast<const uint16_t*>(x->raw());
  for (int64_t i = 0; i < x->numel(); ++i) out.data<float>()[i] = HalfToFloat(in[i]);
  return out;
}

}  // namespace

GraphPatch FoldConstantWeights(const ir::Graph& g, const OptimizeOptions& options) {
  GraphPatch patch;
  const UseMap uses(g);
  for (const ir::Node& n : g.nodes) {
    if (n.outputs.size() != 1 || n.outputs[0].empty()) continue;
    const std::string& out = n.outputs[0];
    if (options.keep_values.count(out) || uses.graph_outputs.count(out)) continue;
    std::optional<Tensor> value;
    if (n.op_type == "DequantizeLinear")
      value = FoldDequantize(g, n);
    else if (n.op_type == "Cast")
      value = FoldCast(g, n);
    if (!value) continue;
    patch.RemoveNode(n.name);
    patch.SetInitializer(out, std::move(*value));
  }
  return patch;
}

}  // namespace seqto::rewrite
