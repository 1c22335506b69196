// Static QDQ quantization: marking (ORT's QDQ op quantizers), planning (types,
// scales, names) and emission (one GraphPatch). See qdq_internal.h.
#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>

#include "quant/qdq_internal.h"
#include "rewrite/patch.h"

namespace seqto::quant::detail {

// ---------------------------------------------------------------------------------
// Op kinds and graph facts

const std::map<std::string, OpKind>& StaticOpKinds() {
  // ORT's QDQRegistry; op types missing from it fall back to QDQOperatorBase (every
  // input and output). Flatten is not in ORT's registry: it gets its own parameters
  // there, which equal its input's (same values), so sharing them is the same model.
  static const std::map<std::string, OpKind> kinds = {
      {"Conv", OpKind::kConv},
      {"ConvTranspose", OpKind::kConv},
      {"Gemm", OpKind::kGemm},
      {"MatMul", OpKind::kMatMul},
      {"Relu", OpKind::kRemovableActivation},
      {"Clip", OpKind::kRemovableActivation},
      {"Reshape", OpKind::kPassThrough},
      {"Transpose", OpKind::kPassThrough},
      {"Squeeze", OpKind::kPassThrough},
      {"Unsqueeze", OpKind::kPassThrough},
      {"Flatten", OpKind::kPassThrough},
      {"AveragePool", OpKind::kPassThrough},
      {"MaxPool", OpKind::kPassThrough},
      {"Resize", OpKind::kPassThrough},
      {"Gather", OpKind::kGather},
      {"Add", OpKind::kGeneric},
      {"Mul", OpKind::kGeneric},
      {"Concat", OpKind::kGeneric},
      {"GlobalAveragePool", OpKind::kGeneric},
      {"Sigmoid", OpKind::kGeneric},
      {"Softmax", OpKind::kGeneric},
  };
  return kinds;
}

const std::set<std::string>& StaticOpTypes() {
  static const std::set<std::string> types = [] {
    std::set<std::string> s;
    for (const auto& [op, kind] : StaticOpKinds()) s.insert(op);
    return s;
  }();
  return types;
}

const std::set<std::string>& DynamicOpTypes() {
  static const std::set<std::string> types = {"Conv", "MatMul", "Gemm"};
  return types;
}

GraphInfo::GraphInfo(const ir::Model& m, const TensorRanges* ranges) : model(m), graph(m.graph), opset(m.onnx_opset()) {
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& n = graph.nodes[i];
    node_index[n.name] = i;
    for (const auto& in : n.inputs)
      if (!in.empty()) consumers[in].push_back(i);
    for (const auto& out : n.outputs)
      if (!out.empty()) producer[out] = i;
  }
  auto add = [&](const ir::ValueInfo& v) {
    if (v.is_tensor() && v.dtype == DType::kFloat32 && !graph.initializers.count(v.name)) float_values.insert(v.name);
  };
  for (const auto& v : graph.inputs) {
    graph_inputs.insert(v.name);
    add(v);
  }
  for (const auto& v : graph.outputs) {
    graph_outputs.insert(v.name);
    add(v);
  }
  for (const auto& v : graph.value_infos) add(v);
  // A calibrated tensor is a float32 tensor even where shape inference gave no type.
  if (ranges)
    for (const auto& [name, r] : *ranges)
      if (!graph.initializers.count(name)) float_values.insert(name);
}

bool GraphInfo::IsFloatInitializer(const std::string& name) const {
  auto it = graph.initializers.find(name);
  return it != graph.initializers.end() && it->second.dtype() == DType::kFloat32;
}

bool GraphInfo::IsQuantizable(const std::string& name) const {
  if (name.empty()) return false;
  if (IsInitializer(name)) return IsFloatInitializer(name) && !graph_outputs.count(name);
  return float_values.count(name) != 0;
}

const Tensor* GraphInfo::Initializer(const std::string& name) const {
  auto it = graph.initializers.find(name);
  return it == graph.initializers.end() ? nullptr : &it->second;
}

size_t GraphInfo::NumConsumers(const std::string& name) const {
  auto it = consumers.find(name);
  return it == consumers.end() ? 0 : it->second.size();
}

bool WeightSymmetric(const QuantOptions& options, QuantType type) {
  if (options.weight_symmetric) return *options.weight_symmetric;
  return type == QuantType::kInt8 || type == QuantType::kInt16 || type == QuantType::kInt4;
}

std::optional<int64_t> PerChannelAxis(const GraphInfo& info, const QuantOptions& options, const std::string& weight,
                                      int64_t default_axis) {
  const Tensor* w = info.Initializer(weight);
  if (!w || w->dtype() != DType::kFloat32) return std::nullopt;
  int64_t axis = default_axis;
  auto ov = options.tensor_overrides.find(weight);
  if (ov != options.tensor_overrides.end()) {
    // ORT: per-tensor overrides make the weight per tensor; an axis makes it per channel.
    if (!ov->second.axis) return std::nullopt;
    axis = *ov->second.axis;
  } else if (!options.per_channel) {
    return std::nullopt;
  }
  auto a = NormalizeAxis(axis, w->rank());
  if (!a.ok() || w->rank() == 0) return std::nullopt;
  return *a;
}

// ---------------------------------------------------------------------------------
// Step 1: marking

namespace {

const std::string& Input(const ir::Node& n, size_t k) {
  static const std::string kEmpty;
  return k < n.inputs.size() ? n.inputs[k] : kEmpty;
}
const std::string& Output(const ir::Node& n, size_t k) {
  static const std::string kEmpty;
  return k < n.outputs.size() ? n.outputs[k] : kEmpty;
}

}  // namespace

