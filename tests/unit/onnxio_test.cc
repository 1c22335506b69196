// Model I/O: load/save round trips (graph, attributes incl. verbatim subgraphs,
// initializers, opsets, non-tensor types), external data and its confinement to the
// model's folder, the ONNX checker and shape inference, stable node names, opsets
// 7-17 from ONNX's test data, and clear errors (with byte offsets) for bad files.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>

#include "onnxio/model_io.h"
#include "onnxio/wire_scan.h"
#include "support/test_models.h"

namespace seqto::onnxio {
namespace {

using testing::MakeNode;

namespace fs = std::filesystem;
const fs::path kTestData = SEQTO_ONNX_TESTDATA;

// A fresh, empty folder per test.
fs::path TempDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) /
                 ("seqto_onnxio_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

onnx::ModelProto ReadProto(const fs::path& p) {
  onnx::ModelProto proto;
  EXPECT_TRUE(proto.ParseFromString(ReadFile(p))) << p;
  return proto;
}

ir::ValueInfo TensorInfo(const std::string& name, DType dtype, std::vector<int64_t> dims) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = dtype;
  v.shape.emplace();
  for (int64_t d : dims) v.shape->push_back(d >= 0 ? ir::Dim{d, ""} : ir::Dim{-1, "N"});
  return v;
}

// A model with one node per attribute type (in a custom domain the ONNX checker does
// not look into), initializers of several types, two opset imports and metadata.
ir::Model RichModel() {
  ir::Model m;
  m.opsets = {{"", 13}, {"com.example", 2}};
  m.producer_name = "onnxio_test";
  m.producer_version = "1";
  m.metadata["purpose"] = "round trip";
  ir::Graph& g = m.graph;
  g.name = "rich";
  g.inputs = {TensorInfo("x", DType::kFloat32, {-1, 4})};
  g.outputs = {TensorInfo("y", DType::kFloat32, {-1, 4})};
  g.initializers["w_f32"] = Tensor::FromVector<float>({2, 2}, {1.5f, -2.f, 3.25f, 0.f});
  g.initializers["w_i64"] = Tensor::FromVector<int64_t>({3}, {-1, 0, int64_t{1} << 40});
  g.initializers["w_u8"] = Tensor::FromVector<uint8_t>({4}, {0, 1, 128, 255});
  g.initializers["w_bool"] = Tensor::FromVector<bool>({2}, {true, false});
  g.initializers["w_f16"] = Tensor::FromVector<uint16_t>({2}, {FloatToHalf(1.5f), FloatToHalf(-0.25f)});
  g.initializers["w_f16"] = Tensor(DType::kFloat16, {2}, g.initializers["w_f16"].storage());
  g.initializers["w_empty"] = Tensor(DType::kFloat32, {0, 3});
  g.initializers["w_scalar"] = Tensor::Scalar<double>(2.5);

  ir::Node relu = MakeNode("relu", "Relu", {"x"}, {"r"});
  ir::Node custom = MakeNode("custom", "Everything", {"r", "w_f32", "", "w_i64"}, {"y", ""}, "com.example");
  using T = ir::Attribute::Type;
  ir::Attribute a;
  a.type = T::kFloat, a.f = 0.125f, custom.attributes["f"] = a;
  a = {}, a.type = T::kInt, a.i = -7, custom.attributes["i"] = a;
  a = {}, a.type = T::kString, a.s = std::string("with\0nul", 8), custom.attributes["s"] = a;
  a = {}, a.type = T::kTensor, a.t = Tensor::FromVector<int32_t>({2, 1}, {5, -6}), custom.attributes["t"] = a;
  a = {}, a.type = T::kFloats, a.floats = {1.f, -0.5f}, custom.attributes["floats"] = a;
  a = {}, a.type = T::kInts, a.ints = {3, 2, 1}, custom.attributes["ints"] = a;
  a = {}, a.type = T::kStrings, a.strings = {"a", "", "c"}, custom.attributes["strings"] = a;
  g.nodes = {relu, custom};
  return m;
}

void ExpectSameTensor(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(a.nbytes(), b.nbytes()) << what;
  EXPECT_EQ(0, a.nbytes() ? std::memcmp(a.raw(), b.raw(), a.nbytes()) : 0) << what << ": contents differ";
}

void ExpectSameValueInfos(const std::vector<ir::ValueInfo>& a, const std::vector<ir::ValueInfo>& b,
                          const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << what;
    EXPECT_EQ(a[i].Describe(), b[i].Describe()) << what << " " << a[i].name;
    EXPECT_EQ(a[i].raw_type_proto, b[i].raw_type_proto) << what << " " << a[i].name;
  }
}

// Everything a round trip must preserve.
void ExpectSameModel(const ir::Model& a, const ir::Model& b) {
  EXPECT_EQ(a.opsets, b.opsets);
  EXPECT_EQ(a.ir_version, b.ir_version);
  EXPECT_EQ(a.metadata, b.metadata);
  EXPECT_EQ(a.graph.name, b.graph.name);
  ExpectSameValueInfos(a.graph.inputs, b.graph.inputs, "inputs");
  ExpectSameValueInfos(a.graph.outputs, b.graph.outputs, "outputs");
  ASSERT_EQ(a.graph.initializers.size(), b.graph.initializers.size());
  for (const auto& [name, t] : a.graph.initializers) {
    ASSERT_TRUE(b.graph.initializers.count(name)) << name;
    ExpectSameTensor(t, b.graph.initializers.at(name), "initializer " + name);
  }
  ASSERT_EQ(a.graph.nodes.size(), b.graph.nodes.size());
  for (size_t i = 0; i < a.graph.nodes.size(); ++i) {
    const ir::Node& x = a.graph.nodes[i];
    const ir::Node& y = b.graph.nodes[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.op_type, y.op_type);
    EXPECT_EQ(x.domain, y.domain);
    EXPECT_EQ(x.inputs, y.inputs) << x.name;
    EXPECT_EQ(x.outputs, y.outputs) << x.name;
    ASSERT_EQ(x.attributes.size(), y.attributes.size()) << x.name;
    for (const auto& [name, ax] : x.attributes) {
      ASSERT_TRUE(y.attributes.count(name)) << x.name << "." << name;
      const ir::Attribute& ay = y.attributes.at(name);
      const std::string what = x.name + "." + name;
      EXPECT_EQ(ax.type, ay.type) << what;
      EXPECT_EQ(ax.f, ay.f) << what;
      EXPECT_EQ(ax.i, ay.i) << what;
      EXPECT_EQ(ax.s, ay.s) << what;
      EXPECT_EQ(ax.floats, ay.floats) << what;
      EXPECT_EQ(ax.ints, ay.ints) << what;
      EXPECT_EQ(ax.strings, ay.strings) << what;
      if (ax.type == ir::Attribute::Type::kTensor) ExpectSameTensor(ax.t, ay.t, what);
      if (ax.type == ir::Attribute::Type::kGraph || ax.type == ir::Attribute::Type::kOther) {
        EXPECT_EQ(ax.raw_proto, ay.raw_proto) << what << ": not kept verbatim";
      }
    }
  }
}

