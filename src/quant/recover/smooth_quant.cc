// SmoothQuant (Xiao et al., "SmoothQuant: Accurate and Efficient Post-Training
// Quantization for Large Language Models", 2023; ONNX Runtime's extra options
// SmoothQuant, SmoothQuantAlpha, SmoothQuantFolding, implemented there by Intel
// Neural Compressor), on the prepared float model before calibration.
//
// A MatMul/Gemm Y = A W with a constant weight computes the same with A' = A / s and
// W' = diag(s) W for any s > 0 per input channel j (A's last axis, W's rows). A few
// activation channels with a range far above the others (as transformers' LayerNorm
// outputs have) waste a per-tensor activation grid on them; the weights' rows are
// usually even. With s_j = max|A_j|^alpha / max|W_j|^(1 - alpha) part of the
// activation's spread moves into the weights: alpha 1 moves all of it, 0 none of the
// activation's (and evens out the weights' rows instead). max|A_j| is measured on the
// calibration samples, max|W_j| over the output columns of every MatMul that reads A
// (Q/K/V projections reading one LayerNorm share one s).
//
// Where A's producer can absorb 1/s exactly, it does (`folding`, default): a
// LayerNormalization's scale and bias, a Mul or Add by a constant (the decomposed
// LayerNorm's Mul(gamma) -> Add(beta)), a MatMul/Gemm's constant weight columns and
// bias, through Relu/LeakyRelu (positively homogeneous), as long as every value on
// the way is read by nothing else (A itself only by the smoothed MatMuls). Elsewhere a
// Mul by the constant 1/s is inserted before the MatMuls; the quantizer quantizes it
// like any Mul, so A is rounded on its own (outlier) grid at that Mul's input before
// the smoothed grid: the activation gain is then lost where A is quantized anyway
// (the weights' side still changes), which is why folding is preferred.
//
// `alpha_search` picks alpha per group from 0, 0.05, ..., 1: the one whose
// fake-quantized MatMul outputs (activation per tensor from the calibration range of
// A / s, weights as the options quantize them) are closest to the float outputs on up
// to 2048 sampled rows of A (relative squared error summed over the group's MatMuls).
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "quant/node_filter.h"
#include "quant/recover/technique.h"
#include "runtime/session.h"

namespace seqto::quant::recover {

using nlohmann::json;

namespace {

constexpr double kTiny = 1e-5;  // max|A_j| and max|W_j| below this count as this
constexpr double kMinScale = 1e-4, kMaxScale = 1e4;
constexpr int kAlphaSteps = 20;  // the search's grid: 0, 0.05, ..., 1
constexpr int64_t kSearchRows = 2048;

bool OnnxOp(const ir::Node& n, const char* op) {
  return n.op_type == op && (n.domain.empty() || n.domain == "ai.onnx");
}

const std::string& InputAt(const ir::Node& n, size_t i) {
  static const std::string none;
  return i < n.inputs.size() ? n.inputs[i] : none;
}

struct Uses {
  std::map<std::string, std::vector<size_t>> consumers;
  std::map<std::string, size_t> producer;
  std::set<std::string> graph_io;
  std::map<std::string, int> reads;  // initializer -> node inputs reading it
};

Uses CountUses(const ir::Graph& g) {
  Uses u;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& in : g.nodes[i].inputs) {
      if (in.empty()) continue;
      u.consumers[in].push_back(i);
      if (g.initializers.count(in)) ++u.reads[in];
    }
    for (const auto& out : g.nodes[i].outputs)
      if (!out.empty()) u.producer[out] = i;
  }
  for (const auto& v : g.inputs) u.graph_io.insert(v.name);
  for (const auto& v : g.outputs) u.graph_io.insert(v.name);
  return u;
}

const Tensor* FloatInitializer(const ir::Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  return it != g.initializers.end() && it->second.dtype() == DType::kFloat32 ? &it->second : nullptr;
}

// A MatMul/Gemm reading A (input 0, an activation) with a constant 2-D weight used
// by it alone.
struct Consumer {
  size_t node = 0;
  std::string weight;
  bool trans_b = false;  // the weight is [N, K] (Gemm transB)
};

