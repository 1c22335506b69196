// Where: out = condition ? x : y with numpy broadcasting of all three inputs. Only
// copies elements, so it runs on the element size (1, 2, 4 or 8 bytes) whatever the
// type.
#include "ops/elementwise/elementwise.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

using namespace ew;  // NOLINT

template <typename U>  // an unsigned integer of the element size
void WhereLoop(const BroadcastLoop<3>& loop, const bool* pc, const U* px, const U* py, U* po) {
  loop.Run(kCheap, [&](int64_t o, const std::array<int64_t, 3>& off, const std::array<int64_t, 3>& step, int64_t n) {
    const bool* c = pc + off[0];
    const U* a = px + off[1];
    const U* b = py + off[2];
    U* z = po + o;
    if (step[0] == 1 && step[1] == 1 && step[2] == 1) {
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {  // a bit-mask blend, which vectorizes
        const U m = static_cast<U>(U{0} - static_cast<U>(c[i]));
        z[i] = static_cast<U>((a[i] & m) | (b[i] & static_cast<U>(~m)));
      }
    } else {
      const int64_t sc = step[0], sa = step[1], sb = step[2];
      for (int64_t i = 0; i < n; ++i) z[i] = c[i * sc] ? a[i * sa] : b[i * sb];
    }
  });
}

Status RunWhere(KernelContext& ctx) {
  for (int i = 0; i < 3; ++i)
    if (!ctx.has_input(i)) return InputError(i, "missing");
  const Tensor& c = ctx.input(0);
  const Tensor& x = ctx.input(1);
  const Tensor& y = ctx.input(2);
  if (c.dtype() != DType::kBool) return TypeError(0, c.dtype(), kBoolType);
  if (!VisitType(x.dtype(), [](auto) {})) return TypeError(1, x.dtype(), kAllTypes);
  if (y.dtype() != x.dtype())
    return InputError(2, "has type " + DTypeName(y.dtype()) + ", expected input 1's type " + DTypeName(x.dtype()));
  SEQTO_ASSIGN_OR_RETURN(const BroadcastLoop<3> loop, BroadcastLoop<3>::Make({&c.shape(), &x.shape(), &y.shape()}));
  Tensor& out = ctx.Allocate(0, x.dtype(), loop.out_shape);
  const bool* pc = c.data<bool>();
  switch (DTypeSize(x.dtype())) {
    case 1:
      WhereLoop(loop, pc, x.data<uint8_t>(), y.data<uint8_t>(), out.data<uint8_t>());
      break;
    case 2:
      WhereLoop(loop, pc, x.data<uint16_t>(), y.data<uint16_t>(), out.data<uint16_t>());
      break;
    case 4:
      WhereLoop(loop, pc, x.data<uint32_t>(), y.data<uint32_t>(), out.data<uint32_t>());
      break;
    case 8:
      WhereLoop(loop, pc, x.data<uint64_t>(), y.data<uint64_t>(), out.data<uint64_t>());
      break;
    default:
      return TypeError(1, x.dtype(), kAllTypes);
  }
  return Status::Ok();
}

}  // namespace

void RegisterWhere(OpRegistry& r) {
  r.Register({"Where", "", 9, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) { return RunWhere(ctx); });
              }});
}

}  // namespace seqto::ops
