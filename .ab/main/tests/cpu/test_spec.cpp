#include <gtest/gtest.h>

#include "moeforge/errors.hpp"
#include "moeforge/spec.hpp"

using namespace moeforge;

TEST(Presets, RealShapes) {
  auto m = presets::get("mistral-small-4");
  EXPECT_EQ(m.num_experts, 128);
  EXPECT_EQ(m.hidden, 4096);
  EXPECT_EQ(m.intermediate, 2048);
  EXPECT_EQ(m.topk, 4);
  EXPECT_EQ(m.num_shared_experts, 1);
  EXPECT_EQ(m.shared_intermediate, 2048);
  EXPECT_TRUE(m.routing.renormalize);
  auto d = presets::get("deepseek-v3");
  EXPECT_EQ(d.num_experts, 256);
  EXPECT_EQ(d.hidden, 7168);
  EXPECT_EQ(d.topk, 8);
  EXPECT_EQ(d.routing.kind, RoutingKind::SigmoidBiasGrouped);
  EXPECT_EQ(d.routing.n_groups, 8);
  EXPECT_EQ(d.routing.topk_groups, 4);
  EXPECT_DOUBLE_EQ(d.routing.scaling_factor, 2.5);
  auto q = presets::get("qwen3-30b-a3b");
  EXPECT_EQ(q.hidden, 2048);
  EXPECT_EQ(q.intermediate, 768);
  EXPECT_EQ(q.topk, 8);
  auto x = presets::get("mixtral-8x7b");
  EXPECT_EQ(x.num_experts, 8);
  EXPECT_EQ(x.intermediate, 14336);
  EXPECT_EQ(x.topk, 2);
  auto g = presets::get("gpt-oss-120b");
  EXPECT_EQ(g.hidden, 2880);
  EXPECT_EQ(g.activation.kind, ActivationKind::ClampedSwiGLU);
  EXPECT_TRUE(g.expert_bias);
  for (const auto& n : presets::names()) EXPECT_NO_THROW(presets::get(n).validate()) << n;
}

TEST(Presets, UnknownNameIsAnError) {
  try {
    presets::get("llama");
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.argument(), "model");
    EXPECT_NE(std::string(e.what()).find("mistral-small-4"), std::string::npos);
  }
}