void AdjustRanges(const GraphInfo& info, const std::vector<bool>& quantized, TensorRanges& ranges) {
  const auto& kinds = StaticOpKinds();
  for (size_t i = 0; i < info.graph.nodes.size(); ++i) {
    if (!quantized[i]) continue;
    const ir::Node& n = info.graph.nodes[i];
    if (!n.domain.empty() && n.domain != "ai.onnx") continue;
    auto kind = kinds.find(n.op_type);
    if (kind == kinds.end()) continue;
    if (kind->second == OpKind::kRemovableActivation) {
      const std::string &in = Input(n, 0), &out = Output(n, 0);
      if (in.empty() || out.empty() || info.NumConsumers(in) != 1) continue;
      if (!ranges.count(in) || !ranges.count(out)) continue;
      ranges[in] = ranges[out];
    } else if (n.op_type == "Softmax" && !Output(n, 0).empty()) {
      TensorRange r;
      r.min = 0.0;
      r.max = 1.0;
      ranges[Output(n, 0)] = r;
    }
  }
}

Marking MarkStatic(const GraphInfo& info, const QuantOptions& options, const TensorRanges& ranges,
                   const std::vector<bool>& quantized) {
  Marking m;
  auto entry = [&](const std::string& t) -> TensorMark& {
    auto [it, inserted] = m.tensors.try_emplace(t);
    if (inserted) m.order.push_back(t);
    return it->second;
  };
  auto marked = [&](const std::string& t) { return m.tensors.count(t) || m.biases.count(t); };
  // ORT's quantize_activation_tensor: mark if quantizable and not marked yet.
  auto act = [&](const std::string& t, size_t i) {
    if (!info.IsQuantizable(t)) return;
    entry(t).requesters.push_back(i);
    m.active.insert(i);
  };
  // quantize_weight_tensor / quantize_weight_tensor_per_channel.
  auto weight = [&](const std::string& t, size_t i, std::optional<int64_t> axis) {
    if (!info.IsQuantizable(t)) return;
    if (!info.IsFloatInitializer(t)) return act(t, i);  // a computed weight: an activation
    const bool is_new = !m.tensors.count(t);
    TensorMark& mk = entry(t);
    if (is_new || axis) {
      mk.weight = true;
      mk.axis = axis;
      mk.provider.clear();
    }
    mk.requesters.push_back(i);
    m.active.insert(i);
  };
  // quantize_output_same_as_input: overrides any earlier marking.
  auto share = [&](const std::string& out, const std::string& in, size_t i) {
    if (!info.IsQuantizable(out) || info.IsInitializer(out)) return;
    TensorMark& mk = entry(out);
    mk.weight = false;
    mk.axis.reset();
    mk.provider = in;
    mk.requesters.push_back(i);
    // The pass-through also needs its input quantized (a fallback widens both).
    if (auto it = m.tensors.find(in); it != m.tensors.end()) it->second.requesters.push_back(i);
    m.active.insert(i);
  };
  auto bias = [&](const std::string& b, const std::string& in, const std::string& w, float beta, size_t i) {
    if (b.empty()) return;
    if (options.tensor_overrides.count(b)) {
      // ORT: a bias with overrides is quantized as a regular weight.
      return weight(b, i, PerChannelAxis(info, options, b, 0));
    }
    if (!options.quantize_bias || !info.IsFloatInitializer(b) || info.graph_outputs.count(b)) return;
    if (!m.biases.count(b)) {
      m.biases[b] = BiasMark{in, w, beta, i};
      m.bias_order.push_back(b);
    }
    m.active.insert(i);
  };

  const auto& kinds = StaticOpKinds();
  for (size_t i = 0; i < info.graph.nodes.size(); ++i) {
    if (!quantized[i]) continue;
    const ir::Node& n = info.graph.nodes[i];
    if (!n.domain.empty() && n.domain != "ai.onnx") continue;
    auto kind_it = kinds.find(n.op_type);
    if (kind_it == kinds.end()) continue;
    switch (kind_it->second) {
      case OpKind::kConv: {
        act(Input(n, 0), i);
        act(Output(n, 0), i);
        weight(Input(n, 1), i, PerChannelAxis(info, options, Input(n, 1), n.op_type == "ConvTranspose" ? 1 : 0));
        bias(Input(n, 2), Input(n, 0), Input(n, 1), 1.0f, i);
        break;
      }
      case OpKind::kGemm: {
        const int64_t trans_b = n.attr_int("transB", 0).ok() ? *n.attr_int("transB", 0) : 0;
        const float beta = n.attr_float("beta", 1.0f).ok() ? *n.attr_float("beta", 1.0f) : 1.0f;
        act(Input(n, 0), i);
        act(Output(n, 0), i);
        weight(Input(n, 1), i, PerChannelAxis(info, options, Input(n, 1), trans_b ? 0 : 1));
        if (info.IsInitializer(Input(n, 2))) bias(Input(n, 2), Input(n, 0), Input(n, 1), beta, i);
        break;
      }
      case OpKind::kMatMul: {
        for (const auto& t : n.inputs) {
          if (t.empty()) continue;
          if (info.IsInitializer(t)) {
            // The output-channel axis of B: 1 for the usual 2-D weight (ORT's default);
            // the last axis for stacked weights.
            const Tensor* w = info.Initializer(t);
            const int64_t axis = w && w->rank() >= 2 ? w->rank() - 1 : 1;
            weight(t, i, PerChannelAxis(info, options, t, axis));
          } else {
            act(t, i);
          }
        }
        act(Output(n, 0), i);
        break;
      }
      case OpKind::kRemovableActivation: {
        const std::string &in = Input(n, 0), &out = Output(n, 0);
        if (!marked(in)) break;  // ORT keeps the node as it is
        // ORT removes the activation and lets the producer write its output: the Q/DQ
        // after it clamps to the same range. seqto keeps the node (the result is the
        // same, and ORT's own optimizer removes it again) but, like ORT, puts no Q/DQ
        // between the producer and the activation.
        const bool removable = !options.activation_symmetric && ranges.count(in) && ranges.count(out) &&
                               info.NumConsumers(in) == 1 && !info.graph_outputs.count(in) &&
                               !info.graph_inputs.count(in) && info.producer.count(in) && m.tensors.count(in);
        if (removable) {
          m.tensors.erase(in);
          m.order.erase(std::remove(m.order.begin(), m.order.end(), in), m.order.end());
          m.folded[i] = info.producer.at(in);
          m.active.insert(i);
        } else {
          act(in, i);
        }
        act(out, i);
        break;
      }
      case OpKind::kPassThrough: {
        // ORT: MaxPool needs opset 12 for 8-bit inputs, Resize opset 11.
        if (n.op_type == "MaxPool" && info.opset < 12) break;
        if (n.op_type == "Resize" && info.opset < 11) break;
        if (m.tensors.count(Input(n, 0))) share(Output(n, 0), Input(n, 0), i);
        break;
      }
      case OpKind::kGather: {
        const std::string& data = Input(n, 0);
        if (info.IsFloatInitializer(data)) {
          act(data, i);
          if (m.tensors.count(data)) share(Output(n, 0), data, i);
        } else if (m.tensors.count(data)) {
          share(Output(n, 0), data, i);
        }
        break;
      }
      case OpKind::kGeneric: {
        for (const auto& t : n.inputs) act(t, i);
        for (const auto& t : n.outputs) act(t, i);
        break;
      }
    }
  }
  return m;
}

