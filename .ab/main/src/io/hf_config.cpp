#include "io/hf_config.hpp"

#include <fmt/format.h>

#include "moeforge/errors.hpp"

namespace moeforge::io {
namespace {

const nlohmann::json* first(const nlohmann::json& c, std::initializer_list<const char*> keys, std::string* used = nullptr) {
  for (const char* k : keys)
    if (c.contains(k) && !c[k].is_null()) {
      if (used) *used = k;
      return &c[k];
    }
  return nullptr;
}

int64_t get_int(const nlohmann::json& v, const std::string& where, const std::string& key) {
  if (!v.is_number_integer()) throw IoError(fmt::format("{}: {} must be an integer, got {}", where, key, v.dump()));
  return v.get<int64_t>();
}

}  // namespace

ConfigSpec spec_from_config(const nlohmann::json& top, const std::string& where) {
  const nlohmann::json& c =
      (!top.contains("hidden_size") && top.contains("text_config") && top["text_config"].is_object()) ? top["text_config"]
                                                                                                       : top;
  ConfigSpec out;
  MoeSpec& s = out.spec;
  out.model_type = c.value("model_type", top.value("model_type", std::string()));
  s.name = out.model_type.empty() ? "checkpoint" : out.model_type;
  auto need = [&](std::initializer_list<const char*> keys, const char* what) {
    std::string used;
    const nlohmann::json* v = first(c, keys, &used);
    if (!v) throw IoError(fmt::format("{}: no {} (looked for {})", where, what, fmt::join(keys, ", ")));
    return get_int(*v, where, used);
  };
  s.num_experts = need({"num_local_experts", "n_routed_experts", "num_experts"}, "expert count");
  s.hidden = need({"hidden_size"}, "hidden size");
  s.intermediate = need({"moe_intermediate_size", "intermediate_size"}, "expert intermediate size");
  s.topk = int(need({"num_experts_per_tok", "experts_per_token"}, "experts per token"));

  const std::string& mt = out.model_type;
  const std::string scoring = c.value("scoring_func", std::string("softmax"));
  const std::string topk_method = c.value("topk_method", std::string());
  const int64_t n_group = c.contains("n_group") && !c["n_group"].is_null() ? get_int(c["n_group"], where, "n_group") : 1;
  const int64_t topk_group =
      c.contains("topk_group") && !c["topk_group"].is_null() ? get_int(c["topk_group"], where, "topk_group") : n_group;
  if (scoring == "sigmoid") {
    s.routing.kind = RoutingKind::SigmoidBiasGrouped;
    s.routing.n_groups = int(n_group);
    s.routing.topk_groups = int(topk_group);
    s.routing.group_score_topn = int(std::min<int64_t>(2, s.num_experts / std::max<int64_t>(n_group, 1)));
  } else if (scoring == "softmax") {
    if (n_group > 1 && topk_group < n_group) {
      s.routing.kind = RoutingKind::SoftmaxGrouped;
      s.routing.n_groups = int(n_group);
      s.routing.topk_groups = int(topk_group);
      s.routing.group_score_topn = topk_method == "group_limited_greedy" ? 1 : 2;
    }
  } else {
    throw Unsupported(fmt::format("{}: scoring_func '{}' is not supported (softmax or sigmoid)", where, scoring));
  }
  if (c.contains("norm_topk_prob") && c["norm_topk_prob"].is_boolean()) {
    s.routing.renormalize = c["norm_topk_prob"].get<bool>();
  } else {
    s.routing.renormalize = mt == "mixtral" || mt == "gpt_oss" || mt == "deepseek_v3";
    out.notes.push_back(fmt::format("norm_topk_prob missing: renormalize={} (the {} default)", s.routing.renormalize,
                                    mt.empty() ? "generic" : mt));
  }
  if (c.contains("routed_scaling_factor") && c["routed_scaling_factor"].is_number())
    s.routing.scaling_factor = c["routed_scaling_factor"].get<double>();
  if (mt == "deepseek_v2" && s.routing.renormalize && s.routing.scaling_factor != 1.0) {
    out.notes.push_back("deepseek_v2 scales routing weights only when norm_topk_prob is false: scaling_factor=1");
    s.routing.scaling_factor = 1.0;
  }

  if (mt == "gpt_oss") {
    s.activation.kind = ActivationKind::ClampedSwiGLU;
    s.activation.alpha = 1.702;
    s.activation.limit = c.value("swiglu_limit", 7.0);
    s.expert_bias = true;
  } else {
    const std::string act = c.value("hidden_act", std::string("silu"));
    if (act == "silu" || act == "swish") s.activation.kind = ActivationKind::SwiGLU;
    else if (act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast") s.activation.kind = ActivationKind::GeGLU;
    else if (act == "gelu") {
      s.activation.kind = ActivationKind::GeGLU;
      out.notes.push_back("hidden_act gelu (erf) runs as GeGLU with the tanh approximation");
    } else
      throw Unsupported(fmt::format("{}: hidden_act '{}' is not supported (silu, gelu_pytorch_tanh)", where, act));
  }

  if (c.contains("n_shared_experts") && c["n_shared_experts"].is_number_integer())
    out.expected_shared_intermediate = c["n_shared_experts"].get<int64_t>() * s.intermediate;
  if (c.contains("shared_expert_intermediate_size") && c["shared_expert_intermediate_size"].is_number_integer()) {
    out.expected_shared_intermediate = c["shared_expert_intermediate_size"].get<int64_t>();
    out.has_shared_gate_config = true;
  }

  const nlohmann::json* q = first(top, {"quantization_config"});
  if (!q) q = first(c, {"quantization_config"});
  if (q && q->is_object()) {
    out.quant_method = q->value("quant_method", std::string());
    out.quant_summary = out.quant_method;
    if (out.quant_method == "fp8" && q->contains("weight_block_size")) {
      const auto& b = (*q)["weight_block_size"];
      if (b != nlohmann::json::array({128, 128}))
        throw Unsupported(fmt::format("{}: fp8 weight_block_size {} (only [128, 128] is supported)", where, b.dump()));
      out.quant_summary += " block 128x128";
    } else if (out.quant_method == "compressed-tensors") {
      out.quant_summary += " " + q->value("format", std::string());
    } else if (out.quant_method == "modelopt") {
      out.quant_summary += " " + q->value("quant_algo", std::string());
    }
  }
  return out;
}

}  // namespace moeforge::io
