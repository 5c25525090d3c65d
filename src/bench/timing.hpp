// Device-event timing with warm-up, L2 flush between runs, median of many.
#pragma once
#include <cuda.h>

#include <functional>
#include <vector>

namespace moeforge::bench {

struct Timing {
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
  int runs = 0;
};

// Runs fn(stream) `warmup` times, then `runs` times, each timed with events and
// preceded (outside the timed region) by a write of 2x the L2 size so that no
// run finds the previous run's data in cache.
Timing time_on_stream(int device, CUstream stream, const std::function<void(CUstream)>& fn, int warmup = 3,
                      int runs = 20);

}  // namespace moeforge::bench
