#include "cli/quant_flags.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/json_util.h"
#include "quant/recover/technique.h"
#include "tune/config.h"

namespace seqto::cli {

void AddQuantFlags(CLI::App& cmd, QuantFlags& f) {
  cmd.add_option("--mode", f.mode, "static (QDQ, calibrated) or dynamic (weights only; default static)")
      ->check(CLI::IsMember({"static", "dynamic"}));
  cmd.add_option("--calibration", f.calibration,
                 "Calibration method: minmax (default), entropy, percentile, distribution, mse");
  cmd.add_flag("--per-channel", f.per_channel, "Per-channel weights (output-channel axis)");
  cmd.add_flag("--reduce-range", f.reduce_range, "7-bit weights (ORT's reduce_range)");
  cmd.add_flag("--power-of-two", f.power_of_two, "Power-of-two scales (int8/int16 only)");
  cmd.add_option("--activation-type", f.activation_type, "uint8 (default), int8, uint16, int16");
  cmd.add_option("--weight-type", f.weight_type, "int8 (default), uint8, int16, uint16");
  cmd.add_option("--op-types", f.op_types, "Op types to quantize (comma-separated; default: all supported)")
      ->delimiter(',');
  cmd.add_option("--nodes", f.nodes, "Only these nodes (names or globs, comma-separated)")->delimiter(',');
  cmd.add_option("--exclude", f.exclude, "Keep these nodes in float (names or globs, comma-separated)")->delimiter(',');
  cmd.add_option("--int16-activations", f.int16_activations,
                 "Give these nodes' groups 16-bit activations, keeping 8-bit weights (names or globs, comma-separated; "
                 "static mode)")
      ->delimiter(',');
  cmd.add_option("--recover", f.recover,
                 "Accuracy recovery: NAME or NAME:key=value,... (repeat for several; they run in a fixed order):\n" +
                     quant::recover::TechniquesHelp());
  cmd.add_option("--config", f.config, "JSON options with ONNX Runtime's names (flags override them)");
}

Expected<quant::QuantOptions> BuildQuantOptions(const QuantFlags& f, const CLI::App& cmd) {
  auto given = [&](const char* flag) { return cmd.count(flag) > 0; };
  quant::QuantOptions o;
  if (!f.config.empty()) {
    SEQTO_ASSIGN_OR_RETURN(nlohmann::json j, ReadJsonFile(f.config));
    auto parsed = tune::ParseQuantOptionsJson(j, "");
    if (!parsed) return Status(parsed.error()).WithContext(f.config);
    o = std::move(*parsed);
  }
  if (given("--mode")) o.mode = f.mode == "dynamic" ? quant::QuantMode::kDynamic : quant::QuantMode::kStatic;
  if (given("--per-channel")) o.per_channel = f.per_channel;
  if (given("--reduce-range")) o.reduce_range = f.reduce_range;
  if (given("--power-of-two")) o.power_of_two = f.power_of_two;
  if (given("--activation-type")) {
    auto t = quant::ParseQuantType(f.activation_type);
    if (!t) return Status(t.error()).WithContext("--activation-type");
    o.activation_type = *t;
  }
  if (given("--weight-type")) {
    auto t = quant::ParseQuantType(f.weight_type);
    if (!t) return Status(t.error()).WithContext("--weight-type");
    o.weight_type = *t;
  }
  if (given("--calibration")) {
    auto m = quant::ParseCalibrationMethod(f.calibration);
    if (!m) return Status(m.error()).WithContext("--calibration");
    o.calibration = *m;
  }
  if (given("--op-types")) o.op_types_to_quantize = f.op_types;
  if (given("--nodes")) o.nodes_to_quantize = f.nodes;
  if (given("--exclude")) o.nodes_to_exclude = f.exclude;
  if (given("--int16-activations")) o.int16_activation_nodes = f.int16_activations;
  if (given("--recover")) {
    o.recovery.clear();
    for (const auto& text : f.recover) {
      SEQTO_ASSIGN_OR_RETURN(quant::RecoverySpec spec, quant::recover::ParseRecoverySpec(text, "--recover"));
      o.recovery.push_back(std::move(spec));
    }
  }
  if (Status s = quant::recover::CheckRecoverySpecs(o); !s.ok()) return s.error();
  quant::SyncCalibrationOptions(o);
  return o;
}

}  // namespace seqto::cli
