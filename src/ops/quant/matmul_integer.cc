// MatMulInteger and QLinearMatMul (opset 10): numpy matmul of uint8/int8 A and B
// (batch dims broadcast, 1-D operands as in MatMul) on zero-point-shifted values,
// accumulated exactly in int32:
//   acc[i, j] = sum_k (A[i, k] - a_zp[i]) * (B[k, j] - b_zp[j])
// a_zp/a_scale are per tensor or per row of A ([M], or [..., M, 1]), b_zp/b_scale
// per tensor or per column of B ([N], or [..., 1, N]), y_zp/y_scale per tensor or
// per row of Y.
//   MatMulInteger: Y = acc (int32).
//   QLinearMatMul: Y = clamp(round(acc * (a_scale * b_scale / y_scale)) + y_zp),
//                  in float32 with round half to even (ONNX Runtime's requantization);
//                  Y has y_zero_point's type.
// Reference: direct loops with int64 accumulation. Fast: a oneDNN int8 matmul
// computes P = A x B8 with B8 = B - 128 for uint8 B (B itself for int8), then
// acc = P - b_zp' * rowsum(A) - a_zp * colsum(B8) + K * a_zp * b_zp' with
// b_zp' = b_zp - 128 (or b_zp): exact, and any per-row/column zero points work.
// A 2-D constant B is converted and packed once; A's batch dims are folded into
// rows when B has none.
#include <algorithm>

#include "ops/nn/dnnl_util.h"
#include "ops/quant/quant_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

namespace du = dnnl_util;
using dnnl::memory;
using quant::MatrixParam;

// The loops over one row of the fast path's output, also compiled for AVX2 and
// AVX-512 (without FMA contraction: the same float operations on every path).
// y[j] = clamp(round(acc[j] * mult[j]) + zy).
template <typename Y>
SEQTO_WIDE_CLONES_EXACT void RequantizeRow(const int32_t* acc, const float* mult, Y* y, int64_t n, float lo, float hi,
                                           int32_t zy) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    y[j] = static_cast<Y>(quant::QuantizeClamped(static_cast<float>(acc[j]) * mult[j], lo, hi, zy));
}

// acc[j] -= zb[j] * t + za * colsum[j], in wrapping 32-bit arithmetic.
SEQTO_WIDE_CLONES_EXACT void CompensateRow(int32_t* acc, const int32_t* zb, const int32_t* colsum, uint32_t t,
                                           uint32_t za, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    acc[j] = static_cast<int32_t>(static_cast<uint32_t>(acc[j]) - static_cast<uint32_t>(zb[j]) * t -
                                  za * static_cast<uint32_t>(colsum[j]));
}

struct QMatMulShape {
  Shape batch;             // Y's batch dims
  Shape a_batch, b_batch;  // A's and B's own batch dims
  Shape a_pad, b_pad;      // A's and B's batch dims left-padded with 1 to batch's rank
  int64_t m = 1, n = 1, k = 1;
  Shape y_shape;
  int64_t batches() const { return NumElements(batch); }
};

Expected<QMatMulShape> ResolveQMatMul(const Shape& sa, const Shape& sb, int a_index, int b_index) {
  if (sa.empty()) return InputError(a_index, "A is a scalar, expected rank >= 1");
  if (sb.empty()) return InputError(b_index, "B is a scalar, expected rank >= 1");
  const bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  const Shape a2 = a_vec ? Shape{1, sa[0]} : sa;
  const Shape b2 = b_vec ? Shape{sb[0], 1} : sb;
  QMatMulShape s;
  s.m = a2[a2.size() - 2];
  s.k = a2.back();
  s.n = b2.back();
  if (b2[b2.size() - 2] != s.k)
    return InputError(b_index, "B has shape " + ShapeToString(sb) + ", expected " + std::to_string(s.k) +
                                   " rows to match A's shape " + ShapeToString(sa));
  s.a_batch.assign(a2.begin(), a2.end() - 2);
  s.b_batch.assign(b2.begin(), b2.end() - 2);
  auto batch = BroadcastShapes(s.a_batch, s.b_batch);
  if (!batch)
    return InputError(b_index,
                      "batch dims of A " + ShapeToString(sa) + " and B " + ShapeToString(sb) + " do not broadcast");
  s.batch = *batch;
  s.a_pad = s.a_batch;
  s.b_pad = s.b_batch;
  s.a_pad.insert(s.a_pad.begin(), s.batch.size() - s.a_pad.size(), 1);
  s.b_pad.insert(s.b_pad.begin(), s.batch.size() - s.b_pad.size(), 1);
  s.y_shape = s.batch;
  if (!a_vec) s.y_shape.push_back(s.m);
  if (!b_vec) s.y_shape.push_back(s.n);
  return s;
}

