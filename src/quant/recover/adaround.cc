// Learned rounding: AdaRound (Nagel et al., "Up or Down? Adaptive Rounding for
// Post-Training Quantization", 2020), on the full quantization after QuantPlan::Create.
//
// Rounding each weight to the nearest integer minimizes the weight error, not the
// layer's output error: rounding some weights the other way can cancel the errors
// of others for the inputs the layer really sees. AdaRound learns, per weight,
// whether to round down or up: the integer is floor(W / s) + h(V), h a rectified
// sigmoid of a free variable V (h = clip(sigmoid(V) * 1.2 - 0.1, 0, 1)), trained on
// the layer's cached inputs to minimize
//   ||W_soft X - Y||^2 / N + lambda * sum(1 - |2 h(V) - 1|^beta),
// the second term pushing every h to 0 or 1. The first 20% of the iterations run
// without it; then beta is annealed from 20 (a flat regularizer: h moves freely) to
// 2 (h forced to a side). The result is floor(W / s) + (h >= 0.5), so every integer
// stays within one of round-to-nearest and within the type's range.
//
// Why AdaRound and not AdaQuant (which learns the weights themselves, and the
// scales): AdaRound keeps the plan's scales and zero points, so its result is one
// integer tensor per weight (QuantPlan::Refinements::weight_integers) that composes
// with the plan's parameters, the biases quantized from them and the exclusion
// sweep (an excluded group gets its float weight back, the others keep theirs). A
// learned float weight would need its own parameters and bias scales per candidate.
//
// Layers: every quantized Conv (grouped and depthwise included), Gemm and MatMul
// whose weight is an initializer of its own, in execution order, one at a time
// (memory holds one layer's cache). For each layer:
//   - the weight's parameters are read from the plan's materialized model (the
//     scale and zero point of the weight's DequantizeLinear, per tensor or per
//     channel), so the rounding is learned for exactly the grid the model uses;
//   - the layer's input as the quantized model sees it (with the roundings learned
//     so far: "asymmetric reconstruction", each layer compensates the errors before
//     it) and the float model's output (before any activation) are computed on the
//     first `samples` calibration samples, keeping `positions` random output
//     positions per sample (a conv becomes a matrix problem by im2col of those
//     positions; a Gemm/MatMul row is a position), within `memory_mb`;
//   - Adam runs `iterations` steps on random batches of `batch` cached columns, with
//     hand-written gradients and oneDNN's sgemm (depthwise: a tiny problem per
//     channel, done directly);
//   - `holdout` of the samples stay out of the optimization: if the learned rounding
//     reconstructs them worse than round-to-nearest (it fit the other samples' noise,
//     or too few iterations), the layer keeps nearest rounding. A layer with fewer
//     training columns than weights per output channel is not learned at all (each
//     row's rounding would fit the samples exactly: the classifier of a model
//     calibrated on 100 images).
// It runs before bias correction (the registry's order), which then corrects the
// learned rounding's remaining mean error.
// Random choices come from ctx.seed + `seed`; the same seed gives the same model.
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "core/parallel.h"
#include "quant/recover/technique.h"
#include "runtime/session.h"

