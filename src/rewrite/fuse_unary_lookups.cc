// Turns "unary regions" of a quantized graph into 256-entry table lookups.
//
// A QDQ model computes every elementwise op in float between its own
// DequantizeLinear and QuantizeLinear. Where a chain of such ops depends on one
// 8-bit tensor only, e.g. PP-LCNet's learnable affine blocks and HardSwish written
// out as x * Clip(x + 3, 0, 6) / 6:
//   DQ(q) -> Mul(c) -> Q -> DQ -> Add(c') -> Q -> DQ -> {Add(3) -> Clip -> Q -> DQ,
//            identity} -> Mul -> Q -> DQ -> Div(6) -> Q(y)
// every 8-bit result is a function of q's 256 codes: one com.seqto.QLookup
// (ops/quant/qlookup.cc) from q computes it, in one pass over bytes, where the
// unfused graph ran each op (or fuse-qdq's QLinearAdd / QLinearMul) on the tensor.
//
// Regions. Rooted at an 8-bit value q (not a constant), a region grows over the
// readers of its values: per-tensor Q/DQ (ai.onnx and com.microsoft, constant
// scalar parameters), the elementwise ops (activations, math, Cast, Identity), Add /
// Sub / Mul / Div / Pow / Max / Min / PRelu / Mod whose other operands are region
// values or constant scalars, and the internal int8 forms (com.seqto.QLookup, Gelu,
// QLinearAdd / QLinearMul of com.seqto and com.microsoft). A constant operand
// (an initializer, or a per-tensor DequantizeLinear of one, as quantizers write
// them) must have all elements equal and a shape that broadcasting against q
// leaves q's shape, so every region value has q's shape and element i of each
// depends on element i of q only. A value hooks may see or override (keep_values)
// ends the growth: its readers stay outside. Then the region is pruned until every
// value read outside it (by other nodes, as a graph output or kept) is 8-bit: a
// member whose float (or 16/32-bit) output is read outside leaves the region, with
// what depends on it, unless it reads only q and constants (the DequantizeLinear of
// q that a Conv also reads): such a member stays in the graph as it is and is only
// copied into the table's computation. Every 8-bit value read outside becomes a
// QLookup from q (named after the node that wrote it; Identity where the table is
// the identity); the other members go. Regions are taken root by root in graph
// order, so a chain through internal Q -> DQ pairs is one region with one table
// (lookups never follow lookups), and a root read by several branches gives one
// lookup per branch result.
//
// Tables. The region's nodes, with their constant operands reduced to scalars, run
// once on a 256-element tensor holding every code (options.evaluate: the session's
// own kernels, reference or default as the session uses). Each op is elementwise,
// and its kernel computes element i from element i of its inputs by the same
// operations whatever the shape (a constant with one element is broadcast the same
// way as its scalar; Pow's scalar-exponent fast path needs a one-element exponent,
// so Pow takes no all-equal exponent of more elements). So each table entry is
// what the unfused graph computes for that code, bit for bit, on the path the
// session runs: with reference_only sessions the reference kernels (the reference
// the tests compare against); otherwise the default kernels, whose approximations
// (ExpF, TanhF, ErfF in ops/elementwise/unary.cc) are evaluated here on the same
// code path, so the table equals the unfused default graph too (tested on odd sizes
// that leave a vector remainder). Against the reference path, the default-path
// tables inherit those approximations' few-ulp error: a code can move by one
// quantum where a value lies within a few ulp of a rounding tie.
#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "rewrite/passes.h"

