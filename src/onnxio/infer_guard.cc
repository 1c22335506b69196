#include "onnxio/infer_guard.h"

#include <onnx/defs/shape_inference.h>

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
  const int64_t pads = IntsLength(n, "pads");
  if (pads >= 0 && pads != 2 * spatial)
    return "attribute 'pads' has " + std::to_string(pads) + " values, expected " + std::to_string(2 * spatial) +
           " (begin and end of each of " + std::to_string(spatial) + " spatial axes)";
  return "";
}

}  // namespace

std::string CheckNodeForInference(const NodeView& n) {
  if (!n.domain.empty() && n.domain != "ai.onnx") return "";
  const std::string& op = n.op_type;
  if (op == "Conv" || op == "ConvInteger" || op == "ConvTranspose" || op == "DeformConv") return CheckConvPool(n, 0, 1);
  if (op == "QLinearConv") return CheckConvPool(n, 0, 3);
  if (op == "MaxPool" || op == "AveragePool" || op == "LpPool" || op == "MaxUnpool") return CheckConvPool(n, 0, -1);
  return "";
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
    guarded->TypeAndShapeInferenceFunction([this, original, op, op_domain](onnx::InferenceContext& ctx) {
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
      const std::string problem = CheckNodeForInference(view);
      if (!problem.empty()) {
        {
          std::lock_guard<std::mutex> problems_lock(mutex_);
          problems_.push_back(op + ": " + problem);
        }
        fail_shape_inference(problem);
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
