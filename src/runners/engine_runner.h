// The engine runner: seqto's own runtime::Session, in this process.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "runners/runner.h"
#include "runtime/session.h"

namespace seqto::runners {

class EngineRunner : public Runner {
 public:
  explicit EngineRunner(const RunnerOptions& options) : options_(options) {}
  ~EngineRunner() override;

  std::string name() const override { return "engine"; }
  Expected<runtime::TensorMap> Run(const std::string& model_path,
                                   const std::vector<runtime::TensorMap>& batches) override;
  Expected<LatencyStats> Latency(const std::string& model_path, const runtime::TensorMap& batch,
                                 const LatencyOptions& options) override;

 private:
  // The session for `model_path`. The last one is kept: the tuner runs a candidate
  // and then times it, and loading plus planning a model can cost more than running
  // it. It is reused only while the file's size and modification time are unchanged.
  Expected<runtime::Session*> SessionFor(const std::string& model_path);

  RunnerOptions options_;
  std::mutex mutex_;
  std::string cached_path_;
  uintmax_t cached_size_ = 0;
  int64_t cached_mtime_ = 0;
  std::unique_ptr<runtime::Session> cached_;
};

}  // namespace seqto::runners
