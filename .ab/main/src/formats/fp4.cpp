// E2M1 (the FP4 element type of NVFP4 and MXFP4) and UE8M0 (the MX block scale).
#include <algorithm>
#include <bit>
#include <cstdint>

#include "formats/minifloat.hpp"
#include "moeforge/formats.hpp"

namespace moeforge::formats {

uint8_t float_to_e2m1(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0;  // FP4 has no NaN; the block quantizers never pass one (see there)
  const uint8_t sign = static_cast<uint8_t>((u >> 28) & 0x8u);
  if (a == 0x7F800000u) return sign | static_cast<uint8_t>(detail::kE2M1MaxCode);
  // Values that round to zero keep their sign (-0.0 and -0.1 both give 0x8), as IEEE does.
  const uint32_t mag = std::min(detail::round_to_minifloat<1, 1>(a), detail::kE2M1MaxCode);
  return sign | static_cast<uint8_t>(mag);
}

float e2m1_to_float(uint8_t code) { return detail::kE2M1[code & 0xFu]; }

uint8_t float_to_ue8m0_ceil(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0xFF;  // NaN -> the NaN scale
  if (!(v > 0.0f)) return 0x00;                      // v <= 0 (incl. -Inf): the smallest scale, 2^-127
  const uint32_t e = u >> 23;                        // sign is 0 here
  const uint32_t m = u & 0x7FFFFFu;
  if (e == 0) return m > 0x400000u ? 1 : 0;  // float subnormal: 2^-127 covers m <= 2^22, else 2^-126
  // 2^(e-127) * (1 + m/2^23): exactly a power of two when m == 0, otherwise the next one up.
  // Clamp at 2^127 (code 0xFE): larger v, and +Inf, have no representable power of two >= v.
  return static_cast<uint8_t>(std::min<uint32_t>(e + (m != 0 ? 1u : 0u), 0xFEu));
}

float ue8m0_to_float(uint8_t bits) {
  if (bits == 0xFF) return detail::kQuietNaN;
  if (bits == 0) return std::bit_cast<float>(0x00400000u);  // 2^-127 is a float subnormal
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 23);
}

}  // namespace moeforge::formats
