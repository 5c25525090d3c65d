// Tile configurations and kernel specs of portable/grouped_gemm.cuh.
#include <fmt/format.h>

#include "backends/portable/portable.hpp"

namespace moeforge::portable {

std::ostream& operator<<(std::ostream& os, const TileConfig& c) {
  return os << c.name << " (BM=" << c.bm << " BN=" << c.bn << " BK=" << kBK << " warps=" << c.warps_m << "x"
            << c.warps_n << " stages=" << c.stages << ")";
}

namespace {
int wfmt_code(WeightFormat f) {
  switch (f) {
    case WeightFormat::BF16:
    case WeightFormat::FP16: return 0;  // FP16 weights are staged as bf16 by prepare
    case WeightFormat::FP8_Block128: return 1;
    case WeightFormat::NVFP4: return 2;
    case WeightFormat::MXFP4: return 3;
  }
  return 0;
}
}  // namespace

int gemm_smem_bytes(const TileConfig& c, WeightFormat f) {
  const int lds = (kBK + 8) * 2;  // bytes per smem row (80)
  const int a = c.bm * lds;
  switch (wfmt_code(f)) {
    case 0: return c.stages * (a + c.bn * lds);
    case 1: return c.stages * (a + c.bn * 32 + c.bn * 4) + c.bn * lds;
    case 2: return c.stages * (a + c.bn * 16 + c.bn * 2) + c.bn * lds;
    default: return c.stages * (a + c.bn * 16 + c.bn) + c.bn * lds;
  }
}

int activation_code(const MoeSpec& spec) {
  switch (spec.activation.kind) {
    case ActivationKind::SwiGLU: return 0;
    case ActivationKind::GeGLU: return 1;
    default: return 2;
  }
}

const TileConfig& choose_tile(const MoeSpec& spec, int64_t tokens, const rt::DeviceInfo* device) {
  // Average rows per routed expert; below ~48 the 128-row tile is mostly padding.
  const double rows_per_expert = double(tokens) * spec.topk / double(spec.num_experts);
  const TileConfig& want = rows_per_expert < 48.0 ? kSmallTile : kLargeTile;
  const TileConfig& other = &want == &kSmallTile ? kLargeTile : kSmallTile;
  if (device == nullptr) return want;
  for (int stage : {1, 2})
    if (!rt::budget_violation(gemm_kernel(spec, stage, want), *device).empty()) return other;
  return want;
}

rt::KernelSpec gemm_kernel(const MoeSpec& spec, int stage, const TileConfig& c) {
  const int64_t H = spec.hidden, I = spec.intermediate;
  const int64_t N = stage == 1 ? 2 * I : H, K = stage == 1 ? H : I;
  rt::KernelSpec k;
  k.source = "portable/grouped_gemm.cuh";
  k.entry = "moe_grouped_gemm";
  k.defines = {{"GEMM_STAGE", std::to_string(stage)},
               {"E", std::to_string(spec.num_experts)},
               {"E_TOTAL", std::to_string(spec.num_experts + spec.num_shared_experts)},
               {"GEMM_N", std::to_string(N)},
               {"GEMM_K", std::to_string(K)},
               {"GEMM_KP", std::to_string(padded_k(K))},
               {"A_LD", std::to_string(K)},
               {"BM", std::to_string(c.bm)},
               {"BN", std::to_string(c.bn)},
               {"WARPS_M", std::to_string(c.warps_m)},
               {"WARPS_N", std::to_string(c.warps_n)},
               {"STAGES", std::to_string(c.stages)},
               {"WFMT", std::to_string(wfmt_code(spec.weight_format))},
               {"ACT", std::to_string(activation_code(spec))},
               {"ACT_ALPHA", fmt::format("{:.9e}f", spec.activation.alpha)},
               {"ACT_LIMIT", fmt::format("{:.9e}f", spec.activation.limit)},
               {"HAS_BIAS", spec.expert_bias ? "1" : "0"}};
  k.threads = c.threads();
  k.pdl = true;  // waits at its top (common/grid_dependency.cuh)
  k.smem_bytes = gemm_smem_bytes(c, spec.weight_format);
  return k;
}

std::vector<rt::KernelSpec> all_kernels(const MoeSpec& spec) {
  std::vector<rt::KernelSpec> out;
  out.push_back(route_kernel(spec, DType::f32));
  out.push_back(route_kernel(spec, DType::bf16));
  out.push_back(route_permute_kernel(spec, DType::f32));
  out.push_back(route_permute_kernel(spec, DType::bf16));
  out.push_back(validate_ids_kernel(spec, DType::i32));
  out.push_back(validate_ids_kernel(spec, DType::i64));
  for (const char* e : {"moe_count", "moe_scan", "moe_scatter", "moe_permute_small"})
    out.push_back(permute_kernel(spec, e));
  for (const TileConfig* c : {&kSmallTile, &kLargeTile})
    for (int stage : {1, 2}) out.push_back(gemm_kernel(spec, stage, *c));
  out.push_back(combine_kernel(spec, DType::bf16));
  return out;
}

}  // namespace moeforge::portable
