// moeforge/checkpoint.hpp — one MoE layer of a Hugging Face safetensors checkpoint.
//
//   auto w = moeforge::CheckpointWeights::open("/models/DeepSeek-V3", /*layer=*/3);
//   std::shared_ptr<const moeforge::WeightSource> weights = std::move(w);
//   auto layer = moeforge::MoeLayer::create(weights->spec(), weights, {});
//
// The spec comes from config.json (mapping documented in src/io/hf_config.hpp); the weights
// are read from memory-mapped safetensors files (following model.safetensors.index.json),
// one expert at a time, and converted to the QuantMatrix formats of weights.hpp.
//
// Tensor layouts found by name under the layer's MLP module M (M = <prefix>layers.{L}.mlp. or
// <prefix>layers.{L}.block_sparse_moe.; the prefix is found, e.g. "model." or
// "model.language_model."):
//   per expert   M experts.{e}.{gate_proj,up_proj,down_proj}.*   (DeepSeek, Qwen, Mistral 4)
//                M experts.{e}.{w1,w3,w2}.*                       (Mixtral: w1 gate, w3 up, w2 down)
//   fused        M experts.gate_up_proj [E, H, 2I] + down_proj [E, I, H], biases gate_up_proj_bias
//                [E, 2I] and down_proj_bias [E, H] (gpt-oss, transformers GptOssExperts: x @ W,
//                so the matrices are transposed, and gate/up are interleaved along 2I:
//                gate = [..., 0::2], up = [..., 1::2]);
//                MXFP4: experts.{gate_up,down}_proj_blocks [E, N, K/32, 16] u8 and _scales
//                [E, N, K/32] u8 (UE8M0), rows N in nn.Linear order (gate/up interleaved by row),
//                element 2j in the low nibble (transformers integrations/mxfp4.py
//                convert_moe_packed_tensors: lut[lo] -> even, lut[hi] -> odd, ldexp(scale - 127),
//                then transpose(1, 2) to the [E, K, N] parameter).
//   shared       M shared_experts.{gate_proj,up_proj,down_proj}.* (DeepSeek: n_shared_experts
//                concatenated along I, run as one expert) or M shared_expert.* (Qwen2-MoE; its
//                sigmoid shared_expert_gate cannot be expressed by MoeSpec: Unsupported)
//   router       M gate.weight [E, H] (+ M gate.e_score_correction_bias [E]), or
//                M router.weight [E, H] + M router.bias [E] (gpt-oss)
//
// Formats of one projection <p> (decided by the tensors present, not by config.json):
//   BF16 / F16    <p>.weight                                  -> BF16 / FP16 (exact)
//   F32           <p>.weight                                  -> BF16 (rounded: a fallback)
//   DeepSeek FP8  <p>.weight F8_E4M3 [N, K], <p>.weight_scale_inv f32 [ceil(N/128), ceil(K/128)];
//                 value = q * scale_inv (the name notwithstanding)  -> FP8_Block128 (exact)
//   compressed-tensors / ModelOpt FP8: <p>.weight F8_E4M3, <p>.weight_scale f32|bf16 of shape
//                 [] or [1] (per tensor), [N, 1] or [N] (per channel), or the block grid;
//                 value = q * scale -> FP8_Block128 when every 128x128 block of the assembled
//                 matrix (W13 stacks gate and up) has one scale (per tensor with I % 128 == 0:
//                 always; per channel: only if the channel scales agree within each 128 rows),
//                 else the fallback below
//   NVFP4 compressed-tensors: <p>.weight_packed u8 [N, K/2], <p>.weight_scale F8_E4M3 [N, K/16],
//                 <p>.weight_global_scale f32 [1] (+ input_global_scale, not used). The global
//                 scale is stored as the reciprocal: value = e2m1 * (scale / global)
//                 (compressed_tensors quantization/lifecycle/forward.py _dequantize: scale =
//                 scale / global_scale). QuantMatrix.global_scale = 1.0f / weight_global_scale,
//                 rounded once to f32 — the factor kernels multiply by (vLLM passes
//                 1 / (input_global_scale * weight_global_scale) as alpha). Exact when the
//                 stored global is a power of two; otherwise within 1/2 ulp of f32 of the
//                 division form.
//   NVFP4 ModelOpt: <p>.weight u8 [N, K/2], <p>.weight_scale F8_E4M3 [N, K/16],
//                 <p>.weight_scale_2 f32 [] (+ input_scale); value = e2m1 * scale * scale_2
//                 -> NVFP4, global_scale = weight_scale_2 (exact)
//   Both NVFP4 layouts pack element 2j in the low nibble (compressed_tensors pack_fp4_to_uint8).
//   QuantMatrix NVFP4 has ONE global scale, W13 two (gate, up): if they differ by a power of two
//   2^k, the block scales of one half are multiplied by 2^k — exact when every rescaled E4M3
//   scale is representable (checked code by code); otherwise the fallback below.
//
// Fallback: when a layer cannot be represented exactly in one format (per-channel FP8,
// NVFP4 halves with unrelated global scales, shared experts stored in another format than the
// routed ones, F32 weights), and options.allow_bf16_fallback is true (the default), the whole
// layer is dequantized to BF16 (exact value rounded to f32, then to bf16: what "dequantize in
// f32, cast to bf16" gives) and a warning says why; with false, Unsupported is thrown.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "moeforge/spec.hpp"
#include "moeforge/tensor.hpp"
#include "moeforge/weights.hpp"

namespace moeforge {

struct CheckpointOptions {
  bool allow_bf16_fallback = true;
  // Receives each warning (fallbacks, assumptions for missing config keys); default: stderr.
  std::function<void(const std::string&)> warn;
};

class CheckpointWeights : public WeightSource {
 public:
  // Reads config.json, finds layer `layer`'s tensors and validates every tensor the layer needs
  // (names, dtypes, shapes, the files' headers). Throws IoError naming the file and tensor for a
  // missing, damaged or inconsistent checkpoint, Unsupported for a layout moeforge cannot run.
  static std::unique_ptr<CheckpointWeights> open(const std::string& dir, int layer, const CheckpointOptions& options = {});
  ~CheckpointWeights() override;

  const MoeSpec& spec() const override;
  ExpertWeights expert(int64_t e) const override;
  ExpertWeights shared_expert(int s) const override;
  std::vector<float> correction_bias() const override;

  // Router logits [T, E] f32 = x [T, H] (bf16 | f16 | f32, CPU, contiguous) times the router
  // weight transposed (+ router bias), accumulated in double and rounded once.
  std::vector<float> router_logits(const TensorView& x) const;
  // The router weight [E, H] as f32 (exact from bf16/f16/f32) and its bias ([E] or empty).
  const std::vector<float>& router_weight() const;
  const std::vector<float>& router_bias() const;

  // One line: "<dir> layer 0: per-expert gate/up/down (model.layers.0.mlp.), compressed-tensors nvfp4 -> nvfp4".
  const std::string& describe() const;
  const std::vector<std::string>& warnings() const;
  bool dequantized_to_bf16() const;  // the fallback was taken

  struct Impl;

 private:
  explicit CheckpointWeights(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// logits[t, e] = sum_h x[t, h] * w[e, h] (+ bias[e]), in double, rounded to f32.
// x: [T, H] bf16 | f16 | f32 CPU contiguous; w: [E, H] row-major; bias: [E] or null.
std::vector<float> compute_router_logits(const TensorView& x, const float* w, int64_t num_experts, const float* bias);

}  // namespace moeforge
