// Gemm: Y = alpha * A' x B' + beta * C, where A' = transA ? A^T : A (M x K),
// B' = transB ? B^T : B (K x N), and C (optional from opset 11) broadcasts
// unidirectionally to M x N. Before opset 7 the 'broadcast' attribute gated C's
// broadcasting; seqto accepts any C that broadcasts.
// Reference: double accumulation (float32, float64; integer types exactly when
// alpha = beta = 1). Fast (float32): a oneDNN matmul per input shape; a constant B
// is prepacked once at creation, a constant C is pre-scaled by beta into a bias.
#include <algorithm>
#include <type_traits>

#include "ops/nn/dnnl_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

namespace du = dnnl_util;
using dnnl::memory;

struct GemmAttrs {
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 1.f;
};

bool Supported(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 || t == DType::kInt64 ||
         t == DType::kUInt32 || t == DType::kUInt64;
}

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t c_rows = 0, c_cols = 0;  // C as a 2-D matrix (1 where it broadcasts); 0 x 0: no C
};

Expected<GemmShape> ResolveGemm(const GemmAttrs& a, const Shape& sa, const Shape& sb, const Shape* sc) {
  if (sa.size() != 2) return InputError(0, "A has shape " + ShapeToString(sa) + ", expected rank 2");
  if (sb.size() != 2) return InputError(1, "B has shape " + ShapeToString(sb) + ", expected rank 2");
  GemmShape g;
  g.m = a.trans_a ? sa[1] : sa[0];
  g.k = a.trans_a ? sa[0] : sa[1];
  g.n = a.trans_b ? sb[0] : sb[1];
  const int64_t kb = a.trans_b ? sb[1] : sb[0];
  if (kb != g.k)
    return InputError(1, "B has shape " + ShapeToString(sb) + (a.trans_b ? " (transposed)" : "") +
                             ", expected inner dim " + std::to_string(g.k) + " to match A " + ShapeToString(sa) +
                             (a.trans_a ? " (transposed)" : ""));
  if (sc) {
    if (sc->size() > 2) return InputError(2, "C has shape " + ShapeToString(*sc) + ", expected rank <= 2");
    g.c_rows = sc->size() == 2 ? (*sc)[0] : 1;
    g.c_cols = sc->empty() ? 1 : sc->back();
    if ((g.c_rows != 1 && g.c_rows != g.m) || (g.c_cols != 1 && g.c_cols != g.n))
      return InputError(2, "C has shape " + ShapeToString(*sc) + ", which does not broadcast to " +
                               std::to_string(g.m) + "x" + std::to_string(g.n));
  }
  return g;
}

template <typename T>
void GemmReference(const GemmAttrs& at, const GemmShape& g, const T* a, const T* b, const T* c, T* y) {
  constexpr bool kFloat = std::is_floating_point_v<T>;
  using Acc = std::conditional_t<kFloat, double, std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  const bool exact = !kFloat && at.alpha == 1.f && at.beta == 1.f;
  ParallelFor(g.m, g.n * g.k, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        Acc acc = 0;
        for (int64_t p = 0; p < g.k; ++p) {
          const T av = at.trans_a ? a[p * g.m + i] : a[i * g.k + p];
          const T bv = at.trans_b ? b[j * g.k + p] : b[p * g.n + j];
          acc += static_cast<Acc>(av) * static_cast<Acc>(bv);
        }
        const T cv = c ? c[(g.c_rows == 1 ? 0 : i) * g.c_cols + (g.c_cols == 1 ? 0 : j)] : T(0);
        if (exact)
          y[i * g.n + j] = static_cast<T>(acc + static_cast<Acc>(cv));
        else
          y[i * g.n + j] = static_cast<T>(static_cast<double>(at.alpha) * static_cast<double>(acc) +
                                          (c ? static_cast<double>(at.beta) * static_cast<double>(cv) : 0.0));
      }
  });
}

