// Helpers for seqto's internal int8 ops that the QDQ fusion pass (rewrite/fuse_qdq.cc)
// creates: com.seqto.QLinearConv, com.seqto.QGemm, com.seqto.QLinearAdd and
// com.seqto.QLookup. They only ever live inside a Session, never in a saved model.
//
// An activation fused into a quantized op becomes a clamp of its integer output:
// Q is monotone, so Q(relu(v)) = max(Q(v), Q(0)) = max(Q(v), y_zp) and
// Q(clip(v, lo, hi)) = min(max(Q(v), Q(lo)), Q(hi)) exactly. The pass computes those
// bounds and stores them as the int attributes 'y_min' and 'y_max' (either optional).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "ops/op.h"
#include "ops/quant/quant_util.h"

namespace seqto::ops::quant {

// The output clamp of a fused op: [lo, hi] within the output type's range.
struct OutputClamp {
  int32_t lo = std::numeric_limits<int32_t>::min();
  int32_t hi = std::numeric_limits<int32_t>::max();

  static Expected<OutputClamp> Parse(const ir::Node& node) {
    OutputClamp c;
    SEQTO_ASSIGN_OR_RETURN(int64_t lo, node.attr_int("y_min", c.lo));
    SEQTO_ASSIGN_OR_RETURN(int64_t hi, node.attr_int("y_max", c.hi));
    c.lo = static_cast<int32_t>(std::clamp<int64_t>(lo, c.lo, c.hi));
    c.hi = static_cast<int32_t>(std::clamp<int64_t>(hi, c.lo, c.hi));
    return c;
  }
  // The range of `type` narrowed by the clamp. When y_min > y_max (a Clip whose
  // min exceeds its max) every value becomes y_max, as min(max(q, lo), hi) gives
  // and as QuantizeClamped does with lo > hi.
  IntRange Narrow(DType type) const {
    const IntRange r = RangeOf(type);
    return {std::max(r.lo, lo), std::min(r.hi, hi)};
  }
  // True when the clamp changes nothing for outputs of `type`.
  bool NoOpFor(DType type) const {
    const IntRange r = RangeOf(type);
    return lo <= r.lo && hi >= r.hi;
  }
};

// Clamps an 8-bit tensor in place to [lo, hi] (hi wins when lo > hi).
void ClampInPlace(Tensor& y, int32_t lo, int32_t hi);

// Runs another op's kernel from inside a kernel, on inputs of the caller's choice,
// with its outputs in memory this object owns and reuses from run to run (the
// fused kernels call MatMulInteger or QLinearConv this way).
class InnerContext final : public KernelContext {
 public:
  explicit InnerContext(int num_outputs) {
    outputs_.resize(num_outputs);
    output_wanted_.assign(num_outputs, true);
    storages_.resize(num_outputs);
  }
  void SetInputs(std::vector<const Tensor*> inputs) { inputs_ = std::move(inputs); }
  Tensor& Allocate(int i, DType dtype, Shape shape) override;

 private:
  std::vector<std::shared_ptr<Storage>> storages_;
};

// Builds the kernel of the built-in op (domain "", `op_type`, `opset`) for `node`
// (which the returned kernel may refer to: keep it alive), with the given constant
// inputs.
Expected<std::unique_ptr<Kernel>> MakeInnerKernel(const ir::Node& node, int64_t opset,
                                                  std::vector<const Tensor*> constant_inputs, bool reference_only);

}  // namespace seqto::ops::quant