namespace seqto::quant::recover {

using nlohmann::json;

namespace {

constexpr float kZeta = 1.1f, kGamma = -0.1f;  // h's stretch (the paper's values)
constexpr double kWarmup = 0.2;                // share of iterations without the regularizer
constexpr double kBetaStart = 20, kBetaEnd = 2;

// One quantized Conv/Gemm/MatMul whose weight rounding is learned.
struct Layer {
  std::string node, op_type;
  std::string weight;
  std::string bias;         // float initializer added to the output (Conv B, Gemm C); empty: none
  float bias_scale = 1;     // Gemm's beta
  std::string output;       // the float model's output (pre-activation)
  bool transposed = false;  // weight is [K, O] (MatMul, Gemm with transB = 0), else [O, K...]
  int64_t outs = 0;         // O
  int64_t groups = 1;       // conv groups
  int64_t k_per_group = 0;  // the matrix's columns: (C / groups) * kh * kw, or K
  // 2-D conv geometry.
  int64_t kh = 1, kw = 1, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  std::vector<int64_t> pads;  // top, left, bottom, right (explicit); empty with auto_pad SAME_*
  std::string auto_pad = "NOTSET";
  bool conv() const { return op_type == "Conv"; }
  // The weight's flat index of matrix element (o, k) (k within o's group).
  int64_t Flat(int64_t o, int64_t k) const { return transposed ? k * outs + o : o * k_per_group + k; }
};

bool Float32Initializer(const ir::Graph& g, const std::string& name) {
  auto it = g.initializers.find(name);
  return it != g.initializers.end() && it->second.dtype() == DType::kFloat32;
}

// Why `n` cannot be refined, or empty with `layer` filled.
std::string AsLayer(const ir::Graph& g, const ir::Node& n, const std::map<std::string, int>& reads, Layer& layer) {
  if (!(n.domain.empty() || n.domain == "ai.onnx")) return "not an ai.onnx op";
  if (n.inputs.size() < 2 || n.outputs.empty() || n.outputs[0].empty()) return "unexpected inputs";
  layer.node = n.name;
  layer.op_type = n.op_type;
  layer.weight = n.inputs[1];
  layer.output = n.outputs[0];
  if (!Float32Initializer(g, layer.weight)) return "its weight is not a float initializer";
  if (reads.at(layer.weight) != 1) return "its weight is shared";
  const Tensor& w = g.initializers.at(layer.weight);
  auto bias_input = [&](size_t i) -> std::string {
    if (n.inputs.size() <= i || n.inputs[i].empty()) return "";
    const std::string& b = n.inputs[i];
    if (!Float32Initializer(g, b)) return "its bias is not a float initializer";
    const int64_t numel = g.initializers.at(b).numel();
    if (numel != layer.outs && numel != 1) return "its bias does not broadcast per output channel";
    layer.bias = b;
    return "";
  };
  if (n.op_type == "Conv") {
    if (w.rank() != 4) return "only 2-D convolutions";
    auto group = n.attr_int("group", 1);
    auto strides = n.attr_ints("strides", {1, 1});
    auto dilations = n.attr_ints("dilations", {1, 1});
    auto pads = n.attr_ints("pads", {0, 0, 0, 0});
    auto auto_pad = n.attr_string("auto_pad", "NOTSET");
    if (!group.ok() || !strides.ok() || !dilations.ok() || !pads.ok() || !auto_pad.ok()) return "bad attributes";
    if (*group < 1 || w.dim(0) % *group != 0 || strides->size() != 2 || dilations->size() != 2 || pads->size() != 4)
      return "unexpected attributes";
    layer.outs = w.dim(0);
    layer.groups = *group;
    layer.k_per_group = w.dim(1) * w.dim(2) * w.dim(3);
    layer.kh = w.dim(2), layer.kw = w.dim(3);
    layer.stride_h = (*strides)[0], layer.stride_w = (*strides)[1];
    layer.dil_h = (*dilations)[0], layer.dil_w = (*dilations)[1];
    layer.auto_pad = *auto_pad;
    if (layer.auto_pad == "NOTSET")
      layer.pads = *pads;
    else if (layer.auto_pad == "VALID")
      layer.pads = {0, 0, 0, 0};
    else if (layer.auto_pad != "SAME_UPPER" && layer.auto_pad != "SAME_LOWER")
      return "unknown auto_pad";
    return bias_input(2);
  }
  if (w.rank() != 2) return "its weight is not a matrix";
  if (n.op_type == "MatMul") {
    layer.transposed = true;
    layer.outs = w.dim(1);
    layer.k_per_group = w.dim(0);
    return "";
  }
  // Gemm: Y = alpha * A' B' + beta * C, refined for alpha = 1 and A untransposed.
  auto alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
  auto trans_a = n.attr_int("transA", 0), trans_b = n.attr_int("transB", 0);
  if (!alpha.ok() || !beta.ok() || !trans_a.ok() || !trans_b.ok()) return "bad attributes";
  if (*alpha != 1.0f || *trans_a != 0) return "alpha != 1 or transA";
  layer.transposed = *trans_b == 0;
  layer.outs = layer.transposed ? w.dim(1) : w.dim(0);
  layer.k_per_group = layer.transposed ? w.dim(0) : w.dim(1);
  layer.bias_scale = *beta;
  return bias_input(2);
}

// The layers of the plan, in execution order; `skipped` gets the others with why.
std::vector<Layer> FindLayers(const QuantPlan& plan, json& skipped) {
  const ir::Graph& g = plan.prepared_model().graph;
  std::map<std::string, size_t> by_name;
  std::map<std::string, int> reads;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    by_name[g.nodes[i].name] = i;
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && g.initializers.count(in)) ++reads[in];
  }
  std::vector<const QuantGroup*> groups;
  for (const auto& group : plan.groups()) groups.push_back(&group);
  std::stable_sort(groups.begin(), groups.end(), [](auto* a, auto* b) { return a->order < b->order; });
  std::vector<std::pair<size_t, Layer>> found;
  for (const QuantGroup* group : groups) {
    const std::set<std::string> weights(group->weights.begin(), group->weights.end());
    for (const auto& name : group->nodes) {
      auto it = by_name.find(name);
      if (it == by_name.end()) continue;
      const ir::Node& n = g.nodes[it->second];
      if (n.op_type != "Conv" && n.op_type != "Gemm" && n.op_type != "MatMul") continue;
      if (n.inputs.size() < 2 || !weights.count(n.inputs[1])) continue;
      Layer layer;
      const std::string why = AsLayer(g, n, reads, layer);
      if (why.empty())
        found.push_back({it->second, layer});
      else
        skipped[n.name] = why;
    }
  }
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Layer> layers;
  for (auto& [i, layer] : found) layers.push_back(std::move(layer));
  return layers;
}

// The weight's grid in the materialized model, per matrix element.
struct Grid {
  QuantType type = QuantType::kInt8;
  std::string input;           // the layer's input in the quantized model
  std::vector<float> scale;    // per matrix element [O][K]
  std::vector<int64_t> zero;   // per matrix element
  int64_t qmin = 0, qmax = 0;  // the type's range
  bool per_channel = false;
};

