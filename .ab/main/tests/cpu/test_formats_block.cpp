// Block-scaled formats (NVFP4, MXFP4, FP8 block128 / group128): every byte against an
// independent re-computation from the header's formulas (using the brute-force encoders
// of test_formats_reference.hpp), error bounds derived from the formats, structural
// properties of the chosen scales, and the edge cases (zeros, outliers, NaN/Inf, packing).
//
// Notation: u = 2^-24 (float unit roundoff). h_F(a) = half the gap between the two
// representable magnitudes of format F around a (0 if a is representable), or a - max_F
// above the largest value (the saturation error). For E2M1: h = 0.25 on [0,2], 0.5 on
// [2,4], 1 on [4,6]. For E4M3: h = 2^-10 below 2^-6 (subnormal spacing 2^-9), and
// h(a) <= 2^-4 * a above (3 mantissa bits: half an ulp is at most 2^-4 of the value).
//
// NVFP4 bound. G = global, S = E4M3 block scale, D = fl(S*G), y = fl(x/D), c = RNE(y),
// deq = e2m1(c)*S*G (the free function rounds it once more to float).
//   |x - deq| <= |x - y*D| + D*|y - e2m1(c)| + |e2m1(c)|*|D - S*G| + |deq - fl(deq)|
//             <= |x|*u + D*h(|y|) + 6*S*G*u + |deq|*u.
// With S in E4M3's normal range, |S - t| <= 2^-4 * t for t = (bamax/6)/G, so
// bamax/(S*G) lies in [6/(1+2^-4), 6/(1-2^-4)] = [5.65, 6.4] (up to a few u): the block's
// largest element always rounds to E2M1 6 (> 5, the 4|6 midpoint), clipping costs at most
// 0.4*S*G, and every element's error is at most S*G*h(|y|) <= S*G <= bamax*(1+2^-4)/6
// (~0.177 * bamax), and 0.25*S*G for the elements with |y| < 2.
//
// MXFP4 bound. X = 2^(floor(log2 bamax) - 2) is a power of two, so y = x/X and deq = e2m1*X
// are exact: |x - deq| = X * h(|y|) exactly, with bamax/X in [4, 8). Above 6 the E2M1 grid
// ends, so the worst case is the clip, |x - deq| < 2X <= bamax/2; elements with |y| <= 6
// are within X (and within X/4 for |y| <= 2).
//
// FP8 bound. s = fl(bamax/448), y = fl(x/s), q = RNE_E4M3(y) (saturating), deq = e4m3(q)*s.
//   |x - deq| <= |x|*u + s*h(|y|) + |deq|*u <= 2^-4*|x| + s*2^-10 + 2u*(|x| + |deq|),
// i.e. 2^-4 relative per element plus an absolute floor of bamax * 2^-10 / 448 for the
// elements that land in E4M3's subnormal range (|y| < 2^-6); bamax/s <= 448*(1+u), so
// nothing but the block's largest element can touch saturation, and it rounds to 448.
//
// Why these tests can fail (mutations considered; each is caught by the named check):
//  - global = amax/(448*4): the exact-global check and "the amax block's scale is 448"
//    (it would get e4m3(298.7) = 288); the bound alone would NOT catch it (scales are
//    relative), which is why both structural checks exist.
//  - block scale from bamax/4 instead of /6: the scale-bracket check (bamax/(S*G) ~ 4).
//  - truncating instead of RNE in E2M1/E4M3: the per-element h bound and the byte compare.
//  - MXFP4 with emax 1 or 3, or a ceil-based scale: the bamax/X in [4, 8) check.
//  - FP8 scale bamax/240: the exact-scale check and "largest element encodes as 448".
//  - swapped nibbles (consistently in pack and unpack): the hand-built packing tests.
//  - dequant forgetting the global scale: the round-trip bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "moeforge/errors.hpp"
#include "moeforge/formats.hpp"
#include "test_formats_reference.hpp"

namespace mf = moeforge::formats;

