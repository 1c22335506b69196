// Datasets, decoders, sampling and batching: every format opened from files written
// here (PNG/JPEG through libpng/libjpeg, idx plain and gzipped, .npy) and from
// Debian's ONNX test data; labels from folders and files; errors for corrupt,
// truncated, empty and mismatched inputs naming the file; the seeded subset checked
// against an independent implementation of the documented algorithm.
#include <gtest/gtest.h>
#include <png.h>
#include <unistd.h>
#include <zlib.h>

// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "core/npy.h"
#include "data/image_decode.h"
#include "data/open_dataset.h"
#include "data/sampling.h"
#include "onnxio/model_io.h"

namespace seqto::data {
namespace {

namespace fs = std::filesystem;
const fs::path kTestData = SEQTO_ONNX_TESTDATA;

fs::path TempDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) /
                 ("seqto_data_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void WriteFile(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// color_type: PNG_COLOR_TYPE_*; bit_depth 8 or 16; px holds the raw samples (big-endian for 16-bit).
std::string EncodePng(int w, int h, int color_type, int bit_depth, const std::vector<uint8_t>& px,
                      const std::vector<png_color>& palette = {}, const std::vector<uint8_t>& trns = {}) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(data), n);
      },
      nullptr);
  png_set_IHDR(png, info, w, h, bit_depth, color_type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  if (!trns.empty()) png_set_tRNS(png, info, trns.data(), static_cast<int>(trns.size()), nullptr);
  png_write_info(png, info);
  const size_t row = px.size() / static_cast<size_t>(h);
  for (int y = 0; y < h; ++y) png_write_row(png, const_cast<png_bytep>(&px[static_cast<size_t>(y) * row]));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

std::string GrayPng(int w, int h, uint8_t value) {
  return EncodePng(w, h, PNG_COLOR_TYPE_GRAY, 8, std::vector<uint8_t>(static_cast<size_t>(w * h), value));
}

std::string EncodeJpeg(int w, int h, int channels, const std::vector<uint8_t>& px, int quality = 100) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = w;
  c.image_height = h;
  c.input_components = channels;
  c.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(&px[static_cast<size_t>(c.next_scanline) * w * channels]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::string out(reinterpret_cast<char*>(buf), size);
  free(buf);
  return out;
}

// An idx file: magic 0 0 <type> <ndim>, big-endian dims, data.
std::string IdxBytes(unsigned char type, const std::vector<uint32_t>& dims, const std::string& data) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int b = 3; b >= 0; --b) s += static_cast<char>((d >> (8 * b)) & 0xff);
  return s + data;
}

void WriteGz(const fs::path& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

void ExpectError(const Status& s, const std::vector<std::string>& parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kUser) << s.error().message;
  for (const auto& p : parts)
    EXPECT_NE(s.error().message.find(p), std::string::npos) << "'" << p << "' missing: " << s.error().message;
}

template <typename T>
void ExpectError(const Expected<T>& e, const std::vector<std::string>& parts) {
  ExpectError(e.status(), parts);
}

// ---------------------------------------------------------------- sampling

TEST(Sampling, GeneratorIsTheStandardMt19937_64) {
  // The C++ standard fixes the 10000th output of a default-seeded mt19937_64.
  std::mt19937_64 rng;
  rng.discard(9999);
  EXPECT_EQ(rng(), 9981545732273789042ull);
}

TEST(Sampling, SubsetMatchesTheDocumentedAlgorithm) {
  // Goldens from an independent Python implementation of mt19937_64 and of the
  // partial Fisher-Yates with rejection documented in sampling.h.
  EXPECT_EQ(SampleIndices(10, 4, 0), (std::vector<int64_t>{3, 4, 6, 9}));
  EXPECT_EQ(SampleIndices(10000, 10, 42),
            (std::vector<int64_t>{177, 406, 1456, 1809, 5222, 7717, 7870, 8530, 8563, 9318}));
  EXPECT_EQ(SampleIndices(100, 20, 20240501),
            (std::vector<int64_t>{4, 17, 20, 27, 36, 39, 45, 52, 56, 63, 67, 68, 74, 76, 78, 81, 85, 89, 97, 98}));
}

TEST(Sampling, SubsetProperties) {
  for (uint64_t seed : {0ull, 1ull, 12345ull}) {
    const auto a = SampleIndices(1000, 100, seed);
    ASSERT_EQ(a.size(), 100u);
    EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
    EXPECT_EQ(std::set<int64_t>(a.begin(), a.end()).size(), 100u);
    for (int64_t i : a) EXPECT_TRUE(i >= 0 && i < 1000);
    EXPECT_EQ(a, SampleIndices(1000, 100, seed));  // same seed, same subset
  }
  EXPECT_NE(SampleIndices(1000, 100, 1), SampleIndices(1000, 100, 2));
  // k <= 0 or k >= n: everything, in order.
  const std::vector<int64_t> all = {0, 1, 2, 3, 4};
  EXPECT_EQ(SampleIndices(5, 0, 7), all);
  EXPECT_EQ(SampleIndices(5, 5, 7), all);
  EXPECT_EQ(SampleIndices(5, 99, 7), all);
  EXPECT_TRUE(SampleIndices(0, 3, 7).empty());
  // Each element is about equally likely (unbiased): 20000 draws of 1 of 4.
  std::vector<int> counts(4, 0);
  for (uint64_t seed = 0; seed < 20000; ++seed) counts[static_cast<size_t>(SampleIndices(4, 1, seed)[0])]++;
  for (int c : counts) EXPECT_NEAR(c, 5000, 300);
}

