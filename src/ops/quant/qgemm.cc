// com.seqto.QGemm: an int8 Gemm with int32 bias and requantized 8-bit output, what
// the QDQ fusion pass makes of
//   DQ(a), DQ(b const), [DQ(c) or float c] -> Gemm -> [Relu | Clip] -> Q(y).
// Inputs: A [M, K] (uint8/int8), a_scale (scalar), a_zero_point (scalar, optional),
// B [K, N] (uint8/int8; the pass transposes a transB weight once), b_scale and
// b_zero_point (scalar or [N]: per output column), y_scale (scalar), y_zero_point
// (scalar, optional; its type is Y's, else A's), bias (int32 [N], optional).
// Attributes y_min / y_max: the clamp of a fused activation (fused_util.h).
//   acc[i, j] = bias[j] + sum_k (A[i, k] - a_zp) * (B[k, j] - b_zp[j])    (exact int32)
//   Y[i, j]   = clamp(round(acc * (a_scale * b_scale[j] / y_scale)) + y_zp)
// with round half to even in float32, as QLinearMatMul and QLinearConv requantize.
// The accumulation is the built-in MatMulInteger kernel (oneDNN int8 with VNNI,
// else the reference), so QGemm is exactly as fast and as exact as that kernel.
#include "ops/quant/fused_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

enum Input { kA = 0, kAScale, kAZp, kB, kBScale, kBZp, kYScale, kYZp, kBias };

// One row: dst[j] = clamp(round(float(acc[j] + bias[j]) * mult[j]) + zp), the sum
// wrapping like int32 arithmetic; locals and branch-free forms so it vectorizes.
template <typename Y>
void Requantize(const int32_t* acc, const int32_t* bias, const float* mult, int64_t n, quant::ClampBounds bounds,
                int32_t zp, Y* dst) {
  const float lo = bounds.lo, hi = bounds.hi;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const int32_t v = static_cast<int32_t>(static_cast<uint32_t>(acc[j]) + static_cast<uint32_t>(bias[j]));
    dst[j] = static_cast<Y>(quant::QuantizeClamped(static_cast<float>(v) * mult[j], lo, hi, zp));
  }
}

