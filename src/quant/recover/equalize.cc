// Cross-layer equalization with high-bias absorption (Nagel et al., "Data-Free
// Quantization Through Weight Equalization and Bias Correction", 2019), on the
// prepared float model before calibration.
//
// Two convolutions A -> act -> B, where act is Relu or nothing, compute the same
// function when A's output channel i is divided by s_i > 0 and the weights of B that
// read that channel are multiplied by s_i (Relu(x / s) = Relu(x) / s). Per-tensor
// weight quantization wastes its grid on the channels with the widest range; with
// s_i = sqrt(r1_i / r2_i) (r1_i the range of A's channel i, r2_i that of B's weights
// reading it) both ranges become sqrt(r1_i * r2_i), so every channel gets a similar
// share of each layer's grid. A chain A -> B -> C shares B between two pairs, so
// the pairs are equalized in turn until the scales stop moving (`iterations`,
// `tolerance`). Depthwise and grouped convolutions are pairs like any other: a
// channel is matched with the weights that read it.
//
// ReLU6 (Clip(0, 6)) is not scale-equivariant: the clip would have to become 6 / s_i
// per channel, which no ONNX op that quantizers fold expresses. `relu6` decides:
//   0: such pairs are left alone;
//   1: (default) a Clip whose input never exceeds 6 on the calibration samples is
//      replaced by Relu: the float model is unchanged on those samples, and changes
//      only where other data goes beyond what calibration saw in that layer
//      (without samples, as in dynamic quantization, every ReLU6 is kept);
//   2: every such Clip becomes Relu (as DFQ and AIMET do for MobileNetV2). On the
//      ImageNet MobileNetV2 this alone moves the float outputs to 25 dB SQNR: a few
//      layers do clip, and those clipped values matter.
// The record states how often the replaced Clips would have clipped on the
// calibration samples and how close the rewritten model's outputs stay to the
// original's there (output SQNR).
//
// High-bias absorption: after equalization some channels of A carry a large bias,
// which widens the activation range B's input is quantized with. Where A's channel
// i never goes below c_i > 0 (measured on the calibration samples, before Relu),
// Relu(x) = Relu(x - c_i) + c_i, so c_i moves from A's bias into B's bias (B's bias
// += sum of B's weights reading channel i times c_i). That is exact only where B
// reads no padding (a padded tap would see 0 instead of -c_i), so it is done for B
// without padding only; and it relies on the calibration minimum holding on other
// data, which is why it is an option (`bias_absorption`).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "quant/recover/technique.h"
#include "runtime/session.h"

namespace seqto::quant::recover {

using nlohmann::json;

namespace {

// A convolution whose weight (and bias, if any) are float initializers used by it alone.
struct ConvRef {
  size_t node = 0;
  std::string weight, bias;  // bias empty: none
  int64_t group = 1;
};

// An equalizable pair A -> (act) -> B.
struct Pair {
  ConvRef a, b;
  std::string a_output;     // A's output (B's input when there is no activation)
  std::ptrdiff_t act = -1;  // the activation node between them, -1: none
  std::string act_output;   // its output (B's input)
  bool relu6 = false;       // act is a Clip(0, 6) (to be replaced by Relu)
  bool b_unpadded = false;  // B reads no padding (bias absorption is exact)
};

bool Float32Initializer(const ir::Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  return it != g.initializers.end() && it->second.dtype() == DType::kFloat32;
}

// The value as a scalar float initializer (Clip's min/max), nullopt otherwise.
std::optional<float> ScalarInitializer(const ir::Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  if (it == g.initializers.end() || it->second.dtype() != DType::kFloat32 || it->second.numel() != 1)
    return std::nullopt;
  return it->second.data<float>()[0];
}

struct Uses {
  std::map<std::string, std::vector<size_t>> consumers;
  std::set<std::string> graph_outputs;
  std::map<std::string, int> reads;  // initializer -> number of node inputs reading it
};

Uses CountUses(const ir::Graph& g) {
  Uses u;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs) {
      if (in.empty()) continue;
      u.consumers[in].push_back(i);
      if (g.initializers.count(in)) ++u.reads[in];
    }
  for (const auto& o : g.outputs) u.graph_outputs.insert(o.name);
  return u;
}

std::optional<ConvRef> AsConv(const ir::Graph& g, const Uses& u, size_t i) {
  const ir::Node& n = g.nodes[i];
  if (n.op_type != "Conv" || !(n.domain.empty() || n.domain == "ai.onnx") || n.inputs.size() < 2) return std::nullopt;
  ConvRef c;
  c.node = i;
  c.weight = n.inputs[1];
  if (!Float32Initializer(g, c.weight) || u.reads.at(c.weight) != 1) return std::nullopt;
  if (g.initializers.at(c.weight).rank() < 3) return std::nullopt;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    c.bias = n.inputs[2];
    if (!Float32Initializer(g, c.bias) || u.reads.at(c.bias) != 1) return std::nullopt;
  }
  auto group = n.attr_int("group", 1);
  if (!group.ok() || *group < 1) return std::nullopt;
  c.group = *group;
  return c;
}

