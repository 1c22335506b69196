// MatMul: numpy's matmul. A 1-D A is a row vector (its dim is dropped from Y), a
// 1-D B a column vector; dims before the last two are batch dims and broadcast.
// Reference: double accumulation for floats, exact for integers (float32,
// float64, int32, int64, uint32, uint64). Fast (float32): a oneDNN matmul per input
// shape; a constant 1-D/2-D B is prepacked once at creation and A's batch dims are
// folded into its rows.
//
// Also registers com.seqto.FusedMatMul(A, B, Bias): MatMul then + Bias (1-D, one value
// per column of Y), which the fuse-patterns pass makes of MatMul -> Add with a
// constant 2-D B and 1-D bias (a linear layer). The fast path adds the bias in
// oneDNN's accumulator; the reference adds it to the rounded product, exactly as the
// two unfused ops do.
#include <type_traits>

#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

namespace du = dnnl_util;
using dnnl::memory;

struct MatMulShape {
  Shape batch;             // Y's batch dims
  Shape a_batch, b_batch;  // A's and B's, left-padded with 1 to batch's rank
  int64_t m = 1, n = 1, k = 1;
  Shape y_shape;
};

Expected<MatMulShape> ResolveMatMul(const Shape& sa, const Shape& sb) {
  if (sa.empty()) return InputError(0, "A is a scalar, expected rank >= 1");
  if (sb.empty()) return InputError(1, "B is a scalar, expected rank >= 1");
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  const Shape a2 = a_vec ? Shape{1, sa[0]} : sa;
  const Shape b2 = b_vec ? Shape{sb[0], 1} : sb;
  MatMulShape s;
  s.m = a2[a2.size() - 2];
  s.k = a2.back();
  s.n = b2.back();
  if (b2[b2.size() - 2] != s.k)
    return InputError(1, "B has shape " + ShapeToString(sb) + ", expected " + std::to_string(s.k) +
                             " rows to match A's shape " + ShapeToString(sa));
  Shape ab(a2.begin(), a2.end() - 2), bb(b2.begin(), b2.end() - 2);
  auto batch = BroadcastShapes(ab, bb);
  if (!batch)
    return InputError(1, "batch dims of A " + ShapeToString(sa) + " and B " + ShapeToString(sb) + " do not broadcast");
  s.batch = *batch;
  ab.insert(ab.begin(), s.batch.size() - ab.size(), 1);
  bb.insert(bb.begin(), s.batch.size() - bb.size(), 1);
  s.a_batch = ab;
  s.b_batch = bb;
  s.y_shape = s.batch;
  if (!a_vec) s.y_shape.push_back(s.m);
  if (!b_vec) s.y_shape.push_back(s.n);
  return s;
}

template <typename T>
void MatMulReference(const MatMulShape& s, const T* a, const T* b, T* y) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double,
                                 std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  const int64_t rank = static_cast<int64_t>(s.batch.size());
  const int64_t batches = NumElements(s.batch);
  // Batch strides in matrices (0 where the operand broadcasts).
  std::vector<int64_t> a_str(rank), b_str(rank);
  for (int64_t d = rank - 1, as = 1, bs = 1; d >= 0; --d) {
    a_str[d] = s.a_batch[d] == 1 ? 0 : as;
    b_str[d] = s.b_batch[d] == 1 ? 0 : bs;
    as *= s.a_batch[d];
    bs *= s.b_batch[d];
  }
  ParallelFor(batches * s.m, s.n * s.k, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t bi = r / s.m, i = r % s.m;
      int64_t a_mat = 0, b_mat = 0;
      for (int64_t d = rank - 1, rest = bi; d >= 0; --d) {
        const int64_t idx = rest % s.batch[d];
        rest /= s.batch[d];
        a_mat += idx * a_str[d];
        b_mat += idx * b_str[d];
      }
      const T* ar = a + (a_mat * s.m + i) * s.k;
      const T* bm = b + b_mat * s.k * s.n;
      for (int64_t j = 0; j < s.n; ++j) {
        Acc acc = 0;
        for (int64_t p = 0; p < s.k; ++p) acc += static_cast<Acc>(ar[p]) * static_cast<Acc>(bm[p * s.n + j]);
        y[r * s.n + j] = static_cast<T>(acc);
      }
    }
  });
}

class MatMulKernel final : public Kernel {
 public:
  MatMulKernel(bool reference_only, bool fused_bias) : reference_only_(reference_only), fused_bias_(fused_bias) {}

  void Prepare(const Tensor* b) {
    if (reference_only_ || !b || b->dtype() != DType::kFloat32 || b->rank() < 1 || b->rank() > 2) return;
    if (fused_bias_ && b->rank() != 2) return;
    const_b_ = *b;
    auto s = ResolveMatMul({1, b->dim(0)}, b->shape());  // a nominal single-row A
    if (!s) return;
    MakePlan(*s, /*fold_batch=*/true);  // packs B into packed_b_
  }