namespace seqto::rewrite {

namespace {

constexpr const char* kSeqto = "com.seqto";
constexpr const char* kRootInput = "seqto.lookup_codes";

bool Is8Bit(DType t) { return t == DType::kUInt8 || t == DType::kInt8; }
bool IsQdqDomain(const ir::Node& n) { return n.domain.empty() || n.domain == "com.microsoft"; }
bool IsQ(const ir::Node& n) { return IsQdqDomain(n) && n.op_type == "QuantizeLinear"; }
bool IsDq(const ir::Node& n) { return IsQdqDomain(n) && n.op_type == "DequantizeLinear"; }

// ai.onnx ops that compute each output element from the same element of their
// inputs (whose other inputs, below, are constant scalars).
const std::set<std::string>& UnaryOps() {
  static const std::set<std::string> kOps = {
      "Relu",     "LeakyRelu", "Clip",           "Sigmoid", "HardSigmoid", "HardSwish",  "Tanh",  "Elu",   "Selu",
      "Celu",     "Softplus",  "Softsign",       "Mish",    "Exp",         "Log",        "Sqrt",  "Erf",   "Neg",
      "Abs",      "Sign",      "Floor",          "Ceil",    "Round",       "Reciprocal", "Sin",   "Cos",   "Tan",
      "Asin",     "Acos",      "Atan",           "Sinh",    "Cosh",        "Asinh",      "Acosh", "Atanh", "Shrink",
      "Identity", "Cast",      "ThresholdedRelu"};
  return kOps;
}
const std::set<std::string>& BinaryOps() {
  static const std::set<std::string> kOps = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu", "Mod"};
  return kOps;
}

class LookupFuser {
 public:
  LookupFuser(const ir::Graph& g, const OptimizeOptions& options)
      : g_(g), options_(options), uses_(g), constants_(ConstantValues(g)) {}

  GraphPatch Run() {
    std::vector<std::string> roots;
    for (const auto& in : g_.inputs) roots.push_back(in.name);
    for (const auto& n : g_.nodes)
      for (const auto& o : n.outputs)
        if (!o.empty()) roots.push_back(o);
    for (const auto& r : roots) TryRoot(r);
    RemoveDeadConstantDequantizers();
    return std::move(patch_);
  }

 private:
  // A region: the nodes (indices into g_.nodes, in graph order) computing values
  // from the root.
  struct Region {
    std::string root;
    DType root_type = DType::kUndefined;
    std::optional<std::vector<ir::Dim>> root_shape;
    std::set<size_t> members;
  };

  const Tensor* Constant(const std::string& v) const {
    auto it = constants_.find(v);
    return it == constants_.end() ? nullptr : &it->second;
  }
  // A constant no hook may override (a kept Constant node's output is not one: the
  // table would not see the override).
  const Tensor* Fixed(const std::string& v) const { return options_.keep_values.count(v) ? nullptr : Constant(v); }
  const ir::Node* Producer(const std::string& v) const {
    auto it = uses_.producer.find(v);
    return it == uses_.producer.end() ? nullptr : &g_.nodes[it->second];
  }
  const ir::ValueInfo* Info(const std::string& v) const {
    for (const auto& in : g_.inputs)
      if (in.name == v) return &in;
    return g_.FindValueInfo(v);
  }

  // The element type of a Q's output.
  DType QOutputType(const ir::Node& q) const {
    if (q.inputs.size() > 2 && !q.inputs[2].empty()) {
      const Tensor* zp = Constant(q.inputs[2]);
      return zp ? zp->dtype() : DType::kUndefined;
    }
    auto od = q.attr_int("output_dtype", 0);
    return od && *od != 0 ? static_cast<DType>(*od) : DType::kUInt8;
  }

  // The element type of a value, where the graph tells it.
  DType TypeOf(const std::string& v) const {
    if (const ir::Node* p = Producer(v)) {
      if (IsQ(*p)) return QOutputType(*p);
      if (p->domain == kSeqto && p->op_type == "QLookup") {
        auto t = p->attr_int("y_type", 0);
        return t ? static_cast<DType>(*t) : DType::kUndefined;
      }
    }
    if (const ir::ValueInfo* vi = Info(v)) return vi->dtype;
    return DType::kUndefined;
  }

