// End-to-end tests of data and file handling on bad input: every file a command
// writes fails with one error line when the disk is full (RLIMIT_FSIZE stands in for
// it) and leaves no temporary file behind; seqto run gives each output its own file
// even when names collide after sanitizing or are too long for a file name; models
// without outputs are refused; malformed .npy headers say what is wrong; image
// class folders map to labels through a class list (--classes); idx files are read
// only as far as the samples asked for.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli_util.h"
#include "core/npy.h"
#include "onnxio/model_io.h"

namespace seqto {
namespace {

using namespace cli_test;
namespace fs = std::filesystem;
const fs::path kSource = SEQTO_SOURCE_DIR;
const fs::path kExample = kSource / "examples/fashion-mnist";
const fs::path kFashion = "/usr/share/datasets/fashion-mnist";
const std::string kSpec = "scale=0.00392157,mean=0.2860,std=0.3530";

ir::ValueInfo FloatInfo(const std::string& name, int64_t n) {
  ir::ValueInfo v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.shape = std::vector<ir::Dim>{{n, ""}};
  return v;
}

// A model from input x[n]: one unary op per (op, output) pair, each a graph output
// when `outputs` is set.
fs::path UnaryModel(const fs::path& path, int64_t n, const std::vector<std::pair<std::string, std::string>>& ops,
                    bool outputs = true) {
  ir::Model m;
  m.opsets[""] = 13;
  m.graph.inputs = {FloatInfo("x", n)};
  for (const auto& [op, out] : ops) {
    ir::Node node;
    node.name = "node_" + std::to_string(m.graph.nodes.size());
    node.op_type = op;
    node.inputs = {"x"};
    node.outputs = {out};
    m.graph.nodes.push_back(node);
    if (outputs) m.graph.outputs.push_back(FloatInfo(out, n));
  }
  EXPECT_TRUE(onnxio::SaveModel(m, path.string()).ok());
  return path;
}

// Files in `dir` (recursively) whose names hold ".tmp": leftovers of a failed write.
std::vector<std::string> TempFiles(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().find(".tmp") != std::string::npos) out.push_back(it->path().string());
  return out;
}

// Runs seqto like RunSeqto, with spawn options, and reports the child's peak
// resident memory (KiB) through wait4.
struct Measured {
  Result r;
  long max_rss_kib = 0;
};
Measured RunMeasured(const std::vector<std::string>& args, const fs::path& dir, SpawnOptions options = {}) {
  Measured m;
  const pid_t pid = Spawn(args, dir, options);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  int status = 0;
  struct rusage usage {};
  while (true) {
    const pid_t done = wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) break;
    if (done < 0) return m;
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      m.r.timed_out = true;
      return m;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) m.r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) m.r.signal = WTERMSIG(status);
  m.r.out = ReadFile(dir / "stdout");
  m.r.err = ReadFile(dir / "stderr");
  m.max_rss_kib = usage.ru_maxrss;
  return m;
}

void ExpectOneErrorLine(const std::vector<std::string>& args, const Result& r, const std::vector<std::string>& parts) {
  const std::string what = Describe(args, r);
  EXPECT_EQ(r.exit_code, 1) << what;
  const auto lines = r.ErrLines();
  ASSERT_EQ(lines.size(), 1u) << what;
  for (const auto& p : parts) EXPECT_NE(lines[0].find(p), std::string::npos) << "'" << p << "' missing: " << what;
}

