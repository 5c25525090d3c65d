// Gated activations of the CPU reference at hand-computed points.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "moeforge/reference.hpp"

using namespace moeforge;
using reference::activate;

namespace {
const ActivationSpec kSwiGLU{.kind = ActivationKind::SwiGLU};
const ActivationSpec kGeGLU{.kind = ActivationKind::GeGLU};
const ActivationSpec kClamped{.kind = ActivationKind::ClampedSwiGLU, .alpha = 1.702, .limit = 7.0};
}  // namespace

TEST(ActivationSwiGLU, HandComputedPoints) {
  // silu(1) = 1 / (1 + e^-1) = 0.7310585786300049
  EXPECT_NEAR(activate(kSwiGLU, 1.0, 2.0), 2 * 0.7310585786300049, 1e-15);
  EXPECT_NEAR(activate(kSwiGLU, -1.0, 1.0), -0.2689414213699951, 1e-15);
  EXPECT_EQ(activate(kSwiGLU, 0.0, 5.0), 0.0);
  EXPECT_EQ(activate(kSwiGLU, 3.0, 0.0), 0.0);
  // Gate and up are not interchangeable: silu(2) * 1 != silu(1) * 2.
  EXPECT_NEAR(activate(kSwiGLU, 2.0, 1.0), 1.7615941559557646, 1e-15);
  // Large magnitudes do not overflow.
  EXPECT_NEAR(activate(kSwiGLU, 800.0, 1.0), 800.0, 1e-12);
  EXPECT_EQ(activate(kSwiGLU, -800.0, 1.0), -0.0);
}

TEST(ActivationGeGLU, HandComputedPointsTanhApproximation) {
  // gelu_tanh(1) = 0.5 (1 + tanh(sqrt(2/pi) (1 + 0.044715)))
  EXPECT_NEAR(activate(kGeGLU, 1.0, 1.0), 0.8411919906082768, 1e-15);
  EXPECT_NEAR(activate(kGeGLU, 1.0, 2.0), 2 * 0.8411919906082768, 1e-15);
  EXPECT_NEAR(activate(kGeGLU, 2.0, 1.0), 1.954597694087775, 1e-15);
  EXPECT_NEAR(activate(kGeGLU, -1.0, 1.0), -0.15880800939172324, 1e-15);
  EXPECT_EQ(activate(kGeGLU, 0.0, 3.0), 0.0);
  // The exact (erf) GELU differs at 1: 0.8413447460685429.
  EXPECT_GT(std::abs(activate(kGeGLU, 1.0, 1.0) - 0.8413447460685429), 1e-4);
}

TEST(ActivationClampedSwiGLU, HandComputedPoints) {
  const double s = 1.0 / (1.0 + std::exp(-1.702));  // sigmoid(alpha * 1)
  EXPECT_NEAR(activate(kClamped, 1.0, 1.0), 2.0 * 1.0 * s, 1e-15);  // (u + 1) * g * sigmoid(alpha g)
  EXPECT_NEAR(activate(kClamped, 1.0, -1.0), 0.0, 1e-15);           // the +1 on up
  EXPECT_NEAR(activate(kClamped, 1.0, 0.0), s, 1e-15);
  EXPECT_NEAR(activate(kClamped, -2.0, 3.0), 4.0 * -2.0 / (1.0 + std::exp(2 * 1.702)), 1e-15);
}

TEST(ActivationClampedSwiGLU, ClampBoundaries) {
  const double s7 = 1.0 / (1.0 + std::exp(-1.702 * 7.0));
  // Gate clamped from above only.
  EXPECT_NEAR(activate(kClamped, 7.0, 0.0), 7.0 * s7, 1e-14);
  EXPECT_EQ(activate(kClamped, 7.5, 0.0), activate(kClamped, 7.0, 0.0));
  EXPECT_EQ(activate(kClamped, 1e9, 0.0), activate(kClamped, 7.0, 0.0));
  EXPECT_NE(activate(kClamped, 6.999, 0.0), activate(kClamped, 7.0, 0.0));
  const double g = -20.0;
  EXPECT_NEAR(activate(kClamped, g, 0.0), g / (1.0 + std::exp(1.702 * 20.0)), 1e-25);
  EXPECT_NE(activate(kClamped, -8.0, 0.0), activate(kClamped, -7.0, 0.0));
  // Up clamped on both sides.
  EXPECT_NEAR(activate(kClamped, 1.0, 7.0), 8.0 * 1.0 / (1.0 + std::exp(-1.702)), 1e-14);
  EXPECT_EQ(activate(kClamped, 1.0, 9.0), activate(kClamped, 1.0, 7.0));
  EXPECT_EQ(activate(kClamped, 1.0, -9.0), activate(kClamped, 1.0, -7.0));
  EXPECT_NEAR(activate(kClamped, 1.0, -7.0), -6.0 / (1.0 + std::exp(-1.702)), 1e-14);
  EXPECT_NE(activate(kClamped, 1.0, 6.999), activate(kClamped, 1.0, 7.0));
  // Limit and alpha are honoured.
  ActivationSpec other = kClamped;
  other.limit = 3.0;
  other.alpha = 1.0;
  EXPECT_NEAR(activate(other, 5.0, 5.0), 4.0 * 3.0 / (1.0 + std::exp(-3.0)), 1e-14);
}

TEST(ActivationNaN, Propagates) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const auto& a : {kSwiGLU, kGeGLU, kClamped}) {
    EXPECT_TRUE(std::isnan(activate(a, nan, 1.0)));
    EXPECT_TRUE(std::isnan(activate(a, 1.0, nan)));
  }
}