  // A per-tensor quantization parameter: a constant with one element, rank <= 1.
  bool ScalarParam(const ir::Node& n, size_t i) const {
    if (i >= n.inputs.size() || n.inputs[i].empty()) return true;  // omitted (a zero point)
    const Tensor* t = Fixed(n.inputs[i]);
    return t && t->numel() == 1 && t->rank() <= 1;
  }

  // A constant tensor whose elements are all equal (bitwise) and whose shape, broadcast
  // against the root's, leaves the root's shape.
  bool ActsAsScalar(const Tensor& t, const Region& r) const {
    const size_t size = DTypeSize(t.dtype());
    if (size == 0 || t.numel() < 1) return false;
    const auto* bytes = static_cast<const std::byte*>(t.raw());
    for (int64_t i = 1; i < t.numel(); ++i)
      if (std::memcmp(bytes, bytes + i * size, size) != 0) return false;
    if (t.rank() == 0) return true;
    if (!r.root_shape || static_cast<int64_t>(r.root_shape->size()) < t.rank()) return false;
    const int64_t offset = static_cast<int64_t>(r.root_shape->size()) - t.rank();
    for (int64_t d = 0; d < t.rank(); ++d) {
      if (t.dim(d) == 1) continue;
      const ir::Dim& rd = (*r.root_shape)[offset + d];
      if (!rd.known() || rd.value != t.dim(d)) return false;
    }
    return true;
  }

  // A constant operand: an initializer acting as a scalar, or a per-tensor
  // DequantizeLinear of one. Pow's exponent must have one element (its kernel's
  // scalar fast path depends on it).
  bool ConstantOperand(const std::string& v, const Region& r, bool one_element) const {
    if (options_.keep_values.count(v)) return false;
    const Tensor* t = Constant(v);
    if (!t) {
      const ir::Node* p = Producer(v);
      if (!p || !IsDq(*p) || p->inputs.size() < 2 || p->outputs.size() != 1 || p->has_attr("block_size")) return false;
      if (!ScalarParam(*p, 1) || !ScalarParam(*p, 2)) return false;
      t = Fixed(p->inputs[0]);
    }
    return t && ActsAsScalar(*t, r) && (!one_element || t->numel() == 1);
  }

  // True when node `n` computes an elementwise function of region values (`values`)
  // and constant scalars, reading at least one region value.
  bool Eligible(const ir::Node& n, const Region& r, const std::set<std::string>& values) const {
    if (n.outputs.size() != 1 || n.outputs[0].empty() || n.inputs.empty() || n.has_attr("broadcast")) return false;
    auto region = [&](size_t i) { return i < n.inputs.size() && values.count(n.inputs[i]); };
    auto operand = [&](size_t i, bool one_element = false) {
      return region(i) || (i < n.inputs.size() && ConstantOperand(n.inputs[i], r, one_element));
    };
    if (IsQ(n) || IsDq(n)) {
      if (n.has_attr("block_size") || n.inputs.size() < 2) return false;
      return region(0) && ScalarParam(n, 1) && ScalarParam(n, 2);
    }
    if (n.domain == kSeqto && (n.op_type == "QLookup" || n.op_type == "Gelu")) return n.inputs.size() == 1 && region(0);
    if ((n.domain == kSeqto || n.domain == "com.microsoft") &&
        (n.op_type == "QLinearAdd" || n.op_type == "QLinearMul")) {
      if (n.inputs.size() < 7 || !(region(0) || region(3)) || !operand(0) || !operand(3)) return false;
      for (size_t i : {1, 2, 4, 5, 6, 7})
        if (!ScalarParam(n, i)) return false;
      return true;
    }
    if (!n.domain.empty()) return false;
    if (UnaryOps().count(n.op_type)) {
      if (!region(0)) return false;
      if (n.op_type == "Cast") {
        auto to = n.attr_int("to", 0);
        return to && DTypeSize(static_cast<DType>(*to)) > 0 && static_cast<DType>(*to) != DType::kString;
      }
      if (n.op_type == "Clip") return n.inputs.size() <= 3 && ScalarParam(n, 1) && ScalarParam(n, 2);
      return n.inputs.size() == 1;
    }
    if (BinaryOps().count(n.op_type) || n.op_type == "Max" || n.op_type == "Min") {
      const bool variadic = n.op_type == "Max" || n.op_type == "Min";
      if (!variadic && n.inputs.size() != 2) return false;
      bool any = false;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (n.inputs[i].empty() || !operand(i, n.op_type == "Pow" && i == 1)) return false;
        any |= region(i);
      }
      return any;
    }
    return false;
  }