// ---------------------------------------------------------------------------------
// Step 2: planning

Expected<QuantParams> ParamCache::WeightParams(const GraphInfo& info, const std::string& name,
                                               const RangeOptions& options, std::optional<int64_t> axis) {
  char key_buf[64];
  std::snprintf(key_buf, sizeof key_buf, "|%d|%d|%d|%d|%" PRId64, static_cast<int>(options.type),
                options.symmetric ? 1 : 0, options.reduce_range ? 1 : 0, options.power_of_two ? 1 : 0,
                axis ? *axis : int64_t{-1});
  const std::string key = name + key_buf;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = params_.find(key);
    if (it != params_.end()) return it->second;
  }
  const Tensor* w = info.Initializer(name);
  if (!w) return InternalError("weight '" + name + "' is not an initializer");
  SEQTO_ASSIGN_OR_RETURN(QuantParams p, ComputeWeightParams(*w, options, axis, name));
  std::lock_guard<std::mutex> lock(mutex_);
  params_[key] = p;
  return p;
}

NameAllocator::NameAllocator(const ir::Graph& graph) {
  for (const auto& v : graph.inputs) values_.insert(v.name);
  for (const auto& v : graph.outputs) values_.insert(v.name);
  for (const auto& [name, t] : graph.initializers) values_.insert(name);
  for (const auto& n : graph.nodes) {
    nodes_.insert(n.name);
    for (const auto& v : n.inputs) values_.insert(v);
    for (const auto& v : n.outputs) values_.insert(v);
  }
}

namespace {
std::string Fresh(std::set<std::string>& used, const std::string& base) {
  std::string name = base;
  for (int k = 1; used.count(name); ++k) name = base + "_" + std::to_string(k);
  used.insert(name);
  return name;
}
}  // namespace

std::string NameAllocator::Value(const std::string& base) { return Fresh(values_, base); }
std::string NameAllocator::Node(const std::string& base) { return Fresh(nodes_, base); }

ir::Attribute IntAttr(int64_t v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInt;
  a.i = v;
  return a;
}

ir::Attribute FloatAttr(float v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kFloat;
  a.f = v;
  return a;
}

Tensor ScaleTensor(const QuantParams& p) {
  if (p.per_channel()) return Tensor::FromVector<float>({static_cast<int64_t>(p.scale.size())}, p.scale);
  return Tensor::Scalar<float>(p.scale[0]);
}

Tensor ZeroPointTensor(const QuantParams& p) {
  const DType dt = StorageDType(p.type);
  Shape shape;
  if (p.per_channel()) shape = {static_cast<int64_t>(p.zero_point.size())};
  Tensor t(dt, shape);
  VisitNumeric(dt, [&](auto tag) {
    using T = decltype(tag);
    T* d = t.data<T>();
    for (size_t i = 0; i < p.zero_point.size(); ++i) d[i] = static_cast<T>(p.zero_point[i]);
  });
  return t;
}

namespace {

bool Is16Bit(QuantType t) { return t == QuantType::kInt16 || t == QuantType::kUInt16; }

std::string Hex(float f) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%a", static_cast<double>(f));
  return buf;
}

std::string ParamsKey(const QuantParams& p) {
  std::string s = QuantTypeName(p.type);
  if (p.axis) s += "@" + std::to_string(*p.axis);
  for (size_t i = 0; i < p.scale.size(); ++i)
    s += ";" + Hex(p.scale[i]) + "," + std::to_string(i < p.zero_point.size() ? p.zero_point[i] : 0);
  return s;
}

Precision TensorPrecision(const TensorMark& mk, const std::vector<Precision>& precision) {
  Precision p = Precision::kBase;
  for (size_t r : mk.requesters)
    if (precision[r] != Precision::kBase) p = precision[r];
  return p;
}

}  // namespace