Expected<Grid> ReadGrid(const ir::Model& q, const Layer& layer, const QuantOptions& options, const Tensor& w) {
  const ir::Graph& g = q.graph;
  const ir::Node* node = nullptr;
  const ir::Node* dq = nullptr;
  for (const auto& n : g.nodes)
    if (n.name == layer.node) node = &n;
  if (!node || node->inputs.size() < 2) return UserError("not found in the quantized model");
  for (const auto& n : g.nodes)
    if (n.op_type == "DequantizeLinear" && !n.outputs.empty() && n.outputs[0] == node->inputs[1]) dq = &n;
  if (!dq || dq->inputs.size() < 3) return UserError("its weight is not quantized");
  auto scale = g.initializers.find(dq->inputs[1]);
  auto zero = g.initializers.find(dq->inputs[2]);
  if (scale == g.initializers.end() || zero == g.initializers.end() || scale->second.dtype() != DType::kFloat32)
    return UserError("its weight's scale or zero point is not an initializer");
  Grid grid;
  grid.input = node->inputs[0];
  // The plan's type for the weight (an override's, else weight_type) where the stored
  // type is its storage (int4 is stored in int8); else the stored 8/16-bit type (ORT
  // makes per-channel uint8 weights int8).
  auto o = options.tensor_overrides.find(layer.weight);
  grid.type = o != options.tensor_overrides.end() && o->second.quant_type ? *o->second.quant_type : options.weight_type;
  if (StorageDType(grid.type) != zero->second.dtype()) {
    bool known = false;
    for (QuantType t : {QuantType::kInt8, QuantType::kUInt8, QuantType::kInt16, QuantType::kUInt16})
      if (StorageDType(t) == zero->second.dtype()) grid.type = t, known = true;
    if (!known) return UserError("its weight's type is not an integer type");
  }
  const QRange r = GetQRange(grid.type, false, false);
  grid.qmin = r.qmin, grid.qmax = r.qmax;
  const std::vector<double> s = scale->second.ToDoubles();
  const std::vector<int64_t> z = zero->second.ToInt64s();
  if (s.empty() || s.size() != z.size()) return UserError("its weight's scale and zero point do not match");
  int64_t inner = 1, channels = 1;
  if (s.size() > 1) {
    auto axis = dq->attr_int("axis", 1);
    if (!axis.ok()) return axis.error();
    int64_t a = *axis < 0 ? *axis + w.rank() : *axis;
    if (a < 0 || a >= w.rank() || w.dim(a) != static_cast<int64_t>(s.size()))
      return UserError("its weight's per-channel axis does not match");
    channels = w.dim(a);
    for (int64_t d = a + 1; d < w.rank(); ++d) inner *= w.dim(d);
    grid.per_channel = true;
  }
  const int64_t n = layer.outs * layer.k_per_group;
  grid.scale.resize(n);
  grid.zero.resize(n);
  for (int64_t o = 0; o < layer.outs; ++o)
    for (int64_t k = 0; k < layer.k_per_group; ++k) {
      const int64_t e = layer.Flat(o, k);
      const size_t c = grid.per_channel ? static_cast<size_t>((e / inner) % channels) : 0;
      if (!(s[c] > 0)) return UserError("its weight has a scale that is not positive");
      grid.scale[o * layer.k_per_group + k] = static_cast<float>(s[c]);
      grid.zero[o * layer.k_per_group + k] = z[c];
    }
  return grid;
}

// `model` computing only `value` (the nodes it depends on): each layer's caching pass
// runs only the part of the model before the layer. A model with subgraphs keeps all
// its nodes (their implicit inputs are not tracked).
ir::Model Truncated(const ir::Model& model, const std::string& value) {
  ir::Model out;
  out.opsets = model.opsets;
  out.ir_version = model.ir_version;
  const ir::Graph& g = model.graph;
  out.graph.name = g.name;
  out.graph.inputs = g.inputs;
  bool subgraphs = false;
  for (const auto& n : g.nodes)
    for (const auto& [name, a] : n.attributes) subgraphs |= a.type == ir::Attribute::Type::kGraph;
  std::set<std::string> needed = {value};
  std::vector<bool> keep(g.nodes.size(), subgraphs);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const ir::Node& n = g.nodes[i];
    for (const auto& o : n.outputs) keep[i] = keep[i] || (!o.empty() && needed.count(o));
    if (keep[i])
      for (const auto& in : n.inputs) needed.insert(in);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (keep[i]) out.graph.nodes.push_back(g.nodes[i]);
  for (const auto& [name, t] : g.initializers)
    if (subgraphs || needed.count(name)) out.graph.initializers[name] = t;
  for (const auto& vi : g.value_infos)
    if (needed.count(vi.name)) out.graph.value_infos.push_back(vi);
  ir::ValueInfo result;
  result.name = value;
  result.dtype = DType::kFloat32;
  out.graph.outputs = {result};
  return out;
}

