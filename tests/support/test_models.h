// Small builders for hand-made models in tests: attributes, nodes and random float
// tensors (the same few lines every graph-building test needs).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ir/graph.h"

namespace seqto::testing {

// Attributes of one type each.
ir::Attribute Int(int64_t v);
ir::Attribute Ints(std::vector<int64_t> v);
ir::Attribute Float(float v);
ir::Attribute String(std::string v);

// A node without attributes; add them to `attributes` afterwards.
ir::Node MakeNode(std::string name, std::string op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                  std::string domain = "");

// A float32 value (graph input, output or intermediate) of the given dims, which may
// be symbolic.
ir::ValueInfo FloatValue(std::string name, std::vector<ir::Dim> dims);

// A float32 tensor of `shape`, uniform in [lo, hi) from `rng`.
Tensor RandomTensor(Shape shape, std::mt19937& rng, float lo = -1.f, float hi = 1.f);

}  // namespace seqto::testing
