// Intra-op parallelism. seqto uses one thread pool, OpenMP's, which oneDNN uses as
// well: two pools on two cores would only fight. Kernels split work with
// ParallelFor; the session sets the thread count once.
#pragma once

#include <cstdint>
#include <functional>

namespace seqto {

void SetNumThreads(int threads);
int NumThreads();

// Calls fn(begin, end) on disjoint chunks covering [0, n). Runs inline when the
// work is small (n * cost_per_item below a threshold) to avoid fork/join overhead.
void ParallelFor(int64_t n, int64_t cost_per_item, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace seqto
