#include "cli/common.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "core/file_util.h"
#include "core/parallel.h"
#include "ir/graph.h"

namespace seqto::cli {

std::string OneLine(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\n' || c == '\r') {
      while (!out.empty() && out.back() == ' ') out.pop_back();
      if (!out.empty() && out.back() != ';' && out.back() != ':') out += ';';
      out += ' ';
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += '?';  // control characters (e.g. from a corrupt file's names) stay out of the terminal
    } else {
      out += c;
    }
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == ';')) out.pop_back();
  return out;
}

int ReportError(const std::string& command, const Error& error) {
  std::cerr << "seqto " << command << ": error: " << OneLine(error.message) << "\n";
  return error.kind == ErrorKind::kUser ? kExitUserError : kExitInternalError;
}

Status WriteTextFile(const std::string& path, const std::string& text) { return WriteFileAtomic(path, text); }

Status RequireOutputs(const ir::Model& model, const std::string& path) {
  if (model.graph.outputs.empty()) return UserError(path + ": the model has no outputs");
  return Status::Ok();
}

CLI::Option* AddThreadsOption(CLI::App& cmd, int& threads) {
  const CLI::Validator thread_count(
      [](std::string& text) -> std::string {
        int64_t v = 0;
        if (!CLI::detail::lexical_cast(text, v)) return "'" + text + "' is not an integer";
        Status s = CheckThreads(v, "");
        return s.ok() ? std::string() : s.message();
      },
      "0.." + std::to_string(MaxThreads()));
  return cmd
      .add_option("--threads", threads, "Threads: 1.." + std::to_string(MaxThreads()) + ", 0 = all cores (default)")
      ->check(thread_count);
}

}  // namespace seqto::cli