namespace {

constexpr double kU = 0x1p-24;

const std::vector<double>& e4m3_mags() {
  static const std::vector<double> t = mfref::finite_magnitudes(mfref::kE4M3);
  return t;
}
const std::vector<double>& e2m1_mags() {
  static const std::vector<double> t = mfref::finite_magnitudes(mfref::kE2M1);
  return t;
}
uint8_t ref_e4m3(float v) { return static_cast<uint8_t>(mfref::encode(mfref::kE4M3, e4m3_mags(), v, mfref::e4m3_nan(v))); }
uint8_t ref_e2m1(float v) { return static_cast<uint8_t>(mfref::encode(mfref::kE2M1, e2m1_mags(), v, 0)); }
float ref_e4m3_value(uint8_t c) { return static_cast<float>(mfref::decode(mfref::kE4M3, c)); }
float ref_e2m1_value(uint8_t c) { return static_cast<float>(mfref::decode(mfref::kE2M1, c & 0xF)); }

// Weights-like data: per-row scale spread over 2^-8..2^4, normal values, a few outliers.
std::vector<float> random_matrix(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-8.0f, 4.0f);
  std::uniform_int_distribution<int> pick(0, 199);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float row_scale = std::exp2(uni(rng));
    for (int64_t c = 0; c < cols; ++c) {
      float v = normal(rng) * row_scale;
      if (pick(rng) == 0) v *= 40.0f;  // outlier
      x[r * cols + c] = v;
    }
  }
  return x;
}

float finite_amax(const float* x, int64_t n) {
  float a = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    if (std::isfinite(x[i])) a = std::max(a, std::fabs(x[i]));
  return a;
}
bool all_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

uint8_t nibble(const std::vector<uint8_t>& packed, int64_t i) { return (packed[i / 2] >> (4 * (i % 2))) & 0xF; }

// ---------------- NVFP4 ----------------

struct Nvfp4 {
  std::vector<uint8_t> packed, scales;
  float global = 0;
};

Nvfp4 run_nvfp4(const std::vector<float>& x, int64_t rows, int64_t cols) {
  Nvfp4 q;
  q.packed.assign(rows * cols / 2, 0xAA);  // poison: every byte must be written
  q.scales.assign(rows * cols / 16, 0xAA);
  mf::quantize_nvfp4(x.data(), rows, cols, q.packed.data(), q.scales.data(), &q.global);
  return q;
}

// The header's formulas, step by step, with the brute-force encoders.
Nvfp4 ref_nvfp4(const std::vector<float>& x, int64_t rows, int64_t cols) {
  Nvfp4 q;
  q.packed.assign(rows * cols / 2, 0);
  q.scales.assign(rows * cols / 16, 0);
  const float amax = finite_amax(x.data(), rows * cols);
  q.global = amax / (448.0f * 6.0f);
  if (!(q.global > 0)) q.global = 1.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 16; ++b) {
      const float* xb = &x[r * cols + b * 16];
      uint8_t& s = q.scales[r * (cols / 16) + b];
      if (!all_finite(xb, 16)) {
        s = 0x7F;
        continue;
      }
      s = ref_e4m3((finite_amax(xb, 16) / 6.0f) / q.global);
      const float d = ref_e4m3_value(s) * q.global;
      for (int i = 0; i < 16; ++i) {
        const uint8_t c = d > 0 ? ref_e2m1(xb[i] / d) : 0;
        const int64_t e = r * cols + b * 16 + i;
        q.packed[e / 2] |= static_cast<uint8_t>(c << (4 * (e % 2)));
      }
    }
  return q;
}

