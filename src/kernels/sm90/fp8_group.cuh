// One 1 x 128 group of bf16 values to e4m3 codes and an f32 scale, bit for bit as
// formats::quantize_fp8_group128 defines it: scale = group amax / 448 (1 if that is 0; NaN if
// the group holds a NaN or an Inf), code = RNE(x / scale) saturated to +-448 (0x7F for every
// value of a NaN-scaled group). What the quantizers (sm90/quantize.cuh, a warp a row) and the
// W8A8 GEMM 1 epilogue (sm90/fp8_gemm.cuh, a quad a row) share; each finds the group's amax its
// own way, from the bf16 bit patterns (amax_bits).
#pragma once
#include "common/convert.cuh"
#include "common/div_by_reciprocal.cuh"

namespace sm90q {

// Two f32 -> e4m3x2 (RNE, saturating to +-448, NaN kept): lo in bits 0-7.
__device__ __forceinline__ u32 e4m3x2(float lo, float hi) {
  u32 r;
  asm("{\n.reg .b16 t;\ncvt.rn.satfinite.e4m3x2.f32 t, %2, %1;\ncvt.u32.u16 %0, t;\n}" : "=r"(r) : "f"(lo), "f"(hi));
  return r;
}

// The largest |x| pattern of N words of two bf16 values each: |x|'s 16-bit patterns order as
// |x| does, and NaN / Inf are the patterns from 0x7F80 up, so the max of these over a group is
// its amax and says whether it holds a NaN or an Inf.
template <int N>
__device__ __forceinline__ u32 amax_bits(const u32 (&w)[N]) {
  u32 m = 0;
#pragma unroll
  for (int j = 0; j < N; ++j) m = __vmaxu2(m, w[j] & 0x7FFF7FFFu);
  return max(m & 0xFFFFu, m >> 16);
}

// A group's scale from its amax pattern, and the division of its values by it.
struct GroupQuant {
  float scale;
  bool bad;  // a NaN or an Inf in the group: every code 0x7F
  __device__ __forceinline__ explicit GroupQuant(u32 amax_bits) : bad(amax_bits >= 0x7F80u) {
    scale = __uint_as_float(amax_bits << 16) / 448.0f;
    if (!(scale > 0.0f)) scale = 1.0f;
    if (bad) scale = __int_as_float(0x7FC00000);
  }
  // x[i] / scale as the reference divides: by the reciprocal, computed once
  // (common/div_by_reciprocal.cuh), down to its guard; below it (amax < ~2^-51) divided.
  template <int N>
  __device__ __forceinline__ void divide(float (&x)[N]) const {
    if (scale >= moe_div::kMinDivisor) {
      const float inv = __frcp_rn(scale);
#pragma unroll
      for (int j = 0; j < N; ++j) x[j] = moe_div::div_rn_by(x[j], scale, inv);
    } else {
#pragma unroll
      for (int j = 0; j < N; ++j) x[j] = x[j] / scale;
    }
  }
  // The codes of two / four divided values (lowest byte: a), 0x7F each for a bad group.
  __device__ __forceinline__ u32 codes2(float a, float b) const { return bad ? 0x7F7Fu : e4m3x2(a, b); }
  __device__ __forceinline__ u32 codes4(float a, float b, float c, float d) const {
    return bad ? 0x7F7F7F7Fu : e4m3x2(a, b) | e4m3x2(c, d) << 16;
  }
};

}  // namespace sm90q
