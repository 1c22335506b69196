// The byte-to-byte table lookup of com.seqto.QLookup, with its vector forms (tests
// compare each with the scalar loop).
#pragma once

#include <cstdint>

namespace seqto::ops {

enum class LookupIsa { kScalar, kAvx512Vbmi };

// The widest form this CPU runs.
LookupIsa BestLookupIsa();

// y[i] = table[x[i]] for i < n; `isa` must be one the CPU runs (at most BestLookupIsa()).
void LookupBytes(const uint8_t* x, uint8_t* y, int64_t n, const uint8_t* table, LookupIsa isa);

}  // namespace seqto::ops
