// seqto eval: placeholder until its issue lands (registers the subcommand so --help lists it).
#include <CLI/CLI.hpp>

#include "cli/common.h"

namespace seqto::cli {

void AddEvalCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("eval", "(not implemented yet)");
  cmd->callback([&exit_code] { exit_code = ReportError("eval", InternalError("not implemented yet")); });
}

}  // namespace seqto::cli
