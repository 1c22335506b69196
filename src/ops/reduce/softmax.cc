// Softmax, LogSoftmax, Hardmax.
//
// Before opset 13 the input is coerced to 2-D at `axis` (default 1): each row of
// prod(shape[axis:]) elements is normalized as a whole. From opset 13 the op works
// along the single axis `axis` (default -1).
//
// float32 has a fast kernel (vectorizable exp, contiguous inner loops, ParallelFor
// over rows or column blocks); the reference kernel computes in double and serves
// float64, reference_only sessions and the unit tests. 16-bit floats run in float32.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/reduce/reduce_util.h"
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

namespace {

enum class Mode { kSoftmax, kLogSoftmax, kHardmax };

struct SoftmaxAttrs {
  Mode mode = Mode::kSoftmax;
  int64_t axis = -1;
  bool coerce_2d = false;  // opset < 13
  bool reference_only = false;
};

// --- Reference kernel: double precision, any layout --------------------------

template <typename T>
void SoftmaxReference(Mode mode, const T* x, int64_t outer, int64_t n, int64_t inner, T* y) {
  ParallelFor(outer * inner, n * 8, [&](int64_t b, int64_t e) {
    for (int64_t s = b; s < e; ++s) {
      const int64_t base = (s / inner) * n * inner + s % inner;
      const T* p = x + base;
      T* q = y + base;
      if (mode == Mode::kHardmax) {
        int64_t best = 0;
        for (int64_t a = 1; a < n; ++a)
          if (p[a * inner] > p[best * inner]) best = a;
        for (int64_t a = 0; a < n; ++a) q[a * inner] = a == best ? T(1) : T(0);
        continue;
      }
      double m = -std::numeric_limits<double>::infinity();
      bool nan = false;
      for (int64_t a = 0; a < n; ++a) {
        const double v = static_cast<double>(p[a * inner]);
        nan |= std::isnan(v);
        m = std::max(m, v);
      }
      if (nan) m = std::numeric_limits<double>::quiet_NaN();
      double sum = 0;
      for (int64_t a = 0; a < n; ++a) sum += std::exp(static_cast<double>(p[a * inner]) - m);
      if (mode == Mode::kSoftmax) {
        for (int64_t a = 0; a < n; ++a)
          q[a * inner] = static_cast<T>(std::exp(static_cast<double>(p[a * inner]) - m) / sum);
      } else {
        const double shift = m + std::log(sum);
        for (int64_t a = 0; a < n; ++a) q[a * inner] = static_cast<T>(static_cast<double>(p[a * inner]) - shift);
      }
    }
  });
}

// --- Fast float32 kernel -----------------------------------------------------

// exp(x) for x <= 0 (softmax's x - max) and float, branch-free so that loops over
// it vectorize: x = n ln2 + r with |r| <= ln2 / 2, a degree-7 polynomial for e^r
// (Cephes' expf coefficients) and 2^n from the exponent bits. Within 2 ulp; inputs
// below `lo` (ExpClampLow) give ~1e-38 instead of 0. NaN stays NaN.
inline float FastExp(float x, float lo) {
  x = x < lo ? lo : x;                   // a ternary, not std::max: it vectorizes, and NaN passes
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + kMagic;
  const float n = t - kMagic;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kMagic);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((ni + 127) << 23);
}

// FastExp's clamp bound, hidden from the optimizer on purpose: seeing a constant,
// GCC evaluates the clamped case at compile time and turns the clamp into a branch
// (the float math can trap, so it cannot be if-converted back) and the loops no
// longer vectorize.
[[gnu::noipa]] float ExpClampLow() { return -87.3f; }

// Sum of exp(p[i] - m), accumulated in double (LogSoftmax needs log(sum) accurate
// even when sum is 1 + tiny); stores the exponentials in out if given.
inline double SumExp(const float* p, int64_t n, float m, float lo, float* out) {
  double s = 0;
  if (out) {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) {
      const float v = FastExp(p[i] - m, lo);
      out[i] = v;
      s += static_cast<double>(v);
    }
  } else {
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(FastExp(p[i] - m, lo));
  }
  return s;
}

inline float RowMax(const float* p, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int nan = 0;
#pragma omp simd reduction(max : m) reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) {
    m = p[i] > m ? p[i] : m;
    nan |= p[i] != p[i];
  }
  return nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

// One row of n contiguous elements.
SEQTO_WIDE_CLONES void SoftmaxRowF32(Mode mode, const float* p, float* q, int64_t n, float lo) {
  const float m = RowMax(p, n);
  if (mode == Mode::kSoftmax) {
    // A float sum here (one partial sum per vector lane): every term is in (0, 1]
    // and one is 1, so its relative error stays within n / lanes ulp, and the
    // float lanes run twice as wide as double ones.
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) {
      const float v = FastExp(p[i] - m, lo);
      q[i] = v;
      sum += v;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) q[i] *= inv;
  } else {
    // (x - m) - log(sum): x - m is exact near the maximum, where it matters.
    const float log_sum = static_cast<float>(std::log(SumExp(p, n, m, lo, nullptr)));
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) q[i] = (p[i] - m) - log_sum;
  }
}

// Rows of n contiguous elements.
void SoftmaxRowsF32(Mode mode, const float* x, int64_t rows, int64_t n, float* y) {
  const float lo = ExpClampLow();
  ParallelFor(rows, n * 4, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) SoftmaxRowF32(mode, x + r * n, y + r * n, n, lo);
  });
}

