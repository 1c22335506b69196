// com.seqto.QLookup: Y[i] = table[X[i]] for an 8-bit X: a whole
//   DQ(x) -> elementwise float op(s) -> Q(y)
// chain as one table lookup. The passes build the table from the unfused chain's own
// arithmetic on each of the 256 possible inputs (fuse-qdq for one activation or a
// Concat's requantization, fuse-unary-lookups for whole elementwise regions by
// running their kernels), so the result is the unfused graph's bit for bit.
// Attributes: 'table' (256 ints; entry k is for X = k (uint8) or k - 128 (int8)),
// 'x_type' and 'y_type' (ONNX element type numbers: 2 uint8, 3 int8).
// Kernel: 64 bytes per step with AVX-512 VBMI (vpermi2b; 21 GB/s on one core of the
// development machine), else a byte at a time (3 GB/s; AVX2's 16 vpshufb per 32
// bytes measured 2.5, and 8-byte loads and stores 1.2); all exact (reference_only:
// the byte loop).
#include "ops/quant/qlookup.h"

#include <array>

#include "ops/quant/fused_util.h"
#include "ops/registry.h"
#include "ops/util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SEQTO_LOOKUP_X86 1
#endif

namespace seqto::ops {

namespace {

void LookupScalar(const uint8_t* x, uint8_t* y, int64_t n, const uint8_t* table) {
  for (int64_t i = 0; i < n; ++i) y[i] = table[x[i]];
}

#ifdef SEQTO_LOOKUP_X86
// 64 bytes at a time: vpermi2b picks from 128 table bytes by the low 7 bits of each
// index, twice (entries 0-127 and 128-255), and the index's top bit chooses.
#define SEQTO_VBMI gnu::target("avx512f,avx512bw,avx512vbmi")
[[SEQTO_VBMI]] inline __m512i MapVbmi(__m512i v, const __m512i t[4]) {
  const __m512i lo = _mm512_permutex2var_epi8(t[0], v, t[1]);
  const __m512i hi = _mm512_permutex2var_epi8(t[2], v, t[3]);
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
}
[[SEQTO_VBMI]] void LookupVbmi(const uint8_t* x, uint8_t* y, int64_t n, const uint8_t* table) {
  const __m512i t[4] = {_mm512_loadu_si512(table), _mm512_loadu_si512(table + 64), _mm512_loadu_si512(table + 128),
                        _mm512_loadu_si512(table + 192)};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) _mm512_storeu_si512(y + i, MapVbmi(_mm512_loadu_si512(x + i), t));
  if (i < n) {
    const __mmask64 m = ~0ULL >> (64 - (n - i));
    _mm512_mask_storeu_epi8(y + i, m, MapVbmi(_mm512_maskz_loadu_epi8(m, x + i), t));
  }
}
#undef SEQTO_VBMI

#endif

}  // namespace

LookupIsa BestLookupIsa() {
#ifdef SEQTO_LOOKUP_X86
  static const LookupIsa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw")) return LookupIsa::kAvx512Vbmi;
    return LookupIsa::kScalar;
  }();
  return best;
#else
  return LookupIsa::kScalar;
#endif
}

void LookupBytes(const uint8_t* x, uint8_t* y, int64_t n, const uint8_t* table, LookupIsa isa) {
#ifdef SEQTO_LOOKUP_X86
  if (isa == LookupIsa::kAvx512Vbmi) return LookupVbmi(x, y, n, table);
#endif
  (void)isa;
  LookupScalar(x, y, n, table);
}

namespace {

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
  // Stored as Y's bytes, indexed by X's bits (int8 entries rotated by 128), so the
  // kernel is one byte-to-byte map for every pair of types.
  std::array<uint8_t, 256> bytes;
  const int flip = xt == DType::kInt8 ? 0x80 : 0;
  for (size_t k = 0; k < 256; ++k) {
    if (table[k] < range.lo || table[k] > range.hi)
      return UserError("attribute 'table' entry " + std::to_string(k) + " is " + std::to_string(table[k]) +
                       ", outside the range of " + DTypeName(yt));
    bytes[k ^ flip] = static_cast<uint8_t>(table[k]);
  }
  const LookupIsa isa = init.reference_only ? LookupIsa::kScalar : BestLookupIsa();
  return MakeKernel([xt, yt, bytes, isa](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.dtype() != xt) return DTypeError(0, x.dtype(), DTypeName(xt));
    Tensor& y = ctx.Allocate(0, yt, x.shape());
    const uint8_t* px = static_cast<const uint8_t*>(x.raw());
    uint8_t* py = static_cast<uint8_t*>(y.raw());
    ParallelFor(x.numel(), 1, [&](int64_t begin, int64_t end) {
      LookupBytes(px + begin, py + begin, end - begin, bytes.data(), isa);
    });
    return Status::Ok();
  });
}

}  // namespace

void RegisterQLookup(OpRegistry& r) { r.Register({"QLookup", "com.seqto", 1, MakeQLookup}); }

}  // namespace seqto::ops
