// Runs a model: the planner (value ids, lifetimes, constant folding) and the
// executor (kernels in order, recycled buffers, hooks on every value).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"
#include "ops/op.h"

namespace seqto::runtime {

struct SessionOptions {
  int threads = 0;              // 0: all cores
  bool reference_only = false;  // only the simple reference kernels
  bool fold_constants = true;   // run nodes whose inputs are all constant once, at creation
  // Graph optimizations for inference (BatchNormalization folding, fusion). They may
  // remove intermediate values; list the ones hooks must see in keep_values.
  bool optimize = true;
  std::set<std::string> keep_values;
};

// Hooks called while a model runs; both are optional.
struct RunHooks {
  // Sees every value right after it is produced (after any override). The tensor is
  // only valid during the call: copy it (or keep a Tensor copy) to retain it.
  std::function<void(const std::string& name, const Tensor& value)> observe;
  // May replace a value: return a tensor to use instead, or nullopt to keep it.
  // Called for graph inputs and node outputs (this is how fake quantization works).
  std::function<std::optional<Tensor>(const std::string& name, const Tensor& value)> override_value;
};

using TensorMap = std::map<std::string, Tensor>;

class Session {
 public:
  static Expected<std::unique_ptr<Session>> Create(const ir::Model& model, const SessionOptions& options = {});
  ~Session();

  // Runs the model. Inputs by graph-input name; returns the graph outputs.
  // The first dimension of every input is free (any batch size).
  // One Run at a time per Session (calls are serialized).
  Expected<TensorMap> Run(const TensorMap& inputs, const RunHooks* hooks = nullptr);

  const std::vector<ir::ValueInfo>& inputs() const { return inputs_; }
  const std::vector<ir::ValueInfo>& outputs() const { return outputs_; }
  const SessionOptions& options() const { return options_; }

 private:
  Session() = default;
  struct Step;
  class Context;
  class BufferPool;

  Status Plan(const ir::Model& model);
  Status CheckInput(const ir::ValueInfo& info, const Tensor& t) const;

  SessionOptions options_;
  std::vector<ir::Node> nodes_;  // the graph's nodes; steps point into this
  std::vector<ir::ValueInfo> inputs_, outputs_;
  std::vector<std::string> value_names_;     // value id -> name
  std::map<std::string, int> value_ids_;
  std::vector<Tensor> constants_;            // by value id (undefined if not constant)
  std::vector<int> input_ids_, output_ids_;
  std::vector<Step> steps_;
  std::unique_ptr<BufferPool> pool_;
  std::mutex run_mutex_;
};

}  // namespace seqto::runtime
