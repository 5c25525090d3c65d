// e4m3 pairs -> f32 (sm_89+: cvt.rn.f16x2.e4m3x2, one instruction per pair; e4m3 -> f16 and
// f16 -> f32 are both exact, NaN stays NaN).
#pragma once
#include "sm90/ptx/types.cuh"

// Two e4m3 values (bits 0-7 and 8-15 of v) -> lo, hi.
__device__ __forceinline__ void e4m3x2_to_f32(u32 v, float& lo, float& hi) {
  asm("{\n.reg .b16 t, l, h;\n.reg .b32 f;\n"
      "cvt.u16.u32 t, %2;\ncvt.rn.f16x2.e4m3x2 f, t;\nmov.b32 {l, h}, f;\n"
      "cvt.f32.f16 %0, l;\ncvt.f32.f16 %1, h;\n}"
      : "=f"(lo), "=f"(hi)
      : "r"(v));
}
