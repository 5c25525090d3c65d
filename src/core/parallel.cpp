#include "core/parallel.hpp"

#include <algorithm>
#include <thread>
#include <vector>

namespace moeforge {

void parallel_ranges(int64_t n, int64_t min_per_thread, const std::function<void(int64_t, int64_t)>& work) {
  if (n <= 0) return;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t nt = std::clamp<int64_t>(n / std::max<int64_t>(1, min_per_thread), 1, std::min<int64_t>(hw, 16));
  if (nt == 1) return work(0, n);
  const int64_t chunk = (n + nt - 1) / nt;
  std::vector<std::thread> threads;
  for (int64_t t = 1; t < nt && t * chunk < n; ++t) threads.emplace_back(work, t * chunk, std::min(n, (t + 1) * chunk));
  work(0, std::min(n, chunk));
  for (auto& th : threads) th.join();
}

}  // namespace moeforge
