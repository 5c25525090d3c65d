// moeforge/spec.hpp — everything that defines one MoE layer, independent of any weights.
//
// Conventions (shared by the CPU reference, every backend and every test):
//  * Weights follow nn.Linear: a matrix is [out_features, in_features].
//    W13 of an expert is [2*I, H]: rows [0, I) are the gate projection, rows
//    [I, 2I) the up projection. W2 is [H, I].
//  * Routing selects `topk` experts per token. Ties are broken by the lowest
//    expert id (and the lowest group id for group selection). The selected list
//    is ordered by descending selection score; the combine sums in that order.
//  * NaN logits are never preferred over a number (they order below -inf).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moeforge {

enum class RoutingKind : uint8_t {
  // p = softmax(logits) over all experts; top-k of p.
  Softmax,
  // p = softmax(logits); experts split into n_groups equal groups; a group's
  // score is the sum of its best `group_score_topn` p; the best `topk_groups`
  // groups are kept; top-k of p among the kept experts. (Mistral 4 style.)
  SoftmaxGrouped,
  // s = sigmoid(logits); b = s + correction_bias (selection only); groups
  // scored by the sum of their best `group_score_topn` b; top-k of b among the
  // kept groups; the weights are the unbiased s of the chosen experts. (DeepSeek-V3.)
  SigmoidBiasGrouped,
};

struct RoutingSpec {
  RoutingKind kind = RoutingKind::Softmax;
  bool renormalize = true;      // divide the k selected weights by their sum
  int n_groups = 1;             // grouped kinds only; must divide num_experts
  int topk_groups = 1;          // groups kept (grouped kinds)
  int group_score_topn = 2;     // a group's score sums its best N experts
  double scaling_factor = 1.0;  // routed_scaling_factor, applied after renormalization
};

enum class ActivationKind : uint8_t {
  SwiGLU,         // silu(gate) * up
  GeGLU,          // gelu_tanh(gate) * up   (tanh approximation, as in Gemma)
  ClampedSwiGLU,  // gpt-oss: g = min(gate, limit); u = clamp(up, -limit, limit);
                  //          (u + 1) * g * sigmoid(alpha * g)
};

struct ActivationSpec {
  ActivationKind kind = ActivationKind::SwiGLU;
  double alpha = 1.702;  // ClampedSwiGLU only
  double limit = 7.0;    // ClampedSwiGLU only
};

// How expert weights are stored (and what the kernels read).
enum class WeightFormat : uint8_t {
  BF16,
  FP16,
  FP8_Block128,  // E4M3 values, one f32 scale per 128x128 block (DeepSeek weight_scale_inv)
  NVFP4,         // E2M1 values, one E4M3 scale per 16 along K, one f32 global scale
  MXFP4,         // E2M1 values, one UE8M0 scale per 32 along K
};

// What the GEMMs consume as activations.
enum class ActivationFormat : uint8_t {
  BF16,
  FP16,
  FP8_Group128,  // E4M3 with one f32 scale per 1x128 group, quantized in the permute stage
};

struct MoeSpec {
  std::string name = "custom";
  int64_t num_experts = 0;   // E
  int64_t hidden = 0;        // H
  int64_t intermediate = 0;  // I (per routed expert)
  int topk = 1;              // k
  RoutingSpec routing{};
  ActivationSpec activation{};
  int num_shared_experts = 0;       // always-on experts added to every token
  int64_t shared_intermediate = 0;  // I of each shared expert
  bool expert_bias = false;         // b13 [E, 2I] and b2 [E, H] (gpt-oss)
  WeightFormat weight_format = WeightFormat::BF16;
  ActivationFormat activation_format = ActivationFormat::BF16;

  // Throws InvalidArgument naming the field ("spec.topk: ...") when inconsistent.
  void validate() const;
  // One line: "mistral-small-4: E=128 H=4096 I=2048 k=4 softmax renorm ..."
  std::string describe() const;
};

std::string_view to_string(RoutingKind);
std::string_view to_string(ActivationKind);
std::string_view to_string(WeightFormat);
std::string_view to_string(ActivationFormat);
// Parse the names to_string prints; throw InvalidArgument(argument, ...) otherwise.
WeightFormat parse_weight_format(std::string_view s, std::string_view argument = "weights");
ActivationFormat parse_activation_format(std::string_view s, std::string_view argument = "activations");

namespace presets {
// Real shapes of served models. Names: mistral-small-4, deepseek-v3,
// qwen3-30b-a3b, mixtral-8x7b, gpt-oss-120b.
MoeSpec get(std::string_view name);
std::vector<std::string> names();
}  // namespace presets

}  // namespace moeforge
