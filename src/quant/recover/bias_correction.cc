// Empirical bias correction (docs/design.md, Accuracy recovery): quantizing weights
// and inputs shifts the mean of a layer's output, and the shift passes on to every
// layer after it. The float model and the full quantization run on the calibration
// samples; for every quantized Conv/ConvTranspose/Gemm with a bias, and every
// quantized MatMul followed by an Add of a constant [C] or [1, ..., C], the mean of
// the output per channel (Conv: axis 1, Gemm/MatMul: the last axis) is compared over
// all samples and positions, and mean_float - mean_quant is added to the bias. The
// quantized node sees the corrected bias only (QuantPlan::Refinements): an excluded
// group gets its float bias back.
//
// The compared value is the node's own output before its QuantizeLinear (the engine
// keeps it: keep_values stops the QDQ fusion there), computed from the dequantized
// input, weight and bias: the fake-quantized pre-activation. For MatMul + Add it is
// the Add's output, so the quantization of the Add's constant is corrected as well
// (on that constant's own 8-bit grid).
//
// Sequential, not simultaneous: a layer's error includes what its inputs carry from
// the layers before, which their own corrections remove. Correcting every layer by
// the error measured before any correction counts that part twice, and on ImageNet
// MobileNetV2 it destroys the model (top-1 79.75% -> 1%). So the quantized model
// runs each batch with every corrected output shifted, as it is produced, by the
// difference of its batch means (RunHooks::override_value): each node sees its inputs
// corrected already, a Gauss-Seidel sweep in execution order, in one run. The shifts
// are averaged over the batches (weighted by their values). Nonlinear ops (Relu,
// clipping Q/DQ) make the average of per-batch sweeps differ from one sweep over all
// samples, the more so the smaller the batches: on the Fashion-MNIST CNNs the mean
// errors drop 5-15x with one batch of 8 images, 4-8x with batches of 4 (the
// per-channel ResNet's, small to begin with, not at all). On MobileNetV2, batches of
// 10 and of 50 gave the same SQNR and agreement.
//
// Options:
//   passes (default 1): later passes materialize the quantization with the
//     corrections so far and sweep again, adding what is left. Because the sweep
//     already corrects upstream first, what is left is only the rounding of the
//     corrections to each bias's int32 grid (s_in * s_w) and the sensitivity of the
//     late layers to float rounding (a different rounding of an early value flips a
//     few 8-bit roundings, and the flips grow layer by layer: the last layers' batch
//     means move by about as much as a second pass would add). On MobileNetV2 passes
//     2 and 3 changed the SQNR by < 0.2 dB and the top-1 within noise, for 50% and
//     100% more time; 1 is the default.
//   samples (default 0 = all): the calibration samples to measure on (the first
//     ones, in the calibration's order; the last batch is cut).
// The float model runs once (its batch means are kept for later passes when they fit
// in 64 MB), the quantized one once per pass; sums are kept in double per channel
// and no activation outlives its batch.
//
// For groups the tuner may give 16-bit activations (refine_plan_int16_activations),
// the same measurement runs a second time with every group at 16-bit activations and
// its corrections go to Refinements::int16_activation_values, starting from the
// 8-bit ones: those also repair the mean error 8-bit inputs bring, which a 16-bit
// group does not have (on MobileNetV2 per channel, every group at 16 bits: 97.25% ->
// 98.75% top-1 agreement with float).
//
// Float stage: a Conv/Gemm with a constant weight and no bias gets a zero one (the
// float output does not change), so that its error can be corrected too.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "quant/recover/technique.h"
#include "runtime/session.h"

