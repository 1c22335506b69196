#include "support/test_models.h"

#include <utility>

namespace seqto::testing {

ir::Attribute Int(int64_t v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInt;
  a.i = v;
  return a;
}

ir::Attribute Ints(std::vector<int64_t> v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kInts;
  a.ints = std::move(v);
  return a;
}

ir::Attribute Float(float v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kFloat;
  a.f = v;
  return a;
}

ir::Attribute String(std::string v) {
  ir::Attribute a;
  a.type = ir::Attribute::Type::kString;
  a.s = std::move(v);
  return a;
}

ir::ValueInfo FloatValue(std::string name, std::vector<ir::Dim> dims) {
  return {std::move(name), DType::kFloat32, std::move(dims)};
}

ir::Node MakeNode(std::string name, std::string op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                  std::string domain) {
  ir::Node n;
  n.name = std::move(name);
  n.op_type = std::move(op);
  n.domain = std::move(domain);
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  return n;
}

Tensor RandomTensor(Shape shape, std::mt19937& rng, float lo, float hi) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

}  // namespace seqto::testing
