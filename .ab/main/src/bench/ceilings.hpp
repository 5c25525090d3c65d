// The device's own ceilings, measured in the same run as the numbers judged
// against them: streaming-read bandwidth and the cuBLAS GEMM rate.
#pragma once
#include <string>

namespace moeforge::bench {

struct Ceilings {
  double read_GBps = 0;     // bytes read per second by moe_stream_read over a buffer >> L2
  double bf16_TFLOPs = 0;   // cuBLAS GemmEx bf16 in, f32 accumulate, 8192^3
  std::string gemm_note;    // what was measured, or why it could not be
  double fp8_TFLOPs = 0;    // cuBLASLt e4m3 x e4m3 -> bf16, f32 accumulate, 8192^3 (0: unavailable)
  std::string fp8_gemm_note;
};

Ceilings measure_ceilings(int device);

}  // namespace moeforge::bench