Expected<StaticPlan> PlanStatic(const GraphInfo& info, const QuantOptions& options, const TensorRanges& ranges,
                                const Marking& marking, const std::vector<Precision>& precision, ParamCache& cache,
                                const Refinements& refinements) {
  StaticPlan plan;
  plan.target_opset = info.opset;
  NameAllocator names(info.graph);
  std::map<std::string, size_t> planned;  // tensor -> index in plan.tensors

  auto override_of = [&](const std::string& t) -> const TensorOverride* {
    auto it = options.tensor_overrides.find(t);
    return it == options.tensor_overrides.end() ? nullptr : &it->second;
  };
  // An override's own scale and zero point, as the type the tensor gets: a zero point
  // outside the type would wrap when stored (999 as uint8 is 231).
  auto override_params = [&](const std::string& t, const TensorOverride& ov, QuantType type) -> Expected<QuantParams> {
    const QRange r = GetQRange(type, /*symmetric=*/false, /*reduce_range=*/false);
    if (*ov.zero_point < r.qmin || *ov.zero_point > r.qmax)
      return UserError("TensorQuantOverrides: tensor '" + t + "': zero_point " + std::to_string(*ov.zero_point) +
                       " is outside the range of " + QuantTypeName(type) + " [" + std::to_string(r.qmin) + ", " +
                       std::to_string(r.qmax) + "]");
    QuantParams qp;
    qp.type = type;
    qp.scale = {*ov.scale};
    qp.zero_point = {*ov.zero_point};
    return qp;
  };

  // Q/DQ (or Cast) names of an activation.
  auto name_activation = [&](PlannedTensor& pt) {
    const std::string& t = pt.name;
    const bool output = info.graph_outputs.count(t) && !info.graph_inputs.count(t) && info.producer.count(t);
    pt.graph_output = output;
    const char* q_suffix = pt.fp16 ? "_CastToFloat16" : "_QuantizeLinear";
    const char* dq_suffix = pt.fp16 ? "_CastToFloat" : "_DequantizeLinear";
    pt.q_node = names.Node(t + q_suffix);
    pt.dq_node = names.Node(t + dq_suffix);
    pt.q_output = names.Value(t + (pt.fp16 ? "_Float16" : "_QuantizeLinear_Output"));
    if (output) {
      pt.q_input = names.Value(t + q_suffix + "_Input");
      pt.dq_output = t;
    } else {
      pt.q_input = t;
      pt.dq_output = names.Value(t + (pt.fp16 ? "_Float16_Output" : "_DequantizeLinear_Output"));
    }
  };

  // Own parameters of an activation from its calibrated range (and overrides).
  auto activation_params = [&](const std::string& t, Precision p) -> Expected<QuantParams> {
    const TensorOverride* ov = override_of(t);
    QuantParams qp;
    qp.type = ov && ov->quant_type
                  ? *ov->quant_type
                  : (p == Precision::kInt16 || p == Precision::kInt16Activations ? QuantType::kInt16
                                                                                 : options.activation_type);
    if (ov && ov->scale && ov->zero_point) return override_params(t, *ov, qp.type);
    auto r = ranges.find(t);
    if (r == ranges.end() && !(ov && ov->rmin && ov->rmax))
      return UserError("tensor '" + t +
                       "': no calibrated range (calibrate the tensors QuantPlan::TensorsToCalibrate lists)");
    RangeOptions ro;
    ro.type = qp.type;
    ro.symmetric = ov && ov->symmetric ? *ov->symmetric : options.activation_symmetric;
    ro.reduce_range = ov && ov->reduce_range ? *ov->reduce_range : false;
    ro.power_of_two = options.power_of_two;
    const double rmin = ov && ov->rmin ? *ov->rmin : r->second.min;
    const double rmax = ov && ov->rmax ? *ov->rmax : r->second.max;
    SEQTO_ASSIGN_OR_RETURN(ScaleZeroPoint sz, ComputeScaleZeroPoint(rmin, rmax, ro, "tensor '" + t + "'"));
    qp.scale = {sz.scale};
    qp.zero_point = {sz.zero_point};
    return qp;
  };

  // Parameters of a quantized initializer (weight, or a constant input quantized as
  // an activation).
  auto initializer_params = [&](const std::string& t, const TensorMark& mk, Precision p,
                                std::string* key) -> Expected<QuantParams> {
    const TensorOverride* ov = override_of(t);
    QuantType type;
    if (ov && ov->quant_type)
      type = *ov->quant_type;
    else if (p == Precision::kInt16 || (p == Precision::kInt16Activations && !mk.weight))
      type = QuantType::kInt16;
    else if (mk.weight)
      type = options.weight_type;
    else
      type = options.activation_type;
    // ORT forces per-channel weights to int8 (QLinearConv wants one zero point).
    if (mk.axis && type == QuantType::kUInt8 && !(ov && ov->quant_type)) type = QuantType::kInt8;
    if (ov && ov->scale && ov->zero_point) {
      SEQTO_ASSIGN_OR_RETURN(QuantParams qp, override_params(t, *ov, type));
      *key = ParamsKey(qp);
      return qp;
    }
    RangeOptions ro;
    ro.type = type;
    bool symmetric;
    if (p == Precision::kInt16 && mk.weight)
      symmetric = true;  // the int16 fallback's weights
    else if (mk.axis || type == options.weight_type)
      symmetric = WeightSymmetric(options, type);
    else
      symmetric = options.activation_symmetric;
    ro.symmetric = ov && ov->symmetric ? *ov->symmetric : symmetric;
    // ORT reduces the range of per-channel weights only (quantize_initializer passes
    // reduce_range=False for per-tensor QDQ weights).
    ro.reduce_range = ov && ov->reduce_range ? *ov->reduce_range : (mk.axis ? options.reduce_range : false);
    ro.power_of_two = options.power_of_two;
    if (ov && ov->rmin && ov->rmax && !mk.axis) {
      SEQTO_ASSIGN_OR_RETURN(ScaleZeroPoint sz, ComputeScaleZeroPoint(*ov->rmin, *ov->rmax, ro, "tensor '" + t + "'"));
      QuantParams qp;
      qp.type = type;
      qp.scale = {sz.scale};
      qp.zero_point = {sz.zero_point};
      *key = ParamsKey(qp);
      return qp;
    }
    // The parameters follow from the weight and these options: the key names them
    // without printing every channel's scale.
    *key = "W " + QuantTypeName(type) + (mk.axis ? "@" + std::to_string(*mk.axis) : "") + (ro.symmetric ? " sym" : "") +
           (ro.reduce_range ? " rr" : "") + (ro.power_of_two ? " p2" : "");
    return cache.WeightParams(info, t, ro, mk.axis);
  };

  auto plan_tensor = [&](const std::string& t, const TensorMark& mk, bool shared_ok) -> Status {
    const Precision p = TensorPrecision(mk, precision);
    PlannedTensor pt;
    pt.name = t;
    pt.root = t;
    pt.initializer = info.IsInitializer(t);
    pt.fp16 = p == Precision::kFloat16;
    pt.precision = p;
    if (pt.initializer) {
      if (pt.fp16) {
        pt.quantized_name = names.Value(t + "_float16");
        pt.dq_node = names.Node(t + "_CastToFloat");
        pt.dq_output = names.Value(t + "_Float16_Output");
      } else {
        SEQTO_ASSIGN_OR_RETURN(pt.params, initializer_params(t, mk, p, &pt.key));
        pt.quantized_name = names.Value(t + "_quantized");
        pt.scale_name = names.Value(t + "_scale");
        pt.zp_name = names.Value(t + "_zero_point");
        pt.dq_node = names.Node(t + "_DequantizeLinear");
        pt.dq_output = names.Value(t + "_DequantizeLinear_Output");
      }
    } else {
      if (!pt.fp16) {
        // A pass-through output shares its input's parameters, unless the two were
        // given different precisions by a fallback.
        bool shared = false;
        if (shared_ok && !mk.provider.empty()) {
          auto prov = planned.find(mk.provider);
          if (prov != planned.end()) {
            const PlannedTensor& root = plan.tensors[prov->second];
            const bool same_precision =
                !root.fp16 && (TensorPrecision(marking.tensors.at(mk.provider), precision) == p);
            if (same_precision || (!ranges.count(t) && !root.fp16)) {
              pt.params = root.params;
              pt.key = root.key;
              pt.root = root.root;
              pt.scale_name = root.scale_name;
              pt.zp_name = root.zp_name;
              shared = true;
            }
          }
        }
        if (!shared) {
          SEQTO_ASSIGN_OR_RETURN(pt.params, activation_params(t, p));
          pt.key = ParamsKey(pt.params);
          pt.scale_name = names.Value(t + "_scale");
          pt.zp_name = names.Value(t + "_zero_point");
        }
      }
      name_activation(pt);
    }
    planned[t] = plan.tensors.size();
    plan.tensors.push_back(std::move(pt));
    return Status::Ok();
  };

  // Tensors with their own parameters first, then the ones that share them (in
  // marking order; a chain of pass-through ops resolves front to back).
  for (const auto& t : marking.order) {
    const TensorMark& mk = marking.tensors.at(t);
    if (!mk.provider.empty()) continue;
    if (Status s = plan_tensor(t, mk, false); !s.ok()) return s.error();
  }
  for (bool progress = true; progress;) {
    progress = false;
    for (const auto& t : marking.order) {
      const TensorMark& mk = marking.tensors.at(t);
      if (mk.provider.empty() || planned.count(t)) continue;
      if (marking.tensors.count(mk.provider) && !planned.count(mk.provider)) continue;  // provider first
      if (Status s = plan_tensor(t, mk, true); !s.ok()) return s.error();
      progress = true;
    }
  }
  for (const auto& t : marking.order)
    if (!planned.count(t)) return InternalError("tensor '" + t + "': shared quantization parameters form a cycle");

  // Biases: int32 with scale s_in * s_w * beta, zero point 0.
  // The quantized input and weight of a bias, or none when it stays float.
  struct BiasOperands {
    size_t input = 0, weight = 0;  // in plan.tensors
    const Tensor* bias = nullptr;  // the float bias (its corrected value, if any)
  };
  auto bias_operands = [&](const std::string& b) -> std::optional<BiasOperands> {
    const BiasMark& bm = marking.biases.at(b);
    if (precision[bm.node] == Precision::kFloat16) return std::nullopt;
    auto in = planned.find(bm.input);
    auto w = planned.find(bm.weight);
    if (in == planned.end() || w == planned.end()) return std::nullopt;  // nothing to scale by: stays float
    const PlannedTensor &pin = plan.tensors[in->second], &pw = plan.tensors[w->second];
    if (pin.fp16 || pw.fp16 || pin.params.scale.size() != 1) return std::nullopt;
    BiasOperands ops{in->second, w->second, info.Initializer(b)};
    if (pw.params.per_channel() && static_cast<size_t>(ops.bias->numel()) != pw.params.scale.size())
      return std::nullopt;
    // A corrected bias (bias correction) belongs to the quantized node only: at the
    // plan's precision, or with 16-bit activations, where the node keeps the plan's
    // weights and most of what the correction repairs is their rounding (on
    // MobileNetV2 every group at 16-bit activations after cle + bias correction:
    // 23.0 dB output SQNR with the corrections, 14.9 dB without).
    const auto keeps_plan_weights = [](Precision p) {
      return p == Precision::kBase || p == Precision::kInt16Activations;
    };
    // Measured with 16-bit activations where the node has them (Refinements).
    if (const Tensor* refined = refinements.Value(b, precision[bm.node] == Precision::kInt16Activations);
        refined && keeps_plan_weights(precision[bm.node]) && keeps_plan_weights(pin.precision) &&
        keeps_plan_weights(pw.precision) && refined->numel() == ops.bias->numel())
      ops.bias = refined;
    return ops;
  };
  auto with_beta = [](QuantParams wp, float beta) {
    if (beta != 1.0f)
      for (float& s : wp.scale) s *= beta;
    return wp;
  };

  // A bias that int32 cannot hold at scale s_in * s_w (16-bit inputs and weights have
  // tiny scales; so do the weights of a dead channel, e.g. a folded BatchNorm whose
  // gamma is ~0) would saturate and change the results. As ONNX Runtime's quantizer
  // does (QDQDisableWeightAdjustForInt32Bias off), the weight's scale grows instead,
  // per channel, here by the smallest power of two that makes every bias it scales
  // fit with one bit of headroom (ORT's kernels add the bias to int32 accumulators).
  // The bias scale stays exactly s_in * s_w: integer kernels (ORT's QLinearConv,
  // seqto's fused ones) read the int32 bias at that scale and ignore its own. The
  // factor follows from the float bias, not a corrected one, so learned rounding sees
  // the grid the final model has. (The bias must not stay float either: ONNX Runtime
  // quantizes a float bias next to quantized weights itself, and wraps around on
  // overflow.)
  std::map<size_t, std::vector<int>> widen;  // weight (in plan.tensors) -> exponent per scale
  for (const auto& b : marking.bias_order) {
    if (marking.tensors.count(b)) continue;  // quantized as a tensor already (ORT skips it too)
    auto ops = bias_operands(b);
    if (!ops) continue;
    const PlannedTensor &pin = plan.tensors[ops->input], &pw = plan.tensors[ops->weight];
    auto exponents = BiasScaleExponents(*info.Initializer(b), pin.params.scale[0],
                                        with_beta(pw.params, marking.biases.at(b).beta), INT32_MAX / 2);
    if (!exponents.ok()) return std::move(exponents).WithContext("bias '" + b + "'").error();
    auto [it, fresh] = widen.try_emplace(ops->weight, *exponents);
    for (size_t c = 0; !fresh && c < exponents->size(); ++c) it->second[c] = std::max(it->second[c], (*exponents)[c]);
  }
  for (const auto& [weight, exponents] : widen) {
    if (std::all_of(exponents.begin(), exponents.end(), [](int k) { return k == 0; })) continue;
    const std::string root = plan.tensors[weight].root;
    std::string note = " bias-fit";
    for (size_t c = 0; c < exponents.size(); ++c)
      if (exponents[c] != 0) note += " " + std::to_string(c) + ":" + std::to_string(exponents[c]);
    // Every tensor that uses the weight's scale initializers takes the new scale.
    for (PlannedTensor& t : plan.tensors) {
      if (t.fp16 || t.root != root) continue;
      for (size_t c = 0; c < t.params.scale.size(); ++c)
        t.params.scale[c] = std::ldexp(t.params.scale[c], exponents[c]);
      t.key += note;
    }
  }

  for (const auto& b : marking.bias_order) {
    if (marking.tensors.count(b)) continue;  // quantized as a tensor already (ORT skips it too)
    const BiasMark& bm = marking.biases.at(b);
    PlannedBias pb;
    pb.name = b;
    pb.node = bm.node;
    pb.beta = bm.beta;
    pb.fp16 = precision[bm.node] == Precision::kFloat16;
    if (pb.fp16) {
      pb.quantized_name = names.Value(b + "_float16");
      pb.dq_node = names.Node(b + "_CastToFloat");
      plan.biases.push_back(std::move(pb));
      continue;
    }
    auto ops = bias_operands(b);
    if (!ops) continue;
    const PlannedTensor &pin = plan.tensors[ops->input], &pw = plan.tensors[ops->weight];
    auto q = QuantizeBias(*ops->bias, pin.params.scale[0], with_beta(pw.params, bm.beta), &pb.params);
    if (!q.ok()) return std::move(q).WithContext("bias '" + b + "'").error();
    pb.quantized = std::move(*q);
    pb.key = pin.key + " * " + pw.key + (bm.beta != 1.0f ? " * " + Hex(bm.beta) : "");
    pb.quantized_name = names.Value(b + "_quantized");
    pb.scale_name = names.Value(b + "_quantized_scale");
    pb.zp_name = names.Value(b + "_quantized_zero_point");
    pb.dq_node = names.Node(b + "_DequantizeLinear");
    if (bm.beta != 1.0f) plan.beta_reset.insert(bm.node);
    plan.biases.push_back(std::move(pb));
  }

  bool per_channel = false;
  for (const auto& pt : plan.tensors) {
    if (pt.fp16) continue;
    if (pt.params.per_channel()) per_channel = true;
    if (Is16Bit(pt.params.type) && info.opset < 21) plan.ms_domain = true;
    if (pt.params.type == QuantType::kInt4 || pt.params.type == QuantType::kUInt4)
      return UserError("tensor '" + pt.name + "': 4-bit quantization is not supported yet");
    if (pt.params.type == QuantType::kInt32) return UserError("tensor '" + pt.name + "': int32 is only a bias type");
  }
  for (const auto& pb : plan.biases)
    if (!pb.fp16 && pb.params.per_channel()) per_channel = true;
  const bool any_qdq = std::any_of(plan.tensors.begin(), plan.tensors.end(), [](const auto& t) { return !t.fp16; });
  const int64_t needed = per_channel ? 13 : (any_qdq ? 10 : 0);
  if (info.opset < needed) {
    SEQTO_RETURN_IF_ERROR(CheckOpsetUpgrade(
        info.graph, info.opset, needed,
        per_channel ? "per-channel QuantizeLinear/DequantizeLinear" : "QuantizeLinear/DequantizeLinear"));
    plan.target_opset = needed;
  }
  return plan;
}

