// Multiply-accumulates (MACs) of the compute-heavy nodes at batch 1: what a group's
// precision is worth in arithmetic. The latency bound of a selective model
// (int8_ms + (float_ms - int8_ms) x MAC share of the excluded groups) and the
// cost-aware ranker weigh groups by it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "ir/graph.h"

namespace seqto::quant {

struct QuantGroup;

struct MacCount {
  // Nodes of a counted op type (Conv, ConvTranspose, Gemm, MatMul and their fused and
  // integer forms) whose shapes are known, with their MACs at batch 1.
  std::map<std::string, int64_t> nodes;
  // Nodes of a counted op type whose shapes shape inference could not tell (a
  // dimension other than the batch is symbolic): not in `nodes`, not in `total`.
  std::vector<std::string> unknown;
  int64_t total = 0;  // sum over `nodes`
};

// Counts the MACs of `model` at batch 1: a copy with every graph input's unknown
// first dimension set to 1 goes through ONNX shape inference. Per node:
//   Conv:          output elements x input channels per group x kernel elements
//   ConvTranspose: input elements x output channels per group x kernel elements
//   Gemm, MatMul:  output elements x the reduced dimension K
// A model shape inference refuses gets every counted node in `unknown`.
MacCount CountMacs(const ir::Model& model);

// Sum over each group's nodes; -1 for a group with a node in `count.unknown`.
std::vector<int64_t> GroupMacs(const std::vector<QuantGroup>& groups, const MacCount& count);

}  // namespace seqto::quant