bool ReadsNoPadding(const ir::Node& n) {
  auto pads = n.attr_ints("pads", {});
  auto auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (!pads.ok() || !auto_pad.ok()) return false;
  if (*auto_pad != "NOTSET" && *auto_pad != "VALID") return false;
  return std::all_of(pads->begin(), pads->end(), [](int64_t p) { return p == 0; });
}

// The single consumer of `value`, if it has exactly one and is not a graph output.
std::optional<size_t> SoleConsumer(const Uses& u, const std::string& value) {
  if (u.graph_outputs.count(value)) return std::nullopt;
  auto it = u.consumers.find(value);
  if (it == u.consumers.end() || it->second.size() != 1) return std::nullopt;
  return it->second[0];
}

std::vector<Pair> FindPairs(const ir::Graph& g, bool with_relu6) {
  const Uses u = CountUses(g);
  std::vector<Pair> pairs;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    auto a = AsConv(g, u, i);
    if (!a || g.nodes[i].outputs.empty()) continue;
    Pair p;
    p.a = *a;
    p.a_output = g.nodes[i].outputs[0];
    auto next = SoleConsumer(u, p.a_output);
    if (!next) continue;
    std::string b_input = p.a_output;
    const ir::Node& mid = g.nodes[*next];
    if (mid.op_type == "Relu" || mid.op_type == "Clip") {
      if (mid.op_type == "Clip") {
        // Clip(0) is Relu; Clip(0, 6) is ReLU6. Attributes (opset < 11) or inputs.
        std::optional<float> lo, hi;
        if (mid.has_attr("min") || mid.has_attr("max")) {
          auto mn = mid.attr_float("min", -INFINITY), mx = mid.attr_float("max", INFINITY);
          if (!mn.ok() || !mx.ok()) continue;
          lo = *mn, hi = *mx;
        } else {
          lo = mid.inputs.size() > 1 && !mid.inputs[1].empty() ? ScalarInitializer(g, mid.inputs[1])
                                                               : std::optional<float>(-INFINITY);
          hi = mid.inputs.size() > 2 && !mid.inputs[2].empty() ? ScalarInitializer(g, mid.inputs[2])
                                                               : std::optional<float>(INFINITY);
        }
        if (!lo || !hi || *lo != 0.0f) continue;
        if (std::isfinite(*hi)) {
          if (!with_relu6) continue;
          p.relu6 = true;
        }
      }
      p.act = static_cast<std::ptrdiff_t>(*next);
      if (mid.outputs.empty()) continue;
      b_input = mid.outputs[0];
      p.act_output = b_input;
      next = SoleConsumer(u, b_input);
      if (!next) continue;
    }
    auto b = AsConv(g, u, *next);
    if (!b || g.nodes[*next].inputs[0] != b_input) continue;
    p.b = *b;
    p.b_unpadded = ReadsNoPadding(g.nodes[*next]);
    // The channel counts must match: A's outputs are B's inputs.
    const Shape& w1 = g.initializers.at(p.a.weight).shape();
    const Shape& w2 = g.initializers.at(p.b.weight).shape();
    if (w2[1] * p.b.group != w1[0] || w2[0] % p.b.group != 0) continue;
    if (!p.a.bias.empty() && g.initializers.at(p.a.bias).numel() != w1[0]) continue;
    pairs.push_back(p);
  }
  return pairs;
}

