// Helpers shared by the end-to-end tests of the `seqto` executable: running it as a
// child process (stdout/stderr captured to files, killed with SIGKILL after a
// timeout, so a hang fails the test instead of stalling it), per-test scratch
// folders, whole-file reads and writes, and the check that bad input gives exit 1
// with exactly one error line.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace seqto::cli_test {

// How a seqto run ended, and what it printed.
struct Result {
  int exit_code = -1;  // -1 if killed by a signal or timed out
  int signal = 0;      // the signal that ended it, 0 if it exited
  bool timed_out = false;
  std::string out, err;
  std::vector<std::string> ErrLines() const;
};

std::string ReadFile(const std::filesystem::path& p);
// Writes `bytes` to `p`, creating the parent folders.
void WriteFile(const std::filesystem::path& p, const std::string& bytes);

// An 8-bit grayscale PNG of `w` x `h` pixels (rows of `w` bytes), written without libpng.
std::string GrayPng(int w, int h, const unsigned char* pixels);

// A fresh, empty folder for the current test, named after its suite and name (so
// tests never see each other's files).
std::filesystem::path TempDir();

struct SpawnOptions {
  // Append to `dir`/stderr instead of truncating it: a test that runs seqto several
  // times in one folder then sees the errors of every run.
  bool append_stderr = false;
  // When > 0: the child may write regular files up to this many bytes, and a write
  // past it fails with EFBIG (SIGXFSZ ignored): a full disk, made reliably.
  uint64_t file_size_limit = 0;
};

// Starts seqto with `args`, stdout to `dir`/stdout and stderr to `dir`/stderr, stdin
// from /dev/null and OMP_NUM_THREADS=1 (two test processes must not oversubscribe
// the cores); returns at once with its pid.
pid_t Spawn(const std::vector<std::string>& args, const std::filesystem::path& dir, SpawnOptions options = {});

// Waits for `pid`; after `timeout` kills it with SIGKILL and reaps it. Fills
// exit_code, signal and timed_out (out and err stay empty).
Result Wait(pid_t pid, std::chrono::seconds timeout);

// Runs seqto with `args` to completion (or the timeout) and returns its exit status
// and output.
Result RunSeqto(const std::vector<std::string>& args, std::chrono::seconds timeout = std::chrono::seconds(120));

// The command line and how it ended, for failure messages.
std::string Describe(const std::vector<std::string>& args, const Result& r);

// Runs seqto with `args` and expects exit code 1 (no crash, no hang) and exactly one
// line on stderr, ending in a newline, that contains `marker` and each of `parts`.
void ExpectUserError(const std::vector<std::string>& args, const std::vector<std::string>& parts,
                     const std::string& marker = "error");

// The data part of a short but real tuning job the tune tests share: the bundled
// Fashion-MNIST ResNet, 300 labelled test images, 64 calibration and 64 ranking images
// from the training set, batches of 50, no recipes stage. Tests add their search,
// latency and threads.
nlohmann::json FashionResnetTuneConfig(const std::filesystem::path& out);

// `seqto quantize` of the bundled Fashion-MNIST MobileNetV2 to `out`, calibrated on
// the bundled sample inputs (append flags).
std::vector<std::string> FashionMobilenetQuantizeArgs(const std::filesystem::path& out);

// The "seqto.recovery" metadata of a written model, parsed (null when absent).
nlohmann::json RecoveryRecord(const std::filesystem::path& model);

}  // namespace seqto::cli_test
