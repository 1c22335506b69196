// seqto analyze MODEL --calib-data DATA --data DATA [quantize options] [--ranker NAME]
//
// Quantizes the model fully (calibrating once), measures how much each quantization
// group suffers (weight, qdq and xmodel SQNR, SeQTO's score, output sensitivity, the
// forward and backward searches' orders) and prints every ranker's order. With
// --compare-rankers K1,K2,.. it also measures, for each ranker, the accuracy loss
// after giving the first K groups back to float: the evidence for choosing a ranker.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli/common.h"
#include "cli/quant_flags.h"
#include "eval/metrics.h"
#include "onnxio/model_io.h"
#include "quant/analysis/analyze.h"
#include "quant/calib/calibrate.h"
#include "quant/quantize.h"
#include "quant/rank/ranker.h"
#include "quant/recover/recover.h"
#include "runners/runner.h"
#include "runtime/session.h"
#include "tune/config.h"
#include "tune/tuner.h"

namespace seqto::cli {

namespace {

using nlohmann::json;

struct AnalyzeArgs {
  std::string model, calib_data, data, labels, classes, preprocess, json, ranker = quant::kDefaultRanker;
  QuantFlags q;
  std::vector<std::string> compare;
  bool no_sensitivity = false, no_backward = false;
  size_t calib_samples = 256, samples = 256, eval_samples = 0, worst_samples = 0, batch = 64;
  size_t greedy_steps = quant::AnalysisOptions{}.greedy_steps;
  size_t search_candidates = quant::AnalysisOptions{}.search_candidates;
  uint64_t seed = 0;
  int threads = 0;
};

json Num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

std::string Fmt(double v, int precision = 1) {
  if (!std::isfinite(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  return buf;
}

struct Loss {
  double accuracy_loss = 0;  // points against labels, else top-1 disagreement in %
  double disagreement = 0;   // top-1 disagreement with the float model, %
  double sqnr_db = 0;        // output SQNR against the float model
};

// The model's first output over all batches, concatenated.
Expected<Tensor> FirstOutput(const ir::Model& model, const std::vector<runtime::TensorMap>& batches, int threads) {
  runtime::SessionOptions so;
  so.threads = threads;
  SEQTO_ASSIGN_OR_RETURN(auto session, runtime::Session::Create(model, so));
  std::vector<Tensor> parts;
  for (const auto& b : batches) {
    SEQTO_ASSIGN_OR_RETURN(auto out, session->Run(b));
    parts.push_back(out.at(model.graph.outputs[0].name));
  }
  return runners::ConcatDim0(parts);
}

// Accuracy loss and agreement of a model with the float model on in-memory batches.
Expected<Loss> AccuracyLoss(const ir::Model& model, const tune::LoadedSet& eval, const Tensor& float_logits,
                            double float_top1, int threads) {
  SEQTO_ASSIGN_OR_RETURN(Tensor logits, FirstOutput(model, eval.batches, threads));
  SEQTO_ASSIGN_OR_RETURN(AgreementMetrics m, Agreement(float_logits, logits));
  Loss loss;
  loss.disagreement = loss.accuracy_loss = m.top1_disagreement;
  loss.sqnr_db = m.sqnr_db;
  if (!eval.labels.empty()) {
    SEQTO_ASSIGN_OR_RETURN(double top1, TopKAccuracy(logits, eval.labels, 1));
    loss.accuracy_loss = float_top1 - top1;
  }
  return loss;
}

int RunAnalyze(const AnalyzeArgs& a, const CLI::App& cmd) {
  auto fail = [](const Error& e) { return ReportError("analyze", e); };
  auto options = BuildQuantOptions(a.q, cmd);
  if (!options) return fail(options.error());
  const quant::QuantOptions o = *options;
  auto ranker = quant::GetRanker(a.ranker);
  if (!ranker) return fail(ranker.error());
  std::vector<size_t> compare_ks;
  for (const auto& k : a.compare) {
    // Digits only: strtoul alone would take "-4" as a huge count.
    if (k.empty() || k.size() > 18 || k.find_first_not_of("0123456789") != std::string::npos)
      return fail(UserError("--compare-rankers: '" + k + "' is not a group count"));
    compare_ks.push_back(std::stoull(k));
  }

  auto loaded = onnxio::LoadModel(a.model);
  if (!loaded) return fail(loaded.error());
  if (Status s = RequireOutputs(*loaded, a.model); !s.ok()) return fail(s.error());
  auto prepared = quant::QuantPlan::Prepare(*loaded);
  if (!prepared) return fail(std::move(prepared).WithContext(a.model).error());
  const auto& inputs = prepared->graph.inputs;

  tune::DataSetConfig ranking_set, calib_set, eval_set;
  auto spec = data::ParsePreprocessSpec(a.preprocess);
  if (!spec) return fail(std::move(spec).WithContext("--preprocess").error());
  ranking_set.path = a.data;
  ranking_set.labels = a.labels;
  ranking_set.classes = a.classes;
  ranking_set.preprocess = *spec;
  ranking_set.samples = a.samples;
  calib_set = ranking_set;
  calib_set.path = a.calib_data.empty() ? a.data : a.calib_data;
  calib_set.labels.clear();
  if (!a.calib_data.empty()) calib_set.classes.clear();  // other data: the class list may not fit it
  calib_set.samples = a.calib_samples;
  eval_set = ranking_set;
  eval_set.samples = a.eval_samples;

  // Calibration samples (static mode): read by the recovery techniques and the
  // calibration.
  std::optional<tune::LoadedSet> calib;
  quant::BatchList calib_list;
  quant::recover::RecoveryContext ctx;
  ctx.threads = a.threads;
  ctx.seed = a.seed;
  ctx.say = [](const std::string& line) { std::fprintf(stderr, "seqto analyze: %s\n", line.c_str()); };
  if (o.mode == quant::QuantMode::kStatic) {
    auto loaded_calib = tune::LoadSet(calib_set, inputs, a.seed, a.batch, "calibration");
    if (!loaded_calib) return fail(loaded_calib.error());
    calib = std::move(*loaded_calib);
    calib_list.num_batches = calib->batches.size();
    calib_list.get = [&](size_t i) -> Expected<runtime::TensorMap> { return calib->batches[i]; };
    ctx.calibration = &calib_list;
  }
  // Accuracy recovery, float stage: the rewritten model is the one analyzed.
  nlohmann::json recovery = nlohmann::json::array();
  {
    auto rewritten = quant::recover::RewriteFloatModel(*prepared, o, ctx, recovery);
    if (!rewritten) return fail(std::move(rewritten).WithContext(a.model).error());
    prepared = std::move(*rewritten);
  }

  quant::TensorRanges ranges;
  if (o.mode == quant::QuantMode::kStatic) {
    auto tensors = quant::QuantPlan::TensorsToCalibrate(*prepared, o);
    if (!tensors) return fail(tensors.error());
    size_t next = 0;
    quant::BatchSource source = [&](runtime::TensorMap& feeds) -> Expected<bool> {
      if (next >= calib->batches.size()) return false;
      feeds = calib->batches[next++];
      return true;
    };
    std::fprintf(stderr, "seqto analyze: calibrating %zu tensors on %zu samples\n", tensors->size(), calib->samples);
    auto stats = quant::Calibrate(*prepared, *tensors, source, o.calibration_options, a.threads);
    if (!stats) return fail(stats.error());
    auto r = stats->Ranges(o.calibration);
    if (!r) return fail(r.error());
    ranges = *r;
  }
  auto plan = quant::QuantPlan::Create(*prepared, o, o.mode == quant::QuantMode::kStatic ? &ranges : nullptr);
  if (!plan) return fail(std::move(plan).WithContext(a.model).error());
  // Accuracy recovery, plan stage: the analysis measures the refined quantization.
  if (Status s = quant::recover::RefinePlan(*plan, ctx, recovery); !s.ok())
    return fail(Status(s).WithContext(a.model).error());
  // Checked before the analysis (the long part): excluding more groups than exist is
  // the same candidate as excluding all of them.
  for (size_t k : compare_ks)
    if (k > plan->groups().size())
      return fail(UserError("--compare-rankers: " + std::to_string(k) + " is more than the model's " +
                            std::to_string(plan->groups().size()) + " quantization groups (K may be 0 to " +
                            std::to_string(plan->groups().size()) + ")"));

  auto ranking = tune::LoadSet(ranking_set, inputs, a.seed, a.batch, "analysis");
  if (!ranking) return fail(ranking.error());
  quant::BatchList list;
  list.num_batches = ranking->batches.size();
  list.get = [&](size_t i) -> Expected<runtime::TensorMap> { return ranking->batches[i]; };
  quant::AnalysisOptions aopts;
  aopts.sensitivity = !a.no_sensitivity;
  aopts.worst_samples = a.worst_samples;
  aopts.greedy_steps = a.greedy_steps;
  aopts.search_candidates = a.search_candidates;
  aopts.backward = !a.no_backward;
  aopts.threads = a.threads;
  // A bar on a terminal; plain lines (about every tenth of the work) otherwise.
  const bool tty = ::isatty(2);
  aopts.progress = [tty](size_t done, size_t total) {
    if (tty) {
      std::fprintf(stderr, "\rseqto analyze: [%-30s] %zu/%zu", std::string(30 * done / total, '#').c_str(), done,
                   total);
      if (done == total) std::fprintf(stderr, "\n");
    } else if (done == total || (10 * done) / total != (10 * (done - 1)) / total) {
      std::fprintf(stderr, "seqto analyze: %zu/%zu\n", done, total);
    }
  };
  std::fprintf(stderr, "seqto analyze: %zu groups on %zu samples%s\n", plan->groups().size(), ranking->samples,
               aopts.sensitivity ? " (with sensitivity: 2 runs per group, then the searches)" : "");
  auto analysis = quant::Analyze(*plan, list, aopts);
  if (!analysis) return fail(analysis.error());

  // Every ranker's order.
  json rankings;
  quant::RankOptions ropts;
  ropts.seed = a.seed;
  for (const auto& r : quant::Rankers()) {
    if (r.needs_sensitivity && !aopts.sensitivity) continue;
    auto order = r.rank(*analysis, ropts);
    if (!order) return fail(std::move(order).WithContext("ranker '" + r.name + "'").error());
    rankings[r.name] = *order;
  }

  // The table, in execution order, with the chosen ranker's position.
  std::map<std::string, size_t> position;
  if (rankings.contains(a.ranker)) {
    const auto order = rankings[a.ranker].get<std::vector<std::string>>();
    for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i + 1;
  }
  std::printf("%s: %zu groups, %zu samples, full-model output SQNR %.1f dB (%.1f s)\n", a.model.c_str(),
              analysis->groups.size(), analysis->samples, analysis->full_output_sqnr_db, analysis->seconds);
  std::printf("%5s  %-44s %-18s %8s %8s %8s %6s %11s\n", "rank", "group", "op", "w(dB)", "qdq(dB)", "xmod(dB)", "score",
              "sensitivity");
  for (const auto& g : analysis->groups) {
    std::string name = g.name.size() > 44 ? "..." + g.name.substr(g.name.size() - 41) : g.name;
    std::printf("%5s  %-44s %-18s %8s %8s %8s %6s %11s\n",
                position.count(g.name) ? std::to_string(position[g.name]).c_str() : "-", name.c_str(),
                g.op_type.c_str(), Fmt(g.weight_sqnr_db).c_str(), Fmt(g.qdq_sqnr_db).c_str(),
                Fmt(g.xmodel_sqnr_db).c_str(), Fmt(g.seqto_score, 3).c_str(),
                std::isfinite(g.sensitivity_revert_one) && analysis->full_output_loss > 0
                    ? Fmt(100 * g.sensitivity_revert_one / analysis->full_output_loss, 1).c_str()
                    : "-");
  }
  std::printf(
      "(rank: position in the '%s' order; sensitivity: %% of the full quantization's output noise that reverting "
      "the group removes)\n",
      a.ranker.c_str());
  // The searches' orders, with the output loss left after reverting each prefix.
  auto print_search = [&](const char* title, const std::vector<quant::SearchStep>& steps, size_t limit) {
    if (steps.empty()) return;
    std::printf("%s (output loss after reverting the first k, %% of the full quantization's):\n", title);
    for (size_t i = 0; i < steps.size() && i < limit; ++i)
      std::printf("%5zu  %-44s %6s\n", i + 1, steps[i].group.c_str(),
                  analysis->sensitivity_full_loss > 0
                      ? Fmt(100 * steps[i].loss / analysis->sensitivity_full_loss, 1).c_str()
                      : "-");
  };
  print_search("greedy forward selection", analysis->greedy, analysis->greedy.size());
  print_search("backward elimination", analysis->backward, analysis->greedy.size());

  json j;
  j["model"] = a.model;
  j["samples"] = analysis->samples;
  j["sensitivity_samples"] = analysis->sensitivity_samples;
  j["full_output_sqnr_db"] = Num(analysis->full_output_sqnr_db);
  j["seconds"] = analysis->seconds;
  j["stages"] = tune::AnalysisStagesJson(*analysis);
  j["groups"] = tune::AnalysisGroupsJson(*analysis);
  j["macs"] = plan->model_macs();
  j["recovery"] = recovery;
  j["macs_unknown_nodes"] = plan->macs_unknown_nodes();
  if (aopts.sensitivity) j["sensitivity_full_loss"] = Num(analysis->sensitivity_full_loss);
  j["greedy_order"] = tune::SearchOrderJson(analysis->greedy);
  j["backward_order"] = tune::SearchOrderJson(analysis->backward);
  j["rankings"] = rankings;
  j["ranker"] = a.ranker;

  // --compare-rankers: the accuracy loss after excluding each ranker's first K groups.
  if (!compare_ks.empty()) {
    auto eval = tune::LoadSet(eval_set, inputs, a.seed, a.batch, "evaluation");
    if (!eval) return fail(eval.error());
    auto float_logits = FirstOutput(*prepared, eval->batches, a.threads);
    if (!float_logits) return fail(float_logits.error());
    double float_top1 = 0;
    if (!eval->labels.empty()) {
      auto t = TopKAccuracy(*float_logits, eval->labels, 1);
      if (!t) return fail(t.error());
      float_top1 = *t;
    }
    std::printf(
        "\nafter excluding the first K groups (%zu samples): accuracy loss (%s) / top-1 disagreement "
        "with the float model (%%) / output SQNR against the float model (dB)\n",
        eval->samples, eval->labels.empty() ? "= disagreement" : "points against labels");
    std::printf("%-16s", "ranker \\ K");
    for (size_t k : compare_ks) std::printf("%21zu", k);
    std::printf("\n");
    for (auto it = rankings.begin(); it != rankings.end(); ++it) {
      const auto order = it.value().get<std::vector<std::string>>();
      std::printf("%-16s", it.key().c_str());
      std::fflush(stdout);
      for (size_t k : compare_ks) {
        std::set<std::string> excluded(order.begin(), order.begin() + std::min(k, order.size()));
        auto model = plan->Materialize(excluded);
        if (!model) return fail(model.error());
        auto loss = AccuracyLoss(*model, *eval, *float_logits, float_top1, a.threads);
        if (!loss) return fail(loss.error());
        j["comparison"][it.key()][std::to_string(k)] = {{"accuracy_loss", loss->accuracy_loss},
                                                        {"top1_disagreement", loss->disagreement},
                                                        {"sqnr_db", loss->sqnr_db}};
        std::printf("%7.2f /%5.2f /%5.1f", loss->accuracy_loss, loss->disagreement, loss->sqnr_db);
        std::fflush(stdout);
      }
      std::printf("\n");
    }
    auto full = plan->Materialize({});
    if (!full) return fail(full.error());
    auto loss0 = AccuracyLoss(*full, *eval, *float_logits, float_top1, a.threads);
    if (!loss0) return fail(loss0.error());
    j["comparison_full_quantization"] = {{"accuracy_loss", loss0->accuracy_loss},
                                         {"top1_disagreement", loss0->disagreement},
                                         {"sqnr_db", loss0->sqnr_db}};
    j["comparison_samples"] = eval->samples;
    std::printf("(fully quantized: %.2f / %.2f / %.1f)\n", loss0->accuracy_loss, loss0->disagreement, loss0->sqnr_db);
  }
  if (!a.json.empty())
    if (Status s = WriteTextFile(a.json, j.dump(2) + "\n"); !s.ok()) return fail(s.error());
  return kExitOk;
}

}  // namespace

void AddAnalyzeCommand(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("analyze", "Measure how much quantization hurts each layer, and rank the layers");
  auto a = std::make_shared<AnalyzeArgs>();
  cmd->add_option("model", a->model, "ONNX model file (float)")->required();
  cmd->add_option("--data", a->data, "Analysis (ranking) data: .npy, image folder, ONNX test sets or MNIST idx")
      ->required();
  cmd->add_option("--calib-data", a->calib_data, "Calibration data (default: --data)");
  cmd->add_option("--labels", a->labels, "Labels for --data (.npy or idx), for --compare-rankers");
  cmd->add_option("--classes", a->classes,
                  "Class list for --data as an image folder: one class name per line, label = line index");
  cmd->add_option("--preprocess", a->preprocess, "Preprocessing (resize=..,crop=..,scale=..,mean=..,std=..)");
  cmd->add_option("--samples", a->samples, "Analysis samples (seeded subset; default 256)");
  cmd->add_option("--calib-samples", a->calib_samples, "Calibration samples (default 256)");
  cmd->add_option("--seed", a->seed, "Seed of the sample subsets");
  cmd->add_option("--batch", a->batch, "Batch size")->check(CLI::Range(1, 1 << 20));
  AddQuantFlags(*cmd, a->q);
  cmd->add_option("--ranker", a->ranker, "Ranker whose order the table shows (default: damage)");
  cmd->add_flag("--no-sensitivity", a->no_sensitivity, "Skip the output-sensitivity passes (2 runs per group)");
  cmd->add_option("--worst-samples", a->worst_samples, "Sensitivity on the N samples the full quantization hurts most");
  cmd->add_option("--greedy-steps", a->greedy_steps,
                  "Depth of the interaction searches at the output (about N runs per group; 0: none; default 8)");
  cmd->add_option("--search-candidates", a->search_candidates,
                  "The searches choose among the N groups with the largest isolated loss (0: all; default 12)");
  cmd->add_flag("--no-backward", a->no_backward, "Skip the backward-elimination search");
  cmd->add_option(
         "--compare-rankers", a->compare,
         "K1,K2,.. (0 to the number of groups): accuracy loss after excluding each ranker's first K groups (on "
         "--data, --eval-samples)")
      ->delimiter(',');
  cmd->add_option("--eval-samples", a->eval_samples, "Samples for --compare-rankers (default: all of --data)");
  AddThreadsOption(*cmd, a->threads);
  cmd->add_option("--json", a->json, "Write the analysis as JSON");
  cmd->callback([a, cmd, &exit_code] { exit_code = RunAnalyze(*a, *cmd); });
}

}  // namespace seqto::cli