  // The element type of a member's output given its inputs' types.
  DType OutputType(const ir::Node& n, const std::map<std::string, DType>& types) const {
    auto type_of = [&](const std::string& v) {
      auto it = types.find(v);
      if (it != types.end()) return it->second;
      if (const Tensor* t = Constant(v)) return t->dtype();
      if (const ir::Node* p = Producer(v); p && IsDq(*p) && p->inputs.size() > 1)
        if (const Tensor* s = Constant(p->inputs[1])) return s->dtype();
      return DType::kUndefined;
    };
    if (IsQ(n)) return QOutputType(n);
    if (IsDq(n)) return type_of(n.inputs[1]);  // the scale's type
    auto int_attr = [&](const char* name) {
      auto v = n.attr_int(name, 0);
      return v ? static_cast<DType>(*v) : DType::kUndefined;
    };
    if (n.op_type == "Cast") return int_attr("to");
    if (n.op_type == "QLookup") return int_attr("y_type");
    if (n.op_type == "QLinearAdd" || n.op_type == "QLinearMul")
      return n.inputs.size() > 7 && !n.inputs[7].empty() ? type_of(n.inputs[7]) : type_of(n.inputs[0]);
    return type_of(n.inputs[0]);
  }

  bool Kept(const std::string& v) const { return options_.keep_values.count(v) || uses_.graph_outputs.count(v); }

  // Members whose output is read outside the region (by a non-member, as a graph
  // output, or by hooks).
  std::vector<size_t> Exits(const Region& r) const {
    std::vector<size_t> exits;
    for (size_t m : r.members) {
      const std::string& out = g_.nodes[m].outputs[0];
      bool outside = Kept(out);
      if (auto it = uses_.consumers.find(out); it != uses_.consumers.end())
        for (size_t c : it->second) outside |= !r.members.count(c);
      if (outside) exits.push_back(m);
    }
    return exits;
  }

  // True when the member reads only the root and constants.
  bool ReadsRootOnly(const ir::Node& n, const Region& r) const {
    for (const auto& in : n.inputs)
      if (!in.empty() && in != r.root && Producer(in) && !Constant(in) && !IsConstantDq(in)) return false;
    return true;
  }
  bool IsConstantDq(const std::string& v) const {
    const ir::Node* p = Producer(v);
    return p && IsDq(*p) && !p->inputs.empty() && Constant(p->inputs[0]);
  }

  void TryRoot(const std::string& root) {
    if (Constant(root) || uses_.consumers.find(root) == uses_.consumers.end()) return;
    Region r;
    r.root = root;
    r.root_type = TypeOf(root);
    // Without a declared type, a DequantizeLinear's zero point tells it.
    if (r.root_type == DType::kUndefined)
      for (size_t c : uses_.consumers.at(root))
        if (const ir::Node& n = g_.nodes[c]; IsDq(n) && n.inputs[0] == root && n.inputs.size() > 2)
          if (const Tensor* zp = Constant(n.inputs[2])) r.root_type = zp->dtype();
    if (!Is8Bit(r.root_type)) return;
    if (const ir::ValueInfo* vi = Info(root)) r.root_shape = vi->shape;
    Grow(r);
    std::map<std::string, DType> types;
    std::set<size_t> in_graph;  // members that stay (float outputs read outside, reading only the root)
    Prune(r, types, in_graph);
    if (r.members.empty()) return;
    std::vector<size_t> lookups;
    for (size_t m : Exits(r))
      if (!in_graph.count(m)) lookups.push_back(m);
    const size_t removed = r.members.size() - in_graph.size();
    // Each lookup is a pass over the tensor, as each removed node was.
    if (lookups.empty() || lookups.size() > removed) return;
    Commit(r, lookups, in_graph, types);
  }