std::map<std::string, std::string> StaticPlan::Signature() const {
  static const std::string kF16 = "F16";
  std::map<std::string, std::string> sig;
  for (const auto& t : tensors) {
    const std::string& what = t.fp16 ? kF16 : t.key;
    if (!t.initializer) sig[t.q_node] = "Q " + t.name + " " + what;
    sig[t.dq_node] = "DQ " + t.name + " " + what;
  }
  for (const auto& b : biases) sig[b.dq_node] = "B " + b.name + " " + (b.fp16 ? kF16 : b.key);
  return sig;
}

std::set<std::string> StaticPlan::InsertedNodes() const {
  std::set<std::string> out;
  for (const auto& [name, what] : Signature()) out.insert(name);
  return out;
}

// ---------------------------------------------------------------------------------
// Step 3: emission

namespace {

Tensor ToHalf(const Tensor& x) {
  Tensor h(DType::kFloat16, x.shape());
  const float* in = x.data<float>();
  uint16_t* out = h.data<uint16_t>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = FloatToHalf(in[i]);
  return h;
}

ir::Node MakeNode(const std::string& name, const std::string& op, const std::string& domain,
                  std::vector<std::string> inputs, std::vector<std::string> outputs) {
  ir::Node n;
  n.name = name;
  n.op_type = op;
  n.domain = domain;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

}  // namespace

// The integers of a quantized initializer: its learned rounding or its refined float
// values when the plan has them (at the plan's own precision only), else its own
// values rounded.
Expected<Tensor> QuantizedInitializer(const Tensor& w, const PlannedTensor& pt, const Refinements& refinements) {
  // A 16-bit-activation group keeps the plan's weights, learned rounding included.
  const bool plan_weights = pt.precision == Precision::kBase || pt.precision == Precision::kInt16Activations;
  if (plan_weights) {
    if (auto it = refinements.weight_integers.find(pt.name); it != refinements.weight_integers.end()) {
      if (it->second.dtype() != StorageDType(pt.params.type) || it->second.shape() != w.shape())
        return InternalError("tensor '" + pt.name + "': its refined integers do not match its quantization");
      return it->second;
    }
  }
  // A corrected constant quantized as an activation: 16-bit in a group with 16-bit
  // activations, which takes the value measured so (Refinements).
  if (plan_weights)
    if (const Tensor* refined = refinements.Value(pt.name, pt.precision == Precision::kInt16Activations))
      return QuantizeTensor(*refined, pt.params);
  return QuantizeTensor(w, pt.params);
}

Expected<ir::Model> EmitStatic(const GraphInfo& info, const StaticPlan& plan, const Refinements& refinements) {
  ir::Model out = info.model;
  rewrite::GraphPatch patch;
  std::map<size_t, ir::Node> edited;
  auto edit = [&](size_t i) -> ir::Node& {
    auto it = edited.find(i);
    if (it == edited.end()) it = edited.emplace(i, info.graph.nodes[i]).first;
    return it->second;
  };
  // Every reader of `from` reads `to` (ORT's replace_input_of_all_nodes).
  auto redirect = [&](const std::string& from, const std::string& to) {
    auto it = info.consumers.find(from);
    if (it == info.consumers.end()) return;
    for (size_t c : it->second)
      for (auto& in : edit(c).inputs)
        if (in == from) in = to;
  };
  // The producer of a graph output writes `to` instead; the DQ writes the output.
  auto rename_output = [&](const std::string& from, const std::string& to) {
    ir::Node& p = edit(info.producer.at(from));
    for (auto& o : p.outputs)
      if (o == from) o = to;
  };
  const std::string domain = plan.ms_domain ? "com.microsoft" : "";

  for (const auto& pt : plan.tensors) {
    const std::string& t = pt.name;
    if (pt.initializer) {
      const Tensor* w = info.Initializer(t);
      if (pt.fp16) {
        patch.SetInitializer(pt.quantized_name, ToHalf(*w));
        ir::Node cast = MakeNode(pt.dq_node, "Cast", "", {pt.quantized_name}, {pt.dq_output});
        cast.attributes["to"] = IntAttr(static_cast<int64_t>(DType::kFloat32));
        patch.AddNode(std::move(cast));
      } else {
        auto q = QuantizedInitializer(*w, pt, refinements);
        if (!q.ok()) return std::move(q).WithContext("tensor '" + t + "'").error();
        patch.SetInitializer(pt.quantized_name, std::move(*q));
        patch.SetInitializer(pt.scale_name, ScaleTensor(pt.params));
        patch.SetInitializer(pt.zp_name, ZeroPointTensor(pt.params));
        ir::Node dq = MakeNode(pt.dq_node, "DequantizeLinear", domain, {pt.quantized_name, pt.scale_name, pt.zp_name},
                               {pt.dq_output});
        if (pt.params.per_channel()) dq.attributes["axis"] = IntAttr(*pt.params.axis);
        patch.AddNode(std::move(dq));
      }
      redirect(t, pt.dq_output);
      continue;
    }
    if (pt.graph_output)
      rename_output(t, pt.q_input);
    else
      redirect(t, pt.dq_output);
    if (pt.fp16) {
      ir::Node to16 = MakeNode(pt.q_node, "Cast", "", {pt.q_input}, {pt.q_output});
      to16.attributes["to"] = IntAttr(static_cast<int64_t>(DType::kFloat16));
      ir::Node to32 = MakeNode(pt.dq_node, "Cast", "", {pt.q_output}, {pt.dq_output});
      to32.attributes["to"] = IntAttr(static_cast<int64_t>(DType::kFloat32));
      patch.AddNode(std::move(to16));
      patch.AddNode(std::move(to32));
      continue;
    }
    if (pt.root == t) {
      patch.SetInitializer(pt.scale_name, ScaleTensor(pt.params));
      patch.SetInitializer(pt.zp_name, ZeroPointTensor(pt.params));
    }
    patch.AddNode(
        MakeNode(pt.q_node, "QuantizeLinear", domain, {pt.q_input, pt.scale_name, pt.zp_name}, {pt.q_output}));
    patch.AddNode(
        MakeNode(pt.dq_node, "DequantizeLinear", domain, {pt.q_output, pt.scale_name, pt.zp_name}, {pt.dq_output}));
  }

  for (const auto& pb : plan.biases) {
    patch.RemoveInitializer(pb.name);
    if (pb.fp16) {
      patch.SetInitializer(pb.quantized_name, ToHalf(*info.Initializer(pb.name)));
      ir::Node cast = MakeNode(pb.dq_node, "Cast", "", {pb.quantized_name}, {pb.name});
      cast.attributes["to"] = IntAttr(static_cast<int64_t>(DType::kFloat32));
      patch.AddNode(std::move(cast));
      continue;
    }
    patch.SetInitializer(pb.quantized_name, pb.quantized);
    patch.SetInitializer(pb.scale_name, ScaleTensor(pb.params));
    patch.SetInitializer(pb.zp_name, ZeroPointTensor(pb.params));
    ir::Node dq =
        MakeNode(pb.dq_node, "DequantizeLinear", domain, {pb.quantized_name, pb.scale_name, pb.zp_name}, {pb.name});
    if (pb.params.per_channel()) dq.attributes["axis"] = IntAttr(0);
    patch.AddNode(std::move(dq));
  }
  for (size_t i : plan.beta_reset) edit(i).attributes["beta"] = FloatAttr(1.0f);
  for (auto& [i, node] : edited) patch.ReplaceNode(std::move(node));

  if (plan.target_opset > out.onnx_opset()) {
    out.opsets.erase("ai.onnx");
    out.opsets[""] = plan.target_opset;
    if (plan.target_opset >= 13) out.ir_version = std::max<int64_t>(out.ir_version, 7);
  }
  if (plan.ms_domain && !out.opsets.count("com.microsoft")) out.opsets["com.microsoft"] = 1;
  SEQTO_RETURN_IF_ERROR(rewrite::ApplyPatch(out.graph, std::move(patch), "qdq-insert"));
  return out;
}

// ---------------------------------------------------------------------------------
// Opset upgrades

Status CheckOpsetUpgrade(const ir::Graph& graph, int64_t from, int64_t target, const std::string& why) {
  // Opsets at which an op's meaning (not just its types) changed. Upgrading from
  // `from` to `target` is safe when no change lies in (from, target].
  static const std::map<std::string, std::vector<int64_t>> kChanges = {
      {"Add", {7}},
      {"Sub", {7}},
      {"Mul", {7}},
      {"Div", {7}},
      {"Pow", {7}},
      {"PRelu", {7}},
      {"Equal", {7}},
      {"Greater", {7}},
      {"Less", {7}},
      {"And", {7}},
      {"Or", {7}},
      {"Xor", {7}},
      {"Not", {}},
      {"Gemm", {7}},
      {"MatMul", {}},
      {"Conv", {}},
      {"ConvTranspose", {}},
      {"Relu", {6}},
      {"Sigmoid", {6}},
      {"Tanh", {6}},
      {"Exp", {6}},
      {"Log", {6}},
      {"Neg", {6}},
      {"Abs", {6}},
      {"Sqrt", {6}},
      {"Floor", {6}},
      {"Ceil", {6}},
      {"Reciprocal", {6}},
      {"LeakyRelu", {6}},
      {"Elu", {6}},
      {"Selu", {6}},
      {"HardSigmoid", {6}},
      {"Softplus", {}},
      {"Softsign", {}},
      {"Erf", {}},
      {"Sign", {}},
      {"Clip", {6, 11}},
      {"Softmax", {13}},
      {"LogSoftmax", {13}},
      {"Hardmax", {13}},
      {"Concat", {4}},
      {"Reshape", {5}},
      {"Flatten", {}},
      {"Transpose", {}},
      {"Squeeze", {13}},
      {"Unsqueeze", {13}},
      {"Split", {2, 13}},
      {"Slice", {10}},
      {"Pad", {2, 11}},
      {"Resize", {11}},
      {"Upsample", {7, 9, 10}},
      {"Dropout", {6, 7, 10, 12}},
      {"BatchNormalization", {6, 7, 9}},
      {"InstanceNormalization", {6}},
      {"AveragePool", {7}},
      {"MaxPool", {}},
      {"GlobalAveragePool", {}},
      {"GlobalMaxPool", {}},
      {"LRN", {}},
      {"Cast", {6}},
      {"TopK", {10}},
      {"Sum", {6, 8}},
      {"Max", {6, 8}},
      {"Min", {6, 8}},
      {"Mean", {6, 8}},
      {"Gather", {}},
      {"Identity", {}},
      {"Constant", {}},
      {"Shape", {}},
      {"Expand", {}},
      {"Where", {}},
      {"Tile", {6}},
      {"ReduceSum", {13}},
      {"ReduceMean", {}},
      {"ReduceMax", {}},
      {"ReduceMin", {}},
      {"ReduceProd", {}},
      {"ReduceL1", {}},
      {"ReduceL2", {}},
      {"ReduceLogSum", {}},
      {"ReduceSumSquare", {}},
      {"ArgMax", {}},
      {"ArgMin", {}},
      {"DepthToSpace", {}},
      {"SpaceToDepth", {}},
      {"Range", {}},
      {"ConstantOfShape", {}},
      {"NonZero", {}},
      {"Einsum", {}},
      {"Mod", {}},
      {"QuantizeLinear", {}},
      {"DequantizeLinear", {}},
  };
  for (const ir::Node& n : graph.nodes) {
    if (!n.domain.empty() && n.domain != "ai.onnx") continue;
    auto it = kChanges.find(n.op_type);
    std::string blocker;
    if (it == kChanges.end()) {
      blocker = "seqto does not know whether " + n.op_type + " keeps its meaning";
    } else {
      for (int64_t v : it->second)
        if (v > from && v <= target) blocker = n.op_type + " changes meaning at opset " + std::to_string(v);
    }
    if (!blocker.empty())
      return UserError(why + " needs opset " + std::to_string(target) + " but the model is opset " +
                       std::to_string(from) + ", and " + n.Describe() + " blocks the upgrade (" + blocker +
                       "); convert the model to opset " + std::to_string(target) + " first");
  }
  return Status::Ok();
}

}  // namespace seqto::quant::detail
