// Preprocessing: the spec parsers (string and JSON give the same spec; errors name
// the key), Pillow-exact bilinear resize (hand-computed cases and goldens produced
// by Pillow 9.4.0), and the whole image pipeline on a tiny PNG written here with
// libpng, checked pixel by pixel against hand-computed values.
#include "data/preprocess.h"

#include <gtest/gtest.h>
#include <png.h>

#include <nlohmann/json.hpp>

#include "data/image_decode.h"

namespace seqto::data {
namespace {

// ---------------------------------------------------------------- parsing

TEST(PreprocessParse, FullSpec) {
  auto s = ParsePreprocessSpec(
      "resize=256,crop=224,scale=0.00392157,mean=0.485:0.456:0.406,std=0.229:0.224:0.225,"
      "color=bgr,layout=nhwc");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->resize_short, 256);
  EXPECT_EQ(s->resize_h, 0);
  EXPECT_EQ(s->crop_h, 224);
  EXPECT_EQ(s->crop_w, 224);
  EXPECT_DOUBLE_EQ(s->scale, 0.00392157);
  EXPECT_EQ(s->mean, (std::vector<double>{0.485, 0.456, 0.406}));
  EXPECT_EQ(s->std, (std::vector<double>{0.229, 0.224, 0.225}));
  EXPECT_EQ(s->color, ColorMode::kBgr);
  EXPECT_EQ(s->layout, Layout::kNhwc);
  // The canonical string parses back to the same spec.
  auto again = ParsePreprocessSpec(s->ToString());
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_TRUE(*again == *s) << s->ToString() << " vs " << again->ToString();
}

TEST(PreprocessParse, ExactResizeAndRectangularCrop) {
  auto s = ParsePreprocessSpec(" resize = 224x200 , crop=100x50 ");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->resize_short, 0);
  EXPECT_EQ(s->resize_h, 224);
  EXPECT_EQ(s->resize_w, 200);
  EXPECT_EQ(s->crop_h, 100);
  EXPECT_EQ(s->crop_w, 50);
  EXPECT_FALSE(s->has("scale"));
  EXPECT_EQ(s->ToString(), "resize=224x200,crop=100x50");
  auto empty = ParsePreprocessSpec("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->keys.empty());
  EXPECT_EQ(empty->scale, 1.0);
  EXPECT_EQ(empty->color, ColorMode::kAuto);
}

TEST(PreprocessParse, JsonGivesTheSameSpecAsTheString) {
  const auto text = ParsePreprocessSpec(
      "resize=256,crop=224x200,scale=0.00392157,mean=0.485:0.456:0.406,std=0.5,color=rgb,layout=nchw");
  ASSERT_TRUE(text.ok()) << text.error().message;
  const auto j = nlohmann::json::parse(R"({"resize": 256, "crop": [224, 200], "scale": 0.00392157,
      "mean": [0.485, 0.456, 0.406], "std": 0.5, "color": "rgb", "layout": "nchw"})");
  const auto from_json = ParsePreprocessJson(j);
  ASSERT_TRUE(from_json.ok()) << from_json.error().message;
  EXPECT_TRUE(*from_json == *text) << from_json->ToString() << " vs " << text->ToString();
  // Spec strings inside JSON work too.
  const auto strings = ParsePreprocessJson(nlohmann::json::parse(
      R"({"layout": "nchw", "color": "rgb", "std": "0.5", "mean": "0.485:0.456:0.406", "scale": "0.00392157",
          "crop": "224x200", "resize": "256"})"));
  ASSERT_TRUE(strings.ok()) << strings.error().message;
  EXPECT_TRUE(*strings == *text);
  // The Fashion-MNIST example's spec (examples/fashion-mnist/metrics.json).
  const auto fm = ParsePreprocessJson(nlohmann::json::parse(R"({"scale": 0.00392157, "mean": 0.2860, "std": 0.3530,
      "color": "gray", "layout": "nchw"})"));
  const auto fm_text = ParsePreprocessSpec("scale=0.00392157,mean=0.2860,std=0.3530,color=gray,layout=nchw");
  ASSERT_TRUE(fm.ok() && fm_text.ok());
  EXPECT_TRUE(*fm == *fm_text);
  EXPECT_NE(*fm, *text);
}