TEST(ModelIo, RoundTripPreservesGraphAttributesInitializersAndOpsets) {
  const fs::path dir = TempDir();
  const ir::Model m = RichModel();
  ASSERT_TRUE(SaveModel(m, (dir / "rich.onnx").string()).ok());
  LoadOptions no_inference;
  no_inference.infer_shapes = false;
  auto loaded = LoadModel((dir / "rich.onnx").string(), no_inference);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  ExpectSameModel(m, *loaded);
  EXPECT_EQ(loaded->producer_name, "onnxio_test");
  EXPECT_EQ(loaded->path, (dir / "rich.onnx").string());
  // Saving what was loaded gives the same file.
  ASSERT_TRUE(SaveModel(*loaded, (dir / "again.onnx").string()).ok());
  EXPECT_EQ(ReadFile(dir / "rich.onnx"), ReadFile(dir / "again.onnx"));
  EXPECT_FALSE(fs::exists(dir / "rich.onnx.data"));
  for (const auto& e : fs::directory_iterator(dir))  // no temporary file left
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

TEST(ModelIo, SubgraphAttributesAreKeptVerbatim) {
  // If (then/else branches), Loop (body) and Scan (body) from ONNX's test data.
  for (const char* test : {"node/test_if", "node/test_loop11", "node/test_scan9_sum", "node/test_scan_sum",
                           "node/test_if_seq", "node/test_range_float_type_positive_delta_expanded"}) {
    SCOPED_TRACE(test);
    const fs::path src = kTestData / test / "model.onnx";
    const onnx::ModelProto original = ReadProto(src);
    auto m = LoadModel(src.string());
    ASSERT_TRUE(m.ok()) << m.error().message;
    const fs::path out = TempDir() / "model.onnx";
    ASSERT_TRUE(SaveModel(*m, out.string()).ok());
    const onnx::ModelProto saved = ReadProto(out);
    int subgraphs = 0;
    ASSERT_EQ(original.graph().node_size(), saved.graph().node_size());
    for (int i = 0; i < original.graph().node_size(); ++i) {
      const auto& on = original.graph().node(i);
      const auto& sn = saved.graph().node(i);
      for (const auto& oa : on.attribute()) {
        if (oa.type() != onnx::AttributeProto::GRAPH) continue;
        ++subgraphs;
        auto it = std::find_if(sn.attribute().begin(), sn.attribute().end(),
                               [&](const onnx::AttributeProto& a) { return a.name() == oa.name(); });
        ASSERT_NE(it, sn.attribute().end()) << oa.name();
        EXPECT_EQ(oa.SerializeAsString(), it->SerializeAsString()) << "attribute " << oa.name() << " changed";
      }
    }
    EXPECT_GT(subgraphs, 0);
    auto reloaded = LoadModel(out.string());
    ASSERT_TRUE(reloaded.ok()) << reloaded.error().message;
    ExpectSameModel(*m, *reloaded);
    EXPECT_TRUE(CheckModel(*reloaded).ok()) << CheckModel(*reloaded).message();
  }
}

TEST(ModelIo, NonTensorTypesRoundTrip) {
  auto m = LoadModel((kTestData / "node/test_sequence_insert_at_back/model.onnx").string());
  ASSERT_TRUE(m.ok()) << m.error().message;
  ASSERT_FALSE(m->graph.inputs.empty());
  const ir::ValueInfo& seq = m->graph.inputs[0];
  EXPECT_FALSE(seq.is_tensor());
  EXPECT_EQ(seq.Describe().rfind("sequence(", 0), 0u) << seq.Describe();
  const fs::path out = TempDir() / "seq.onnx";
  ASSERT_TRUE(SaveModel(*m, out.string()).ok());
  auto reloaded = LoadModel(out.string());
  ASSERT_TRUE(reloaded.ok()) << reloaded.error().message;
  ExpectSameModel(*m, *reloaded);
  EXPECT_TRUE(CheckModel(*reloaded).ok()) << CheckModel(*reloaded).message();
}

TEST(ModelIo, ExternalDataIsWrittenAndReadBack) {
  const fs::path dir = TempDir();
  ir::Model m = RichModel();
  std::vector<float> big(1000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i) * 0.5f - 7.f;
  m.graph.initializers["big"] = Tensor::FromVector<float>({10, 100}, big);
  m.graph.initializers["big2"] = Tensor::FromVector<int64_t>({300}, std::vector<int64_t>(300, -3));
  SaveOptions options;
  options.external_data_threshold = 1024;
  const fs::path path = dir / "ext.onnx";
  ASSERT_TRUE(SaveModel(m, path.string(), options).ok());
  ASSERT_TRUE(fs::exists(dir / "ext.onnx.data"));
  EXPECT_GE(fs::file_size(dir / "ext.onnx.data"), 4000u + 2400u);
  EXPECT_LT(fs::file_size(path), 2000u);  // the big tensors are not inside
  const onnx::ModelProto proto = ReadProto(path);
  int external = 0;
  for (const auto& t : proto.graph().initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) {
      EXPECT_LT(t.raw_data().size(), 1024u) << t.name();
      continue;
    }
    ++external;
    EXPECT_FALSE(t.has_raw_data());
    for (const auto& kv : t.external_data())
      if (kv.key() == "location") {
        EXPECT_EQ(kv.value(), "ext.onnx.data");
      }
  }
  EXPECT_EQ(external, 2);
  LoadOptions no_inference;
  no_inference.infer_shapes = false;
  auto loaded = LoadModel(path.string(), no_inference);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  ExpectSameModel(m, *loaded);
  // The same model from another working directory (relative model path).
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  auto relative = LoadModel("ext.onnx", no_inference);
  fs::current_path(cwd);
  ASSERT_TRUE(relative.ok()) << relative.error().message;
  ExpectSameModel(m, *relative);
  // From bytes: resolved against base_dir; refused without one.
  const std::string bytes = ReadFile(path);
  EXPECT_TRUE(LoadModelFromBytes(bytes, dir.string(), "mem", no_inference).ok());
  auto no_dir = LoadModelFromBytes(bytes, "", "mem", no_inference);
  ASSERT_FALSE(no_dir.ok());
  EXPECT_NE(no_dir.error().message.find("big"), std::string::npos) << no_dir.error().message;
}

