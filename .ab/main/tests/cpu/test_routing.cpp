// Routing of the CPU reference: hand-computed cases for every kind, the documented
// non-finite behaviour, and a brute-force cross-check on random logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "moeforge/errors.hpp"
#include "moeforge/reference.hpp"

using namespace moeforge;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

MoeSpec small_spec(int64_t E, int k, RoutingSpec r) {
  MoeSpec s;
  s.num_experts = E;
  s.hidden = 8;
  s.intermediate = 8;
  s.topk = k;
  s.routing = r;
  return s;
}

reference::Routing route1(const MoeSpec& s, std::vector<float> logits, std::vector<float> bias = {}) {
  return reference::route(s, logits.data(), int64_t(logits.size()) / s.num_experts, bias);
}

double sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

}  // namespace

TEST(RoutingSoftmax, HandComputedRenormalizedAndNot) {
  const std::vector<float> logits{1, 3, 2, 0};
  const double S = std::exp(0.0) + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  auto r = route1(small_spec(4, 2, {.kind = RoutingKind::Softmax, .renormalize = false}), logits);
  ASSERT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(r.weights[0], std::exp(3.0) / S, 1e-15);
  EXPECT_NEAR(r.weights[1], std::exp(2.0) / S, 1e-15);

  r = route1(small_spec(4, 2, {.kind = RoutingKind::Softmax, .renormalize = true}), logits);
  ASSERT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(r.weights[0], 0.7310585786300049, 1e-15);  // 1 / (1 + e^-1)
  EXPECT_NEAR(r.weights[1], 0.2689414213699951, 1e-15);
}

TEST(RoutingSoftmax, ScalingFactorAppliesAfterRenormalization) {
  auto r = route1(small_spec(4, 2, {.kind = RoutingKind::Softmax, .renormalize = true, .scaling_factor = 2.5}),
                  {1, 3, 2, 0});
  EXPECT_NEAR(r.weights[0], 2.5 * 0.7310585786300049, 1e-14);
  EXPECT_NEAR(r.weights[1], 2.5 * 0.2689414213699951, 1e-14);
  EXPECT_NEAR(r.weights[0] + r.weights[1], 2.5, 1e-14);
}

TEST(RoutingSoftmax, TiesGoToTheLowestIdAndOrderIsDescending) {
  auto r = route1(small_spec(4, 2, {.renormalize = false}), {1, 1, 1, 1});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_DOUBLE_EQ(r.weights[0], 0.25);
  r = route1(small_spec(4, 2, {}), {0, 2, 1, 2});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3}));
  r = route1(small_spec(5, 3, {}), {0.5f, -1, 4, 2, 3});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 4, 3}));
  EXPECT_GT(r.weights[0], r.weights[1]);
  EXPECT_GT(r.weights[1], r.weights[2]);
}

TEST(RoutingSoftmax, SeveralTokens) {
  auto r = route1(small_spec(3, 1, {.renormalize = false}), {0, 1, 0, /**/ 5, 0, 0});
  EXPECT_EQ(r.tokens, 2);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 0}));
  EXPECT_NEAR(r.weights[1], std::exp(5.0) / (std::exp(5.0) + 2), 1e-15);
}

TEST(RoutingSoftmaxGrouped, GroupSelectionCanExcludeTheGloballyBestExpert) {
  // Groups of two. Expert 0 has the best logit, but its partner is hopeless, so its
  // group (score = sum of the best two p) loses to groups 1 and 2.
  const std::vector<float> logits{4.5f, -10, 4, 4, 3.9f, 3.9f, 0, 0};
  RoutingSpec rs{.kind = RoutingKind::SoftmaxGrouped, .renormalize = false, .n_groups = 4, .topk_groups = 2,
                 .group_score_topn = 2};
  auto r = route1(small_spec(8, 2, rs), logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3}));
  double S = 0;
  for (float l : logits) S += std::exp(double(l));
  EXPECT_NEAR(r.weights[0], std::exp(4.0) / S, 1e-15);  // p over all experts, not the kept ones
  // k = 3: the third comes from group 2, not expert 0.
  r = route1(small_spec(8, 3, rs), logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3, 4}));
  // Scoring a group by its best single expert keeps group 0 instead.
  rs.group_score_topn = 1;
  r = route1(small_spec(8, 2, rs), logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2}));
  // Renormalized: the two equal p share the mass.
  rs.group_score_topn = 2;
  rs.renormalize = true;
  r = route1(small_spec(8, 2, rs), logits);
  EXPECT_DOUBLE_EQ(r.weights[0], 0.5);
  EXPECT_DOUBLE_EQ(r.weights[1], 0.5);
}

