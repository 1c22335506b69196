// seqto quantize MODEL -o OUT.onnx --mode static|dynamic [--calib-data DATA] ...
//
// Quantizes a float model the way ONNX Runtime's quantization tool does (QDQ format
// for static, MatMulInteger/ConvInteger for dynamic) and writes the result. Options
// come from --config (a JSON object with ORT's option names) and are overridden by
// the flags given on the command line. --json describes the quantization groups the
// tuner works with.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/common.h"
#include "cli/quant_flags.h"
#include "data/open_dataset.h"
#include "data/sampling.h"
#include "onnxio/model_io.h"
#include "quant/calib/calibrate.h"
#include "quant/node_filter.h"
#include "quant/quantize.h"
#include "quant/recover/recover.h"
#include "tune/config.h"

namespace seqto::cli {

namespace {

using nlohmann::json;

struct QuantizeArgs {
  std::string model, output, calib_data, preprocess, json;
  QuantFlags q;
  int64_t calib_samples = 0;
  int64_t batch = 16;
  uint64_t seed = 0;
  int threads = 0;
};

// ---------------------------------------------------------------------------------

std::optional<Shape> InputShape(const ir::ValueInfo& info) {
  if (!info.shape) return std::nullopt;
  Shape s;
  for (const auto& d : *info.shape) s.push_back(d.known() ? d.value : -1);
  return s;
}

// Progress lines for calibration on stderr: at most one every 2 seconds (a bar would
// hide the other messages of a long run in a log).
class CalibrationProgress {
 public:
  explicit CalibrationProgress(int64_t batches) : batches_(batches), start_(std::chrono::steady_clock::now()) {}
  void Update(size_t done) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (static_cast<int64_t>(done) < batches_ && t - last_ < 2.0) return;
    last_ = t;
    std::fprintf(stderr, "seqto quantize: calibration %zu/%lld batches, %.1f s\n", done,
                 static_cast<long long>(batches_), t);
  }

