// seqto info MODEL [--json F]: what a model is made of.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "onnxio/model_io.h"
#include "ops/registry.h"

namespace seqto::cli {

namespace {

nlohmann::json ValueJson(const ir::ValueInfo& v) {
  nlohmann::json j;
  j["name"] = v.name;
  if (!v.is_tensor()) {  // sequence, map, optional, ...
    j["type"] = v.other_type;
    return j;
  }
  j["dtype"] = DTypeName(v.dtype);
  if (v.shape) {
    nlohmann::json dims = nlohmann::json::array();
    for (const auto& d : *v.shape) {
      if (d.known())
        dims.push_back(d.value);
      else
        dims.push_back(d.param.empty() ? nlohmann::json("?") : nlohmann::json(d.param));
    }
    j["shape"] = dims;
  } else {
    j["shape"] = nullptr;
  }
  return j;
}

int RunInfo(const std::string& path, const std::string& json_path) {
  auto model = onnxio::LoadModel(path);
  if (!model) return ReportError("info", model.error());
  const ir::Graph& g = model->graph;
  std::map<std::string, int> op_counts;
  std::map<std::string, int64_t> unsupported;  // op -> opset
  const auto& registry = ops::OpRegistry::Global();
  for (const auto& n : g.nodes) {
    const std::string op = n.domain.empty() ? n.op_type : n.domain + "." + n.op_type;
    op_counts[op]++;
    auto opset = model->opsets.find(n.domain);
    const int64_t version = opset != model->opsets.end() ? opset->second : n.domain.empty() ? 0 : 1;
    if (!registry.Find(n.domain, n.op_type, version)) unsupported[op] = version;
  }
  int64_t params = 0, param_bytes = 0;
  for (const auto& [name, t] : g.initializers) {
    params += t.numel();
    param_bytes += static_cast<int64_t>(t.nbytes());
  }
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);

  nlohmann::json j;
  j["model"] = path;
  j["opset"] = model->onnx_opset();
  nlohmann::json opsets = nlohmann::json::object();
  for (const auto& [domain, version] : model->opsets) opsets[domain.empty() ? "ai.onnx" : domain] = version;
  j["opsets"] = opsets;
  j["ir_version"] = model->ir_version;
  j["producer"] = model->producer_name + (model->producer_version.empty() ? "" : " " + model->producer_version);
  j["inputs"] = nlohmann::json::array();
  for (const auto& v : g.inputs) j["inputs"].push_back(ValueJson(v));
  j["outputs"] = nlohmann::json::array();
  for (const auto& v : g.outputs) j["outputs"].push_back(ValueJson(v));
  j["nodes"] = g.nodes.size();
  j["op_types"] = op_counts;
  j["unsupported_ops"] = nlohmann::json::array();
  for (const auto& [op, version] : unsupported) j["unsupported_ops"].push_back(op);
  j["parameters"] = params;
  j["parameter_bytes"] = param_bytes;
  j["initializers"] = g.initializers.size();
  j["file_size_bytes"] = ec ? 0 : file_size;

  std::cout << "model:      " << path << "\n"
            << "opset:      " << model->onnx_opset() << " (ir_version " << model->ir_version << ")\n"
            << "producer:   " << j["producer"].get<std::string>() << "\n"
            << "file size:  " << (ec ? 0 : file_size) << " bytes\n"
            << "parameters: " << params << " in " << g.initializers.size() << " initializers (" << param_bytes
            << " bytes)\n"
            << "inputs:\n";
  for (const auto& v : g.inputs) std::cout << "  " << v.name << ": " << v.Describe() << "\n";
  std::cout << "outputs:\n";
  for (const auto& v : g.outputs) std::cout << "  " << v.name << ": " << v.Describe() << "\n";
  std::cout << "nodes:      " << g.nodes.size() << "\n";
  for (const auto& [op, count] : op_counts) {
    std::cout << "  " << op << ": " << count;
    if (auto it = unsupported.find(op); it != unsupported.end())
      std::cout << "  (not supported by seqto at opset " << it->second << ")";
    std::cout << "\n";
  }
  if (!json_path.empty())
    if (Status s = WriteTextFile(json_path, j.dump(2) + "\n"); !s.ok()) return ReportError("info", s.error());
  return kExitOk;
}

}  // namespace

void AddInfoCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("info", "Show a model's opset, inputs, outputs, op counts, parameters and size");
  auto model = std::make_shared<std::string>();
  auto json = std::make_shared<std::string>();
  cmd->add_option("model", *model, "ONNX model file")->required();
  cmd->add_option("--json", *json, "Also write the information as JSON to this file");
  cmd->callback([=, &exit_code] { exit_code = RunInfo(*model, *json); });
}

}  // namespace seqto::cli