// The first `count` rows (batch entries) of every feed.
runtime::TensorMap FirstRows(const runtime::TensorMap& feeds, int64_t count) {
  runtime::TensorMap out;
  for (const auto& [name, t] : feeds) {
    if (t.rank() == 0 || t.dim(0) <= count) {
      out[name] = t;
      continue;
    }
    Shape shape = t.shape();
    shape[0] = count;
    Tensor part(t.dtype(), shape);
    std::memcpy(part.raw(), t.raw(), part.nbytes());
    out[name] = std::move(part);
  }
  return out;
}

// The cached columns of one layer: x [N][groups * K] (im2col of the quantized
// model's input at the sampled positions), y [N][O] (the float output there minus
// the bias: what W X must produce).
struct Cache {
  int64_t columns = 0, width = 0, outs = 0;
  std::vector<float> x, y;
  // The columns of the held-out samples (which the optimization does not see) and
  // of the others.
  std::vector<int64_t> held_out, train;
  // Sums of the float outputs squared (with the bias), of all columns and of the
  // held-out ones: relative errors.
  double energy = 0, held_out_energy = 0;
  int64_t samples = 0;
};

struct CacheLimits {
  int64_t samples = 0, positions = 0;
  double memory_bytes = 0;
  double holdout = 0;  // share of the samples held out
};

// Whether sample `i` is held out: every (1 / share)-th sample, spread evenly.
bool HeldOut(int64_t i, double share) { return std::floor((i + 1) * share) > std::floor(i * share); }

// The padding before the first row/column of a conv input of `in` along one axis.
int64_t PadBefore(const Layer& l, int64_t in, int64_t out, int64_t k, int64_t stride, int64_t dil, int axis) {
  if (!l.pads.empty()) return l.pads[axis];
  const int64_t total = std::max<int64_t>(0, (out - 1) * stride + (k - 1) * dil + 1 - in);
  return l.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
}

Expected<Cache> BuildCache(const ir::Model& quantized, const Grid& grid, const QuantPlan& plan, const Layer& layer,
                           const CacheLimits& limits, const RecoveryContext& ctx, std::mt19937_64& rng) {
  const ir::Graph& fg = plan.prepared_model().graph;
  std::vector<double> bias(layer.outs, 0.0);
  if (!layer.bias.empty()) {
    const auto b = fg.initializers.at(layer.bias).ToDoubles();
    for (int64_t o = 0; o < layer.outs; ++o) bias[o] = layer.bias_scale * b[b.size() == 1 ? 0 : o];
  }
  runtime::SessionOptions so;
  so.threads = ctx.threads;
  std::unique_ptr<runtime::Session> float_session, quant_session;
  SEQTO_ASSIGN_OR_RETURN(float_session, runtime::Session::Create(Truncated(plan.prepared_model(), layer.output), so));
  bool input_is_feed = false;
  for (const auto& in : quantized.graph.inputs) input_is_feed |= in.name == grid.input;
  if (!input_is_feed) {
    SEQTO_ASSIGN_OR_RETURN(quant_session, runtime::Session::Create(Truncated(quantized, grid.input), so));
  }
  Cache c;
  c.width = layer.groups * layer.k_per_group;
  c.outs = layer.outs;
  // Columns per sample: `positions`, fewer if the cache would outgrow the memory bound.
  const double per_column = 4.0 * static_cast<double>(c.width + c.outs);
  const int64_t affordable = static_cast<int64_t>(limits.memory_bytes / (per_column * limits.samples));
  const int64_t per_sample = std::max<int64_t>(1, std::min(limits.positions, affordable));
  for (size_t b = 0; b < ctx.calibration->num_batches && c.samples < limits.samples; ++b) {
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap feeds, ctx.calibration->get(b));
    if (feeds.empty() || feeds.begin()->second.rank() == 0) return UserError("calibration batch without a batch axis");
    const int64_t batch = std::min(feeds.begin()->second.dim(0), limits.samples - c.samples);
    feeds = FirstRows(feeds, batch);
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap fy, float_session->Run(feeds));
    Tensor x;
    if (input_is_feed) {
      x = feeds.at(grid.input);
    } else {
      SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap qx, quant_session->Run(feeds));
      x = qx.at(grid.input);
    }
    const Tensor& y = fy.at(layer.output);
    if (x.dtype() != DType::kFloat32 || y.dtype() != DType::kFloat32 || x.rank() < 2 || y.rank() < 2 ||
        x.dim(0) != batch || y.dim(0) != batch)
      return UserError("unexpected input or output shapes");
    const float* xp = x.data<float>();
    const float* yp = y.data<float>();
    auto add_column = [&](int64_t n, const float* y_at, int64_t y_stride) {
      const bool held = HeldOut(c.samples + n, limits.holdout);
      for (int64_t o = 0; o < c.outs; ++o) {
        const double v = y_at[o * y_stride];
        c.energy += v * v;
        if (held) c.held_out_energy += v * v;
        c.y.push_back(static_cast<float>(v - bias[o]));
      }
      (held ? c.held_out : c.train).push_back(c.columns++);
    };
    if (layer.conv()) {
      const int64_t in_channels = c.width / (layer.kh * layer.kw);
      if (x.rank() != 4 || y.rank() != 4 || y.dim(1) != c.outs || x.dim(1) != in_channels)
        return UserError("unexpected convolution shapes");
      const int64_t ch = x.dim(1), ih = x.dim(2), iw = x.dim(3), oh = y.dim(2), ow = y.dim(3);
      const int64_t top = PadBefore(layer, ih, oh, layer.kh, layer.stride_h, layer.dil_h, 0);
      const int64_t left = PadBefore(layer, iw, ow, layer.kw, layer.stride_w, layer.dil_w, 1);
      const int64_t plane = oh * ow, take = std::min(per_sample, plane);
      std::vector<int64_t> order(plane);
      for (int64_t n = 0; n < batch; ++n) {
        // `take` distinct positions (a partial Fisher-Yates shuffle).
        for (int64_t p = 0; p < plane; ++p) order[p] = p;
        for (int64_t p = 0; p < take; ++p) std::swap(order[p], order[p + static_cast<int64_t>(rng() % (plane - p))]);
        for (int64_t p = 0; p < take; ++p) {
          const int64_t r = order[p] / ow, q = order[p] % ow;
          for (int64_t cin = 0; cin < ch; ++cin) {
            const float* plane_in = xp + (n * ch + cin) * ih * iw;
            for (int64_t i = 0; i < layer.kh; ++i)
              for (int64_t j = 0; j < layer.kw; ++j) {
                const int64_t yy = r * layer.stride_h - top + i * layer.dil_h;
                const int64_t xx = q * layer.stride_w - left + j * layer.dil_w;
                c.x.push_back(yy >= 0 && yy < ih && xx >= 0 && xx < iw ? plane_in[yy * iw + xx] : 0.0f);
              }
          }
          add_column(n, yp + n * c.outs * plane + order[p], plane);
        }
      }
    } else {
      // Rows of a Gemm/MatMul: [..., K] -> [..., O].
      const int64_t k = c.width;
      if (x.dim(x.rank() - 1) != k || y.dim(y.rank() - 1) != c.outs || x.numel() / k != y.numel() / c.outs)
        return UserError("unexpected matrix shapes");
      const int64_t rows = x.numel() / k / batch, take = std::min(per_sample, rows);
      std::vector<int64_t> order(rows);
      for (int64_t n = 0; n < batch; ++n) {
        for (int64_t p = 0; p < rows; ++p) order[p] = p;
        for (int64_t p = 0; p < take; ++p) std::swap(order[p], order[p + static_cast<int64_t>(rng() % (rows - p))]);
        for (int64_t p = 0; p < take; ++p) {
          const int64_t row = n * rows + order[p];
          c.x.insert(c.x.end(), xp + row * k, xp + (row + 1) * k);
          add_column(n, yp + row * c.outs, 1);
        }
      }
    }
    c.samples += batch;
  }
  if (c.columns == 0) return UserError("no calibration samples");
  if (c.train.empty()) std::swap(c.train, c.held_out);
  return c;
}