// Saves a model with one external initializer, then rewrites its location field.
fs::path ModelWithExternalLocation(const fs::path& dir, const std::string& location, const std::string& offset = "",
                                   const std::string& length = "") {
  ir::Model m;
  m.opsets[""] = 13;
  m.graph.inputs = {TensorInfo("x", DType::kFloat32, {4})};
  m.graph.outputs = {TensorInfo("y", DType::kFloat32, {4})};
  m.graph.initializers["w"] = Tensor::FromVector<float>({4}, {1, 2, 3, 4});
  m.graph.nodes = {MakeNode("add", "Add", {"x", "w"}, {"y"})};
  SaveOptions options;
  options.external_data_threshold = 1;
  const fs::path path = dir / "model.onnx";
  EXPECT_TRUE(SaveModel(m, path.string(), options).ok());
  onnx::ModelProto proto = ReadProto(path);
  auto* t = proto.mutable_graph()->mutable_initializer(0);
  for (auto& kv : *t->mutable_external_data()) {
    if (kv.key() == "location") kv.set_value(location);
    if (kv.key() == "offset" && !offset.empty()) kv.set_value(offset);
    if (kv.key() == "length" && !length.empty()) kv.set_value(length);
  }
  WriteFile(path, proto.SerializeAsString());
  return path;
}

TEST(ModelIo, ExternalDataOutsideTheModelFolderIsRefused) {
  const fs::path root = TempDir();
  const fs::path dir = root / "models";
  fs::create_directories(dir / "sub");
  // A data file outside the model's folder that the model tries to reach.
  WriteFile(root / "secret.data", std::string(16, 'S'));
  WriteFile(dir / "sub" / "ok.data", std::string(16, '\0'));
  fs::create_symlink(root / "secret.data", dir / "link.data");
  fs::create_symlink(root, dir / "linkdir");
  fs::create_symlink(dir / "sub" / "ok.data", dir / "inside_link.data");

  struct Case {
    std::string location;
    std::string expect;  // part of the error message
  };
  const Case refused[] = {
      {(root / "secret.data").string(), "must be a relative path"}, {"../secret.data", "leaves the model's folder"},
      {"sub/../../secret.data", "leaves the model's folder"},       {"link.data", "leaves the model's folder"},
      {"linkdir/secret.data", "leaves the model's folder"},         {"", "must be a relative path"},
  };
  for (const Case& c : refused) {
    SCOPED_TRACE(c.location);
    const fs::path path = ModelWithExternalLocation(dir, c.location);
    auto m = LoadModel(path.string());
    ASSERT_FALSE(m.ok());
    const std::string& msg = m.error().message;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  // Inside the folder, through a subfolder or a link that stays inside: fine.
  for (const char* location : {"sub/ok.data", "./sub/ok.data", "inside_link.data"}) {
    SCOPED_TRACE(location);
    auto m = LoadModel(ModelWithExternalLocation(dir, location).string());
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->graph.initializers.at("w").ToDoubles(), std::vector<double>(4, 0.0));
  }
}

TEST(ModelIo, BadExternalDataFieldsAreErrors) {
  const fs::path dir = TempDir();
  WriteFile(dir / "w.data", std::string(16, '\0'));
  const std::pair<std::array<std::string, 3>, std::string> cases[] = {
      {{"missing.data", "", ""}, "does not exist"},
      {{"w.data", "8", ""}, "too short"},
      {{"w.data", "0", "12"}, "does not match"},
      {{"w.data", "0", "99999999999999999"}, "does not match"},
      {{"w.data", "-4", ""}, "negative"},
      {{"w.data", "12abc", ""}, "bad external data field"},
      {{"w.data", "99999999999999999999999", ""}, "bad external data field"},
      {{".", "", ""}, "not a regular file"},
  };
  for (const auto& [fields, expect] : cases) {
    SCOPED_TRACE(fields[0] + " " + fields[1] + " " + fields[2]);
    auto m = LoadModel(ModelWithExternalLocation(dir, fields[0], fields[1], fields[2]).string());
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message.find(expect), std::string::npos) << m.error().message;
  }
}

TEST(ModelIo, CheckerAcceptsSavedModels) {
  const fs::path dir = TempDir();
  ir::Model m = RichModel();
  m.graph.nodes.pop_back();  // the custom op's outputs are not described: keep a plain model
  m.opsets.erase("com.example");
  m.graph.nodes[0].outputs = {"y"};
  ASSERT_TRUE(CheckModel(m).ok()) << CheckModel(m).message();
  SaveOptions options;
  options.external_data_threshold = 16;
  ASSERT_TRUE(SaveModel(m, (dir / "plain.onnx").string(), options).ok());
  auto loaded = LoadModel((dir / "plain.onnx").string());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_TRUE(CheckModel(*loaded).ok()) << CheckModel(*loaded).message();
  // And it does reject a broken one (an input nobody defines).
  m.graph.nodes[0].inputs = {"nothing"};
  EXPECT_FALSE(CheckModel(m).ok());
}

