// libFuzzer target: MoeSpec::validate/describe with arbitrary fields (enum bytes included),
// presets::get and the parse_* functions with arbitrary strings.
//
// Findings: crashes, sanitizer reports, exceptions other than moeforge::Error, a parse
// that accepts a string it does not print back, and a spec accepted by validate()
// that breaks what validate() promises the backends.
#include <cmath>
#include <string>

#include "fuzz_common.hpp"
#include "moeforge/dtype.hpp"
#include "moeforge/spec.hpp"

using namespace moeforge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  switch (in.ConsumeIntegralInRange<int>(0, 1)) {
    case 0: {  // strings
      const std::string s = in.ConsumeRandomLengthString(64);
      const std::string arg = in.ConsumeRandomLengthString(16);
      fuzz::expect_moeforge_errors_only("presets::get", [&] {
        const MoeSpec p = presets::get(s);
        p.validate();  // every preset is valid
        if (p.describe().empty()) std::abort();
      });
      fuzz::expect_moeforge_errors_only("parse_weight_format", [&] {
        if (to_string(parse_weight_format(s, arg)) != s) std::abort();
      });
      fuzz::expect_moeforge_errors_only("parse_activation_format", [&] {
        if (to_string(parse_activation_format(s, arg)) != s) std::abort();
      });
      fuzz::expect_moeforge_errors_only("parse_dtype", [&] {
        if (dtype_name(parse_dtype(s, arg)) != s) std::abort();
      });
      try {
        parse_weight_format(s, arg);
      } catch (const InvalidArgument& e) {
        if (e.argument() != arg) std::abort();  // the message names the caller's argument
      }
      return 0;
    }
    default: {  // arbitrary fields
      MoeSpec s;
      s.name = in.ConsumeRandomLengthString(16);
      s.num_experts = fuzz::interesting_i64(in);
      s.hidden = fuzz::interesting_i64(in);
      s.intermediate = fuzz::interesting_i64(in);
      s.topk = in.ConsumeIntegral<int>();
      s.routing.kind = static_cast<RoutingKind>(in.ConsumeIntegralInRange<uint8_t>(0, 3));
      s.routing.renormalize = in.ConsumeBool();
      s.routing.n_groups = in.ConsumeIntegral<int>();
      s.routing.topk_groups = in.ConsumeIntegral<int>();
      s.routing.group_score_topn = in.ConsumeIntegral<int>();
      s.routing.scaling_factor = in.ConsumeFloatingPoint<double>();
      s.activation.kind = static_cast<ActivationKind>(in.ConsumeIntegralInRange<uint8_t>(0, 3));
      s.activation.alpha = in.ConsumeFloatingPoint<double>();
      s.activation.limit = in.ConsumeFloatingPoint<double>();
      s.num_shared_experts = in.ConsumeIntegral<int>();
      s.shared_intermediate = fuzz::interesting_i64(in);
      s.expert_bias = in.ConsumeBool();
      s.weight_format = static_cast<WeightFormat>(in.ConsumeIntegralInRange<uint8_t>(0, 5));
      s.activation_format = static_cast<ActivationFormat>(in.ConsumeIntegralInRange<uint8_t>(0, 3));
      if (in.ConsumeBool()) {  // small sane values, so validate() gets past the first checks
        s.num_experts = in.ConsumeIntegralInRange<int64_t>(1, 512);
        s.hidden = in.ConsumeIntegralInRange<int64_t>(1, 64) * 8;
        s.intermediate = in.ConsumeIntegralInRange<int64_t>(1, 64) * 8;
        s.topk = in.ConsumeIntegralInRange<int>(0, 17);
        s.routing.n_groups = in.ConsumeIntegralInRange<int>(0, 17);
        s.routing.topk_groups = in.ConsumeIntegralInRange<int>(0, 17);
        s.routing.group_score_topn = in.ConsumeIntegralInRange<int>(0, 17);
      }
      const bool ok = fuzz::expect_moeforge_errors_only("MoeSpec::validate", [&] { s.validate(); });
      (void)s.describe();  // must not throw or crash on any field values
      if (!ok) return 0;
      if (s.num_experts < 1 || s.hidden < 1 || s.intermediate < 1 || s.topk < 1 || s.topk > s.num_experts)
        std::abort();
      if (!(s.routing.scaling_factor > 0)) std::abort();
      if (s.num_shared_experts < 0) std::abort();
      if (s.routing.kind != RoutingKind::Softmax &&
          (s.routing.n_groups < 1 || s.num_experts % s.routing.n_groups != 0 ||
           int64_t(s.routing.topk_groups) * (s.num_experts / s.routing.n_groups) < s.topk))
        std::abort();
      return 0;
    }
  }
}
