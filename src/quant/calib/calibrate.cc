// Calibration statistics (one pass, bounded memory) and the calibration run.
#include "quant/calib/calibrate.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "core/parallel.h"
#include "quant/calib/stats.h"

namespace seqto::quant {
namespace {

using calib::TensorStats;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The one-pass histogram's resolution: 8 x the largest bin count a method re-bins
// to (so an ORT bin of x spans >= 4 fine bins, one of |x| >= 2, even when R is almost
// 2 T), a multiple of 4, and at most 2^20 bins (8 MiB per tensor).
size_t FineBins(const CalibrationOptions& o) {
  const int most = std::max({o.entropy_num_bins, o.percentile_num_bins, o.distribution_num_bins, 128});
  return std::min<size_t>((static_cast<size_t>(most) * 8 + 3) / 4 * 4, size_t{1} << 20);
}

}  // namespace

namespace calib {

Status TensorStats::Add(const Tensor& value, const CalibrationOptions& options) {
  if (value.dtype() != DType::kFloat32) return UserError("calibration needs float32 values, got " + value.Describe());
  const float* x = value.data<float>();
  const int64_t n = value.numel();
  // Min, max, min |x| and whether any value is NaN/Inf, in parallel chunks written so
  // the compiler vectorizes them (the exponent test instead of a branch per value).
  float bmin = std::numeric_limits<float>::infinity(), bmax = -bmin, babs_min = bmin;
  bool nonfinite = false;
  std::mutex mu;
  ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
    float lo = std::numeric_limits<float>::infinity(), hi = -lo, alo = lo;
    uint32_t bad = 0;
    const float* xp = x;  // a local, so the loop does not reload the capture
#pragma omp simd reduction(min : lo, alo) reduction(max : hi) reduction(| : bad)
    for (int64_t i = begin; i < end; ++i) {
      const float v = xp[i];
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      alo = std::min(alo, std::fabs(v));
    }
    std::lock_guard<std::mutex> lock(mu);
    bmin = std::min(bmin, lo);
    bmax = std::max(bmax, hi);
    babs_min = std::min(babs_min, alo);
    nonfinite |= bad != 0;
  });
  if (nonfinite)
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(x[i]))
        return UserError(std::string(std::isnan(x[i]) ? "NaN" : "infinite value") + " in batch " +
                         std::to_string(batches + 1) + " (element " + std::to_string(i) + " of " + value.Describe() +
                         ")");
  ++batches;
  if (n == 0) return Status::Ok();  // nothing to learn; ORT's min/max of empty data is 0
  min = count == 0 ? bmin : std::min<double>(min, bmin);
  max = count == 0 ? bmax : std::max<double>(max, bmax);
  abs_min = count == 0 ? babs_min : std::min<double>(abs_min, babs_min);
  count += n;
  // ORT's moving average: batch min/max averaged per chunk, chunks merged with the
  // averaging constant.
  chunk_min_sum += bmin;
  chunk_max_sum += bmax;
  ++chunk_batches;
  if (options.moving_average_chunk > 0 && chunk_batches == static_cast<size_t>(options.moving_average_chunk)) {
    const auto [m0, m1] = MovingAverage(options);
    avg_min = m0;
    avg_max = m1;
    avg_valid = true;
    chunk_min_sum = chunk_max_sum = 0;
    chunk_batches = 0;
  }
  hist.Add(x, n, std::max(-static_cast<double>(bmin), static_cast<double>(bmax)));
  return Status::Ok();
}

std::pair<double, double> TensorStats::MovingAverage(const CalibrationOptions& options) const {
  if (chunk_batches == 0) return {avg_min, avg_max};
  const double cmin = chunk_min_sum / static_cast<double>(chunk_batches);
  const double cmax = chunk_max_sum / static_cast<double>(chunk_batches);
  if (!avg_valid) return {cmin, cmax};
  const double c = options.averaging_constant;
  return {avg_min + c * (cmin - avg_min), avg_max + c * (cmax - avg_max)};
}

}  // namespace calib

std::string CalibrationMethodName(CalibrationMethod m) {
  const calib::MethodInfo* info = calib::FindMethod(m);
  return info ? info->name : "unknown";
}

Expected<CalibrationMethod> ParseCalibrationMethod(const std::string& name) {
  std::string expected;
  for (const auto& info : calib::Methods()) {
    if (Lower(name) == info.name || Lower(name) == Lower(info.ort_name)) return info.method;
    expected += (expected.empty() ? "" : ", ") + std::string(info.name);
  }
  return UserError("unknown calibration method '" + name + "' (expected " + expected + ")");
}

struct CalibrationStats::Impl {
  std::set<std::string> tensors;
  CalibrationOptions options;
  size_t fine_bins = 0;
  std::map<std::string, TensorStats> stats;  // created at a tensor's first batch
};

