// Recognizes activations and normalizations that exporters write out as chains of
// elementwise ops, and replaces each chain by one op (one pass over the tensor
// instead of four to nine):
//
//   LayerNorm  d = x - ReduceMean(x, [-1]);  d / Sqrt(ReduceMean(d^2, [-1]) + eps)
//              [* gamma] [+ beta]                 -> LayerNormalization(axis -1, eps)
//   GELU       x * 0.5 * (1 + Erf(x / sqrt(2))), in any association of the Muls
//                                                 -> com.seqto.Gelu
//   HardSwish  x * Clip(x + 3, 0, 6) / 6,  x * HardSigmoid(x, 1/6, 1/2)
//                                                 -> HardSwish (registered from opset 1)
//   Linear     MatMul(x, W) + b, W constant 2-D, b constant 1-D
//                                                 -> com.seqto.FusedMatMul (bias in oneDNN)
//
// (Paddle2ONNX, older PyTorch exports and Keras converters write these.) Every
// constant must be a float32 initializer with one element (gamma and beta: one per
// normalized element), so the fused op computes the same function up to float
// rounding: the fused kernels are tested against these chains in
// tests/unit/fuse_patterns_test.cc. Values in keep_values are never fused away.
#include <cmath>
#include <optional>

#include "rewrite/passes.h"

namespace seqto::rewrite {

namespace {

class PatternFuser {
 public:
  PatternFuser(const ir::Graph& g, const OptimizeOptions& options) : g_(g), options_(options), uses_(g) {}

  GraphPatch Run() {
    for (const ir::Node& n : g_.nodes) {
      if (!n.domain.empty() || claimed_.count(n.name)) continue;
      if (n.op_type == "Div") TryLayerNorm(n);
      if (n.op_type == "Erf") TryGelu(n);
      if (n.op_type == "Clip") TryHardSwishClip(n);
      if (n.op_type == "HardSigmoid") TryHardSwishSigmoid(n);
      if (n.op_type == "MatMul") TryMatMulBias(n);
    }
    return std::move(patch_);
  }

 private:
  // The node that alone reads `value` (which may then disappear), or nullptr.
  const ir::Node* SoleConsumer(const std::string& value) const {
    if (!uses_.SingleUse(value) || options_.keep_values.count(value)) return nullptr;
    const ir::Node* n = &g_.nodes[uses_.consumers.at(value)[0]];
    return n->domain.empty() && !claimed_.count(n->name) ? n : nullptr;
  }
  const ir::Node* Producer(const std::string& value) const {
    auto it = uses_.producer.find(value);
    if (it == uses_.producer.end()) return nullptr;
    const ir::Node* n = &g_.nodes[it->second];
    return n->domain.empty() && !claimed_.count(n->name) ? n : nullptr;
  }
  // A value that may vanish: read only by the chain, neither observed nor an output.
  bool Internal(const std::string& value) const { return uses_.SingleUse(value) && !options_.keep_values.count(value); }

  const Tensor* FloatConstant(const std::string& name) const {
    auto it = g_.initializers.find(name);
    return it != g_.initializers.end() && it->second.dtype() == DType::kFloat32 ? &it->second : nullptr;
  }
  // The value of a one-element float32 constant of rank <= max_rank.
  std::optional<float> Scalar(const std::string& name, int64_t max_rank) const {
    const Tensor* t = FloatConstant(name);
    if (!t || t->numel() != 1 || t->rank() > max_rank) return std::nullopt;
    return t->data<float>()[0];
  }
  static bool Near(float v, double want) { return std::fabs(v - want) <= 1e-6 * std::fabs(want); }

