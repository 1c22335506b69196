// seqto quantize: placeholder until its issue lands (registers the subcommand so --help lists it).
#include <CLI/CLI.hpp>

#include "cli/common.h"

namespace seqto::cli {

void AddQuantizeCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("quantize", "(not implemented yet)");
  cmd->callback([&exit_code] { exit_code = ReportError("quantize", InternalError("not implemented yet")); });
}

}  // namespace seqto::cli