// C [m x n] = alpha * op(A) op(B) + beta * C, row-major (oneDNN's sgemm).
Status Sgemm(char ta, char tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
             const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (dnnl_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) != dnnl_success)
    return InternalError("oneDNN sgemm failed");
  return Status::Ok();
}

// The layer's matrix problem on a batch of cached columns: xb [groups][K][B] (the
// columns side by side), r [O][B] = W xb - y, g [O][K] = 2 / B * r xb^T.
class Problem {
 public:
  Problem(const Layer& l, const Cache& c, int64_t batch) : l_(l), c_(c), batch_(batch) {
    xb_.resize(c.width * batch);
    r_.resize(c.outs * batch);
  }
  int64_t batch() const { return batch_; }

  // Loads columns `cols` (batch() of them) into xb and -y into r.
  void Gather(const int64_t* cols) {
    const int64_t width = c_.width, b_n = batch_;
    ParallelFor(width, b_n, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k)
        for (int64_t b = 0; b < b_n; ++b) xb_[k * b_n + b] = c_.x[cols[b] * width + k];
    });
    for (int64_t o = 0; o < c_.outs; ++o)
      for (int64_t b = 0; b < b_n; ++b) r_[o * b_n + b] = -c_.y[cols[b] * c_.outs + o];
  }

  // r += W xb; returns sum(r^2).
  Expected<double> Residual(const std::vector<float>& w) {
    const int64_t og = l_.outs / l_.groups, k = l_.k_per_group, b_n = batch_;
    if (Tiny()) {
      ParallelFor(l_.groups, og * k * b_n, [&](int64_t begin, int64_t end) {
        for (int64_t g = begin; g < end; ++g)
          for (int64_t o = g * og; o < (g + 1) * og; ++o) {
            float* r = &r_[o * b_n];
            for (int64_t j = 0; j < k; ++j) {
              const float wv = w[o * k + j];
              const float* x = &xb_[(g * k + j) * b_n];
              for (int64_t b = 0; b < b_n; ++b) r[b] += wv * x[b];
            }
          }
      });
    } else {
      for (int64_t g = 0; g < l_.groups; ++g)
        SEQTO_RETURN_IF_ERROR(
            Sgemm('N', 'N', og, b_n, k, 1.0f, &w[g * og * k], k, &xb_[g * k * b_n], b_n, 1.0f, &r_[g * og * b_n], b_n));
    }
    double sum = 0;
    for (float v : r_) sum += double(v) * v;
    return sum;
  }

  // g = 2 / B * r xb^T (after Residual).
  Status Gradient(std::vector<float>& grad) {
    const int64_t og = l_.outs / l_.groups, k = l_.k_per_group, b_n = batch_;
    const float scale = 2.0f / static_cast<float>(b_n);
    if (Tiny()) {
      ParallelFor(l_.groups, og * k * b_n, [&](int64_t begin, int64_t end) {
        for (int64_t g = begin; g < end; ++g)
          for (int64_t o = g * og; o < (g + 1) * og; ++o) {
            const float* r = &r_[o * b_n];
            for (int64_t j = 0; j < k; ++j) {
              const float* x = &xb_[(g * k + j) * b_n];
              float s = 0;
              for (int64_t b = 0; b < b_n; ++b) s += r[b] * x[b];
              grad[o * k + j] = scale * s;
            }
          }
      });
      return Status::Ok();
    }
    for (int64_t g = 0; g < l_.groups; ++g)
      SEQTO_RETURN_IF_ERROR(Sgemm('N', 'T', og, k, b_n, scale, &r_[g * og * b_n], b_n, &xb_[g * k * b_n], b_n, 0.0f,
                                  &grad[g * og * k], k));
    return Status::Ok();
  }

 private:
  // Depthwise and other tiny per-group matrices: direct loops beat a call per group.
  bool Tiny() const { return (l_.outs / l_.groups) * l_.k_per_group <= 64 && l_.groups > 1; }
  const Layer& l_;
  const Cache& c_;
  int64_t batch_;
  std::vector<float> xb_, r_;
};