void ExpectParseError(const std::string& spec, const std::vector<std::string>& parts) {
  const auto s = ParsePreprocessSpec(spec);
  ASSERT_FALSE(s.ok()) << spec;
  EXPECT_EQ(s.error().kind, ErrorKind::kUser);
  for (const auto& p : parts) EXPECT_NE(s.error().message.find(p), std::string::npos) << s.error().message;
}

TEST(PreprocessParse, ErrorsNameTheKey) {
  ExpectParseError("resize=256,frobnicate=3", {"unknown preprocess key 'frobnicate'", "resize, crop, scale"});
  ExpectParseError("frobnicate", {"unknown preprocess key 'frobnicate'"});
  ExpectParseError("resize", {"'resize'", "missing value"});
  ExpectParseError("resize=", {"'resize'", "missing value"});
  ExpectParseError("resize=0", {"'resize'", "'0' is not a size"});
  ExpectParseError("resize=abc", {"'resize'"});
  ExpectParseError("resize=224x", {"'resize'", "HxW"});
  ExpectParseError("resize=99999999", {"'resize'"});
  ExpectParseError("crop=-3", {"'crop'"});
  ExpectParseError("scale=nan", {"'scale'", "not a number"});
  ExpectParseError("scale=1e999", {"'scale'"});
  ExpectParseError("mean=0.5:x", {"'mean'", "'x'"});
  ExpectParseError("std=0.5:0", {"'std'", "0 is not allowed"});
  ExpectParseError("color=purple", {"'color'", "rgb, bgr, gray"});
  ExpectParseError("layout=nhcw", {"'layout'", "nchw, nhwc"});
  ExpectParseError("scale=1,scale=2", {"'scale'", "twice"});
  ExpectParseError("scale=1,,std=2", {"empty item"});
  const auto j = ParsePreprocessJson(nlohmann::json::parse(R"({"scale": 1, "rezise": 256})"));
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.error().message.find("unknown preprocess key 'rezise'"), std::string::npos) << j.error().message;
  const auto bad = ParsePreprocessJson(nlohmann::json::parse(R"({"mean": [0.5, "x"]})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("'mean'"), std::string::npos);
  EXPECT_FALSE(ParsePreprocessJson(nlohmann::json::parse("[1, 2]")).ok());
}

// ---------------------------------------------------------------- resize

Image Gray(int64_t w, int64_t h, std::vector<uint8_t> px) { return Image{w, h, 1, std::move(px)}; }

TEST(PreprocessResize, UpscaleIsHalfPixelBilinearWithClampedEdges) {
  // One row 4 -> 8 (scale 0.5, support 1). Output x samples the source at
  // (x + 0.5) / 2 - 0.5: x=0 -> -0.25 (clamped: in0), x=1 -> 0.25 (0.75 in0 + 0.25 in1),
  // x=2 -> 0.75, x=3 -> 1.25, ..., x=7 -> 3.25 (clamped: in3). Results are rounded half up.
  const Image in = Gray(4, 1, {10, 20, 60, 100});
  const Image out = ResizeBilinear(in, 1, 8);
  const std::vector<uint8_t> expected = {10,    // in0
                                         13,    // 0.75*10 + 0.25*20 = 12.5 -> 13 (half up)
                                         18,    // 0.25*10 + 0.75*20 = 17.5 -> 18
                                         30,    // 0.75*20 + 0.25*60
                                         50,    // 0.25*20 + 0.75*60
                                         70,    // 0.75*60 + 0.25*100
                                         90,    // 0.25*60 + 0.75*100
                                         100};  // in3
  EXPECT_EQ(out.pixels, expected);
  EXPECT_EQ(out.width, 8);
  EXPECT_EQ(out.height, 1);
}

TEST(PreprocessResize, DownscaleAntialiasesWithPillowsWindow) {
  // 4 -> 2 (scale 2, support 2): output 0 has center 1.0 and taps 0..2 with triangle
  // weights 0.75, 0.75, 0.25 (normalized: 3/7, 3/7, 1/7); output 1 has center 3.0,
  // taps 1..3 with 1/7, 3/7, 3/7 (tap 4 is outside and dropped).
  const Image in = Gray(4, 1, {0, 70, 140, 210});
  const Image out = ResizeBilinear(in, 1, 2);
  // 3/7*0 + 3/7*70 + 1/7*140 = 50; 1/7*70 + 3/7*140 + 3/7*210 = 160.
  EXPECT_EQ(out.pixels, (std::vector<uint8_t>{50, 160}));
  // Vertical passes use the same coefficients.
  const Image col = ResizeBilinear(Gray(1, 4, {0, 70, 140, 210}), 2, 1);
  EXPECT_EQ(col.pixels, (std::vector<uint8_t>{50, 160}));
}

std::vector<uint8_t> Parse(const std::string& csv) {
  std::vector<uint8_t> v;
  size_t pos = 0;
  while (pos < csv.size()) {
    size_t comma = csv.find(',', pos);
    if (comma == std::string::npos) comma = csv.size();
    v.push_back(static_cast<uint8_t>(std::stoi(csv.substr(pos, comma - pos))));
    pos = comma + 1;
  }
  return v;
}

// Goldens from Pillow 9.4.0:
//   img = np.random.RandomState(7).randint(0, 256, size=(5, 7, 3), dtype=np.uint8)
//   np.asarray(Image.fromarray(img, "RGB").resize((w, h), Image.BILINEAR))
//   g = Image.fromarray(img, "RGB").convert("L"); g.resize((3, 3), Image.BILINEAR)
const char* kSrc =
    "175,240,136,19,196,228,50,58,25,194,168,199,246,41,168,81,67,150,59,112,211,208,108,250,151,3,53,185,103,54,161,"
    "116,92,133,93,250,185,236,217,78,142,221,218,137,23,10,141,67,72,110,73,128,89,209,52,22,110,241,113,18,42,250,91,"
    "107,218,106,184,68,136,179,18,4,167,76,248,127,230,151,27,135,68,4,226,173,176,197,105,222,127,215,193,205,135,"
    "225,"
    "177,84,172,91,133,97,0,222,151,100,75";

TEST(PreprocessResize, MatchesPillowGoldens) {
  const Image src{7, 5, 3, Parse(kSrc)};
  ASSERT_EQ(src.pixels.size(), 105u);
  struct Case {
    int64_t h, w;
    const char* expected;
  };
  const Case cases[] = {
      {4, 3,
       "106,152,145,157,108,144,115,102,188,145,92,94,134,98,129,133,159,158,131,120,79,130,94,144,77,169,98,188,"
       "155,144,186,138,130,109,88,143"},
      {2, 11,
       "195,162,156,142,133,137,82,97,110,106,90,65,133,100,88,164,125,160,155,87,178,152,89,176,157,142,148,105,"
       "156,167,60,161,186,159,188,93,157,148,115,156,100,135,158,102,85,166,106,106,176,113,180,144,125,155,120,"
       "121,133,107,95,115,82,144,119,63,188,125"},
      {5, 2,
       "104,155,148,135,86,167,172,75,115,145,151,195,92,115,85,121,114,92,160,99,115,81,161,136,202,167,144,155,"
       "87,140"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::to_string(c.h) + "x" + std::to_string(c.w));
    const Image out = ResizeBilinear(src, c.h, c.w);
    EXPECT_EQ(out.pixels, Parse(c.expected));
  }
  // 9x7: only the vertical pass runs (width unchanged).
  const Image tall = ResizeBilinear(src, 9, 7);
  const auto tall_expected = Parse(
      "175,240,136,19,196,228,50,58,25,194,168,199,246,41,168,81,67,150,59,112,211,186,196,174,63,132,170,95,73,35,183,"
      "151,163,208,58,195,116,123,172,65,122,214,204,123,237,136,24,72,170,98,51,165,122,104,146,87,241,173,217,210,76,"
      "139,220,212,121,149,88,64,59,135,106,62,146,104,144,97,61,188,210,181,129,62,190,163,218,137,23,10,141,67,72,"
      "110,"
      "73,128,89,209,52,22,110,241,113,18,42,250,91,156,182,69,107,100,105,131,59,35,150,82,231,94,138,133,122,125,46,"
      "21,237,137,115,216,106,188,75,145,181,39,19,173,87,230,132,215,149,35,120,85,20,212,162,153,204,105,209,107,189,"
      "188,143,91,206,143,139,157,137,139,74,45,171,102,142,108,176,197,105,222,127,215,193,205,135,225,177,84,172,91,"
      "133,97,0,222,151,100,75");
  EXPECT_EQ(tall.pixels, tall_expected);
  // Gray conversion (Pillow's convert("L")) through the decoder's path, then a resize.
  const std::vector<uint8_t> gray = Parse(
      "209,147,52,179,117,81,107,154,53,122,127,123,219,132,148,93,94,114,41,140,170,172,110,65,123,190,95,154,180,165,"
      "193,181,120,54,112");
  const Image g = ResizeBilinear(Gray(7, 5, gray), 3, 3);
  EXPECT_EQ(g.pixels, Parse("130,127,128,113,106,140,153,145,109"));
}

TEST(PreprocessResize, ShorterSideFollowsTorchvision) {
  PreprocessSpec s;
  s.resize_short = 256;
  int64_t h = 0, w = 0;
  ResizedSize(s, 375, 500, h, w);  // landscape: H is shorter
  EXPECT_EQ(h, 256);
  EXPECT_EQ(w, 341);               // int(256 * 500 / 375) = int(341.33)
  ResizedSize(s, 500, 333, h, w);  // portrait
  EXPECT_EQ(w, 256);
  EXPECT_EQ(h, 384);  // int(256 * 500 / 333) = int(384.38)
  s.resize_short = 0;
  s.resize_h = 10;
  s.resize_w = 20;
  ResizedSize(s, 500, 333, h, w);
  EXPECT_EQ(h, 10);
  EXPECT_EQ(w, 20);
}

// ---------------------------------------------------------------- whole pipeline

// Encodes an 8-bit PNG in memory with libpng.
std::string EncodePng(int w, int h, int channels, const std::vector<uint8_t>& px) {
  std::string out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep data, png_size_t n) {
        static_cast<std::string*>(png_get_io_ptr(p))->append(reinterpret_cast<char*>(data), n);
      },
      nullptr);
  png_set_IHDR(png, info, w, h, 8, channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < h; ++y) png_write_row(png, const_cast<png_bytep>(&px[static_cast<size_t>(y * w * channels)]));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// The 4x3 test image: value 40x + 4y at column x, row y (and other channels for RGB).