namespace seqto::quant::recover {

namespace {

using nlohmann::json;

// One output whose per-channel mean error a bias absorbs.
struct Target {
  std::string node;         // the Conv/Gemm/MatMul (same name in both models)
  std::string value;        // the compared value in the float model
  std::string quant_value;  // the same value in the quantized model
  std::string bias;         // the initializer corrected
  int64_t channels = 0;     // output channels (the weight's), as many as the bias has
  bool last_axis = false;   // channels on the last axis (Gemm, MatMul), else axis 1
  double gain = 1.0;        // bias change per unit of output change (1 / beta of a quantized Gemm)
};

// Per-channel sums of one value over all samples and positions.
struct ChannelSums {
  std::vector<double> sum, sum_sq;
  int64_t count = 0;  // values per channel
};

bool IsOnnxOp(const ir::Node& n, const char* op) {
  return n.op_type == op && (n.domain.empty() || n.domain == "ai.onnx");
}

const std::string& InputAt(const ir::Node& n, size_t i) {
  static const std::string kNone;
  return i < n.inputs.size() ? n.inputs[i] : kNone;
}

const Tensor* FloatInitializer(const ir::Graph& g, const std::string& name) {
  if (name.empty()) return nullptr;
  auto it = g.initializers.find(name);
  return it != g.initializers.end() && it->second.dtype() == DType::kFloat32 ? &it->second : nullptr;
}

// A constant [C] or [1, ..., 1, C]: one value per output channel.
bool IsChannelVector(const Tensor* t, int64_t channels) {
  if (!t || t->rank() < 1 || channels <= 0 || t->dim(t->rank() - 1) != channels) return false;
  for (int64_t d = 0; d + 1 < t->rank(); ++d)
    if (t->dim(d) != 1) return false;
  return true;
}

// Output channels of a Conv/ConvTranspose/Gemm/MatMul from its constant weight (0:
// not constant, or not a shape these ops take).
int64_t OutputChannels(const ir::Graph& g, const ir::Node& n) {
  const Tensor* w = FloatInitializer(g, InputAt(n, 1));
  if (!w || w->rank() < 2) return 0;
  if (IsOnnxOp(n, "Conv")) return w->dim(0);
  if (IsOnnxOp(n, "ConvTranspose")) {
    const auto group = n.attr_int("group", 1);
    return group.ok() ? w->dim(1) * *group : 0;
  }
  if (IsOnnxOp(n, "Gemm")) {
    const auto trans_b = n.attr_int("transB", 0);
    return !trans_b.ok() || w->rank() != 2 ? 0 : (*trans_b ? w->dim(0) : w->dim(1));
  }
  if (IsOnnxOp(n, "MatMul")) return w->dim(w->rank() - 1);
  return 0;
}

// The values each bias can be corrected on: nodes the full quantization quantizes
// with their bias (or the Add's constant) quantized as well, so that Refinements
// reach it. A bias shared with another node or read as a graph output stays.
std::vector<Target> FindTargets(const ir::Graph& prepared, const ir::Graph& full) {
  std::map<std::string, int> reads;
  std::map<std::string, std::vector<const ir::Node*>> consumers;
  for (const auto& n : prepared.nodes)
    for (const auto& in : n.inputs) {
      ++reads[in];
      consumers[in].push_back(&n);
    }
  std::set<std::string> graph_outputs;
  for (const auto& o : prepared.outputs) graph_outputs.insert(o.name);
  std::map<std::string, const ir::Node*> full_nodes;
  for (const auto& n : full.nodes) full_nodes[n.name] = &n;
  std::set<std::string> dequantized;  // values a DequantizeLinear writes in the quantized model
  for (const auto& n : full.nodes)
    if (IsOnnxOp(n, "DequantizeLinear") || (n.op_type == "DequantizeLinear" && n.domain == "com.microsoft"))
      for (const auto& o : n.outputs) dequantized.insert(o);
  // Whether node `name` of the quantized model reads a dequantized value at input i
  // (a quantized bias keeps its name, its DequantizeLinear writes it; a quantized
  // constant is read through its own DequantizeLinear's output).
  auto reads_float = [&](const std::string& name, size_t i) {
    auto it = full_nodes.find(name);
    return it == full_nodes.end() || !dequantized.count(InputAt(*it->second, i));
  };
  auto own_bias = [&](const std::string& b) {
    return FloatInitializer(prepared, b) && reads[b] == 1 && !graph_outputs.count(b);
  };
  auto full_output = [&](const std::string& name) {
    auto it = full_nodes.find(name);
    return it == full_nodes.end() || it->second->outputs.empty() ? std::string() : it->second->outputs[0];
  };

  std::vector<Target> targets;
  for (const auto& n : prepared.nodes) {
    if (n.outputs.empty() || n.outputs[0].empty()) continue;
    Target t;
    t.node = n.name;
    t.channels = OutputChannels(prepared, n);
    if (t.channels <= 0) continue;
    if (IsOnnxOp(n, "Conv") || IsOnnxOp(n, "ConvTranspose")) {
      const std::string& b = InputAt(n, 2);
      if (!own_bias(b) || FloatInitializer(prepared, b)->numel() != t.channels || reads_float(n.name, 2)) continue;
      t.value = n.outputs[0];
      t.bias = b;
      t.quant_value = full_output(n.name);
    } else if (IsOnnxOp(n, "Gemm")) {
      const std::string& b = InputAt(n, 2);
      if (!own_bias(b) || !IsChannelVector(FloatInitializer(prepared, b), t.channels) || reads_float(n.name, 2))
        continue;
      // The quantized Gemm's beta: the quantizer folds beta into the bias's scale and
      // sets it to 1 (as ONNX Runtime does), so the dequantized bias is added as it is.
      const auto beta = full_nodes.at(n.name)->attr_float("beta", 1.0f);
      if (!beta.ok() || *beta == 0) continue;
      t.value = n.outputs[0];
      t.bias = b;
      t.last_axis = true;
      t.gain = 1.0 / *beta;
      t.quant_value = full_output(n.name);
    } else if (IsOnnxOp(n, "MatMul")) {
      const std::string& y = n.outputs[0];
      auto c = consumers.find(y);
      if (graph_outputs.count(y) || c == consumers.end() || c->second.size() != 1) continue;
      const ir::Node& add = *c->second[0];
      if (!IsOnnxOp(add, "Add") || add.inputs.size() != 2 || add.outputs.empty()) continue;
      const size_t k = add.inputs[0] == y ? 1 : 0;
      const std::string& b = add.inputs[k];
      if (add.inputs[1 - k] != y || !own_bias(b) || !IsChannelVector(FloatInitializer(prepared, b), t.channels))
        continue;
      // Both the MatMul and the constant must be quantized.
      if (reads_float(n.name, 0) && reads_float(n.name, 1)) continue;
      if (reads_float(add.name, k)) continue;
      t.value = add.outputs[0];
      t.bias = b;
      t.last_axis = true;
      t.quant_value = full_output(add.name);
    } else {
      continue;
    }
    if (!t.quant_value.empty()) targets.push_back(std::move(t));
  }
  return targets;
}

// Adds `v` to the sums of its channels (axis 1, or the last axis).
Status Accumulate(const Tensor& v, const Target& t, ChannelSums& s, bool squares) {
  const int64_t channels = t.channels;
  if (v.dtype() != DType::kFloat32 || v.rank() < 2)
    return InternalError("value '" + t.value + "' is not a float32 tensor of rank >= 2");
  const int64_t c_axis = t.last_axis ? v.rank() - 1 : 1;
  if (v.dim(c_axis) != channels)
    return InternalError("value '" + t.value + "' has " + std::to_string(v.dim(c_axis)) + " channels, its bias '" +
                         t.bias + "' " + std::to_string(channels));
  if (s.sum.empty()) {
    s.sum.assign(channels, 0.0);
    if (squares) s.sum_sq.assign(channels, 0.0);
  }
  const float* x = v.data<float>();
  if (t.last_axis) {
    const int64_t rows = v.numel() / channels;
    for (int64_t r = 0; r < rows; ++r, x += channels) {
      for (int64_t c = 0; c < channels; ++c) s.sum[c] += x[c];
      if (squares)
        for (int64_t c = 0; c < channels; ++c) s.sum_sq[c] += static_cast<double>(x[c]) * x[c];
    }
    s.count += rows;
    return Status::Ok();
  }
  const int64_t outer = v.dim(0), inner = v.numel() / (outer * channels);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c, x += inner) {
      // Four partial sums: the adds of one chain would wait on each other.
      double a[4] = {0, 0, 0, 0}, q[4] = {0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 4 <= inner; i += 4)
        for (int k = 0; k < 4; ++k) a[k] += x[i + k];
      for (; i < inner; ++i) a[0] += x[i];
      s.sum[c] += (a[0] + a[1]) + (a[2] + a[3]);
      if (squares) {
        for (i = 0; i + 4 <= inner; i += 4)
          for (int k = 0; k < 4; ++k) q[k] += static_cast<double>(x[i + k]) * x[i + k];
        for (; i < inner; ++i) q[0] += static_cast<double>(x[i]) * x[i];
        s.sum_sq[c] += (q[0] + q[1]) + (q[2] + q[3]);
      }
    }
  s.count += outer * inner;
  return Status::Ok();
}

// The first `n` rows of every input (the batch cut to the samples asked for).
runtime::TensorMap FirstRows(const runtime::TensorMap& batch, int64_t rows, int64_t n) {
  runtime::TensorMap out;
  for (const auto& [name, t] : batch) {
    if (t.rank() == 0 || t.dim(0) != rows || t.nbytes() == SIZE_MAX) {
      out[name] = t;
      continue;
    }
    Shape shape = t.shape();
    shape[0] = n;
    Tensor cut(t.dtype(), shape);
    std::memcpy(cut.raw(), t.raw(), t.nbytes() / static_cast<size_t>(rows) * static_cast<size_t>(n));
    out[name] = std::move(cut);
  }
  return out;
}

int64_t BatchRows(const runtime::TensorMap& batch) {
  for (const auto& [name, t] : batch)
    if (t.rank() > 0) return t.dim(0);
  return 1;
}

// Runs `fn` on the calibration batches, cut to `samples` samples (0: all); returns
// the number of samples used.
Expected<int64_t> ForEachBatch(const BatchList& data, int64_t samples,
                               const std::function<Status(const runtime::TensorMap&)>& fn) {
  int64_t used = 0;
  for (size_t b = 0; b < data.num_batches && (samples == 0 || used < samples); ++b) {
    SEQTO_ASSIGN_OR_RETURN(runtime::TensorMap batch, data.get(b));
    const int64_t rows = BatchRows(batch);
    if (samples > 0 && used + rows > samples) {
      batch = FirstRows(batch, rows, samples - used);
      used = samples;
    } else {
      used += rows;
    }
    SEQTO_RETURN_IF_ERROR(fn(batch));
  }
  return used;
}

Expected<std::unique_ptr<runtime::Session>> SessionFor(const ir::Model& model, const std::vector<Target>& targets,
                                                       bool quantized, int threads) {
  runtime::SessionOptions so;
  so.threads = threads;
  for (const auto& t : targets) so.keep_values.insert(quantized ? t.quant_value : t.value);
  return runtime::Session::Create(model, so);
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// `v` plus offset[c] on every value of channel c.
Tensor AddPerChannel(const Tensor& v, const Target& t, const std::vector<double>& offset) {
  Tensor out(DType::kFloat32, v.shape());
  const float* x = v.data<float>();
  float* y = out.data<float>();
  const int64_t channels = t.channels;
  std::vector<float> add(offset.begin(), offset.end());
  if (t.last_axis) {
    for (int64_t r = 0, rows = v.numel() / channels; r < rows; ++r, x += channels, y += channels)
      for (int64_t c = 0; c < channels; ++c) y[c] = x[c] + add[c];
    return out;
  }
  const int64_t outer = v.dim(0), inner = v.numel() / (outer * channels);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c, x += inner, y += inner)
      for (int64_t i = 0; i < inner; ++i) y[i] = x[i] + add[c];
  return out;
}

// The float model's per-channel means of one batch, by target.
using BatchMeans = std::vector<std::vector<double>>;

// One pass over the calibration samples: the float model's means of each batch (from
// `kept` when float_session is null; else measured, added to `kept` and, with their
// squares, to `float_totals` when they are given), then the quantized model on the same batch with
// every target's output shifted, as it is produced, by the difference of its batch
// means: each node sees its inputs corrected already (a Gauss-Seidel sweep in
// execution order, on each batch). Returns the shifts averaged over the samples.
struct PassResult {
  std::vector<std::vector<double>> shift;  // by target, per channel
  int64_t samples = 0;
};
Expected<PassResult> RunPass(const std::vector<Target>& targets, runtime::Session* float_session,
                             runtime::Session& quant_session, const BatchList& data, int64_t samples,
                             std::vector<BatchMeans>* kept, std::vector<ChannelSums>* float_totals) {
  std::map<std::string, size_t> by_float, by_quant;
  for (size_t i = 0; i < targets.size(); ++i) {
    by_float[targets[i].value] = i;
    by_quant[targets[i].quant_value] = i;
  }
  PassResult result;
  result.shift.resize(targets.size());
  std::vector<int64_t> weight(targets.size(), 0);
  for (size_t i = 0; i < targets.size(); ++i) result.shift[i].assign(targets[i].channels, 0.0);
  Status status;
  size_t batch_index = 0;
  BatchMeans float_mean(targets.size());

  runtime::RunHooks float_hooks;
  float_hooks.observe = [&](const std::string& name, const Tensor& v) {
    auto it = by_float.find(name);
    if (it == by_float.end() || !status.ok()) return;
    const size_t i = it->second;
    ChannelSums s;
    status = Accumulate(v, targets[i], s, /*squares=*/float_totals != nullptr);
    if (!status.ok()) return;
    float_mean[i].resize(targets[i].channels);
    for (int64_t c = 0; c < targets[i].channels; ++c) float_mean[i][c] = s.sum[c] / s.count;
    if (float_totals) {
      ChannelSums& t = (*float_totals)[i];
      if (t.sum.empty())
        t = s;
      else {
        for (int64_t c = 0; c < targets[i].channels; ++c) {
          t.sum[c] += s.sum[c];
          t.sum_sq[c] += s.sum_sq[c];
        }
        t.count += s.count;
      }
    }
  };
  runtime::RunHooks quant_hooks;
  quant_hooks.override_value = [&](const std::string& name, const Tensor& v) -> std::optional<Tensor> {
    auto it = by_quant.find(name);
    if (it == by_quant.end() || !status.ok()) return std::nullopt;
    const size_t i = it->second;
    ChannelSums s;
    status = Accumulate(v, targets[i], s, /*squares=*/false);
    if (!status.ok()) return std::nullopt;
    if (float_mean[i].size() != static_cast<size_t>(targets[i].channels)) {
      status = InternalError("bias correction: value '" + targets[i].value + "' was not seen in the float model");
      return std::nullopt;
    }
    std::vector<double> offset(targets[i].channels);
    for (int64_t c = 0; c < targets[i].channels; ++c) {
      offset[c] = float_mean[i][c] - s.sum[c] / s.count;
      result.shift[i][c] += offset[c] * s.count;
    }
    weight[i] += s.count;
    return AddPerChannel(v, targets[i], offset);
  };

  SEQTO_ASSIGN_OR_RETURN(result.samples, ForEachBatch(data, samples, [&](const runtime::TensorMap& batch) -> Status {
                           for (auto& m : float_mean) m.clear();
                           if (float_session) {
                             SEQTO_RETURN_IF_ERROR(float_session->Run(batch, &float_hooks).status());
                             SEQTO_RETURN_IF_ERROR(status);
                             if (kept) kept->push_back(float_mean);
                           } else {
                             float_mean = (*kept)[batch_index];
                           }
                           ++batch_index;
                           SEQTO_RETURN_IF_ERROR(quant_session.Run(batch, &quant_hooks).status());
                           return status;
                         }));
  for (size_t i = 0; i < targets.size(); ++i) {
    if (weight[i] == 0)
      return InternalError("bias correction: value '" + targets[i].quant_value +
                           "' was not seen in the quantized model");
    for (double& d : result.shift[i]) d /= static_cast<double>(weight[i]);
  }
  return result;
}

// The quantization the corrections are measured on: the full one, or (for
// Refinements::int16_activation_values) every group at 16-bit activations.
Expected<ir::Model> MaterializeMeasured(const QuantPlan& plan, bool int16_activations) {
  if (!int16_activations) return plan.Materialize();
  std::set<std::string> every_group;
  for (const auto& g : plan.groups()) every_group.insert(g.name);
  return plan.Materialize(every_group, Fallback::kInt16Activations);
}

// Measures and corrects the biases on the full quantization, or with every group at
// 16-bit activations (`int16_activations`: the corrections then go to
// Refinements::int16_activation_values and start from what such a group used before).
Status RefinePlan(QuantPlan& plan, const RecoverySpec& spec, const RecoveryContext& ctx, json& record,
                  bool int16_activations) {
  const int passes = static_cast<int>(OptionValue(spec, "passes"));
  const int64_t samples = static_cast<int64_t>(OptionValue(spec, "samples"));
  const ir::Model& float_model = plan.prepared_model();
  Refinements refinements = plan.refinements();
  std::map<std::string, Tensor>& corrected =
      int16_activations ? refinements.int16_activation_values : refinements.values;
  SEQTO_ASSIGN_OR_RETURN(ir::Model full, MaterializeMeasured(plan, int16_activations));
  const std::vector<Target> targets = FindTargets(float_model.graph, full.graph);
  record["corrected"] = targets.size();
  record["passes"] = 0;
  record["samples"] = 0;
  if (targets.empty()) return Status::Ok();

  // The biases as they are now (another technique may have refined them already).
  std::vector<Tensor> bias(targets.size());
  int64_t total_channels = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const Tensor* refined = refinements.Value(targets[i].bias, int16_activations);
    bias[i] = (refined ? *refined : float_model.graph.initializers.at(targets[i].bias)).Clone();
    if (bias[i].numel() != targets[i].channels || bias[i].dtype() != DType::kFloat32)
      return InternalError("bias correction: the refined bias '" + targets[i].bias + "' does not match its node");
    total_channels += targets[i].channels;
  }
  std::vector<Tensor> original(bias.size());
  for (size_t i = 0; i < bias.size(); ++i) original[i] = bias[i].Clone();