struct Group {
  std::string input;  // A
  int64_t k = 0;      // its channels (last axis)
  std::vector<Consumer> consumers;
};

std::optional<Consumer> AsConsumer(const ir::Graph& g, const Uses& u, size_t i, int64_t& k) {
  const ir::Node& n = g.nodes[i];
  const bool gemm = OnnxOp(n, "Gemm");
  if (!(gemm || OnnxOp(n, "MatMul")) || n.inputs.size() < 2 || n.outputs.empty()) return std::nullopt;
  if (g.initializers.count(n.inputs[0])) return std::nullopt;
  const Tensor* w = FloatInitializer(g, n.inputs[1]);
  if (!w || w->rank() != 2 || u.reads.at(n.inputs[1]) != 1) return std::nullopt;
  Consumer c;
  c.node = i;
  c.weight = n.inputs[1];
  if (gemm) {
    auto ta = n.attr_int("transA", 0), tb = n.attr_int("transB", 0);
    if (!ta.ok() || !tb.ok() || *ta != 0) return std::nullopt;  // A's channels must be its last axis
    c.trans_b = *tb != 0;
  }
  k = w->dim(c.trans_b ? 1 : 0);
  return c;
}

// The groups, in the order of their first MatMul (a group's weights are final before
// a later group folds into them).
std::vector<Group> FindGroups(const ir::Graph& g, const Uses& u, const NodeFilter* filter) {
  std::vector<Group> groups;
  std::map<std::string, size_t> by_input;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (filter && !filter->Selects(g.nodes[i])) continue;  // A is not quantized for it
    int64_t k = 0;
    auto c = AsConsumer(g, u, i, k);
    if (!c || k <= 0) continue;
    const std::string& a = g.nodes[i].inputs[0];
    auto [it, added] = by_input.emplace(a, groups.size());
    if (added) groups.push_back(Group{a, k, {}});
    Group& group = groups[it->second];
    if (group.k != k) continue;  // an invalid model; leave it to the runtime's error
    group.consumers.push_back(*c);
  }
  return groups;
}

// The groups whose MatMuls the options quantize (all without options).
Expected<std::vector<Group>> SelectedGroups(const ir::Model& model, const Uses& u, const QuantOptions* options) {
  if (!options) return FindGroups(model.graph, u, nullptr);
  NodeFilterSpec spec;
  spec.op_types = options->op_types_to_quantize;
  spec.include = options->nodes_to_quantize;
  spec.exclude = options->nodes_to_exclude;
  SEQTO_ASSIGN_OR_RETURN(NodeFilter filter, NodeFilter::ForGraph(model.graph, std::move(spec),
                                                                 QuantPlan::SupportedOpTypes(options->mode)));
  return FindGroups(model.graph, u, &filter);
}

// What A's producer chain does to absorb 1/s: divide a constant along its last axis,
// a MatMul weight's columns (rows when transposed).
struct Edit {
  enum Kind { kLastAxis, kColumns, kRows } kind;
  size_t node;
  size_t input;
};

bool ConstantFolds(const ir::Graph& g, const std::string& name, int64_t k) {
  const Tensor* t = FloatInitializer(g, name);
  if (!t) return false;
  return t->rank() == 0 || t->dim(t->rank() - 1) == k || t->dim(t->rank() - 1) == 1;
}