void check_nvfp4(const std::vector<float>& x, int64_t rows, int64_t cols, const char* what) {
  SCOPED_TRACE(what);
  const Nvfp4 got = run_nvfp4(x, rows, cols);
  const Nvfp4 want = ref_nvfp4(x, rows, cols);
  ASSERT_EQ(got.global, want.global);
  ASSERT_EQ(got.scales, want.scales);
  ASSERT_EQ(got.packed, want.packed);

  std::vector<float> deq(rows * cols, NAN);
  mf::dequantize_nvfp4(got.packed.data(), got.scales.data(), got.global, rows, cols, deq.data());
  const float amax = finite_amax(x.data(), rows * cols);
  bool saw_amax_block = amax == 0;
  const double G = got.global;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 16; ++b) {
      const float* xb = &x[r * cols + b * 16];
      const uint8_t sc = got.scales[r * (cols / 16) + b];
      const double S = mfref::decode(mfref::kE4M3, sc);
      if (!all_finite(xb, 16)) {  // documented: the whole block reads back as NaN
        for (int i = 0; i < 16; ++i) EXPECT_TRUE(std::isnan(deq[r * cols + b * 16 + i]));
        continue;
      }
      const float bamax = finite_amax(xb, 16);
      if (bamax == amax && amax > 0) {
        EXPECT_EQ(sc, 0x7E) << "the block holding the global amax must use E4M3's full range";
        saw_amax_block = true;
      }
      // The 2^-4 relative bound on S holds when its target t is in E4M3's normal range
      // (a t just below 2^-6 that rounds up to 2^-6 is off by up to 1/15).
      const float t = (bamax / 6.0f) / got.global;
      const bool normal_scale = t >= 0x1p-6f;
      if (normal_scale) {
        const double ratio = bamax / (S * G);
        EXPECT_GE(ratio, 6.0 / (1 + 0x1p-4) * (1 - 16 * kU)) << "row " << r << " block " << b;
        EXPECT_LE(ratio, 6.0 / (1 - 0x1p-4) * (1 + 16 * kU)) << "row " << r << " block " << b;
      }
      const float d = static_cast<float>(S) * got.global;
      for (int i = 0; i < 16; ++i) {
        const int64_t e = r * cols + b * 16 + i;
        const double xe = xb[i], de = deq[e];
        ASSERT_TRUE(std::isfinite(de));
        // d == 0: the block is below E4M3's range relative to the global scale and reads as 0.
        double bound = std::fabs(xe);
        if (d > 0) {
          const double y = xb[i] / d;
          bound = d * mfref::half_gap(e2m1_mags(), std::fabs(y)) + kU * (std::fabs(xe) + 6 * S * G + std::fabs(de));
        }
        ASSERT_LE(std::fabs(xe - de), bound) << "row " << r << " col " << b * 16 + i << " x=" << xe << " deq=" << de;
        if (normal_scale) {
          ASSERT_LE(std::fabs(xe - de), bamax * (1 + 0x1p-4) / 6 * (1 + 64 * kU));
        }
        if (normal_scale && std::fabs(xe) == bamax && bamax > 0) {
          EXPECT_EQ(std::fabs(ref_e2m1_value(nibble(got.packed, e))), 6.0f) << "block max must hit E2M1's 6";
        }
      }
    }
  EXPECT_TRUE(saw_amax_block);
}

// ---------------- MXFP4 ----------------

struct Mxfp4 {
  std::vector<uint8_t> packed, scales;
};

Mxfp4 run_mxfp4(const std::vector<float>& x, int64_t rows, int64_t cols) {
  Mxfp4 q;
  q.packed.assign(rows * cols / 2, 0xAA);
  q.scales.assign(rows * cols / 32, 0xAA);
  mf::quantize_mxfp4(x.data(), rows, cols, q.packed.data(), q.scales.data());
  return q;
}

Mxfp4 ref_mxfp4(const std::vector<float>& x, int64_t rows, int64_t cols) {
  Mxfp4 q;
  q.packed.assign(rows * cols / 2, 0);
  q.scales.assign(rows * cols / 32, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) {
      const float* xb = &x[r * cols + b * 32];
      uint8_t& s = q.scales[r * (cols / 32) + b];
      if (!all_finite(xb, 32)) {
        s = 0xFF;
        continue;
      }
      const float bamax = finite_amax(xb, 32);
      // OCP MX v1.0: shared exponent floor(log2(amax)) - emax_elem, emax_elem(E2M1) = 2.
      int e = 0;
      if (bamax > 0) {
        std::frexp(bamax, &e);  // bamax = f * 2^e, f in [0.5, 1): floor(log2) = e - 1
        e = std::max(e - 1 - 2, -127);
      }
      s = static_cast<uint8_t>(e + 127);
      const double X = std::ldexp(1.0, e);
      for (int i = 0; i < 32; ++i) {
        const uint8_t c = ref_e2m1(static_cast<float>(xb[i] / X));  // exact division
        const int64_t el = r * cols + b * 32 + i;
        q.packed[el / 2] |= static_cast<uint8_t>(c << (4 * (el % 2)));
      }
    }
  return q;
}