// Sum of squared residuals of weights `w` over cached columns `cols`.
Expected<double> CacheError(const Layer& l, const Cache& c, const std::vector<int64_t>& cols,
                            const std::vector<float>& w, int64_t chunk) {
  double sum = 0;
  for (int64_t start = 0; start < static_cast<int64_t>(cols.size()); start += chunk) {
    const int64_t n = std::min<int64_t>(chunk, cols.size() - start);
    Problem p(l, c, n);
    p.Gather(cols.data() + start);
    SEQTO_ASSIGN_OR_RETURN(double s, p.Residual(w));
    sum += s;
  }
  return sum;
}

struct Settings {
  int64_t iterations = 0, batch = 0;
  double lambda = 0, lr = 0;
};

struct LayerResult {
  std::vector<int64_t> offset;   // 0 or 1 added to floor(W / s), per matrix element
  double before = 0, after = 0;  // relative output MSE, nearest and learned rounding
  bool kept_nearest = false;
};

float RectifiedSigmoid(float v, float* slope) {
  const float s = 1.0f / (1.0f + std::exp(-v));
  const float h = s * (kZeta - kGamma) + kGamma;
  *slope = h > 0 && h < 1 ? s * (1 - s) * (kZeta - kGamma) : 0.0f;
  return std::clamp(h, 0.0f, 1.0f);
}