// Plans dividing `value` (read by `readers` alone) by s along its last axis through
// its producers; false when not exact.
bool PlanFold(const ir::Graph& g, const Uses& u, const std::string& value, const std::set<size_t>& readers, int64_t k,
              std::vector<Edit>& edits, int depth = 0) {
  if (depth > 8 || u.graph_io.count(value) || !u.producer.count(value)) return false;
  auto c = u.consumers.find(value);
  if (c == u.consumers.end() || std::set<size_t>(c->second.begin(), c->second.end()) != readers) return false;
  const size_t p = u.producer.at(value);
  const ir::Node& n = g.nodes[p];
  if (n.outputs.empty() || n.outputs[0] != value) return false;
  const bool c0 = g.initializers.count(InputAt(n, 0)) != 0, c1 = g.initializers.count(InputAt(n, 1)) != 0;
  if (OnnxOp(n, "LayerNormalization")) {
    if (!ConstantFolds(g, InputAt(n, 1), k)) return false;
    edits.push_back({Edit::kLastAxis, p, 1});
    if (!InputAt(n, 2).empty()) {
      if (!ConstantFolds(g, InputAt(n, 2), k)) return false;
      edits.push_back({Edit::kLastAxis, p, 2});
    }
    return true;
  }
  if (OnnxOp(n, "Mul") && n.inputs.size() == 2 && c0 != c1) {
    const size_t ci = c0 ? 0 : 1;
    if (!ConstantFolds(g, n.inputs[ci], k)) return false;
    edits.push_back({Edit::kLastAxis, p, ci});
    return true;
  }
  if (OnnxOp(n, "Add") && n.inputs.size() == 2 && c0 != c1) {
    const size_t ci = c0 ? 0 : 1;
    if (!ConstantFolds(g, n.inputs[ci], k)) return false;
    edits.push_back({Edit::kLastAxis, p, ci});
    return PlanFold(g, u, n.inputs[1 - ci], {p}, k, edits, depth + 1);
  }
  if (OnnxOp(n, "Relu") || OnnxOp(n, "LeakyRelu")) return PlanFold(g, u, InputAt(n, 0), {p}, k, edits, depth + 1);
  if ((OnnxOp(n, "MatMul") || OnnxOp(n, "Gemm")) && !c0 && c1) {
    const Tensor* w = FloatInitializer(g, n.inputs[1]);
    bool trans_b = false;
    if (OnnxOp(n, "Gemm")) {
      auto tb = n.attr_int("transB", 0);
      if (!tb.ok()) return false;
      trans_b = *tb != 0;
    }
    if (!w || w->rank() != 2 || w->dim(trans_b ? 0 : 1) != k) return false;
    edits.push_back({trans_b ? Edit::kRows : Edit::kColumns, p, 1});
    if (OnnxOp(n, "Gemm") && !InputAt(n, 2).empty()) {
      if (!ConstantFolds(g, InputAt(n, 2), k)) return false;
      edits.push_back({Edit::kLastAxis, p, 2});
    }
    return true;
  }
  return false;
}

std::string FreshName(const ir::Graph& g, const std::set<std::string>& taken, std::string name) {
  while (g.initializers.count(name) || taken.count(name)) name += "_";
  return name;
}

// The node's own copy of its input `input` (a clone under a new name when other
// inputs read the same initializer), writable.
Tensor& OwnConstant(ir::Graph& g, Uses& u, ir::Node& n, size_t input) {
  std::string name = n.inputs[input];
  if (u.reads[name] > 1) {
    --u.reads[name];
    const std::string copy = FreshName(g, {}, name + "_smoothed");
    g.initializers[copy] = g.initializers.at(name);
    n.inputs[input] = name = copy;
    u.reads[name] = 1;
  }
  Tensor& t = g.initializers.at(name);
  t = t.Clone();  // tensors share storage between model copies
  return t;
}

// Multiplies `t` by f[j] along its last axis, broadcasting a last axis of 1 (or a
// scalar) to f's length.
Tensor ScaleLastAxis(const Tensor& t, const std::vector<double>& f) {
  const int64_t k = static_cast<int64_t>(f.size());
  Shape shape = t.shape();
  if (shape.empty()) shape = {1};
  const int64_t last = shape.back(), outer = t.numel() / std::max<int64_t>(1, last);
  shape.back() = k;
  Tensor out(DType::kFloat32, shape);
  const float* x = t.data<float>();
  float* y = out.data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < k; ++j) y[o * k + j] = float(x[o * last + (last == 1 ? 0 : j)] * f[j]);
  return out;
}

