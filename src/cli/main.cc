// seqto: selective quantization tuner for ONNX models. Each subcommand lives in
// its own file (cmd_<name>.cc) and registers itself here.
#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "cli/common.h"
#include "core/parallel.h"

int main(int argc, char** argv) {
  seqto::ChooseThreadWaits(argv);  // before anything else: it may re-execute the program
  CLI::App app{"seqto: find the best selectively quantized version of an ONNX model"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "seqto 0.1.0");
  int exit_code = seqto::cli::kExitOk;
  seqto::cli::AddInfoCommand(app, exit_code);
  seqto::cli::AddRunCommand(app, exit_code);
  seqto::cli::AddBenchCommand(app, exit_code);
  seqto::cli::AddConformanceCommand(app, exit_code);
  seqto::cli::AddQuantizeCommand(app, exit_code);
  seqto::cli::AddEvalCommand(app, exit_code);
  seqto::cli::AddReportCommand(app, exit_code);
  seqto::cli::AddAnalyzeCommand(app, exit_code);
  seqto::cli::AddTuneCommand(app, exit_code);
  // CLI11 reports an unknown first word as "A subcommand is required"; name it instead.
  bool known_command = argc < 2 || argv[1][0] == '-';
  std::string known;
  for (CLI::App* cmd : app.get_subcommands({})) {
    known += (known.empty() ? "" : ", ") + cmd->get_name();
    known_command |= argc > 1 && cmd->check_name(argv[1]);
  }
  if (!known_command) {
    std::cerr << "seqto: error: unknown command '" << seqto::cli::OneLine(argv[1]) << "' (commands: " << known
              << "; see --help)\n";
    return seqto::cli::kExitUserError;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line, like every other error (CLI11's own format adds a second one).
    std::cerr << "seqto: error: " << seqto::cli::OneLine(e.what()) << " (see --help)\n";
    return seqto::cli::kExitUserError;
  } catch (const std::bad_alloc&) {
    std::cerr << "seqto: error: out of memory\n";
    return seqto::cli::kExitUserError;
  } catch (const std::exception& e) {
    std::cerr << "seqto: internal error: " << seqto::cli::OneLine(e.what()) << "\n";
    return seqto::cli::kExitInternalError;
  }
  return exit_code;
}
