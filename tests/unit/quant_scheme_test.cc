// Quantization scheme: integer ranges, scale/zero point, (de)quantization and bias
// quantization against hand-computed values (the arithmetic is in the comments), with
// ONNX Runtime's semantics (docs/design.md, Quantization semantics).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>
#include <vector>

#include "quant/scheme.h"

namespace seqto::quant {
namespace {

RangeOptions Opts(QuantType t, bool symmetric = false, bool reduce_range = false, bool power_of_two = false) {
  RangeOptions o;
  o.type = t;
  o.symmetric = symmetric;
  o.reduce_range = reduce_range;
  o.power_of_two = power_of_two;
  return o;
}

ScaleZeroPoint MustCompute(double rmin, double rmax, const RangeOptions& o) {
  auto r = ComputeScaleZeroPoint(rmin, rmax, o, "tensor 't'");
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() ? *r : ScaleZeroPoint{};
}

QuantParams PerTensor(QuantType t, float scale, int64_t zp) {
  QuantParams p;
  p.type = t;
  p.scale = {scale};
  p.zero_point = {zp};
  return p;
}

template <typename T>
std::vector<int64_t> Ints(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DTypeOf<T>());
  std::vector<int64_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) out.push_back(t.data<T>()[i]);
  return out;
}

std::vector<int64_t> Quantize(const std::vector<float>& x, const QuantParams& p) {
  auto q = QuantizeTensor(Tensor::FromVector<float>({static_cast<int64_t>(x.size())}, x), p);
  EXPECT_TRUE(q.ok()) << q.error().message;
  if (!q.ok()) return {};
  std::vector<int64_t> out;
  for (double v : q->ToDoubles()) out.push_back(static_cast<int64_t>(v));
  return out;
}

void ExpectRange(QuantType t, bool symmetric, bool reduce, int64_t qmin, int64_t qmax) {
  const QRange r = GetQRange(t, symmetric, reduce);
  EXPECT_EQ(r.qmin, qmin) << QuantTypeName(t) << " symmetric=" << symmetric << " reduce=" << reduce;
  EXPECT_EQ(r.qmax, qmax) << QuantTypeName(t) << " symmetric=" << symmetric << " reduce=" << reduce;
}

// --- ranges --------------------------------------------------------------------------

TEST(QuantScheme, RangeTableEveryRow) {
  // type        default            symmetric           reduce_range (wins over symmetric)
  ExpectRange(QuantType::kUInt8, false, false, 0, 255);
  ExpectRange(QuantType::kUInt8, true, false, 0, 254);
  ExpectRange(QuantType::kUInt8, false, true, 0, 127);
  ExpectRange(QuantType::kUInt8, true, true, 0, 127);
  ExpectRange(QuantType::kInt8, false, false, -128, 127);
  ExpectRange(QuantType::kInt8, true, false, -127, 127);
  ExpectRange(QuantType::kInt8, false, true, -64, 64);
  ExpectRange(QuantType::kInt8, true, true, -64, 64);
  ExpectRange(QuantType::kUInt16, false, false, 0, 65535);
  ExpectRange(QuantType::kUInt16, true, false, 0, 65534);
  ExpectRange(QuantType::kUInt16, false, true, 0, 32767);
  ExpectRange(QuantType::kUInt16, true, true, 0, 32767);
  ExpectRange(QuantType::kInt16, false, false, -32768, 32767);
  ExpectRange(QuantType::kInt16, true, false, -32767, 32767);
  ExpectRange(QuantType::kInt16, false, true, -16384, 16384);
  ExpectRange(QuantType::kInt16, true, true, -16384, 16384);
  // 4-bit types have no symmetric row: symmetric keeps the default range.
  ExpectRange(QuantType::kUInt4, false, false, 0, 15);
  ExpectRange(QuantType::kUInt4, true, false, 0, 15);
  ExpectRange(QuantType::kUInt4, false, true, 0, 7);
  ExpectRange(QuantType::kUInt4, true, true, 0, 7);
  ExpectRange(QuantType::kInt4, false, false, -8, 7);
  ExpectRange(QuantType::kInt4, true, false, -8, 7);
  ExpectRange(QuantType::kInt4, false, true, -4, 3);
  ExpectRange(QuantType::kInt4, true, true, -4, 3);
}

