// Kernel specs of portable/route.cuh and portable/validate_ids.cuh.
#include <fmt/format.h>

#include "backends/portable/portable.hpp"

namespace moeforge::portable {

rt::KernelSpec route_kernel(const MoeSpec& spec, DType logits) {
  const RoutingSpec& r = spec.routing;
  const int kind = r.kind == RoutingKind::Softmax ? 0 : r.kind == RoutingKind::SoftmaxGrouped ? 1 : 2;
  const bool grouped = kind != 0;
  rt::KernelSpec k;
  k.source = "portable/route.cuh";
  k.entry = "moe_route";
  k.defines = {{"E", std::to_string(spec.num_experts)},
               {"TOPK", std::to_string(spec.topk)},
               {"ROUTING", std::to_string(kind)},
               {"N_GROUPS", std::to_string(grouped ? r.n_groups : 1)},
               {"TOPK_GROUPS", std::to_string(grouped ? r.topk_groups : 1)},
               {"GROUP_TOPN", std::to_string(grouped ? r.group_score_topn : 1)},
               {"RENORM", r.renormalize ? "1" : "0"},
               {"SCALE", fmt::format("{:.17e}", r.scaling_factor)},
               {"LOGITS_BF16", logits == DType::bf16 ? "1" : "0"}};
  k.threads = 32 * kRouteWarps;
  k.pdl = true;  // waits at its top (common/grid_dependency.cuh)
  return k;
}

rt::KernelSpec route_permute_kernel(const MoeSpec& spec, DType logits) {
  rt::KernelSpec k = route_kernel(spec, logits);
  k.source = "portable/route_permute.cuh";
  k.entry = "moe_route_permute_small";
  k.defines.push_back({"E_TOTAL", std::to_string(spec.num_experts + spec.num_shared_experts)});
  k.threads = 256;
  return k;
}

rt::KernelSpec validate_ids_kernel(const MoeSpec& spec, DType ids) {
  rt::KernelSpec k;
  k.source = "portable/validate_ids.cuh";
  k.entry = "moe_validate_ids";
  k.defines = {{"E", std::to_string(spec.num_experts)}, {"IDS_I64", ids == DType::i64 ? "1" : "0"}};
  k.threads = 256;
  k.pdl = true;  // waits at its top (common/grid_dependency.cuh)
  return k;
}

}  // namespace moeforge::portable