TEST(RoutingSoftmaxGrouped, GroupTiesGoToTheLowestGroup) {
  RoutingSpec rs{.kind = RoutingKind::SoftmaxGrouped, .n_groups = 4, .topk_groups = 1, .group_score_topn = 2};
  auto r = route1(small_spec(8, 1, rs), {0, 0, 1, 1, 1, 1, 0, 0});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2}));
}

TEST(RoutingSigmoid, BiasChangesTheSelectionButNotTheWeights) {
  // DeepSeek-V3: b = sigmoid(l) + bias selects, the unbiased sigmoid weighs.
  RoutingSpec rs{.kind = RoutingKind::SigmoidBiasGrouped, .renormalize = false, .n_groups = 1, .topk_groups = 1,
                 .group_score_topn = 2};
  const std::vector<float> logits{2, 1, 0, -1};
  auto r = route1(small_spec(4, 2, rs), logits, {0, 0, 0, 0});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
  r = route1(small_spec(4, 2, rs), logits, {0, 0, 0.5f, 0});  // b = [.881, .731, 1.0, .269]
  ASSERT_EQ(r.ids, (std::vector<int32_t>{2, 0}));
  EXPECT_NEAR(r.weights[0], 0.5, 1e-15);       // sigmoid(0), not 1.0
  EXPECT_NEAR(r.weights[1], sig(2.0), 1e-15);  // 0.8808
  rs.renormalize = true;
  rs.scaling_factor = 2.5;
  r = route1(small_spec(4, 2, rs), logits, {0, 0, 0.5f, 0});
  EXPECT_NEAR(r.weights[0], 2.5 * 0.5 / (0.5 + sig(2.0)), 1e-14);
  EXPECT_NEAR(r.weights[1], 2.5 * sig(2.0) / (0.5 + sig(2.0)), 1e-14);
  // No bias given: treated as zeros.
  r = route1(small_spec(4, 2, rs), logits);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
}

TEST(RoutingSigmoid, GroupsAreScoredWithTheBias) {
  // 4 groups of 2, keep 2, group score = sum of the best two b.
  RoutingSpec rs{.kind = RoutingKind::SigmoidBiasGrouped, .renormalize = false, .n_groups = 4, .topk_groups = 2,
                 .group_score_topn = 2};
  const std::vector<float> logits{3, -3, 1, 1, 0.5f, 0.5f, 0, 0};
  // Without bias: group scores .953+.047=1.0, 1.462, 1.245, 1.0 -> groups 1, 2 -> experts 2, 3.
  auto r = route1(small_spec(8, 2, rs), logits, std::vector<float>(8, 0.f));
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 3}));
  // Bias on expert 1 lifts group 0 (1.0 + 0.6) above group 2; expert 0 then wins on b.
  r = route1(small_spec(8, 2, rs), logits, {0, 0.6f, 0, 0, 0, 0, 0, 0});
  ASSERT_EQ(r.ids, (std::vector<int32_t>{0, 2}));
  EXPECT_NEAR(r.weights[0], sig(3.0), 1e-15);
  EXPECT_NEAR(r.weights[1], sig(1.0), 1e-15);
}

TEST(RoutingNonFinite, NaNIsNeverPreferredAndIsLeftOutOfTheSoftmax) {
  auto r = route1(small_spec(4, 2, {.renormalize = false}), {kNaN, 1, 0, kNaN});
  ASSERT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
  EXPECT_NEAR(r.weights[0], std::exp(1.0) / (std::exp(1.0) + 1), 1e-15);
  // NaN orders below -inf.
  r = route1(small_spec(3, 2, {.renormalize = false}), {kNaN, -INFINITY, 0});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(r.weights[1], 0.0);
  // Forced to pick a NaN expert: its weight is NaN, and renormalization spreads it.
  r = route1(small_spec(4, 3, {.renormalize = true}), {kNaN, 1, 0, kNaN});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2, 0}));
  for (double w : r.weights) EXPECT_TRUE(std::isnan(w));
}