// seqto's internal ops (com.seqto) exist only inside a session: writing one is a bug,
// reported as an internal error naming the node, and nothing is written.
TEST(ModelIo, InternalOpsAreNeverSaved) {
  const fs::path dir = TempDir();
  ir::Model m = RichModel();
  m.graph.nodes[0].domain = "com.seqto";
  const std::string path = (dir / "internal.onnx").string();
  const Status s = SaveModel(m, path);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::kInternal);
  EXPECT_NE(s.message().find("node '" + m.graph.nodes[0].name + "'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("internal op com.seqto." + m.graph.nodes[0].op_type), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  auto bytes = SerializeModel(m);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.error().kind, ErrorKind::kInternal);
}

TEST(ModelIo, ShapeInferenceFillsValueInfos) {
  const fs::path dir = TempDir();
  ir::Model m;
  m.opsets[""] = 13;
  m.graph.inputs = {TensorInfo("x", DType::kFloat32, {-1, 3, 8})};
  m.graph.outputs = {TensorInfo("y", DType::kFloat32, {-1, 8, 3})};
  m.graph.initializers["shape"] = Tensor::FromVector<int64_t>({2}, {-1, 24});
  m.graph.nodes = {MakeNode("relu", "Relu", {"x"}, {"a"}), MakeNode("t", "Transpose", {"a"}, {"b"}),
                   MakeNode("flat", "Reshape", {"b", "shape"}, {"c"}), MakeNode("cast", "Cast", {"c"}, {"d"}),
                   MakeNode("back", "Identity", {"a"}, {"y0"})};
  ir::Attribute perm;
  perm.type = ir::Attribute::Type::kInts;
  perm.ints = {0, 2, 1};
  m.graph.nodes[1].attributes["perm"] = perm;
  ir::Attribute to;
  to.type = ir::Attribute::Type::kInt;
  to.i = static_cast<int64_t>(DType::kFloat16);
  m.graph.nodes[3].attributes["to"] = to;
  m.graph.nodes.push_back(MakeNode("out", "Identity", {"b"}, {"y"}));
  ASSERT_TRUE(SaveModel(m, (dir / "m.onnx").string()).ok());
  auto loaded = LoadModel((dir / "m.onnx").string());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  auto describe = [&](const std::string& name) {
    const ir::ValueInfo* v = nullptr;
    for (const auto& vi : loaded->graph.value_infos)
      if (vi.name == name) v = &vi;
    return v ? v->Describe() : "(none)";
  };
  EXPECT_EQ(describe("a"), "float32[Nx3x8]");
  EXPECT_EQ(describe("b"), "float32[Nx8x3]");
  EXPECT_EQ(describe("c").substr(0, 8), "float32[") << describe("c");
  EXPECT_EQ(describe("d").substr(0, 8), "float16[") << describe("d");
  EXPECT_EQ(describe("y0"), "float32[Nx3x8]");
  // Off when asked; and InferShapes on its own does the same.
  LoadOptions off;
  off.infer_shapes = false;
  auto raw = LoadModel((dir / "m.onnx").string(), off);
  ASSERT_TRUE(raw.ok());
  EXPECT_TRUE(raw->graph.value_infos.empty());
  ASSERT_TRUE(InferShapes(*raw).ok());
  EXPECT_EQ(raw->graph.value_infos.size(), loaded->graph.value_infos.size());
}

TEST(ModelIo, UnnamedAndDuplicateNodesGetStableUniqueNames) {
  const fs::path dir = TempDir();
  ir::Model m;
  m.opsets[""] = 13;
  m.graph.inputs = {TensorInfo("x", DType::kFloat32, {2})};
  m.graph.outputs = {TensorInfo("y", DType::kFloat32, {2})};
  m.graph.nodes = {MakeNode("", "Relu", {"x"}, {"a"}),       MakeNode("dup", "Relu", {"a"}, {"b"}),
                   MakeNode("dup", "Relu", {"b"}, {"c"}),    MakeNode("", "Identity", {"c"}, {"d"}),
                   MakeNode("Relu_0", "Relu", {"d"}, {"e"}), MakeNode("", "Relu", {"e"}, {"y"})};
  ASSERT_TRUE(SaveModel(m, (dir / "m.onnx").string()).ok());
  std::vector<std::string> first;
  for (int load = 0; load < 3; ++load) {
    auto loaded = LoadModel((dir / "m.onnx").string());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    std::vector<std::string> names;
    for (const auto& n : loaded->graph.nodes) names.push_back(n.name);
    if (load == 0) first = names;
    EXPECT_EQ(names, first) << "names differ between loads";
    EXPECT_TRUE(loaded->graph.Verify().ok()) << loaded->graph.Verify().message();
  }
  const std::set<std::string> unique(first.begin(), first.end());
  EXPECT_EQ(unique.size(), first.size());
  for (const auto& n : first) EXPECT_FALSE(n.empty());
  EXPECT_EQ(first[1], "dup");     // the first use of a name keeps it
  EXPECT_EQ(first[4], "Relu_0");  // an explicit name is never taken by a generated one
  EXPECT_NE(first[0], "Relu_0");
  EXPECT_EQ(first[3], "Identity_3");
  // Saved names come back unchanged.
  auto loaded = LoadModel((dir / "m.onnx").string());
  ASSERT_TRUE(SaveModel(*loaded, (dir / "named.onnx").string()).ok());
  auto again = LoadModel((dir / "named.onnx").string());
  ASSERT_TRUE(again.ok());
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(again->graph.nodes[i].name, first[i]);
}

TEST(ModelIo, NodesOutOfOrderAreSortedAndCyclesRefused) {
  const fs::path dir = TempDir();
  ir::Model m;
  m.opsets[""] = 13;
  m.graph.inputs = {TensorInfo("x", DType::kFloat32, {2})};
  m.graph.outputs = {TensorInfo("y", DType::kFloat32, {2})};
  m.graph.nodes = {MakeNode("second", "Relu", {"a"}, {"y"}), MakeNode("first", "Relu", {"x"}, {"a"})};
  ASSERT_TRUE(SaveModel(m, (dir / "m.onnx").string()).ok());
  auto loaded = LoadModel((dir / "m.onnx").string());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(loaded->graph.nodes[0].name, "first");
  EXPECT_TRUE(loaded->graph.Verify().ok());
  m.graph.nodes = {MakeNode("p", "Relu", {"b"}, {"a"}), MakeNode("q", "Relu", {"a"}, {"b"}),
                   MakeNode("r", "Relu", {"b"}, {"y"})};
  ASSERT_TRUE(SaveModel(m, (dir / "cycle.onnx").string()).ok());
  auto cyclic = LoadModel((dir / "cycle.onnx").string());
  ASSERT_FALSE(cyclic.ok());
  EXPECT_NE(cyclic.error().message.find("cycle"), std::string::npos) << cyclic.error().message;
}

TEST(ModelIo, NodesAreCheckedAgainstTheirSchema) {
  const fs::path dir = TempDir();
  struct Case {
    ir::Node node;
    std::string expect;
  };
  ir::Node with_attr = MakeNode("relu_attr", "Relu", {"x"}, {"y"});
  ir::Attribute bogus;
  bogus.type = ir::Attribute::Type::kInt;
  with_attr.attributes["bogus"] = bogus;
  ir::Node gemm_alpha = MakeNode("gemm", "Gemm", {"x", "x"}, {"y"});
  ir::Attribute alpha;
  alpha.type = ir::Attribute::Type::kString;
  alpha.s = "one";
  gemm_alpha.attributes["alpha"] = alpha;
  const Case cases[] = {
      {MakeNode("relu0", "Relu", {}, {"y"}), "node 'relu0' (Relu), opset 13"},
      {MakeNode("relu2", "Relu", {"x", "x"}, {"y"}), "node 'relu2' (Relu), opset 13"},
      {MakeNode("relu_none", "Relu", {"x"}, {}), "node 'relu_none' (Relu), opset 13"},
      {MakeNode("conv_empty", "Conv", {"", "x"}, {"y"}), "node 'conv_empty' (Conv), opset 13"},
      {with_attr, "bogus"},
      {gemm_alpha, "alpha"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.node.name);
    ir::Model m;
    m.opsets[""] = 13;
    m.graph.inputs = {TensorInfo("x", DType::kFloat32, {2, 2})};
    m.graph.outputs = {TensorInfo("y", DType::kFloat32, {2, 2})};
    m.graph.nodes = {c.node};
    ASSERT_TRUE(SaveModel(m, (dir / "m.onnx").string()).ok());
    auto loaded = LoadModel((dir / "m.onnx").string());
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.error().message.find(c.expect), std::string::npos) << loaded.error().message;
    EXPECT_NE(loaded.error().message.find("m.onnx"), std::string::npos) << loaded.error().message;
  }
}

