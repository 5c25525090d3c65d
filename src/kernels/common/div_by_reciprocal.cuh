// x / b, correctly rounded, from y = 1 / b correctly rounded: three multiply-adds instead of a
// division. The FP8 quantizers (sm90/quantize.cuh) divide every value of a 128-value group by
// the group's scale; a division is a reciprocal on the MUFU pipe, five FMAs, a range check and
// a call to a slow path, about 12 instructions with the branch around it (the h quantizer was
// 34 instructions a value in all, issue-bound). The reciprocal is computed once a group.
//
// Why it is exact (Markstein): with y = RN(1/b), q0 = RN(x * y) is within one ulp of x / b;
// then r = x - b q0 is exactly representable, so the FMA computes it exactly, and
// RN(q0 + r y) = RN(x / b). The argument needs no underflow along the way: b >= 2^-60 (so y
// is normal), and q0 normal. A quotient below the normal range (|x| tiny against b) may come
// out an ulp off, which no FP8 code can see: the e4m3 codes round every value below 2^-10 to
// a signed zero. The sign is copied from x so that -0 stays -0 (r y + q0 would give +0).
// tests/cpu/test_div_by_reciprocal.cpp checks the quotients and the e4m3 codes against the
// division, on random and on tie-making operands.
#pragma once
#include "common/host_device.cuh"
#if !defined(__CUDACC__)
#include <cmath>
#endif

namespace moe_div {

// Below this divisor, divide (the FP8 scale of a group whose amax is under ~2^-51).
constexpr float kMinDivisor = 0x1p-60f;

MOE_HD inline float div_rn_by(float x, float b, float y) {
#if defined(__CUDA_ARCH__)
  const float q0 = __fmul_rn(x, y);
  const float r = __fmaf_rn(-b, q0, x);
  return copysignf(__fmaf_rn(r, y, q0), x);
#else
  const float q0 = x * y;
  const float r = std::fma(-b, q0, x);
  return std::copysign(std::fma(r, y, q0), x);
#endif
}

}  // namespace moe_div
