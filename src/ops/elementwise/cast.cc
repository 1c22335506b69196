// Cast (attribute `to`; a type name string before opset 6) and CastLike (the type
// of input 1), between every numeric type, bool, float16 and bfloat16. Strings are
// not supported. Conversion rules are ConvertElement's (elementwise.h): floats to
// integers truncate, NaN gives 0; double to 16-bit floats rounds once.
#include <cctype>
#include <map>

#include "ops/elementwise/elementwise.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace ew {

namespace {

template <typename From, typename To>
void ConvertLoop(const From* x, To* y, int64_t n) {
  constexpr int64_t cost = (kIsHalf<From> || kIsHalf<To>) ? 4 : kCheap;
  MapUnary(x, y, n, cost, [](From v) { return ConvertElement<To>(v); });
}

// Converts in into out (same element count, types of their own).
Status ConvertInto(const Tensor& in, Tensor& out) {
  if (in.dtype() == DType::kString || out.dtype() == DType::kString)
    return UserError("casting to or from string is not supported");
  bool visited = false;
  VisitType(in.dtype(), [&](auto from_tag) {
    using From = decltype(from_tag);
    visited = VisitType(out.dtype(), [&](auto to_tag) {
      using To = decltype(to_tag);
      ConvertLoop(in.data<From>(), out.data<To>(), in.numel());
    });
  });
  if (!visited) return UserError("cannot cast " + DTypeName(in.dtype()) + " to " + DTypeName(out.dtype()));
  return Status::Ok();
}

}  // namespace

Expected<Tensor> CastTensor(const Tensor& in, DType to) {
  if (in.dtype() == to) return in;
  Tensor out(to, in.shape());
  SEQTO_RETURN_IF_ERROR(ConvertInto(in, out));
  return out;
}

}  // namespace ew

namespace {

using namespace ew;  // NOLINT

Expected<DType> ParseTo(const ir::Node& node) {
  auto it = node.attributes.find("to");
  if (it == node.attributes.end()) return UserError("attribute 'to' is missing");
  const ir::Attribute& attr = it->second;
  int64_t code = -1;
  if (attr.type == ir::Attribute::Type::kInt) {
    code = attr.i;
  } else if (attr.type == ir::Attribute::Type::kString) {  // Cast-1: a type name
    static const std::map<std::string, int64_t> kNames = {
        {"FLOAT", 1},  {"UINT8", 2}, {"INT8", 3},     {"UINT16", 4},  {"INT16", 5},   {"INT32", 6},   {"INT64", 7},
        {"STRING", 8}, {"BOOL", 9},  {"FLOAT16", 10}, {"DOUBLE", 11}, {"UINT32", 12}, {"UINT64", 13}, {"BFLOAT16", 16}};
    std::string name = attr.s;
    for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    auto n = kNames.find(name);
    if (n == kNames.end()) return UserError("attribute 'to' is '" + attr.s + "', not a known type name");
    code = n->second;
  } else {
    return UserError("attribute 'to' must be an int (a TensorProto data type)");
  }
  if (code == static_cast<int64_t>(DType::kString))
    return UserError("attribute 'to' is string: casting to strings is not supported");
  if (code < 0 || code > 64 || !VisitType(static_cast<DType>(code), [](auto) {}))
    return UserError("attribute 'to' is " + std::to_string(code) + ", not a supported data type");
  return static_cast<DType>(code);
}

Status RunCast(KernelContext& ctx, DType to) {
  const Tensor& x = ctx.input(0);
  if (!VisitType(x.dtype(), [](auto) {}))
    return InputError(0, "has type " + DTypeName(x.dtype()) + ", which Cast does not support");
  if (x.dtype() == to) {
    ctx.SetOutput(0, x);
    return Status::Ok();
  }
  Tensor& y = ctx.Allocate(0, to, x.shape());
  return ConvertInto(x, y);
}

}  // namespace

void RegisterCast(OpRegistry& r) {
  r.Register({"Cast", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                SEQTO_ASSIGN_OR_RETURN(const DType to, ParseTo(init.node));
                return MakeKernel([to](KernelContext& ctx) { return RunCast(ctx, to); });
              }});
  r.Register({"CastLike", "", 15, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  if (!ctx.has_input(1)) return InputError(1, "missing (CastLike needs the target_type input)");
                  const DType to = ctx.input(1).dtype();
                  if (to == DType::kString)
                    return InputError(1, "has type string: casting to strings is not supported");
                  return RunCast(ctx, to);
                });
              }});
}

}  // namespace seqto::ops