// ONNX 1.12's Conv/pool shape inference reads out of bounds when the ranks of input
// and weights or the lengths of per-axis attributes disagree (found by fuzzing,
// tests/fuzz/regressions/qlinearconv_rank_mismatch.onnx): such models are refused
// with an error naming the node, also when the rank is only known after inference.
TEST(ModelIo, InconsistentConvRanksAreRefusedBeforeShapeInference) {
  const fs::path dir = TempDir();
  struct Case {
    std::vector<int64_t> x_dims;
    std::string extra_attr;
    int64_t extra_len;
    bool through_relu;
    std::string expect;
  };
  const Case cases[] = {
      {{1, 7, 7}, "", 0, false, "input 0 has rank 3 but the weights (input 1) have rank 4"},
      {{1, 7, 7}, "", 0, true, "input 0 has rank 3 but the weights (input 1) have rank 4"},
      {{1, 1, 7, 7}, "pads", 3, false, "attribute 'pads' has 3 values, expected 4"},
      {{1, 1, 7, 7}, "strides", 1, true, "attribute 'strides' has 1 values"},
      {{1, 1, 7, 7}, "dilations", 3, false, "attribute 'dilations' has 3 values"},
      {{1, 1, 7, 7}, "strides", -2, false, "attribute 'strides' has 0 at axis 0, expected a positive value"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expect);
    ir::Model m;
    m.opsets[""] = 13;
    m.graph.inputs = {TensorInfo("x", DType::kFloat32, c.x_dims)};
    m.graph.outputs = {TensorInfo("y", DType::kFloat32, {})};
    m.graph.outputs[0].shape.reset();
    m.graph.initializers["w"] = Tensor(DType::kFloat32, {1, 1, 3, 3});
    ir::Node conv = MakeNode("the_conv", "Conv", {c.through_relu ? "r" : "x", "w"}, {"y"});
    if (!c.extra_attr.empty()) {
      ir::Attribute a;
      a.type = ir::Attribute::Type::kInts;
      a.ints.assign(static_cast<size_t>(std::abs(c.extra_len)), c.extra_len < 0 ? 0 : 1);  // negative: zeros
      conv.attributes[c.extra_attr] = a;
    }
    m.graph.nodes.clear();
    if (c.through_relu) m.graph.nodes.push_back(MakeNode("relu", "Relu", {"x"}, {"r"}));
    m.graph.nodes.push_back(conv);
    ASSERT_TRUE(SaveModel(m, (dir / "conv.onnx").string()).ok());
    auto loaded = LoadModel((dir / "conv.onnx").string());
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.error().message.find("node 'the_conv' (Conv), opset 13"), std::string::npos)
        << loaded.error().message;
    EXPECT_NE(loaded.error().message.find(c.expect), std::string::npos) << loaded.error().message;
  }
  // The files the fuzzer found.
  const fs::path found = fs::path(SEQTO_SOURCE_DIR) / "tests/fuzz/regressions";
  auto m = LoadModel((found / "qlinearconv_rank_mismatch.onnx").string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("(QLinearConv), opset 10: input 0 has rank 3 but the weights (input 3) have rank 4"),
            std::string::npos)
      << m.error().message;
  m = LoadModel((found / "conv_zero_stride.onnx").string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("(Conv), opset 6: attribute 'strides' has 0 at axis 1"), std::string::npos)
      << m.error().message;
}

