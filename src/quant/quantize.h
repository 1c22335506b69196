// The quantization plan: a float model, quantized fully once (static: with calibrated
// ranges; dynamic: weights only), divided into quantization groups. A candidate is the
// plan with some groups excluded: an edit of the full quantization, never a new
// calibration (DESIGN.md section 2). Options carry ONNX Runtime's names.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"
#include "quant/calib/calibrate.h"
#include "quant/scheme.h"

namespace seqto::quant {

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
};

struct QuantOptions {
  QuantMode mode = QuantMode::kStatic;
  bool per_channel = false;
  bool reduce_range = false;
  QuantType activation_type = QuantType::kUInt8;
  QuantType weight_type = QuantType::kInt8;
  std::vector<std::string> op_types_to_quantize;  // empty: every supported op type
  std::vector<std::string> nodes_to_quantize;     // names or globs; empty: all
  std::vector<std::string> nodes_to_exclude;      // names or globs
  bool activation_symmetric = false;              // extra_options ActivationSymmetric
  bool weight_symmetric = true;                   // extra_options WeightSymmetric
  bool quantize_bias = true;                      // extra_options QuantizeBias
  bool power_of_two = false;                      // ESP-DL style scales 2^e
  CalibrationMethod calibration = CalibrationMethod::kMinMax;
  CalibrationOptions calibration_options;         // CalibMovingAverage etc.
  std::map<std::string, TensorOverride> tensor_overrides;  // TensorQuantOverrides
};

// A quantization group: one quantized node and the Q/DQ it owns (DESIGN.md section 2).
struct QuantGroup {
  std::string name;                      // the quantized node's name
  std::string op_type;
  std::vector<std::string> nodes;        // float-model nodes in the group
  std::vector<std::string> weights;      // initializers quantized for this group
  std::vector<std::string> activations;  // activation tensors quantized at its inputs/outputs
  // Inserted Q/DQ (and dynamic-quantization) nodes of the full model that exist only
  // because of this group: excluding the group removes at least these.
  std::vector<std::string> owned_qdq_nodes;
  size_t order = 0;                      // position in execution order
  int64_t weight_elements = 0;           // total weight elements (the STM32 ranker's key)
  int64_t output_channels = 0;           // output channels of the weight (0 if none)
};

// What an excluded group falls back to.
enum class Fallback { kFloat, kInt16, kFloat16 };

class QuantPlan {
 public:
  // The tensors static quantization needs ranges for (inputs/outputs of quantizable
  // nodes), in the prepared model. Calibrate these before Create.
  static Expected<std::set<std::string>> TensorsToCalibrate(const ir::Model& prepared, const QuantOptions& options);
  // Prepares a float model for quantization: stable node names, BatchNormalization
  // folded into Conv, shape/type information (as ORT's quant_pre_process does).
  static Expected<ir::Model> Prepare(const ir::Model& float_model);

  // The full quantization of a prepared model. `ranges` is required for static mode.
  static Expected<QuantPlan> Create(const ir::Model& prepared, const QuantOptions& options,
                                    const TensorRanges* ranges);

  const ir::Model& prepared_model() const { return prepared_; }
  const QuantOptions& options() const { return options_; }
  const std::vector<QuantGroup>& groups() const { return groups_; }
  const QuantGroup* FindGroup(const std::string& name) const;

  // The QDQ model with every group except `excluded` quantized. Unknown group names
  // are an error. The model passes the ONNX checker and runs in ONNX Runtime.
  Expected<ir::Model> Materialize(const std::set<std::string>& excluded = {},
                                  Fallback fallback = Fallback::kFloat) const;

 private:
  ir::Model prepared_;
  QuantOptions options_;
  TensorRanges ranges_;
  std::vector<QuantGroup> groups_;
};

}  // namespace seqto::quant
