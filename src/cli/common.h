// Shared pieces of the subcommands: error reporting and exit codes.
#pragma once

#include <string>

#include "core/status.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI
namespace seqto::ir {
struct Model;
}

namespace seqto::cli {

// Exit codes (docs/design.md, Stable interfaces).
constexpr int kExitOk = 0;
constexpr int kExitUserError = 1;
constexpr int kExitInternalError = 2;

// Prints "seqto <cmd>: error: <message>" to stderr as one line (newlines in the
// message become "; ", control characters "?") and returns the exit code.
int ReportError(const std::string& command, const Error& error);
// `text` made fit for a one-line message.
std::string OneLine(const std::string& text);
// Writes text to a file atomically (temporary file + rename).
Status WriteTextFile(const std::string& path, const std::string& text);
// A model without outputs computes nothing: every command that runs one refuses it
// (the tuner checks the same), naming the file.
Status RequireOutputs(const ir::Model& model, const std::string& path);

// The --threads option every command that runs a model has: 0 (the default) is all
// cores, else 1..MaxThreads() (core/parallel.h, CheckThreads), checked while the
// command line is parsed, before any thread starts.
CLI::Option* AddThreadsOption(CLI::App& cmd, int& threads);

// Each subcommand registers itself on the app and returns the exit code when run.
void AddInfoCommand(CLI::App& app, int& exit_code);
void AddRunCommand(CLI::App& app, int& exit_code);
void AddBenchCommand(CLI::App& app, int& exit_code);
void AddConformanceCommand(CLI::App& app, int& exit_code);
void AddQuantizeCommand(CLI::App& app, int& exit_code);  // cmd_quantize.cc
void AddEvalCommand(CLI::App& app, int& exit_code);      // cmd_eval.cc
void AddReportCommand(CLI::App& app, int& exit_code);    // cmd_report.cc
Status WriteRunReport(const std::string& run_dir);       // cmd_report.cc: seqto report RUN_DIR, for seqto tune
void AddTuneCommand(CLI::App& app, int& exit_code);      // cmd_tune.cc
void AddAnalyzeCommand(CLI::App& app, int& exit_code);   // cmd_analyze.cc

}  // namespace seqto::cli