// The matrix of A and of B that output batch `bi` uses.
struct BatchMap {
  std::vector<int64_t> a_str, b_str;  // per batch dim, in matrices (0 where broadcast)
  const Shape* batch = nullptr;
  explicit BatchMap(const QMatMulShape& s) : batch(&s.batch) {
    const int64_t rank = static_cast<int64_t>(s.batch.size());
    a_str.resize(rank);
    b_str.resize(rank);
    for (int64_t d = rank - 1, as = 1, bs = 1; d >= 0; --d) {
      a_str[d] = s.a_pad[d] == 1 ? 0 : as;
      b_str[d] = s.b_pad[d] == 1 ? 0 : bs;
      as *= s.a_pad[d];
      bs *= s.b_pad[d];
    }
  }
  void operator()(int64_t bi, int64_t& a_mat, int64_t& b_mat) const {
    a_mat = b_mat = 0;
    for (int64_t d = static_cast<int64_t>(a_str.size()) - 1, rest = bi; d >= 0; --d) {
      const int64_t idx = rest % (*batch)[d];
      rest /= (*batch)[d];
      a_mat += idx * a_str[d];
      b_mat += idx * b_str[d];
    }
  }
};

// Zero points of A and B, expanded per (operand batch, row / column).
struct ZeroPoints {
  MatrixParam<int32_t> a, b;
};

// The reference: acc (batches x M x N, int32) from int64 sums.
template <typename TA, typename TB>
void AccReference(const QMatMulShape& s, const TA* a, const TB* b, const ZeroPoints& zp, int32_t* acc) {
  const BatchMap map(s);
  ParallelFor(s.batches() * s.m, s.n * s.k, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t bi = r / s.m, i = r % s.m;
      int64_t a_mat, b_mat;
      map(bi, a_mat, b_mat);
      const TA* ar = a + (a_mat * s.m + i) * s.k;
      const TB* bm = b + b_mat * s.k * s.n;
      const int64_t za = zp.a.at(a_mat, i, s.m);
      for (int64_t j = 0; j < s.n; ++j) {
        const int64_t zb = zp.b.at(b_mat, j, s.n);
        int64_t sum = 0;
        for (int64_t p = 0; p < s.k; ++p)
          sum += (static_cast<int64_t>(ar[p]) - za) * (static_cast<int64_t>(bm[p * s.n + j]) - zb);
        acc[r * s.n + j] = static_cast<int32_t>(sum);
      }
    }
  });
}

memory::data_type DnnlType(DType t) { return t == DType::kUInt8 ? memory::data_type::u8 : memory::data_type::s8; }

// B as int8 (B - 128 for uint8) and the column sums of that, per B matrix.
void ConvertB(const Tensor& b, int8_t* out, int32_t* colsum, int64_t mats, int64_t k, int64_t n) {
  const bool u8 = b.dtype() == DType::kUInt8;
  const uint8_t* src = static_cast<const uint8_t*>(b.raw());
  ParallelFor(mats, k * n, [&](int64_t mb, int64_t me) {
    for (int64_t mat = mb; mat < me; ++mat) {
      int32_t* cs = colsum + mat * n;
      std::fill(cs, cs + n, 0);
      for (int64_t p = 0; p < k; ++p) {
        const int64_t off = (mat * k + p) * n;
        for (int64_t j = 0; j < n; ++j) {
          const int8_t v = static_cast<int8_t>(u8 ? src[off + j] - 128 : static_cast<int8_t>(src[off + j]));
          out[off + j] = v;
          cs[j] += v;
        }
      }
    }
  });
}