void ApplyEdit(ir::Graph& g, Uses& u, const Edit& e, const std::vector<double>& inv) {
  ir::Node& n = g.nodes[e.node];
  Tensor& t = OwnConstant(g, u, n, e.input);
  if (e.kind == Edit::kLastAxis) {
    t = ScaleLastAxis(t, inv);
    return;
  }
  float* w = t.data<float>();
  const int64_t rows = t.dim(0), cols = t.dim(1);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = float(w[r * cols + c] * inv[e.kind == Edit::kColumns ? c : r]);
}

// A consumer's weight as a [K, N] matrix.
std::vector<float> WeightKN(const Tensor& w, bool trans_b, int64_t& n_out) {
  const int64_t r = w.dim(0), c = w.dim(1);
  const float* x = w.data<float>();
  if (!trans_b) {
    n_out = c;
    return std::vector<float>(x, x + r * c);
  }
  n_out = r;
  std::vector<float> t(r * c);
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[j * r + i] = x[i * c + j];
  return t;
}

// What the calibration samples show of one group's input.
struct Observed {
  std::vector<double> absmax, lo, hi;  // per channel
  std::vector<float> rows;             // up to kSearchRows sampled rows [n, K] (alpha search)
  int64_t seen = 0;                    // rows seen
};

Expected<std::map<std::string, Observed>> Observe(const ir::Model& model, const std::vector<Group>& groups,
                                                  bool sample_rows, const RecoveryContext& ctx) {
  runtime::SessionOptions so;
  so.threads = ctx.threads;
  std::map<std::string, Observed> seen;
  std::map<std::string, int64_t> channels;
  for (const auto& gr : groups) {
    so.keep_values.insert(gr.input);
    channels[gr.input] = gr.k;
  }
  std::mt19937_64 rng(ctx.seed);
  SEQTO_ASSIGN_OR_RETURN(auto session, runtime::Session::Create(model, so));
  runtime::RunHooks hooks;
  hooks.observe = [&](const std::string& name, const Tensor& v) {
    auto ch = channels.find(name);
    if (ch == channels.end() || v.dtype() != DType::kFloat32 || v.rank() < 1 || v.dim(v.rank() - 1) != ch->second)
      return;
    const int64_t k = ch->second, rows = v.numel() / k;
    Observed& o = seen[name];
    if (o.absmax.empty()) o.absmax.assign(k, 0.0), o.lo.assign(k, 0.0), o.hi.assign(k, 0.0);
    const float* x = v.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = x + r * k;
      for (int64_t j = 0; j < k; ++j) {
        o.lo[j] = std::min(o.lo[j], double(row[j]));
        o.hi[j] = std::max(o.hi[j], double(row[j]));
      }
      if (!sample_rows) continue;
      // Reservoir sampling: every row seen is kept with the same probability.
      const int64_t kept = static_cast<int64_t>(o.rows.size()) / k;
      if (kept < kSearchRows) {
        o.rows.insert(o.rows.end(), row, row + k);
      } else if (const int64_t slot = static_cast<int64_t>(rng() % uint64_t(o.seen + 1)); slot < kSearchRows) {
        std::copy(row, row + k, o.rows.begin() + slot * k);
      }
      ++o.seen;
    }
    for (int64_t j = 0; j < k; ++j) o.absmax[j] = std::max(-o.lo[j], o.hi[j]);
  };
  for (size_t i = 0; i < ctx.calibration->num_batches; ++i) {
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap feeds, ctx.calibration->get(i));
    SEQTO_RETURN_IF_ERROR(session->Run(feeds, &hooks).status());
  }
  return seen;
}

std::vector<double> Scales(const std::vector<double>& amax, const std::vector<double>& wmax, double alpha) {
  std::vector<double> s(amax.size());
  for (size_t j = 0; j < s.size(); ++j)
    s[j] = std::clamp(std::pow(std::max(amax[j], kTiny), alpha) / std::pow(std::max(wmax[j], kTiny), 1.0 - alpha),
                      kMinScale, kMaxScale);
  return s;
}