Expected<LayerResult> Learn(const Layer& l, const Grid& grid, const Tensor& weight, const Cache& c, const Settings& st,
                            std::mt19937_64& rng) {
  const int64_t n = l.outs * l.k_per_group;
  const float* wf = weight.data<float>();
  // Per element: floor(W / s), the bounds of floor + h (the type's range less the
  // zero point), and the nearest rounding's offset from floor.
  std::vector<float> base(n), lo(n), hi(n), scale(grid.scale), v(n), m(n, 0.0f), m2(n, 0.0f), soft(n), grad(n), h(n),
      slope(n);
  std::vector<int64_t> nearest(n);
  for (int64_t o = 0; o < l.outs; ++o)
    for (int64_t k = 0; k < l.k_per_group; ++k) {
      const int64_t i = o * l.k_per_group + k;
      const float ratio = wf[l.Flat(o, k)] / scale[i];  // in float32, as QuantizeTensor
      base[i] = std::floor(ratio);
      lo[i] = static_cast<float>(grid.qmin - grid.zero[i]);
      hi[i] = static_cast<float>(grid.qmax - grid.zero[i]);
      nearest[i] = static_cast<int64_t>(std::nearbyint(ratio) - base[i]);
      // h(V) = frac(W / s): sigmoid(V) = (frac - gamma) / (zeta - gamma).
      const float p = (ratio - base[i] - kGamma) / (kZeta - kGamma);
      v[i] = std::log(p / (1 - p));
    }
  auto hard = [&](const std::vector<int64_t>& offset) {
    std::vector<float> w(n);
    for (int64_t i = 0; i < n; ++i) w[i] = scale[i] * std::clamp(base[i] + float(offset[i]), lo[i], hi[i]);
    return w;
  };
  constexpr int64_t kChunk = 1024;
  LayerResult result;
  // Judged on the held-out samples' columns (all columns when there are none).
  const std::vector<int64_t>& judged = c.held_out.empty() ? c.train : c.held_out;
  const double energy = std::max(c.held_out.empty() ? c.energy : c.held_out_energy, 1e-30);
  SEQTO_ASSIGN_OR_RETURN(double before, CacheError(l, c, judged, hard(nearest), kChunk));

  const int64_t train = static_cast<int64_t>(c.train.size());
  const int64_t batch = std::min(st.batch, train);
  Problem problem(l, c, batch);
  std::vector<int64_t> cols(batch);
  const int64_t warmup = static_cast<int64_t>(kWarmup * st.iterations);
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  double b1t = 1, b2t = 1;
  for (int64_t t = 0; t < st.iterations; ++t) {
    float lambda = 0, beta = 0;
    if (t >= warmup) {
      const double rel = double(t - warmup) / std::max<int64_t>(1, st.iterations - warmup);
      beta = static_cast<float>(kBetaEnd + 0.5 * (kBetaStart - kBetaEnd) * (1 + std::cos(rel * M_PI)));
      lambda = static_cast<float>(st.lambda);
    }
    for (auto& col : cols) col = c.train[rng() % static_cast<uint64_t>(train)];
    problem.Gather(cols.data());
    // h, its slope and the soft weights; the update below reuses h and the slope.
    ParallelFor(n, 20, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        h[i] = RectifiedSigmoid(v[i], &slope[i]);
        soft[i] = scale[i] * std::clamp(base[i] + h[i], lo[i], hi[i]);
      }
    });
    SEQTO_RETURN_IF_ERROR(problem.Residual(soft).status());
    SEQTO_RETURN_IF_ERROR(problem.Gradient(grad));
    b1t *= b1, b2t *= b2;
    const float lr = static_cast<float>(st.lr * std::sqrt(1 - b2t) / (1 - b1t));
    ParallelFor(n, 40, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float q = base[i] + h[i];
        float dh = q >= lo[i] && q <= hi[i] ? grad[i] * scale[i] : 0.0f;
        if (lambda > 0) {
          const float d = 2 * h[i] - 1;
          dh -= lambda * 2 * beta * std::pow(std::fabs(d), beta - 1) * (d > 0 ? 1.0f : d < 0 ? -1.0f : 0.0f);
        }
        const float dv = dh * slope[i];
        m[i] = b1 * m[i] + (1 - b1) * dv;
        m2[i] = b2 * m2[i] + (1 - b2) * dv * dv;
        v[i] -= lr * m[i] / (std::sqrt(m2[i]) + eps);
      }
    });
  }
  result.offset.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    float slope;
    result.offset[i] = RectifiedSigmoid(v[i], &slope) >= 0.5f ? 1 : 0;
  }
  SEQTO_ASSIGN_OR_RETURN(double after, CacheError(l, c, judged, hard(result.offset), kChunk));
  if (after >= before) {
    result.offset = nearest;
    result.kept_nearest = true;
    after = before;
  }
  result.before = before / energy;
  result.after = after / energy;
  return result;
}

// The integers q = clamp(floor(W / s) + offset, range) + zero point, in the weight's
// shape and the grid's storage type.
Tensor Integers(const Layer& l, const Grid& grid, const Tensor& weight, const std::vector<int64_t>& offset) {
  Tensor q(StorageDType(grid.type), weight.shape());
  const float* wf = weight.data<float>();
  VisitNumeric(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = q.data<T>();
    for (int64_t o = 0; o < l.outs; ++o)
      for (int64_t k = 0; k < l.k_per_group; ++k) {
        const int64_t i = o * l.k_per_group + k, e = l.Flat(o, k);
        const int64_t base = static_cast<int64_t>(std::floor(wf[e] / grid.scale[i]));
        out[e] = static_cast<T>(std::clamp(base + offset[i] + grid.zero[i], grid.qmin, grid.qmax));
      }
  });
  return q;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

