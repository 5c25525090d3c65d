// Splitting a loop over [0, n) across threads, for the host-side generators (synthetic weights,
// bench and test inputs) whose element i depends only on i: the split cannot change the values.
#pragma once
#include <cstdint>
#include <functional>

namespace moeforge {

// Runs work(begin, end) over contiguous ranges covering [0, n) exactly once: one range per
// thread, at most 16 threads (the caller's among them) and at least min_per_thread elements a
// range, so a small n runs inline. Returns once every range is done.
void parallel_ranges(int64_t n, int64_t min_per_thread, const std::function<void(int64_t, int64_t)>& work);

}  // namespace moeforge