TEST(QuantScheme, TypeNamesParseAndStorage) {
  for (QuantType t : {QuantType::kUInt8, QuantType::kInt8, QuantType::kUInt16, QuantType::kInt16, QuantType::kUInt4,
                      QuantType::kInt4}) {
    auto p = ParseQuantType(QuantTypeName(t));
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(*p, t);
  }
  // ORT's spellings.
  EXPECT_EQ(*ParseQuantType("QInt8"), QuantType::kInt8);
  EXPECT_EQ(*ParseQuantType("QUInt8"), QuantType::kUInt8);
  EXPECT_EQ(*ParseQuantType("QUInt16"), QuantType::kUInt16);
  EXPECT_EQ(*ParseQuantType("QInt4"), QuantType::kInt4);
  auto bad = ParseQuantType("int7");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'int7'"), std::string::npos);
  EXPECT_FALSE(ParseQuantType("int32").ok());  // bias only

  EXPECT_EQ(StorageDType(QuantType::kInt4), DType::kInt8);
  EXPECT_EQ(StorageDType(QuantType::kUInt4), DType::kUInt8);
  EXPECT_EQ(StorageDType(QuantType::kUInt16), DType::kUInt16);
  EXPECT_EQ(StorageDType(QuantType::kInt32), DType::kInt32);
  EXPECT_TRUE(IsSigned(QuantType::kInt4));
  EXPECT_FALSE(IsSigned(QuantType::kUInt16));
}

// --- scale and zero point ----------------------------------------------------------

TEST(QuantScheme, AsymmetricUInt8OnMinus1To3) {
  // scale = (3 - (-1)) / (255 - 0) = 4/255; zp = round(0 - (-1) / (4/255)) = round(63.75) = 64.
  const ScaleZeroPoint sz = MustCompute(-1, 3, Opts(QuantType::kUInt8));
  EXPECT_EQ(sz.scale, static_cast<float>(4.0 / 255.0));
  EXPECT_EQ(sz.zero_point, 64);
  // -1 / (4/255) = -63.75 -> -64, + 64 = 0;  3 -> 191.25 -> 191 + 64 = 255;
  // 0 -> 64;  1 -> 63.75 -> 64 + 64 = 128;  0.01 -> 0.6375 -> 1 + 64 = 65.
  EXPECT_EQ(Quantize({-1, 3, 0, 1, 0.01f}, PerTensor(QuantType::kUInt8, sz.scale, sz.zero_point)),
            (std::vector<int64_t>{0, 255, 64, 128, 65}));
}

TEST(QuantScheme, RangeIsExtendedToIncludeZero) {
  // [2, 4] -> [0, 4]: scale 4/255, zp round(0 - 0) = 0.
  ScaleZeroPoint sz = MustCompute(2, 4, Opts(QuantType::kUInt8));
  EXPECT_EQ(sz.scale, static_cast<float>(4.0 / 255.0));
  EXPECT_EQ(sz.zero_point, 0);
  // [-4, -2] -> [-4, 0]: scale 4/255, zp round(0 + 4 / (4/255)) = 255.
  sz = MustCompute(-4, -2, Opts(QuantType::kUInt8));
  EXPECT_EQ(sz.scale, static_cast<float>(4.0 / 255.0));
  EXPECT_EQ(sz.zero_point, 255);
  // int8 asymmetric [-1, 3]: scale 4/255, zp round(-128 + 63.75) = round(-64.25) = -64.
  sz = MustCompute(-1, 3, Opts(QuantType::kInt8));
  EXPECT_EQ(sz.scale, static_cast<float>(4.0 / 255.0));
  EXPECT_EQ(sz.zero_point, -64);
}

TEST(QuantScheme, SymmetricInt8) {
  // a = max(|-1|, |3|) = 3; scale = 6 / (127 - (-127)) = 6/254; zp = round((-127 + 127) / 2) = 0.
  const ScaleZeroPoint sz = MustCompute(-1, 3, Opts(QuantType::kInt8, true));
  EXPECT_EQ(sz.scale, static_cast<float>(6.0 / 254.0));
  EXPECT_EQ(sz.zero_point, 0);
  // 3 / (6/254) = 127;  -1 -> -42.33 -> -42;  1 -> 42.33 -> 42;  -3 -> -127.
  EXPECT_EQ(Quantize({3, -1, 1, -3}, PerTensor(QuantType::kInt8, sz.scale, sz.zero_point)),
            (std::vector<int64_t>{127, -42, 42, -127}));
}

