// Locates where a malformed protobuf stops making sense, so that an error about a
// corrupt or truncated model can name a byte offset instead of "parse failed".
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace seqto::onnxio {

struct WireProblem {
  bool found = false;
  size_t offset = 0;
  std::string what;
};

// Scans the top-level fields of a ModelProto and the fields of its graph (field 7).
WireProblem FindWireProblem(std::string_view bytes);

}  // namespace seqto::onnxio
