// QuantPlan: preparation, the full quantization divided into groups, and candidate
// models (Materialize). The rewriting itself lives in qdq_static.cc / qdq_dynamic.cc.
#include "quant/quantize.h"

#include <algorithm>
#include <numeric>

#include "onnxio/model_io.h"
#include "quant/macs.h"
#include "quant/node_filter.h"
#include "quant/qdq_internal.h"
#include "rewrite/passes.h"
#include "rewrite/patch.h"

namespace seqto::quant {

namespace {

using detail::GraphInfo;
using detail::Marking;
using detail::OpKind;
using detail::Precision;

bool IsFourBit(QuantType t) { return t == QuantType::kInt4 || t == QuantType::kUInt4; }

Status ValidateOptions(const ir::Model& model, const QuantOptions& o) {
  for (auto [what, t] : {std::pair{"activation_type", o.activation_type}, std::pair{"weight_type", o.weight_type}}) {
    if (IsFourBit(t))
      return UserError(std::string(what) + ": 4-bit quantization (" + QuantTypeName(t) + ") is not supported yet");
    if (t == QuantType::kInt32) return UserError(std::string(what) + ": int32 is only a bias type");
  }
  if (o.mode == QuantMode::kDynamic) {
    if (o.activation_type != QuantType::kUInt8)
      return UserError(
          "activation_type: dynamic quantization quantizes activations with DynamicQuantizeLinear, "
          "which is uint8 only (got " +
          QuantTypeName(o.activation_type) + ")");
    if (o.weight_type != QuantType::kUInt8 && o.weight_type != QuantType::kInt8)
      return UserError(
          "weight_type: dynamic quantization needs uint8 or int8 weights (MatMulInteger/ConvInteger), got " +
          QuantTypeName(o.weight_type));
  }
  if (o.power_of_two) {
    auto p2_ok = [](QuantType t) { return t == QuantType::kInt8 || t == QuantType::kInt16; };
    if (!p2_ok(o.weight_type) || (o.mode == QuantMode::kStatic && !p2_ok(o.activation_type)))
      return UserError("power-of-two scales need int8 or int16 activation and weight types (got " +
                       QuantTypeName(o.activation_type) + " activations, " + QuantTypeName(o.weight_type) +
                       " weights)");
  }
  // Checked before calibration: every pattern must name a node (the plan then
  // checks that it names a quantized one).
  if (!o.int16_activation_nodes.empty() && o.mode != QuantMode::kStatic)
    return UserError("int16 activation nodes need static quantization");
  for (const auto& pattern : o.int16_activation_nodes)
    if (std::none_of(model.graph.nodes.begin(), model.graph.nodes.end(),
                     [&](const ir::Node& n) { return GlobMatch(pattern, n.name); }))
      return UserError("int16 activation nodes: '" + pattern + "' matches no node of the model");
  if (!o.tensor_overrides.empty()) {
    std::set<std::string> values;
    for (const auto& v : model.graph.inputs) values.insert(v.name);
    for (const auto& [name, t] : model.graph.initializers) values.insert(name);
    for (const auto& n : model.graph.nodes)
      for (const auto& out : n.outputs) values.insert(out);
    for (const auto& [name, ov] : o.tensor_overrides) {
      const std::string what = "TensorQuantOverrides: tensor '" + name + "'";
      if (!values.count(name)) return UserError(what + ": no tensor of the model has this name");
      if (ov.quant_type && IsFourBit(*ov.quant_type))
        return UserError(what + ": 4-bit quantization is not supported yet");
      if (ov.quant_type && *ov.quant_type == QuantType::kInt32) return UserError(what + ": int32 is only a bias type");
      if (ov.axis && !model.graph.initializers.count(name))
        return UserError(what + ": an axis (per-channel quantization) applies to initializers only");
      if (ov.scale && !(*ov.scale > 0)) return UserError(what + ": scale must be positive");
      if (ov.scale.has_value() != ov.zero_point.has_value())
        return UserError(what + ": give both scale and zero_point, or neither");
      if (ov.rmin && ov.rmax && *ov.rmin > *ov.rmax) return UserError(what + ": rmin > rmax");
      // The zero point must fit the tensor's type. Known here for an activation (and
      // any tensor with quant_type); an initializer may become a weight or an
      // activation, so the plan checks it against the type it gets.
      if (ov.zero_point && (ov.quant_type || !model.graph.initializers.count(name))) {
        const QuantType type = ov.quant_type ? *ov.quant_type : o.activation_type;
        const QRange r = GetQRange(type, /*symmetric=*/false, /*reduce_range=*/false);
        if (*ov.zero_point < r.qmin || *ov.zero_point > r.qmax)
          return UserError(what + ": zero_point " + std::to_string(*ov.zero_point) + " is outside the range of " +
                           QuantTypeName(type) + " [" + std::to_string(r.qmin) + ", " + std::to_string(r.qmax) + "]");
      }
    }
  }
  return Status::Ok();
}

Expected<NodeFilter> MakeFilter(const ir::Model& model, const QuantOptions& o) {
  NodeFilterSpec spec;
  spec.op_types = o.op_types_to_quantize;
  spec.include = o.nodes_to_quantize;
  spec.exclude = o.nodes_to_exclude;
  return NodeFilter::ForGraph(model.graph, std::move(spec), QuantPlan::SupportedOpTypes(o.mode));
}

bool OnnxDomain(const ir::Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; }

// Nodes the options select (static: any supported op type; dynamic: those with a
// constant weight).
std::vector<bool> Candidates(const GraphInfo& info, const QuantOptions& o, const NodeFilter& filter) {
  std::vector<bool> q(info.graph.nodes.size(), false);
  for (size_t i = 0; i < q.size(); ++i) {
    const ir::Node& n = info.graph.nodes[i];
    if (!OnnxDomain(n) || !filter.Selects(n)) continue;
    q[i] = o.mode == QuantMode::kStatic ? detail::StaticOpKinds().count(n.op_type) != 0
                                        : detail::DynamicCandidate(info, i);
  }
  return q;
}

// Union-find over node indices.
struct Groups {
  std::vector<int> parent;
  explicit Groups(size_t n) : parent(n, -1) {}
  void Add(size_t i) {
    if (parent[i] < 0) parent[i] = static_cast<int>(i);
  }
  bool Has(size_t i) const { return parent[i] >= 0; }
  size_t Find(size_t i) {
    while (parent[i] != static_cast<int>(i)) i = parent[i] = parent[parent[i]];
    return i;
  }
};

int64_t OutputChannels(const GraphInfo& info, const ir::Node& n) {
  const Tensor* w = info.Initializer(n.inputs.size() > 1 ? n.inputs[1] : "");
  if (!w || w->rank() < 1) return 0;
  if (n.op_type == "Conv") return w->dim(0);
  if (n.op_type == "ConvTranspose") {
    auto g = n.attr_int("group", 1);
    return w->rank() >= 2 ? w->dim(1) * (g.ok() ? *g : 1) : 0;
  }
  if (n.op_type == "Gemm") {
    auto tb = n.attr_int("transB", 0);
    return w->rank() == 2 ? w->dim(tb.ok() && *tb ? 0 : 1) : 0;
  }
  if (n.op_type == "MatMul") return w->rank() >= 2 ? w->dim(w->rank() - 1) : 0;
  return 0;
}

// An op of a quantized model: Q/DQ, ONNX's and ONNX Runtime's integer ops, and
// seqto's internal integer and fused ops.
bool IsQuantizedOp(const ir::Node& n) {
  static const std::set<std::string> kOps = {"QuantizeLinear",
                                             "DequantizeLinear",
                                             "DynamicQuantizeLinear",
                                             "QLinearConv",
                                             "QLinearMatMul",
                                             "MatMulInteger",
                                             "ConvInteger",
                                             "QLinearAdd",
                                             "QLinearMul",
                                             "QGemm",
                                             "QLinearGlobalAveragePool",
                                             "QLinearSigmoid",
                                             "QLinearLeakyRelu",
                                             "QLinearConcat",
                                             "QLinearAveragePool"};
  return n.domain == "com.seqto" || kOps.count(n.op_type) != 0;
}

}  // namespace

const std::set<std::string>& QuantPlan::SupportedOpTypes(QuantMode mode) {
  return mode == QuantMode::kStatic ? detail::StaticOpTypes() : detail::DynamicOpTypes();
}

Expected<ir::Model> QuantPlan::Prepare(const ir::Model& float_model) {
  ir::Model m = float_model;
  m.graph.NameNodes();
  if (Status s = m.graph.Verify(); !s.ok()) return std::move(s).WithContext("prepare");
  // Quantizing needs the float model: calibrating a QDQ model measures ranges that
  // its Q/DQ already rounded, and excluding a group could not give back the float
  // precision it never had.
  for (const ir::Node& n : m.graph.nodes)
    if (IsQuantizedOp(n))
      return UserError(n.Describe() + ": the model is already quantized; quantize the float model it came from");

  // Constant nodes become initializers (ORT's pre-processing folds them): a constant
  // operand is then quantized as the constant it is, not calibrated as an activation.
  // A constant scale/shift after a conv (an exporter's separate bias Add, Paddle's
  // affine layers) folds into its weights and bias, as ORT's pre-processing does
  // (ConvAddFusion, ConvMulFusion): one quantized conv instead of a conv and an
  // elementwise op, each with its own Q/DQ and rounding.
  rewrite::OptimizeOptions opt;
  opt.lift_constants = true;
  opt.fold_batchnorm = true;
  opt.fold_conv_affine = true;
  opt.fuse_patterns = false;
  opt.fuse_conv = false;
  opt.fuse_qdq = false;  // the prepared model is saved: standard ops only
  opt.channels_last = false;
  if (Status s = rewrite::Optimize(m.graph, opt); !s.ok()) return std::move(s).WithContext("prepare");
  // Types of the values after folding. A model ONNX cannot infer still quantizes: the
  // calibration ranges tell which values are float (GraphInfo).
  (void)onnxio::InferShapes(m);
  return m;
}

Expected<std::set<std::string>> QuantPlan::TensorsToCalibrate(const ir::Model& prepared, const QuantOptions& options) {
  SEQTO_RETURN_IF_ERROR(ValidateOptions(prepared, options));
  SEQTO_ASSIGN_OR_RETURN(NodeFilter filter, MakeFilter(prepared, options));
  std::set<std::string> out;
  if (options.mode == QuantMode::kDynamic) return out;
  GraphInfo info(prepared, nullptr);
  const std::vector<bool> q = Candidates(info, options, filter);
  for (size_t i = 0; i < q.size(); ++i) {
    if (!q[i]) continue;
    const ir::Node& n = info.graph.nodes[i];
    for (const auto* list : {&n.inputs, &n.outputs})
      for (const auto& t : *list)
        if (!t.empty() && !info.IsInitializer(t) && info.IsQuantizable(t)) out.insert(t);
  }
  return out;
}

Expected<QuantPlan> QuantPlan::Create(const ir::Model& prepared, const QuantOptions& options,
                                      const TensorRanges* ranges) {
  SEQTO_RETURN_IF_ERROR(ValidateOptions(prepared, options));
  SEQTO_ASSIGN_OR_RETURN(NodeFilter filter, MakeFilter(prepared, options));
  if (options.mode == QuantMode::kStatic && !ranges) return UserError("static quantization needs calibrated ranges");
  QuantPlan plan;
  plan.prepared_ = prepared;
  plan.options_ = options;
  plan.cache_ = std::make_shared<detail::ParamCache>();
  if (ranges) plan.ranges_ = *ranges;
  const ir::Model& model = plan.prepared_;
  GraphInfo info(model, ranges);
  const size_t num_nodes = model.graph.nodes.size();
  std::vector<bool> q_full = Candidates(info, options, filter);
  detail::ParamCache& cache = *plan.cache_;

  if (options.mode == QuantMode::kDynamic) {
    SEQTO_ASSIGN_OR_RETURN(detail::DynamicPlan full, detail::PlanDynamic(info, q_full));
    const std::set<std::string> full_nodes = full.InsertedNodes();
    for (size_t i = 0; i < num_nodes; ++i) {
      if (!q_full[i]) continue;
      const ir::Node& n = model.graph.nodes[i];
      std::vector<bool> q = q_full;
      q[i] = false;
      SEQTO_ASSIGN_OR_RETURN(detail::DynamicPlan without, detail::PlanDynamic(info, q));
      const std::set<std::string> rest = without.InsertedNodes();
      QuantGroup g;
      g.name = n.name;
      g.op_type = n.op_type;
      g.nodes = {n.name};
      g.weights = {n.inputs[1]};
      g.activations = {n.inputs[0]};
      for (const auto& name : full_nodes)
        if (!rest.count(name)) g.owned_qdq_nodes.push_back(name);
      g.order = plan.groups_.size();
      g.weight_elements = info.Initializer(n.inputs[1])->numel();
      g.output_channels = OutputChannels(info, n);
      plan.groups_.push_back(std::move(g));
      plan.group_nodes_.push_back({i});
    }
    plan.CountGroupMacs();
    return plan;
  }

  // Static. Ranges as ORT adjusts them (for the candidates), then the full marking.
  detail::AdjustRanges(info, q_full, plan.ranges_);
  const std::vector<Precision> base(num_nodes, Precision::kBase);
  auto signature = [&](const std::vector<bool>& q) -> Expected<std::map<std::string, std::string>> {
    Marking m = detail::MarkStatic(info, options, plan.ranges_, q);
    SEQTO_ASSIGN_OR_RETURN(detail::StaticPlan p,
                           detail::PlanStatic(info, options, plan.ranges_, m, base, cache, plan.refinements_));
    return p.Signature();
  };
  const Marking full = detail::MarkStatic(info, options, plan.ranges_, q_full);
  SEQTO_ASSIGN_OR_RETURN(detail::StaticPlan full_plan,
                         detail::PlanStatic(info, options, plan.ranges_, full, base, cache, plan.refinements_));

  // Initial groups: every node that quantized something; a removable activation joins
  // the producer ORT would fold it into; a pass-through op joins the group that
  // quantized its input (it only repeats that group's parameters).
  Groups uf(num_nodes);
  for (size_t i : full.active) uf.Add(i);
  for (const auto& [act, producer] : full.folded)
    if (uf.Has(producer)) uf.parent[uf.Find(act)] = static_cast<int>(uf.Find(producer));
  const auto& kinds = detail::StaticOpKinds();
  for (size_t i : full.active) {
    const ir::Node& n = model.graph.nodes[i];
    const OpKind kind = kinds.at(n.op_type);
    const bool pass_through =
        kind == OpKind::kPassThrough || (kind == OpKind::kGather && !info.IsInitializer(n.inputs.at(0)));
    if (!pass_through) continue;
    const std::string& in = n.inputs.at(0);
    std::optional<size_t> source;
    if (auto p = info.producer.find(in); p != info.producer.end() && uf.Has(p->second)) source = p->second;
    if (!source)
      if (auto mk = full.tensors.find(in); mk != full.tensors.end())
        for (size_t r : mk->second.requesters)
          if (r != i && uf.Has(r)) {
            source = r;
            break;
          }
    if (source) uf.parent[uf.Find(i)] = static_cast<int>(uf.Find(*source));
  }
  // Group id per node (the root), and the anchor: the group's first node that is
  // neither a folded activation nor a pass-through (else its first node).
  auto is_follower = [&](size_t i) {
    const ir::Node& n = model.graph.nodes[i];
    const OpKind kind = kinds.at(n.op_type);
    return full.folded.count(i) || kind == OpKind::kPassThrough ||
           (kind == OpKind::kGather && !info.IsInitializer(n.inputs.at(0)));
  };
  std::map<size_t, std::vector<size_t>> members;  // root -> nodes
  for (size_t i = 0; i < num_nodes; ++i)
    if (uf.Has(i)) members[uf.Find(i)].push_back(i);
  struct G {
    size_t anchor;
    std::vector<size_t> nodes;
  };
  std::vector<G> groups;
  for (auto& [root, nodes] : members) {
    size_t anchor = nodes.front();
    for (size_t i : nodes)
      if (!is_follower(i)) {
        anchor = i;
        break;
      }
    groups.push_back({anchor, nodes});
  }
  // The nodes of the plan: active nodes only (a selected node that quantizes nothing
  // changes nothing).
  std::vector<bool> q_plan(num_nodes, false);
  for (const auto& g : groups)
    for (size_t i : g.nodes) q_plan[i] = true;
  SEQTO_ASSIGN_OR_RETURN(auto full_sig, signature(q_plan));

  // Excluding a group must change the model. A group whose every Q/DQ is also needed
  // by its neighbours (an Add between quantized convs, ...) joins the neighbour that
  // produces its latest input (else its first consumer's group); with no neighbour
  // it is dropped, which by the same token changes nothing.
  for (bool changed = true; changed;) {
    changed = false;
    std::vector<int> group_of(num_nodes, -1);
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t i : groups[g].nodes) group_of[i] = static_cast<int>(g);
    // All no-op groups of this round and where they go (-1: dropped).
    std::vector<int> into(groups.size());
    std::iota(into.begin(), into.end(), 0);
    std::vector<bool> dropped(groups.size(), false);
    for (size_t g = 0; g < groups.size(); ++g) {
      std::vector<bool> q = q_plan;
      for (size_t i : groups[g].nodes) q[i] = false;
      SEQTO_ASSIGN_OR_RETURN(const auto sig, signature(q));
      if (sig != full_sig) continue;
      changed = true;
      int target = -1;
      size_t latest = 0;
      for (size_t i : groups[g].nodes)
        for (const auto& in : model.graph.nodes[i].inputs) {
          auto p = info.producer.find(in);
          if (p == info.producer.end()) continue;
          const int pg = group_of[p->second];
          if (pg < 0 || pg == static_cast<int>(g)) continue;
          if (target < 0 || p->second > latest) {
            target = pg;
            latest = p->second;
          }
        }
      if (target < 0)
        for (size_t i : groups[g].nodes)
          for (const auto& out : model.graph.nodes[i].outputs) {
            auto c = info.consumers.find(out);
            if (c == info.consumers.end()) continue;
            for (size_t ci : c->second)
              if (group_of[ci] >= 0 && group_of[ci] != static_cast<int>(g) && target < 0) target = group_of[ci];
          }
      if (target >= 0)
        into[g] = target;
      else
        dropped[g] = true;
    }
    if (!changed) break;
    // Follow chains (a no-op group may join another that joins a third); a cycle of
    // no-op groups becomes one group, checked again next round.
    auto root = [&](size_t g) {
      std::set<size_t> seen;
      while (static_cast<size_t>(into[g]) != g && seen.insert(g).second) g = static_cast<size_t>(into[g]);
      return g;
    };
    std::map<size_t, G> merged;  // root -> group
    bool any_dropped = false;
    for (size_t g = 0; g < groups.size(); ++g) {
      if (dropped[g]) {
        for (size_t i : groups[g].nodes) q_plan[i] = false;
        any_dropped = true;
        continue;
      }
      size_t r = root(g);
      if (dropped[r]) r = g;  // its target is gone: checked again next round
      auto it = merged.try_emplace(r, groups[r]).first;
      if (r != g) it->second.nodes.insert(it->second.nodes.end(), groups[g].nodes.begin(), groups[g].nodes.end());
    }
    groups.clear();
    for (auto& [r, grp] : merged) {
      std::sort(grp.nodes.begin(), grp.nodes.end());
      grp.nodes.erase(std::unique(grp.nodes.begin(), grp.nodes.end()), grp.nodes.end());
      groups.push_back(std::move(grp));
    }
    // Groups dropped together may change the model together: the reference is the
    // model of the nodes that remain.
    if (any_dropped) {
      SEQTO_ASSIGN_OR_RETURN(full_sig, signature(q_plan));
    }
  }
  std::sort(groups.begin(), groups.end(), [](const G& a, const G& b) { return a.anchor < b.anchor; });