// A writable copy of an initializer (tensors share storage between model copies).
float* Writable(ir::Graph& g, const std::string& name) {
  Tensor& t = g.initializers.at(name);
  t = t.Clone();
  return t.data<float>();
}

// B's weight element (o, j, k) reads input channel (o / (O / group)) * (I / group) + j,
// where I / group = w.dim(1). Calls f(channel, element index) for every element.
template <typename F>
void ForEachInputChannel(const Tensor& w, int64_t group, F f) {
  const int64_t out = w.dim(0), in_per_group = w.dim(1), out_per_group = out / group;
  const int64_t kernel = w.numel() / (out * in_per_group);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t j = 0; j < in_per_group; ++j) {
      const int64_t channel = (o / out_per_group) * in_per_group + j;
      const int64_t base = (o * in_per_group + j) * kernel;
      for (int64_t k = 0; k < kernel; ++k) f(channel, base + k);
    }
}

// Equalizes one pair; returns the largest |log s_i| applied, and multiplies `total`
// (A's channels' cumulative scale) by s.
double EqualizePair(ir::Graph& g, const Pair& p, std::vector<double>& total) {
  const Tensor& w1t = g.initializers.at(p.a.weight);
  const Tensor& w2t = g.initializers.at(p.b.weight);
  const int64_t channels = w1t.dim(0), per_channel = w1t.numel() / channels;
  std::vector<double> r1(channels, 0.0), r2(channels, 0.0);
  const float* w1 = w1t.data<float>();
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t k = 0; k < per_channel; ++k) r1[c] = std::max(r1[c], std::fabs(double(w1[c * per_channel + k])));
  const float* w2 = w2t.data<float>();
  ForEachInputChannel(w2t, p.b.group, [&](int64_t c, int64_t e) { r2[c] = std::max(r2[c], std::fabs(double(w2[e]))); });
  std::vector<double> s(channels, 1.0);
  double moved = 0;
  for (int64_t c = 0; c < channels; ++c) {
    if (r1[c] > 0 && r2[c] > 0) s[c] = std::sqrt(r1[c] / r2[c]);
    moved = std::max(moved, std::fabs(std::log(s[c])));
    total[c] *= s[c];
  }
  if (moved == 0) return 0;
  float* a = Writable(g, p.a.weight);
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t k = 0; k < per_channel; ++k) a[c * per_channel + k] = float(a[c * per_channel + k] / s[c]);
  if (!p.a.bias.empty()) {
    float* b = Writable(g, p.a.bias);
    for (int64_t c = 0; c < channels; ++c) b[c] = float(b[c] / s[c]);
  }
  float* b2 = Writable(g, p.b.weight);
  ForEachInputChannel(g.initializers.at(p.b.weight), p.b.group,
                      [&](int64_t c, int64_t e) { b2[e] = float(b2[e] * s[c]); });
  return moved;
}

