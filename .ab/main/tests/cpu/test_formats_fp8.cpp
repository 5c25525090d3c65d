// Exhaustive tests of the E4M3, E5M2, E2M1 and UE8M0 scalar conversions against the
// independent oracle in test_formats_reference.hpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "moeforge/formats.hpp"
#include "test_formats_reference.hpp"

namespace mf = moeforge::formats;

namespace {

struct Case {
  const char* name;
  mfref::MiniFormat fmt;
  std::function<uint8_t(float)> encode;
  std::function<float(uint8_t)> decode;
  unsigned (*nan_code)(float);
};

const Case kCases[] = {
    {"e4m3", mfref::kE4M3, mf::float_to_e4m3, mf::e4m3_to_float, mfref::e4m3_nan},
    {"e5m2", mfref::kE5M2, mf::float_to_e5m2, mf::e5m2_to_float, mfref::e5m2_nan},
    {"e2m1", mfref::kE2M1, mf::float_to_e2m1, mf::e2m1_to_float, mfref::e2m1_nan},
};

// Decoded value matches the definition bit for bit; NaN codes decode to NaN with the code's sign.
void check_decode_all(const Case& c) {
  const unsigned ncodes = 1u << c.fmt.bits();
  for (unsigned code = 0; code < ncodes; ++code) {
    const double want = mfref::decode(c.fmt, code);
    const float got = c.decode(static_cast<uint8_t>(code));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << c.name << " code " << code;
    } else {
      EXPECT_EQ(static_cast<double>(got), want) << c.name << " code 0x" << std::hex << code;
    }
    EXPECT_EQ(std::signbit(got), (code & c.fmt.sign_bit()) != 0) << c.name << " code " << code;
  }
}

void check_encode(const Case& c, const std::vector<double>& mags, float v) {
  const unsigned want = mfref::encode(c.fmt, mags, v, c.nan_code(v));
  const unsigned got = c.encode(v);
  ASSERT_EQ(got, want) << c.name << " encode(" << std::hexfloat << v << " = bits 0x" << std::hex << mfref::bits_of(v)
                       << ")";
}

// Every bf16 bit pattern as a float input: all exponents, both signs, ±0, float
// subnormals, ±Inf and NaNs, at the resolution of 8 mantissa bits.
void check_encode_bf16_patterns(const Case& c) {
  const auto mags = mfref::finite_magnitudes(c.fmt);
  for (uint32_t h = 0; h < 65536; ++h) check_encode(c, mags, mfref::float_of(h << 16));
}

// Every midpoint between adjacent representable magnitudes (including 0 | smallest
// subnormal and max | the value one step above max, where saturation takes over), and
// one float ulp either side, both signs. These are the inputs where a rounding mistake
// (ties away, truncation, off-by-one in the subnormal shift) shows up.
void check_encode_midpoints(const Case& c) {
  const auto mags = mfref::finite_magnitudes(c.fmt);
  std::vector<double> points;
  for (size_t k = 0; k + 1 < mags.size(); ++k) points.push_back((mags[k] + mags[k + 1]) / 2.0);
  // Above max: the next value the exponent would give (for E4M3, 480 where 0x7F sits).
  const double top_step = mags.back() - mags[mags.size() - 2];
  points.push_back(mags.back() + top_step / 2.0);
  points.push_back(mags.back() + top_step);
  points.push_back(mags.back() * 4);
  for (double m : mags) points.push_back(m);  // representable values themselves
  for (double p : points) {
    const float mid = static_cast<float>(p);
    ASSERT_EQ(static_cast<double>(mid), p) << "midpoint not exact in float";
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, std::numeric_limits<float>::infinity())}) {
      check_encode(c, mags, v);
      check_encode(c, mags, -v);
    }
  }
}

}  // namespace

TEST(FormatsMinifloat, DecodeAllCodes) {
  for (const auto& c : kCases) check_decode_all(c);
}

TEST(FormatsMinifloat, EncodeAllBf16Patterns) {
  for (const auto& c : kCases) check_encode_bf16_patterns(c);
}

TEST(FormatsMinifloat, EncodeMidpointsAndNeighbours) {
  for (const auto& c : kCases) check_encode_midpoints(c);
}