TEST(Sampling, FitSampleShape) {
  EXPECT_EQ(FitSampleShape({28, 28}, {1, 28, 28}), (Shape{1, 28, 28}));
  EXPECT_EQ(FitSampleShape({28, 28}, {28, 28, 1}), (Shape{28, 28, 1}));
  EXPECT_EQ(FitSampleShape({1, 28, 28}, {28, 28}), (Shape{28, 28}));
  EXPECT_EQ(FitSampleShape({3, 8, 8}, {3, -1, -1}), (Shape{3, 8, 8}));
  EXPECT_EQ(FitSampleShape({8, 8}, {1, -1, -1}), (Shape{1, 8, 8}));
  EXPECT_EQ(FitSampleShape({3, 8, 8}, {-1, -1, -1}), (Shape{3, 8, 8}));
  EXPECT_FALSE(FitSampleShape({3, 32, 32}, {1, 28, 28}).has_value());
  EXPECT_FALSE(FitSampleShape({3, 8, 8}, {8, 8, 3}).has_value());  // a transpose is not a reshape
  EXPECT_FALSE(FitSampleShape({784}, {1, 28, 28}).has_value());
  EXPECT_FALSE(FitSampleShape({28, 28}, {-1, -1, -1}).has_value());
}

// ---------------------------------------------------------------- .npy

TEST(NpyData, RowsLabelsAndPreprocessing) {
  const fs::path dir = TempDir();
  std::vector<float> v(5 * 2 * 3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  ASSERT_TRUE(WriteNpy((dir / "x.npy").string(), Tensor::FromVector<float>({5, 2, 3}, v)).ok());
  ASSERT_TRUE(WriteNpy((dir / "y.npy").string(), Tensor::FromVector<int64_t>({5}, {4, 3, 2, 1, 0})).ok());
  DataOptions o;
  o.labels_path = (dir / "y.npy").string();
  auto ds = OpenDataset((dir / "x.npy").string(), o);
  ASSERT_TRUE(ds.ok()) << ds.error().message;
  EXPECT_EQ((*ds)->size(), 5);
  ASSERT_TRUE((*ds)->has_labels());
  EXPECT_EQ((*ds)->label(1), 3);
  auto s = (*ds)->Get(2);
  ASSERT_TRUE(s.ok());
  ASSERT_EQ(s->size(), 1u);
  EXPECT_EQ((*s)[0].shape(), (Shape{2, 3}));
  EXPECT_EQ((*s)[0].ToDoubles(), (std::vector<double>{12, 13, 14, 15, 16, 17}));
  // Per-channel on axis 0 of the sample.
  o.preprocess = *ParsePreprocessSpec("scale=2,mean=10:20,std=2:4");
  auto pre = OpenDataset((dir / "x.npy").string(), o);
  ASSERT_TRUE(pre.ok()) << pre.error().message;
  auto p = (*pre)->Get(2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].ToDoubles(), (std::vector<double>{7, 8, 9, 2.5, 3, 3.5}));  // (24-10)/2 ... (30-20)/4
  // Image-only keys are refused, naming the key and the file.
  o.preprocess = *ParsePreprocessSpec("resize=8");
  ExpectError(OpenDataset((dir / "x.npy").string(), o), {"preprocess key 'resize' applies to images only", "x.npy"});
}

TEST(NpyData, LabelErrors) {
  const fs::path dir = TempDir();
  ASSERT_TRUE(WriteNpy((dir / "x.npy").string(), Tensor(DType::kFloat32, {4, 3})).ok());
  ASSERT_TRUE(WriteNpy((dir / "short.npy").string(), Tensor::FromVector<int64_t>({3}, {0, 1, 2})).ok());
  ASSERT_TRUE(WriteNpy((dir / "float.npy").string(), Tensor(DType::kFloat32, {4})).ok());
  ASSERT_TRUE(WriteNpy((dir / "onehot.npy").string(), Tensor(DType::kInt64, {4, 10})).ok());
  ASSERT_TRUE(WriteNpy((dir / "negative.npy").string(), Tensor::FromVector<int32_t>({4}, {0, 1, -1, 2})).ok());
  ASSERT_TRUE(WriteNpy((dir / "column.npy").string(), Tensor::FromVector<uint8_t>({4, 1}, {3, 2, 1, 0})).ok());
  DataOptions o;
  auto open = [&](const std::string& labels) {
    o.labels_path = (dir / labels).string();
    return OpenDataset((dir / "x.npy").string(), o);
  };
  ExpectError(open("short.npy"), {"short.npy", "has 3 labels", "has 4 samples"});
  ExpectError(open("missing.npy"), {"missing.npy", "no such file"});
  ExpectError(open("float.npy"), {"float.npy", "integer", "float32"});
  ExpectError(open("onehot.npy"), {"onehot.npy", "[N] or [N, 1]"});
  ExpectError(open("negative.npy"), {"negative.npy", "label -1 of sample 2"});
  WriteFile(dir / "garbage.npy", "hello");
  ExpectError(open("garbage.npy"), {"garbage.npy", "not a labels file"});
  auto ok = open("column.npy");
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ((*ok)->labels(), (std::vector<int64_t>{3, 2, 1, 0}));
}

// ---------------------------------------------------------------- idx