TEST(QuantScheme, SymmetricUnsignedAndSixteenBit) {
  // uint8 symmetric: range (0, 254); a = 3: scale 6/254, zp = round(254 / 2) = 127.
  ScaleZeroPoint sz = MustCompute(-1, 3, Opts(QuantType::kUInt8, true));
  EXPECT_EQ(sz.scale, static_cast<float>(6.0 / 254.0));
  EXPECT_EQ(sz.zero_point, 127);
  // uint16 symmetric: range (0, 65534): scale 6/65534, zp 32767.
  sz = MustCompute(-1, 3, Opts(QuantType::kUInt16, true));
  EXPECT_EQ(sz.scale, static_cast<float>(6.0 / 65534.0));
  EXPECT_EQ(sz.zero_point, 32767);
  // int16 asymmetric: range (-32768, 32767): scale 4/65535, zp = round(-32768 + 16383.75) = -16384.
  sz = MustCompute(-1, 3, Opts(QuantType::kInt16));
  EXPECT_EQ(sz.scale, static_cast<float>(4.0 / 65535.0));
  EXPECT_EQ(sz.zero_point, -16384);
}

TEST(QuantScheme, ReduceRange) {
  // int8 reduce_range (-64, 64), symmetric: scale = 6/128 = 0.046875 (exact), zp 0.
  ScaleZeroPoint sz = MustCompute(-1, 3, Opts(QuantType::kInt8, true, true));
  EXPECT_EQ(sz.scale, 0.046875f);
  EXPECT_EQ(sz.zero_point, 0);
  // 3 / 0.046875 = 64;  -1 -> -21.33 -> -21.
  EXPECT_EQ(Quantize({3, -1}, PerTensor(QuantType::kInt8, sz.scale, sz.zero_point)), (std::vector<int64_t>{64, -21}));
  // uint8 reduce_range (0, 127), asymmetric: scale 4/127, zp = round(1 / (4/127)) = round(31.75) = 32.
  sz = MustCompute(-1, 3, Opts(QuantType::kUInt8, false, true));
  EXPECT_EQ(sz.scale, static_cast<float>(4.0 / 127.0));
  EXPECT_EQ(sz.zero_point, 32);
  // uint8 symmetric + reduce_range: reduce wins -> (0, 127): scale 6/127, zp = round(63.5) = 64 (half to even).
  sz = MustCompute(-1, 3, Opts(QuantType::kUInt8, true, true));
  EXPECT_EQ(sz.scale, static_cast<float>(6.0 / 127.0));
  EXPECT_EQ(sz.zero_point, 64);
}

TEST(QuantScheme, FourBitTypes) {
  // int4 asymmetric (-8, 7): scale 4/15, zp = round(-8 + 1 / (4/15)) = round(-4.25) = -4.
  ScaleZeroPoint sz = MustCompute(-1, 3, Opts(QuantType::kInt4));
  EXPECT_EQ(sz.scale, static_cast<float>(4.0 / 15.0));
  EXPECT_EQ(sz.zero_point, -4);
  // int4 symmetric keeps (-8, 7): scale 6/15 = 0.4, zp = round(-0.5) = 0 (half to even).
  sz = MustCompute(-1, 3, Opts(QuantType::kInt4, true));
  EXPECT_EQ(sz.scale, static_cast<float>(6.0 / 15.0));
  EXPECT_EQ(sz.zero_point, 0);
  // uint4 symmetric (0, 15): zp = round(7.5) = 8.
  sz = MustCompute(-1, 3, Opts(QuantType::kUInt4, true));
  EXPECT_EQ(sz.zero_point, 8);
  // int4 reduce_range (-4, 3): scale 4/7, zp = round(-4 + 1.75) = round(-2.25) = -2.
  sz = MustCompute(-1, 3, Opts(QuantType::kInt4, false, true));
  EXPECT_EQ(sz.scale, static_cast<float>(4.0 / 7.0));
  EXPECT_EQ(sz.zero_point, -2);
  // Quantized int4 values are clamped to [-8, 7] and stored in int8; uint4 to [0, 15] in uint8.
  auto q = QuantizeTensor(Tensor::FromVector<float>({4}, {9, -9, 3.4f, -7.6f}), PerTensor(QuantType::kInt4, 1.f, 0));
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(Ints<int8_t>(*q), (std::vector<int64_t>{7, -8, 3, -8}));
  q = QuantizeTensor(Tensor::FromVector<float>({3}, {20, -1, 14.6f}), PerTensor(QuantType::kUInt4, 1.f, 0));
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(Ints<uint8_t>(*q), (std::vector<int64_t>{15, 0, 15}));
}