// Resize to shorter side 6 gives 6 rows x 8 columns (int(6 * 4 / 3) = 8). Both passes
// are exact on this image (see UpscaleIsHalfPixelBilinearWithClampedEdges):
//   columns 4 -> 8:  H = 40x at x = 0, 0.25, 0.75, ..., 3  ->  0, 10, 30, 50, 70, 90, 110, 120
//   rows    3 -> 6:  V = 4y  at y = 0, 0.25, 0.75, ..., 2  ->  0, 1, 3, 5, 7, 8
// so the resized pixel is H[x'] + V[y']. crop=4: top = round((6-4)/2) = 1,
// left = round((8-4)/2) = 2, keeping H = 30, 50, 70, 90 and V = 1, 3, 5, 7.
const int kH[4] = {30, 50, 70, 90};
const int kV[4] = {1, 3, 5, 7};

TEST(PreprocessPipeline, TinyGrayPngByHand) {
  std::vector<uint8_t> px;
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x) px.push_back(static_cast<uint8_t>(40 * x + 4 * y));
  const std::string png = EncodePng(4, 3, 1, px);
  auto image = DecodeImage(png, 1, "tiny.png");
  ASSERT_TRUE(image.ok()) << image.error().message;
  EXPECT_EQ(image->pixels, px);
  auto spec = ParsePreprocessSpec("resize=6,crop=4,scale=0.5,mean=5,std=2,color=gray,layout=nchw");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  auto t = PreprocessImage(*image, *spec);
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_EQ(t->shape(), (Shape{1, 4, 4}));
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x)
      EXPECT_FLOAT_EQ(t->data<float>()[y * 4 + x], ((kH[x] + kV[y]) * 0.5f - 5.f) / 2.f) << x << "," << y;
}

