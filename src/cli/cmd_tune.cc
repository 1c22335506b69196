// seqto tune CONFIG [--out DIR] [--resume] [--no-report]: the main job. From a model
// and data to the Pareto-optimal selectively quantized models (tune/tuner.h does the
// work), then the HTML report (seqto report).
#include <CLI/CLI.hpp>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <memory>

#include "cli/common.h"
#include "tune/config.h"
#include "tune/tuner.h"

namespace seqto::cli {

namespace {

struct TuneArgs {
  std::string config, out;
  bool resume = false, quiet = false, no_report = false;
};

int RunTuneCommand(const TuneArgs& a) {
  auto config = tune::LoadTuneConfig(a.config);
  if (!config) return ReportError("tune", config.error());
  if (!a.out.empty()) config->out = a.out;
  auto warn = [](const std::string& line) { std::cerr << "seqto tune: warning: " << OneLine(line) << std::endl; };
  for (const auto& w : config->warnings) warn(w);
  tune::TuneOptions options;
  options.resume = a.resume;
  options.warn = warn;
  if (!a.quiet) options.progress = [](const std::string& line) { std::cerr << "seqto tune: " << line << std::endl; };
  auto result = tune::RunTune(*config, options);
  if (!result) return ReportError("tune", result.error());
  std::cout << result->summary;
  std::cout << "report: " << result->report_path << "\n";
  if (a.no_report) return kExitOk;
  // The run is only done when its report can be read: a failure here keeps the results
  // (report.json and the models are written) but is not a success.
  const auto report_start = std::chrono::steady_clock::now();
  Status report = WriteRunReport(result->run_dir);
  if (!report.ok()) {
    Error e = report.error();
    e.message = "the HTML report was not written (" + e.message + "); the results are in " + result->report_path +
                ": write the report with `seqto report " + result->run_dir + "`";
    return ReportError("tune", e);
  }
  // The last stage, after report.json was written (so only printed).
  std::cout << "report.html written in " << std::fixed << std::setprecision(1)
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - report_start).count() << " s\n";
  return kExitOk;
}

}  // namespace

void AddTuneCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("tune", "Find the Pareto-optimal selectively quantized models (the main job)");
  auto a = std::make_shared<TuneArgs>();
  cmd->add_option("config", a->config, "JSON config (README.md, section Tuning)")->required();
  cmd->add_option("--out", a->out, "Run directory (default: the config's \"out\", else runs/<model>)");
  cmd->add_flag("--resume", a->resume, "Continue an interrupted run in the run directory");
  cmd->add_flag("--quiet,-q", a->quiet, "No progress lines");
  cmd->add_flag("--no-report", a->no_report,
                "Write report.json and the models but not the HTML report and figures (seqto report writes them)");
  cmd->callback([a, &exit_code] { exit_code = RunTuneCommand(*a); });
}

}  // namespace seqto::cli