void check_mxfp4(const std::vector<float>& x, int64_t rows, int64_t cols, const char* what) {
  SCOPED_TRACE(what);
  const Mxfp4 got = run_mxfp4(x, rows, cols);
  const Mxfp4 want = ref_mxfp4(x, rows, cols);
  ASSERT_EQ(got.scales, want.scales);
  ASSERT_EQ(got.packed, want.packed);
  std::vector<float> deq(rows * cols, NAN);
  mf::dequantize_mxfp4(got.packed.data(), got.scales.data(), rows, cols, deq.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cols / 32; ++b) {
      const float* xb = &x[r * cols + b * 32];
      const uint8_t sc = got.scales[r * (cols / 32) + b];
      if (!all_finite(xb, 32)) {
        for (int i = 0; i < 32; ++i) EXPECT_TRUE(std::isnan(deq[r * cols + b * 32 + i]));
        continue;
      }
      const double X = std::ldexp(1.0, sc - 127);
      const double bamax = finite_amax(xb, 32);
      if (bamax > 0 && bamax >= 0x1p-125) {  // above the clamp at 2^-127
        EXPECT_GE(bamax / X, 4.0);
        EXPECT_LT(bamax / X, 8.0);
      }
      for (int i = 0; i < 32; ++i) {
        const double xe = xb[i], de = deq[r * cols + b * 32 + i];
        const double y = xe / X;
        // No slack: x / X, e2m1 * X and the subtraction (both sides within a factor 2^4 of
        // each other, same binade or clipped) are exact.
        ASSERT_LE(std::fabs(xe - de), X * mfref::half_gap(e2m1_mags(), std::fabs(y)))
            << "row " << r << " col " << b * 32 + i;
        ASSERT_LT(std::fabs(xe - de), 2 * X);
        if (std::fabs(y) <= 6) {
          ASSERT_LE(std::fabs(xe - de), X);
        }
      }
    }
}

// ---------------- FP8 ----------------

struct Fp8 {
  std::vector<uint8_t> q;
  std::vector<float> scales;
};

// Tile geometry shared by block128 (tr = 128) and group128 (tr = 1).
struct Tiling {
  int64_t tr, tc;
  int64_t nbr(int64_t rows) const { return (rows + tr - 1) / tr; }
  int64_t nbc(int64_t cols) const { return (cols + tc - 1) / tc; }
};

Fp8 run_fp8(const std::vector<float>& x, int64_t rows, int64_t cols, Tiling t) {
  Fp8 q;
  q.q.assign(rows * cols, 0xAA);
  q.scales.assign(t.nbr(rows) * t.nbc(cols), -12345.0f);
  if (t.tr == 128) mf::quantize_fp8_block128(x.data(), rows, cols, q.q.data(), q.scales.data());
  else mf::quantize_fp8_group128(x.data(), rows, cols, q.q.data(), q.scales.data());
  return q;
}

std::vector<float> deq_fp8(const Fp8& q, int64_t rows, int64_t cols, Tiling t) {
  std::vector<float> out(rows * cols, NAN);
  if (t.tr == 128) mf::dequantize_fp8_block128(q.q.data(), q.scales.data(), rows, cols, out.data());
  else mf::dequantize_fp8_group128(q.q.data(), q.scales.data(), rows, cols, out.data());
  return out;
}

template <class F>
void for_each_tile(int64_t rows, int64_t cols, Tiling t, F f) {
  for (int64_t br = 0; br < t.nbr(rows); ++br)
    for (int64_t bc = 0; bc < t.nbc(cols); ++bc)
      f(br * t.nbc(cols) + bc, br * t.tr, std::min(rows, (br + 1) * t.tr), bc * t.tc, std::min(cols, (bc + 1) * t.tc));
}