TEST(QuantScheme, TinyOrEmptyRangeGivesScaleOneZeroPointZero) {
  // [0, 0]: scale 0 < FLT_MIN -> scale 1, zp 0 (not 0/0).
  ScaleZeroPoint sz = MustCompute(0, 0, Opts(QuantType::kUInt8));
  EXPECT_EQ(sz.scale, 1.f);
  EXPECT_EQ(sz.zero_point, 0);
  // [0, 1e-37]: 1e-37 / 255 < FLT_MIN (1.18e-38) -> scale 1, zp 0, even for uint8 symmetric.
  sz = MustCompute(0, 1e-37, Opts(QuantType::kUInt8, true));
  EXPECT_EQ(sz.scale, 1.f);
  EXPECT_EQ(sz.zero_point, 0);
  // [0, 1e-35]: 1e-35 / 255 = 3.9e-38 >= FLT_MIN: a real (small) scale.
  sz = MustCompute(0, 1e-35, Opts(QuantType::kUInt8));
  EXPECT_EQ(sz.scale, static_cast<float>(static_cast<double>(1e-35f) / 255.0));
}

TEST(QuantScheme, RoundHalfToEvenAndClamp) {
  // scale 1, zp 0: ties go to the even neighbour.
  EXPECT_EQ(Quantize({2.5f, 3.5f, -2.5f, 0.5f, 1.5f, -0.5f, 2.4999998f}, PerTensor(QuantType::kInt8, 1.f, 0)),
            (std::vector<int64_t>{2, 4, -2, 0, 2, 0, 2}));
  // Ties after scaling: 5 / 2 = 2.5 -> 2; 7 / 2 = 3.5 -> 4; plus zp 10.
  EXPECT_EQ(Quantize({5, 7}, PerTensor(QuantType::kUInt8, 2.f, 10)), (std::vector<int64_t>{12, 14}));
  // Clamp at the full type range (even for a symmetric scale): int8 -> [-128, 127].
  EXPECT_EQ(Quantize({300, -300, 127.4f, -128.4f}, PerTensor(QuantType::kInt8, 1.f, 0)),
            (std::vector<int64_t>{127, -128, 127, -128}));
  EXPECT_EQ(Quantize({300, -5}, PerTensor(QuantType::kUInt8, 1.f, 0)), (std::vector<int64_t>{255, 0}));
  // uint16 / int16: 70000 -> 65535; -40000 -> -32768; 1e30 saturates without overflow.
  EXPECT_EQ(Quantize({70000, 1e30f}, PerTensor(QuantType::kUInt16, 1.f, 0)), (std::vector<int64_t>{65535, 65535}));
  EXPECT_EQ(Quantize({-40000, -1e30f}, PerTensor(QuantType::kInt16, 1.f, 0)), (std::vector<int64_t>{-32768, -32768}));
}

