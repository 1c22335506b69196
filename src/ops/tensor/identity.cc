// Identity and Dropout (inference mode): the output shares the input's storage.
#include "ops/registry.h"
#include "ops/util.h"

namespace seqto::ops {

void RegisterIdentity(OpRegistry& r) {
  r.Register({"Identity", "", 1, [](const KernelInit&) -> Expected<std::unique_ptr<Kernel>> {
                return MakeKernel([](KernelContext& ctx) -> Status {
                  ctx.SetOutput(0, ctx.input(0));
                  return Status::Ok();
                });
              }});
}

}  // namespace seqto::ops
