// End-to-end tests of `seqto eval`: the bundled Fashion-MNIST models reproduce the
// accuracy in examples/fashion-mnist/metrics.json from the Debian package's idx files
// and from a folder of PNGs written here (class sub-folders), with identical
// predictions; agreement with a reference model; the seeded subset; and bad input
// (corrupt images, wrong shapes, missing or short labels, empty folders, unknown
// preprocess keys), each one error line naming the file or key, exit 1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "core/npy.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
const fs::path kSource = SEQTO_SOURCE_DIR;
const fs::path kExample = kSource / "examples/fashion-mnist";
const fs::path kFashion = "/usr/share/datasets/fashion-mnist";
const std::string kSpec = "scale=0.00392157,mean=0.2860,std=0.3530,color=gray,layout=nchw";

// The decompressed bytes of a .gz file (gzip is part of every Debian system).
std::string Gunzip(const fs::path& p) {
  std::string out;
  FILE* f = popen(("gzip -dc '" + p.string() + "'").c_str(), "r");
  if (!f) return out;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  pclose(f);
  return out;
}

// ---------------------------------------------------------------- fixture

class EvalCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::path(::testing::TempDir()) / ("seqto_eval_fm_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    const std::string labels = Gunzip(kFashion / "t10k-labels-idx1-ubyte.gz");
    if (labels.size() != 8 + 10000) return;  // the tests that need labels then fail
    for (int i = 0; i < 10000; ++i) labels_.push_back(static_cast<unsigned char>(labels[8 + i]));
  }
  // The test set as PNGs in class sub-folders 0..9, file names in test-set order
  // (written on first use).
  static fs::path PngFolder() {
    const fs::path dir = root_ / "png";
    if (fs::exists(dir)) return dir;
    const std::string images = Gunzip(kFashion / "t10k-images-idx3-ubyte.gz");
    if (images.size() != 16 + 10000 * 784 || labels_.size() != 10000) return dir;  // the test then fails
    for (int i = 0; i < 10000; ++i) {
      char name[32];
      std::snprintf(name, sizeof(name), "%05d.png", i);
      WriteFile(dir / std::to_string(labels_[static_cast<size_t>(i)]) / name,
                GrayPng(28, 28, reinterpret_cast<const unsigned char*>(images.data()) + 16 + i * 784));
    }
    return dir;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static double MetricsTop1(const std::string& model) {
    const auto m = nlohmann::json::parse(ReadFile(kExample / "metrics.json"));
    return m[model]["top1"].get<double>() * 100.0;  // metrics.json stores a fraction
  }

  // Runs eval with --json and returns the parsed JSON (empty on failure).
  static nlohmann::json Eval(std::vector<std::string> args, const fs::path& json, double* seconds = nullptr) {
    args.insert(args.begin(), "eval");
    args.insert(args.end(), {"--json", json.string()});
    const auto t0 = std::chrono::steady_clock::now();
    const Result r = RunSeqto(args, std::chrono::seconds(600));
    if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(r.exit_code, 0) << Describe(args, r);
    if (r.exit_code != 0) return {};
    return nlohmann::json::parse(ReadFile(json));
  }

  static std::vector<int64_t> Predictions(const fs::path& npy) {
    auto t = ReadNpy(npy.string());
    EXPECT_TRUE(t.ok()) << npy;
    if (!t.ok()) return {};
    EXPECT_EQ(t->dtype(), DType::kInt64);
    return t->ToInt64s();
  }

  static fs::path root_;
  static std::vector<int> labels_;
};
fs::path EvalCli::root_;
std::vector<int> EvalCli::labels_;

