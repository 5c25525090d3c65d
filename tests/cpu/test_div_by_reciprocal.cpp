// common/div_by_reciprocal.cuh: x / b from a reciprocal computed once, against the division,
// over the operands the FP8 quantizers give it (b = a group's scale, amax / 448, at least
// 2^-60; |x| <= 448 b). The quotients must be the division's bit for bit wherever the
// quotient is a normal float, and the e4m3 codes everywhere.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

#include "common/div_by_reciprocal.cuh"
#include "moeforge/formats.hpp"

namespace {

namespace mf = moeforge::formats;

// Checks one operand pair; returns false (and says why) on the first difference.
::testing::AssertionResult same_as_division(float x, float b) {
  const float y = 1.0f / b;
  const float fast = moe_div::div_rn_by(x, b, y), exact = x / b;
  if (mf::float_to_e4m3(fast) != mf::float_to_e4m3(exact))
    return ::testing::AssertionFailure() << "e4m3 codes differ for x = " << std::hexfloat << x << ", b = " << b
                                         << ": " << fast << " vs " << exact;
  if (std::fabs(exact) >= 0x1p-126f && std::bit_cast<uint32_t>(fast) != std::bit_cast<uint32_t>(exact))
    return ::testing::AssertionFailure() << "quotients differ for x = " << std::hexfloat << x << ", b = " << b
                                         << ": " << fast << " vs " << exact;
  return ::testing::AssertionSuccess();
}

// A float with the given exponent and a random 23-bit mantissa.
float random_float(std::mt19937_64& rng, int exp) { return std::ldexp(1.0f + float(rng() >> 41) * 0x1p-23f, exp); }

TEST(DivByReciprocal, RandomOperandsMatchTheDivision) {
  std::mt19937_64 rng(20261203);
  std::uniform_int_distribution<int> exp_of_amax(-51, 127);  // any finite bf16 amax down to the guard
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto bf16 = [](float v) { return std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xFFFF0000u); };
  int64_t checked = 0;
  for (int i = 0; i < 4'000'000; ++i) {
    // As the quantizer has them: a group's amax (a bf16 value), its scale amax / 448, and x a
    // bf16 value of the group, from amax itself down to far below it.
    const float amax = bf16(random_float(rng, exp_of_amax(rng)));
    const float b = amax / 448.0f;
    if (!(b >= moe_div::kMinDivisor)) continue;
    const float x = i % 16 == 0 ? amax : bf16(unit(rng) * amax * std::ldexp(1.0f, -int(rng() % 40)));
    ASSERT_TRUE(same_as_division(x, b));
    ++checked;
  }
  EXPECT_GT(checked, 3'900'000);
}

// Ties: quotients at (or an ulp from) the midpoint of two neighbouring e4m3 values, where a
// quotient one ulp off would round to the other code. b with a short mantissa makes x = m b
// exact, so x / b is the midpoint itself.
TEST(DivByReciprocal, MidpointsOfE4m3CodesMatchTheDivision) {
  std::mt19937_64 rng(7);
  int64_t checked = 0;
  for (int code = 0; code < 0x7E; ++code) {
    const float lo = mf::e4m3_to_float(uint8_t(code)), hi = mf::e4m3_to_float(uint8_t(code + 1));
    const float mid = 0.5f * (lo + hi);
    for (int i = 0; i < 2000; ++i) {
      const int exp = int(rng() % 160) - 60;
      const float b = i % 2 ? std::ldexp(float(1 + rng() % 64), exp) : random_float(rng, exp);
      const float x0 = mid * b;  // exact for the short-mantissa b
      for (float x : {x0, std::nextafter(x0, 0.0f), std::nextafter(x0, INFINITY)})
        for (float s : {1.0f, -1.0f}) {
          ASSERT_TRUE(same_as_division(s * x, b));
          ++checked;
        }
    }
  }
  EXPECT_GT(checked, 1'000'000);
}

TEST(DivByReciprocal, ZerosKeepTheirSignAndTinyValuesGiveSignedZeroCodes) {
  for (float b : {0x1p-60f, 1.0f, 3.0f, 0x1.8p100f}) {
    EXPECT_EQ(std::bit_cast<uint32_t>(moe_div::div_rn_by(0.0f, b, 1.0f / b)), 0u);
    EXPECT_EQ(std::bit_cast<uint32_t>(moe_div::div_rn_by(-0.0f, b, 1.0f / b)), 0x80000000u);
    for (float x : {0x1p-149f, -0x1p-149f, 0x1.4p-130f, -0x1.4p-128f}) EXPECT_TRUE(same_as_division(x, b));
  }
}

}  // namespace