// Some ONNX 1.12 inference functions (EyeLike, ...) dereference the type of an input
// that has none: a graph input without type, or the output of an op ONNX does not
// know (found by fuzzing, tests/fuzz/regressions/eyelike_untyped_input.onnx). Such
// nodes are left without inferred shapes; the model loads.
TEST(ModelIo, NodesWithUntypedInputsAreNotInferred) {
  const fs::path dir = TempDir();
  ir::Model m;
  m.opsets = {{"", 9}, {"com.example", 1}};
  m.graph.inputs = {TensorInfo("x", DType::kFloat32, {3, 4})};
  m.graph.outputs = {TensorInfo("y", DType::kFloat64, {3, 4})};
  ir::Node eye = MakeNode("eye", "EyeLike", {"t"}, {"y"});
  ir::Attribute dtype;
  dtype.type = ir::Attribute::Type::kInt;
  dtype.i = static_cast<int64_t>(DType::kFloat64);
  eye.attributes["dtype"] = dtype;
  m.graph.nodes = {MakeNode("custom", "Mystery", {"x"}, {"t"}, "com.example"), eye};
  ASSERT_TRUE(SaveModel(m, (dir / "m.onnx").string()).ok());
  auto loaded = LoadModel((dir / "m.onnx").string());
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  auto found = LoadModel((fs::path(SEQTO_SOURCE_DIR) / "tests/fuzz/regressions/eyelike_untyped_input.onnx").string());
  ASSERT_TRUE(found.ok()) << found.error().message;
  EXPECT_EQ(found->graph.inputs[0].Describe(), "unknown type");
}

// ONNX 1.12's Gemm-6 inference indexes B's second dimension unchecked (found by
// fuzzing, tests/fuzz/regressions/gemm6_rank1_b.onnx).
TEST(ModelIo, GemmWithoutMatricesIsRefused) {
  const fs::path dir = TempDir();
  for (int64_t opset : {6, 13}) {
    ir::Model m;
    m.opsets[""] = opset;
    m.graph.inputs = {TensorInfo("a", DType::kFloat32, {2, 3}), TensorInfo("b", DType::kFloat32, {4})};
    m.graph.outputs = {TensorInfo("y", DType::kFloat32, {2, 4})};
    m.graph.initializers["c"] = Tensor(DType::kFloat32, {4});
    m.graph.nodes = {MakeNode("gemm", "Gemm", {"a", "b", "c"}, {"y"})};
    ASSERT_TRUE(SaveModel(m, (dir / "m.onnx").string()).ok());
    auto loaded = LoadModel((dir / "m.onnx").string());
    ASSERT_FALSE(loaded.ok());
    EXPECT_NE(loaded.error().message.find("node 'gemm' (Gemm), opset " + std::to_string(opset) +
                                          ": input 1 has rank 1, expected 2"),
              std::string::npos)
        << loaded.error().message;
  }
  auto found = LoadModel((fs::path(SEQTO_SOURCE_DIR) / "tests/fuzz/regressions/gemm6_rank1_b.onnx").string());
  ASSERT_FALSE(found.ok());
  EXPECT_NE(found.error().message.find("(Gemm), opset 6: input 1 has rank 1, expected 2"), std::string::npos)
      << found.error().message;
}

// ONNX 1.12's MaxUnpool inference dereferences the indices' shape unchecked (found by
// fuzzing, tests/fuzz/regressions/maxunpool_indices_without_shape.onnx): with unknown
// indices the model loads (outputs stay without shape); with the wrong rank it is refused.
TEST(ModelIo, MaxUnpoolWithoutIndexShapeLoadsAndBadRankIsRefused) {
  const fs::path dir = TempDir();
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    ir::Model m;
    m.opsets[""] = 11;
    m.graph.inputs = {TensorInfo("x", DType::kFloat32, {1, 1, 2, 2}), TensorInfo("i", DType::kInt64, {})};
    if (variant == 0) m.graph.inputs[1].shape.reset();  // unknown rank
    if (variant == 2) m.graph.inputs[1] = TensorInfo("i", DType::kInt64, {1, 1, 2, 2});
    m.graph.outputs = {TensorInfo("y", DType::kFloat32, {})};
    m.graph.outputs[0].shape.reset();
    ir::Node n = MakeNode("unpool", "MaxUnpool", {"x", "i"}, {"y"});
    ir::Attribute ks;
    ks.type = ir::Attribute::Type::kInts;
    ks.ints = {2, 2};
    n.attributes["kernel_shape"] = ks;
    n.attributes["strides"] = ks;
    m.graph.nodes = {n};
    ASSERT_TRUE(SaveModel(m, (dir / "m.onnx").string()).ok());
    auto loaded = LoadModel((dir / "m.onnx").string());
    if (variant == 1) {  // rank 0
      ASSERT_FALSE(loaded.ok());
      EXPECT_NE(loaded.error().message.find("node 'unpool' (MaxUnpool), opset 11: the indices (input 1) have rank 0"),
                std::string::npos)
          << loaded.error().message;
    } else {
      ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    }
  }
  auto found =
      LoadModel((fs::path(SEQTO_SOURCE_DIR) / "tests/fuzz/regressions/maxunpool_indices_without_shape.onnx").string());
  EXPECT_TRUE(found.ok()) << found.error().message;
}

// Found by fuzzing (tests/fuzz/regressions/conv_one_input_future_opset.onnx): a model
// stamped with an opset newer than ONNX 1.12 knows skipped the schema checks, and a
// one-input Conv reached constant folding.
TEST(ModelIo, FutureOpsetsAreCheckedAgainstTheNewestKnownSchema) {
  const fs::path dir = TempDir();
  ir::Model m;
  m.opsets[""] = 111;
  m.graph.inputs = {TensorInfo("x", DType::kFloat32, {1, 1, 4, 4})};
  m.graph.outputs = {TensorInfo("y", DType::kFloat32, {1, 1, 4, 4})};
  m.graph.nodes = {MakeNode("relu", "Relu", {"x"}, {"y"})};
  ASSERT_TRUE(SaveModel(m, (dir / "ok.onnx").string()).ok());
  auto ok = LoadModel((dir / "ok.onnx").string());
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(ok->onnx_opset(), 111);
  m.graph.initializers["w"] = Tensor(DType::kFloat32, {1, 1, 1, 1});
  m.graph.nodes = {MakeNode("conv", "Conv", {"w"}, {"y"})};
  ASSERT_TRUE(SaveModel(m, (dir / "conv.onnx").string()).ok());
  for (const fs::path& path :
       {dir / "conv.onnx", fs::path(SEQTO_SOURCE_DIR) / "tests/fuzz/regressions/conv_one_input_future_opset.onnx"}) {
    auto bad = LoadModel(path.string());
    ASSERT_FALSE(bad.ok()) << path;
    EXPECT_NE(bad.error().message.find("(Conv), opset 111"), std::string::npos) << bad.error().message;
    EXPECT_NE(bad.error().message.find("checked against opset 17"), std::string::npos) << bad.error().message;
  }
}

