// Kernel spec of portable/combine.cuh.
#include <algorithm>
#include <string>

#include "backends/portable/portable.hpp"

namespace moeforge::portable {

rt::KernelSpec combine_kernel(const MoeSpec& spec, DType out, bool y_bf16) {
  rt::KernelSpec k;
  k.source = "portable/combine.cuh";
  k.entry = "moe_combine";
  k.defines = {{"E", std::to_string(spec.num_experts)},
               {"E_TOTAL", std::to_string(spec.num_experts + spec.num_shared_experts)},
               {"TOPK", std::to_string(spec.topk)},
               {"HIDDEN", std::to_string(spec.hidden)},
               {"OUT_F16", out == DType::f16 ? "1" : "0"}};
  if (y_bf16) k.defines.push_back({"Y_BF16", "1"});
  k.threads = 256;
  k.pdl = true;  // waits at its top (common/grid_dependency.cuh)
  return k;
}

unsigned combine_slices(int64_t tokens, int64_t hidden, int sm_count) {
  if (tokens >= sm_count) return 1;
  return unsigned(std::max<int64_t>(1, (hidden + 1023) / 1024));
}

}  // namespace moeforge::portable