void check_fp8(const std::vector<float>& x, int64_t rows, int64_t cols, Tiling t, const char* what) {
  SCOPED_TRACE(what);
  const Fp8 got = run_fp8(x, rows, cols, t);
  const std::vector<float> deq = deq_fp8(got, rows, cols, t);
  for_each_tile(rows, cols, t, [&](int64_t k, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    float bamax = 0;
    bool finite = true;
    for (int64_t r = r0; r < r1; ++r) {
      bamax = std::max(bamax, finite_amax(&x[r * cols + c0], c1 - c0));
      finite &= all_finite(&x[r * cols + c0], c1 - c0);
    }
    const float s = got.scales[k];
    if (!finite) {  // documented: NaN scale, every code 0x7F, the tile reads back as NaN
      ASSERT_TRUE(std::isnan(s));
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) {
          EXPECT_EQ(got.q[r * cols + c], 0x7F);
          EXPECT_TRUE(std::isnan(deq[r * cols + c]));
        }
      return;
    }
    const float want_s = bamax / 448.0f > 0 ? bamax / 448.0f : 1.0f;
    ASSERT_EQ(s, want_s) << "tile " << k;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t e = r * cols + c;
        const float y = x[e] / s;
        ASSERT_EQ(got.q[e], ref_e4m3(y)) << "row " << r << " col " << c;
        const double xe = x[e], de = deq[e];
        ASSERT_EQ(de, static_cast<double>(ref_e4m3_value(got.q[e]) * s));
        const double tight = s * mfref::half_gap(e4m3_mags(), std::fabs(y)) + kU * (std::fabs(xe) + std::fabs(de));
        ASSERT_LE(std::fabs(xe - de), tight) << "row " << r << " col " << c;
        const double closed = 0x1p-4 * std::fabs(xe) + s * 0x1p-10 + 2 * kU * (std::fabs(xe) + std::fabs(de));
        ASSERT_LE(std::fabs(xe - de), closed);
        if (std::fabs(x[e]) == bamax && bamax > 0) {
          EXPECT_EQ(got.q[e] & 0x7F, 0x7E) << "block max must encode as 448";
        }
      }
  });
}

constexpr Tiling kBlock128{128, 128};
constexpr Tiling kGroup128{1, 128};

}  // namespace

// ---------------- tests ----------------

TEST(FormatsNvfp4, RandomMatchesReferenceAndBounds) {
  const int64_t shapes[][2] = {{1, 16}, {3, 48}, {17, 160}, {64, 256}};
  for (uint64_t seed : {1u, 2u, 3u})
    for (auto [rows, cols] : shapes) check_nvfp4(random_matrix(rows, cols, seed), rows, cols, "random");
}

TEST(FormatsNvfp4, TinyBlocksUseSubnormalScales) {
  // One large row and rows 2^-12 smaller: their scales land in E4M3's subnormal range or
  // at zero; the reference and the per-element bound must still hold.
  std::vector<float> x = random_matrix(4, 64, 7);
  for (int i = 0; i < 64; ++i) x[i] *= 4096.0f;
  for (int i = 192; i < 256; ++i) x[i] *= 0x1p-20f;
  check_nvfp4(x, 4, 64, "subnormal scales");
}

TEST(FormatsNvfp4, ZerosOutliersNegatives) {
  std::vector<float> zeros(2 * 32, 0.0f);
  check_nvfp4(zeros, 2, 32, "all zero");
  const Nvfp4 z = run_nvfp4(zeros, 2, 32);
  EXPECT_EQ(z.global, 1.0f);
  for (uint8_t s : z.scales) EXPECT_EQ(s, 0);
  for (uint8_t p : z.packed) EXPECT_EQ(p, 0);

  std::vector<float> x = random_matrix(2, 64, 11);
  for (int i = 16; i < 32; ++i) x[i] = 0.0f;  // one all-zero block
  x[40] = 1e4f;                               // a huge outlier in another block
  for (int i = 64; i < 80; ++i) x[i] = -std::fabs(x[i]) - 0.01f;  // an all-negative block
  check_nvfp4(x, 2, 64, "zero block, outlier, negatives");
  const Nvfp4 q = run_nvfp4(x, 2, 64);
  EXPECT_EQ(q.scales[1], 0);
  for (int i = 64; i < 80; ++i) EXPECT_GE(nibble(q.packed, i), 8) << "negative values keep the sign bit";
  std::vector<float> deq(128);
  mf::dequantize_nvfp4(q.packed.data(), q.scales.data(), q.global, 2, 64, deq.data());
  for (int i = 16; i < 32; ++i) EXPECT_EQ(deq[i], 0.0f);
  EXPECT_NEAR(deq[40], 1e4, 1e4 / 16);
}