TEST(QuantScheme, DequantizeInvertsQuantizeWithinHalfAStep) {
  // uint8 [-1, 3]: scale 4/255, zp 64. q = 0 -> (0 - 64) * 4/255 = -1.00392.
  const ScaleZeroPoint sz = MustCompute(-1, 3, Opts(QuantType::kUInt8));
  const QuantParams p = PerTensor(QuantType::kUInt8, sz.scale, sz.zero_point);
  auto x = DequantizeTensor(Tensor::FromVector<uint8_t>({3}, {0, 64, 255}), p);
  ASSERT_TRUE(x.ok());
  EXPECT_FLOAT_EQ(x->data<float>()[0], -64 * sz.scale);
  EXPECT_EQ(x->data<float>()[1], 0.f);  // zero is exact
  EXPECT_FLOAT_EQ(x->data<float>()[2], 191 * sz.scale);
  std::vector<float> values;
  for (int i = 0; i <= 400; ++i) values.push_back(-1.f + 0.01f * static_cast<float>(i));
  const Tensor t = Tensor::FromVector<float>({401}, values);
  auto q = QuantizeTensor(t, p);
  ASSERT_TRUE(q.ok());
  auto back = DequantizeTensor(*q, p);
  ASSERT_TRUE(back.ok());
  for (int i = 0; i <= 400; ++i) EXPECT_LE(std::fabs(back->data<float>()[i] - values[i]), sz.scale / 2 * 1.0001f);
  // Wrong storage type is an error.
  EXPECT_FALSE(DequantizeTensor(Tensor::FromVector<int8_t>({1}, {0}), p).ok());
}

// --- per channel ---------------------------------------------------------------------

TEST(QuantScheme, PerChannelWithConstantAndZeroChannels) {
  // w[3, 2]: channel 0 = {1, 1} (constant), channel 1 = {0, 0}, channel 2 = {-2, 0.5}.
  const Tensor w = Tensor::FromVector<float>({3, 2}, {1, 1, 0, 0, -2, 0.5f});
  auto p = ComputeWeightParams(w, Opts(QuantType::kInt8, true), 0, "w");
  ASSERT_TRUE(p.ok()) << p.error().message;
  ASSERT_EQ(p->axis, 0);
  // ch0: [0, 1] -> a = 1, scale 2/254; ch1: [0, 0] -> scale 1, zp 0; ch2: a = 2, scale 4/254.
  EXPECT_EQ(p->scale, (std::vector<float>{static_cast<float>(2.0 / 254), 1.f, static_cast<float>(4.0 / 254)}));
  EXPECT_EQ(p->zero_point, (std::vector<int64_t>{0, 0, 0}));
  auto q = QuantizeTensor(w, *p);
  ASSERT_TRUE(q.ok());
  // 1 / (2/254) = 127; 0 -> 0; -2 / (4/254) = -127; 0.5 / (4/254) = 31.75 -> 32.
  EXPECT_EQ(Ints<int8_t>(*q), (std::vector<int64_t>{127, 127, 0, 0, -127, 32}));

  // Asymmetric uint8: a constant negative channel {-2, -2} -> [-2, 0]: scale 2/255, zp 255.
  const Tensor w2 = Tensor::FromVector<float>({2, 2}, {-2, -2, 1, 1});
  auto p2 = ComputeWeightParams(w2, Opts(QuantType::kUInt8), 0, "w2");
  ASSERT_TRUE(p2.ok());
  EXPECT_EQ(p2->scale, (std::vector<float>{static_cast<float>(2.0 / 255), static_cast<float>(1.0 / 255)}));
  EXPECT_EQ(p2->zero_point, (std::vector<int64_t>{255, 0}));
}

TEST(QuantScheme, AllZeroTensorPerTensor) {
  const Tensor w(DType::kFloat32, {4, 3});
  auto p = ComputeWeightParams(w, Opts(QuantType::kUInt8), std::nullopt, "zeros");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->per_channel());
  EXPECT_EQ(p->scale, std::vector<float>{1.f});
  EXPECT_EQ(p->zero_point, std::vector<int64_t>{0});
  auto q = QuantizeTensor(w, *p);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(Ints<uint8_t>(*q), std::vector<int64_t>(12, 0));
}