// x [rows, k] times w [k, n] (oneDNN's row-major sgemm).
Expected<std::vector<float>> MatMul(const std::vector<float>& x, const std::vector<float>& w, int64_t k, int64_t n) {
  const int64_t rows = static_cast<int64_t>(x.size()) / k;
  std::vector<float> y(rows * n, 0.0f);
  if (dnnl_sgemm('N', 'N', rows, n, k, 1.0f, x.data(), k, w.data(), n, 0.0f, y.data(), n) != dnnl_success)
    return InternalError("oneDNN sgemm failed");
  return y;
}

Expected<std::vector<float>> FakeQuantize(std::vector<float> x, Shape shape, const QuantParams& p) {
  Tensor t = Tensor::FromVector<float>(std::move(shape), x);
  SEQTO_ASSIGN_OR_RETURN(Tensor q, QuantizeTensor(t, p));
  SEQTO_ASSIGN_OR_RETURN(Tensor d, DequantizeTensor(q, p));
  return std::vector<float>(d.data<float>(), d.data<float>() + d.numel());
}

// The alpha of the grid whose fake-quantized outputs of the group's MatMuls are
// closest to the float ones on the sampled rows.
Expected<double> SearchAlpha(const Observed& seen, const std::vector<std::vector<float>>& weights,
                             const std::vector<int64_t>& widths, const std::vector<double>& wmax,
                             const QuantOptions& o) {
  const int64_t k = static_cast<int64_t>(seen.absmax.size()), rows = static_cast<int64_t>(seen.rows.size()) / k;
  std::vector<std::vector<float>> reference;
  std::vector<double> signal;
  for (size_t c = 0; c < weights.size(); ++c) {
    SEQTO_ASSIGN_OR_RETURN(std::vector<float> y, MatMul(seen.rows, weights[c], k, widths[c]));
    reference.push_back(std::move(y));
    double e = 0;
    for (float v : reference.back()) e += double(v) * v;
    signal.push_back(std::max(e, 1e-30));
  }
  RangeOptions act;
  act.type = o.activation_type;
  act.symmetric = o.activation_symmetric;
  act.power_of_two = o.power_of_two;
  RangeOptions wo;
  wo.type = o.weight_type;
  wo.symmetric = o.weight_symmetric.value_or(IsSigned(o.weight_type));
  wo.reduce_range = o.reduce_range && o.per_channel;  // as the quantizer: per-channel weights only
  wo.power_of_two = o.power_of_two;
  double best_alpha = 0.5, best = INFINITY;
  for (int step = 0; step <= kAlphaSteps; ++step) {
    const double alpha = step / double(kAlphaSteps);
    const std::vector<double> s = Scales(seen.absmax, wmax, alpha);
    double lo = 0, hi = 0;
    for (int64_t j = 0; j < k; ++j) lo = std::min(lo, seen.lo[j] / s[j]), hi = std::max(hi, seen.hi[j] / s[j]);
    SEQTO_ASSIGN_OR_RETURN(ScaleZeroPoint a, ComputeScaleZeroPoint(lo, hi, act, "smooth_quant activation"));
    QuantParams ap;
    ap.type = act.type;
    ap.scale = {a.scale};
    ap.zero_point = {a.zero_point};
    std::vector<float> x = seen.rows;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < k; ++j) x[r * k + j] = float(x[r * k + j] / s[j]);
    SEQTO_ASSIGN_OR_RETURN(x, FakeQuantize(std::move(x), {rows, k}, ap));
    double loss = 0;
    for (size_t c = 0; c < weights.size(); ++c) {
      const int64_t n = widths[c];
      std::vector<float> w = weights[c];
      for (int64_t j = 0; j < k; ++j)
        for (int64_t m = 0; m < n; ++m) w[j * n + m] = float(w[j * n + m] * s[j]);
      const Tensor wt = Tensor::FromVector<float>({k, n}, w);
      SEQTO_ASSIGN_OR_RETURN(
          QuantParams wp,
          ComputeWeightParams(wt, wo, o.per_channel ? std::optional<int64_t>(1) : std::nullopt, "smooth_quant weight"));
      SEQTO_ASSIGN_OR_RETURN(w, FakeQuantize(std::move(w), {k, n}, wp));
      SEQTO_ASSIGN_OR_RETURN(const std::vector<float> y, MatMul(x, w, k, n));
      double e = 0;
      for (size_t i = 0; i < y.size(); ++i) e += (double(y[i]) - reference[c][i]) * (double(y[i]) - reference[c][i]);
      loss += e / signal[c];
    }
    if (loss < best) best = loss, best_alpha = alpha;
  }
  return best_alpha;
}