TEST(PreprocessPipeline, TinyRgbPngBgrNhwcPerChannel) {
  // R = 40x + 4y, G = 100 (constant), B = 200 - (40x + 4y): every pass stays exact.
  std::vector<uint8_t> px;
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 4; ++x) {
      const int v = 40 * x + 4 * y;
      px.insert(px.end(), {static_cast<uint8_t>(v), 100, static_cast<uint8_t>(200 - v)});
    }
  const std::string png = EncodePng(4, 3, 3, px);
  auto image = DecodeImage(png, 3, "tiny.png");
  ASSERT_TRUE(image.ok()) << image.error().message;
  // mean/std are given in output channel order (B, G, R for bgr).
  auto spec = ParsePreprocessSpec("resize=6,crop=4,scale=1,mean=1:2:3,std=2:4:8,color=bgr,layout=nhwc");
  ASSERT_TRUE(spec.ok()) << spec.error().message;
  auto t = PreprocessImage(*image, *spec);
  ASSERT_TRUE(t.ok()) << t.error().message;
  ASSERT_EQ(t->shape(), (Shape{4, 4, 3}));
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) {
      const float r = static_cast<float>(kH[x] + kV[y]), g = 100, b = 200 - r;
      const float* p = &t->data<float>()[(y * 4 + x) * 3];
      EXPECT_FLOAT_EQ(p[0], (b - 1) / 2) << x << "," << y;
      EXPECT_FLOAT_EQ(p[1], (g - 2) / 4) << x << "," << y;
      EXPECT_FLOAT_EQ(p[2], (r - 3) / 8) << x << "," << y;
    }
  // The same image as RGB, NCHW, no resize: plain planes.
  auto plain = PreprocessImage(*image, *ParsePreprocessSpec("color=rgb"));
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->shape(), (Shape{3, 3, 4}));
  EXPECT_FLOAT_EQ(plain->data<float>()[0 * 12 + 1 * 4 + 2], 84.f);   // R at y=1, x=2: 80 + 4
  EXPECT_FLOAT_EQ(plain->data<float>()[1 * 12 + 2 * 4 + 3], 100.f);  // G
  EXPECT_FLOAT_EQ(plain->data<float>()[2 * 12 + 0 * 4 + 1], 160.f);  // B at y=0, x=1: 200 - 40
}

