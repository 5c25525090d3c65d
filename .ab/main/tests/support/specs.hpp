// Layer specs shared by the CPU and GPU suites: the two custom specs that cover
// what no preset does (softmax-grouped routing with two shared experts; GeGLU
// without renormalization, with a scaling factor), and a tiny layer for fast tests.
#pragma once
#include <string>

#include "moeforge/spec.hpp"

namespace moeforge::testing {

inline MoeSpec custom_softmax_grouped_spec() {
  MoeSpec s;
  s.name = "custom-softmax-grouped";
  s.num_experts = 64;
  s.hidden = 512;
  s.intermediate = 256;
  s.topk = 6;
  s.routing = {.kind = RoutingKind::SoftmaxGrouped, .renormalize = true, .n_groups = 8, .topk_groups = 3,
               .group_score_topn = 2, .scaling_factor = 1.0};
  s.num_shared_experts = 2;
  s.shared_intermediate = 256;
  return s;
}

inline MoeSpec custom_geglu_spec() {
  MoeSpec s;
  s.name = "custom-geglu";
  s.num_experts = 16;
  s.hidden = 384;
  s.intermediate = 160;
  s.topk = 2;
  s.routing = {.kind = RoutingKind::Softmax, .renormalize = false, .scaling_factor = 1.5};
  s.activation = {.kind = ActivationKind::GeGLU};
  return s;
}

// E=8, H=64, I=32, k=2, one shared expert: milliseconds on the CPU reference.
inline MoeSpec tiny_layer_spec(const std::string& name = "tiny") {
  MoeSpec s;
  s.name = name;
  s.num_experts = 8;
  s.hidden = 64;
  s.intermediate = 32;
  s.topk = 2;
  s.num_shared_experts = 1;
  s.shared_intermediate = 32;
  return s;
}

}  // namespace moeforge::testing