  // Adds every reader of region values that is eligible, until none is.
  void Grow(Region& r) const {
    std::set<std::string> values = {r.root};
    std::vector<std::string> pending = {r.root};
    while (!pending.empty()) {
      const std::string v = pending.back();
      pending.pop_back();
      auto it = uses_.consumers.find(v);
      if (it == uses_.consumers.end()) continue;
      for (size_t c : it->second) {
        if (r.members.count(c) || claimed_.count(c) || !Eligible(g_.nodes[c], r, values)) continue;
        r.members.insert(c);
        const std::string& out = g_.nodes[c].outputs[0];
        if (options_.keep_values.count(out)) continue;  // hooks see it: its readers stay outside
        values.insert(out);
        pending.push_back(out);
      }
    }
  }

  // Removes members until every value read outside the region is 8-bit (or written by
  // a member reading only the root, which then stays in the graph) and every member
  // reads only region values and constants. Fills the members' output types.
  void Prune(Region& r, std::map<std::string, DType>& types, std::set<size_t>& in_graph) const {
    for (bool changed = true; changed;) {
      changed = false;
      // Members whose inputs left the region go too (graph order: one sweep).
      std::set<std::string> values = {r.root};
      types.clear();
      types[r.root] = r.root_type;
      for (auto it = r.members.begin(); it != r.members.end();) {
        const ir::Node& n = g_.nodes[*it];
        if (!Eligible(n, r, values)) {
          it = r.members.erase(it);
          changed = true;
          continue;
        }
        types[n.outputs[0]] = OutputType(n, types);
        if (!options_.keep_values.count(n.outputs[0])) values.insert(n.outputs[0]);
        ++it;
      }
      in_graph.clear();
      for (size_t m : Exits(r)) {
        const ir::Node& n = g_.nodes[m];
        if (Is8Bit(types[n.outputs[0]])) continue;
        if (ReadsRootOnly(n, r)) {
          in_graph.insert(m);
        } else {
          r.members.erase(m);
          changed = true;
        }
      }
    }
  }

  // The region as a graph on the 256 codes: the members, the DequantizeLinear nodes
  // of their constant operands, and those constants reduced to one element.
  ir::Graph RegionGraph(const Region& r, const std::vector<size_t>& lookups, std::vector<size_t>& constant_dqs) const {
    ir::Graph sub;
    sub.name = "lookup";
    ir::ValueInfo in;
    in.name = kRootInput;
    in.dtype = r.root_type;
    in.shape = std::vector<ir::Dim>{{256, ""}};
    sub.inputs.push_back(in);
    std::set<size_t> dqs;
    auto add_constant = [&](const std::string& v) {
      const Tensor& t = *Constant(v);
      Tensor one(t.dtype(), {});
      std::memcpy(one.raw(), t.raw(), DTypeSize(t.dtype()));
      sub.initializers[v] = one;
    };
    for (size_t m : r.members)
      for (const auto& v : g_.nodes[m].inputs) {
        if (v.empty() || v == r.root) continue;
        if (Constant(v)) {
          add_constant(v);
        } else if (IsConstantDq(v) && !r.members.count(uses_.producer.at(v))) {
          dqs.insert(uses_.producer.at(v));
        }
      }
    for (size_t d : dqs) {
      for (const auto& v : g_.nodes[d].inputs)
        if (!v.empty()) add_constant(v);
      sub.nodes.push_back(g_.nodes[d]);
    }
    constant_dqs.assign(dqs.begin(), dqs.end());
    for (size_t m : r.members) {
      ir::Node n = g_.nodes[m];
      for (auto& v : n.inputs)
        if (v == r.root) v = kRootInput;
      sub.nodes.push_back(std::move(n));
    }
    for (size_t m : lookups) sub.outputs.push_back({g_.nodes[m].outputs[0], DType::kUndefined, std::nullopt});
    return sub;
  }

