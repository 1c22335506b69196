#include "runners/engine_runner.h"

#include <chrono>
#include <filesystem>

#include "onnxio/model_io.h"

namespace seqto::runners {

namespace fs = std::filesystem;

EngineRunner::~EngineRunner() = default;

Expected<runtime::Session*> EngineRunner::SessionFor(const std::string& model_path) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(model_path, ec);
  if (ec) return UserError(model_path + ": cannot read file (" + ec.message() + ")");
  const auto mtime = fs::last_write_time(model_path, ec);
  if (ec) return UserError(model_path + ": cannot read file (" + ec.message() + ")");
  const int64_t mtime_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(mtime.time_since_epoch()).count();
  if (cached_ && cached_path_ == model_path && cached_size_ == size && cached_mtime_ == mtime_ns) return cached_.get();

  cached_.reset();  // free the old model before loading the next one
  auto model = onnxio::LoadModel(model_path);
  if (!model) return model.error();
  runtime::SessionOptions session_options;
  session_options.threads = options_.threads;
  auto session = runtime::Session::Create(*model, session_options);
  if (!session) return std::move(session).WithContext(model_path).error();
  cached_ = std::move(*session);
  cached_path_ = model_path;
  cached_size_ = size;
  cached_mtime_ = mtime_ns;
  return cached_.get();
}

Expected<runtime::TensorMap> EngineRunner::Run(const std::string& model_path,
                                               const std::vector<runtime::TensorMap>& batches) {
  if (Status s = CheckBatches(batches); !s.ok())
    return std::move(s).WithContext("engine runner: " + model_path).error();
  std::lock_guard<std::mutex> lock(mutex_);
  auto session = SessionFor(model_path);
  if (!session) return std::move(session).WithContext("engine runner").error();
  std::vector<runtime::TensorMap> per_batch;
  per_batch.reserve(batches.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    auto out = (*session)->Run(batches[i]);
    if (!out)
      return std::move(out)
          .WithContext("engine runner: " + model_path + ": batch " + std::to_string(i) + " of " +
                       std::to_string(batches.size()))
          .error();
    per_batch.push_back(std::move(*out));
  }
  auto joined = ConcatOutputs(per_batch);
  if (!joined) return std::move(joined).WithContext("engine runner: " + model_path).error();
  return joined;
}

Expected<LatencyStats> EngineRunner::Latency(const std::string& model_path, const runtime::TensorMap& batch,
                                             const LatencyOptions& options) {
  if (options.runs < 1 || options.warmup < 0)
    return UserError("engine runner: latency needs runs >= 1 and warmup >= 0 (got runs " +
                     std::to_string(options.runs) + ", warmup " + std::to_string(options.warmup) + ")");
  std::lock_guard<std::mutex> lock(mutex_);
  auto session = SessionFor(model_path);
  if (!session) return std::move(session).WithContext("engine runner").error();
  std::vector<double> times;
  times.reserve(static_cast<size_t>(options.runs));
  for (int i = 0; i < options.warmup + options.runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = (*session)->Run(batch);
    const auto t1 = std::chrono::steady_clock::now();
    if (!out) return std::move(out).WithContext("engine runner: " + model_path).error();
    if (i >= options.warmup) times.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return Summarize(std::move(times));
}

}  // namespace seqto::runners