class QMatMulKernel final : public Kernel {
 public:
  QMatMulKernel(bool qlinear, bool reference_only) : qlinear_(qlinear), reference_only_(reference_only) {}

  int a_index() const { return 0; }
  int b_index() const { return qlinear_ ? 3 : 1; }
  int a_zp_index() const { return 2; }
  int b_zp_index() const { return qlinear_ ? 5 : 3; }

  // Converts a constant 8-bit B once (the fast path's B8 and its column sums).
  void Prepare(const Tensor* b) {
    if (reference_only_ || !quant::ExactInt8Isa() || !b || !quant::Is8Bit(b->dtype()) || b->rank() < 1) return;
    const Shape& sb = b->shape();
    const int64_t k = sb.size() == 1 ? sb[0] : sb[sb.size() - 2], n = sb.size() == 1 ? 1 : sb.back();
    const int64_t mats = sb.size() <= 2 ? 1 : NumElements(Shape(sb.begin(), sb.end() - 2));
    const_b_ = *b;
    const_b8_.resize(static_cast<size_t>(b->numel()));
    const_colsum_.resize(static_cast<size_t>(mats * n));
    ConvertB(*b, const_b8_.data(), const_colsum_.data(), mats, k, n);
  }

  Status Run(KernelContext& ctx) override {
    const Tensor& a = ctx.input(a_index());
    const Tensor& b = ctx.input(b_index());
    if (!quant::Is8Bit(a.dtype())) return DTypeError(a_index(), a.dtype(), "uint8, int8");
    if (!quant::Is8Bit(b.dtype())) return DTypeError(b_index(), b.dtype(), "uint8, int8");
    SEQTO_ASSIGN_OR_RETURN(QMatMulShape s, ResolveQMatMul(a.shape(), b.shape(), a_index(), b_index()));
    ZeroPoints zp;
    SEQTO_ASSIGN_OR_RETURN(zp.a, ReadZp(ctx, a_zp_index(), a.dtype(), s.a_batch, s.m, true, "a_zero_point"));
    SEQTO_ASSIGN_OR_RETURN(zp.b, ReadZp(ctx, b_zp_index(), b.dtype(), s.b_batch, s.n, false, "b_zero_point"));

    // QLinearMatMul's scales and output zero point.
    MatrixParam<float> a_scale, b_scale, y_scale;
    MatrixParam<int32_t> y_zp;
    DType y_type = DType::kInt32;
    if (qlinear_) {
      SEQTO_ASSIGN_OR_RETURN(a_scale, ReadScale(ctx, 1, s.a_batch, s.m, true, "a_scale"));
      SEQTO_ASSIGN_OR_RETURN(b_scale, ReadScale(ctx, 4, s.b_batch, s.n, false, "b_scale"));
      SEQTO_ASSIGN_OR_RETURN(y_scale, ReadScale(ctx, 6, s.batch, s.m, true, "y_scale"));
      if (ctx.has_input(7)) {
        const Tensor& t = ctx.input(7);
        y_type = t.dtype();
        if (!quant::Is8Bit(y_type)) return DTypeError(7, y_type, "uint8, int8");
        SEQTO_ASSIGN_OR_RETURN(
            y_zp, quant::ExpandMatrixParam(quant::ReadInt32s(t), t.shape(), s.batch, s.m, true, 7, "y_zero_point"));
      } else {
        y_type = a.dtype();
        y_zp.values = {0};
      }
    }

    Tensor& y = ctx.Allocate(0, y_type, s.y_shape);
    if (y.numel() == 0) return Status::Ok();
    // The int32 accumulators: Y itself for MatMulInteger.
    int32_t* acc =
        qlinear_ ? static_cast<int32_t*>(du::Scratch(1, static_cast<size_t>(y.numel()) * 4)) : y.data<int32_t>();
    bool done = false;
    if (!reference_only_ && s.k > 0 && quant::ExactInt8Isa()) {
      SEQTO_ASSIGN_OR_RETURN(done, AccFast(s, a, b, zp, acc));
    }
    if (!done) {
      const bool au8 = a.dtype() == DType::kUInt8, bu8 = b.dtype() == DType::kUInt8;
      if (au8 && bu8)
        AccReference(s, a.data<uint8_t>(), b.data<uint8_t>(), zp, acc);
      else if (au8)
        AccReference(s, a.data<uint8_t>(), b.data<int8_t>(), zp, acc);
      else if (bu8)
        AccReference(s, a.data<int8_t>(), b.data<uint8_t>(), zp, acc);
      else
        AccReference(s, a.data<int8_t>(), b.data<int8_t>(), zp, acc);
    }
    if (qlinear_ && done) {
      Requantize(s, acc, a_scale, b_scale, y_scale, y_zp, y);
    } else if (qlinear_) {  // the reference: one element at a time
      const quant::IntRange range = quant::RangeOf(y_type);
      const BatchMap map(s);
      for (int64_t r = 0; r < s.batches() * s.m; ++r) {
        const int64_t bi = r / s.m, i = r % s.m;
        int64_t a_mat, b_mat;
        map(bi, a_mat, b_mat);
        for (int64_t j = 0; j < s.n; ++j) {
          const float mult = a_scale.at(a_mat, i, s.m) * b_scale.at(b_mat, j, s.n) / y_scale.at(bi, i, s.m);
          const int32_t q = quant::Requantize(acc[r * s.n + j], mult, y_zp.at(bi, i, s.m), range);
          if (y_type == DType::kUInt8)
            y.data<uint8_t>()[r * s.n + j] = static_cast<uint8_t>(q);
          else
            y.data<int8_t>()[r * s.n + j] = static_cast<int8_t>(q);
        }
      }
    }
    return Status::Ok();
  }

