// The CPU reference layer against an independent, naive implementation, plus its
// determinism, row sampling, precomputed routing and edge cases.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <thread>
#include <algorithm>

#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "moeforge/reference.hpp"
#include "moeforge/weights.hpp"

using namespace moeforge;

namespace {

MoeSpec tiny(RoutingKind kind, ActivationKind act, WeightFormat wf, bool bias, int shared) {
  MoeSpec s;
  s.name = "tiny";
  s.num_experts = 8;
  s.hidden = 64;
  s.intermediate = 32;
  s.topk = 2;
  s.routing.kind = kind;
  if (kind != RoutingKind::Softmax) s.routing = {.kind = kind, .renormalize = true, .n_groups = 4, .topk_groups = 2,
                                                 .group_score_topn = 2, .scaling_factor = 1.5};
  s.activation.kind = act;
  s.num_shared_experts = shared;
  s.shared_intermediate = shared ? 32 : 0;
  s.expert_bias = bias;
  s.weight_format = wf;
  return s;
}

// Inputs held as f32 values; x also stored in the requested dtype.
struct Inputs {
  int64_t T = 0;
  std::vector<float> xf;        // the exact values x holds
  std::vector<uint16_t> x16;    // bf16/f16 codes when dtype is 16-bit
  std::vector<float> logits;
  DType dtype = DType::f32;
  TensorView x() {
    void* p = dtype == DType::f32 ? static_cast<void*>(xf.data()) : static_cast<void*>(x16.data());
    return TensorView::contiguous(p, dtype, {T, int64_t(xf.size()) / std::max<int64_t>(T, 1)});
  }
  TensorView l(int64_t E) { return TensorView::contiguous(logits.data(), DType::f32, {T, E}); }
};

Inputs make_inputs(const MoeSpec& s, int64_t T, DType dtype, uint64_t seed) {
  Inputs in;
  in.T = T;
  in.dtype = dtype;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  in.xf.resize(size_t(T * s.hidden));
  in.x16.resize(in.xf.size());
  for (size_t i = 0; i < in.xf.size(); ++i) {
    const float v = nd(rng);
    if (dtype == DType::bf16) {
      in.x16[i] = formats::float_to_bf16(v);
      in.xf[i] = formats::bf16_to_float(in.x16[i]);
    } else if (dtype == DType::f16) {
      in.x16[i] = formats::float_to_f16(v);
      in.xf[i] = formats::f16_to_float(in.x16[i]);
    } else {
      in.xf[i] = v;
    }
  }
  in.logits.resize(size_t(T * s.num_experts));
  for (auto& v : in.logits) v = 2.f * nd(rng);
  return in;
}

// ---- the naive layer: dense loops over every expert, a dense routing matrix ----
double naive_act(const ActivationSpec& a, double g, double u) {
  switch (a.kind) {
    case ActivationKind::SwiGLU: return g / (1 + std::exp(-g)) * u;
    case ActivationKind::GeGLU: return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) * u;
    case ActivationKind::ClampedSwiGLU: {
      g = g > a.limit ? a.limit : g;
      u = u > a.limit ? a.limit : u < -a.limit ? -a.limit : u;
      return (u + 1) * g / (1 + std::exp(-a.alpha * g));
    }
  }
  return NAN;
}

std::vector<double> dense(const QuantMatrix& m) {
  std::vector<double> v(static_cast<size_t>(m.rows * m.cols));
  m.dequantize_rows(0, m.rows, v.data());
  return v;
}

// FP8 activations: a row quantized in 1 x 128 groups and back (what the layer defines).
std::vector<double> fp8_groups(const std::vector<double>& row) {
  const int64_t n = int64_t(row.size());
  std::vector<float> f(row.begin(), row.end()), s(size_t((n + 127) / 128));
  std::vector<uint8_t> q(static_cast<size_t>(n));
  formats::quantize_fp8_group128(f.data(), 1, n, q.data(), s.data());
  formats::dequantize_fp8_group128(q.data(), s.data(), 1, n, f.data());
  return {f.begin(), f.end()};
}