TEST(ModelIo, OldFilesWithUntypedAttributesLoad) {
  // IR version 1-2 files may leave AttributeProto.type unset.
  onnx::ModelProto proto;
  proto.set_ir_version(3);
  proto.add_opset_import()->set_version(7);
  auto* g = proto.mutable_graph();
  g->set_name("old");
  auto* n = g->add_node();
  n->set_op_type("LeakyRelu");
  n->add_input("x");
  n->add_output("y");
  auto* a = n->add_attribute();
  a->set_name("alpha");
  a->set_f(0.25f);  // no set_type
  for (auto* vi : {g->add_input(), g->add_output()}) {
    vi->set_name(vi == &g->input(0) ? "x" : "y");
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  }
  auto m = LoadModelFromBytes(proto.SerializeAsString(), "", "old.onnx");
  ASSERT_TRUE(m.ok()) << m.error().message;
  auto alpha = m->graph.nodes[0].attr_float("alpha", 0.01f);
  ASSERT_TRUE(alpha.ok()) << alpha.error().message;
  EXPECT_EQ(*alpha, 0.25f);
}

TEST(ModelIo, InitializersAndIrVersion3Inputs) {
  // IR version 3 lists initializers as graph inputs; saving keeps that valid.
  const fs::path src = kTestData / "pytorch-converted/test_Conv2d/model.onnx";
  auto m = LoadModel(src.string());
  ASSERT_TRUE(m.ok()) << m.error().message;
  EXPECT_EQ(m->ir_version, 3);
  EXPECT_EQ(m->graph.inputs.size(), 1u);  // the weights are initializers, not inputs
  EXPECT_EQ(m->graph.initializers.size(), 2u);
  ASSERT_TRUE(CheckModel(*m).ok()) << CheckModel(*m).message();
  const fs::path out = TempDir() / "conv.onnx";
  ASSERT_TRUE(SaveModel(*m, out.string()).ok());
  auto reloaded = LoadModel(out.string());
  ASSERT_TRUE(reloaded.ok());
  ExpectSameModel(*m, *reloaded);
}

// Every model of ONNX's test data (opsets 1-17, IR versions 3-8) loads, passes the
// checker after conversion, and survives save + load unchanged.
TEST(ModelIo, TestDataModelsOfOpsets7To17LoadAndRoundTrip) {
  std::map<int64_t, int> per_opset;
  int models = 0;
  const fs::path out = TempDir() / "m.onnx";
  for (const char* group : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
    for (const auto& entry : fs::directory_iterator(kTestData / group)) {
      const fs::path model_path = entry.path() / "model.onnx";
      if (!fs::exists(model_path)) continue;
      SCOPED_TRACE(model_path.string());
      auto m = LoadModel(model_path.string());
      ASSERT_TRUE(m.ok()) << m.error().message;
      ++models;
      ++per_opset[m->onnx_opset()];
      ASSERT_TRUE(CheckModel(*m).ok()) << CheckModel(*m).message();
      ASSERT_TRUE(SaveModel(*m, out.string()).ok());
      auto reloaded = LoadModel(out.string());
      ASSERT_TRUE(reloaded.ok()) << reloaded.error().message;
      ExpectSameModel(*m, *reloaded);
      if (::testing::Test::HasFailure()) return;
    }
  }
  EXPECT_GT(models, 1000);
  for (int64_t opset = 7; opset <= 17; ++opset) EXPECT_GT(per_opset[opset], 0) << "no model of opset " << opset;
}

// --- bad files -------------------------------------------------------------------