  // A lower bound on the rank of `value` (0 when unknown), so that a one-element
  // constant of rank r provably does not grow the shape of what it is combined with.
  int64_t MinRank(const std::string& value, int depth = 0) const {
    if (auto t = g_.initializers.find(value); t != g_.initializers.end()) return t->second.rank();
    for (const auto* infos : {&g_.inputs, &g_.value_infos})
      for (const ir::ValueInfo& vi : *infos)
        if (vi.name == value && vi.shape) return static_cast<int64_t>(vi.shape->size());
    auto it = uses_.producer.find(value);
    if (it == uses_.producer.end() || depth > 8) return 0;
    const ir::Node& p = g_.nodes[it->second];
    if (!p.domain.empty() && p.domain != "com.seqto") return 0;
    const std::string& op = p.op_type;
    if (op == "Conv" || op == "FusedConv") {
      const Tensor* w = p.inputs.size() > 1 ? FloatConstant(p.inputs[1]) : nullptr;
      return w ? w->rank() : 3;
    }
    if (op == "Transpose") {
      auto perm = p.attr_ints("perm");
      return perm && !perm->empty() ? static_cast<int64_t>(perm->size()) : MinRank(p.inputs[0], depth + 1);
    }
    if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "MatMul" ||
        op == "FusedMatMul") {
      int64_t r = 0;
      for (const auto& in : p.inputs) r = std::max(r, MinRank(in, depth + 1));
      return r;
    }
    if (op == "Relu" || op == "Clip" || op == "Erf" || op == "Sqrt" || op == "Sigmoid" || op == "HardSwish" ||
        op == "Gelu" || op == "Softmax" || op == "LayerNormalization" || op == "HardSigmoid" || op == "Tanh")
      return MinRank(p.inputs[0], depth + 1);
    return 0;
  }
  bool ScalarWith(const std::string& constant, const std::string& other, float want) const {
    const Tensor* t = FloatConstant(constant);
    auto v =
        t && t->numel() == 1 && t->rank() <= MinRank(other) ? std::optional<float>(t->data<float>()[0]) : std::nullopt;
    return v && Near(*v, want);
  }
  // For a binary node reading `x`: its other operand (empty when x is both or neither).
  static std::string Other(const ir::Node& n, const std::string& x) {
    if (n.inputs.size() != 2 || n.inputs[0] == n.inputs[1]) return "";
    if (n.inputs[0] == x) return n.inputs[1];
    if (n.inputs[1] == x) return n.inputs[0];
    return "";
  }
  static bool Is(const ir::Node* n, const char* op) {
    return n && n->op_type == op && n->outputs.size() == 1 && !n->has_attr("broadcast");
  }

  void Replace(const std::vector<const ir::Node*>& chain, ir::Node fused) {
    for (const ir::Node* n : chain) {
      claimed_.insert(n->name);
      patch_.RemoveNode(n->name);
    }
    patch_.AddNode(std::move(fused));
  }
  static ir::Node Make(const ir::Node& anchor, const char* domain, const char* op, std::vector<std::string> inputs,
                       const std::string& output) {
    ir::Node n;
    n.name = anchor.name;  // the last node of the chain: errors name it
    n.domain = domain;
    n.op_type = op;
    n.inputs = std::move(inputs);
    n.outputs = {output};
    return n;
  }

  // ReduceMean over the last axis only, keepdims on.
  bool MeanOfLastAxis(const ir::Node* n) const {
    if (!Is(n, "ReduceMean") || n->inputs.size() != 1) return false;
    auto keep = n->attr_int("keepdims", 1);
    auto axes = n->attr_ints("axes");
    if (!keep || *keep != 1 || !axes || axes->size() != 1) return false;
    const int64_t a = (*axes)[0];
    return a == -1 || (a >= 0 && a == MinRank(n->inputs[0]) - 1 && a > 0);
  }

