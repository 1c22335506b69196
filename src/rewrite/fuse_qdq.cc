// Runs the float islands of a QDQ model in integer arithmetic. A QDQ model (ONNX
// Runtime's quantizer, seqto's quant/) computes every quantized op in float:
//   DequantizeLinear -> float op -> QuantizeLinear
// This pass replaces such a chain by one op on the integer tensors:
//   DQ(x), DQ(w const), [DQ(b) | float b] -> Conv -> [Relu | Clip] -> Q
//        => com.seqto.QLinearConv (QLinearConv + integer clamp)
//   DQ(a), DQ(b) -> MatMul -> Q                           => QLinearMatMul
//   DQ(a), DQ(b const), [DQ(c) | float c] -> Gemm -> [Relu | Clip] -> Q
//        => com.seqto.QGemm (int8 x int8 -> int32, + int32 bias, requantize)
//   DQ(a), DQ(b) -> Add -> [Relu | Clip] -> Q             => com.seqto.QLinearAdd
//   DQ(a), DQ(b) -> Mul -> [Relu | Clip] -> Q             => com.seqto.QLinearMul
//   DQ(x) -> GlobalAveragePool -> Q                       => com.seqto.QLinearGlobalAveragePool
//   DQ(x) -> Relu | Clip | LeakyRelu -> Q                 => com.seqto.QLookup (256 entries)
//   DQ(x...) -> Reshape, Transpose, MaxPool, Concat, nearest Resize, ... -> Q with the same (scale,
//        zero point) => the op itself on the integer tensor (exact: DQ/Q are a
//        bijection on the integers and the op only moves or compares values)
//   DQ(x1), DQ(x2), ... -> Concat -> Q with other parameters per input
//        => com.seqto.QLookup per such input (Q(DQ_i(k)) for its 256 values) ->
//        Concat on the integers (exact, as the lookups; SqueezeNet's fire modules
//        concatenate two convs' outputs, each with its own range)
// The fused op's output is the Q's output, so the DQs that read it (one per
// consumer, or one shared) stay and see the same integer tensor.
//
// Conditions: scales and zero points are constants, activations per tensor, 8-bit
// types, weights per tensor or per output channel; the chain's intermediate values
// have no other reader; no value in keep_values would disappear or stop feeding the
// fused computation (observers and overrides must keep working). Anything else is
// left as it is: the float path stays correct.
//
// Exactness: activations fused into a clamp (ops/quant/fused_util.h), QLookup,
// QLinearAdd, QLinearMul and the pass-through ops reproduce the float path bit for bit. Conv,
// MatMul, Gemm and GlobalAveragePool requantize an exact integer sum (round(acc *
// sx*sw/sy)), where the float path rounds a float sum; the two can differ by one
// quantum where the real value lies within float rounding of a .5 tie. A float bias,
// or an int32 bias whose scale is not exactly sx*sw, is rounded to the
// accumulator's scale sx*sw once (an error of at most half an accumulator step,
// far below one output quantum).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "rewrite/passes.h"