  void Commit(const Region& r, const std::vector<size_t>& lookups, const std::set<size_t>& in_graph,
              const std::map<std::string, DType>& types) {
    std::vector<size_t> constant_dqs;
    const ir::Graph sub = RegionGraph(r, lookups, constant_dqs);
    Tensor codes(r.root_type, {256});
    const int offset = r.root_type == DType::kInt8 ? -128 : 0;
    for (int k = 0; k < 256; ++k) static_cast<uint8_t*>(codes.raw())[k] = static_cast<uint8_t>(k + offset);
    auto out = options_.evaluate(sub, {{kRootInput, codes}});
    // A region the kernels refuse is left as it is: running the graph reports the error.
    if (!out) return;
    std::vector<ir::Node> replacements;
    for (size_t m : lookups) {
      const ir::Node& exit = g_.nodes[m];
      auto it = out->find(exit.outputs[0]);
      const DType y_type = types.at(exit.outputs[0]);
      if (it == out->end() || it->second.dtype() != y_type || it->second.shape() != Shape{256}) return;
      ir::Node lookup;
      lookup.name = exit.name;
      lookup.inputs = {r.root};
      lookup.outputs = exit.outputs;
      ir::Attribute table;
      table.type = ir::Attribute::Type::kInts;
      bool identity = y_type == r.root_type;
      for (int k = 0; k < 256; ++k) {
        const int64_t v = y_type == DType::kInt8 ? it->second.data<int8_t>()[k] : it->second.data<uint8_t>()[k];
        table.ints.push_back(v);
        identity &= v == k + offset;
      }
      if (identity) {
        lookup.op_type = "Identity";
      } else {
        lookup.op_type = "QLookup";
        lookup.domain = kSeqto;
        lookup.attributes["table"] = std::move(table);
        lookup.attributes["x_type"] = IntAttr(static_cast<int64_t>(r.root_type));
        lookup.attributes["y_type"] = IntAttr(static_cast<int64_t>(y_type));
      }
      replacements.push_back(std::move(lookup));
    }
    std::set<size_t> exits(lookups.begin(), lookups.end());
    for (size_t m : r.members) {
      claimed_.insert(m);
      if (in_graph.count(m)) continue;
      removed_.insert(m);  // an exit is replaced, so it no longer reads what it read
      if (!exits.count(m)) patch_.RemoveNode(g_.nodes[m].name);
    }
    for (auto& n : replacements) patch_.ReplaceNode(std::move(n));
    constant_dqs_.insert(constant_dqs.begin(), constant_dqs.end());
  }

  // A constant operand's DequantizeLinear goes when only removed members read it.
  void RemoveDeadConstantDequantizers() {
    for (size_t d : constant_dqs_) {
      const std::string& v = g_.nodes[d].outputs[0];
      bool read = Kept(v);
      for (size_t c : uses_.consumers.at(v)) read |= !removed_.count(c);
      if (!read) patch_.RemoveNode(g_.nodes[d].name);
    }
  }

  static ir::Attribute IntAttr(int64_t v) {
    ir::Attribute a;
    a.type = ir::Attribute::Type::kInt;
    a.i = v;
    return a;
  }

  const ir::Graph& g_;
  const OptimizeOptions& options_;
  const UseMap uses_;
  std::map<std::string, Tensor> constants_;
  std::set<size_t> claimed_;       // nodes of committed regions
  std::set<size_t> removed_;       // members removed or replaced by lookups
  std::set<size_t> constant_dqs_;  // DequantizeLinear nodes of constant operands the tables used
  GraphPatch patch_;
};

}  // namespace

GraphPatch FuseUnaryLookups(const ir::Graph& graph, const OptimizeOptions& options) {
  return LookupFuser(graph, options).Run();
}

}  // namespace seqto::rewrite