TEST(FormatsNvfp4, NonFiniteBlocksReadBackAsNaN) {
  std::vector<float> x = random_matrix(2, 64, 5);
  x[3] = NAN;
  x[70] = INFINITY;
  x[100] = -INFINITY;
  check_nvfp4(x, 2, 64, "nan/inf");
  const Nvfp4 q = run_nvfp4(x, 2, 64);
  EXPECT_EQ(q.scales[0], 0x7F);
  EXPECT_EQ(q.scales[4], 0x7F);
  EXPECT_EQ(q.scales[6], 0x7F);
  EXPECT_EQ(q.global, finite_amax(x.data(), 128) / 2688.0f);  // finite values only
}

TEST(FormatsNvfp4, PackingOrderHandBuilt) {
  // amax 2688 gives global 1, block scale 448 and d = 448, so x = e2m1 * 448 encodes exactly.
  const float v[16] = {1, -3, 0.5, 6, 0, -0.5, 4, -6, 1.5, 2, -1, 3, 0, 0, -4, 0.5};
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = v[i] * 448.0f;
  const Nvfp4 q = run_nvfp4(x, 1, 16);
  EXPECT_EQ(q.global, 1.0f);
  EXPECT_EQ(q.scales[0], 0x7E);
  // codes: 1->2, -3->D, 0.5->1, 6->7, 0->0, -0.5->9, 4->6, -6->F, 1.5->3, 2->4, -1->A, 3->5, 0,0, -4->E, 0.5->1
  const std::vector<uint8_t> want = {0xD2, 0x71, 0x90, 0xF6, 0x43, 0x5A, 0x00, 0x1E};
  EXPECT_EQ(q.packed, want);
  std::vector<float> deq(16);
  mf::dequantize_nvfp4(q.packed.data(), q.scales.data(), q.global, 1, 16, deq.data());
  EXPECT_EQ(deq, x);
}

TEST(FormatsNvfp4, RejectsBadShapes) {
  std::vector<float> x(32);
  std::vector<uint8_t> p(16), s(2);
  float g;
  EXPECT_THROW(mf::quantize_nvfp4(x.data(), 1, 24, p.data(), s.data(), &g), moeforge::InvalidArgument);
  EXPECT_THROW(mf::quantize_nvfp4(x.data(), -1, 16, p.data(), s.data(), &g), moeforge::InvalidArgument);
  EXPECT_THROW(mf::quantize_nvfp4(nullptr, 1, 16, p.data(), s.data(), &g), moeforge::InvalidArgument);
  EXPECT_NO_THROW(mf::quantize_nvfp4(nullptr, 0, 16, nullptr, nullptr, &g));
}

TEST(FormatsMxfp4, RandomMatchesReferenceAndBounds) {
  const int64_t shapes[][2] = {{1, 32}, {5, 96}, {64, 256}};
  for (uint64_t seed : {1u, 2u, 3u})
    for (auto [rows, cols] : shapes) check_mxfp4(random_matrix(rows, cols, seed), rows, cols, "random");
}

TEST(FormatsMxfp4, ZerosOutliersNonFinite) {
  std::vector<float> x = random_matrix(3, 64, 13);
  for (int i = 0; i < 32; ++i) x[i] = 0.0f;  // all-zero block: scale 1 (code 127)
  x[40] = 3e5f;                              // outlier
  x[70] = NAN;
  x[130] = -INFINITY;
  for (int i = 160; i < 192; ++i) x[i] = -std::fabs(x[i]) - 1e-3f;
  check_mxfp4(x, 3, 64, "edges");
  const Mxfp4 q = run_mxfp4(x, 3, 64);
  EXPECT_EQ(q.scales[0], 127);
  EXPECT_EQ(q.scales[2], 0xFF);
  EXPECT_EQ(q.scales[4], 0xFF);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(q.packed[i], 0);
  for (int i = 160; i < 192; ++i) EXPECT_GE(nibble(q.packed, i), 8);
  // 3e5: floor(log2) = 18, X = 2^16, 3e5 / 2^16 = 4.58 -> 4: exactly the OCP rule.
  EXPECT_EQ(q.scales[1], 127 + 16);
  EXPECT_EQ(nibble(q.packed, 40), 6);
  // amax in (6X, 8X) clips to 6X: 7.5 * 2^0 with X = 1 (floor(log2 7.5) - 2 = 0).
  std::vector<float> clip(32, 0.0f);
  clip[0] = 7.5f;
  const Mxfp4 c = run_mxfp4(clip, 1, 32);
  EXPECT_EQ(c.scales[0], 127);
  EXPECT_EQ(nibble(c.packed, 0), 7);
}