TEST_F(EvalCli, FashionMnistFromIdxFilesReproducesMetrics) {
  const fs::path dir = TempDir();
  for (const std::string model : {"mobilenetv2", "resnet"}) {
    SCOPED_TRACE(model);
    double seconds = 0;
    const auto j = Eval({(kExample / (model + ".onnx")).string(), "--data",
                         (kFashion / "t10k-images-idx3-ubyte.gz").string(), "--preprocess", kSpec, "--batch", "250",
                         "--threads", "1", "--save-predictions", (dir / (model + ".npy")).string()},
                        dir / (model + ".json"), &seconds);
    ASSERT_FALSE(j.is_null());
    std::printf("[ info ] %s idx: top-1 %.2f%% (metrics.json %.2f%%), %.1f s\n", model.c_str(),
                j["accuracy"]["top1"].get<double>(), MetricsTop1(model), seconds);
    EXPECT_NEAR(j["accuracy"]["top1"].get<double>(), MetricsTop1(model), 0.1);
    EXPECT_EQ(j["samples"], 10000);
    EXPECT_EQ(j["model"], (kExample / (model + ".onnx")).string());
    EXPECT_GT(j["accuracy"]["top5"].get<double>(), j["accuracy"]["top1"].get<double>());
    EXPECT_LE(j["accuracy"]["top5"].get<double>(), 100.0);
    EXPECT_NE(j["labels"].get<std::string>().find("t10k-labels-idx1-ubyte.gz"), std::string::npos);
    for (const char* k : {"mean", "p50", "p95"}) EXPECT_GT(j["latency_ms"][k].get<double>(), 0.0) << k;
    EXPECT_FALSE(j.contains("agreement"));
    // The saved predictions give the reported accuracy.
    const auto pred = Predictions(dir / (model + ".npy"));
    ASSERT_EQ(pred.size(), 10000u);
    ASSERT_EQ(labels_.size(), 10000u);
    int correct = 0;
    for (size_t i = 0; i < pred.size(); ++i) correct += pred[i] == labels_[i];
    EXPECT_DOUBLE_EQ(correct / 100.0, j["accuracy"]["top1"].get<double>());
  }
}

TEST_F(EvalCli, FashionMnistFromPngFolderGivesTheSamePredictions) {
  const fs::path dir = TempDir();
  const fs::path png_dir = PngFolder();
  ASSERT_TRUE(fs::exists(png_dir / "9")) << "the PNG folder was not written";
  for (const std::string model : {"mobilenetv2", "resnet"}) {
    SCOPED_TRACE(model);
    const std::string onnx = (kExample / (model + ".onnx")).string();
    double seconds = 0;
    const auto j = Eval({onnx, "--data", png_dir.string(), "--preprocess", kSpec, "--batch", "250", "--threads", "1",
                         "--save-predictions", (dir / (model + "_png.npy")).string()},
                        dir / (model + ".json"), &seconds);
    ASSERT_FALSE(j.is_null());
    std::printf("[ info ] %s png: top-1 %.2f%% (metrics.json %.2f%%), %.1f s\n", model.c_str(),
                j["accuracy"]["top1"].get<double>(), MetricsTop1(model), seconds);
    EXPECT_NEAR(j["accuracy"]["top1"].get<double>(), MetricsTop1(model), 0.1);
    EXPECT_EQ(j["samples"], 10000);
    EXPECT_EQ(j["labels"], "class folders");
    // Same images, same preprocessing: the predictions equal the idx run's. The
    // folder holds the images by class, so map them back to test-set order.
    ASSERT_FALSE(Eval({onnx, "--data", (kFashion / "t10k-images-idx3-ubyte.gz").string(), "--preprocess", kSpec,
                       "--batch", "500", "--threads", "1", "--save-predictions", (dir / (model + "_idx.npy")).string()},
                      dir / "idx.json")
                     .is_null());
    const auto png = Predictions(dir / (model + "_png.npy")), idx = Predictions(dir / (model + "_idx.npy"));
    ASSERT_EQ(png.size(), 10000u);
    ASSERT_EQ(idx.size(), 10000u);
    std::vector<int64_t> png_in_test_order(10000);
    size_t k = 0;
    for (int c = 0; c < 10; ++c)
      for (int i = 0; i < 10000; ++i)
        if (labels_[static_cast<size_t>(i)] == c) png_in_test_order[static_cast<size_t>(i)] = png[k++];
    EXPECT_EQ(png_in_test_order, idx);
  }
  // Without --preprocess color/layout the model input (1 channel, NCHW) decides.
  const auto auto_color = Eval({(kExample / "resnet.onnx").string(), "--data", png_dir.string(), "--preprocess",
                                "scale=0.00392157,mean=0.2860,std=0.3530", "--samples", "1000", "--threads", "1"},
                               dir / "auto.json");
  ASSERT_FALSE(auto_color.is_null());
  EXPECT_EQ(auto_color["samples"], 1000);
  EXPECT_GT(auto_color["accuracy"]["top1"].get<double>(), 85.0);
}