// out[t] += w * (W2 act(W13 x + b13) + b2) for every expert, using the full weight matrix R [T, E].
void naive_expert(const MoeSpec& s, const ExpertWeights& W, int64_t I, const std::vector<float>& x, int64_t T,
                  const std::vector<double>& R, int64_t e, int64_t E, std::vector<double>& out) {
  const int64_t H = s.hidden;
  const auto w13 = dense(W.w13), w2 = dense(W.w2);
  const bool fp8 = s.activation_format == ActivationFormat::FP8_Group128;
  for (int64_t t = 0; t < T; ++t) {
    const double w = R.empty() ? 1.0 : R[size_t(t * E + e)];
    std::vector<double> xt(x.begin() + t * H, x.begin() + (t + 1) * H);
    if (fp8) xt = fp8_groups(xt);
    std::vector<double> h(static_cast<size_t>(I));
    for (int64_t j = 0; j < I; ++j) {
      double g = 0, u = 0;
      for (int64_t c = 0; c < H; ++c) {
        g += w13[size_t(j * H + c)] * xt[size_t(c)];
        u += w13[size_t((I + j) * H + c)] * xt[size_t(c)];
      }
      if (!W.b13.empty()) {
        g += W.b13[size_t(j)];
        u += W.b13[size_t(I + j)];
      }
      h[size_t(j)] = naive_act(s.activation, g, u);
    }
    if (fp8) h = fp8_groups(h);
    for (int64_t c = 0; c < H; ++c) {
      double y = W.b2.empty() ? 0.0 : W.b2[size_t(c)];
      for (int64_t j = 0; j < I; ++j) y += w2[size_t(c * I + j)] * h[size_t(j)];
      out[size_t(t * H + c)] += w * y;
    }
  }
}

std::vector<double> naive_forward(const MoeSpec& s, const WeightSource& ws, const std::vector<float>& x, int64_t T,
                                  const std::vector<int32_t>& ids, const std::vector<double>& wts) {
  const int64_t E = s.num_experts;
  std::vector<double> R(static_cast<size_t>(T * E), 0.0);
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < s.topk; ++j) R[size_t(t * E + ids[size_t(t * s.topk + j)])] += wts[size_t(t * s.topk + j)];
  std::vector<double> out(static_cast<size_t>(T * s.hidden), 0.0);
  for (int64_t e = 0; e < E; ++e) naive_expert(s, ws.expert(e), s.intermediate, x, T, R, e, E, out);
  for (int sh = 0; sh < s.num_shared_experts; ++sh)
    naive_expert(s, ws.shared_expert(sh), s.shared_intermediate, x, T, {}, 0, E, out);
  return out;
}

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST(ReferenceLayer, MatchesNaiveEveryRoutingActivationBiasAndShared) {
  int n = 0;
  for (auto kind : {RoutingKind::Softmax, RoutingKind::SoftmaxGrouped, RoutingKind::SigmoidBiasGrouped})
    for (auto act : {ActivationKind::SwiGLU, ActivationKind::GeGLU, ActivationKind::ClampedSwiGLU})
      for (int variant = 0; variant < 2; ++variant) {
        const bool bias = variant == 1 || act == ActivationKind::ClampedSwiGLU;
        const MoeSpec s = tiny(kind, act, WeightFormat::BF16, bias, variant);
        SCOPED_TRACE(s.describe());
        auto ws = make_synthetic_weights(s, 100 + n++);
        Inputs in = make_inputs(s, 9, variant ? DType::bf16 : DType::f32, n);
        const auto r = reference::route(s, in.logits.data(), in.T, ws->correction_bias());
        const auto want = naive_forward(s, *ws, in.xf, in.T, r.ids, r.weights);
        const auto got = reference::forward(s, *ws, in.x(), in.l(s.num_experts), {.threads = 2});
        EXPECT_LT(rel_err(got, want), 1e-13);
      }
}

TEST(ReferenceLayer, MatchesNaiveEveryWeightFormatAndInputDtype) {
  int n = 0;
  for (auto wf : {WeightFormat::BF16, WeightFormat::FP16, WeightFormat::FP8_Block128, WeightFormat::NVFP4,
                  WeightFormat::MXFP4})
    for (auto dt : {DType::f32, DType::bf16, DType::f16}) {
      const MoeSpec s = tiny(RoutingKind::Softmax, ActivationKind::SwiGLU, wf, false, 1);
      SCOPED_TRACE(std::string(to_string(wf)) + " x " + std::string(dtype_name(dt)));
      auto ws = make_synthetic_weights(s, 7 + n++);
      Inputs in = make_inputs(s, 5, dt, 50 + n);
      const auto r = reference::route(s, in.logits.data(), in.T, {});
      const auto want = naive_forward(s, *ws, in.xf, in.T, r.ids, r.weights);
      const auto got = reference::forward(s, *ws, in.x(), in.l(s.num_experts), {.threads = 1});
      EXPECT_LT(rel_err(got, want), 1e-13);
    }
}