  // The float model's batch means are kept for the later passes when they are small
  // (a few MB), else it runs again in every pass.
  const size_t batches = ctx.calibration->num_batches;
  const bool keep_float = passes > 1 && batches * static_cast<size_t>(total_channels) * sizeof(double) <= (64u << 20);
  std::vector<BatchMeans> kept;
  std::vector<ChannelSums> float_totals(targets.size());
  SEQTO_ASSIGN_OR_RETURN(auto float_session, SessionFor(float_model, targets, false, ctx.threads));
  json shift_by_pass = json::array();
  double spread = 0;
  int64_t used = 0;
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    if (pass > 0) {
      plan.SetRefinements(refinements);
      SEQTO_ASSIGN_OR_RETURN(full, MaterializeMeasured(plan, int16_activations));
    }
    SEQTO_ASSIGN_OR_RETURN(auto quant_session, SessionFor(full, targets, true, ctx.threads));
    const bool run_float = pass == 0 || !keep_float;
    SEQTO_ASSIGN_OR_RETURN(PassResult r,
                           RunPass(targets, run_float ? float_session.get() : nullptr, *quant_session, *ctx.calibration,
                                   samples, keep_float ? &kept : nullptr, pass == 0 ? &float_totals : nullptr));
    used = r.samples;
    if (pass == 0) {
      if (keep_float) float_session.reset();
      for (size_t i = 0; i < targets.size(); ++i) {
        const ChannelSums& f = float_totals[i];
        for (int64_t c = 0; c < targets[i].channels; ++c) {
          const double mean = f.sum[c] / f.count;
          spread += std::sqrt(std::max(0.0, f.sum_sq[c] / f.count - mean * mean));
        }
      }
    }
    double abs_shift = 0;
    for (size_t i = 0; i < targets.size(); ++i) {
      float* b = bias[i].data<float>();
      for (int64_t c = 0; c < targets[i].channels; ++c) {
        b[c] = static_cast<float>(b[c] + r.shift[i][c] * targets[i].gain);
        abs_shift += std::fabs(r.shift[i][c]);
      }
      corrected[targets[i].bias] = bias[i];
    }
    shift_by_pass.push_back(spread > 0 ? abs_shift / spread : 0.0);
    if (ctx.say)
      ctx.say(std::string("bias correction") + (int16_activations ? " (16-bit activations)" : "") + " pass " +
              std::to_string(pass + 1) + "/" + std::to_string(passes) + ": mean |shift| / std " +
              std::to_string(shift_by_pass.back().get<double>()) + ", " + std::to_string(Seconds(start)) + " s");
  }
  plan.SetRefinements(refinements);

  double abs_correction = 0, abs_bias = 0;
  for (size_t i = 0; i < targets.size(); ++i)
    for (int64_t c = 0; c < targets[i].channels; ++c) {
      abs_correction += std::fabs(bias[i].data<float>()[c] - original[i].data<float>()[c]);
      abs_bias += std::fabs(original[i].data<float>()[c]);
    }
  record["passes"] = passes;
  record["samples"] = used;
  record["channels"] = total_channels;
  // Each pass's mean |shift| over all corrected channels, relative to the float
  // output's standard deviation (both summed over the channels): how much each pass
  // still had to correct.
  record["shift_over_std"] = shift_by_pass;
  record["mean_abs_correction"] = abs_correction / static_cast<double>(total_channels);
  record["mean_abs_bias"] = abs_bias / static_cast<double>(total_channels);
  return Status::Ok();
}