Expected<ir::Model> Smooth(const ir::Model& prepared, const RecoverySpec& spec, const RecoveryContext& ctx,
                           json& record) {
  const QuantOptions options = ctx.options ? *ctx.options : QuantOptions{};
  const bool search = OptionValue(spec, "alpha_search") != 0;
  const bool folding = OptionValue(spec, "folding") != 0;
  const double alpha = OptionValue(spec, "alpha");

  ir::Model model = prepared;
  ir::Graph& g = model.graph;
  Uses u = CountUses(g);
  SEQTO_ASSIGN_OR_RETURN(std::vector<Group> groups, SelectedGroups(model, u, ctx.options));
  record["groups"] = 0;
  if (groups.empty()) {
    record["note"] = "no MatMul/Gemm with a constant 2-D weight and a quantized input: nothing to smooth";
    if (ctx.say) ctx.say("smooth_quant: no MatMul/Gemm with a constant weight and a quantized input: nothing to do");
    return model;
  }
  SEQTO_ASSIGN_OR_RETURN(auto seen, Observe(model, groups, search, ctx));

  int64_t smoothed = 0, matmuls = 0, folded = 0, inserted = 0;
  double smin = INFINITY, smax = 0, amin = INFINITY, amax = -INFINITY, asum = 0;
  json alphas = json::object();
  std::set<std::string> new_values;
  std::vector<ir::Node> muls;
  for (const Group& gr : groups) {
    auto it = seen.find(gr.input);
    if (it == seen.end()) continue;  // never computed as a float tensor of K channels
    const Observed& obs = it->second;
    std::vector<std::vector<float>> weights;
    std::vector<int64_t> widths;
    std::vector<double> wmax(gr.k, 0.0);
    for (const Consumer& c : gr.consumers) {
      int64_t n = 0;
      weights.push_back(WeightKN(g.initializers.at(c.weight), c.trans_b, n));
      widths.push_back(n);
      const auto& w = weights.back();
      for (int64_t j = 0; j < gr.k; ++j)
        for (int64_t m = 0; m < n; ++m) wmax[j] = std::max(wmax[j], std::fabs(double(w[j * n + m])));
    }
    double a = alpha;
    if (search && !obs.rows.empty()) {
      SEQTO_ASSIGN_OR_RETURN(a, SearchAlpha(obs, weights, widths, wmax, options));
      alphas[gr.input] = a;
    }
    const std::vector<double> s = Scales(obs.absmax, wmax, a);
    std::vector<double> inv(s.size());
    for (size_t j = 0; j < s.size(); ++j) inv[j] = 1.0 / s[j];

    std::vector<Edit> edits;
    std::set<size_t> readers;
    for (const Consumer& c : gr.consumers) readers.insert(c.node);
    if (folding && PlanFold(g, u, gr.input, readers, gr.k, edits)) {
      for (const Edit& e : edits) ApplyEdit(g, u, e, inv);
      ++folded;
    } else {
      // A Mul by 1/s feeding the smoothed MatMuls only.
      const std::string out = FreshName(g, new_values, gr.input + "_smoothed");
      const std::string factor = FreshName(g, new_values, gr.input + "_smooth_factor");
      new_values.insert(out);
      g.initializers[factor] = ScaleLastAxis(Tensor::FromVector<float>({1}, {1.0f}), inv);
      std::string name = gr.input + "_smooth_mul";
      for (bool taken = true; taken;) {
        taken = false;
        for (const auto& n : g.nodes) taken |= n.name == name;
        for (const auto& n : muls) taken |= n.name == name;
        if (taken) name += "_";
      }
      ir::Node mul;
      mul.name = name;
      mul.op_type = "Mul";
      mul.inputs = {gr.input, factor};
      mul.outputs = {out};
      muls.push_back(std::move(mul));
      if (const ir::ValueInfo* vi = g.FindValueInfo(gr.input)) {
        ir::ValueInfo copy = *vi;
        copy.name = out;
        g.value_infos.push_back(std::move(copy));
      }
      for (const Consumer& c : gr.consumers) g.nodes[c.node].inputs[0] = out;
      ++inserted;
    }
    for (const Consumer& c : gr.consumers) {
      Tensor& t = g.initializers.at(c.weight);
      t = t.Clone();  // tensors share storage between model copies
      float* w = t.data<float>();
      const int64_t rows = t.dim(0), cols = t.dim(1);
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t m = 0; m < cols; ++m) w[r * cols + m] = float(w[r * cols + m] * s[c.trans_b ? m : r]);
    }
    ++smoothed;
    matmuls += static_cast<int64_t>(gr.consumers.size());
    for (double v : s) smin = std::min(smin, v), smax = std::max(smax, v);
    amin = std::min(amin, a), amax = std::max(amax, a), asum += a;
  }
  if (!muls.empty()) {
    for (auto& m : muls) g.nodes.push_back(std::move(m));
    SEQTO_RETURN_IF_ERROR(g.TopologicalSort());
  }
  record["groups"] = smoothed;
  record["matmuls"] = matmuls;
  record["folded"] = folded;
  record["inserted_muls"] = inserted;
  if (smoothed > 0) {
    record["scale_min"] = smin;
    record["scale_max"] = smax;
    record["alpha_min"] = amin;
    record["alpha_max"] = amax;
    record["alpha_mean"] = asum / double(smoothed);
    if (search) record["alphas"] = alphas;
    SEQTO_ASSIGN_OR_RETURN(double sqnr, FloatOutputSqnr(prepared, model, ctx));
    record["float_output_sqnr_db"] = std::isfinite(sqnr) ? json(sqnr) : json("identical");
  }
  if (ctx.say)
    ctx.say("smooth_quant: " + std::to_string(smoothed) + " inputs of " + std::to_string(matmuls) + " MatMul/Gemm, " +
            std::to_string(folded) + " folded into their producer, " + std::to_string(inserted) + " Mul inserted");
  return model;
}

}  // namespace