  void TryLayerNorm(const ir::Node& div) {
    if (div.inputs.size() != 2 || div.outputs.size() != 1) return;
    const std::string& d = div.inputs[0];
    const ir::Node* sqrt = Producer(div.inputs[1]);
    const ir::Node* sub = Producer(d);
    if (!Is(sqrt, "Sqrt") || !Internal(sqrt->outputs[0]) || !Is(sub, "Sub") || sub->inputs.size() != 2) return;
    const ir::Node* add = Producer(sqrt->inputs[0]);
    if (!Is(add, "Add") || !Internal(add->outputs[0])) return;
    const ir::Node* var = nullptr;
    std::optional<float> eps;
    for (int i = 0; i < 2 && !var; ++i) {
      const ir::Node* p = Producer(add->inputs[i]);
      if (MeanOfLastAxis(p)) {
        var = p;
        eps = Scalar(add->inputs[1 - i], 1);
      }
    }
    if (!var || !eps || !(*eps >= 0) || !Internal(var->outputs[0])) return;
    const ir::Node* pow = Producer(var->inputs[0]);
    if (!pow || !Internal(pow->outputs[0]) || pow->inputs.size() != 2) return;
    const bool square = (Is(pow, "Pow") && pow->inputs[0] == d && Near(Scalar(pow->inputs[1], 1).value_or(0), 2.0)) ||
                        (Is(pow, "Mul") && pow->inputs[0] == d && pow->inputs[1] == d);
    if (!square) return;
    // d is read by exactly the square and the division.
    const auto& readers = uses_.consumers.at(d);
    if (std::set<size_t>(readers.begin(), readers.end()).size() != 2 || uses_.graph_outputs.count(d) ||
        options_.keep_values.count(d))
      return;
    const std::string& x = sub->inputs[0];
    const ir::Node* mean = Producer(sub->inputs[1]);
    if (!MeanOfLastAxis(mean) || mean->inputs[0] != x || !Internal(mean->outputs[0])) return;

    std::vector<const ir::Node*> chain = {mean, sub, pow, var, add, sqrt, &div};
    const ir::Node* last = &div;
    std::string scale, bias;
    // Optional affine: * gamma, then + beta (1-D, one value per normalized element).
    auto row_param = [&](const ir::Node* n, const std::string& in) -> std::string {
      const std::string other = Other(*n, in);
      const Tensor* t = FloatConstant(other);
      return t && t->rank() == 1 ? other : "";
    };
    if (const ir::Node* mul = SoleConsumer(div.outputs[0]);
        Is(mul, "Mul") && !(scale = row_param(mul, div.outputs[0])).empty()) {
      chain.push_back(mul);
      last = mul;
      if (const ir::Node* badd = SoleConsumer(mul->outputs[0]);
          Is(badd, "Add") && !(bias = row_param(badd, mul->outputs[0])).empty()) {
        chain.push_back(badd);
        last = badd;
      }
    }
    if (scale.empty()) {  // the op needs a Scale: a [1] one broadcasts over the row
      scale = div.name + "/layer_norm_scale";
      if (g_.initializers.count(scale)) return;
      patch_.SetInitializer(scale, Tensor::FromVector<float>({1}, {1.f}));
    }
    std::vector<std::string> inputs = {x, scale};
    if (!bias.empty()) inputs.push_back(bias);
    ir::Node ln = Make(*last, "", "LayerNormalization", inputs, last->outputs[0]);
    ln.attributes["axis"].type = ir::Attribute::Type::kInt;
    ln.attributes["axis"].i = -1;
    ln.attributes["epsilon"].type = ir::Attribute::Type::kFloat;
    ln.attributes["epsilon"].f = *eps;
    Replace(chain, std::move(ln));
  }

  void TryGelu(const ir::Node& erf) {
    if (erf.inputs.size() != 1 || erf.outputs.size() != 1) return;
    const ir::Node* scaled = Producer(erf.inputs[0]);
    if (!scaled || !Internal(scaled->outputs[0]) || scaled->inputs.size() != 2) return;
    std::string x;
    if (Is(scaled, "Div") && ScalarWith(scaled->inputs[1], scaled->inputs[0], std::sqrt(2.0)))
      x = scaled->inputs[0];
    else if (Is(scaled, "Mul"))
      for (int i = 0; i < 2 && x.empty(); ++i)
        if (ScalarWith(scaled->inputs[1 - i], scaled->inputs[i], std::sqrt(0.5))) x = scaled->inputs[i];
    if (x.empty()) return;
    const ir::Node* plus = SoleConsumer(erf.outputs[0]);
    if (!Is(plus, "Add") || !ScalarWith(Other(*plus, erf.outputs[0]), x, 1.0)) return;
    const std::string& a = plus->outputs[0];  // 1 + erf(x / sqrt 2)
    const ir::Node* m1 = SoleConsumer(a);
    if (!Is(m1, "Mul")) return;
    const std::string other = Other(*m1, a);
    std::vector<const ir::Node*> chain = {scaled, &erf, plus, m1};
    const ir::Node* last = nullptr;
    if (other == x) {  // (x * a) * 0.5
      const ir::Node* m2 = SoleConsumer(m1->outputs[0]);
      if (Is(m2, "Mul") && ScalarWith(Other(*m2, m1->outputs[0]), x, 0.5)) last = m2;
    } else if (ScalarWith(other, x, 0.5)) {  // (a * 0.5) * x
      const ir::Node* m2 = SoleConsumer(m1->outputs[0]);
      if (Is(m2, "Mul") && Other(*m2, m1->outputs[0]) == x) last = m2;
    } else if (const ir::Node* half = Producer(other);
               Is(half, "Mul") && Internal(other) && Other(*half, x) != "" && ScalarWith(Other(*half, x), x, 0.5)) {
      chain.push_back(half);  // (x * 0.5) * a
      last = m1;
    }
    if (!last) return;
    if (last != m1) chain.push_back(last);
    Replace(chain, Make(*last, "com.seqto", "Gelu", {x}, last->outputs[0]));
  }