TEST(QuantScheme, PerChannelAlongInnerAxis) {
  // w[2, 3] per channel along axis 1 (MatMul B): channel c = column c.
  // columns: {1, -1}, {2, 4}, {0, -8}; symmetric int8: a = 1, 4, 8 -> scales 2/254, 8/254, 16/254.
  const Tensor w = Tensor::FromVector<float>({2, 3}, {1, 2, 0, -1, 4, -8});
  auto p = ComputeWeightParams(w, Opts(QuantType::kInt8, true), -1, "b");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->scale, (std::vector<float>{static_cast<float>(2.0 / 254), static_cast<float>(8.0 / 254),
                                          static_cast<float>(16.0 / 254)}));
  auto q = QuantizeTensor(w, *p);
  ASSERT_TRUE(q.ok());
  // 1 -> 127; 2 / (8/254) = 63.5 -> 64 (half to even); 0 -> 0; -1 -> -127; 4 -> 127; -8 -> -127.
  EXPECT_EQ(Ints<int8_t>(*q), (std::vector<int64_t>{127, 64, 0, -127, 127, -127}));
  auto back = DequantizeTensor(*q, *p);
  ASSERT_TRUE(back.ok());
  EXPECT_FLOAT_EQ(back->data<float>()[1], 64 * static_cast<float>(8.0 / 254));
  // Param count must match the axis.
  QuantParams wrong = *p;
  wrong.axis = 0;
  EXPECT_FALSE(QuantizeTensor(w, wrong).ok());
  EXPECT_FALSE(ComputeWeightParams(w, Opts(QuantType::kInt8, true), 2, "b").ok());
}

// --- power of two --------------------------------------------------------------------

TEST(QuantScheme, PowerOfTwoScales) {
  // int8 (symmetric, -127..127), a = 3: 127 * 2^-6 = 1.98 < 3 <= 127 * 2^-5 = 3.97 -> 2^-5.
  ScaleZeroPoint sz = MustCompute(-1, 3, Opts(QuantType::kInt8, false, false, true));
  EXPECT_EQ(sz.scale, 0.03125f);
  EXPECT_EQ(sz.zero_point, 0);
  // Boundary: a = 127 * 2^-3 = 15.875 fits exactly at e = -3.
  sz = MustCompute(-15.875, 1, Opts(QuantType::kInt8, false, false, true));
  EXPECT_EQ(sz.scale, 0.125f);
  // Just above it needs e = -2.
  sz = MustCompute(-15.876, 1, Opts(QuantType::kInt8, false, false, true));
  EXPECT_EQ(sz.scale, 0.25f);
  // Large range: a = 1000: 127 * 2^3 = 1016 >= 1000 > 127 * 2^2 = 508 -> 8.
  sz = MustCompute(0, 1000, Opts(QuantType::kInt8, false, false, true));
  EXPECT_EQ(sz.scale, 8.f);
  // int16 (-32767..32767), a = 1: 32767 * 2^-15 = 0.99997 < 1 -> 2^-14.
  sz = MustCompute(0, 1, Opts(QuantType::kInt16, false, false, true));
  EXPECT_EQ(sz.scale, std::ldexp(1.f, -14));
  EXPECT_EQ(sz.zero_point, 0);
  // int8 reduce_range (-64..64), a = 3: 64 * 2^-5 = 2 < 3 <= 64 * 2^-4 = 4 -> 2^-4.
  sz = MustCompute(-3, 1, Opts(QuantType::kInt8, false, true, true));
  EXPECT_EQ(sz.scale, 0.0625f);
  // Zero range: scale 1.
  EXPECT_EQ(MustCompute(0, 0, Opts(QuantType::kInt8, false, false, true)).scale, 1.f);
  // Only int8/int16.
  auto bad = ComputeScaleZeroPoint(-1, 3, Opts(QuantType::kUInt8, false, false, true), "tensor 'p'");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("tensor 'p'"), std::string::npos);
  EXPECT_FALSE(ComputeScaleZeroPoint(-1, 3, Opts(QuantType::kInt4, false, false, true)).ok());
  // Per channel: channels {0.5, -0.25} and {100, 3}: a = 0.5 -> 2^-7 (127/128 = 0.99 >= 0.5 > 0.496);
  // a = 100 -> 2^0 (127 >= 100 > 63.5).
  auto p = ComputeWeightParams(Tensor::FromVector<float>({2, 2}, {0.5f, -0.25f, 100, 3}),
                               Opts(QuantType::kInt8, false, false, true), 0, "pw");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->scale, (std::vector<float>{std::ldexp(1.f, -7), 1.f}));
}

