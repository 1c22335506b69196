// Graph passes for inference. Each pass returns a GraphPatch; Optimize applies
// them in order, verifying the graph after each.
#pragma once

#include <set>
#include <string>

#include "core/status.h"
#include "ir/graph.h"
#include "rewrite/patch.h"

namespace seqto::rewrite {

struct OptimizeOptions {
  // Values that must stay visible (observed or overridden): no pass fuses them away.
  std::set<std::string> keep_values;
  bool fold_batchnorm = true;
  bool fuse_conv = true;
};

// Conv -> BatchNormalization (inference, constant parameters) becomes one Conv with
// rescaled weights and bias, as ONNX Runtime does.
GraphPatch FoldBatchNormIntoConv(const ir::Graph& graph, const OptimizeOptions& options);

// Conv followed by Add and/or Relu/Clip/LeakyRelu becomes one com.seqto.FusedConv
// node (the conv kernel applies them as post-ops). Run after FoldBatchNormIntoConv.
GraphPatch FuseConvPostOps(const ir::Graph& graph, const OptimizeOptions& options);

// Runs the enabled passes in order.
Status Optimize(ir::Graph& graph, const OptimizeOptions& options);

}  // namespace seqto::rewrite
