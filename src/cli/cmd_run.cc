// seqto run MODEL --input NAME=FILE.npy ... --output-dir DIR: run a model once.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>

#include "cli/common.h"
#include "core/npy.h"
#include "onnxio/model_io.h"
#include "runtime/session.h"

namespace seqto::cli {

namespace {

int RunRun(const std::string& path, const std::vector<std::string>& input_specs, const std::string& out_dir,
           int threads) {
  auto model = onnxio::LoadModel(path);
  if (!model) return ReportError("run", model.error());
  runtime::TensorMap inputs;
  for (const auto& spec : input_specs) {
    const size_t eq = spec.find('=');
    std::string name, file;
    if (eq == std::string::npos) {
      if (model->graph.inputs.size() != 1)
        return ReportError("run", UserError("--input '" + spec + "': use NAME=FILE.npy (the model has " +
                                            std::to_string(model->graph.inputs.size()) + " inputs)"));
      name = model->graph.inputs[0].name;
      file = spec;
    } else {
      name = spec.substr(0, eq);
      file = spec.substr(eq + 1);
    }
    if (inputs.count(name)) return ReportError("run", UserError("--input: '" + name + "' is given twice"));
    auto t = ReadNpy(file);
    if (!t) return ReportError("run", std::move(t).WithContext("input '" + name + "'").error());
    inputs[name] = std::move(*t);
  }
  runtime::SessionOptions options;
  options.threads = threads;
  auto session = runtime::Session::Create(*model, options);
  if (!session) return ReportError("run", std::move(session).WithContext(path).error());
  auto outputs = (*session)->Run(inputs);
  if (!outputs) return ReportError("run", std::move(outputs).WithContext(path).error());
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return ReportError("run", UserError(out_dir + ": cannot create directory: " + ec.message()));
  for (const auto& [name, t] : *outputs) {
    std::string file_name = name;
    for (char& c : file_name)
      if (c == '/' || c == '\\' || c == ':') c = '_';
    const std::string out = (std::filesystem::path(out_dir) / (file_name + ".npy")).string();
    if (Status s = WriteNpy(out, t); !s.ok()) return ReportError("run", s.error());
    std::cout << name << ": " << t.Describe() << " -> " << out << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddRunCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("run", "Run a model on .npy inputs and write its outputs as .npy files");
  auto model = std::make_shared<std::string>();
  auto inputs = std::make_shared<std::vector<std::string>>();
  auto out_dir = std::make_shared<std::string>();
  auto threads = std::make_shared<int>(0);
  cmd->add_option("model", *model, "ONNX model file")->required();
  cmd->add_option("--input,-i", *inputs, "NAME=FILE.npy (FILE.npy alone for a single-input model)")->required();
  cmd->add_option("--output-dir,-o", *out_dir, "Folder for the outputs (one NAME.npy each)")->required();
  cmd->add_option("--threads", *threads, "Threads (default: all cores)");
  cmd->callback([=, &exit_code] { exit_code = RunRun(*model, *inputs, *out_dir, *threads); });
}

}  // namespace seqto::cli
