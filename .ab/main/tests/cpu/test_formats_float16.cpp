// bf16 and f16: decode of all 65536 codes from the definition, and encode against an
// independent strategy over a large, structured part of the 2^32 float inputs.
//
// What the encode sweeps cover (the whole 2^32 space takes ~10 s of CPU here, too much
// for a suite run on every change; instead every input that can change a rounding
// decision is covered):
//   bf16 — (a) every sign, every exponent, every one of the 2^16 patterns of the bits that
//          are rounded away, with the kept mantissa's top bits 0x00, 0x01, 0x7E, 0x7F (LSB
//          0 and 1; 0x7F makes the carry run into the exponent and, at the top, into Inf);
//          (b) every one of the 2^16 kept patterns (all bf16 values) with 8 rounded-away
//          patterns around the tie (0, 1, 0x4000, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF).
//   f16  — (a) every sign and exponent with the low 16 mantissa bits exhaustive and the top
//          7 in {0x00, 0x01, 0x40, 0x7F} (normal results round away 13 bits: covered
//          exhaustively, with carry); (b) EVERY float in [2^-26, 2^-13), both signs: the
//          inputs whose f16 result is subnormal or the smallest normal, where the rounding
//          position moves with the exponent; (c) every float in [2^15, 2^16), where
//          results overflow to Inf.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "moeforge/formats.hpp"
#include "test_formats_reference.hpp"

namespace mf = moeforge::formats;

namespace {

// Runs ok(i) for i in [0, n) on two threads; returns the first i (by thread) that failed,
// or UINT64_MAX. The machine that runs the suite has 2 cores.
template <class F>
uint64_t parallel_find_failure(uint64_t n, F ok) {
  std::atomic<uint64_t> failure{UINT64_MAX};
  auto work = [&](uint64_t begin, uint64_t end) {
    for (uint64_t i = begin; i < end; ++i)
      if (!ok(i)) {
        uint64_t cur = failure.load();
        while (i < cur && !failure.compare_exchange_weak(cur, i)) {
        }
        return;
      }
  };
  std::thread t(work, 0, n / 2);
  work(n / 2, n);
  t.join();
  return failure.load();
}

double bf16_definition(uint16_t h) {
  const int e = (h >> 7) & 0xFF;
  const int m = h & 0x7F;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0xFF) return m == 0 ? s * INFINITY : NAN;
  if (e == 0) return s * std::ldexp(m, -133);  // subnormal: m * 2^(1-127-7)
  return s * std::ldexp(1.0 + m / 128.0, e - 127);
}

double f16_definition(uint16_t h) {
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  const double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 0x1F) return m == 0 ? s * INFINITY : NAN;
  if (e == 0) return s * std::ldexp(m, -24);
  return s * std::ldexp(1.0 + m / 1024.0, e - 15);
}

// bf16 by brute force on the two candidates: truncate toward zero (lo) or step one code up
// in magnitude (hi), whichever is nearer; a tie goes to the even code. The code above the
// largest finite (0x7F7F) is Inf, which IEEE rounding treats as the value 2^128.
bool bf16_matches(uint32_t u) {
  const float v = mfref::float_of(u);
  const uint16_t got = mf::float_to_bf16(v);
  if (std::isnan(v)) return std::isnan(mfref::float_of(static_cast<uint32_t>(got) << 16)) && ((got >> 15) == (u >> 31));
  const uint16_t lo = static_cast<uint16_t>(u >> 16);
  const uint16_t hi = static_cast<uint16_t>(lo + 1);
  const double a = std::fabs(static_cast<double>(v));
  // A bf16 code is, by definition, the top half of a binary32 (DecodeAllCodes checks the
  // ldexp form of that); reading the neighbours that way keeps this sweep fast.
  const double vlo = std::fabs(static_cast<double>(mfref::float_of(static_cast<uint32_t>(lo) << 16)));
  uint16_t want;
  if (a == vlo) {
    want = lo;
  } else {
    const double vhi = (hi & 0x7FFF) == 0x7F80 ? 0x1p128
                                                : std::fabs(static_cast<double>(mfref::float_of(static_cast<uint32_t>(hi) << 16)));
    const double mid = (vlo + vhi) / 2;  // 9 significant bits: exact
    want = a < mid ? lo : a > mid ? hi : ((lo & 1) ? hi : lo);
  }
  return got == want;
}

