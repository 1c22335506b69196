// libFuzzer target for the model loader: bytes -> onnxio::LoadModelFromBytes (parse,
// convert, schema checks, shape inference) and, when that succeeds,
// runtime::Session::Create (planning, kernel creation, constant folding). Nothing
// is run. Any crash, leak, hang or sanitizer report is a bug; inputs that found one
// are kept in tests/fuzz/regressions/ and replayed by the unit tests.
//
//   CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSEQTO_FUZZ=ON -DSEQTO_SANITIZE=ON
//   make -C build-fuzz fuzz_model_loader fuzz_seed_corpus
//   build-fuzz/tests/fuzz/fuzz_model_loader build-fuzz/tests/fuzz/corpus -max_total_time=600
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/parallel.h"
#include "onnxio/model_io.h"
#include "runtime/session.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  seqto::SetNumThreads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // No base folder: external data is refused (the fuzzer must not read files).
  auto model = seqto::onnxio::LoadModelFromBytes(bytes, "", "fuzz.onnx");
  if (!model.ok()) return 0;
  seqto::runtime::SessionOptions options;
  options.threads = 1;
  options.max_tensor_bytes = size_t{64} << 20;  // folding must not allocate beyond the fuzzer's limits
  auto session = seqto::runtime::Session::Create(*model, options);
  (void)session;
  return 0;
}