  // The full plan (of the final node set) and each group's details.
  const Marking final_marking = detail::MarkStatic(info, options, plan.ranges_, q_plan);
  SEQTO_ASSIGN_OR_RETURN(
      full_plan, detail::PlanStatic(info, options, plan.ranges_, final_marking, base, cache, plan.refinements_));
  const std::set<std::string> full_nodes = full_plan.InsertedNodes();
  for (const auto& g : groups) {
    const std::set<size_t> nodes(g.nodes.begin(), g.nodes.end());
    auto requested = [&](const std::string& t) {
      auto mk = final_marking.tensors.find(t);
      if (mk == final_marking.tensors.end()) return false;
      for (size_t r : mk->second.requesters)
        if (nodes.count(r)) return true;
      return false;
    };
    const ir::Node& anchor = model.graph.nodes[g.anchor];
    QuantGroup qg;
    qg.name = anchor.name;
    qg.op_type = anchor.op_type;
    for (size_t i : g.nodes) qg.nodes.push_back(model.graph.nodes[i].name);
    for (const auto& pt : full_plan.tensors) {
      if (!requested(pt.name)) continue;
      if (pt.initializer) {
        qg.weights.push_back(pt.name);
        qg.weight_elements += info.Initializer(pt.name)->numel();
      } else {
        qg.activations.push_back(pt.name);
      }
    }
    for (const auto& pb : full_plan.biases)
      if (nodes.count(pb.node)) {
        qg.weights.push_back(pb.name);
        qg.weight_elements += info.Initializer(pb.name)->numel();
      }
    std::vector<bool> q = q_plan;
    for (size_t i : g.nodes) q[i] = false;
    Marking m = detail::MarkStatic(info, options, plan.ranges_, q);
    SEQTO_ASSIGN_OR_RETURN(detail::StaticPlan without,
                           detail::PlanStatic(info, options, plan.ranges_, m, base, cache, plan.refinements_));
    const std::set<std::string> rest = without.InsertedNodes();
    for (const auto& name : full_nodes)
      if (!rest.count(name)) qg.owned_qdq_nodes.push_back(name);
    qg.order = plan.groups_.size();
    qg.output_channels = OutputChannels(info, anchor);
    plan.groups_.push_back(std::move(qg));
    plan.group_nodes_.push_back(g.nodes);
  }
  plan.CountGroupMacs();
  SEQTO_RETURN_IF_ERROR(plan.MarkInt16ActivationGroups());
  return plan;
}