// The largest value of each ReLU6 pair's activation output on the samples, by A's
// output: below 6 means the clip never acted. (The activation's output, not A's: it
// is what a fused conv materializes, so observing it keeps the fast kernels.)
Expected<std::map<std::string, float>> MaxActivations(const ir::Model& model, const std::vector<Pair>& pairs,
                                                      const RecoveryContext& ctx) {
  runtime::SessionOptions so;
  so.threads = ctx.threads;
  std::map<std::string, float> max;
  std::map<std::string, std::string> pair_of;  // act output -> A's output
  for (const auto& p : pairs)
    if (p.relu6) so.keep_values.insert(p.act_output), max[p.act_output] = -INFINITY, pair_of[p.act_output] = p.a_output;
  if (max.empty()) return max;
  SEQTO_ASSIGN_OR_RETURN(auto session, runtime::Session::Create(model, so));
  runtime::RunHooks hooks;
  hooks.observe = [&](const std::string& name, const Tensor& v) {
    auto it = max.find(name);
    if (it == max.end() || v.dtype() != DType::kFloat32) return;
    const float* x = v.data<float>();
    float m = it->second;
    for (int64_t k = 0; k < v.numel(); ++k) m = std::max(m, x[k]);
    it->second = m;
  };
  for (size_t i = 0; i < ctx.calibration->num_batches; ++i) {
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap feeds, ctx.calibration->get(i));
    SEQTO_RETURN_IF_ERROR(session->Run(feeds, &hooks).status());
  }
  std::map<std::string, float> by_pair;
  for (const auto& [act, m] : max) by_pair[pair_of.at(act)] = m;
  return by_pair;
}

// Per-channel minimum of each Relu pair's activation output over the samples (by A's
// output; where it is above 0 it is also the pre-activation's minimum), and for
// replaced ReLU6 the share of values above their (scaled) clip.
struct Observed {
  std::map<std::string, std::vector<float>> min;
  std::map<std::string, double> above_clip;  // A's output -> share of values above the original 6
};

Expected<Observed> ObserveActivations(const ir::Model& model, const std::vector<Pair>& pairs,
                                      const std::map<std::string, std::vector<double>>& clip_at,
                                      const RecoveryContext& ctx) {
  runtime::SessionOptions so;
  so.threads = ctx.threads;
  std::map<std::string, std::string> pair_of;  // act output -> A's output
  for (const auto& p : pairs)
    if (p.act >= 0) so.keep_values.insert(p.act_output), pair_of[p.act_output] = p.a_output;
  SEQTO_ASSIGN_OR_RETURN(auto session, runtime::Session::Create(model, so));
  Observed seen;
  std::map<std::string, std::pair<int64_t, int64_t>> above;  // a_output -> (above, total)
  runtime::RunHooks hooks;
  hooks.observe = [&](const std::string& act_output, const Tensor& v) {
    auto of = pair_of.find(act_output);
    if (of == pair_of.end() || v.dtype() != DType::kFloat32 || v.rank() < 2) return;
    const std::string& name = of->second;
    const int64_t n = v.dim(0), c = v.dim(1), inner = v.numel() / std::max<int64_t>(1, n * c);
    auto& m = seen.min[name];
    if (m.empty()) m.assign(c, INFINITY);
    const float* x = v.data<float>();
    auto clip = clip_at.find(name);
    auto& [hi, total] = above[name];
    for (int64_t b = 0; b < n; ++b)
      for (int64_t ch = 0; ch < c; ++ch) {
        const float* row = x + (b * c + ch) * inner;
        float lo = m[ch];
        for (int64_t k = 0; k < inner; ++k) lo = std::min(lo, row[k]);
        m[ch] = lo;
        if (clip != clip_at.end()) {
          const double limit = clip->second[ch];
          for (int64_t k = 0; k < inner; ++k) hi += row[k] > limit;
          total += inner;
        }
      }
  };
  for (size_t i = 0; i < ctx.calibration->num_batches; ++i) {
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap feeds, ctx.calibration->get(i));
    SEQTO_RETURN_IF_ERROR(session->Run(feeds, &hooks).status());
  }
  for (const auto& [name, counts] : above)
    if (clip_at.count(name)) seen.above_clip[name] = counts.second ? double(counts.first) / counts.second : 0.0;
  return seen;
}