// Float stage: a zero bias for every Conv/Gemm with a constant weight and no bias.
Expected<ir::Model> AddZeroBiases(const ir::Model& prepared, json& record) {
  ir::Model model = prepared;
  ir::Graph& g = model.graph;
  std::set<std::string> names;
  for (const auto& [name, t] : g.initializers) names.insert(name);
  for (const auto& in : g.inputs) names.insert(in.name);
  for (const auto& n : g.nodes)
    for (const auto& o : n.outputs) names.insert(o);
  auto fresh = [&](const std::string& base) {
    std::string name = base;
    for (int k = 1; names.count(name); ++k) name = base + "_" + std::to_string(k);
    names.insert(name);
    return name;
  };
  int64_t added = 0;
  for (auto& n : g.nodes) {
    if (!InputAt(n, 2).empty() || !(IsOnnxOp(n, "Conv") || IsOnnxOp(n, "Gemm"))) continue;
    const int64_t channels = OutputChannels(g, n);
    if (channels <= 0) continue;
    const std::string b = fresh(n.name + "_bias");
    Tensor zero(DType::kFloat32, {channels});
    std::fill(zero.data<float>(), zero.data<float>() + channels, 0.0f);
    g.initializers[b] = std::move(zero);
    n.inputs.resize(3);
    n.inputs[2] = b;
    ++added;
  }
  record["zero_biases_added"] = added;
  return model;
}

}  // namespace