 private:
  static Expected<MatrixParam<int32_t>> ReadZp(const KernelContext& ctx, int index, DType type, const Shape& batch,
                                               int64_t count, bool per_row, const char* name) {
    if (!ctx.has_input(index)) return MatrixParam<int32_t>{{0}};
    const Tensor& t = ctx.input(index);
    SEQTO_ASSIGN_OR_RETURN(std::vector<int32_t> v, quant::ReadZeroPoints(t, type, index, name));
    return quant::ExpandMatrixParam(std::move(v), t.shape(), batch, count, per_row, index, name);
  }
  static Expected<MatrixParam<float>> ReadScale(const KernelContext& ctx, int index, const Shape& batch, int64_t count,
                                                bool per_row, const char* name) {
    if (!ctx.has_input(index)) return InputError(index, std::string(name) + " is missing");
    const Tensor& t = ctx.input(index);
    SEQTO_ASSIGN_OR_RETURN(std::vector<float> v, quant::ReadScales(t, index, name));
    return quant::ExpandMatrixParam(std::move(v), t.shape(), batch, count, per_row, index, name);
  }

  // y = clamp(round(acc * a_scale * b_scale / y_scale) + y_zp) for the fast path:
  // multipliers computed once per row (or B matrix), vectorized loops.
  void Requantize(const QMatMulShape& s, const int32_t* acc, const MatrixParam<float>& as, const MatrixParam<float>& bs,
                  const MatrixParam<float>& ys, const MatrixParam<int32_t>& yz, Tensor& y) const {
    const quant::IntRange range = quant::RangeOf(y.dtype());
    const BatchMap map(s);
    const bool u8 = y.dtype() == DType::kUInt8;
    void* out = y.raw();
    const bool simple = as.per_tensor() && ys.per_tensor();  // multipliers depend on the column only
    ParallelFor(s.batches() * s.m, s.n * 4, [&](int64_t begin, int64_t end) {
      std::vector<float> mult(static_cast<size_t>(s.n));
      int64_t mult_b_mat = -1;
      for (int64_t r = begin; r < end; ++r) {
        const int64_t bi = r / s.m, i = r % s.m;
        int64_t a_mat, b_mat;
        map(bi, a_mat, b_mat);
        if (!simple || b_mat != mult_b_mat) {
          const float sa = as.at(a_mat, i, s.m), sy = ys.at(bi, i, s.m);
          for (int64_t j = 0; j < s.n; ++j) mult[j] = sa * bs.at(b_mat, j, s.n) / sy;
          mult_b_mat = b_mat;
        }
        const int32_t zy = yz.at(bi, i, s.m);
        const quant::ClampBounds bounds(range, zy);
        const float lo = bounds.lo, hi = bounds.hi;
        const float* mr = mult.data();
        const int32_t* ar = acc + r * s.n;
        if (u8)
          RequantizeRow(ar, mr, static_cast<uint8_t*>(out) + r * s.n, s.n, lo, hi, zy);
        else
          RequantizeRow(ar, mr, static_cast<int8_t*>(out) + r * s.n, s.n, lo, hi, zy);
      }
    });
  }