// Moves c_i = max(0, min_i) from A's bias into B's bias; returns the channels moved.
int64_t AbsorbHighBias(ir::Graph& g, const Pair& p, const std::vector<float>& min) {
  const int64_t channels = g.initializers.at(p.a.weight).dim(0);
  std::vector<double> c(channels, 0.0);
  int64_t moved = 0;
  for (int64_t ch = 0; ch < channels && ch < static_cast<int64_t>(min.size()); ++ch)
    if (std::isfinite(min[ch]) && min[ch] > 0) c[ch] = min[ch], ++moved;
  if (moved == 0) return 0;
  float* a_bias = Writable(g, p.a.bias);
  for (int64_t ch = 0; ch < channels; ++ch) a_bias[ch] = float(a_bias[ch] - c[ch]);
  const Tensor& w2 = g.initializers.at(p.b.weight);
  const int64_t out = w2.dim(0);
  std::vector<double> add(out, 0.0);
  const float* w = w2.data<float>();
  const int64_t per_out = w2.numel() / out;
  ForEachInputChannel(w2, p.b.group, [&](int64_t ch, int64_t e) { add[e / per_out] += double(w[e]) * c[ch]; });
  ir::Node& b_node = g.nodes[p.b.node];
  std::string bias = p.b.bias;
  if (bias.empty()) {
    bias = b_node.name + "_absorbed_bias";
    while (g.initializers.count(bias)) bias += "_";
    g.initializers[bias] = Tensor::FromVector<float>({out}, std::vector<float>(out, 0.0f));
    b_node.inputs.resize(3);
    b_node.inputs[2] = bias;
  }
  float* b = Writable(g, bias);
  for (int64_t o = 0; o < out; ++o) b[o] = float(b[o] + add[o]);
  return moved;
}