Technique MakeBiasCorrectionTechnique() {
  Technique t;
  t.name = "bias_correction";
  t.description =
      "empirical bias correction: the mean output error per channel on the calibration data is folded into the "
      "bias (Conv, ConvTranspose, Gemm, MatMul + Add)";
  t.options = {
      {"passes", OptionSpec::Kind::kInteger, 1, 1, 10,
       "measure-and-correct passes (each sees the corrections of the passes before)"},
      {"samples", OptionSpec::Kind::kInteger, 0, 0, 1e9, "calibration samples to measure on (0: all)"},
  };
  t.needs_data = true;
  t.static_only = true;
  t.rewrite_float = [](const ir::Model& prepared, const RecoverySpec&, const RecoveryContext&,
                       json& record) -> Expected<ir::Model> { return AddZeroBiases(prepared, record); };
  t.refine_plan = [](QuantPlan& plan, const RecoverySpec& spec, const RecoveryContext& ctx, json& record) {
    return RefinePlan(plan, spec, ctx, record, false);
  };
  t.refine_plan_int16_activations = [](QuantPlan& plan, const RecoverySpec& spec, const RecoveryContext& ctx,
                                       json& record) { return RefinePlan(plan, spec, ctx, record, true); };
  return t;
}

}  // namespace seqto::quant::recover