  // acc through oneDNN (see the top of the file); false when oneDNN cannot do it.
  Expected<bool> AccFast(const QMatMulShape& s, const Tensor& a, const Tensor& b, const ZeroPoints& zp, int32_t* acc) {
    const int64_t b_mats = NumElements(s.b_batch), a_mats = NumElements(s.a_batch);
    // B8 and its column sums: prepared once for a constant B.
    const int8_t* b8;
    const int32_t* colsum;
    const bool const_b = const_b_.defined() && b.raw() == const_b_.raw();
    if (const_b) {
      b8 = const_b8_.data();
      colsum = const_colsum_.data();
    } else {
      int8_t* b8w = static_cast<int8_t*>(du::Scratch(2, static_cast<size_t>(b.numel())));
      int32_t* csw = static_cast<int32_t*>(du::Scratch(3, static_cast<size_t>(b_mats * s.n) * 4));
      ConvertB(b, b8w, csw, b_mats, s.k, s.n);
      b8 = b8w;
      colsum = csw;
    }
    // One 2-D product when B has a single matrix (A's batches become rows), else one per output batch.
    const bool fold = b_mats == 1;
    const int64_t rows = fold ? a_mats * s.m : s.m;
    const memory::data_type a_dt = DnnlType(a.dtype());
    const auto key = du::CacheKey{rows, s.k, s.n, static_cast<int64_t>(a.dtype()), const_b && fold ? 1 : 0};
    auto plan = plans_.Get(key, [&] {
      du::MatmulSpec spec;
      spec.src = du::PlainDesc({rows, s.k}, a_dt);
      spec.weights = du::PlainDesc({s.k, s.n}, memory::data_type::s8);
      spec.dst = du::PlainDesc({rows, s.n}, memory::data_type::s32);
      return const_b && fold ? du::MakeMatmul(spec, const_b8_.data(), &packed_b_) : du::MakeMatmul(spec);
    });
    if (!plan) return false;
    const auto* pa = static_cast<const uint8_t*>(a.raw());
    if (fold) {
      SEQTO_RETURN_IF_ERROR(du::RunMatmul(*plan, pa, b8, nullptr, acc));
    } else {
      const BatchMap map(s);
      for (int64_t bi = 0; bi < s.batches(); ++bi) {
        int64_t a_mat, b_mat;
        map(bi, a_mat, b_mat);
        SEQTO_RETURN_IF_ERROR(
            du::RunMatmul(*plan, pa + a_mat * s.m * s.k, b8 + b_mat * s.k * s.n, nullptr, acc + bi * s.m * s.n));
      }
    }
    quant::CountFastRun();
    // The zero-point terms, with b_zp' = b_zp - 128 for uint8 B.
    const int32_t b_off = b.dtype() == DType::kUInt8 ? 128 : 0;
    const bool any_za = std::any_of(zp.a.values.begin(), zp.a.values.end(), [](int32_t v) { return v != 0; });
    const bool any_zb = std::any_of(zp.b.values.begin(), zp.b.values.end(), [&](int32_t v) { return v != b_off; });
    if (!any_za && !any_zb) return true;
    // Row sums of A (only needed with b_zp' != 0).
    std::vector<int32_t> rowsum;
    if (any_zb) {
      rowsum.resize(static_cast<size_t>(a_mats * s.m));
      const bool au8 = a.dtype() == DType::kUInt8;
      ParallelFor(a_mats * s.m, s.k, [&](int64_t rb, int64_t re) {
        for (int64_t r = rb; r < re; ++r) {
          int32_t sum = 0;
          if (au8) {
            const uint8_t* p = pa + r * s.k;
#pragma omp simd reduction(+ : sum)
            for (int64_t q = 0; q < s.k; ++q) sum += p[q];
          } else {
            const int8_t* p = reinterpret_cast<const int8_t*>(pa) + r * s.k;
#pragma omp simd reduction(+ : sum)
            for (int64_t q = 0; q < s.k; ++q) sum += p[q];
          }
          rowsum[r] = sum;
        }
      });
    }
    // b_zp' per (B matrix, column).
    std::vector<int32_t> zbp(static_cast<size_t>(b_mats * s.n));
    for (int64_t mat = 0; mat < b_mats; ++mat)
      for (int64_t j = 0; j < s.n; ++j) zbp[mat * s.n + j] = zp.b.at(mat, j, s.n) - b_off;
    // acc += -b_zp' * (rowsum - K * a_zp) - a_zp * colsum, in wrapping 32-bit
    // arithmetic: the low 32 bits of the exact sum, as the reference's int32 cast.
    const BatchMap map(s);
    ParallelFor(s.batches() * s.m, s.n, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t bi = r / s.m, i = r % s.m;
        int64_t a_mat, b_mat;
        map(bi, a_mat, b_mat);
        const uint32_t za = static_cast<uint32_t>(zp.a.at(a_mat, i, s.m));
        const uint32_t rs = any_zb ? static_cast<uint32_t>(rowsum[a_mat * s.m + i]) : 0u;
        const uint32_t t = rs - static_cast<uint32_t>(s.k) * za;
        const int32_t* cs = colsum + b_mat * s.n;
        const int32_t* zb = zbp.data() + b_mat * s.n;
        CompensateRow(acc + r * s.n, zb, cs, t, za, s.n);
      }
    });
    return true;
  }

  bool qlinear_;
  bool reference_only_;
  Tensor const_b_;                     // constant B (undefined when B is not constant)
  std::vector<int8_t> const_b8_;       // const_b_ - 128 (uint8) or as is (int8)
  std::vector<int32_t> const_colsum_;  // column sums of const_b8_, per matrix
  memory packed_b_;                    // const_b8_ packed for the latest plan
  du::ShapeCache<du::MatmulPlan> plans_;
};

Expected<std::unique_ptr<Kernel>> MakeQMatMul(const KernelInit& init, bool qlinear) {
  auto kernel = std::make_unique<QMatMulKernel>(qlinear, init.reference_only);
  kernel->Prepare(init.constant(kernel->b_index()));
  return std::unique_ptr<Kernel>(std::move(kernel));
}

}  // namespace

void RegisterMatMulInteger(OpRegistry& r) {
  r.Register({"MatMulInteger", "", 10, [](const KernelInit& init) { return MakeQMatMul(init, false); }});
  r.Register({"QLinearMatMul", "", 10, [](const KernelInit& init) { return MakeQMatMul(init, true); }});
}

}  // namespace seqto::ops