 private:
  int64_t batches_;
  std::chrono::steady_clock::time_point start_;
  double last_ = 0;
};

int RunQuantize(QuantizeArgs a, const CLI::App& cmd) {
  auto fail = [](const Error& e) { return ReportError("quantize", e); };
  auto options = BuildQuantOptions(a.q, cmd);
  if (!options) return fail(options.error());
  quant::QuantOptions o = *options;

  auto loaded = onnxio::LoadModel(a.model);
  if (!loaded) return fail(loaded.error());
  auto prepared = quant::QuantPlan::Prepare(*loaded);
  if (!prepared) return fail(std::move(prepared).WithContext(a.model).error());
  // Calibration data (static mode): opened once, read by the recovery techniques
  // that need samples and by the calibration.
  std::shared_ptr<data::Dataset> ds;
  std::shared_ptr<data::BatchIterator> it;
  if (o.mode == quant::QuantMode::kStatic) {
    if (a.calib_data.empty()) return fail(UserError("--calib-data: static quantization needs calibration data"));
    if (prepared->graph.inputs.empty()) return fail(UserError(a.model + ": the model has no inputs to feed"));
    auto spec = data::ParsePreprocessSpec(a.preprocess);
    if (!spec) return fail(std::move(spec).WithContext("--preprocess").error());
    data::DataOptions options;
    options.preprocess = *spec;
    options.input_shape = InputShape(prepared->graph.inputs[0]);
    auto dataset = data::OpenDataset(a.calib_data, options);
    if (!dataset) return fail(std::move(dataset).WithContext("--calib-data").error());
    ds = *dataset;
    std::vector<data::TargetInput> targets;
    for (const auto& in : prepared->graph.inputs) targets.push_back({in.name, in.dtype, InputShape(in)});
    const std::vector<int64_t> indices = data::SampleIndices(ds->size(), a.calib_samples, a.seed);
    auto iterator = data::BatchIterator::Create(ds, indices, a.batch, targets);
    if (!iterator) return fail(std::move(iterator).WithContext("--calib-data").error());
    it = std::move(*iterator);
  }

  // Accuracy recovery, float stage: the rewritten model is the one calibrated and
  // quantized.
  std::vector<runtime::TensorMap> samples;
  if (it && quant::recover::UsesData(o)) {
    data::Batch batch;
    for (;;) {
      auto more = it->Next(batch);
      if (!more) return fail(std::move(more).WithContext("--calib-data").error());
      if (!*more) break;
      samples.push_back(std::move(batch.feeds));
    }
    it->Reset();
  }
  quant::BatchList sample_list;
  sample_list.num_batches = samples.size();
  sample_list.get = [&](size_t i) -> Expected<runtime::TensorMap> { return samples[i]; };
  quant::recover::RecoveryContext ctx;
  ctx.calibration = it ? &sample_list : nullptr;
  ctx.threads = a.threads;
  ctx.seed = a.seed;
  ctx.say = [](const std::string& line) { std::fprintf(stderr, "seqto quantize: %s\n", line.c_str()); };
  json recovery = json::array();
  {
    auto rewritten = quant::recover::RewriteFloatModel(*prepared, o, ctx, recovery);
    if (!rewritten) return fail(std::move(rewritten).WithContext(a.model).error());
    prepared = std::move(*rewritten);
  }

  auto tensors = quant::QuantPlan::TensorsToCalibrate(*prepared, o);
  if (!tensors) return fail(std::move(tensors).WithContext(a.model).error());

  std::optional<quant::TensorRanges> ranges;
  json calibration = nullptr;
  if (o.mode == quant::QuantMode::kStatic) {
    const int64_t num_batches = it->num_batches();
    std::fprintf(stderr, "seqto quantize: calibrating %zu tensors on %lld samples of %s\n", tensors->size(),
                 static_cast<long long>(it->num_samples()), ds->description().c_str());
    CalibrationProgress progress(num_batches);
    auto stats = quant::Calibrate(*prepared, *tensors, data::AsFeedSource(it), o.calibration_options, a.threads,
                                  [&](size_t done) { progress.Update(done); });
    if (!stats) return fail(std::move(stats).WithContext(a.model).error());
    auto r = stats->Ranges(o.calibration, o.calibration_options);
    if (!r) return fail(std::move(r).WithContext("calibration").error());
    ranges = std::move(*r);
    calibration = {{"method", quant::CalibrationMethodName(o.calibration)},
                   {"data", a.calib_data},
                   {"samples", it->num_samples()},
                   {"batches", num_batches},
                   {"tensors", tensors->size()}};
  }

  auto plan = quant::QuantPlan::Create(*prepared, o, ranges ? &*ranges : nullptr);
  if (!plan) return fail(std::move(plan).WithContext(a.model).error());
  // Accuracy recovery, plan stage (bias correction, learned rounding).
  if (Status s = quant::recover::RefinePlan(*plan, ctx, recovery); !s.ok())
    return fail(Status(s).WithContext(a.model).error());
  for (const auto& r : recovery) {
    // The scalar results on the line; lists and per-layer details are in --json.
    json brief = json::object();
    for (const auto& [key, value] : r["result"].items())
      if (!value.is_structured()) brief[key] = value;
    std::fprintf(stderr, "seqto quantize: recovery %s (%s stage) took %.1f s: %s\n",
                 r["name"].get<std::string>().c_str(), r["stage"].get<std::string>().c_str(),
                 r["seconds"].get<double>(), brief.dump().c_str());
  }
  auto model = plan->Materialize();
  if (!model) return fail(std::move(model).WithContext(a.model).error());
  if (Status s = onnxio::CheckModel(*model); !s.ok())
    return fail(Error{ErrorKind::kInternal, "the quantized model fails the ONNX checker: " + s.message()});
  if (Status s = onnxio::SaveModel(*model, a.output); !s.ok()) return fail(s.error());
  std::error_code ec;
  const auto size = std::filesystem::file_size(a.output, ec);

  size_t qdq = 0;
  for (const auto& n : model->graph.nodes)
    if (n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear" || n.op_type == "DynamicQuantizeLinear") ++qdq;
  std::set<std::string> quantized;
  for (const auto& g : plan->groups())
    for (const auto& n : g.nodes) quantized.insert(n);
  std::printf("%s: %zu groups, %zu nodes quantized, %zu Q/DQ nodes, %lld bytes\n", a.output.c_str(),
              plan->groups().size(), quantized.size(), qdq, static_cast<long long>(ec ? 0 : size));

  if (!a.json.empty()) {
    json j;
    j["output"] = a.output;
    j["model"] = a.model;
    j["mode"] = o.mode == quant::QuantMode::kStatic ? "static" : "dynamic";
    j["size_bytes"] = ec ? 0 : static_cast<int64_t>(size);
    j["recovery"] = recovery;
    j["groups"] = json::array();
    for (const auto& g : plan->groups())
      j["groups"].push_back({{"name", g.name},
                             {"op_type", g.op_type},
                             {"order", g.order},
                             {"nodes", g.nodes},
                             {"weights", g.weights},
                             {"activations", g.activations},
                             {"owned_qdq_nodes", g.owned_qdq_nodes},
                             {"weight_elements", g.weight_elements},
                             {"output_channels", g.output_channels},
                             {"macs", g.macs >= 0 ? json(g.macs) : json(nullptr)}});
    // MACs at batch 1 of every Conv/ConvTranspose/Gemm/MatMul, quantized or not.
    j["macs"] = plan->model_macs();
    j["macs_unknown_nodes"] = plan->macs_unknown_nodes();
    // Nodes in execution order; excluded: nodes of a quantizable op type that the
    // name filters (nodes_to_quantize / nodes_to_exclude) left out.
    j["quantized_nodes"] = json::array();
    j["excluded_nodes"] = json::array();
    quant::NodeFilterSpec spec;
    spec.op_types = o.op_types_to_quantize;
    spec.include = o.nodes_to_quantize;
    spec.exclude = o.nodes_to_exclude;
    auto filter = quant::NodeFilter::ForGraph(prepared->graph, spec, quant::QuantPlan::SupportedOpTypes(o.mode));
    for (const auto& n : prepared->graph.nodes) {
      if (quantized.count(n.name))
        j["quantized_nodes"].push_back(n.name);
      else if (filter && filter->SelectsOpType(n.op_type) && !filter->SelectsName(n.name))
        j["excluded_nodes"].push_back(n.name);
    }
    j["qdq_nodes"] = qdq;
    j["calibration"] = calibration;
    j["options"] = tune::QuantOptionsToJson(o);  // the shape --config reads
    if (Status s = WriteTextFile(a.json, j.dump(2) + "\n"); !s.ok()) return fail(s.error());
  }
  return kExitOk;
}

}  // namespace

void AddQuantizeCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("quantize", "Quantize a model (static QDQ or dynamic), as ONNX Runtime's tool does");
  auto a = std::make_shared<QuantizeArgs>();
  cmd->add_option("model", a->model, "ONNX model file (float)")->required();
  cmd->add_option("--output,-o", a->output, "Quantized model to write")->required();
  cmd->add_option("--calib-data", a->calib_data,
                  "Calibration data: .npy (N x input shape, float32 or uint8), image folder, ONNX test data sets or "
                  "MNIST idx file");
  cmd->add_option("--preprocess", a->preprocess,
                  "Preprocessing of image data (resize=..,crop=..,scale=..,mean=..,std=..)");
  cmd->add_option("--calib-samples", a->calib_samples, "Calibrate on a seeded subset of N samples (default: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--seed", a->seed, "Seed of the calibration subset");
  cmd->add_option("--batch", a->batch, "Calibration batch size (default 16)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  AddQuantFlags(*cmd, a->q);
  cmd->add_option("--json", a->json, "Also write the quantization groups and settings as JSON to this file");
  AddThreadsOption(*cmd, a->threads);
  cmd->callback([a, cmd, &exit_code] { exit_code = RunQuantize(*a, *cmd); });
}

}  // namespace seqto::cli
