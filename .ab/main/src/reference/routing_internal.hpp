// Internal pieces of the CPU reference shared by routing.cpp and layer.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "moeforge/spec.hpp"

namespace moeforge::reference {

// Per-thread scratch so that routing many tokens allocates once.
struct RouteScratch {
  std::vector<double> weight, key, group_score;
  std::vector<int64_t> order, group_order;
  std::vector<uint8_t> allowed;
};

// Routes one token: logits [E] f32 -> ids_out[k], weights_out[k] (final combine weights).
// spec must already be validated and correction_bias checked.
void route_token(const MoeSpec& spec, const float* logits, const std::vector<float>& correction_bias,
                 RouteScratch& scratch, int32_t* ids_out, double* weights_out);

// Throws InvalidArgument("correction_bias") unless it is empty or has E values.
void check_correction_bias(const MoeSpec& spec, const std::vector<float>& correction_bias);

}  // namespace moeforge::reference
