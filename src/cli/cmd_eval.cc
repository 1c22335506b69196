// seqto eval MODEL --data DATA [--labels F] [--classes F] [--preprocess SPEC] [--reference FLOAT_MODEL]
//   [--runner engine|ort] [--samples K] [--seed S] [--batch B] [--threads T] [--save-predictions F.npy]
//   [--json F]
//
// Runs a model over a data set (or a seeded subset of it, the same for every model
// given the same seed) one batch at a time and reports accuracy against labels,
// agreement with a reference model, and latency per batch. Output 0 of the model
// holds the class scores ([N, C], or [N, ...] flattened per sample).
// The model runs on seqto's engine, or with --runner on another runner (ort: ONNX
// Runtime), which takes the batches in chunks (one child process per chunk) and
// times the first batch separately (runners::Runner::Latency). The reference always
// runs on seqto's engine, so `eval Q.onnx --runner ort --reference Q.onnx` measures
// how often ONNX Runtime and seqto agree on the same quantized model.
//
// JSON (--json): model, data, samples (evaluated), data_size, seed, batch, threads,
// preprocess (canonical spec), labels (their source or null);
// accuracy.top1 / .top5 in percent (with labels); with --reference: reference,
// agreement.top1 (percent of samples whose top-1 class equals the reference's),
// .top1_disagreement (100 - that), .top5_overlap (0..1), .kendall_tau (-1..1),
// .sqnr_db, .kl_divergence (nats); latency_ms.mean|p50|p95|min|max|stddev|runs
// (engine: one model run per batch, after untimed warm-up runs of the first batch, the
// last batch left out when smaller; another runner: as many timed runs of the first
// batch, inside the runner); runner; wall_s.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/common.h"
#include "core/npy.h"
#include "core/parallel.h"
#include "core/stats.h"
#include "data/model_feed.h"
#include "eval/metrics.h"
#include "onnxio/model_io.h"
#include "runners/runner.h"
#include "runtime/session.h"

namespace seqto::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct EvalArgs {
  std::string model, data, labels, classes, preprocess, reference, predictions, json;
  std::string runner = "engine";
  int64_t samples = 0;
  uint64_t seed = 0;
  int64_t batch = 32;
  int threads = 0;
  int warmup = 1;
};

// Progress on stderr for long runs: a bar on a terminal, plain lines otherwise.
// Nothing is printed during the first two seconds, so short runs stay quiet.
class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), start_(Clock::now()), tty_(isatty(STDERR_FILENO) != 0) {}
  void Update(int64_t done) {
    const double elapsed = Seconds();
    if (elapsed < 2.0) return;
    if (tty_) {
      if (elapsed - last_ < 0.2 && done < total_) return;
      const int width = 30;
      const int filled = static_cast<int>(width * done / std::max<int64_t>(total_, 1));
      std::fprintf(stderr, "\reval [%s%s] %lld/%lld samples, %.0f s",
                   std::string(static_cast<size_t>(filled), '#').c_str(),
                   std::string(static_cast<size_t>(width - filled), ' ').c_str(), static_cast<long long>(done),
                   static_cast<long long>(total_), elapsed);
      std::fflush(stderr);
      open_line_ = true;
    } else {
      if (elapsed - last_ < 10.0 && done < total_) return;
      std::fprintf(stderr, "eval: %lld/%lld samples, %.0f s\n", static_cast<long long>(done),
                   static_cast<long long>(total_), elapsed);
    }
    last_ = elapsed;
  }
  // Ends the bar's line (before the summary or an error message).
  void Finish() {
    if (open_line_) std::fprintf(stderr, "\n");
    open_line_ = false;
  }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  int64_t total_;
  Clock::time_point start_;
  bool tty_;
  bool open_line_ = false;
  double last_ = 0;
};

Expected<std::unique_ptr<runtime::Session>> OpenSession(const std::string& path, int threads) {
  SEQTO_ASSIGN_OR_RETURN(ir::Model model, onnxio::LoadModel(path));
  SEQTO_RETURN_IF_ERROR(RequireOutputs(model, path));
  runtime::SessionOptions options;
  options.threads = threads;
  auto session = runtime::Session::Create(model, options);
  if (!session) return std::move(session).WithContext(path).error();
  return std::move(*session);
}

// Output 0 (`name`) of a run, checked to hold one row per sample.
Expected<Tensor> Scores(const runtime::TensorMap& outputs, const std::string& name, int64_t batch,
                        const std::string& path) {
  auto it = outputs.find(name);
  if (it == outputs.end()) return InternalError(path + ": output '" + name + "' missing from the run");
  const Tensor& t = it->second;
  if (t.rank() == 0 || t.dim(0) != batch)
    return UserError(path + ": output '" + name + "' is " + t.Describe() + ", expected one row per sample (" +
                     std::to_string(batch) + " first)");
  return t;
}

