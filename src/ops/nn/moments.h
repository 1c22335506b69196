// Mean and population variance of one row, as LayerNormalization and
// InstanceNormalization normalize by them.
#pragma once

#include <cstdint>

namespace seqto::ops {

// In double with two passes (the mean first, then the squared deviations from it), so
// a row with a large mean loses nothing to cancellation. Always inlined: a caller
// compiled for wider vectors (SEQTO_WIDE_CLONES) vectorizes the loops for its target.
template <typename T>
[[gnu::always_inline]] inline void RowMoments(const T* p, int64_t n, double& mean, double& variance) {
  double s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i]);
  mean = s / static_cast<double>(n);
  double v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t i = 0; i < n; ++i) {
    const double dev = static_cast<double>(p[i]) - mean;
    v += dev * dev;
  }
  variance = v / static_cast<double>(n);
}

}  // namespace seqto::ops
