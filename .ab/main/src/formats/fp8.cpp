// FP8 scalar conversions: E4M3 (OCP "fn") and E5M2, both saturating, RNE.
#include <algorithm>
#include <bit>
#include <cstdint>

#include "formats/minifloat.hpp"
#include "moeforge/formats.hpp"

namespace moeforge::formats {

uint8_t float_to_e4m3(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7Fu;  // NaN (E4M3 has one NaN per sign)
  if (a == 0x7F800000u) return sign | static_cast<uint8_t>(detail::kE4M3MaxCode);  // Inf saturates
  // Rounding above 448 would produce 0x7F (the NaN code) or beyond: clamp to 448 instead.
  const uint32_t mag = std::min(detail::round_to_minifloat<3, 7>(a), detail::kE4M3MaxCode);
  return sign | static_cast<uint8_t>(mag);
}

float e4m3_to_float(uint8_t bits) { return detail::kE4M3[bits]; }

uint8_t float_to_e5m2(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7Fu;
  if (a == 0x7F800000u) return sign | static_cast<uint8_t>(detail::kE5M2MaxCode);  // saturating: no Inf out
  const uint32_t mag = std::min(detail::round_to_minifloat<2, 15>(a), detail::kE5M2MaxCode);
  return sign | static_cast<uint8_t>(mag);
}

float e5m2_to_float(uint8_t bits) { return detail::kE5M2[bits]; }

}  // namespace moeforge::formats
