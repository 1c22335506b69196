// Fashion-MNIST samples (Debian's dataset-fashion-mnist) as the interop tests use
// them: one preprocessed [N, 1, 28, 28] float32 tensor for the bundled CNNs, with
// its labels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace seqto::testing {

struct FashionSamples {
  Tensor x;  // [N, 1, 28, 28] float32, preprocessed as the bundled models expect
  std::vector<int64_t> labels;
};

// `samples` seeded samples of /usr/share/datasets/fashion-mnist/<images> (an idx
// file), labels from the idx labels file next to it.
Expected<FashionSamples> LoadFashionSamples(const std::string& images, int64_t samples, uint64_t seed);

}  // namespace seqto::testing
