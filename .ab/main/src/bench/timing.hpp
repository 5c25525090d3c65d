// Device-event timing with warm-up, L2 flush between runs, median of many.
#pragma once
#include <cuda.h>

#include <functional>
#include <vector>

namespace moeforge::bench {

// How the L2 is emptied before each timed run (outside the timed region).
//   Read:  one streaming read of a clean buffer of 2x the L2 size (common/stream_read.cuh). The
//          run then starts from an L2 holding only clean, unrelated lines: every byte it needs
//          comes from DRAM and nothing it evicts costs a write-back, which is what the floor
//          (bytes / read ceiling) counts.
//   Write: a memset of 2x the L2 size (the usual do_bench flush, and moeforge's up to session
//          6). It leaves up to an L2's worth of dirty lines that the timed run writes back to
//          DRAM as it evicts them: at T = 1 (~250 MB of weights) that is ~20 % more DRAM
//          traffic than the run's own (H200, dev/sm90/probe_weight_stream.cu: an LDG of 160 MB
//          at 3416 GB/s after a memset, 4178 GB/s after a clean read).
enum class L2Flush { Read, Write };
const char* to_string(L2Flush f);

struct Timing {
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
  int runs = 0;
};

// Reads `bytes` (a multiple of 16) from src with the streaming-read kernel (the read ceiling's).
void stream_read(int device, CUdeviceptr src, size_t bytes, CUdeviceptr sink, CUstream stream, const char* stage);

// Runs fn(stream) `warmup` times, then `runs` times, each timed with events and
// preceded (outside the timed region) by an L2 flush of 2x the L2 size so that no
// run finds the previous run's data in cache.
Timing time_on_stream(int device, CUstream stream, const std::function<void(CUstream)>& fn, int warmup = 3,
                      int runs = 20, L2Flush flush = L2Flush::Read);

}  // namespace moeforge::bench