TEST(FormatsMxfp4, PackingOrderHandBuilt) {
  // amax 6 gives X = 2^(2-2) = 1, so x = e2m1 values encode as themselves.
  const float v[32] = {1, -3, 0.5, 6, 0, -0.5, 4, -6, 1.5, 2, -1, 3, 0, 0, -4, 0.5};
  std::vector<float> x(v, v + 32);
  const Mxfp4 q = run_mxfp4(x, 1, 32);
  EXPECT_EQ(q.scales[0], 127);
  const std::vector<uint8_t> want = {0xD2, 0x71, 0x90, 0xF6, 0x43, 0x5A, 0x00, 0x1E, 0, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(q.packed, want);
  std::vector<float> deq(32);
  mf::dequantize_mxfp4(q.packed.data(), q.scales.data(), 1, 32, deq.data());
  EXPECT_EQ(deq, x);
  std::vector<uint8_t> p(8), s(1);
  EXPECT_THROW(mf::quantize_mxfp4(x.data(), 1, 16, p.data(), s.data()), moeforge::InvalidArgument);
}

TEST(FormatsFp8Block128, RandomMatchesReferenceAndBounds) {
  const int64_t shapes[][2] = {{1, 1}, {128, 128}, {129, 130}, {300, 200}, {7, 1000}};
  for (uint64_t seed : {1u, 2u, 3u})
    for (auto [rows, cols] : shapes) check_fp8(random_matrix(rows, cols, seed), rows, cols, kBlock128, "random");
}

TEST(FormatsFp8Group128, RandomMatchesReferenceAndBounds) {
  const int64_t shapes[][2] = {{1, 1}, {3, 129}, {64, 300}, {2, 1024}};
  for (uint64_t seed : {1u, 2u, 3u})
    for (auto [rows, cols] : shapes) check_fp8(random_matrix(rows, cols, seed), rows, cols, kGroup128, "random");
}

TEST(FormatsFp8, ZerosOutliersNonFinite) {
  for (Tiling t : {kBlock128, kGroup128}) {
    std::vector<float> x = random_matrix(130, 260, 21);
    for (int64_t r = 0; r < 128; ++r)
      for (int64_t c = 128; c < 256; ++c) x[r * 260 + c] = 0.0f;  // an all-zero 128x128 block (and groups)
    x[5 * 260 + 7] = 1e6f;                                        // outlier
    x[129 * 260 + 3] = NAN;                                       // in the bottom edge block
    x[129 * 260 + 259] = INFINITY;                                // in the corner block
    for (int64_t c = 0; c < 128; ++c) x[127 * 260 + c] = -std::fabs(x[127 * 260 + c]) - 1e-3f;
    check_fp8(x, 130, 260, t, t.tr == 128 ? "block128 edges" : "group128 edges");
    const Fp8 q = run_fp8(x, 130, 260, t);
    EXPECT_EQ(q.scales[1], 1.0f);  // block (0,1) / group (row 0, group 1): all zero
    for (int64_t c = 0; c < 128; ++c) EXPECT_GE(q.q[127 * 260 + c], 0x80) << "negative values keep the sign bit";
  }
  std::vector<uint8_t> qq(4);
  std::vector<float> s(1);
  EXPECT_THROW(mf::quantize_fp8_block128(nullptr, 2, 2, qq.data(), s.data()), moeforge::InvalidArgument);
  EXPECT_THROW(mf::quantize_fp8_group128(nullptr, 2, -2, qq.data(), s.data()), moeforge::InvalidArgument);
}
