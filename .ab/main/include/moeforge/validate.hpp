// moeforge/validate.hpp — argument checks shared by every entry point.
//
// Each check throws InvalidArgument naming the argument, the value seen and the
// expectation: "x: expected shape [T, 4096], got [64, 4095]".
#pragma once
#include "moeforge/spec.hpp"
#include "moeforge/tensor.hpp"

namespace moeforge {

// Largest element count a single tensor may have: offsets are 64-bit inside
// moeforge, but every size product is checked for overflow of int64.
constexpr int64_t kMaxElements = int64_t(1) << 40;

// Where the forward call runs: every tensor must live there.
struct ForwardArgs {
  const TensorView* x = nullptr;              // [T, H] bf16 | f16 | f32
  const TensorView* router_logits = nullptr;  // [T, E] f32 | bf16      (or topk_* below)
  const TensorView* topk_ids = nullptr;       // [T, k] i32 | i64
  const TensorView* topk_weights = nullptr;   // [T, k] f32
  const TensorView* out = nullptr;            // [T, H], same dtype as x, no overlap with inputs
};

// Validates a forward call for `spec` on `device`. T = 0 is valid (nothing to do).
void validate_forward(const MoeSpec& spec, const ForwardArgs& args, Device device);

// A single tensor: rank, dtype set, shape (-1 = any), contiguity, alignment, device.
void validate_tensor(const char* name, const TensorView& t, std::initializer_list<DType> dtypes,
                     std::initializer_list<int64_t> shape, Device device, int64_t align_bytes = 16);

// Host-side check of precomputed routing ids (CPU tensors): every id in [0, E).
void validate_topk_ids_host(const char* name, const TensorView& ids, int64_t num_experts);

}  // namespace moeforge
