#include "quant/macs.h"

#include <optional>
#include <set>

#include "core/shape.h"
#include "onnxio/model_io.h"
#include "quant/quantize.h"

namespace seqto::quant {

namespace {

// The shape of `name` when every dimension is known: an initializer's, or the
// inferred one.
std::optional<std::vector<int64_t>> KnownShape(const ir::Graph& graph, const std::string& name) {
  if (auto it = graph.initializers.find(name); it != graph.initializers.end()) return it->second.shape();
  const ir::ValueInfo* v = graph.FindValueInfo(name);
  if (!v || !v->shape) return std::nullopt;
  std::vector<int64_t> dims;
  for (const ir::Dim& d : *v->shape) {
    if (!d.known()) return std::nullopt;
    dims.push_back(d.value);
  }
  return dims;
}

// Where the data input and the weight of a counted op are; nullopt for other ops.
struct Operands {
  size_t data = 0, weight = 1;
  enum class Kind { kConv, kConvTranspose, kGemm, kMatMul } kind;
};

std::optional<Operands> OperandsOf(const ir::Node& n) {
  using K = Operands::Kind;
  const bool onnx = n.domain.empty() || n.domain == "ai.onnx";
  if (onnx) {
    if (n.op_type == "Conv" || n.op_type == "ConvInteger") return Operands{0, 1, K::kConv};
    if (n.op_type == "QLinearConv") return Operands{0, 3, K::kConv};
    if (n.op_type == "ConvTranspose") return Operands{0, 1, K::kConvTranspose};
    if (n.op_type == "Gemm") return Operands{0, 1, K::kGemm};
    if (n.op_type == "MatMul" || n.op_type == "MatMulInteger") return Operands{0, 1, K::kMatMul};
    if (n.op_type == "QLinearMatMul") return Operands{0, 3, K::kMatMul};
    return std::nullopt;
  }
  if (n.domain == "com.microsoft" || n.domain == "com.seqto") {
    if (n.op_type == "FusedConv") return Operands{0, 1, K::kConv};
    if (n.op_type == "QLinearConv") return Operands{0, 3, K::kConv};
    if (n.op_type == "FusedMatMul") return Operands{0, 1, K::kMatMul};
    if (n.op_type == "QGemm") return Operands{0, 3, K::kGemm};
  }
  return std::nullopt;
}

// MACs of one counted node, nullopt when a shape it needs is unknown.
std::optional<int64_t> NodeMacs(const ir::Graph& graph, const ir::Node& n, const Operands& op) {
  if (n.inputs.size() <= std::max(op.data, op.weight) || n.outputs.empty()) return std::nullopt;
  const auto x = KnownShape(graph, n.inputs[op.data]);
  const auto w = KnownShape(graph, n.inputs[op.weight]);
  const auto y = KnownShape(graph, n.outputs[0]);
  switch (op.kind) {
    case Operands::Kind::kConv:  // W: [M, C/group, k...]
      if (!y || !w || w->empty() || (*w)[0] <= 0) return std::nullopt;
      return NumElements(*y) * (NumElements(*w) / (*w)[0]);
    case Operands::Kind::kConvTranspose:  // W: [C, M/group, k...]
      if (!x || !w || w->empty() || (*w)[0] <= 0) return std::nullopt;
      return NumElements(*x) * (NumElements(*w) / (*w)[0]);
    case Operands::Kind::kGemm: {  // A: [M, K] or, transposed, [K, M]
      if (!x || !y || x->size() != 2) return std::nullopt;
      auto trans = n.attr_int("transA", 0);
      if (!trans) return std::nullopt;
      return NumElements(*y) * (*trans ? (*x)[0] : (*x)[1]);
    }
    case Operands::Kind::kMatMul: {  // A: [..., M, K] or [K]
      if (!x || !y || x->empty()) return std::nullopt;
      int64_t k = x->back();
      if (n.op_type == "FusedMatMul" && x->size() >= 2) {
        auto trans = n.attr_int("transA", 0);
        if (!trans) return std::nullopt;
        if (*trans) k = (*x)[x->size() - 2];
      }
      return NumElements(*y) * k;
    }
  }
  return std::nullopt;
}

}  // namespace

MacCount CountMacs(const ir::Model& model) {
  ir::Model m = model;
  for (ir::ValueInfo& in : m.graph.inputs)
    if (in.shape && !in.shape->empty() && !(*in.shape)[0].known()) (*in.shape)[0] = ir::Dim{1, ""};
  m.graph.value_infos.clear();
  // Without graph outputs every node output is an intermediate value, whose inferred
  // shape (batch 1, not a declared symbolic batch) lands in value_infos.
  m.graph.outputs.clear();
  // A model shape inference refuses still quantizes: its counted nodes are unknown.
  (void)onnxio::InferShapes(m);
  MacCount count;
  for (const ir::Node& n : m.graph.nodes) {
    const auto op = OperandsOf(n);
    if (!op) continue;
    if (const auto macs = NodeMacs(m.graph, n, *op)) {
      count.nodes[n.name] = *macs;
      count.total += *macs;
    } else {
      count.unknown.push_back(n.name);
    }
  }
  return count;
}

std::vector<int64_t> GroupMacs(const std::vector<QuantGroup>& groups, const MacCount& count) {
  const std::set<std::string> unknown(count.unknown.begin(), count.unknown.end());
  std::vector<int64_t> macs;
  for (const QuantGroup& g : groups) {
    int64_t sum = 0;
    for (const std::string& n : g.nodes) {
      if (unknown.count(n)) {
        sum = -1;
        break;
      }
      if (auto it = count.nodes.find(n); it != count.nodes.end()) sum += it->second;
    }
    macs.push_back(sum);
  }
  return macs;
}

}  // namespace seqto::quant