// [outer, n, inner] with inner > 1: vectorized across columns of the inner block.
void SoftmaxStridedF32(Mode mode, const float* x, int64_t outer, int64_t n, int64_t inner, float* y) {
  constexpr int64_t kBlock = 512;
  const int64_t nblocks = (inner + kBlock - 1) / kBlock;
  const float lo = ExpClampLow();
  ParallelFor(outer * nblocks, n * std::min(inner, kBlock) * 4, [&](int64_t b, int64_t e) {
    std::vector<float> m(static_cast<size_t>(std::min(inner, kBlock)));
    std::vector<double> s(m.size());
    std::vector<float> log_sum(mode == Mode::kLogSoftmax ? m.size() : 0);
    for (int64_t item = b; item < e; ++item) {
      const int64_t o = item / nblocks, j0 = (item % nblocks) * kBlock;
      const int64_t w = std::min(kBlock, inner - j0);
      const float* p = x + o * n * inner + j0;
      float* q = y + o * n * inner + j0;
      float* mm = m.data();
      double* ss = s.data();
      for (int64_t j = 0; j < w; ++j) {
        mm[j] = -std::numeric_limits<float>::infinity();
        ss[j] = 0;
      }
      for (int64_t a = 0; a < n; ++a) {
        const float* row = p + a * inner;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j)  // NaN-sticky max: a NaN is taken and then kept
          mm[j] = row[j] > mm[j] || row[j] != row[j] ? row[j] : mm[j];
      }
      for (int64_t a = 0; a < n; ++a) {
        const float* row = p + a * inner;
        float* out = q + a * inner;
        if (mode == Mode::kSoftmax) {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) {
            const float v = FastExp(row[j] - mm[j], lo);
            out[j] = v;
            ss[j] += v;
          }
        } else {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) ss[j] += FastExp(row[j] - mm[j], lo);
        }
      }
      if (mode == Mode::kSoftmax) {
        for (int64_t j = 0; j < w; ++j) mm[j] = static_cast<float>(1.0 / ss[j]);  // reuse as 1/sum
        for (int64_t a = 0; a < n; ++a) {
          float* out = q + a * inner;
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) out[j] *= mm[j];
        }
      } else {
        float* ls = log_sum.data();
        for (int64_t j = 0; j < w; ++j) ls[j] = static_cast<float>(std::log(ss[j]));
        for (int64_t a = 0; a < n; ++a) {
          const float* row = p + a * inner;
          float* out = q + a * inner;
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) out[j] = (row[j] - mm[j]) - ls[j];
        }
      }
    }
  });
}

void SoftmaxF32(const SoftmaxAttrs& at, const float* x, int64_t outer, int64_t n, int64_t inner, float* y) {
  if (at.reference_only || at.mode == Mode::kHardmax)
    SoftmaxReference(at.mode, x, outer, n, inner, y);
  else if (inner == 1)
    SoftmaxRowsF32(at.mode, x, outer, n, y);
  else
    SoftmaxStridedF32(at.mode, x, outer, n, inner, y);
}

Status RunSoftmax(const SoftmaxAttrs& at, KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = x.rank();
  if (rank == 0) return InputError(0, "(input) must have rank >= 1, got a scalar");
  SEQTO_ASSIGN_OR_RETURN(const int64_t axis, reduce::CheckAxis(at.axis, rank, "attribute 'axis'"));
  int64_t outer, n, inner;
  if (at.coerce_2d) {
    const reduce::AxisView v = reduce::ViewAround(x.shape(), axis);
    outer = v.outer;
    n = v.axis * v.inner;
    inner = 1;
  } else {
    const reduce::AxisView v = reduce::ViewAround(x.shape(), axis);
    outer = v.outer;
    n = v.axis;
    inner = v.inner;
  }
  Tensor& y = ctx.Allocate(0, x.dtype(), x.shape());
  if (x.numel() == 0) return Status::Ok();
  switch (x.dtype()) {
    case DType::kFloat32:
      SoftmaxF32(at, x.data<float>(), outer, n, inner, y.data<float>());
      break;
    case DType::kFloat64:
      SoftmaxReference(at.mode, x.data<double>(), outer, n, inner, y.data<double>());
      break;
    case DType::kFloat16:
    case DType::kBFloat16: {
      const Tensor xf = reduce::HalfToFloat32(x);
      Tensor yf(DType::kFloat32, x.shape());
      SoftmaxF32(at, xf.data<float>(), outer, n, inner, yf.data<float>());
      reduce::Float32ToHalf(yf, y);
      break;
    }
    default:
      return DTypeError(0, x.dtype(), "float32, float64, float16, bfloat16");
  }
  return Status::Ok();
}

void RegisterMode(OpRegistry& r, const char* name, Mode mode) {
  r.Register({name, "", 1, [mode](const KernelInit& init) -> Expected<std::unique_ptr<Kernel>> {
                SoftmaxAttrs at;
                at.mode = mode;
                at.coerce_2d = init.opset < 13;
                at.reference_only = init.reference_only;
                SEQTO_ASSIGN_OR_RETURN(at.axis, init.node.attr_int("axis", at.coerce_2d ? 1 : -1));
                if (init.node.num_present_inputs() != 1) return UserError("expects exactly one input");
                return MakeKernel([at](KernelContext& ctx) { return RunSoftmax(at, ctx); });
              }});
}

}  // namespace

void RegisterSoftmax(OpRegistry& r) {
  RegisterMode(r, "Softmax", Mode::kSoftmax);
  RegisterMode(r, "LogSoftmax", Mode::kLogSoftmax);
  RegisterMode(r, "Hardmax", Mode::kHardmax);
}

}  // namespace seqto::ops
