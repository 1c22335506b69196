#include "onnxio/infer_guard.h"

#include <onnx/defs/shape_inference.h>

#include <algorithm>

namespace seqto::onnxio {

namespace {

int64_t IntsLength(const NodeView& n, const char* name) {
  const onnx::AttributeProto* a = n.attribute(name);
  return a ? a->ints_size() : -1;
}

// Conv and pooling ops (ONNX's convPoolShapeInference and relatives): the input and
// the weights must have the same rank, and every per-axis attribute must have one
// entry per spatial axis (pads: two).
std::string CheckConvPool(const NodeView& n, size_t x, int w) {
  int64_t rank = n.input_rank(x);
  if (w >= 0) {
    const int64_t w_rank = n.input_rank(static_cast<size_t>(w));
    if (rank >= 0 && w_rank >= 0 && rank != w_rank)
      return "input " + std::to_string(x) + " has rank " + std::to_string(rank) + " but the weights (input " +
             std::to_string(w) + ") have rank " + std::to_string(w_rank);
    if (rank < 0) rank = w_rank;
  }
  int64_t spatial = rank >= 2 ? rank - 2 : -1;
  const char* from = "the input's rank";
  if (spatial < 0) {  // rank unknown: the attributes must at least agree with each other
    spatial = IntsLength(n, "kernel_shape");
    from = "kernel_shape";
  }
  if (spatial < 0) return "";
  for (const char* attr : {"kernel_shape", "strides", "dilations", "output_padding"}) {
    const int64_t len = IntsLength(n, attr);
    if (len >= 0 && len != spatial)
      return "attribute '" + std::string(attr) + "' has " + std::to_string(len) + " values, but " + from + " implies " +
             std::to_string(spatial) + " spatial axes";
  }
  // Zero strides divide by zero in ONNX's output-size arithmetic (found by fuzzing).
  for (const char* attr : {"kernel_shape", "strides", "dilations"}) {
    const onnx::AttributeProto* a = n.attribute(attr);
    if (!a) continue;
    for (int i = 0; i < a->ints_size(); ++i)
      if (a->ints(i) <= 0)
        return "attribute '" + std::string(attr) + "' has " + std::to_string(a->ints(i)) + " at axis " +
               std::to_string(i) + ", expected a positive value";
  }
  const int64_t pads = IntsLength(n, "pads");
  if (pads >= 0 && pads != 2 * spatial)
    return "attribute 'pads' has " + std::to_string(pads) + " values, expected " + std::to_string(2 * spatial) +
           " (begin and end of each of " + std::to_string(spatial) + " spatial axes)";
  return "";
}

InferenceCheck Refuse(std::string problem) {
  InferenceCheck c;
  if (!problem.empty()) c.kind = InferenceCheck::Kind::kRefuse, c.problem = std::move(problem);
  return c;
}

InferenceCheck Skip() {
  InferenceCheck c;
  c.kind = InferenceCheck::Kind::kSkip;
  return c;
}

// MaxUnpool: ONNX dereferences the indices' shape unchecked (found by fuzzing).
InferenceCheck CheckMaxUnpool(const NodeView& n) {
  const int64_t x_rank = n.input_rank(0), i_rank = n.input_rank(1);
  if (x_rank >= 0 && i_rank >= 0 && x_rank != i_rank)
    return Refuse("the indices (input 1) have rank " + std::to_string(i_rank) + ", but input 0 has rank " +
                  std::to_string(x_rank));
  if (i_rank < 2) return i_rank < 0 ? Skip() : Refuse("the indices (input 1) have rank " + std::to_string(i_rank));
  return Refuse(CheckConvPool(n, 0, -1));
}

// Inputs whose rank ONNX's inference functions assume (older versions index their
// dimensions unchecked: Gemm-6 with a rank-1 B was found by fuzzing).
InferenceCheck CheckRanks(const NodeView& n, std::initializer_list<std::pair<size_t, int64_t>> ranks) {
  for (const auto& [input, rank] : ranks) {
    const int64_t r = n.input_rank(input);
    if (r >= 0 && r != rank)
      return Refuse("input " + std::to_string(input) + " has rank " + std::to_string(r) + ", expected " +
                    std::to_string(rank));
  }
  return {};
}

}  // namespace

InferenceCheck CheckNodeForInference(const NodeView& n) {
  if (!n.domain.empty() && n.domain != "ai.onnx") return {};
  const std::string& op = n.op_type;
  if (op == "Gemm") return CheckRanks(n, {{0, 2}, {1, 2}});
  if (op == "RoiAlign") return CheckRanks(n, {{0, 4}, {1, 2}, {2, 1}});
  if (op == "MaxRoiPool") return CheckRanks(n, {{0, 4}, {1, 2}});
  if (op == "Conv" || op == "ConvInteger" || op == "ConvTranspose" || op == "DeformConv")
    return Refuse(CheckConvPool(n, 0, 1));
  if (op == "QLinearConv") return Refuse(CheckConvPool(n, 0, 3));
  if (op == "MaxPool" || op == "AveragePool" || op == "LpPool") return Refuse(CheckConvPool(n, 0, -1));
  if (op == "MaxUnpool") return CheckMaxUnpool(n);
  return {};
}

const onnx::OpSchema* GuardedSchemaRegistry::GetSchema(const std::string& key, int max_inclusive_version,
                                                       const std::string& domain) const {
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(key, max_inclusive_version, domain);
  // Ops without an inference function are expanded as functions by ONNX: leave them.
  if (!schema || !schema->has_type_and_shape_inference_function()) return schema;
  std::lock_guard<std::mutex> lock(mutex_);
  auto& guarded = guarded_[schema];
  if (!guarded) {
    guarded = std::make_unique<onnx::OpSchema>(*schema);
    const onnx::InferenceFunction original = schema->GetTypeAndShapeInferenceFunction();
    const std::string op = schema->Name(), op_domain = schema->domain();
    // Whether each formal input may be absent (then its type may be missing too).
    std::vector<bool> optional;
    for (const auto& formal : schema->inputs())
      optional.push_back(formal.GetOption() == onnx::OpSchema::FormalParameterOption::Optional);
    guarded->TypeAndShapeInferenceFunction([this, original, op, op_domain, optional](onnx::InferenceContext& ctx) {
      // A required input whose type is unknown (a graph input without type, the output
      // of a node ONNX cannot infer): some ONNX functions dereference it unchecked
      // (EyeLike found by fuzzing). Leave this node's outputs unknown.
      for (size_t i = 0; i < ctx.getNumInputs() && !optional.empty(); ++i) {
        const onnx::TypeProto* t = ctx.getInputType(i);
        if ((!t || t->value_case() == onnx::TypeProto::VALUE_NOT_SET) && !optional[std::min(i, optional.size() - 1)])
          return;
      }
      NodeView view;
      view.op_type = op;
      view.domain = op_domain;
      view.num_inputs = ctx.getNumInputs();
      view.attribute = [&ctx](const std::string& name) { return ctx.getAttribute(name); };
      view.input_rank = [&ctx](size_t i) -> int64_t {
        if (i >= ctx.getNumInputs()) return -1;
        const onnx::TypeProto* t = ctx.getInputType(i);
        if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return -1;
        return t->tensor_type().shape().dim_size();
      };
      const InferenceCheck check = CheckNodeForInference(view);
      if (check.kind == InferenceCheck::Kind::kSkip) return;  // outputs stay unknown
      if (check.kind == InferenceCheck::Kind::kRefuse) {
        {
          std::lock_guard<std::mutex> problems_lock(mutex_);
          problems_.push_back(op + ": " + check.problem);
        }
        fail_shape_inference(check.problem);
      }
      original(ctx);
    });
  }
  return guarded.get();
}

std::vector<std::string> GuardedSchemaRegistry::problems() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return problems_;
}

}  // namespace seqto::onnxio
