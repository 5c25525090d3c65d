// Real shapes of served MoE models (from their published config.json files).
#include <fmt/format.h>

#include "moeforge/errors.hpp"
#include "moeforge/spec.hpp"

namespace moeforge::presets {
namespace {

MoeSpec mistral_small_4() {
  MoeSpec s;
  s.name = "mistral-small-4";
  s.num_experts = 128;
  s.hidden = 4096;
  s.intermediate = 2048;
  s.topk = 4;
  s.routing = {.kind = RoutingKind::Softmax, .renormalize = true};
  s.num_shared_experts = 1;
  s.shared_intermediate = 2048;
  return s;
}

MoeSpec deepseek_v3() {
  MoeSpec s;
  s.name = "deepseek-v3";
  s.num_experts = 256;
  s.hidden = 7168;
  s.intermediate = 2048;
  s.topk = 8;
  s.routing = {.kind = RoutingKind::SigmoidBiasGrouped,
               .renormalize = true,
               .n_groups = 8,
               .topk_groups = 4,
               .group_score_topn = 2,
               .scaling_factor = 2.5};
  s.num_shared_experts = 1;
  s.shared_intermediate = 2048;
  return s;
}

MoeSpec qwen3_30b_a3b() {
  MoeSpec s;
  s.name = "qwen3-30b-a3b";
  s.num_experts = 128;
  s.hidden = 2048;
  s.intermediate = 768;
  s.topk = 8;
  s.routing = {.kind = RoutingKind::Softmax, .renormalize = true};  // norm_topk_prob
  return s;
}

MoeSpec mixtral_8x7b() {
  MoeSpec s;
  s.name = "mixtral-8x7b";
  s.num_experts = 8;
  s.hidden = 4096;
  s.intermediate = 14336;
  s.topk = 2;
  s.routing = {.kind = RoutingKind::Softmax, .renormalize = true};  // softmax over the chosen two
  return s;
}

MoeSpec gpt_oss_120b() {
  MoeSpec s;
  s.name = "gpt-oss-120b";
  s.num_experts = 128;
  s.hidden = 2880;
  s.intermediate = 2880;
  s.topk = 4;
  s.routing = {.kind = RoutingKind::Softmax, .renormalize = true};  // softmax over the top-4 logits
  s.activation = {.kind = ActivationKind::ClampedSwiGLU, .alpha = 1.702, .limit = 7.0};
  s.expert_bias = true;
  return s;
}

struct Entry {
  const char* name;
  MoeSpec (*make)();
};
constexpr Entry kPresets[] = {
    {"mistral-small-4", mistral_small_4}, {"deepseek-v3", deepseek_v3},   {"qwen3-30b-a3b", qwen3_30b_a3b},
    {"mixtral-8x7b", mixtral_8x7b},       {"gpt-oss-120b", gpt_oss_120b},
};

}  // namespace

MoeSpec get(std::string_view name) {
  for (const auto& p : kPresets)
    if (name == p.name) return p.make();
  throw InvalidArgument("model", fmt::format("unknown preset '{}' (expected one of: {})", name,
                                             fmt::join(names(), ", ")));
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& p : kPresets) out.emplace_back(p.name);
  return out;
}

}  // namespace moeforge::presets