// The reference for float -> f16: the CPU's own F16C instruction (vcvtps2ph, round to
// nearest even) where the CPU has it, else the compiler's float -> _Float16 conversion
// (libgcc soft-fp; ~30x slower, so the sweeps then take every 16th input). Neither shares
// anything with our bit manipulation.
#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t f16_hardware(float v) {
  return static_cast<uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
}
bool have_f16c() { return __builtin_cpu_supports("f16c"); }
#else
uint16_t f16_hardware(float) { return 0; }
bool have_f16c() { return false; }
#endif

uint16_t f16_compiler(float v) {
#if defined(__FLT16_MAX__)
  return std::bit_cast<uint16_t>(static_cast<_Float16>(v));
#else
  (void)v;
  return 0;
#endif
}

template <uint16_t (*kRef)(float)>
bool f16_matches(uint32_t u) {
  const float v = mfref::float_of(u);
  const uint16_t got = mf::float_to_f16(v);
  if (std::isnan(v)) return std::isnan(f16_definition(got)) && ((got >> 15) == (u >> 31));
  return got == kRef(v);
}

}  // namespace

TEST(FormatsBf16, DecodeAllCodes) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = bf16_definition(static_cast<uint16_t>(h));
    const float got = mf::bf16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << h;
      ASSERT_EQ(std::signbit(got), (h >> 15) != 0) << h;
      ASSERT_EQ(mf::float_to_bf16(got), h) << "round trip " << h;  // every value is exact in float
    }
  }
}

TEST(FormatsBf16, EncodeSweep) {
  static const uint32_t kTop7[] = {0x00, 0x01, 0x7E, 0x7F};
  // (a): index = ((sign*256 + exponent)*4 + top7) * 65536 + low16
  const uint64_t na = 2ull * 256 * 4 * 65536;
  const uint64_t fa = parallel_find_failure(na, [](uint64_t i) {
    const uint32_t low = i & 0xFFFF;
    const uint32_t top = kTop7[(i >> 16) & 3];
    const uint32_t se = static_cast<uint32_t>(i >> 18);  // sign:exponent, 9 bits
    return bf16_matches(se << 23 | top << 16 | low);
  });
  EXPECT_EQ(fa, UINT64_MAX) << "first failing sweep (a) index " << fa;
  static const uint32_t kLow[] = {0x0000, 0x0001, 0x4000, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF};
  for (uint32_t h = 0; h < 65536; ++h)
    for (uint32_t low : kLow) ASSERT_TRUE(bf16_matches(h << 16 | low)) << std::hex << (h << 16 | low);
}

