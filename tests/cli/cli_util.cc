#include "cli_util.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <thread>

#include "onnxio/model_io.h"

namespace seqto::cli_test {

namespace fs = std::filesystem;

std::vector<std::string> Result::ErrLines() const {
  std::vector<std::string> lines;
  std::istringstream s(err);
  for (std::string line; std::getline(s, line);) lines.push_back(line);
  return lines;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const fs::path& p, const std::string& bytes) {
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

fs::path TempDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path dir = fs::path(::testing::TempDir()) /
                 ("seqto_cli_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

pid_t Spawn(const std::vector<std::string>& args, const fs::path& dir, SpawnOptions options) {
  // Everything the child needs is prepared before fork(): between fork and exec only
  // async-signal-safe calls are allowed.
  std::vector<std::string> storage = {SEQTO_EXE};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out_path = (dir / "stdout").string(), err_path = (dir / "stderr").string();
  const int err_flags = O_WRONLY | O_CREAT | (options.append_stderr ? O_APPEND : O_TRUNC);
  const pid_t pid = fork();
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), err_flags, 0644);
    const int in = open("/dev/null", O_RDONLY);
    dup2(out, 1);
    dup2(err, 2);
    dup2(in, 0);
    setenv("OMP_NUM_THREADS", "1", 1);
    if (options.file_size_limit > 0) {
      struct sigaction ignore {};
      ignore.sa_handler = SIG_IGN;
      sigaction(SIGXFSZ, &ignore, nullptr);
      const struct rlimit limit = {options.file_size_limit, options.file_size_limit};
      setrlimit(RLIMIT_FSIZE, &limit);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

Result Wait(pid_t pid, std::chrono::seconds timeout) {
  Result r;
  // fork() failed: never pass -1 on to waitpid or kill (it would mean "every process").
  if (pid <= 0) return r;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (done < 0) return r;  // not our child: exit_code stays -1
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.timed_out = true;
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

Result RunSeqto(const std::vector<std::string>& args, std::chrono::seconds timeout) {
  // One output folder per test process: the tests in it run one at a time.
  const fs::path dir = fs::path(::testing::TempDir()) / ("seqto_cli_io_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Result r = Wait(Spawn(args, dir), timeout);
  r.out = ReadFile(dir / "stdout");
  r.err = ReadFile(dir / "stderr");
  return r;
}

std::string Describe(const std::vector<std::string>& args, const Result& r) {
  std::string s = "seqto";
  for (const auto& a : args) s += " " + a;
  return s + "\n  exit " + std::to_string(r.exit_code) + (r.signal ? " signal " + std::to_string(r.signal) : "") +
         (r.timed_out ? " TIMED OUT" : "") + "\n  stdout: " + r.out + "\n  stderr: " + r.err;
}

void ExpectUserError(const std::vector<std::string>& args, const std::vector<std::string>& parts,
                     const std::string& marker) {
  const Result r = RunSeqto(args);
  const std::string what = Describe(args, r);
  EXPECT_FALSE(r.timed_out) << what;
  EXPECT_EQ(r.signal, 0) << what;
  EXPECT_EQ(r.exit_code, 1) << what;
  const auto lines = r.ErrLines();
  ASSERT_EQ(lines.size(), 1u) << "expected exactly one error line: " << what;
  EXPECT_NE(lines[0].find(marker), std::string::npos) << "'" << marker << "' missing: " << what;
  EXPECT_TRUE(r.err.back() == '\n') << what;
  for (const auto& p : parts) EXPECT_NE(lines[0].find(p), std::string::npos) << "'" << p << "' missing: " << what;
}

// Independent of libpng (the CLI tests do not link it): zlib "stored" blocks need
// no compressor, only CRC-32 and Adler-32.
namespace {

uint32_t Crc32(const std::string& data) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

std::string Be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string Chunk(const std::string& type, const std::string& data) {
  return Be32(static_cast<uint32_t>(data.size())) + type + data + Be32(Crc32(type + data));
}

}  // namespace

std::string GrayPng(int w, int h, const unsigned char* pixels) {
  std::string raw;
  for (int y = 0; y < h; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(pixels + y * w), static_cast<size_t>(w));
  }
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  std::string z = "\x78\x01";  // zlib header
  for (size_t pos = 0; pos < raw.size() || pos == 0; pos += 65535) {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n >= raw.size();
    z += static_cast<char>(last ? 1 : 0);
    z += static_cast<char>(n & 0xff);
    z += static_cast<char>(n >> 8);
    z += static_cast<char>(~n & 0xff);
    z += static_cast<char>((~n >> 8) & 0xff);
    z += raw.substr(pos, n);
    if (last) break;
  }
  z += Be32((b << 16) | a);
  const std::string ihdr =
      Be32(static_cast<uint32_t>(w)) + Be32(static_cast<uint32_t>(h)) + std::string("\x08\x00\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1a\n", 8) + Chunk("IHDR", ihdr) + Chunk("IDAT", z) + Chunk("IEND", "");
}

nlohmann::json FashionResnetTuneConfig(const std::filesystem::path& out) {
  const std::filesystem::path source = SEQTO_SOURCE_DIR, fashion = "/usr/share/datasets/fashion-mnist";
  nlohmann::json c;
  c["model"] = (source / "examples/fashion-mnist/resnet.onnx").string();
  c["out"] = out.string();
  c["data"]["eval"] = {{"path", (fashion / "t10k-images-idx3-ubyte.gz").string()},
                       {"labels", (fashion / "t10k-labels-idx1-ubyte.gz").string()},
                       {"samples", 300}};
  c["data"]["calibration"] = {{"path", (fashion / "train-images-idx3-ubyte.gz").string()}, {"samples", 64}};
  c["data"]["ranking"] = {{"path", (fashion / "train-images-idx3-ubyte.gz").string()}, {"samples", 64}};
  c["data"]["preprocess"] = "scale=0.00392156862745098,mean=0.2860,std=0.3530";
  c["data"]["batch_size"] = 50;
  // The recipes stage has its own tests (recipes_cli_test.cc); here it would only
  // make every tune test four quantizations longer.
  c["recipes"] = "none";
  return c;
}

std::vector<std::string> FashionMobilenetQuantizeArgs(const std::filesystem::path& out) {
  const std::filesystem::path examples = std::filesystem::path(SEQTO_SOURCE_DIR) / "examples/fashion-mnist";
  return {"quantize",     (examples / "mobilenetv2.onnx").string(), "-o", out.string(),
          "--calib-data", (examples / "sample_input.npy").string()};
}

nlohmann::json RecoveryRecord(const std::filesystem::path& model) {
  auto m = onnxio::LoadModel(model.string());
  EXPECT_TRUE(m.ok()) << m.error().message;
  if (!m.ok() || !m->metadata.count("seqto.recovery")) return nullptr;
  return nlohmann::json::parse(m->metadata.at("seqto.recovery"));
}

}  // namespace seqto::cli_test
