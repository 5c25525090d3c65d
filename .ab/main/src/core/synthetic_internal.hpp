// Internal to synthetic_weights.cpp, exposed for tests.
#pragma once
#include <cstdint>

#include "moeforge/weights.hpp"

namespace moeforge {

// QuantMatrix::quantize split over up to `threads` threads by rows where the format
// allows it; byte-identical to a single call.
QuantMatrix quantize_in_chunks(WeightFormat format, int64_t rows, int64_t cols, const float* values, int threads);

}  // namespace moeforge
