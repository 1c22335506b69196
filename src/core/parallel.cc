#include "core/parallel.h"

#include <omp.h>

#include <algorithm>

namespace seqto {

namespace {
int g_threads = 0;  // 0: not set yet, use OpenMP's default
}

void SetNumThreads(int threads) {
  g_threads = std::max(1, threads);
  omp_set_num_threads(g_threads);
}

int NumThreads() { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

void ParallelFor(int64_t n, int64_t cost_per_item, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int threads = NumThreads();
  constexpr int64_t kMinWorkPerThread = 32768;
  if (threads <= 1 || n == 1 || n * std::max<int64_t>(cost_per_item, 1) < 2 * kMinWorkPerThread) {
    fn(0, n);
    return;
  }
  const int64_t chunks = std::min<int64_t>(threads, n);
#pragma omp parallel for num_threads(chunks) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    if (begin < end) fn(begin, end);
  }
}

}  // namespace seqto
