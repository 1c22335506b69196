#include "rewrite/passes.h"

namespace seqto::rewrite {

Status Optimize(ir::Graph& graph, const OptimizeOptions& options) {
  if (options.lift_constants) SEQTO_RETURN_IF_ERROR(ApplyPatch(graph, LiftConstants(graph, options), "lift-constants"));
  if (options.fold_batchnorm)
    SEQTO_RETURN_IF_ERROR(ApplyPatch(graph, FoldBatchNormIntoConv(graph, options), "fold-batchnorm"));
  if (options.fold_conv_affine)
    SEQTO_RETURN_IF_ERROR(ApplyPatch(graph, FoldConvAffine(graph, options), "fold-conv-affine"));
  if (options.fuse_patterns) SEQTO_RETURN_IF_ERROR(ApplyPatch(graph, FusePatterns(graph, options), "fuse-patterns"));
  // Before fuse-qdq, which would otherwise split these regions into QLinearAdd /
  // QLinearMul / QLookup nodes one op at a time.
  if (options.fuse_unary_lookups && options.evaluate)
    SEQTO_RETURN_IF_ERROR(ApplyPatch(graph, FuseUnaryLookups(graph, options), "fuse-unary-lookups"));
  // Before fuse-conv: that pass fuses float convs only (constant float weights),
  // this one convs whose weights come through DequantizeLinear.
  if (options.fuse_qdq) SEQTO_RETURN_IF_ERROR(ApplyPatch(graph, FuseQdq(graph, options), "fuse-qdq"));
  if (options.fold_constant_weights)
    SEQTO_RETURN_IF_ERROR(ApplyPatch(graph, FoldConstantWeights(graph, options), "fold-constant-weights"));
  if (options.fuse_conv) SEQTO_RETURN_IF_ERROR(ApplyPatch(graph, FuseConvPostOps(graph, options), "fuse-conv"));
  if (options.channels_last) SEQTO_RETURN_IF_ERROR(ApplyPatch(graph, ChannelsLast(graph, options), "channels-last"));
  return Status::Ok();
}

}  // namespace seqto::rewrite
