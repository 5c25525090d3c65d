// Kernel specs of portable/permute.cuh.
#include <string>

#include "backends/portable/portable.hpp"

namespace moeforge::portable {

rt::KernelSpec permute_kernel(const MoeSpec& spec, const char* entry) {
  rt::KernelSpec k;
  k.source = "portable/permute.cuh";
  k.entry = entry;
  k.defines = {{"E", std::to_string(spec.num_experts)},
               {"E_TOTAL", std::to_string(spec.num_experts + spec.num_shared_experts)},
               {"TOPK", std::to_string(spec.topk)}};
  const std::string e = entry;
  k.threads = (e == "moe_scan" || e == "moe_permute_small") ? 1024 : 256;
  k.pdl = true;  // waits at its top (common/grid_dependency.cuh)
  return k;
}

}  // namespace moeforge::portable
