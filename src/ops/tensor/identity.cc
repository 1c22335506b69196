// Identity and Dropout. At inference (the default) Dropout is an identity and its
// optional mask is all true; both outputs of an identity share the input's storage.
// Dropout in training mode (opset 12+, training_mode input true) drops elements
// with a Mersenne twister seeded by the `seed` attribute (0 if absent), drawing
// uniforms the way numpy's legacy RandomState does, so results are reproducible.
#include <random>

#include "ops/registry.h"
#include "ops/tensor/tensor_common.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

// numpy's random_sample(): 53 random bits from two 32-bit draws.
double NumpyUniform(std::mt19937& rng) {
  const uint32_t a = rng() >> 5, b = rng() >> 6;
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

template <typename T>
void DropoutKernel(const T* x, T* y, bool* mask, int64_t n, double ratio, uint32_t seed) {
  std::mt19937 rng(seed);
  const double scale = 1.0 / (1.0 - ratio);
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = NumpyUniform(rng) >= ratio;
    if (mask) mask[i] = keep;
    if constexpr (std::is_same_v<T, uint16_t>) {  // float16
      y[i] = keep ? FloatToHalf(static_cast<float>(HalfToFloat(x[i]) * scale)) : FloatToHalf(0.f);
    } else {
      y[i] = keep ? static_cast<T>(x[i] * scale) : T(0);
    }
  }
}

Expected<std::unique_ptr<Kernel>> CreateDropout(const KernelInit& init) {
  const ir::Node& node = init.node;
  SEQTO_ASSIGN_OR_RETURN(const float attr_ratio, node.attr_float("ratio", 0.5f));
  SEQTO_ASSIGN_OR_RETURN(const int64_t seed, node.attr_int("seed", 0));
  if (init.opset < 12 && (attr_ratio < 0 || attr_ratio >= 1))
    return UserError("attribute 'ratio' must be in [0, 1), got " + std::to_string(attr_ratio));
  const bool bool_mask = init.opset >= 10;
  const bool has_inputs = init.opset >= 12;
  return MakeKernel([=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    bool training = false;
    double ratio = attr_ratio;
    if (has_inputs && ctx.has_input(1)) {
      SEQTO_ASSIGN_OR_RETURN(ratio, tensorops::ReadScalar(ctx.input(1), 1, "ratio"));
      if (ratio < 0 || ratio >= 1) return InputError(1, "ratio must be in [0, 1), got " + std::to_string(ratio));
    }
    if (has_inputs && ctx.has_input(2)) {
      SEQTO_ASSIGN_OR_RETURN(const double t, tensorops::ReadScalar(ctx.input(2), 2, "training_mode"));
      training = t != 0;
    }
    if (!training || ratio == 0) {
      ctx.SetOutput(0, x);
      if (ctx.wants_output(1)) {
        const DType mask_type = bool_mask ? DType::kBool : x.dtype();
        SEQTO_ASSIGN_OR_RETURN(const size_t es, tensorops::ElementSize(0, mask_type));
        std::byte one[8];
        SEQTO_RETURN_IF_ERROR(tensorops::ValueToBytes(1.0, mask_type, one));
        Tensor& mask = ctx.Allocate(1, mask_type, x.shape());
        tensorops::FillElements(mask.raw(), mask.numel(), one, es);
      }
      return Status::Ok();
    }
    Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
    bool* mask = ctx.wants_output(1) ? ctx.Allocate(1, DType::kBool, x.shape()).data<bool>() : nullptr;
    const auto s = static_cast<uint32_t>(seed);
    switch (x.dtype()) {
      case DType::kFloat32:
        DropoutKernel(x.data<float>(), y.data<float>(), mask, x.numel(), ratio, s);
        break;
      case DType::kFloat64:
        DropoutKernel(x.data<double>(), y.data<double>(), mask, x.numel(), ratio, s);
        break;
      case DType::kFloat16:
        DropoutKernel(x.data<uint16_t>(), y.data<uint16_t>(), mask, x.numel(), ratio, s);
        break;
      default:
        return DTypeError(0, x.dtype(), "float32, float64, float16 (in training mode)");
    }
    return Status::Ok();
  });
}

}  // namespace

void RegisterIdentity(OpRegistry& r) {
  r.Register({"Identity", "", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  ctx.SetOutput(0, ctx.input(0));
                  return Status::Ok();
                });
              }});
  r.Register({"Dropout", "", 1, CreateDropout});
}

}  // namespace seqto::ops