namespace seqto::rewrite {

namespace {

constexpr const char* kSeqtoDomain = "com.seqto";

bool Is8Bit(DType t) { return t == DType::kUInt8 || t == DType::kInt8; }

struct IntRange {
  int32_t lo, hi;
};
IntRange RangeOf(DType t) { return t == DType::kUInt8 ? IntRange{0, 255} : IntRange{-128, 127}; }

ir::Attribute IntAttr(int64_t v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInt;
  a.i = v;
  return a;
}

// The constant parameters of one QuantizeLinear or DequantizeLinear.
struct QParams {
  const ir::Node* node = nullptr;
  DType type = DType::kUndefined;    // the integer side's element type
  std::vector<float> scales;         // one (per tensor) or one per index of `axis`
  std::vector<int32_t> zero_points;  // as many as scales (zeros without a zero point)
  int64_t axis = -1;                 // the quantized axis (normalized); -1 per tensor
  std::string scale_name, zp_name;   // zp_name "" when the node has no zero point
  bool per_tensor() const { return axis < 0; }
  float scale(int64_t i) const { return scales[per_tensor() ? 0 : i]; }
  int32_t zero_point(int64_t i) const { return zero_points[per_tensor() ? 0 : i]; }
  // Same quantization (type, scale bits, zero point), both per tensor.
  bool SameAs(const QParams& o) const {
    return per_tensor() && o.per_tensor() && type == o.type && zero_points[0] == o.zero_points[0] &&
           std::memcmp(&scales[0], &o.scales[0], sizeof(float)) == 0;
  }
  // QuantizeLinear of one float value, with its kernel's float32 operations:
  // clamp(round_half_even(v / scale) + zp). Per tensor only.
  int32_t Quantize(float v) const {
    const IntRange r = RangeOf(type);
    const int32_t zp = zero_points[0];
    float q = v / scales[0];
    if (std::isnan(q)) return zp;
    q = std::clamp(q, static_cast<float>(r.lo - zp), static_cast<float>(r.hi - zp));
    return static_cast<int32_t>(std::nearbyint(q)) + zp;  // default rounding: half to even
  }
  // DequantizeLinear of one integer, with its kernel's float32 operations.
  float Dequantize(int32_t q, int64_t i = 0) const {
    return static_cast<float>(static_cast<int64_t>(q) - zero_point(i)) * scale(i);
  }
};

// Elementwise activations a fused op can absorb, as float functions with the exact
// operations of their kernels (ops/elementwise).
struct Activation {
  enum class Kind { kRelu, kClip, kLeakyRelu } kind = Kind::kRelu;
  float lo = 0, hi = 0, alpha = 0;
  float operator()(float x) const {
    switch (kind) {
      case Kind::kRelu:
        return x < 0.f ? 0.f : x;
      case Kind::kClip:
        return std::min(std::max(x, lo), hi);  // min > max gives max, as the Clip kernel
      case Kind::kLeakyRelu:
        return x < 0.f ? alpha * x : x;
    }
    return x;
  }
  // The integer clamp that equals Q(act(v)) given Q(v): Q is monotone, so
  // Q(max(v, 0)) = max(Q(v), Q(0)) and Q(clip(v, lo, hi)) = clamp(Q(v), Q(lo), Q(hi)).
  // LeakyRelu has no such form.
  bool AsClamp(const QParams& q, int32_t& qlo, int32_t& qhi) const {
    if (kind == Kind::kLeakyRelu) return false;
    const IntRange r = RangeOf(q.type);
    qlo = kind == Kind::kRelu ? q.Quantize(0.f) : q.Quantize(lo);
    qhi = kind == Kind::kRelu ? r.hi : q.Quantize(hi);
    return true;
  }
};

class QdqFuser {
 public:
  QdqFuser(const ir::Graph& g, const OptimizeOptions& options)
      : g_(g), options_(options), uses_(g), constants_(ConstantValues(g)) {
    for (const auto& [name, t] : g.initializers) names_.insert(name);
    for (const auto& in : g.inputs) names_.insert(in.name);
    for (const auto& n : g.nodes)
      for (const auto& o : n.outputs) names_.insert(o);
  }

  GraphPatch Run() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const ir::Node& n = g_.nodes[i];
      if (!n.domain.empty() || claimed_.count(n.name) || n.outputs.empty() || n.outputs[0].empty()) continue;
      if (n.op_type == "Conv")
        TryConv(n);
      else if (n.op_type == "MatMul")
        TryMatMul(n);
      else if (n.op_type == "Gemm")
        TryGemm(n);
      else if (n.op_type == "Add" || n.op_type == "Mul")
        TryAdd(n);
      else if (n.op_type == "GlobalAveragePool")
        TryGlobalAveragePool(n);
      else if (n.op_type == "Relu" || n.op_type == "Clip" || n.op_type == "LeakyRelu")
        TryLookup(n);
      else
        TryPassThrough(n);
    }
    RemoveDeadDequantizers();
    return std::move(patch_);
  }

 private:
  // One fusion: the anchor (the float op) is replaced by `node` (same name); the
  // activation and the Q after it are removed.
  struct Fusion {
    ir::Node node;
    std::vector<std::string> removed;
    std::vector<std::string> vanishing;  // values no longer computed (or no longer read by the anchor)
    std::map<std::string, Tensor> initializers;
  };
  // What follows the anchor: [activation] -> Q.
  struct Tail {
    std::optional<Activation> activation;
    const ir::Node* activation_node = nullptr;
    QParams q;
  };

  const Tensor* Constant(const std::string& name) const {
    auto it = constants_.find(name);
    return it == constants_.end() ? nullptr : &it->second;
  }
  const ir::Node* Producer(const std::string& value) const {
    auto it = uses_.producer.find(value);
    return it == uses_.producer.end() ? nullptr : &g_.nodes[it->second];
  }
  // The node that alone reads `value` (not kept, not a graph output), unclaimed.
  const ir::Node* SoleReader(const std::string& value) const {
    if (!uses_.SingleUse(value) || options_.keep_values.count(value)) return nullptr;
    const ir::Node* n = &g_.nodes[uses_.consumers.at(value)[0]];
    return claimed_.count(n->name) ? nullptr : n;
  }

