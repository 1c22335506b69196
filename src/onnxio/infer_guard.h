// Guards for ONNX shape inference. The inference functions of the ONNX library this
// build uses (1.12) trust their input: a model whose ranks or attributes disagree
// (a Conv whose weight has another rank than its input, pads of the wrong length,
// ...) makes some of them read out of bounds. GuardedSchemaRegistry hands ONNX's
// inference driver copies of the op schemas whose inference functions first check
// the node (with the types inference has propagated so far) and refuse it instead.
// The checks come from fuzzing (tests/fuzz); each names what is inconsistent.
#pragma once

#include <onnx/defs/schema.h>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace seqto::onnxio {

// What the checks need to know about a node: its attributes and its inputs' ranks.
struct NodeView {
  std::string op_type;
  std::string domain;  // "" for ai.onnx
  size_t num_inputs = 0;
  std::function<const onnx::AttributeProto*(const std::string&)> attribute;
  std::function<int64_t(size_t)> input_rank;  // -1 when unknown or absent
};

// Whether ONNX's inference function can safely run on the node.
struct InferenceCheck {
  enum class Kind {
    kRun,     // safe
    kSkip,    // it would crash on missing information (e.g. an input of unknown rank): leave the outputs unknown
    kRefuse,  // the node is inconsistent: `problem` says how
  };
  Kind kind = Kind::kRun;
  std::string problem;
};
InferenceCheck CheckNodeForInference(const NodeView& node);

class GuardedSchemaRegistry final : public onnx::ISchemaRegistry {
 public:
  const onnx::OpSchema* GetSchema(const std::string& key, int max_inclusive_version,
                                  const std::string& domain) const override;
  // Problems the checks found (each "Op: what"), in the order found.
  std::vector<std::string> problems() const;

 private:
  mutable std::mutex mutex_;
  mutable std::map<const onnx::OpSchema*, std::unique_ptr<onnx::OpSchema>> guarded_;
  mutable std::vector<std::string> problems_;
};

}  // namespace seqto::onnxio
