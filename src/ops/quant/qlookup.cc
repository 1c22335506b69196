// com.seqto.QLookup: Y[i] = table[X[i]] for an 8-bit X: a whole
//   DQ(x) -> elementwise float op(s) -> Q(y)
// chain as one table lookup. The QDQ fusion pass builds the table by running the
// unfused chain's float32 arithmetic on each of the 256 possible inputs, so the
// result is the unfused graph's bit for bit.
// Attributes: 'table' (256 ints; entry k is for X = k (uint8) or k - 128 (int8)),
// 'x_type' and 'y_type' (ONNX element type numbers: 2 uint8, 3 int8).
#include <type_traits>

#include "ops/quant/fused_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

template <typename X, typename Y>
void Lookup(const X* x, Y* y, int64_t n, const Y* table) {
  ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = table[static_cast<uint8_t>(x[i]) ^ (std::is_signed_v<X> ? 0x80 : 0)];
  });
}

Expected<std::unique_ptr<Kernel>> MakeQLookup(const KernelInit& init) {
  SEQTO_ASSIGN_OR_RETURN(std::vector<int64_t> table, init.node.attr_ints("table"));
  SEQTO_ASSIGN_OR_RETURN(int64_t x_type, init.node.attr_int("x_type", 0));
  SEQTO_ASSIGN_OR_RETURN(int64_t y_type, init.node.attr_int("y_type", 0));
  const DType xt = static_cast<DType>(x_type), yt = static_cast<DType>(y_type);
  if (!quant::Is8Bit(xt))
    return UserError("attribute 'x_type' is " + std::to_string(x_type) + ", expected 2 (uint8) or 3 (int8)");
  if (!quant::Is8Bit(yt))
    return UserError("attribute 'y_type' is " + std::to_string(y_type) + ", expected 2 (uint8) or 3 (int8)");
  if (table.size() != 256)
    return UserError("attribute 'table' has " + std::to_string(table.size()) + " entries, expected 256");
  const quant::IntRange range = quant::RangeOf(yt);
  // Stored as Y's element type, indexed by X's bits with int8's sign bit flipped.
  std::vector<uint8_t> bytes(256);
  for (size_t k = 0; k < 256; ++k) {
    if (table[k] < range.lo || table[k] > range.hi)
      return UserError("attribute 'table' entry " + std::to_string(k) + " is " + std::to_string(table[k]) +
                       ", outside the range of " + DTypeName(yt));
    bytes[k] = static_cast<uint8_t>(table[k]);
  }
  return MakeKernel([xt, yt, bytes](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != xt) return DTypeError(0, x.dtype(), DTypeName(xt));
    Tensor& y = ctx.Allocate(0, yt, x.shape());
    const int64_t n = x.numel();
    if (xt == DType::kUInt8 && yt == DType::kUInt8)
      Lookup(x.data<uint8_t>(), y.data<uint8_t>(), n, bytes.data());
    else if (xt == DType::kUInt8)
      Lookup(x.data<uint8_t>(), y.data<int8_t>(), n, reinterpret_cast<const int8_t*>(bytes.data()));
    else if (yt == DType::kUInt8)
      Lookup(x.data<int8_t>(), y.data<uint8_t>(), n, bytes.data());
    else
      Lookup(x.data<int8_t>(), y.data<int8_t>(), n, reinterpret_cast<const int8_t*>(bytes.data()));
    return Status::Ok();
  });
}

}  // namespace

void RegisterQLookup(OpRegistry& r) { r.Register({"QLookup", "com.seqto", 1, MakeQLookup}); }

}  // namespace seqto::ops
