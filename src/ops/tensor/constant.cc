// Constant (a tensor from an attribute) and ConstantOfShape (a tensor of a given
// shape filled with one value).
#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

Expected<Tensor> ConstantValue(const ir::Node& node) {
  using T = ir::Attribute::Type;
  if (node.attributes.size() != 1)
    return UserError("expected exactly one of the attributes value, value_float(s), value_int(s), got " +
                     std::to_string(node.attributes.size()));
  const auto& [name, attr] = *node.attributes.begin();
  if (name == "value") {
    if (attr.type != T::kTensor || !attr.t.defined()) return UserError("attribute 'value' is not a tensor");
    return attr.t;
  }
  if (name == "value_float") {
    SEQTO_ASSIGN_OR_RETURN(const float v, node.attr_float(name, 0));
    return Tensor::Scalar<float>(v);
  }
  if (name == "value_int") {
    SEQTO_ASSIGN_OR_RETURN(const int64_t v, node.attr_int(name, 0));
    return Tensor::Scalar<int64_t>(v);
  }
  if (name == "value_floats") {
    SEQTO_ASSIGN_OR_RETURN(const std::vector<float> v, node.attr_floats(name));
    return Tensor::FromVector<float>({static_cast<int64_t>(v.size())}, v);
  }
  if (name == "value_ints") {
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> v, node.attr_ints(name));
    return Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
  }
  if (name == "sparse_value") return UserError("attribute 'sparse_value': sparse constants are not supported");
  if (name == "value_string" || name == "value_strings")
    return UserError("attribute '" + name + "': string tensors are not supported");
  return UserError("unknown attribute '" + name + "'");
}

Expected<std::unique_ptr<Kernel>> CreateConstant(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(const Tensor value, ConstantValue(init.node));
  return MakeKernel([value](KernelContext& ctx) -> Status {
    ctx.SetOutput(0, value);
    return Status::Ok();
  });
}

Expected<std::unique_ptr<Kernel>> CreateConstantOfShape(const KernelInit& init) {
  Tensor value = Tensor::Scalar<float>(0.f);
  if (init.node.has_attr("value")) {
    const ir::Attribute& attr = init.node.attributes.at("value");
    if (attr.type != ir::Attribute::Type::kTensor || !attr.t.defined())
      return UserError("attribute 'value' is not a tensor");
    if (attr.t.numel() != 1)
      return UserError("attribute 'value' must have one element, got shape " + ShapeToString(attr.t.shape()));
    value = attr.t;
  }
  SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, value.dtype()));
  return MakeKernel([value, es](KernelContext& ctx) -> Status {
    SEQTO_ASSIGN_OR_RETURN(const std::vector<int64_t> shape, tensorops::ReadIntList(ctx.input(0), 0, "shape"));
    for (int64_t d : shape)
      if (d < 0) return InputError(0, "shape " + tensorops::ListToString(shape) + " has a negative extent");
    Tensor& y = ctx.Allocate(0, value.dtype(), shape);
    tensorops::FillElements(y.raw(), y.numel(), value.raw(), es);
    return Status::Ok();
  });
}

}  // namespace

void RegisterConstant(OpRegistry& r) {
  r.Register({"Constant", "", 1, CreateConstant});
  r.Register({"ConstantOfShape", "", 1, CreateConstantOfShape});
}

}  // namespace seqto::ops