  Status Run(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    if (b.dtype() != a.dtype())
      return InputError(1, "B has type " + DTypeName(b.dtype()) + ", expected A's type " + DTypeName(a.dtype()));
    SEQTO_ASSIGN_OR_RETURN(MatMulShape s, ResolveMatMul(a.shape(), b.shape()));
    const Tensor* bias = fused_bias_ ? &ctx.input(2) : nullptr;
    if (bias) {
      if (bias->dtype() != a.dtype())
        return InputError(2,
                          "Bias has type " + DTypeName(bias->dtype()) + ", expected A's type " + DTypeName(a.dtype()));
      if (bias->rank() != 1 || bias->dim(0) != s.n || b.rank() < 2)
        return InputError(2, "Bias has shape " + ShapeToString(bias->shape()) + ", expected " + std::to_string(s.n) +
                                 " values (one per column of a 2-D B)");
    }
    Tensor& y = ctx.Allocate(0, a.dtype(), s.y_shape);
    if (y.numel() == 0) return Status::Ok();
    if (a.dtype() == DType::kFloat32 && !reference_only_ && s.k > 0) {
      const bool fold = const_b_.defined();  // B is 1-D/2-D: A's batch dims are rows
      auto plan = plans_.Get(du::ShapeKey({&a.shape(), &b.shape()}), [&] { return MakePlan(s, fold); });
      if (plan) return du::RunMatmul(*plan, a.raw(), b.raw(), bias ? bias->raw() : nullptr, y.raw());
    }
    return RunReference(s, a, b, bias, y);
  }

 private:
  // The reference product, then + bias (if any) in y's type, as the unfused Add does.
  template <typename T>
  static void Reference(const MatMulShape& s, const Tensor& a, const Tensor& b, const Tensor* bias, Tensor& y) {
    MatMulReference(s, a.data<T>(), b.data<T>(), y.data<T>());
    if (!bias) return;
    const T* bp = bias->data<T>();
    T* yp = y.data<T>();
    for (int64_t i = 0, total = y.numel(); i < total; ++i) yp[i] = static_cast<T>(yp[i] + bp[i % s.n]);
  }

  static Status RunReference(const MatMulShape& s, const Tensor& a, const Tensor& b, const Tensor* bias, Tensor& y) {
    switch (a.dtype()) {
      case DType::kFloat32:
        Reference<float>(s, a, b, bias, y);
        break;
      case DType::kFloat64:
        Reference<double>(s, a, b, bias, y);
        break;
      case DType::kInt32:
        Reference<int32_t>(s, a, b, bias, y);
        break;
      case DType::kInt64:
        Reference<int64_t>(s, a, b, bias, y);
        break;
      case DType::kUInt32:
        Reference<uint32_t>(s, a, b, bias, y);
        break;
      case DType::kUInt64:
        Reference<uint64_t>(s, a, b, bias, y);
        break;
      default:
        return DTypeError(0, a.dtype(), "float32, float64, int32, int64, uint32, uint64");
    }
    return Status::Ok();
  }

  std::shared_ptr<du::MatmulPlan> MakePlan(const MatMulShape& s, bool fold_batch) {
    du::MatmulSpec spec;
    if (fold_batch) {  // B has no batch dims, so Y's batch dims are A's: one (rows x K) x (K x N)
      const int64_t rows = NumElements(s.batch) * s.m;
      spec.src = du::PlainDesc({rows, s.k});
      spec.weights = du::PlainDesc({s.k, s.n});
      spec.dst = du::PlainDesc({rows, s.n});
      if (fused_bias_) spec.bias = du::PlainDesc({1, s.n});
      return du::MakeMatmul(spec, const_b_.raw(), &packed_b_);
    }
    if (fused_bias_ || s.batch.size() + 2 > DNNL_MAX_NDIMS) return nullptr;  // bias: the folded plan only
    auto with = [](Shape batch, int64_t r, int64_t c) {
      batch.push_back(r);
      batch.push_back(c);
      return batch;
    };
    spec.src = du::PlainDesc(with(s.a_batch, s.m, s.k));
    spec.weights = du::PlainDesc(with(s.b_batch, s.k, s.n));
    spec.dst = du::PlainDesc(with(s.batch, s.m, s.n));
    return du::MakeMatmul(spec);
  }

  bool reference_only_;
  bool fused_bias_;  // com.seqto.FusedMatMul: input 2 is added to every row
  Tensor const_b_;   // constant 1-D/2-D float32 B (undefined otherwise)
  memory packed_b_;  // const_b_ as the latest plan wants it (packed at creation)
  du::ShapeCache<du::MatmulPlan> plans_;
};

}  // namespace

void RegisterMatMul(OpRegistry& r) {
  r.Register({"MatMul", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                if (init.node.num_present_inputs() != 2) return UserError("expected 2 inputs (A, B)");
                auto kernel = std::make_unique<MatMulKernel>(init.reference_only, /*fused_bias=*/false);
                kernel->Prepare(init.constant(1));
                return std::unique_ptr<Kernel>(std::move(kernel));
              }});
  r.Register({"FusedMatMul", "com.seqto", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                if (init.node.num_present_inputs() != 3 || init.node.inputs.size() != 3)
                  return UserError("expected 3 inputs (A, B, Bias)");
                auto kernel = std::make_unique<MatMulKernel>(init.reference_only, /*fused_bias=*/true);
                kernel->Prepare(init.constant(1));
                return std::unique_ptr<Kernel>(std::move(kernel));
              }});
}

}  // namespace seqto::ops
