// Kernel specs of sm90/grouped_gemm.cuh, decode_gemm.cuh and gather.cuh, and what the sm90 GEMMs take.
#include <fmt/format.h>

#include "backends/portable/portable.hpp"
#include "backends/sm90/sm90.hpp"

namespace moeforge::sm90 {

Codes codes(const MoeSpec& spec) {
  switch (spec.weight_format) {
    case WeightFormat::NVFP4: return Codes::W4;
    case WeightFormat::FP8_Block128:
      return spec.activation_format == ActivationFormat::FP8_Group128 ? Codes::W8A8 : Codes::W8;
    default: return Codes::BF16;
  }
}

MoeSpec pipeline_spec(const MoeSpec& spec) {
  MoeSpec p = spec;
  p.activation_format = ActivationFormat::BF16;
  return p;
}

std::string spec_unsupported(const MoeSpec& spec) {
  if (std::string r = portable::spec_unsupported(pipeline_spec(spec)); !r.empty()) return r;
  const WeightFormat f = spec.weight_format;
  if (spec.activation_format == ActivationFormat::FP8_Group128) {
    if (f != WeightFormat::FP8_Block128)
      return fmt::format("fp8 activations on sm90 need fp8 weights (the W8A8 GEMMs), got {} weights", to_string(f));
    if (spec.hidden % 128 != 0 || spec.intermediate % 128 != 0)
      return fmt::format("fp8 activations on sm90 need hidden and intermediate sizes divisible by 128 (whole 1 x 128 "
                         "groups), got H={} I={}",
                         spec.hidden, spec.intermediate);
  } else if (spec.activation_format != ActivationFormat::BF16) {
    return fmt::format("activation format {} (the sm90 GEMMs take bf16 and fp8 activations)",
                       to_string(spec.activation_format));
  }
  if (f == WeightFormat::MXFP4)
    return fmt::format("weights {}: the sm90 GEMMs take bf16 (or f16, staged as bf16), fp8 and nvfp4 weights so far; "
                       "the portable backend runs {}",
                       to_string(f), to_string(f));
  if (permuted_k(codes(spec)) && (spec.hidden % 64 != 0 || spec.intermediate % 64 != 0))
    return fmt::format("{} on sm90 needs hidden and intermediate sizes divisible by 64 (the decode GEMMs' K "
                       "permutation works on 64-column blocks), got H={} I={}",
                       to_string(f), spec.hidden, spec.intermediate);
  if (spec.expert_bias) return "expert biases are not in the sm90 GEMM epilogues yet (the portable backend has them)";
  return "";
}

namespace {
void add_activation(const MoeSpec& spec, rt::KernelSpec& k) {
  k.defines.insert(k.defines.end(), {{"ACT", std::to_string(portable::activation_code(spec))},
                                     {"ACT_ALPHA", fmt::format("{:.9e}f", spec.activation.alpha)},
                                     {"ACT_LIMIT", fmt::format("{:.9e}f", spec.activation.limit)}});
}
}  // namespace

rt::KernelSpec gemm_kernel(const MoeSpec& spec, int stage) {
  rt::KernelSpec k;
  if (codes(spec) == Codes::W8A8) {
    k.source = "sm90/fp8_gemm.cuh";
    k.entry = "moe_sm90_fp8_gemm";
    k.defines = {{"GEMM_STAGE", std::to_string(stage)}, {"SM90_FP8_SMEM_BYTES", std::to_string(kSmemBytesW8A8)}};
    if (stage == 1) add_activation(spec, k);
    k.threads = kThreads;
    k.pdl = true;  // waits at its top (common/grid_dependency.cuh)
    k.smem_bytes = kSmemBytesW8A8;
    k.targets = {kTarget};
    return k;
  }
  k.source = "sm90/grouped_gemm.cuh";
  k.entry = "moe_sm90_gemm";
  k.defines = {{"GEMM_STAGE", std::to_string(stage)},
               {"W4", codes(spec) == Codes::W4 ? "1" : "0"},
               {"W8", codes(spec) == Codes::W8 ? "1" : "0"},
               {"SM90_SMEM_BYTES", std::to_string(wide_smem_bytes(codes(spec)))}};
  if (stage == 1) add_activation(spec, k);
  k.threads = kThreads;
  k.pdl = true;  // waits at its top (common/grid_dependency.cuh)
  k.smem_bytes = wide_smem_bytes(codes(spec));
  k.targets = {kTarget};
  return k;
}

rt::KernelSpec gather_kernel(const MoeSpec& spec, GatherOrder order) {
  const bool quant = order == GatherOrder::QuantFp8 || order == GatherOrder::QuantFp8Tiled;
  rt::KernelSpec k;
  k.source = "sm90/gather.cuh";
  k.entry = "moe_sm90_gather";
  k.defines = {{"E", std::to_string(spec.num_experts)},
               {"E_TOTAL", std::to_string(spec.num_experts + spec.num_shared_experts)},
               {"TOPK", std::to_string(spec.topk)},
               {"HIDDEN", std::to_string(spec.hidden)},
               {"GATHER_WARPS", std::to_string(kGatherWarps)},
               {"PERMUTE_K", order == GatherOrder::PermutedK ? "1" : "0"},
               {"QUANT_FP8", quant ? "1" : "0"},
               {"SCALES_TILED", order == GatherOrder::QuantFp8Tiled ? "1" : "0"}};
  k.threads = kGatherThreads;
  k.pdl = true;  // waits at its top (common/grid_dependency.cuh)
  if (quant) k.targets = {kTarget};  // cvt to e4m3x2: sm_89 and later
  return k;
}

rt::KernelSpec quantize_kernel(int64_t k_cols, bool tiled_scales) {
  rt::KernelSpec k;
  k.source = "sm90/quantize.cuh";
  k.entry = "moe_sm90_quantize_rows";
  k.defines = {{"QUANT_K", std::to_string(k_cols)}, {"SCALES_TILED", tiled_scales ? "1" : "0"}};
  k.threads = kGatherThreads;
  k.pdl = true;  // waits at its top (common/grid_dependency.cuh)
  k.targets = {kTarget};
  return k;
}

rt::KernelSpec decode_kernel(const MoeSpec& spec, int stage, int bt, bool stream_k) {
  const Codes c = codes(spec);
  const int smem = decode_smem_bytes(bt, c, spec.num_experts + spec.num_shared_experts);
  rt::KernelSpec k;
  k.source = "sm90/decode_gemm.cuh";
  k.entry = "moe_sm90_decode";
  k.defines = {{"GEMM_STAGE", std::to_string(stage)},
               {"BT", std::to_string(bt)},
               {"GEMM_N_OUT", std::to_string(stage == 1 ? spec.intermediate : spec.hidden)},
               {"W4", c == Codes::W4 ? "1" : "0"},
               {"W8", c == Codes::W8 || c == Codes::W8A8 ? "1" : "0"},
               {"A8", c == Codes::W8A8 ? "1" : "0"},
               {"E_TOTAL", std::to_string(spec.num_experts + spec.num_shared_experts)},
               {"SM90_DECODE_SMEM_BYTES", std::to_string(smem)},
               {"STREAM_K", stream_k ? "1" : "0"}};
  if (stage == 1) add_activation(spec, k);
  k.threads = kThreads;
  k.pdl = true;  // waits at its top (common/grid_dependency.cuh)
  k.smem_bytes = decode_launch_smem_bytes(bt, c, spec.num_experts + spec.num_shared_experts);
  k.min_blocks_per_sm = decode_ctas_per_sm(bt);
  k.targets = {kTarget};
  return k;
}

rt::KernelSpec decode_fixup_kernel(const MoeSpec& spec, int stage) {
  rt::KernelSpec k = decode_kernel(spec, stage, kStreamKTokens, true);  // the same source and defines
  k.entry = "moe_sm90_decode_fixup";
  k.threads = 256;
  k.smem_bytes = 0;
  k.min_blocks_per_sm = 0;
  return k;
}

std::vector<rt::KernelSpec> own_kernels(const MoeSpec& spec) {
  std::vector<rt::KernelSpec> out;
  out.push_back(portable::combine_kernel(spec, DType::bf16, true));
  const Codes c = codes(spec);
  if (c == Codes::W8A8) {
    out.push_back(gather_kernel(spec, GatherOrder::QuantFp8));  // decode
    out.push_back(gather_kernel(spec, GatherOrder::QuantFp8Tiled));  // wide
    out.push_back(quantize_kernel(spec.intermediate, false));  // decode (the wide GEMM 1 quantizes h)
  } else {
    out.push_back(gather_kernel(spec));
  }
  if (permuted_k(c)) out.push_back(gather_kernel(spec, GatherOrder::PermutedK));
  out.push_back(gemm_kernel(spec, 1));
  out.push_back(gemm_kernel(spec, 2));
  for (int bt : kDecodeTiles)
    for (int stage : {1, 2}) out.push_back(decode_kernel(spec, stage, bt));
  for (int stage : {1, 2}) {
    out.push_back(decode_kernel(spec, stage, kStreamKTokens, true));
    out.push_back(decode_fixup_kernel(spec, stage));
  }
  return out;
}

std::vector<rt::KernelSpec> all_kernels(const MoeSpec& spec) {
  std::vector<rt::KernelSpec> out = portable::all_kernels(spec);
  for (rt::KernelSpec& k : own_kernels(spec)) out.push_back(std::move(k));
  return out;
}

}  // namespace moeforge::sm90
