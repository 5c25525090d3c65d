// CPU reference routing: the definition every routing kernel is tested against.
//
// Everything is computed in double from the f32 logits. Semantics (spec.hpp):
//  * Softmax:            p = softmax(logits); top-k of p.
//  * SoftmaxGrouped:     p = softmax(logits); group score = sum of the group's best
//                        group_score_topn p; best topk_groups groups kept; top-k of p
//                        among the kept experts.
//  * SigmoidBiasGrouped: s = sigmoid(logits); b = s + correction_bias (selection only);
//                        groups scored by their best group_score_topn b; top-k of b among
//                        the kept groups; weights are the unbiased s. (DeepSeek-V3.)
// then optional renormalization (divide by the sum of the k weights, summed in selection
// order) and the scaling factor (always applied, after renormalization).
//
// Ordering rules, identical for experts and groups:
//  * higher score first; equal scores: lower id first;
//  * NaN is never preferred over a number: it orders below -inf. Two NaNs tie (lower id).
//
// Softmax kinds rank experts by their logit rather than by p: the order is the same
// (softmax is strictly increasing) except where exp() underflows two different logits
// to the same p, where the logit still tells them apart. Groups are ranked by sums of p.
//
// Non-finite logits (documented behaviour, tested in test_routing.cpp):
//  * NaN logit: treated as missing. It takes no part in the softmax normalization and
//    is selected only when a row has fewer than k non-NaN logits (or its group is
//    forced in); a selected NaN expert has weight NaN, which renormalization then
//    spreads to the whole token — deliberately, so that a NaN input can never produce a
//    plausible-looking output. An all-NaN row selects experts 0..k-1 (valid ids) with
//    NaN weights.
//  * +Inf logits: softmax takes its limit — the +Inf entries share the mass equally,
//    every other entry gets 0. Likewise, if the largest non-NaN logit is -Inf, all the
//    -Inf entries share the mass equally (the limit of equal logits). sigmoid(+Inf) = 1,
//    sigmoid(-Inf) = 0.
//  * Renormalizing a zero sum (e.g. sigmoid weights that are all 0) yields NaN (0/0);
//    no epsilon is added.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moeforge/errors.hpp"
#include "moeforge/reference.hpp"
#include "reference/routing_internal.hpp"

namespace moeforge::reference {
namespace {

// Strict weak order: a is preferred over b. NaN below everything, ties to the lower index.
inline bool prefer(double ka, int64_t a, double kb, int64_t b) {
  const bool na = std::isnan(ka), nb = std::isnan(kb);
  if (na != nb) return nb;
  if (!na && ka != kb) return ka > kb;
  return a < b;
}

// Softmax in double with the limits documented above. NaN logits get p = NaN.
void softmax(const float* logits, int64_t n, double* p) {
  double m = -INFINITY;
  bool any = false;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) continue;
    if (!any || double(logits[i]) > m) m = logits[i];
    any = true;
  }
  if (!any) {
    for (int64_t i = 0; i < n; ++i) p[i] = NAN;
    return;
  }
  if (std::isinf(m)) {
    // Every maximal entry (all +Inf, or all -Inf when nothing is larger) shares the mass.
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) count += double(logits[i]) == m;
    for (int64_t i = 0; i < n; ++i)
      p[i] = std::isnan(logits[i]) ? NAN : double(logits[i]) == m ? 1.0 / double(count) : 0.0;
    return;
  }
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) continue;
    p[i] = std::exp(double(logits[i]) - m);
    sum += p[i];
  }
  for (int64_t i = 0; i < n; ++i) p[i] = std::isnan(logits[i]) ? NAN : p[i] / sum;
}

inline double sigmoid(double v) {
  // Both branches avoid exp overflow; sigmoid(+-Inf) = 1 / 0 exactly.
  if (v >= 0) return 1.0 / (1.0 + std::exp(-v));
  const double e = std::exp(v);
  return e / (1.0 + e);
}

}  // namespace