TEST_F(EvalCli, AgreementWithAReferenceModel) {
  const fs::path dir = TempDir();
  const std::string data = (kFashion / "t10k-images-idx3-ubyte.gz").string();
  const std::string mobilenet = (kExample / "mobilenetv2.onnx").string(), resnet = (kExample / "resnet.onnx").string();
  const auto self = Eval({mobilenet, "--data", data, "--preprocess", kSpec, "--reference", mobilenet, "--samples",
                          "500", "--threads", "1"},
                         dir / "self.json");
  ASSERT_FALSE(self.is_null());
  EXPECT_EQ(self["reference"], mobilenet);
  EXPECT_EQ(self["agreement"]["top1"], 100.0);
  EXPECT_EQ(self["agreement"]["top1_disagreement"], 0.0);
  EXPECT_EQ(self["agreement"]["top5_overlap"], 1.0);
  EXPECT_EQ(self["agreement"]["kendall_tau"], 1.0);
  EXPECT_EQ(self["agreement"]["kl_divergence"], 0.0);
  EXPECT_GT(self["agreement"]["sqnr_db"].get<double>(), 200.0);
  const auto other = Eval(
      {mobilenet, "--data", data, "--preprocess", kSpec, "--reference", resnet, "--samples", "500", "--threads", "1"},
      dir / "other.json");
  ASSERT_FALSE(other.is_null());
  const double agree = other["agreement"]["top1"].get<double>();
  EXPECT_GT(agree, 80.0);  // two ~91% models agree on most images, not all
  EXPECT_LT(agree, 100.0);
  EXPECT_DOUBLE_EQ(agree + other["agreement"]["top1_disagreement"].get<double>(), 100.0);
  EXPECT_LT(other["agreement"]["top5_overlap"].get<double>(), 1.0);
  EXPECT_GT(other["agreement"]["kl_divergence"].get<double>(), 0.0);
  EXPECT_LT(other["agreement"]["sqnr_db"].get<double>(), 40.0);
  // Accuracy is the evaluated model's, not the reference's.
  EXPECT_EQ(other["accuracy"]["top1"], self["accuracy"]["top1"]);
}