TEST(RoutingNonFinite, AllNaNRowGivesValidIdsAndNaNWeights) {
  for (auto kind : {RoutingKind::Softmax, RoutingKind::SoftmaxGrouped, RoutingKind::SigmoidBiasGrouped}) {
    RoutingSpec rs{.kind = kind, .n_groups = 2, .topk_groups = 1, .group_score_topn = 1};
    auto r = route1(small_spec(4, 2, rs), {kNaN, kNaN, kNaN, kNaN});
    EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
    for (double w : r.weights) EXPECT_TRUE(std::isnan(w));
  }
}

TEST(RoutingNonFinite, InfinityTakesTheSoftmaxLimit) {
  auto r = route1(small_spec(4, 3, {.renormalize = false}), {INFINITY, 0, INFINITY, 1});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(r.weights, (std::vector<double>{0.5, 0.5, 0.0}));
  r = route1(small_spec(4, 2, {.renormalize = false}), {-INFINITY, -INFINITY, -INFINITY, -INFINITY});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(r.weights, (std::vector<double>{0.25, 0.25}));
  r = route1(small_spec(4, 2, {.renormalize = false}), {-INFINITY, 3, -INFINITY, -INFINITY});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(r.weights, (std::vector<double>{1.0, 0.0}));
  // Sigmoid: +Inf -> 1, -Inf -> 0.
  RoutingSpec rs{.kind = RoutingKind::SigmoidBiasGrouped, .renormalize = false, .n_groups = 1, .topk_groups = 1,
                 .group_score_topn = 1};
  r = route1(small_spec(4, 2, rs), {-INFINITY, INFINITY, 0, 0});
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r.weights, (std::vector<double>{1.0, 0.5}));
}

TEST(RoutingErrors, BadCorrectionBiasAndSpec) {
  RoutingSpec rs{.kind = RoutingKind::SigmoidBiasGrouped, .n_groups = 1, .topk_groups = 1, .group_score_topn = 1};
  try {
    route1(small_spec(4, 2, rs), {0, 0, 0, 0}, {0, 0, 0});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "correction_bias");
  }
  EXPECT_THROW(route1(small_spec(4, 5, {}), {0, 0, 0, 0}), InvalidArgument);
  auto r = reference::route(small_spec(4, 2, {}), nullptr, 0, {});
  EXPECT_EQ(r.tokens, 0);
  EXPECT_TRUE(r.ids.empty());
}