TEST(FormatsBf16, Specials) {
  EXPECT_EQ(mf::float_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(mf::float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(mf::float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(mf::float_to_bf16(INFINITY), 0x7F80);
  EXPECT_EQ(mf::float_to_bf16(-INFINITY), 0xFF80);
  EXPECT_EQ(mf::float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // IEEE overflow: Inf
  EXPECT_EQ(mf::float_to_bf16(mfref::float_of(0x3F808000)), 0x3F80);        // tie, even kept
  EXPECT_EQ(mf::float_to_bf16(mfref::float_of(0x3F818000)), 0x3F82);        // tie, odd rounds up
  EXPECT_EQ(mf::float_to_bf16(mfref::float_of(0x00000001)), 0x0000);        // float denorm_min
  // NaN with a payload only in the low bits must stay NaN (truncation alone would give Inf).
  const uint16_t n = mf::float_to_bf16(mfref::float_of(0x7F800001));
  EXPECT_TRUE(std::isnan(mf::bf16_to_float(n)));
  EXPECT_EQ(mf::float_to_bf16(mfref::float_of(0xFFC00000)) & 0x8000, 0x8000);
}

TEST(FormatsF16, DecodeAllCodes) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = f16_definition(static_cast<uint16_t>(h));
    const float got = mf::f16_to_float(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(static_cast<double>(got), want) << h;
      ASSERT_EQ(std::signbit(got), (h >> 15) != 0) << h;
      ASSERT_EQ(mf::float_to_f16(got), h) << "round trip " << h;
    }
  }
}

TEST(FormatsF16, EncodeSweep) {
  bool (*matches)(uint32_t) = nullptr;
  uint64_t stride = 1;
  if (have_f16c()) {
    matches = f16_matches<f16_hardware>;
  } else {
#if defined(__FLT16_MAX__)
    matches = f16_matches<f16_compiler>;
    stride = 16;
#else
    GTEST_SKIP() << "no F16C and no _Float16 to compare with";
#endif
  }
  static const uint32_t kTop7[] = {0x00, 0x01, 0x40, 0x7F};
  // (a): index = ((sign*256 + exponent)*4 + top7) * 65536 + low16
  const uint64_t na = 2ull * 256 * 4 * 65536 / stride;
  const uint64_t fa = parallel_find_failure(na, [&](uint64_t k) {
    const uint64_t i = k * stride;
    const uint32_t low = i & 0xFFFF;
    const uint32_t top = kTop7[(i >> 16) & 3];
    const uint32_t se = static_cast<uint32_t>(i >> 18);
    return matches(se << 23 | top << 16 | low);
  });
  EXPECT_EQ(fa, UINT64_MAX) << "first failing sweep (a) index " << fa * stride;
  // (b) every float with exponent field 101..113 ([2^-26, 2^-13)), both signs.
  const uint32_t b0 = 101u << 23, b1 = 114u << 23;
  const uint64_t fb = parallel_find_failure(2ull * (b1 - b0) / stride, [&](uint64_t k) {
    const uint64_t i = k * stride;
    return matches(static_cast<uint32_t>(i & 1) << 31 | (b0 + static_cast<uint32_t>(i >> 1)));
  });
  EXPECT_EQ(fb, UINT64_MAX) << "first failing sweep (b) index " << fb * stride;
  // (c) every float in [2^15, 2^16), both signs.
  const uint32_t c0 = 142u << 23, c1 = 143u << 23;
  const uint64_t fc = parallel_find_failure(2ull * (c1 - c0) / stride, [&](uint64_t k) {
    const uint64_t i = k * stride;
    return matches(static_cast<uint32_t>(i & 1) << 31 | (c0 + static_cast<uint32_t>(i >> 1)));
  });
  EXPECT_EQ(fc, UINT64_MAX) << "first failing sweep (c) index " << fc * stride;
  // The two references agree with each other on a sample (guards the reference itself).
#if defined(__FLT16_MAX__)
  if (have_f16c()) {
    for (uint64_t u = 0; u < (1ull << 32); u += 65521) {
      const float v = mfref::float_of(static_cast<uint32_t>(u));
      if (std::isnan(v)) continue;
      ASSERT_EQ(f16_hardware(v), f16_compiler(v)) << std::hexfloat << v;
    }
  }
#endif
}

TEST(FormatsF16, Specials) {
  EXPECT_EQ(mf::float_to_f16(0.0f), 0x0000);
  EXPECT_EQ(mf::float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(mf::float_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(mf::float_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(mf::float_to_f16(65519.996f), 0x7BFF);
  EXPECT_EQ(mf::float_to_f16(65520.0f), 0x7C00);  // tie with 2^16: to even, which is Inf
  EXPECT_EQ(mf::float_to_f16(1e10f), 0x7C00);
  EXPECT_EQ(mf::float_to_f16(-1e10f), 0xFC00);
  EXPECT_EQ(mf::float_to_f16(INFINITY), 0x7C00);
  EXPECT_EQ(mf::float_to_f16(0x1p-24f), 0x0001);   // smallest subnormal
  EXPECT_EQ(mf::float_to_f16(0x1p-25f), 0x0000);   // tie with 0: even
  EXPECT_EQ(mf::float_to_f16(0x1.8p-24f), 0x0002); // tie 1|2: even
  EXPECT_EQ(mf::float_to_f16(0x1p-14f), 0x0400);   // smallest normal
  EXPECT_EQ(mf::float_to_f16(-0x1p-30f), 0x8000);
  EXPECT_TRUE(std::isnan(mf::f16_to_float(mf::float_to_f16(NAN))));
  EXPECT_TRUE(std::isnan(mf::f16_to_float(mf::float_to_f16(mfref::float_of(0x7F800001)))));
  EXPECT_EQ(mf::f16_to_float(0x7C00), INFINITY);
}