Technique MakeSmoothQuantTechnique() {
  Technique t;
  t.name = "smooth_quant";
  t.description =
      "SmoothQuant: moves MatMul/Gemm input channels' outliers into the constant weights (A / s, s W), folding 1/s "
      "into the producer (LayerNorm, Mul/Add by a constant, MatMul/Gemm) where exact (ORT's SmoothQuant)";
  using K = OptionSpec::Kind;
  t.options = {
      {"alpha", K::kNumber, 0.5, 0, 1,
       "migration strength: s_j = max|A_j|^alpha / max|W_j|^(1 - alpha) (ORT's SmoothQuantAlpha)"},
      {"alpha_search", K::kBool, 0, 0, 1,
       "choose alpha per MatMul input from 0, 0.05, ..., 1 by the fake-quantized outputs' error on the calibration "
       "samples (SmoothQuantAlpha \"auto\"); alpha is then unused"},
      {"folding", K::kBool, 1, 0, 1,
       "fold 1/s into the producer where exact, else insert a Mul (ORT's SmoothQuantFolding); false: always a Mul"},
  };
  t.needs_data = true;   // the activations' channel maxima
  t.static_only = true;  // as ORT (a quantize_static option): dynamic mode has no calibration samples
  t.applies = [](const ir::Model& model, const QuantOptions& options) {
    auto groups = SelectedGroups(model, CountUses(model.graph), &options);
    return !groups.ok() || !groups->empty();  // bad options: the pipeline says what is wrong
  };
  t.rewrite_float = Smooth;
  return t;
}

}  // namespace seqto::quant::recover
