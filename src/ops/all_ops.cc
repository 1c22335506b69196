// The list of built-in ops. Adding an op: write ops/<family>/<op>.cc defining
// `void Register<Op>(OpRegistry&)`, then add one line `X(<Op>)` to that family's
// ops.inc. (A file may register several closely related ops, e.g. all unary math
// functions; it then gets one line for the file.)
#include "ops/registry.h"

namespace seqto::ops {

#define X(name) void Register##name(OpRegistry&);
#include "ops/elementwise/ops.inc"
#include "ops/math/ops.inc"
#include "ops/nn/ops.inc"
#include "ops/quant/ops.inc"
#include "ops/reduce/ops.inc"
#include "ops/tensor/ops.inc"
#undef X

void RegisterAllOps(OpRegistry& registry) {
#define X(name) Register##name(registry);
#include "ops/elementwise/ops.inc"
#include "ops/math/ops.inc"
#include "ops/nn/ops.inc"
#include "ops/quant/ops.inc"
#include "ops/reduce/ops.inc"
#include "ops/tensor/ops.inc"
#undef X
}

}  // namespace seqto::ops
