// The calibration method registry. Adding a method: one file in calib/ defining its
// function, its enum value in calibrate.h, and one line here.
#include "quant/calib/stats.h"

namespace seqto::quant::calib {

Expected<TensorRange> MinMaxRange(const TensorStats& stats, const CalibrationOptions& options);      // minmax.cc
Expected<TensorRange> EntropyRange(const TensorStats& stats, const CalibrationOptions& options);     // entropy.cc
Expected<TensorRange> PercentileRange(const TensorStats& stats, const CalibrationOptions& options);  // percentile.cc
Expected<TensorRange> DistributionRange(const TensorStats& stats,
                                        const CalibrationOptions& options);                   // distribution.cc
Expected<TensorRange> MseRange(const TensorStats& stats, const CalibrationOptions& options);  // mse.cc

const std::vector<MethodInfo>& Methods() {
  static const std::vector<MethodInfo> methods = {
      {CalibrationMethod::kMinMax, "minmax", "MinMax", MinMaxRange},
      {CalibrationMethod::kEntropy, "entropy", "Entropy", EntropyRange},
      {CalibrationMethod::kPercentile, "percentile", "Percentile", PercentileRange},
      {CalibrationMethod::kDistribution, "distribution", "Distribution", DistributionRange},
      {CalibrationMethod::kMse, "mse", "MSE", MseRange},  // not in ORT: "MSE" is the usual spelling
  };
  return methods;
}

const MethodInfo* FindMethod(CalibrationMethod method) {
  for (const auto& m : Methods())
    if (m.method == method) return &m;
  return nullptr;
}

}  // namespace seqto::quant::calib