// How C reaches oneDNN.
enum class CMode {
  kNone,        // no C, or beta = 0
  kBias,        // as the matmul's bias (alpha = 1; C constant, pre-scaled by beta, or beta = 1)
  kAccumulate,  // Y is filled with beta * C first, then the matmul adds to it
};

struct GemmPlan {
  std::shared_ptr<du::MatmulPlan> matmul;
  CMode c_mode = CMode::kNone;
};

class GemmKernel final : public Kernel {
 public:
  GemmKernel(GemmAttrs attrs, bool reference_only) : at_(attrs), reference_only_(reference_only) {}

  Status Prepare(const Tensor* b, const Tensor* c) {
    if (reference_only_) return Status::Ok();
    if (c && c->dtype() == DType::kFloat32 && c->rank() <= 2) {
      // beta * C as a 2-D matrix: the matmul's bias, or what Y starts from.
      const int64_t rows = c->rank() == 2 ? c->dim(0) : 1, cols = c->rank() == 0 ? 1 : c->shape().back();
      scaled_c_ = Tensor(DType::kFloat32, {rows, cols});
      for (int64_t i = 0; i < c->numel(); ++i) scaled_c_.data<float>()[i] = at_.beta * c->data<float>()[i];
    }
    if (b && b->dtype() == DType::kFloat32 && b->rank() == 2) {
      const_b_ = *b;
      // Prepack for a nominal single-row A; other shapes reuse it when oneDNN
      // wants the same layout (it usually does), else repack once per shape.
      GemmShape g;
      g.m = 1;
      g.n = at_.trans_b ? b->dim(0) : b->dim(1);
      g.k = at_.trans_b ? b->dim(1) : b->dim(0);
      MakePlan(g);  // packs B into packed_b_
    }
    return Status::Ok();
  }

  Status Run(KernelContext& ctx) override {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    const Tensor* c = ctx.has_input(2) ? &ctx.input(2) : nullptr;
    if (!Supported(a.dtype())) return DTypeError(0, a.dtype(), "float32, float64, int32, int64, uint32, uint64");
    if (b.dtype() != a.dtype())
      return InputError(1, "B has type " + DTypeName(b.dtype()) + ", expected A's type " + DTypeName(a.dtype()));
    if (c && c->dtype() != a.dtype())
      return InputError(2, "C has type " + DTypeName(c->dtype()) + ", expected A's type " + DTypeName(a.dtype()));
    SEQTO_ASSIGN_OR_RETURN(GemmShape g, ResolveGemm(at_, a.shape(), b.shape(), c ? &c->shape() : nullptr));
    Tensor& y = ctx.Allocate(0, a.dtype(), {g.m, g.n});
    if (y.numel() == 0) return Status::Ok();
    if (a.dtype() == DType::kFloat32 && !reference_only_ && g.k > 0) {
      auto plan =
          plans_.Get(du::ShapeKey({&a.shape(), &b.shape(), c ? &c->shape() : nullptr}), [&] { return MakePlan(g); });
      if (plan) return Execute(*plan, g, a, b, c, y);
    }
    switch (a.dtype()) {
#define SEQTO_GEMM_CASE(DT, T)                                                                \
  case DT:                                                                                    \
    GemmReference(at_, g, a.data<T>(), b.data<T>(), c ? c->data<T>() : nullptr, y.data<T>()); \
    break;
      SEQTO_GEMM_CASE(DType::kFloat32, float)
      SEQTO_GEMM_CASE(DType::kFloat64, double)
      SEQTO_GEMM_CASE(DType::kInt32, int32_t)
      SEQTO_GEMM_CASE(DType::kInt64, int64_t)
      SEQTO_GEMM_CASE(DType::kUInt32, uint32_t)
      SEQTO_GEMM_CASE(DType::kUInt64, uint64_t)
#undef SEQTO_GEMM_CASE
      default:
        break;
    }
    return Status::Ok();
  }

