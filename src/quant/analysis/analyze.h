// Layer error analysis (docs/design.md, Error metrics and rankers): for every quantization group of
// a plan, how much quantization hurts it.
//   - weight SQNR: float weight against its dequantized weight;
//   - qdq SQNR: a quantized activation before Q against after DQ, in the QDQ model;
//   - xmodel SQNR: the activation in the float model against after DQ in the QDQ model
//     (accumulated error of everything upstream);
//   - SeQTO's score: 0.5 * norm(xmodel) + 0.5 * norm(qdq), min-max normalized over groups;
//   - output sensitivity: the output loss against the float model when only this group
//     is quantized (isolated) and the loss removed when only this group is reverted to
//     float (revert-one);
//   - two searches for the groups to revert first that see how groups interact (two
//     groups whose errors compound, or cancel), both measured at the output on the
//     ranking subset: greedy forward selection (from the fully quantized model,
//     revert the group that lowers the loss most, repeat) and backward elimination
//     (from the float model, quantize the group that raises the loss least, repeat;
//     the groups left float longest are the ones to revert first).
// All SQNRs are over all samples concatenated. The float and the QDQ model each run
// once per batch and values are compared as they stream: no activation is kept
// beyond the batch that produced it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/quantize.h"
#include "runtime/session.h"

namespace seqto::quant {

// The ranking subset: batch i on demand (the same batches every time it is asked).
struct BatchList {
  size_t num_batches = 0;
  std::function<Expected<runtime::TensorMap>(size_t index)> get;
};

struct AnalysisOptions {
  bool sensitivity = true;  // run the isolated pass (1 run per group over the subset)
  bool revert_one = true;   // with sensitivity: also the revert-one pass (1 more run per group)
  // Revert-one sensitivity only on the `worst_samples` samples where the fully
  // quantized model's output loss is largest (as NNCF does); 0: all samples.
  size_t worst_samples = 0;
  // With sensitivity: the depth of the interaction searches (0: neither runs).
  // Forward selection takes this many steps; each evaluates every candidate (see
  // search_candidates) not yet reverted (the first step is free when the revert-one
  // pass ran, as it measures the same plans). Backward elimination, while more than
  // steps + 1 groups are left float, quantizes the least damaging half at once (never
  // going below steps + 1), then one group per round, so its first `steps` positions
  // are measured; its first round is the isolated pass. The default covers the first
  // exclusions, where a ranking matters most to the tuner.
  size_t greedy_steps = 8;
  bool backward = true;  // with greedy_steps > 0: also backward elimination
  // With greedy_steps > 0: both searches choose among the `search_candidates`
  // groups with the largest isolated loss only (backward elimination quantizes the
  // others in its first round); 0: among all groups. Forward selection then costs
  // about steps * search_candidates runs and backward elimination about
  // search_candidates + (steps + 1)^2 / 2, independent of the model's size.
  size_t search_candidates = 12;
  int threads = 0;  // 0: all cores; groups are evaluated in parallel
  // Sensitivity passes and searches evaluate edited plans incrementally
  // (quant/analysis/incremental.h): each round's base runs once per chunk of
  // `chunk_samples` samples, each plan only downstream of its change. false: every
  // plan runs whole on every sample (the reference the tests compare with).
  bool incremental = true;
  size_t chunk_samples = 10;
  // With incremental: the sensitivity passes stop adding chunks once the first
  // `stable_top` groups by isolated loss (in order) have stayed the same over the
  // last `stable_chunks` chunks added (and at least `min_chunks` are in); later
  // passes use the same samples. stable_chunks = 0: all samples.
  size_t stable_top = 10;
  size_t stable_chunks = 2;
  size_t min_chunks = 3;
  // Called after each unit of work (done, total) for progress display.
  std::function<void(size_t, size_t)> progress;
};

struct GroupAnalysis {
  std::string name;
  std::string op_type;
  std::vector<std::string> nodes;
  size_t order = 0;
  int64_t weight_elements = 0;
  int64_t output_channels = 0;
  int64_t macs = -1;          // at batch 1 (QuantGroup::macs); -1: unknown
  double weight_sqnr_db = 0;  // NaN when the group has no quantized weight
  double qdq_sqnr_db = 0;     // NaN when the group has no quantized activation
  double xmodel_sqnr_db = 0;  // NaN when the group has no quantized activation
  double seqto_score = 0;     // 0..1, higher = better quantized (SeQTO's reading)
  // Output loss (noise-to-signal power ratio of the model outputs against the float
  // model's, all samples; 0 = identical) with only this group quantized, and the
  // loss removed when only this group is reverted (full loss - loss without it).
  // NaN when the sensitivity pass did not run.
  double sensitivity_isolated = 0;
  double sensitivity_revert_one = 0;
};

// One position of a search's order: the group, and the output loss on the subset
// with it and every group before it reverted to float (NaN where the search did not
// measure that plan).
struct SearchStep {
  std::string group;
  double loss = 0;
};

// Where the analysis spent its time: one entry per pass (the SQNR pass, the isolated
// pass, the fully quantized model, revert-one, the forward and backward searches).
struct AnalysisStage {
  std::string name;
  double seconds = 0;      // wall time
  double cpu_seconds = 0;  // CPU time of the whole process over the same span
  size_t plans = 0;        // edited plans measured (the SQNR pass: the float and the QDQ model)
  size_t samples = 0;      // samples each of them ran on
};

struct AnalysisResult {
  std::vector<GroupAnalysis> groups;  // in the plan's group order
  double full_output_loss = 0;        // loss of the fully quantized model
  double full_output_sqnr_db = 0;
  size_t samples = 0;
  size_t sensitivity_samples = 0;  // samples the sensitivity passes used
  // With incremental and stable_chunks > 0: the isolated pass's first stable_top
  // groups after each chunk of samples (how the sample count was chosen).
  std::vector<std::vector<std::string>> stability_trace;
  size_t plan_evaluations = 0;  // edited plans the sensitivity passes and searches measured
  // Output loss of the fully quantized model on the sensitivity subset (what
  // revert-one and the search losses compare with); NaN without sensitivity.
  double sensitivity_full_loss = 0;
  // Greedy forward selection: greedy_steps positions (fewer with fewer groups), each
  // with its measured loss. Empty when it did not run.
  std::vector<SearchStep> greedy;
  // Backward elimination: every group, in the order to revert them; the loss is
  // measured for at least the first greedy_steps positions (NaN where a half was
  // quantized at once; 0 at the last, all reverted). Empty when it did not run.
  std::vector<SearchStep> backward;
  double seconds = 0;  // wall time of the analysis
  std::vector<AnalysisStage> stages;
};

// The output loss used by sensitivity: sum ||ref - cand||^2 / sum ||ref||^2 over all
// outputs and samples.
double OutputLoss(double signal_sumsq, double noise_sumsq);

Expected<AnalysisResult> Analyze(const QuantPlan& plan, const BatchList& data, const AnalysisOptions& options);

}  // namespace seqto::quant