class QGemmKernel final : public Kernel {
 public:
  Status Run(KernelContext& ctx) override {
    const Tensor& a = ctx.input(kA);
    const Tensor& b = ctx.input(kB);
    if (!quant::Is8Bit(a.dtype())) return DTypeError(kA, a.dtype(), "uint8, int8");
    if (!quant::Is8Bit(b.dtype())) return DTypeError(kB, b.dtype(), "uint8, int8");
    if (a.rank() != 2) return InputError(kA, "A has shape " + ShapeToString(a.shape()) + ", expected rank 2");
    if (b.rank() != 2) return InputError(kB, "B has shape " + ShapeToString(b.shape()) + ", expected rank 2");
    const int64_t m = a.dim(0), n = b.dim(1);
    if (ctx.has_input(kAZp) && ctx.input(kAZp).numel() != 1)
      return InputError(kAZp,
                        "a_zero_point has shape " + ShapeToString(ctx.input(kAZp).shape()) + ", expected a scalar");

    SEQTO_ASSIGN_OR_RETURN(float a_scale, quant::ScalarScale(ctx, kAScale, "a_scale"));
    SEQTO_ASSIGN_OR_RETURN(float y_scale, quant::ScalarScale(ctx, kYScale, "y_scale"));
    if (!ctx.has_input(kBScale)) return InputError(kBScale, "b_scale is missing");
    const Tensor& bs = ctx.input(kBScale);
    SEQTO_ASSIGN_OR_RETURN(std::vector<float> b_scale, quant::ReadScales(bs, kBScale, "b_scale"));
    if (b_scale.size() != 1 && (bs.rank() != 1 || bs.numel() != n))
      return InputError(kBScale, "b_scale has shape " + ShapeToString(bs.shape()) + ", expected a scalar or " +
                                     std::to_string(n) + " values (one per output column)");
    DType y_type = a.dtype();
    int32_t y_zp = 0;
    if (ctx.has_input(kYZp)) {
      const Tensor& t = ctx.input(kYZp);
      y_type = t.dtype();
      if (!quant::Is8Bit(y_type)) return DTypeError(kYZp, y_type, "uint8, int8");
      if (t.numel() != 1)
        return InputError(kYZp, "y_zero_point has shape " + ShapeToString(t.shape()) + ", expected a scalar");
      y_zp = quant::ReadInt32s(t)[0];
    }
    const int32_t* bias = nullptr;
    if (ctx.has_input(kBias)) {
      const Tensor& t = ctx.input(kBias);
      if (t.dtype() != DType::kInt32) return DTypeError(kBias, t.dtype(), "int32");
      if (t.rank() != 1 || t.dim(0) != n)
        return InputError(kBias,
                          "bias has shape " + ShapeToString(t.shape()) + ", expected [" + std::to_string(n) + "]");
      bias = t.data<int32_t>();
    }

    // acc = (A - a_zp) x (B - b_zp) by MatMulInteger (which checks K and b_zp).
    inner_.SetInputs(
        {&a, &b, ctx.has_input(kAZp) ? &ctx.input(kAZp) : nullptr, ctx.has_input(kBZp) ? &ctx.input(kBZp) : nullptr});
    SEQTO_RETURN_IF_ERROR(matmul_->Run(inner_));
    const Tensor& acc = inner_.output(0);
    Tensor& y = ctx.Allocate(0, y_type, {m, n});
    if (y.numel() == 0) return Status::Ok();

    std::vector<float> mult(static_cast<size_t>(n));
    std::vector<int32_t> bias_or_zero(static_cast<size_t>(n), 0);
    for (int64_t j = 0; j < n; ++j) {
      mult[j] = a_scale * b_scale[b_scale.size() == 1 ? 0 : j] / y_scale;
      if (bias) bias_or_zero[j] = bias[j];
    }
    const quant::ClampBounds bounds(clamp_.Narrow(y_type), y_zp);
    const int32_t* acc_p = acc.data<int32_t>();
    void* out = y.raw();
    ParallelFor(m, n * 2, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        if (y_type == DType::kUInt8)
          Requantize(acc_p + i * n, bias_or_zero.data(), mult.data(), n, bounds, y_zp,
                     static_cast<uint8_t*>(out) + i * n);
        else
          Requantize(acc_p + i * n, bias_or_zero.data(), mult.data(), n, bounds, y_zp,
                     static_cast<int8_t*>(out) + i * n);
      }
    });
    return Status::Ok();
  }

  ir::Node matmul_node_;  // the MatMulInteger node matmul_ was built from
  std::unique_ptr<Kernel> matmul_;
  quant::InnerContext inner_{1};
  quant::OutputClamp clamp_;
};

Expected<std::unique_ptr<Kernel>> MakeQGemm(const KernelInit& init) {
  auto kernel = std::make_unique<QGemmKernel>();
  SEQTO_ASSIGN_OR_RETURN(kernel->clamp_, quant::OutputClamp::Parse(init.node));
  ir::Node& mm = kernel->matmul_node_;
  mm.name = init.node.name;
  mm.op_type = "MatMulInteger";
  auto input = [&](int i) {
    return i < static_cast<int>(init.node.inputs.size()) ? init.node.inputs[i] : std::string();
  };
  mm.inputs = {input(kA), input(kB), input(kAZp), input(kBZp)};
  mm.outputs = {init.node.outputs.empty() ? std::string() : init.node.outputs[0]};
  SEQTO_ASSIGN_OR_RETURN(
      kernel->matmul_,
      quant::MakeInnerKernel(mm, 10, {init.constant(kA), init.constant(kB), init.constant(kAZp), init.constant(kBZp)},
                             init.reference_only));
  return std::unique_ptr<Kernel>(std::move(kernel));
}

}  // namespace

void RegisterQGemm(OpRegistry& r) { r.Register({"QGemm", "com.seqto", 1, MakeQGemm}); }

}  // namespace seqto::ops
