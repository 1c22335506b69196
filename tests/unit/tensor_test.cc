#include "core/tensor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "core/file_util.h"
#include "core/npy.h"
#include "core/shape.h"

namespace seqto {
namespace {

TEST(Shape, BroadcastFollowsNumpy) {
  auto s = BroadcastShapes({2, 1, 4}, {3, 1});
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, (Shape{2, 3, 4}));
  EXPECT_FALSE(BroadcastShapes({2, 3}, {4}).ok());
}

// A write that fails (here: the temporary file is a link to /dev/full, a full disk
// for every write) is an error with the system's reason; neither the target nor the
// temporary file is left. Renaming onto a folder fails the same way.
TEST(Tensor, FailedWritesLeaveNoFile) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / ("seqto_writes_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string target = (dir / "x.npy").string();
  const AtomicFileWriter probe(target);
  fs::create_symlink("/dev/full", probe.temp_path());
  const Status s = WriteNpy(target, Tensor(DType::kFloat32, {4}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(target + ": write failed: No space left on device"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(target));
  EXPECT_FALSE(fs::is_symlink(probe.temp_path()));
  fs::create_symlink("/dev/full", probe.temp_path());
  const Status t = WriteFileAtomic(target, "small");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.message().find("No space left on device"), std::string::npos) << t.message();
  EXPECT_FALSE(fs::is_symlink(probe.temp_path()));
  fs::create_directories(dir / "taken");
  const Status r = WriteFileAtomic((dir / "taken").string(), "bytes");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("cannot rename temporary file into place: Is a directory"), std::string::npos)
      << r.message();
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // just "taken"
  const Status name = WriteFileAtomic((dir / std::string(300, 'n')).string(), "bytes");
  ASSERT_FALSE(name.ok());
  EXPECT_NE(name.message().find("File name too long"), std::string::npos) << name.message();
  fs::remove_all(dir);
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

TEST(Tensor, AllFiniteFindsNaNAndInfinityInEveryFloatType) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  EXPECT_TRUE(AllFinite(Tensor::FromVector<float>({4}, {0.f, -1.f, 3e38f, -1e-45f})));
  EXPECT_FALSE(AllFinite(Tensor::FromVector<float>({5}, {0.f, 1.f, 2.f, 3.f, nan})));
  EXPECT_FALSE(AllFinite(Tensor::FromVector<float>({3}, {-inf, 1.f, 2.f})));
  EXPECT_TRUE(AllFinite(Tensor::FromVector<double>({2}, {1e308, -1e308})));
  EXPECT_FALSE(AllFinite(Tensor::FromVector<double>({2}, {1.0, std::nan("")})));
  Tensor half(DType::kFloat16, {3});
  auto* h = static_cast<uint16_t*>(half.raw());
  h[0] = FloatToHalf(1.f), h[1] = FloatToHalf(65504.f), h[2] = FloatToHalf(-2.f);
  EXPECT_TRUE(AllFinite(half));
  h[1] = FloatToHalf(1e6f);  // overflows to infinity
  EXPECT_FALSE(AllFinite(half));
  Tensor bf(DType::kBFloat16, {1});
  static_cast<uint16_t*>(bf.raw())[0] = 0x7fc0;  // NaN
  EXPECT_FALSE(AllFinite(bf));
  EXPECT_TRUE(AllFinite(Tensor::FromVector<int32_t>({2}, {0x7f800000, -1})));  // integers are never NaN
  EXPECT_TRUE(AllFinite(Tensor()));
}

}  // namespace
}  // namespace seqto
