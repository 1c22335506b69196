// Dynamic quantization, as ONNX Runtime's quantize_dynamic writes it
// (onnx_quantizer.py in IntegerOps mode, operators/matmul.py MatMulInteger,
// operators/conv.py ConvInteger):
//
//   x -> DynamicQuantizeLinear -> (x_q, x_scale, x_zp)     one per activation tensor
//   MatMulInteger/ConvInteger(x_q, w_q, x_zp, w_zp) -> Cast(float)
//     -> Mul(x_scale * w_scale) [-> Add(bias)] -> the node's output
//
// Gemm (which ORT's dynamic mode leaves in float) is handled as a MatMul with B
// transposed and alpha folded in ahead of time, then Add(beta * C).
#include <algorithm>

#include "quant/qdq_internal.h"
#include "rewrite/patch.h"

namespace seqto::quant::detail {

namespace {

const std::string& In(const ir::Node& n, size_t k) {
  static const std::string kEmpty;
  return k < n.inputs.size() ? n.inputs[k] : kEmpty;
}

int64_t IntAttrOr(const ir::Node& n, const std::string& name, int64_t def) {
  auto v = n.attr_int(name, def);
  return v.ok() ? *v : def;
}

float FloatAttrOr(const ir::Node& n, const std::string& name, float def) {
  auto v = n.attr_float(name, def);
  return v.ok() ? *v : def;
}

ir::Node MakeNode(const std::string& name, const std::string& op, std::vector<std::string> inputs,
                  std::vector<std::string> outputs) {
  ir::Node n;
  n.name = name;
  n.op_type = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

// Gemm's B as MatMul's: transposed if transB, times alpha.
Tensor GemmWeight(const Tensor& b, bool trans_b, float alpha) {
  const int64_t r = b.dim(0), c = b.dim(1);
  Tensor out(DType::kFloat32, trans_b ? Shape{c, r} : Shape{r, c});
  const float* in = b.data<float>();
  float* o = out.data<float>();
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) {
      const float v = in[i * c + j] * alpha;
      if (trans_b)
        o[j * r + i] = v;
      else
        o[i * c + j] = v;
    }
  return out;
}

}  // namespace

bool DynamicCandidate(const GraphInfo& info, size_t i) {
  const ir::Node& n = info.graph.nodes[i];
  if (!n.domain.empty() && n.domain != "ai.onnx") return false;
  if (!DynamicOpTypes().count(n.op_type)) return false;
  const std::string &x = In(n, 0), &w = In(n, 1);
  if (x.empty() || info.IsInitializer(x) || !info.IsQuantizable(x) || !info.IsFloatInitializer(w)) return false;
  const Tensor* wt = info.Initializer(w);
  if (n.op_type == "Conv") return wt->rank() >= 3;
  if (n.op_type == "MatMul") return wt->rank() == 2;
  // Gemm: A not transposed (MatMulInteger has no transA), B 2-D, and beta * C
  // computable ahead of time.
  if (wt->rank() != 2 || IntAttrOr(n, "transA", 0) != 0) return false;
  const std::string& c = In(n, 2);
  return c.empty() || FloatAttrOr(n, "beta", 1.0f) == 1.0f || info.IsFloatInitializer(c);
}

Expected<DynamicPlan> PlanDynamic(const GraphInfo& info, const std::vector<bool>& quantized) {
  DynamicPlan plan;
  plan.target_opset = info.opset;
  NameAllocator names(info.graph);
  std::set<std::string> seen;
  for (size_t i = 0; i < info.graph.nodes.size(); ++i) {
    if (!quantized[i]) continue;
    const ir::Node& n = info.graph.nodes[i];
    const std::string& x = In(n, 0);
    if (seen.insert(x).second) {
      DynamicActivation a;
      a.name = x;
      a.node = names.Node(x + "_QuantizeLinear");
      a.quantized = names.Value(x + "_quantized");
      a.scale = names.Value(x + "_scale");
      a.zero_point = names.Value(x + "_zero_point");
      plan.activations.push_back(std::move(a));
    }
    DynamicUnit u;
    u.node = i;
    u.activation = x;
    u.weight = In(n, 1);
    u.bias = In(n, 2);
    const std::string& out = n.outputs.at(0);
    const std::string op_name = n.name + "_quant";
    u.op_node = names.Node(op_name);
    u.op_output = names.Value(out + "_output_quantized");
    u.cast_node = names.Node(out + "_output_quantized_cast");
    u.cast_output = names.Value(out + "_output_quantized_cast_output");
    u.scales_mul_node = names.Node(op_name + "_scales_mul");
    u.scales_output = names.Value(op_name + "_scales_mul:0");
    u.output_mul_node = names.Node(op_name + "_output_scale_mul");
    u.w_quantized = names.Value(u.weight + "_quantized");
    u.w_scale = names.Value(u.weight + "_scale");
    u.w_zero_point = names.Value(u.weight + "_zero_point");
    if (!u.bias.empty()) {
      u.scaled_output = names.Value(out + "quant_scaled_output");
      u.bias_add_node = names.Node(out + "_bias_add");
      if (n.op_type == "Conv") {
        u.bias_reshape_node = names.Node(out + "_bias_reshape");
        u.reshape_shape = names.Value(out + "_bias_reshape_shape");
        u.reshape_output = names.Value(out + "_bias_reshape_output");
      } else if (FloatAttrOr(n, "beta", 1.0f) != 1.0f) {
        u.scaled_bias = names.Value(u.bias + "_beta_scaled");  // C is a constant (DynamicCandidate)
      }
    }
    plan.units.push_back(std::move(u));
  }
  if (!plan.units.empty() && info.opset < 11) {
    SEQTO_RETURN_IF_ERROR(CheckOpsetUpgrade(info.graph, info.opset, 11, "DynamicQuantizeLinear"));
    plan.target_opset = 11;
  }
  return plan;
}

std::set<std::string> DynamicPlan::InsertedNodes() const {
  std::set<std::string> out;
  for (const auto& a : activations) out.insert(a.node);
  for (const auto& u : units)
    for (const auto* s :
         {&u.op_node, &u.cast_node, &u.scales_mul_node, &u.output_mul_node, &u.bias_reshape_node, &u.bias_add_node})
      if (!s->empty()) out.insert(*s);
  return out;
}

Expected<ir::Model> EmitDynamic(const GraphInfo& info, const QuantOptions& options, const DynamicPlan& plan,
                                ParamCache& cache) {
  ir::Model out = info.model;
  rewrite::GraphPatch patch;
  for (const auto& a : plan.activations) {
    patch.AddNode(MakeNode(a.node, "DynamicQuantizeLinear", {a.name}, {a.quantized, a.scale, a.zero_point}));
  }

  for (const auto& u : plan.units) {
    const ir::Node& n = info.graph.nodes[u.node];
    const DynamicActivation* a = nullptr;
    for (const auto& cand : plan.activations)
      if (cand.name == u.activation) a = &cand;
    if (!a) return InternalError(n.Describe() + ": no DynamicQuantizeLinear planned for its input");
    const bool conv = n.op_type == "Conv";
    const bool gemm = n.op_type == "Gemm";

    RangeOptions ro;
    ro.type = options.weight_type;
    ro.symmetric = WeightSymmetric(options, ro.type);
    ro.reduce_range = options.reduce_range;
    ro.power_of_two = options.power_of_two;
    // ConvInteger takes one weight zero point in ORT: Conv weights are per tensor, as
    // ORT's ConvInteger quantizer does; MatMul weights may be per column.
    std::optional<int64_t> axis;
    if (!conv && options.per_channel) axis = 1;
    Tensor w;
    QuantParams wp;
    if (gemm) {
      w = GemmWeight(*info.Initializer(u.weight), IntAttrOr(n, "transB", 0) != 0, FloatAttrOr(n, "alpha", 1.0f));
      auto p = ComputeWeightParams(w, ro, axis, u.weight);
      if (!p.ok()) return p.error();
      wp = std::move(*p);
    } else {
      w = *info.Initializer(u.weight);
      SEQTO_ASSIGN_OR_RETURN(wp, cache.WeightParams(info, u.weight, ro, axis));
    }
    auto q = QuantizeTensor(w, wp);
    if (!q.ok()) return std::move(q).WithContext("weight '" + u.weight + "'").error();
    patch.SetInitializer(u.w_quantized, std::move(*q));
    patch.SetInitializer(u.w_scale, ScaleTensor(wp));
    patch.SetInitializer(u.w_zero_point, ZeroPointTensor(wp));

    ir::Node op = MakeNode(u.op_node, conv ? "ConvInteger" : "MatMulInteger",
                           {a->quantized, u.w_quantized, a->zero_point, u.w_zero_point}, {u.op_output});
    if (conv) op.attributes = n.attributes;
    patch.AddNode(std::move(op));
    ir::Node cast = MakeNode(u.cast_node, "Cast", {u.op_output}, {u.cast_output});
    cast.attributes["to"] = IntAttr(static_cast<int64_t>(DType::kFloat32));
    patch.AddNode(std::move(cast));
    patch.AddNode(MakeNode(u.scales_mul_node, "Mul", {a->scale, u.w_scale}, {u.scales_output}));
    const std::string& output = n.outputs[0];
    patch.AddNode(MakeNode(u.output_mul_node, "Mul", {u.cast_output, u.scales_output},
                           {u.bias.empty() ? output : u.scaled_output}));
    if (!u.bias.empty()) {
      std::string bias = u.bias;
      if (conv) {
        // ORT reshapes the bias to [1, C, 1, ...] for the broadcast.
        std::vector<int64_t> shape(static_cast<size_t>(info.Initializer(u.weight)->rank()), 1);
        shape[1] = -1;
        patch.SetInitializer(u.reshape_shape, Tensor::FromVector<int64_t>({static_cast<int64_t>(shape.size())}, shape));
        patch.AddNode(MakeNode(u.bias_reshape_node, "Reshape", {u.bias, u.reshape_shape}, {u.reshape_output}));
        bias = u.reshape_output;
      } else if (!u.scaled_bias.empty()) {
        const Tensor& c = *info.Initializer(u.bias);
        const float beta = FloatAttrOr(n, "beta", 1.0f);
        Tensor scaled = c.Clone();
        for (int64_t k = 0; k < scaled.numel(); ++k) scaled.data<float>()[k] *= beta;
        patch.SetInitializer(u.scaled_bias, std::move(scaled));
        bias = u.scaled_bias;
      }
      patch.AddNode(MakeNode(u.bias_add_node, "Add", {u.scaled_output, bias}, {output}));
    }
    patch.RemoveNode(n.name);
  }
  if (plan.target_opset > out.onnx_opset()) {
    out.opsets.erase("ai.onnx");
    out.opsets[""] = plan.target_opset;
  }
  SEQTO_RETURN_IF_ERROR(rewrite::ApplyPatch(out.graph, std::move(patch), "dynamic-quantize"));
  return out;
}

}  // namespace seqto::quant::detail