Status QuantPlan::MarkInt16ActivationGroups() {
  int16_activation_groups_.assign(groups_.size(), false);
  for (const auto& pattern : options_.int16_activation_nodes) {
    bool matched = false;
    for (size_t g = 0; g < groups_.size(); ++g)
      for (const auto& node : groups_[g].nodes)
        if (GlobMatch(pattern, node)) int16_activation_groups_[g] = matched = true;
    if (!matched) return UserError("int16 activation nodes: '" + pattern + "' matches no quantized node");
  }
  return Status::Ok();
}

void QuantPlan::CountGroupMacs() {
  const MacCount count = CountMacs(prepared_);
  model_macs_ = count.total;
  macs_unknown_nodes_ = count.unknown;
  const std::vector<int64_t> macs = GroupMacs(groups_, count);
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].macs = macs[g];
}

const QuantGroup* QuantPlan::FindGroup(const std::string& name) const {
  for (const auto& g : groups_)
    if (g.name == name) return &g;
  return nullptr;
}

Expected<ir::Model> QuantPlan::Materialize(const std::set<std::string>& excluded, Fallback fallback) const {
  const size_t num_nodes = prepared_.graph.nodes.size();
  std::vector<bool> q(num_nodes, false);
  std::vector<Precision> precision(num_nodes, Precision::kBase);
  std::set<std::string> unknown = excluded;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const bool out = unknown.erase(groups_[g].name) != 0;
    const bool wide = !out && g < int16_activation_groups_.size() && int16_activation_groups_[g];
    for (size_t i : group_nodes_[g]) {
      if (!out || fallback != Fallback::kFloat) q[i] = true;
      if (wide) precision[i] = Precision::kInt16Activations;
      if (out && fallback == Fallback::kInt16) precision[i] = Precision::kInt16;
      if (out && fallback == Fallback::kFloat16) precision[i] = Precision::kFloat16;
      if (out && fallback == Fallback::kInt16Activations) precision[i] = Precision::kInt16Activations;
    }
  }
  if (!unknown.empty()) return UserError("no quantization group is named '" + *unknown.begin() + "'");
  GraphInfo info(prepared_, &ranges_);
  detail::ParamCache local_cache;  // for a plan that did not come from Create
  detail::ParamCache& cache = cache_ ? *cache_ : local_cache;
  if (options_.mode == QuantMode::kDynamic) {
    if (fallback != Fallback::kFloat && !excluded.empty())
      return UserError(
          "an int16, int16-activation or float16 fallback needs static quantization (dynamic groups fall back to "
          "float)");
    SEQTO_ASSIGN_OR_RETURN(detail::DynamicPlan p, detail::PlanDynamic(info, q));
    return detail::EmitDynamic(info, options_, p, cache);
  }
  const Marking m = detail::MarkStatic(info, options_, ranges_, q);
  SEQTO_ASSIGN_OR_RETURN(detail::StaticPlan p,
                         detail::PlanStatic(info, options_, ranges_, m, precision, cache, refinements_));
  SEQTO_ASSIGN_OR_RETURN(ir::Model model, detail::EmitStatic(info, p, refinements_));
  if (!recovery_record_.empty()) model.metadata["seqto.recovery"] = recovery_record_;
  return model;
}

void SyncCalibrationOptions(QuantOptions& options) {
  // Activations: ORT's QDQ quantizer applies reduce_range to weights only.
  const QRange r = GetQRange(options.activation_type, options.activation_symmetric, /*reduce_range=*/false);
  options.calibration_options.mse_num_levels = static_cast<int>(r.qmax - r.qmin + 1);
  options.calibration_options.mse_symmetric = options.activation_symmetric;
}

}  // namespace seqto::quant