// Spot values spelled out by hand, so that a wrong oracle cannot hide a wrong encoder.
TEST(FormatsE4M3, Specials) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(mf::float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(mf::float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(mf::float_to_e4m3(nan), 0x7F);
  EXPECT_EQ(mf::float_to_e4m3(-nan), 0xFF);
  EXPECT_EQ(mf::float_to_e4m3(inf), 0x7E);  // saturating: no Inf in E4M3
  EXPECT_EQ(mf::float_to_e4m3(-inf), 0xFE);
  EXPECT_EQ(mf::float_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(mf::float_to_e4m3(463.9f), 0x7E);
  EXPECT_EQ(mf::float_to_e4m3(464.0f), 0x7E);  // would round to 0x7F (NaN) unsaturated
  EXPECT_EQ(mf::float_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(mf::float_to_e4m3(-1e30f), 0xFE);
  EXPECT_EQ(mf::float_to_e4m3(1.0f), 0x38);
  EXPECT_EQ(mf::float_to_e4m3(0x1p-9f), 0x01);           // smallest subnormal
  EXPECT_EQ(mf::float_to_e4m3(0x1p-10f), 0x00);          // tie between 0 and 2^-9: even (0)
  EXPECT_EQ(mf::float_to_e4m3(0x1.000002p-10f), 0x01);   // just above the tie
  EXPECT_EQ(mf::float_to_e4m3(0x3p-10f), 0x02);          // tie 1|2 (x 2^-9): even (2)
  EXPECT_EQ(mf::float_to_e4m3(0x7.8p-9f), 0x08);         // 7.5 x 2^-9 rounds up into the smallest normal 2^-6
  EXPECT_EQ(mf::float_to_e4m3(-0x1p-12f), 0x80);         // underflow keeps the sign
  EXPECT_EQ(mf::float_to_e4m3(1.0625f), 0x38);           // tie 1 | 1.125: even mantissa
  EXPECT_EQ(mf::float_to_e4m3(1.1875f), 0x3A);           // tie 1.125 | 1.25: even mantissa (1.25)
  EXPECT_EQ(mf::e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(mf::e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_TRUE(std::isnan(mf::e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(mf::e4m3_to_float(0xFF)));
}

TEST(FormatsE5M2, Specials) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(mf::float_to_e5m2(0.0f), 0x00);
  EXPECT_EQ(mf::float_to_e5m2(-0.0f), 0x80);
  EXPECT_EQ(mf::float_to_e5m2(nan), 0x7F);
  EXPECT_EQ(mf::float_to_e5m2(-nan), 0xFF);
  EXPECT_EQ(mf::float_to_e5m2(inf), 0x7B);
  EXPECT_EQ(mf::float_to_e5m2(-inf), 0xFB);
  EXPECT_EQ(mf::float_to_e5m2(57344.0f), 0x7B);
  EXPECT_EQ(mf::float_to_e5m2(61440.0f), 0x7B);  // the tie with the Inf code: saturates
  EXPECT_EQ(mf::float_to_e5m2(1.0f), 0x3C);
  EXPECT_EQ(mf::float_to_e5m2(0x1p-16f), 0x01);
  EXPECT_EQ(mf::float_to_e5m2(0x1p-17f), 0x00);
  EXPECT_EQ(mf::e5m2_to_float(0x7C), inf);
  EXPECT_EQ(mf::e5m2_to_float(0xFC), -inf);
  for (uint8_t c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(std::isnan(mf::e5m2_to_float(c)));
}

TEST(FormatsE2M1, Specials) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float values[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(mf::e2m1_to_float(c), (c & 8 ? -1 : 1) * values[c & 7]);
  EXPECT_EQ(mf::e2m1_to_float(0xF3), 1.5f);  // only the low 4 bits are used
  EXPECT_EQ(mf::float_to_e2m1(0.0f), 0x0);
  EXPECT_EQ(mf::float_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(mf::float_to_e2m1(nan), 0x0);
  EXPECT_EQ(mf::float_to_e2m1(-nan), 0x0);
  EXPECT_EQ(mf::float_to_e2m1(inf), 0x7);
  EXPECT_EQ(mf::float_to_e2m1(-inf), 0xF);
  EXPECT_EQ(mf::float_to_e2m1(7.0f), 0x7);
  EXPECT_EQ(mf::float_to_e2m1(-100.0f), 0xF);
  EXPECT_EQ(mf::float_to_e2m1(0.25f), 0x0);   // tie 0 | 0.5 -> 0 (even)
  EXPECT_EQ(mf::float_to_e2m1(0.75f), 0x2);   // tie 0.5 | 1 -> 1 (even code 2)
  EXPECT_EQ(mf::float_to_e2m1(1.25f), 0x2);   // tie 1 | 1.5 -> 1
  EXPECT_EQ(mf::float_to_e2m1(1.75f), 0x4);   // tie 1.5 | 2 -> 2
  EXPECT_EQ(mf::float_to_e2m1(2.5f), 0x4);    // tie 2 | 3 -> 2
  EXPECT_EQ(mf::float_to_e2m1(3.5f), 0x6);    // tie 3 | 4 -> 4
  EXPECT_EQ(mf::float_to_e2m1(5.0f), 0x6);    // tie 4 | 6 -> 4
  EXPECT_EQ(mf::float_to_e2m1(5.0001f), 0x7);
  EXPECT_EQ(mf::float_to_e2m1(-0.1f), 0x8);   // rounds to zero, keeps the sign
}

// UE8M0: every code against 2^(code - 127); ceil-encoding of every power of two and of
// its float neighbours, of every bf16 pattern against a table scan, and the edge rules.
TEST(FormatsUE8M0, AllCodes) {
  for (unsigned c = 0; c < 256; ++c) {
    const float got = mf::ue8m0_to_float(static_cast<uint8_t>(c));
    if (c == 0xFF) {
      EXPECT_TRUE(std::isnan(got));
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), std::ldexp(1.0, static_cast<int>(c) - 127)) << c;
    EXPECT_EQ(mf::float_to_ue8m0_ceil(got), c) << c;
    const float above = std::nextafter(got, std::numeric_limits<float>::infinity());
    EXPECT_EQ(mf::float_to_ue8m0_ceil(above), std::min(c + 1, 0xFEu)) << c;
    if (c > 0) {
      const float below = std::nextafter(got, 0.0f);
      EXPECT_EQ(mf::float_to_ue8m0_ceil(below), c) << c;
    }
  }
}

TEST(FormatsUE8M0, CeilAllBf16Patterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float v = mfref::float_of(h << 16);
    unsigned want;
    if (std::isnan(v)) {
      want = 0xFF;
    } else if (!(v > 0)) {
      want = 0x00;  // documented: v <= 0 gives the smallest scale
    } else {
      want = 0xFE;  // clamp: nothing representable is >= v
      for (unsigned c = 0; c < 255; ++c)
        if (std::ldexp(1.0, static_cast<int>(c) - 127) >= v) {
          want = c;
          break;
        }
    }
    ASSERT_EQ(mf::float_to_ue8m0_ceil(v), want) << std::hexfloat << v;
  }
}

TEST(FormatsUE8M0, Specials) {
  EXPECT_EQ(mf::float_to_ue8m0_ceil(std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(mf::float_to_ue8m0_ceil(std::numeric_limits<float>::infinity()), 0xFE);
  EXPECT_EQ(mf::float_to_ue8m0_ceil(-std::numeric_limits<float>::infinity()), 0x00);
  EXPECT_EQ(mf::float_to_ue8m0_ceil(0.0f), 0x00);
  EXPECT_EQ(mf::float_to_ue8m0_ceil(-3.0f), 0x00);
  EXPECT_EQ(mf::float_to_ue8m0_ceil(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(mf::float_to_ue8m0_ceil(1.0f), 127);
  EXPECT_EQ(mf::float_to_ue8m0_ceil(1.5f), 128);
  EXPECT_EQ(mf::float_to_ue8m0_ceil(0.75f), 127);
  EXPECT_EQ(mf::float_to_ue8m0_ceil(3e38f), 0xFE);
  EXPECT_EQ(mf::ue8m0_to_float(0), 0x1p-127f);
}
