// MoeSpec, RoutingSpec, ActivationSpec and their enums. Every field is readable and
// writable; enum fields accept the enum or its name as the CLI prints it
// ("softmax-grouped", "fp8", ...). Constructors take any field as a keyword.
#include <fmt/format.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <functional>
#include <map>

#include "convert.hpp"
#include "moeforge/errors.hpp"

namespace moeforge::py {
namespace {

template <class E>
E enum_arg(nb::handle v, const char* argument, E (*parse)(const std::string&, const char*)) {
  if (nb::isinstance<nb::str>(v)) return parse(nb::cast<std::string>(v), argument);
  E out;
  if (!nb::try_cast(v, out))
    throw InvalidArgument(argument, fmt::format("expected a {} or its name, got {}", argument,
                                                nb::cast<std::string>(nb::str(v.type()))));
  return out;
}

WeightFormat parse_wf(const std::string& s, const char* a) { return parse_weight_format(s, a); }
ActivationFormat parse_af(const std::string& s, const char* a) { return parse_activation_format(s, a); }

template <class T>
T value_arg(nb::handle v, const char* argument, const char* what) {
  T out;
  if (!nb::try_cast(v, out))
    throw InvalidArgument(argument,
                          fmt::format("expected {}, got {}", what, nb::cast<std::string>(nb::str(v.type()))));
  return out;
}

// field name -> setter, for keyword constructors and property setters alike.
template <class S>
using Setters = std::map<std::string, std::function<void(S&, nb::handle)>, std::less<>>;

const Setters<RoutingSpec>& routing_setters() {
  static const Setters<RoutingSpec> s{
      {"kind", [](RoutingSpec& r, nb::handle v) { r.kind = enum_arg(v, "routing.kind", parse_routing_kind); }},
      {"renormalize", [](RoutingSpec& r, nb::handle v) { r.renormalize = value_arg<bool>(v, "routing.renormalize", "a bool"); }},
      {"n_groups", [](RoutingSpec& r, nb::handle v) { r.n_groups = value_arg<int>(v, "routing.n_groups", "an int"); }},
      {"topk_groups", [](RoutingSpec& r, nb::handle v) { r.topk_groups = value_arg<int>(v, "routing.topk_groups", "an int"); }},
      {"group_score_topn",
       [](RoutingSpec& r, nb::handle v) { r.group_score_topn = value_arg<int>(v, "routing.group_score_topn", "an int"); }},
      {"scaling_factor",
       [](RoutingSpec& r, nb::handle v) { r.scaling_factor = value_arg<double>(v, "routing.scaling_factor", "a float"); }},
  };
  return s;
}

const Setters<ActivationSpec>& activation_setters() {
  static const Setters<ActivationSpec> s{
      {"kind", [](ActivationSpec& a, nb::handle v) { a.kind = enum_arg(v, "activation.kind", parse_activation_kind); }},
      {"alpha", [](ActivationSpec& a, nb::handle v) { a.alpha = value_arg<double>(v, "activation.alpha", "a float"); }},
      {"limit", [](ActivationSpec& a, nb::handle v) { a.limit = value_arg<double>(v, "activation.limit", "a float"); }},
  };
  return s;
}

template <class S>
void apply_kwargs(S& target, const Setters<S>& setters, const nb::dict& kw, const char* what) {
  for (auto [k, v] : kw) {
    const std::string key = nb::cast<std::string>(k);
    auto it = setters.find(key);
    if (it == setters.end()) throw InvalidArgument(fmt::format("{}.{}", what, key), "no such field");
    it->second(target, v);
  }
}

template <class S>
S struct_arg(nb::handle v, const Setters<S>& setters, const char* what) {
  if (nb::isinstance<nb::dict>(v)) {
    S s{};
    apply_kwargs(s, setters, nb::borrow<nb::dict>(v), what);
    return s;
  }
  return value_arg<S>(v, what, fmt::format("a {} or a dict of its fields", what).c_str());
}

const Setters<MoeSpec>& spec_setters() {
  static const Setters<MoeSpec> s{
      {"name", [](MoeSpec& m, nb::handle v) { m.name = value_arg<std::string>(v, "spec.name", "a str"); }},
      {"num_experts", [](MoeSpec& m, nb::handle v) { m.num_experts = value_arg<int64_t>(v, "spec.num_experts", "an int"); }},
      {"hidden", [](MoeSpec& m, nb::handle v) { m.hidden = value_arg<int64_t>(v, "spec.hidden", "an int"); }},
      {"intermediate", [](MoeSpec& m, nb::handle v) { m.intermediate = value_arg<int64_t>(v, "spec.intermediate", "an int"); }},
      {"topk", [](MoeSpec& m, nb::handle v) { m.topk = value_arg<int>(v, "spec.topk", "an int"); }},
      {"routing", [](MoeSpec& m, nb::handle v) { m.routing = struct_arg(v, routing_setters(), "routing"); }},
      {"activation", [](MoeSpec& m, nb::handle v) { m.activation = struct_arg(v, activation_setters(), "activation"); }},
      {"num_shared_experts",
       [](MoeSpec& m, nb::handle v) { m.num_shared_experts = value_arg<int>(v, "spec.num_shared_experts", "an int"); }},
      {"shared_intermediate",
       [](MoeSpec& m, nb::handle v) { m.shared_intermediate = value_arg<int64_t>(v, "spec.shared_intermediate", "an int"); }},
      {"expert_bias", [](MoeSpec& m, nb::handle v) { m.expert_bias = value_arg<bool>(v, "spec.expert_bias", "a bool"); }},
      {"weight_format", [](MoeSpec& m, nb::handle v) { m.weight_format = enum_arg(v, "spec.weight_format", parse_wf); }},
      {"activation_format",
       [](MoeSpec& m, nb::handle v) { m.activation_format = enum_arg(v, "spec.activation_format", parse_af); }},
  };
  return s;
}

template <class S, class T, class C>
void rw(C& cls, const char* name, T S::*member, const Setters<S>& setters, const char* doc) {
  auto setter = setters.find(std::string_view(name))->second;
  cls.def_prop_rw(
      name, [member](const S& s) { return s.*member; },
      [setter](S& s, nb::handle v) { setter(s, v); }, doc);
}

// Struct-valued fields: reads return a view into the parent (spec.routing.n_groups = 4 works).
template <class S, class T, class C>
void rw_struct(C& cls, const char* name, T S::*member, const Setters<S>& setters, const char* doc) {
  auto setter = setters.find(std::string_view(name))->second;
  cls.def_prop_rw(
      name, [member](S& s) -> T& { return s.*member; }, [setter](S& s, nb::handle v) { setter(s, v); },
      nb::for_getter(nb::rv_policy::reference_internal), doc);
}

}  // namespace

void bind_spec(nb::module_& m) {
  nb::enum_<RoutingKind>(m, "RoutingKind", "How router logits become top-k experts and weights (spec.hpp).")
      .value("Softmax", RoutingKind::Softmax, "softmax over all experts; top-k of p")
      .value("SoftmaxGrouped", RoutingKind::SoftmaxGrouped, "softmax; best groups kept; top-k among them (Mistral 4)")
      .value("SigmoidBiasGrouped", RoutingKind::SigmoidBiasGrouped,
             "sigmoid + correction bias for selection; grouped (DeepSeek-V3)");
  nb::enum_<ActivationKind>(m, "ActivationKind", "The gated activation of GEMM1's output.")
      .value("SwiGLU", ActivationKind::SwiGLU, "silu(gate) * up")
      .value("GeGLU", ActivationKind::GeGLU, "gelu_tanh(gate) * up")
      .value("ClampedSwiGLU", ActivationKind::ClampedSwiGLU, "gpt-oss: clamped, (u + 1) * g * sigmoid(alpha * g)");
  nb::enum_<WeightFormat>(m, "WeightFormat", "How expert weights are stored.")
      .value("BF16", WeightFormat::BF16)
      .value("FP16", WeightFormat::FP16)
      .value("FP8_Block128", WeightFormat::FP8_Block128, "E4M3, one f32 scale per 128x128 block")
      .value("NVFP4", WeightFormat::NVFP4, "E2M1, E4M3 scale per 16, f32 global scale")
      .value("MXFP4", WeightFormat::MXFP4, "E2M1, UE8M0 scale per 32");
  nb::enum_<ActivationFormat>(m, "ActivationFormat", "What the GEMMs consume as activations.")
      .value("BF16", ActivationFormat::BF16)
      .value("FP16", ActivationFormat::FP16)
      .value("FP8_Group128", ActivationFormat::FP8_Group128, "E4M3, one f32 scale per 1x128 group");
  m.def("_enum_name", [](RoutingKind k) { return std::string(to_string(k)); });
  m.def("_enum_name", [](ActivationKind k) { return std::string(to_string(k)); });
  m.def("_enum_name", [](WeightFormat k) { return std::string(to_string(k)); });
  m.def("_enum_name", [](ActivationFormat k) { return std::string(to_string(k)); },
        "The name of an enum value as the CLI prints it ('softmax-grouped', 'fp8', ...).");

  auto routing = nb::class_<RoutingSpec>(m, "RoutingSpec", "Routing of one MoE layer (see MoeSpec.routing).");
  routing.def("__init__", [](RoutingSpec* r, nb::kwargs kw) {
    new (r) RoutingSpec();
    apply_kwargs(*r, routing_setters(), kw, "routing");
  }, "RoutingSpec(**fields): any field as a keyword; the rest keep their defaults.");
  rw(routing, "kind", &RoutingSpec::kind, routing_setters(), "RoutingKind (or its name, e.g. 'softmax-grouped')");
  rw(routing, "renormalize", &RoutingSpec::renormalize, routing_setters(), "divide the k weights by their sum");
  rw(routing, "n_groups", &RoutingSpec::n_groups, routing_setters(), "grouped kinds: number of expert groups");
  rw(routing, "topk_groups", &RoutingSpec::topk_groups, routing_setters(), "grouped kinds: groups kept");
  rw(routing, "group_score_topn", &RoutingSpec::group_score_topn, routing_setters(),
     "grouped kinds: a group's score sums its best N experts");
  rw(routing, "scaling_factor", &RoutingSpec::scaling_factor, routing_setters(),
     "routed_scaling_factor, applied after renormalization");

  routing.def("__repr__", [](const RoutingSpec& r) {
    return fmt::format("RoutingSpec(kind='{}', renormalize={}, n_groups={}, topk_groups={}, group_score_topn={}, "
                       "scaling_factor={})",
                       to_string(r.kind), r.renormalize ? "True" : "False", r.n_groups, r.topk_groups,
                       r.group_score_topn, r.scaling_factor);
  });

  auto act = nb::class_<ActivationSpec>(m, "ActivationSpec", "Gated activation (see MoeSpec.activation).");
  act.def("__init__", [](ActivationSpec* a, nb::kwargs kw) {
    new (a) ActivationSpec();
    apply_kwargs(*a, activation_setters(), kw, "activation");
  }, "ActivationSpec(**fields): any field as a keyword; the rest keep their defaults.");
  rw(act, "kind", &ActivationSpec::kind, activation_setters(), "ActivationKind (or its name, e.g. 'swiglu')");
  rw(act, "alpha", &ActivationSpec::alpha, activation_setters(), "ClampedSwiGLU only");
  rw(act, "limit", &ActivationSpec::limit, activation_setters(), "ClampedSwiGLU only");

  act.def("__repr__", [](const ActivationSpec& a) {
    return fmt::format("ActivationSpec(kind='{}', alpha={}, limit={})", to_string(a.kind), a.alpha, a.limit);
  });

  auto spec = nb::class_<MoeSpec>(m, "MoeSpec",
                                  "Everything that defines one MoE layer, independent of weights (C++ moeforge::MoeSpec).\n\n"
                                  "Weights follow nn.Linear: W13 of an expert is [2I, H], rows [0, I) the gate, rows\n"
                                  "[I, 2I) the up projection; W2 is [H, I].");
  spec.def("__init__", [](MoeSpec* s, nb::kwargs kw) {
    new (s) MoeSpec();
    apply_kwargs(*s, spec_setters(), kw, "spec");
  }, "MoeSpec(**fields): any field as a keyword (routing / activation also as dicts).");
  rw(spec, "name", &MoeSpec::name, spec_setters(), "a label ('custom' unless a preset)");
  rw(spec, "num_experts", &MoeSpec::num_experts, spec_setters(), "E, routed experts");
  rw(spec, "hidden", &MoeSpec::hidden, spec_setters(), "H, the model dimension");
  rw(spec, "intermediate", &MoeSpec::intermediate, spec_setters(), "I, per routed expert");
  rw(spec, "topk", &MoeSpec::topk, spec_setters(), "k, experts per token");
  rw_struct(spec, "routing", &MoeSpec::routing, spec_setters(), "RoutingSpec (assign one, or a dict of its fields)");
  rw_struct(spec, "activation", &MoeSpec::activation, spec_setters(),
            "ActivationSpec (assign one, or a dict of its fields)");
  rw(spec, "num_shared_experts", &MoeSpec::num_shared_experts, spec_setters(), "always-on experts");
  rw(spec, "shared_intermediate", &MoeSpec::shared_intermediate, spec_setters(), "I of each shared expert");
  rw(spec, "expert_bias", &MoeSpec::expert_bias, spec_setters(), "b13 [E, 2I] and b2 [E, H] (gpt-oss)");
  rw(spec, "weight_format", &MoeSpec::weight_format, spec_setters(),
     "WeightFormat (or 'bf16', 'fp16', 'fp8', 'nvfp4', 'mxfp4')");
  rw(spec, "activation_format", &MoeSpec::activation_format, spec_setters(),
     "ActivationFormat (or 'bf16', 'fp16', 'fp8')");
  spec.def("validate", &MoeSpec::validate, "Raises InvalidArgumentError naming the field when inconsistent.");
  spec.def("describe", &MoeSpec::describe, "One line: 'mistral-small-4: E=128 H=4096 ...'.");
  spec.def("__repr__", [](const MoeSpec& s) { return "MoeSpec(" + s.describe() + ")"; });
  spec.def("__copy__", [](const MoeSpec& s) { return s; });
  spec.def("__deepcopy__", [](const MoeSpec& s, nb::handle) { return s; });

  m.def("_presets_get", [](const std::string& name) { return presets::get(name); }, nb::arg("name"));
  m.def("_presets_names", [] { return presets::names(); });
}

}  // namespace moeforge::py
