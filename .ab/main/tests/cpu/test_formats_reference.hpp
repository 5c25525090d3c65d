// test_formats_reference.hpp — an oracle for the number formats, written from the format
// DEFINITIONS and deliberately sharing nothing with src/formats: values come from
// sign * 2^(e - bias) * (1 + m / 2^mbits) with std::ldexp, and encoding is a brute-force
// scan of that table ("nearest representable value, ties to the even code, saturate").
// It is slow (a linear scan per value) and that is fine: it only has to be obviously right.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace mfref {

enum class Special {
  kOcpE4M3,  // only S.1111.111 is NaN; no Inf (E4M3 "fn")
  kIeee,     // exponent all ones: m == 0 Inf, else NaN (E5M2)
  kNone,     // every code is a finite number (E2M1)
};

struct MiniFormat {
  int ebits, mbits, bias;
  Special special;
  int bits() const { return 1 + ebits + mbits; }
  unsigned sign_bit() const { return 1u << (ebits + mbits); }
};

inline constexpr MiniFormat kE4M3{4, 3, 7, Special::kOcpE4M3};
inline constexpr MiniFormat kE5M2{5, 2, 15, Special::kIeee};
inline constexpr MiniFormat kE2M1{2, 1, 1, Special::kNone};

// Value of a code by the definition; NaN for NaN codes, ±Inf for Inf codes.
inline double decode(const MiniFormat& f, unsigned code) {
  const bool neg = (code & f.sign_bit()) != 0;
  const unsigned e = (code >> f.mbits) & ((1u << f.ebits) - 1u);
  const unsigned m = code & ((1u << f.mbits) - 1u);
  const unsigned emax_field = (1u << f.ebits) - 1u;
  double mag;
  if (f.special == Special::kOcpE4M3 && e == emax_field && m == (1u << f.mbits) - 1u) {
    mag = std::numeric_limits<double>::quiet_NaN();
  } else if (f.special == Special::kIeee && e == emax_field) {
    mag = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    mag = std::ldexp(static_cast<double>(m), 1 - f.bias - f.mbits);  // subnormal: m * 2^(1-bias-mbits)
  } else {
    mag = std::ldexp(1.0 + static_cast<double>(m) / (1u << f.mbits), static_cast<int>(e) - f.bias);
  }
  return neg ? -mag : mag;
}

// Non-negative finite values, indexed by magnitude code 0..max_code (increasing).
inline std::vector<double> finite_magnitudes(const MiniFormat& f) {
  std::vector<double> t;
  for (unsigned c = 0; c < f.sign_bit(); ++c) {
    const double v = decode(f, c);
    if (!std::isfinite(v)) break;  // the special codes sit at the top of each format
    t.push_back(v);
  }
  return t;
}

// Brute force: nearest table value to |v|, ties to the even code, |v| >= max -> max
// (saturating, ±Inf included); the sign bit follows v's sign (so -0.0 and tiny negatives
// give "negative zero"). NaN gives nan_code (the caller states each format's rule).
inline unsigned encode(const MiniFormat& f, const std::vector<double>& mags, float v, unsigned nan_code) {
  if (std::isnan(v)) return nan_code;
  const unsigned sign = std::signbit(v) ? f.sign_bit() : 0u;
  const double a = std::fabs(static_cast<double>(v));
  const unsigned max_code = static_cast<unsigned>(mags.size() - 1);
  if (a >= mags[max_code]) return sign | max_code;
  unsigned lo = 0;
  for (unsigned c = 0; c <= max_code; ++c)
    if (mags[c] <= a) lo = c;
  if (mags[lo] == a) return sign | lo;
  const unsigned hi = lo + 1;
  // The midpoint of two neighbours has at most mbits + 2 significant bits: exact in double,
  // so this comparison decides the rounding exactly.
  const double mid = (mags[lo] + mags[hi]) / 2.0;
  if (a < mid) return sign | lo;
  if (a > mid) return sign | hi;
  return sign | ((lo % 2 == 0) ? lo : hi);
}

// Half the distance between the representable neighbours of a >= 0 (0 if a is
// representable); above the largest value, a - max (saturation error).
inline double half_gap(const std::vector<double>& mags, double a) {
  if (a >= mags.back()) return a - mags.back();
  for (size_t c = 0; c + 1 < mags.size(); ++c)
    if (mags[c] <= a && a <= mags[c + 1]) return (mags[c] == a || mags[c + 1] == a) ? 0.0 : (mags[c + 1] - mags[c]) / 2.0;
  return 0.0;
}

inline uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}
inline float float_of(uint32_t u) {
  float v;
  std::memcpy(&v, &u, 4);
  return v;
}

// Canonical NaN rules from the header, per format.
inline unsigned e4m3_nan(float v) { return std::signbit(v) ? 0xFFu : 0x7Fu; }
inline unsigned e5m2_nan(float v) { return std::signbit(v) ? 0xFFu : 0x7Fu; }
inline unsigned e2m1_nan(float) { return 0u; }

}  // namespace mfref
