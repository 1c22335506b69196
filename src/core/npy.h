// NumPy .npy files (format versions 1-3, little-endian, C order), used for the
// inputs and outputs of `seqto run` and by tests.
#pragma once

#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace seqto {

Expected<Tensor> ReadNpy(const std::string& path);
// Writes atomically (temporary file, then rename).
Status WriteNpy(const std::string& path, const Tensor& tensor);

}  // namespace seqto