 private:
  std::shared_ptr<GemmPlan> MakePlan(const GemmShape& g) {
    du::MatmulSpec spec;
    spec.src = du::StridedDesc({g.m, g.k}, at_.trans_a ? std::vector<int64_t>{1, g.m} : std::vector<int64_t>{g.k, 1});
    spec.weights =
        du::StridedDesc({g.k, g.n}, at_.trans_b ? std::vector<int64_t>{1, g.k} : std::vector<int64_t>{g.n, 1});
    spec.dst = du::PlainDesc({g.m, g.n});
    spec.alpha = at_.alpha;
    auto plan = std::make_shared<GemmPlan>();
    const bool has_c = g.c_rows > 0 && at_.beta != 0.f;
    // oneDNN scales its bias by alpha too: use it only when alpha = 1.
    const bool bias_ok = has_c && at_.alpha == 1.f && (scaled_c_.defined() || at_.beta == 1.f);
    const void* wei = const_b_.defined() ? const_b_.raw() : nullptr;
    if (bias_ok) {
      spec.bias = du::PlainDesc({g.c_rows, g.c_cols});
      plan->c_mode = CMode::kBias;
      if ((plan->matmul = du::MakeMatmul(spec, wei, &packed_b_))) return plan;
      spec.bias = memory::desc();
    }
    if (has_c) {
      spec.accumulate = true;
      plan->c_mode = CMode::kAccumulate;
    } else {
      plan->c_mode = CMode::kNone;
    }
    if ((plan->matmul = du::MakeMatmul(spec, wei, &packed_b_))) return plan;
    return nullptr;
  }

  Status Execute(const GemmPlan& plan, const GemmShape& g, const Tensor& a, const Tensor& b, const Tensor* c,
                 Tensor& y) {
    const float* bias = nullptr;
    if (plan.c_mode == CMode::kBias) bias = scaled_c_.defined() ? scaled_c_.data<float>() : c->data<float>();
    if (plan.c_mode == CMode::kAccumulate) {  // Y = beta * C, broadcast
      const float* cd = scaled_c_.defined() ? scaled_c_.data<float>() : c->data<float>();
      const float scale = scaled_c_.defined() ? 1.f : at_.beta;
      float* yd = y.data<float>();
      for (int64_t i = 0; i < g.m; ++i)
        for (int64_t j = 0; j < g.n; ++j)
          yd[i * g.n + j] = scale * cd[(g.c_rows == 1 ? 0 : i) * g.c_cols + (g.c_cols == 1 ? 0 : j)];
    }
    return du::RunMatmul(*plan.matmul, a.raw(), b.raw(), bias, y.raw());
  }

  GemmAttrs at_;
  bool reference_only_;
  Tensor const_b_;   // constant B, float32 (undefined otherwise)
  Tensor scaled_c_;  // beta * constant C as rows x cols (undefined when C is not constant)
  memory packed_b_;  // const_b_ as the latest plan wants it (packed at creation)
  du::ShapeCache<GemmPlan> plans_;
};

}  // namespace

void RegisterGemm(OpRegistry& r) {
  r.Register({"Gemm", "", 1, [](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                GemmAttrs a;
                SEQTO_ASSIGN_OR_RETURN(int64_t ta, init.node.attr_int("transA", 0));
                SEQTO_ASSIGN_OR_RETURN(int64_t tb, init.node.attr_int("transB", 0));
                SEQTO_ASSIGN_OR_RETURN(a.alpha, init.node.attr_float("alpha", 1.f));
                SEQTO_ASSIGN_OR_RETURN(a.beta, init.node.attr_float("beta", 1.f));
                a.trans_a = ta != 0;
                a.trans_b = tb != 0;
                if (init.node.num_present_inputs() < 2) return UserError("expected inputs A, B and optionally C");
                auto kernel = std::make_unique<GemmKernel>(a, init.reference_only);
                SEQTO_RETURN_IF_ERROR(kernel->Prepare(init.constant(1), init.constant(2)));
                return std::unique_ptr<Kernel>(std::move(kernel));
              }});
}

}  // namespace seqto::ops