TEST(IdxData, PlainAndGzippedWithLabelsFoundNextToThem) {
  const fs::path dir = TempDir();
  std::string pixels;
  for (int i = 0; i < 3 * 2 * 2; ++i) pixels += static_cast<char>(i * 10);
  const std::string images = IdxBytes(0x08, {3, 2, 2}, pixels);
  const std::string labels = IdxBytes(0x08, {3}, std::string("\x07\x00\x02", 3));
  WriteFile(dir / "plain" / "t10k-images-idx3-ubyte", images);
  WriteFile(dir / "plain" / "t10k-labels-idx1-ubyte", labels);
  fs::create_directories(dir / "gz");
  WriteGz(dir / "gz" / "t10k-images-idx3-ubyte.gz", images);
  WriteGz(dir / "gz" / "t10k-labels-idx1-ubyte.gz", labels);
  for (const char* sub : {"plain/t10k-images-idx3-ubyte", "gz/t10k-images-idx3-ubyte.gz"}) {
    SCOPED_TRACE(sub);
    auto ds = OpenDataset((dir / sub).string());
    ASSERT_TRUE(ds.ok()) << ds.error().message;
    EXPECT_EQ((*ds)->size(), 3);
    ASSERT_TRUE((*ds)->has_labels());
    EXPECT_EQ((*ds)->labels(), (std::vector<int64_t>{7, 0, 2}));
    auto s = (*ds)->Get(1);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ((*s)[0].dtype(), DType::kUInt8);
    EXPECT_EQ((*s)[0].shape(), (Shape{2, 2}));
    EXPECT_EQ((*s)[0].ToDoubles(), (std::vector<double>{40, 50, 60, 70}));
  }
  // With a layout the images get a channel axis; scale/mean/std make float32.
  DataOptions o;
  o.preprocess = *ParsePreprocessSpec("scale=0.1,mean=1,std=2,color=gray,layout=nchw");
  auto ds = OpenDataset((dir / "gz/t10k-images-idx3-ubyte.gz").string(), o);
  ASSERT_TRUE(ds.ok()) << ds.error().message;
  auto s = (*ds)->Get(2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[0].shape(), (Shape{1, 2, 2}));
  EXPECT_EQ((*s)[0].dtype(), DType::kFloat32);
  const std::vector<double> expected = {3.5, 4, 4.5, 5};  // (80*0.1 - 1) / 2, ...
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR((*s)[0].ToDoubles()[i], expected[i], 1e-6);
  // --labels replaces the labels next to the file (and may itself be an idx file).
  WriteFile(dir / "other-labels", IdxBytes(0x08, {3}, std::string("\x01\x01\x01", 3)));
  o.labels_path = (dir / "other-labels").string();
  auto relabeled = OpenDataset((dir / "plain/t10k-images-idx3-ubyte").string(), o);
  ASSERT_TRUE(relabeled.ok()) << relabeled.error().message;
  EXPECT_EQ((*relabeled)->labels(), (std::vector<int64_t>{1, 1, 1}));
  // A big-endian float idx.
  std::string f;
  for (float x : {1.5f, -2.0f}) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    for (int b = 3; b >= 0; --b) f += static_cast<char>((u >> (8 * b)) & 0xff);
  }
  WriteFile(dir / "floats-idx2", IdxBytes(0x0D, {2, 1}, f));
  auto floats = OpenDataset((dir / "floats-idx2").string());
  ASSERT_TRUE(floats.ok()) << floats.error().message;
  EXPECT_EQ((*(*floats)->Get(1))[0].ToDoubles(), (std::vector<double>{-2.0}));
}

TEST(IdxData, Errors) {
  const fs::path dir = TempDir();
  const std::string images = IdxBytes(0x08, {3, 2, 2}, std::string(12, '\x01'));
  WriteFile(dir / "trunc-images-idx3-ubyte", images.substr(0, images.size() - 3));
  ExpectError(OpenDataset((dir / "trunc-images-idx3-ubyte").string()), {"trunc-images-idx3-ubyte", "truncated"});
  WriteGz(dir / "truncgz-images-idx3-ubyte.gz", images.substr(0, images.size() - 3));
  ExpectError(OpenDataset((dir / "truncgz-images-idx3-ubyte.gz").string()),
              {"truncgz-images-idx3-ubyte.gz", "truncated"});
  WriteFile(dir / "extra-images-idx3-ubyte", images + "zz");
  ExpectError(OpenDataset((dir / "extra-images-idx3-ubyte").string()), {"extra-images-idx3-ubyte", "unexpected bytes"});
  // A header claiming a huge array in a small file fails before allocating.
  WriteFile(dir / "huge-images-idx3-ubyte", IdxBytes(0x08, {4000000, 60000, 60000}, "x"));
  ExpectError(OpenDataset((dir / "huge-images-idx3-ubyte").string()), {"huge-images-idx3-ubyte"});
  WriteFile(dir / "labels-idx1-ubyte", IdxBytes(0x08, {3}, "abc"));
  ExpectError(OpenDataset((dir / "labels-idx1-ubyte").string()), {"labels-idx1-ubyte", "1-D idx file holds labels"});
  // The labels next to the images must have as many entries.
  WriteFile(dir / "a-images-idx3-ubyte", images);
  WriteFile(dir / "a-labels-idx1-ubyte", IdxBytes(0x08, {2}, "\x01\x02"));
  ExpectError(OpenDataset((dir / "a-images-idx3-ubyte").string()),
              {"a-labels-idx1-ubyte", "has 2 labels", "3 samples"});
  DataOptions o;
  o.preprocess = *ParsePreprocessSpec("color=rgb");
  WriteFile(dir / "b-images-idx3-ubyte", images);
  ExpectError(OpenDataset((dir / "b-images-idx3-ubyte").string(), o), {"'color'", "gray"});
  o.preprocess = *ParsePreprocessSpec("crop=2");
  ExpectError(OpenDataset((dir / "b-images-idx3-ubyte").string(), o), {"preprocess key 'crop' applies to images only"});
  // A folder of idx files asks for the file itself.
  ExpectError(OpenDataset(dir.string()), {"idx files", "images"});
}

