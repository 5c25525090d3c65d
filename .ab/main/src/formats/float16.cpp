// bf16 and IEEE binary16 conversions, on the bits (no dependence on the FPU rounding mode
// or on compiler support for _Float16 / __bf16).
#include <bit>
#include <cstdint>

#include "moeforge/formats.hpp"

namespace moeforge::formats {

uint16_t float_to_bf16(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  // NaN: keep sign and the top payload bits, force the quiet bit so that truncating the
  // payload can never turn a NaN into Inf (0x7F800001 would otherwise become 0x7F80).
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // RNE on the low 16 bits; the carry rounds into the exponent, and past the largest
  // finite value it lands exactly on Inf (0x7F80), which is IEEE overflow behaviour.
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
}

float bf16_to_float(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

uint16_t float_to_f16(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));  // quiet NaN
  if (a >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7C00u);  // >= 2^16 (incl. Inf): overflow
  const int e32 = static_cast<int>(a >> 23);
  if (e32 >= 113) {  // |v| >= 2^-14: normal f16 (or rounds up to Inf just below 2^16)
    const uint32_t rebased = a - (112u << 23);  // exponent bias 127 -> 15
    const uint32_t lsb = (rebased >> 13) & 1u;
    return static_cast<uint16_t>(sign | ((rebased + 0xFFFu + lsb) >> 13));  // carry may reach 0x7C00 = Inf
  }
  // Subnormal f16: value / 2^-24 = mant * 2^(e32 - 126), i.e. mant >> (126 - e32).
  if (e32 == 0) return sign;  // float zero/subnormal (< 2^-126) is far below 2^-25
  const uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
  const int s = 126 - e32;  // >= 14
  if (s > 24) return sign;  // < 2^-25: rounds to zero
  uint32_t q = mant >> s;
  const uint32_t rem = mant & ((1u << s) - 1u);
  const uint32_t half = 1u << (s - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // q may become 0x400, the smallest normal
  return static_cast<uint16_t>(sign | q);
}

float f16_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t e = (bits >> 10) & 0x1Fu;
  const uint32_t m = bits & 0x3FFu;
  if (e == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (m << 13));  // Inf / NaN (payload kept)
  if (e != 0) return std::bit_cast<float>(sign | ((e + 112u) << 23) | (m << 13));
  // Subnormal (or zero): m * 2^-24, exact in float.
  const float mag = static_cast<float>(m) * 5.9604644775390625e-08f;
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(mag));
}

}  // namespace moeforge::formats
