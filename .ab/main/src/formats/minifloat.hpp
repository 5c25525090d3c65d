// src/formats/minifloat.hpp — the one rounding routine and the decode tables that every
// small float format (E4M3, E5M2, E2M1) shares. Private to src/formats.
//
// Why one generic routine: the three formats differ only in (exponent bits, mantissa
// bits, bias, largest finite code, what Inf/NaN become). Writing the round-to-nearest-even
// logic once, on the float's bits, keeps the encoders bit-exact and free of float
// arithmetic (no double rounding, no dependence on the FPU rounding mode).
#pragma once
#include <array>
#include <bit>
#include <cstdint>

namespace moeforge::formats::detail {

// Rounds a finite, non-negative float given by its bits `a` (sign already cleared) to
// the magnitude code of a format with kManBits mantissa bits and bias kBias, round to
// nearest, ties to even code. The result is NOT clamped: codes above the format's
// largest finite code mean "overflowed"; the caller saturates.
//
// Normal results: moving the float's exponent from bias 127 to bias kBias and dropping
// 23 - kManBits mantissa bits is exactly the format's encoding; the RNE add
// (half - 1 + lsb) lets a carry ripple into the exponent, which is correct rounding.
// Subnormal results: value = mant * 2^(e32 - 150) measured in units of the format's
// smallest subnormal 2^(1 - kBias - kManBits) is mant >> s, rounded by hand.
template <int kManBits, int kBias>
constexpr uint32_t round_to_minifloat(uint32_t a) {
  constexpr int kMinNormalE32 = 127 + 1 - kBias;  // float exponent field of the format's min normal
  constexpr int kShift = 23 - kManBits;
  const int e32 = static_cast<int>(a >> 23);
  if (e32 >= kMinNormalE32) {
    const uint32_t rebased = a - (static_cast<uint32_t>(127 - kBias) << 23);
    const uint32_t lsb = (rebased >> kShift) & 1u;
    return (rebased + ((1u << (kShift - 1)) - 1u) + lsb) >> kShift;
  }
  if (e32 == 0) return 0;  // zero or float subnormal: far below half the smallest subnormal here
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  const int s = 151 - kBias - kManBits - e32;  // >= 23 - kManBits + 2 > 0 on this path
  if (s > 24) return 0;                        // value < half the smallest subnormal
  uint32_t q = mant >> s;
  const uint32_t rem = mant & ((1u << s) - 1u);
  const uint32_t half = 1u << (s - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return q;  // q == 1 << kManBits is the smallest normal: the encoding carries over by itself
}

// 2^e as a float for e in [-126, 127], usable in constant expressions.
constexpr float pow2f(int e) { return std::bit_cast<float>(static_cast<uint32_t>(e + 127) << 23); }

// Value of a finite magnitude code (no sign bit) of a format with kManBits / kBias.
template <int kManBits, int kBias>
constexpr float minifloat_magnitude(uint32_t code) {
  const uint32_t e = code >> kManBits;
  const uint32_t m = code & ((1u << kManBits) - 1u);
  if (e == 0) return static_cast<float>(m) * pow2f(1 - kBias - kManBits);
  return std::bit_cast<float>(((e + 127u - kBias) << 23) | (m << (23 - kManBits)));
}

constexpr float kQuietNaN = std::bit_cast<float>(0x7FC00000u);
constexpr float kNegQuietNaN = std::bit_cast<float>(0xFFC00000u);
constexpr float kInf = std::bit_cast<float>(0x7F800000u);

constexpr float with_sign(float mag, bool negative) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | (negative ? 0x80000000u : 0u));
}

constexpr std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) {
    const bool neg = (c & 0x80u) != 0;
    const uint32_t mag = c & 0x7Fu;
    t[c] = mag == 0x7Fu ? (neg ? kNegQuietNaN : kQuietNaN) : with_sign(minifloat_magnitude<3, 7>(mag), neg);
  }
  return t;
}

constexpr std::array<float, 256> make_e5m2_table() {
  std::array<float, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) {
    const bool neg = (c & 0x80u) != 0;
    const uint32_t mag = c & 0x7Fu;
    if (mag == 0x7Cu) t[c] = with_sign(kInf, neg);
    else if (mag > 0x7Cu) t[c] = neg ? kNegQuietNaN : kQuietNaN;
    else t[c] = with_sign(minifloat_magnitude<2, 15>(mag), neg);
  }
  return t;
}

constexpr std::array<float, 16> make_e2m1_table() {
  std::array<float, 16> t{};
  for (uint32_t c = 0; c < 16; ++c) t[c] = with_sign(minifloat_magnitude<1, 1>(c & 7u), (c & 8u) != 0);
  return t;
}

// Decode tables: one load per element in the dequantizers (no branches on the code).
inline constexpr std::array<float, 256> kE4M3 = make_e4m3_table();
inline constexpr std::array<float, 256> kE5M2 = make_e5m2_table();
inline constexpr std::array<float, 16> kE2M1 = make_e2m1_table();

// Largest finite magnitude codes.
inline constexpr uint32_t kE4M3MaxCode = 0x7E;  // 448
inline constexpr uint32_t kE5M2MaxCode = 0x7B;  // 57344
inline constexpr uint32_t kE2M1MaxCode = 0x7;   // 6

static_assert(kE4M3[0x7E] == 448.0f && kE4M3[0x01] == 0.001953125f && kE4M3[0x08] == 0.015625f);
static_assert(kE5M2[0x7B] == 57344.0f && kE5M2[0x01] == 1.52587890625e-05f);
static_assert(kE2M1[1] == 0.5f && kE2M1[5] == 3.0f && kE2M1[7] == 6.0f && kE2M1[0xF] == -6.0f);

}  // namespace moeforge::formats::detail
