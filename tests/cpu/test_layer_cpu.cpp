// MoeLayer on the "cpu" backend, the registry and `auto` on a machine whose GPU
// may be absent (CI has none: these tests assert what must hold either way).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "backends/backend.hpp"
#include "core/inputs.hpp"
#include "core/parallel.hpp"
#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "moeforge/layer.hpp"
#include "moeforge/reference.hpp"
#include "support/specs.hpp"
#include "runtime/driver.hpp"

using namespace moeforge;

namespace {
bool have_gpu() { return rt::driver_or_null() != nullptr; }
}  // namespace

TEST(LayerCpu, ForwardIsTheReferenceRoundedOnce) {
  const MoeSpec spec = moeforge::testing::tiny_layer_spec("small");
  std::shared_ptr<const WeightSource> w = make_synthetic_weights(spec, 5);
  HostInputs in = make_inputs(spec, 9, 17);
  const MoeLayer layer = MoeLayer::create(spec, w, {.backend = "cpu"});
  EXPECT_EQ(layer.backend_name(), "cpu");
  EXPECT_EQ(layer.device().kind, DeviceKind::CPU);
  std::vector<uint16_t> out(9 * 64, 0xFFFF);
  layer.forward(in.x_view(), in.logits_view(), TensorView::contiguous(out.data(), DType::bf16, {9, 64}));
  const std::vector<double> ref = reference::forward(spec, *w, in.x_view(), in.logits_view());
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(out[i], formats::float_to_bf16(float(ref[i]))) << "element " << i;
}

TEST(LayerCpu, PrecomputedRoutingMatchesLogits) {
  const MoeSpec spec = moeforge::testing::tiny_layer_spec("small");
  std::shared_ptr<const WeightSource> w = make_synthetic_weights(spec, 6);
  HostInputs in = make_inputs(spec, 5, 3);
  const MoeLayer layer = MoeLayer::create(spec, w, {.backend = "cpu"});
  const reference::Routing r = reference::route(spec, in.logits.data(), 5, w->correction_bias());
  std::vector<float> wts(r.weights.begin(), r.weights.end());
  std::vector<int32_t> ids = r.ids;
  std::vector<uint16_t> a(5 * 64), b(5 * 64);
  layer.forward(in.x_view(), in.logits_view(), TensorView::contiguous(a.data(), DType::bf16, {5, 64}));
  layer.forward_topk(in.x_view(), TensorView::contiguous(ids.data(), DType::i32, {5, 2}),
                     TensorView::contiguous(wts.data(), DType::f32, {5, 2}),
                     TensorView::contiguous(b.data(), DType::bf16, {5, 64}));
  // f32 routing weights vs double: allow one bf16 ulp.
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(formats::bf16_to_float(a[i]), formats::bf16_to_float(b[i]),
                std::fabs(formats::bf16_to_float(a[i])) * 0x1p-7 + 1e-6);
}

TEST(LayerCpu, WeightsForAnotherShapeAreRejected) {
  MoeSpec spec = moeforge::testing::tiny_layer_spec("small");
  std::shared_ptr<const WeightSource> w = make_synthetic_weights(spec, 1);
  spec.hidden = 128;
  try {
    MoeLayer::create(spec, w, {.backend = "cpu"});
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "weights");
    EXPECT_NE(std::string(e.what()).find("hidden"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MoeLayer::create(moeforge::testing::tiny_layer_spec("small"), nullptr, {.backend = "cpu"}), InvalidArgument);
}

TEST(Registry, UnknownBackendListsTheKnownOnes) {
  try {
    find_backend("tpu");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "backend");
    EXPECT_NE(std::string(e.what()).find("portable"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos);
  }
}

TEST(Registry, AutoWithoutGpuChoosesTheCpuAndSaysWhy) {
  if (have_gpu()) GTEST_SKIP() << "this machine has a CUDA driver";
  const BackendChoice c = choose_backend(moeforge::testing::tiny_layer_spec("small"), "auto", 0);
  ASSERT_NE(c.backend, nullptr);
  EXPECT_EQ(c.backend->name(), "cpu");
  EXPECT_NE(c.reason.find("no GPU backend"), std::string::npos) << c.reason;
  ASSERT_FALSE(c.rejected.empty());
  EXPECT_NE(c.rejected[0].find("no CUDA driver"), std::string::npos) << c.rejected[0];
}

TEST(Registry, ExplicitGpuBackendWithoutGpuIsAnErrorNotASubstitute) {
  if (have_gpu()) GTEST_SKIP() << "this machine has a CUDA driver";
  try {
    choose_backend(moeforge::testing::tiny_layer_spec("small"), "portable", 0);
    FAIL() << "expected Unsupported";
  } catch (const Unsupported& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'portable' cannot run here"), std::string::npos) << m;
    EXPECT_NE(m.find("backends that can: cpu"), std::string::npos) << m;
  }
}

TEST(Inputs, DeterministicAndNotDegenerate) {
  const MoeSpec spec = moeforge::testing::tiny_layer_spec("small");
  HostInputs a = make_inputs(spec, 16, 1), b = make_inputs(spec, 16, 1), c = make_inputs(spec, 16, 2);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_NE(a.x, c.x);
  double s = 0, s2 = 0;
  for (uint16_t v : a.x) {
    const double f = formats::bf16_to_float(v);
    s += f;
    s2 += f * f;
  }
  const double n = double(a.x.size()), mean = s / n, var = s2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.1);
  EXPECT_NEAR(var, 1.0, 0.15);
}

// Generated in threads, the values depend only on their index: a batch starts with the same
// rows as any smaller one, whether that was generated inline (a few tokens) or split across
// threads at other boundaries.
TEST(Inputs, ThreadedBatchesAgreeWithSmallOnes) {
  const MoeSpec spec = moeforge::testing::tiny_layer_spec("small");
  const HostInputs many = make_inputs(spec, 20000, 5);
  ASSERT_GT(many.x.size(), size_t(1) << 19);  // more than one thread's share
  for (int64_t T : {int64_t(3), int64_t(12345)}) {
    const HostInputs part = make_inputs(spec, T, 5);
    EXPECT_TRUE(std::equal(part.x.begin(), part.x.end(), many.x.begin())) << "T " << T;
    EXPECT_TRUE(std::equal(part.logits.begin(), part.logits.end(), many.logits.begin())) << "T " << T;
  }
}

// parallel_ranges covers [0, n) exactly once, in contiguous ranges, for any n and grain.
TEST(ParallelRanges, CoverEveryIndexOnce) {
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1000), int64_t(1) << 20, (int64_t(1) << 20) + 13})
    for (int64_t grain : {int64_t(1), int64_t(64), int64_t(1) << 16}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> reversed{0};  // counted in the workers, checked here (gtest asserts are not thread-safe)
      parallel_ranges(n, grain, [&](int64_t b, int64_t e) {
        reversed += b > e;
        for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
      });
      int64_t wrong = 0;
      for (const auto& h : hits) wrong += h.load() != 1;
      EXPECT_EQ(wrong, 0) << "n " << n << " grain " << grain;
      EXPECT_EQ(reversed.load(), 0);
    }
}