// FP8 activations (1 x 128 groups of x before GEMM 1 and of h before GEMM 2), with H and I
// spanning whole and partial groups, every weight format; and they do change the result.
TEST(ReferenceLayer, MatchesNaiveWithFp8Activations) {
  int n = 0;
  for (auto wf : {WeightFormat::BF16, WeightFormat::FP8_Block128, WeightFormat::NVFP4}) {
    MoeSpec s = tiny(RoutingKind::Softmax, ActivationKind::SwiGLU, wf, false, 1);
    s.hidden = 320;  // 2 groups + 64
    s.intermediate = s.shared_intermediate = 160;
    s.activation_format = ActivationFormat::FP8_Group128;
    SCOPED_TRACE(std::string(to_string(wf)));
    auto ws = make_synthetic_weights(s, 90 + n++);
    Inputs in = make_inputs(s, 6, DType::bf16, 60 + n);
    const auto r = reference::route(s, in.logits.data(), in.T, {});
    const auto want = naive_forward(s, *ws, in.xf, in.T, r.ids, r.weights);
    const auto got = reference::forward(s, *ws, in.x(), in.l(s.num_experts), {.threads = 2});
    EXPECT_LT(rel_err(got, want), 1e-13);
    MoeSpec b = s;
    b.activation_format = ActivationFormat::BF16;
    const auto bf = reference::forward(b, *ws, in.x(), in.l(s.num_experts), {.threads = 2});
    const double d = rel_err(got, bf);  // e4m3 keeps 3 mantissa bits: percent-level, not zero
    EXPECT_GT(d, 1e-3);
    EXPECT_LT(d, 1e-1);
  }
}

TEST(ReferenceLayer, InMemoryWeightsGiveTheSameAsTheirSource) {
  const MoeSpec s = tiny(RoutingKind::SigmoidBiasGrouped, ActivationKind::SwiGLU, WeightFormat::BF16, true, 1);
  auto ws = make_synthetic_weights(s, 3);
  std::vector<ExpertWeights> ex, sh;
  for (int64_t e = 0; e < s.num_experts; ++e) ex.push_back(ws->expert(e));
  sh.push_back(ws->shared_expert(0));
  InMemoryWeights mem(s, ex, sh, ws->correction_bias());
  Inputs in = make_inputs(s, 6, DType::f32, 4);
  const auto a = reference::forward(s, *ws, in.x(), in.l(s.num_experts));
  const auto b = reference::forward(s, mem, in.x(), in.l(s.num_experts));
  EXPECT_EQ(a, b);
  ex.pop_back();
  EXPECT_THROW(InMemoryWeights(s, ex, sh, {}), InvalidArgument);
}

TEST(ReferenceLayer, BitIdenticalForAnyThreadCount) {
  MoeSpec s = tiny(RoutingKind::SoftmaxGrouped, ActivationKind::GeGLU, WeightFormat::BF16, true, 1);
  s.num_experts = 16;
  s.hidden = 256;
  s.intermediate = 128;
  s.topk = 4;
  auto ws = make_synthetic_weights(s, 11);
  Inputs in = make_inputs(s, 37, DType::bf16, 12);
  const auto one = reference::forward(s, *ws, in.x(), in.l(s.num_experts), {.threads = 1});
  for (int th : {2, 3, 0}) {
    const auto many = reference::forward(s, *ws, in.x(), in.l(s.num_experts), {.threads = th});
    ASSERT_EQ(many.size(), one.size());
    EXPECT_EQ(0, std::memcmp(many.data(), one.data(), one.size() * sizeof(double))) << th << " threads";
  }
}

TEST(ReferenceLayer, RowsGiveTheSameBitsAsTheFullRun) {
  MoeSpec s = tiny(RoutingKind::Softmax, ActivationKind::SwiGLU, WeightFormat::FP8_Block128, false, 1);
  s.hidden = 128;
  auto ws = make_synthetic_weights(s, 21);
  Inputs in = make_inputs(s, 23, DType::f32, 22);
  const auto full = reference::forward(s, *ws, in.x(), in.l(s.num_experts), {.threads = 2});
  const std::vector<int64_t> rows{0, 5, 6, 17, 22};
  const auto part = reference::forward(s, *ws, in.x(), in.l(s.num_experts), {.threads = 3, .rows = rows});
  for (int64_t t = 0; t < in.T; ++t) {
    const bool listed = std::find(rows.begin(), rows.end(), t) != rows.end();
    for (int64_t c = 0; c < s.hidden; ++c) {
      const size_t i = size_t(t * s.hidden + c);
      if (listed)
        ASSERT_EQ(part[i], full[i]) << "token " << t;
      else
        ASSERT_EQ(part[i], 0.0) << "token " << t;
    }
  }
  EXPECT_THROW(reference::forward(s, *ws, in.x(), in.l(s.num_experts), {.rows = {3, 2}}), InvalidArgument);
  EXPECT_THROW(reference::forward(s, *ws, in.x(), in.l(s.num_experts), {.rows = {23}}), InvalidArgument);
}

