// Graph passes for inference. Each pass returns a GraphPatch; Optimize applies
// them in order, verifying the graph after each.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>

#include "core/status.h"
#include "ir/graph.h"
#include "rewrite/patch.h"

namespace seqto::rewrite {

// Runs a small graph (inputs and outputs by name) with the kernels the session will
// use. The runtime supplies it: rewrite cannot see the ops, and a pass that turns a
// subgraph into a table must compute it with the same kernels as the unfused graph.
using Evaluate = std::function<Expected<std::map<std::string, Tensor>>(const ir::Graph& graph,
                                                                       const std::map<std::string, Tensor>& inputs)>;

struct OptimizeOptions {
  // Values that must stay visible (observed or overridden): no pass fuses them away.
  std::set<std::string> keep_values;
  bool lift_constants = true;
  bool fold_batchnorm = true;
  bool fuse_conv = true;
  // Conv -> constant Mul/Add folded into the conv; written-out LayerNorm, GELU and
  // HardSwish chains and MatMul + bias become one op each (com.seqto ops: Session
  // graphs only, never saved).
  bool fold_conv_affine = true;
  bool fuse_patterns = true;
  // Elementwise regions that are functions of one 8-bit tensor (DQ -> unary ops,
  // constant scalars, internal Q/DQ -> Q) become 256-entry com.seqto.QLookup tables.
  // Needs `evaluate` (without it the pass does nothing). See fuse_unary_lookups.cc.
  bool fuse_unary_lookups = true;
  Evaluate evaluate;
  // QDQ islands (DequantizeLinear -> op -> QuantizeLinear) become int8 ops; off, a
  // QDQ model runs in float (the reference the fused ops are tested against).
  bool fuse_qdq = true;
  // DequantizeLinear / Cast of constant weights left after QDQ fusion become float
  // initializers (so fallback convs run as fused, channels-last float convs).
  bool fold_constant_weights = true;
  // 2-D conv chains run channels-last, without layout conversions between convs.
  bool channels_last = true;
};

// Constant nodes become initializers (what the other passes and kernels treat as
// constant). Graph outputs and kept values stay Constant nodes.
GraphPatch LiftConstants(const ir::Graph& graph, const OptimizeOptions& options);

// Conv -> BatchNormalization (inference, constant parameters) becomes one Conv with
// rescaled weights and bias, as ONNX Runtime does.
GraphPatch FoldBatchNormIntoConv(const ir::Graph& graph, const OptimizeOptions& options);

// Conv followed by Mul/Add with constant scalar or per-channel operands: folded into
// the conv's weights and bias. Run after FoldBatchNormIntoConv.
GraphPatch FoldConvAffine(const ir::Graph& graph, const OptimizeOptions& options);

// Written-out LayerNorm, GELU and HardSwish chains become LayerNormalization,
// com.seqto.Gelu and HardSwish; MatMul + constant bias com.seqto.FusedMatMul. See
// fuse_patterns.cc.
GraphPatch FusePatterns(const ir::Graph& graph, const OptimizeOptions& options);

// Conv followed by Add and/or Relu/Clip/LeakyRelu becomes one com.seqto.FusedConv
// node (the conv kernel applies them as post-ops). Run after FoldBatchNormIntoConv.
GraphPatch FuseConvPostOps(const ir::Graph& graph, const OptimizeOptions& options);

// Regions of elementwise ops that depend on one 8-bit tensor only (DequantizeLinear
// -> activations, arithmetic with constant scalars, Q/DQ pairs -> QuantizeLinear)
// become one com.seqto.QLookup per 8-bit result, the table computed by running the
// region on the 256 codes with options.evaluate. Run before FuseQdq. See
// fuse_unary_lookups.cc.
GraphPatch FuseUnaryLookups(const ir::Graph& graph, const OptimizeOptions& options);

// DequantizeLinear -> Conv / MatMul / Gemm / Add / GlobalAveragePool / activation /
// data movement -> QuantizeLinear chains with constant quantization parameters become
// integer ops (QLinearMatMul, com.seqto.QLinearConv / QGemm / QLinearAdd /
// QLinearGlobalAveragePool / QLookup, or the data-movement op on the integer tensor). See fuse_qdq.cc for the patterns,
// the conditions and how exact each is.
GraphPatch FuseQdq(const ir::Graph& graph, const OptimizeOptions& options);

// DequantizeLinear of integer initializers and Cast of float16 initializers to
// float32 become float32 initializers (the same values). Run after FuseQdq, before
// FuseConvPostOps. See fold_constant_weights.cc.
GraphPatch FoldConstantWeights(const ir::Graph& graph, const OptimizeOptions& options);

// Runs 2-D convolution chains (float and int8) and the elementwise ops between them
// channels-last, with Transposes only at the borders; values keep their names and
// NCHW meaning. Run last: it converts the fused ops. See channels_last.cc.
GraphPatch ChannelsLast(const ir::Graph& graph, const OptimizeOptions& options);

// Runs the enabled passes in order.
Status Optimize(ir::Graph& graph, const OptimizeOptions& options);

}  // namespace seqto::rewrite