CalibrationStats::CalibrationStats(std::set<std::string> tensors, CalibrationOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->tensors = std::move(tensors);
  impl_->fine_bins = FineBins(options);
  impl_->options = std::move(options);
}
CalibrationStats::~CalibrationStats() = default;
CalibrationStats::CalibrationStats(CalibrationStats&&) noexcept = default;
CalibrationStats& CalibrationStats::operator=(CalibrationStats&&) noexcept = default;

const std::set<std::string>& CalibrationStats::tensors() const { return impl_->tensors; }

Status CalibrationStats::Observe(const std::string& name, const Tensor& value) {
  if (!impl_->tensors.count(name)) return Status::Ok();
  auto it = impl_->stats.find(name);
  if (it == impl_->stats.end()) it = impl_->stats.emplace(name, TensorStats(impl_->fine_bins)).first;
  return it->second.Add(value, impl_->options).WithContext("tensor '" + name + "'");
}

size_t CalibrationStats::batches() const {
  size_t most = 0;
  for (const auto& [name, s] : impl_->stats) most = std::max(most, s.batches);
  return most;
}

size_t CalibrationStats::histogram_bins() const { return impl_->fine_bins; }

size_t CalibrationStats::memory_bytes() const {
  size_t bytes = sizeof(Impl);
  for (const auto& [name, s] : impl_->stats) bytes += sizeof(s) + name.capacity() + s.hist.bins() * sizeof(double);
  return bytes;
}

Expected<TensorRanges> CalibrationStats::Ranges(CalibrationMethod method) const {
  return Ranges(method, impl_->options);
}

Expected<TensorRanges> CalibrationStats::Ranges(CalibrationMethod method, const CalibrationOptions& options) const {
  const calib::MethodInfo* info = calib::FindMethod(method);
  if (!info)
    return InternalError("calibration method " + std::to_string(static_cast<int>(method)) + " is not registered");
  // The moving average is merged while observing: its settings are the ones given
  // at construction.
  CalibrationOptions o = options;
  o.averaging_constant = impl_->options.averaging_constant;
  o.moving_average_chunk = impl_->options.moving_average_chunk;
  TensorRanges ranges;
  for (const std::string& name : impl_->tensors) {
    auto it = impl_->stats.find(name);
    if (it == impl_->stats.end())
      return UserError("tensor '" + name + "': never observed during calibration (is it produced by the model?)");
    auto r = info->fn(it->second, o);
    if (!r.ok()) return std::move(r).WithContext("tensor '" + name + "', calibration method " + info->name).error();
    ranges[name] = *r;
  }
  return ranges;
}

Expected<CalibrationStats> Calibrate(const ir::Model& model, const std::set<std::string>& tensors,
                                     const BatchSource& next_batch, const CalibrationOptions& options, int threads,
                                     const std::function<void(size_t)>& progress) {
  // Every tensor must be something a run shows: a graph input or a node output
  // (initializers are not observed; weights are quantized from their values).
  std::set<std::string> produced;
  for (const auto& in : model.graph.inputs) produced.insert(in.name);
  for (const auto& node : model.graph.nodes)
    for (const auto& out : node.outputs) produced.insert(out);
  for (const std::string& name : tensors)
    if (!produced.count(name))
      return UserError("tensor '" + name + "': not " +
                       (model.graph.initializers.count(name) ? "an activation (it is an initializer)"
                                                             : "a graph input or node output of the model") +
                       "; cannot calibrate it");

  runtime::SessionOptions so;
  so.threads = threads;
  so.optimize = false;       // keep every tensor as the float model computes it
  so.keep_values = tensors;  // and none folded away
  auto session = runtime::Session::Create(model, so);
  if (!session.ok()) return std::move(session).WithContext("calibration").error();

  CalibrationStats stats(tensors, options);
  Status observed;
  runtime::RunHooks hooks;
  hooks.observe = [&](const std::string& name, const Tensor& value) {
    if (observed.ok() && tensors.count(name)) observed = stats.Observe(name, value);
  };
  size_t batch = 0;
  while (true) {
    runtime::TensorMap feeds;
    auto more = next_batch(feeds);
    const std::string where = "calibration batch " + std::to_string(batch + 1);
    if (!more.ok()) return std::move(more).WithContext(where).error();
    if (!*more) break;
    auto out = (*session)->Run(feeds, &hooks);
    if (!out.ok()) return std::move(out).WithContext(where).error();
    if (!observed.ok()) return std::move(observed).WithContext("calibration").error();  // names the batch
    ++batch;
    if (progress) progress(batch);
  }
  if (batch == 0) return UserError("calibration: the calibration data has no batches");
  return stats;
}

}  // namespace seqto::quant