  // The element type of an integer value, where the graph tells it.
  DType TypeOf(const std::string& value) const {
    if (const Tensor* t = Constant(value)) return t->dtype();
    if (const ir::Node* p = Producer(value)) {
      if ((p->op_type == "QuantizeLinear") && (p->domain.empty() || p->domain == "com.microsoft")) {
        if (p->inputs.size() > 2 && !p->inputs[2].empty()) {
          const Tensor* zp = Constant(p->inputs[2]);
          return zp ? zp->dtype() : DType::kUndefined;
        }
        auto od = p->attr_int("output_dtype", 0);
        return od && *od != 0 ? static_cast<DType>(*od) : DType::kUInt8;
      }
      if (p->op_type == "DynamicQuantizeLinear" && p->domain.empty() && p->outputs[0] == value) return DType::kUInt8;
    }
    for (const auto& in : g_.inputs)
      if (in.name == value) return in.dtype;
    if (const ir::ValueInfo* vi = g_.FindValueInfo(value)) return vi->dtype;
    return DType::kUndefined;
  }

  // The parameters of a QuantizeLinear / DequantizeLinear node, when they are
  // constant, 8-bit and sane. `rank`: of the tensor it applies to (-1 unknown; then
  // only per-tensor parameters are accepted).
  std::optional<QParams> ReadQdq(const ir::Node& n, int64_t rank) const {
    if (!(n.domain.empty() || n.domain == "com.microsoft") || n.inputs.size() < 2 || n.outputs.size() != 1) return {};
    auto block = n.attr_int("block_size", 0);
    if (!block || *block != 0) return {};
    QParams p;
    p.node = &n;
    p.scale_name = n.inputs[1];
    const Tensor* scale = Constant(n.inputs[1]);
    if (!scale || scale->dtype() != DType::kFloat32 || scale->numel() < 1 || scale->rank() > 1) return {};
    for (int64_t i = 0; i < scale->numel(); ++i) {
      const float s = scale->data<float>()[i];
      if (!(s > 0.f) || !std::isfinite(s)) return {};
      p.scales.push_back(s);
    }
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      const Tensor* zp = Constant(n.inputs[2]);
      if (!zp || !Is8Bit(zp->dtype()) || zp->numel() != scale->numel()) return {};
      p.zp_name = n.inputs[2];
      p.type = zp->dtype();
      for (double v : zp->ToDoubles()) p.zero_points.push_back(static_cast<int32_t>(v));
    } else {
      p.zero_points.assign(p.scales.size(), 0);
      if (n.op_type == "QuantizeLinear") {
        auto od = n.attr_int("output_dtype", 0);
        if (!od) return {};
        p.type = *od != 0 ? static_cast<DType>(*od) : DType::kUInt8;
      } else {
        p.type = TypeOf(n.inputs[0]);
      }
    }
    if (!Is8Bit(p.type)) return {};
    if (p.scales.size() > 1) {
      auto axis = n.attr_int("axis", 1);
      if (!axis || rank < 1) return {};
      p.axis = *axis < 0 ? *axis + rank : *axis;
      if (p.axis < 0 || p.axis >= rank) return {};
    }
    return p;
  }

  // The DequantizeLinear producing `value` (a float32 tensor of rank `rank`), with
  // its parameters.
  std::optional<QParams> DqOf(const std::string& value, int64_t rank = -1) const {
    const ir::Node* p = Producer(value);
    if (!p || p->op_type != "DequantizeLinear") return {};
    return ReadQdq(*p, rank);
  }

  // A bound of a Clip: attribute (opset < 11) or constant scalar input.
  bool ClipBound(const ir::Node& clip, int input, const char* attr, float def, float& out) const {
    out = def;
    if (clip.has_attr(attr)) {
      auto v = clip.attr_float(attr, def);
      if (!v) return false;
      out = *v;
    }
    if (static_cast<int>(clip.inputs.size()) > input && !clip.inputs[input].empty()) {
      const Tensor* t = Constant(clip.inputs[input]);
      if (!t || t->dtype() != DType::kFloat32 || t->numel() != 1) return false;
      out = t->data<float>()[0];
    }
    return !std::isnan(out);
  }
  std::optional<Activation> AsActivation(const ir::Node& n) const {
    if (!n.domain.empty() || n.inputs.empty() || n.outputs.size() != 1) return {};
    Activation a;
    if (n.op_type == "Relu") {
      a.kind = Activation::Kind::kRelu;
    } else if (n.op_type == "Clip") {
      a.kind = Activation::Kind::kClip;
      if (!ClipBound(n, 1, "min", std::numeric_limits<float>::lowest(), a.lo) ||
          !ClipBound(n, 2, "max", std::numeric_limits<float>::max(), a.hi))
        return {};
    } else if (n.op_type == "LeakyRelu") {
      auto alpha = n.attr_float("alpha", 0.01f);
      if (!alpha) return {};
      a.kind = Activation::Kind::kLeakyRelu;
      a.alpha = *alpha;
    } else {
      return {};
    }
    return a;
  }

  // value -> [activation] -> Q (per tensor, 8-bit), each the sole reader of the last.
  std::optional<Tail> FollowTail(const std::string& value, bool allow_activation) const {
    Tail t;
    const ir::Node* next = SoleReader(value);
    if (!next) return {};
    if (allow_activation && next->op_type != "QuantizeLinear") {
      if (next->inputs[0] != value) return {};  // e.g. a Clip's bound, not its data
      t.activation = AsActivation(*next);
      if (!t.activation) return {};
      t.activation_node = next;
      next = SoleReader(next->outputs[0]);
      if (!next) return {};
    }
    if (next->op_type != "QuantizeLinear" ||
        next->inputs[0] != (t.activation_node ? t.activation_node->outputs[0] : value))
      return {};
    auto q = ReadQdq(*next, -1);
    if (!q || !q->per_tensor()) return {};
    t.q = *q;
    return t;
  }

  // A fresh value name.
  std::string NewName(const std::string& base) {
    std::string name = base;
    for (int i = 1; names_.count(name); ++i) name = base + "_" + std::to_string(i);
    names_.insert(name);
    return name;
  }
  // The zero point input for `p`: its own, or a new zero constant of its type.
  std::string ZeroPoint(const QParams& p, Fusion& f, const std::string& base) {
    if (!p.zp_name.empty()) return p.zp_name;
    const std::string name = NewName(base);
    Shape shape;
    if (!p.per_tensor()) shape = {static_cast<int64_t>(p.scales.size())};
    f.initializers[name] = Tensor(p.type, shape);  // zero-filled
    return name;
  }

  // A bias as int32 at scale in_scale * w_scale[j] (one per output channel/column
  // `count`): the quantized bias itself when its scale is exactly that (ONNX
  // Runtime's quantizer makes it so), else the real bias rounded to that scale.
  // `beta` multiplies the real bias (Gemm). Empty name when impossible.
  std::string BiasInput(const std::string& value, const QParams& in, const QParams& w, int64_t count, float beta,
                        Fusion& f, const std::string& base, std::vector<std::string>& vanishing) {
    std::vector<float> real;
    if (const Tensor* c = Constant(value)) {  // a float bias (quantizers may leave it so)
      if (c->dtype() != DType::kFloat32) return "";
      for (double v : c->ToDoubles()) real.push_back(static_cast<float>(v));
    } else {  // DequantizeLinear of a constant int32 bias
      const ir::Node* p = Producer(value);
      if (!p || p->op_type != "DequantizeLinear" || !(p->domain.empty() || p->domain == "com.microsoft") ||
          p->inputs.size() < 2)
        return "";
      const Tensor* q = Constant(p->inputs[0]);
      const Tensor* scale = Constant(p->inputs[1]);
      const Tensor* zp = p->inputs.size() > 2 && !p->inputs[2].empty() ? Constant(p->inputs[2]) : nullptr;
      if (!q || q->dtype() != DType::kInt32 || !scale || scale->dtype() != DType::kFloat32) return "";
      if (p->inputs.size() > 2 && !p->inputs[2].empty() && (!zp || zp->dtype() != DType::kInt32)) return "";
      const int64_t n = q->numel();
      if (scale->numel() != 1 && scale->numel() != n) return "";  // per tensor, or per element of a 1-D bias
      if (zp && zp->numel() != scale->numel()) return "";
      if (scale->numel() != 1 && q->rank() != 1) return "";
      const std::vector<int64_t> qv = q->ToInt64s();
      const std::vector<int64_t> zv = zp ? zp->ToInt64s() : std::vector<int64_t>(1, 0);
      const float* sv = scale->data<float>();
      bool exact = beta == 1.f && n == count;
      for (int64_t j = 0; j < n; ++j) {
        const int64_t zj = zv[zv.size() == 1 ? 0 : j];
        const float sj = sv[scale->numel() == 1 ? 0 : j];
        real.push_back(static_cast<float>(qv[j] - zj) * sj);  // DequantizeLinear's float32 arithmetic
        if (j < count) {
          const float acc_scale = in.scale(0) * w.scale(j);
          exact &= zj == 0 && std::memcmp(&sj, &acc_scale, sizeof(float)) == 0;
        }
      }
      vanishing.push_back(value);
      if (exact && q->rank() == 1) return p->inputs[0];
    }
    // Broadcast a single value; otherwise one per output channel.
    if (real.size() == 1) real.assign(static_cast<size_t>(count), real[0]);
    if (static_cast<int64_t>(real.size()) != count) return "";
    Tensor bias(DType::kInt32, {count});
    for (int64_t j = 0; j < count; ++j) {
      const double acc_scale = static_cast<double>(in.scale(0)) * static_cast<double>(w.scale(j));
      const double v = std::nearbyint(static_cast<double>(beta) * real[j] / acc_scale);
      if (!(std::fabs(v) < 2147483647.0)) return "";
      bias.data<int32_t>()[j] = static_cast<int32_t>(v);
    }
    const std::string name = NewName(base);
    f.initializers[name] = bias;
    return name;
  }

  bool Kept(const std::vector<std::string>& values) const {
    for (const auto& v : values)
      if (options_.keep_values.count(v)) return true;
    return false;
  }

  // Adds the tail to a fusion: the node writes the Q's output, the activation and
  // Q go; with `clamp` the activation becomes y_min / y_max.
  void Finish(Fusion& f, const ir::Node& anchor, const Tail& t, bool clamp) {
    f.vanishing.push_back(anchor.outputs[0]);
    if (t.activation_node) {
      f.removed.push_back(t.activation_node->name);
      f.vanishing.push_back(t.activation_node->outputs[0]);
    }
    f.removed.push_back(t.q.node->name);
    f.node.outputs = {t.q.node->outputs[0]};
    if (clamp && t.activation) {
      int32_t lo, hi;
      t.activation->AsClamp(t.q, lo, hi);
      f.node.attributes["y_min"] = IntAttr(lo);
      f.node.attributes["y_max"] = IntAttr(hi);
    }
  }

  // True when the activation (if any) is a clamp that does nothing for t.q's type.
  static bool ClampIsNoOp(const Tail& t) {
    if (!t.activation) return true;
    int32_t lo, hi;
    if (!t.activation->AsClamp(t.q, lo, hi)) return false;
    const IntRange r = RangeOf(t.q.type);
    return lo <= r.lo && hi >= r.hi;
  }

  void Commit(const ir::Node& anchor, Fusion f) {
    if (Kept(f.vanishing)) return;
    for (const auto& name : f.removed) {
      patch_.RemoveNode(name);
      claimed_.insert(name);
    }
    claimed_.insert(anchor.name);
    for (auto& [name, t] : f.initializers) patch_.SetInitializer(name, std::move(t));
    f.node.name = anchor.name;
    replaced_[anchor.name] = f.node;
    anchors_.push_back(static_cast<size_t>(&anchor - g_.nodes.data()));
    patch_.ReplaceNode(std::move(f.node));
  }

  void TryConv(const ir::Node& conv) {
    if (conv.inputs.size() < 2 || conv.outputs.size() != 1) return;
    auto x = DqOf(conv.inputs[0]);
    if (!x || !x->per_tensor()) return;
    const ir::Node* w_dq = Producer(conv.inputs[1]);
    if (!w_dq || w_dq->op_type != "DequantizeLinear" || w_dq->inputs.empty()) return;
    const Tensor* w_const = Constant(w_dq->inputs[0]);
    const int64_t w_rank = w_const ? w_const->rank() : -1;
    auto w = ReadQdq(*w_dq, w_rank);
    if (!w) return;
    const int64_t m = w_const && w_rank >= 3 ? w_const->dim(0) : -1;
    if (!w->per_tensor() && (w->axis != 0 || m < 0 || static_cast<int64_t>(w->scales.size()) != m)) return;
    auto tail = FollowTail(conv.outputs[0], true);
    if (!tail) return;
    int32_t lo, hi;
    if (tail->activation && !tail->activation->AsClamp(tail->q, lo, hi)) return;

    Fusion f;
    f.vanishing = {conv.inputs[0], conv.inputs[1]};
    f.node = conv;
    f.node.op_type = "QLinearConv";
    f.node.inputs = {x->node->inputs[0],
                     x->scale_name,
                     ZeroPoint(*x, f, conv.name + "_x_zero_point"),
                     w_dq->inputs[0],
                     w->scale_name,
                     ZeroPoint(*w, f, conv.name + "_w_zero_point"),
                     tail->q.scale_name,
                     ZeroPoint(tail->q, f, conv.name + "_y_zero_point")};
    if (conv.inputs.size() > 2 && !conv.inputs[2].empty()) {
      if (m < 0) return;
      const std::string bias = BiasInput(conv.inputs[2], *x, *w, m, 1.f, f, conv.name + "_bias_int32", f.vanishing);
      if (bias.empty()) return;
      f.node.inputs.push_back(bias);
    }
    // Always seqto's QLinearConv: the standard op plus a clamp, with a faster kernel
    // for constant parameters (ops/quant/qlinear_conv_act.cc).
    f.node.domain = kSeqtoDomain;
    Finish(f, conv, *tail, !ClampIsNoOp(*tail));
    Commit(conv, std::move(f));
  }

  void TryMatMul(const ir::Node& mm) {
    if (mm.inputs.size() != 2 || mm.outputs.size() != 1) return;
    auto a = DqOf(mm.inputs[0]);
    if (!a || !a->per_tensor()) return;
    const ir::Node* b_dq = Producer(mm.inputs[1]);
    if (!b_dq || b_dq->op_type != "DequantizeLinear" || b_dq->inputs.empty()) return;
    const Tensor* b_const = Constant(b_dq->inputs[0]);
    const int64_t b_rank = b_const ? b_const->rank() : -1;
    auto b = ReadQdq(*b_dq, b_rank);
    // Per column of B only: QLinearMatMul's b_scale is per tensor or per column.
    if (!b || (!b->per_tensor() && (b_rank < 2 || b->axis != b_rank - 1 ||
                                    static_cast<int64_t>(b->scales.size()) != b_const->dim(b_rank - 1))))
      return;
    auto tail = FollowTail(mm.outputs[0], true);
    if (!tail || !ClampIsNoOp(*tail)) return;
    Fusion f;
    f.vanishing = {mm.inputs[0], mm.inputs[1]};
    f.node = mm;
    f.node.op_type = "QLinearMatMul";
    f.node.inputs = {a->node->inputs[0],
                     a->scale_name,
                     ZeroPoint(*a, f, mm.name + "_a_zero_point"),
                     b_dq->inputs[0],
                     b->scale_name,
                     ZeroPoint(*b, f, mm.name + "_b_zero_point"),
                     tail->q.scale_name,
                     ZeroPoint(tail->q, f, mm.name + "_y_zero_point")};
    Finish(f, mm, *tail, false);
    Commit(mm, std::move(f));
  }

  void TryGemm(const ir::Node& gemm) {
    if (gemm.inputs.size() < 2 || gemm.outputs.size() != 1) return;
    auto alpha = gemm.attr_float("alpha", 1.f), beta = gemm.attr_float("beta", 1.f);
    auto trans_a = gemm.attr_int("transA", 0), trans_b = gemm.attr_int("transB", 0);
    if (!alpha || !beta || !trans_a || !trans_b || *alpha != 1.f || *trans_a != 0) return;
    auto a = DqOf(gemm.inputs[0]);
    if (!a || !a->per_tensor()) return;
    const ir::Node* b_dq = Producer(gemm.inputs[1]);
    if (!b_dq || b_dq->op_type != "DequantizeLinear" || b_dq->inputs.empty()) return;
    const Tensor* b_const = Constant(b_dq->inputs[0]);
    if (!b_const || b_const->rank() != 2) return;
    auto b = ReadQdq(*b_dq, 2);
    const int64_t n_axis = *trans_b ? 0 : 1;
    const int64_t n = b_const->dim(n_axis), k = b_const->dim(1 - n_axis);
    if (!b || (!b->per_tensor() && (b->axis != n_axis || static_cast<int64_t>(b->scales.size()) != n))) return;
    auto tail = FollowTail(gemm.outputs[0], true);
    if (!tail) return;
    int32_t lo, hi;
    if (tail->activation && !tail->activation->AsClamp(tail->q, lo, hi)) return;

    Fusion f;
    f.vanishing = {gemm.inputs[0], gemm.inputs[1]};
    std::string b_name = b_dq->inputs[0];
    if (*trans_b) {  // QGemm takes B as [K, N]: transpose the constant once
      Tensor bt(b_const->dtype(), {k, n});
      const uint8_t* src = static_cast<const uint8_t*>(b_const->raw());
      uint8_t* dst = static_cast<uint8_t*>(bt.raw());
      for (int64_t r = 0; r < k; ++r)
        for (int64_t c = 0; c < n; ++c) dst[r * n + c] = src[c * k + r];
      b_name = NewName(b_dq->inputs[0] + "_transposed");
      f.initializers[b_name] = bt;
    }
    f.node.op_type = "QGemm";
    f.node.domain = kSeqtoDomain;
    f.node.inputs = {a->node->inputs[0],
                     a->scale_name,
                     ZeroPoint(*a, f, gemm.name + "_a_zero_point"),
                     b_name,
                     b->scale_name,
                     ZeroPoint(*b, f, gemm.name + "_b_zero_point"),
                     tail->q.scale_name,
                     ZeroPoint(tail->q, f, gemm.name + "_y_zero_point")};
    if (gemm.inputs.size() > 2 && !gemm.inputs[2].empty() && *beta != 0.f) {
      const Tensor* c = Constant(gemm.inputs[2]);
      const ir::Node* c_dq = Producer(gemm.inputs[2]);
      const Tensor* cq = c_dq && !c_dq->inputs.empty() ? Constant(c_dq->inputs[0]) : nullptr;
      const Tensor* shape_of = c ? c : cq;
      // A bias per column: [N], [1, N] or a single value. (Per-row or full C is rare.)
      if (!shape_of ||
          !(shape_of->numel() == 1 || (shape_of->numel() == n && shape_of->dim(shape_of->rank() - 1) == n)))
        return;
      const std::string bias = BiasInput(gemm.inputs[2], *a, *b, n, *beta, f, gemm.name + "_bias_int32", f.vanishing);
      if (bias.empty()) return;
      f.node.inputs.push_back(bias);
    }
    Finish(f, gemm, *tail, !ClampIsNoOp(*tail));
    Commit(gemm, std::move(f));
  }

  void TryAdd(const ir::Node& add) {
    if (add.inputs.size() != 2 || add.outputs.size() != 1 || add.has_attr("broadcast")) return;
    auto a = DqOf(add.inputs[0]);
    auto b = DqOf(add.inputs[1]);
    if (!a || !b || !a->per_tensor() || !b->per_tensor()) return;
    auto tail = FollowTail(add.outputs[0], true);
    if (!tail) return;
    int32_t lo, hi;
    if (tail->activation && !tail->activation->AsClamp(tail->q, lo, hi)) return;
    Fusion f;
    f.vanishing = {add.inputs[0], add.inputs[1]};
    f.node.op_type = add.op_type == "Mul" ? "QLinearMul" : "QLinearAdd";
    f.node.domain = kSeqtoDomain;
    f.node.inputs = {a->node->inputs[0],
                     a->scale_name,
                     ZeroPoint(*a, f, add.name + "_a_zero_point"),
                     b->node->inputs[0],
                     b->scale_name,
                     ZeroPoint(*b, f, add.name + "_b_zero_point"),
                     tail->q.scale_name,
                     ZeroPoint(tail->q, f, add.name + "_y_zero_point")};
    Finish(f, add, *tail, !ClampIsNoOp(*tail));
    Commit(add, std::move(f));
  }

  void TryGlobalAveragePool(const ir::Node& pool) {
    if (pool.inputs.size() != 1 || pool.outputs.size() != 1) return;
    auto x = DqOf(pool.inputs[0]);
    if (!x || !x->per_tensor()) return;
    auto tail = FollowTail(pool.outputs[0], false);
    if (!tail) return;
    Fusion f;
    f.vanishing = {pool.inputs[0]};
    f.node.op_type = "QLinearGlobalAveragePool";
    f.node.domain = kSeqtoDomain;
    f.node.inputs = {x->node->inputs[0], x->scale_name, ZeroPoint(*x, f, pool.name + "_x_zero_point"),
                     tail->q.scale_name, ZeroPoint(tail->q, f, pool.name + "_y_zero_point")};
    Finish(f, pool, *tail, false);
    Commit(pool, std::move(f));
  }

  // DQ -> activation -> Q: a table of the 256 results, computed with the float path's
  // own operations.
  void TryLookup(const ir::Node& act_node) {
    auto act = AsActivation(act_node);
    if (!act) return;
    auto x = DqOf(act_node.inputs[0]);
    if (!x || !x->per_tensor()) return;
    auto tail = FollowTail(act_node.outputs[0], false);
    if (!tail) return;
    Fusion f;
    f.vanishing = {act_node.inputs[0]};
    std::vector<int64_t> table(256);
    bool identity = x->type == tail->q.type;
    const int32_t offset = x->type == DType::kInt8 ? -128 : 0;
    for (int32_t k = 0; k < 256; ++k) {
      table[k] = tail->q.Quantize((*act)(x->Dequantize(k + offset)));
      identity &= table[k] == k + offset;
    }
    f.node.inputs = {x->node->inputs[0]};
    if (identity) {  // e.g. Relu where Q's zero point is the type's minimum
      f.node.op_type = "Identity";
    } else {
      f.node.op_type = "QLookup";
      f.node.domain = kSeqtoDomain;
      ir::Attribute t;
      t.type = ir::Attribute::Type::kInts;
      t.ints = std::move(table);
      f.node.attributes["table"] = std::move(t);
      f.node.attributes["x_type"] = IntAttr(static_cast<int64_t>(x->type));
      f.node.attributes["y_type"] = IntAttr(static_cast<int64_t>(tail->q.type));
    }
    Finish(f, act_node, *tail, false);
    Commit(act_node, std::move(f));
  }

  // Ops that only move, select or compare values: with the same (scale, zero point)
  // on both sides, running them on the integers is exact.
  // Concat of dequantized 8-bit inputs whose parameters differ from the Q after it:
  // each such input is requantized by a lookup table, then the integers are
  // concatenated. Per-tensor parameters only.
  bool TryConcat(const ir::Node& n) {
    if (n.op_type != "Concat" || n.inputs.empty() || n.outputs.size() != 1) return false;
    auto tail = FollowTail(n.outputs[0], false);
    if (!tail) return false;
    std::vector<QParams> in;
    for (const auto& v : n.inputs) {
      auto x = DqOf(v);
      if (!x || !x->per_tensor()) return false;
      in.push_back(*x);
    }
    Fusion f;
    f.node = n;
    std::vector<ir::Node> lookups;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      f.vanishing.push_back(n.inputs[i]);
      const QParams& x = in[i];
      if (x.SameAs(tail->q)) {
        f.node.inputs[i] = x.node->inputs[0];
        continue;
      }
      ir::Node lookup;
      lookup.op_type = "QLookup";
      lookup.domain = kSeqtoDomain;
      lookup.name = n.name + "/requantize_" + std::to_string(i);
      lookup.inputs = {x.node->inputs[0]};
      lookup.outputs = {NewName(n.inputs[i] + "/requantized")};
      ir::Attribute t;
      t.type = ir::Attribute::Type::kInts;
      const int32_t offset = x.type == DType::kInt8 ? -128 : 0;
      for (int32_t k = 0; k < 256; ++k) t.ints.push_back(tail->q.Quantize(x.Dequantize(k + offset)));
      lookup.attributes["table"] = std::move(t);
      lookup.attributes["x_type"] = IntAttr(static_cast<int64_t>(x.type));
      lookup.attributes["y_type"] = IntAttr(static_cast<int64_t>(tail->q.type));
      f.node.inputs[i] = lookup.outputs[0];
      lookups.push_back(std::move(lookup));
    }
    if (Kept(f.vanishing)) return false;
    Finish(f, n, *tail, false);
    Commit(n, std::move(f));
    for (auto& l : lookups) patch_.AddNode(std::move(l));
    return true;
  }

  // Resize in nearest mode picks input elements (opset 11+ form: roi, scales, sizes
  // are constants or absent, the mode is not tf_crop_and_resize, whose extrapolation
  // value is a real number): the PP-OCR detector's FPN upsamplings.
  bool IsNearestResize(const ir::Node& n) const {
    if (n.op_type != "Resize" || !n.domain.empty() || n.inputs.size() < 3) return false;
    auto mode = n.attr_string("mode", "nearest");
    auto coord = n.attr_string("coordinate_transformation_mode", "half_pixel");
    if (!mode || *mode != "nearest" || !coord || *coord == "tf_crop_and_resize") return false;
    for (size_t i = 1; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty() && !g_.initializers.count(n.inputs[i])) return false;
    return true;
  }

  void TryPassThrough(const ir::Node& n) {
    static const std::set<std::string> kOps = {"Reshape",  "Flatten", "Squeeze",      "Unsqueeze",    "Transpose",
                                               "Identity", "MaxPool", "DepthToSpace", "SpaceToDepth", "Slice",
                                               "Gather",   "Expand",  "Tile",         "Concat"};
    if ((!kOps.count(n.op_type) && !IsNearestResize(n)) || n.inputs.empty()) return;
    // MaxPool's optional Indices output would have no integer counterpart to check.
    if (n.op_type == "MaxPool" && n.outputs.size() > 1 && !n.outputs[1].empty()) return;
    if (n.outputs.size() != 1 && n.op_type != "MaxPool") return;
    const size_t data_inputs = n.op_type == "Concat" ? n.inputs.size() : 1;
    auto tail = FollowTail(n.outputs[0], false);
    if (!tail) return;
    Fusion f;
    f.node = n;
    for (size_t i = 0; i < data_inputs; ++i) {
      auto x = DqOf(n.inputs[i]);
      if (!x || !x->SameAs(tail->q)) {
        if (n.op_type == "Concat") TryConcat(n);
        return;
      }
      f.vanishing.push_back(n.inputs[i]);
      f.node.inputs[i] = x->node->inputs[0];
    }
    Finish(f, n, *tail, false);
    f.node.outputs.resize(n.outputs.size());  // MaxPool's omitted Indices stays omitted
    Commit(n, std::move(f));
  }

  // DequantizeLinear nodes that fused ops no longer need: no remaining reader, not a
  // graph output, not kept.
  void RemoveDeadDequantizers() {
    std::set<const ir::Node*> candidates;
    for (size_t anchor : anchors_)
      for (const auto& in : g_.nodes[anchor].inputs)
        if (const ir::Node* p = Producer(in); p && p->op_type == "DequantizeLinear") candidates.insert(p);
    for (const ir::Node* dq : candidates) {
      const std::string& out = dq->outputs[0];
      if (uses_.graph_outputs.count(out) || options_.keep_values.count(out)) continue;
      bool read = false;
      for (size_t idx : uses_.consumers.at(out)) {
        const ir::Node& reader = g_.nodes[idx];
        if (claimed_.count(reader.name) && !replaced_.count(reader.name)) continue;  // removed
        const ir::Node& now = replaced_.count(reader.name) ? replaced_.at(reader.name) : reader;
        for (const auto& in : now.inputs) read |= in == out;
      }
      if (!read) patch_.RemoveNode(dq->name);
    }
  }

  const ir::Graph& g_;
  const OptimizeOptions& options_;
  const UseMap uses_;
  std::map<std::string, Tensor> constants_;
  std::set<std::string> names_;               // every value name, to make new ones unique
  std::set<std::string> claimed_;             // nodes fused (anchors and removed nodes)
  std::map<std::string, ir::Node> replaced_;  // anchor name -> its replacement
  std::vector<size_t> anchors_;               // indices of the replaced nodes
  GraphPatch patch_;
};

}  // namespace

GraphPatch FuseQdq(const ir::Graph& graph, const OptimizeOptions& options) { return QdqFuser(graph, options).Run(); }

}  // namespace seqto::rewrite
