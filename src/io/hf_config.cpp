#include "io/hf_config.hpp"

#include <fmt/format.h>

#include <cstdint>

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
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    throw IoError(fmt::format("{}: {} = {} is out of range", where, key, v.dump()));
  return v.get<int64_t>();
}
// For a spec field of type int: out of int's range is an error, not a silently truncated value.
int narrow_int(int64_t x, const std::string& where, const std::string& key) {
  if (x < INT32_MIN || x > INT32_MAX) throw IoError(fmt::format("{}: {} = {} is out of range", where, key, x));
  return int(x);
}

// c[key] if present and not null (first), else `otherwise`; present with another JSON type is
// an error naming the key (nlohmann's value() would throw its own type_error).
std::string get_string(const nlohmann::json& c, const char* key, const std::string& otherwise, const std::string& where) {
  const nlohmann::json* v = first(c, {key});
  if (!v) return otherwise;
  if (!v->is_string()) throw IoError(fmt::format("{}: {} must be a string, got {}", where, key, v->dump()));
  return v->get<std::string>();
}
double get_double(const nlohmann::json& c, const char* key, double otherwise, const std::string& where) {
  const nlohmann::json* v = first(c, {key});
  if (!v) return otherwise;
  if (!v->is_number()) throw IoError(fmt::format("{}: {} must be a number, got {}", where, key, v->dump()));
  return v->get<double>();
}
int get_int32(const nlohmann::json& c, const char* key, int otherwise, const std::string& where) {
  const nlohmann::json* v = first(c, {key});
  return v ? narrow_int(get_int(*v, where, key), where, key) : otherwise;
}

}  // namespace

ConfigSpec spec_from_config(const nlohmann::json& top, const std::string& where) {
  if (!top.is_object()) throw IoError(fmt::format("{}: not a JSON object", where));
  const nlohmann::json& c =
      (!top.contains("hidden_size") && top.contains("text_config") && top["text_config"].is_object()) ? top["text_config"]
                                                                                                       : top;
  ConfigSpec out;
  MoeSpec& s = out.spec;
  out.model_type = get_string(c, "model_type", get_string(top, "model_type", "", where), where);
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
  s.topk = narrow_int(need({"num_experts_per_tok", "experts_per_token"}, "experts per token"), where, "experts per token");

  const std::string& mt = out.model_type;
  const std::string scoring = get_string(c, "scoring_func", "softmax", where);
  const std::string topk_method = get_string(c, "topk_method", "", where);
  const int n_group = get_int32(c, "n_group", 1, where);
  const int topk_group = get_int32(c, "topk_group", n_group, where);
  if (scoring == "sigmoid") {
    s.routing.kind = RoutingKind::SigmoidBiasGrouped;
    s.routing.n_groups = n_group;
    s.routing.topk_groups = topk_group;
    s.routing.group_score_topn = int(std::min<int64_t>(2, s.num_experts / std::max<int64_t>(n_group, 1)));
  } else if (scoring == "softmax") {
    if (n_group > 1 && topk_group < n_group) {
      s.routing.kind = RoutingKind::SoftmaxGrouped;
      s.routing.n_groups = n_group;
      s.routing.topk_groups = topk_group;
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
    s.activation.limit = get_double(c, "swiglu_limit", 7.0, where);
    s.expert_bias = true;
  } else {
    const std::string act = get_string(c, "hidden_act", "silu", where);
    if (act == "silu" || act == "swish") s.activation.kind = ActivationKind::SwiGLU;
    else if (act == "gelu_pytorch_tanh" || act == "gelu_new" || act == "gelu_fast") s.activation.kind = ActivationKind::GeGLU;
    else if (act == "gelu") {
      s.activation.kind = ActivationKind::GeGLU;
      out.notes.push_back("hidden_act gelu (erf) runs as GeGLU with the tanh approximation");
    } else
      throw Unsupported(fmt::format("{}: hidden_act '{}' is not supported (silu, gelu_pytorch_tanh)", where, act));
  }

  if (c.contains("n_shared_experts") && c["n_shared_experts"].is_number_integer()) {
    const int64_t n = get_int(c["n_shared_experts"], where, "n_shared_experts");
    if (n < 0 || __builtin_mul_overflow(n, s.intermediate, &out.expected_shared_intermediate))
      throw IoError(fmt::format("{}: n_shared_experts {} x moe_intermediate_size {} is out of range", where, n,
                                s.intermediate));
  }
  if (c.contains("shared_expert_intermediate_size") && c["shared_expert_intermediate_size"].is_number_integer()) {
    out.expected_shared_intermediate =
        get_int(c["shared_expert_intermediate_size"], where, "shared_expert_intermediate_size");
    out.has_shared_gate_config = true;
  }

  const nlohmann::json* q = first(top, {"quantization_config"});
  if (!q) q = first(c, {"quantization_config"});
  if (q && q->is_object()) {
    out.quant_method = get_string(*q, "quant_method", "", where);
    out.quant_summary = out.quant_method;
    if (out.quant_method == "fp8" && q->contains("weight_block_size")) {
      const auto& b = (*q)["weight_block_size"];
      if (b != nlohmann::json::array({128, 128}))
        throw Unsupported(fmt::format("{}: fp8 weight_block_size {} (only [128, 128] is supported)", where, b.dump()));
      out.quant_summary += " block 128x128";
    } else if (out.quant_method == "compressed-tensors") {
      out.quant_summary += " " + get_string(*q, "format", "", where);
    } else if (out.quant_method == "modelopt") {
      out.quant_summary += " " + get_string(*q, "quant_algo", "", where);
    }
  }
  return out;
}

}  // namespace moeforge::io