int RunEval(const EvalArgs& a) {
  const auto wall_start = Clock::now();
  auto fail = [](const Error& e) { return ReportError("eval", e); };
  auto spec = data::ParsePreprocessSpec(a.preprocess);
  if (!spec) return fail(std::move(spec).WithContext("--preprocess").error());
  // The evaluated model: a session on seqto's engine, or another runner.
  std::unique_ptr<runtime::Session> session;
  std::unique_ptr<runners::Runner> runner;
  std::vector<ir::ValueInfo> inputs;
  std::string output0;
  if (a.runner == "engine") {
    auto s = OpenSession(a.model, a.threads);
    if (!s) return fail(s.error());
    session = std::move(*s);
    inputs = session->inputs();
    output0 = session->outputs()[0].name;
  } else {
    runners::RunnerOptions ro;
    ro.threads = a.threads;
    auto r = runners::MakeRunner(a.runner, ro);
    if (!r) return fail(std::move(r).WithContext("--runner").error());
    runner = std::move(*r);
    auto model = onnxio::LoadModel(a.model);
    if (!model) return fail(model.error());
    if (Status s = RequireOutputs(*model, a.model); !s.ok()) return fail(s.error());
    inputs = model->graph.inputs;  // the loader leaves out initializers listed as inputs
    output0 = model->graph.outputs[0].name;
  }
  std::unique_ptr<runtime::Session> reference;
  if (!a.reference.empty()) {
    auto r = OpenSession(a.reference, a.threads);
    if (!r) return fail(std::move(r).WithContext("--reference").error());
    reference = std::move(*r);
  }
  if (inputs.empty()) return fail(UserError(a.model + ": the model has no inputs to feed"));

  data::FeedOptions options;
  options.data.labels_path = a.labels;
  options.data.classes_path = a.classes;
  options.data.preprocess = *spec;
  options.samples = a.samples;
  options.seed = a.seed;
  options.batch = a.batch;
  auto feed = data::OpenModelFeed(a.data, inputs, options);
  if (!feed) return fail(feed.error());
  const std::shared_ptr<data::Dataset> ds = feed->dataset;
  const std::shared_ptr<data::BatchIterator> iterator = feed->iterator;
  // The reference takes the same feeds: by name, or by position where names differ.
  std::map<std::string, std::string> to_ref;  // model input -> reference input
  if (reference) {
    const auto& ref_inputs = reference->inputs();
    if (ref_inputs.size() != inputs.size())
      return fail(UserError("--reference " + a.reference + ": has " + std::to_string(ref_inputs.size()) +
                            " inputs, the model has " + std::to_string(inputs.size())));
    bool same_names = true;
    for (const auto& in : inputs)
      same_names &=
          std::any_of(ref_inputs.begin(), ref_inputs.end(), [&](const ir::ValueInfo& r) { return r.name == in.name; });
    for (size_t i = 0; i < inputs.size(); ++i)
      to_ref[inputs[i].name] = same_names ? inputs[i].name : ref_inputs[i].name;
  }

  seqto::AccuracyAccumulator accuracy;
  seqto::AgreementAccumulator agreement;
  std::vector<int64_t> predictions;
  predictions.reserve(feed->indices.size());
  std::vector<double> latencies;
  bool last_partial = false;
  Progress progress(iterator->num_samples());

  // One batch's scores from the model: accuracy, agreement with the reference, top-1.
  auto consume = [&](const data::Batch& batch, const Tensor& scores) -> Status {
    if (ds->has_labels())
      SEQTO_RETURN_IF_ERROR(
          Status(accuracy.Add(scores, batch.labels)).WithContext("labels (" + ds->labels_source() + ")"));
    if (reference) {
      runtime::TensorMap ref_feeds;
      for (const auto& [name, t] : batch.feeds) ref_feeds[to_ref[name]] = t;
      auto ref_out = reference->Run(ref_feeds);
      if (!ref_out) return std::move(ref_out).WithContext("--reference " + a.reference).error();
      SEQTO_ASSIGN_OR_RETURN(
          Tensor ref_scores,
          Scores(*ref_out, reference->outputs()[0].name, batch.size(), a.reference).WithContext("--reference"));
      SEQTO_RETURN_IF_ERROR(Status(agreement.Add(ref_scores, scores)).WithContext("--reference " + a.reference));
    }
    SEQTO_ASSIGN_OR_RETURN(std::vector<int64_t> top1, seqto::Top1(scores).WithContext(a.model));
    predictions.insert(predictions.end(), top1.begin(), top1.end());
    return Status::Ok();
  };

  // Another runner: batches gathered into chunks of about kChunkSamples, each run in
  // one call (one ONNX Runtime process), its output split back into the batches.
  constexpr int64_t kChunkSamples = 512;
  std::vector<data::Batch> chunk;
  int64_t chunk_samples = 0;
  std::optional<runtime::TensorMap> first_feeds;
  auto flush = [&]() -> Status {
    if (chunk.empty()) return Status::Ok();
    std::vector<runtime::TensorMap> feeds;
    for (const auto& b : chunk) feeds.push_back(b.feeds);
    auto out = runner->Run(a.model, feeds);
    if (!out) return std::move(out).WithContext(a.model + " (runner " + a.runner + ")").error();
    SEQTO_ASSIGN_OR_RETURN(Tensor all, Scores(*out, output0, chunk_samples, a.model));
    int64_t row = 0;
    for (const auto& b : chunk) {
      SEQTO_ASSIGN_OR_RETURN(Tensor scores, runners::SliceDim0(all, row, row + b.size()));
      row += b.size();
      SEQTO_RETURN_IF_ERROR(consume(b, scores));
    }
    chunk.clear();
    chunk_samples = 0;
    return Status::Ok();
  };

  data::Batch batch;
  bool first = true;
  while (true) {
    auto more = iterator->Next(batch);
    if (!more) return progress.Finish(), fail(more.error());
    if (!*more) break;
    last_partial = batch.size() < a.batch;
    if (runner) {
      if (!first_feeds) first_feeds = batch.feeds;
      chunk_samples += batch.size();
      chunk.push_back(batch);
      if (chunk_samples >= kChunkSamples)
        if (Status s = flush(); !s.ok()) return progress.Finish(), fail(s.error());
      progress.Update(iterator->samples_done());
      continue;
    }
    if (first)
      for (int w = 0; w < a.warmup; ++w) {  // untimed: first-run costs (allocation, packing) are not latency
        auto out = session->Run(batch.feeds);
        if (!out) return progress.Finish(), fail(std::move(out).WithContext(a.model).error());
      }
    first = false;
    const auto t0 = Clock::now();
    auto out = session->Run(batch.feeds);
    const auto t1 = Clock::now();
    if (!out) return progress.Finish(), fail(std::move(out).WithContext(a.model).error());
    latencies.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    auto scores = Scores(*out, output0, batch.size(), a.model);
    if (!scores) return progress.Finish(), fail(scores.error());
    if (Status s = consume(batch, *scores); !s.ok()) return progress.Finish(), fail(s.error());
    progress.Update(iterator->samples_done());
  }
  if (runner) {
    if (Status s = flush(); !s.ok()) return progress.Finish(), fail(s.error());
  }
  progress.Finish();
  std::optional<LatencyStats> runner_latency;
  if (runner && first_feeds) {
    // Timed inside the runner, as many runs as the data has batches (at least 3).
    runners::LatencyOptions lo;
    lo.warmup = a.warmup;
    lo.runs = static_cast<int>(std::max<int64_t>(3, (iterator->num_samples() + a.batch - 1) / a.batch));
    auto lat = runner->Latency(a.model, *first_feeds, lo);
    if (!lat) return fail(std::move(lat).WithContext(a.model + " (runner " + a.runner + ")").error());
    runner_latency = *lat;
  }
  // A smaller last batch would skew per-batch latency; leave it out when others exist.
  if (last_partial && latencies.size() > 1) latencies.pop_back();
  const LatencyStats lat = runner_latency ? *runner_latency : Summarize(latencies);
  const int64_t n = static_cast<int64_t>(predictions.size());

  nlohmann::json j;
  j["model"] = a.model;
  j["data"] = a.data;
  j["data_description"] = ds->description();
  j["samples"] = n;
  j["data_size"] = ds->size();
  j["seed"] = a.seed;
  j["batch"] = a.batch;
  j["runner"] = a.runner;
  j["threads"] = a.threads > 0 ? a.threads : NumThreads();
  j["preprocess"] = spec->ToString();
  j["labels"] = ds->has_labels() ? nlohmann::json(ds->labels_source()) : nlohmann::json(nullptr);
  std::printf("model      %s\n", a.model.c_str());
  std::printf("data       %s%s\n", ds->description().c_str(),
              ds->has_labels() ? (", labels from " + ds->labels_source()).c_str() : ", no labels");
  std::printf("samples    %lld of %lld (seed %llu), batch %lld\n", static_cast<long long>(n),
              static_cast<long long>(ds->size()), static_cast<unsigned long long>(a.seed),
              static_cast<long long>(a.batch));
  if (ds->has_labels()) {
    auto acc = accuracy.Result();
    if (!acc) return fail(acc.error());
    j["accuracy"] = {{"top1", acc->top1}, {"top5", acc->top5}, {"classes", acc->classes}};
    std::printf("accuracy   top-1 %.2f%%  top-%d %.2f%%\n", acc->top1,
                static_cast<int>(std::min<int64_t>(5, acc->classes)), acc->top5);
  }
  if (reference) {
    auto ag = agreement.Result();
    if (!ag) return fail(ag.error());
    j["reference"] = a.reference;
    j["agreement"] = {{"top1", 100.0 - ag->top1_disagreement},
                      {"top1_disagreement", ag->top1_disagreement},
                      {"top5_overlap", ag->top5_overlap},
                      {"kendall_tau", ag->kendall_tau},
                      {"sqnr_db", ag->sqnr_db},
                      {"kl_divergence", ag->kl_divergence}};
    std::printf(
        "agreement  with %s: top-1 %.2f%% (%.2f%% differ)  top-5 overlap %.4f  kendall tau %.4f  "
        "sqnr %.2f dB  kl %.3g\n",
        a.reference.c_str(), 100.0 - ag->top1_disagreement, ag->top1_disagreement, ag->top5_overlap, ag->kendall_tau,
        ag->sqnr_db, ag->kl_divergence);
  }
  j["latency_ms"] = {{"mean", lat.mean}, {"p50", lat.p50},       {"p95", lat.p95},  {"min", lat.min},
                     {"max", lat.max},   {"stddev", lat.stddev}, {"runs", lat.runs}};
  std::printf("latency    per batch of %lld: mean %.3f ms  p50 %.3f ms  p95 %.3f ms (%d batch%s)\n",
              static_cast<long long>(std::min<int64_t>(a.batch, n)), lat.mean, lat.p50, lat.p95, lat.runs,
              lat.runs == 1 ? "" : "es");
  const double wall = std::chrono::duration<double>(Clock::now() - wall_start).count();
  j["wall_s"] = wall;
  if (!a.predictions.empty()) {
    const Tensor t = Tensor::FromVector<int64_t>({n}, predictions);
    if (Status s = WriteNpy(a.predictions, t); !s.ok())
      return fail(std::move(s).WithContext("--save-predictions").error());
  }
  if (!a.json.empty())
    if (Status s = WriteTextFile(a.json, j.dump(2) + "\n"); !s.ok())
      return fail(std::move(s).WithContext("--json").error());
  return kExitOk;
}

}  // namespace

void AddEvalCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("eval", "Accuracy, agreement with a reference model and latency on a data set");
  auto a = std::make_shared<EvalArgs>();
  cmd->add_option("model", a->model, "ONNX model file")->required();
  cmd->add_option("--data", a->data,
                  "Data: a .npy file (N x ...), an image folder (class sub-folders give labels), an ONNX "
                  "test_data_set_* folder, or an MNIST idx images file")
      ->required();
  cmd->add_option("--labels", a->labels, "Class indices: .npy ([N], integers) or MNIST idx labels file");
  cmd->add_option("--classes", a->classes,
                  "Class list for an image folder: one class name per line, label = line index; class folders "
                  "are looked up in it");
  cmd->add_option("--preprocess", a->preprocess,
                  "key=value,...: resize=S|HxW, crop=S|HxW, scale=X, mean=A[:B:C], std=A[:B:C], "
                  "color=rgb|bgr|gray, layout=nchw|nhwc");
  cmd->add_option("--reference", a->reference,
                  "Reference (float) model: report agreement with its outputs (it runs on seqto's engine)");
  std::string runner_names;
  for (const auto& n : runners::RunnerNames()) runner_names += (runner_names.empty() ? "" : ", ") + n;
  cmd->add_option("--runner", a->runner, "What runs the model: " + runner_names + " (default engine)");
  cmd->add_option("--samples", a->samples, "Evaluate a seeded random subset of K samples (default: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--seed", a->seed, "Seed of the subset (same seed, same samples)");
  cmd->add_option("--batch", a->batch, "Batch size (default 32)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  AddThreadsOption(*cmd, a->threads);
  cmd->add_option("--warmup", a->warmup, "Untimed runs of the first batch (default 1)")->check(CLI::Range(0, 1000));
  cmd->add_option("--save-predictions", a->predictions, "Write the top-1 class per sample (int64 .npy)");
  cmd->add_option("--json", a->json, "Also write the results as JSON to this file");
  cmd->callback([a, &exit_code] { exit_code = RunEval(*a); });
}

}  // namespace seqto::cli