TEST_F(EvalCli, OrtRunnerAgreesWithTheEngineOnAQuantizedModel) {
  // The model quantized per tensor (its residual Adds fuse into QLinearAdd in both
  // runtimes), run by ONNX Runtime and compared with seqto's engine on 1000 images:
  // two chunks of batches for the ort runner (it takes up to 512 samples per call).
  const fs::path dir = TempDir();
  const std::string data = (kFashion / "t10k-images-idx3-ubyte.gz").string();
  const std::string q = (dir / "q.onnx").string();
  const std::vector<std::string> quantize = {"quantize",
                                             (kExample / "mobilenetv2.onnx").string(),
                                             "-o",
                                             q,
                                             "--calib-data",
                                             data,
                                             "--preprocess",
                                             kSpec,
                                             "--calib-samples",
                                             "200"};
  const Result r = RunSeqto(quantize, std::chrono::seconds(600));
  ASSERT_EQ(r.exit_code, 0) << Describe(quantize, r);
  const std::vector<std::string> common = {
      q,           "--data",    data,      "--preprocess", kSpec,
      "--samples", "1000",      "--batch", "64",           "--reference",
      q,           "--threads", "1",       "--labels",     (kFashion / "t10k-labels-idx1-ubyte.gz").string()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const auto engine = Eval(with({}), dir / "engine.json");
  const auto ort = Eval(with({"--runner", "ort", "--save-predictions", (dir / "ort.npy").string()}), dir / "ort.json");
  ASSERT_FALSE(engine.is_null());
  ASSERT_FALSE(ort.is_null());
  EXPECT_EQ(engine["runner"], "engine");
  EXPECT_EQ(ort["runner"], "ort");
  EXPECT_EQ(ort["samples"], 1000);
  EXPECT_EQ(ort["agreement"]["top1"], 100.0) << "ONNX Runtime and seqto disagree on the quantized model";
  EXPECT_GT(ort["agreement"]["sqnr_db"].get<double>(), 60.0);
  EXPECT_EQ(ort["accuracy"]["top1"], engine["accuracy"]["top1"]);
  EXPECT_EQ(Predictions(dir / "ort.npy").size(), 1000u);
  EXPECT_GT(ort["latency_ms"]["p50"].get<double>(), 0.0);
  EXPECT_GE(ort["latency_ms"]["runs"].get<int>(), 3);
  std::vector<std::string> bad = with({"--runner", "tflite"});
  bad.insert(bad.begin(), "eval");
  ExpectUserError(bad, {"--runner", "tflite", "engine", "ort"});
}

TEST_F(EvalCli, SeededSubsetIsTheDocumentedOne) {
  const fs::path dir = TempDir();
  const std::string model = (kExample / "resnet.onnx").string();
  const std::string data = (kFashion / "t10k-images-idx3-ubyte.gz").string();
  auto run = [&](const std::string& samples, const std::string& seed, const std::string& name) {
    const auto j = Eval({model, "--data", data, "--preprocess", kSpec, "--samples", samples, "--seed", seed,
                         "--threads", "1", "--save-predictions", (dir / (name + ".npy")).string()},
                        dir / (name + ".json"));
    EXPECT_EQ(j["samples"], samples == "0" ? 10000 : std::stoi(samples));  // 0: all
    EXPECT_EQ(j["data_size"], 10000);
    return Predictions(dir / (name + ".npy"));
  };
  const auto all = run("0", "0", "all");
  ASSERT_EQ(all.size(), 10000u);
  // SampleIndices(10000, 10, 42) (tests/unit/data_test.cc has the derivation).
  const std::vector<int64_t> indices = {177, 406, 1456, 1809, 5222, 7717, 7870, 8530, 8563, 9318};
  const auto sub = run("10", "42", "sub");
  ASSERT_EQ(sub.size(), indices.size());
  for (size_t i = 0; i < indices.size(); ++i) EXPECT_EQ(sub[i], all[static_cast<size_t>(indices[i])]) << i;
  EXPECT_EQ(run("300", "7", "a"), run("300", "7", "b"));
  EXPECT_NE(run("300", "7", "c"), run("300", "8", "d"));
}

TEST_F(EvalCli, NpyDataAndLabels) {
  const fs::path dir = TempDir();
  const std::vector<std::string> args = {"eval",
                                         (kExample / "mobilenetv2.onnx").string(),
                                         "--data",
                                         (kExample / "sample_input.npy").string(),
                                         "--labels",
                                         (kExample / "sample_labels.npy").string(),
                                         "--save-predictions",
                                         (dir / "p.npy").string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  EXPECT_NE(r.out.find("accuracy   top-1 100.00%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("samples    8 of 8"), std::string::npos) << r.out;
  EXPECT_EQ(Predictions(dir / "p.npy"), (std::vector<int64_t>{9, 2, 1, 1, 6, 1, 4, 6}));  // README.md
}

TEST_F(EvalCli, BadInputIsOneErrorLine) {
  const fs::path dir = TempDir();
  const std::string model = (kExample / "mobilenetv2.onnx").string();
  std::vector<unsigned char> img(784, 128);
  const std::string png = GrayPng(28, 28, img.data());
  auto eval = [&](const std::string& data, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {"eval", model, "--data", data};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // A truncated PNG among good ones (found while the run is under way).
  for (int i = 0; i < 5; ++i) WriteFile(dir / "trunc/3" / ("good" + std::to_string(i) + ".png"), png);
  WriteFile(dir / "trunc/7/bad.png", png.substr(0, png.size() / 2));
  ExpectUserError(eval((dir / "trunc").string(), {"--batch", "2"}),
                  {(dir / "trunc/7/bad.png").string(), "corrupt PNG"});
  // Random bytes named .jpg, as the first sample.
  WriteFile(dir / "junk/0/a.jpg", "\xff\xd8\xff\xe0 this is not really a JPEG at all");
  ExpectUserError(eval((dir / "junk").string()), {(dir / "junk/0/a.jpg").string(), "corrupt JPEG"});
  WriteFile(dir / "gif/0/a.png", "GIF89a");
  ExpectUserError(eval((dir / "gif").string()), {(dir / "gif/0/a.png").string(), "not a PNG or JPEG"});
  // A shape that does not fit the model input.
  ASSERT_TRUE(WriteNpy((dir / "rgb.npy").string(), Tensor(DType::kFloat32, {4, 3, 32, 32})).ok());
  ExpectUserError(eval((dir / "rgb.npy").string()),
                  {"rgb.npy[0]", "sample shape 3x32x32", "does not fit the model input 'input'", "1x28x28 per sample"});
  std::vector<unsigned char> big(32 * 32, 0);
  WriteFile(dir / "big/0/a.png", GrayPng(32, 32, big.data()));
  ExpectUserError(eval((dir / "big").string()), {"a.png", "sample shape 1x32x32"});
  // Missing, short and out-of-range labels.
  const std::string npy = (kExample / "sample_input.npy").string();
  ExpectUserError(eval(npy, {"--labels", (dir / "nope.npy").string()}), {"nope.npy", "no such file"});
  ASSERT_TRUE(WriteNpy((dir / "short.npy").string(), Tensor::FromVector<int64_t>({5}, {0, 1, 2, 3, 4})).ok());
  ExpectUserError(eval(npy, {"--labels", (dir / "short.npy").string()}), {"short.npy", "has 5 labels", "8 samples"});
  ASSERT_TRUE(WriteNpy((dir / "range.npy").string(), Tensor::FromVector<int64_t>({8}, {0, 1, 2, 3, 12, 5, 6, 7})).ok());
  ExpectUserError(eval(npy, {"--labels", (dir / "range.npy").string()}), {"range.npy", "label 12", "10 classes"});
  // Empty folder, missing data, unknown format.
  fs::create_directories(dir / "empty");
  ExpectUserError(eval((dir / "empty").string()), {(dir / "empty").string(), "no images"});
  ExpectUserError(eval((dir / "missing").string()), {(dir / "missing").string(), "no such file"});
  WriteFile(dir / "notes.txt", "hello");
  ExpectUserError(eval((dir / "notes.txt").string()), {"notes.txt", "unknown data format"});
  // Unknown or malformed preprocess keys name the key.
  ExpectUserError(eval(npy, {"--preprocess", "scale=1,rezise=256"}),
                  {"--preprocess", "unknown preprocess key 'rezise'"});
  ExpectUserError(eval(npy, {"--preprocess", "std=0"}), {"--preprocess", "'std'", "0 is not allowed"});
  ExpectUserError(eval(npy, {"--preprocess", "resize=32"}), {"preprocess key 'resize' applies to images only"});
  // A bad model, a bad reference, bad numbers.
  ExpectUserError({"eval", (dir / "nomodel.onnx").string(), "--data", npy}, {"nomodel.onnx", "no such file"});
  ExpectUserError(eval(npy, {"--reference", (dir / "noref.onnx").string()}), {"--reference", "noref.onnx"});
  ExpectUserError(eval(npy, {"--batch", "0"}), {"--batch"});
  ExpectUserError({"eval", model}, {"--data", "required"});
}

TEST_F(EvalCli, Help) {
  const Result r = RunSeqto({"eval", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* opt : {"--data", "--labels", "--preprocess", "--reference", "--runner", "--samples", "--seed",
                          "--batch", "--threads", "--save-predictions", "--json"})
    EXPECT_NE(r.out.find(opt), std::string::npos) << opt;
}

}  // namespace
}  // namespace seqto