// ---- brute force: an independent definition of the same routing ---------------
namespace {

// Best `m`-subset of `cand` by the largest sum of keys, ordered by key descending.
// With distinct keys this is exactly the top-m, found without any sorting logic.
std::vector<int> best_subset(const std::vector<int>& cand, const std::vector<double>& key, int m) {
  const int n = int(cand.size());
  std::vector<int> best;
  double best_sum = -kInf;
  std::vector<int> idx(static_cast<size_t>(m));
  // Enumerate combinations of m of n via an index vector.
  for (int i = 0; i < m; ++i) idx[size_t(i)] = i;
  while (true) {
    double s = 0;
    for (int i : idx) s += key[size_t(cand[size_t(i)])];
    if (s > best_sum) {
      best_sum = s;
      best.clear();
      for (int i : idx) best.push_back(cand[size_t(i)]);
    }
    int i = m - 1;
    while (i >= 0 && idx[size_t(i)] == n - m + i) --i;
    if (i < 0) break;
    ++idx[size_t(i)];
    for (int j = i + 1; j < m; ++j) idx[size_t(j)] = idx[size_t(j - 1)] + 1;
  }
  std::sort(best.begin(), best.end(), [&](int a, int b) { return key[size_t(a)] > key[size_t(b)]; });
  return best;
}

void brute_route(const MoeSpec& s, const float* logits, const std::vector<float>& bias, std::vector<int>& ids,
                 std::vector<double>& w) {
  const int E = int(s.num_experts);
  std::vector<double> weight(static_cast<size_t>(E)), key(static_cast<size_t>(E));
  if (s.routing.kind == RoutingKind::SigmoidBiasGrouped) {
    for (int e = 0; e < E; ++e) {
      weight[size_t(e)] = sig(logits[e]);
      key[size_t(e)] = weight[size_t(e)] + (bias.empty() ? 0.0 : bias[size_t(e)]);
    }
  } else {
    double S = 0;
    for (int e = 0; e < E; ++e) S += std::exp(double(logits[e]));
    for (int e = 0; e < E; ++e) key[size_t(e)] = weight[size_t(e)] = std::exp(double(logits[e])) / S;
  }
  std::vector<int> cand;
  if (s.routing.kind == RoutingKind::Softmax) {
    for (int e = 0; e < E; ++e) cand.push_back(e);
  } else {
    const int G = s.routing.n_groups, per = E / G;
    std::vector<double> gscore(static_cast<size_t>(G));
    for (int g = 0; g < G; ++g) {
      std::vector<int> members;
      for (int e = g * per; e < (g + 1) * per; ++e) members.push_back(e);
      for (int e : best_subset(members, key, s.routing.group_score_topn)) gscore[size_t(g)] += key[size_t(e)];
    }
    std::vector<int> groups;
    for (int g = 0; g < G; ++g) groups.push_back(g);
    for (int g : best_subset(groups, gscore, s.routing.topk_groups))
      for (int e = g * per; e < (g + 1) * per; ++e) cand.push_back(e);
  }
  ids = best_subset(cand, key, s.topk);
  w.clear();
  double sum = 0;
  for (int e : ids) sum += weight[size_t(e)];
  for (int e : ids) w.push_back((s.routing.renormalize ? weight[size_t(e)] / sum : weight[size_t(e)]) *
                                s.routing.scaling_factor);
}

}  // namespace

TEST(RoutingBruteForce, RandomLogitsEveryKind) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.f, 2.f);
  struct Case {
    int E, k;
    RoutingSpec r;
  };
  const std::vector<Case> cases{
      {8, 2, {.kind = RoutingKind::Softmax, .renormalize = true}},
      {12, 3, {.kind = RoutingKind::Softmax, .renormalize = false, .scaling_factor = 1.5}},
      {12, 3, {.kind = RoutingKind::SoftmaxGrouped, .renormalize = true, .n_groups = 4, .topk_groups = 2,
               .group_score_topn = 2}},
      {16, 4, {.kind = RoutingKind::SoftmaxGrouped, .renormalize = false, .n_groups = 4, .topk_groups = 3,
               .group_score_topn = 1}},
      {16, 4, {.kind = RoutingKind::SigmoidBiasGrouped, .renormalize = true, .n_groups = 4, .topk_groups = 2,
               .group_score_topn = 2, .scaling_factor = 2.5}},
      {12, 2, {.kind = RoutingKind::SigmoidBiasGrouped, .renormalize = false, .n_groups = 3, .topk_groups = 1,
               .group_score_topn = 3}},
  };
  for (const auto& c : cases) {
    const MoeSpec s = small_spec(c.E, c.k, c.r);
    SCOPED_TRACE(s.describe());
    const int T = 200;
    std::vector<float> logits(static_cast<size_t>(T * c.E)), bias(static_cast<size_t>(c.E));
    for (auto& v : logits) v = nd(rng);
    for (auto& v : bias) v = 0.1f * nd(rng);
    const auto r = reference::route(s, logits.data(), T, bias);
    for (int t = 0; t < T; ++t) {
      std::vector<int> ids;
      std::vector<double> w;
      brute_route(s, &logits[size_t(t * c.E)], bias, ids, w);
      for (int j = 0; j < c.k; ++j) {
        ASSERT_EQ(r.ids[size_t(t * c.k + j)], ids[size_t(j)]) << "token " << t << " slot " << j;
        ASSERT_NEAR(r.weights[size_t(t * c.k + j)], w[size_t(j)], 1e-13) << "token " << t << " slot " << j;
      }
    }
  }
}
