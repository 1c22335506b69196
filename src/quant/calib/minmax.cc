// MinMax (ORT's MinMaxCalibrater): the min and max over every batch, or with
// moving_average ORT's average of the per-batch min/max (see CalibrationOptions).
#include <tuple>

#include "quant/calib/stats.h"

namespace seqto::quant::calib {

Expected<TensorRange> MinMaxRange(const TensorStats& stats, const CalibrationOptions& options) {
  TensorRange r;
  if (!options.moving_average) {
    r.min = stats.min;
    r.max = stats.max;
    return r;
  }
  if (!(options.averaging_constant >= 0 && options.averaging_constant <= 1))
    return UserError("averaging constant " + std::to_string(options.averaging_constant) + " is not in [0, 1]");
  if (options.moving_average_chunk < 0)
    return UserError("moving-average chunk " + std::to_string(options.moving_average_chunk) + " is negative");
  std::tie(r.min, r.max) = stats.MovingAverage(options);
  return r;
}

}  // namespace seqto::quant::calib
