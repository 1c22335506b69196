#include <gtest/gtest.h>

#include <cmath>

#include "core/npy.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace seqto {
namespace {

TEST(Shape, BroadcastFollowsNumpy) {
  auto s = BroadcastShapes({2, 1, 4}, {3, 1});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (Shape{2, 3, 4}));
  EXPECT_FALSE(BroadcastShapes({2, 3}, {4}).ok());
}

TEST(Tensor, NpyRoundTrip) {
  Tensor t = Tensor::FromVector<float>({2, 3}, {1, 2, 3, 4, 5, 6.5f});
  const std::string path = ::testing::TempDir() + "/t.npy";
  ASSERT_TRUE(WriteNpy(path, t).ok());
  auto r = ReadNpy(path);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->shape(), t.shape());
  EXPECT_EQ(r->ToDoubles(), t.ToDoubles());
}

TEST(Tensor, HalfConversionRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(FloatToHalf(65504.f), 0x7bff);
  EXPECT_EQ(FloatToHalf(1e6f), 0x7c00);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.f, -24));
  for (uint16_t h : {0x3555, 0x0400, 0x03ff, 0xc000, 0x7bff}) EXPECT_EQ(FloatToHalf(HalfToFloat(h)), h);
}

}  // namespace
}  // namespace seqto
