// The quantization plan: a float model, quantized fully once (static: with calibrated
// ranges; dynamic: weights only), divided into quantization groups. A candidate is the
// plan with some groups excluded: an edit of the full quantization, never a new
// calibration (docs/design.md, Pipeline). Options carry ONNX Runtime's names.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "quant/calib/calibrate.h"
#include "quant/scheme.h"

namespace seqto::quant {

namespace detail {
class ParamCache;
}

enum class QuantMode { kStatic, kDynamic };

// Per-tensor overrides (ORT's TensorQuantOverrides, STM32 style): any field left
// unset keeps the computed value.
struct TensorOverride {
  std::optional<QuantType> quant_type;
  std::optional<float> scale;
  std::optional<int64_t> zero_point;
  std::optional<int64_t> axis;
  std::optional<bool> symmetric;
  std::optional<bool> reduce_range;
  std::optional<double> rmin, rmax;
  bool operator==(const TensorOverride&) const = default;
};

// One accuracy-recovery technique the quantization applies (quant/recover/), with its
// options by name (booleans as 0/1). The registry checks names and values.
struct RecoverySpec {
  std::string name;
  std::map<std::string, double> options;
  bool operator==(const RecoverySpec&) const = default;
};

struct QuantOptions {
  QuantMode mode = QuantMode::kStatic;
  bool per_channel = false;
  // 7-bit weights. As in ORT's QDQ quantizer it applies to per-channel weights only
  // (per-tensor QDQ weights ignore it), and to dynamic mode's weights; never to
  // activations.
  bool reduce_range = false;
  QuantType activation_type = QuantType::kUInt8;
  QuantType weight_type = QuantType::kInt8;
  std::vector<std::string> op_types_to_quantize;  // empty: every supported op type
  std::vector<std::string> nodes_to_quantize;     // names or globs; empty: all
  std::vector<std::string> nodes_to_exclude;      // names or globs
  bool activation_symmetric = false;              // extra_options ActivationSymmetric
  // extra_options WeightSymmetric; unset: as ORT, symmetric for signed weight types
  // (int8, int16, int4) and asymmetric for unsigned ones.
  std::optional<bool> weight_symmetric;
  // extra_options QuantizeBias: int32 with scale s_in * s_w, zero point 0 (a bias
  // int32 cannot hold at that scale gets the scale doubled until it fits, instead of
  // ORT's saturation).
  bool quantize_bias = true;
  bool power_of_two = false;  // ESP-DL style scales 2^e
  CalibrationMethod calibration = CalibrationMethod::kMinMax;
  CalibrationOptions calibration_options;                  // CalibMovingAverage etc.
  std::map<std::string, TensorOverride> tensor_overrides;  // TensorQuantOverrides
  // Per-layer activation width: the groups of these nodes (names or globs; static
  // mode) quantize their activations to 16 bits and keep the plan's weights, in every
  // model of the plan (Fallback::kInt16Activations's precision, without excluding).
  std::vector<std::string> int16_activation_nodes;
  // Accuracy-recovery techniques (quant/recover/technique.h), applied in the
  // registry's order whatever the order here; each name at most once.
  std::vector<RecoverySpec> recovery;
  bool operator==(const QuantOptions&) const = default;
};

// Fills the calibration options that depend on the quantization settings (the MSE
// method optimizes for the activation type's grid). Call after changing options.
void SyncCalibrationOptions(QuantOptions& options);

// A quantization group: one quantized node and the Q/DQ it owns (docs/design.md, Pipeline).
struct QuantGroup {
  std::string name;  // the quantized node's name
  std::string op_type;
  std::vector<std::string> nodes;        // float-model nodes in the group
  std::vector<std::string> weights;      // initializers quantized for this group
  std::vector<std::string> activations;  // activation tensors quantized at its inputs/outputs
  // Inserted Q/DQ (and dynamic-quantization) nodes of the full model that exist only
  // because of this group: excluding the group removes at least these.
  std::vector<std::string> owned_qdq_nodes;
  size_t order = 0;             // position in execution order
  int64_t weight_elements = 0;  // total weight elements (the STM32 ranker's key)
  int64_t output_channels = 0;  // output channels of the weight (0 if none)
  int64_t macs = -1;            // multiply-accumulates at batch 1 (quant/macs.h); -1: unknown
};

// What the plan-stage recovery techniques (bias correction, learned rounding) change
// in the full quantization. Each entry applies only where its tensor is quantized at
// the plan's own precision (a group given 16-bit activations keeps the plan's
// weights, so its learned integers and its corrected biases too): an excluded group
// (float, or an int16/float16 fallback) uses the float model's values, which is what
// makes the corrections edits of the quantized model and not of the float one.
struct Refinements {
  // Float values quantized in place of an initializer's own, with the parameters the
  // original would get (so the scales do not move): corrected biases (int32, scale
  // s_in * s_w) and corrected constant inputs.
  std::map<std::string, Tensor> values;
  // The same, measured with the groups at 16-bit activations, for a node that has
  // them (it takes `values` where this has no entry). A correction repairs the mean
  // error its node's inputs bring, and 8-bit inputs bring a different one: on
  // MobileNetV2 per channel, every group at 16-bit activations agrees with float on
  // 97.25% of the photos with the 8-bit corrections and 98.25% with its own.
  std::map<std::string, Tensor> int16_activation_values;
  // Integer values (the storage type of the weight's parameters) used in place of
  // rounding a weight: learned rounding.
  std::map<std::string, Tensor> weight_integers;
  bool empty() const { return values.empty() && int16_activation_values.empty() && weight_integers.empty(); }
  // The refined value of `name` for a tensor quantized with (`int16_activations`) or
  // without 16-bit activations, or nullptr.
  const Tensor* Value(const std::string& name, bool int16_activations) const {
    if (int16_activations)
      if (auto it = int16_activation_values.find(name); it != int16_activation_values.end()) return &it->second;
    auto it = values.find(name);
    return it != values.end() ? &it->second : nullptr;
  }
};

// What an excluded group falls back to.
// kInt16Activations keeps the group's weights at the plan's type and gives its
// activations 16 bits: a per-group activation width, the alternative to exclusion
// when a group's damage comes from its activations.
enum class Fallback { kFloat, kInt16, kFloat16, kInt16Activations };

class QuantPlan {
 public:
  // The tensors static quantization needs ranges for (float inputs/outputs of the
  // nodes the options select), in the prepared model. Calibrate these before Create.
  // Checks the options first: every name/glob of nodes_to_quantize/nodes_to_exclude
  // must match a node, every op type must be supported (a user error names it).
  static Expected<std::set<std::string>> TensorsToCalibrate(const ir::Model& prepared, const QuantOptions& options);
  // Prepares a float model for quantization: stable node names, Constant nodes as
  // initializers, BatchNormalization folded into Conv, shape/type information (as
  // ORT's quant_pre_process does).
  static Expected<ir::Model> Prepare(const ir::Model& float_model);