void ExpectLoadError(const fs::path& path, const std::vector<std::string>& parts) {
  auto m = LoadModel(path.string());
  ASSERT_FALSE(m.ok()) << path << " loaded";
  const std::string& msg = m.error().message;
  EXPECT_EQ(m.error().kind, ErrorKind::kUser) << msg;
  EXPECT_EQ(msg.rfind(path.string() + ": ", 0), 0u) << "does not start with the file name: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

TEST(ModelIo, TruncatedFilesNameTheByteOffset) {
  const fs::path dir = TempDir();
  for (const char* test : {"node/test_relu", "node/test_if", "pytorch-converted/test_Conv2d"}) {
    const std::string bytes = ReadFile(kTestData / test / "model.onnx");
    ASSERT_FALSE(bytes.empty());
    const size_t step = std::max<size_t>(1, bytes.size() / 150);
    for (size_t cut = 1; cut < bytes.size(); cut += step) {
      SCOPED_TRACE(std::string(test) + " cut at " + std::to_string(cut));
      const fs::path path = dir / "cut.onnx";
      WriteFile(path, bytes.substr(0, cut));
      ExpectLoadError(path, {"byte offset"});
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(ModelIo, GarbageFilesAreRejectedWithAnOffset) {
  const fs::path dir = TempDir();
  std::mt19937 rng(1234);
  for (int i = 0; i < 200; ++i) {
    std::string bytes(1 + rng() % 2000, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const fs::path path = dir / "random.onnx";
    WriteFile(path, bytes);
    auto m = LoadModel(path.string());
    ASSERT_FALSE(m.ok()) << "random bytes loaded as a model";
    EXPECT_EQ(m.error().message.rfind(path.string() + ": ", 0), 0u) << m.error().message;
    EXPECT_EQ(m.error().message.find('\n'), std::string::npos) << m.error().message;
  }
  WriteFile(dir / "text.onnx", "this is not a model\n");
  ExpectLoadError(dir / "text.onnx", {"not a valid ONNX model", "byte offset"});
}

TEST(ModelIo, CorruptionInsideTheGraphNamesWhere) {
  onnx::ModelProto proto = ReadProto(kTestData / "node/test_if/model.onnx");
  std::string bytes = proto.SerializeAsString();
  // Find the then_branch subgraph's bytes and break a length inside them.
  const std::string then_branch = proto.graph().node(0).attribute(0).g().SerializeAsString();
  const size_t at = bytes.find(then_branch);
  ASSERT_NE(at, std::string::npos);
  std::string broken = bytes;
  broken[at + 1] = static_cast<char>(0x7f);  // the first node's length now overruns the subgraph
  const fs::path path = TempDir() / "broken.onnx";
  WriteFile(path, broken);
  auto m = LoadModel(path.string());
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.error().message;
  EXPECT_NE(msg.find("model.graph.node[0].attribute[0].g.node[0]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("byte offset " + std::to_string(at)), std::string::npos) << msg;
}

TEST(ModelIo, EmptyMissingAndDirectoryAreClearErrors) {
  const fs::path dir = TempDir();
  WriteFile(dir / "empty.onnx", "");
  ExpectLoadError(dir / "empty.onnx", {"empty"});
  ExpectLoadError(dir / "missing.onnx", {"no such file"});
  ExpectLoadError(dir, {"is a directory"});
  ExpectLoadError("/dev/null", {"not a regular file"});
}

TEST(ModelIo, BadTensorsAreErrorsBeforeAnyAllocation) {
  auto with_initializer = [](const std::function<void(onnx::TensorProto*)>& edit) {
    onnx::ModelProto proto;
    proto.set_ir_version(8);
    proto.add_opset_import()->set_version(13);
    auto* t = proto.mutable_graph()->add_initializer();
    t->set_name("w");
    t->set_data_type(1);
    edit(t);
    return proto.SerializeAsString();
  };
  const std::pair<std::function<void(onnx::TensorProto*)>, std::string> cases[] = {
      // 2^40 floats declared, no data: must not try to allocate 4 TiB.
      {[](onnx::TensorProto* t) { t->add_dims(int64_t{1} << 40); }, "exceeds 64 GiB"},
      {[](onnx::TensorProto* t) {
         t->add_dims(1 << 20);
         t->add_dims(1 << 20);
         t->add_dims(1 << 20);
       },
       "exceeds 64 GiB"},
      // 2^32 * 2^32 wraps to 0 in 64 bits: not an empty tensor (found by fuzzing).
      {[](onnx::TensorProto* t) {
         t->add_dims(int64_t{1} << 32);
         t->add_dims(int64_t{1} << 32);
       },
       "exceeds 64 GiB"},
      {[](onnx::TensorProto* t) { t->add_dims(1 << 28); }, "0 values, expected 268435456"},
      {[](onnx::TensorProto* t) {
         t->add_dims(1 << 28);
         t->set_raw_data("abcd");
       },
       "4 bytes of data"},
      {[](onnx::TensorProto* t) { t->add_dims(-3); }, "negative dimension"},
      {[](onnx::TensorProto* t) {
         t->add_dims(2);
         t->add_float_data(1);
       },
       "1 values, expected 2"},
      {[](onnx::TensorProto* t) { t->set_data_type(8); }, "unsupported data type string"},
      {[](onnx::TensorProto* t) { t->set_data_type(12345); }, "unsupported data type"},
  };
  for (const auto& [edit, expect] : cases) {
    SCOPED_TRACE(expect);
    auto m = LoadModelFromBytes(with_initializer(edit), "", "bad.onnx");
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.error().message.find(expect), std::string::npos) << m.error().message;
    EXPECT_NE(m.error().message.find("initializer 'w'"), std::string::npos) << m.error().message;
  }
}

TEST(ModelIo, BadOpsetImportsAreErrors) {
  onnx::ModelProto proto = ReadProto(kTestData / "node/test_relu/model.onnx");
  proto.mutable_opset_import(0)->set_version(0);
  auto m = LoadModelFromBytes(proto.SerializeAsString(), "", "zero.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("not a valid opset"), std::string::npos) << m.error().message;
  proto.mutable_opset_import(0)->set_version(14);
  proto.add_opset_import()->set_version(13);
  m = LoadModelFromBytes(proto.SerializeAsString(), "", "twice.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("imported twice"), std::string::npos) << m.error().message;
  proto.mutable_opset_import()->RemoveLast();
  proto.clear_opset_import();
  m = LoadModelFromBytes(proto.SerializeAsString(), "", "none.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("imports no opset"), std::string::npos) << m.error().message;
}

TEST(WireScan, ReportsTheFirstProblem) {
  EXPECT_FALSE(FindWireProblem("").found);
  const WireProblem p = FindWireProblem(std::string("\x3a\x05\x0a\x01", 4));  // graph: 5 bytes, 2 present
  ASSERT_TRUE(p.found);
  EXPECT_EQ(p.offset, 0u);
  EXPECT_NE(p.what.find("model.graph"), std::string::npos) << p.what;
  const WireProblem q = FindWireProblem(std::string("\x08\x07\x0f", 3));  // wire type 7
  ASSERT_TRUE(q.found);
  EXPECT_EQ(q.offset, 2u);
  // Deep nesting (graph > node > attribute > graph > ...) is reported, not recursed
  // into without bound; protobuf itself refuses it too.
  auto field = [](int number, const std::string& payload) {
    std::string out(1, static_cast<char>(number << 3 | 2));
    for (uint64_t n = payload.size();; n >>= 7) {
      out += static_cast<char>((n & 0x7f) | (n >= 0x80 ? 0x80 : 0));
      if (n < 0x80) break;
    }
    return out + payload;
  };
  std::string graph;
  for (int level = 0; level < 60; ++level) graph = field(1, field(5, field(6, graph)));  // node.attribute.g
  const std::string model = field(7, graph);
  const WireProblem deep = FindWireProblem(model);
  ASSERT_TRUE(deep.found);
  EXPECT_NE(deep.what.find("nested more than 100"), std::string::npos) << deep.what;
  auto m = LoadModelFromBytes(model, "", "deep.onnx");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message.find("nested more than 100"), std::string::npos) << m.error().message;
}

}  // namespace
}  // namespace seqto::onnxio
