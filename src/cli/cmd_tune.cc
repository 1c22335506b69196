// seqto tune CONFIG [--out DIR] [--resume]: the main job. From a model and data to
// the Pareto-optimal selectively quantized models (tune/tuner.h does the work).
#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "cli/common.h"
#include "tune/config.h"
#include "tune/tuner.h"

namespace seqto::cli {

namespace {

int RunTuneCommand(const std::string& config_path, const std::string& out, bool resume, bool quiet) {
  auto config = tune::LoadTuneConfig(config_path);
  if (!config) return ReportError("tune", config.error());
  if (!out.empty()) config->out = out;
  tune::TuneOptions options;
  options.resume = resume;
  if (!quiet) options.progress = [](const std::string& line) { std::cerr << "seqto tune: " << line << std::endl; };
  auto result = tune::RunTune(*config, options);
  if (!result) return ReportError("tune", result.error());
  std::cout << result->summary;
  std::cout << "report: " << result->report_path << "\n";
  // The HTML report and figures (seqto report) are written where that tool is set up.
  const int report_status = WriteRunReport(result->run_dir);
  if (report_status != kExitOk) std::cerr << "seqto tune: the HTML report was not written (see above)\n";
  return kExitOk;
}

}  // namespace

void AddTuneCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("tune", "Find the Pareto-optimal selectively quantized models (the main job)");
  auto config = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto resume = std::make_shared<bool>(false);
  auto quiet = std::make_shared<bool>(false);
  cmd->add_option("config", *config, "JSON config (README.md, section Tuning)")->required();
  cmd->add_option("--out", *out, "Run directory (default: the config's \"out\", else runs/<model>)");
  cmd->add_flag("--resume", *resume, "Continue an interrupted run in the run directory");
  cmd->add_flag("--quiet,-q", *quiet, "No progress lines");
  cmd->callback([=, &exit_code] { exit_code = RunTuneCommand(*config, *out, *resume, *quiet); });
}

}  // namespace seqto::cli