// --- bias ----------------------------------------------------------------------------

TEST(QuantScheme, BiasInt32WithInputTimesWeightScale) {
  // Per channel: input scale 0.5, weight scales {0.25, 0.125} -> bias scales {0.125, 0.0625}.
  // 1.0 / 0.125 = 8; -0.3 / 0.0625 = -4.8 -> -5.
  QuantParams wp;
  wp.type = QuantType::kInt8;
  wp.scale = {0.25f, 0.125f};
  wp.zero_point = {0, 0};
  wp.axis = 0;
  QuantParams bp;
  auto q = QuantizeBias(Tensor::FromVector<float>({2}, {1.0f, -0.3f}), 0.5f, wp, &bp);
  ASSERT_TRUE(q.ok()) << q.error().message;
  EXPECT_EQ(Ints<int32_t>(*q), (std::vector<int64_t>{8, -5}));
  EXPECT_EQ(bp.type, QuantType::kInt32);
  EXPECT_EQ(bp.scale, (std::vector<float>{0.125f, 0.0625f}));
  EXPECT_EQ(bp.zero_point, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(bp.axis, 0);
  // Per tensor: scale 0.5 * 0.25 = 0.125; ties 0.1875 / 0.125 = 1.5 -> 2, 0.3125 / 0.125 = 2.5 -> 2;
  // 1e9 / 0.125 = 8e9 saturates at INT32_MAX, -1e9 at INT32_MIN.
  q = QuantizeBias(Tensor::FromVector<float>({4}, {0.1875f, 0.3125f, 1e9f, -1e9f}), 0.5f,
                   PerTensor(QuantType::kInt8, 0.25f, 0), &bp);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(Ints<int32_t>(*q),
            (std::vector<int64_t>{2, 2, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()}));
  EXPECT_FALSE(bp.per_channel());
  EXPECT_EQ(bp.scale, std::vector<float>{0.125f});
  auto back = DequantizeTensor(*q, bp);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data<float>()[0], 0.25f);
  // Channel count mismatch.
  EXPECT_FALSE(QuantizeBias(Tensor::FromVector<float>({3}, {1, 2, 3}), 0.5f, wp, nullptr).ok());
}

TEST(QuantScheme, BiasScaleExponentsAreTheSmallestPowerThatFits) {
  constexpr int32_t kLimit = std::numeric_limits<int32_t>::max() / 2;
  // 1.0 / (0.5 * 0.25) = 8 fits: no change. 3 / (0.5 * 1e-9) = 6e9: 2^3 brings it to
  // 7.5e8 <= 2^30 - 1 (2^2 leaves 1.5e9). A zero-weight channel's scale 1 holds 2.
  QuantParams wp;
  wp.type = QuantType::kInt8;
  wp.scale = {0.25f, 1e-9f, 1.0f};
  wp.zero_point = {0, 0, 0};
  wp.axis = 0;
  auto k = BiasScaleExponents(Tensor::FromVector<float>({3}, {1.0f, -3.0f, 2.0f}), 0.5f, wp, kLimit);
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_EQ(*k, (std::vector<int>{0, 3, 0}));
  // Per tensor: the largest |bias| decides.
  k = BiasScaleExponents(Tensor::FromVector<float>({2}, {0.5f, -3.0f}), 0.5f, PerTensor(QuantType::kInt8, 1e-9f, 0),
                         kLimit);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, std::vector<int>{3});
  // Against doubling one step at a time, with QuantizeBias's own arithmetic, over
  // scales from normal to a dead channel's (1e-35) and biases up to 1e6.
  for (float b : {0.0f, 1e-6f, 0.3f, -0.6366f, 7.0f, 1e6f})
    for (float sw : {0.02f, 3e-9f, 6.4e-24f, 2.5e-35f, 1.2e-38f}) {
      const float sx = 0.0445685f;
      int doubled = 0;
      for (float s = sw;; s *= 2.0f, ++doubled) {
        auto q = QuantizeBias(Tensor::FromVector<float>({1}, {b}), sx, PerTensor(QuantType::kInt8, s, 0), nullptr);
        ASSERT_TRUE(q.ok()) << q.error().message;
        if (std::abs(static_cast<int64_t>(q->data<int32_t>()[0])) <= kLimit) break;
      }
      k = BiasScaleExponents(Tensor::FromVector<float>({1}, {b}), sx, PerTensor(QuantType::kInt8, sw, 0), kLimit);
      ASSERT_TRUE(k.ok()) << k.error().message;
      EXPECT_EQ(k->at(0), doubled) << "bias " << b << ", weight scale " << sw;
    }
  // A product of scales below float32's smallest positive value: QuantizeBias refuses
  // it; the exponent lifts it into range.
  k = BiasScaleExponents(Tensor::FromVector<float>({1}, {0.0f}), 1e-30f, PerTensor(QuantType::kInt8, 1e-20f, 0),
                         kLimit);
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_GT(1e-30f * std::ldexp(1e-20f, k->at(0)), 0.0f);
  EXPECT_FALSE(
      QuantizeBias(Tensor::FromVector<float>({1}, {0.0f}), 1e-30f, PerTensor(QuantType::kInt8, 1e-20f, 0), nullptr)
          .ok());
  // No finite float32 scale holds 1e30 at an input scale of 1e-30: an error naming
  // the channel.
  wp.scale = {0.25f, 0.25f, 0.25f};
  k = BiasScaleExponents(Tensor::FromVector<float>({3}, {0.0f, 1e30f, 0.0f}), 1e-30f, wp, kLimit);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.error().message.find("channel 1"), std::string::npos) << k.error().message;
  EXPECT_FALSE(
      BiasScaleExponents(Tensor::FromVector<float>({1}, {std::nanf("")}), 0.5f, wp, kLimit).ok());  // count mismatch
  EXPECT_FALSE(BiasScaleExponents(Tensor::FromVector<float>({3}, {0.0f, INFINITY, 0.0f}), 0.5f, wp, kLimit).ok());
}