  void TryHardSwishClip(const ir::Node& clip) {
    if (clip.outputs.size() != 1 || clip.inputs.empty() || !Internal(clip.outputs[0])) return;
    float lo = 0, hi = 0;
    if (clip.has_attr("min") || clip.has_attr("max")) {
      auto a = clip.attr_float("min", -1), b = clip.attr_float("max", -1);
      if (!a || !b || clip.inputs.size() != 1) return;
      lo = *a;
      hi = *b;
    } else {
      auto a = clip.inputs.size() > 1 ? Scalar(clip.inputs[1], 0) : std::nullopt;
      auto b = clip.inputs.size() > 2 ? Scalar(clip.inputs[2], 0) : std::nullopt;
      if (!a || !b) return;
      lo = *a;
      hi = *b;
    }
    if (lo != 0.f || hi != 6.f) return;
    const ir::Node* plus = Producer(clip.inputs[0]);
    if (!Is(plus, "Add") || !Internal(plus->outputs[0])) return;
    std::string x;
    for (int i = 0; i < 2 && x.empty(); ++i)
      if (ScalarWith(plus->inputs[1 - i], plus->inputs[i], 3.0)) x = plus->inputs[i];
    if (x.empty()) return;
    const ir::Node* mul = SoleConsumer(clip.outputs[0]);
    if (!Is(mul, "Mul") || Other(*mul, clip.outputs[0]) != x) return;
    const ir::Node* div = SoleConsumer(mul->outputs[0]);
    const std::string six = div ? Other(*div, mul->outputs[0]) : "";
    const bool by_six = (Is(div, "Div") && div->inputs[0] == mul->outputs[0] && ScalarWith(six, x, 6.0)) ||
                        (Is(div, "Mul") && ScalarWith(six, x, 1.0 / 6));
    if (!by_six) return;
    Replace({plus, &clip, mul, div}, Make(*div, "", "HardSwish", {x}, div->outputs[0]));
  }

  void TryHardSwishSigmoid(const ir::Node& hs) {
    if (hs.inputs.size() != 1 || hs.outputs.size() != 1 || !Internal(hs.outputs[0])) return;
    auto alpha = hs.attr_float("alpha", 0.2f), beta = hs.attr_float("beta", 0.5f);
    if (!alpha || !beta || !Near(*alpha, 1.0 / 6) || *beta != 0.5f) return;
    const ir::Node* mul = SoleConsumer(hs.outputs[0]);
    if (!Is(mul, "Mul") || Other(*mul, hs.outputs[0]) != hs.inputs[0]) return;
    Replace({&hs, mul}, Make(*mul, "", "HardSwish", {hs.inputs[0]}, mul->outputs[0]));
  }

  // MatMul(A, constant 2-D B) -> Add(constant 1-D bias of B's width): a linear layer.
  void TryMatMulBias(const ir::Node& mm) {
    if (mm.inputs.size() != 2 || mm.outputs.size() != 1) return;
    const Tensor* b = FloatConstant(mm.inputs[1]);
    if (!b || b->rank() != 2) return;
    const ir::Node* add = SoleConsumer(mm.outputs[0]);
    if (!Is(add, "Add")) return;
    const std::string bias = Other(*add, mm.outputs[0]);
    const Tensor* t = FloatConstant(bias);
    if (!t || t->rank() != 1 || t->dim(0) != b->dim(1)) return;
    ir::Node fused = Make(*add, "com.seqto", "FusedMatMul", {mm.inputs[0], mm.inputs[1], bias}, add->outputs[0]);
    fused.name = mm.name;  // errors name the MatMul
    Replace({&mm, add}, std::move(fused));
  }

  const ir::Graph& g_;
  const OptimizeOptions& options_;
  const UseMap uses_;
  std::set<std::string> claimed_;
  GraphPatch patch_;
};

}  // namespace

GraphPatch FusePatterns(const ir::Graph& g, const OptimizeOptions& options) { return PatternFuser(g, options).Run(); }

}  // namespace seqto::rewrite
