// config.json -> MoeSpec: how a Hugging Face model configuration maps onto one MoE layer.
//
// Multimodal wrappers (Mistral3ForConditionalGeneration, ...) keep the language model in
// "text_config": it is used when the top level has no hidden_size. quantization_config is read
// from the top level, then from text_config.
//
//   spec field              config keys (first present wins)            when missing
//   num_experts   E         num_local_experts (mixtral, gpt_oss),      IoError
//                           n_routed_experts (deepseek, mistral4),
//                           num_experts (qwen*_moe)
//   hidden        H         hidden_size                                 IoError
//   intermediate  I         moe_intermediate_size, intermediate_size    IoError (also checked against
//                                                                       the tensors' shapes)
//   topk          k         num_experts_per_tok, experts_per_token      IoError
//   routing.kind            scoring_func "sigmoid" -> SigmoidBiasGrouped (DeepSeek-V3 noaux_tc:
//                           group score = sum of the best 2); "softmax" (default) with n_group > 1
//                           and topk_group < n_group -> SoftmaxGrouped (topk_method
//                           "group_limited_greedy": group score = its max, else the best 2);
//                           otherwise Softmax
//   routing.n_groups        n_group                                     1
//   routing.topk_groups     topk_group                                  n_group
//   routing.renormalize     norm_topk_prob                              true for mixtral and gpt_oss
//                           (their routers softmax the top-k logits, which is the same thing);
//                           deepseek_v3: true (its config class default); others false (the
//                           deepseek_v2, qwen2_moe, qwen3_moe config class defaults)
//   routing.scaling_factor  routed_scaling_factor                       1.0. deepseek_v2 applies it
//                           only when norm_topk_prob is false (HF DeepseekV2MoEGate): then 1.0.
//   activation              model_type gpt_oss -> ClampedSwiGLU (alpha 1.702, limit = swiglu_limit,
//                           default 7.0); hidden_act silu/swish -> SwiGLU; gelu_pytorch_tanh,
//                           gelu_new, gelu_fast -> GeGLU; "gelu" (erf) -> GeGLU with a note (moeforge's
//                           GeGLU is the tanh form); missing -> SwiGLU; other -> Unsupported
//   num_shared_experts      1 when the layer has shared-expert tensors (n_shared_experts > 1 are
//                           stored concatenated along I, which is the same sum): the tensors decide
//   shared_intermediate     rows of the shared gate projection (checked against n_shared_experts *
//                           moe_intermediate_size or shared_expert_intermediate_size when given)
//   expert_bias             model_type gpt_oss
//   weight_format           decided by the tensors (see checkpoint.hpp); quantization_config is
//                           only reported and cross-checked
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moeforge/spec.hpp"

namespace moeforge::io {

struct ConfigSpec {
  MoeSpec spec;                     // weight_format, shared experts: filled in from the tensors
  std::string model_type;
  std::string quant_method;         // quantization_config.quant_method ("" if none)
  std::string quant_summary;        // e.g. "compressed-tensors nvfp4-pack-quantized"
  int64_t expected_shared_intermediate = 0;  // from n_shared_experts etc., 0 if unknown
  bool has_shared_gate_config = false;       // qwen2_moe-style shared_expert_gate
  std::vector<std::string> notes;   // assumptions made for missing keys
};

// `where` names the file in error messages.
ConfigSpec spec_from_config(const nlohmann::json& config, const std::string& where);

}  // namespace moeforge::io