TEST(PreprocessPipeline, RgbToGrayIsPillowsLuma) {
  // (100*19595 + 150*38470 + 200*7471 + 32768) >> 16 = 9256968 >> 16 = 141.
  const std::string png = EncodePng(1, 1, 3, {100, 150, 200});
  auto gray = DecodeImage(png, 1, "px.png");
  ASSERT_TRUE(gray.ok()) << gray.error().message;
  ASSERT_EQ(gray->channels, 1);
  EXPECT_EQ(gray->pixels, (std::vector<uint8_t>{141}));
  // And a gray file decoded as RGB replicates the value.
  auto rgb = DecodeImage(EncodePng(1, 1, 1, {77}), 3, "g.png");
  ASSERT_TRUE(rgb.ok());
  EXPECT_EQ(rgb->pixels, (std::vector<uint8_t>{77, 77, 77}));
}

TEST(PreprocessPipeline, CenterCropRoundsHalfToEven) {
  // A 1x7 row cropped to width 2: left = round((7 - 2) / 2) = round(2.5) = 2 (Python's round).
  const Image row = Gray(7, 1, {0, 1, 2, 3, 4, 5, 6});
  auto t = PreprocessImage(row, *ParsePreprocessSpec("crop=1x2"));
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->ToDoubles(), (std::vector<double>{2, 3}));
  // Width 8 to 3: round(2.5) = 2 as well; width 9 to 2: round(3.5) = 4.
  auto t8 = PreprocessImage(Gray(8, 1, {0, 1, 2, 3, 4, 5, 6, 7}), *ParsePreprocessSpec("crop=1x3"));
  ASSERT_TRUE(t8.ok());
  EXPECT_EQ(t8->ToDoubles(), (std::vector<double>{2, 3, 4}));
  auto t9 = PreprocessImage(Gray(9, 1, {0, 1, 2, 3, 4, 5, 6, 7, 8}), *ParsePreprocessSpec("crop=1x2"));
  ASSERT_TRUE(t9.ok());
  EXPECT_EQ(t9->ToDoubles(), (std::vector<double>{4, 5}));
}