TEST(DataIoCli, RunGivesEveryOutputItsOwnFile) {
  const fs::path dir = TempDir();
  const std::string long_name(300, 'n');
  const fs::path model = UnaryModel(dir / "m.onnx", 3, {{"Relu", "a/b"}, {"Neg", "a_b"}, {"Abs", long_name}});
  ASSERT_TRUE(WriteNpy((dir / "x.npy").string(), Tensor::FromVector<float>({3}, {-1, 2, -3})).ok());
  const std::vector<std::string> args = {"run", model.string(),        "-i", (dir / "x.npy").string(),
                                         "-o",  (dir / "out").string()};
  const Result r = RunSeqto(args);
  ASSERT_EQ(r.exit_code, 0) << Describe(args, r);
  // "a_b" keeps its name; "a/b", which sanitizes to the same, gets a suffix; the
  // 300-byte name is cut to 200 bytes. stdout says where each output went.
  const fs::path out = dir / "out";
  const std::string long_file = std::string(200, 'n') + ".npy";
  EXPECT_NE(r.out.find("a/b: float32[3] -> " + (out / "a_b~2.npy").string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a_b: float32[3] -> " + (out / "a_b.npy").string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(long_name + ": float32[3] -> " + (out / long_file).string()), std::string::npos) << r.out;
  auto read = [&](const std::string& f) {
    auto t = ReadNpy((out / f).string());
    EXPECT_TRUE(t.ok()) << f;
    return t.ok() ? t->ToDoubles() : std::vector<double>{};
  };
  EXPECT_EQ(read("a_b~2.npy"), (std::vector<double>{0, 2, 0}));  // Relu
  EXPECT_EQ(read("a_b.npy"), (std::vector<double>{1, -2, 3}));   // Neg
  EXPECT_EQ(read(long_file), (std::vector<double>{1, 2, 3}));    // Abs
  EXPECT_EQ(std::distance(fs::directory_iterator(out), fs::directory_iterator()), 3);
}

TEST(DataIoCli, ModelWithoutOutputsIsRefused) {
  const fs::path dir = TempDir();
  const std::string model = UnaryModel(dir / "none.onnx", 4, {{"Relu", "y"}}, /*outputs=*/false).string();
  const std::string npy = (dir / "x.npy").string();
  ASSERT_TRUE(WriteNpy(npy, Tensor(DType::kFloat32, {4})).ok());
  ASSERT_TRUE(WriteNpy((dir / "data.npy").string(), Tensor(DType::kFloat32, {2, 4})).ok());
  const std::vector<std::vector<std::string>> commands = {{"run", model, "-i", npy, "-o", (dir / "out").string()},
                                                          {"bench", model, "--runs", "1"},
                                                          {"analyze", model, "--data", (dir / "data.npy").string()},
                                                          {"eval", model, "--data", (dir / "data.npy").string()}};
  for (const auto& args : commands) {
    SCOPED_TRACE(args[0]);
    ExpectUserError(args, {model, "the model has no outputs"});
  }
  EXPECT_FALSE(fs::exists(dir / "out"));
}

TEST(DataIoCli, FullDiskFailsTheWriteAndLeavesNoTempFile) {
  const fs::path dir = TempDir();
  // run: an 8 KB output against a 4 KB file size limit.
  const fs::path model = UnaryModel(dir / "m.onnx", 2048, {{"Relu", "y"}});
  ASSERT_TRUE(WriteNpy((dir / "x.npy").string(), Tensor(DType::kFloat32, {2048})).ok());
  SpawnOptions full;
  full.file_size_limit = 4096;
  const std::vector<std::string> run = {"run", model.string(),        "-i", (dir / "x.npy").string(),
                                        "-o",  (dir / "out").string()};
  const Measured r = RunMeasured(run, dir, full);
  ExpectOneErrorLine(run, r.r, {"output 'y'", (dir / "out/y.npy").string(), "write failed", "File too large"});
  EXPECT_FALSE(fs::exists(dir / "out/y.npy"));
  EXPECT_EQ(TempFiles(dir), std::vector<std::string>{});
  // eval --save-predictions: 600 int64 predictions (4.8 KB).
  const std::vector<std::string> eval = {"eval",
                                         (kExample / "resnet.onnx").string(),
                                         "--data",
                                         (kFashion / "t10k-images-idx3-ubyte.gz").string(),
                                         "--preprocess",
                                         kSpec,
                                         "--samples",
                                         "600",
                                         "--threads",
                                         "1",
                                         "--save-predictions",
                                         (dir / "pred.npy").string()};
  const Measured e = RunMeasured(eval, dir, full);
  ExpectOneErrorLine(eval, e.r, {"--save-predictions", (dir / "pred.npy").string(), "File too large"});
  EXPECT_FALSE(fs::exists(dir / "pred.npy"));
  EXPECT_EQ(TempFiles(dir), std::vector<std::string>{});
  // Without the limit both work (the limit, not something else, made them fail).
  const Result ok = RunSeqto(run);
  EXPECT_EQ(ok.exit_code, 0) << Describe(run, ok);
  EXPECT_TRUE(fs::exists(dir / "out/y.npy"));
}

TEST(DataIoCli, SavingOntoAFolderLeavesNoTempFile) {
  const fs::path dir = TempDir();
  fs::create_directories(dir / "taken.onnx");
  const std::vector<std::string> args = {
      "quantize", (kExample / "resnet.onnx").string(), "-o", (dir / "taken.onnx").string(), "--mode", "dynamic"};
  ExpectUserError(args, {(dir / "taken.onnx").string(), "cannot rename temporary file into place", "directory"});
  EXPECT_EQ(TempFiles(dir), std::vector<std::string>{});
}

TEST(DataIoCli, MalformedNpyHeaderSaysWhatIsWrong) {
  const fs::path dir = TempDir();
  const std::string model = UnaryModel(dir / "m.onnx", 3, {{"Relu", "y"}}).string();
  auto npy = [](const std::string& dict) {
    std::string h = dict;
    while ((10 + h.size() + 1) % 64 != 0) h += ' ';
    h += '\n';
    return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(h.size() & 0xff) + static_cast<char>(h.size() >> 8) +
           h + std::string(12, '\0');
  };
  const std::pair<std::string, std::vector<std::string>> cases[] = {
      {"{'descr': '<f4', 'shape': (3,), }", {"malformed header", "no 'fortran_order' key"}},
      {"{'descr': '<f4', 'fortran_order': Flase, 'shape': (3,), }",
       {"malformed header", "'fortran_order' is 'Flase', expected True or False"}},
      {"descr: <f4, fortran_order: False, shape: (3,)", {"malformed header", "expected a dict literal"}},
      {"{'fortran_order': False, 'shape': (3,), }", {"malformed header", "no 'descr' key"}},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }", {"Fortran-order arrays are not supported"}},
  };
  for (const auto& [dict, parts] : cases) {
    SCOPED_TRACE(dict);
    WriteFile(dir / "x.npy", npy(dict));
    std::vector<std::string> expect = parts;
    expect.push_back((dir / "x.npy").string());
    ExpectUserError({"run", model, "-i", (dir / "x.npy").string(), "-o", (dir / "out").string()}, expect);
    if (parts[0] == "malformed header") {
      const Result r = RunSeqto({"run", model, "-i", (dir / "x.npy").string(), "-o", (dir / "out").string()});
      EXPECT_EQ(r.err.find("Fortran"), std::string::npos) << r.err;
    }
  }
}

TEST(DataIoCli, NonFiniteDataIsRefusedNamingTheSample) {
  const fs::path dir = TempDir();
  Tensor nan(DType::kFloat32, {4, 1, 28, 28});
  for (int64_t i = 0; i < nan.numel(); ++i) nan.data<float>()[i] = std::nanf("");
  const std::string data = (dir / "nan.npy").string();
  ASSERT_TRUE(WriteNpy(data, nan).ok());
  const std::string model = (kExample / "resnet.onnx").string();
  ExpectUserError({"eval", model, "--data", data}, {data + "[0]", "element 0 is NaN", "must be finite"});
  ExpectUserError({"analyze", model, "--data", data}, {"calibration data", data + "[0]", "element 0 is NaN"});
}

TEST(DataIoCli, HugeResizeIsRefusedBeforeAllocating) {
  const fs::path dir = TempDir();
  std::vector<unsigned char> pixels(28 * 28, 100);
  WriteFile(dir / "imgs/0/a.png", GrayPng(28, 28, pixels.data()));
  const std::string model = (kExample / "resnet.onnx").string();
  const std::vector<std::string> no_crop = {
      "eval", model, "--data", (dir / "imgs").string(), "--preprocess", "resize=32768x32768"};
  // Peak memory is compared with the same command on the same image without the
  // resize: what the binary needs anyway differs between builds (a sanitizer's shadow
  // memory alone is a few hundred MiB).
  const std::vector<std::string> plain = {"eval", model, "--data", (dir / "imgs").string()};
  const Measured base = RunMeasured(plain, dir);
  ASSERT_EQ(base.r.exit_code, 0) << Describe(plain, base.r);
  const Measured a = RunMeasured(no_crop, dir);
  ExpectOneErrorLine(no_crop, a.r, {"resize gives 32768x32768 images", "the model input is", "(28x28)"});
  EXPECT_LT(a.max_rss_kib, base.max_rss_kib + 256 * 1024) << "peak memory (one resized image is 3 GiB)";
  // With a crop that fits, the resized image itself is too large.
  const std::vector<std::string> crop = {
      "eval", model, "--data", (dir / "imgs").string(), "--preprocess", "resize=32768x32768,crop=28"};
  const Measured b = RunMeasured(crop, dir);
  ExpectOneErrorLine(crop, b.r, {"a.png", "resize to 32768x32768 from 28x28 would make an image over 256 MiB"});
  EXPECT_LT(b.max_rss_kib, base.max_rss_kib + 256 * 1024) << "peak memory (one resized image is 3 GiB)";
}

// A 0.3 MB .gz idx file that inflates to 400000 x 28 x 28 (313 MB): asking for 8
// samples must not hold the whole array in memory.
TEST(DataIoCli, IdxSamplesAreReadOnlyAsFarAsAsked) {
  const fs::path dir = TempDir();
  const fs::path gz = dir / "big-images-idx3-ubyte.gz";
  FILE* f = popen(("gzip -9 -c > '" + gz.string() + "'").c_str(), "w");
  ASSERT_NE(f, nullptr);
  const std::string header = std::string("\0\0\x08\x03", 4) + std::string("\x00\x06\x1a\x80", 4) +  // 400000
                             std::string("\0\0\0\x1c", 4) + std::string("\0\0\0\x1c", 4);           // 28, 28
  fwrite(header.data(), 1, header.size(), f);
  std::vector<char> rows(784 * 1000, 0);
  for (int i = 0; i < 400; ++i) fwrite(rows.data(), 1, rows.size(), f);
  ASSERT_EQ(pclose(f), 0);
  EXPECT_LT(fs::file_size(gz), 1u << 20);
  // What the same command needs on the real Fashion-MNIST test set (7.8 MB inflated):
  // the baseline the big file's peak memory is compared with (it differs between
  // builds: a sanitizer's shadow memory alone is a few hundred MiB).
  const std::vector<std::string> small = {"eval",      (kExample / "resnet.onnx").string(),
                                          "--data",    (kFashion / "t10k-images-idx3-ubyte.gz").string(),
                                          "--samples", "8",
                                          "--threads", "1"};
  const Measured base = RunMeasured(small, dir);
  ASSERT_EQ(base.r.exit_code, 0) << Describe(small, base.r);
  for (const std::string samples : {"8", "2000"}) {
    SCOPED_TRACE(samples);
    const std::vector<std::string> args = {"eval",      (kExample / "resnet.onnx").string(),
                                           "--data",    gz.string(),
                                           "--samples", samples,
                                           "--threads", "1",
                                           "--json",    (dir / "r.json").string()};
    const Measured m = RunMeasured(args, dir);
    ASSERT_EQ(m.r.exit_code, 0) << Describe(args, m.r);
    std::printf("[ info ] --samples %s: peak memory %ld MiB\n", samples.c_str(), m.max_rss_kib / 1024);
    EXPECT_LT(m.max_rss_kib, base.max_rss_kib + 160 * 1024) << "peak memory (the data alone is 313 MB)";
    EXPECT_EQ(nlohmann::json::parse(ReadFile(dir / "r.json"))["samples"], std::stoi(samples));
  }
}

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

TEST(DataIoCli, ClassListMapsSynsetFoldersToTheModelsLabels) {
  const fs::path dir = TempDir();
  const std::string images = Gunzip(kFashion / "t10k-images-idx3-ubyte.gz");
  const std::string labels = Gunzip(kFashion / "t10k-labels-idx1-ubyte.gz");
  ASSERT_EQ(images.size(), 16u + 10000 * 784);
  ASSERT_EQ(labels.size(), 8u + 10000);
  // Ten synset-like class names; folders for classes 3 (dress) and 7 (sneaker) only,
  // 8 test images each.
  std::string list;
  for (int c = 0; c < 10; ++c) list += "n0" + std::to_string(1000000 + 37 * c) + "\n";
  WriteFile(dir / "synsets.txt", list);
  auto synset = [](int c) { return "n0" + std::to_string(1000000 + 37 * c); };
  int written[10] = {};
  for (int i = 0; i < 10000; ++i) {
    const int c = static_cast<unsigned char>(labels[8 + static_cast<size_t>(i)]);
    if ((c != 3 && c != 7) || written[c] == 8) continue;
    WriteFile(dir / "imgs" / synset(c) / (std::to_string(i) + ".png"),
              GrayPng(28, 28, reinterpret_cast<const unsigned char*>(images.data()) + 16 + i * 784));
    ++written[c];
  }
  const std::string model = (kExample / "resnet.onnx").string();
  auto eval = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"eval",         model, "--data", (dir / "imgs").string(),
                                  "--preprocess", kSpec, "--json", (dir / "r.json").string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // With the list: labels 3 and 7, the model's own (it gets 12 of these 16 right).
  const auto with = eval({"--classes", (dir / "synsets.txt").string()});
  const Result r = RunSeqto(with);
  ASSERT_EQ(r.exit_code, 0) << Describe(with, r);
  EXPECT_EQ(r.err, "");
  auto j = nlohmann::json::parse(ReadFile(dir / "r.json"));
  EXPECT_GE(j["accuracy"]["top1"].get<double>(), 60.0) << r.out;
  EXPECT_EQ(j["labels"], "class folders, class list " + (dir / "synsets.txt").string());
  // Without it: sorted positions 0 and 1 (wrong for this model), said on stderr once.
  const auto without = eval({});
  const Result n = RunSeqto(without);
  ASSERT_EQ(n.exit_code, 0) << Describe(without, n);
  ASSERT_EQ(n.ErrLines().size(), 1u) << n.err;
  EXPECT_NE(n.err.find("seqto: note: image folder '" + (dir / "imgs").string() +
                       "': labels are the class folders' "
                       "sorted positions (" +
                       synset(3) + " = 0, " + synset(7) + " = 1)"),
            std::string::npos)
      << n.err;
  EXPECT_NE(n.err.find("--classes FILE"), std::string::npos) << n.err;
  j = nlohmann::json::parse(ReadFile(dir / "r.json"));
  EXPECT_LE(j["accuracy"]["top1"].get<double>(), 20.0) << n.out;
  // A folder that is not in the list: one error naming it.
  WriteFile(dir / "imgs/n09999999/x.png", GrayPng(28, 28, reinterpret_cast<const unsigned char*>(images.data()) + 16));
  ExpectUserError(eval({"--classes", (dir / "synsets.txt").string()}),
                  {(dir / "imgs/n09999999").string(), "not in the class list", "synsets.txt"});
  // analyze takes the flag too.
  ExpectUserError({"analyze", model, "--data", (dir / "imgs").string(), "--classes", (dir / "synsets.txt").string()},
                  {"n09999999", "not in the class list"});
}

}  // namespace
}  // namespace seqto
