#include "moeforge/spec.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "moeforge/errors.hpp"

namespace moeforge {

std::string_view to_string(RoutingKind k) {
  switch (k) {
    case RoutingKind::Softmax: return "softmax";
    case RoutingKind::SoftmaxGrouped: return "softmax-grouped";
    case RoutingKind::SigmoidBiasGrouped: return "sigmoid-bias-grouped";
  }
  return "?";
}
std::string_view to_string(ActivationKind k) {
  switch (k) {
    case ActivationKind::SwiGLU: return "swiglu";
    case ActivationKind::GeGLU: return "geglu";
    case ActivationKind::ClampedSwiGLU: return "clamped-swiglu";
  }
  return "?";
}
std::string_view to_string(WeightFormat f) {
  switch (f) {
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::FP16: return "fp16";
    case WeightFormat::FP8_Block128: return "fp8";
    case WeightFormat::NVFP4: return "nvfp4";
    case WeightFormat::MXFP4: return "mxfp4";
  }
  return "?";
}
std::string_view to_string(ActivationFormat f) {
  switch (f) {
    case ActivationFormat::BF16: return "bf16";
    case ActivationFormat::FP16: return "fp16";
    case ActivationFormat::FP8_Group128: return "fp8";
  }
  return "?";
}

WeightFormat parse_weight_format(std::string_view s, std::string_view argument) {
  for (auto f : {WeightFormat::BF16, WeightFormat::FP16, WeightFormat::FP8_Block128, WeightFormat::NVFP4,
                 WeightFormat::MXFP4})
    if (to_string(f) == s) return f;
  throw InvalidArgument(std::string(argument),
                        fmt::format("unknown weight format '{}' (expected bf16, fp16, fp8, nvfp4 or mxfp4)", s));
}

ActivationFormat parse_activation_format(std::string_view s, std::string_view argument) {
  for (auto f : {ActivationFormat::BF16, ActivationFormat::FP16, ActivationFormat::FP8_Group128})
    if (to_string(f) == s) return f;
  throw InvalidArgument(std::string(argument),
                        fmt::format("unknown activation format '{}' (expected bf16, fp16 or fp8)", s));
}

void MoeSpec::validate() const {
  auto fail = [](const char* field, const std::string& what) { throw InvalidArgument(field, what); };
  if (num_experts < 1) fail("spec.num_experts", fmt::format("must be >= 1, got {}", num_experts));
  if (num_experts > 65536) fail("spec.num_experts", fmt::format("must be <= 65536, got {}", num_experts));
  if (hidden < 1) fail("spec.hidden", fmt::format("must be >= 1, got {}", hidden));
  if (intermediate < 1) fail("spec.intermediate", fmt::format("must be >= 1, got {}", intermediate));
  // Block formats need whole blocks along K (H for W13, I for W2).
  const int64_t kmult = weight_format == WeightFormat::NVFP4 ? 16 : weight_format == WeightFormat::MXFP4 ? 32 : 1;
  if (hidden % std::max<int64_t>(kmult, 8) != 0)
    fail("spec.hidden", fmt::format("must be a multiple of {} for {} weights, got {}", std::max<int64_t>(kmult, 8),
                                    to_string(weight_format), hidden));
  if (intermediate % std::max<int64_t>(kmult, 8) != 0)
    fail("spec.intermediate", fmt::format("must be a multiple of {} for {} weights, got {}",
                                          std::max<int64_t>(kmult, 8), to_string(weight_format), intermediate));
  if (topk < 1 || topk > num_experts)
    fail("spec.topk", fmt::format("must be in [1, num_experts={}], got {}", num_experts, topk));
  if (routing.kind != RoutingKind::Softmax) {
    if (routing.n_groups < 1 || num_experts % routing.n_groups != 0)
      fail("spec.routing.n_groups",
           fmt::format("must be >= 1 and divide num_experts={}, got {}", num_experts, routing.n_groups));
    if (routing.topk_groups < 1 || routing.topk_groups > routing.n_groups)
      fail("spec.routing.topk_groups",
           fmt::format("must be in [1, n_groups={}], got {}", routing.n_groups, routing.topk_groups));
    const int64_t per_group = num_experts / routing.n_groups;
    if (routing.group_score_topn < 1 || routing.group_score_topn > per_group)
      fail("spec.routing.group_score_topn",
           fmt::format("must be in [1, experts per group={}], got {}", per_group, routing.group_score_topn));
    if (int64_t(routing.topk_groups) * per_group < topk)
      fail("spec.topk", fmt::format("{} kept groups of {} experts cannot supply top-{}", routing.topk_groups,
                                    per_group, topk));
  }
  if (!(routing.scaling_factor > 0.0))
    fail("spec.routing.scaling_factor", fmt::format("must be > 0, got {}", routing.scaling_factor));
  if (activation.kind == ActivationKind::ClampedSwiGLU && !(activation.limit > 0.0))
    fail("spec.activation.limit", fmt::format("must be > 0, got {}", activation.limit));
  if (num_shared_experts < 0) fail("spec.num_shared_experts", fmt::format("must be >= 0, got {}", num_shared_experts));
  if (num_shared_experts > 0 && (shared_intermediate < 1 || shared_intermediate % std::max<int64_t>(kmult, 8) != 0))
    fail("spec.shared_intermediate",
         fmt::format("must be a positive multiple of {} when num_shared_experts > 0, got {}",
                     std::max<int64_t>(kmult, 8), shared_intermediate));
}

std::string MoeSpec::describe() const {
  std::string s = fmt::format("{}: E={} H={} I={} k={} routing={}", name, num_experts, hidden, intermediate, topk,
                              to_string(routing.kind));
  if (routing.kind != RoutingKind::Softmax)
    s += fmt::format(" groups={}/{}", routing.topk_groups, routing.n_groups);
  if (routing.renormalize) s += " renorm";
  if (routing.scaling_factor != 1.0) s += fmt::format(" scale={}", routing.scaling_factor);
  s += fmt::format(" act={}", to_string(activation.kind));
  if (num_shared_experts) s += fmt::format(" shared={}x{}", num_shared_experts, shared_intermediate);
  if (expert_bias) s += " bias";
  s += fmt::format(" weights={} acts={}", to_string(weight_format), to_string(activation_format));
  return s;
}

}  // namespace moeforge
