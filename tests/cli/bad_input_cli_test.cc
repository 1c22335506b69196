// Bad input that used to be accepted silently, named wrongly or reported as an
// internal error: re-quantizing a quantized model, models newer than seqto knows, a
// model without opset_import, errors inside a fused Conv, an unknown subcommand, and
// `analyze --compare-rankers` beyond the number of groups.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli_util.h"
#include "core/npy.h"
#include "onnxio/model_io.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
const fs::path kExamples = fs::path(SEQTO_SOURCE_DIR) / "examples/fashion-mnist";
const fs::path kRelu = fs::path(SEQTO_ONNX_TESTDATA) / "node/test_relu";

ir::Model LoadOrFail(const fs::path& path) {
  auto m = onnxio::LoadModel(path.string());
  EXPECT_TRUE(m.ok()) << m.error().message;
  return m.ok() ? *m : ir::Model{};
}

TEST(BadInputCli, RequantizingAQuantizedModelIsRefused) {
  const fs::path dir = TempDir();
  const fs::path q = dir / "q.onnx";
  const std::vector<std::string> first = {"quantize",     (kExamples / "resnet.onnx").string(),     "-o", q.string(),
                                          "--calib-data", (kExamples / "sample_input.npy").string()};
  const Result r = RunSeqto(first);
  ASSERT_EQ(r.exit_code, 0) << Describe(first, r);
  // What was written is a standard QDQ model: seqto's internal ops never leave a session.
  for (const auto& n : LoadOrFail(q).graph.nodes) EXPECT_NE(n.domain, "com.seqto") << n.name;
  for (const std::string mode : {"static", "dynamic"}) {
    SCOPED_TRACE(mode);
    ExpectUserError({"quantize", q.string(), "-o", (dir / "qq.onnx").string(), "--mode", mode, "--calib-data",
                     (kExamples / "sample_input.npy").string()},
                    {q.string(), "is already quantized", "quantize the float model"}, "seqto quantize: error: ");
    EXPECT_FALSE(fs::exists(dir / "qq.onnx"));
  }
  ExpectUserError({"analyze", q.string(), "--data", (kExamples / "sample_input.npy").string()},
                  {q.string(), "is already quantized"}, "seqto analyze: error: ");
}

TEST(BadInputCli, NewerIrVersionAndOpsetWarnOnce) {
  const fs::path dir = TempDir();
  ir::Model m = LoadOrFail(kRelu / "model.onnx");
  m.ir_version = 99;
  m.opsets[""] = 99;
  const fs::path model = dir / "future.onnx";
  ASSERT_TRUE(onnxio::SaveModel(m, model.string()).ok());
  const std::vector<std::string> args = {"info", model.string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  const auto lines = r.ErrLines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("seqto: warning: " + model.string() + ": ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find("ir_version 99 is newer than the newest seqto knows ("), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("opset 99 of ai.onnx is newer than the newest seqto knows ("), std::string::npos) << lines[0];
  // A model within what seqto knows loads without a word.
  const Result plain = RunSeqto({"info", (kRelu / "model.onnx").string()});
  EXPECT_EQ(plain.exit_code, 0);
  EXPECT_EQ(plain.err, "");
}

TEST(BadInputCli, MissingOpsetImportSaysWhatIsMissing) {
  const fs::path dir = TempDir();
  ir::Model m = LoadOrFail(kRelu / "model.onnx");
  m.opsets.clear();
  m.ir_version = 8;
  const fs::path model = dir / "no_opset.onnx";
  ASSERT_TRUE(onnxio::SaveModel(m, model.string()).ok());
  ExpectUserError({"info", model.string()},
                  {model.string(), "it imports no opset", "ir_version 8 requires opset_import"});
  const Result r = RunSeqto({"info", model.string()});
  EXPECT_EQ(r.err.find("truncated"), std::string::npos) << r.err;
}

// x (N x C x 4 x 4, C not fixed) -> Conv (3 input channels) -> Relu: the runtime fuses
// the two into its internal FusedConv. Data with 2 channels fails inside it.
fs::path ConvReluModel(const fs::path& dir) {
  ir::Model m;
  m.opsets[""] = 13;
  ir::ValueInfo x;
  x.name = "x";
  x.dtype = DType::kFloat32;
  x.shape = std::vector<ir::Dim>{{1, ""}, {-1, "c"}, {4, ""}, {4, ""}};
  ir::ValueInfo y;
  y.name = "y";
  y.dtype = DType::kFloat32;
  m.graph.inputs = {x};
  m.graph.outputs = {y};
  m.graph.initializers["w"] = Tensor(DType::kFloat32, {2, 3, 3, 3});
  ir::Node conv;
  conv.name = "my_conv";
  conv.op_type = "Conv";
  conv.inputs = {"x", "w"};
  conv.outputs = {"c"};
  ir::Node relu;
  relu.name = "my_relu";
  relu.op_type = "Relu";
  relu.inputs = {"c"};
  relu.outputs = {"y"};
  m.graph.nodes = {conv, relu};
  const fs::path path = dir / "conv_relu.onnx";
  EXPECT_TRUE(onnxio::SaveModel(m, path.string()).ok());
  return path;
}

TEST(BadInputCli, ErrorsAfterFusionNameTheUsersNodeAndOpset) {
  const fs::path dir = TempDir();
  const fs::path model = ConvReluModel(dir);
  const fs::path npy = dir / "x.npy";
  ASSERT_TRUE(WriteNpy(npy.string(), Tensor(DType::kFloat32, {1, 2, 4, 4})).ok());
  const std::vector<std::string> args = {"run",          model.string(),        "--input", "x=" + npy.string(),
                                         "--output-dir", (dir / "out").string()};
  ExpectUserError(args, {"node 'my_conv' (Conv), opset 13"});
  const Result r = RunSeqto(args);
  EXPECT_EQ(r.err.find("FusedConv"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("opset 1:"), std::string::npos) << r.err;
}

TEST(BadInputCli, UnknownCommandIsNamed) {
  ExpectUserError({"frobnicate"}, {"unknown command 'frobnicate'", "quantize", "tune"});
  ExpectUserError({"frobnicate", "--help"}, {"unknown command 'frobnicate'"});
  // No command at all still says one is needed.
  ExpectUserError({}, {"subcommand is required"});
}

TEST(BadInputCli, CompareRankersBeyondTheGroupsIsRefused) {
  const fs::path dir = TempDir();
  const std::string model = (kExamples / "resnet.onnx").string(), data = (kExamples / "sample_input.npy").string();
  // The group count is known once the model is quantized, after calibration (whose
  // progress line comes first) and before the analysis.
  const std::vector<std::string> args = {"analyze", model, "--data", data, "--compare-rankers", "1,100000"};
  const Result r = RunSeqto(args);
  EXPECT_EQ(r.exit_code, 1) << Describe(args, r);
  const auto lines = r.ErrLines();
  ASSERT_FALSE(lines.empty()) << Describe(args, r);
  EXPECT_EQ(lines.back(),
            "seqto analyze: error: --compare-rankers: 100000 is more than the model's 13 quantization groups (K may "
            "be 0 to 13)");
  for (size_t i = 0; i + 1 < lines.size(); ++i) EXPECT_EQ(lines[i].find("error"), std::string::npos) << lines[i];
  EXPECT_EQ(r.out, "") << "nothing analyzed";
  for (const std::string bad : {"-4", "x", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    ExpectUserError({"analyze", model, "--data", data, "--compare-rankers", bad},
                    {"--compare-rankers: '" + bad + "' is not a group count"}, "seqto analyze: error: ");
  }
}

}  // namespace
}  // namespace seqto