// --- errors --------------------------------------------------------------------------

TEST(QuantScheme, NanAndInfAreErrorsNamingTheTensor) {
  auto r = ComputeScaleZeroPoint(std::nan(""), 1, Opts(QuantType::kUInt8), "tensor 'act'");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().kind, ErrorKind::kUser);
  EXPECT_NE(r.error().message.find("tensor 'act'"), std::string::npos);
  EXPECT_FALSE(ComputeScaleZeroPoint(0, INFINITY, Opts(QuantType::kUInt8)).ok());
  EXPECT_FALSE(ComputeScaleZeroPoint(2, 1, Opts(QuantType::kUInt8)).ok());      // min > max
  EXPECT_FALSE(ComputeScaleZeroPoint(0, 1e300, Opts(QuantType::kUInt8)).ok());  // beyond float32

  auto p = ComputeWeightParams(Tensor::FromVector<float>({3}, {1, NAN, 2}), Opts(QuantType::kInt8, true), std::nullopt,
                               "conv1.weight");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().kind, ErrorKind::kUser);
  EXPECT_NE(p.error().message.find("'conv1.weight'"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("NaN"), std::string::npos) << p.error().message;
  p = ComputeWeightParams(Tensor::FromVector<float>({2}, {1, -INFINITY}), Opts(QuantType::kInt8, true), 0, "w");
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.error().message.find("'w'"), std::string::npos);

  EXPECT_FALSE(QuantizeTensor(Tensor::FromVector<float>({2}, {1, NAN}), PerTensor(QuantType::kInt8, 1.f, 0)).ok());
  EXPECT_FALSE(QuantizeTensor(Tensor::FromVector<float>({1}, {1}), PerTensor(QuantType::kInt8, 0.f, 0)).ok());
  EXPECT_FALSE(QuantizeTensor(Tensor::FromVector<float>({1}, {1}), PerTensor(QuantType::kUInt8, 1.f, 300)).ok());
  EXPECT_FALSE(QuantizeTensor(Tensor::FromVector<int32_t>({1}, {1}), PerTensor(QuantType::kInt8, 1.f, 0)).ok());
  EXPECT_FALSE(
      QuantizeBias(Tensor::FromVector<float>({1}, {NAN}), 0.5f, PerTensor(QuantType::kInt8, 1.f, 0), nullptr).ok());
}

}  // namespace
}  // namespace seqto::quant