Expected<ir::Model> Equalize(const ir::Model& prepared, const RecoverySpec& spec, const RecoveryContext& ctx,
                             json& record) {
  const int relu6 = static_cast<int>(OptionValue(spec, "relu6"));
  const bool absorb = OptionValue(spec, "bias_absorption") != 0;
  const int iterations = static_cast<int>(OptionValue(spec, "iterations"));
  const double tolerance = OptionValue(spec, "tolerance");
  const bool have_data = ctx.calibration && ctx.calibration->num_batches > 0;

  ir::Model model = prepared;
  ir::Graph& g = model.graph;
  // Without samples (dynamic quantization) relu6=1 cannot tell which ReLU6 clip:
  // it keeps them all, as relu6=0 does, and says so.
  const bool relu6_unknown = relu6 == 1 && !have_data;
  std::vector<Pair> pairs = FindPairs(g, relu6 > 0 && !relu6_unknown);
  if (relu6_unknown) record["relu6_kept"] = "no calibration samples to tell which ReLU6 clip";
  if (relu6 == 1 && have_data) {
    // Only the ReLU6 that never clip on the calibration samples.
    SEQTO_ASSIGN_OR_RETURN(auto max, MaxActivations(model, pairs, ctx));
    std::vector<Pair> kept;
    for (const auto& p : pairs)
      if (!p.relu6 || max.at(p.a_output) < 6.0f) kept.push_back(p);
    pairs = std::move(kept);
  }
  // Replace the ReLU6 of the pairs by Relu first: the pairs are then Relu pairs.
  int64_t replaced = 0;
  for (const auto& p : pairs) {
    if (!p.relu6) continue;
    ir::Node& act = g.nodes[p.act];
    if (act.op_type == "Relu") continue;  // shared by no other pair, but be safe
    act.op_type = "Relu";
    act.inputs.resize(1);
    act.attributes.clear();
    ++replaced;
  }
  std::map<std::string, std::vector<double>> scale;  // a_output -> cumulative s per channel
  for (const auto& p : pairs) scale[p.a_output].assign(g.initializers.at(p.a.weight).dim(0), 1.0);
  int rounds = 0;
  double last_move = 0;
  for (; rounds < iterations; ++rounds) {
    last_move = 0;
    for (const auto& p : pairs) last_move = std::max(last_move, EqualizePair(g, p, scale[p.a_output]));
    if (last_move < tolerance) {
      ++rounds;
      break;
    }
  }
  double min_scale = 1, max_scale = 1;
  for (const auto& [name, s] : scale)
    for (double v : s) min_scale = std::min(min_scale, v), max_scale = std::max(max_scale, v);

  // Measured on the equalized model: ReLU6 overshoot (x / s_i > 6 / s_i) and the
  // pre-activation minima for absorption.
  int64_t absorbed = 0, absorbed_pairs = 0;
  json above = json::object();
  if (have_data && (absorb || replaced > 0)) {
    std::map<std::string, std::vector<double>> clip_at;
    for (const auto& p : pairs)
      if (p.relu6) {
        auto& limit = clip_at[p.a_output];
        for (double s : scale[p.a_output]) limit.push_back(6.0 / s);
      }
    SEQTO_ASSIGN_OR_RETURN(Observed seen, ObserveActivations(model, pairs, clip_at, ctx));
    for (const auto& [name, share] : seen.above_clip) above[name] = share;
    if (absorb) {
      for (const auto& p : pairs) {
        if (p.act < 0 || p.a.bias.empty() || !p.b_unpadded) continue;
        auto m = seen.min.find(p.a_output);
        if (m == seen.min.end()) continue;
        const int64_t n = AbsorbHighBias(g, p, m->second);
        absorbed += n;
        absorbed_pairs += n > 0;
      }
    }
  }
  record["pairs"] = pairs.size();
  record["rounds"] = rounds;
  record["converged"] = last_move < tolerance;
  record["scale_min"] = min_scale;
  record["scale_max"] = max_scale;
  record["relu6_replaced"] = replaced;
  if (replaced > 0) record["share_above_6"] = above;
  record["absorbed_channels"] = absorbed;
  record["absorbed_pairs"] = absorbed_pairs;
  if (absorb && !have_data) record["bias_absorption"] = "skipped: no calibration samples";
  if (have_data) {
    SEQTO_ASSIGN_OR_RETURN(double sqnr, FloatOutputSqnr(prepared, model, ctx));
    record["float_output_sqnr_db"] = std::isfinite(sqnr) ? json(sqnr) : json("identical");
  }
  if (ctx.say)
    ctx.say("cle: " + std::to_string(pairs.size()) + " pairs, " + std::to_string(rounds) + " rounds, " +
            std::to_string(replaced) + " ReLU6 replaced, " + std::to_string(absorbed) + " channels' bias absorbed");
  return model;
}

}  // namespace

Technique MakeEqualizeTechnique() {
  Technique t;
  t.name = "cle";
  t.description =
      "cross-layer equalization of conv -> (Relu|none) -> conv pairs, depthwise included, with high-bias absorption";
  using K = OptionSpec::Kind;
  t.options = {
      {"relu6", K::kInteger, 1, 0, 2,
       "ReLU6 (Clip 0..6) between two convs: 0 keep (pair not equalized), 1 replace by Relu where the calibration "
       "samples never exceed 6 (without samples: keep), 2 replace all (changes the float model where a pre-activation "
       "exceeds 6)"},
      {"bias_absorption", K::kBool, 1, 0, 1,
       "move the part of a Relu pair's bias that the calibration samples never go below into the next conv "
       "(only where it reads no padding)"},
      {"iterations", K::kInteger, 20, 1, 1000, "rounds over all pairs at most"},
      {"tolerance", K::kNumber, 1e-3, 0, 1, "stop when no channel's scale moved by more than this (|log s|)"},
  };
  t.uses_data = true;  // bias absorption and the record's measurements
  t.rewrite_float = Equalize;
  return t;
}

}  // namespace seqto::quant::recover