TEST(PreprocessPipeline, Errors) {
  const Image img = Gray(4, 3, std::vector<uint8_t>(12, 0));
  auto big = PreprocessImage(img, *ParsePreprocessSpec("crop=5"));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.error().message.find("crop 5x5 is larger than the image (3x4)"), std::string::npos)
      << big.error().message;
  auto mean = PreprocessImage(img, *ParsePreprocessSpec("mean=1:2:3"));
  ASSERT_FALSE(mean.ok());
  EXPECT_NE(mean.error().message.find("preprocess key 'mean': has 3 values, but the data has 1 channel"),
            std::string::npos)
      << mean.error().message;
}

TEST(PreprocessTensorTest, ScaleMeanStdPerChannel) {
  // Sample [2, 1, 3] (C, H, W): channel c gets (x*scale - mean[c]) / std[c].
  const Tensor t = Tensor::FromVector<uint8_t>({2, 1, 3}, {0, 10, 20, 30, 40, 50});
  auto p = PreprocessTensor(t, *ParsePreprocessSpec("scale=0.1,mean=1:2,std=0.5:2"), 0);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->dtype(), DType::kFloat32);
  const std::vector<double> expected = {-2, 0, 2, 0.5, 1, 1.5};
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(p->ToDoubles()[i], expected[i], 1e-6) << i;
  // Channels last ([1, 3, 2] with C = 2 on the last axis).
  const Tensor hwc = Tensor::FromVector<float>({1, 3, 2}, {0, 30, 10, 40, 20, 50});
  auto q = PreprocessTensor(hwc, *ParsePreprocessSpec("scale=0.1,mean=1:2,std=0.5:2,layout=nhwc"), 2);
  ASSERT_TRUE(q.ok());
  const std::vector<double> expected_hwc = {-2, 0.5, 0, 1, 2, 1.5};
  for (size_t i = 0; i < expected_hwc.size(); ++i) EXPECT_NEAR(q->ToDoubles()[i], expected_hwc[i], 1e-6) << i;
  // Without scale/mean/std the sample is untouched (same dtype, same storage).
  auto same = PreprocessTensor(t, *ParsePreprocessSpec("layout=nchw"), 0);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->dtype(), DType::kUInt8);
  EXPECT_EQ(same->raw(), t.raw());
  // A channel count that mean does not fit.
  auto bad = PreprocessTensor(t, *ParsePreprocessSpec("mean=1:2:3"), 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("preprocess key 'mean': has 3 values, but the data has 2 channels"),
            std::string::npos);
}

}  // namespace
}  // namespace seqto::data