Status AdaRound(QuantPlan& plan, const RecoverySpec& spec, const RecoveryContext& ctx, json& record) {
  Settings st;
  st.iterations = static_cast<int64_t>(OptionValue(spec, "iterations"));
  st.batch = static_cast<int64_t>(OptionValue(spec, "batch"));
  st.lambda = OptionValue(spec, "lambda");
  st.lr = OptionValue(spec, "lr");
  CacheLimits limits;
  limits.samples = static_cast<int64_t>(OptionValue(spec, "samples"));
  limits.positions = static_cast<int64_t>(OptionValue(spec, "positions"));
  limits.memory_bytes = OptionValue(spec, "memory_mb") * 1024 * 1024;
  limits.holdout = OptionValue(spec, "holdout");
  const uint64_t seed = ctx.seed + static_cast<uint64_t>(OptionValue(spec, "seed"));

  json skipped = json::object();
  const std::vector<Layer> layers = FindLayers(plan, skipped);
  Refinements refinements = plan.refinements();
  json per_layer = json::array();
  double cache_seconds = 0, learn_seconds = 0, before_sum = 0, after_sum = 0;
  int64_t flipped = 0, weights = 0, samples = 0, refined = 0;
  for (size_t li = 0; li < layers.size(); ++li) {
    const Layer& l = layers[li];
    const auto start = std::chrono::steady_clock::now();
    // The quantized model with the roundings learned so far.
    plan.SetRefinements(refinements);
    SEQTO_ASSIGN_OR_RETURN(ir::Model quantized, plan.Materialize());
    const Tensor& weight = plan.prepared_model().graph.initializers.at(l.weight);
    auto grid = ReadGrid(quantized, l, plan.options(), weight);
    if (!grid.ok()) {
      skipped[l.node] = grid.error().message;
      continue;
    }
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + li);
    auto cache = BuildCache(quantized, *grid, plan, l, limits, ctx, rng);
    if (!cache.ok()) return std::move(cache).WithContext("adaround: node '" + l.node + "'").error();
    quantized = ir::Model();  // only one model and one cache at a time
    cache_seconds += Seconds(start);
    // Fewer columns than weights per output channel: every row's rounding would fit
    // the samples exactly (the classifier of a model calibrated on 100 images).
    if (static_cast<int64_t>(cache->train.size()) < l.k_per_group) {
      skipped[l.node] = std::to_string(cache->train.size()) + " training columns for " + std::to_string(l.k_per_group) +
                        " weights per output channel (more samples needed)";
      continue;
    }
    const auto learn_start = std::chrono::steady_clock::now();
    auto learned = Learn(l, *grid, weight, *cache, st, rng);
    if (!learned.ok()) return std::move(learned).WithContext("adaround: node '" + l.node + "'").error();
    learn_seconds += Seconds(learn_start);
    int64_t moved = 0;
    for (int64_t o = 0; o < l.outs; ++o)
      for (int64_t k = 0; k < l.k_per_group; ++k) {
        const int64_t i = o * l.k_per_group + k;
        const float ratio = weight.data<float>()[l.Flat(o, k)] / grid->scale[i];
        moved += std::floor(ratio) + float(learned->offset[i]) != std::nearbyint(ratio);
      }
    const int64_t n = l.outs * l.k_per_group;
    refinements.weight_integers[l.weight] = Integers(l, *grid, weight, learned->offset);
    flipped += moved, weights += n, samples = cache->samples, ++refined;
    before_sum += learned->before, after_sum += learned->after;
    per_layer.push_back({{"node", l.node},
                         {"weights", n},
                         {"columns", cache->columns},
                         {"error_nearest", learned->before},
                         {"error_learned", learned->after},
                         {"flipped", double(moved) / n},
                         {"kept_nearest", learned->kept_nearest},
                         {"seconds", Seconds(start)}});
    if (ctx.say)
      ctx.say("adaround: " + std::to_string(li + 1) + "/" + std::to_string(layers.size()) + " " + l.node +
              ": relative output error " + std::to_string(learned->before) + " -> " + std::to_string(learned->after));
  }
  plan.SetRefinements(refinements);
  record["layers"] = refined;
  record["samples"] = samples;
  record["iterations"] = st.iterations;
  record["mean_error_nearest"] = refined ? before_sum / refined : 0.0;
  record["mean_error_learned"] = refined ? after_sum / refined : 0.0;
  record["flipped"] = weights ? double(flipped) / weights : 0.0;
  record["cache_seconds"] = cache_seconds;
  record["learn_seconds"] = learn_seconds;
  record["per_layer"] = std::move(per_layer);
  if (!skipped.empty()) record["skipped"] = std::move(skipped);
  return Status::Ok();
}

}  // namespace

Technique MakeAdaRoundTechnique() {
  Technique t;
  t.name = "adaround";
  t.description =
      "learned rounding (AdaRound): each quantized Conv/Gemm/MatMul weight rounded up or down to reconstruct the float "
      "layer's output on the calibration samples, layer by layer; the plan's scales are kept";
  using K = OptionSpec::Kind;
  t.options = {
      {"iterations", K::kInteger, 1000, 1, 1e6, "Adam steps per layer"},
      {"batch", K::kInteger, 256, 1, 1 << 20, "cached columns (output positions) per step"},
      {"samples", K::kInteger, 128, 1, 1 << 20, "calibration samples cached per layer (at most)"},
      {"positions", K::kInteger, 64, 1, 1 << 20, "random output positions cached per sample"},
      {"memory_mb", K::kNumber, 256, 1, 1 << 20, "bound on one layer's cache (fewer positions per sample beyond)"},
      {"holdout", K::kNumber, 0.2, 0, 0.5,
       "share of the samples held out of the optimization; a layer whose learned rounding does worse than nearest "
       "rounding on them keeps nearest rounding (0: judged on the training columns)"},
      {"lambda", K::kNumber, 0.01, 0, 1e6, "weight of the rounding regularizer"},
      {"lr", K::kNumber, 0.01, 1e-9, 10, "Adam learning rate"},
      {"seed", K::kInteger, 0, 0, 1e9, "added to the run's seed (sampling of positions and batches)"},
  };
  t.needs_data = true;
  t.static_only = true;
  t.expensive = true;  // about 3.5 minutes on MobileNetV2 at the defaults
  t.refine_plan = AdaRound;
  return t;
}

}  // namespace seqto::quant::recover