void route_token(const MoeSpec& spec, const float* logits, const std::vector<float>& correction_bias,
                 RouteScratch& s, int32_t* ids_out, double* weights_out) {
  const int64_t E = spec.num_experts;
  const int k = spec.topk;
  const RoutingSpec& r = spec.routing;
  s.weight.resize(E);
  s.key.resize(E);
  s.order.resize(E);

  // 1. Per-expert weight (what the combine uses) and selection key.
  if (r.kind == RoutingKind::SigmoidBiasGrouped) {
    for (int64_t e = 0; e < E; ++e) {
      s.weight[e] = sigmoid(double(logits[e]));
      s.key[e] = s.weight[e] + (correction_bias.empty() ? 0.0 : double(correction_bias[e]));
    }
  } else {
    softmax(logits, E, s.weight.data());
    for (int64_t e = 0; e < E; ++e) s.key[e] = logits[e];
  }

  // 2. Group selection: mark the experts of the kept groups.
  const bool grouped = r.kind != RoutingKind::Softmax && r.n_groups > 1;
  s.allowed.assign(E, 1);
  if (grouped) {
    const int64_t G = r.n_groups, per = E / G;
    s.group_score.resize(G);
    s.group_order.resize(G);
    // For SoftmaxGrouped the group score sums p (the key is the logit); for sigmoid it sums b.
    const std::vector<double>& contrib = r.kind == RoutingKind::SoftmaxGrouped ? s.weight : s.key;
    for (int64_t g = 0; g < G; ++g) {
      int64_t* o = s.order.data() + g * per;
      std::iota(o, o + per, g * per);
      std::partial_sort(o, o + r.group_score_topn, o + per,
                        [&](int64_t a, int64_t b) { return prefer(s.key[a], a, s.key[b], b); });
      double sum = 0.0;  // best first: a fixed summation order
      for (int i = 0; i < r.group_score_topn; ++i) sum += contrib[o[i]];
      s.group_score[g] = sum;
    }
    std::iota(s.group_order.begin(), s.group_order.end(), int64_t(0));
    std::partial_sort(s.group_order.begin(), s.group_order.begin() + r.topk_groups, s.group_order.end(),
                      [&](int64_t a, int64_t b) { return prefer(s.group_score[a], a, s.group_score[b], b); });
    s.allowed.assign(E, 0);
    for (int i = 0; i < r.topk_groups; ++i)
      std::fill_n(s.allowed.begin() + s.group_order[i] * per, per, uint8_t(1));
  }

  // 3. Top-k by key among the allowed experts, best first.
  int64_t n = 0;
  for (int64_t e = 0; e < E; ++e)
    if (s.allowed[e]) s.order[n++] = e;
  std::partial_sort(s.order.begin(), s.order.begin() + k, s.order.begin() + n,
                    [&](int64_t a, int64_t b) { return prefer(s.key[a], a, s.key[b], b); });

  // 4. Weights: renormalize (sum in selection order), then scale.
  double sum = 0.0;
  for (int i = 0; i < k; ++i) {
    ids_out[i] = int32_t(s.order[i]);
    weights_out[i] = s.weight[s.order[i]];
    sum += weights_out[i];
  }
  for (int i = 0; i < k; ++i) {
    if (r.renormalize) weights_out[i] /= sum;
    weights_out[i] *= r.scaling_factor;
  }
}

void check_correction_bias(const MoeSpec& spec, const std::vector<float>& correction_bias) {
  if (!correction_bias.empty() && int64_t(correction_bias.size()) != spec.num_experts)
    throw InvalidArgument("correction_bias", fmt::format("expected {} values (one per expert) or none, got {}",
                                                         spec.num_experts, correction_bias.size()));
}

Routing route(const MoeSpec& spec, const float* logits, int64_t tokens, const std::vector<float>& correction_bias) {
  spec.validate();
  check_correction_bias(spec, correction_bias);
  if (tokens < 0) throw InvalidArgument("tokens", fmt::format("expected >= 0, got {}", tokens));
  if (tokens > 0 && logits == nullptr)
    throw InvalidArgument("logits", fmt::format("expected [{}, {}] f32 values, got null", tokens, spec.num_experts));
  Routing out;
  out.tokens = tokens;
  out.topk = spec.topk;
  out.ids.resize(size_t(tokens * spec.topk));
  out.weights.resize(size_t(tokens * spec.topk));
  RouteScratch scratch;
  for (int64_t t = 0; t < tokens; ++t)
    route_token(spec, logits + t * spec.num_experts, correction_bias, scratch, out.ids.data() + t * spec.topk,
                out.weights.data() + t * spec.topk);
  return out;
}

}  // namespace moeforge::reference
