// Deterministic synthetic inputs for one forward call: the CLI, self-tests,
// benchmarks and GPU tests all draw their x and router logits here, so that a
// (spec, T, seed) triple means the same batch everywhere.
#pragma once
#include <cstdint>
#include <vector>

#include "moeforge/spec.hpp"
#include "moeforge/tensor.hpp"

namespace moeforge {

struct HostInputs {
  int64_t tokens = 0;
  std::vector<uint16_t> x;    // [T, H] bf16 bits, values ~ N(0, 1)
  std::vector<float> logits;  // [T, E] f32, values ~ N(0, 2): peaked enough to route unevenly

  TensorView x_view() { return TensorView::contiguous(x.data(), DType::bf16, {tokens, int64_t(x.size()) / std::max<int64_t>(tokens, 1)}); }
  TensorView logits_view() {
    return TensorView::contiguous(logits.data(), DType::f32, {tokens, int64_t(logits.size()) / std::max<int64_t>(tokens, 1)});
  }
};

HostInputs make_inputs(const MoeSpec& spec, int64_t tokens, uint64_t seed);

// A checksum of an output buffer for humans: the first 16 hex digits of its SHA-256.
std::string checksum_hex(const void* data, std::size_t bytes);

}  // namespace moeforge