// ---------------------------------------------------------------- images

TEST(ImageData, ClassFoldersFlatFoldersAndSingleFiles) {
  const fs::path dir = TempDir();
  WriteFile(dir / "classes/dog/b.png", GrayPng(3, 2, 20));
  WriteFile(dir / "classes/dog/a.png", GrayPng(3, 2, 10));
  WriteFile(dir / "classes/cat/x/deep.jpg", EncodeJpeg(3, 2, 1, std::vector<uint8_t>(6, 200)));
  WriteFile(dir / "classes/cat/notes.txt", "not an image");
  WriteFile(dir / "classes/cat/.hidden.png", "ignored");
  fs::create_directories(dir / "classes/empty");
  auto ds = OpenDataset((dir / "classes").string());
  ASSERT_TRUE(ds.ok()) << ds.error().message;
  ASSERT_EQ((*ds)->size(), 3);
  // Sorted classes (cat 0, dog 1, empty 2), files sorted by path.
  EXPECT_EQ((*ds)->labels(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ((*ds)->class_names(), (std::vector<std::string>{"cat", "dog", "empty"}));
  EXPECT_NE((*ds)->SampleName(1).find("a.png"), std::string::npos);
  EXPECT_NE((*ds)->description().find("3 images, 3 classes"), std::string::npos) << (*ds)->description();
  auto s = (*ds)->Get(1);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ((*s)[0].shape(), (Shape{1, 2, 3}));  // color auto: a gray file stays gray
  EXPECT_EQ((*s)[0].ToDoubles(), std::vector<double>(6, 10.0));
  auto jpg = (*ds)->Get(0);
  ASSERT_TRUE(jpg.ok()) << jpg.error().message;
  for (double v : (*jpg)[0].ToDoubles()) EXPECT_NEAR(v, 200, 1);  // lossy, but flat
  // Numeric folder names are the labels themselves.
  for (const char* c : {"0", "2", "10"}) WriteFile(dir / "numeric" / c / "i.png", GrayPng(1, 1, 0));
  auto num = OpenDataset((dir / "numeric").string());
  ASSERT_TRUE(num.ok()) << num.error().message;
  EXPECT_EQ((*num)->labels(), (std::vector<int64_t>{0, 10, 2}));  // sorted by path: 0, 10, 2
  // A flat folder has no labels, unless --labels gives them.
  WriteFile(dir / "flat/1.png", GrayPng(2, 2, 1));
  WriteFile(dir / "flat/2.PNG", GrayPng(2, 2, 2));
  auto flat = OpenDataset((dir / "flat").string());
  ASSERT_TRUE(flat.ok()) << flat.error().message;
  EXPECT_EQ((*flat)->size(), 2);
  EXPECT_FALSE((*flat)->has_labels());
  ASSERT_TRUE(WriteNpy((dir / "flat_labels.npy").string(), Tensor::FromVector<int64_t>({2}, {5, 6})).ok());
  DataOptions o;
  o.labels_path = (dir / "flat_labels.npy").string();
  auto labeled = OpenDataset((dir / "flat").string(), o);
  ASSERT_TRUE(labeled.ok());
  EXPECT_EQ((*labeled)->labels(), (std::vector<int64_t>{5, 6}));
  // A single image file.
  auto one = OpenDataset((dir / "flat/2.PNG").string());
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_EQ((*one)->size(), 1);
  EXPECT_EQ((*(*one)->Get(0))[0].ToDoubles(), std::vector<double>(4, 2.0));
}

TEST(ImageData, ClassListGivesFolderLabels) {
  const fs::path dir = TempDir();
  // Synset folders for 2 of 5 classes, JPEG and PNG.
  WriteFile(dir / "classes.txt", "n01440764\nn01443537\r\nn01484850\n  n01491361  \nn01494475\n\n");
  WriteFile(dir / "imgs/n01491361/a.png", GrayPng(2, 2, 1));
  WriteFile(dir / "imgs/n01491361/b.png", GrayPng(2, 2, 2));
  WriteFile(dir / "imgs/n01443537/c.jpg", EncodeJpeg(2, 2, 1, std::vector<uint8_t>(4, 9)));
  DataOptions o;
  o.classes_path = (dir / "classes.txt").string();
  auto ds = OpenDataset((dir / "imgs").string(), o);
  ASSERT_TRUE(ds.ok()) << ds.error().message;
  // Sorted by path: n01443537 (line 1), then n01491361 (line 3) twice.
  EXPECT_EQ((*ds)->labels(), (std::vector<int64_t>{1, 3, 3}));
  EXPECT_EQ((*ds)->class_names().size(), 5u);
  EXPECT_EQ((*ds)->class_names()[3], "n01491361");
  EXPECT_EQ((*ds)->labels_source(), "class folders, class list " + o.classes_path);
  // Integer folder names go through the list too when one is given.
  WriteFile(dir / "numeric.txt", "x\n7\n3\n");
  WriteFile(dir / "num/3/a.png", GrayPng(1, 1, 0));
  WriteFile(dir / "num/7/a.png", GrayPng(1, 1, 0));
  o.classes_path = (dir / "numeric.txt").string();
  auto num = OpenDataset((dir / "num").string(), o);
  ASSERT_TRUE(num.ok()) << num.error().message;
  EXPECT_EQ((*num)->labels(), (std::vector<int64_t>{2, 1}));
  // A folder that is not in the list is an error naming it, with a hint when the
  // list's lines carry descriptions after the name.
  WriteFile(dir / "imgs/n99999999/d.png", GrayPng(2, 2, 3));
  o.classes_path = (dir / "classes.txt").string();
  ExpectError(OpenDataset((dir / "imgs").string(), o),
              {(dir / "imgs/n99999999").string(), "class folder 'n99999999' is not in the class list",
               "classes.txt (5 classes)"});
  WriteFile(dir / "synsets.txt", "n01440764 tench, Tinca tinca\nn01443537 goldfish\n");
  WriteFile(dir / "two/n01443537/a.png", GrayPng(1, 1, 0));
  o.classes_path = (dir / "synsets.txt").string();
  ExpectError(OpenDataset((dir / "two").string(), o),
              {"'n01443537' is not in the class list", "whole class names", "'n01443537 goldfish'"});
  // Bad lists name the file and line.
  const std::pair<std::string, std::vector<std::string>> bad[] = {
      {"a\n\nb\n", {"line 2 is empty"}},
      {"a\nb\na\n", {"line 3: class 'a' is already on line 1"}},
      {"\n \n", {"no class names"}},
  };
  for (const auto& [text, parts] : bad) {
    WriteFile(dir / "bad.txt", text);
    o.classes_path = (dir / "bad.txt").string();
    auto parts_with_file = parts;
    parts_with_file.push_back((dir / "bad.txt").string());
    ExpectError(OpenDataset((dir / "imgs").string(), o), parts_with_file);
  }
  o.classes_path = (dir / "missing.txt").string();
  ExpectError(OpenDataset((dir / "imgs").string(), o), {"missing.txt", "no such file (class list)"});
  // A class list needs class folders, and does not go with a labels file.
  o.classes_path = (dir / "classes.txt").string();
  ASSERT_TRUE(WriteNpy((dir / "x.npy").string(), Tensor(DType::kFloat32, {2, 3})).ok());
  ExpectError(OpenDataset((dir / "x.npy").string(), o), {"classes.txt", "x.npy", "not an image folder with class"});
  WriteFile(dir / "flat/a.png", GrayPng(1, 1, 0));
  ExpectError(OpenDataset((dir / "flat").string(), o), {"flat", "not an image folder with class sub-folders"});
  o.labels_path = (dir / "x.npy").string();
  ExpectError(OpenDataset((dir / "imgs").string(), o), {"classes.txt", "x.npy", "both given"});
}

TEST(ImageData, SortedPositionLabelsAreNotedOnceOnStderr) {
  const fs::path dir = TempDir();
  WriteFile(dir / "imgs/n02/a.png", GrayPng(1, 1, 0));
  WriteFile(dir / "imgs/n01/a.png", GrayPng(1, 1, 0));
  WriteFile(dir / "imgs/n03/a.png", GrayPng(1, 1, 0));
  WriteFile(dir / "num/4/a.png", GrayPng(1, 1, 0));
  testing::internal::CaptureStderr();
  auto first = OpenDataset((dir / "imgs").string());
  auto second = OpenDataset((dir / "imgs").string());  // the tuner opens a folder for several sets
  auto numeric = OpenDataset((dir / "num").string());
  const std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(first.ok() && second.ok() && numeric.ok());
  EXPECT_EQ((*first)->labels(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ((*numeric)->labels(), (std::vector<int64_t>{4}));  // integer names: no note
  EXPECT_EQ(err, "seqto: note: image folder '" + (dir / "imgs").string() +
                     "': labels are the class folders' sorted positions (n01 = 0, ..., n03 = 2); if the model's "
                     "classes are not exactly these folders, give a class list (--classes FILE; \"classes\" in a "
                     "tune config)\n");
}

TEST(ImageData, ColorFromTheModelInput) {
  const fs::path dir = TempDir();
  WriteFile(dir / "rgb/c/x.png", EncodePng(2, 1, PNG_COLOR_TYPE_RGB, 8, {100, 150, 200, 0, 0, 0}));
  DataOptions o;
  o.input_shape = Shape{-1, 1, 2, 2};  // gray model: RGB files become gray
  auto gray = OpenDataset((dir / "rgb").string(), o);
  ASSERT_TRUE(gray.ok());
  EXPECT_EQ((*(*gray)->Get(0))[0].shape(), (Shape{1, 1, 2}));
  EXPECT_EQ((*(*gray)->Get(0))[0].ToDoubles()[0], 141);
  o.input_shape = Shape{-1, 5, 7, 3};  // channels last
  auto nhwc = OpenDataset((dir / "rgb").string(), o);
  ASSERT_TRUE(nhwc.ok());
  EXPECT_EQ((*(*nhwc)->Get(0))[0].shape(), (Shape{1, 2, 3}));
  EXPECT_EQ((*(*nhwc)->Get(0))[0].ToDoubles(), (std::vector<double>{100, 150, 200, 0, 0, 0}));
}

TEST(ImageData, PngVariants) {
  // 16-bit gray: the high byte is kept.
  auto g16 = DecodeImage(EncodePng(2, 1, PNG_COLOR_TYPE_GRAY, 16, {0x12, 0x34, 0xAB, 0xCD}), 0, "g16.png");
  ASSERT_TRUE(g16.ok()) << g16.error().message;
  EXPECT_EQ(g16->channels, 1);
  EXPECT_EQ(g16->pixels, (std::vector<uint8_t>{0x12, 0xAB}));
  // Gray + alpha: alpha dropped.
  auto ga = DecodeImage(EncodePng(2, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, {50, 0, 60, 255}), 0, "ga.png");
  ASSERT_TRUE(ga.ok()) << ga.error().message;
  EXPECT_EQ(ga->pixels, (std::vector<uint8_t>{50, 60}));
  // RGBA: alpha dropped.
  auto rgba = DecodeImage(EncodePng(1, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8, {1, 2, 3, 4}), 0, "rgba.png");
  ASSERT_TRUE(rgba.ok()) << rgba.error().message;
  EXPECT_EQ(rgba->pixels, (std::vector<uint8_t>{1, 2, 3}));
  // Palette with transparency: expanded to RGB, transparency dropped.
  const std::vector<png_color> palette = {{10, 20, 30}, {40, 50, 60}};
  auto pal = DecodeImage(EncodePng(2, 1, PNG_COLOR_TYPE_PALETTE, 8, {1, 0}, palette, {0, 255}), 0, "pal.png");
  ASSERT_TRUE(pal.ok()) << pal.error().message;
  EXPECT_EQ(pal->channels, 3);
  EXPECT_EQ(pal->pixels, (std::vector<uint8_t>{40, 50, 60, 10, 20, 30}));
  // RGB JPEG decoded as RGB and as gray (Pillow's luma of the decoded RGB).
  std::vector<uint8_t> red(8 * 8 * 3);
  for (size_t i = 0; i < red.size(); i += 3) red[i] = 255;
  auto jrgb = DecodeImage(EncodeJpeg(8, 8, 3, red), 0, "red.jpg");
  ASSERT_TRUE(jrgb.ok()) << jrgb.error().message;
  EXPECT_EQ(jrgb->channels, 3);
  EXPECT_NEAR(jrgb->pixels[0], 254, 2);
  EXPECT_NEAR(jrgb->pixels[1], 0, 2);
  auto jgray = DecodeImage(EncodeJpeg(8, 8, 3, red), 1, "red.jpg");
  ASSERT_TRUE(jgray.ok());
  EXPECT_EQ(jgray->channels, 1);
  EXPECT_NEAR(jgray->pixels[0], 76, 2);  // (255 * 19595 + 32768) >> 16 = 76
}

TEST(ImageData, CorruptTruncatedAndMislabeledFiles) {
  const fs::path dir = TempDir();
  std::vector<uint8_t> noise(16 * 16 * 3);
  std::mt19937 rng(3);
  for (auto& v : noise) v = static_cast<uint8_t>(rng());
  const std::string png = EncodePng(16, 16, PNG_COLOR_TYPE_RGB, 8, noise);
  const std::string jpg = EncodeJpeg(16, 16, 3, noise, 90);
  // A PNG named .jpg decodes fine (the magic bytes decide).
  auto renamed = DecodeImage(png, 0, "really.jpg");
  EXPECT_TRUE(renamed.ok());
  ExpectError(DecodeImage(png.substr(0, png.size() / 2), 0, "half.png"), {"half.png", "corrupt PNG"});
  ExpectError(DecodeImage(png.substr(0, png.size() - 5), 0, "noend.png"), {"noend.png", "corrupt PNG"});
  std::string flipped = png;
  flipped[60] = static_cast<char>(flipped[60] ^ 0x55);  // inside IDAT: CRC or zlib error
  ExpectError(DecodeImage(flipped, 0, "flipped.png"), {"flipped.png", "corrupt PNG"});
  ExpectError(DecodeImage(jpg.substr(0, jpg.size() / 2), 0, "half.jpg"), {"half.jpg", "corrupt JPEG"});
  ExpectError(DecodeImage(jpg.substr(0, 20), 0, "head.jpg"), {"head.jpg", "corrupt JPEG"});
  ExpectError(DecodeImage("GIF89a....", 0, "x.png"), {"x.png", "not a PNG or JPEG"});
  ExpectError(DecodeImage("", 0, "empty.png"), {"empty.png", "empty file"});
  // A PNG header that claims a gigantic image.
  std::string huge = EncodePng(1, 1, PNG_COLOR_TYPE_GRAY, 8, {0});
  huge[16] = 0x7f;  // width's high byte (IHDR data starts at byte 16); the CRC no longer matches either
  ExpectError(DecodeImage(huge, 0, "huge.png"), {"huge.png"});
  // Through a dataset: the error names the file.
  WriteFile(dir / "set/a/good.png", png);
  WriteFile(dir / "set/a/bad.png", png.substr(0, 100));
  auto ds = OpenDataset((dir / "set").string());
  ASSERT_TRUE(ds.ok());
  ExpectError((*ds)->Get(0), {(dir / "set/a/bad.png").string(), "corrupt PNG"});
  EXPECT_TRUE((*ds)->Get(1).ok());
}

TEST(ImageData, FolderErrors) {
  const fs::path dir = TempDir();
  fs::create_directories(dir / "empty");
  ExpectError(OpenDataset((dir / "empty").string()), {"empty", "no images"});
  fs::create_directories(dir / "empty_classes/a");
  fs::create_directories(dir / "empty_classes/b");
  WriteFile(dir / "empty_classes/b/readme.txt", "x");
  ExpectError(OpenDataset((dir / "empty_classes").string()), {"empty_classes", "no images", "sub-folders"});
  WriteFile(dir / "mixed/a/1.png", GrayPng(1, 1, 0));
  WriteFile(dir / "mixed/loose.png", GrayPng(1, 1, 0));
  ExpectError(OpenDataset((dir / "mixed").string()), {"loose.png", "outside the class folders"});
  ExpectError(OpenDataset((dir / "nope").string()), {"nope", "no such file"});
  WriteFile(dir / "unknown.bin", "hello world");
  ExpectError(OpenDataset((dir / "unknown.bin").string()), {"unknown.bin", "unknown data format"});
  WriteFile(dir / "zero.bin", "");
  ExpectError(OpenDataset((dir / "zero.bin").string()), {"zero.bin", "empty file"});
  // Crop larger than the image: the error names the file.
  WriteFile(dir / "small/a.png", GrayPng(4, 4, 0));
  DataOptions o;
  o.preprocess = *ParsePreprocessSpec("crop=8");
  auto ds = OpenDataset((dir / "small").string(), o);
  ASSERT_TRUE(ds.ok());
  ExpectError((*ds)->Get(0), {"a.png", "crop 8x8 is larger than the image"});
}

// ---------------------------------------------------------------- ONNX test data

TEST(OnnxTestData, SetsSplitAlongTheFirstDimension) {
  const fs::path relu = kTestData / "node/test_relu";
  auto one = OpenDataset((relu / "test_data_set_0").string());
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_EQ((*one)->size(), 3);  // x: [3, 4, 5]
  EXPECT_EQ((*one)->input_names(), (std::vector<std::string>{"x"}));
  auto s = (*one)->Get(1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)[0].shape(), (Shape{4, 5}));
  // The model folder holding test_data_set_* gives the same samples.
  auto all = OpenDataset(relu.string());
  ASSERT_TRUE(all.ok()) << all.error().message;
  EXPECT_EQ((*all)->size(), 3);
  EXPECT_EQ((*(*all)->Get(2))[0].ToDoubles(), (*(*one)->Get(2))[0].ToDoubles());
  // Batching 3 samples of [4, 5] gives back the original input exactly.
  auto it = BatchIterator::Create(*all, SampleIndices(3, 0, 0), 8, {{"x", DType::kFloat32, Shape{3, 4, 5}}});
  ASSERT_TRUE(it.ok()) << it.error().message;
  Batch b;
  ASSERT_TRUE(*(*it)->Next(b));
  const auto original = onnxio::LoadTensorFile((relu / "test_data_set_0/input_0.pb").string());
  ASSERT_TRUE(original.ok());
  ASSERT_EQ(b.feeds.count("x"), 1u);
  EXPECT_EQ(b.feeds["x"].shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(b.feeds["x"].ToDoubles(), original->second.ToDoubles());
  // Two inputs, fed by name (whatever order the targets are listed in).
  auto add = OpenDataset((kTestData / "node/test_add").string());
  ASSERT_TRUE(add.ok()) << add.error().message;
  EXPECT_EQ((*add)->input_names(), (std::vector<std::string>{"x", "y"}));
  auto two = BatchIterator::Create(*add, {0, 1, 2}, 2,
                                   {{"y", DType::kFloat32, std::nullopt}, {"x", DType::kFloat32, std::nullopt}});
  ASSERT_TRUE(two.ok()) << two.error().message;
  ASSERT_TRUE(*(*two)->Next(b));
  EXPECT_EQ(b.feeds.size(), 2u);
  EXPECT_EQ(b.feeds["x"].shape(), (Shape{2, 4, 5}));
  ExpectError(BatchIterator::Create(*add, {0}, 1, {{"x", DType::kFloat32, std::nullopt}}),
              {"'y'", "model does not have"});
  ExpectError(BatchIterator::Create(*add, {0}, 1,
                                    {{"x", DType::kUndefined, std::nullopt},
                                     {"y", DType::kUndefined, std::nullopt},
                                     {"z", DType::kUndefined, std::nullopt}}),
              {"model input 'z' is not in the data"});
  DataOptions o;
  o.preprocess = *ParsePreprocessSpec("resize=3");
  ExpectError(OpenDataset(relu.string(), o), {"'resize' applies to images only"});
}

// ---------------------------------------------------------------- batching

TEST(Batching, StacksFitsConvertsAndCarriesLabels) {
  const fs::path dir = TempDir();
  std::vector<uint8_t> v(7 * 2 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint8_t>(i);
  ASSERT_TRUE(WriteNpy((dir / "x.npy").string(), Tensor::FromVector<uint8_t>({7, 2, 2}, v)).ok());
  ASSERT_TRUE(WriteNpy((dir / "y.npy").string(), Tensor::FromVector<int64_t>({7}, {0, 1, 2, 3, 4, 5, 6})).ok());
  DataOptions o;
  o.labels_path = (dir / "y.npy").string();
  auto ds = OpenDataset((dir / "x.npy").string(), o);
  ASSERT_TRUE(ds.ok());
  const std::vector<int64_t> indices = {0, 2, 3, 5, 6};
  auto it = BatchIterator::Create(*ds, indices, 2, {{"img", DType::kFloat32, Shape{-1, 1, 2, 2}}});
  ASSERT_TRUE(it.ok()) << it.error().message;
  EXPECT_EQ((*it)->num_batches(), 3);
  std::vector<int64_t> sizes, seen_labels;
  Batch b;
  while (true) {
    auto more = (*it)->Next(b);
    ASSERT_TRUE(more.ok()) << more.error().message;
    if (!*more) break;
    sizes.push_back(b.size());
    const Tensor& x = b.feeds.at("img");
    EXPECT_EQ(x.dtype(), DType::kFloat32);
    EXPECT_EQ(x.shape(), (Shape{b.size(), 1, 2, 2}));
    for (int64_t r = 0; r < b.size(); ++r) {
      seen_labels.push_back(b.labels[static_cast<size_t>(r)]);
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(x.data<float>()[r * 4 + k], static_cast<float>(b.indices[static_cast<size_t>(r)] * 4 + k));
    }
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(seen_labels, indices);
  EXPECT_TRUE(b.feeds.empty());
  // Reset, and the feeds callback (quant::BatchSource's shape).
  (*it)->Reset();
  std::shared_ptr<BatchIterator> shared = std::move(*it);
  FeedSource source = AsFeedSource(shared);
  std::map<std::string, Tensor> feeds;
  int batches = 0;
  while (*source(feeds)) {
    EXPECT_EQ(feeds.count("img"), 1u);
    ++batches;
  }
  EXPECT_EQ(batches, 3);
  // Without targets: the data's own shape and type, named input_0.
  auto raw = BatchIterator::Create(*ds, {1}, 4);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(*(*raw)->Next(b));
  EXPECT_EQ(b.feeds.at("input_0").Describe(), "uint8[1x2x2]");
  // Mismatches fail at creation, naming the sample and both shapes / types.
  ExpectError(BatchIterator::Create(*ds, indices, 2, {{"img", DType::kFloat32, Shape{-1, 3, 2, 2}}}),
              {"x.npy[0]", "sample shape 2x2", "'img'", "3x2x2 per sample"});
  ExpectError(BatchIterator::Create(*ds, indices, 2, {{"img", DType::kInt64, std::nullopt}}), {"uint8", "int64"});
  ExpectError(BatchIterator::Create(*ds, indices, 2,
                                    {{"a", DType::kUndefined, std::nullopt}, {"b", DType::kUndefined, std::nullopt}}),
              {"2 inputs", "'a'", "'b'", "gives 1"});
  ExpectError(BatchIterator::Create(*ds, indices, 0), {"batch size"});
}

TEST(Batching, NonFiniteSamplesAreAnErrorNamingTheSample) {
  const fs::path dir = TempDir();
  Tensor t = Tensor::FromVector<float>({3, 2}, {1, 2, 3, 4, 5, 6});
  t.data<float>()[3] = std::nanf("");
  t.data<float>()[4] = -INFINITY;
  ASSERT_TRUE(WriteNpy((dir / "x.npy").string(), t).ok());
  auto ds = OpenDataset((dir / "x.npy").string());
  ASSERT_TRUE(ds.ok()) << ds.error().message;
  auto it = BatchIterator::Create(*ds, {0, 1, 2}, 3, {});
  ASSERT_TRUE(it.ok()) << it.error().message;  // the first sample is finite
  Batch b;
  ExpectError((*it)->Next(b), {(dir / "x.npy").string() + "[1]", "element 1 is NaN", "must be finite"});
  auto from_two = BatchIterator::Create(*ds, {2}, 1, {});
  ExpectError(from_two, {"x.npy[2]: element 0 is -inf"});
  Tensor d = Tensor::FromVector<double>({1, 2}, {0, INFINITY});
  ASSERT_TRUE(WriteNpy((dir / "d.npy").string(), d).ok());
  ExpectError(BatchIterator::Create(*OpenDataset((dir / "d.npy").string()), {0}, 1, {}),
              {"d.npy[0]: element 1 is +inf"});
}

TEST(Batching, ImagesOfDifferentSizesInOneBatch) {
  const fs::path dir = TempDir();
  WriteFile(dir / "f/a.png", GrayPng(2, 2, 0));
  WriteFile(dir / "f/b.png", GrayPng(3, 2, 0));
  auto ds = OpenDataset((dir / "f").string());
  ASSERT_TRUE(ds.ok());
  auto it = BatchIterator::Create(*ds, {0, 1}, 2);
  ASSERT_TRUE(it.ok());
  Batch b;
  ExpectError((*it)->Next(b), {"b.png", "differs", "resize"});
  // Resized to a common size they batch fine.
  DataOptions o;
  o.preprocess = *ParsePreprocessSpec("resize=2x2");
  auto fixed = OpenDataset((dir / "f").string(), o);
  ASSERT_TRUE(fixed.ok());
  auto it2 = BatchIterator::Create(*fixed, {0, 1}, 2);
  ASSERT_TRUE(it2.ok());
  ASSERT_TRUE(*(*it2)->Next(b));
  EXPECT_EQ(b.feeds.at("input_0").shape(), (Shape{2, 1, 2, 2}));
}

}  // namespace
}  // namespace seqto::data
