// Accuracy recovery: techniques that make the full quantization lose less before the
// tuner excludes anything (docs/design.md, Accuracy recovery). One file per technique
// (recover/<name>.cc) registers itself with one line in recover/registry.cc.
//
// A technique works at one or both of two points of the quantization:
//   - the float stage, on the prepared float model before calibration (cross-layer
//     equalization, SmoothQuant): it rewrites the model so that it quantizes better,
//     and every candidate, excluded groups included, runs the rewritten model;
//   - the plan stage, on the full quantization after QuantPlan::Create (bias
//     correction, learned rounding): it edits the quantized values only
//     (QuantPlan::Refinements), so an excluded group gets its float values back.
// Both stages may read the calibration samples. Techniques run in the registry's
// order: all float-stage ones, then calibration, then the plan-stage ones.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "quant/analysis/analyze.h"
#include "quant/quantize.h"

namespace seqto::quant::recover {

// One option of a technique: every value is a double (a bool is 0 or 1, an integer
// a whole number), checked against the kind and the bounds when parsed.
struct OptionSpec {
  enum class Kind { kBool, kInteger, kNumber };
  std::string key;
  Kind kind = Kind::kNumber;
  double default_value = 0;
  double min = 0, max = 0;  // inclusive; ignored for kBool
  std::string help;
};

// What a technique may use besides the model.
struct RecoveryContext {
  const BatchList* calibration = nullptr;  // the calibration samples (static mode; else nullptr)
  int threads = 0;
  uint64_t seed = 0;                            // for techniques that sample or initialize
  std::function<void(const std::string&)> say;  // progress lines; may be empty
  // The quantization the techniques prepare for (types, per-channel, selected nodes);
  // set by RewriteFloatModel and RefinePlan.
  const QuantOptions* options = nullptr;
};

struct Technique {
  std::string name;
  std::string description;
  std::vector<OptionSpec> options;
  bool needs_data = false;   // cannot work without the calibration samples
  bool uses_data = false;    // reads them when there are some (static mode)
  bool static_only = false;  // needs static quantization (the plan stage edits its Q/DQ values)
  // Minutes rather than seconds on a mid-size CNN: the tuner's "auto" recipes leave
  // it out (a recipe list or quantization.recovery can still ask for it).
  bool expensive = false;
  // Whether the technique has anything to do on the prepared model under these
  // options (e.g. SmoothQuant needs a MatMul/Gemm with a constant weight); empty:
  // always. The tuner's "auto" recipes skip a technique that does not apply.
  std::function<bool(const ir::Model& prepared, const QuantOptions& options)> applies;
  // Float stage: returns the rewritten model. `record` receives what the technique
  // did (counts, scales...), shown in the report and the model's metadata.
  std::function<Expected<ir::Model>(const ir::Model& prepared, const RecoverySpec& spec, const RecoveryContext& ctx,
                                    nlohmann::json& record)>
      rewrite_float;
  // Plan stage: edits plan.refinements().
  using RefinePlanFn = std::function<Status(QuantPlan& plan, const RecoverySpec& spec, const RecoveryContext& ctx,
                                            nlohmann::json& record)>;
  RefinePlanFn refine_plan;
  // Plan stage again, for groups given 16-bit activations (the tuner's
  // int16_activations fallback): refines what differs there, after refine_plan (bias
  // correction: Refinements::int16_activation_values). Empty: such a group uses
  // refine_plan's edits.
  RefinePlanFn refine_plan_int16_activations;
};

// All techniques, in the order they run.
const std::vector<Technique>& Techniques();
const Technique* FindTechnique(const std::string& name);

// A spec's option value (the default when the spec does not set it).
double OptionValue(const RecoverySpec& spec, const std::string& key);

// Parses "name" or "name:key=value,key=value" (the --recover flag), or a JSON string
// or object {"name": ..., key: value, ...} (the config's quantization.recovery list).
// Unknown names and keys, values of the wrong kind or out of bounds are user errors
// naming `where` and the key.
Expected<RecoverySpec> ParseRecoverySpec(const std::string& text, const std::string& where);
Expected<RecoverySpec> ParseRecoverySpecJson(const nlohmann::json& j, const std::string& where);
// Every option with its value (defaults filled in), for config.json and the report.
nlohmann::json RecoverySpecToJson(const RecoverySpec& spec);
// Checks a list: known names, each at most once, static-only ones in static mode.
Status CheckRecoverySpecs(const QuantOptions& options);

// Output SQNR (dB) of `changed` against `original` on the calibration samples (the
// analysis's loss sums): +inf when equal. What a float-stage rewrite records of how
// far it moved the float model.
Expected<double> FloatOutputSqnr(const ir::Model& original, const ir::Model& changed, const RecoveryContext& ctx);

// The names and descriptions of all techniques with their options (help texts).
std::string TechniquesHelp();

// Technique factories, one per file.
Technique MakeEqualizeTechnique();
Technique MakeSmoothQuantTechnique();
Technique MakeBiasCorrectionTechnique();
Technique MakeAdaRoundTechnique();

}  // namespace seqto::quant::recover
