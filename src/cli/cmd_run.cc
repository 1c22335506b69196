// seqto run MODEL --input NAME=FILE.npy ... --output-dir DIR: run a model once and write
// each output as DIR/<name>.npy (file names made safe and unique: OutputFileNames).
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <set>
#include <vector>

#include "cli/common.h"
#include "core/npy.h"
#include "onnxio/model_io.h"
#include "runtime/session.h"

namespace seqto::cli {

namespace {

// Longest file name stem written: with ".npy" and the writer's temporary suffix
// (".tmp<pid>") it stays under the 255-byte limit of common file systems.
constexpr size_t kMaxStem = 200;

// One file name per output, in order: the name with '/', '\\' and ':' replaced by
// '_', cut to kMaxStem bytes (not inside a UTF-8 character), and made unique with
// "~2", "~3", ... where two outputs would share a file ("a/b" and "a_b"). Names
// that need no change keep their own file.
std::vector<std::string> OutputFileNames(const std::vector<std::string>& names) {
  std::vector<std::string> stems(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    std::string stem = names[i];
    for (char& c : stem)
      if (c == '/' || c == '\\' || c == ':') c = '_';
    if (stem.size() > kMaxStem) {
      size_t cut = kMaxStem;
      while (cut > 0 && (static_cast<unsigned char>(stem[cut]) & 0xC0) == 0x80) --cut;
      stem.resize(cut);
    }
    stems[i] = stem;
  }
  std::set<std::string> taken;
  std::vector<std::string> files(names.size());
  // Unchanged names first, so that renaming only ever moves the sanitized ones.
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < names.size(); ++i) {
      if ((stems[i] == names[i]) != (pass == 0)) continue;
      std::string stem = stems[i];
      for (int k = 2; taken.count(stem); ++k) stem = stems[i] + "~" + std::to_string(k);
      taken.insert(stem);
      files[i] = stem + ".npy";
    }
  return files;
}

int RunRun(const std::string& path, const std::vector<std::string>& input_specs, const std::string& out_dir,
           int threads) {
  auto model = onnxio::LoadModel(path);
  if (!model) return ReportError("run", model.error());
  if (Status s = RequireOutputs(*model, path); !s.ok()) return ReportError("run", s.error());
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
  std::vector<std::string> names;
  for (const auto& out : model->graph.outputs) names.push_back(out.name);
  const std::vector<std::string> files = OutputFileNames(names);
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = outputs->find(names[i]);
    if (it == outputs->end())
      return ReportError("run", InternalError("output '" + names[i] + "' missing from the run"));
    const Tensor& t = it->second;
    const std::string out = (std::filesystem::path(out_dir) / files[i]).string();
    if (Status s = WriteNpy(out, t); !s.ok())
      return ReportError("run", std::move(s).WithContext("output '" + names[i] + "'").error());
    std::cout << names[i] << ": " << t.Describe() << " -> " << out << "\n";
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
  AddThreadsOption(*cmd, *threads);
  cmd->callback([=, &exit_code] { exit_code = RunRun(*model, *inputs, *out_dir, *threads); });
}

}  // namespace seqto::cli