  // The full quantization of a prepared model. `ranges` is required for static mode
  // (ORT's adjustments are applied to a copy: a quantized Relu/Clip's input takes its
  // output's range, a Softmax's output is [0, 1]).
  //
  // Groups: every quantized node that needs a Q/DQ is in exactly one group. A
  // Relu/Clip that ORT folds into its producer (no Q/DQ between them) joins the
  // producer's group; a pass-through op (Reshape, MaxPool, ..., whose output reuses
  // its input's parameters) joins the group that quantized its input; a group whose
  // exclusion would change nothing (all its Q/DQ are needed by neighbours, e.g. an
  // Add between quantized convs) joins the group producing its latest input. So
  // excluding any one group changes the model.
  static Expected<QuantPlan> Create(const ir::Model& prepared, const QuantOptions& options, const TensorRanges* ranges);

  const ir::Model& prepared_model() const { return prepared_; }
  const QuantOptions& options() const { return options_; }
  const std::vector<QuantGroup>& groups() const { return groups_; }
  const QuantGroup* FindGroup(const std::string& name) const;
  // MACs of the whole prepared model at batch 1 (every counted node, quantized or
  // not; quant/macs.h), and its counted nodes whose shapes are unknown.
  int64_t model_macs() const { return model_macs_; }
  const std::vector<std::string>& macs_unknown_nodes() const { return macs_unknown_nodes_; }

  // The QDQ model with every group except `excluded` quantized, built from the
  // prepared model, the ranges and the options alone (deterministic). A tensor gets
  // Q/DQ iff a quantized node needs it (one pair per tensor, shared by all its
  // readers, as ORT does). Unknown group names are an error. The model passes the
  // ONNX checker and runs in ONNX Runtime.
  //   kFloat:   excluded groups' nodes are not quantized.
  //   kInt16:   (static) their tensors use int16 Q/DQ with parameters from the same
  //             ranges, their weights int16 symmetric; a tensor shared with a
  //             quantized group takes the wider type.
  //   kInt16Activations: (static) as kInt16 for their activations (and constant
  //             inputs quantized as activations), their weights keep the plan's
  //             type and parameters;
  //   kFloat16: (static) their tensors are rounded to float16 (Cast pairs) and their
  //             weights and biases stored as float16; the ops still compute in
  //             float32, which every runtime can run.
  Expected<ir::Model> Materialize(const std::set<std::string>& excluded = {},
                                  Fallback fallback = Fallback::kFloat) const;

  // The plan-stage recovery techniques' edits (quant/recover/), used by every later
  // Materialize. Static mode only (dynamic quantization has no planned biases).
  const Refinements& refinements() const { return refinements_; }
  void SetRefinements(Refinements refinements) { refinements_ = std::move(refinements); }
  // What the recovery techniques did (a JSON array, one object per technique), written
  // into every materialized model's metadata as "seqto.recovery"; empty: none ran.
  const std::string& recovery_record() const { return recovery_record_; }
  void SetRecoveryRecord(std::string record) { recovery_record_ = std::move(record); }

  // The op types each mode can quantize (what op_types_to_quantize may name).
  static const std::set<std::string>& SupportedOpTypes(QuantMode mode);

 private:
  ir::Model prepared_;
  QuantOptions options_;
  TensorRanges ranges_;  // as calibrated, adjusted as ORT does (Relu/Clip inputs, Softmax outputs)
  std::vector<QuantGroup> groups_;
  std::vector<std::vector<size_t>> group_nodes_;  // prepared-graph node indices of each group
  std::vector<bool> int16_activation_groups_;     // by group: options_.int16_activation_nodes
  Status MarkInt16ActivationGroups();
  int64_t model_macs_ = 0;
  std::vector<std::string> macs_unknown_nodes_;
  void CountGroupMacs();
  // Weight scales/zero points, computed once and shared by every Materialize (and by
  // copies of the plan).
  std::shared_ptr<detail::ParamCache> cache_;
  Refinements refinements_;
  std::string recovery_record_;
};

}  // namespace seqto::quant