TEST(ReferenceLayer, TopkAndRoutedAgreeWithForward) {
  const MoeSpec s = tiny(RoutingKind::SigmoidBiasGrouped, ActivationKind::ClampedSwiGLU, WeightFormat::BF16, true, 0);
  auto ws = make_synthetic_weights(s, 31);
  Inputs in = make_inputs(s, 13, DType::f32, 32);
  auto r = reference::route(s, in.logits.data(), in.T, ws->correction_bias());
  const auto fwd = reference::forward(s, *ws, in.x(), in.l(s.num_experts));
  EXPECT_EQ(reference::forward_routed(s, *ws, in.x(), r), fwd);

  // forward_topk takes f32 weights: compare with forward_routed on the same f32 values.
  std::vector<float> w32(r.weights.size());
  std::vector<int64_t> ids64(r.ids.size());
  for (size_t i = 0; i < w32.size(); ++i) {
    w32[i] = float(r.weights[i]);
    r.weights[i] = w32[i];
    ids64[i] = r.ids[i];
  }
  const auto routed = reference::forward_routed(s, *ws, in.x(), r);
  const auto tk = TensorView::contiguous(w32.data(), DType::f32, {in.T, s.topk});
  const auto via32 = reference::forward_topk(s, *ws, in.x(), TensorView::contiguous(r.ids.data(), DType::i32, {in.T, s.topk}), tk);
  const auto via64 = reference::forward_topk(s, *ws, in.x(), TensorView::contiguous(ids64.data(), DType::i64, {in.T, s.topk}), tk);
  EXPECT_EQ(via32, routed);
  EXPECT_EQ(via64, routed);
  EXPECT_LT(rel_err(via32, fwd), 1e-6);
}

TEST(ReferenceLayer, TopkDuplicatesAreUsedAsGiven) {
  const MoeSpec s = tiny(RoutingKind::Softmax, ActivationKind::SwiGLU, WeightFormat::BF16, false, 0);
  auto ws = make_synthetic_weights(s, 41);
  Inputs in = make_inputs(s, 3, DType::f32, 42);
  std::vector<int32_t> ids{5, 5, 0, 7, 2, 2};
  std::vector<float> w{0.25f, 0.5f, 1.0f, -0.5f, 2.0f, 0.0f};
  const auto got = reference::forward_topk(s, *ws, in.x(), TensorView::contiguous(ids.data(), DType::i32, {3, 2}),
                                           TensorView::contiguous(w.data(), DType::f32, {3, 2}));
  const auto want = naive_forward(s, *ws, in.xf, 3, ids, std::vector<double>(w.begin(), w.end()));
  EXPECT_LT(rel_err(got, want), 1e-13);
}

TEST(ReferenceLayer, TopkIdsOutOfRangeNameTokenSlotAndValue) {
  const MoeSpec s = tiny(RoutingKind::Softmax, ActivationKind::SwiGLU, WeightFormat::BF16, false, 0);
  auto ws = make_synthetic_weights(s, 1);
  Inputs in = make_inputs(s, 3, DType::f32, 2);
  std::vector<int64_t> ids{0, 1, 2, 3, 4, 8};
  std::vector<float> w(6, 0.5f);
  try {
    reference::forward_topk(s, *ws, in.x(), TensorView::contiguous(ids.data(), DType::i64, {3, 2}),
                            TensorView::contiguous(w.data(), DType::f32, {3, 2}));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "topk_ids");
    const std::string m = e.what();
    EXPECT_NE(m.find("token 2"), std::string::npos) << m;
    EXPECT_NE(m.find("slot 1"), std::string::npos) << m;
    EXPECT_NE(m.find("got 8"), std::string::npos) << m;
  }
  ids[5] = -1;
  EXPECT_THROW(reference::forward_topk(s, *ws, in.x(), TensorView::contiguous(ids.data(), DType::i64, {3, 2}),
                                       TensorView::contiguous(w.data(), DType::f32, {3, 2})),
               InvalidArgument);
}

