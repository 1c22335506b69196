// The contract between the runtime and an op implementation.
//
// An op is registered once (OpDef) with a factory. When a session is created, the
// factory builds one Kernel per node: it reads and validates the node's attributes
// there, so a bad attribute is reported before anything runs, and it may pre-pack
// constant inputs (weights). At run time Kernel::Run reads inputs and allocates
// outputs through the KernelContext, which takes output memory from the session's
// buffer pool.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "ir/graph.h"

namespace seqto::ops {

class KernelContext {
 public:
  virtual ~KernelContext() = default;
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  // True when input i exists in the node and was given a value.
  bool has_input(int i) const { return i < num_inputs() && inputs_[i] != nullptr; }
  const Tensor& input(int i) const { return *inputs_[i]; }
  int num_outputs() const { return static_cast<int>(outputs_.size()); }
  // False for an omitted optional output ("" in the node).
  bool wants_output(int i) const { return i < num_outputs() && output_wanted_[i]; }
  // A new output tensor (contents undefined) whose memory may be recycled.
  virtual Tensor& Allocate(int i, DType dtype, Shape shape) = 0;
  // An output that shares an input's storage (Reshape, Identity, ...).
  void SetOutput(int i, Tensor t) { outputs_[i] = std::move(t); }
  Tensor& output(int i) { return outputs_[i]; }
  // False when the run is known to start from finite values only (the inputs, the
  // constants, any overridden value): then no value holds NaN or infinity short of a
  // float overflow, and a kernel may skip work that only keeps NaN as ONNX says (e.g.
  // scanning its input before a fused activation that would turn NaN into a number).
  bool may_be_non_finite() const { return may_be_non_finite_; }

 protected:
  bool may_be_non_finite_ = true;  // unknown: assume the worst
  std::vector<const Tensor*> inputs_;
  std::vector<Tensor> outputs_;
  std::vector<bool> output_wanted_;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual Status Run(KernelContext& ctx) = 0;
};

struct KernelInit {
  const ir::Node& node;
  int64_t opset;  // the model's ai.onnx opset (or the node's domain's)
  // For each node input: the constant value if it is an initializer or folded
  // constant, else nullptr. Kernels may pre-pack these but must not assume any
  // input is constant unless this says so.
  std::vector<const Tensor*> constant_inputs;
  // Use the simple reference kernels only (tests compare fast paths with them).
  bool reference_only = false;

  const Tensor* constant(int i) const {
    return i < static_cast<int>(constant_inputs.size()) ? constant_inputs[i] : nullptr;
  }
};

using KernelFactory = std::function<Expected<std::unique_ptr<Kernel>>(const KernelInit&)>;

struct OpDef {
  std::string op_type;
  std::string domain;     // "" is ai.onnx
  int since_version = 1;  // oldest opset this implementation handles
  KernelFactory create;
};

// Wraps a lambda `Status(KernelContext&)` as a kernel: for ops whose attributes are
// parsed in the factory and captured by the lambda.
template <typename F>
std::unique_ptr<Kernel> MakeKernel(F fn) {
  struct LambdaKernel final : Kernel {
    explicit LambdaKernel(F f) : fn(std::move(f)) {}
    Status Run(KernelContext& ctx) override { return fn(ctx); }
    F fn;
  };
  return std::make_unique<LambdaKernel>(std::move(fn));
}

}  // namespace seqto::ops