TEST(ReferenceLayer, ZeroAndOneToken) {
  const MoeSpec s = tiny(RoutingKind::Softmax, ActivationKind::SwiGLU, WeightFormat::BF16, false, 1);
  auto ws = make_synthetic_weights(s, 51);
  int calls = 0;
  EXPECT_TRUE(reference::forward(s, *ws, TensorView::contiguous(nullptr, DType::f32, {0, s.hidden}),
                                 TensorView::contiguous(nullptr, DType::f32, {0, s.num_experts}),
                                 {.progress = [&](int64_t, int64_t) { ++calls; }})
                  .empty());
  EXPECT_EQ(calls, 0);
  Inputs in = make_inputs(s, 1, DType::bf16, 52);
  const auto r = reference::route(s, in.logits.data(), 1, {});
  const auto got = reference::forward(s, *ws, in.x(), in.l(s.num_experts));
  EXPECT_LT(rel_err(got, naive_forward(s, *ws, in.xf, 1, r.ids, r.weights)), 1e-13);
}

TEST(ReferenceLayer, ProgressCountsExpertsFromOneThread) {
  const MoeSpec s = tiny(RoutingKind::Softmax, ActivationKind::SwiGLU, WeightFormat::BF16, false, 2);
  auto ws = make_synthetic_weights(s, 61);
  Inputs in = make_inputs(s, 2, DType::f32, 62);  // 2 tokens x k=2: at most 4 routed experts
  const auto r = reference::route(s, in.logits.data(), 2, {});
  std::set<int32_t> touched(r.ids.begin(), r.ids.end());
  std::vector<std::pair<int64_t, int64_t>> seen;
  const auto caller = std::this_thread::get_id();
  bool same_thread = true;
  reference::forward(s, *ws, in.x(), in.l(s.num_experts),
                     {.threads = 3, .progress = [&](int64_t d, int64_t t) {
                        seen.emplace_back(d, t);
                        same_thread &= std::this_thread::get_id() == caller;
                      }});
  const int64_t total = int64_t(touched.size()) + 2;
  ASSERT_EQ(int64_t(seen.size()), total);
  for (int64_t i = 0; i < total; ++i) EXPECT_EQ(seen[size_t(i)], std::make_pair(i + 1, total));
  EXPECT_TRUE(same_thread);
}

TEST(ReferenceLayer, RejectsBadArguments) {
  const MoeSpec s = tiny(RoutingKind::Softmax, ActivationKind::SwiGLU, WeightFormat::BF16, false, 0);
  auto ws = make_synthetic_weights(s, 71);
  Inputs in = make_inputs(s, 4, DType::f32, 72);
  auto bad_x = TensorView::contiguous(in.xf.data(), DType::f32, {4, 32});
  try {
    reference::forward(s, *ws, bad_x, in.l(s.num_experts));
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "x");
  }
  auto bad_l = TensorView::contiguous(in.logits.data(), DType::f32, {3, s.num_experts});
  EXPECT_THROW(reference::forward(s, *ws, in.x(), bad_l), InvalidArgument);
  reference::Routing r = reference::route(s, in.logits.data(), 4, {});
  r.ids[3] = 9;
  try {
    reference::forward_routed(s, *ws, in.x(), r);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "routing.ids");
  }
}

// Timing of the real Mistral-Small-4 shape (run with --gtest_also_run_disabled_tests).
TEST(ReferenceLayer, DISABLED_MistralSmall4Timing) {
  MoeSpec s = presets::get("mistral-small-4");
  auto ws = make_synthetic_weights(s, 1);
  for (int64_t T : {64}) {
    Inputs in = make_inputs(s, T, DType::bf16, 2);
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = reference::forward(s, *ws, in.x(), in.l(s.num_experts));
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("mistral-small-4 T=%lld bf16: %.2f s\n", (long long)T, sec);
    double sq = 0;
    for (double v : out) sq += v * v;
    EXPECT_TRUE(std::isfinite(sq));
  }
}

// Rows a check samples: all (empty) up to `want`, else `want` sorted, distinct rows from the
// first to the last, spread evenly.
TEST(ReferenceLayer, EvenRowsSpanTheBatch) {
  EXPECT_TRUE(reference::even_rows(37, 512).empty());
  EXPECT_TRUE(reference::even_rows(512, 512).empty());
  const std::vector<int64_t> r = reference::even_rows(6469, 512);
  ASSERT_EQ(r.size(), 512u);
  EXPECT_EQ(r.front(), 0);
  EXPECT_EQ(r.back(), 6468);
  for (size_t i = 1; i < r.size(); ++i) {
    EXPECT_GT(r[i], r[i - 1]);
    EXPECT_LE(r[i] - r[i - 1], 6468 / 511 + 1);
  }
  EXPECT_EQ(reference::even_rows(5, 2), (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(reference::even_rows(5, 1), (std::vector<int64_t>{0}));
}
